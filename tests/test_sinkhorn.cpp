// softwave/sinkhorn.hpp against the float64 reference
// (reference/sinkhorn_reference.hpp) on fresh random problems of many
// shapes: every cost form, balanced, semi-relaxed and unbalanced, ε given,
// relative and annealed, warm starts, gradients against finite differences,
// the plan's queries, the debiased divergence, and bad input.

#include <softwave/sinkhorn.hpp>

#include "reference/sinkhorn_reference.hpp"
#include "test_helpers.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include "sinkhorn/updates.hpp"  // set_tensor_row_tiles, set_tensor_operands
#endif

namespace {

namespace ref = softwave_ref;
using swt::Batch;
using swt::Rng;

template <class T, class Space>
using V2 = softwave::OTView2<T, Space>;
template <class T, class Space>
using V3 = softwave::OTView3<T, Space>;
template <class T, class Space>
using V1 = softwave::OTView1<T, Space>;

using swt::to_device2;

// One batch of B problems: points, weights, and each problem's dense cost.
struct Problems {
  int B = 0, n = 0, k = 0, d = 0;
  Batch x, y;                // (B, n, d), (B, k, d)
  std::vector<double> a, b;  // (B, n), (B, k)
  std::vector<double> cost;  // (B, n, k)
  double half = 1.0;         // the cost's factor c
  ref::OTProblem problem(int p, double eps, double rho_a = INFINITY,
                         double rho_b = INFINITY) const {
    ref::OTProblem q;
    q.n = n;
    q.k = k;
    q.cost.assign(cost.begin() + std::size_t(p) * n * k,
                  cost.begin() + std::size_t(p + 1) * n * k);
    q.a.assign(a.begin() + std::size_t(p) * n,
               a.begin() + std::size_t(p + 1) * n);
    q.b.assign(b.begin() + std::size_t(p) * k,
               b.begin() + std::size_t(p + 1) * k);
    if (std::isinf(rho_a) && std::isinf(rho_b)) {
      // Balanced needs equal masses, which weights rounded to float only
      // have to ~1e-7: the reference takes b at a's mass exactly.
      double ma = 0, mb = 0;
      for (double e : q.a) ma += e;
      for (double e : q.b) mb += e;
      for (double& e : q.b) e *= ma / mb;
    }
    q.eps = eps;
    q.rho_a = rho_a;
    q.rho_b = rho_b;
    return q;
  }
};

template <class T>
void round_all(Problems& p) {
  swt::round_to<T>(p.x);
  swt::round_to<T>(p.y);
  for (double& e : p.a) e = double(T(e));
  for (double& e : p.b) e = double(T(e));
}

// Each problem's dense cost from its points.
void recompute_cost(Problems& p) {
  p.cost.assign(std::size_t(p.B) * p.n * p.k, 0);
  for (int q = 0; q < p.B; ++q)
    for (int i = 0; i < p.n; ++i)
      for (int j = 0; j < p.k; ++j) {
        double s = 0;
        for (int c = 0; c < p.d; ++c) {
          double const diff = p.x(q, i, c) - p.y(q, j, c);
          s += diff * diff;
        }
        p.cost[(std::size_t(q) * p.n + i) * p.k + j] = p.half * s;
      }
}

// Random problems; weights positive and summing to 1 (to `mass_b` for b).
template <class T>
Problems random_problems(Rng& rng, int B, int n, int k, int d, double half,
                         double mass_b = 1.0) {
  Problems p;
  p.B = B, p.n = n, p.k = k, p.d = d, p.half = half;
  p.x = swt::random_batch(rng, B, n, d);
  p.y = swt::random_batch(rng, B, k, d, 0.2, 1.3);
  auto weights = [&](int count, double mass) {
    std::vector<double> w(std::size_t(B) * count);
    for (int q = 0; q < B; ++q) {
      double sum = 0;
      for (int i = 0; i < count; ++i)
        sum += w[q * count + i] = rng.uniform(0.2, 1);
      for (int i = 0; i < count; ++i) w[q * count + i] *= mass / sum;
    }
    return w;
  };
  p.a = weights(n, 1.0);
  p.b = weights(k, mass_b);
  round_all<T>(p);
  recompute_cost(p);
  return p;
}

// The library's inputs for one cost form.
enum class Form { points, matrix, low_rank };

template <class T, class Space>
struct DeviceProblems {
  V3<T, Space> x, y, cost, p, q;
  V2<T, Space> u, v, a, b;
  softwave::PointCost point_cost;

