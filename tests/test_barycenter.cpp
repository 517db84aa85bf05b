// Soft-DTW barycenters (softwave/barycenter.hpp) against the float64
// reference: the objective and its gradient, stationarity of the L-BFGS
// result, known answers (identical series, one-hot weights), variable
// lengths, float and double, and argument errors naming the argument.

#include <limits>
#include <softwave/barycenter.hpp>

#include "test_helpers.hpp"

namespace {

using namespace swt;
using softwave::BarycenterMethod;
using softwave::BarycenterOptions;
using softwave::BarycenterReport;

// One barycenter problem on the host: series X (B, N, d), weights (empty:
// 1/B), lengths (empty: N), γ.
struct Problem {
  Batch X;
  std::vector<double> weights;
  std::vector<int> lengths;
  double gamma = 1.0;

  // The library divides the weights by their sum.
  double weight(int b) const {
    if (weights.empty()) return 1.0 / X.B;
    double sum = 0;
    for (const double w : weights) sum += w;
    return weights[b] / sum;
  }
  int length(int b) const { return lengths.empty() ? X.n : lengths[b]; }
  ref::Options ref_options() const { return {gamma, ref::Cost::sqeuclidean}; }
};

// f(z) = Σ_b w_b sdtw(z, X_b) and its gradient (flattened like z), float64.
double reference_objective(const Problem& p, const Batch& z,
                           std::vector<double>* gradient = nullptr) {
  double f = 0;
  if (gradient) gradient->assign(z.v.size(), 0.0);
  for (int b = 0; b < p.X.B; ++b) {
    const ref::Result r = ref::soft_dtw(
        z.series(0, z.n), p.X.series(b, p.length(b)), p.ref_options());
    f += p.weight(b) * r.value;
    if (gradient)
      for (std::size_t q = 0; q < z.v.size(); ++q)
        (*gradient)[q] += p.weight(b) * r.grad_x.v[q];
  }
  return f;
}

template <class T, class Space>
softwave::WeightsView<T, Space> device_weights(const Space& space,
                                               const Problem& p) {
  if (p.weights.empty()) return {};
  return to_device<T>(space, p.weights, "swt::weights");
}

template <class Space>
softwave::LengthsView<Space> device_lengths(const Space& space,
                                            const Problem& p) {
  if (p.lengths.empty()) return {};
  return to_device_int(space, p.lengths, "swt::lengths");
}

template <class T, class Space>
Dev2<T, Space> device_point(const Space&, const Batch& z, const char* label) {
  Dev2<T, Space> view(std::string(label), z.n, z.d);
  auto host = Kokkos::create_mirror_view(view);
  for (int i = 0; i < z.n; ++i)
    for (int k = 0; k < z.d; ++k) host(i, k) = static_cast<T>(z(0, i, k));
  Kokkos::deep_copy(view, host);
  return view;
}

Batch host_point(const std::vector<double>& flat, int L, int d) {
  Batch z(1, L, d);
  z.v = flat;
  return z;
}

struct Solved {
  Batch z;
  BarycenterReport report;
};

// Runs softwave::barycenter<T> from z0.
template <class T, class Space>
Solved solve(const Space& space, const Problem& p, const Batch& z0,
             BarycenterOptions options) {
  options.softdtw.gamma = p.gamma;
  const auto X = to_device<T>(space, p.X, "swt::X");
  auto z = device_point<T>(space, z0, "swt::barycenter");
  const BarycenterReport report =
      softwave::barycenter(space, X, z, options, device_weights<T>(space, p),
                           device_lengths(space, p));
  return {host_point(to_host(z), z0.n, z0.d), report};
}

// softwave::barycenter_objective<T>: f and its gradient at z.
template <class T, class Space>
double library_objective(const Space& space, const Problem& p, const Batch& z,
                         std::vector<double>& gradient) {
  softwave::SoftDTWOptions options;
  options.gamma = p.gamma;
  const auto X = to_device<T>(space, p.X, "swt::X");
  const Dev2<T, Space> point = device_point<T>(space, z, "swt::z");
  Dev2<T, Space> grad("swt::gradient", z.n, z.d);
  Kokkos::deep_copy(grad, static_cast<T>(kSentinel));
  const double f = softwave::barycenter_objective(
      space, X, point, grad, options, device_weights<T>(space, p),
      device_lengths(space, p));
  gradient = to_host(grad);
  return f;
}

// The per-time-step mean of the series (equal lengths), the usual start.
Batch mean_point(const Problem& p) {
  Batch z(1, p.X.n, p.X.d);
  for (int b = 0; b < p.X.B; ++b)
    for (int i = 0; i < p.X.n; ++i)
      for (int k = 0; k < p.X.d; ++k) z(0, i, k) += p.X(b, i, k) / p.X.B;
  return z;
}

// B noisy copies of one smooth random shape, each shifted in time by up to
// max_shift steps: a barycenter problem with a clear answer and a
// non-trivial warp.
Batch warped_family(Rng& rng, int B, int n, int d, int max_shift) {
  std::vector<double> phase(d), freq(d);
  for (int k = 0; k < d; ++k) {
    phase[k] = rng.uniform(0, 6.28);
    freq[k] = rng.uniform(1.5, 3.0);
  }
  Batch X(B, n, d);
  for (int b = 0; b < B; ++b) {
    const int shift = rng.integer(-max_shift, max_shift);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < d; ++k) {
        const double t = double(std::clamp(i + shift, 0, n - 1)) / n;
        X(b, i, k) =
            std::sin(6.28 * freq[k] * t + phase[k]) + rng.uniform(-0.1, 0.1);
      }
  }
  return X;
}

