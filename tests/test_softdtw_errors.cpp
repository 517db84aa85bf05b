// Every bad input raises softwave::invalid_argument whose message names the
// argument (never a crash, a hang or a silent NaN). Names follow the header's
// parameters: x, y, cost, values, grad_x, grad_y, alignment, grad_cost,
// grad_output, lengths.x, lengths.y, gamma, band, tile, kernel, matrix,
// path, path_length. One thing is broken at a time; everything else is valid.

#include <array>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include "test_helpers.hpp"

namespace {

using namespace swt;
using softwave::PairwiseValue;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int B = 2, N = 5, M = 4, D = 3;

// Sets one element of a device view through a host mirror.
template <class View>
void poke(const View& view, int a, int b, int c, double value) {
  auto host = Kokkos::create_mirror_view(view);
  Kokkos::deep_copy(host, view);
  host(a, b, c) = value;
  Kokkos::deep_copy(view, host);
}

template <class Space>
softwave::Lengths<Space> make_lengths(const Space& space, std::vector<int> lx,
                                      std::vector<int> ly) {
  Config s;
  s.len_x = std::move(lx);
  s.len_y = std::move(ly);
  return s.lengths(space);
}

template <class Space>
Dev3<double, Space> make_filled(const Space&, const char* label, int a, int b,
                                int c, double value = 0.5) {
  Dev3<double, Space> v(std::string(label), a, b, c);
  Kokkos::deep_copy(v, value);
  return v;
}

softwave::SoftDTWOptions gamma_options(double gamma) {
  softwave::SoftDTWOptions o;
  o.gamma = gamma;
  return o;
}

// Valid arguments, of which each test breaks one; tests reach them through
// `this->` (members of a typed fixture).
template <class Space>
class Errors : public ::testing::Test {
 protected:
  Space space;
  Dev3<double, Space> x = make_filled(space, "x", B, N, D),
                      y = make_filled(space, "y", B, M, D, 0.25);
  Dev1<double, Space> values = Dev1<double, Space>("values", B);
  softwave::SoftDTWOptions options;

