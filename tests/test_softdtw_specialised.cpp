// The vendor-specialised path (CUDA: backends/cuda) against the float64
// reference and against the portable kernels on the same inputs: values,
// E, gradients, cost tensors, lengths, grad_output, divergence, all-pairs,
// launches split into chunks, and the caller's stream. Where no specialised
// path exists, asking for one is an argument error naming `kernel`.

#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "test_helpers.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>

#include "softdtw/fused.hpp"
#endif

namespace {

using namespace swt;

// Whether Space has a specialised path (on the host space of a CUDA build it
// has none: there the tests check that it is refused).
template <class Space>
constexpr bool kSpecialised =
#if defined(KOKKOS_ENABLE_CUDA)
    std::is_same_v<Space, Kokkos::Cuda>;
#else
    false;
#endif

#define SWT_NEEDS_SPECIALISED() \
  if (!kSpecialised<TypeParam>) \
  GTEST_SKIP() << "no specialised path on " << TypeParam::name()

template <class Space>
class Specialised : public ::testing::Test {};
TYPED_TEST_SUITE(Specialised, ExecutionSpaces);

Config with_kernel(Config s, softwave::Kernel kernel) {
  s.kernel = kernel;
  return s;
}

// Shapes around the strip and tile edge (32), lengths on and off, d across
// the register classes (4, 16, 64) and off the vector path (d % 4 != 0);
// d = 24 and 64 take the tensor-core cost and gradient products.
std::vector<Case> specialised_cases(Rng& rng) {
  static const int shapes[][4] = {
      // B, N, M, d
      {1, 1, 1, 1},      {3, 1, 7, 2},    {2, 7, 1, 3},    {2, 31, 33, 4},
      {3, 32, 32, 8},    {2, 33, 65, 16}, {4, 64, 40, 5},  {2, 100, 257, 64},
      {1, 257, 100, 17}, {5, 70, 70, 64}, {2, 96, 95, 61}, {3, 129, 64, 12},
      {2, 45, 77, 24}};
  static const double gammas[] = {0.01, 0.1, 1.0, 10.0};
  std::vector<Case> out;
  int c = 0;
  for (const auto& shape : shapes)
    for (double gamma : gammas) {
      Case k;
      k.B = shape[0];
      k.n = shape[1];
      k.m = shape[2];
      k.d = shape[3];
      k.setup.gamma = gamma;
      k.setup.kernel = softwave::Kernel::specialised;
      if (c % 2 == 1) {
        k.setup.len_x = random_lengths(rng, k.B, k.n);
        k.setup.len_y = random_lengths(rng, k.B, k.m);
      }
      if (c % 3 == 2) {
        k.setup.grad_output.resize(k.B);
        for (double& g : k.setup.grad_output) g = rng.uniform(-2.0, 2.0);
      }
      out.push_back(k);
      ++c;
    }
  return out;
}

TYPED_TEST(Specialised, SeriesMatchReference) {
  const TypeParam space;
  SWT_NEEDS_SPECIALISED();
  SWT_SEEDED_RNG(rng);
  for (const Case& k : specialised_cases(rng)) {
    SCOPED_TRACE(k.str());
    const auto [x, y] = case_inputs<float>(rng, k);
    check_value_and_grad<float>(space, k, x, y);
  }
}

TYPED_TEST(Specialised, CostTensorMatchesReference) {
  const TypeParam space;
  SWT_NEEDS_SPECIALISED();
  SWT_SEEDED_RNG(rng);
  for (const Case& k : specialised_cases(rng)) {
    SCOPED_TRACE(k.str());
    Batch c = random_batch(rng, k.B, k.n, k.m, 0.0, 2.0);
    round_to<float>(c);
    const Results want = reference_cost(c, k.setup);
    const Results values = library_cost<float>(space, c, k.setup, false);
    const Results got = library_cost<float>(space, c, k.setup, true);
    const double floor = value_floor<float>(k, 2.0);
    EXPECT_TRUE(near_values(values.values, want.values, value_rtol<float>(),
                            floor, "values"));
    EXPECT_TRUE(near_values(got.values, want.values, value_rtol<float>(), floor,
                            "values"));
    const double tol =
        array_rtol<float>(k.setup.gamma, max_abs(want.values), 2.0, k.n, k.m);
    EXPECT_TRUE(
        near_arrays(got.alignment, want.alignment, tol, 1.0, "grad_cost"));
  }
}

// One case on fresh inputs of type T: series (values, E, gradients) and a
// cost tensor (values, grad_cost) against the reference.
template <class T, class Space>
void check_series_and_cost(const Space& space, Rng& rng, const Case& k) {
  const auto [x, y] = case_inputs<T>(rng, k);
  check_value_and_grad<T>(space, k, x, y);
  check_cost_tensor<T>(space, rng, k);
}

// 16-bit inputs, read in place by the specialised kernels (vector loads of
// four elements, scalar loads off the vector path) and accumulated in float:
// every specialised case, series and cost tensors, against the reference on
// the same rounded inputs.
template <class H, class Space>
void half_cases(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (const Case& k : specialised_cases(rng)) {
    SCOPED_TRACE(k.str());
    check_series_and_cost<H>(space, rng, k);
  }
}

TYPED_TEST(Specialised, BFloat16MatchesReference) {
  const TypeParam space;
  SWT_NEEDS_SPECIALISED();
  half_cases<softwave::bfloat16>(space);
}

TYPED_TEST(Specialised, Float16MatchesReference) {
  const TypeParam space;
  SWT_NEEDS_SPECIALISED();
  half_cases<softwave::float16>(space);
}

#if defined(KOKKOS_ENABLE_CUDA)
// Gives the library its choice of warps per strip back when a test that
// forces them ends, however it ends.
struct RestoreKernelWarps {
  ~RestoreKernelWarps() { softwave::impl::cuda_fused::set_kernel_warps(0, 0); }
};
#endif

// The forward and backward kernels come with one or two warps per strip
// (the library picks by shape); every pairing must match the reference on
// every case, values-only calls (the forward without checkpoints) included.
TYPED_TEST(Specialised, EveryKernelVariantMatchesReference) {
  const TypeParam space;
  SWT_NEEDS_SPECIALISED();
#if defined(KOKKOS_ENABLE_CUDA)
  using softwave::impl::cuda_fused::set_kernel_warps;
  const RestoreKernelWarps restore;
  for (const auto [forward, backward] :
       {std::pair{1, 1}, std::pair{2, 2}, std::pair{1, 2}, std::pair{2, 1}}) {
    set_kernel_warps(forward, backward);
    SWT_SEEDED_RNG(rng);
    for (const Case& k : specialised_cases(rng)) {
      SCOPED_TRACE(k.str() + " warps=" + std::to_string(forward) + "/" +
                   std::to_string(backward));
      check_series_and_cost<float>(space, rng, k);
      const auto [x, y] = case_inputs<float>(rng, k);
      check_values<float>(space, k, x, y);
      Batch c = random_batch(rng, k.B, k.n, k.m, 0.0, 2.0);
      round_to<float>(c);
      EXPECT_TRUE(
          near_values(library_cost<float>(space, c, k.setup, false).values,
                      reference_cost(c, k.setup).values, value_rtol<float>(),
                      value_floor<float>(k, 2.0), "cost values"));
    }
  }
  EXPECT_THROW(set_kernel_warps(3, 0), std::invalid_argument);
  EXPECT_THROW(set_kernel_warps(0, -1), std::invalid_argument);
#endif
}

// A case of the gradient-output tests: γ = 0.1 and the specialised kernel
// where there is one (the portable one elsewhere).
template <class Space>
Case gradient_case(int B, int n, int m, int d) {
  Case k;
  k.B = B;
  k.n = n;
  k.m = m;
  k.d = d;
  k.setup.gamma = 0.1;
  k.setup.kernel = kSpecialised<Space> ? softwave::Kernel::specialised
                                       : softwave::Kernel::portable;
  return k;
}

// Asking for ∇x or ∇y alone gives what the full call gives (the tensor-core
// and FMA gradient products each skip the side not asked for). Off CUDA it
// checks the portable kernels.
TYPED_TEST(Specialised, OneSidedGradientsMatchFull) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (int d : {8, 24, 64}) {
    Case k = gradient_case<TypeParam>(3, 75, 90, d);
    k.setup.len_x = random_lengths(rng, k.B, k.n);
    SCOPED_TRACE(k.str());
    const auto [x, y] = case_inputs<float>(rng, k);
    const Results full = library_value_and_grad<float>(space, x, y, k.setup);
    for (bool want_x : {true, false}) {
      const auto dx = to_device<float>(space, x, "swt::x");
      const auto dy = to_device<float>(space, y, "swt::y");
      auto values = output1<float>(space, "swt::values", x.B);
      softwave::SeriesGradients<float, TypeParam> g;
      if (want_x)
        g.grad_x = output3<float>(space, "swt::grad_x", x.B, x.n, x.d);
      else
        g.grad_y = output3<float>(space, "swt::grad_y", y.B, y.n, y.d);
      softwave::soft_dtw_value_and_grad(
          space, dx, dy, values, g, k.setup.options(), k.setup.lengths(space));
      const auto got = to_host(want_x ? g.grad_x : g.grad_y);
      const auto& want = want_x ? full.grad_x : full.grad_y;
      EXPECT_TRUE(near_arrays(got, want, 1e-6, max_abs(want),
                              want_x ? "grad_x alone" : "grad_y alone"));
    }
  }
}

