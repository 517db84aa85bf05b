// softwave/deer_ode.hpp: ODEs on a grid through DEER. A neural vector field
// f(y, u) = tanh(W y + U u + b) integrated by DEER equals the library's
// sequential RK4 integrator and a plain float64 RK4 loop, for each Jacobian
// mode, variable lengths, per-sequence grids (negative steps too); the
// scheme's error falls as Δ⁴; gradients of the inputs (the steps and u),
// the initial states and the field's parameters against central
// differences; bad input.

#include <softwave/deer_ode.hpp>

#include "test_helpers.hpp"

namespace {

using swt::Rng;
using swt::worst_difference;
template <class T, class Space>
using V3 = softwave::DeerView3<T, Space>;
template <class T, class Space>
using V2 = softwave::DeerView2<T, Space>;
template <class T, class Space>
using V1 = softwave::DeerView1<T, Space>;

constexpr int kMaxState = 4, kMaxInput = 3;

// f(y, u) = tanh(W y + U u + b) − leak·y, its weights held by value (the
// field is copied to the device and called on the host alike). With leak =
// 1 and W small the flow contracts; with leak = 0 it may expand, and float
// rounding then grows with it.
template <class T>
struct TanhField {
  using value_type = T;
  int n = 1, m = 0;
  T leak = 0;
  T W[kMaxState * kMaxState] = {}, U[kMaxState * kMaxInput] = {},
                  b[kMaxState] = {};

  KOKKOS_INLINE_FUNCTION int state_size() const { return n; }
  KOKKOS_INLINE_FUNCTION int input_size() const { return m; }
  KOKKOS_INLINE_FUNCTION int work_size() const { return n; }
  // work[i] = 1 − tanh² of unit i's argument, after dydt = its tanh.
  KOKKOS_INLINE_FUNCTION void evaluate(const T* y, const T* u, T* dydt,
                                       T* slope) const {
    for (int i = 0; i < n; ++i) {
      T z = b[i];
      for (int j = 0; j < n; ++j) z += W[i * n + j] * y[j];
      for (int j = 0; j < m; ++j) z += U[i * m + j] * u[j];
      T const t = softwave::compat::tanh(z);
      if (dydt) dydt[i] = t - leak * y[i];
      slope[i] = 1 - t * t;
    }
  }
  KOKKOS_INLINE_FUNCTION void field(const T* y, const T* u, T* dydt,
                                    T* jacobian, softwave::DeerJacobian kind,
                                    T* work) const {
    evaluate(y, u, dydt, work);
    if (!jacobian) return;
    for (int i = 0; i < n; ++i) {
      if (kind == softwave::DeerJacobian::full)
        for (int j = 0; j < n; ++j)
          jacobian[i * n + j] = work[i] * W[i * n + j] - (i == j ? leak : 0);
      else
        jacobian[i] = work[i] * W[i * n + i] - leak;
    }
  }
  KOKKOS_INLINE_FUNCTION void field_vector_jacobian(const T* y, const T* u,
                                                    const T* mu, T* grad_y,
                                                    T* grad_u, T* work) const {
    evaluate(y, u, static_cast<T*>(nullptr), work);
    for (int i = 0; i < n; ++i) work[i] *= mu[i];
    if (grad_y)
      for (int j = 0; j < n; ++j) {
        T s = 0;
        for (int i = 0; i < n; ++i) s += W[i * n + j] * work[i];
        grad_y[j] = s - leak * mu[j];
      }
    if (grad_u)
      for (int j = 0; j < m; ++j) {
        T s = 0;
        for (int i = 0; i < n; ++i) s += U[i * m + j] * work[i];
        grad_u[j] = s;
      }
  }
};

// stage_adjoints' visit for TanhField's b and W: dL/db += sech²(z) ⊙ μ,
// dL/dW += (sech²(z) ⊙ μ) yᵀ at each stage's point (a functor, as it would
// be in a device kernel summing them).
struct TanhParameterGradients {
  TanhField<double> field;
  double *grad_b, *grad_w, *slope;
  KOKKOS_INLINE_FUNCTION void operator()(const double* y, const double* u,
                                         const double* mu) const {
    field.evaluate(y, u, static_cast<double*>(nullptr), slope);
    for (int i = 0; i < field.n; ++i) {
      double const d = slope[i] * mu[i];
      grad_b[i] += d;
      for (int j = 0; j < field.n; ++j) grad_w[i * field.n + j] += d * y[j];
    }
  }
};

// A random field and problem in float64, values rounded to T.
template <class T>
struct OdeProblem {
  int B = 1, steps = 1, n = 1, m = 0;
  TanhField<double> field;
  std::vector<double> x, y0;  // (B, T, 1 + m): Δ_t, u_t; (B, n)
  std::vector<int> lengths;   // empty: all T

