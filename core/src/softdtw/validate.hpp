#pragma once
// The Soft-DTW family's argument checks (the shared ones are in
// common/data_checks.hpp). Each failure throws softwave::invalid_argument
// naming the argument.

#include <climits>
#include <cstdint>
#include <memory>
#include <softwave/softdtw.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/data_checks.hpp"
#include "geometry.hpp"

namespace softwave::impl {

inline void check_options(const SoftDTWOptions& options) {
  if (!(options.gamma >= 0) || !std::isfinite(options.gamma))
    throw_invalid_argument("gamma must be finite and >= 0 (got ", options.gamma,
                           ")");
  if (options.band && *options.band < 0)
    throw_invalid_argument("band must be >= 0 (got ", *options.band,
                           "); leave it unset for no band");
  if (options.tile < 0)
    throw_invalid_argument("tile must be >= 0 (got ", options.tile,
                           "); 0 chooses the tile size");
  if (options.kernel != Kernel::automatic &&
      options.kernel != Kernel::portable &&
      options.kernel != Kernel::specialised && options.kernel != Kernel::pairs)
    throw_invalid_argument(
        "kernel must be automatic, portable, specialised or pairs (got ",
        static_cast<int>(options.kernel), ")");
}

inline Band band_of(const SoftDTWOptions& options) {
  return Band{options.band ? *options.band : -1};
}

// A cost tensor (B, N, M) must be finite within each pair's lengths and band.
template <class Space, class T>
void finite_costs(DataChecks<Space>& checks, ConstSeriesView<T, Space> c,
                  const Lengths<Space>& lengths, Band band) {
  std::int64_t const n_max = c.extent(1), m_max = c.extent(2);
  auto const lx = lengths.x, ly = lengths.y;
  checks.count(
      "cost",
      " non-finite value(s) (NaN or inf) inside the pairs' lengths and band",
      c.extent(0) * n_max, "softwave::softdtw::check_finite_costs",
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const b = q / n_max, i = q % n_max;
        std::int64_t n = lx.extent(0) ? lx(b) : n_max;
        std::int64_t m = ly.extent(0) ? ly(b) : m_max;
        n = n < n_max ? n : n_max;
        m = m < m_max ? m : m_max;
        std::int64_t bad = 0;
        for (std::int64_t j = 0; i < n && j < m; ++j)
          if (band.contains(i, j, n, m) && !compat::isfinite(acc_t(c(b, i, j))))
            ++bad;
        return bad;
      });
}

}  // namespace softwave::impl