// tol = 1e-10 runs each method to the end of what T resolves: f is summed
// from values of T, so a float objective is flat below ~1e-7 relative, and
// float L-BFGS ends when its line search finds no step.
// The series x (one of `batch`, B = 1 or `series` chosen) with each point
// moved by at most `fraction` of its distance to the nearest other point of
// the series (Euclidean, fraction < 1/2), so each point stays nearest its
// own: a start in the basin of the minimum at x, away from the local minima
// of hard DTW (small γ) where z warps onto x. A fixed noise level instead
// lands in one of those about once in 1000 draws, when two points of x are
// close.
Batch perturbed_near(Rng& rng, const Batch& batch, int series,
                     double fraction) {
  const int n = batch.n, d = batch.d;
  Batch start(1, n, d);
  for (int i = 0; i < n; ++i) {
    double nearest = std::numeric_limits<double>::infinity();
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      double squared = 0;
      for (int k = 0; k < d; ++k) {
        const double diff = batch(series, i, k) - batch(series, j, k);
        squared += diff * diff;
      }
      nearest = std::min(nearest, std::sqrt(squared));
    }
    // A random direction scaled to at most fraction · nearest.
    std::vector<double> step(d);
    double norm = 0;
    for (double& e : step) {
      e = rng.uniform(-1.0, 1.0);
      norm += e * e;
    }
    const double length = fraction * nearest * rng.uniform(0.0, 1.0);
    for (int k = 0; k < d; ++k)
      start(0, i, k) = batch(series, i, k) +
                       (norm > 0 ? step[k] * length / std::sqrt(norm) : 0.0);
  }
  return start;
}

BarycenterOptions method_options(BarycenterMethod method) {
  BarycenterOptions o;
  o.method = method;
  o.tol = 1e-12;
  if (method == BarycenterMethod::adam) {
    o.tol = 1e-10;
    o.max_iter = 400;
    o.learning_rate = 0.01;
  }
  return o;
}

// A stationary point's float64 gradient, relative to the gradient at the
// start. L-BFGS to tol = 1e-12 reaches at most 4e-5 in double (where the
// relative-decrease rule stops it) and 1.3e-5 in float (where f no longer
// resolves the decrease and the slope-only line search ends) over 1500 runs
// of the test below, so this keeps a margin of 7.
constexpr double stationary_gradient = 3e-4;

// Typed on the execution space and the value type T.
template <class SpaceAndT>
class Barycenter : public ::testing::Test {};
TYPED_TEST_SUITE(Barycenter, ExecutionSpacesDoubleFloat);