  DeviceProblems(const Space& space, const Problems& pr) {
    x = swt::to_device<T>(space, pr.x);
    y = swt::to_device<T>(space, pr.y);
    a = to_device2<T, Space>(pr.a, pr.B, pr.n);
    b = to_device2<T, Space>(pr.b, pr.B, pr.k);
    Batch c(pr.B, pr.n, pr.k);
    c.v = pr.cost;
    swt::round_to<T>(c);
    cost = swt::to_device<T>(space, c);
    // ½‖x − y‖²·(2c) = c‖x‖² + c‖y‖² − 2c x·y: u, v and P = 2c x, Q = y.
    std::vector<double> uu(std::size_t(pr.B) * pr.n),
        vv(std::size_t(pr.B) * pr.k);
    Batch pp = pr.x;
    for (int q = 0; q < pr.B; ++q) {
      for (int i = 0; i < pr.n; ++i) {
        double s = 0;
        for (int c2 = 0; c2 < pr.d; ++c2) {
          s += pr.x(q, i, c2) * pr.x(q, i, c2);
          pp(q, i, c2) = 2 * pr.half * pr.x(q, i, c2);
        }
        uu[std::size_t(q) * pr.n + i] = pr.half * s;
      }
      for (int j = 0; j < pr.k; ++j) {
        double s = 0;
        for (int c2 = 0; c2 < pr.d; ++c2) s += pr.y(q, j, c2) * pr.y(q, j, c2);
        vv[std::size_t(q) * pr.k + j] = pr.half * s;
      }
    }
    u = to_device2<T, Space>(uu, pr.B, pr.n);
    v = to_device2<T, Space>(vv, pr.B, pr.k);
    p = swt::to_device<T>(space, pp);
    q = y;
    point_cost = pr.half == 1.0 ? softwave::PointCost::sqeuclidean
                                : softwave::PointCost::half_sqeuclidean;
  }
  softwave::PointClouds<T, Space> points() const { return {x, y, point_cost}; }
  softwave::CostMatrix<T, Space> matrix() const { return {cost}; }
  softwave::LowRankCost<T, Space> low_rank() const { return {u, v, p, q}; }
  softwave::Marginals<T, Space> marginals() const { return {a, b}; }
};

struct Solved {
  std::vector<double> f, g, value, transport, errors, iterations, converged;
};

template <class T, class Space, class FormT>
Solved solve(const Space& space, const FormT& form,
             const softwave::Marginals<T, Space>& m, int B, int n, int k,
             const softwave::SinkhornOptions& o,
             const std::vector<double>* warm_f = nullptr,
             const std::vector<double>* warm_g = nullptr) {
  softwave::SinkhornResult<T, Space> r;
  r.f = warm_f ? to_device2<T, Space>(*warm_f, B, n) : V2<T, Space>("f", B, n);
  r.g = warm_g ? to_device2<T, Space>(*warm_g, B, k) : V2<T, Space>("g", B, k);
  r.value = V1<T, Space>("value", B);
  r.transport_cost = V1<T, Space>("transport", B);
  r.marginal_error = V2<T, Space>("errors", B, 2);
  r.iterations = V1<int, Space>("iterations", B);
  r.converged = V1<int, Space>("converged", B);
  softwave::sinkhorn(space, form, m, r, o);
  return {swt::to_host(r.f),
          swt::to_host(r.g),
          swt::to_host(r.value),
          swt::to_host(r.transport_cost),
          swt::to_host(r.marginal_error),
          swt::to_host(r.iterations),
          swt::to_host(r.converged)};
}

template <class T, class Space, class FormT>
std::vector<double> dense_plan(const Space& space, const FormT& form,
                               const softwave::Marginals<T, Space>& m,
                               const Solved& s, int B, int n, int k,
                               const softwave::SinkhornOptions& o) {
  softwave::PlanQueries<T, Space> queries;
  queries.plan = V3<T, Space>("plan", B, n, k);
  auto const f = to_device2<T, Space>(s.f, B, n);
  auto const g = to_device2<T, Space>(s.g, B, k);
  softwave::sinkhorn_plan_queries(space, form, m, V2<const T, Space>(f),
                                  V2<const T, Space>(g), queries, o);
  return swt::to_host(queries.plan);
}

template <class T>
double tolerance() {
  return std::is_same_v<T, double> ? 1e-12 : 2e-5;
}
template <class T>
double rtol() {
  return std::is_same_v<T, double> ? 1e-7 : 3e-3;
}

template <class P>
class Sinkhorn : public ::testing::Test {};
TYPED_TEST_SUITE(Sinkhorn, swt::ExecutionSpacesDoubleFloat);

// Every form against the reference: plan, value (= the primal objective at
// the optimum), transport cost, marginal errors, converged.
template <class T, class Space>
void check_against_reference(
    const Space& space, Rng& rng, int B, int n, int k, int d, double half,
    double eps, double rho_a, double rho_b, double mass_b,
    std::initializer_list<Form> forms = {Form::points, Form::matrix,
                                         Form::low_rank},
    softwave::Kernel kernel = softwave::Kernel::automatic) {
  SCOPED_TRACE(::testing::Message()
               << "B " << B << " n " << n << " k " << k << " d " << d
               << " half " << half << " eps " << eps << " rho " << rho_a << "/"
               << rho_b << " kernel " << int(kernel));
  auto const pr = random_problems<T>(rng, B, n, k, d, half, mass_b);
  DeviceProblems<T, Space> dev(space, pr);
  softwave::SinkhornOptions o;
  o.epsilon = eps;
  o.rho_a = rho_a;
  o.rho_b = rho_b;
  o.tolerance = tolerance<T>();
  o.max_iterations = 50000;
  o.check_every = 5;
  o.kernel = kernel;
  std::vector<ref::OTSolution> expected;
  for (int q = 0; q < B; ++q)
    expected.push_back(ref::solve_ot(pr.problem(q, eps, rho_a, rho_b)));
  for (Form form : forms) {
    SCOPED_TRACE(::testing::Message() << "form " << int(form));
    Solved s;
    std::vector<double> plan;
    auto const m = dev.marginals();
    if (form == Form::points) {
      s = solve(space, dev.points(), m, B, n, k, o);
      plan = dense_plan(space, dev.points(), m, s, B, n, k, o);
    } else if (form == Form::matrix) {
      s = solve(space, dev.matrix(), m, B, n, k, o);
      plan = dense_plan(space, dev.matrix(), m, s, B, n, k, o);
    } else {
      s = solve(space, dev.low_rank(), m, B, n, k, o);
      plan = dense_plan(space, dev.low_rank(), m, s, B, n, k, o);
    }
    for (int q = 0; q < B; ++q) {
      auto const& e = expected[q];
      std::vector<double> got(plan.begin() + std::size_t(q) * n * k,
                              plan.begin() + std::size_t(q + 1) * n * k);
      // The low-rank form cancels ‖x‖² + ‖y‖² against 2x·y: in float its
      // costs carry that rounding, scaled by 1/ε in the plan.
      double const scale =
          form == Form::low_rank && std::is_same_v<T, float> ? 10.0 : 1.0;
      EXPECT_TRUE(
          swt::near_arrays(got, e.plan, scale * rtol<T>(), 0.0, "plan"));
      EXPECT_TRUE(swt::near_values(std::vector<double>{s.value[q]},
                                   std::vector<double>{e.dual},
                                   scale * rtol<T>(), eps, "value"));
      EXPECT_TRUE(swt::near_values(std::vector<double>{e.dual},
                                   std::vector<double>{e.primal}, 1e-8, eps,
                                   "reference dual vs primal"));
      EXPECT_TRUE(swt::near_values(std::vector<double>{s.transport[q]},
                                   std::vector<double>{e.transport},
                                   scale * rtol<T>(), eps, "transport"));
      EXPECT_EQ(s.converged[q], 1);
      EXPECT_GE(s.iterations[q], 1);
      if (std::isinf(rho_a)) EXPECT_LE(s.errors[2 * q], 10 * tolerance<T>());
      if (std::isinf(rho_b))
        EXPECT_LE(s.errors[2 * q + 1], 10 * tolerance<T>());
    }
  }
}

TYPED_TEST(Sinkhorn, BalancedMatchesReferenceInEveryForm) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const shapes[][4] = {{1, 1, 1, 1},
                           {2, 7, 5, 2},
                           {3, 40, 33, 3},
                           {1, 150, 97, 1},
                           {2, 70, 300, 5},
                           {1, 20, 18, 17},
                           // columns split across teams, merged after
                           {1, 20, 1500, 2}};
  for (auto const& s : shapes)
    for (double half : {1.0, 0.5})
      check_against_reference<T>(space, rng, s[0], s[1], s[2], s[3], half,
                                 rng.uniform(0.05, 0.5) * s[3], INFINITY,
                                 INFINITY, 1.0);
}

TYPED_TEST(Sinkhorn, UnbalancedAndSemiRelaxedMatchReference) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  check_against_reference<T>(space, rng, 2, 30, 25, 2, 1.0, 0.1, 0.5, 2.0, 1.7);
  check_against_reference<T>(space, rng, 1, 64, 50, 3, 0.5, 0.2, INFINITY, 1.0,
                             1.3);
  check_against_reference<T>(space, rng, 2, 17, 90, 1, 1.0, 0.05, 0.3, INFINITY,
                             0.6);
}

// ε relative to the cost scale is ε·max C; ε-scaling anneals to the same
// answer; a warm start from a nearby solution takes fewer iterations.
TYPED_TEST(Sinkhorn, RelativeEpsilonAnnealingAndWarmStart) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const B = 2, n = 60, k = 45, d = 2;
  auto pr = random_problems<T>(rng, B, n, k, d, 1.0);
  DeviceProblems<T, Space> dev(space, pr);
  softwave::SinkhornOptions o;
  o.tolerance = tolerance<T>();
  o.max_iterations = 50000;
  o.check_every = 1;
  o.epsilon = 0.02;
  o.epsilon_relative = true;
  auto const relative = solve(space, dev.points(), dev.marginals(), B, n, k, o);
  for (int q = 0; q < B; ++q) {
    double cmax = 0;
    for (int e = 0; e < n * k; ++e)
      cmax = std::max(cmax, pr.cost[std::size_t(q) * n * k + e]);
    auto const expected = ref::solve_ot(pr.problem(q, 0.02 * cmax));
    EXPECT_TRUE(swt::near_values(std::vector<double>{relative.value[q]},
                                 std::vector<double>{expected.dual}, rtol<T>(),
                                 0.02 * cmax, "relative epsilon"));
  }
  o.epsilon_scaling = 0.7;
  auto const annealed = solve(space, dev.points(), dev.marginals(), B, n, k, o);
  EXPECT_TRUE(swt::near_values(annealed.value, relative.value, rtol<T>(), 0.01,
                               "annealed"));
  for (int q = 0; q < B; ++q) EXPECT_EQ(annealed.converged[q], 1);

  // A nearby problem: move the target points a little.
  o.epsilon_scaling = 0;
  Problems moved = pr;
  for (double& e : moved.y.v) e += rng.uniform(-1e-3, 1e-3);
  swt::round_to<T>(moved.y);
  recompute_cost(moved);
  DeviceProblems<T, Space> dev2(space, moved);
  auto const cold = solve(space, dev2.points(), dev2.marginals(), B, n, k, o);
  o.warm_start = true;
  auto const warm = solve(space, dev2.points(), dev2.marginals(), B, n, k, o,
                          &relative.f, &relative.g);
  for (int q = 0; q < B; ++q) {
    EXPECT_EQ(warm.converged[q], 1);
    EXPECT_LT(warm.iterations[q], cold.iterations[q]);
  }
  EXPECT_TRUE(swt::near_values(warm.value, cold.value, rtol<T>(), 0.01,
                               "warm vs cold"));
}

// An iteration budget too small leaves converged = 0 and says so; a
// problem of a batch that converges early stops there.
TYPED_TEST(Sinkhorn, ConvergedIsHonest) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  auto const pr = random_problems<T>(rng, 2, 50, 40, 2, 1.0);
  DeviceProblems<T, Space> dev(space, pr);
  softwave::SinkhornOptions o;
  o.epsilon = 0.01;
  o.tolerance = tolerance<T>();
  o.max_iterations = 3;
  o.check_every = 1;
  auto const s = solve(space, dev.points(), dev.marginals(), 2, 50, 40, o);
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(s.converged[q], 0);
    EXPECT_EQ(s.iterations[q], 3);
    EXPECT_GT(s.errors[2 * q], tolerance<T>());
  }
  o.tolerance = 0;  // fixed iterations: never "converged" unless exact
  o.max_iterations = 7;
  auto const fixed = solve(space, dev.points(), dev.marginals(), 2, 50, 40, o);
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(fixed.iterations[q], 7);
    EXPECT_EQ(fixed.converged[q], 0);
  }
}

