#include "host_diagonal.hpp"

#include <cstring>
#include <isa_clones.hpp>
#include <limits>
#include <type_traits>

#include "../common/host_exp.hpp"

namespace softwave::impl {
namespace {

using host_exp::exp_nonpositive;
using host_exp::horner;

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

// sum += term(u, v) lane by lane: (u − v)², or |u − v| with kL1.
template <bool kL1>
SOFTWAVE_HOST_ISA_INLINE void add_term(Lanes& sum, const Lanes& u,
                                       const Lanes& v) {
#if defined(SOFTWAVE_HOST_VECTOR_LANES)
  Lanes const diff = u - v;
  if constexpr (kL1) {
    typedef long long Bits __attribute__((vector_size(64)));
    sum += (Lanes)((Bits)diff & 0x7fffffffffffffffLL);  // the sign cleared
  } else {
    sum += diff * diff;
  }
#else
  for (int l = 0; l < 8; ++l) {
    double const diff = u.lane[l] - v.lane[l];
    sum.lane[l] += kL1 ? (diff < 0 ? -diff : diff) : diff * diff;
  }
#endif
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

// diagonal_feature_costs for one term and kDiagonals anti-diagonals: blocks
// of 8·kVectors rows (then 8) keep their sums in vector registers across
// the features (16 AVX-512 vectors: four anti-diagonals of 32 rows, or eight
// of 16), and a feature's x values are loaded once for all the
// anti-diagonals, whose y values are the same lines shifted by one: a pass
// over the features, whose layouts outgrow L1 at a few hundred points,
// streams them from L2 once per kDiagonals anti-diagonals (eight a pass
// made the d = 64 forward 10 % faster than four). The last rows take the
// same sums one at a time.
template <bool kL1, int kDiagonals, int kVectors>
SOFTWAVE_HOST_ISA_INLINE void feature_cost_block(
    const double* __restrict a, std::int64_t a_pitch,
    const double* __restrict b, std::int64_t b_pitch, int d,
    double* __restrict out, std::int64_t out_pitch, std::int64_t q0) {
  Lanes sum[kDiagonals][kVectors] = {};
  for (int f = 0; f < d; ++f) {
    const double* const u = a + f * a_pitch + q0;
    const double* const v = b + f * b_pitch + q0;
    Lanes x[kVectors];
    for (int c = 0; c < kVectors; ++c) load_lanes(x[c], u + 8 * c);
    for (int s = 0; s < kDiagonals; ++s)
      for (int c = 0; c < kVectors; ++c) {
        Lanes y;
        load_lanes(y, v - s + 8 * c);
        add_term<kL1>(sum[s][c], x[c], y);
      }
  }
  for (int s = 0; s < kDiagonals; ++s)
    for (int c = 0; c < kVectors; ++c)
      std::memcpy(out + s * out_pitch + q0 + 8 * c, &sum[s][c], sizeof(Lanes));
}

template <bool kL1, int kDiagonals>
SOFTWAVE_HOST_ISA_INLINE void feature_costs(
    const double* __restrict a, std::int64_t a_pitch,
    const double* __restrict b, std::int64_t b_pitch, int d,
    double* __restrict out, std::int64_t out_pitch, std::int64_t count) {
  // Vectors a block: the sums of eight anti-diagonals take 16 of the 32
  // AVX-512 registers at two.
  constexpr int kWide = kDiagonals > 4 ? 2 : 4;
  std::int64_t q0 = 0;
  for (; q0 + 8 * kWide <= count; q0 += 8 * kWide)
    feature_cost_block<kL1, kDiagonals, kWide>(a, a_pitch, b, b_pitch, d, out,
                                               out_pitch, q0);
  for (; q0 + 8 <= count; q0 += 8)
    feature_cost_block<kL1, kDiagonals, 1>(a, a_pitch, b, b_pitch, d, out,
                                           out_pitch, q0);
  // The last rows, feature by feature (each feature's values adjacent).
  for (int s = 0; s < kDiagonals; ++s)
    for (std::int64_t q = q0; q < count; ++q) out[s * out_pitch + q] = 0;
  for (int f = 0; f < d; ++f)
    for (int s = 0; s < kDiagonals; ++s)
      for (std::int64_t q = q0; q < count; ++q)
        out[s * out_pitch + q] +=
            feature_term<kL1>(a[f * a_pitch + q], b[f * b_pitch + q - s]);
}

}  // namespace

SOFTWAVE_HOST_ISA_CLONES
void diagonal_feature_costs(const double* a, std::int64_t a_pitch,
                            const double* b, std::int64_t b_pitch, int d,
                            bool l1, double* out, std::int64_t out_pitch,
                            std::int64_t count, int diagonals) {
  // Direct calls, no lambda: a lambda would be compiled once, for the
  // baseline, outside this function's clones.
#define SOFTWAVE_FEATURE_COSTS(kDiagonals)                               \
  (l1 ? feature_costs<true, kDiagonals>(a, a_pitch, b, b_pitch, d, out,  \
                                        out_pitch, count)                \
      : feature_costs<false, kDiagonals>(a, a_pitch, b, b_pitch, d, out, \
                                         out_pitch, count))
  // Eight also for five to seven: the rows past `diagonals` are written
  // and never read (the callers' buffers and padding hold eight).
  if (diagonals > 4)
    SOFTWAVE_FEATURE_COSTS(8);
  else if (diagonals == 4)
    SOFTWAVE_FEATURE_COSTS(4);
  else if (diagonals == 3)
    SOFTWAVE_FEATURE_COSTS(3);
  else if (diagonals == 2)
    SOFTWAVE_FEATURE_COSTS(2);
  else
    SOFTWAVE_FEATURE_COSTS(1);
#undef SOFTWAVE_FEATURE_COSTS
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
    // Direct calls, no lambda (see diagonal_feature_costs).
#define SOFTWAVE_TILE_PRODUCTS(kVectors)             \
  tile_products_of_width<kVectors, kL1, kTranspose>( \
      tile, tile_pitch, rows, cols, self, others, pitch, f0, sums)
    if (vectors == 1)
      SOFTWAVE_TILE_PRODUCTS(1);
    else if (vectors == 2)
      SOFTWAVE_TILE_PRODUCTS(2);
    else if (vectors == 3)
      SOFTWAVE_TILE_PRODUCTS(3);
    else
      SOFTWAVE_TILE_PRODUCTS(4);
#undef SOFTWAVE_TILE_PRODUCTS
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
