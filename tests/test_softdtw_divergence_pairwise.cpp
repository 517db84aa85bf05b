// Soft-DTW divergence (values and gradients) and the all-pairs matrix (both
// PairwiseValue modes) against the float64 reference, finite differences and
// invariants.

#include <cmath>
#include <limits>

#include "test_helpers.hpp"

namespace {

using namespace swt;

template <class T, class Space>
Results library_divergence(const Space& space, const Batch& x, const Batch& y,
                           const Config& s, bool grads) {
  const auto dx = to_device<T>(space, x, "swt::x"),
             dy = to_device<T>(space, y, "swt::y");
  auto values = output1<softwave::value_t<T>>(space, "swt::values", x.B);
  if (!grads) {
    softwave::soft_dtw_divergence(space, dx, dy, values, s.options(),
                                  s.lengths(space));
    return {to_host(values), {}, {}, {}};
  }
  softwave::SeriesGradients<T, Space> g;
  g.grad_x = output3<T>(space, "swt::grad_x", x.B, x.n, x.d);
  g.grad_y = output3<T>(space, "swt::grad_y", y.B, y.n, y.d);
  if (!s.grad_output.empty())
    g.grad_output = to_device<softwave::value_t<T>>(space, s.grad_output,
                                                    "swt::grad_output");
  softwave::soft_dtw_divergence_value_and_grad(space, dx, dy, values, g,
                                               s.options(), s.lengths(space));
  return {to_host(values), to_host(g.grad_x), to_host(g.grad_y), {}};
}

Results reference_divergence(const Batch& x, const Batch& y, const Config& s) {
  const int B = x.B, n = x.n, m = y.n, d = x.d;
  Results out;
  out.values.assign(B, 0.0);
  out.grad_x.assign(static_cast<std::size_t>(B) * n * d, 0.0);
  out.grad_y.assign(static_cast<std::size_t>(B) * m * d, 0.0);
  for (int b = 0; b < B; ++b) {
    const int nb = s.nx(b, n), mb = s.ny(b, m);
    const ref::Divergence r =
        ref::divergence(x.series(b, nb), y.series(b, mb), s.ref_options());
    out.values[b] = r.value;
    for (int i = 0; i < nb; ++i)
      for (int k = 0; k < d; ++k)
        out.grad_x[(static_cast<std::size_t>(b) * n + i) * d + k] =
            s.go(b) * r.grad_x(i, k);
    for (int j = 0; j < mb; ++j)
      for (int k = 0; k < d; ++k)
        out.grad_y[(static_cast<std::size_t>(b) * m + j) * d + k] =
            s.go(b) * r.grad_y(j, k);
  }
  return out;
}

// ------------------------------------------------------------- divergence

// The divergence sweep reuses the value sweep's cases. Its value is a
// difference of three soft-DTW values, so tolerances are taken relative to
// the largest of them (the difference itself may be far smaller).
template <class Space>
class Divergence : public ::testing::Test {};
TYPED_TEST_SUITE(Divergence, ExecutionSpaces);

template <class T, class Space>
void divergence_sweep(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (const Case& k : sweep_cases(rng, true)) {
    SCOPED_TRACE(k.str() + " (divergence)");
    const auto [x, y] = case_inputs<T>(rng, k);
    const Results want = reference_divergence(x, y, k.setup);
    const Results got = library_divergence<T>(space, x, y, k.setup, true);
    const Results values_only =
        library_divergence<T>(space, x, y, k.setup, false);
    double scale = 1.0;
    for (int b = 0; b < k.B; ++b) {
      const int nb = k.setup.nx(b, k.n), mb = k.setup.ny(b, k.m);
      const ref::Options o = k.setup.ref_options();
      for (double v :
           {ref::soft_dtw_value(x.series(b, nb), y.series(b, mb), o),
            ref::soft_dtw_value(x.series(b, nb), x.series(b, nb), o),
            ref::soft_dtw_value(y.series(b, mb), y.series(b, mb), o)})
        scale = std::max(scale, std::fabs(v));
    }
    EXPECT_TRUE(near_values(got.values, want.values, value_rtol<T>(), scale,
                            "values (value_and_grad)"));
    EXPECT_TRUE(near_values(values_only.values, want.values, value_rtol<T>(),
                            scale, "values"));
    if (!arrays_comparable<T>(k)) continue;
    // Likewise the gradient is a difference of three gradients that may
    // cancel: measure it against the scale of a single cell's ∂δ.
    const double go =
        k.setup.grad_output.empty() ? 1.0 : max_abs(k.setup.grad_output);
    const double gscale =
        std::max(go * max_cost_gradient(x, y, k.setup), 1e-300);
    const double tol =
        array_rtol<T>(k.setup.gamma, scale, max_cost(x, y, k.setup), k.n, k.m);
    EXPECT_TRUE(near_arrays(got.grad_x, want.grad_x, tol, gscale, "grad_x"));
    EXPECT_TRUE(near_arrays(got.grad_y, want.grad_y, tol, gscale, "grad_y"));
  }
}

SWT_TYPED_TEST_EACH_INPUT(Divergence, SweepMatchesReference, divergence_sweep)

// D(x, x) = 0, and its gradient vanishes there (sdtw is symmetric).
TYPED_TEST(Divergence, ZeroOnIdenticalSeries) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts)
    for (double gamma : {0.0, 0.01, 1.0}) {
      const int B = 3, n = rng.integer(1, 40), d = 3;
      Config s;
      s.cost = cost;
      s.gamma = gamma;
      s.band = rng.coin() ? std::optional<std::int64_t>(rng.integer(0, 3))
                          : std::nullopt;
      s.len_x = random_lengths(rng, B, n);
      s.len_y = s.len_x;
      SCOPED_TRACE(s.str());
      const Batch x = random_batch(rng, B, n, d, -1.0, 1.0);
      const Results got =
          library_divergence<double>(space, x, x, s, gamma > 0.0);
      const double scale = std::max(1.0, max_abs(reference(x, x, s).values));
      for (int b = 0; b < B; ++b)
        EXPECT_NEAR(got.values[b], 0.0, 1e-12 * scale) << "b=" << b;
      if (gamma > 0.0) {
        const double g = std::max(max_abs(reference(x, x, s).grad_x), 1.0);
        EXPECT_LE(max_abs(got.grad_x), 1e-10 * g);
        EXPECT_LE(max_abs(got.grad_y), 1e-10 * g);
      }
    }
}

