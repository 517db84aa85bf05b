// The Sinkhorn entry points for double values (drivers.hpp).
#include "drivers.hpp"

namespace softwave::impl {

SOFTWAVE_INSTANTIATE_SINKHORN_SPACES(double)

}  // namespace softwave::impl