// Gradient outputs whose rows are not 16-byte aligned, beside aligned
// inputs: the specialised kernels' vector path adds to the gradients two
// and four floats at a time (float2 and float4 atomics), so such outputs
// must take the scalar path instead of faulting. d = 8 and 64 take the
// vector path when aligned (64: tensor-core products as well).
TYPED_TEST(Specialised, GradientOutputsOffVectorAlignment) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  for (int d : {8, 64}) {
    const Case k = gradient_case<TypeParam>(2, 70, 45, d);
    SCOPED_TRACE(k.str());
    const auto [x, y] = case_inputs<float>(rng, k);
    const Results aligned = library_value_and_grad<float>(space, x, y, k.setup);
    // Views 1 and 2 floats into a fresh allocation: grad_x 4-byte and grad_y
    // 8-byte aligned, neither 16-byte aligned.
    Dev1<float, TypeParam> storage("swt::gradients",
                                   2 + std::size_t(k.B) * (k.n + k.m) * k.d);
    Kokkos::deep_copy(storage, static_cast<float>(kSentinel));
    using Unaligned =
        Kokkos::View<float***, Kokkos::LayoutRight,
                     typename TypeParam::memory_space, Kokkos::MemoryUnmanaged>;
    softwave::SeriesGradients<float, TypeParam> g;
    g.grad_x = Unaligned(storage.data() + 1, k.B, k.n, k.d);
    g.grad_y = Unaligned(storage.data() + 2 + std::size_t(k.B) * k.n * k.d, k.B,
                         k.m, k.d);
    const auto dx = to_device<float>(space, x, "swt::x");
    const auto dy = to_device<float>(space, y, "swt::y");
    auto values = output1<float>(space, "swt::values", x.B);
    softwave::soft_dtw_value_and_grad(
        space, dx, dy, values, g, k.setup.options(), k.setup.lengths(space));
    const double tol = array_rtol<float>(k.setup.gamma, max_abs(aligned.values),
                                         max_cost(x, y, k.setup), k.n, k.m);
    EXPECT_TRUE(
        near_values(to_host(values), aligned.values, value_rtol<float>(),
                    value_floor<float>(k, max_cost(x, y, k.setup)), "values"));
    EXPECT_TRUE(near_arrays(to_host(g.grad_x), aligned.grad_x, tol,
                            std::max(max_abs(aligned.grad_x), 1e-3), "grad_x"));
    EXPECT_TRUE(near_arrays(to_host(g.grad_y), aligned.grad_y, tol,
                            std::max(max_abs(aligned.grad_y), 1e-3), "grad_y"));
  }
}

