// Gradients and expected alignments: the reference sweep, finite differences,
// the cost-tensor backward, invariants of E, grad_output, padding, partial
// output requests, and one long pair (N = M = 5000).

#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>

#include "test_helpers.hpp"

namespace {

using namespace swt;

template <class Space>
class SoftDTWGradients : public ::testing::Test {};
TYPED_TEST_SUITE(SoftDTWGradients, ExecutionSpaces);

template <class T, class Space>
void sweep_gradients(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (const Case& k : sweep_cases(rng, true)) {
    SCOPED_TRACE(k.str());
    const auto [x, y] = case_inputs<T>(rng, k);
    check_value_and_grad<T>(space, k, x, y);
  }
}

SWT_TYPED_TEST_EACH_INPUT(SoftDTWGradients, SweepMatchesReference,
                          sweep_gradients)

// The pair-parallel backward (kernel = pairs: each host thread walks whole
// pairs anti-diagonal by anti-diagonal, keeping the band's R and soft-min
// parts) on the same cases: every cost, γ > 0, band, length and
// grad_output. The cases it does not take (hard DTW, device backends) are
// refused by name.
template <class T, class Space>
void pair_kernel_gradients(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (Case k : sweep_cases(rng, true)) {
    k.setup.kernel = softwave::Kernel::pairs;
    SCOPED_TRACE(k.str());
    // Named, not a structured binding: C++17 lambdas cannot capture those.
    const std::pair<Batch, Batch> inputs = case_inputs<T>(rng, k);
    const Batch& x = inputs.first;
    const Batch& y = inputs.second;
    if (!on_host<Space> || k.setup.gamma == 0.0) {
      EXPECT_TRUE(throws_naming(
          "kernel", [&] { library_value_and_grad<T>(space, x, y, k.setup); }));
      continue;
    }
    check_value_and_grad<T>(space, k, x, y);
    if (k.setup.cost == ref::Cost::sqeuclidean) {
      SCOPED_TRACE("cost tensor");
      check_cost_tensor<T>(space, rng, k);
    }
  }
}

SWT_TYPED_TEST_EACH_INPUT(SoftDTWGradients, PairKernelMatchesReference,
                          pair_kernel_gradients)

// ------------------------------------------------------ finite differences

// Central differences of the library's own values (float64) against its
// gradients, on every entry of every pair's valid region. l1 inputs keep
// every |x_ik − y_jk| ≥ 1e-3 (away from the kinks); cosine inputs are signed.
TYPED_TEST(SoftDTWGradients, FiniteDifferencesSeries) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const double h = 1e-6;
  for (ref::Cost cost : kCosts)
    for (double gamma : {0.01, 0.1, 1.0})
      for (bool banded : {false, true}) {
        const int B = 2, n = 7, m = 5, d = 3;
        Config s;
        s.cost = cost;
        s.gamma = gamma;
        if (banded) s.band = 1;
        s.len_x = {n, rng.integer(2, n)};
        s.len_y = {rng.integer(2, m), m};
        s.grad_output = {1.0, -0.5};
        SCOPED_TRACE(s.str());
        Batch x, y;
        for (bool away = false; !away;) {
          x = random_batch(rng, B, n, d, -1.0, 1.0);
          y = random_batch(rng, B, m, d, -1.0, 1.0);
          away = true;
          if (cost == ref::Cost::l1)
            for (int b = 0; b < B; ++b)
              for (int i = 0; i < n; ++i)
                for (int j = 0; j < m; ++j)
                  for (int k = 0; k < d; ++k)
                    if (std::fabs(x(b, i, k) - y(b, j, k)) < 1e-3) away = false;
        }
        const Results got = library_value_and_grad<double>(space, x, y, s);
        expect_central_differences(
            got, x, y, s, h, [&](const Batch& xx, const Batch& yy) {
              return library_values<double>(space, xx, yy, s);
            });
      }
}

