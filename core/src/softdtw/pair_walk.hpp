#pragma once
// One pair's recursion walked by one thread in one rolling row, over the
// band's cells only: the pair-parallel forward (sweeper.hpp) and the
// nearest-neighbour search (nearest.cpp) share it.

#include <softwave/kokkos_compat.hpp>
#include <type_traits>

#include "cell.hpp"
#include "host_diagonal.hpp"

namespace softwave::impl {

// Row i's in-band columns [lo, hi] (1-based, i 1-based).
KOKKOS_INLINE_FUNCTION void row_columns(const Band& band, std::int64_t i,
                                        std::int64_t n, std::int64_t m,
                                        std::int64_t& lo, std::int64_t& hi) {
  lo = band.width < 0 ? 1 : band.first(i - 1, n, m) + 1;
  hi = band.width < 0 ? m : band.last(i - 1, n, m) + 1;
}

// Where a hard-DTW cell's value came from: its least predecessor, ties to
// the diagonal, then up (i − 1, j), then left (i, j − 1), as everywhere.
enum Step : unsigned char { kDiagonal, kUp, kLeft };

// R(n, m) of pair p (n = cost.n(p), m = cost.m(p)), walked row by row in
// r[0..m] (R(i − 1, ·), then R(i, ·)) over the band's cells only, so a pair
// costs O(n·w) with a band of half-width w. Hard DTW (γ = 0) takes
// cost + min3 directly; with kSteps it also writes each in-band cell's Step
// to steps[i·m + j] (0-based cells; hard DTW only), from which
// trace_path() follows the optimal path back.
template <bool kSteps = false, class CostProvider>
KOKKOS_INLINE_FUNCTION acc_t
walk_pair(const CostProvider& cost, const Band& band,
          const SoftMin<typename CostProvider::work_type>& soft, bool hard,
          std::int64_t p, acc_t* r, unsigned char* steps = nullptr) {
  using W = typename CostProvider::work_type;
  std::int64_t const n = cost.n(p), m = cost.m(p);
  auto const cell = cost.pair_cells(p);
  acc_t const inf = compat::infinity<acc_t>();
  r[0] = 0;
  for (std::int64_t j = 1; j <= m; ++j) r[j] = inf;
  Weights<W> unused;
  for (std::int64_t i = 1; i <= n; ++i) {
    // The columns never move left, so r[lo − 1] is the last cell the next
    // row can read on the left: it becomes R(i, lo − 1) = +∞ once read as
    // `diag`, and r[j > hi] still holds +∞ from the start.
    std::int64_t lo, hi;
    row_columns(band, i, n, m, lo, hi);
    acc_t diag = r[lo - 1], left = inf;
    r[lo - 1] = inf;
    if (hard) {
      // cost + min3 is relax's value for finite costs; a non-finite input
      // (unchecked) makes the pair's value unspecified anyway.
      for (std::int64_t j = lo; j <= hi; ++j) {
        acc_t const up = r[j];
        acc_t const value = cell(i - 1, j - 1) + min3(diag, up, left);
        if constexpr (kSteps)
          steps[(i - 1) * m + (j - 1)] = diag <= up && diag <= left
                                             ? kDiagonal
                                             : (up <= left ? kUp : kLeft);
        diag = up;
        r[j] = left = value;
      }
    } else {
      for (std::int64_t j = lo; j <= hi; ++j) {
        acc_t const up = r[j];
        acc_t const value =
            relax<false>(cell(i - 1, j - 1), diag, up, left, soft, unused);
        diag = up;
        r[j] = left = value;
      }
    }
  }
  return r[m];
}

// Whether a pair's cells (CostProvider::pair_cells) are sums of per-feature
// terms that walk_pair_diagonals may form along an anti-diagonal.
template <class Cells, class = void>
struct FeatureTerms : std::false_type {};
template <class Cells>
struct FeatureTerms<Cells, std::void_t<decltype(Cells::kFeatureTerms)>>
    : std::bool_constant<Cells::kFeatureTerms> {};

// The features walk_pair_diagonals lays out for a pair's cells: d for
// multivariate series under a per-feature cost, else none.
template <class Cells>
int diagonal_features(const Cells& cell) {
  if constexpr (FeatureTerms<Cells>::value) {
    return cell.d > 1 ? cell.d : 0;
  } else {
    return 0;
  }
}

// Cells a host thread's walk_pair_diagonals needs for series of up to n_max
// and m_max points: three anti-diagonals of R and one of costs, n_max + 2
// each, and the pair's `features` laid out feature by feature.
inline std::int64_t diagonal_walk_cells(std::int64_t n_max, std::int64_t m_max,
                                        int features) {
  return 4 * (n_max + 2) + std::int64_t(features) * (n_max + m_max);
}

// Soft-DTW's R(n, m) of pair p (γ > 0) on a host thread, anti-diagonal by
// anti-diagonal: the cells of one are independent, so soft_diagonal runs
// them in SIMD lanes, where walk_pair's row order waits on each cell's
// exp/log before the next. Over the band's cells only, as walk_pair; the
// same value to a few ulps. `work` holds diagonal_walk_cells(n, m,
// diagonal_features(cost.pair_cells(p))) values.
// Anti-diagonal k holds the cells i + j = k (1-based), R(i, k − i) at index
// i; the columns' band limits make the rows on it an interval whose ends
// move by at most one from k to k + 1.
template <class CostProvider>
acc_t walk_pair_diagonals(const CostProvider& cost, const Band& band,
                          acc_t gamma, std::int64_t p, acc_t* work) {
  std::int64_t const n = cost.n(p), m = cost.m(p);
  auto const cell = cost.pair_cells(p);
  acc_t const inf = compat::infinity<acc_t>();
  acc_t* before_last = work;            // anti-diagonal k − 2
  acc_t* last = before_last + (n + 2);  // k − 1
  acc_t* current = last + (n + 2);      // k
  acc_t* costs = current + (n + 2);
  // Multivariate series: x's features by feature (x_feature[f·n + i]) and
  // y's reversed (y_feature[f·m + m − 1 − j]), so that the cells (i, k − i)
  // of an anti-diagonal read both at consecutive addresses.
  int const features = diagonal_features(cell);
  acc_t* const x_feature = costs + (n + 2);
  acc_t* const y_feature = x_feature + features * n;
  if constexpr (FeatureTerms<decltype(cell)>::value) {
    using W = typename CostProvider::work_type;
    for (int f = 0; f < features; ++f) {
      for (std::int64_t i = 0; i < n; ++i)
        x_feature[f * n + i] = acc_t(W(cell.x[i * cell.x_step + f]));
      for (std::int64_t j = 0; j < m; ++j)
        y_feature[f * m + (m - 1 - j)] = acc_t(W(cell.y[j * cell.y_step + f]));
    }
  }
  // k = 0 holds R(0, 0) = 0, k = 1 R(0, 1) = R(1, 0) = +∞.
  before_last[0] = 0;
  before_last[1] = last[0] = last[1] = inf;
  // Row i's columns [lo, hi] hold the cells of anti-diagonals i + lo to
  // i + hi, both increasing with i: the rows on k are [first, last_row].
  auto reaches = [&](std::int64_t i, std::int64_t k) {  // i + hi(i) >= k
    std::int64_t lo, hi;
    row_columns(band, i, n, m, lo, hi);
    return i + hi >= k;
  };
  auto starts_by = [&](std::int64_t i, std::int64_t k) {  // i + lo(i) <= k
    std::int64_t lo, hi;
    row_columns(band, i, n, m, lo, hi);
    return i + lo <= k;
  };
  std::int64_t first = 1, last_row = 0;
  for (std::int64_t k = 2; k <= n + m; ++k) {
    while (first <= n && !reaches(first, k)) ++first;
    while (last_row < n && starts_by(last_row + 1, k)) ++last_row;
    if (features > 0 && first <= last_row) {
      if constexpr (FeatureTerms<decltype(cell)>::value)
        diagonal_feature_costs(
            x_feature + (first - 1), n, y_feature + (m - k + first), m,
            features, decltype(cell)::kL1, costs + first, last_row - first + 1);
    } else {
      for (std::int64_t i = first; i <= last_row; ++i)
        costs[i] = cell(i - 1, k - i - 1);
    }
    if (first <= last_row)
      soft_diagonal(costs + first, before_last + first - 1, last + first - 1,
                    current + first, last_row - first + 1, gamma);
    // The next two anti-diagonals read this one's rows first − 1 to
    // last_row + 1 (the ends move by one at most): the cells around the
    // computed ones are outside the band (or the border), +∞.
    // (An anti-diagonal without band cells, first > last_row, gets +∞
    // across the gap.)
    current[first - 1] = inf;
    std::int64_t const upto =
        last_row + 1 > first - 1 ? last_row + 1 : first - 1;
    for (std::int64_t i = last_row + 1; i <= upto && i <= n; ++i)
      current[i] = inf;
    acc_t* const recycled = before_last;
    before_last = last;
    last = current;
    current = recycled;
  }
  return last_row == n && first <= n ? last[n] : inf;
}

// The optimal path of an n × m pair from the Steps walk_pair<true> wrote:
// followed back from (n − 1, m − 1) to (0, 0), each row's first and last
// column on it go to first[i] and last[i] (kept where they are already
// further out). At most n + m − 1 steps, whatever the Steps hold.
template <class Columns>
KOKKOS_INLINE_FUNCTION void trace_path(const unsigned char* steps,
                                       std::int64_t n, std::int64_t m,
                                       const Columns& first,
                                       const Columns& last) {
  std::int64_t i = n - 1, j = m - 1;
  for (std::int64_t k = 0; k < n + m - 1; ++k) {
    if (j < first(i)) first(i) = int(j);
    if (j > last(i)) last(i) = int(j);
    if (i == 0 && j == 0) return;
    unsigned char const step = i == 0 ? kLeft : j == 0 ? kUp : steps[i * m + j];
    i -= step != kLeft;
    j -= step != kUp;
  }
}

// Hard DTW's R(n, m) of pair p as walk_pair gives it, bit for bit, where it
// stays below the limits, else +∞ (pruned DTW with early abandoning).
// limits.row(i) is the limit of row i's cells (1-based): a cell at or above
// it must be one no path whose distance counts passes. The walk drops such
// cells (they read as +∞ to their successors), starts each row at the first
// column a live cell of the row above reaches, stops it at the first dead
// cell past them, and gives up on a row without live cells. The limits must
// satisfy row(i − 1) >= row(i) − (row i's least in-band cost); then a live
// cell's least predecessor is live, so its value is walk_pair's. The cells
// the walk skips hold +∞ in r.
template <class CostProvider, class Limits>
KOKKOS_INLINE_FUNCTION acc_t walk_pair_below(const CostProvider& cost,
                                             const Band& band, std::int64_t p,
                                             acc_t* r, const Limits& limits) {
  std::int64_t const n = cost.n(p), m = cost.m(p);
  auto const cell = cost.pair_cells(p);
  acc_t const inf = compat::infinity<acc_t>();
  r[0] = 0;
  for (std::int64_t j = 1; j <= m; ++j) r[j] = inf;
  // Row i − 1's live cells lie in columns [live_first, live_last]; the cells
  // it computed, [done_first, done_last], are the only finite ones in r.
  std::int64_t live_first = 0, live_last = 0, done_first = 0, done_last = 0;
  for (std::int64_t i = 1; i <= n; ++i) {
    std::int64_t lo, hi;
    row_columns(band, i, n, m, lo, hi);
    acc_t const limit = limits.row(i);
    std::int64_t const first = lo > live_first ? lo : live_first;
    std::int64_t const reached = hi < live_last + 1 ? hi : live_last + 1;
    if (first > hi) return inf;
    acc_t diag = r[first - 1], left = inf;
    std::int64_t j = first;
    // Up to the column after the row above's last live cell, then for as
    // long as `left` is live (only `left` can be, past them).
    for (; j <= reached; ++j) {
      acc_t const up = r[j];
      acc_t const value = cell(i - 1, j - 1) + min3(diag, up, left);
      diag = up;
      r[j] = left = value;
    }
    for (; j <= hi && left < limit; ++j)
      r[j] = left = cell(i - 1, j - 1) + left;
    // Row i − 1's values outside [first, j − 1] would read as row i's.
    for (std::int64_t q = done_first; q < first; ++q) r[q] = inf;
    for (std::int64_t q = j; q <= done_last; ++q) r[q] = inf;
    done_first = first;
    done_last = j - 1;
    // The live cells' span: dead cells at its ends are few, and the next
    // row skips them.
    for (live_first = first; live_first < j && !(r[live_first] < limit);)
      ++live_first;
    if (live_first == j) return inf;
    for (live_last = j - 1; !(r[live_last] < limit);) --live_last;
  }
  return r[m];
}

}  // namespace softwave::impl
