// The Soft-DTW entry points for bfloat16 inputs (drivers.hpp).
#include "drivers.hpp"

namespace softwave::impl {

SOFTWAVE_INSTANTIATE_SOFTDTW_SPACES(bfloat16)

}  // namespace softwave::impl