  void SetUp() override {
    poke(x, 0, 1, 0, 0.9);  // not all equal, for good measure
  }
  auto soft_dtw(const Dev3<double, Space>& xx, const Dev3<double, Space>& yy,
                const Dev1<double, Space>& vv,
                const softwave::SoftDTWOptions& o,
                const softwave::Lengths<Space>& l = {}) {
    return [=] { softwave::soft_dtw(space, xx, yy, vv, o, l); };
  }
  Dev3<double, Space> filled(const char* label, int a, int b, int c,
                             double value = 0.5) {
    return make_filled(space, label, a, b, c, value);
  }
  softwave::Lengths<Space> lengths(std::vector<int> lx, std::vector<int> ly) {
    return make_lengths(space, std::move(lx), std::move(ly));
  }
};
TYPED_TEST_SUITE(Errors, ExecutionSpaces);

// ------------------------------------------------------------------ gamma

TYPED_TEST(Errors, GammaNegativeNaNOrInfinite) {
  for (double g : {-1.0, -1e-300, kNaN, kInf, -kInf}) {
    SCOPED_TRACE(g);
    EXPECT_TRUE(throws_naming(
        "gamma",
        this->soft_dtw(this->x, this->y, this->values, gamma_options(g))));
    softwave::SeriesGradients<double, TypeParam> grads;
    grads.grad_x = this->filled("gx", B, N, D);
    EXPECT_TRUE(throws_naming("gamma", [&] {
      softwave::soft_dtw_value_and_grad(this->space, this->x, this->y,
                                        this->values, grads, gamma_options(g));
    }));
    EXPECT_TRUE(throws_naming("gamma", [&] {
      softwave::soft_dtw_cost(this->space, this->filled("c", B, N, M),
                              this->values, gamma_options(g));
    }));
    EXPECT_TRUE(throws_naming("gamma", [&] {
      softwave::soft_dtw_divergence(this->space, this->x, this->y, this->values,
                                    gamma_options(g));
    }));
    EXPECT_TRUE(throws_naming("gamma", [&] {
      softwave::pairwise(this->space, this->x, this->y,
                         Dev2<double, TypeParam>("m", B, B), gamma_options(g));
    }));
  }
}

TYPED_TEST(Errors, GammaZeroIsValid) {
  EXPECT_NO_THROW(softwave::soft_dtw(this->space, this->x, this->y,
                                     this->values, gamma_options(0.0)));
}

// --------------------------------------------------------- band and tile

TYPED_TEST(Errors, NegativeBand) {
  softwave::SoftDTWOptions o;
  o.band = -1;
  EXPECT_TRUE(
      throws_naming("band", this->soft_dtw(this->x, this->y, this->values, o)));
  EXPECT_TRUE(throws_naming("band", [&] {
    softwave::soft_dtw_cost(this->space, this->filled("c", B, N, M),
                            this->values, o);
  }));
  EXPECT_TRUE(throws_naming("band", [&] {
    softwave::dtw_path(this->space, this->x, this->y, this->values,
                       Dev3<int, TypeParam>("p", B, N + M - 1, 2),
                       Dev1<int, TypeParam>("l", B), o);
  }));
  EXPECT_TRUE(throws_naming("band", [&] {
    softwave::pairwise(this->space, this->x, this->y,
                       Dev2<double, TypeParam>("m", B, B), o);
  }));
  o.band = 0;  // zero is a valid (diagonal-only) band
  EXPECT_NO_THROW(
      softwave::soft_dtw(this->space, this->x, this->y, this->values, o));
}

TYPED_TEST(Errors, NegativeTile) {
  softwave::SoftDTWOptions o;
  o.tile = -1;
  EXPECT_TRUE(
      throws_naming("tile", this->soft_dtw(this->x, this->y, this->values, o)));
}

// A kernel value outside the enum (a cast from an integer) is refused by name
// on every entry point, before anything runs.
TYPED_TEST(Errors, UnknownKernel) {
  softwave::SoftDTWOptions o;
  o.kernel = static_cast<softwave::Kernel>(7);
  EXPECT_TRUE(throws_naming("kernel",
                            this->soft_dtw(this->x, this->y, this->values, o)));
  EXPECT_TRUE(throws_naming("kernel", [&] {
    softwave::soft_dtw_cost(this->space, this->filled("c", B, N, M),
                            this->values, o);
  }));
  EXPECT_TRUE(throws_naming("kernel", [&] {
    softwave::pairwise(this->space, this->x, this->y,
                       Dev2<double, TypeParam>("m", B, B), o);
  }));
  o.kernel = softwave::Kernel::portable;
  EXPECT_NO_THROW(
      softwave::soft_dtw(this->space, this->x, this->y, this->values, o));
}

// kernel = pairs computes values, hard-DTW paths and (on host backends)
// gradients for γ > 0 with the sqeuclidean or l1 cost: they run, and a
// gradient it does not form (cosine, hard DTW) is refused by name.
TYPED_TEST(Errors, PairKernelRefusesWhatItDoesNotCompute) {
  softwave::SoftDTWOptions o;
  o.kernel = softwave::Kernel::pairs;
  EXPECT_NO_THROW(
      softwave::soft_dtw(this->space, this->x, this->y, this->values, o));
  Dev3<int, TypeParam> path("swt::path", B, N + M - 1, 2);
  Dev1<int, TypeParam> path_length("swt::path_length", B);
  EXPECT_NO_THROW(softwave::dtw_path(this->space, this->x, this->y,
                                     this->values, path, path_length, o));
  softwave::SeriesGradients<double, TypeParam> grads;
  grads.grad_x = this->filled("gx", B, N, D);
  auto gradients = [&] {
    softwave::soft_dtw_value_and_grad(this->space, this->x, this->y,
                                      this->values, grads, o);
  };
  for (softwave::Cost cost :
       {softwave::Cost::sqeuclidean, softwave::Cost::cosine}) {
    o.cost = cost;
    if (on_host<TypeParam>)
      EXPECT_NO_THROW(gradients());
    else
      EXPECT_TRUE(throws_naming("kernel", gradients));
  }
  o.cost = softwave::Cost::l1;
  o.gamma = 0;
  EXPECT_TRUE(throws_naming("kernel", gradients));
}

// ------------------------------------------------------ shapes: batches

TYPED_TEST(Errors, BatchMismatch) {
  const auto y3 = this->filled("y3", B + 1, M, D);
  EXPECT_TRUE(throws_naming(
      "y", this->soft_dtw(this->x, y3, this->values, this->options)));
  EXPECT_TRUE(throws_naming("y", [&] {
    softwave::soft_dtw_divergence(this->space, this->x, y3, this->values);
  }));
  EXPECT_TRUE(throws_naming(
      "values",
      this->soft_dtw(this->x, this->y, Dev1<double, TypeParam>("v", B + 1),
                     this->options)));
  EXPECT_TRUE(throws_naming(
      "values",
      this->soft_dtw(this->x, this->y, Dev1<double, TypeParam>("v", B - 1),
                     this->options)));
  EXPECT_TRUE(throws_naming("values", [&] {
    softwave::soft_dtw_cost(this->space, this->filled("c", B, N, M),
                            Dev1<double, TypeParam>("v", B + 1));
  }));
  EXPECT_TRUE(throws_naming("values", [&] {
    softwave::soft_dtw_divergence(this->space, this->x, this->y,
                                  Dev1<double, TypeParam>("v", B + 1));
  }));
}

TYPED_TEST(Errors, FeatureMismatch) {
  const auto y2 = this->filled("y2", B, M, D - 1);
  EXPECT_TRUE(throws_naming(
      "y", this->soft_dtw(this->x, y2, this->values, this->options)));
  EXPECT_TRUE(throws_naming("y", [&] {
    softwave::soft_dtw_divergence(this->space, this->x, y2, this->values);
  }));
  EXPECT_TRUE(throws_naming("y", [&] {
    softwave::pairwise(this->space, this->x, y2,
                       Dev2<double, TypeParam>("m", B, B));
  }));
  EXPECT_TRUE(throws_naming("y", [&] {
    softwave::dtw_path(this->space, this->x, y2, this->values,
                       Dev3<int, TypeParam>("p", B, N + M - 1, 2),
                       Dev1<int, TypeParam>("l", B));
  }));
}

// --------------------------------------------------------- empty inputs

TYPED_TEST(Errors, EmptySequences) {
  EXPECT_TRUE(
      throws_naming("x", this->soft_dtw(this->filled("x0", B, 0, D), this->y,
                                        this->values, this->options)));
  EXPECT_TRUE(
      throws_naming("y", this->soft_dtw(this->x, this->filled("y0", B, 0, D),
                                        this->values, this->options)));
  EXPECT_TRUE(throws_naming("cost", [&] {
    softwave::soft_dtw_cost(this->space, this->filled("c", B, 0, M),
                            this->values);
  }));
  EXPECT_TRUE(throws_naming("cost", [&] {
    softwave::soft_dtw_cost(this->space, this->filled("c", B, N, 0),
                            this->values);
  }));
  EXPECT_TRUE(throws_naming("x", [&] {
    softwave::pairwise(this->space, this->filled("x0", B, 0, D), this->y,
                       Dev2<double, TypeParam>("m", B, B));
  }));
  EXPECT_TRUE(throws_naming("y", [&] {
    softwave::pairwise(this->space, this->x, this->filled("y0", B, 0, D),
                       Dev2<double, TypeParam>("m", B, B));
  }));
  EXPECT_TRUE(throws_naming("x", [&] {
    softwave::dtw_path(this->space, this->filled("x0", B, 0, D), this->y,
                       this->values, Dev3<int, TypeParam>("p", B, M - 1, 2),
                       Dev1<int, TypeParam>("l", B));
  }));
}

// d = 0: no features. The message may name x or y (both have d = 0).
TYPED_TEST(Errors, ZeroFeatures) {
  const auto x0 = this->filled("x0", B, N, 0), y0 = this->filled("y0", B, M, 0);
  try {
    softwave::soft_dtw(this->space, x0, y0, this->values);
    this->space.fence();
    ADD_FAILURE() << "d = 0 was accepted";
  } catch (const softwave::invalid_argument& e) {
    EXPECT_TRUE(names_argument(e.what(), "x") || names_argument(e.what(), "y"))
        << e.what();
  }
}

// B = 0: an empty batch either does nothing or is refused with
// softwave::invalid_argument; it must not crash or throw anything else.
TYPED_TEST(Errors, EmptyBatchDoesNotCrash) {
  const auto x0 = this->filled("x0", 0, N, D), y0 = this->filled("y0", 0, M, D);
  try {
    softwave::soft_dtw(this->space, x0, y0, Dev1<double, TypeParam>("v", 0));
    softwave::SeriesGradients<double, TypeParam> g;
    g.grad_x = this->filled("gx", 0, N, D);
    softwave::soft_dtw_value_and_grad(this->space, x0, y0,
                                      Dev1<double, TypeParam>("v", 0), g);
    softwave::pairwise(this->space, x0, this->y,
                       Dev2<double, TypeParam>("m", 0, B));
    this->space.fence();
  } catch (const softwave::invalid_argument&) {
  }
}

// ---------------------------------------------------------------- lengths

TYPED_TEST(Errors, LengthsOutOfRange) {
  EXPECT_TRUE(throws_naming(
      "lengths.x", this->soft_dtw(this->x, this->y, this->values, this->options,
                                  this->lengths({0, N}, {}))));
  EXPECT_TRUE(throws_naming(
      "lengths.x", this->soft_dtw(this->x, this->y, this->values, this->options,
                                  this->lengths({-3, N}, {}))));
  EXPECT_TRUE(throws_naming(
      "lengths.x", this->soft_dtw(this->x, this->y, this->values, this->options,
                                  this->lengths({N, N + 1}, {}))));
  EXPECT_TRUE(throws_naming(
      "lengths.y", this->soft_dtw(this->x, this->y, this->values, this->options,
                                  this->lengths({}, {M, 0}))));
  EXPECT_TRUE(throws_naming(
      "lengths.y", this->soft_dtw(this->x, this->y, this->values, this->options,
                                  this->lengths({N, 1}, {M + 1, M}))));
  EXPECT_TRUE(throws_naming("lengths.y", [&] {
    softwave::soft_dtw_cost(this->space, this->filled("c", B, N, M),
                            this->values, this->options,
                            this->lengths({}, {M + 1, 1}));
  }));
  EXPECT_TRUE(throws_naming("lengths.x", [&] {
    softwave::soft_dtw_divergence(this->space, this->x, this->y, this->values,
                                  this->options, this->lengths({N + 1, 1}, {}));
  }));
  EXPECT_TRUE(throws_naming("lengths.y", [&] {
    softwave::dtw_path(this->space, this->x, this->y, this->values,
                       Dev3<int, TypeParam>("p", B, N + M - 1, 2),
                       Dev1<int, TypeParam>("l", B), this->options,
                       this->lengths({}, {0, 1}));
  }));
  EXPECT_NO_THROW(softwave::soft_dtw(this->space, this->x, this->y,
                                     this->values, this->options,
                                     this->lengths({1, N}, {M, 1})));
}

TYPED_TEST(Errors, LengthsOfWrongSize) {
  EXPECT_TRUE(throws_naming(
      "lengths.x", this->soft_dtw(this->x, this->y, this->values, this->options,
                                  this->lengths({N, N, N}, {}))));
  EXPECT_TRUE(throws_naming(
      "lengths.x", this->soft_dtw(this->x, this->y, this->values, this->options,
                                  this->lengths({N}, {}))));
  EXPECT_TRUE(throws_naming(
      "lengths.y", this->soft_dtw(this->x, this->y, this->values, this->options,
                                  this->lengths({}, {M, M, M}))));
  // pairwise: lengths.x is (B1,), lengths.y is (B2,).
  const auto y3 = this->filled("y3", 3, M, D);
  EXPECT_TRUE(throws_naming("lengths.x", [&] {
    softwave::pairwise(this->space, this->x, y3,
                       Dev2<double, TypeParam>("m", B, 3), this->options,
                       PairwiseValue::soft_dtw, this->lengths({N, N, N}, {}));
  }));
  EXPECT_TRUE(throws_naming("lengths.y", [&] {
    softwave::pairwise(this->space, this->x, y3,
                       Dev2<double, TypeParam>("m", B, 3), this->options,
                       PairwiseValue::soft_dtw, this->lengths({}, {M, M}));
  }));
}

// ------------------------------------------------------ non-finite values

TYPED_TEST(Errors, NonFiniteInputsInsideTheLengths) {
  const auto xn = this->filled("xn", B, N, D);
  poke(xn, 1, 2, 1, kNaN);
  EXPECT_TRUE(throws_naming(
      "x", this->soft_dtw(xn, this->y, this->values, this->options)));
  const auto yi = this->filled("yi", B, M, D);
  poke(yi, 0, M - 1, D - 1, kInf);
  EXPECT_TRUE(throws_naming(
      "y", this->soft_dtw(this->x, yi, this->values, this->options)));
  EXPECT_TRUE(throws_naming("y", [&] {
    softwave::soft_dtw_divergence(this->space, this->x, yi, this->values);
  }));
  EXPECT_TRUE(throws_naming("x", [&] {
    softwave::pairwise(this->space, xn, this->y,
                       Dev2<double, TypeParam>("m", B, B));
  }));
  EXPECT_TRUE(throws_naming("x", [&] {
    softwave::dtw_path(this->space, xn, this->y, this->values,
                       Dev3<int, TypeParam>("p", B, N + M - 1, 2),
                       Dev1<int, TypeParam>("l", B));
  }));
  const auto c = this->filled("c", B, N, M);
  poke(c, 1, 0, 0, -kInf);
  EXPECT_TRUE(throws_naming(
      "cost", [&] { softwave::soft_dtw_cost(this->space, c, this->values); }));
  // Inside the lengths of its pair: still refused. Outside: never read.
  const auto xp = this->filled("xp", B, N, D);
  poke(xp, 0, 2, 0, kNaN);
  EXPECT_TRUE(throws_naming(
      "x", this->soft_dtw(xp, this->y, this->values, this->options,
                          this->lengths({3, N}, {}))));
  EXPECT_NO_THROW(softwave::soft_dtw(this->space, xp, this->y, this->values,
                                     this->options, this->lengths({2, N}, {})));
}

// ---------------------------------------------------- output extents

TYPED_TEST(Errors, GradientOutputsOfWrongExtent) {
  auto expect = [&](const char* name,
                    const softwave::SeriesGradients<double, TypeParam>& g) {
    EXPECT_TRUE(throws_naming(name, [&] {
      softwave::soft_dtw_value_and_grad(this->space, this->x, this->y,
                                        this->values, g);
    })) << "soft_dtw_value_and_grad";
    if (std::string(name) != "alignment") {
      EXPECT_TRUE(throws_naming(name, [&] {
        softwave::soft_dtw_divergence_value_and_grad(this->space, this->x,
                                                     this->y, this->values, g);
      })) << "soft_dtw_divergence_value_and_grad";
    }
  };
  for (const auto& shape : {std::array{B + 1, N, D}, std::array{B, N + 1, D},
                            std::array{B, N, D + 1}}) {
    softwave::SeriesGradients<double, TypeParam> g;
    g.grad_x = this->filled("gx", shape[0], shape[1], shape[2]);
    expect("grad_x", g);
  }
  for (const auto& shape : {std::array{B - 1, M, D}, std::array{B, M - 1, D},
                            std::array{B, M, D + 1}}) {
    softwave::SeriesGradients<double, TypeParam> g;
    g.grad_y = this->filled("gy", shape[0], shape[1], shape[2]);
    expect("grad_y", g);
  }
  for (const auto& shape : {std::array{B + 1, N, M}, std::array{B, M, N},
                            std::array{B, N, M + 1}}) {
    softwave::SeriesGradients<double, TypeParam> g;
    g.alignment = this->filled("e", shape[0], shape[1], shape[2]);
    expect("alignment", g);
  }
  softwave::SeriesGradients<double, TypeParam> g;
  g.grad_x = this->filled("gx", B, N, D);
  g.grad_output = Dev1<double, TypeParam>("go", B + 1);
  expect("grad_output", g);
  g.grad_output = Dev1<double, TypeParam>("go", B);
  EXPECT_TRUE(throws_naming("values", [&] {
    softwave::soft_dtw_value_and_grad(this->space, this->x, this->y,
                                      Dev1<double, TypeParam>("v", B + 1), g);
  }));
  EXPECT_NO_THROW(softwave::soft_dtw_value_and_grad(
      this->space, this->x, this->y, Dev1<double, TypeParam>(), g));
}

TYPED_TEST(Errors, NonFiniteGradOutput) {
  for (double bad : {kNaN, kInf, -kInf}) {
    Dev1<double, TypeParam> go("go", B);
    Kokkos::deep_copy(go, 1.0);
    auto host = Kokkos::create_mirror_view(go);
    Kokkos::deep_copy(host, go);
    host(1) = bad;
    Kokkos::deep_copy(go, host);
    softwave::SeriesGradients<double, TypeParam> g;
    g.grad_x = this->filled("gx", B, N, D);
    g.grad_output = go;
    EXPECT_TRUE(throws_naming("grad_output", [&] {
      softwave::soft_dtw_value_and_grad(this->space, this->x, this->y,
                                        this->values, g);
    }));
    EXPECT_TRUE(throws_naming("grad_output", [&] {
      softwave::soft_dtw_divergence_value_and_grad(this->space, this->x,
                                                   this->y, this->values, g);
    }));
    softwave::CostGradients<double, TypeParam> gc;
    gc.grad_cost = this->filled("gc", B, N, M);
    gc.grad_output = go;
    EXPECT_TRUE(throws_naming("grad_output", [&] {
      softwave::soft_dtw_cost_value_and_grad(
          this->space, this->filled("c", B, N, M), this->values, gc);
    }));
  }
}

// With several bad arguments the data checks report the first in argument
// order (lengths before the values they bound), from one read-back.
TYPED_TEST(Errors, FirstFailingDataCheckIsReported) {
  const auto xn = this->filled("xn", B, N, D);
  poke(xn, 0, 0, 0, kNaN);
  const auto yn = this->filled("yn", B, M, D);
  poke(yn, 1, 0, 0, kInf);
  EXPECT_TRUE(throws_naming("lengths.y",
                            this->soft_dtw(xn, yn, this->values, this->options,
                                           this->lengths({}, {M + 1, 0}))));
  EXPECT_TRUE(
      throws_naming("x", this->soft_dtw(xn, yn, this->values, this->options)));
  // The message names the first pair out of range and its length.
  try {
    softwave::soft_dtw(this->space, this->x, this->y, this->values,
                       this->options, this->lengths({N, N + 9}, {}));
    ADD_FAILURE() << "no exception";
  } catch (const softwave::invalid_argument& e) {
    EXPECT_NE(
        std::string(e.what()).find("lengths.x[1] = " + std::to_string(N + 9)),
        std::string::npos)
        << e.what();
  }
}

// ------------------------------------------------- check_values = false

// Nothing is read back: lengths outside [1, N] are clamped into it, a NaN
// makes its own pair's value NaN (not +∞) and leaves the others alone, and
// every entry point returns (no hang, no crash). float runs the
// CUDA-specialised path on CUDA builds.
template <class T, class Space>
void unchecked_calls(const Space& space) {
  softwave::SoftDTWOptions checked, unchecked;
  unchecked.check_values = false;
  Dev3<T, Space> x("x", B, N, D), y("y", B, M, D);
  {
    auto hx = Kokkos::create_mirror_view(x);
    auto hy = Kokkos::create_mirror_view(y);
    for (std::size_t q = 0; q < hx.size(); ++q) hx.data()[q] = T(0.1 * (q % 7));
    for (std::size_t q = 0; q < hy.size(); ++q)
      hy.data()[q] = T(0.05 * (q % 5));
    Kokkos::deep_copy(x, hx);
    Kokkos::deep_copy(y, hy);
  }
  Dev1<T, Space> got("got", B), want("want", B);
  softwave::soft_dtw(space, x, y, got, unchecked,
                     make_lengths(space, {0, N + 7}, {M + 1, -2}));
  softwave::soft_dtw(space, x, y, want, checked,
                     make_lengths(space, {1, N}, {M, 1}));
  EXPECT_EQ(to_host(got), to_host(want));
  softwave::dtw_path(space, x, y, got, Dev3<int, Space>("p", B, N + M - 1, 2),
                     Dev1<int, Space>("l", B), unchecked,
                     make_lengths(space, {N + 3, -1}, {}));
  softwave::dtw_path(space, x, y, want, Dev3<int, Space>("p", B, N + M - 1, 2),
                     Dev1<int, Space>("l", B), checked,
                     make_lengths(space, {N, 1}, {}));
  EXPECT_EQ(to_host(got), to_host(want));

  // A NaN in pair 1 of x: pair 1's value is not finite, pair 0's is right.
  softwave::soft_dtw(space, x, y, want, checked);
  auto hx = Kokkos::create_mirror_view(x);
  Kokkos::deep_copy(hx, x);
  hx(1, N / 2, 0) = std::numeric_limits<T>::quiet_NaN();
  Kokkos::deep_copy(x, hx);
  softwave::SeriesGradients<T, Space> g;
  g.grad_x = Dev3<T, Space>("gx", B, N, D);
  g.grad_y = Dev3<T, Space>("gy", B, M, D);
  softwave::soft_dtw_value_and_grad(space, x, y, got, g, unchecked);
  auto const v = to_host(got), w = to_host(want);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_NEAR(v[0], w[0], 1e-5 * std::abs(w[0]));
  softwave::soft_dtw_divergence_value_and_grad(space, x, y, got, g, unchecked);
  EXPECT_TRUE(std::isnan(to_host(got)[1]));
  Dev2<T, Space> matrix("m", B, B);
  softwave::pairwise(space, x, y, matrix, unchecked);
  auto const pairs = to_host(matrix);
  EXPECT_TRUE(std::isnan(pairs[2]));     // (1, 0)
  EXPECT_TRUE(std::isfinite(pairs[1]));  // (0, 1)
  softwave::dtw_path(space, x, y, got, Dev3<int, Space>("p", B, N + M - 1, 2),
                     Dev1<int, Space>("l", B), unchecked);
  EXPECT_TRUE(std::isnan(to_host(got)[1]));
  Dev3<T, Space> c("c", B, N, M);
  Kokkos::deep_copy(c, T(0.5));
  auto hc = Kokkos::create_mirror_view(c);
  Kokkos::deep_copy(hc, c);
  hc(0, 1, 1) = std::numeric_limits<T>::quiet_NaN();
  Kokkos::deep_copy(c, hc);
  softwave::CostGradients<T, Space> gc;
  gc.grad_cost = Dev3<T, Space>("gc", B, N, M);
  softwave::soft_dtw_cost_value_and_grad(space, c, got, gc, unchecked);
  auto const vc = to_host(got);
  EXPECT_TRUE(std::isnan(vc[0]));
  EXPECT_TRUE(std::isfinite(vc[1]));
  // The same inputs checked are refused.
  EXPECT_TRUE(throws_naming("x", [&] {
    softwave::soft_dtw_value_and_grad(space, x, y, got, g, checked);
  }));
  EXPECT_TRUE(throws_naming(
      "cost", [&] { softwave::soft_dtw_cost(space, c, got, checked); }));
}

TYPED_TEST(Errors, UncheckedValuesClampLengthsAndPropagateNaN) {
  unchecked_calls<double>(this->space);
  unchecked_calls<float>(this->space);
}

// A NaN anywhere in x or y, with or without a band, at γ > 0 and γ = 0:
// its pair's value is NaN. A row of NaN cells used to turn into +∞ where the
// first column's (or a band edge's) other predecessors are +∞.
template <class T, class Space>
void nan_anywhere_gives_nan(const Space& space) {
  std::mt19937 rng(20261125);
  for (int trial = 0; trial < 40; ++trial) {
    int const n = 1 + int(rng() % 9), m = 1 + int(rng() % 9);
    Dev3<T, Space> x("x", 1, n, 2), y("y", 1, m, 2);
    auto hx = Kokkos::create_mirror_view(x);
    auto hy = Kokkos::create_mirror_view(y);
    for (std::size_t q = 0; q < hx.size(); ++q) hx.data()[q] = T(0.3 * (q % 5));
    for (std::size_t q = 0; q < hy.size(); ++q) hy.data()[q] = T(0.2 * (q % 3));
    bool const in_x = rng() % 2 == 0;
    if (in_x)
      hx(0, int(rng() % n), int(rng() % 2)) =
          std::numeric_limits<T>::quiet_NaN();
    else
      hy(0, int(rng() % m), int(rng() % 2)) =
          std::numeric_limits<T>::quiet_NaN();
    Kokkos::deep_copy(x, hx);
    Kokkos::deep_copy(y, hy);
    softwave::SoftDTWOptions options;
    options.check_values = false;
    options.gamma = trial % 3 == 0 ? 0.0 : 0.5;
    if (trial % 2 == 0) options.band = std::int64_t(rng() % 3);
    Dev1<T, Space> got("got", 1);
    softwave::soft_dtw(space, x, y, got, options);
    SCOPED_TRACE(testing::Message()
                 << "n " << n << " m " << m << " in_x " << in_x << " gamma "
                 << options.gamma << " band " << options.band.value_or(-1));
    EXPECT_TRUE(std::isnan(to_host(got)[0]));
  }
}

// Finite inputs whose values overflow the output type (float32 series near
// 1e20, float64 near 1e155, or γ so large that γ·log 3 sums past the
// largest double) are refused, naming the inputs and gamma, instead of
// returning inf or NaN; unchecked calls still return them.
template <class T, class Space>
void overflowing_results_are_refused(const Space& space, double magnitude,
                                     double gamma) {
  Dev3<T, Space> x("x", 2, 5, 1), y("y", 2, 4, 1);
  auto hx = Kokkos::create_mirror_view(x);
  for (std::size_t q = 0; q < hx.size(); ++q)
    hx.data()[q] = T(magnitude * (q % 2 ? 1 : -1));
  Kokkos::deep_copy(x, hx);
  Kokkos::deep_copy(y, T(0));
  softwave::SoftDTWOptions options;
  options.gamma = gamma;
  Dev1<T, Space> values("v", 2);
  Dev2<T, Space> matrix("m", 2, 2);
  Dev3<T, Space> cost("c", 2, 5, 4);
  Kokkos::deep_copy(cost, T(magnitude * magnitude));
  SCOPED_TRACE(testing::Message() << "magnitude " << magnitude << " gamma "
                                  << gamma << " float " << (sizeof(T) == 4));
  EXPECT_TRUE(throws_naming(
      "gamma", [&] { softwave::soft_dtw(space, x, y, values, options); }));
  EXPECT_TRUE(throws_naming("x", [&] {
    softwave::soft_dtw_divergence(space, x, y, values, options);
  }));
  EXPECT_TRUE(throws_naming(
      "y", [&] { softwave::pairwise(space, x, y, matrix, options); }));
  EXPECT_TRUE(throws_naming(
      "cost", [&] { softwave::soft_dtw_cost(space, cost, values, options); }));
  options.check_values = false;
  softwave::soft_dtw(space, x, y, values, options);
  EXPECT_FALSE(std::isfinite(to_host(values)[0]));
}

TYPED_TEST(Errors, OverflowingResultsAreRefused) {
  overflowing_results_are_refused<float>(this->space, 1e20, 1.0);
  overflowing_results_are_refused<double>(this->space, 1e155, 1.0);
  overflowing_results_are_refused<double>(this->space, 1.0, 1e308);
  overflowing_results_are_refused<float>(this->space, 1.0, 1e308);
}

TYPED_TEST(Errors, UncheckedNaNAnywhereGivesNaN) {
  nan_anywhere_gives_nan<double>(this->space);
  nan_anywhere_gives_nan<float>(this->space);
}

TYPED_TEST(Errors, DivergenceRefusesAlignment) {
  softwave::SeriesGradients<double, TypeParam> g;
  g.alignment = this->filled("e", B, N, M);
  EXPECT_TRUE(throws_naming("alignment", [&] {
    softwave::soft_dtw_divergence_value_and_grad(this->space, this->x, this->y,
                                                 this->values, g);
  }));
}

TYPED_TEST(Errors, CostTensorOutputsOfWrongExtent) {
  const auto c = this->filled("c", B, N, M);
  for (const auto& shape : {std::array{B + 1, N, M}, std::array{B, N - 1, M},
                            std::array{B, N, M + 1}}) {
    softwave::CostGradients<double, TypeParam> g;
    g.grad_cost = this->filled("gc", shape[0], shape[1], shape[2]);
    EXPECT_TRUE(throws_naming("grad_cost", [&] {
      softwave::soft_dtw_cost_value_and_grad(this->space, c, this->values, g);
    }));
  }
  softwave::CostGradients<double, TypeParam> g;
  g.grad_cost = this->filled("gc", B, N, M);
  g.grad_output = Dev1<double, TypeParam>("go", 1);
  EXPECT_TRUE(throws_naming("grad_output", [&] {
    softwave::soft_dtw_cost_value_and_grad(this->space, c, this->values, g);
  }));
}

TYPED_TEST(Errors, PairwiseMatrixOfWrongExtent) {
  const auto y3 = this->filled("y3", 3, M, D);
  for (const auto& shape : {std::array{3, B}, std::array{B, 4},
                            std::array{B + 1, 3}, std::array{0, 0}}) {
    SCOPED_TRACE(std::to_string(shape[0]) + "x" + std::to_string(shape[1]));
    EXPECT_TRUE(throws_naming("matrix", [&] {
      softwave::pairwise(this->space, this->x, y3,
                         Dev2<double, TypeParam>("m", shape[0], shape[1]));
    }));
  }
  EXPECT_NO_THROW(softwave::pairwise(this->space, this->x, y3,
                                     Dev2<double, TypeParam>("m", B, 3)));
}

TYPED_TEST(Errors, PathOutputsOfWrongExtent) {
  const Dev1<int, TypeParam> len("l", B);
  for (const auto& shape :
       {std::array{B, N + M - 2, 2}, std::array{B, N + M, 2},
        std::array{B, N + M - 1, 3}, std::array{B + 1, N + M - 1, 2},
        std::array{0, 0, 0}}) {
    SCOPED_TRACE(std::to_string(shape[0]) + "x" + std::to_string(shape[1]) +
                 "x" + std::to_string(shape[2]));
    EXPECT_TRUE(throws_naming("path", [&] {
      softwave::dtw_path(
          this->space, this->x, this->y, this->values,
          Dev3<int, TypeParam>("p", shape[0], shape[1], shape[2]), len);
    }));
  }
  const Dev3<int, TypeParam> path("p", B, N + M - 1, 2);
  EXPECT_TRUE(throws_naming("path_length", [&] {
    softwave::dtw_path(this->space, this->x, this->y, this->values, path,
                       Dev1<int, TypeParam>("l", B + 1));
  }));
  EXPECT_TRUE(throws_naming("path_length", [&] {
    softwave::dtw_path(this->space, this->x, this->y, this->values, path,
                       Dev1<int, TypeParam>());
  }));
  EXPECT_TRUE(throws_naming("values", [&] {
    softwave::dtw_path(this->space, this->x, this->y,
                       Dev1<double, TypeParam>("v", 1), path, len);
  }));
  EXPECT_NO_THROW(softwave::dtw_path(this->space, this->x, this->y,
                                     Dev1<double, TypeParam>(), path, len));
}

// The message check itself: a name counts only as a whole argument name.
TEST(ErrorHelper, NamesArgumentMatchesWholeNamesOnly) {
  EXPECT_TRUE(names_argument("softwave: x has 3 points", "x"));
  EXPECT_TRUE(names_argument("softwave: batch of y (3) differs from x.", "x"));
  EXPECT_TRUE(names_argument("softwave: lengths.x[1] = 0 is out of range",
                             "lengths.x"));
  EXPECT_FALSE(
      names_argument("softwave: lengths.x[1] = 0 is out of range", "x"));
  EXPECT_FALSE(names_argument("softwave: grad_x has the wrong extent", "x"));
  EXPECT_FALSE(
      names_argument("softwave: path_length has the wrong extent", "path"));
  EXPECT_FALSE(names_argument("softwave: every input must be finite", "y"));
  EXPECT_FALSE(throws_naming("gamma", [] {}));
  EXPECT_FALSE(throws_naming(
      "gamma", [] { throw softwave::invalid_argument("band must be >= 0"); }));
  EXPECT_FALSE(
      throws_naming("gamma", [] { throw std::invalid_argument("gamma"); }));
  EXPECT_TRUE(throws_naming("gamma", [] {
    throw softwave::invalid_argument("gamma must be >= 0 (got -1)");
  }));
}

// -------------------------------------------------------------- environment

// ctest runs the suite at 1 and 2 OpenMP threads (OMP_NUM_THREADS, set by
// tests/CMakeLists.txt): check the setting reached Kokkos' OpenMP space.
TEST(Environment, ThreadCountReachedKokkos) {
  const char* want = std::getenv("OMP_NUM_THREADS");
  if (!want) GTEST_SKIP() << "OMP_NUM_THREADS not set";
#ifdef KOKKOS_ENABLE_OPENMP
  EXPECT_EQ(Kokkos::OpenMP().concurrency(), std::atoi(want));
#else
  GTEST_SKIP() << "no OpenMP space in this build";
#endif
}

}  // namespace
