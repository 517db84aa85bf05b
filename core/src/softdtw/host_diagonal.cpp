#include "host_diagonal.hpp"

#include <cstring>
#include <isa_clones.hpp>
#include <limits>
#include <type_traits>

namespace softwave::impl {
namespace {

inline std::uint64_t bits_of(double v) {
  std::uint64_t b;
  std::memcpy(&b, &v, sizeof b);
  return b;
}
inline double double_of(std::uint64_t b) {
  double v;
  std::memcpy(&v, &b, sizeof v);
  return v;
}

// c[0]·x^(K−1) + c[1]·x^(K−2) + ... + c[K−1], by Horner's rule.
template <int K>
inline double horner(double x, const double (&c)[K]) {
  double p = c[0];
  for (int k = 1; k < K; ++k) p = p * x + c[k];
  return p;
}

// exp(x) for x <= 0: x = n·ln2 + r with |r| <= ln2/2, e^r by its Taylor
// series to r^13 (truncation below 5e-18), 2^n added to the exponent bits.
// Below −708 (where 2^n would leave the normal range) the result is 0, which
// beside the soft-min's term of exactly 1 changes nothing; NaN stays NaN.
// Only arithmetic and integer shifts, so the compiler vectorises it.
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
  double const scaled = double_of(bits_of(p) + (bits_of(t) << 52));
  return x < -708.0 ? 0.0 : scaled;
}

// ln(s) for s in [1, 3] (a soft-min's sum: one term is 1, the others at most
// 1): s = 2^k·z with z in [1/√2, √2] and ln z = 2·atanh(u), u = (z − 1)/(z +
// 1), |u| <= 0.172, by its series to u^23 (truncation below 1e-18).
inline double log_one_to_three(double s) {
  double const ln2 = 0.6931471805599453;
  bool const over_half = s > 1.4142135623730951;
  bool const over_one = s > 2.8284271247461903;
  double const z = over_one ? s * 0.25 : (over_half ? s * 0.5 : s);
  double const k = over_one ? 2.0 : (over_half ? 1.0 : 0.0);
  double const u = (z - 1.0) / (z + 1.0);
  // 1/23, 1/21, ..., 1/3, 1.
  constexpr double kAtanh[] = {1.0 / 23, 1.0 / 21, 1.0 / 19, 1.0 / 17,
                               1.0 / 15, 1.0 / 13, 1.0 / 11, 1.0 / 9,
                               1.0 / 7,  1.0 / 5,  1.0 / 3,  1.0};
  double const q = horner(u * u, kAtanh);
  return k * ln2 + 2.0 * u * q;
}

// soft_diagonal's loop; with kParts it also writes each cell's soft-min
// part (out[q] without the cost), which the backward's weights read.
template <bool kParts>
SOFTWAVE_HOST_ISA_INLINE void soft_cells(const double* __restrict cost,
                                         const double* __restrict diag,
                                         const double* __restrict up,
                                         double* __restrict out,
                                         double* __restrict part,
                                         std::int64_t count, double gamma) {
  double const inf = std::numeric_limits<double>::infinity();
  double const inverse = 1.0 / gamma;
#if defined(_OPENMP)
#pragma omp simd
#endif
  for (std::int64_t q = 0; q < count; ++q) {
    double const c = cost[q], d = diag[q], u = up[q], l = up[q + 1];
    // The minimum exactly as min3() forms it (what a NaN does to it
    // included); the other two by min/max, whose NaN handling does not
    // matter: a NaN predecessor is caught below.
    double const du = d < u ? d : u;
    double const low = du < l ? du : l;
    double const du_high = d < u ? u : d;
    double const high = du_high < l ? l : du_high;
    double const middle_low = du_high < l ? du_high : l;
    double const middle = du < middle_low ? middle_low : du;
    double const sum = 1.0 + exp_nonpositive((low - middle) * inverse) +
                       exp_nonpositive((low - high) * inverse);
    double const soft = low - gamma * log_one_to_three(sum);
    // Bitwise, not short-circuit: a branch in the loop would stop it from
    // vectorising.
    bool const finite = (c < inf) & (low < inf);
    bool const nan_before = (c != c) | (low != low) | (d != d) | (u != u);
    double const kept = finite ? c + soft : inf;
    double const poisoned = c + low + d + u;
    out[q] = nan_before ? poisoned : kept;
    if constexpr (kParts) {
      double const kept_part = low < inf ? soft : inf;
      part[q] = nan_before ? poisoned : kept_part;
    }
  }
}

}  // namespace