  // contracting: leak = 1 and W small; else leak = 0.
  OdeProblem(Rng& rng, int B_, int T_, int n_, int m_, bool variable,
             double span, bool contracting = false)
      : B(B_), steps(T_), n(n_), m(m_) {
    auto r = [&](double lo, double hi) {
      return double(T(rng.uniform(lo, hi)));
    };
    field.n = n;
    field.m = m;
    field.leak = contracting ? 1 : 0;
    double const w = (contracting ? 0.9 : 1.5) / std::sqrt(n);
    for (int q = 0; q < n * n; ++q) field.W[q] = r(-w, w);
    for (int q = 0; q < n * m; ++q) field.U[q] = r(-1, 1);
    for (int i = 0; i < n; ++i) field.b[i] = r(-0.5, 0.5);
    x.resize(std::size_t(B) * steps * (1 + m));
    y0.resize(std::size_t(B) * n);
    for (int b = 0; b < B; ++b) {
      // Each sequence its own grid over about `span`: uneven steps, one
      // sequence in three integrating backwards.
      double const sign = b % 3 == 2 ? -1.0 : 1.0;
      for (int t = 0; t < steps; ++t) {
        double* row = x.data() + (std::size_t(b) * steps + t) * (1 + m);
        row[0] = sign * r(0.5, 1.5) * span / steps;
        for (int j = 0; j < m; ++j) row[1 + j] = r(-1, 1);
      }
      for (int i = 0; i < n; ++i) y0[std::size_t(b) * n + i] = r(-1, 1);
    }
    if (variable) {
      lengths.resize(B);
      for (int& l : lengths) l = rng.integer(1, steps);
      lengths[0] = steps;
    }
  }
  int length(int b) const { return lengths.empty() ? steps : lengths[b]; }
  int width() const { return 1 + m; }

  // A plain RK4 loop in float64 with `substeps` steps per grid step, (B, T,
  // n), zero past each length.
  std::vector<double> reference(const std::vector<double>& xs,
                                const std::vector<double>& starts,
                                const TanhField<double>& f,
                                int substeps = 1) const {
    std::vector<double> out(std::size_t(B) * steps * n, 0.0);
    std::vector<double> y(n), k[4], p(n), slope(n);
    for (auto& v : k) v.resize(n);
    for (int b = 0; b < B; ++b) {
      for (int i = 0; i < n; ++i) y[i] = starts[std::size_t(b) * n + i];
      for (int t = 0; t < length(b); ++t) {
        double const* row = xs.data() + (std::size_t(b) * steps + t) * width();
        double const h = row[0] / substeps;
        for (int s = 0; s < substeps; ++s) {
          for (int stage = 0; stage < 4; ++stage) {
            double const c = stage == 0 ? 0.0 : (stage == 3 ? 1.0 : 0.5);
            for (int i = 0; i < n; ++i)
              p[i] = stage == 0 ? y[i] : y[i] + c * h * k[stage - 1][i];
            f.evaluate(p.data(), row + 1, k[stage].data(), slope.data());
          }
          for (int i = 0; i < n; ++i)
            y[i] += h / 6 * (k[0][i] + 2 * k[1][i] + 2 * k[2][i] + k[3][i]);
        }
        std::copy(y.begin(), y.end(),
                  out.begin() + (std::size_t(b) * steps + t) * n);
      }
    }
    return out;
  }
  std::vector<double> reference() const { return reference(x, y0, field); }

