// Soft-DTW values: the reference sweep (shapes, d, B, costs, γ, band, lengths,
// tiles; float64 and float32), brute force over every warping path, cost
// tensors, and the invariants a value must satisfy.

#include <cmath>
#include <cstring>
#include <limits>

#include "softdtw/cell.hpp"       // min3, min3_given
#include "softdtw/geometry.hpp"   // Band
#include "softdtw/pair_walk.hpp"  // walk_pair, walk_pair_diagonals
#include "test_helpers.hpp"

namespace {

using namespace swt;

// The row walks form min(diag, left) before a step's barrier and finish the
// minimum when `up` arrives. Which predecessor a NaN (unchecked inputs) comes
// through must not change with the walk, so the result must be min3's own,
// bit for bit.
TEST(Walks, MinimumFinishedAfterTheBarrierIsMin3) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double values[] = {-1.0, 1.0, 2.0, inf, -inf, nan};
  for (double diag : values)
    for (double up : values)
      for (double left : values) {
        const double low_diag_left = diag < left ? diag : left;
        const double want = softwave::impl::min3(diag, up, left);
        const double got = softwave::impl::min3_given(low_diag_left, up, left);
        EXPECT_EQ(std::memcmp(&want, &got, sizeof want), 0)
            << "diag " << diag << " up " << up << " left " << left << ": "
            << got << " instead of " << want;
      }
}

// The host's anti-diagonal lanes (soft_diagonal) give relax()'s cell: the
// same value to a few ulps, and +∞ or NaN exactly where relax gives them,
// for every mix of ordinary, far-apart (exponentials that underflow),
// infinite and NaN inputs.
TEST(Walks, DiagonalLanesAreRelax) {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double values[] = {-1.5, 0.0, 0.25, 1.0, 3.0, 40.0, 900.0, inf, nan};
  for (double gamma : {1e-3, 0.1, 1.0, 10.0}) {
    const softwave::impl::SoftMin<double> soft(gamma);
    softwave::impl::Weights<double> unused;
    std::vector<double> cost, diag, up, want;
    for (double c : values)
      for (double d : values)
        for (double u : values)
          for (double l : values) {
            cost.push_back(c);
            diag.push_back(d);
            up.push_back(u);
            up.push_back(l);  // each cell its own (up, left): see below
            want.push_back(
                softwave::impl::relax<false>(c, d, u, l, soft, unused));
          }
    // Cell q reads up[q] and up[q + 1]; one call per cell keeps the pairs
    // apart.
    for (std::size_t q = 0; q < want.size(); ++q) {
      double got = 0;
      softwave::impl::soft_diagonal(&cost[q], &diag[q], &up[2 * q], &got, 1,
                                    gamma);
      const double w = want[q];
      const bool same = std::isnan(w) ? std::isnan(got)
                        : std::isinf(w)
                            ? got == w
                            : std::abs(got - w) <= 1e-14 * (1 + std::abs(w));
      EXPECT_TRUE(same) << "gamma " << gamma << " cost " << cost[q] << " diag "
                        << diag[q] << " up " << up[2 * q] << " left "
                        << up[2 * q + 1] << ": " << got << " instead of " << w;
    }
  }
}

// A pair's costs from a table, as a cost provider gives them to the walks.
struct TableCost {
  using work_type = double;
  const std::vector<double>* table;
  std::int64_t rows, cols;
  std::int64_t n(std::int64_t) const { return rows; }
  std::int64_t m(std::int64_t) const { return cols; }
  auto pair_cells(std::int64_t) const {
    return [t = table, c = cols](std::int64_t i, std::int64_t j) {
      return (*t)[i * c + j];
    };
  }
};

