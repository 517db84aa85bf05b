// Self-tests of the float64 reference (tests/reference/softdtw_reference.hpp):
// closed forms, brute force over all warping paths, finite differences. They
// need neither Kokkos nor the library, so the reference is trusted before the
// library is compared with it.

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <sstream>

#include "reference/softdtw_reference.hpp"

namespace ref = softwave_ref;

namespace {

struct LocalRng {
  std::uint64_t seed = std::random_device{}();
  std::mt19937_64 engine{seed};
  double uniform(double lo = 0.0, double hi = 1.0) {
    return std::uniform_real_distribution<double>(lo, hi)(engine);
  }
};

ref::Table random_table(LocalRng& rng, int n, int m, double lo = 0.0, double hi = 1.0) {
  ref::Table t(n, m);
  for (double& e : t.a) e = rng.uniform(lo, hi);
  return t;
}

ref::Series random_series(LocalRng& rng, int n, int d) {
  ref::Series s(n, d);
  for (double& e : s.v) e = rng.uniform(-1.0, 1.0);
  return s;
}

const double kGammas[] = {0.0, 1e-3, 0.01, 0.1, 1.0, 10.0};

TEST(Reference, SingleRowIsTheSumOfCosts) {
  // 1×m (and m×1): one warping path, so every γ gives the plain sum and E = 1.
  LocalRng rng;
  SCOPED_TRACE(rng.seed);
  for (double gamma : kGammas) {
    const ref::Table c = random_table(rng, 1, 5);
    ref::Table ct(5, 1);
    double sum = 0.0;
    for (int j = 0; j < 5; ++j) sum += (ct(j, 0) = c(0, j));
    for (const ref::Table* t : {&c, static_cast<const ref::Table*>(&ct)}) {
      const ref::Result r = ref::soft_dtw_cost(*t, gamma, std::nullopt);
      EXPECT_NEAR(r.value, sum, 1e-14);
      for (double e : r.e.a) EXPECT_NEAR(e, 1.0, 1e-11);  // rounding / γ
    }
  }
}

TEST(Reference, TwoByTwoClosedForm) {
  LocalRng rng;
  SCOPED_TRACE(rng.seed);
  const ref::Table c = random_table(rng, 2, 2);
  for (double gamma : {0.01, 0.5, 3.0}) {
    const double a = c(0, 0), b = c(0, 0) + c(0, 1), d = c(0, 0) + c(1, 0);
    const double sm = -gamma * std::log(std::exp(-a / gamma) + std::exp(-b / gamma) +
                                        std::exp(-d / gamma));
    const ref::Result r = ref::soft_dtw_cost(c, gamma, std::nullopt);
    EXPECT_NEAR(r.value, c(1, 1) + sm, 1e-13);
    // E(0,1) is the probability of the path through (0,1).
    const double p01 = std::exp(-(b - sm) / gamma);
    EXPECT_NEAR(r.e(0, 1), p01, 1e-13);
    EXPECT_NEAR(r.e(0, 0), 1.0, 1e-13);
    EXPECT_NEAR(r.e(1, 1), 1.0, 1e-13);
  }
}

TEST(Reference, MatchesBruteForceOverAllPaths) {
  LocalRng rng;
  SCOPED_TRACE(rng.seed);
  for (int n = 1; n <= 4; ++n)
    for (int m = 1; m <= 4; ++m)
      for (double gamma : kGammas)
        for (int w = -1; w <= 2; ++w) {
          const std::optional<std::int64_t> band =
              w < 0 ? std::nullopt : std::optional<std::int64_t>(w);
          std::ostringstream what;
          what << n << "x" << m << " gamma=" << gamma << " band=" << w;
          SCOPED_TRACE(what.str());
          const ref::Table c = random_table(rng, n, m, -0.5, 2.0);
          const ref::Result r = ref::soft_dtw_cost(c, gamma, band);
          const ref::BruteForce bf = ref::brute_force(c, gamma, band);
          ASSERT_GT(bf.paths, 0);
          EXPECT_NEAR(r.value, bf.value, 1e-12 * (1.0 + std::fabs(bf.value)));
          if (gamma > 0.0) {
            // E's weights are exp((R − R')/γ): R (here at most 2·(n + m))
            // carries ~ε|R| of rounding, which the exponent scales by 1/γ
            // (1.3e-12 seen at γ = 1e-3).
            const double tol = 1e-12 + 4e-15 * 2.0 * (n + m) / gamma;
            for (std::size_t k = 0; k < c.a.size(); ++k) EXPECT_NEAR(r.e.a[k], bf.e.a[k], tol);
          }
        }
}

TEST(Reference, PathCountsAreDelannoyNumbers) {
  ref::Table c(4, 4, 0.0);
  long count = 0;
  ref::for_each_path(4, 4, std::nullopt, [&](const auto&) { ++count; });
  EXPECT_EQ(count, 63);  // Delannoy D(3, 3)
  count = 0;
  ref::for_each_path(3, 4, std::nullopt, [&](const auto&) { ++count; });
  EXPECT_EQ(count, 25);  // D(2, 3)
}

TEST(Reference, BandDefinition) {
  // N = M: exactly |i − j| ≤ w.
  for (int n : {1, 5, 9})
    for (int w = 0; w <= 3; ++w)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j)
          EXPECT_EQ(ref::in_band(i, j, n, n, w), std::abs(i - j) <= w);
  // Worked examples from the formula, N ≤ M: 2×5, w = 0: row 0 keeps
  // floor(0)=0..ceil(2.5)−1=2, row 1 keeps floor(2.5)=2..ceil(5)−1=4.
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(ref::in_band(0, j, 2, 5, 0), j <= 2) << j;
    EXPECT_EQ(ref::in_band(1, j, 2, 5, 0), j >= 2) << j;
    EXPECT_EQ(ref::in_band(j, 0, 5, 2, 0), j <= 2) << j;  // transposed
    EXPECT_EQ(ref::in_band(j, 1, 5, 2, 0), j >= 2) << j;
  }
  // A band at least max(N, M) wide keeps every cell; every band keeps a path.
  for (int n = 1; n <= 12; ++n)
    for (int m = 1; m <= 12; ++m) {
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < m; ++j) EXPECT_TRUE(ref::in_band(i, j, n, m, std::max(n, m)));
      for (int w = 0; w <= 2; ++w) {
        const ref::Table r = ref::forward(ref::Table(n, m, 1.0), 0.0, w);
        EXPECT_TRUE(std::isfinite(r(n, m))) << n << "x" << m << " w=" << w;
      }
    }
}

