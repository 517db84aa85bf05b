#pragma once
// exp(x) for x <= 0 from arithmetic and integer shifts only, so that the
// compiler vectorises the host loops that call it (glibc's exp is a call a
// value): the soft-min of Soft-DTW's host wavefront and the log-sum-exps of
// the host's Sinkhorn updates. x = n·ln2 + r with |r| <= ln2/2; e^r by its
// Taylor series; 2^n added to the exponent bits. Below the normal range the
// result is 0, which beside a sum's largest term of 1 changes nothing;
// −∞ gives 0 and NaN stays NaN.

#include <cstdint>
#include <cstring>

namespace softwave::impl::host_exp {

// The bits of v as a To of the same size (std::bit_cast, C++20).
template <class To, class From>
inline To bit_cast(From v) {
  static_assert(sizeof(To) == sizeof(From));
  To out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

// c[0]·x^(K−1) + c[1]·x^(K−2) + ... + c[K−1], by Horner's rule.
template <class T, int K>
inline T horner(T x, const T (&c)[K]) {
  T p = c[0];
  for (int k = 1; k < K; ++k) p = p * x + c[k];
  return p;
}

// The series to r^13 (truncation below 5e-18); 0 below −708.
inline double exp_nonpositive(double x) {
  double const shifter = 0x1.8p52;  // adding it rounds to an integer
  double const t = x * 1.4426950408889634 + shifter;
  double const n = t - shifter;
  // ln 2 in two parts; the first has 32 significant bits, so n·ln2_hi is
  // exact for |n| <= 1022.
  double const r =
      (x - n * 6.93147180369123816490e-01) - n * 1.90821492927058770002e-10;
  // 1/13!, 1/12!, ..., 1/2!, 1, 1.
  constexpr double kTaylor[] = {1.0 / 6227020800.0,
                                1.0 / 479001600.0,
                                1.0 / 39916800.0,
                                1.0 / 3628800.0,
                                1.0 / 362880.0,
                                1.0 / 40320.0,
                                1.0 / 5040.0,
                                1.0 / 720.0,
                                1.0 / 120.0,
                                1.0 / 24.0,
                                1.0 / 6.0,
                                0.5,
                                1.0,
                                1.0};
  double const p = horner(r, kTaylor);
  // The low bits of t hold n (two's complement); shifted into the exponent
  // field they add n to p's exponent.
  double const scaled = bit_cast<double>(bit_cast<std::uint64_t>(p) +
                                         (bit_cast<std::uint64_t>(t) << 52));
  return x < -708.0 ? 0.0 : scaled;
}

// The series to r^7 (truncation below 6e-9, under float's rounding); 0
// below −86, where p < 1 would leave the normal range.
inline float exp_nonpositive(float x) {
  float const shifter = 0x1.8p23f;
  float const t = x * 1.44269504f + shifter;
  float const n = t - shifter;
  // ln 2 in two parts; the first has 9 significant bits, so n·ln2_hi is
  // exact for |n| <= 127.
  float const r = (x - n * 0.693359375f) - n * -2.12194440e-4f;
  constexpr float kTaylor[] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                               1.0f / 6,    0.5f,       1.0f,       1.0f};
  float const p = horner(r, kTaylor);
  float const scaled = bit_cast<float>(bit_cast<std::uint32_t>(p) +
                                       (bit_cast<std::uint32_t>(t) << 23));
  return x < -86.0f ? 0.0f : scaled;
}

}  // namespace softwave::impl::host_exp