SOFTWAVE_HOST_ISA_CLONES
void soft_diagonal(const double* cost, const double* diag, const double* up,
                   double* out, std::int64_t count, double gamma) {
  soft_cells<false>(cost, diag, up, out, nullptr, count, gamma);
}

SOFTWAVE_HOST_ISA_CLONES
void soft_diagonal_parts(const double* cost, const double* diag,
                         const double* up, double* out, double* part,
                         std::int64_t count, double gamma) {
  soft_cells<true>(cost, diag, up, out, part, count, gamma);
}

SOFTWAVE_HOST_ISA_CLONES
void soft_diagonal_backward(double* r_to_e, const double* __restrict next_e,
                            const double* __restrict next_part,
                            const double* __restrict after_e,
                            const double* __restrict after_part,
                            std::int64_t count, double gamma) {
  double const inf = std::numeric_limits<double>::infinity();
  double const inverse = 1.0 / gamma;
#if defined(_OPENMP)
#pragma omp simd
#endif
  for (std::int64_t q = 0; q < count; ++q) {
    double const r = r_to_e[q];
    // A successor's share: E_s times the weight of this cell in its
    // soft-min, exp((P_s − R)/γ) (P_s <= R, so the argument is <= 0). A
    // successor outside the band or unreachable has E_s = 0 and contributes
    // nothing, whatever its P_s (+∞, which would make the weight NaN).
    auto const share = [&](double e, double p) {
      double const weighted = e * exp_nonpositive((p - r) * inverse);
      return e != 0 ? weighted : 0.0;
    };
    double const e = share(next_e[q + 1], next_part[q + 1]) +
                     share(next_e[q], next_part[q]) +
                     share(after_e[q + 1], after_part[q + 1]);
    r_to_e[q] = r < inf ? e : 0.0;
  }
}

namespace {

template <bool kL1>
inline double feature_term(double u, double v) {
  double const diff = u - v;
  if constexpr (kL1) {
    return diff < 0 ? -diff : diff;
  } else {
    return diff * diff;
  }
}

// diagonal_feature_costs for one term: blocks of kBlock cells keep their
// sums in registers across the features (four AVX-512 vectors), so a feature
// costs two loads and one FMA per lane, not also a load and a store of the
// running sum; the last cells take the same sums one feature at a time.
template <bool kL1>
SOFTWAVE_HOST_ISA_INLINE void feature_costs(const double* __restrict a,
                                            std::int64_t a_pitch,
                                            const double* __restrict b,
                                            std::int64_t b_pitch, int d,
                                            double* __restrict out,
                                            std::int64_t count) {
  constexpr int kBlock = 32;
  std::int64_t q0 = 0;
  for (; q0 + kBlock <= count; q0 += kBlock) {
    double sum[kBlock] = {};
    for (int f = 0; f < d; ++f) {
      const double* __restrict const u = a + f * a_pitch + q0;
      const double* __restrict const v = b + f * b_pitch + q0;
#if defined(_OPENMP)
#pragma omp simd
#endif
      for (int j = 0; j < kBlock; ++j) sum[j] += feature_term<kL1>(u[j], v[j]);
    }
    for (int j = 0; j < kBlock; ++j) out[q0 + j] = sum[j];
  }
  for (std::int64_t q = q0; q < count; ++q) out[q] = 0;
  for (int f = 0; f < d; ++f) {
    const double* __restrict const u = a + f * a_pitch;
    const double* __restrict const v = b + f * b_pitch;
    for (std::int64_t q = q0; q < count; ++q)
      out[q] += feature_term<kL1>(u[q], v[q]);
  }
}

}  // namespace

