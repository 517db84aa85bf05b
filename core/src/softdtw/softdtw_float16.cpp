// The Soft-DTW entry points for float16 inputs (drivers.hpp).
#include "drivers.hpp"

namespace softwave::impl {

SOFTWAVE_INSTANTIATE_SOFTDTW_SPACES(float16)

}  // namespace softwave::impl