// walk_pair_diagonals, the host's pair-parallel Soft-DTW walk, is
// walk_pair's value for every shape and band, including bands whose
// anti-diagonals skip cells (width 0 and unequal lengths), costs whose
// exponentials underflow, and a NaN cost, which reaches the value.
TEST(Walks, DiagonalWalkIsTheRowWalk) {
  SWT_SEEDED_RNG(rng);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int n = 1; n <= 19; n += 3)
    for (int m = 1; m <= 23; m += 2)
      for (int width = -1; width <= 3; ++width)
        for (double gamma : {1e-3, 0.5, 4.0}) {
          softwave::impl::Band band;
          band.width = width;
          std::vector<double> table(std::size_t(n) * m);
          const double scale = rng.coin() ? 1.0 : 2000.0;
          for (double& c : table) c = scale * rng.uniform(0.0, 1.0);
          const bool with_nan = rng.integer(0, 7) == 0;
          if (with_nan) table[rng.integer(0, n * m - 1)] = nan;
          const TableCost cost{&table, n, m};
          std::vector<double> row(m + 1),
              work(softwave::impl::diagonal_walk_cells(n, m, 0));
          const softwave::impl::SoftMin<double> soft(gamma);
          const double want =
              softwave::impl::walk_pair(cost, band, soft, false, 0, row.data());
          const double got = softwave::impl::walk_pair_diagonals(
              cost, band, gamma, 0, work.data());
          const bool same =
              std::isnan(want) ? std::isnan(got)
              : std::isinf(want)
                  ? got == want
                  : std::abs(got - want) <= 1e-12 * (1 + std::abs(want));
          EXPECT_TRUE(same)
              << "N=" << n << " M=" << m << " w=" << width << " gamma=" << gamma
              << " scale=" << scale << (with_nan ? " with NaN" : "") << ": "
              << got << " instead of " << want;
        }
}

// The backward's row walk tests a row's band by the interval
// [Band::first, Band::last]: it must be exactly the cells `contains` keeps,
// and never empty (every row has an in-band cell).
TEST(Walks, BandRowIntervalIsTheRowsInBandCells) {
  for (int n = 1; n <= 23; ++n)
    for (int m = 1; m <= 23; ++m)
      for (int width = -1; width <= 4; ++width) {
        softwave::impl::Band band;
        band.width = width;
        for (int i = 0; i < n; ++i) {
          std::int64_t first = -1, last = -1;
          for (int j = 0; j < m; ++j)
            if (band.contains(i, j, n, m)) {
              if (first < 0) first = j;
              EXPECT_EQ(last, first < j ? j - 1 : -1) << "gap in row " << i;
              last = j;
            }
          if (width < 0) continue;  // first/last are only used with a band
          EXPECT_EQ(band.first(i, n, m), first)
              << "N=" << n << " M=" << m << " w=" << width << " i=" << i;
          EXPECT_EQ(band.last(i, n, m), last)
              << "N=" << n << " M=" << m << " w=" << width << " i=" << i;
        }
      }
}

template <class Space>
class SoftDTWValues : public ::testing::Test {};
TYPED_TEST_SUITE(SoftDTWValues, ExecutionSpaces);

template <class T, class Space>
void sweep_values(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (const Case& k : sweep_cases(rng, false)) {
    SCOPED_TRACE(k.str());
    const auto [x, y] = case_inputs<T>(rng, k);
    check_values<T>(space, k, x, y);
  }
}

SWT_TYPED_TEST_EACH_INPUT(SoftDTWValues, SweepMatchesReference, sweep_values)

// The pair-parallel kernel (each thread owns whole pairs, only the band's
// cells) on the same cases: every cost, γ, band and length.
template <class T, class Space>
void pair_kernel_values(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (Case k : sweep_cases(rng, false)) {
    k.setup.kernel = softwave::Kernel::pairs;
    SCOPED_TRACE(k.str());
    const auto [x, y] = case_inputs<T>(rng, k);
    check_values<T>(space, k, x, y);
  }
}

SWT_TYPED_TEST_EACH_INPUT(SoftDTWValues, PairKernelMatchesReference,
                          pair_kernel_values)

