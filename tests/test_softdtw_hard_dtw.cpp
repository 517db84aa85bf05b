// Hard DTW (γ = 0): values against brute force, E as the 0/1 indicator of the
// optimal path, dtw_path (path, path_length, −1 padding, values) against the
// reference, and the tie-break (diagonal, then up, then left) on inputs whose
// costs are exact small integers, so ties are real ties in any precision.

#include <cmath>

#include "test_helpers.hpp"

namespace {

using namespace swt;

struct PathResult {
  std::vector<double> values;
  std::vector<double> path;  // (B, N + M − 1, 2)
  std::vector<double> length;
};

template <class T, class Space>
PathResult library_path(const Space& space, const Batch& x, const Batch& y,
                        const Config& s, bool with_values = true) {
  const auto dx = to_device<T>(space, x, "swt::x"),
             dy = to_device<T>(space, y, "swt::y");
  Dev1<softwave::value_t<T>, Space> values;
  if (with_values)
    values = output1<softwave::value_t<T>>(space, "swt::values", x.B);
  Dev3<int, Space> path("swt::path", x.B, x.n + y.n - 1, 2);
  Dev1<int, Space> length("swt::path_length", x.B);
  Kokkos::deep_copy(path, 12345);
  Kokkos::deep_copy(length, 12345);
  softwave::dtw_path(space, dx, dy, values, path, length, s.options(),
                     s.lengths(space));
  PathResult out;
  if (with_values) out.values = to_host(values);
  out.path = to_host(path);
  out.length = to_host(length);
  return out;
}

// Compares dtw_path's result for every pair with the reference path.
void check_paths(const Batch& x, const Batch& y, const Config& s,
                 const PathResult& got) {
  const int B = x.B, K = x.n + y.n - 1;
  Config hard = s;
  hard.gamma = 0.0;
  for (int b = 0; b < B; ++b) {
    SCOPED_TRACE("pair " + std::to_string(b));
    const int nb = s.nx(b, x.n), mb = s.ny(b, y.n);
    const ref::Table c =
        ref::cost_table(x.series(b, nb), y.series(b, mb), s.cost);
    const auto want = ref::hard_path(ref::forward(c, 0.0, s.band));
    ASSERT_EQ(got.length[b], static_cast<double>(want.size()));
    for (int k = 0; k < K; ++k) {
      const double i = got.path[(static_cast<std::size_t>(b) * K + k) * 2];
      const double j = got.path[(static_cast<std::size_t>(b) * K + k) * 2 + 1];
      if (k < static_cast<int>(want.size())) {
        EXPECT_EQ(i, want[k].first) << "step " << k;
        EXPECT_EQ(j, want[k].second) << "step " << k;
      } else {
        EXPECT_EQ(i, -1.0) << "padding at step " << k;
        EXPECT_EQ(j, -1.0) << "padding at step " << k;
      }
    }
  }
}

Batch integer_batch(Rng& rng, int B, int n, int d, int hi) {
  Batch out(B, n, d);
  for (double& e : out.v) e = rng.integer(0, hi);
  return out;
}

// ---------------------------------------------------------------- values

template <class Space>
class HardDTW : public ::testing::Test {};
TYPED_TEST_SUITE(HardDTW, ExecutionSpaces);

// γ = 0: value = minimum over all warping paths in the band (N, M ≤ 4).
TYPED_TEST(HardDTW, ValueIsMinimumOverAllPaths) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts)
    for (int w = -1; w <= 2; ++w) {
      const int B = 16;
      Config s;
      s.cost = cost;
      s.gamma = 0.0;
      if (w >= 0) s.band = w;
      for (int b = 0; b < B; ++b) {
        s.len_x.push_back(1 + b / 4);
        s.len_y.push_back(1 + b % 4);
      }
      SCOPED_TRACE(s.str());
      const Batch x = random_batch(rng, B, 4, 2, -1.0, 1.0),
                  y = random_batch(rng, B, 4, 2, -1.0, 1.0);
      std::vector<double> want(B);
      for (int b = 0; b < B; ++b)
        want[b] =
            ref::brute_force(ref::cost_table(x.series(b, s.len_x[b]),
                                             y.series(b, s.len_y[b]), cost),
                             0.0, s.band)
                .value;
      EXPECT_TRUE(near_values(library_values<double>(space, x, y, s), want,
                              1e-12, 1.0, "soft_dtw(gamma=0)"));
      EXPECT_TRUE(near_values(library_path<double>(space, x, y, s).values, want,
                              1e-12, 1.0, "dtw_path values"));
    }
}