// "≥ 0 for the built-in costs" (header), N ≠ M included.
TYPED_TEST(Divergence, NonNegativeForBuiltInCosts) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts)
    for (double gamma : {0.01, 0.1, 1.0, 10.0}) {
      const int B = 6, n = rng.integer(1, 30), m = rng.integer(1, 30), d = 2;
      Config s;
      s.cost = cost;
      s.gamma = gamma;
      SCOPED_TRACE(s.str() + " N=" + std::to_string(n) +
                   " M=" + std::to_string(m));
      const Batch x = random_batch(rng, B, n, d, -1.0, 1.0),
                  y = random_batch(rng, B, m, d, -1.0, 1.0);
      const std::vector<double> v =
          library_divergence<double>(space, x, y, s, false).values;
      const std::vector<double> scale = reference(x, y, s).values;
      for (int b = 0; b < B; ++b)
        EXPECT_GE(v[b], -1e-12 * std::max(1.0, std::fabs(scale[b])))
            << "b=" << b;
    }
}

TYPED_TEST(Divergence, FiniteDifferences) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const double h = 1e-6;
  for (ref::Cost cost : {ref::Cost::sqeuclidean, ref::Cost::cosine})
    for (double gamma : {0.1, 1.0}) {
      const int B = 2, n = 6, m = 4, d = 2;
      Config s;
      s.cost = cost;
      s.gamma = gamma;
      s.band = gamma < 1.0 ? std::optional<std::int64_t>(1) : std::nullopt;
      s.len_x = {n, rng.integer(1, n)};
      s.len_y = {rng.integer(1, m), m};
      s.grad_output = {-1.5, 1.0};
      SCOPED_TRACE(s.str());
      const Batch x = random_batch(rng, B, n, d, -1.0, 1.0),
                  y = random_batch(rng, B, m, d, -1.0, 1.0);
      const Results got = library_divergence<double>(space, x, y, s, true);
      expect_central_differences(
          got, x, y, s, h, [&](const Batch& xx, const Batch& yy) {
            return library_divergence<double>(space, xx, yy, s, false).values;
          });
    }
}