// Every (N_b, M_b) ∈ [1, 4]² in one padded batch (so lengths are exercised
// too): the library's value equals −γ log Σ_paths exp(−cost/γ) (γ = 0: the
// minimum) over all warping paths inside the band, for series and for the
// cost tensor; on the cost tensor, E equals the brute-force path marginals.
TYPED_TEST(SoftDTWValues, BruteForceOverAllWarpingPaths) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const int B = 16, n = 4, d = 2;
  Config base;
  for (int b = 0; b < B; ++b) {
    base.len_x.push_back(1 + b / 4);
    base.len_y.push_back(1 + b % 4);
  }
  for (ref::Cost cost : kCosts)
    for (double gamma : kGammas)
      for (int w = -1; w <= 2; ++w) {
        Config s = base;
        s.cost = cost;
        s.gamma = gamma;
        if (w >= 0) s.band = w;
        s.tile = w == 1 ? 2 : 0;
        SCOPED_TRACE(s.str());
        const Batch x = random_batch(rng, B, n, d, -1.0, 1.0);
        const Batch y = random_batch(rng, B, n, d, -1.0, 1.0);
        Batch c(B, n, n);  // the pairs' costs as a cost tensor
        std::vector<double> brute(B);
        std::vector<double> brute_e(static_cast<std::size_t>(B) * n * n, 0.0);
        for (int b = 0; b < B; ++b) {
          const ref::Table t = ref::cost_table(x.series(b, s.len_x[b]),
                                               y.series(b, s.len_y[b]), cost);
          for (int i = 0; i < t.rows; ++i)
            for (int j = 0; j < t.cols; ++j) c(b, i, j) = t(i, j);
          const ref::BruteForce bf = ref::brute_force(t, gamma, s.band);
          brute[b] = bf.value;
          for (int i = 0; i < t.rows; ++i)
            for (int j = 0; j < t.cols; ++j)
              brute_e[(static_cast<std::size_t>(b) * n + i) * n + j] =
                  bf.e(i, j);
        }
        EXPECT_TRUE(near_values(library_values<double>(space, x, y, s), brute,
                                1e-9, 1.0, "series values"));
        const Results lc = library_cost<double>(space, c, s, true);
        EXPECT_TRUE(
            near_values(lc.values, brute, 1e-9, 1.0, "cost-tensor values"));
        if (gamma > 0.0) {
          EXPECT_TRUE(near_arrays(lc.alignment, brute_e, 1e-9, 1.0,
                                  "grad_cost vs path marginals"));
        }
      }
}

// One warping path only: the value is the plain sum of costs for every γ.
TYPED_TEST(SoftDTWValues, SingleRowOrColumnIsTheSumOfCosts) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (double gamma : kGammas)
    for (const auto& shape :
         {std::pair{1, 1}, std::pair{1, 57}, std::pair{57, 1}}) {
      Config s;
      s.gamma = gamma;
      s.band = rng.coin() ? std::optional<std::int64_t>(0) : std::nullopt;
      SCOPED_TRACE(s.str() + " N=" + std::to_string(shape.first) +
                   " M=" + std::to_string(shape.second));
      const Batch x = random_batch(rng, 3, shape.first, 4);
      const Batch y = random_batch(rng, 3, shape.second, 4);
      std::vector<double> sums(3, 0.0);
      for (int b = 0; b < 3; ++b)
        for (double e :
             ref::cost_table(x.series(b, x.n), y.series(b, y.n), s.cost).a)
          sums[b] += e;
      EXPECT_TRUE(near_values(library_values<double>(space, x, y, s), sums,
                              1e-12, 1.0, "values"));
    }
}

// sdtw(x, y) = sdtw(y, x) for the (symmetric) built-in costs, band and
// lengths included (the band of M×N is the transpose of the band of N×M).
TYPED_TEST(SoftDTWValues, SymmetricInItsArguments) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts)
    for (double gamma : {0.0, 0.01, 1.0}) {
      Config s;
      s.cost = cost;
      s.gamma = gamma;
      s.band = rng.integer(0, 2);
      const int B = 4, n = rng.integer(1, 30), m = rng.integer(1, 30), d = 3;
      s.len_x = random_lengths(rng, B, n);
      s.len_y = random_lengths(rng, B, m);
      SCOPED_TRACE(s.str() + " N=" + std::to_string(n) +
                   " M=" + std::to_string(m));
      const Batch x = random_batch(rng, B, n, d, -1.0, 1.0);
      const Batch y = random_batch(rng, B, m, d, -1.0, 1.0);
      Config swapped = s;
      std::swap(swapped.len_x, swapped.len_y);
      EXPECT_TRUE(near_values(library_values<double>(space, y, x, swapped),
                              library_values<double>(space, x, y, s), 1e-11,
                              1.0, "sdtw(y, x) vs sdtw(x, y)"));
    }
}