// The same inputs through both paths agree to float rounding.
TYPED_TEST(Specialised, AgreesWithPortable) {
  const TypeParam space;
  SWT_NEEDS_SPECIALISED();
  SWT_SEEDED_RNG(rng);
  for (const Case& k : specialised_cases(rng)) {
    SCOPED_TRACE(k.str());
    const auto [x, y] = case_inputs<float>(rng, k);
    const Results fused = library_value_and_grad<float>(space, x, y, k.setup);
    const Results portable = library_value_and_grad<float>(
        space, x, y, with_kernel(k.setup, softwave::Kernel::portable));
    const double tol =
        array_rtol<float>(k.setup.gamma, max_abs(portable.values),
                          max_cost(x, y, k.setup), k.n, k.m);
    EXPECT_TRUE(near_values(fused.values, portable.values, value_rtol<float>(),
                            value_floor<float>(k, max_cost(x, y, k.setup)),
                            "values"));
    EXPECT_TRUE(near_arrays(fused.alignment, portable.alignment, tol, 1.0,
                            "alignment"));
    const double gscale = std::max(max_abs(portable.grad_x), 1e-3);
    EXPECT_TRUE(
        near_arrays(fused.grad_x, portable.grad_x, tol, gscale, "grad_x"));
    EXPECT_TRUE(near_arrays(fused.grad_y, portable.grad_y, tol,
                            std::max(max_abs(portable.grad_y), 1e-3),
                            "grad_y"));
  }
}

