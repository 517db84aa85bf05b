// softwave/deer_ode.hpp's built-in field: deer_neural_ode (a perceptron
// f(y, u) = W_out tanh(W_hidden [y; u] + b_hidden) + b_out, integrated by
// RK4 on each sequence's grid) equals a plain float64 RK4 loop, by DEER in
// each Jacobian mode and by the sequential integrator; its gradients (the
// steps, u, y0 and every weight) match central differences of that loop;
// bad shapes and values name the argument.

#include <set>
#include <softwave/deer_ode.hpp>
#include <string>

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

// The field in float64 on the host, row-major weights.
struct Mlp {
  int n = 1, m = 0, h = 1;
  std::vector<double> w_hidden, b_hidden, w_out, b_out;  // biases: or empty

  void field(const double* y, const double* u, double* dydt) const {
    std::vector<double> a(h);
    for (int k = 0; k < h; ++k) {
      double z = b_hidden.empty() ? 0.0 : b_hidden[k];
      for (int j = 0; j < n; ++j) z += w_hidden[k * (n + m) + j] * y[j];
      for (int j = 0; j < m; ++j) z += w_hidden[k * (n + m) + n + j] * u[j];
      a[k] = std::tanh(z);
    }
    for (int i = 0; i < n; ++i) {
      double s = b_out.empty() ? 0.0 : b_out[i];
      for (int k = 0; k < h; ++k) s += w_out[i * h + k] * a[k];
      dydt[i] = s;
    }
  }
};

// A random problem: x (B, T, 1 + m) holds Δ_t then u_t, each sequence its
// own uneven grid over about `span` (one in three backwards).
struct Problem {
  int B, steps, n, m, h;
  Mlp mlp;
  std::vector<double> x, y0;
  std::vector<int> lengths;  // empty: all T