// grad_cost = grad_output · ∂value/∂C, checked by central differences.
TYPED_TEST(SoftDTWGradients, FiniteDifferencesCostTensor) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const double h = 1e-6;
  for (double gamma : {0.01, 0.1, 1.0})
    for (bool banded : {false, true}) {
      const int B = 2, n = 6, m = 8;
      Config s;
      s.gamma = gamma;
      if (banded) s.band = 1;
      s.len_x = {rng.integer(1, n), n};
      s.len_y = {m, rng.integer(1, m)};
      s.grad_output = {2.0, -1.0};
      SCOPED_TRACE(s.str());
      const Batch c = random_batch(rng, B, n, m, -0.5, 1.0);
      const Results got = library_cost<double>(space, c, s, true);
      std::vector<double> fd(got.alignment.size(), 0.0);
      for (int b = 0; b < B; ++b)
        for (int i = 0; i < s.len_x[b]; ++i)
          for (int j = 0; j < s.len_y[b]; ++j) {
            Batch p = c, q = c;
            p(b, i, j) += h;
            q(b, i, j) -= h;
            const double vp =
                library_cost<double>(space, p, s, false).values[b];
            const double vq =
                library_cost<double>(space, q, s, false).values[b];
            fd[(static_cast<std::size_t>(b) * n + i) * m + j] =
                s.grad_output[b] * (vp - vq) / (2 * h);
          }
      EXPECT_TRUE(near_arrays(got.alignment, fd, 1e-5, 1e-3,
                              "grad_cost vs finite differences"));
    }
}

// ------------------------------------------------------------ cost tensor

template <class Space>
class SoftDTWCostTensor : public ::testing::Test {};
TYPED_TEST_SUITE(SoftDTWCostTensor, ExecutionSpaces);

template <class T, class Space>
void sweep_cost_gradients(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (const Case& k : sweep_cases(rng, true)) {
    if (k.setup.cost != ref::Cost::sqeuclidean) continue;  // ignored here
    SCOPED_TRACE(k.str() + " (cost tensor)");
    check_cost_tensor<T>(space, rng, k);
  }
}

SWT_TYPED_TEST_EACH_INPUT(SoftDTWCostTensor, GradientSweepMatchesReference,
                          sweep_cost_gradients)

// --------------------------------------------------------- E, invariants

// E ∈ [0, 1]; E = 1 at both corners (every path passes there); every row and
// column holds at least one path cell, so row and column sums are ≥ 1; a path
// has at most N + M − 1 cells; E = 0 outside the band and outside the pair.
TYPED_TEST(SoftDTWGradients, AlignmentInvariants) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts)
    for (double gamma : {1e-3, 0.1, 1.0, 10.0}) {
      const int B = 4, n = rng.integer(1, 60), m = rng.integer(1, 60);
      Config s;
      s.cost = cost;
      s.gamma = gamma;
      s.band = rng.coin() ? std::optional<std::int64_t>(rng.integer(0, 5))
                          : std::nullopt;
      s.len_x = random_lengths(rng, B, n);
      s.len_y = random_lengths(rng, B, m);
      s.tile = rng.coin() ? 0 : 8;
      SCOPED_TRACE(s.str() + " N=" + std::to_string(n) +
                   " M=" + std::to_string(m));
      const Batch x = random_batch(rng, B, n, 3, -1.0, 1.0),
                  y = random_batch(rng, B, m, 3, -1.0, 1.0);
      const Results got = library_value_and_grad<double>(space, x, y, s);
      const double slack = 1e-9;
      for (int b = 0; b < B; ++b) {
        const int nb = s.len_x[b], mb = s.len_y[b];
        auto e = [&](int i, int j) {
          return got.alignment[(static_cast<std::size_t>(b) * n + i) * m + j];
        };
        EXPECT_NEAR(e(0, 0), 1.0, slack) << "b=" << b;
        EXPECT_NEAR(e(nb - 1, mb - 1), 1.0, slack) << "b=" << b;
        double total = 0.0;
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < m; ++j) {
            const bool inside =
                i < nb && j < mb && ref::in_band(i, j, nb, mb, s.band);
            if (!inside) {
              EXPECT_EQ(e(i, j), 0.0) << "outside the pair or band: b=" << b
                                      << " (" << i << "," << j << ")";
              continue;
            }
            EXPECT_GE(e(i, j), -slack)
                << "b=" << b << " (" << i << "," << j << ")";
            EXPECT_LE(e(i, j), 1.0 + slack)
                << "b=" << b << " (" << i << "," << j << ")";
            total += e(i, j);
          }
        for (int i = 0; i < nb; ++i) {
          double row = 0.0;
          for (int j = 0; j < mb; ++j) row += e(i, j);
          EXPECT_GE(row, 1.0 - slack) << "row " << i << " b=" << b;
        }
        for (int j = 0; j < mb; ++j) {
          double col = 0.0;
          for (int i = 0; i < nb; ++i) col += e(i, j);
          EXPECT_GE(col, 1.0 - slack) << "column " << j << " b=" << b;
        }
        EXPECT_LE(total, nb + mb - 1 + slack) << "b=" << b;
        EXPECT_GE(total, std::max(nb, mb) - slack) << "b=" << b;
      }
    }
}