// A band at least max(N, M) wide is no band at all.
TYPED_TEST(SoftDTWValues, WideBandEqualsNoBand) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (double gamma : {0.0, 0.1, 1.0}) {
    const int B = 3, n = rng.integer(1, 50), m = rng.integer(1, 50);
    const Batch x = random_batch(rng, B, n, 2), y = random_batch(rng, B, m, 2);
    Config none;
    none.gamma = gamma;
    none.len_x = random_lengths(rng, B, n);
    none.len_y = random_lengths(rng, B, m);
    const std::vector<double> want = library_values<double>(space, x, y, none);
    for (std::int64_t w :
         {std::int64_t(std::max(n, m)), std::int64_t(std::max(n, m) + 7),
          std::int64_t(1) << 40}) {
      Config banded = none;
      banded.band = w;
      SCOPED_TRACE(banded.str() + " N=" + std::to_string(n) +
                   " M=" + std::to_string(m));
      EXPECT_TRUE(near_values(library_values<double>(space, x, y, banded), want,
                              1e-12, 1.0, "values"));
    }
  }
}

// Builds a padded batch from per-pair series of different lengths.
Batch pack(const std::vector<Batch>& pairs, int n, double fill) {
  Batch out(static_cast<int>(pairs.size()), n, pairs[0].d, fill);
  for (int b = 0; b < out.B; ++b)
    for (int i = 0; i < pairs[b].n; ++i)
      for (int k = 0; k < out.d; ++k) out(b, i, k) = pairs[b](0, i, k);
  return out;
}

// A pair padded inside a batch, with lengths, gives exactly what the pair
// gives on its own; garbage (or NaN) in the padding is never read.
template <class Space>
void check_padding(const Space& space, double fill) {
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts)
    for (double gamma : {0.0, 0.05, 1.0})
      for (bool banded : {false, true}) {
        Config s;
        s.cost = cost;
        s.gamma = gamma;
        if (banded) s.band = rng.integer(0, 3);
        const int B = 5, n = 40, m = 33, d = 3;
        std::vector<Batch> xs, ys;
        std::vector<double> alone;
        for (int b = 0; b < B; ++b) {
          s.len_x.push_back(rng.integer(1, n));
          s.len_y.push_back(rng.integer(1, m));
          xs.push_back(random_batch(rng, 1, s.len_x[b], d, -1.0, 1.0));
          ys.push_back(random_batch(rng, 1, s.len_y[b], d, -1.0, 1.0));
          Config single = s;
          single.len_x.clear();
          single.len_y.clear();
          alone.push_back(
              library_values<double>(space, xs[b], ys[b], single)[0]);
        }
        SCOPED_TRACE(s.str());
        const std::vector<double> padded = library_values<double>(
            space, pack(xs, n, fill), pack(ys, m, fill), s);
        EXPECT_TRUE(near_values(padded, alone, 1e-12, 1.0, "padded vs alone"));
      }
}

TYPED_TEST(SoftDTWValues, PaddedPairEqualsUnpaddedPair) {
  const TypeParam space;
  check_padding(space, 1e3);
}
TYPED_TEST(SoftDTWValues, NaNInPaddingIsNeverRead) {
  const TypeParam space;
  check_padding(space, std::numeric_limits<double>::quiet_NaN());
}