TEST(Reference, HardPathTieBreak) {
  // All-zero costs: every path ties. From (2,1) the diagonal (1,0) wins; from
  // (1,0) only up is finite. 0-based path: (0,0), (1,0), (2,1).
  const ref::Table r = ref::forward(ref::Table(3, 2, 0.0), 0.0, std::nullopt);
  const auto p = ref::hard_path(r);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], std::make_pair(0, 0));
  EXPECT_EQ(p[1], std::make_pair(1, 0));
  EXPECT_EQ(p[2], std::make_pair(2, 1));
  // Left wins when strictly smallest: 2×3 with C(0,1) = 3, all else 0.
  // R(2,3) = min(diag R(1,2) = 3, up R(1,3) = 3, left R(2,2) = 0) -> left.
  ref::Table u(2, 3, 0.0);
  u(0, 1) = 3.0;
  const auto p3 = ref::hard_path(ref::forward(u, 0.0, std::nullopt));
  ASSERT_EQ(p3.size(), 3u);
  EXPECT_EQ(p3[1], std::make_pair(1, 1));
  // Exact up/left tie with diagonal worse: 3×3, C zero on both off-diagonal
  // routes into (2,2), diagonal predecessor (1,1) expensive.
  ref::Table v(3, 3, 0.0);
  v(1, 1) = 10.0;
  // R(2,3) (cell (1,2)) and R(3,2) (cell (2,1)) are both 0; R(2,2) = 10:
  // up (1,2) must win over left (2,1).
  const auto p4 = ref::hard_path(ref::forward(v, 0.0, std::nullopt));
  ASSERT_GE(p4.size(), 2u);
  EXPECT_EQ(p4[p4.size() - 2], std::make_pair(1, 2));
}