  // Values rounded to T, so that both precisions solve the same problem.
  template <class T>
  static Problem make(Rng& rng, int B, int steps, int n, int m, int h,
                      bool variable, bool biases, double span) {
    Problem p{B, steps, n, m, h, {}, {}, {}, {}};
    auto r = [&](double lo, double hi) {
      return double(T(rng.uniform(lo, hi)));
    };
    p.mlp.n = n;
    p.mlp.m = m;
    p.mlp.h = h;
    // A contracting field on average: W_out's rows point against W_y's.
    double const scale = 1.0 / std::sqrt(double(h));
    p.mlp.w_hidden.resize(std::size_t(h) * (n + m));
    p.mlp.w_out.resize(std::size_t(n) * h);
    for (double& v : p.mlp.w_hidden) v = r(-1, 1);
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < h; ++k)
        p.mlp.w_out[i * h + k] =
            double(T(-0.8 * scale * p.mlp.w_hidden[k * (n + m) + i] +
                     r(-0.3, 0.3) * scale));
    if (biases) {
      p.mlp.b_hidden.resize(h);
      p.mlp.b_out.resize(n);
      for (double& v : p.mlp.b_hidden) v = r(-0.5, 0.5);
      for (double& v : p.mlp.b_out) v = r(-0.2, 0.2);
    }
    p.x.resize(std::size_t(B) * steps * (1 + m));
    p.y0.resize(std::size_t(B) * n);
    for (int b = 0; b < B; ++b) {
      double const sign = b % 3 == 2 ? -0.5 : 1.0;
      for (int t = 0; t < steps; ++t) {
        double* row = &p.x[(std::size_t(b) * steps + t) * (1 + m)];
        row[0] = double(T(sign * r(0.5, 1.5) * span / steps));
        for (int j = 0; j < m; ++j) row[1 + j] = r(-1, 1);
      }
      for (int i = 0; i < n; ++i) p.y0[std::size_t(b) * n + i] = r(-1, 1);
    }
    if (variable) {
      p.lengths.resize(B);
      for (int& l : p.lengths) l = rng.integer(1, steps);
      p.lengths[0] = steps;
    }
    return p;
  }
  int length(int b) const { return lengths.empty() ? steps : lengths[b]; }

  // A plain RK4 loop: (B, T, n), zero past each length.
  std::vector<double> reference(const Mlp& f, const std::vector<double>& xs,
                                const std::vector<double>& starts) const {
    std::vector<double> out(std::size_t(B) * steps * n, 0.0), y(n), p(n);
    std::vector<double> k[4];
    for (auto& v : k) v.resize(n);
    for (int b = 0; b < B; ++b) {
      std::copy_n(&starts[std::size_t(b) * n], n, y.begin());
      for (int t = 0; t < length(b); ++t) {
        double const* row = &xs[(std::size_t(b) * steps + t) * (1 + m)];
        double const dt = row[0];
        for (int s = 0; s < 4; ++s) {
          double const c = s == 0 ? 0.0 : (s == 3 ? 1.0 : 0.5);
          for (int i = 0; i < n; ++i)
            p[i] = s == 0 ? y[i] : y[i] + c * dt * k[s - 1][i];
          f.field(p.data(), row + 1, k[s].data());
        }
        for (int i = 0; i < n; ++i)
          y[i] += dt / 6 * (k[0][i] + 2 * k[1][i] + 2 * k[2][i] + k[3][i]);
        std::copy(y.begin(), y.end(),
                  out.begin() + (std::size_t(b) * steps + t) * n);
      }
    }
    return out;
  }

  template <class T, class Space>
  softwave::NeuralOdeWeights<T, Space> weights(const Space& space) const {
    softwave::NeuralOdeWeights<T, Space> w;
    w.weight_hidden =
        swt::to_device2<T, Space>(mlp.w_hidden, h, n + m, "swt::w_hidden");
    w.weight_out = swt::to_device2<T, Space>(mlp.w_out, n, h, "swt::w_out");
    if (!mlp.b_hidden.empty())
      w.bias_hidden = swt::to_device<T>(space, mlp.b_hidden, "swt::b_hidden");
    if (!mlp.b_out.empty())
      w.bias_out = swt::to_device<T>(space, mlp.b_out, "swt::b_out");
    return w;
  }
  // Every weight's gradient, allocated (zeros).
  template <class T, class Space>
  softwave::NeuralOdeWeightGradients<T, Space> weight_gradients() const {
    softwave::NeuralOdeWeightGradients<T, Space> wg;
    wg.weight_hidden = V2<T, Space>("swt::g_w_hidden", h, n + m);
    wg.bias_hidden = V1<T, Space>("swt::g_b_hidden", h);
    wg.weight_out = V2<T, Space>("swt::g_w_out", n, h);
    wg.bias_out = V1<T, Space>("swt::g_b_out", n);
    return wg;
  }
  template <class T, class Space>
  softwave::DeerInputs<T, Space> inputs(const Space& space) const {
    swt::Batch xb(B, steps, 1 + m);
    xb.v = x;
    softwave::DeerInputs<T, Space> in;
    in.x = swt::to_device<T>(space, xb);
    in.y0 = swt::to_device2<T, Space>(y0, B, n);
    if (!lengths.empty())
      in.lengths = swt::to_device_int(space, lengths, "swt::lengths");
    return in;
  }
  template <class T, class Space>
  std::vector<double> run(const Space& space, const softwave::DeerOptions& o,
                          std::vector<int>* path = nullptr) const {
    softwave::DeerResult<T, Space> r;
    r.y = V3<T, Space>("swt::y", B, steps, n);
    r.path = V1<int, Space>("swt::path", B);
    softwave::deer_neural_ode(space, weights<T>(space), inputs<T>(space), r, o);
    if (path) {
      auto const p = swt::to_host(r.path);
      path->assign(p.begin(), p.end());
    }
    return swt::to_host(r.y);
  }
};

template <class SV>
class DeerNeuralOde : public ::testing::Test {};
TYPED_TEST_SUITE(DeerNeuralOde, swt::ExecutionSpacesDoubleFloat);