// At small γ, sdtw(z, x) is minimised at z = x (up to O(√γ) pulls from
// near-tied alignments), so B copies of x have x as their barycenter.
TYPED_TEST(Barycenter, IdenticalSeriesGiveThatSeries) {
  using T = typename TypeParam::value;
  const typename TypeParam::space space;
  SWT_SEEDED_RNG(rng);
  const int B = 4, n = 12, d = 2;
  const Batch one = random_batch(rng, 1, n, d, -2.0, 2.0);
  Problem p;
  p.gamma = 1e-4;
  p.X = Batch(B, n, d);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < d; ++k) p.X(b, i, k) = one(0, i, k);
  round_to<T>(p.X);
  const Batch start = perturbed_near(rng, one, 0, 0.3);
  for (const auto method : {BarycenterMethod::lbfgs, BarycenterMethod::adam}) {
    SCOPED_TRACE(method == BarycenterMethod::lbfgs ? "lbfgs" : "adam");
    const Solved s = solve<T>(space, p, start, method_options(method));
    EXPECT_TRUE(near_arrays(s.z.v, one.v, 0.03, 1.0, "barycenter"));
    EXPECT_GE(s.report.iterations, 1);
    EXPECT_GT(s.report.evaluations, s.report.iterations);
  }
}

// The gradient the optimisers follow (barycenter_objective shares their
// code) against central differences of the float64 reference objective,
// with random weights and per-series lengths, L ≠ N.
TYPED_TEST(Barycenter, GradientMatchesFiniteDifferences) {
  using T = typename TypeParam::value;
  const typename TypeParam::space space;
  SWT_SEEDED_RNG(rng);
  for (const double gamma : {0.1, 1.0}) {
    SCOPED_TRACE(::testing::Message() << "gamma " << gamma);
    Problem p;
    p.gamma = gamma;
    p.X = random_batch(rng, 3, 9, 2);
    round_to<T>(p.X);
    p.lengths = random_lengths(rng, 3, 9);
    p.weights = {rng.uniform(0, 1), rng.uniform(0, 1), rng.uniform(0, 1)};
    for (double& w : p.weights) w = static_cast<double>(static_cast<T>(w));
    Batch z = random_batch(rng, 1, 7, 2);
    round_to<T>(z);

    std::vector<double> gradient;
    const double f = library_objective<T>(space, p, z, gradient);
    std::vector<double> want;
    const double f_ref = reference_objective(p, z, &want);
    EXPECT_NEAR(f, f_ref,
                (std::is_same_v<T, double> ? 1e-12 : 1e-6) *
                    std::max(1.0, std::fabs(f_ref)));
    std::vector<double> fd(z.v.size());
    const double h = 1e-5;
    for (std::size_t q = 0; q < z.v.size(); ++q) {
      Batch up = z, down = z;
      up.v[q] += h;
      down.v[q] -= h;
      fd[q] =
          (reference_objective(p, up) - reference_objective(p, down)) / (2 * h);
    }
    EXPECT_TRUE(near_arrays(want, fd, 1e-6, 1.0, "reference vs differences"));
    EXPECT_TRUE(near_arrays(gradient, fd,
                            std::is_same_v<T, double> ? 1e-7 : 1e-5, 1.0,
                            "gradient vs differences"));
  }
}

// L-BFGS ends at a stationary point of the float64 objective, below the
// mean it starts from and no worse than Adam from the same start.
TYPED_TEST(Barycenter, LbfgsIsStationaryAndBeatsMeanAndAdam) {
  using T = typename TypeParam::value;
  const typename TypeParam::space space;
  SWT_SEEDED_RNG(rng);
  Problem p;
  // γ = 1 and shifts of ±2 keep f close enough to convex around the mean
  // that both methods reach the same minimum (larger shifts at smaller γ
  // sometimes send them to different local minima, ~1 run in 100).
  p.gamma = 1.0;
  p.X = warped_family(rng, 5, 24, 1, 2);
  round_to<T>(p.X);
  const Batch start = mean_point(p);
  const Solved lbfgs =
      solve<T>(space, p, start, method_options(BarycenterMethod::lbfgs));
  const Solved adam =
      solve<T>(space, p, start, method_options(BarycenterMethod::adam));

  std::vector<double> g_start, g_end;
  const double f_start = reference_objective(p, start, &g_start);
  const double f_end = reference_objective(p, lbfgs.z, &g_end);
  const double f_adam = reference_objective(p, adam.z);
  const double scale = std::max(1.0, std::fabs(f_end));
  EXPECT_TRUE(lbfgs.report.converged);
  EXPECT_NEAR(lbfgs.report.objective, f_end,
              (std::is_same_v<T, double> ? 1e-10 : 1e-5) * scale);
  EXPECT_LE(max_abs(g_end), stationary_gradient * max_abs(g_start))
      << "f " << f_end << " after " << lbfgs.report.iterations << " iterations";
  EXPECT_LT(f_end, f_start);
  EXPECT_LE(f_end, f_adam + 1e-3 * scale);
}