TEST(Reference, GradientsMatchFiniteDifferences) {
  LocalRng rng;
  SCOPED_TRACE(rng.seed);
  for (ref::Cost cost : {ref::Cost::sqeuclidean, ref::Cost::l1, ref::Cost::cosine})
    for (double gamma : {0.1, 1.0}) {
      SCOPED_TRACE(ref::to_string(cost));
      const ref::Series x = random_series(rng, 5, 3), y = random_series(rng, 4, 3);
      const ref::Options o{gamma, cost, std::nullopt};
      const ref::Result r = ref::soft_dtw(x, y, o);
      const double h = 1e-6;
      for (int which = 0; which < 2; ++which) {
        const ref::Series& s = which == 0 ? x : y;
        const ref::Series& g = which == 0 ? r.grad_x : r.grad_y;
        for (std::size_t k = 0; k < s.v.size(); ++k) {
          ref::Series xp = x, yp = y, xm = x, ym = y;
          (which == 0 ? xp : yp).v[k] += h;
          (which == 0 ? xm : ym).v[k] -= h;
          const double fd =
              (ref::soft_dtw_value(xp, yp, o) - ref::soft_dtw_value(xm, ym, o)) / (2 * h);
          EXPECT_NEAR(g.v[k], fd, 1e-6 * (1.0 + std::fabs(fd))) << "which=" << which << " k=" << k;
        }
      }
      // E = ∂value/∂C.
      const double h2 = 1e-6;
      for (std::size_t k = 0; k < r.cost.a.size(); ++k) {
        ref::Table cp = r.cost, cm = r.cost;
        cp.a[k] += h2;
        cm.a[k] -= h2;
        const double fd = (ref::forward(cp, gamma, std::nullopt)(5, 4) -
                           ref::forward(cm, gamma, std::nullopt)(5, 4)) / (2 * h2);
        EXPECT_NEAR(r.e.a[k], fd, 1e-6);
      }
    }
}

TEST(Reference, CosineClampBelowEpsilon) {
  // A zero vector: ‖x‖ is clamped to ε, so δ = 1 and ∂δ/∂x = −y/(ε‖y‖).
  ref::Series x(1, 2), y(1, 2);
  y(0, 0) = 3.0;
  y(0, 1) = 4.0;
  EXPECT_DOUBLE_EQ(ref::cost_value(x.row(0), y.row(0), 2, ref::Cost::cosine), 1.0);
  double gx[2] = {0, 0}, gy[2] = {0, 0};
  ref::add_cost_gradient(x.row(0), y.row(0), 2, ref::Cost::cosine, 1.0, gx, gy);
  EXPECT_NEAR(gx[0], -3.0 / (1e-8 * 5.0), 1e-3);
  EXPECT_NEAR(gx[1], -4.0 / (1e-8 * 5.0), 1e-3);
  EXPECT_DOUBLE_EQ(gy[0], 0.0);
}

TEST(Reference, DivergenceOfASeriesWithItselfIsZeroAndGradientsMatchFD) {
  LocalRng rng;
  SCOPED_TRACE(rng.seed);
  const ref::Series x = random_series(rng, 4, 2), y = random_series(rng, 6, 2);
  const ref::Options o{0.5, ref::Cost::sqeuclidean, std::nullopt};
  EXPECT_NEAR(ref::divergence(x, x, o).value, 0.0, 1e-13);
  const ref::Divergence dv = ref::divergence(x, y, o);
  auto value = [&](const ref::Series& a, const ref::Series& b) {
    return ref::soft_dtw_value(a, b, o) -
           0.5 * (ref::soft_dtw_value(a, a, o) + ref::soft_dtw_value(b, b, o));
  };
  const double h = 1e-6;
  for (std::size_t k = 0; k < x.v.size(); ++k) {
    ref::Series xp = x, xm = x;
    xp.v[k] += h;
    xm.v[k] -= h;
    EXPECT_NEAR(dv.grad_x.v[k], (value(xp, y) - value(xm, y)) / (2 * h), 1e-6);
  }
  for (std::size_t k = 0; k < y.v.size(); ++k) {
    ref::Series yp = y, ym = y;
    yp.v[k] += h;
    ym.v[k] -= h;
    EXPECT_NEAR(dv.grad_y.v[k], (value(x, yp) - value(x, ym)) / (2 * h), 1e-6);
  }
}

}  // namespace