// Whether the vendor-specialised updates take T point clouds on Space
// (the CUDA backend's float updates).
template <class T, class Space>
constexpr bool specialised_updates() {
#if defined(KOKKOS_ENABLE_CUDA)
  return std::is_same_v<Space, Kokkos::Cuda> && std::is_same_v<T, float>;
#else
  return false;
#endif
}

// Runs f once for each variant of the CUDA tensor-core sums kernel (16-row
// tiles a warp: 1 and 2 where they fit, set_tensor_row_tiles; scaled FP16
// and TF32 operands, set_tensor_operands), and once on other backends.
template <class F>
void for_each_tensor_variant(const F& f) {
#if defined(KOKKOS_ENABLE_CUDA)
  namespace cs = softwave::impl::cuda_sinkhorn;
  struct Restore {
    ~Restore() {
      cs::set_tensor_row_tiles(0);
      cs::set_tensor_operands(cs::TensorOperands::fp16);
    }
  } const restore;
  for (auto operands : {cs::TensorOperands::fp16, cs::TensorOperands::tf32})
    for (int tiles : {1, 2}) {
      cs::set_tensor_operands(operands);
      cs::set_tensor_row_tiles(tiles);
      SCOPED_TRACE(::testing::Message()
                   << "row tiles " << tiles << " operands " << int(operands));
      f();
    }
#else
  f();
#endif
}

// The kernels to try: the portable ones, and the specialised updates where
// they exist.
template <class T, class Space>
std::vector<softwave::Kernel> kernels() {
  if (specialised_updates<T, Space>())
    return {softwave::Kernel::portable, softwave::Kernel::specialised};
  return {softwave::Kernel::portable};
}

// float32 at ε = 1e-4 of the cost scale: every output finite, on every
// kernel (the specialised updates' shifted sums leave the safe range there
// in the first iterations and at every annealing step).
TYPED_TEST(Sinkhorn, SmallEpsilonStaysFinite) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const B = 2, n = 80, k = 70;
  auto const pr = random_problems<T>(rng, B, n, k, 3, 1.0);
  DeviceProblems<T, Space> dev(space, pr);
  softwave::SinkhornOptions o;
  o.epsilon = 1e-4;
  o.epsilon_relative = true;
  o.max_iterations = 300;
  o.tolerance = 1e-3;
  for (auto kernel : kernels<T, Space>()) {
    o.kernel = kernel;
    for (bool annealed : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << "kernel " << int(kernel) << " annealed " << annealed);
      o.epsilon_scaling = annealed ? 0.5 : 0;
      auto const s = solve(space, dev.points(), dev.marginals(), B, n, k, o);
      for (auto const* v : {&s.f, &s.g, &s.value, &s.transport, &s.errors})
        for (double e : *v) EXPECT_TRUE(std::isfinite(e)) << e;
    }
  }
}

// The specialised updates against the reference (balanced, unbalanced,
// semi-relaxed, d from 1 to 16, several row blocks and column parts, a
// batch), and their tensor-core products (d > 16) against the portable
// kernels; where they do not exist, insisting on them is an argument error
// naming `kernel`.
TYPED_TEST(Sinkhorn, SpecialisedUpdatesMatchReference) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  auto const specialised = softwave::Kernel::specialised;
  // Insisting on them for a small problem: the error names `name`.
  auto const refused = [&](const char* name, bool points) {
    auto const pr = random_problems<T>(rng, 1, 5, 4, 2, 1.0);
    DeviceProblems<T, Space> dev(space, pr);
    softwave::SinkhornOptions o;
    o.kernel = specialised;
    EXPECT_TRUE(swt::throws_naming(name, [&]() {
      if (points)
        solve(space, dev.points(), dev.marginals(), 1, 5, 4, o);
      else
        solve(space, dev.matrix(), dev.marginals(), 1, 5, 4, o);
    }));
  };
  if (!specialised_updates<T, Space>()) {
    refused("kernel = specialised", true);
    return;
  }
  check_against_reference<T>(space, rng, 2, 600, 530, 3, 1.0, 0.1, INFINITY,
                             INFINITY, 1.0, {Form::points}, specialised);
  check_against_reference<T>(space, rng, 1, 37, 1300, 1, 0.5, 0.05, INFINITY,
                             INFINITY, 1.0, {Form::points}, specialised);
  check_against_reference<T>(space, rng, 3, 700, 90, 2, 1.0, 0.08, 0.5, 2.0,
                             1.4, {Form::points}, specialised);
  check_against_reference<T>(space, rng, 1, 520, 640, 16, 0.5, 2.0, INFINITY,
                             1.0, 0.7, {Form::points}, specialised);
  check_against_reference<T>(space, rng, 1, 1100, 515, 5, 1.0, 0.2, 0.3,
                             INFINITY, 1.0, {Form::points}, specialised);
  // Low-rank costs: exact FP32 products at every rank (16 and below as the
  // points', rounded up to 16 above, 64 columns a tile above 80).
  check_against_reference<T>(space, rng, 2, 600, 530, 3, 1.0, 0.1, INFINITY,
                             INFINITY, 1.0, {Form::low_rank}, specialised);
  check_against_reference<T>(space, rng, 1, 520, 700, 40, 0.5, 2.0, 0.5,
                             INFINITY, 1.0, {Form::low_rank}, specialised);
  check_against_reference<T>(space, rng, 1, 530, 600, 100, 0.5, 5.0, INFINITY,
                             INFINITY, 1.0, {Form::low_rank}, specialised);
  // d > 16: x·y on tensor cores with 10-bit mantissas (TF32, or FP16
  // scaled by powers of two into its range), so the answer is the portable
  // one to that accuracy, after the same fixed number of iterations;
  // likewise low-rank costs with tf32_low_rank (ranks 17 to 128, rounded up
  // to 16). `magnitude` scales the points (and ε by its square): at 2^20
  // the centred coordinates pass FP16's largest value and the records'
  // fall below its smallest unless both are scaled.
  struct TensorCase {
    Form form;
    int d;
    double magnitude;
  };
  for (TensorCase const c :
       {TensorCase{Form::points, 24, 1}, TensorCase{Form::points, 64, 1},
        TensorCase{Form::points, 40, 1048576},
        TensorCase{Form::low_rank, 40, 1}, TensorCase{Form::low_rank, 80, 1},
        TensorCase{Form::low_rank, 100, 1}, TensorCase{Form::low_rank, 128, 1}})
    for_each_tensor_variant([&] {
      SCOPED_TRACE(::testing::Message()
                   << "tensor cores, form " << int(c.form) << " d " << c.d
                   << " magnitude " << c.magnitude);
      int const B = 2, n = 600, k = 530;
      auto pr = random_problems<T>(rng, B, n, k, c.d, 0.5);
      for (auto* side : {&pr.x, &pr.y})
        for (double& e : side->v) e *= c.magnitude;
      recompute_cost(pr);
      DeviceProblems<T, Space> dev(space, pr);
      softwave::SinkhornOptions o;
      o.epsilon = 0.05 * c.d * c.magnitude * c.magnitude;
      o.max_iterations = 200;
      o.tolerance = 0;
      o.tf32_low_rank = true;
      auto const run = [&](softwave::Kernel kernel) {
        o.kernel = kernel;
        return c.form == Form::points
                   ? solve(space, dev.points(), dev.marginals(), B, n, k, o)
                   : solve(space, dev.low_rank(), dev.marginals(), B, n, k, o);
      };
      auto const portable = run(softwave::Kernel::portable);
      auto const tensor = run(specialised);
      EXPECT_TRUE(
          swt::near_values(tensor.value, portable.value, 1e-2, 1e-3, "value"));
      EXPECT_TRUE(swt::near_values(tensor.transport, portable.transport, 1e-2,
                                   1e-3, "transport cost"));
      for (double e : tensor.errors) EXPECT_LT(e, 0.05);
    });
  refused("point clouds", false);  // a cost matrix: they do not take it
}