// A one-hot weight vector (any positive scale) reduces f to one term, whose
// minimiser at small γ and L = N is that series (started near it: at small
// γ, f has the local minima of hard DTW, where z warps onto x).
TYPED_TEST(Barycenter, OneHotWeightsGiveThatSeries) {
  using T = typename TypeParam::value;
  const typename TypeParam::space space;
  SWT_SEEDED_RNG(rng);
  Problem p;
  p.gamma = 1e-4;
  p.X = random_batch(rng, 4, 10, 2, -2.0, 2.0);
  round_to<T>(p.X);
  const int chosen = rng.integer(0, 3);
  p.weights.assign(4, 0.0);
  p.weights[chosen] = 3.0;
  const int n = 10, d = 2;
  const Batch want =
      host_point(std::vector<double>(p.X.v.begin() + chosen * n * d,
                                     p.X.v.begin() + (chosen + 1) * n * d),
                 n, d);
  const Batch start = perturbed_near(rng, p.X, chosen, 0.3);
  const Solved s =
      solve<T>(space, p, start, method_options(BarycenterMethod::lbfgs));
  EXPECT_TRUE(near_arrays(s.z.v, want.v, 0.03, 1.0, "barycenter"));
}

// Padding past each series' length is never read (the result is the same
// whatever it holds), and the result is stationary for the reference
// objective on the trimmed series.
TYPED_TEST(Barycenter, VariableLengths) {
  using T = typename TypeParam::value;
  const typename TypeParam::space space;
  SWT_SEEDED_RNG(rng);
  Problem p;
  p.gamma = 0.5;
  p.X = warped_family(rng, 4, 20, 2, 3);
  round_to<T>(p.X);
  p.lengths = {20, rng.integer(8, 19), rng.integer(8, 19), rng.integer(8, 19)};
  Problem junk = p;
  for (int b = 0; b < 4; ++b)
    for (int i = p.lengths[b]; i < 20; ++i)
      for (int k = 0; k < 2; ++k) junk.X(b, i, k) = rng.uniform(-50, 50);
  const Batch start = random_batch(rng, 1, 15, 2, -0.5, 0.5);
  const BarycenterOptions options = method_options(BarycenterMethod::lbfgs);
  const Solved a = solve<T>(space, p, start, options);
  const Solved b = solve<T>(space, junk, start, options);
  EXPECT_EQ(a.z.v, b.z.v);
  EXPECT_EQ(a.report.iterations, b.report.iterations);
  std::vector<double> g_start, g_end;
  reference_objective(p, start, &g_start);
  reference_objective(p, a.z, &g_end);
  EXPECT_LE(max_abs(g_end), stationary_gradient * max_abs(g_start));
}

// The report's objective is f at the returned point; empty weights are 1/B.
TYPED_TEST(Barycenter, ReportAndDefaultWeights) {
  using T = typename TypeParam::value;
  const typename TypeParam::space space;
  SWT_SEEDED_RNG(rng);
  Problem p;
  p.gamma = 1.0;
  p.X = random_batch(rng, 3, 8, 1);
  round_to<T>(p.X);
  const Batch start = mean_point(p);
  BarycenterOptions options;
  options.max_iter = 3;
  options.tol = 1e-12;
  const Solved s = solve<T>(space, p, start, options);
  EXPECT_LE(s.report.iterations, 3);
  std::vector<double> gradient;
  const double f = library_objective<T>(space, p, s.z, gradient);
  EXPECT_NEAR(s.report.objective, f, 1e-6 * std::max(1.0, std::fabs(f)));
  Problem explicit_weights = p;
  explicit_weights.weights.assign(3, 1.0 / 3.0);
  std::vector<double> g_explicit;
  EXPECT_NEAR(library_objective<T>(space, explicit_weights, s.z, g_explicit), f,
              1e-6 * std::max(1.0, std::fabs(f)));
  EXPECT_TRUE(near_arrays(g_explicit, gradient, 1e-6, 1.0, "gradient"));
}

