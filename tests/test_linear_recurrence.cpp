// softwave/linear_recurrence.hpp against a float64 step-by-step reference
// on fresh random inputs of many shapes (one step, a row shorter than a
// warp's run, several tiles and look-back windows, lengths that are not a
// multiple of the vector width, misaligned arrays), both directions, with
// and without an initial state, in place; gradients against the float64
// adjoint and against central differences; a NaN that must not hang the
// look-back; bad input.

#include <cmath>
#include <softwave/errors.hpp>
#include <softwave/linear_recurrence.hpp>
#include <vector>

#include "test_helpers.hpp"

namespace {

using swt::worst_difference;
template <class T, class Space>
using Rows = softwave::RecurrenceRows<T, Space>;
template <class T, class Space>
using Row = softwave::RecurrenceRow<T, Space>;

// A random problem rounded to T: a in ±[0, 0.99] (some exactly 0), b and
// y0 in [−1, 1].
template <class T>
struct Problem {
  int rows = 1, steps = 1;
  std::vector<double> a, b, y0, grad_y;
  Problem(swt::Rng& rng, int rows_, int steps_, bool zeros)
      : rows(rows_), steps(steps_) {
    std::size_t const size = std::size_t(rows) * steps;
    auto fill = [&](std::vector<double>& v, std::size_t count, double lo,
                    double hi) {
      v.resize(count);
      for (double& e : v) e = double(T(rng.uniform(lo, hi)));
    };
    fill(a, size, -0.99, 0.99);
    fill(b, size, -1, 1);
    fill(y0, rows, -1, 1);
    fill(grad_y, size, -1, 1);
    if (zeros)
      for (int k = 0; k < 3; ++k) a[rng.integer(0, int(size) - 1)] = 0;
  }
  // Step p of row r in the scan's order: its index in the flat arrays.
  std::size_t at(int r, int p, bool reverse) const {
    return std::size_t(r) * steps + (reverse ? steps - 1 - p : p);
  }
  std::vector<double> forward(bool reverse, bool with_y0) const {
    std::vector<double> y(a.size());
    for (int r = 0; r < rows; ++r) {
      double state = with_y0 ? y0[r] : 0.0;
      for (int p = 0; p < steps; ++p) {
        std::size_t const i = at(r, p, reverse);
        state = a[i] * state + b[i];
        y[i] = state;
      }
    }
    return y;
  }
  // dL/da, dL/db, dL/dy0 of L = Σ grad_y · y.
  void gradients(bool reverse, bool with_y0, std::vector<double>& ga,
                 std::vector<double>& gb, std::vector<double>& gy0) const {
    std::vector<double> const y = forward(reverse, with_y0);
    ga.assign(a.size(), 0);
    gb.assign(a.size(), 0);
    gy0.assign(rows, 0);
    for (int r = 0; r < rows; ++r) {
      double lambda_after = 0, a_after = 0;
      for (int p = steps - 1; p >= 0; --p) {
        std::size_t const i = at(r, p, reverse);
        double const lambda = grad_y[i] + a_after * lambda_after;
        gb[i] = lambda;
        ga[i] = lambda * (p > 0     ? y[at(r, p - 1, reverse)]
                          : with_y0 ? y0[r]
                                    : 0.0);
        lambda_after = lambda;
        a_after = a[i];
      }
      gy0[r] = a_after * lambda_after;
    }
  }
};

double largest(const std::vector<double>& v) {
  double m = 1;
  for (double e : v) m = std::max(m, std::fabs(e));
  return m;
}

template <class T>
double tolerance() {
  return std::is_same_v<T, float> ? 2e-5 : 1e-12;
}

// The kernels a space runs: automatic and portable everywhere, and the
// backend's own where the space has one.
template <class Space>
std::vector<softwave::Kernel> kernels() {
#if defined(KOKKOS_ENABLE_CUDA)
  if (std::is_same_v<Space, Kokkos::Cuda>)
    return {softwave::Kernel::specialised, softwave::Kernel::portable};
#endif
  return {softwave::Kernel::automatic, softwave::Kernel::portable};
}

template <class T, class Space>
Rows<T, Space> rows_view(const std::vector<double>& v, int rows, int steps,
                         const char* label) {
  return swt::to_device2<T, Space>(v, rows, steps, label);
}

template <class Param>
class LinearRecurrence : public ::testing::Test {};
TYPED_TEST_SUITE(LinearRecurrence, swt::ExecutionSpacesDoubleFloat);

TYPED_TEST(LinearRecurrence, MatchesTheSequentialRecurrence) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  Space space;
  SWT_SEEDED_RNG(rng);
  struct Shape {
    int rows, steps;
  };
  // One step; fewer steps than a run; a multiple of the vector width or
  // not; several tiles (4096 float steps, 2048 double); more than one
  // look-back window of 32 tiles.
  std::vector<Shape> const shapes = {
      {1, 1},    {3, 2},    {2, 5},     {5, 31},     {4, 1000},
      {2, 4097}, {3, 8192}, {1, 70001}, {2, 150000}, {17, 333}};
  for (Shape const shape : shapes)
    for (softwave::Kernel kernel : kernels<Space>())
      for (int variant = 0; variant < 4; ++variant) {
        bool const reverse = variant & 1, with_y0 = variant & 2;
        bool const in_place = rng.coin();
        SCOPED_TRACE(::testing::Message()
                     << "rows " << shape.rows << ", steps " << shape.steps
                     << ", kernel " << int(kernel) << ", reverse " << reverse
                     << ", y0 " << with_y0 << ", in place " << in_place);
        Problem<T> problem(rng, shape.rows, shape.steps, rng.coin());
        auto const a =
            rows_view<T, Space>(problem.a, shape.rows, shape.steps, "swt::a");
        auto const b =
            rows_view<T, Space>(problem.b, shape.rows, shape.steps, "swt::b");
        Row<T, Space> const y0 =
            with_y0 ? swt::to_device<T>(space, problem.y0, "swt::y0")
                    : Row<T, Space>();
        Rows<T, Space> y =
            in_place ? b : Rows<T, Space>("swt::y", shape.rows, shape.steps);
        if (!in_place) Kokkos::deep_copy(y, T(swt::kSentinel));
        softwave::LinearRecurrenceOptions options;
        options.reverse = reverse;
        options.kernel = kernel;
        softwave::linear_recurrence<Space, T>(space, a, b, y0, y, options);
        std::vector<double> const want = problem.forward(reverse, with_y0);
        EXPECT_LE(worst_difference(swt::to_host(y), want),
                  tolerance<T>() * largest(want));
      }
}