// Gradients are of Σ_b grad_output[b]·value[b]: linear in grad_output (zero
// and negative entries included); values do not depend on it.
TYPED_TEST(SoftDTWGradients, GradOutputScalesGradientsLinearly) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts)
    for (double gamma : {0.0, 0.1}) {
      const int B = 5, n = rng.integer(1, 40), m = rng.integer(1, 40), d = 4;
      Config unit;
      unit.cost = cost;
      unit.gamma = gamma;
      SCOPED_TRACE(unit.str());
      const Batch x = random_batch(rng, B, n, d, -1.0, 1.0),
                  y = random_batch(rng, B, m, d, -1.0, 1.0);
      Config scaled = unit;
      scaled.grad_output = {0.0, -1.0, 3.5, 1e-3, -250.0};
      const Results a = library_value_and_grad<double>(space, x, y, unit);
      const Results g = library_value_and_grad<double>(space, x, y, scaled);
      std::vector<double> gx = a.grad_x, gy = a.grad_y;
      for (std::size_t i = 0; i < gx.size(); ++i)
        gx[i] *= scaled.grad_output[i / (n * d)];
      for (std::size_t i = 0; i < gy.size(); ++i)
        gy[i] *= scaled.grad_output[i / (m * d)];
      EXPECT_TRUE(near_values(g.values, a.values, 1e-15, 1.0, "values"));
      EXPECT_TRUE(near_arrays(g.grad_x, gx, 1e-12, 1e-300, "grad_x"));
      EXPECT_TRUE(near_arrays(g.grad_y, gy, 1e-12, 1e-300, "grad_y"));
      // Cost tensor: grad_cost is E scaled by grad_output.
      Batch c = random_batch(rng, B, n, m);
      const Results ca = library_cost<double>(space, c, unit, true),
                    cg = library_cost<double>(space, c, scaled, true);
      std::vector<double> gc = ca.alignment;
      for (std::size_t i = 0; i < gc.size(); ++i)
        gc[i] *= scaled.grad_output[i / (n * m)];
      EXPECT_TRUE(near_arrays(cg.alignment, gc, 1e-12, 1e-300, "grad_cost"));
    }
}

// The alignment output is E itself ("E, zero outside each pair", entries in
// [0, 1]), whatever grad_output scales the gradients by, as the header
// states (only grad_cost, the cost-tensor gradient, is scaled).
TYPED_TEST(SoftDTWGradients, AlignmentIgnoresGradOutput) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const int B = 3, n = 12, m = 9;
  const Batch x = random_batch(rng, B, n, 2), y = random_batch(rng, B, m, 2);
  Config unit;
  unit.gamma = 0.5;
  Config scaled = unit;
  scaled.grad_output = {2.0, 0.0, -1.0};
  EXPECT_TRUE(
      near_arrays(library_value_and_grad<double>(space, x, y, scaled).alignment,
                  library_value_and_grad<double>(space, x, y, unit).alignment,
                  1e-15, 1.0, "alignment with grad_output vs without"));
}

