// 16-bit inputs (softwave::bfloat16, softwave::float16): the conversions
// (every bit pattern, rounding to nearest even against a brute-force nearest
// value, on the host and in the execution space), and float32-accumulation
// accuracy at N = 1024 against the float64 reference on the same (rounded)
// inputs. The sweeps of the other test files run these types too.

#include <cmath>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <tuple>

#include "test_helpers.hpp"

namespace {

using namespace swt;
using softwave::bfloat16;
using softwave::float16;

template <class H>
H from_bits(std::uint16_t bits) {
  H h;
  h.bits = bits;
  return h;
}

// binary16 by definition: (−1)^s · 2^(e − 15) · (1 + m/1024), subnormals
// 2^-14 · m/1024, e = 31 inf/NaN.
double float16_definition(std::uint16_t h) {
  int const s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double const sign = s ? -1.0 : 1.0;
  if (e == 31)
    return m ? std::numeric_limits<double>::quiet_NaN()
             : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(m, -24);
  return sign * std::ldexp(1024 + m, e - 25);
}

TEST(HalfTypes, EveryBitPatternWidensExactlyAndRoundTrips) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    auto const bits = static_cast<std::uint16_t>(b);
    float const h = from_bits<float16>(bits);
    double const want = float16_definition(bits);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(h)) << std::hex << b;
      EXPECT_TRUE(std::isnan(float(float16(h)))) << std::hex << b;
    } else {
      ASSERT_EQ(double(h), want) << "float16 bits " << std::hex << b;
      ASSERT_EQ(float16(h).bits, bits) << "float16 bits " << std::hex << b;
    }
    float const g = from_bits<bfloat16>(bits);
    std::uint32_t widened;
    std::memcpy(&widened, &g, sizeof widened);
    ASSERT_EQ(widened, b << 16) << "bfloat16 bits " << std::hex << b;
    if (std::isnan(g))
      EXPECT_TRUE(std::isnan(float(bfloat16(g)))) << std::hex << b;
    else
      ASSERT_EQ(bfloat16(g).bits, bits) << "bfloat16 bits " << std::hex << b;
  }
}

// The nearest of the two neighbours lo < v < hi, ties to the even one.
template <class H>
void expect_nearest(float v, H got, H lo, H hi) {
  double const dl = double(v) - float(lo), dh = float(hi) - double(v);
  std::uint16_t want = dl < dh ? lo.bits : hi.bits;
  if (dl == dh) want = (lo.bits & 1) ? hi.bits : lo.bits;
  ASSERT_EQ(got.bits, want) << std::setprecision(10) << "v = " << v;
}