  template <class Space>
  softwave::DeerInputs<T, Space> inputs(const Space& space) const {
    swt::Batch xb(B, steps, width());
    xb.v = x;
    softwave::DeerInputs<T, Space> in;
    in.x = swt::to_device<T>(space, xb);
    in.y0 = swt::to_device2<T, Space>(y0, B, n);
    if (!lengths.empty())
      in.lengths = swt::to_device_int(space, lengths, "swt::lengths");
    return in;
  }
  softwave::OdeCell<TanhField<T>> cell() const {
    softwave::OdeCell<TanhField<T>> c;
    c.field.n = n;
    c.field.m = m;
    c.field.leak = T(field.leak);
    for (int q = 0; q < n * n; ++q) c.field.W[q] = T(field.W[q]);
    for (int q = 0; q < n * m; ++q) c.field.U[q] = T(field.U[q]);
    for (int i = 0; i < n; ++i) c.field.b[i] = T(field.b[i]);
    return c;
  }

  // DEER (or the sequential integrator) with `options`: y (B, T, n) and
  // each sequence's iterations and path.
  template <class Space>
  std::vector<double> run(const Space& space, const softwave::DeerOptions& o,
                          std::vector<int>* iterations = nullptr,
                          std::vector<int>* path = nullptr) const {
    softwave::DeerResult<T, Space> r;
    r.y = V3<T, Space>("swt::y", B, steps, n);
    r.iterations = V1<int, Space>("swt::iterations", B);
    r.path = V1<int, Space>("swt::path", B);
    softwave::deer(space, cell(), inputs(space), r, o);
    auto const it = swt::to_host(r.iterations);
    auto const p = swt::to_host(r.path);
    if (iterations) iterations->assign(it.begin(), it.end());
    if (path) path->assign(p.begin(), p.end());
    return swt::to_host(r.y);
  }
};

template <class SV>
class DeerOde : public ::testing::Test {};
TYPED_TEST_SUITE(DeerOde, swt::ExecutionSpacesDoubleFloat);

// DEER's states are the sequential RK4 integrator's and a plain float64 RK4
// loop's, for each Jacobian mode.
TYPED_TEST(DeerOde, MatchesTheIntegrator) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  constexpr bool single = std::is_same_v<T, float>;
  SWT_SEEDED_RNG(rng);
  Space space;
  struct Shape {
    int B, T, n, m, chunk;
  };
  for (Shape const& s :
       {Shape{1, 1, 1, 0, 0}, Shape{3, 40, 2, 1, 0}, Shape{2, 700, 4, 3, 4},
        Shape{5, 257, 3, 2, 0}, Shape{1, 2000, 1, 1, 0}})
    for (double span : {2.0, 20.0}) {
      // Steps of about 0.5 at most: RK4 is stable there on these fields.
      span = std::min(span, 0.5 * s.T);
      bool const variable = rng.coin();
      // Float's rounding grows with an expanding flow: float contracts.
      bool const contracting = single || rng.coin();
      OdeProblem<T> const problem(rng, s.B, s.T, s.n, s.m, variable, span,
                                  contracting);
      auto const expected = problem.reference();
      softwave::DeerOptions seq;
      seq.method = softwave::DeerMethod::sequential;
      auto const sequential = problem.run(space, seq);
      SCOPED_TRACE(::testing::Message()
                   << "B=" << s.B << " T=" << s.T << " n=" << s.n
                   << " m=" << s.m << " span " << span
                   << (contracting ? " contracting" : "")
                   << (variable ? " variable lengths" : ""));
      // Rounding grows with the size of the states and of the steps' moves
      // (|Δ f| <= |Δ|) and, as a random walk, with the steps taken.
      double scale = 1;
      for (double v : expected) scale = std::max(scale, std::fabs(v));
      for (std::size_t q = 0; q < problem.x.size(); q += problem.width())
        scale = std::max(scale, std::fabs(problem.x[q]));
      double const bound =
          (single ? 1e-6 : 1e-13) * scale * std::sqrt(double(s.T));
      EXPECT_LE(worst_difference(sequential, expected), bound);
      for (auto jac :
           {softwave::DeerJacobian::full, softwave::DeerJacobian::diagonal,
            softwave::DeerJacobian::block}) {
        softwave::DeerOptions o;
        o.method = softwave::DeerMethod::deer;
        o.jacobian = jac;
        o.block_size = s.n % 2 == 0 ? 2 : 1;
        o.chunk = s.chunk;
        o.max_iterations = 5000;
        // Quasi-Newton converges linearly: its last step is no bound on
        // the error left, so the tolerance sits below the bound tested.
        if (jac != softwave::DeerJacobian::full) {
          o.atol = single ? 1e-6 : 1e-13;
          o.rtol = single ? 1e-6 : 1e-12;
        }
        SCOPED_TRACE(::testing::Message() << "jacobian " << int(jac));
        std::vector<int> iterations, path;
        auto const y = problem.run(space, o, &iterations, &path);
        for (int b = 0; b < s.B; ++b) {
          EXPECT_EQ(path[b], int(softwave::DeerPath::deer)) << "sequence " << b;
          EXPECT_GE(iterations[b], 1);
        }
        EXPECT_LE(worst_difference(y, sequential), 2 * bound);
        EXPECT_LE(worst_difference(y, expected), 2 * bound);
      }
    }
}