// Padded pairs with lengths: the same values and gradients as alone, and
// exactly 0 gradients in the padding (which holds NaN and is never read).
TYPED_TEST(Divergence, PaddedPairEqualsUnpaddedPair) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const int B = 3, n = 25, m = 19, d = 2;
  Config s;
  s.gamma = 0.3;
  s.band = 2;
  s.len_x = random_lengths(rng, B, n);
  s.len_y = random_lengths(rng, B, m);
  SCOPED_TRACE(s.str());
  Batch x(B, n, d, nan), y(B, m, d, nan);
  for (int b = 0; b < B; ++b) {
    for (int i = 0; i < s.len_x[b]; ++i)
      for (int k = 0; k < d; ++k) x(b, i, k) = rng.uniform();
    for (int j = 0; j < s.len_y[b]; ++j)
      for (int k = 0; k < d; ++k) y(b, j, k) = rng.uniform();
  }
  const Results got = library_divergence<double>(space, x, y, s, true);
  Batch xz = x, yz = y;  // the same batch with zeros in the padding
  for (double& e : xz.v)
    if (std::isnan(e)) e = 0.0;
  for (double& e : yz.v)
    if (std::isnan(e)) e = 0.0;
  const Results want = reference_divergence(xz, yz, s);
  EXPECT_TRUE(near_values(got.values, want.values, 1e-9, 1.0, "values"));
  EXPECT_TRUE(near_arrays(got.grad_x, want.grad_x, 1e-9, 1e-300, "grad_x"));
  EXPECT_TRUE(near_arrays(got.grad_y, want.grad_y, 1e-9, 1e-300, "grad_y"));
  for (int b = 0; b < B; ++b) {
    for (int i = s.len_x[b]; i < n; ++i)
      for (int k = 0; k < d; ++k)
        EXPECT_EQ(got.grad_x[(static_cast<std::size_t>(b) * n + i) * d + k],
                  0.0)
            << "b=" << b << " i=" << i;
    for (int j = s.len_y[b]; j < m; ++j)
      for (int k = 0; k < d; ++k)
        EXPECT_EQ(got.grad_y[(static_cast<std::size_t>(b) * m + j) * d + k],
                  0.0)
            << "b=" << b << " j=" << j;
  }
}

// --------------------------------------------------------------- pairwise

template <class Space>
class Pairwise : public ::testing::Test {};
TYPED_TEST_SUITE(Pairwise, ExecutionSpaces);

template <class T, class Space>
std::vector<double> library_pairwise(const Space& space, const Batch& x,
                                     const Batch& y, const Config& s,
                                     softwave::PairwiseValue what) {
  const auto dx = to_device<T>(space, x, "swt::x"),
             dy = to_device<T>(space, y, "swt::y");
  Dev2<softwave::value_t<T>, Space> matrix("swt::matrix", x.B, y.B);
  Kokkos::deep_copy(matrix, static_cast<softwave::value_t<T>>(kSentinel));
  softwave::pairwise(space, dx, dy, matrix, s.options(), what,
                     s.lengths(space));
  return to_host(matrix);
}