// ------------------------------------------------------------------ errors

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Valid arguments, of which each test breaks one; tests reach them through
// `this->` (members of a typed fixture).
constexpr int B = 3, N = 6, D = 2, L = 5;

template <class Space>
class BarycenterErrors : public ::testing::Test {
 protected:
  Space space;
  Dev3<double, Space> X{"X", B, N, D};
  Dev2<double, Space> z{"z", L, D};
  BarycenterOptions options;

  void SetUp() override {
    Kokkos::deep_copy(X, 0.5);
    Kokkos::deep_copy(z, 0.25);
  }
  auto run(const Dev3<double, Space>& x, const Dev2<double, Space>& point,
           softwave::WeightsView<double, Space> weights = {},
           softwave::LengthsView<Space> lengths = {}) {
    return [=] {
      auto copy = point;
      softwave::barycenter(space, x, copy, options, weights, lengths);
    };
  }
  auto run() { return run(X, z); }
  Dev1<double, Space> weights(const std::vector<double>& values) {
    return to_device<double>(space, values, "swt::weights");
  }
  Dev1<int, Space> lengths(const std::vector<int>& values) {
    return to_device_int(space, values, "swt::lengths");
  }
};
TYPED_TEST_SUITE(BarycenterErrors, ExecutionSpaces);

TYPED_TEST(BarycenterErrors, Options) {
  for (const double gamma : {0.0, -1.0, kNaN, kInf}) {
    this->options.softdtw.gamma = gamma;
    EXPECT_TRUE(throws_naming("gamma", this->run()));
  }
  this->options = {};
  this->options.softdtw.band = -1;
  EXPECT_TRUE(throws_naming("band", this->run()));
  this->options = {};
  this->options.softdtw.tile = -1;
  EXPECT_TRUE(throws_naming("tile", this->run()));
  this->options = {};
  this->options.max_iter = 0;
  EXPECT_TRUE(throws_naming("max_iter", this->run()));
  this->options = {};
  for (const double tol : {0.0, -1e-3, kNaN}) {
    this->options.tol = tol;
    EXPECT_TRUE(throws_naming("tol", this->run()));
  }
  this->options = {};
  this->options.history = 0;
  EXPECT_TRUE(throws_naming("history", this->run()));
  this->options = {};
  for (const double rate : {0.0, -0.1, kInf}) {
    this->options.learning_rate = rate;
    EXPECT_TRUE(throws_naming("learning_rate", this->run()));
  }
  this->options = {};
  this->options.method = static_cast<BarycenterMethod>(7);
  EXPECT_TRUE(throws_naming("method", this->run()));
}

TYPED_TEST(BarycenterErrors, Weights) {
  EXPECT_TRUE(throws_naming(
      "weights", this->run(this->X, this->z, this->weights({0.5, 0.5}))));
  EXPECT_TRUE(throws_naming(
      "weights", this->run(this->X, this->z, this->weights({0.5, -0.1, 0.5}))));
  EXPECT_TRUE(throws_naming(
      "weights", this->run(this->X, this->z, this->weights({0.5, kNaN, 0.5}))));
  EXPECT_TRUE(throws_naming(
      "weights", this->run(this->X, this->z, this->weights({0.5, kInf, 0.5}))));
  EXPECT_TRUE(throws_naming(
      "weights", this->run(this->X, this->z, this->weights({0.0, 0.0, 0.0}))));
  // Each finite, their sum not.
  EXPECT_TRUE(throws_naming(
      "weights",
      this->run(this->X, this->z, this->weights({1e308, 1e308, 1.0}))));
}