SOFTWAVE_HOST_ISA_CLONES
void diagonal_feature_costs(const double* a, std::int64_t a_pitch,
                            const double* b, std::int64_t b_pitch, int d,
                            bool l1, double* out, std::int64_t count) {
  if (l1)
    feature_costs<true>(a, a_pitch, b, b_pitch, d, out, count);
  else
    feature_costs<false>(a, a_pitch, b, b_pitch, d, out, count);
}

namespace {

// ∂term/∂u (u − v for (u − v)², whose factor 2 the caller applies once;
// sign(u − v) for |u − v|, 0 at u = v); ∂term/∂v is its negative.
template <bool kL1>
inline double feature_factor(double u, double v) {
  if constexpr (kL1) {
    return double(u > v) - double(u < v);
  } else {
    return u - v;
  }
}

// diagonal_feature_gradients for one term, in blocks of kBlock cells whose
// E stays in registers across the features.
template <bool kL1>
SOFTWAVE_HOST_ISA_INLINE void feature_gradients(
    const double* __restrict a, std::int64_t a_pitch,
    const double* __restrict b, std::int64_t b_pitch, int d,
    const double* __restrict e, double* __restrict a_gradient,
    double* __restrict b_gradient, std::int64_t count) {
  constexpr int kBlock = 32;
  std::int64_t q0 = 0;
  for (; q0 + kBlock <= count; q0 += kBlock) {
    double weight[kBlock];
    for (int j = 0; j < kBlock; ++j) weight[j] = e[q0 + j];
    for (int f = 0; f < d; ++f) {
      std::int64_t const at = f * a_pitch + q0, bt = f * b_pitch + q0;
#if defined(_OPENMP)
#pragma omp simd
#endif
      for (int j = 0; j < kBlock; ++j) {
        double const t = weight[j] * feature_factor<kL1>(a[at + j], b[bt + j]);
        a_gradient[at + j] += t;
        b_gradient[bt + j] -= t;
      }
    }
  }
  for (int f = 0; f < d; ++f)
    for (std::int64_t q = q0; q < count; ++q) {
      double const t =
          e[q] * feature_factor<kL1>(a[f * a_pitch + q], b[f * b_pitch + q]);
      a_gradient[f * a_pitch + q] += t;
      b_gradient[f * b_pitch + q] -= t;
    }
}

}  // namespace

SOFTWAVE_HOST_ISA_CLONES
void diagonal_feature_gradients(const double* a, std::int64_t a_pitch,
                                const double* b, std::int64_t b_pitch, int d,
                                bool l1, const double* e, double* a_gradient,
                                double* b_gradient, std::int64_t count) {
  if (l1)
    feature_gradients<true>(a, a_pitch, b, b_pitch, d, e, a_gradient,
                            b_gradient, count);
  else
    feature_gradients<false>(a, a_pitch, b, b_pitch, d, e, a_gradient,
                             b_gradient, count);
}

