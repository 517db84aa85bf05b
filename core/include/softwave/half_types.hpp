#pragma once
// 16-bit floating-point inputs: softwave::bfloat16 and softwave::float16
// (IEEE binary16). Both are storage types with the bit layout of
// torch.bfloat16 / torch.float16, numpy.float16, __nv_bfloat16 and __half,
// so framework memory can be viewed in place. Arithmetic happens in float:
// a value converts to float implicitly (exactly), and is made from any
// arithmetic value by rounding to nearest, ties to even (overflow gives ±inf,
// NaN stays NaN).
//
// Soft-DTW on 16-bit inputs reads them as they are and computes in float32
// and double (see softdtw.hpp, "Precision"): values, incoming gradients and
// all-pairs matrices are float (value_t<T>), gradients and alignments come
// out in the input type, accumulated in float first.
//
// The conversions are written out in integer arithmetic so they are the
// same on every backend (host, CUDA, HIP) and need no vendor header.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>

namespace softwave {
namespace impl {

KOKKOS_INLINE_FUNCTION std::uint32_t bits_of(float v) {
  std::uint32_t b;
  __builtin_memcpy(&b, &v, sizeof b);
  return b;
}
KOKKOS_INLINE_FUNCTION float float_of(std::uint32_t b) {
  float v;
  __builtin_memcpy(&v, &b, sizeof v);
  return v;
}

// bfloat16 is the top half of a float: round the bottom half away.
KOKKOS_INLINE_FUNCTION std::uint16_t bfloat16_bits(float v) {
  std::uint32_t const b = bits_of(v);
  if ((b & 0x7fffffffu) > 0x7f800000u)  // NaN: keep it a (quiet) NaN
    return std::uint16_t((b >> 16) | 0x0040u);
  return std::uint16_t((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

// binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
KOKKOS_INLINE_FUNCTION std::uint16_t float16_bits(float v) {
  std::uint32_t b = bits_of(v);
  std::uint32_t const sign = (b >> 16) & 0x8000u;
  b &= 0x7fffffffu;
  if (b >= 0x47800000u)  // |v| ≥ 65536 (or inf, NaN): past every rounding
    return std::uint16_t(sign | (b > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (b < 0x38800000u) {
    // |v| < 2^-14, a subnormal (or zero) result: adding 0.5 lines the
    // binary16 subnormal step 2^-24 up with the float's last mantissa bit,
    // so the float adder rounds to nearest even for us.
    std::uint32_t const sum = bits_of(float_of(b) + 0.5f);
    return std::uint16_t(sign | (sum - 0x3f000000u));
  }
  // Normal: rebias the exponent, round the 13 dropped bits to nearest even
  // (a carry into the exponent is right, up to the infinity 0x7c00).
  std::uint32_t const odd = (b >> 13) & 1u;
  b += 0xc8000fffu + odd;  // (15 − 127) << 23, plus the rounding bias
  return std::uint16_t(sign | (b >> 13));
}

KOKKOS_INLINE_FUNCTION float float16_value(std::uint16_t h) {
  std::uint32_t const sign = std::uint32_t(h & 0x8000u) << 16;
  std::uint32_t const exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1fu)  // inf, NaN
    return float_of(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0)  // zero, subnormal: mantissa · 2^-24, exact in float
    return float_of(sign | bits_of(float(mantissa) * 5.9604644775390625e-8f));
  return float_of(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace impl

struct bfloat16 {
  std::uint16_t bits;

  bfloat16() = default;
  template <class U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
  KOKKOS_INLINE_FUNCTION explicit bfloat16(U v)
      : bits(impl::bfloat16_bits(float(v))) {}
  KOKKOS_INLINE_FUNCTION operator float() const {
    return impl::float_of(std::uint32_t(bits) << 16);
  }
};

struct float16 {
  std::uint16_t bits;

  float16() = default;
  template <class U, std::enable_if_t<std::is_arithmetic_v<U>, int> = 0>
  KOKKOS_INLINE_FUNCTION explicit float16(U v)
      : bits(impl::float16_bits(float(v))) {}
  KOKKOS_INLINE_FUNCTION operator float() const {
    return impl::float16_value(bits);
  }
};

static_assert(sizeof(bfloat16) == 2 && std::is_trivial_v<bfloat16>);
static_assert(sizeof(float16) == 2 && std::is_trivial_v<float16>);

template <class T>
constexpr bool is_half_v =
    std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;

// The type of values, incoming gradients (grad_output) and all-pairs
// matrices for inputs of type T, which is also the type gradients are
// accumulated in: float for the 16-bit types, T itself otherwise.
template <class T>
using value_t = std::conditional_t<is_half_v<T>, float, T>;

}  // namespace softwave