// Only the weights' ratios matter: weights of 1e-6 (which, unnormalised,
// made the gradient look converged at the start) and of 1e300 give the
// barycenter of weights 1, and the report's objective uses the normalised
// weights.
TYPED_TEST(BarycenterErrors, WeightsScaleDoesNotMatter) {
  auto host = Kokkos::create_mirror_view(this->X);
  for (std::size_t q = 0; q < host.size(); ++q)
    host.data()[q] = 0.1 * double(q % 7);
  Kokkos::deep_copy(this->X, host);
  auto solve = [&](double scale) {
    Dev2<double, TypeParam> z("z", L, D);
    Kokkos::deep_copy(z, 0.25);
    const auto report = softwave::barycenter(
        this->space, this->X, z, this->options,
        this->weights({1.0 * scale, 2.0 * scale, 3.0 * scale}));
    return std::make_pair(report, to_host(z));
  };
  const auto [unit, z_unit] = solve(1.0);
  EXPECT_GT(unit.iterations, 1);
  for (const double scale : {1e-6, 1e300}) {
    const auto [scaled, z_scaled] = solve(scale);
    EXPECT_EQ(scaled.iterations, unit.iterations) << scale;
    EXPECT_NEAR(scaled.objective, unit.objective,
                1e-9 * std::fabs(unit.objective))
        << scale;
    EXPECT_TRUE(near_arrays(z_scaled, z_unit, 1e-9, 1e-9, "z"));
  }
}

// A gamma so large that γ·log 3 sums past the largest double: the objective
// would be NaN or -inf; the call refuses instead of returning it.
TYPED_TEST(BarycenterErrors, OverflowingObjectiveIsRefused) {
  this->options.softdtw.gamma = 1e308;
  EXPECT_TRUE(throws_naming("gamma", this->run()));
}

TYPED_TEST(BarycenterErrors, ShapesLengthsAndValues) {
  EXPECT_TRUE(throws_naming(
      "barycenter",
      this->run(this->X, Dev2<double, TypeParam>("z", L, D + 1))));
  EXPECT_TRUE(throws_naming(
      "barycenter", this->run(this->X, Dev2<double, TypeParam>("z", 0, D))));
  Dev2<double, TypeParam> bad_z("z", L, D);
  Kokkos::deep_copy(bad_z, kNaN);
  EXPECT_TRUE(throws_naming("barycenter", this->run(this->X, bad_z)));
  EXPECT_TRUE(throws_naming(
      "X", this->run(Dev3<double, TypeParam>("X", 0, N, D), this->z)));
  EXPECT_TRUE(throws_naming(
      "X", this->run(Dev3<double, TypeParam>("X", B, 0, D), this->z)));
  Dev3<double, TypeParam> bad_X("X", B, N, D);
  Kokkos::deep_copy(bad_X, kInf);
  EXPECT_TRUE(throws_naming("X", this->run(bad_X, this->z)));
  EXPECT_TRUE(throws_naming(
      "lengths", this->run(this->X, this->z, {}, this->lengths({3, 3}))));
  EXPECT_TRUE(throws_naming(
      "lengths", this->run(this->X, this->z, {}, this->lengths({3, 0, 3}))));
  EXPECT_TRUE(throws_naming(
      "lengths",
      this->run(this->X, this->z, {}, this->lengths({3, N + 1, 3}))));
  // Padding past a length may hold anything, NaN included.
  Dev3<double, TypeParam> padded("X", B, N, D);
  Kokkos::deep_copy(padded, 0.5);
  auto host = Kokkos::create_mirror_view(padded);
  Kokkos::deep_copy(host, padded);
  host(1, N - 1, 0) = kNaN;
  Kokkos::deep_copy(padded, host);
  const auto lengths = this->lengths({N, N - 1, N});
  EXPECT_NO_THROW(this->run(padded, this->z, {}, lengths)());
}

TYPED_TEST(BarycenterErrors, Objective) {
  softwave::SoftDTWOptions o;
  EXPECT_TRUE(throws_naming("gradient", [&] {
    softwave::barycenter_objective(this->space, this->X, this->z,
                                   Dev2<double, TypeParam>("g", L + 1, D), o);
  }));
  EXPECT_TRUE(throws_naming("z", [&] {
    softwave::barycenter_objective(this->space, this->X,
                                   Dev2<double, TypeParam>("z", L, D + 1));
  }));
  o.gamma = 0;
  EXPECT_TRUE(throws_naming("gamma", [&] {
    softwave::barycenter_objective(this->space, this->X, this->z, {}, o);
  }));
}

}  // namespace