// softmin_γ ≤ min and decreases as γ grows, so dtw − γ log(#paths) ≤
// sdtw_γ ≤ dtw, and sdtw_γ rises to dtw as γ → 0.
TYPED_TEST(SoftDTWValues, SoftValuesApproachHardAsGammaShrinks) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts) {
    const int B = 3, n = rng.integer(2, 60), m = rng.integer(2, 60);
    const Batch x = random_batch(rng, B, n, 3, -1.0, 1.0),
                y = random_batch(rng, B, m, 3, -1.0, 1.0);
    Config s;
    s.cost = cost;
    s.gamma = 0.0;
    SCOPED_TRACE(s.str() + " N=" + std::to_string(n) +
                 " M=" + std::to_string(m));
    const std::vector<double> hard = library_values<double>(space, x, y, s);
    std::vector<double> previous(B, -std::numeric_limits<double>::infinity());
    for (double gamma : {10.0, 1.0, 0.1, 0.01, 1e-3, 1e-4}) {
      s.gamma = gamma;
      const std::vector<double> soft = library_values<double>(space, x, y, s);
      const double log_paths = (n + m) * std::log(3.0);
      for (int b = 0; b < B; ++b) {
        const double slack = 1e-12 * (1.0 + std::fabs(hard[b]));
        EXPECT_LE(soft[b], hard[b] + slack) << "gamma=" << gamma << " b=" << b;
        EXPECT_GE(soft[b], hard[b] - gamma * log_paths - slack)
            << "gamma=" << gamma << " b=" << b;
        EXPECT_GE(soft[b], previous[b] - slack)
            << "not monotone at gamma=" << gamma << " b=" << b;
        previous[b] = soft[b];
      }
    }
    for (int b = 0; b < B; ++b)
      EXPECT_NEAR(previous[b], hard[b], 1e-4 * (n + m) * std::log(3.0) + 1e-9)
          << "gamma=1e-4 b=" << b;
  }
}

// Tile edges are an implementation detail: every tile gives the reference.
TYPED_TEST(SoftDTWValues, EveryTileSizeGivesTheSameValues) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const int B = 3, n = 45, m = 38, d = 3;
  const Batch x = random_batch(rng, B, n, d), y = random_batch(rng, B, m, d);
  for (double gamma : {0.0, 0.01, 1.0})
    for (bool banded : {false, true}) {
      Config s;
      s.gamma = gamma;
      if (banded) s.band = 2;
      s.len_x = random_lengths(rng, B, n);
      s.len_y = random_lengths(rng, B, m);
      const std::vector<double> want = reference(x, y, s).values;
      for (int tile : {0, 1, 2, 3, 4, 7, 16, 32, 33, 64}) {
        s.tile = tile;
        SCOPED_TRACE(s.str());
        EXPECT_TRUE(near_values(library_values<double>(space, x, y, s), want,
                                1e-9, 1.0, "values"));
      }
    }
}

TYPED_TEST(SoftDTWValues, TileSize) {
  const TypeParam space;
  softwave::SoftDTWOptions o;
  EXPECT_GT(softwave::tile_size(space, o), 0) << "tile = 0 chooses a tile";
  for (int tile : {1, 4, 7, 32}) {
    o.tile = tile;
    EXPECT_EQ(softwave::tile_size(space, o), tile);
  }
}

// ------------------------------------------------------------ cost tensor

template <class Space>
class SoftDTWCostTensor : public ::testing::Test {};
TYPED_TEST_SUITE(SoftDTWCostTensor, ExecutionSpaces);

template <class T, class Space>
void sweep_cost_tensor(const Space& space, double lo) {
  SWT_SEEDED_RNG(rng);
  for (const Case& k : sweep_cases(rng, false)) {
    SCOPED_TRACE(k.str() + " (cost tensor)");
    Batch c = random_batch(rng, k.B, k.n, k.m, lo, 2.0);
    round_to<T>(c);
    const std::vector<double> got =
        library_cost<T>(space, c, k.setup, false).values;
    const double floor = value_floor<T>(k, std::max(2.0, -lo));
    EXPECT_TRUE(near_values(got, reference_cost(c, k.setup).values,
                            value_rtol<T>(), floor, "values"));
  }
}

