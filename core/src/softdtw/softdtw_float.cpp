// The Soft-DTW entry points for float inputs (drivers.hpp), and the tile
// and workspace sizes.
#include "drivers.hpp"

namespace softwave::impl {

SOFTWAVE_INSTANTIATE_SOFTDTW_SPACES(float)
SOFTWAVE_INSTANTIATE_SOFTDTW_SIZES_SPACES

}  // namespace softwave::impl