// The exact measurements of given potentials on every kernel (on CUDA at
// every d the specialised kernels take, tensor-core sizes and low-rank
// costs of rank 3 to 100 included, and ε well below the costs): the
// transport cost ⟨π, C⟩ and both marginal L1
// errors of the returned potentials against float64 sums over the dense
// plan π_ij = a_i b_j exp((f_i + g_j − C_ij)/ε), and the plan's marginals
// (plan queries, which read each row's measured log-sum-exp).
TYPED_TEST(Sinkhorn, MeasurementsMatchFloat64) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const B = 2, n = 600, k = 530;
  struct Case {
    Form form;
    int d;
  };
  std::vector<Case> const cases = {{Form::points, 1},    {Form::points, 3},
                                   {Form::points, 7},    {Form::points, 24},
                                   {Form::points, 64},   {Form::low_rank, 3},
                                   {Form::low_rank, 40}, {Form::low_rank, 100}};
  for (auto kernel : kernels<T, Space>())
    for (Case const& c : cases) {
      // (named copies: a lambda below uses them, which C++17 does not allow
      // of structured bindings)
      Form const form = c.form;
      int const d = c.d;
      SCOPED_TRACE(::testing::Message() << "kernel " << int(kernel) << " form "
                                        << int(form) << " d " << d);
      double const eps = 0.02 * d;
      for (double rho : {double(INFINITY), 0.5}) {
        SCOPED_TRACE(::testing::Message() << "rho " << rho);
        auto const pr = random_problems<T>(rng, B, n, k, d, 0.5);
        DeviceProblems<T, Space> dev(space, pr);
        softwave::SinkhornOptions o;
        o.epsilon = eps;
        o.rho_a = o.rho_b = rho;
        o.tolerance = 0;
        o.max_iterations = 3;  // potentials far from converged
        o.kernel = kernel;
        // The whole check for one public form (points or low_rank).
        auto check = [&](const auto& costs) {
          auto const s = solve(space, costs, dev.marginals(), B, n, k, o);
          std::vector<double> transport(B, 0), errors(2 * B, 0);
          std::vector<double> row_mass(std::size_t(B) * n, 0),
              column_mass(std::size_t(B) * k, 0);
          for (int q = 0; q < B; ++q) {
            for (int i = 0; i < n; ++i)
              for (int j = 0; j < k; ++j) {
                double const c = pr.cost[(std::size_t(q) * n + i) * k + j];
                double const pij =
                    pr.a[q * n + i] * pr.b[q * k + j] *
                    std::exp((s.f[q * n + i] + s.g[q * k + j] - c) / eps);
                transport[q] += pij * c;
                row_mass[q * n + i] += pij;
                column_mass[q * k + j] += pij;
              }
            for (int i = 0; i < n; ++i)
              errors[2 * q] += std::fabs(row_mass[q * n + i] - pr.a[q * n + i]);
            for (int j = 0; j < k; ++j)
              errors[2 * q + 1] +=
                  std::fabs(column_mass[q * k + j] - pr.b[q * k + j]);
          }
          // A low-rank cost cancels u_i + v_j against p_i·q_j: in float its
          // costs carry that rounding, scaled by 1/ε.
          double const loose = std::is_same_v<T, double> ? 1e-10
                               : form == Form::low_rank  ? 1e-3
                                                         : 1e-4;
          EXPECT_TRUE(
              swt::near_values(s.transport, transport, loose, 0, "transport"));
          EXPECT_TRUE(swt::near_values(s.errors, errors, loose, 0.2, "errors"));

          softwave::PlanQueries<T, Space> qs;
          V3<T, Space> const ones_k("ones_k", B, k, 1),
              ones_n("ones_n", B, n, 1);
          Kokkos::deep_copy(ones_k, T(1));
          Kokkos::deep_copy(ones_n, T(1));
          qs.v = ones_k;
          qs.u = ones_n;
          qs.plan_v = V3<T, Space>("row_mass", B, n, 1);
          qs.plan_t_u = V3<T, Space>("column_mass", B, k, 1);
          auto const f = to_device2<T, Space>(s.f, B, n);
          auto const g = to_device2<T, Space>(s.g, B, k);
          softwave::sinkhorn_plan_queries(space, costs, dev.marginals(),
                                          V2<const T, Space>(f),
                                          V2<const T, Space>(g), qs, o);
          EXPECT_TRUE(swt::near_values(swt::to_host(qs.plan_v), row_mass, loose,
                                       0, "row masses"));
          EXPECT_TRUE(swt::near_values(swt::to_host(qs.plan_t_u), column_mass,
                                       loose, 0, "column masses"));
        };
        if (form == Form::points)
          check(dev.points());
        else
          check(dev.low_rank());
      }
    }
}