// Hard DTW (γ = 0) values on the specialised forward, whose walk takes the
// minimum instead of the soft minimum: series and cost tensors, every kernel
// variant, float and the 16-bit inputs, against the float64 reference, and
// equal to the portable kernels' (the same float costs summed in double
// along the same path, so only the costs' own rounding differs). A NaN in
// the inputs (unchecked) reaches its pair's value and no other.
TYPED_TEST(Specialised, HardDtwValuesMatchReference) {
  const TypeParam space;
  SWT_NEEDS_SPECIALISED();
#if defined(KOKKOS_ENABLE_CUDA)
  using softwave::impl::cuda_fused::set_kernel_warps;
  const RestoreKernelWarps restore;
  for (const int warps : {0, 1, 2}) {
    set_kernel_warps(warps, 0);
    SWT_SEEDED_RNG(rng);
    for (Case k : specialised_cases(rng)) {
      if (k.setup.gamma != 0.1) continue;  // one of the four γ a shape
      k.setup.gamma = 0.0;
      SCOPED_TRACE(k.str() + " warps=" + std::to_string(warps));
      const auto [x, y] = case_inputs<float>(rng, k);
      check_values<float>(space, k, x, y);
      Config portable = k.setup;
      portable.kernel = softwave::Kernel::portable;
      EXPECT_TRUE(near_values(library_values<float>(space, x, y, k.setup),
                              library_values<float>(space, x, y, portable),
                              1e-6, 1e-6, "specialised against portable"));
      Batch c = random_batch(rng, k.B, k.n, k.m, 0.0, 2.0);
      round_to<float>(c);
      EXPECT_TRUE(
          near_values(library_cost<float>(space, c, k.setup, false).values,
                      reference_cost(c, k.setup).values, value_rtol<float>(),
                      value_floor<float>(k, 2.0), "cost values"));
      const auto [x16, y16] = case_inputs<softwave::bfloat16>(rng, k);
      check_values<softwave::bfloat16>(space, k, x16, y16);
    }
  }
  // A NaN in one pair's x.
  SWT_SEEDED_RNG(rng);
  Batch x = random_batch(rng, 3, 40, 4), y = random_batch(rng, 3, 50, 4);
  x(1, 17, 2) = std::numeric_limits<double>::quiet_NaN();
  softwave::SoftDTWOptions unchecked;
  unchecked.gamma = 0.0;
  unchecked.kernel = softwave::Kernel::specialised;
  unchecked.check_values = false;
  auto got = output1<float>(space, "swt::values", 3);
  softwave::soft_dtw(space, to_device<float>(space, x, "swt::x"),
                     to_device<float>(space, y, "swt::y"), got, unchecked);
  const std::vector<double> values = to_host(got);
  EXPECT_TRUE(std::isfinite(values[0]));
  EXPECT_TRUE(std::isnan(values[1]));
  EXPECT_TRUE(std::isfinite(values[2]));
#endif
}

// The tensor-core costs (d >= 16, d % 8 == 0) keep float32 accuracy on data
// far from the origin: a common offset of 50 would be squared into the
// norm expansion ‖x‖² + ‖y‖² − 2x·y and cancel ~4 digits without centring.
TYPED_TEST(Specialised, TensorCoreCostsKeepAccuracyOffOrigin) {
  const TypeParam space;
  SWT_NEEDS_SPECIALISED();
  SWT_SEEDED_RNG(rng);
  for (int d : {16, 64})
    for (double gamma : {1.0, 0.1}) {
      Case k;
      k.B = 2;
      k.n = 300;
      k.m = 260;
      k.d = d;
      k.setup.gamma = gamma;
      k.setup.kernel = softwave::Kernel::specialised;
      SCOPED_TRACE(k.str());
      Batch x = random_batch(rng, k.B, k.n, d, 50.0, 51.0);
      Batch y = random_batch(rng, k.B, k.m, d, 50.0, 51.0);
      round_to<float>(x);
      round_to<float>(y);
      const Results want = reference(x, y, k.setup);
      const Results got = library_value_and_grad<float>(space, x, y, k.setup);
      EXPECT_TRUE(near_values(got.values, want.values, 1e-6, 1.0, "values"));
      EXPECT_LE(relative_norm_error(got.grad_x, want.grad_x), 1e-4) << "grad_x";
      EXPECT_LE(relative_norm_error(got.grad_y, want.grad_y), 1e-4) << "grad_y";
    }
}