std::vector<double> reference_pairwise(const Batch& x, const Batch& y,
                                       const Config& s,
                                       softwave::PairwiseValue what) {
  std::vector<double> out;
  for (int i = 0; i < x.B; ++i)
    for (int j = 0; j < y.B; ++j) {
      const ref::Series a = x.series(i, s.nx(i, x.n)),
                        b = y.series(j, s.ny(j, y.n));
      out.push_back(what == softwave::PairwiseValue::soft_dtw
                        ? ref::soft_dtw_value(a, b, s.ref_options())
                        : ref::divergence(a, b, s.ref_options()).value);
    }
  return out;
}

template <class T, class Space>
void pairwise_sweep(const Space& space) {
  SWT_SEEDED_RNG(rng);
  static const int batches[][2] = {{3, 5}, {1, 4}, {6, 1}, {1, 1}, {7, 2}};
  int c = 0;
  for (const auto& bb : batches)
    for (ref::Cost cost : kCosts)
      for (double gamma : kGammas) {
        ++c;
        const int n = rng.integer(1, 40), m = rng.integer(1, 40),
                  d = std::vector<int>{1, 3, 8}[c % 3];
        Config s;
        s.cost = cost;
        s.gamma = gamma;
        if (c % 2) s.band = rng.integer(0, 3);
        if ((c / 2) % 2) {
          s.len_x = random_lengths(rng, bb[0], n);
          s.len_y = random_lengths(rng, bb[1], m);
        }
        s.tile = std::vector<int>{0, 4, 7, 32}[(c / 3) % 4];
        SCOPED_TRACE(s.str() + " B1=" + std::to_string(bb[0]) + " B2=" +
                     std::to_string(bb[1]) + " N=" + std::to_string(n) +
                     " M=" + std::to_string(m) + " d=" + std::to_string(d));
        const double lo = cost == ref::Cost::cosine ? -1.0 : 0.0;
        Batch x = random_batch(rng, bb[0], n, d, lo, 1.0),
              y = random_batch(rng, bb[1], m, d, lo, 1.0);
        round_to<T>(x);
        round_to<T>(y);
        for (auto what : {softwave::PairwiseValue::soft_dtw,
                          softwave::PairwiseValue::divergence}) {
          SCOPED_TRACE(what == softwave::PairwiseValue::soft_dtw
                           ? "soft_dtw"
                           : "divergence");
          const std::vector<double> want = reference_pairwise(x, y, s, what);
          // Values as in every sweep (value_floor: a value that cancels to near
          // 0 at large γ carries the rounding of its whole path). Divergences
          // are differences of values: scale by the values.
          const double floor =
              what == softwave::PairwiseValue::soft_dtw
                  ? value_floor<T>(n, m, gamma,
                                   max_cost(x, y, s, /*all_pairs=*/true))
                  : std::max(1.0,
                             max_abs(reference_pairwise(
                                 x, y, s, softwave::PairwiseValue::soft_dtw)));
          const double rtol =
              value_rtol<T>() *
              (what == softwave::PairwiseValue::soft_dtw ? 1.0 : 4.0);
          EXPECT_TRUE(near_values(library_pairwise<T>(space, x, y, s, what),
                                  want, rtol, floor, "matrix"));
        }
      }
}

SWT_TYPED_TEST_EACH_INPUT(Pairwise, SweepMatchesReference, pairwise_sweep)