TEST(HalfTypes, RoundToNearestEven) {
  SWT_SEEDED_RNG(rng);
  // float16: finite positive values sorted by bits; brute-force neighbours.
  for (int trial = 0; trial < 200000; ++trial) {
    // Magnitudes from deep subnormal to past the largest finite (65504),
    // and exact ties between neighbours now and then.
    double const magnitude =
        std::ldexp(rng.uniform(1.0, 2.0), rng.integer(-26, 16));
    float v = float(magnitude);
    if (trial % 7 == 0) {
      std::uint16_t const below = float16(v).bits & 0x7fff;
      if (below < 0x7bff)
        v = float((double(from_bits<float16>(below)) +
                   double(from_bits<float16>(below + 1))) /
                  2);
    }
    float16 const got(v);
    if (v >= 65520.0f) {  // past the last tie: rounds to inf
      EXPECT_EQ(got.bits, 0x7c00) << v;
      continue;
    }
    std::uint16_t lo = 0;  // the largest float16 ≤ v, by bisection
    for (std::uint16_t hi = 0x7bff; lo < hi;) {
      auto const mid = static_cast<std::uint16_t>((lo + hi + 1) / 2);
      if (double(from_bits<float16>(mid)) <= v)
        lo = mid;
      else
        hi = mid - 1;
    }
    if (double(from_bits<float16>(lo)) == v) {
      ASSERT_EQ(got.bits, lo) << v;
    } else {
      expect_nearest(v, got, from_bits<float16>(lo),
                     from_bits<float16>(lo + 1));
    }
    EXPECT_EQ(float16(-v).bits, std::uint16_t(got.bits | 0x8000))
        << v;  // symmetric
  }
  // bfloat16: neighbours are the float truncated to 16 bits and the next.
  for (int trial = 0; trial < 200000; ++trial) {
    float const v = float(std::ldexp(
        rng.uniform(1.0, 2.0), rng.integer(-140, 126)));  // below overflow
    std::uint32_t b;
    std::memcpy(&b, &v, sizeof b);
    auto const lo = static_cast<std::uint16_t>(b >> 16);
    if ((b & 0xffff) == 0)
      ASSERT_EQ(bfloat16(v).bits, lo);
    else
      expect_nearest(v, bfloat16(v), from_bits<bfloat16>(lo),
                     from_bits<bfloat16>(lo + 1));
  }
  EXPECT_EQ(float16(65519.0f).bits, 0x7bff);  // below the tie: the largest
  EXPECT_EQ(float16(1e6f).bits, 0x7c00);
  EXPECT_EQ(float16(-1e6).bits, 0xfc00);
  EXPECT_EQ(float16(0x1p-25f).bits, 0x0000);  // tie with 0: to even (0)
  EXPECT_EQ(float16(0x1.8p-25f).bits, 0x0001);
  EXPECT_EQ(bfloat16(3.0e38f * 10).bits, 0x7f80);  // inf stays inf
  EXPECT_EQ(bfloat16(3.4e38f).bits, 0x7f80);       // overflow by rounding
  EXPECT_TRUE(
      std::isnan(float(bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(
      std::isnan(float(float16(std::numeric_limits<float>::quiet_NaN()))));
}

// The same conversions compiled for the execution space (the library rounds
// its 16-bit outputs there): every float16 and bfloat16 bit pattern widened
// and rounded back, and float16 rounding of random floats, must match the
// host.
// Row i: float16 and bfloat16 bit pattern i widened and rounded back, then
// samples(i) rounded to each, all in the execution space.
// (The kernel is in a free function: CUDA's extended lambdas may not sit in
// a test body, a private member function.)
template <class Space>
Kokkos::View<std::uint16_t* [4], typename Space::memory_space> convert_in_space(
    const Space& space, const Dev1<float, Space>& samples) {
  Kokkos::View<std::uint16_t* [4], typename Space::memory_space> out(
      "swt::converted", samples.extent(0));
  Kokkos::parallel_for(
      "swt::convert", Kokkos::RangePolicy<Space>(space, 0, samples.extent(0)),
      KOKKOS_LAMBDA(int i) {
        float16 h;
        h.bits = std::uint16_t(i);
        bfloat16 g;
        g.bits = std::uint16_t(i);
        out(i, 0) = float16(float(h)).bits;
        out(i, 1) = bfloat16(float(g)).bits;
        out(i, 2) = float16(samples(i)).bits;
        out(i, 3) = bfloat16(samples(i)).bits;
      });
  return out;
}

template <class Space>
class HalfTypesInSpace : public ::testing::Test {};
TYPED_TEST_SUITE(HalfTypesInSpace, ExecutionSpaces);

TYPED_TEST(HalfTypesInSpace, ExecutionSpaceConvertsLikeTheHost) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  constexpr int count = 65536;
  Dev1<float, TypeParam> samples("swt::samples", count);
  auto host_samples = Kokkos::create_mirror_view(samples);
  for (int i = 0; i < count; ++i)
    host_samples(i) =
        float(std::ldexp(rng.uniform(-2.0, 2.0), rng.integer(-26, 16)));
  Kokkos::deep_copy(samples, host_samples);
  auto const out = convert_in_space(space, samples);
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), out);
  for (int i = 0; i < count; ++i) {
    auto const bits = static_cast<std::uint16_t>(i);
    float16 const h = from_bits<float16>(bits);
    bfloat16 const g = from_bits<bfloat16>(bits);
    if (!std::isnan(float(h))) ASSERT_EQ(host(i, 0), bits) << i;
    if (!std::isnan(float(g))) ASSERT_EQ(host(i, 1), bits) << i;
    ASSERT_EQ(host(i, 2), float16(host_samples(i)).bits) << host_samples(i);
    ASSERT_EQ(host(i, 3), bfloat16(host_samples(i)).bits) << host_samples(i);
  }
}

// Accuracy with float32 accumulation: x, y ~ U[0, 1) rounded to the 16-bit
// type (the reference sees the same numbers), N = M = 1024, B = 2. Values
// (float) must be as accurate as float32 inputs give (≤ 1e-6 relative), and
// gradients within the 16-bit output rounding: half an ulp per entry, at
// most 2^-8 (bfloat16) or 2^-11 (float16) of each entry, plus float32's
// 1e-4.
template <class H, class Space>
void accuracy(const Space& space, double gamma, int d) {
  SWT_SEEDED_RNG(rng);
  const int B = 2, n = 1024;
  Batch x = random_batch(rng, B, n, d), y = random_batch(rng, B, n, d);
  round_to<H>(x);
  round_to<H>(y);
  Config s;
  s.gamma = gamma;
  SCOPED_TRACE(s.str() + " d=" + std::to_string(d));
  const Results want = reference(x, y, s);
  const Results got = library_value_and_grad<H>(space, x, y, s);
  double value = 0.0;
  for (int b = 0; b < B; ++b)
    value = std::max(value, std::fabs(got.values[b] - want.values[b]) /
                                std::fabs(want.values[b]));
  double const gx = relative_norm_error(got.grad_x, want.grad_x);
  double const gy = relative_norm_error(got.grad_y, want.grad_y);
  // Half an ulp, relative: 2^-8 (8 significant bits), 2^-11 (11 bits).
  double const ulp = std::is_same_v<H, bfloat16> ? 0x1p-8 : 0x1p-11;
  std::ostringstream line;
  line << std::scientific << std::setprecision(2) << "[ accuracy ] "
       << (std::is_same_v<H, bfloat16> ? "bfloat16" : "float16")
       << " gamma=" << gamma << " d=" << d << ": value " << value << ", grad_x "
       << gx << ", grad_y " << gy << " (rounding bound " << ulp << ")";
  std::cout << line.str() << std::endl;
  // Accumulating in the 16-bit type would add about one rounding per term
  // summed (thousands here), far above a single one.
  EXPECT_LE(value, 1e-6);
  EXPECT_LE(gx, 1e-4 + ulp);
  EXPECT_LE(gy, 1e-4 + ulp);
}