TYPED_TEST(SoftDTWCostTensor, SweepMatchesReferenceDouble) {
  const TypeParam space;
  sweep_cost_tensor<double>(space, 0.0);
}
TYPED_TEST(SoftDTWCostTensor, SweepMatchesReferenceFloat) {
  const TypeParam space;
  sweep_cost_tensor<float>(space, 0.0);
}
TYPED_TEST(SoftDTWCostTensor, SweepMatchesReferenceBFloat16) {
  const TypeParam space;
  sweep_cost_tensor<softwave::bfloat16>(space, 0.0);
}
TYPED_TEST(SoftDTWCostTensor, SweepMatchesReferenceFloat16) {
  const TypeParam space;
  sweep_cost_tensor<softwave::float16>(space, 0.0);
}
// Any cost tensor is allowed, negative entries included.
TYPED_TEST(SoftDTWCostTensor, NegativeCostsMatchReference) {
  const TypeParam space;
  sweep_cost_tensor<double>(space, -1.0);
}

// Padding of a cost tensor (outside each pair's N_b×M_b corner) is never
// read: NaN there changes nothing, and grad_cost is exactly 0 there.
TYPED_TEST(SoftDTWCostTensor, NaNInPaddingIsNeverRead) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (double gamma : {0.0, 0.1}) {
    const int B = 4, n = 23, m = 31;
    Config s;
    s.gamma = gamma;
    s.band = rng.coin() ? std::optional<std::int64_t>(rng.integer(0, 3))
                        : std::nullopt;
    s.len_x = random_lengths(rng, B, n);
    s.len_y = random_lengths(rng, B, m);
    SCOPED_TRACE(s.str());
    Batch c = random_batch(rng, B, n, m);
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < m; ++j)
          if (i >= s.len_x[b] || j >= s.len_y[b])
            c(b, i, j) = std::numeric_limits<double>::quiet_NaN();
    const Results want = reference_cost(c, s);
    const Results got = library_cost<double>(space, c, s, true);
    EXPECT_TRUE(near_values(got.values, want.values, 1e-9, 1.0, "values"));
    EXPECT_TRUE(
        near_arrays(got.alignment, want.alignment, 1e-9, 1.0, "grad_cost"));
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < m; ++j)
          if (i >= s.len_x[b] || j >= s.len_y[b]) {
            EXPECT_EQ(
                got.alignment[(static_cast<std::size_t>(b) * n + i) * m + j],
                0.0)
                << "grad_cost in the padding, pair " << b << " (" << i << ","
                << j << ")";
          }
  }
}

// The cost-tensor entry point on the built-in cost's tensor equals the series
// entry point; options.cost is ignored by the cost-tensor entry points.
TYPED_TEST(SoftDTWCostTensor, EqualsSeriesPathOnTheSameCosts) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts) {
    const int B = 4, n = rng.integer(1, 40), m = rng.integer(1, 40), d = 5;
    Config s;
    s.cost = cost;
    s.gamma = 0.1;
    s.band = rng.integer(0, 4);
    s.len_x = random_lengths(rng, B, n);
    s.len_y = random_lengths(rng, B, m);
    SCOPED_TRACE(s.str());
    const Batch x = random_batch(rng, B, n, d, -1.0, 1.0),
                y = random_batch(rng, B, m, d, -1.0, 1.0);
    Batch c(B, n, m, 0.0);
    for (int b = 0; b < B; ++b) {
      const ref::Table t = ref::cost_table(x.series(b, s.len_x[b]),
                                           y.series(b, s.len_y[b]), cost);
      for (int i = 0; i < t.rows; ++i)
        for (int j = 0; j < t.cols; ++j) c(b, i, j) = t(i, j);
    }
    Config other_cost = s;
    other_cost.cost = cost == ref::Cost::l1 ? ref::Cost::cosine : ref::Cost::l1;
    EXPECT_TRUE(
        near_values(library_cost<double>(space, c, other_cost, false).values,
                    library_values<double>(space, x, y, s), 1e-11, 1.0,
                    "cost tensor vs series"));
  }
}

}  // namespace