namespace {

#if defined(SOFTWAVE_HOST_VECTOR_LANES)
// Eight doubles, one AVX-512 vector (two AVX2 ones, four SSE2 ones in the
// other clones): the sums below are arrays of these, which the compiler
// keeps in registers, where a plain array it left in memory (2.3 times
// the time of fwd+bwd 16/512/64).
typedef double Lanes __attribute__((vector_size(64)));
SOFTWAVE_HOST_ISA_INLINE void load_lanes(Lanes& to, const double* from) {
  std::memcpy(&to, from, sizeof to);
}
// to = sign(a − b), lane by lane.
SOFTWAVE_HOST_ISA_INLINE void sign_lanes(Lanes& to, const Lanes& a,
                                         const Lanes& b) {
  // Comparisons give −1 (all bits) where true.
  to = __builtin_convertvector(a < b, Lanes) -
       __builtin_convertvector(a > b, Lanes);
}
#else
// Elsewhere (device compilers' host passes, other compilers) the same
// arithmetic on plain arrays.
struct Lanes {
  double lane[8];
  Lanes& operator+=(const Lanes& o) {
    for (int l = 0; l < 8; ++l) lane[l] += o.lane[l];
    return *this;
  }
  friend Lanes operator*(double w, const Lanes& a) {
    Lanes out;
    for (int l = 0; l < 8; ++l) out.lane[l] = w * a.lane[l];
    return out;
  }
};
inline void load_lanes(Lanes& to, const double* from) {
  std::memcpy(&to, from, sizeof to);
}
inline void sign_lanes(Lanes& to, const Lanes& a, const Lanes& b) {
  for (int l = 0; l < 8; ++l)
    to.lane[l] = double(a.lane[l] > b.lane[l]) - double(a.lane[l] < b.lane[l]);
}
#endif

// tile_products over the features f0 .. f0 + 8·kVectors − 1 of every row
// of one side, the sums in registers across the row's cells.
template <int kVectors, bool kL1, bool kTranspose>
SOFTWAVE_HOST_ISA_INLINE void tile_products_of_width(
    const double* __restrict tile, int tile_pitch, int rows, int cols,
    const double* __restrict self, const double* __restrict others, int pitch,
    int f0, double* __restrict sums) {
  for (int v = 0; v < rows; ++v) {
    Lanes sum[kVectors] = {};
    Lanes mine[kVectors];
    if constexpr (kL1)
      for (int a = 0; a < kVectors; ++a)
        load_lanes(mine[a], self + v * pitch + f0 + 8 * a);
    for (int q = 0; q < cols; ++q) {
      double const weight =
          kTranspose ? tile[q * tile_pitch + v] : tile[v * tile_pitch + q];
      const double* const u = others + q * pitch + f0;
      for (int a = 0; a < kVectors; ++a) {
        Lanes other;
        load_lanes(other, u + 8 * a);
        if constexpr (kL1) sign_lanes(other, mine[a], other);
        sum[a] += weight * other;
      }
    }
    for (int a = 0; a < kVectors; ++a) {
      double* const out = sums + v * pitch + f0 + 8 * a;
      Lanes total;
      load_lanes(total, out);
      total += sum[a];
      std::memcpy(out, &total, sizeof total);
    }
  }
}

template <bool kL1, bool kTranspose>
SOFTWAVE_HOST_ISA_INLINE void tile_products_of(const double* tile,
                                               int tile_pitch, int rows,
                                               int cols, const double* self,
                                               const double* others, int pitch,
                                               double* sums) {
  for (int f0 = 0; f0 < pitch; f0 += 32) {
    int const vectors = (pitch - f0 < 32 ? pitch - f0 : 32) / 8;
    auto const run = [&](auto width) {
      tile_products_of_width<decltype(width)::value, kL1, kTranspose>(
          tile, tile_pitch, rows, cols, self, others, pitch, f0, sums);
    };
    if (vectors == 1)
      run(std::integral_constant<int, 1>());
    else if (vectors == 2)
      run(std::integral_constant<int, 2>());
    else if (vectors == 3)
      run(std::integral_constant<int, 3>());
    else
      run(std::integral_constant<int, 4>());
  }
}

}  // namespace

SOFTWAVE_HOST_ISA_CLONES
void tile_products(const double* tile, int tile_pitch, int rows, int cols,
                   bool transpose, const double* self, const double* others,
                   int pitch, bool l1, double* sums) {
  if (l1 && transpose)
    tile_products_of<true, true>(tile, tile_pitch, rows, cols, self, others,
                                 pitch, sums);
  else if (l1)
    tile_products_of<true, false>(tile, tile_pitch, rows, cols, self, others,
                                  pitch, sums);
  else if (transpose)
    tile_products_of<false, true>(tile, tile_pitch, rows, cols, self, others,
                                  pitch, sums);
  else
    tile_products_of<false, false>(tile, tile_pitch, rows, cols, self, others,
                                   pitch, sums);
}

}  // namespace softwave::impl
