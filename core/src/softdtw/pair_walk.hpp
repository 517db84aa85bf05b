#pragma once
// One pair's recursion walked by one thread in one rolling row, over the
// band's cells only: the pair-parallel forward (sweeper.hpp) and the
// nearest-neighbour search (nearest.cpp) share it.

#include <algorithm>
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
// terms that the anti-diagonal walks may form along an anti-diagonal.
template <class Cells, class = void>
struct FeatureTerms : std::false_type {};
template <class Cells>
struct FeatureTerms<Cells, std::void_t<decltype(Cells::kFeatureTerms)>>
    : std::bool_constant<Cells::kFeatureTerms> {};
// Whether they are the cosine cost's (whose gradients come from unit vectors).
template <class Cells, class = void>
struct CosineTerms : std::false_type {};
template <class Cells>
struct CosineTerms<Cells, std::void_t<decltype(Cells::kCosine)>>
    : std::bool_constant<Cells::kCosine> {};

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

// The anti-diagonals whose costs the walks form in one pass over the
// features (diagonal_feature_costs), and the zeros either side of each of
// y's laid-out features that the batch's extra cells (outside the grid,
// never used) read.
constexpr int kCostBatch = 8;
constexpr int kFeaturePad = kCostBatch;

// A pair's features laid out for the anti-diagonal walks: x's by feature
// (x[f·n + i]) and y's reversed (y[f·y_pitch + m − 1 − j], y_pitch = m +
// 2·kFeaturePad), so that the cells (i, k − i) of an anti-diagonal read
// both at consecutive addresses.
struct LaidOutFeatures {
  const acc_t* x = nullptr;
  const acc_t* y = nullptr;
  std::int64_t y_pitch = 0;
  int count = 0;
};

// Cells lay_out_features fills for `count` features of n and m points.
inline std::int64_t laid_out_cells(int count, std::int64_t n, std::int64_t m) {
  return std::int64_t(count) * (n + m + 2 * kFeaturePad);
}

// Lays out `count` features of the pair's points at `to`
// (laid_out_cells); the values pass through the work type W, as the cells'
// terms do.
template <class W, class Cells>
LaidOutFeatures lay_out_features(const Cells& cell, int count, std::int64_t n,
                                 std::int64_t m, acc_t* to) {
  if constexpr (FeatureTerms<Cells>::value) {
    acc_t* const x = to;
    std::int64_t const pitch = m + 2 * kFeaturePad;
    acc_t* const y = x + count * n + kFeaturePad;
    for (int f = 0; f < count; ++f) {
      for (std::int64_t i = 0; i < n; ++i)
        x[f * n + i] = acc_t(W(cell.x[i * cell.x_step + f]));
      for (int q = 1; q <= kFeaturePad; ++q)
        y[f * pitch - q] = y[f * pitch + m - 1 + q] = 0;
      for (std::int64_t j = 0; j < m; ++j)
        y[f * pitch + (m - 1 - j)] = acc_t(W(cell.y[j * cell.y_step + f]));
    }
    return {x, y, pitch, count};
  } else {
    return {};
  }
}

// The rows [first, last] of the band's cells on anti-diagonal k of an n × m
// pair (the cells i + j = k, 1-based), for k = 2, 3, ..., n + m + 1 in turn:
// row i's columns [lo, hi] hold the cells of anti-diagonals i + lo to
// i + hi, both increasing with i, so the ends move by at most one from k to
// k + 1. Past the grid (k = n + m + 1) the interval is empty.
class DiagonalRows {
 public:
  DiagonalRows(const Band& band, std::int64_t n, std::int64_t m)
      : band_(band), n_(n), m_(m) {}

  void advance(std::int64_t k) {
    while (first <= n_ && !reaches(first, k)) ++first;
    while (last < n_ && starts_by(last + 1, k)) ++last;
  }
  // The rows the next two anti-diagonals (and the backward's previous
  // ones) read of this one: the cells and one row either side, or across a
  // gap (first > last + 1: no band cells) the rows between. They hold +∞
  // (R) outside the cells.
  std::int64_t read_low() const {
    return first - 1 < last + 1 ? first - 1 : last + 1;
  }
  std::int64_t read_high() const {
    return first - 1 < last + 1 ? last + 1 : first - 1;
  }

  std::int64_t first = 1, last = 0;