TYPED_TEST(DeerNeuralOde, MatchesTheFloat64Loop) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  constexpr bool single = std::is_same_v<T, float>;
  SWT_SEEDED_RNG(rng);
  Space space;
  struct Shape {
    int B, T, n, m, h;
  };
  for (Shape const& s :
       {Shape{1, 1, 1, 0, 1}, Shape{3, 50, 2, 1, 8}, Shape{4, 600, 4, 3, 16},
        Shape{2, 333, 8, 0, 32}, Shape{1, 1500, 3, 2, 5}}) {
    bool const variable = rng.coin(), biases = rng.coin();
    Problem const p = Problem::make<T>(rng, s.B, s.T, s.n, s.m, s.h, variable,
                                       biases, std::min(10.0, 0.3 * s.T));
    SCOPED_TRACE(::testing::Message()
                 << "B=" << s.B << " T=" << s.T << " n=" << s.n << " m=" << s.m
                 << " h=" << s.h << (variable ? " variable" : "")
                 << (biases ? " biases" : ""));
    auto const expected = p.reference(p.mlp, p.x, p.y0);
    double scale = 1;
    for (double v : expected) scale = std::max(scale, std::fabs(v));
    double const bound =
        (single ? 2e-6 : 1e-13) * scale * std::sqrt(double(s.T));
    // The loop a thread a sequence, a team of two, and the space's choice.
    for (int team : {1, 2, 0}) {
      softwave::DeerOptions seq;
      seq.method = softwave::DeerMethod::sequential;
      seq.sequential_team_size = team;
      EXPECT_LE(worst_difference(p.run<T>(space, seq), expected), bound)
          << "sequential_team_size " << team;
    }
    for (auto jac :
         {softwave::DeerJacobian::full, softwave::DeerJacobian::diagonal}) {
      SCOPED_TRACE(::testing::Message() << "jacobian " << int(jac));
      softwave::DeerOptions o;
      o.method = softwave::DeerMethod::deer;
      o.jacobian = jac;
      o.max_iterations = 5000;
      if (jac != softwave::DeerJacobian::full) {
        o.atol = single ? 1e-6 : 1e-13;
        o.rtol = single ? 1e-6 : 1e-12;
      }
      std::vector<int> path;
      auto const y = p.run<T>(space, o, &path);
      for (int b = 0; b < s.B; ++b)
        EXPECT_EQ(path[b], int(softwave::DeerPath::deer)) << "sequence " << b;
      EXPECT_LE(worst_difference(y, expected), 2 * bound);
    }
  }
}

template <class Space>
class DeerNeuralOdeDouble : public ::testing::Test {};
TYPED_TEST_SUITE(DeerNeuralOdeDouble, swt::ExecutionSpaces);