// The plan's products (plan_v = π v, plan_t_u = πᵀu with m value columns;
// 70 is more than one pass of the CUDA-specialised sums) and the gradients
// w.r.t. positions (points: 2c Σ_j π_ij (x_i − y_j); a low-rank cost:
// −Σ_j π_ij q_j and −Σ_i π_ij p_i) and w.r.t. the weights on every
// kernel, against float64 sums over the dense plan of the given
// potentials; d from 1 to 64 and ranks 3
// to 100 (the specialised sums take up to 64, the portable passes above).
// Zero potentials at a small ε put every row's sum under its potential's
// shift below the safe range: the specialised sums' exact rows then.
TYPED_TEST(Sinkhorn, PlanProductsAndGradientsMatchFloat64) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const B = 2, n = 560, k = 530;
  struct Case {
    Form form;
    int d, m;
    bool zero_potentials = false;
  };
  std::vector<Case> const cases = {
      {Form::points, 1, 5},       {Form::points, 3, 70},
      {Form::points, 16, 1},      {Form::points, 24, 20},
      {Form::points, 64, 5},      {Form::low_rank, 3, 17},
      {Form::low_rank, 40, 5},    {Form::low_rank, 100, 2},
      {Form::points, 3, 5, true}, {Form::low_rank, 40, 5, true}};
  for (auto kernel : kernels<T, Space>())
    for (Case const& c : cases) {
      Form const form = c.form;
      int const d = c.d, m = c.m;
      bool const zero = c.zero_potentials;
      SCOPED_TRACE(::testing::Message()
                   << "kernel " << int(kernel) << " form " << int(form) << " d "
                   << d << " m " << m << " zero potentials " << zero);
      double const eps = (zero ? 0.002 : 0.02) * d;
      auto const pr = random_problems<T>(rng, B, n, k, d, 0.5);
      DeviceProblems<T, Space> dev(space, pr);
      softwave::SinkhornOptions o;
      o.epsilon = eps;
      o.tolerance = 0;
      o.max_iterations = 3;  // potentials far from converged
      o.kernel = kernel;
      auto random_values = [&](int rows) {
        Batch values = swt::random_batch(rng, B, rows, m, -1.0, 1.0);
        swt::round_to<T>(values);
        return values;
      };
      Batch const v = random_values(k), u = random_values(n);
      // The whole check for one public form (points or low_rank).
      auto check = [&](const auto& costs) {
        Solved s;
        if (zero) {
          s.f.assign(std::size_t(B) * n, 0.0);
          s.g.assign(std::size_t(B) * k, 0.0);
        } else {
          s = solve(space, costs, dev.marginals(), B, n, k, o);
        }
        std::vector<double> plan(std::size_t(B) * n * k);
        for (int q = 0; q < B; ++q)
          for (int i = 0; i < n; ++i)
            for (int j = 0; j < k; ++j) {
              std::size_t const at = (std::size_t(q) * n + i) * k + j;
              plan[at] =
                  pr.a[q * n + i] * pr.b[q * k + j] *
                  std::exp((s.f[q * n + i] + s.g[q * k + j] - pr.cost[at]) /
                           eps);
            }
        // Σ_j π_ij Z_jc (rows) or Σ_i π_ij Z_ic (columns), for Z of `width`
        // columns given by z(q, row, c).
        auto products = [&](bool rows, int width, auto z) {
          int const own = rows ? n : k, other = rows ? k : n;
          std::vector<double> out(std::size_t(B) * own * width, 0);
          for (int q = 0; q < B; ++q)
            for (int i = 0; i < own; ++i)
              for (int j = 0; j < other; ++j) {
                double const pij =
                    plan[(std::size_t(q) * n + (rows ? i : j)) * k +
                         (rows ? j : i)];
                for (int c2 = 0; c2 < width; ++c2)
                  out[(std::size_t(q) * own + i) * width + c2] +=
                      pij * z(q, i, j, c2);
              }
          return out;
        };
        double const rtol = std::is_same_v<T, double> ? 1e-10
                            : form == Form::low_rank  ? 1e-3
                                                      : 1e-4;

        softwave::PlanQueries<T, Space> qs;
        qs.v = swt::to_device<T>(space, v);
        qs.u = swt::to_device<T>(space, u);
        qs.plan_v = V3<T, Space>("plan_v", B, n, m);
        qs.plan_t_u = V3<T, Space>("plan_t_u", B, k, m);
        auto const f = to_device2<T, Space>(s.f, B, n);
        auto const g = to_device2<T, Space>(s.g, B, k);
        softwave::sinkhorn_plan_queries(space, costs, dev.marginals(),
                                        V2<const T, Space>(f),
                                        V2<const T, Space>(g), qs, o);
        EXPECT_TRUE(swt::near_arrays(
            swt::to_host(qs.plan_v),
            products(true, m,
                     [&](int q, int, int j, int c2) { return v(q, j, c2); }),
            rtol, 0, "plan_v"));
        EXPECT_TRUE(swt::near_arrays(
            swt::to_host(qs.plan_t_u),
            products(false, m,
                     [&](int q, int, int i, int c2) { return u(q, i, c2); }),
            rtol, 0, "plan_t_u"));

        softwave::SinkhornGradients<T, Space> grads;
        V3<T, Space> const rows("grad_rows", B, n, d),
            columns("grad_columns", B, k, d);
        double const c2x = 2 * pr.half;  // ∂C/∂x = 2c(x − y); p = 2c x
        std::vector<double> want_rows, want_columns;
        if (form == Form::points) {
          grads.grad_x = rows;
          grads.grad_y = columns;
          want_rows = products(true, d, [&](int q, int i, int j, int e) {
            return c2x * (pr.x(q, i, e) - pr.y(q, j, e));
          });
          want_columns = products(false, d, [&](int q, int j, int i, int e) {
            return c2x * (pr.y(q, j, e) - pr.x(q, i, e));
          });
        } else {
          grads.grad_p = rows;
          grads.grad_q = columns;
          want_rows = products(true, d, [&](int q, int, int j, int e) {
            return -pr.y(q, j, e);
          });
          want_columns = products(false, d, [&](int q, int, int i, int e) {
            return -double(T(c2x * pr.x(q, i, e)));
          });
        }
        // The weights' terms read the log-sum-exps the positions' sums
        // find: grad_a_i = f_i − ε((π1)_i / a_i − Σ b), and likewise b's.
        grads.grad_a = V2<T, Space>("grad_a", B, n);
        grads.grad_b = V2<T, Space>("grad_b", B, k);
        auto weight_terms = [&](bool rows_side) {
          int const own = rows_side ? n : k, other = rows_side ? k : n;
          auto const& own_weight = rows_side ? pr.a : pr.b;
          auto const& other_weight = rows_side ? pr.b : pr.a;
          auto const& potential = rows_side ? s.f : s.g;
          auto const mass =
              products(rows_side, 1, [](int, int, int, int) { return 1.0; });
          std::vector<double> out(std::size_t(B) * own);
          for (int q = 0; q < B; ++q) {
            double other_mass = 0;
            for (int j = 0; j < other; ++j)
              other_mass += other_weight[std::size_t(q) * other + j];
            for (int i = 0; i < own; ++i) {
              std::size_t const at = std::size_t(q) * own + i;
              out[at] = potential[at] -
                        eps * (mass[at] / own_weight[at] - other_mass);
            }
          }
          return out;
        };
        softwave::sinkhorn_gradients(space, costs, dev.marginals(),
                                     V2<const T, Space>(f),
                                     V2<const T, Space>(g), grads, o);
        EXPECT_TRUE(swt::near_arrays(swt::to_host(rows), want_rows, rtol, 0,
                                     "gradient of the rows' positions"));
        EXPECT_TRUE(swt::near_arrays(swt::to_host(columns), want_columns, rtol,
                                     0, "gradient of the columns' positions"));
        EXPECT_TRUE(swt::near_arrays(swt::to_host(grads.grad_a),
                                     weight_terms(true), rtol, 0,
                                     "gradient of a"));
        EXPECT_TRUE(swt::near_arrays(swt::to_host(grads.grad_b),
                                     weight_terms(false), rtol, 0,
                                     "gradient of b"));
      };
      if (form == Form::points)
        check(dev.points());
      else
        check(dev.low_rank());
    }
}

// Gradients of the value against central differences of re-solved values.
TYPED_TEST(Sinkhorn, GradientsMatchFiniteDifferences) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  if (!std::is_same_v<T, double>) GTEST_SKIP() << "float64 only (differences)";
  SWT_SEEDED_RNG(rng);
  Space space;
  int const B = 2, n = 6, k = 5, d = 2;
  for (double rho : {double(INFINITY), 0.7}) {
    SCOPED_TRACE(::testing::Message() << "rho " << rho);
    auto const pr = random_problems<T>(rng, B, n, k, d, 1.0);
    softwave::SinkhornOptions o;
    o.epsilon = 0.15;
    o.rho_a = o.rho_b = rho;
    o.tolerance = 1e-14;
    o.max_iterations = 100000;
    o.check_every = 5;
    std::vector<double> go = {0.7, -1.3};
    auto objective = [&](const Problems& p) {
      DeviceProblems<T, Space> dv(space, p);
      auto const s = solve(space, dv.points(), dv.marginals(), B, n, k, o);
      return go[0] * s.value[0] + go[1] * s.value[1];
    };
    DeviceProblems<T, Space> dev(space, pr);
    auto const s = solve(space, dev.points(), dev.marginals(), B, n, k, o);
    softwave::SinkhornGradients<T, Space> grads;
    grads.grad_x = V3<T, Space>("gx", B, n, d);
    grads.grad_y = V3<T, Space>("gy", B, k, d);
    grads.grad_a = V2<T, Space>("ga", B, n);
    grads.grad_b = V2<T, Space>("gb", B, k);
    grads.grad_output = swt::to_device<T>(space, go);
    auto const f = to_device2<T, Space>(s.f, B, n);
    auto const g = to_device2<T, Space>(s.g, B, k);
    softwave::sinkhorn_gradients(space, dev.points(), dev.marginals(),
                                 V2<const T, Space>(f), V2<const T, Space>(g),
                                 grads, o);
    double const h = 1e-5;
    std::vector<double> fd_x, fd_y;
    for (int q = 0; q < B; ++q)
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < d; ++c) {
          Problems p = pr, m = pr;
          p.x(q, i, c) += h;
          m.x(q, i, c) -= h;
          fd_x.push_back((objective(p) - objective(m)) / (2 * h));
        }
    EXPECT_TRUE(swt::near_arrays(swt::to_host(grads.grad_x), fd_x, 1e-6, 1e-3,
                                 "grad_x"));
    for (int q = 0; q < B; ++q)
      for (int j = 0; j < k; ++j)
        for (int c = 0; c < d; ++c) {
          Problems p = pr, m = pr;
          p.y(q, j, c) += h;
          m.y(q, j, c) -= h;
          fd_y.push_back((objective(p) - objective(m)) / (2 * h));
        }
    EXPECT_TRUE(swt::near_arrays(swt::to_host(grads.grad_y), fd_y, 1e-6, 1e-3,
                                 "grad_y"));
    // Weights: balanced problems need equal masses, so move mass between two
    // points (the directional derivative); relaxed ones take any direction.
    // side 0: a (n weights), 1: b (k weights).
    auto check_weights = [&](int side, const std::vector<double>& analytic) {
      int const count = side == 0 ? n : k;
      for (int q = 0; q < B; ++q)
        for (int i = 1; i < count; ++i) {
          Problems p = pr, m = pr;
          auto& wp = side == 0 ? p.a : p.b;
          auto& wm = side == 0 ? m.a : m.b;
          wp[q * count + i] += h;
          wm[q * count + i] -= h;
          if (std::isinf(rho)) {
            wp[q * count] -= h;
            wm[q * count] += h;
          }
          double const fd = (objective(p) - objective(m)) / (2 * h);
          double const an = analytic[q * count + i] -
                            (std::isinf(rho) ? analytic[q * count] : 0.0);
          EXPECT_NEAR(an, fd, 1e-6 * std::max(1.0, std::fabs(fd)))
              << (side == 0 ? "grad_a " : "grad_b ") << i;
        }
    };
    check_weights(0, swt::to_host(grads.grad_a));
    check_weights(1, swt::to_host(grads.grad_b));
  }
}