// γ = 0: E is the 0/1 indicator of the optimal path, the same path dtw_path
// returns; grad_x is the path's sum of ∂δ.
TYPED_TEST(HardDTW, AlignmentIsThePathIndicator) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts) {
    const int B = 3, n = rng.integer(1, 50), m = rng.integer(1, 50), d = 3;
    Config s;
    s.cost = cost;
    s.gamma = 0.0;
    s.band = rng.coin() ? std::optional<std::int64_t>(rng.integer(0, 4))
                        : std::nullopt;
    s.len_x = random_lengths(rng, B, n);
    s.len_y = random_lengths(rng, B, m);
    SCOPED_TRACE(s.str() + " N=" + std::to_string(n) +
                 " M=" + std::to_string(m));
    const Batch x = random_batch(rng, B, n, d, -1.0, 1.0),
                y = random_batch(rng, B, m, d, -1.0, 1.0);
    const Results got = library_value_and_grad<double>(space, x, y, s);
    const PathResult path = library_path<double>(space, x, y, s);
    const int K = n + m - 1;
    for (int b = 0; b < B; ++b) {
      std::vector<double> indicator(static_cast<std::size_t>(n) * m, 0.0);
      for (int k = 0; k < static_cast<int>(path.length[b]); ++k) {
        const int i = static_cast<int>(
            path.path[(static_cast<std::size_t>(b) * K + k) * 2]);
        const int j = static_cast<int>(
            path.path[(static_cast<std::size_t>(b) * K + k) * 2 + 1]);
        ASSERT_TRUE(i >= 0 && i < n && j >= 0 && j < m)
            << "path cell out of range";
        indicator[static_cast<std::size_t>(i) * m + j] = 1.0;
      }
      const std::vector<double> e(
          got.alignment.begin() + static_cast<std::ptrdiff_t>(b) * n * m,
          got.alignment.begin() + static_cast<std::ptrdiff_t>(b + 1) * n * m);
      EXPECT_EQ(e, indicator)
          << "pair " << b << ": alignment is not the dtw_path indicator";
    }
    EXPECT_TRUE(near_arrays(got.alignment, reference(x, y, s).alignment, 0.0,
                            1.0, "alignment"));
  }
}

// --------------------------------------------------------------- dtw_path

template <class Space>
class DtwPath : public ::testing::Test {};
TYPED_TEST_SUITE(DtwPath, ExecutionSpaces);

template <class T, class Space>
void path_sweep(const Space& space) {
  SWT_SEEDED_RNG(rng);
  static const int shapes[][2] = {{1, 1},   {1, 9},   {9, 1},   {2, 3},
                                  {13, 13}, {31, 47}, {47, 31}, {90, 70}};
  int c = 0;
  for (const auto& shape : shapes)
    for (ref::Cost cost : kCosts)
      for (int variant = 0; variant < 4; ++variant, ++c) {
        const int B = variant % 2 ? 5 : 1, n = shape[0], m = shape[1],
                  d = cost == ref::Cost::cosine ? 3 : 1 + c % 4;
        Config s;
        s.cost = cost;
        s.gamma = 0.0;
        if (variant >= 2) s.band = rng.integer(0, 3);
        if (variant % 2) {
          s.len_x = random_lengths(rng, B, n);
          s.len_y = random_lengths(rng, B, m);
        }
        s.tile = std::vector<int>{0, 4, 7, 32}[c % 4];
        // Every other case takes the pair-parallel walk (with its Steps).
        if (c % 2) s.kernel = softwave::Kernel::pairs;
        SCOPED_TRACE(s.str() + " N=" + std::to_string(n) +
                     " kernel=" + (c % 2 ? "pairs" : "automatic") +
                     " M=" + std::to_string(m) + " d=" + std::to_string(d) +
                     " B=" + std::to_string(B));
        Batch x = random_batch(rng, B, n, d, -1.0, 1.0),
              y = random_batch(rng, B, m, d, -1.0, 1.0);
        round_to<T>(x);
        round_to<T>(y);
        const PathResult got = library_path<T>(space, x, y, s);
        EXPECT_TRUE(near_values(got.values, reference(x, y, s).values,
                                value_rtol<T>(), 1.0, "values"));
        // float32 costs may flip a near-tie, and with it the path: paths are
        // compared in float64 only.
        if (std::is_same_v<T, double>) check_paths(x, y, s, got);
      }
}