// Float64 on each space.
template <class Space>
class DeerOdeDouble : public ::testing::Test {};
TYPED_TEST_SUITE(DeerOdeDouble, swt::ExecutionSpaces);

// The scheme is RK4: halving the grid's steps divides the error at the
// grid's points by about 2⁴ (against RK4 with 64 steps a grid step).
TYPED_TEST(DeerOdeDouble, ErrorFallsAsTheFourthPower) {
  using Space = TypeParam;
  using T = double;
  SWT_SEEDED_RNG(rng);
  Space space;
  OdeProblem<T> coarse(rng, 2, 32, 3, 2, false, 4.0);
  // The same grid halved: each step split in two, u held over both.
  OdeProblem<T> fine = coarse;
  fine.steps = 2 * coarse.steps;
  fine.x.resize(fine.x.size() * 2);
  for (int b = 0; b < coarse.B; ++b)
    for (int t = 0; t < coarse.steps; ++t)
      for (int half = 0; half < 2; ++half)
        for (int j = 0; j < coarse.width(); ++j)
          fine.x[(std::size_t(b) * fine.steps + 2 * t + half) * fine.width() +
                 j] =
              coarse
                  .x[(std::size_t(b) * coarse.steps + t) * coarse.width() + j] /
              (j == 0 ? 2.0 : 1.0);
  auto const truth =
      coarse.reference(coarse.x, coarse.y0, coarse.field, /*substeps=*/64);
  softwave::DeerOptions o;
  o.method = softwave::DeerMethod::deer;
  o.atol = 1e-14;
  o.rtol = 1e-13;
  auto const y_coarse = coarse.run(space, o);
  auto const y_fine = fine.run(space, o);
  // Root-mean-square errors over the coarse grid's points.
  double e_coarse = 0, e_fine = 0;
  for (int b = 0; b < coarse.B; ++b)
    for (int t = 0; t < coarse.steps; ++t)
      for (int i = 0; i < coarse.n; ++i) {
        std::size_t const q =
            (std::size_t(b) * coarse.steps + t) * coarse.n + i;
        double const a = y_coarse[q] - truth[q];
        double const c =
            y_fine[(std::size_t(b) * fine.steps + 2 * t + 1) * fine.n + i] -
            truth[q];
        e_coarse += a * a;
        e_fine += c * c;
      }
  e_coarse = std::sqrt(e_coarse);
  e_fine = std::sqrt(e_fine);
  EXPECT_GT(e_coarse, 1e-10);  // far above rounding
  EXPECT_GT(e_coarse / e_fine, 11.0) << e_coarse << " " << e_fine;
  EXPECT_LT(e_coarse / e_fine, 22.0) << e_coarse << " " << e_fine;
}