// L = Σ w ⊙ y: the gradients of the steps, u, y0 and every weight against
// central differences of the float64 loop.
TYPED_TEST(DeerNeuralOdeDouble, GradientsMatchFiniteDifferences) {
  using Space = TypeParam;
  using T = double;
  SWT_SEEDED_RNG(rng);
  Space space;
  // DEER, then the loop a thread a sequence and a team of two a sequence.
  struct Method {
    softwave::DeerMethod method;
    int team;
  };
  for (int steps : {1, 7, 200})
    for (Method const method : {Method{softwave::DeerMethod::deer, 0},
                                Method{softwave::DeerMethod::sequential, 1},
                                Method{softwave::DeerMethod::sequential, 2}}) {
      int const B = 3, n = 3, m = 2, h = 4;
      Problem p = Problem::make<T>(rng, B, steps, n, m, h, true, true, 3.0);
      SCOPED_TRACE(::testing::Message()
                   << "T=" << steps << " method " << int(method.method)
                   << " team " << method.team);
      std::vector<double> w(std::size_t(B) * steps * n);
      for (double& e : w) e = rng.uniform(-1, 1);
      softwave::DeerOptions o;
      o.method = method.method;
      o.sequential_team_size = method.team;
      o.atol = 1e-13;
      o.rtol = 1e-12;
      auto const in = p.inputs<T>(space);
      auto const weights = p.weights<T>(space);
      softwave::DeerResult<T, Space> r;
      r.y = V3<T, Space>("swt::y", B, steps, n);
      softwave::deer_neural_ode(space, weights, in, r, o);
      swt::Batch wb(B, steps, n);
      wb.v = w;
      softwave::DeerGradients<T, Space> g;
      g.grad_y = swt::to_device<T>(space, wb);
      g.grad_x = V3<T, Space>("swt::grad_x", B, steps, 1 + m);
      g.grad_y0 = V2<T, Space>("swt::grad_y0", B, n);
      auto const wg = p.weight_gradients<T, Space>();
      softwave::deer_neural_ode_gradients(space, weights, in,
                                          V3<const T, Space>(r.y), g, wg, o);
      auto loss = [&]() {
        auto const y = p.reference(p.mlp, p.x, p.y0);
        double sum = 0;
        for (std::size_t i = 0; i < y.size(); ++i) sum += w[i] * y[i];
        return sum;
      };
      auto check = [&](const std::vector<double>& got, std::vector<double>& of,
                       const char* what, std::size_t stride = 1) {
        for (std::size_t i = 0; i < of.size(); i += stride) {
          double const keep = of[i], step = 1e-6;
          of[i] = keep + step;
          double const up = loss();
          of[i] = keep - step;
          double const down = loss();
          of[i] = keep;
          double const want = (up - down) / (2 * step);
          EXPECT_NEAR(got[i], want, 1e-6 * std::max(1.0, std::fabs(want)))
              << what << " " << i;
        }
      };
      auto gx = swt::to_host(g.grad_x);
      // Without the weights' gradients (their sums skipped): the same dL/dx.
      softwave::DeerGradients<T, Space> inputs_only = g;
      inputs_only.grad_x = V3<T, Space>("swt::grad_x_alone", B, steps, 1 + m);
      softwave::deer_neural_ode_gradients(
          space, weights, in, V3<const T, Space>(r.y), inputs_only, {}, o);
      EXPECT_EQ(worst_difference(swt::to_host(inputs_only.grad_x), gx), 0.0);
      // Past a sequence's length its inputs do not count.
      for (int b = 0; b < B; ++b)
        for (int t = p.length(b); t < steps; ++t)
          for (int j = 0; j < 1 + m; ++j)
            EXPECT_EQ(gx[(std::size_t(b) * steps + t) * (1 + m) + j], 0.0);
      check(gx, p.x, "x", steps > 7 ? 7 : 1);
      check(swt::to_host(g.grad_y0), p.y0, "y0");
      check(swt::to_host(wg.weight_hidden), p.mlp.w_hidden, "weight_hidden");
      check(swt::to_host(wg.bias_hidden), p.mlp.b_hidden, "bias_hidden");
      check(swt::to_host(wg.weight_out), p.mlp.w_out, "weight_out");
      check(swt::to_host(wg.bias_out), p.mlp.b_out, "bias_out");
    }
}