// Low-rank factors and the cost matrix: gradients against differences too.
TYPED_TEST(Sinkhorn, LowRankAndMatrixGradients) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  if (!std::is_same_v<T, double>) GTEST_SKIP() << "float64 only (differences)";
  SWT_SEEDED_RNG(rng);
  Space space;
  int const B = 1, n = 5, k = 4, r = 3;
  Batch p = swt::random_batch(rng, B, n, r),
        q = swt::random_batch(rng, B, k, r);
  std::vector<double> u(n), v(k), a(n, 1.0 / n), b(k, 1.0 / k);
  for (double& e : u) e = rng.uniform(0, 1);
  for (double& e : v) e = rng.uniform(0, 1);
  softwave::SinkhornOptions o;
  o.epsilon = 0.2;
  o.tolerance = 1e-14;
  o.max_iterations = 100000;
  auto value = [&](const Batch& pp, const Batch& qq,
                   const std::vector<double>& uu, const std::vector<double>& vv,
                   Solved* out = nullptr) {
    softwave::LowRankCost<T, Space> form{
        to_device2<T, Space>(uu, B, n), to_device2<T, Space>(vv, B, k),
        swt::to_device<T>(space, pp), swt::to_device<T>(space, qq)};
    softwave::Marginals<T, Space> m{to_device2<T, Space>(a, B, n),
                                    to_device2<T, Space>(b, B, k)};
    auto const s = solve(space, form, m, B, n, k, o);
    if (out) *out = s;
    return s.value[0];
  };
  Solved s;
  value(p, q, u, v, &s);
  softwave::LowRankCost<T, Space> form{
      to_device2<T, Space>(u, B, n), to_device2<T, Space>(v, B, k),
      swt::to_device<T>(space, p), swt::to_device<T>(space, q)};
  softwave::Marginals<T, Space> m{to_device2<T, Space>(a, B, n),
                                  to_device2<T, Space>(b, B, k)};
  softwave::SinkhornGradients<T, Space> grads;
  grads.grad_p = V3<T, Space>("gp", B, n, r);
  grads.grad_q = V3<T, Space>("gq", B, k, r);
  grads.grad_u = V2<T, Space>("gu", B, n);
  grads.grad_v = V2<T, Space>("gv", B, k);
  auto const f = to_device2<T, Space>(s.f, B, n);
  auto const g = to_device2<T, Space>(s.g, B, k);
  softwave::sinkhorn_gradients(space, form, m, V2<const T, Space>(f),
                               V2<const T, Space>(g), grads, o);
  double const h = 1e-5;
  // Central differences of value() over every entry of `values`, which
  // value() reads.
  auto differences = [&](std::vector<double>& values) {
    std::vector<double> fd;
    for (double& e : values) {
      double const keep = e;
      e = keep + h;
      double const up = value(p, q, u, v);
      e = keep - h;
      double const down = value(p, q, u, v);
      e = keep;
      fd.push_back((up - down) / (2 * h));
    }
    return fd;
  };
  EXPECT_TRUE(swt::near_arrays(swt::to_host(grads.grad_p), differences(p.v),
                               1e-6, 1e-3, "grad_p"));
  EXPECT_TRUE(swt::near_arrays(swt::to_host(grads.grad_q), differences(q.v),
                               1e-6, 1e-3, "grad_q"));
  EXPECT_TRUE(swt::near_arrays(swt::to_host(grads.grad_u), differences(u), 1e-6,
                               1e-3, "grad_u"));
  EXPECT_TRUE(swt::near_arrays(swt::to_host(grads.grad_v), differences(v), 1e-6,
                               1e-3, "grad_v"));

  // The cost matrix's gradient is the plan.
  auto const pr = random_problems<T>(rng, 2, 9, 7, 2, 1.0);
  DeviceProblems<T, Space> dev(space, pr);
  auto const sm = solve(space, dev.matrix(), dev.marginals(), 2, 9, 7, o);
  softwave::SinkhornGradients<T, Space> gm;
  gm.grad_cost = V3<T, Space>("gc", 2, 9, 7);
  auto const fm = to_device2<T, Space>(sm.f, 2, 9);
  auto const gg = to_device2<T, Space>(sm.g, 2, 7);
  softwave::sinkhorn_gradients(space, dev.matrix(), dev.marginals(),
                               V2<const T, Space>(fm), V2<const T, Space>(gg),
                               gm, o);
  auto const plan =
      dense_plan(space, dev.matrix(), dev.marginals(), sm, 2, 9, 7, o);
  EXPECT_TRUE(swt::near_arrays(swt::to_host(gm.grad_cost), plan, 1e-12, 0.0,
                               "grad_cost"));
}

// The plan's queries against the dense plan.
TYPED_TEST(Sinkhorn, PlanQueriesMatchDensePlan) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const B = 2, n = 37, k = 1100, m = 11;  // k: split rows too
  auto const pr = random_problems<T>(rng, B, n, k, 3, 0.5);
  DeviceProblems<T, Space> dev(space, pr);
  softwave::SinkhornOptions o;
  o.epsilon = 0.05;
  o.tolerance = tolerance<T>();
  o.max_iterations = 20000;
  auto const s = solve(space, dev.points(), dev.marginals(), B, n, k, o);
  auto const plan =
      dense_plan(space, dev.points(), dev.marginals(), s, B, n, k, o);
  Batch vv = swt::random_batch(rng, B, k, m, -1, 1),
        uu = swt::random_batch(rng, B, n, m, -1, 1);
  swt::round_to<T>(vv);
  swt::round_to<T>(uu);
  softwave::PlanQueries<T, Space> qs;
  qs.v = swt::to_device<T>(space, vv);
  qs.plan_v = V3<T, Space>("pv", B, n, m);
  qs.u = swt::to_device<T>(space, uu);
  qs.plan_t_u = V3<T, Space>("ptu", B, k, m);
  qs.row_argmax = V2<int, Space>("argmax", B, n);
  int const draws = 64;
  qs.row_samples = V3<int, Space>("samples", B, n, draws);
  qs.seed = rng.engine();
  auto const f = to_device2<T, Space>(s.f, B, n);
  auto const g = to_device2<T, Space>(s.g, B, k);
  softwave::sinkhorn_plan_queries(space, dev.points(), dev.marginals(),
                                  V2<const T, Space>(f), V2<const T, Space>(g),
                                  qs, o);
  std::vector<double> pv(std::size_t(B) * n * m, 0),
      ptu(std::size_t(B) * k * m, 0);
  std::vector<double> argmax(std::size_t(B) * n);
  for (int q = 0; q < B; ++q)
    for (int i = 0; i < n; ++i) {
      double best = -1;
      for (int j = 0; j < k; ++j) {
        double const pij = plan[(std::size_t(q) * n + i) * k + j];
        if (pij > best) best = pij, argmax[q * n + i] = j;
        for (int c = 0; c < m; ++c) {
          pv[(std::size_t(q) * n + i) * m + c] += pij * vv(q, j, c);
          ptu[(std::size_t(q) * k + j) * m + c] += pij * uu(q, i, c);
        }
      }
    }
  EXPECT_TRUE(
      swt::near_arrays(swt::to_host(qs.plan_v), pv, rtol<T>(), 0.0, "plan_v"));
  EXPECT_TRUE(swt::near_arrays(swt::to_host(qs.plan_t_u), ptu, rtol<T>(), 0.0,
                               "plan_t_u"));
  auto const am = swt::to_host(qs.row_argmax);
  int mismatched = 0;
  for (std::size_t e = 0; e < am.size(); ++e) mismatched += am[e] != argmax[e];
  // float may swap near-ties; double never.
  EXPECT_LE(mismatched, (std::is_same_v<T, double> ? 0 : 2));

  // Samples: within range, repeatable by seed, and distributed as the rows
  // of π (the mean of the sampled v's matches (πV)_i / (π1)_i).
  auto const samples = swt::to_host(qs.row_samples);
  softwave::sinkhorn_plan_queries(space, dev.points(), dev.marginals(),
                                  V2<const T, Space>(f), V2<const T, Space>(g),
                                  qs, o);
  EXPECT_EQ(swt::to_host(qs.row_samples), samples);
  double worst = 0;
  for (int q = 0; q < B; ++q)
    for (int i = 0; i < n; ++i) {
      double mass = 0, mean = 0, second = 0, sampled = 0;
      for (int j = 0; j < k; ++j) {
        double const pij = plan[(std::size_t(q) * n + i) * k + j];
        mass += pij;
        mean += pij * vv(q, j, 0);
        second += pij * vv(q, j, 0) * vv(q, j, 0);
      }
      mean /= mass;
      double const sd = std::sqrt(std::max(second / mass - mean * mean, 1e-12));
      for (int s2 = 0; s2 < draws; ++s2) {
        int const j = int(samples[(std::size_t(q) * n + i) * draws + s2]);
        ASSERT_GE(j, 0);
        ASSERT_LT(j, k);
        sampled += vv(q, j, 0);
      }
      worst = std::max(
          worst, std::fabs(sampled / draws - mean) / (sd / std::sqrt(draws)));
    }
  EXPECT_LT(worst, 5.0) << "largest sampled-mean deviation in standard errors";
}