// X against itself: the soft-DTW matrix is symmetric, the divergence matrix
// is symmetric with a zero diagonal.
TYPED_TEST(Pairwise, SelfMatrixIsSymmetric) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const int B = 6, n = 30, d = 3;
  Config s;
  s.gamma = 0.1;
  s.band = 3;
  s.len_x = random_lengths(rng, B, n);
  s.len_y = s.len_x;
  SCOPED_TRACE(s.str());
  const Batch x = random_batch(rng, B, n, d);
  const auto sd = library_pairwise<double>(space, x, x, s,
                                           softwave::PairwiseValue::soft_dtw);
  const auto dv = library_pairwise<double>(space, x, x, s,
                                           softwave::PairwiseValue::divergence);
  const double scale = std::max(1.0, max_abs(sd));
  for (int i = 0; i < B; ++i) {
    EXPECT_NEAR(dv[i * B + i], 0.0, 1e-12 * scale) << i;
    for (int j = 0; j < B; ++j) {
      EXPECT_NEAR(sd[i * B + j], sd[j * B + i], 1e-11 * scale) << i << "," << j;
      EXPECT_NEAR(dv[i * B + j], dv[j * B + i], 1e-11 * scale) << i << "," << j;
    }
  }
}

// One set with itself (the same view, the same lengths view): only the
// pairs a <= b are walked, and mirrored. Every entry must still be the
// reference's, for values and divergences, soft and hard, with a band and
// lengths, and the halves equal bit for bit.
TYPED_TEST(Pairwise, OneSetWithItselfIsTheWholeMatrix) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (double gamma : {0.0, 0.1, 1.0})
    for (int B : {1, 2, 7, 23}) {
      const int n = rng.integer(1, 25), d = rng.integer(1, 3);
      Config s;
      s.gamma = gamma;
      if (rng.coin()) s.band = rng.integer(0, 3);
      s.len_x = random_lengths(rng, B, n);
      s.len_y = s.len_x;
      SCOPED_TRACE(s.str() + " B=" + std::to_string(B) +
                   " N=" + std::to_string(n) + " d=" + std::to_string(d));
      const Batch x = random_batch(rng, B, n, d);
      const auto dx = to_device<double>(space, x, "swt::x");
      softwave::Lengths<TypeParam> lengths;
      lengths.x = lengths.y = to_device_int(space, s.len_x, "swt::lengths");
      for (auto what : {softwave::PairwiseValue::soft_dtw,
                        softwave::PairwiseValue::divergence}) {
        Dev2<double, TypeParam> matrix("swt::matrix", B, B);
        Kokkos::deep_copy(matrix, kSentinel);
        softwave::pairwise(space, dx, dx, matrix, s.options(), what, lengths);
        const std::vector<double> got = to_host(matrix);
        const std::vector<double> want = reference_pairwise(x, x, s, what);
        EXPECT_TRUE(near_values(got, want, 1e-11, 1.0, "matrix"));
        for (int a = 0; a < B; ++a)
          for (int b = 0; b < a; ++b)
            EXPECT_EQ(got[a * B + b], got[b * B + a]) << a << "," << b;
      }
    }
}

// Padding beyond lengths.x / lengths.y holds NaN and is never read.
TYPED_TEST(Pairwise, NaNInPaddingIsNeverRead) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const int B1 = 4, B2 = 3, n = 20, m = 26, d = 2;
  Config s;
  s.gamma = 0.2;
  s.band = 2;
  s.len_x = random_lengths(rng, B1, n);
  s.len_y = random_lengths(rng, B2, m);
  SCOPED_TRACE(s.str());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Batch x = random_batch(rng, B1, n, d), y = random_batch(rng, B2, m, d);
  const std::vector<double> want_sd =
      reference_pairwise(x, y, s, softwave::PairwiseValue::soft_dtw);
  const std::vector<double> want_dv =
      reference_pairwise(x, y, s, softwave::PairwiseValue::divergence);
  for (int b = 0; b < B1; ++b)
    for (int i = s.len_x[b]; i < n; ++i)
      for (int k = 0; k < d; ++k) x(b, i, k) = nan;
  for (int b = 0; b < B2; ++b)
    for (int j = s.len_y[b]; j < m; ++j)
      for (int k = 0; k < d; ++k) y(b, j, k) = nan;
  EXPECT_TRUE(
      near_values(library_pairwise<double>(space, x, y, s,
                                           softwave::PairwiseValue::soft_dtw),
                  want_sd, 1e-9, 1.0, "soft_dtw matrix"));
  EXPECT_TRUE(near_values(
      library_pairwise<double>(space, x, y, s,
                               softwave::PairwiseValue::divergence),
      want_dv, 1e-9, std::max(1.0, max_abs(want_sd)), "divergence matrix"));
}

