#pragma once
// One pair's recursion walked by one thread in one rolling row, over the
// band's cells only: the pair-parallel forward (sweeper.hpp) and the
// nearest-neighbour search (nearest.cpp) share it.

#include <softwave/kokkos_compat.hpp>

#include "cell.hpp"

namespace softwave::impl {

// A walk that runs to the end.
struct EveryRow {
  static constexpr bool kWatchesRows = false;
  KOKKOS_INLINE_FUNCTION bool operator()(std::int64_t, acc_t) const {
    return true;
  }
};

// R(n, m) of pair p (n = cost.n(p), m = cost.m(p)), walked row by row in
// r[0..m] (R(i − 1, ·), then R(i, ·)) over the band's cells only, so a pair
// costs O(n·w) with a band of half-width w. Hard DTW (γ = 0) takes
// cost + min3 directly. A RowCheck with kWatchesRows (hard DTW only) is
// asked after each row i (1-based) with the row's least value whether to
// go on; a walk it stops returns +∞.
template <class CostProvider, class RowCheck = EveryRow>
KOKKOS_INLINE_FUNCTION acc_t
walk_pair(const CostProvider& cost, const Band& band,
          const SoftMin<typename CostProvider::work_type>& soft, bool hard,
          std::int64_t p, acc_t* r, const RowCheck& go_on = {}) {
  using W = typename CostProvider::work_type;
  std::int64_t const n = cost.n(p), m = cost.m(p);
  acc_t const inf = compat::infinity<acc_t>();
  r[0] = 0;
  for (std::int64_t j = 1; j <= m; ++j) r[j] = inf;
  Weights<W> unused;
  for (std::int64_t i = 1; i <= n; ++i) {
    // Row i's in-band columns [lo, hi] (1-based). They never move left, so
    // r[lo − 1] is the last cell the next row can read on the left: it
    // becomes R(i, lo − 1) = +∞ once read as `diag`, and r[j > hi] still
    // holds +∞ from the start.
    std::int64_t const lo = band.width < 0 ? 1 : band.first(i - 1, n, m) + 1;
    std::int64_t const hi = band.width < 0 ? m : band.last(i - 1, n, m) + 1;
    acc_t diag = r[lo - 1], left = inf;
    r[lo - 1] = inf;
    if (hard) {
      // cost + min3 is relax's value for finite costs; a non-finite input
      // (unchecked) makes the pair's value unspecified anyway.
      acc_t least = inf;
      for (std::int64_t j = lo; j <= hi; ++j) {
        acc_t const up = r[j];
        acc_t const value = cost.cell(p, i - 1, j - 1) + min3(diag, up, left);
        diag = up;
        r[j] = left = value;
        if constexpr (RowCheck::kWatchesRows)
          least = value < least ? value : least;
      }
      if constexpr (RowCheck::kWatchesRows)
        if (!go_on(i, least)) return inf;
    } else {
      for (std::int64_t j = lo; j <= hi; ++j) {
        acc_t const up = r[j];
        acc_t const value = relax<false>(cost.cell(p, i - 1, j - 1), diag, up,
                                         left, soft, unused);
        diag = up;
        r[j] = left = value;
      }
    }
  }
  return r[m];
}

}  // namespace softwave::impl