// S_ε ≥ 0, = 0 for equal clouds; its gradients against differences.
TYPED_TEST(Sinkhorn, DivergenceIsZeroOnEqualCloudsAndDifferentiable) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const B = 2, n = 7, k = 6, d = 2;
  for (double rho : {double(INFINITY), 1.5}) {
    SCOPED_TRACE(::testing::Message() << "rho " << rho);
    auto const pr =
        random_problems<T>(rng, B, n, k, d, 0.5, std::isinf(rho) ? 1.0 : 1.4);
    softwave::SinkhornOptions o;
    o.epsilon = 0.1;
    o.rho_a = o.rho_b = rho;
    o.tolerance = tolerance<T>();
    o.max_iterations = 100000;
    auto divergence = [&](const Problems& p,
                          softwave::SinkhornGradients<T, Space>* gr) {
      DeviceProblems<T, Space> dv(space, p);
      V1<T, Space> values("values", B);
      V1<int, Space> converged("converged", B);
      softwave::sinkhorn_divergence(space, dv.points(), dv.marginals(), values,
                                    gr, o, converged);
      for (double c : swt::to_host(converged)) EXPECT_EQ(c, 1);
      return swt::to_host(values);
    };
    auto const values = divergence(pr, nullptr);
    for (double v : values) EXPECT_GT(v, 0);
    Problems same = pr;
    same.k = n;
    same.y = pr.x;
    same.b = pr.a;
    recompute_cost(same);
    for (double v : divergence(same, nullptr))
      EXPECT_NEAR(v, 0, (std::is_same_v<T, double> ? 1e-10 : 1e-5));
    if (!std::is_same_v<T, double>) continue;
    softwave::SinkhornGradients<T, Space> grads;
    grads.grad_x = V3<T, Space>("gx", B, n, d);
    grads.grad_y = V3<T, Space>("gy", B, k, d);
    grads.grad_a = V2<T, Space>("ga", B, n);
    grads.grad_b = V2<T, Space>("gb", B, k);
    divergence(pr, &grads);
    auto const gx = swt::to_host(grads.grad_x), gb = swt::to_host(grads.grad_b);
    double const h = 1e-5;
    for (int q = 0; q < B; ++q)
      for (int i = 0; i < n; ++i)
        for (int c = 0; c < d; ++c) {
          Problems p = pr, m = pr;
          p.x(q, i, c) += h;
          m.x(q, i, c) -= h;
          double const fd =
              (divergence(p, nullptr)[q] - divergence(m, nullptr)[q]) / (2 * h);
          EXPECT_NEAR(gx[(std::size_t(q) * n + i) * d + c], fd, 1e-6)
              << "grad_x";
        }
    for (int q = 0; q < B; ++q)
      for (int j = 1; j < k; ++j) {
        Problems p = pr, m = pr;
        p.b[q * k + j] += h;
        m.b[q * k + j] -= h;
        if (std::isinf(rho)) {
          p.b[q * k] -= h;
          m.b[q * k] += h;
        }
        double const fd =
            (divergence(p, nullptr)[q] - divergence(m, nullptr)[q]) / (2 * h);
        double const an = gb[q * k + j] - (std::isinf(rho) ? gb[q * k] : 0.0);
        EXPECT_NEAR(an, fd, 1e-6) << "grad_b " << j;
      }
  }
}

// Plans' derivatives with respect to their costs (sinkhorn_plan_vjp),
// from float64 reference plans: the implicit one against central
// differences of converged reference solves, the unrolled one against
// differences of that many reference updates from the fixed point, for
// balanced, semi-relaxed and unbalanced problems of several shapes.
struct VjpCase {
  std::vector<ref::OTProblem> problems;
  std::vector<ref::OTSolution> solutions;
  Batch plan, grad_plan;
};

VjpCase vjp_case(swt::Rng& rng, int B, int n, int k, double eps, double rho_a,
                 double rho_b) {
  VjpCase c;
  c.plan = Batch(B, n, k);
  c.grad_plan = Batch(B, n, k);
  for (int q = 0; q < B; ++q) {
    ref::OTProblem p;
    p.n = n;
    p.k = k;
    p.eps = eps;
    p.rho_a = rho_a;
    p.rho_b = rho_b;
    for (int e = 0; e < n * k; ++e) p.cost.push_back(rng.uniform(0, 1));
    double sum_a = 0, sum_b = 0;
    for (int i = 0; i < n; ++i) sum_a += p.a.emplace_back(rng.uniform(0.2, 1));
    for (int j = 0; j < k; ++j) sum_b += p.b.emplace_back(rng.uniform(0.2, 1));
    for (double& w : p.a) w /= sum_a;
    for (double& w : p.b) w /= sum_b;
    auto const s = ref::solve_ot(p);
    for (int e = 0; e < n * k; ++e) {
      c.plan.v[std::size_t(q) * n * k + e] = s.plan[e];
      c.grad_plan.v[std::size_t(q) * n * k + e] = rng.uniform(-1, 1);
    }
    c.problems.push_back(p);
    c.solutions.push_back(s);
  }
  return c;
}

template <class T, class Space>
std::vector<double> plan_vjp(const Space& space, const VjpCase& c, double eps,
                             double rho_a, double rho_b,
                             const softwave::PlanVjpOptions& vjp,
                             softwave::PlanVjpReport* report = nullptr) {
  auto const plan = swt::to_device<T>(space, c.plan);
  auto const grad_plan = swt::to_device<T>(space, c.grad_plan);
  V3<T, Space> grad_cost("grad_cost", c.plan.B, c.plan.n, c.plan.d);
  softwave::SinkhornOptions o;
  o.epsilon = eps;
  o.rho_a = rho_a;
  o.rho_b = rho_b;
  auto const r = softwave::sinkhorn_plan_vjp(space, V3<const T, Space>(plan),
                                             V3<const T, Space>(grad_plan),
                                             grad_cost, o, vjp);
  if (report) *report = r;
  return swt::to_host(grad_cost);
}

// ⟨G, π⟩ of problem q's plan, from `plan_of_cost` of each perturbed cost:
// central differences over every cost entry.
template <class PlanOfCost>
std::vector<double> differences(const VjpCase& c,
                                const PlanOfCost& plan_of_cost) {
  std::vector<double> out;
  double const h = 1e-5;
  int const n = c.plan.n, k = c.plan.d;
  for (int q = 0; q < c.plan.B; ++q)
    for (int e = 0; e < n * k; ++e) {
      double value[2];
      for (int side = 0; side < 2; ++side) {
        ref::OTProblem p = c.problems[q];
        p.cost[e] += side ? -h : h;
        auto const plan = plan_of_cost(q, p);
        double sum = 0;
        for (int f = 0; f < n * k; ++f)
          sum += c.grad_plan.v[std::size_t(q) * n * k + f] * plan[f];
        value[side] = sum;
      }
      out.push_back((value[0] - value[1]) / (2 * h));
    }
  return out;
}

