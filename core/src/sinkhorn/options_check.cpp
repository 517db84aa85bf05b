// The argument checks of SinkhornOptions (options_check.hpp).
#include "options_check.hpp"

#include <cmath>
#include <softwave/errors.hpp>

namespace softwave::impl {

void check_sinkhorn_options(const SinkhornOptions& o) {
  if (!(o.epsilon > 0) || !std::isfinite(o.epsilon))
    throw_invalid_argument("epsilon must be finite and > 0 (got ", o.epsilon,
                           ")");
  if (!(o.epsilon_scaling >= 0 && o.epsilon_scaling < 1))
    throw_invalid_argument("epsilon_scaling must be in [0, 1) (got ",
                           o.epsilon_scaling, ")");
  if (!(o.rho_a > 0))
    throw_invalid_argument("rho_a must be > 0 (infinity: balanced; got ",
                           o.rho_a, ")");
  if (!(o.rho_b > 0))
    throw_invalid_argument("rho_b must be > 0 (infinity: balanced; got ",
                           o.rho_b, ")");
  if (o.max_iterations < 1)
    throw_invalid_argument("max_iterations must be >= 1 (got ",
                           o.max_iterations, ")");
  if (o.check_every < 1)
    throw_invalid_argument("check_every must be >= 1 (got ", o.check_every,
                           ")");
  if (std::isnan(o.tolerance))
    throw_invalid_argument("tolerance must not be NaN");
  if (o.kernel == Kernel::pairs)
    throw_invalid_argument(
        "kernel = pairs is Soft-DTW's; Sinkhorn takes automatic, portable or "
        "specialised");
}

}  // namespace softwave::impl
