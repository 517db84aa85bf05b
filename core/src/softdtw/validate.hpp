#pragma once
// Host-side argument checks. Each failure throws softwave::invalid_argument
// naming the argument. Checks that need the data (lengths, non-finite values)
// run on the caller's execution-space instance and fence it.

#include <cstdint>
#include <softwave/softdtw.hpp>
#include <string>
#include <vector>

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
      options.kernel != Kernel::specialised)
    throw_invalid_argument(
        "kernel must be automatic, portable or specialised (got ",
        static_cast<int>(options.kernel), ")");
}

inline Band band_of(const SoftDTWOptions& options) {
  return Band{options.band ? *options.band : -1};
}

// Sequences (B, N, d): N >= 1 and d >= 1 (B = 0 is an empty batch).
template <class View>
void check_sequences(const View& v, const char* name) {
  if (v.extent(0) > 0 && v.extent(1) == 0)
    throw_invalid_argument(name, " is empty (", name,
                           ".extent(1) = 0): sequences need at least one "
                           "element");
  if (v.extent(0) > 0 && v.extent(2) == 0)
    throw_invalid_argument(name, " has no features (", name, ".extent(2) = 0)");
}

template <class View>
void check_extent(const View& v, const char* name,
                  std::vector<std::size_t> expected, const char* meaning) {
  bool same = View::rank == expected.size();
  for (std::size_t r = 0; same && r < expected.size(); ++r)
    same = v.extent(r) == expected[r];
  if (same) return;
  std::string got, want;
  for (std::size_t r = 0; r < View::rank; ++r)
    got += (r ? ", " : "") + std::to_string(v.extent(r));
  for (std::size_t r = 0; r < expected.size(); ++r)
    want += (r ? ", " : "") + std::to_string(expected[r]);
  throw_invalid_argument(name, " has shape (", got, "), expected (", want, ") ",
                         meaning);
}

// lengths: empty, or one entry per series with 1 <= length <= limit.
template <class Space, class LengthView>
void check_lengths(const Space& space, const LengthView& lengths,
                   const char* name, std::size_t count, std::int64_t limit) {
  if (lengths.extent(0) == 0) return;
  if (lengths.extent(0) != count)
    throw_invalid_argument(name, " has ", lengths.extent(0),
                           " entries, expected ", count, " (one per series)");
  Kokkos::View<int*, Kokkos::HostSpace> host(
      Kokkos::view_alloc(Kokkos::WithoutInitializing,
                         std::string("softwave::softdtw::lengths_host")),
      count);
  Kokkos::deep_copy(space, host, lengths);
  space.fence();
  for (std::size_t b = 0; b < count; ++b)
    if (host(b) < 1 || host(b) > limit)
      throw_invalid_argument(name, "[", b, "] = ", host(b),
                             " is out of range [1, ", limit, "]");
}

// Counts non-finite entries of series (B, N, d) within each series' length.
template <class Space, class T>
void check_finite_series(
    const Space& space, ConstSeriesView<T, Space> v,
    Kokkos::View<const int*, typename Space::memory_space> lengths,
    const char* name) {
  std::int64_t const n = v.extent(1), d = v.extent(2);
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      "softwave::softdtw::check_finite",
      Kokkos::RangePolicy<Space>(space, 0, v.extent(0) * n),
      KOKKOS_LAMBDA(std::int64_t q, std::int64_t & count) {
        std::int64_t const b = q / n, i = q % n;
        if (lengths.extent(0) && i >= lengths(b)) return;
        for (std::int64_t k = 0; k < d; ++k)
          if (!compat::isfinite(v(b, i, k))) ++count;
      },
      bad);
  if (bad)
    throw_invalid_argument(name, " has ", bad,
                           " non-finite value(s) (NaN or inf) inside the "
                           "series lengths");
}

// grad_output (B,) must be finite: it multiplies every gradient.
template <class Space, class T>
void check_finite_weights(
    const Space& space,
    Kokkos::View<const T*, typename Space::memory_space> grad_output) {
  if (grad_output.extent(0) == 0) return;
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      "softwave::softdtw::check_finite_grad_output",
      Kokkos::RangePolicy<Space>(space, 0, grad_output.extent(0)),
      KOKKOS_LAMBDA(std::int64_t b, std::int64_t & count) {
        if (!compat::isfinite(grad_output(b))) ++count;
      },
      bad);
  if (bad)
    throw_invalid_argument("grad_output has ", bad,
                           " non-finite value(s) (NaN or inf)");
}

// The same for a cost tensor (B, N, M), within each pair's lengths and band.
template <class Space, class T>
void check_finite_costs(const Space& space, ConstSeriesView<T, Space> c,
                        const Lengths<Space>& lengths, Band band) {
  std::int64_t const n_max = c.extent(1), m_max = c.extent(2);
  auto const lx = lengths.x, ly = lengths.y;
  std::int64_t bad = 0;
  Kokkos::parallel_reduce(
      "softwave::softdtw::check_finite_costs",
      Kokkos::RangePolicy<Space>(space, 0, c.extent(0) * n_max),
      KOKKOS_LAMBDA(std::int64_t q, std::int64_t & count) {
        std::int64_t const b = q / n_max, i = q % n_max;
        std::int64_t const n = lx.extent(0) ? lx(b) : n_max;
        std::int64_t const m = ly.extent(0) ? ly(b) : m_max;
        if (i >= n) return;
        for (std::int64_t j = 0; j < m; ++j)
          if (band.contains(i, j, n, m) && !compat::isfinite(c(b, i, j)))
            ++count;
      },
      bad);
  if (bad)
    throw_invalid_argument("cost has ", bad,
                           " non-finite value(s) (NaN or inf) inside the "
                           "pairs' lengths and band");
}

}  // namespace softwave::impl