TYPED_TEST(LinearRecurrence, MisalignedRowsTakeTheElementwisePath) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  using Memory = typename Space::memory_space;
  Space space;
  SWT_SEEDED_RNG(rng);
  int const rows = 3, steps = 8192;  // a multiple of 4: aligned, vectors
  Problem<T> problem(rng, rows, steps, false);
  auto const aligned_a = rows_view<T, Space>(problem.a, rows, steps, "swt::a");
  auto const b = rows_view<T, Space>(problem.b, rows, steps, "swt::b");
  // a one element into a larger allocation: no longer 16-byte aligned.
  Kokkos::View<T*, Memory> storage("swt::storage", rows * steps + 1);
  Kokkos::View<T*, Memory> shifted(storage.data() + 1, rows * steps);
  Kokkos::deep_copy(
      shifted, Kokkos::View<const T*, Memory>(aligned_a.data(), rows * steps));
  Rows<const T, Space> const a(storage.data() + 1, rows, steps);
  Rows<T, Space> y("swt::y", rows, steps);
  softwave::linear_recurrence<Space, T>(space, a, b, Row<const T, Space>(), y);
  std::vector<double> const want = problem.forward(false, false);
  EXPECT_LE(worst_difference(swt::to_host(y), want),
            tolerance<T>() * largest(want));
}