TYPED_TEST(DtwPath, SweepMatchesReferenceDouble) {
  const TypeParam space;
  path_sweep<double>(space);
}
TYPED_TEST(DtwPath, SweepValuesMatchReferenceFloat) {
  const TypeParam space;
  path_sweep<float>(space);
}
TYPED_TEST(DtwPath, SweepValuesMatchReferenceBFloat16) {
  const TypeParam space;
  path_sweep<softwave::bfloat16>(space);
}

// Integer-valued inputs make many exact ties; the path must follow the
// header's tie-break in float64 and float32 alike (costs are exact there).
template <class T, class Space>
void ties(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : {ref::Cost::sqeuclidean, ref::Cost::l1})
    for (int trial = 0; trial < 12; ++trial) {
      const int B = 4, n = rng.integer(1, 25), m = rng.integer(1, 25);
      Config s;
      s.cost = cost;
      s.gamma = 0.0;
      if (trial % 3 == 1) s.band = rng.integer(0, 2);
      if (trial % 2) {
        s.len_x = random_lengths(rng, B, n);
        s.len_y = random_lengths(rng, B, m);
      }
      s.tile = trial % 4 == 3 ? 4 : 0;
      SCOPED_TRACE(s.str() + " N=" + std::to_string(n) +
                   " M=" + std::to_string(m));
      const Batch x = integer_batch(rng, B, n, 1, 2),
                  y = integer_batch(rng, B, m, 1, 2);
      const PathResult got = library_path<T>(space, x, y, s);
      check_paths(x, y, s, got);
      // soft_dtw at γ = 0 must pick the same path for its alignment.
      const Results r = library_value_and_grad<T>(space, x, y, s);
      EXPECT_TRUE(near_arrays(r.alignment, reference(x, y, s).alignment, 0.0,
                              1.0, "alignment"));
    }
}

TYPED_TEST(DtwPath, TieBreakDouble) {
  const TypeParam space;
  ties<double>(space);
}
TYPED_TEST(DtwPath, TieBreakFloat) {
  const TypeParam space;
  ties<float>(space);
}
TYPED_TEST(DtwPath, TieBreakFloat16) {
  const TypeParam space;
  ties<softwave::float16>(space);
}

// Hand-checked: all costs 0, N = 3, M = 2: from (2,1) all three predecessors
// tie and the diagonal (1,0) wins; (1,0) can only come from (0,0).
TYPED_TEST(DtwPath, AllZeroCostsHandChecked) {
  const TypeParam space;
  const Batch x(1, 3, 2, 0.5), y(1, 2, 2, 0.5);
  Config s;
  s.gamma = 0.0;
  const PathResult got = library_path<double>(space, x, y, s);
  ASSERT_EQ(got.length[0], 3.0);
  const std::vector<double> want = {0, 0, 1, 0, 2, 1, -1, -1};
  EXPECT_EQ(got.path, want);
  EXPECT_EQ(got.values[0], 0.0);
  // And N = M: the straight diagonal.
  const Batch sq(1, 6, 1, 0.25);
  const PathResult diag = library_path<double>(space, sq, sq, s);
  ASSERT_EQ(diag.length[0], 6.0);
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(diag.path[2 * k], k);
    EXPECT_EQ(diag.path[2 * k + 1], k);
  }
}