 private:
  bool reaches(std::int64_t i, std::int64_t k) const {  // i + hi(i) >= k
    std::int64_t lo, hi;
    row_columns(band_, i, n_, m_, lo, hi);
    return i + hi >= k;
  }
  bool starts_by(std::int64_t i, std::int64_t k) const {  // i + lo(i) <= k
    std::int64_t lo, hi;
    row_columns(band_, i, n_, m_, lo, hi);
    return i + lo <= k;
  }
  Band band_;
  std::int64_t n_, m_;
};

// One anti-diagonal's storage, indexed by row: R and, where the backward
// needs it, the soft-min part (else null).
struct DiagonalSlots {
  acc_t* r;
  acc_t* part;
};

// The anti-diagonal forward of walk_pair_diagonals and walk_pair_gradients:
// R(n, m) of pair p (γ > 0) over the band's cells, anti-diagonal by
// anti-diagonal, each through soft_diagonal in SIMD lanes. slots(k, rows)
// gives anti-diagonal k's storage, asked once for each k = 0 to n + m in
// turn (k = 0 and 1, the border, as rows 0 and 1: R(0, 0) = 0, R(0, 1) =
// R(1, 0) = +∞); `costs` holds kCostBatch·(n + 2) values, the costs of
// kCostBatch anti-diagonals formed at once; features are the pair's
// laid-out features, if any.
template <class Cells, class Slots>
acc_t diagonal_forward(const Cells& cell, const Band& band, acc_t gamma,
                       std::int64_t n, std::int64_t m,
                       const LaidOutFeatures& features, acc_t* costs,
                       const Slots& slots) {
  acc_t const inf = compat::infinity<acc_t>();
  DiagonalRows rows(band, n, m);  // first 1, last 0: rows 0 and 1 kept
  DiagonalSlots before_last = slots(0, rows), last = slots(1, rows);
  before_last.r[0] = 0;
  before_last.r[1] = last.r[0] = last.r[1] = inf;
  if (last.part) before_last.part[0] = before_last.part[1] = inf;
  if (last.part) last.part[0] = last.part[1] = inf;
  for (std::int64_t k = 2; k <= n + m; ++k) {
    rows.advance(k);
    std::int64_t const first = rows.first, last_row = rows.last;
    DiagonalSlots const current = slots(k, rows);
    // Anti-diagonal k's costs, by row, at costs + batch·(n + 2): from laid
    // out features those of k to k + kCostBatch − 1 at once, over rows
    // first to last_row + kCostBatch − 1 (a superset of each one's cells).
    int const batch = int((k - 2) % kCostBatch);
    acc_t* const cost_k = costs + batch * (n + 2);
    if constexpr (FeatureTerms<Cells>::value) {
      std::int64_t const high = std::min(n, last_row + kCostBatch - 1);
      if (features.count > 0 && batch == 0 && first <= high)
        diagonal_feature_costs(
            features.x + (first - 1), n, features.y + (m - k + first),
            features.y_pitch, features.count, Cells::kL1, cost_k + first, n + 2,
            high - first + 1,
            int(std::min<std::int64_t>(kCostBatch, n + m - k + 1)));
    }
    if (first <= last_row) {
      if (features.count == 0)
        for (std::int64_t i = first; i <= last_row; ++i)
          cost_k[i] = cell(i - 1, k - i - 1);
      if (current.part)
        soft_diagonal_parts(cost_k + first, before_last.r + first - 1,
                            last.r + first - 1, current.r + first,
                            current.part + first, last_row - first + 1, gamma);
      else
        soft_diagonal(cost_k + first, before_last.r + first - 1,
                      last.r + first - 1, current.r + first,
                      last_row - first + 1, gamma);
    }
    // The rows around the cells are outside the band (or the border): +∞.
    for (std::int64_t i = rows.read_low(); i <= rows.read_high(); ++i)
      if (i < first || i > last_row) {
        current.r[i] = inf;
        if (current.part) current.part[i] = inf;
      }
    before_last = last;
    last = current;
  }
  return rows.last == n && rows.first <= n ? last.r[n] : inf;
}

// Cells a host thread's walk_pair_diagonals needs for series of up to n_max
// and m_max points: three anti-diagonals of R and kCostBatch of costs, n_max
// + 2 each, and the pair's `features` laid out feature by feature.
inline std::int64_t diagonal_walk_cells(std::int64_t n_max, std::int64_t m_max,
                                        int features) {
  return (3 + kCostBatch) * (n_max + 2) +
         laid_out_cells(features, n_max, m_max);
}