// The step's Jacobian against central differences of the step (full; the
// diagonal where the field's Jacobian is diagonal), and its vector–Jacobian
// products against that Jacobian and against differences in the inputs.
TEST(DeerOdeStep, JacobianAndVectorJacobianProducts) {
  SWT_SEEDED_RNG(rng);
  for (bool diagonal_field : {false, true}) {
    int const n = 3, m = 2;
    OdeProblem<double> problem(rng, 1, 1, n, m, false, 0.7);
    if (diagonal_field)
      for (int q = 0; q < n * n; ++q)
        if (q % (n + 1) != 0) problem.field.W[q] = 0;
    auto const cell = problem.cell();
    std::vector<double> work(std::size_t(cell.work_size()));
    std::vector<double> y(n), x(problem.x), out(n), up(n), down(n);
    for (double& e : y) e = rng.uniform(-1, 1);
    std::vector<double> J(n * n), D(n);
    cell.step(y.data(), x.data(), out.data(), J.data(),
              softwave::DeerJacobian::full, work.data());
    cell.step(y.data(), x.data(), out.data(), D.data(),
              softwave::DeerJacobian::diagonal, work.data());
    double const h = 1e-6;
    auto difference = [&](double& value, int i) {
      double const keep = value;
      value = keep + h;
      cell.step(y.data(), x.data(), up.data(), nullptr,
                softwave::DeerJacobian::full, work.data());
      value = keep - h;
      cell.step(y.data(), x.data(), down.data(), nullptr,
                softwave::DeerJacobian::full, work.data());
      value = keep;
      return (up[i] - down[i]) / (2 * h);
    };
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        EXPECT_NEAR(J[i * n + j], difference(y[j], i), 1e-8)
            << "J(" << i << ", " << j << ")";
    for (int i = 0; i < n; ++i) {
      if (diagonal_field)
        EXPECT_NEAR(D[i], J[i * n + i], 1e-14) << "diagonal " << i;
      else
        EXPECT_NE(D[i], J[i * n + i]) << "diagonal " << i;  // chained
    }
    std::vector<double> lambda(n), gy(n), gx(1 + m);
    for (double& e : lambda) e = rng.uniform(-1, 1);
    cell.vector_jacobian(y.data(), x.data(), lambda.data(), gy.data(),
                         gx.data(), work.data());
    for (int j = 0; j < n; ++j) {
      double want = 0;
      for (int i = 0; i < n; ++i) want += J[i * n + j] * lambda[i];
      EXPECT_NEAR(gy[j], want, 1e-13) << "grad_y_prev " << j;
    }
    for (int k = 0; k < 1 + m; ++k) {
      double want = 0;
      for (int i = 0; i < n; ++i) want += difference(x[k], i) * lambda[i];
      EXPECT_NEAR(gx[k], want, 1e-8) << "grad_x " << k;
    }
  }
}

