// The Soft-DTW entry points for double inputs (drivers.hpp).
#include "drivers.hpp"

namespace softwave::impl {

SOFTWAVE_INSTANTIATE_SOFTDTW_SPACES(double)

}  // namespace softwave::impl