// Soft-DTW's R(n, m) of pair p (γ > 0) on a host thread, anti-diagonal by
// anti-diagonal: the cells of one are independent, so soft_diagonal runs
// them in SIMD lanes, where walk_pair's row order waits on each cell's
// exp/log before the next. Over the band's cells only, as walk_pair; the
// same value to a few ulps. `work` holds diagonal_walk_cells(n, m,
// diagonal_features(cost.pair_cells(p))) values: three anti-diagonals in
// turn, R(i, k − i) at index i.
template <class CostProvider>
acc_t walk_pair_diagonals(const CostProvider& cost, const Band& band,
                          acc_t gamma, std::int64_t p, acc_t* work) {
  std::int64_t const n = cost.n(p), m = cost.m(p);
  auto const cell = cost.pair_cells(p);
  acc_t* const turns[3] = {work, work + (n + 2), work + 2 * (n + 2)};
  acc_t* const costs = work + 3 * (n + 2);
  int const count = diagonal_features(cell);
  LaidOutFeatures const features =
      lay_out_features<typename CostProvider::work_type>(
          cell, count, n, m, costs + kCostBatch * (n + 2));
  return diagonal_forward(cell, band, gamma, n, m, features, costs,
                          [&](std::int64_t k, const DiagonalRows&) {
                            return DiagonalSlots{turns[k % 3], nullptr};
                          });
}

// Cells of a pair's stored anti-diagonals (walk_pair_gradients): each
// anti-diagonal k = 0 to n + m + 1 keeps the rows its neighbours read
// (DiagonalRows::read_low to read_high; rows 0 and 1 for the border).
inline std::int64_t stored_diagonal_cells(const Band& band, std::int64_t n,
                                          std::int64_t m) {
  DiagonalRows rows(band, n, m);
  std::int64_t cells = 2 + 2;  // k = 0 and 1
  for (std::int64_t k = 2; k <= n + m + 1; ++k) {
    rows.advance(k);
    cells += rows.read_high() - rows.read_low() + 1;
  }
  return cells;
}

// Multivariate gradients are formed from tiles of E of this edge
// (tile_products), and from points at a pitch of d padded to a multiple of
// 8 (one AVX-512 vector).
constexpr int kGradientTile = 32;
inline int gradient_row_pitch(int features) { return (features + 7) / 8 * 8; }

// The features walk_pair_gradients lays out for points of d features:
// `laid_out` by feature (the forward's per-feature costs, and the gradient
// sums of univariate series) and `points` by point (the gradients from
// tiles of E: multivariate per-feature costs, and cosine at every d).
struct GradientFeatures {
  int laid_out = 0;
  int points = 0;
};
inline GradientFeatures gradient_features(bool per_feature, bool cosine,
                                          int d) {
  if (per_feature) return {d, d > 1 ? d : 0};
  return {0, cosine ? d : 0};
}
template <class Cells>
GradientFeatures gradient_features(const Cells& cell) {
  if constexpr (FeatureTerms<Cells>::value || CosineTerms<Cells>::value)
    return gradient_features(FeatureTerms<Cells>::value,
                             CosineTerms<Cells>::value, cell.d);
  else
    return {};
}

// What a host thread's walk_pair_gradients needs for a pair of up to n_max
// × m_max points with `features`: `stored` (>= stored_diagonal_cells)
// cells twice, for R (then E) and the soft-min parts, kCostBatch cost
// anti-diagonals, the features laid out, and either their gradient sums
// laid out the same way or the points, their sums by point, one value a
// point (its alignment mass, or cosine's 1/‖v‖) and a tile of E; and three
// indices an anti-diagonal.
inline std::int64_t gradient_walk_cells(std::int64_t stored, std::int64_t n_max,
                                        std::int64_t m_max,
                                        GradientFeatures features) {
  std::int64_t const laid_out = laid_out_cells(features.laid_out, n_max, m_max);
  std::int64_t const by_point =
      (2 * gradient_row_pitch(features.points) + 1) * (n_max + m_max) +
      kGradientTile * kGradientTile;
  return 2 * stored + kCostBatch * (n_max + 2) + laid_out +
         (features.points > 0 ? by_point : laid_out);
}
inline std::int64_t gradient_walk_indices(std::int64_t n_max,
                                          std::int64_t m_max) {
  return 3 * (n_max + m_max + 2);
}