// Divergence (three sweeps, gradients added) and all-pairs go through the
// specialised path too.
TYPED_TEST(Specialised, DivergenceAndPairwiseAgreeWithPortable) {
  const TypeParam space;
  SWT_NEEDS_SPECIALISED();
  SWT_SEEDED_RNG(rng);
  const int B = 6, n = 45, m = 70, d = 8;
  Config s;
  s.gamma = 0.5;
  s.len_x = random_lengths(rng, B, n);
  s.len_y = random_lengths(rng, B, m);
  Batch x = random_batch(rng, B, n, d), y = random_batch(rng, B, m, d);
  round_to<float>(x);
  round_to<float>(y);
  const auto dx = to_device<float>(space, x), dy = to_device<float>(space, y);
  auto run = [&](softwave::Kernel kernel) {
    Config c = with_kernel(s, kernel);
    auto values = output1<float>(space, "swt::values", B);
    softwave::SeriesGradients<float, TypeParam> g;
    g.grad_x = output3<float>(space, "swt::grad_x", B, n, d);
    g.grad_y = output3<float>(space, "swt::grad_y", B, m, d);
    softwave::soft_dtw_divergence_value_and_grad(space, dx, dy, values, g,
                                                 c.options(), c.lengths(space));
    Dev2<float, TypeParam> matrix("swt::matrix", B, B);
    softwave::pairwise(space, dx, dy, matrix, c.options(),
                       softwave::PairwiseValue::divergence, c.lengths(space));
    return std::vector<std::vector<double>>{to_host(values), to_host(g.grad_x),
                                            to_host(g.grad_y), to_host(matrix)};
  };
  const auto fused = run(softwave::Kernel::specialised);
  const auto portable = run(softwave::Kernel::portable);
  EXPECT_TRUE(
      near_values(fused[0], portable[0], 1e-5, 1.0, "divergence values"));
  EXPECT_TRUE(
      near_arrays(fused[1], portable[1], 1e-4, 1e-3, "divergence grad_x"));
  EXPECT_TRUE(
      near_arrays(fused[2], portable[2], 1e-4, 1e-3, "divergence grad_y"));
  EXPECT_TRUE(
      near_values(fused[3], portable[3], 1e-5, 1.0, "pairwise divergence"));
}

// Long pairs: many strips waiting on each other, and a batch whose workspace
// exceeds one launch (256 MiB), so it runs as several launches.
TYPED_TEST(Specialised, LongPairsAndChunkedLaunches) {
  const TypeParam space;
  SWT_NEEDS_SPECIALISED();
  SWT_SEEDED_RNG(rng);
  struct Shape {
    int B, n, m, d;
  };
  for (Shape sh : {Shape{2, 1500, 1100, 64}, Shape{20, 4096, 4096, 1}}) {
    Config s;
    s.gamma = 1.0;
    s.kernel = softwave::Kernel::specialised;
    SCOPED_TRACE(::testing::Message() << "B=" << sh.B << " N=" << sh.n
                                      << " M=" << sh.m << " d=" << sh.d);
    Batch x = random_batch(rng, sh.B, sh.n, sh.d),
          y = random_batch(rng, sh.B, sh.m, sh.d);
    round_to<float>(x);
    round_to<float>(y);
    const Results fused = library_value_and_grad<float>(space, x, y, s);
    const Results portable = library_value_and_grad<float>(
        space, x, y, with_kernel(s, softwave::Kernel::portable));
    EXPECT_TRUE(
        near_values(fused.values, portable.values, 1e-5, 1.0, "values"));
    EXPECT_TRUE(
        near_arrays(fused.grad_x, portable.grad_x, 1e-4, 1e-3, "grad_x"));
    EXPECT_TRUE(
        near_arrays(fused.grad_y, portable.grad_y, 1e-4, 1e-3, "grad_y"));
    EXPECT_TRUE(near_arrays(fused.alignment, portable.alignment, 1e-4, 1.0,
                            "alignment"));
  }
}