// The sequential backward keeps each sequence's values (for n = 1 and no
// inputs, 3h + 1 weight sums and the field's 2h) in an array of at most 2^25,
// so a wide field's batch runs in groups of sequences: here 102 a group, so
// 200 sequences take two. Its gradients equal those of the same sequences in
// halves that each fit in one group: the inputs' to the last bit (each
// sequence's sweep is its own), the weights' to their sums' rounding.
TYPED_TEST(DeerNeuralOdeDouble, SequentialBackwardInGroupsMatchesOneGroup) {
  using Space = TypeParam;
  using T = double;
  SWT_SEEDED_RNG(rng);
  Space space;
  int const B = 200, steps = 1, n = 1, m = 0, h = 1 << 16, half = B / 2;
  Problem const p = Problem::make<T>(rng, B, steps, n, m, h, true, true, 1.0);
  softwave::DeerOptions o;
  o.method = softwave::DeerMethod::sequential;
  auto const weights = p.weights<T>(space);
  struct Gradients {
    std::vector<double> x, y0, w_hidden, b_hidden, w_out, b_out;
  };
  // The gradients of L = Σ y over sequences [first, first + count).
  auto gradients = [&](int first, int count) {
    Problem part = p;
    part.B = count;
    part.x.assign(p.x.begin() + std::size_t(first) * steps * (1 + m),
                  p.x.begin() + std::size_t(first + count) * steps * (1 + m));
    part.y0.assign(p.y0.begin() + std::size_t(first) * n,
                   p.y0.begin() + std::size_t(first + count) * n);
    part.lengths.assign(p.lengths.begin() + first,
                        p.lengths.begin() + first + count);
    auto const in = part.inputs<T>(space);
    softwave::DeerResult<T, Space> r;
    r.y = V3<T, Space>("swt::y", count, steps, n);
    softwave::deer_neural_ode(space, weights, in, r, o);
    softwave::DeerGradients<T, Space> g;
    V3<T, Space> const ones("swt::grad_y", count, steps, n);
    Kokkos::deep_copy(space, ones, T(1));
    g.grad_y = ones;
    g.grad_x = V3<T, Space>("swt::grad_x", count, steps, 1 + m);
    g.grad_y0 = V2<T, Space>("swt::grad_y0", count, n);
    auto const wg = p.weight_gradients<T, Space>();
    softwave::deer_neural_ode_gradients(space, weights, in,
                                        V3<const T, Space>(r.y), g, wg, o);
    return Gradients{
        swt::to_host(g.grad_x),         swt::to_host(g.grad_y0),
        swt::to_host(wg.weight_hidden), swt::to_host(wg.bias_hidden),
        swt::to_host(wg.weight_out),    swt::to_host(wg.bias_out)};
  };
  Gradients const whole = gradients(0, B);
  Gradients const first = gradients(0, half), second = gradients(half, half);
  auto joined = [](std::vector<double> a, const std::vector<double>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  EXPECT_EQ(worst_difference(whole.x, joined(first.x, second.x)), 0.0);
  EXPECT_EQ(worst_difference(whole.y0, joined(first.y0, second.y0)), 0.0);
  auto sums_agree = [](const std::vector<double>& got,
                       const std::vector<double>& a,
                       const std::vector<double>& b, const char* what) {
    ASSERT_EQ(got.size(), a.size()) << what;
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - (a[i] + b[i])));
      scale = std::max(scale, std::fabs(a[i] + b[i]));
    }
    EXPECT_GT(scale, 0.0) << what;
    EXPECT_LE(worst, 1e-12 * scale) << what;
  };
  sums_agree(whole.w_hidden, first.w_hidden, second.w_hidden, "weight_hidden");
  sums_agree(whole.b_hidden, first.b_hidden, second.b_hidden, "bias_hidden");
  sums_agree(whole.w_out, first.w_out, second.w_out, "weight_out");
  sums_agree(whole.b_out, first.b_out, second.b_out, "bias_out");
}