// matrix(i, i) equals the batched soft_dtw of pair i when X and Y hold the
// same pairs (the two entry points agree).
TYPED_TEST(Pairwise, DiagonalEqualsBatchedSoftDTW) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const int B = 5, n = 33, m = 21, d = 4;
  Config s;
  s.gamma = 0.05;
  s.cost = ref::Cost::l1;
  s.len_x = random_lengths(rng, B, n);
  s.len_y = random_lengths(rng, B, m);
  SCOPED_TRACE(s.str());
  const Batch x = random_batch(rng, B, n, d), y = random_batch(rng, B, m, d);
  const auto matrix = library_pairwise<double>(
      space, x, y, s, softwave::PairwiseValue::soft_dtw);
  const auto batched = library_values<double>(space, x, y, s);
  std::vector<double> diag;
  for (int i = 0; i < B; ++i) diag.push_back(matrix[i * B + i]);
  EXPECT_TRUE(near_values(diag, batched, 1e-12, 1.0, "diagonal"));
}

// Series of one point each in (−1, 1), as float.
template <class Space>
Dev3<float, Space> single_points(swt::Rng& rng, int count,
                                 const std::string& label) {
  Dev3<float, Space> s(label, count, 1, 1);
  auto h = Kokkos::create_mirror_view(s);
  for (int i = 0; i < count; ++i)
    h(i, 0, 0) = static_cast<float>(rng.uniform(-1.0, 1.0));
  Kokkos::deep_copy(s, h);
  return s;
}

// The entries of pairwise(x, y) that are not the single cell's cost
// (x_i − y_j)² (series of one point each).
template <class Space>
std::int64_t wrong_single_cells(const Space& space, const Dev3<float, Space>& x,
                                const Dev3<float, Space>& y) {
  const int B1 = int(x.extent(0)), B2 = int(y.extent(0));
  Dev2<float, Space> matrix("matrix", B1, B2);
  Kokkos::deep_copy(matrix, -777.0f);
  softwave::pairwise(space, x, y, matrix);
  auto hm = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), matrix);
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  std::int64_t wrong = 0;
  for (int i = 0; i < B1; ++i)
    for (int j = 0; j < B2; ++j) {
      const double diff = double(hx(i, 0, 0)) - double(hy(j, 0, 0));
      if (!(std::fabs(hm(i, j) - diff * diff) <= 1e-6)) ++wrong;
    }
  return wrong;
}

// More pairs than one streamed chunk holds: with N = M = 1 a pair needs 48
// bytes of workspace, so 2400 × 2400 pairs span two 256 MiB chunks. Every
// entry is the single cell's cost (x_i − y_j)², on both sides of the seam.
TYPED_TEST(Pairwise, StreamsAcrossChunkBoundaries) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const auto x = single_points<TypeParam>(rng, 2400, "x");
  const auto y = single_points<TypeParam>(rng, 2400, "y");
  EXPECT_EQ(wrong_single_cells(space, x, y), 0);
}

// The triangle's pairs stream in chunks too: 3400 series with themselves
// (5,781,700 pairs a <= b) cross a chunk seam inside a row. Every entry,
// both halves, is the single cell's cost.
TYPED_TEST(Pairwise, TriangleStreamsAcrossChunkBoundaries) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const auto x = single_points<TypeParam>(rng, 3400, "x");
  EXPECT_EQ(wrong_single_cells(space, x, x), 0);
}

}  // namespace