// What the specialised path does not cover is refused by name when asked for
// (and taken by the portable kernels under `automatic`).
TYPED_TEST(Specialised, RefusesWhatItDoesNotCover) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  Batch x = random_batch(rng, 2, 9, 3), y = random_batch(rng, 2, 7, 3);
  Config s;
  s.kernel = softwave::Kernel::specialised;
  if (!kSpecialised<TypeParam>) {
    EXPECT_TRUE(throws_naming("kernel",
                              [&] { library_values<float>(space, x, y, s); }));
    return;
  }
  Config band = s, l1 = s, hard = s;
  band.band = 2;
  l1.cost = ref::Cost::l1;
  hard.gamma = 0.0;
  EXPECT_TRUE(throws_naming("kernel",
                            [&] { library_values<float>(space, x, y, band); }));
  EXPECT_TRUE(
      throws_naming("kernel", [&] { library_values<float>(space, x, y, l1); }));
  // Hard DTW: values only (its gradients follow the path on the portable
  // kernels).
  EXPECT_EQ(library_values<float>(space, x, y, hard).size(), 2u);
  EXPECT_TRUE(throws_naming(
      "kernel", [&] { library_value_and_grad<float>(space, x, y, hard); }));
  EXPECT_TRUE(
      throws_naming("kernel", [&] { library_values<double>(space, x, y, s); }));
  Batch wide_x = random_batch(rng, 1, 4, 65),
        wide_y = random_batch(rng, 1, 5, 65);
  EXPECT_TRUE(throws_naming(
      "kernel", [&] { library_values<float>(space, wide_x, wide_y, s); }));
  // Under `automatic` the same calls run (on the portable kernels).
  band.kernel = l1.kernel = softwave::Kernel::automatic;
  EXPECT_EQ(library_values<float>(space, x, y, band).size(), 2u);
  EXPECT_EQ(library_values<float>(space, x, y, l1).size(), 2u);
}

#if defined(KOKKOS_ENABLE_CUDA)
// Called on a Kokkos::Cuda instance made from the caller's own stream, and
// fenced only there, the results are right (nothing waits on the default
// stream or the device on the library's behalf). Only Kokkos::Cuda has
// streams: the body is compiled for it alone.
TYPED_TEST(Specialised, RunsOnTheCallersStream) {
  SWT_NEEDS_SPECIALISED();
  if constexpr (std::is_same_v<TypeParam, Kokkos::Cuda>) {
    const TypeParam space;
    SWT_SEEDED_RNG(rng);
    const int B = 4, n = 300, m = 280, d = 16;
    Config s;
    s.gamma = 0.1;
    s.kernel = softwave::Kernel::specialised;
    Batch x = random_batch(rng, B, n, d), y = random_batch(rng, B, m, d);
    round_to<float>(x);
    round_to<float>(y);
    const auto dx = to_device<float>(space, x), dy = to_device<float>(space, y);
    space.fence();
    cudaStream_t stream;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
              cudaSuccess);
    {
      Kokkos::Cuda instance(stream);
      Dev1<float, Kokkos::Cuda> values(
          Kokkos::view_alloc(instance, std::string("swt::values")), B);
      softwave::SeriesGradients<float, Kokkos::Cuda> g;
      g.grad_x = Dev3<float, Kokkos::Cuda>(
          Kokkos::view_alloc(instance, std::string("swt::grad_x")), B, n, d);
      g.grad_y = Dev3<float, Kokkos::Cuda>(
          Kokkos::view_alloc(instance, std::string("swt::grad_y")), B, m, d);
      softwave::soft_dtw_value_and_grad(instance, dx, dy, values, g,
                                        s.options());
      auto hv = Kokkos::create_mirror_view(values);
      auto hx = Kokkos::create_mirror_view(g.grad_x);
      auto hy = Kokkos::create_mirror_view(g.grad_y);
      Kokkos::deep_copy(instance, hv, values);
      Kokkos::deep_copy(instance, hx, g.grad_x);
      Kokkos::deep_copy(instance, hy, g.grad_y);
      instance.fence();
      const Results want = reference(x, y, s);
      std::vector<double> v(hv.data(), hv.data() + hv.size()),
          gx(hx.data(), hx.data() + hx.size()),
          gy(hy.data(), hy.data() + hy.size());
      EXPECT_TRUE(
          near_values(v, want.values, value_rtol<float>(), 1.0, "values"));
      EXPECT_TRUE(near_arrays(gx, want.grad_x, 1e-4, 1e-3, "grad_x"));
      EXPECT_TRUE(near_arrays(gy, want.grad_y, 1e-4, 1e-3, "grad_y"));
    }
    cudaStreamDestroy(stream);
  }
}
#endif

}  // namespace