TYPED_TEST(LinearRecurrence, GradientsMatchTheAdjoint) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  Space space;
  SWT_SEEDED_RNG(rng);
  struct Shape {
    int rows, steps;
  };
  std::vector<Shape> const shapes = {{1, 1},    {3, 3},      {2, 64}, {4, 4099},
                                     {2, 9000}, {1, 140000}, {9, 257}};
  for (Shape const shape : shapes)
    for (softwave::Kernel kernel : kernels<Space>())
      for (int variant = 0; variant < 8; ++variant) {
        bool const reverse = variant & 1, with_y0 = variant & 2,
                   everything = variant & 4;
        bool const in_place = rng.coin();
        SCOPED_TRACE(::testing::Message()
                     << "rows " << shape.rows << ", steps " << shape.steps
                     << ", kernel " << int(kernel) << ", reverse " << reverse
                     << ", y0 " << with_y0 << ", grad_a and grad_y0 "
                     << everything << ", in place " << in_place);
        Problem<T> problem(rng, shape.rows, shape.steps, rng.coin());
        // y as the library computes it in float64, rounded to T.
        std::vector<double> y = problem.forward(reverse, with_y0);
        for (double& e : y) e = double(T(e));
        auto const a =
            rows_view<T, Space>(problem.a, shape.rows, shape.steps, "swt::a");
        auto const y_view =
            rows_view<T, Space>(y, shape.rows, shape.steps, "swt::y");
        auto const grad_y = rows_view<T, Space>(problem.grad_y, shape.rows,
                                                shape.steps, "swt::grad_y");
        Row<T, Space> const y0 =
            with_y0 ? swt::to_device<T>(space, problem.y0, "swt::y0")
                    : Row<T, Space>();
        Rows<T, Space> grad_b =
            in_place ? grad_y
                     : Rows<T, Space>("swt::grad_b", shape.rows, shape.steps);
        Rows<T, Space> grad_a;
        Row<T, Space> grad_y0;
        if (everything) {
          grad_a = Rows<T, Space>("swt::grad_a", shape.rows, shape.steps);
          grad_y0 = swt::output1<T>(space, "swt::grad_y0", shape.rows);
        }
        softwave::LinearRecurrenceOptions options;
        options.reverse = reverse;
        options.kernel = kernel;
        softwave::linear_recurrence_gradients<Space, T>(
            space, a, y0, y_view, grad_y, grad_a, grad_b, grad_y0, options);
        // The reference adjoint from the rounded y.
        Problem<T> rounded = problem;
        std::vector<double> ga, gb, gy0;
        rounded.gradients(reverse, with_y0, ga, gb, gy0);
        for (int r = 0; r < shape.rows; ++r)
          for (int p = 0; p < shape.steps; ++p) {
            std::size_t const i = rounded.at(r, p, reverse);
            ga[i] = gb[i] * (p > 0     ? y[rounded.at(r, p - 1, reverse)]
                             : with_y0 ? problem.y0[r]
                                       : 0.0);
          }
        EXPECT_LE(worst_difference(swt::to_host(grad_b), gb),
                  tolerance<T>() * largest(gb));
        if (everything) {
          EXPECT_LE(worst_difference(swt::to_host(grad_a), ga),
                    tolerance<T>() * largest(ga));
          EXPECT_LE(worst_difference(swt::to_host(grad_y0), gy0),
                    tolerance<T>() * largest(gy0));
        }
      }
}