TYPED_TEST(Sinkhorn, PlanDerivativeMatchesFiniteDifferences) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  double const inf = INFINITY;
  struct Shape {
    int n, k;
    double eps, rho_a, rho_b;
  };
  for (Shape const sh :
       {Shape{6, 5, 0.3, inf, inf}, Shape{1, 4, 0.5, inf, inf},
        Shape{9, 13, 0.1, inf, inf}, Shape{7, 4, 0.2, inf, 0.6},
        Shape{5, 8, 0.4, 0.5, 2.0}}) {
    SCOPED_TRACE(::testing::Message()
                 << sh.n << "x" << sh.k << " eps " << sh.eps << " rho "
                 << sh.rho_a << ", " << sh.rho_b);
    auto const c = vjp_case(rng, 2, sh.n, sh.k, sh.eps, sh.rho_a, sh.rho_b);
    // Implicit: the derivative of the converged plan.
    auto const converged = differences(
        c, [](int, const ref::OTProblem& p) { return ref::solve_ot(p).plan; });
    softwave::PlanVjpOptions vjp;
    vjp.tolerance = std::is_same_v<T, double> ? 1e-12 : 1e-6;
    softwave::PlanVjpReport report;
    auto const implicit =
        plan_vjp<T>(space, c, sh.eps, sh.rho_a, sh.rho_b, vjp, &report);
    EXPECT_TRUE(report.converged) << report.residual;
    double const tol = std::is_same_v<T, double> ? 1e-5 : 2e-3;
    EXPECT_TRUE(swt::near_arrays(implicit, converged, tol, 1e-3, "implicit"));
    // Unrolled: the derivative of three updates from the fixed point (held
    // at the unperturbed cost's potentials).
    auto const unrolled_fd =
        differences(c, [&](int q, const ref::OTProblem& p) {
          auto f = c.solutions[q].f, g = c.solutions[q].g;
          ref::run_updates(p, f, g, 3);
          return ref::plan_of(p, f, g);
        });
    vjp.mode = softwave::PlanDerivative::unrolled;
    vjp.iterations = 3;
    auto const unrolled =
        plan_vjp<T>(space, c, sh.eps, sh.rho_a, sh.rho_b, vjp);
    EXPECT_TRUE(swt::near_arrays(unrolled, unrolled_fd, tol, 1e-3, "unrolled"));
    // Unrolled far enough, it is the implicit derivative.
    vjp.iterations = 3000;
    auto const long_unrolled =
        plan_vjp<T>(space, c, sh.eps, sh.rho_a, sh.rho_b, vjp);
    EXPECT_TRUE(swt::near_arrays(long_unrolled, implicit,
                                 std::is_same_v<T, double> ? 1e-8 : 1e-3, 1e-3,
                                 "long unrolled"));
  }
}

TYPED_TEST(Sinkhorn, PlanDerivativeBadInput) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  auto const c = vjp_case(rng, 1, 3, 4, 0.5, INFINITY, INFINITY);
  auto const plan = swt::to_device<T>(space, c.plan);
  auto const grad_plan = swt::to_device<T>(space, c.grad_plan);
  V3<T, Space> grad_cost("grad_cost", 1, 3, 4), wrong("wrong", 1, 4, 3);
  auto call = [&](const softwave::SinkhornOptions& o,
                  const softwave::PlanVjpOptions& vjp, V3<T, Space> p,
                  V3<T, Space> g, V3<T, Space> out) {
    return [=]() {
      softwave::sinkhorn_plan_vjp(space, V3<const T, Space>(p),
                                  V3<const T, Space>(g), out, o, vjp);
    };
  };
  softwave::SinkhornOptions o;
  softwave::PlanVjpOptions vjp;
  for (double eps : {0.0, -1.0, double(NAN), double(INFINITY)}) {
    o.epsilon = eps;
    EXPECT_TRUE(swt::throws_naming("epsilon",
                                   call(o, vjp, plan, grad_plan, grad_cost)));
  }
  o = {};
  o.epsilon_relative = true;
  EXPECT_TRUE(swt::throws_naming("epsilon_relative",
                                 call(o, vjp, plan, grad_plan, grad_cost)));
  o = {};
  o.rho_b = -1;
  EXPECT_TRUE(
      swt::throws_naming("rho_b", call(o, vjp, plan, grad_plan, grad_cost)));
  o = {};
  vjp.iterations = 0;
  EXPECT_TRUE(swt::throws_naming("iterations",
                                 call(o, vjp, plan, grad_plan, grad_cost)));
  vjp = {};
  EXPECT_TRUE(
      swt::throws_naming("grad_plan", call(o, vjp, plan, wrong, grad_cost)));
  EXPECT_TRUE(
      swt::throws_naming("grad_cost", call(o, vjp, plan, grad_plan, wrong)));
  Batch bad = c.plan;
  bad.v[2] = -0.1;
  EXPECT_TRUE(swt::throws_naming(
      "plan",
      call(o, vjp, swt::to_device<T>(space, bad), grad_plan, grad_cost)));
  bad = c.grad_plan;
  bad.v[1] = NAN;
  EXPECT_TRUE(swt::throws_naming(
      "grad_plan",
      call(o, vjp, plan, swt::to_device<T>(space, bad), grad_cost)));
}

TYPED_TEST(Sinkhorn, BadInputNamesTheArgument) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  auto pr = random_problems<T>(rng, 2, 5, 4, 2, 1.0);
  DeviceProblems<T, Space> dev(space, pr);
  softwave::SinkhornResult<T, Space> r;
  r.f = V2<T, Space>("f", 2, 5);
  r.g = V2<T, Space>("g", 2, 4);
  auto call = [&](auto form, auto m, const softwave::SinkhornOptions& o) {
    return [=]() { softwave::sinkhorn(space, form, m, r, o); };
  };
  softwave::SinkhornOptions o;
  auto const m = dev.marginals();
  for (double eps : {0.0, -1.0, double(NAN), double(INFINITY)}) {
    o.epsilon = eps;
    EXPECT_TRUE(swt::throws_naming("epsilon", call(dev.points(), m, o)));
  }
  o = {};
  o.rho_a = 0;
  EXPECT_TRUE(swt::throws_naming("rho_a", call(dev.points(), m, o)));
  o = {};
  o.max_iterations = 0;
  EXPECT_TRUE(swt::throws_naming("max_iterations", call(dev.points(), m, o)));
  o = {};
  o.epsilon_scaling = 1;
  EXPECT_TRUE(swt::throws_naming("epsilon_scaling", call(dev.points(), m, o)));
  o = {};
  // Shapes.
  softwave::PointClouds<T, Space> wrong_d{dev.x, V3<T, Space>("y3", 2, 4, 3)};
  EXPECT_TRUE(swt::throws_naming("y", call(wrong_d, m, o)));
  softwave::Marginals<T, Space> wrong_a{V2<T, Space>("a", 2, 6), dev.b};
  EXPECT_TRUE(swt::throws_naming("a", call(dev.points(), wrong_a, o)));
  softwave::SinkhornResult<T, Space> bad_f = r;
  bad_f.f = V2<T, Space>("f", 2, 4);
  EXPECT_TRUE(swt::throws_naming(
      "f", [&]() { softwave::sinkhorn(space, dev.points(), m, bad_f, o); }));
  // Data: negative or non-finite weights, zero mass, non-finite points/costs.
  auto with = [&](std::vector<double> values, int rows, int cols) {
    return to_device2<T, Space>(values, rows, cols);
  };
  auto a_bad = pr.a;
  a_bad[3] = -0.1;
  EXPECT_TRUE(swt::throws_naming(
      "a", call(dev.points(),
                softwave::Marginals<T, Space>{with(a_bad, 2, 5), dev.b}, o)));
  auto b_zero = pr.b;
  for (int j = 0; j < 4; ++j) b_zero[4 + j] = 0;
  EXPECT_TRUE(swt::throws_naming(
      "b", call(dev.points(),
                softwave::Marginals<T, Space>{dev.a, with(b_zero, 2, 4)}, o)));
  Batch xn = pr.x;
  xn(1, 2, 1) = NAN;
  softwave::PointClouds<T, Space> nan_x{swt::to_device<T>(space, xn), dev.y};
  EXPECT_TRUE(swt::throws_naming("x", call(nan_x, m, o)));
  Batch cn(2, 5, 4);
  cn.v = pr.cost;
  cn(0, 1, 1) = INFINITY;
  softwave::CostMatrix<T, Space> inf_cost{swt::to_device<T>(space, cn)};
  EXPECT_TRUE(swt::throws_naming("cost", call(inf_cost, m, o)));
  // Gradients of another form's arguments.
  softwave::SinkhornGradients<T, Space> grads;
  grads.grad_cost = V3<T, Space>("gc", 2, 5, 4);
  EXPECT_TRUE(swt::throws_naming("gradients", [&]() {
    softwave::sinkhorn_gradients(space, dev.points(), m,
                                 V2<const T, Space>(r.f),
                                 V2<const T, Space>(r.g), grads, o);
  }));
}

}  // namespace