// A padded pair with lengths gives the unpadded pair's gradients, and the
// gradients and E are exactly 0 in the padding (outputs are prefilled with a
// sentinel, inputs' padding with NaN: padding is never read).
TYPED_TEST(SoftDTWGradients, PaddedPairEqualsUnpaddedPair) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (ref::Cost cost : kCosts)
    for (double gamma : {0.0, 0.05, 1.0}) {
      const int B = 4, n = 30, m = 26, d = 3;
      Config s;
      s.cost = cost;
      s.gamma = gamma;
      s.band = rng.coin() ? std::optional<std::int64_t>(rng.integer(0, 3))
                          : std::nullopt;
      s.len_x = random_lengths(rng, B, n);
      s.len_y = random_lengths(rng, B, m);
      s.grad_output = {1.0, 0.5, -2.0, 1.0};
      SCOPED_TRACE(s.str());
      Batch x(B, n, d, nan), y(B, m, d, nan);
      for (int b = 0; b < B; ++b) {
        for (int i = 0; i < s.len_x[b]; ++i)
          for (int k = 0; k < d; ++k) x(b, i, k) = rng.uniform(-1.0, 1.0);
        for (int j = 0; j < s.len_y[b]; ++j)
          for (int k = 0; k < d; ++k) y(b, j, k) = rng.uniform(-1.0, 1.0);
      }
      const Results padded = library_value_and_grad<double>(space, x, y, s);
      for (int b = 0; b < B; ++b) {
        const int nb = s.len_x[b], mb = s.len_y[b];
        SCOPED_TRACE("b=" + std::to_string(b) + " N_b=" + std::to_string(nb) +
                     " M_b=" + std::to_string(mb));
        Batch xb(1, nb, d), yb(1, mb, d);
        for (int i = 0; i < nb; ++i)
          for (int k = 0; k < d; ++k) xb(0, i, k) = x(b, i, k);
        for (int j = 0; j < mb; ++j)
          for (int k = 0; k < d; ++k) yb(0, j, k) = y(b, j, k);
        Config single = s;
        single.len_x.clear();
        single.len_y.clear();
        single.grad_output = {s.grad_output[b]};
        const Results alone =
            library_value_and_grad<double>(space, xb, yb, single);
        EXPECT_TRUE(
            near_values({padded.values[b]}, alone.values, 1e-12, 1.0, "value"));
        std::vector<double> gx, gy, e;
        for (int i = 0; i < n; ++i)
          for (int k = 0; k < d; ++k) {
            const double g =
                padded.grad_x[(static_cast<std::size_t>(b) * n + i) * d + k];
            if (i < nb)
              gx.push_back(g);
            else
              EXPECT_EQ(g, 0.0) << "grad_x in the padding, row " << i;
          }
        for (int j = 0; j < m; ++j)
          for (int k = 0; k < d; ++k) {
            const double g =
                padded.grad_y[(static_cast<std::size_t>(b) * m + j) * d + k];
            if (j < mb)
              gy.push_back(g);
            else
              EXPECT_EQ(g, 0.0) << "grad_y in the padding, row " << j;
          }
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < m; ++j) {
            const double a =
                padded.alignment[(static_cast<std::size_t>(b) * n + i) * m + j];
            if (i < nb && j < mb)
              e.push_back(a);
            else
              EXPECT_EQ(a, 0.0)
                  << "alignment outside the pair at (" << i << "," << j << ")";
          }
        EXPECT_TRUE(near_arrays(gx, alone.grad_x, 1e-12, 1e-300, "grad_x"));
        EXPECT_TRUE(near_arrays(gy, alone.grad_y, 1e-12, 1e-300, "grad_y"));
        EXPECT_TRUE(near_arrays(e, alone.alignment, 1e-12, 1.0, "alignment"));
      }
    }
}

TYPED_TEST(SoftDTWGradients, WideBandEqualsNoBand) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (double gamma : {0.0, 0.1, 1.0}) {
    const int B = 2, n = rng.integer(1, 40), m = rng.integer(1, 40);
    const Batch x = random_batch(rng, B, n, 3), y = random_batch(rng, B, m, 3);
    Config none;
    none.gamma = gamma;
    const Results want = library_value_and_grad<double>(space, x, y, none);
    Config banded = none;
    banded.band = std::max(n, m);
    SCOPED_TRACE(banded.str() + " N=" + std::to_string(n) +
                 " M=" + std::to_string(m));
    const Results got = library_value_and_grad<double>(space, x, y, banded);
    EXPECT_TRUE(near_values(got.values, want.values, 1e-12, 1.0, "values"));
    EXPECT_TRUE(near_arrays(got.grad_x, want.grad_x, 1e-12, 1e-300, "grad_x"));
    EXPECT_TRUE(near_arrays(got.grad_y, want.grad_y, 1e-12, 1e-300, "grad_y"));
    EXPECT_TRUE(
        near_arrays(got.alignment, want.alignment, 1e-12, 1.0, "alignment"));
  }
}

// sdtw is symmetric, so grad_x(x, y) = grad_y(y, x) and E(y, x) = E(x, y)ᵀ.
TYPED_TEST(SoftDTWGradients, SymmetryOfGradients) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (ref::Cost cost : kCosts) {
    const int B = 2, n = rng.integer(1, 30), m = rng.integer(1, 30), d = 3;
    Config s;
    s.cost = cost;
    s.gamma = 0.2;
    s.band = rng.integer(0, 3);
    SCOPED_TRACE(s.str() + " N=" + std::to_string(n) +
                 " M=" + std::to_string(m));
    const Batch x = random_batch(rng, B, n, d, -1.0, 1.0),
                y = random_batch(rng, B, m, d, -1.0, 1.0);
    const Results xy = library_value_and_grad<double>(space, x, y, s),
                  yx = library_value_and_grad<double>(space, y, x, s);
    EXPECT_TRUE(near_arrays(yx.grad_y, xy.grad_x, 1e-10, 1e-300,
                            "grad_y(y,x) vs grad_x(x,y)"));
    EXPECT_TRUE(near_arrays(yx.grad_x, xy.grad_y, 1e-10, 1e-300,
                            "grad_x(y,x) vs grad_y(x,y)"));
    std::vector<double> et(yx.alignment.size());
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < n; ++i)
        for (int j = 0; j < m; ++j)
          et[(static_cast<std::size_t>(b) * n + i) * m + j] =
              yx.alignment[(static_cast<std::size_t>(b) * m + j) * n + i];
    EXPECT_TRUE(
        near_arrays(et, xy.alignment, 1e-10, 1.0, "E(y,x)^T vs E(x,y)"));
  }
}