// The sequential loop runs a team a sequence where asked (on a device by
// default; the host's threads with sequential_team_size above 1) and the
// field's weights fit the team's fast memory, forward and backward, and
// gives the values of a thread a sequence to rounding: here a field of 48
// hidden units over 16 states, whose products the team's threads share,
// and a wide one (2^13 units) that keeps a thread a sequence.
TYPED_TEST(DeerNeuralOdeDouble, SequentialTeamsMatchAThreadASequence) {
  using Space = TypeParam;
  using T = double;
  SWT_SEEDED_RNG(rng);
  Space space;
  bool const host = swt::on_host<Space>;
  struct Shape {
    int n, m, h;
    bool teams;  // whether the team's memory holds the field
  };
  for (Shape const s : {Shape{16, 2, 48, true}, Shape{2, 1, 1 << 13, false}}) {
    SCOPED_TRACE(::testing::Message() << "n=" << s.n << " h=" << s.h);
    int const B = 5, steps = 40;
    Problem const p =
        Problem::make<T>(rng, B, steps, s.n, s.m, s.h, true, true, 4.0);
    auto const in = p.inputs<T>(space);
    auto const weights = p.weights<T>(space);
    std::vector<double> w(std::size_t(B) * steps * s.n);
    for (double& e : w) e = rng.uniform(-1, 1);
    swt::Batch wb(B, steps, s.n);
    wb.v = w;
    struct Out {
      std::vector<double> y, x, y0, adjoint, w_hidden, b_hidden, w_out, b_out;
      std::set<std::string> kernels;
    };
    auto run = [&](int team) {
      softwave::DeerOptions o;
      o.method = softwave::DeerMethod::sequential;
      o.sequential_team_size = team;
      softwave::DeerResult<T, Space> r;
      r.y = V3<T, Space>("swt::y", B, steps, s.n);
      softwave::DeerGradients<T, Space> g;
      g.grad_y = swt::to_device<T>(space, wb);
      g.grad_x = V3<T, Space>("swt::grad_x", B, steps, 1 + s.m);
      g.grad_y0 = V2<T, Space>("swt::grad_y0", B, s.n);
      g.adjoint = V3<T, Space>("swt::adjoint", B, steps, s.n);
      auto const wg = p.weight_gradients<T, Space>();
      Out out;
      out.kernels = swt::kernel_labels([&] {
        softwave::deer_neural_ode(space, weights, in, r, o);
        softwave::deer_neural_ode_gradients(space, weights, in,
                                            V3<const T, Space>(r.y), g, wg, o);
      });
      out.y = swt::to_host(r.y);
      out.x = swt::to_host(g.grad_x);
      out.y0 = swt::to_host(g.grad_y0);
      out.adjoint = swt::to_host(g.adjoint);
      out.w_hidden = swt::to_host(wg.weight_hidden);
      out.b_hidden = swt::to_host(wg.bias_hidden);
      out.w_out = swt::to_host(wg.weight_out);
      out.b_out = swt::to_host(wg.bias_out);
      return out;
    };
    Out const thread = run(1);
    EXPECT_EQ(thread.kernels.count("softwave::deer::sequential_teams"), 0u);
    for (int team : {2, 0}) {
      SCOPED_TRACE(::testing::Message() << "sequential_team_size " << team);
      Out const got = run(team);
      bool const teams = s.teams && (team > 1 || !host) &&
                         (!host || Space().concurrency() > 1);
      EXPECT_EQ(got.kernels.count("softwave::deer::sequential_teams"),
                teams ? 1u : 0u);
      EXPECT_EQ(
          got.kernels.count("softwave::deer::ode_sequential_backward_teams"),
          teams ? 1u : 0u);
      auto near = [](const std::vector<double>& a, const std::vector<double>& b,
                     const char* what) {
        ASSERT_EQ(a.size(), b.size()) << what;
        double scale = 1;
        for (double v : b) scale = std::max(scale, std::fabs(v));
        EXPECT_LE(worst_difference(a, b), 1e-12 * scale) << what;
      };
      near(got.y, thread.y, "y");
      near(got.x, thread.x, "grad_x");
      near(got.y0, thread.y0, "grad_y0");
      near(got.adjoint, thread.adjoint, "adjoint");
      near(got.w_hidden, thread.w_hidden, "weight_hidden");
      near(got.b_hidden, thread.b_hidden, "bias_hidden");
      near(got.w_out, thread.w_out, "weight_out");
      near(got.b_out, thread.b_out, "bias_out");
    }
  }
}