// Central differences of L = Σ grad_y · y through the library's own float64
// forward, entry by entry.
TYPED_TEST(LinearRecurrence, GradientsMatchFiniteDifferences) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  if constexpr (!std::is_same_v<T, double>) return;
  Space space;
  SWT_SEEDED_RNG(rng);
  int const rows = 2, steps = 5000;
  for (bool reverse : {false, true}) {
    Problem<double> problem(rng, rows, steps, false);
    auto loss = [&](const Problem<double>& q) {
      auto const a = rows_view<double, Space>(q.a, rows, steps, "swt::a");
      auto const b = rows_view<double, Space>(q.b, rows, steps, "swt::b");
      auto const y0 = swt::to_device<double>(space, q.y0, "swt::y0");
      Rows<double, Space> y("swt::y", rows, steps);
      softwave::LinearRecurrenceOptions options;
      options.reverse = reverse;
      softwave::linear_recurrence<Space, double>(space, a, b, y0, y, options);
      std::vector<double> const values = swt::to_host(y);
      double sum = 0;
      for (std::size_t i = 0; i < values.size(); ++i)
        sum += q.grad_y[i] * values[i];
      return sum;
    };
    auto const a = rows_view<double, Space>(problem.a, rows, steps, "swt::a");
    auto const b = rows_view<double, Space>(problem.b, rows, steps, "swt::b");
    auto const y0 = swt::to_device<double>(space, problem.y0, "swt::y0");
    auto const grad_y =
        rows_view<double, Space>(problem.grad_y, rows, steps, "swt::grad_y");
    Rows<double, Space> y("swt::y", rows, steps),
        grad_a("swt::ga", rows, steps), grad_b("swt::gb", rows, steps);
    Row<double, Space> grad_y0("swt::gy0", rows);
    softwave::LinearRecurrenceOptions options;
    options.reverse = reverse;
    softwave::linear_recurrence<Space, double>(space, a, b, y0, y, options);
    softwave::linear_recurrence_gradients<Space, double>(
        space, a, y0, y, grad_y, grad_a, grad_b, grad_y0, options);
    std::vector<double> const ga = swt::to_host(grad_a),
                              gb = swt::to_host(grad_b),
                              gy0 = swt::to_host(grad_y0);
    double const h = 1e-6;
    for (int k = 0; k < 6; ++k) {
      std::size_t const i = rng.integer(0, rows * steps - 1);
      int const r = rng.integer(0, rows - 1);
      auto difference = [&](std::vector<double> Problem<double>::*member,
                            std::size_t at) {
        Problem<double> up = problem, down = problem;
        (up.*member)[at] += h;
        (down.*member)[at] -= h;
        return (loss(up) - loss(down)) / (2 * h);
      };
      EXPECT_NEAR(ga[i], difference(&Problem<double>::a, i), 1e-6) << i;
      EXPECT_NEAR(gb[i], difference(&Problem<double>::b, i), 1e-6) << i;
      EXPECT_NEAR(gy0[r], difference(&Problem<double>::y0, r), 1e-6) << r;
    }
  }
}

// Unchecked, a NaN in a gives NaN from its step on and finite values
// before it, to the row's end: the look-back must neither wait for ever on
// the tile whose map is NaN nor stop at a later tile whose product of a
// underflowed to 0 (with a in ±0.99 every tile's does).
TYPED_TEST(LinearRecurrence, UncheckedNanPropagatesWithoutHanging) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  Space space;
  SWT_SEEDED_RNG(rng);
  int const rows = 2, steps = 100000;
  Problem<T> problem(rng, rows, steps, false);
  int const bad = 30000;
  problem.a[bad] = NAN;
  for (softwave::Kernel kernel : kernels<Space>()) {
    SCOPED_TRACE(::testing::Message() << "kernel " << int(kernel));
    auto const a = rows_view<T, Space>(problem.a, rows, steps, "swt::a");
    auto const b = rows_view<T, Space>(problem.b, rows, steps, "swt::b");
    Rows<T, Space> y("swt::y", rows, steps);
    softwave::LinearRecurrenceOptions options;
    options.check_values = false;
    options.kernel = kernel;
    softwave::linear_recurrence<Space, T>(space, a, b, Row<const T, Space>(), y,
                                          options);
    std::vector<double> const got = swt::to_host(y);
    EXPECT_TRUE(std::isfinite(got[bad - 1]));
    EXPECT_TRUE(std::isnan(got[bad]));
    EXPECT_TRUE(std::isnan(got[steps - 1]));
    EXPECT_TRUE(std::isfinite(got[steps]));  // the next row
  }
}