// Same on a cost tensor: grad_cost at γ = 0 is the tie-broken path indicator.
TYPED_TEST(DtwPath, CostTensorTieBreak) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (int trial = 0; trial < 10; ++trial) {
    const int B = 3, n = rng.integer(1, 20), m = rng.integer(1, 20);
    Config s;
    s.gamma = 0.0;
    if (trial % 2) s.band = rng.integer(0, 2);
    SCOPED_TRACE(s.str());
    const Batch c = integer_batch(rng, B, n, m, 1);
    EXPECT_TRUE(near_arrays(library_cost<double>(space, c, s, true).alignment,
                            reference_cost(c, s).alignment, 0.0, 1.0,
                            "grad_cost"));
    EXPECT_TRUE(near_arrays(library_cost<float>(space, c, s, true).alignment,
                            reference_cost(c, s).alignment, 0.0, 1.0,
                            "grad_cost (float)"));
  }
}

// dtw_path is hard DTW whatever options.gamma says; values may be empty.
TYPED_TEST(DtwPath, IgnoresGammaAndValuesMayBeEmpty) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const int B = 3, n = 20, m = 17;
  const Batch x = random_batch(rng, B, n, 2), y = random_batch(rng, B, m, 2);
  Config hard;
  hard.gamma = 0.0;
  Config soft = hard;
  soft.gamma = 5.0;
  const PathResult want = library_path<double>(space, x, y, hard);
  const PathResult got = library_path<double>(space, x, y, soft);
  EXPECT_EQ(got.values, want.values);
  EXPECT_EQ(got.path, want.path);
  EXPECT_EQ(got.length, want.length);
  const PathResult no_values = library_path<double>(space, x, y, hard, false);
  EXPECT_EQ(no_values.path, want.path);
  EXPECT_EQ(no_values.length, want.length);
  check_paths(x, y, hard, want);
}

}  // namespace

// ------------------------------------------------ nearest-neighbour search

namespace {

using namespace swt;

template <class Space>
class NearestNeighbours : public ::testing::Test {};
TYPED_TEST_SUITE(NearestNeighbours, ExecutionSpaces);

// Random walks: series with shape, so the lower bounds cut pairs as they
// do on real data (uniform noise is nearly equidistant).
Batch random_walks(Rng& rng, int B, int n, int d) {
  Batch out(B, n, d);
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < d; ++k) {
      double level = rng.uniform(-1, 1);
      for (int i = 0; i < n; ++i) out(b, i, k) = level += rng.uniform(-1, 1);
    }
  return out;
}

struct Search {
  std::vector<double> indices, distances;
  softwave::SearchStatistics statistics;
};

template <class T, class Space>
Search search(const Space& space, const Batch& x, const Batch& y,
              const Config& s, int k) {
  const auto dx = to_device<T>(space, x, "swt::queries"),
             dy = to_device<T>(space, y, "swt::references");
  Dev2<std::int64_t, Space> indices("swt::indices", x.B, k);
  Dev2<softwave::value_t<T>, Space> distances("swt::distances", x.B, k);
  Search out;
  softwave::nearest_neighbours(space, dx, dy, indices, distances, s.options(),
                               s.lengths(space), &out.statistics);
  out.indices = to_host(indices);
  out.distances = to_host(distances);
  return out;
}