// On a device the automatic method takes DEER with full Jacobians only up
// to n = 4 (the loop is faster from n = 8 on the H200), and either path
// gives the loop's values. (The host's rule is the engine's: no case here.)
TYPED_TEST(DeerNeuralOde, AutomaticMethodOnADeviceByStateSize) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  if constexpr (swt::on_host<Space>) {
    GTEST_SKIP() << "the rule is a device's";
  } else {
    SWT_SEEDED_RNG(rng);
    Space space;
    for (int n : {2, 8}) {
      SCOPED_TRACE(::testing::Message() << "n=" << n);
      int const B = 2, steps = 1000;
      Problem const p =
          Problem::make<T>(rng, B, steps, n, 0, 4, false, true, 10.0);
      auto const expected = p.reference(p.mlp, p.x, p.y0);
      double scale = 1;
      for (double v : expected) scale = std::max(scale, std::fabs(v));
      std::vector<int> path;
      auto const y = p.run<T>(space, softwave::DeerOptions{}, &path);
      int const want = int(n <= 4 ? softwave::DeerPath::deer
                                  : softwave::DeerPath::sequential);
      for (int b = 0; b < B; ++b) EXPECT_EQ(path[b], want) << "sequence " << b;
      // As MatchesTheFloat64Loop bounds DEER's values.
      double const bound = 2 * (std::is_same_v<T, float> ? 2e-6 : 1e-13) *
                           scale * std::sqrt(double(steps));
      EXPECT_LE(worst_difference(y, expected), bound);
    }
  }
}

// Shapes that disagree and values that are not finite name the argument.
TYPED_TEST(DeerNeuralOde, BadInputNamesTheArgument) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  SWT_SEEDED_RNG(rng);
  Space space;
  Problem p = Problem::make<T>(rng, 2, 5, 2, 1, 3, false, true, 1.0);
  auto const in = p.inputs<T>(space);
  auto const good = p.weights<T>(space);
  softwave::DeerResult<T, Space> r;
  r.y = V3<T, Space>("swt::y", 2, 5, 2);
  auto forward = [&](const softwave::NeuralOdeWeights<T, Space>& w,
                     const softwave::DeerInputs<T, Space>& i) {
    return [&, w, i]() { softwave::deer_neural_ode(space, w, i, r); };
  };
  auto w = good;
  w.weight_hidden = V2<const T, Space>(V2<T, Space>("swt::w", 3, 2));
  EXPECT_TRUE(swt::throws_naming("weight_hidden", forward(w, in)));
  w = good;
  w.bias_out = V1<const T, Space>(V1<T, Space>("swt::b", 3));
  EXPECT_TRUE(swt::throws_naming("bias_out", forward(w, in)));
  w = good;
  w.bias_hidden = V1<const T, Space>(V1<T, Space>("swt::b", 2));
  EXPECT_TRUE(swt::throws_naming("bias_hidden", forward(w, in)));
  w = good;
  w.weight_out = V2<const T, Space>();
  EXPECT_TRUE(swt::throws_naming("weight_out", forward(w, in)));
  softwave::DeerOptions no_team;
  no_team.sequential_team_size = -1;
  EXPECT_TRUE(swt::throws_naming("sequential_team_size", [&]() {
    softwave::deer_neural_ode(space, good, in, r, no_team);
  }));
  auto no_columns = in;
  no_columns.x = V3<const T, Space>(V3<T, Space>("swt::x", 2, 5, 0));
  EXPECT_TRUE(swt::throws_naming("x", forward(good, no_columns)));
  auto bad = p;
  bad.mlp.w_out[1] = INFINITY;
  EXPECT_TRUE(
      swt::throws_naming("weight_out", forward(bad.weights<T>(space), in)));
  softwave::DeerGradients<T, Space> g;
  g.grad_y = V3<const T, Space>(V3<T, Space>("swt::gy", 2, 5, 2));
  softwave::NeuralOdeWeightGradients<T, Space> wg;
  wg.weight_out = V2<T, Space>("swt::gw", 3, 2);
  EXPECT_TRUE(swt::throws_naming("grad weight_out", [&]() {
    softwave::deer_neural_ode_gradients(space, good, in,
                                        V3<const T, Space>(r.y), g, wg);
  }));
}

}  // namespace