TYPED_TEST(LinearRecurrence, EmptyInputs) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  Space space;
  Rows<T, Space> none("swt::none", 0, 7), short_rows("swt::short", 3, 0);
  softwave::linear_recurrence<Space, T>(space, none, none,
                                        Row<const T, Space>(), none);
  softwave::linear_recurrence<Space, T>(space, short_rows, short_rows,
                                        Row<const T, Space>(), short_rows);
  auto const grad_y0 = swt::output1<T>(space, "swt::grad_y0", 3);
  softwave::linear_recurrence_gradients<Space, T>(
      space, short_rows, Row<const T, Space>(), short_rows, short_rows,
      Rows<T, Space>(), Rows<T, Space>("swt::gb", 3, 0), grad_y0);
  EXPECT_EQ(swt::to_host(grad_y0), std::vector<double>(3, 0.0));
}

TYPED_TEST(LinearRecurrence, BadInputNamesTheArgument) {
  using Space = typename TypeParam::space;
  using T = typename TypeParam::value;
  Space space;
  int const rows = 2, steps = 10;
  Rows<T, Space> a("swt::a", rows, steps), b("swt::b", rows, steps),
      y("swt::y", rows, steps), wrong("swt::wrong", rows, steps + 1);
  Kokkos::deep_copy(a, T(0.5));
  Row<T, Space> y0("swt::y0", rows), wrong_y0("swt::wrong_y0", rows + 1);
  auto forward = [&](auto a_, auto b_, auto y0_, auto y_,
                     softwave::LinearRecurrenceOptions o = {}) {
    softwave::linear_recurrence<Space, T>(space, a_, b_, y0_, y_, o);
  };
  EXPECT_TRUE(swt::throws_naming("b", [&] { forward(a, wrong, y0, y); }));
  EXPECT_TRUE(swt::throws_naming("y", [&] { forward(a, b, y0, wrong); }));
  EXPECT_TRUE(swt::throws_naming("y0", [&] { forward(a, b, wrong_y0, y); }));
  softwave::LinearRecurrenceOptions pairs;
  pairs.kernel = softwave::Kernel::pairs;
  EXPECT_TRUE(
      swt::throws_naming("kernel", [&] { forward(a, b, y0, y, pairs); }));
  Rows<T, Space> nan_a("swt::nan_a", rows, steps);
  Kokkos::deep_copy(nan_a, T(NAN));
  EXPECT_TRUE(swt::throws_naming("a", [&] { forward(nan_a, b, y0, y); }));
  Kokkos::deep_copy(y0, T(INFINITY));
  EXPECT_TRUE(swt::throws_naming("y0", [&] { forward(a, b, y0, y); }));
  Kokkos::deep_copy(y0, T(0));

  auto backward = [&](auto grad_y, auto grad_a, auto grad_b, auto grad_y0) {
    softwave::linear_recurrence_gradients<Space, T>(space, a, y0, y, grad_y,
                                                    grad_a, grad_b, grad_y0);
  };
  Rows<T, Space> grad_y("swt::grad_y", rows, steps),
      grad_b("swt::grad_b", rows, steps), grad_a("swt::grad_a", rows, steps);
  EXPECT_TRUE(swt::throws_naming(
      "grad_y", [&] { backward(wrong, grad_a, grad_b, Row<T, Space>()); }));
  EXPECT_TRUE(swt::throws_naming("grad_b", [&] {
    backward(grad_y, grad_a, Rows<T, Space>(), Row<T, Space>());
  }));
  EXPECT_TRUE(swt::throws_naming(
      "grad_a", [&] { backward(grad_y, wrong, grad_b, Row<T, Space>()); }));
  EXPECT_TRUE(swt::throws_naming(
      "grad_y0", [&] { backward(grad_y, grad_a, grad_b, wrong_y0); }));
  EXPECT_TRUE(swt::throws_naming(
      "grad_b", [&] { backward(grad_y, grad_a, y, Row<T, Space>()); }));
  Kokkos::deep_copy(grad_y, T(NAN));
  EXPECT_TRUE(swt::throws_naming(
      "grad_y", [&] { backward(grad_y, grad_a, grad_b, Row<T, Space>()); }));
}

}  // namespace