// Gradients of L = Σ w ⊙ y with respect to the steps, u, y0 and the
// field's parameters (from the adjoint, through stage_adjoints) against
// central differences of the float64 loop.
TYPED_TEST(DeerOdeDouble, GradientsMatchFiniteDifferences) {
  using Space = TypeParam;
  using T = double;
  SWT_SEEDED_RNG(rng);
  Space space;
  for (int steps : {1, 9, 300}) {
    int const B = 3, n = 3, m = 2;
    OdeProblem<T> problem(rng, B, steps, n, m, true, 3.0);
    SCOPED_TRACE(::testing::Message() << "T=" << steps);
    std::vector<double> w(std::size_t(B) * steps * n);
    for (double& e : w) e = rng.uniform(-1, 1);
    auto loss = [&](const std::vector<double>& x, const std::vector<double>& y0,
                    const TanhField<double>& f) {
      auto const y = problem.reference(x, y0, f);
      double sum = 0;
      for (std::size_t i = 0; i < y.size(); ++i) sum += w[i] * y[i];
      return sum;
    };
    for (auto jac :
         {softwave::DeerJacobian::full, softwave::DeerJacobian::diagonal}) {
      SCOPED_TRACE(::testing::Message() << "jacobian " << int(jac));
      softwave::DeerOptions o;
      o.method = softwave::DeerMethod::deer;
      o.jacobian = jac;
      o.max_iterations = 5000;
      o.atol = 1e-13;
      o.rtol = 1e-12;
      auto const in = problem.inputs(space);
      softwave::DeerResult<T, Space> r;
      r.y = V3<T, Space>("swt::y", B, steps, n);
      auto const cell = problem.cell();
      softwave::deer(space, cell, in, r, o);
      swt::Batch wb(B, steps, n);
      wb.v = w;
      softwave::DeerGradients<T, Space> g;
      g.grad_y = swt::to_device<T>(space, wb);
      g.grad_x = V3<T, Space>("swt::grad_x", B, steps, 1 + m);
      g.grad_y0 = V2<T, Space>("swt::grad_y0", B, n);
      g.adjoint = V3<T, Space>("swt::adjoint", B, steps, n);
      softwave::deer_gradients(space, cell, in, V3<const T, Space>(r.y), g, o);
      auto const gx = swt::to_host(g.grad_x);
      auto const gy0 = swt::to_host(g.grad_y0);
      auto const lambda = swt::to_host(g.adjoint);
      auto const y = swt::to_host(r.y);
      // dL/db and dL/dW from the adjoint: μ's of each stage of each step.
      std::vector<double> gb(n, 0.0), gW(std::size_t(n) * n, 0.0);
      std::vector<double> work(std::size_t(cell.work_size()));
      std::vector<double> slope(n);
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < problem.length(b); ++t) {
          double const* prev = t == 0
                                   ? &problem.y0[std::size_t(b) * n]
                                   : &y[(std::size_t(b) * steps + t - 1) * n];
          double const* row =
              &problem.x[(std::size_t(b) * steps + t) * problem.width()];
          cell.stage_adjoints(prev, row,
                              &lambda[(std::size_t(b) * steps + t) * n],
                              static_cast<double*>(nullptr),
                              static_cast<double*>(nullptr), work.data(),
                              TanhParameterGradients{cell.field, gb.data(),
                                                     gW.data(), slope.data()});
        }
      double const h = 1e-6;
      auto central = [&](auto&& set) {
        set(+h);
        double const up = loss(problem.x, problem.y0, problem.field);
        set(-h);
        double const down = loss(problem.x, problem.y0, problem.field);
        set(0);
        return (up - down) / (2 * h);
      };
      auto& x = problem.x;
      auto& y0 = problem.y0;
      auto& f = problem.field;
      auto check = [&](double got, double& value, const char* what,
                       std::size_t i) {
        double const keep = value;
        double const want =
            central([&](double d) { value = d == 0 ? keep : keep + d; });
        EXPECT_NEAR(got, want, 1e-6 * std::max(1.0, std::fabs(want)))
            << what << " " << i;
      };
      for (int b = 0; b < B; ++b)
        for (int t = 0; t < steps; ++t)
          for (int j = 0; j < problem.width(); ++j) {
            std::size_t const q =
                (std::size_t(b) * steps + t) * problem.width() + j;
            if (q % 5 != 0 && steps > 9) continue;
            // Past a sequence's length its inputs do not count.
            double const got = t < problem.length(b) ? gx[q] : 0.0;
            check(got, x[q], j == 0 ? "step" : "u", q);
          }
      for (std::size_t i = 0; i < y0.size(); ++i) check(gy0[i], y0[i], "y0", i);
      for (int i = 0; i < n; ++i) check(gb[i], f.b[i], "b", i);
      for (int q = 0; q < n * n; ++q) check(gW[q], f.W[q], "W", q);
    }
  }
}

// Bad input names the argument: inputs of the wrong width, a step that is
// not finite.
TYPED_TEST(DeerOde, BadInputNamesTheArgument) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  OdeProblem<T> problem(rng, 2, 5, 2, 1, false, 1.0);
  softwave::DeerResult<T, Space> r;
  r.y = V3<T, Space>("swt::y", 2, 5, 2);
  auto in = problem.inputs(space);
  auto narrow = in;
  narrow.x = V3<const T, Space>(V3<T, Space>("swt::x", 2, 5, 1));
  EXPECT_TRUE(swt::throws_naming(
      "x", [&]() { softwave::deer(space, problem.cell(), narrow, r); }));
  problem.x[3 * problem.width()] = NAN;
  auto const bad = problem.inputs(space);
  EXPECT_TRUE(swt::throws_naming(
      "x", [&]() { softwave::deer(space, problem.cell(), bad, r); }));
}

}  // namespace