// Any subset of outputs may be requested (empty views are skipped, values
// included); each equals what a full request returns.
TYPED_TEST(SoftDTWGradients, PartialOutputRequestsAgree) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (double gamma : {0.0, 0.3}) {
    const int B = 3, n = rng.integer(1, 40), m = rng.integer(1, 40), d = 3;
    Config s;
    s.gamma = gamma;
    s.len_x = random_lengths(rng, B, n);
    s.len_y = random_lengths(rng, B, m);
    SCOPED_TRACE(s.str());
    const Batch x = random_batch(rng, B, n, d), y = random_batch(rng, B, m, d);
    const Results full = library_value_and_grad<double>(space, x, y, s);
    EXPECT_TRUE(near_values(full.values, library_values<double>(space, x, y, s),
                            1e-14, 1.0,
                            "value_and_grad values vs soft_dtw values"));
    const auto dx = to_device<double>(space, x),
               dy = to_device<double>(space, y);
    const auto lengths = s.lengths(space);
    for (int only = 0; only < 3; ++only) {
      softwave::SeriesGradients<double, TypeParam> g;
      if (only == 0) g.grad_x = output3<double>(space, "swt::grad_x", B, n, d);
      if (only == 1) g.grad_y = output3<double>(space, "swt::grad_y", B, m, d);
      if (only == 2)
        g.alignment = output3<double>(space, "swt::alignment", B, n, m);
      softwave::soft_dtw_value_and_grad(
          space, dx, dy, Dev1<double, TypeParam>(), g, s.options(), lengths);
      if (only == 0) {
        EXPECT_TRUE(near_arrays(to_host(g.grad_x), full.grad_x, 1e-14, 1e-300,
                                "grad_x alone"));
      } else if (only == 1) {
        EXPECT_TRUE(near_arrays(to_host(g.grad_y), full.grad_y, 1e-14, 1e-300,
                                "grad_y alone"));
      } else {
        EXPECT_TRUE(near_arrays(to_host(g.alignment), full.alignment, 1e-14,
                                1.0, "alignment alone"));
      }
    }
  }
}

// One long pair: N = M = 5000, d = 1, value and both gradients in float64.
TYPED_TEST(SoftDTWGradients, LongPair5000) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const int n = 5000;
  Case k;
  k.B = 1;
  k.n = k.m = n;
  k.d = 1;
  k.setup.gamma = 0.1;
  SCOPED_TRACE(k.str());
  const Batch x = random_batch(rng, 1, n, 1), y = random_batch(rng, 1, n, 1);
  const auto dx = to_device<double>(space, x), dy = to_device<double>(space, y);
  auto values = output1<double>(space, "swt::values", 1);
  softwave::SeriesGradients<double, TypeParam> g;
  g.grad_x = output3<double>(space, "swt::grad_x", 1, n, 1);
  g.grad_y = output3<double>(space, "swt::grad_y", 1, n, 1);
  const auto start = std::chrono::steady_clock::now();
  softwave::soft_dtw_value_and_grad(space, dx, dy, values, g,
                                    k.setup.options());
  space.fence();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::cout << "[ timing   ] 5000x5000 value+grad (library): " << seconds
            << " s" << std::endl;
  ::testing::Test::RecordProperty("library_seconds", std::to_string(seconds));
  const ref::Result want =
      ref::soft_dtw(x.series(0, n), y.series(0, n), k.setup.ref_options());
  EXPECT_TRUE(near_values(to_host(values), {want.value}, 1e-9, 1.0, "value"));
  const double tol =
      array_rtol<double>(k.setup.gamma, std::fabs(want.value), 1.0, n, n);
  EXPECT_TRUE(
      near_arrays(to_host(g.grad_x), want.grad_x.v, tol, 1e-300, "grad_x"));
  EXPECT_TRUE(
      near_arrays(to_host(g.grad_y), want.grad_y.v, tol, 1e-300, "grad_y"));
}

}  // namespace