// walk_pair_gradients' points by point from its laid-out features,
// zero-padded to the pitch; `centred` takes x's mean off both (for (x −
// y)², whose expanded gradient then keeps the digits of the differences).
inline void lay_out_points(const LaidOutFeatures& features, int pitch,
                           std::int64_t n, std::int64_t m, bool centred,
                           acc_t* x_rows, acc_t* y_rows) {
  int const count = features.count;
  for (int f = 0; f < pitch; ++f) {
    const acc_t* const x = features.x + f * n;
    const acc_t* const y = features.y + f * features.y_pitch;
    acc_t centre = 0;
    if (f < count && centred) {
      for (std::int64_t i = 0; i < n; ++i) centre += x[i];
      centre /= acc_t(n);
    }
    for (std::int64_t i = 0; i < n; ++i)
      x_rows[i * pitch + f] = f < count ? x[i] - centre : 0;
    for (std::int64_t j = 0; j < m; ++j)
      y_rows[j * pitch + f] = f < count ? y[m - 1 - j] - centre : 0;
  }
}

// Adds the products of a pair's E with its points, tile by tile of
// kGradientTile² cells (tile_products): x_sums[(i − 1)·pitch + f] +=
// Σ_j E(i, j)·y_j[f] and y_sums likewise (or the signs of the differences,
// with l1). E(i, j) is e_of(i + j)[i], the band's cells of anti-diagonal k
// being rows first[k] to last[k]; `tile` holds kGradientTile² values.
template <class EOf>
void tiled_gradient_sums(const Band& band, std::int64_t n, std::int64_t m,
                         const std::int64_t* first, const std::int64_t* last,
                         const EOf& e_of, const acc_t* x_rows,
                         const acc_t* y_rows, int pitch, bool l1, acc_t* tile,
                         acc_t* x_sums, acc_t* y_sums) {
  int constexpr T = kGradientTile;
  for (std::int64_t i0 = 1; i0 <= n; i0 += T)
    for (std::int64_t j0 = 1; j0 <= m; j0 += T) {
      int const h = int(n - i0 + 1 < T ? n - i0 + 1 : T);
      int const w = int(m - j0 + 1 < T ? m - j0 + 1 : T);
      if (!band.touches(i0 - 1, i0 + h - 2, j0 - 1, j0 + w - 2, n, m)) continue;
      // The tile's E, anti-diagonal by anti-diagonal (each a run of
      // consecutive stored cells); 0 outside the band.
      for (int q = 0; q < h * T; ++q) tile[q] = 0;
      for (std::int64_t k = i0 + j0; k <= i0 + j0 + h + w - 2; ++k) {
        std::int64_t lo = k - (j0 + w - 1), hi = k - j0;
        lo = lo > i0 ? lo : i0;
        lo = lo > first[k] ? lo : first[k];
        hi = hi < i0 + h - 1 ? hi : i0 + h - 1;
        hi = hi < last[k] ? hi : last[k];
        const acc_t* const e = e_of(k);
        for (std::int64_t i = lo; i <= hi; ++i)
          tile[(i - i0) * T + (k - i - j0)] = e[i];
      }
      tile_products(tile, T, h, w, false, x_rows + (i0 - 1) * pitch,
                    y_rows + (j0 - 1) * pitch, pitch, l1,
                    x_sums + (i0 - 1) * pitch);
      tile_products(tile, T, w, h, true, y_rows + (j0 - 1) * pitch,
                    x_rows + (i0 - 1) * pitch, pitch, l1,
                    y_sums + (j0 - 1) * pitch);
    }
}

// Where walk_pair_gradients puts pair p's expected alignment and gradients:
// alignment(p, i, j) = alignment_scale · E(i, j) over the band's cells (if
// the view is not empty; the rest is the caller's zero), and weight ·
// ∂value/∂x (and y) added to the cost provider's gradients of the pair.
template <class Alignment>
struct PairBackward {
  Alignment alignment;
  acc_t alignment_scale = 1;
  acc_t weight = 1;
};