// The search against each row of pairwise() (γ = 0, the pair-parallel
// kernel) sorted by value, ties to the lower index: the same indices and
// bit-for-bit the same distances; in double also the float64 reference.
template <class T, class Space>
void check_search(const Space& space, const Batch& x, const Batch& y,
                  const Config& s, int k) {
  SCOPED_TRACE("B1=" + std::to_string(x.B) + " B2=" + std::to_string(y.B) +
               " N=" + std::to_string(x.n) + " M=" + std::to_string(y.n) +
               " d=" + std::to_string(x.d) + " k=" + std::to_string(k) + " " +
               s.str());
  const Search got = search<T>(space, x, y, s, k);
  const softwave::SearchStatistics& st = got.statistics;
  EXPECT_EQ(st.pairs, std::int64_t(x.B) * y.B);
  EXPECT_EQ(st.pruned + st.pruned_reverse + st.abandoned + st.completed,
            st.pairs);

  Config brute = s;
  brute.kernel = softwave::Kernel::pairs;
  const auto dx = to_device<T>(space, x, "swt::x"),
             dy = to_device<T>(space, y, "swt::y");
  Dev2<softwave::value_t<T>, Space> matrix("swt::matrix", x.B, y.B);
  softwave::pairwise(space, dx, dy, matrix, brute.options(),
                     softwave::PairwiseValue::soft_dtw, s.lengths(space));
  const std::vector<double> all = to_host(matrix);
  for (int q = 0; q < x.B; ++q) {
    std::vector<int> order(y.B);
    for (int c = 0; c < y.B; ++c) order[c] = c;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return all[std::size_t(q) * y.B + a] < all[std::size_t(q) * y.B + b];
    });
    for (int r = 0; r < k; ++r) {
      const std::size_t at = std::size_t(q) * k + r;
      ASSERT_EQ(got.indices[at], order[r]) << "query " << q << " rank " << r;
      ASSERT_EQ(got.distances[at], all[std::size_t(q) * y.B + order[r]])
          << "query " << q << " rank " << r;
      if (std::is_same_v<T, double>) {
        const int n = s.nx(q, x.n), m = s.ny(order[r], y.n);
        const double want = ref::forward(
            ref::cost_table(x.series(q, n), y.series(order[r], m), s.cost), 0.0,
            s.band)(n, m);
        EXPECT_NEAR(got.distances[at], want, 1e-12 * (1 + std::abs(want)));
      }
    }
  }
}

template <class T, class Space>
void search_sweep(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (int trial = 0; trial < 24; ++trial) {
    const int B1 = rng.integer(1, 9), B2 = rng.integer(1, 40);
    const int N = rng.integer(1, 40), M = rng.coin() ? N : rng.integer(1, 40);
    const int d = rng.integer(1, 3);
    Batch x =
        rng.coin() ? random_walks(rng, B1, N, d) : random_batch(rng, B1, N, d);
    Batch y =
        rng.coin() ? random_walks(rng, B2, M, d) : random_batch(rng, B2, M, d);
    round_to<T>(x);
    round_to<T>(y);
    Config s;
    s.gamma = 0;
    s.cost = rng.coin() ? ref::Cost::sqeuclidean : ref::Cost::l1;
    if (rng.coin()) s.band = rng.integer(0, 6);
    if (trial % 4 == 3) {
      s.len_x = random_lengths(rng, B1, N);
      s.len_y = random_lengths(rng, B2, M);
    }
    check_search<T>(space, x, y, s, rng.integer(1, std::min(B2, 5)));
  }
}

// Equal lengths and a band, with many references: the search walks
// references of full length together, in lanes (walk_together), and any
// other alone; both must give pairwise()'s distances bit for bit.
template <class T, class Space>
void lanes_sweep(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (int trial = 0; trial < 16; ++trial) {
    const int B1 = rng.integer(1, 6), B2 = rng.integer(9, 60);
    const int N = rng.integer(1, 48), d = rng.integer(1, 3);
    Batch x = random_walks(rng, B1, N, d), y = random_walks(rng, B2, N, d);
    if (trial % 4 == 1)  // equal references: ties within a group of lanes
      for (int c = 1; c < B2; c += 2)
        for (int i = 0; i < N; ++i)
          for (int k = 0; k < d; ++k) y(c, i, k) = y(c - 1, i, k);
    round_to<T>(x);
    round_to<T>(y);
    Config s;
    s.gamma = 0;
    s.cost = rng.coin() ? ref::Cost::sqeuclidean : ref::Cost::l1;
    s.band = rng.integer(0, 8);
    if (trial % 4 == 3) s.len_y = random_lengths(rng, B2, N);
    check_search<T>(space, x, y, s, rng.integer(1, 6));
  }
}

TYPED_TEST(NearestNeighbours, LanesMatchSortedPairwiseDouble) {
  lanes_sweep<double>(TypeParam());
}
TYPED_TEST(NearestNeighbours, LanesMatchSortedPairwiseFloat) {
  lanes_sweep<float>(TypeParam());
}

TYPED_TEST(NearestNeighbours, MatchesSortedPairwiseDouble) {
  search_sweep<double>(TypeParam());
}
TYPED_TEST(NearestNeighbours, MatchesSortedPairwiseFloat) {
  search_sweep<float>(TypeParam());
}

