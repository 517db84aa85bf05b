// The Sinkhorn entry points for float values (drivers.hpp).
#include "drivers.hpp"

namespace softwave::impl {

SOFTWAVE_INSTANTIATE_SINKHORN_SPACES(float)

}  // namespace softwave::impl