// Soft-DTW's R(n, m) of pair p (γ > 0), its expected alignment and its
// gradients on a host thread, anti-diagonal by anti-diagonal in SIMD lanes
// (the cost provider's kPairGradients). The forward keeps every
// anti-diagonal's R and soft-min parts P (16 bytes a band cell); then E
// runs back from E(n, m) = 1 anti-diagonal by anti-diagonal
// (soft_diagonal_backward, E in R's place). Univariate series take each
// anti-diagonal's gradient terms at once (diagonal_feature_gradients);
// multivariate ones gather E in tiles of kGradientTile² cells and multiply
// them with the other side's points (tile_products, the sums in registers
// across a row): for (x − y)², ∂/∂x_i = 2·(x_i·Σ_j E_ij − Σ_j E_ij·y_j) on
// points centred on x's mean (so the difference keeps its digits), for l1
// Σ_j E_ij·sign(x_i − y_j); for cosine, with û = u/‖u‖_ε and v_i = Σ_j
// E_ij·ŷ_j, ∂/∂x_i = −(v_i − (x̂_i·v_i)·x̂_i)/‖x_i‖_ε (the radial part only
// where ‖x_i‖ > ε). `work` holds gradient_walk_cells(stored, n, m,
// gradient_features(cell)) values with stored >= stored_diagonal_cells(band,
// n, m), `index` gradient_walk_indices(n, m).
template <class CostProvider, class Alignment>
acc_t walk_pair_gradients(const CostProvider& cost, const Band& band,
                          acc_t gamma, std::int64_t p, std::int64_t stored,
                          const PairBackward<Alignment>& out, acc_t* work,
                          std::int64_t* index) {
  static_assert(CostProvider::kPairGradients);
  using Cells = typename CostProvider::PairCells;
  std::int64_t const n = cost.n(p), m = cost.m(p);
  Cells const cell = cost.pair_cells(p);
  acc_t const inf = compat::infinity<acc_t>();
  acc_t* const r_store = work;
  acc_t* const part_store = r_store + stored;
  acc_t* const costs = part_store + stored;
  // Per-feature series lay out every feature (d = 1 too): the gradients
  // are formed along the anti-diagonals from them. Cosine's cells are
  // formed point by point.
  constexpr bool kCosine = CosineTerms<Cells>::value;
  GradientFeatures const layout = gradient_features(cell);
  int const count = layout.laid_out;
  bool gradients = false;
  if constexpr (FeatureTerms<Cells>::value || kCosine)
    gradients = out.weight != 0 &&
                (cost.grad_x.extent(0) > 0 || cost.grad_y.extent(0) > 0);
  LaidOutFeatures const features =
      lay_out_features<typename CostProvider::work_type>(
          cell, count, n, m, costs + kCostBatch * (n + 2));
  acc_t* const after_features =
      costs + kCostBatch * (n + 2) + laid_out_cells(count, n, m);
  // Univariate: the gradient sums laid out as the features.
  acc_t* const x_gradient = after_features;
  acc_t* const y_gradient = x_gradient + count * n + kFeaturePad;
  // Multivariate and cosine: the points, their sums by point and E's
  // masses (cosine: the points' 1/‖v‖_ε).
  bool const tiled = layout.points > 0;
  int const pitch = gradient_row_pitch(layout.points);
  acc_t* const x_rows = after_features;
  acc_t* const y_rows = x_rows + pitch * n;
  acc_t* const x_sums = y_rows + pitch * m;
  acc_t* const y_sums = x_sums + pitch * n;
  acc_t* const x_mass = y_sums + pitch * m;
  acc_t* const y_mass = x_mass + n;
  acc_t* const tile = y_mass + m;
  // Anti-diagonal k's cells are rows first[k] to last[k]; its stored rows,
  // read_low to read_high, start at offset[k].
  std::int64_t* const offset = index;
  std::int64_t* const first = offset + (n + m + 2);
  std::int64_t* const last = first + (n + m + 2);
  std::int64_t next = 0;
  auto const low = [&](std::int64_t k) {
    return first[k] - 1 < last[k] + 1 ? first[k] - 1 : last[k] + 1;
  };
  auto const high = [&](std::int64_t k) {
    return first[k] - 1 < last[k] + 1 ? last[k] + 1 : first[k] - 1;
  };
  auto const r_of = [&](std::int64_t k) {
    return r_store + offset[k] - low(k);
  };
  auto const part_of = [&](std::int64_t k) {
    return part_store + offset[k] - low(k);
  };
  auto const slots = [&](std::int64_t k, const DiagonalRows& rows) {
    first[k] = rows.first;
    last[k] = rows.last;
    offset[k] = next;
    next += high(k) - low(k) + 1;
    return DiagonalSlots{r_of(k), part_of(k)};
  };
  acc_t const value =
      diagonal_forward(cell, band, gamma, n, m, features, costs, slots);
  bool const alignment = out.alignment.extent(0) > 0;
  if (!(value < inf) || !(gradients || alignment)) return value;

  // Past the grid, anti-diagonal n + m + 1 has no cells, only the rows
  // n and n + 1 that n + m − 1 reads: E = 0.
  DiagonalRows past(band, n, m);
  past.first = n + 1;
  past.last = n;
  acc_t* const past_e = slots(n + m + 1, past).r;
  past_e[n] = past_e[n + 1] = 0;
  if (tiled)
    for (std::int64_t q = 0; q < (pitch + 1) * (n + m); ++q) x_sums[q] = 0;
  else
    for (std::int64_t q = 0; q < laid_out_cells(count, n, m); ++q)
      x_gradient[q] = 0;
  for (std::int64_t k = n + m; k >= 2; --k) {
    acc_t* const e = r_of(k);
    std::int64_t const i0 = first[k], i1 = last[k];
    if (k == n + m)
      e[n] = 1;  // the seed (R(n, m) is finite)
    else if (i0 <= i1)
      soft_diagonal_backward(e + i0, r_of(k + 1) + i0, part_of(k + 1) + i0,
                             r_of(k + 2) + i0, part_of(k + 2) + i0, i1 - i0 + 1,
                             gamma);
    for (std::int64_t i = low(k); i <= high(k); ++i)
      if (i < i0 || i > i1) e[i] = 0;
    if (i0 > i1) continue;
    if (tiled) {
      if constexpr (!kCosine)
        for (std::int64_t i = i0; i <= i1; ++i) {
          x_mass[i - 1] += e[i];
          y_mass[k - i - 1] += e[i];
        }
    } else if constexpr (FeatureTerms<Cells>::value) {
      if (gradients)
        diagonal_feature_gradients(
            features.x + (i0 - 1), n, features.y + (m - k + i0),
            features.y_pitch, count, Cells::kL1, e + i0, x_gradient + (i0 - 1),
            y_gradient + (m - k + i0), i1 - i0 + 1);
    }
    if (alignment)
      for (std::int64_t i = i0; i <= i1; ++i)
        out.alignment(p, i - 1, k - i - 1) =
            typename Alignment::value_type(out.alignment_scale * e[i]);
  }
  if constexpr (FeatureTerms<Cells>::value) {
    if (!gradients) return value;
    if (!tiled) {
      cost.add_pair_gradients(
          p, out.weight,
          [&](std::int64_t i, int f) { return x_gradient[f * n + i]; },
          [&](std::int64_t j, int f) {
            return y_gradient[f * features.y_pitch + (m - 1 - j)];
          });
      return value;
    }
    lay_out_points(features, pitch, n, m, /*centred=*/!Cells::kL1, x_rows,
                   y_rows);
    tiled_gradient_sums(band, n, m, first, last, r_of, x_rows, y_rows, pitch,
                        Cells::kL1, tile, x_sums, y_sums);
    auto const sum_of = [&](const acc_t* rows, const acc_t* sums,
                            const acc_t* mass, std::int64_t v, int f) {
      std::int64_t const at = v * pitch + f;
      return Cells::kL1 ? sums[at] : rows[at] * mass[v] - sums[at];
    };
    cost.add_pair_gradients(
        p, out.weight,
        [&](std::int64_t i, int f) {
          return sum_of(x_rows, x_sums, x_mass, i, f);
        },
        [&](std::int64_t j, int f) {
          return sum_of(y_rows, y_sums, y_mass, j, f);
        });
  } else if constexpr (kCosine) {
    if (!gradients) return value;
    cell.unit_points(n, m, pitch, x_rows, y_rows, x_mass, y_mass);
    tiled_gradient_sums(band, n, m, first, last, r_of, x_rows, y_rows, pitch,
                        /*l1=*/false, tile, x_sums, y_sums);
    Cells::unit_gradients(n, pitch, cell.d, x_rows, x_mass, x_sums);
    Cells::unit_gradients(m, pitch, cell.d, y_rows, y_mass, y_sums);
    cost.add_pair_gradients(
        p, out.weight,
        [&](std::int64_t i, int f) { return x_sums[i * pitch + f]; },
        [&](std::int64_t j, int f) { return y_sums[j * pitch + f]; });
  }
  return value;
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