// Equal distances everywhere: references repeated, small integer values (exact
// costs), so every rank is decided by the tie-break to the lower index.
TYPED_TEST(NearestNeighbours, TiesGoToTheLowerIndex) {
  SWT_SEEDED_RNG(rng);
  const Batch x = integer_batch(rng, 6, 12, 2, 3);
  const Batch distinct = integer_batch(rng, 4, 12, 2, 3);
  Batch y(20, 12, 2);
  for (int c = 0; c < y.B; ++c)
    for (int i = 0; i < y.n; ++i)
      for (int k = 0; k < y.d; ++k) y(c, i, k) = distinct(c % 4, i, k);
  for (const std::optional<std::int64_t> band :
       {std::optional<std::int64_t>{}, std::optional<std::int64_t>{2}}) {
    Config s;
    s.gamma = 0;
    s.band = band;
    check_search<float>(TypeParam(), x, y, s, 7);
    check_search<double>(TypeParam(), x, y, s, 20);
  }
}

// On series with shape the cascade cuts most pairs before or during their
// walk (about 85 % for these random walks with a 10 % band).
TYPED_TEST(NearestNeighbours, BoundsCutMostPairs) {
  SWT_SEEDED_RNG(rng);
  const Batch x = random_walks(rng, 16, 64, 1),
              y = random_walks(rng, 200, 64, 1);
  Config s;
  s.gamma = 0;
  s.band = 6;
  const Search got = search<double>(TypeParam(), x, y, s, 1);
  const softwave::SearchStatistics& st = got.statistics;
  EXPECT_LT(st.completed, st.pairs / 2)
      << "pruned " << st.pruned << ", reverse " << st.pruned_reverse
      << ", abandoned " << st.abandoned;
  check_search<double>(TypeParam(), x, y, s, 3);
}

TYPED_TEST(NearestNeighbours, BadArgumentsNameTheArgument) {
  using Space = TypeParam;
  const Space space;
  SWT_SEEDED_RNG(rng);
  const auto x = to_device<double>(space, random_batch(rng, 3, 5, 1), "swt::x");
  const auto y = to_device<double>(space, random_batch(rng, 4, 6, 1), "swt::y");
  Dev2<std::int64_t, Space> indices("swt::indices", 3, 2);
  Dev2<double, Space> distances("swt::distances", 3, 2);
  softwave::SoftDTWOptions hard;
  hard.gamma = 0;
  auto call = [&](const softwave::SoftDTWOptions& o, const auto& i,
                  const auto& d) {
    return [&, o, i, d] { softwave::nearest_neighbours(space, x, y, i, d, o); };
  };
  softwave::SoftDTWOptions soft = hard;
  soft.gamma = 0.1;
  EXPECT_TRUE(throws_naming("gamma", call(soft, indices, distances)));
  softwave::SoftDTWOptions cosine = hard;
  cosine.cost = softwave::Cost::cosine;
  EXPECT_TRUE(throws_naming("cost", call(cosine, indices, distances)));
  softwave::SoftDTWOptions negative = hard;
  negative.band = -1;
  EXPECT_TRUE(throws_naming("band", call(negative, indices, distances)));
  Dev2<std::int64_t, Space> none("swt::indices", 3, 0),
      five("swt::indices", 3, 5), short_rows("swt::indices", 2, 2);
  EXPECT_TRUE(throws_naming("indices", call(hard, none, distances)));
  EXPECT_TRUE(throws_naming("indices", call(hard, five, distances)));
  EXPECT_TRUE(throws_naming("indices", call(hard, short_rows, distances)));
  Dev2<double, Space> wrong("swt::distances", 3, 3);
  EXPECT_TRUE(throws_naming("distances", call(hard, indices, wrong)));
  softwave::Lengths<Space> lengths;
  lengths.x = to_device_int(space, std::vector<int>{5, 6, 1}, "swt::lengths.x");
  EXPECT_TRUE(throws_naming("lengths.x", [&] {
    softwave::nearest_neighbours(space, x, y, indices, distances, hard,
                                 lengths);
  }));
}

}  // namespace