template <class Space>
class HalfAccuracy : public ::testing::Test {};
TYPED_TEST_SUITE(HalfAccuracy, ExecutionSpaces);

TYPED_TEST(HalfAccuracy, BFloat16AgainstFloat64ReferenceGamma1D8) {
  const TypeParam space;
  accuracy<bfloat16>(space, 1.0, 8);
}
TYPED_TEST(HalfAccuracy, BFloat16AgainstFloat64ReferenceGamma1D64) {
  const TypeParam space;
  accuracy<bfloat16>(space, 1.0, 64);
}
TYPED_TEST(HalfAccuracy, BFloat16AgainstFloat64ReferenceGamma0p01D8) {
  const TypeParam space;
  accuracy<bfloat16>(space, 0.01, 8);
}
TYPED_TEST(HalfAccuracy, BFloat16AgainstFloat64ReferenceGamma0p01D64) {
  const TypeParam space;
  accuracy<bfloat16>(space, 0.01, 64);
}
TYPED_TEST(HalfAccuracy, Float16AgainstFloat64ReferenceGamma1D8) {
  const TypeParam space;
  accuracy<float16>(space, 1.0, 8);
}
TYPED_TEST(HalfAccuracy, Float16AgainstFloat64ReferenceGamma1D64) {
  const TypeParam space;
  accuracy<float16>(space, 1.0, 64);
}
TYPED_TEST(HalfAccuracy, Float16AgainstFloat64ReferenceGamma0p01D8) {
  const TypeParam space;
  accuracy<float16>(space, 0.01, 8);
}
TYPED_TEST(HalfAccuracy, Float16AgainstFloat64ReferenceGamma0p01D64) {
  const TypeParam space;
  accuracy<float16>(space, 0.01, 64);
}

// The 16-bit path gives what float32 gives on the same (exactly widened)
// numbers: same values to float32 rounding, gradients equal to the float32
// ones rounded to the 16-bit type (within one ulp: both are rounded from
// float sums that may differ in the last bits).
template <class Space>
class HalfInputs : public ::testing::Test {};
TYPED_TEST_SUITE(HalfInputs, ExecutionSpaces);

template <class H, class Space>
void matches_float32(const Space& space) {
  SWT_SEEDED_RNG(rng);
  for (int d : {1, 5, 16, 64}) {
    Config s;
    s.gamma = 0.1;
    s.len_x = random_lengths(rng, 3, 70);
    s.len_y = random_lengths(rng, 3, 45);
    s.grad_output = {0.5, -1.25, 2.0};
    SCOPED_TRACE(s.str() + " d=" + std::to_string(d));
    Batch x = random_batch(rng, 3, 70, d, -1.0, 1.0);
    Batch y = random_batch(rng, 3, 45, d, -1.0, 1.0);
    round_to<H>(x);
    round_to<H>(y);
    const Results half = library_value_and_grad<H>(space, x, y, s);
    const Results single = library_value_and_grad<float>(space, x, y, s);
    EXPECT_TRUE(near_values(half.values, single.values, 1e-6, 1.0, "values"));
    double const ulp = std::is_same_v<H, bfloat16> ? 0x1p-7 : 0x1p-10;
    for (auto [a, b, what] :
         {std::tuple{&half.grad_x, &single.grad_x, "grad_x"},
          std::tuple{&half.grad_y, &single.grad_y, "grad_y"},
          std::tuple{&half.alignment, &single.alignment, "alignment"}})
      // The floor covers float16's subnormals (steps of 2^-24).
      EXPECT_TRUE(near_values(*a, *b, ulp, 1e-4 * max_abs(*b), what));
  }
}

TYPED_TEST(HalfInputs, BFloat16MatchesFloat32) {
  const TypeParam space;
  matches_float32<bfloat16>(space);
}
TYPED_TEST(HalfInputs, Float16MatchesFloat32) {
  const TypeParam space;
  matches_float32<float16>(space);
}

}  // namespace
