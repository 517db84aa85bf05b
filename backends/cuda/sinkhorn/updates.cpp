// The CUDA-specialised Sinkhorn half-iteration (updates.hpp has the design):
// the partial sums kernel, the finishing kernel and their launch plan.
// Compiled only when Kokkos has its CUDA backend.

#include "updates.hpp"

#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cfloat>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/async_copy.hpp"
#include "common/check.hpp"
#include "common/half_products.hpp"
#include "common/tf32.hpp"

namespace softwave::impl::cuda_sinkhorn {
namespace {

using cuda_support::exp2_approx;
using cuda_support::half2_bits;
using cuda_support::mma_fp16;
using cuda_support::permuted16;
using cuda_support::within_half_range;

constexpr int kThreads = 128;    // per block of the sums kernel
constexpr int kTile = kThreads;  // columns staged per step, one a thread
constexpr int kFinishWarps = 8;  // rows per block of the finishing kernel
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr float kSmallestSum = 0x1p-64f;

__device__ __forceinline__ float epsilon_of(const HalfIteration& h,
                                            std::int64_t b) {
  float const annealed = h.epsilon_scale[b] * h.epsilon_factor;
  return annealed > h.epsilon_target[b] ? annealed : h.epsilon_target[b];
}

// A tensor-core record's coordinate scale for problem b: 2c·log₂e/ε, or
// log₂e/ε for a low-rank cost's factor.
__device__ __forceinline__ float record_scale(const HalfIteration& h,
                                              std::int64_t b) {
  float const unit = kLog2e / epsilon_of(h, b);
  return h.low_rank ? unit : 2.f * h.cost_scale * unit;
}

// Whether problem b takes part (a measurement has no mask: all do).
__device__ __forceinline__ bool is_active(const HalfIteration& h,
                                          std::int64_t b) {
  return h.active == nullptr || h.active[b] != 0;
}

// λ = 1 / (1 + ε/ρ), as the portable update forms it.
__device__ __forceinline__ float damping(const HalfIteration& h, float eps) {
  return 1.f / (1.f + eps / float(h.rho));
}

// The per-pass constants of problem b: ε, λ, log₂e/ε.
struct Scales {
  float eps, lambda, unit;
};
__device__ __forceinline__ Scales scales_of(const HalfIteration& h,
                                            std::int64_t b) {
  float const eps = epsilon_of(h, b);
  return {eps, damping(h, eps), kLog2e / eps};
}

// Column j's record: [0, d) its coordinates × 2c·log₂e/ε, [d] h_j =
// log₂e·((g_j − c‖y_j‖²)/ε + log b_j); for a low-rank cost q_j·log₂e/ε and
// log₂e·((g_j − v_j)/ε + log b_j). −∞ past the last column; zero
// coordinates past h.d (for a d rounded up).
template <int d>
__device__ __forceinline__ void column_record(const HalfIteration& h,
                                              std::int64_t b, std::int64_t j,
                                              float unit, float* record) {
  Side const& s = h.columns;
  if (j >= s.n) {
    for (int k = 0; k < d; ++k) record[k] = 0.f;
    record[d] = -INFINITY;
    return;
  }
  float const* y = s.points + (b * s.n + j) * h.d;
  float const c = h.cost_scale;
  float const coordinate_scale = h.low_rank ? unit : 2.f * c * unit;
  float norm = 0.f;
  for (int k = 0; k < d; ++k) {
    float const v = k < h.d ? y[k] : 0.f;
    norm = fmaf(v, v, norm);
    record[k] = v * coordinate_scale;
  }
  float const own = !h.low_rank  ? c * norm
                    : s.own_term ? s.own_term[b * s.own_term_stride + j]
                                 : 0.f;
  float const g = s.potential[b * s.potential_stride + j];
  float const log_b = s.log_weight[b * s.log_weight_stride + j];
  record[d] = fmaf(g - own, unit, log_b * kLog2e);
}

// Row i's coordinates (or factor; zero past h.d, for a d rounded up) and
// −log₂e/ε times its own term: c‖x_i‖², or u_i of a low-rank cost.
template <int d>
__device__ __forceinline__ float load_row(const HalfIteration& h,
                                          std::int64_t b, std::int64_t i,
                                          float unit, float* x) {
  Side const& s = h.rows;
  float const* p = s.points + (b * s.n + i) * h.d;
  float norm = 0.f;
  for (int k = 0; k < d; ++k) {
    x[k] = k < h.d ? p[k] : 0.f;
    norm = fmaf(x[k], x[k], norm);
  }
  float const own = !h.low_rank  ? h.cost_scale * norm
                    : s.own_term ? s.own_term[b * s.own_term_stride + i]
                                 : 0.f;
  return -own * unit;
}

// log₂ of row i's previous sum: f_i = −λ ε ln 2 · shift.
__device__ __forceinline__ float previous_shift(const HalfIteration& h,
                                                std::int64_t b, std::int64_t i,
                                                const Scales& s) {
  float const f = h.rows.potential[b * h.rows.potential_stride + i];
  return -f * s.unit / s.lambda;
}

// What a pass of partial_sums computes for each row over its part of the
// columns: the maximum of t_ij, or Σ 2^(t_ij − shift_i) under the shift of
// the row's previous potential or (after a maximum pass) the one in `shift`.
enum class Pass { maximum, sum_previous, sum_given };

// Where a pass's work items are: item q is part q % parts of the columns
// for rows block q / parts (R·kThreads rows of problem block / row_blocks).
struct Work {
  std::int64_t row_blocks, items;
  int parts, tiles_per_part;
};

// The block's next work item: one ticket, taken by thread 0 and shared
// through `taken` once every thread is done with the previous item (its
// staged tile and `taken`).
__device__ __forceinline__ std::int64_t next_item(
    unsigned long long* tickets, unsigned long long first_ticket,
    std::int64_t& taken) {
  __syncthreads();
  if (threadIdx.x == 0)
    taken = std::int64_t(atomicAdd(tickets, 1ull) - first_ticket);
  __syncthreads();
  return taken;
}

// Where an item is: its problem, its part of the columns, and the first
// row of its row block (of rows_per_block rows).
struct Item {
  std::int64_t b, part, first_row;
};
__device__ __forceinline__ Item item_at(const Work& w, std::int64_t item,
                                        int rows_per_block) {
  std::int64_t const block = item / w.parts;
  return {block / w.row_blocks, item % w.parts,
          (block % w.row_blocks) * rows_per_block};
}

// Columns a tile of the FP32 kernels stages: one a thread, or half as many
// for records too long for 48 KiB of shared memory.
template <int d>
constexpr int kTileColumns = d <= 80 ? kTile : kTile / 2;

// partial[(b·parts + part)·n + i] = the pass's reduction over the part's
// columns of t_ij = row_i + record_j[d] + x_i·record_j[0, d). A sum pass
// under the previous potential's shift also writes it to shift[b·n + i].
// Persistent blocks take items in turn from the ticket counter: ticket
// first_ticket + q is item q, and each block takes one ticket past the
// last item, so a launch of G blocks uses items + G tickets.
template <int d, int R, Pass pass>
__global__ void __launch_bounds__(kThreads)
    partial_sums(HalfIteration h, Work w, float* partial, float* shift,
                 unsigned long long* tickets, unsigned long long first_ticket) {
  constexpr int kRecord = (d + 1 + 3) / 4;  // float4s a record
  constexpr int kColumns = kTileColumns<d>;
  __shared__ float4 tile[kColumns][kRecord];
  __shared__ std::int64_t taken;
  std::int64_t const n = h.rows.n, k = h.columns.n;
  std::int64_t const tiles = (k + kColumns - 1) / kColumns;
  for (;;) {
    std::int64_t const item = next_item(tickets, first_ticket, taken);
    if (item >= w.items) return;
    auto const [b, part, i0] = item_at(w, item, R * kThreads);
    if (!h.active[b]) continue;
    Scales const s = scales_of(h, b);

    float x[R][d];
    float base[R], sum[R];
    for (int r = 0; r < R; ++r) {
      std::int64_t const i = i0 + threadIdx.x + r * kThreads;
      sum[r] = pass == Pass::maximum ? -INFINITY : 0.f;
      if (i < n) {
        float const row = load_row<d>(h, b, i, s.unit, x[r]);
        if (pass == Pass::maximum) {
          base[r] = row;
        } else if (pass == Pass::sum_given) {
          base[r] = row - shift[b * n + i];
        } else {
          float const previous = previous_shift(h, b, i, s);
          base[r] = row - previous;
          if (part == 0) shift[b * n + i] = previous;
        }
      } else {
        for (int q = 0; q < d; ++q) x[r][q] = 0.f;
        base[r] = 0.f;
      }
    }

    std::int64_t const first = part * w.tiles_per_part;
    std::int64_t const last = min(first + w.tiles_per_part, tiles);
    for (std::int64_t q = first; q < last; ++q) {
      __syncthreads();  // the previous tile is no longer read
      if (threadIdx.x < kColumns) {
        float record[kRecord * 4] = {};
        column_record<d>(h, b, q * kColumns + threadIdx.x, s.unit, record);
        for (int e = 0; e < kRecord; ++e)
          tile[threadIdx.x][e] =
              make_float4(record[4 * e], record[4 * e + 1], record[4 * e + 2],
                          record[4 * e + 3]);
      }
      __syncthreads();
      auto add = [&](int r, float t) {
        if (pass == Pass::maximum)
          sum[r] = fmaxf(sum[r], t);
        else
          sum[r] += exp2_approx(t);
      };
      if constexpr (d <= max_exact_features) {
        // The whole record from registers, used by R rows.
#pragma unroll 4
        for (int jj = 0; jj < kColumns; ++jj) {
          float4 packed[kRecord];
          for (int e = 0; e < kRecord; ++e) packed[e] = tile[jj][e];
          float const* record = reinterpret_cast<float const*>(packed);
          float t[R];
          for (int r = 0; r < R; ++r) {
            t[r] = base[r] + record[d];
            for (int c = 0; c < d; ++c) t[r] = fmaf(x[r][c], record[c], t[r]);
          }
          for (int r = 0; r < R; ++r) add(r, t[r]);
        }
      } else {
        // A long record (a low-rank cost's): four columns at a time, so
        // that a thread has 4·R independent chains of FMAs, each load four
        // values of one record.
        constexpr int C = 4;
        for (int j = 0; j < kColumns; j += C) {
          float t[C][R];
          for (int c = 0; c < C; ++c) {
            float const head = reinterpret_cast<const float*>(tile[j + c])[d];
            for (int r = 0; r < R; ++r) t[c][r] = base[r] + head;
          }
          for (int e = 0; e < d / 4; ++e)
            for (int c = 0; c < C; ++c) {
              float4 const v = tile[j + c][e];
              for (int r = 0; r < R; ++r) {
                t[c][r] = fmaf(x[r][4 * e], v.x, t[c][r]);
                t[c][r] = fmaf(x[r][4 * e + 1], v.y, t[c][r]);
                t[c][r] = fmaf(x[r][4 * e + 2], v.z, t[c][r]);
                t[c][r] = fmaf(x[r][4 * e + 3], v.w, t[c][r]);
              }
            }
          for (int c = 0; c < C; ++c)
            for (int r = 0; r < R; ++r) add(r, t[c][r]);
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      std::int64_t const i = i0 + threadIdx.x + r * kThreads;
      if (i < n) partial[(b * w.parts + part) * n + i] = sum[r];
    }
  }
}

// The tensor-core layout (d > max_exact_features): a column's record is
// its coordinates × 2c·log₂e/ε, as TF32 zero-padded to 8·KS and stored
// permuted within each group of 8 (k and k + 4 side by side, so a lane's
// two B operands are one 64-bit load), or as scaled FP16 (below) padded to
// 16 and permuted within each group of 16 to the same end; h_j beside, in
// float. A block owns 128 rows: 8 warps of one 16-row tile each, or 4 warps
// of two (R = 2), whose two tiles share each B fragment loaded from shared
// memory (the A operands, the rows' coordinates, stay in registers);
// columns are staged 64 at a time, the next tile copied asynchronously
// into a second buffer while the warps compute on the current one.
constexpr int kTensorRows = 128;
constexpr int kTensorTile = 64;
template <int R>
constexpr int kTensorThreads = kTensorRows / (16 * R) * 32;

// Words (32 bits) of a column's record: 8KS TF32 values, or 16⌈KS/2⌉ FP16
// ones (k rounded up to m16n8k16's 16).
template <int KS, bool fp16>
constexpr int kRecordWords = fp16 ? 8 * ((KS + 1) / 2) : 8 * KS;
// A staged column's row in shared memory: its record's words and padding
// that keeps the 64-bit B loads of a half-warp on distinct banks.
template <int KS, bool fp16>
constexpr int kTensorStride = (kRecordWords<KS, fp16> + 31) / 32 * 32 + 8;
// The tensor-core kernel's (dynamic) shared memory: two buffers of a tile
// and its heads.
template <int KS, bool fp16>
constexpr int kTensorSharedBytes = 2 *
                                   kTensorTile*(kTensorStride<KS, fp16> + 1) *
                                   int(sizeof(float));

// 16-row tiles a warp owns (tensor_row_tiles): 0 the library's choice
// (set_tensor_row_tiles).
int g_tensor_row_tiles = 0;

// The tensor-core products' operands (set_tensor_operands).
TensorOperands g_tensor_operands = TensorOperands::fp16;

// Two tiles a warp halve the shared-memory reads of B per product: on an
// H200 9–14 % faster at d = 64, 6 % at d = 48 and, with FP16 operands,
// 16 % at rank 80 than one (perf/RESULTS.md; with 8 warps a block instead
// of 4, slower). Their A operands and accumulators take 2·(4·S + 32)
// registers for S products along k (KS for TF32, ⌈KS/2⌉ for FP16), so they
// fit up to S = 8: TF32 to d = 64, FP16 to rank 128.
template <int KS, bool fp16>
constexpr bool two_row_tiles_fit = (fp16 ? (KS + 1) / 2 : KS) <= 8;
template <int KS, bool fp16>
bool two_row_tiles() {
  if (!two_row_tiles_fit<KS, fp16>) return false;
  if (g_tensor_row_tiles) return g_tensor_row_tiles == 2;
  return KS >= 6;
}

// The FP16 operands (TensorOperands::fp16). FP16 keeps TF32's 11-bit
// significands, and its m16n8k16 product runs at twice the rate of TF32's
// m16n8k8, but its range is ±65504: each problem's two operands are scaled
// by powers of two, exactly, so that their largest magnitudes meet near the
// geometric mean of max|x| and max|y·s| (s the record's scale). That
// covers every problem whose products TF32 resolves: where that mean
// passes 65504 a product's TF32 rounding alone is over 2^17 in the
// exponent. Values beyond the range are clamped (NaN kept).

// maxima[2b] = max |x| over the rows' coordinates of problem b, and
// maxima[2b + 1] over the columns' (as float bits; zeroed beforehand): a
// grid-stride pass, blocks along x over a problem's coordinates and along y
// over the problems.
__global__ void __launch_bounds__(256)
    coordinate_maxima(HalfIteration h, unsigned* maxima) {
  for (std::int64_t b = blockIdx.y; b < h.batch; b += gridDim.y) {
    if (!h.active[b]) continue;
    for (int side = 0; side < 2; ++side) {
      Side const& s = side == 0 ? h.rows : h.columns;
      std::int64_t const count = s.n * h.d;
      cuda_support::largest_magnitude(s.points + b * count, count,
                                      maxima + 2 * b + side);
    }
  }
}

// The power of two 2^e of problem b: the rows' operands are x·2^−e, the
// columns' y·s·2^e (their product x·y·s exactly).
__device__ __forceinline__ int balancing_exponent(const unsigned* maxima,
                                                  std::int64_t b, float s) {
  return cuda_support::balancing_exponent(
      __uint_as_float(maxima[2 * b]), __uint_as_float(maxima[2 * b + 1]) * s);
}

__device__ __forceinline__ int permuted(int k) {
  int const k8 = k % 8;
  return k - k8 + (k8 < 4 ? 2 * k8 : 2 * (k8 - 4) + 1);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// records[(b·k + j)·8KS + permuted(c)] (TF32), or the FP16 values at
// permuted16(c) of a record of kRecordWords words, and own[b·k + j], the
// column's own cost term, of every column (Records). A warp a column, its
// lanes taking the coordinates in turn: the loads of a warp are contiguous,
// and a few thousand columns still fill the GPU (a thread a column strided
// through memory, 38 µs for 2,500 columns of rank 80 on an H100).
template <int KS, bool fp16>
__global__ void __launch_bounds__(256)
    tensor_records(HalfIteration h, float* records, float* own,
                   const unsigned* maxima) {
  Side const& s = h.columns;
  std::int64_t const q =
      (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int const lane = threadIdx.x % 32;
  // (q is the warp's: its lanes return together.)
  if (q >= h.batch * s.n) return;
  std::int64_t const b = q / s.n, j = q % s.n;
  if (!h.active[b]) return;
  float const coordinate_scale = record_scale(h, b);
  float const* y = s.points + q * h.d;
  float norm = 0.f;
  if constexpr (fp16) {
    float const scale = ldexpf(coordinate_scale,
                               balancing_exponent(maxima, b, coordinate_scale));
    __half* const out =
        reinterpret_cast<__half*>(records + q * kRecordWords<KS, true>);
    for (int k = lane; k < 2 * kRecordWords<KS, true>; k += 32) {
      float const v = k < h.d ? y[k] : 0.f;
      norm = fmaf(v, v, norm);
      out[permuted16(k)] = __float2half_rn(within_half_range(v * scale));
    }
  } else {
    float* const out = records + q * (8 * KS);
    for (int k = lane; k < 8 * KS; k += 32) {
      float const v = k < h.d ? y[k] : 0.f;
      norm = fmaf(v, v, norm);
      out[permuted(k)] = __uint_as_float(
          cuda_support::round_tf32(v * coordinate_scale) & 0xffffe000u);
    }
  }
  norm = warp_sum(norm);
  if (lane == 0)
    own[q] = !h.low_rank  ? h.cost_scale * norm
             : s.own_term ? s.own_term[b * s.own_term_stride + j]
                          : 0.f;
}

// heads[b·k + j] = ((g_j − own_j)/ε + log b_j)·log₂e of every column, from
// the own terms of tensor_records.
__global__ void __launch_bounds__(256)
    tensor_heads(HalfIteration h, float* heads, const float* own) {
  Side const& s = h.columns;
  std::int64_t const q = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= h.batch * s.n) return;
  std::int64_t const b = q / s.n, j = q % s.n;
  if (!h.active[b]) return;
  float const unit = kLog2e / epsilon_of(h, b);
  float const g = s.potential[b * s.potential_stride + j];
  float const log_b = s.log_weight[b * s.log_weight_stride + j];
  heads[q] = fmaf(g - own[q], unit, log_b * kLog2e);
}

// partial_sums with the x·y products on tensor cores (TF32 or scaled FP16
// operands, FP32 accumulation), from the records of tensor_records; R
// 16-row tiles a warp.
template <int KS, int R, Pass pass, bool fp16>
__global__ void __launch_bounds__(kTensorThreads<R>)
    tensor_partial_sums(HalfIteration h, Work w, float* partial, float* shift,
                        unsigned long long* tickets,
                        unsigned long long first_ticket, const float* records,
                        const float* heads, const unsigned* maxima) {
  constexpr int kWords = kRecordWords<KS, fp16>;
  constexpr int kSteps = fp16 ? (KS + 1) / 2 : KS;  // products along k
  constexpr int kStride = kTensorStride<KS, fp16>;
  constexpr int kTileFloats = kTensorTile * kStride;
  // Buffer u's tile at buffers + u·kTileFloats, its heads at
  // heads_of + u·kTensorTile.
  extern __shared__ __align__(16) float staged[];
  float* const buffers = staged;
  float* const heads_of = staged + 2 * kTileFloats;
  __shared__ std::int64_t taken;
  int const warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int const g = lane / 4, t = lane % 4;
  std::int64_t const n = h.rows.n, k = h.columns.n;
  std::int64_t const tiles = (k + kTensorTile - 1) / kTensorTile;
  for (;;) {
    std::int64_t const item = next_item(tickets, first_ticket, taken);
    if (item >= w.items) return;
    auto const [b, part, block_row] = item_at(w, item, kTensorRows);
    std::int64_t const i0 = block_row + warp * 16 * R;
    if (!h.active[b]) continue;
    Scales const s = scales_of(h, b);

    // This lane's A operands (rows g and g + 8 of each of the warp's 16-row
    // tiles) and the rows' norms, added over the quad that shares them.
    unsigned a[R][kSteps][4];
    float norm[R][2] = {};
    float const row_scale =
        fp16 ? ldexpf(1.f, -balancing_exponent(maxima, b, record_scale(h, b)))
             : 1.f;
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        std::int64_t const i = i0 + 16 * r + g + 8 * half;
        float const* x = h.rows.points + (b * n + (i < n ? i : 0)) * h.d;
#pragma unroll
        for (int ks = 0; ks < kSteps; ++ks)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            if constexpr (fp16) {
              int const c = ks * 16 + 2 * t + 8 * e;
              float const v0 = i < n && c < h.d ? x[c] : 0.f;
              float const v1 = i < n && c + 1 < h.d ? x[c + 1] : 0.f;
              norm[r][half] = fmaf(v0, v0, fmaf(v1, v1, norm[r][half]));
              a[r][ks][half + 2 * e] =
                  half2_bits(v0 * row_scale, v1 * row_scale);
            } else {
              int const c = ks * 8 + t + 4 * e;
              float const v = i < n && c < h.d ? x[c] : 0.f;
              norm[r][half] = fmaf(v, v, norm[r][half]);
              a[r][ks][half + 2 * e] = cuda_support::round_tf32(v);
            }
          }
      }
    float base[R][2], sum[R][2];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        norm[r][half] += __shfl_xor_sync(0xffffffffu, norm[r][half], 1);
        norm[r][half] += __shfl_xor_sync(0xffffffffu, norm[r][half], 2);
        std::int64_t const i = i0 + 16 * r + g + 8 * half;
        float const own = !h.low_rank ? h.cost_scale * norm[r][half]
                          : h.rows.own_term && i < n
                              ? h.rows.own_term[b * h.rows.own_term_stride + i]
                              : 0.f;
        float const row = -own * s.unit;
        sum[r][half] = pass == Pass::maximum ? -INFINITY : 0.f;
        base[r][half] = row;
        if (i < n && pass == Pass::sum_given) {
          base[r][half] = row - shift[b * n + i];
        } else if (i < n && pass == Pass::sum_previous) {
          float const previous = previous_shift(h, b, i, s);
          base[r][half] = row - previous;
          if (part == 0 && t == 0) shift[b * n + i] = previous;
        }
      }

    std::int64_t const first = part * w.tiles_per_part;
    std::int64_t const last = min(first + w.tiles_per_part, tiles);
    // Tile q's records and heads into buffer u, as one group of copies
    // (next_item's barrier: no warp still reads the buffers).
    std::int64_t const problem = b;
    auto const stage = [&](std::int64_t q, int u) {
      std::int64_t const j0 = q * kTensorTile;
      float* const tile = buffers + u * kTileFloats;
      constexpr int kVectors = kTensorTile * kWords / 4;
      for (int e = threadIdx.x; e < kVectors; e += kTensorThreads<R>) {
        int const col = e / (kWords / 4), v = e % (kWords / 4);
        bool const inside = j0 + col < k;
        cuda_support::copy_async_16(
            tile + col * kStride + 4 * v,
            records + (problem * k + (inside ? j0 + col : 0)) * kWords + 4 * v,
            inside);
      }
      if (threadIdx.x < kTensorTile) {
        std::int64_t const j = j0 + threadIdx.x;
        float* const head = heads_of + u * kTensorTile + threadIdx.x;
        if (j < k)
          cuda_support::copy_async_4(head, heads + problem * k + j);
        else
          *head = -INFINITY;
      }
      cuda_support::commit_async();
    };
    if (first < last) stage(first, 0);
    for (std::int64_t q = first; q < last; ++q) {
      int const u = int(q - first) % 2;
      cuda_support::wait_async_all();
      // Tile q is in, and every warp is done with tile q − 1, whose buffer
      // the next stage fills while this one is computed on.
      __syncthreads();
      if (q + 1 < last) stage(q + 1, 1 - u);
      float const* const tile = buffers + u * kTileFloats;
      float const* const tile_heads = heads_of + u * kTensorTile;
      float acc[R][8][4];
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        float const h0 = tile_heads[nt * 8 + 2 * t];
        float const h1 = tile_heads[nt * 8 + 2 * t + 1];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          acc[r][nt][0] = base[r][0] + h0;
          acc[r][nt][1] = base[r][0] + h1;
          acc[r][nt][2] = base[r][1] + h0;
          acc[r][nt][3] = base[r][1] + h1;
        }
      }
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
          float2 const bv = *reinterpret_cast<const float2*>(
              tile + (nt * 8 + g) * kStride + ks * 8 + 2 * t);
#pragma unroll
          for (int r = 0; r < R; ++r)
            if constexpr (fp16)
              mma_fp16(acc[r][nt], a[r][ks], __float_as_uint(bv.x),
                       __float_as_uint(bv.y));
            else
              cuda_support::mma_tf32(
                  acc[r][nt], a[r][ks][0], a[r][ks][1], a[r][ks][2],
                  a[r][ks][3], __float_as_uint(bv.x), __float_as_uint(bv.y));
        }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int nt = 0; nt < 8; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (pass == Pass::maximum)
              sum[r][e / 2] = fmaxf(sum[r][e / 2], acc[r][nt][e]);
            else
              sum[r][e / 2] += exp2_approx(acc[r][nt][e]);
          }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        float v = sum[r][half];
        for (int o = 1; o < 4; o *= 2) {
          float const other = __shfl_xor_sync(0xffffffffu, v, o);
          v = pass == Pass::maximum ? fmaxf(v, other) : v + other;
        }
        std::int64_t const i = i0 + 16 * r + g + 8 * half;
        if (t == 0 && i < n) partial[(b * w.parts + part) * n + i] = v;
      }
  }
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// t_ij as column_record and load_row form it, for a d known at run time
// (the tensor-core layout's rows summed exactly), for both cost forms.
__device__ float exponent_of(const HalfIteration& h, std::int64_t b,
                             std::int64_t i, std::int64_t j, float unit) {
  int const d = h.d;
  float const* x = h.rows.points + (b * h.rows.n + i) * d;
  float const* y = h.columns.points + (b * h.columns.n + j) * d;
  float const c = h.cost_scale;
  float const coordinate_scale = h.low_rank ? unit : 2.f * c * unit;
  float row = 0.f, column = 0.f;
  if (h.low_rank) {
    Side const &rs = h.rows, &cs = h.columns;
    row = rs.own_term ? rs.own_term[b * rs.own_term_stride + i] : 0.f;
    column = cs.own_term ? cs.own_term[b * cs.own_term_stride + j] : 0.f;
  } else {
    for (int k = 0; k < d; ++k) {
      row = fmaf(x[k], x[k], row);
      column = fmaf(y[k], y[k], column);
    }
    row *= c;
    column *= c;
  }
  float const g = h.columns.potential[b * h.columns.potential_stride + j];
  float const log_b = h.columns.log_weight[b * h.columns.log_weight_stride + j];
  float t = -row * unit + fmaf(g - column, unit, log_b * kLog2e);
  for (int k = 0; k < d; ++k) t = fmaf(x[k], y[k] * coordinate_scale, t);
  return t;
}

// log₂ Σ_j 2^t_ij of row i, exactly: the maximum first, then the sum
// under it (one warp; lanes stride over the columns). d = 0: d is h.d, at
// run time.
template <int d>
__device__ float exact_log2_sum(const HalfIteration& h, std::int64_t b,
                                std::int64_t i, float unit, int lane) {
  float x[d > 0 ? d : 1];
  float row = 0.f;
  if constexpr (d > 0) row = load_row<d>(h, b, i, unit, x);
  auto exponent = [&](std::int64_t j) {
    if constexpr (d > 0) {
      float record[d + 1];
      column_record<d>(h, b, j, unit, record);
      float t = row + record[d];
      for (int c = 0; c < d; ++c) t = fmaf(x[c], record[c], t);
      return t;
    } else {
      return exponent_of(h, b, i, j, unit);
    }
  };
  std::int64_t const k = h.columns.n;
  float m = -INFINITY;
  for (std::int64_t j = lane; j < k; j += 32) m = fmaxf(m, exponent(j));
  m = warp_max(m);
  float sum = 0.f;
  for (std::int64_t j = lane; j < k; j += 32)
    sum += exp2_approx(exponent(j) - m);
  return log2f(warp_sum(sum)) + m;
}

// shift[b·n + i] = the maximum of row i's partial maxima (one thread a
// row).
__global__ void __launch_bounds__(256)
    maximum_shift(HalfIteration h, int parts, const float* partial,
                  float* shift) {
  std::int64_t const n = h.rows.n;
  std::int64_t const q = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= h.batch * n) return;
  std::int64_t const b = q / n, i = q % n;
  if (!is_active(h, b)) return;
  float m = -INFINITY;
  for (int p = 0; p < parts; ++p)
    m = fmaxf(m, partial[(b * parts + p) * n + i]);
  shift[q] = m;
}

// One warp a row: adds the row's partial sums, falls back to the exact sum
// outside the safe range, writes f_i and adds the residual.
template <int d>
__global__ void __launch_bounds__(kFinishWarps * 32)
    finish(HalfIteration h, std::int64_t row_blocks, int parts,
           const float* partial, const float* shift) {
  __shared__ double residuals[kFinishWarps];
  std::int64_t const b = blockIdx.x / row_blocks;
  if (!h.active[b]) return;
  int const warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  std::int64_t const n = h.rows.n;
  std::int64_t const i = (blockIdx.x % row_blocks) * kFinishWarps + warp;
  Scales const s = scales_of(h, b);
  double residual = 0;
  if (i < n) {
    float sum = 0.f;
    for (int p = lane; p < parts; p += 32)
      sum += partial[(b * parts + p) * n + i];
    sum = warp_sum(sum);
    float const log2_sum = sum >= kSmallestSum && sum <= FLT_MAX
                               ? log2f(sum) + shift[b * n + i]
                               : exact_log2_sum<d>(h, b, i, s.unit, lane);
    float const updated = -s.lambda * s.eps * (log2_sum * kLn2);
    if (lane == 0) {
      float* const f = h.updated + b * h.rows.potential_stride + i;
      if (h.measure) {
        double const log_a =
            h.rows.log_weight[b * h.rows.log_weight_stride + i];
        if (log_a > -INFINITY)
          residual =
              exp(log_a) * fabs(expm1((double(*f) - double(updated)) / s.eps));
      }
      *f = updated;
    }
  }
  if (!h.measure) return;
  if (lane == 0) residuals[warp] = residual;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int w = 0; w < kFinishWarps; ++w) total += residuals[w];
    atomicAdd(h.residual + b * h.residual_stride, total);
  }
}

// The measurement's kernels (updates.hpp, Measurement). They are compiled
// for d rounded up to a multiple of 4 (to 16), then of 8 (points, to 64) or
// 16 (low-rank costs, to 128), the padding coordinates zero on both sides,
// with register room for R·D coordinates.
constexpr int padded_features(int d, bool low_rank) {
  return d <= 16    ? (d + 3) / 4 * 4
         : low_rank ? (d + 15) / 16 * 16
                    : (d + 7) / 8 * 8;
}
constexpr int measured_rows(int D) { return D <= 16 ? 4 : D <= 32 ? 2 : 1; }

// Column j's measured head: log₂e·(g_j/ε + log b_j); −∞ past the last
// column.
__device__ __forceinline__ float measured_head(const HalfIteration& h,
                                               std::int64_t b, std::int64_t j,
                                               float unit) {
  Side const& s = h.columns;
  if (j >= s.n) return -INFINITY;
  return fmaf(s.potential[b * s.potential_stride + j], unit,
              s.log_weight[b * s.log_weight_stride + j] * kLog2e);
}

// A low-rank side's own term (u_i or v_j; zero when not given).
__device__ __forceinline__ float own_term(const Side& s, std::int64_t b,
                                          std::int64_t i) {
  return s.own_term ? s.own_term[b * s.own_term_stride + i] : 0.f;
}

// Stages tile q of kColumns columns for costs formed directly: their
// points (zero past the last column and past d), measured heads and, for a
// low-rank cost, own terms (one thread a column).
template <int D, int kColumns, bool LowRank>
__device__ __forceinline__ void stage_direct_tile(const HalfIteration& h,
                                                  std::int64_t b,
                                                  std::int64_t q, float unit,
                                                  float4 (*tile)[D / 4],
                                                  float* heads, float* terms) {
  if (threadIdx.x >= kColumns) return;
  std::int64_t const k = h.columns.n, j = q * kColumns + threadIdx.x;
  int const d = h.d;
  float const* y = h.columns.points + (b * k + (j < k ? j : 0)) * d;
  for (int e = 0; e < D / 4; ++e) {
    float v[4];
    for (int c = 0; c < 4; ++c)
      v[c] = j < k && 4 * e + c < d ? y[4 * e + c] : 0.f;
    tile[threadIdx.x][e] = make_float4(v[0], v[1], v[2], v[3]);
  }
  heads[threadIdx.x] = measured_head(h, b, j, unit);
  if (LowRank) terms[threadIdx.x] = j < k ? own_term(h.columns, b, j) : 0.f;
}

// C_ij of R rows x against one staged column, formed directly in FP32:
// c‖x_i − y_j‖², or u_i + v_j − p_i·q_j for LowRank (row_term u_i,
// column_term v_j).
template <int D, int R, bool LowRank>
__device__ __forceinline__ void direct_costs(
    const HalfIteration& h, const float (&x)[R][D], const float4* column,
    const float (&row_term)[R], float column_term, float (&costs)[R]) {
  float acc[R] = {};  // ‖x − y‖², or p·q
  for (int e = 0; e < D / 4; ++e) {
    float4 const y = column[e];
    for (int r = 0; r < R; ++r) {
      if constexpr (LowRank) {
        acc[r] = fmaf(x[r][4 * e], y.x, acc[r]);
        acc[r] = fmaf(x[r][4 * e + 1], y.y, acc[r]);
        acc[r] = fmaf(x[r][4 * e + 2], y.z, acc[r]);
        acc[r] = fmaf(x[r][4 * e + 3], y.w, acc[r]);
      } else {
        float const d0 = x[r][4 * e] - y.x, d1 = x[r][4 * e + 1] - y.y;
        float const d2 = x[r][4 * e + 2] - y.z, d3 = x[r][4 * e + 3] - y.w;
        acc[r] = fmaf(d0, d0, acc[r]);
        acc[r] = fmaf(d1, d1, acc[r]);
        acc[r] = fmaf(d2, d2, acc[r]);
        acc[r] = fmaf(d3, d3, acc[r]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    costs[r] =
        LowRank ? (row_term[r] + column_term) - acc[r] : h.cost_scale * acc[r];
}

// Over item blockIdx.x's part of the columns, with t_ij = head_j −
// C_ij·log₂e/ε: `maximum`: partial = max_j t_ij; else partial = Σ_j e_ij
// and partial_cost = Σ_j e_ij·C_ij, e_ij = 2^(t_ij − shift_i). C_ij is
// c‖x_i − y_j‖², or u_i + v_j − p_i·q_j for LowRank.
template <int D, int R, bool LowRank, bool maximum>
__global__ void __launch_bounds__(kThreads)
    measured_sums(HalfIteration h, Work w, float* partial, float* partial_cost,
                  const float* shift) {
  constexpr int kColumns = kTileColumns<D>;
  __shared__ float4 tile[kColumns][D / 4];
  __shared__ float heads[kColumns], terms[kColumns];
  std::int64_t const n = h.rows.n, k = h.columns.n;
  std::int64_t const tiles = (k + kColumns - 1) / kColumns;
  int const d = h.d;
  auto const [b, part, i0] = item_at(w, blockIdx.x, R * kThreads);
  float const unit = kLog2e / epsilon_of(h, b);

  float x[R][D];
  float base[R], sum[R], cost[R], row_term[R];
  for (int r = 0; r < R; ++r) {
    std::int64_t const i = i0 + threadIdx.x + r * kThreads;
    float const* p = h.rows.points + (b * n + (i < n ? i : 0)) * d;
    for (int q = 0; q < D; ++q) x[r][q] = i < n && q < d ? p[q] : 0.f;
    base[r] = maximum || i >= n ? 0.f : -shift[b * n + i];
    row_term[r] = LowRank && i < n ? own_term(h.rows, b, i) : 0.f;
    sum[r] = maximum ? -INFINITY : 0.f;
    cost[r] = 0.f;
  }

  std::int64_t const first = part * w.tiles_per_part;
  std::int64_t const last = min(first + w.tiles_per_part, tiles);
  for (std::int64_t q = first; q < last; ++q) {
    __syncthreads();  // the previous tile is no longer read
    stage_direct_tile<D, kColumns, LowRank>(h, b, q, unit, tile, heads, terms);
    __syncthreads();
#pragma unroll(D <= 16 ? 2 : 1)
    for (int jj = 0; jj < kColumns; ++jj) {
      float costs[R];
      direct_costs<D, R, LowRank>(h, x, tile[jj], row_term,
                                  LowRank ? terms[jj] : 0.f, costs);
      float const head = heads[jj];
      for (int r = 0; r < R; ++r) {
        float const c = costs[r];
        float const t = fmaf(-unit, c, head + base[r]);
        if (maximum) {
          sum[r] = fmaxf(sum[r], t);
        } else {
          float const e = exp2_approx(t);
          sum[r] += e;
          cost[r] = fmaf(e, c, cost[r]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    std::int64_t const i = i0 + threadIdx.x + r * kThreads;
    if (i >= n) continue;
    std::int64_t const at = (b * w.parts + part) * n + i;
    partial[at] = sum[r];
    if (!maximum) partial_cost[at] = cost[r];
  }
}

// One warp a row: adds the row's partial sums and finishes it as core's
// MeasureVisitor::finish does (in double).
__global__ void __launch_bounds__(kFinishWarps * 32)
    measured_finish(HalfIteration h, Measurement out, std::int64_t row_blocks,
                    int parts, const float* partial, const float* partial_cost,
                    const float* shift) {
  constexpr int kSums = 5;
  __shared__ double sums[kFinishWarps][kSums];
  std::int64_t const b = blockIdx.x / row_blocks;
  int const warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  std::int64_t const n = h.rows.n;
  std::int64_t const i = (blockIdx.x % row_blocks) * kFinishWarps + warp;
  double local[kSums] = {};
  if (i < n) {
    float sum = 0.f, cost = 0.f;
    for (int p = lane; p < parts; p += 32) {
      sum += partial[(b * parts + p) * n + i];
      cost += partial_cost[(b * parts + p) * n + i];
    }
    sum = warp_sum(sum);
    cost = warp_sum(cost);
    float const eps = epsilon_of(h, b);
    double const lse =
        (double(shift[b * n + i]) + log2(double(sum))) * 0.6931471805599453;
    out.lse[b * out.lse_stride + i] = float(lse);
    double const log_a = h.rows.log_weight[b * h.rows.log_weight_stride + i];
    if (log_a > -INFINITY) {
      double const a = exp(log_a);
      double const f = h.rows.potential[b * h.rows.potential_stride + i];
      double const row_mass = a * exp(f / eps + lse);  // (π1)_i
      double const updated = -double(damping(h, eps)) * eps * lse;
      local[0] = row_mass;
      local[1] = fabs(row_mass - a);
      local[2] = a * fabs(expm1((f - updated) / eps));
      local[3] = a * (h.rho == INFINITY ? f : -h.rho * expm1(-f / h.rho));
      local[4] = row_mass * double(cost) / double(sum);
    }
  }
  if (lane == 0)
    for (int e = 0; e < kSums; ++e) sums[warp][e] = local[e];
  __syncthreads();
  if (threadIdx.x < kSums) {
    double total = 0;
    for (int w = 0; w < kFinishWarps; ++w) total += sums[w][threadIdx.x];
    atomicAdd(out.totals + b * out.totals_stride + threadIdx.x * out.sum_stride,
              total);
  }
}

// The weighted sums' kernels (updates.hpp, Weighted): compiled for the
// measurement's padded D and a chunk of M = max(D, 16) columns of the
// values (the gradient's values are the columns' own points, D of them),
// with register room for R rows' coordinates and sums.
template <int D>
constexpr int kWeightedChunk = D < 16 ? 16 : D;
template <int D>
constexpr int kWeightedRows = D + kWeightedChunk<D> <= 32   ? 4
                              : D + kWeightedChunk<D> <= 64 ? 2
                                                            : 1;
// Columns a tile stages: coordinates and values within 40 KiB.
template <int D>
constexpr int kWeightedColumns =
    D + kWeightedChunk<D> <= 80 ? kTile : kTile / 2;

// log₂ of row i's shift in a pass that finds its log-sum-exp: that of its
// potential, as the updates take it (f_i = −λ ε LSE_i).
__device__ __forceinline__ float potential_shift(const HalfIteration& h,
                                                 std::int64_t b,
                                                 std::int64_t i) {
  return previous_shift(h, b, i, scales_of(h, b));
}

// Over item blockIdx.x's part of the columns: for each row and each value
// column c of the chunk, Σ_j 2^(t_ij − shift_i)·values_jc with t_ij the
// measurement's (head_j − C_ij·log₂e/ε, each cost formed directly), into
// partial[((b·parts + part)·(M + 1) + c)·n + i]; shift_i is log₂e·lse_i
// (given) or, FindLse, the potential's shift, and slot M then takes
// Σ_j 2^(t_ij − shift_i).
template <int D, int R, bool LowRank, bool FindLse>
__global__ void __launch_bounds__(kThreads)
    weighted_sums(HalfIteration h, Weighted z, int first, Work w,
                  float* partial) {
  constexpr int M = kWeightedChunk<D>, kColumns = kWeightedColumns<D>;
  __shared__ float4 tile[kColumns][D / 4];
  __shared__ float4 values[kColumns][M / 4];
  __shared__ float heads[kColumns], terms[kColumns];
  std::int64_t const n = h.rows.n, k = h.columns.n;
  std::int64_t const tiles = (k + kColumns - 1) / kColumns;
  int const d = h.d, width = min(M, z.columns - first);
  auto const [b, part, i0] = item_at(w, blockIdx.x, R * kThreads);
  float const unit = kLog2e / epsilon_of(h, b);

  float x[R][D], acc[R][M];
  float base[R], row_term[R], sum[R];
  for (int r = 0; r < R; ++r) {
    std::int64_t const i = i0 + threadIdx.x + r * kThreads;
    float const* p = h.rows.points + (b * n + (i < n ? i : 0)) * d;
    for (int q = 0; q < D; ++q) x[r][q] = i < n && q < d ? p[q] : 0.f;
    base[r] = i >= n    ? 0.f
              : FindLse ? -potential_shift(h, b, i)
                        : -z.lse[b * z.lse_stride + i] * kLog2e;
    row_term[r] = LowRank && i < n ? own_term(h.rows, b, i) : 0.f;
    for (int c = 0; c < M; ++c) acc[r][c] = 0.f;
    sum[r] = 0.f;
  }

  std::int64_t const first_tile = part * w.tiles_per_part;
  std::int64_t const last_tile = min(first_tile + w.tiles_per_part, tiles);
  for (std::int64_t q = first_tile; q < last_tile; ++q) {
    __syncthreads();  // the previous tile is no longer read
    stage_direct_tile<D, kColumns, LowRank>(h, b, q, unit, tile, heads, terms);
    if (threadIdx.x < kColumns) {
      std::int64_t const j = q * kColumns + threadIdx.x;
      float const* zj =
          z.values + (b * k + (j < k ? j : 0)) * z.columns + first;
      for (int e = 0; e < M / 4; ++e) {
        float v[4];
        for (int c = 0; c < 4; ++c)
          v[c] = j < k && 4 * e + c < width ? zj[4 * e + c] : 0.f;
        values[threadIdx.x][e] = make_float4(v[0], v[1], v[2], v[3]);
      }
    }
    __syncthreads();
#pragma unroll 1
    for (int jj = 0; jj < kColumns; ++jj) {
      float costs[R];
      direct_costs<D, R, LowRank>(h, x, tile[jj], row_term,
                                  LowRank ? terms[jj] : 0.f, costs);
      float const head = heads[jj];
      float weight[R];
      for (int r = 0; r < R; ++r) {
        weight[r] = exp2_approx(fmaf(-unit, costs[r], head + base[r]));
        if (FindLse) sum[r] += weight[r];
      }
      for (int e = 0; e < M / 4; ++e) {
        float4 const v = values[jj][e];
        for (int r = 0; r < R; ++r) {
          acc[r][4 * e] = fmaf(weight[r], v.x, acc[r][4 * e]);
          acc[r][4 * e + 1] = fmaf(weight[r], v.y, acc[r][4 * e + 1]);
          acc[r][4 * e + 2] = fmaf(weight[r], v.z, acc[r][4 * e + 2]);
          acc[r][4 * e + 3] = fmaf(weight[r], v.w, acc[r][4 * e + 3]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    std::int64_t const i = i0 + threadIdx.x + r * kThreads;
    if (i >= n) continue;
    float* const out = partial + (b * w.parts + part) * (M + 1) * n + i;
    for (int c = 0; c < M; ++c) out[c * n] = acc[r][c];
    if (FindLse) out[M * n] = sum[r];
  }
}

// z.sums[(b·n + i)·columns + first + c] = the sum of row i's partials in
// part order (one thread a row and value column, rows fastest); FindLse:
// divided by the row's sum, whose log gives z.lse, or, where that sum left
// the safe range, z.lse = NaN for weighted_exact_rows.
template <bool FindLse>
__global__ void __launch_bounds__(256)
    weighted_finish(HalfIteration h, Weighted z, int chunk, int first,
                    int parts, const float* partial) {
  std::int64_t const n = h.rows.n;
  std::int64_t const q = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= h.batch * chunk * n) return;
  std::int64_t const b = q / (chunk * n), i = q % n;
  int const c = int(q / n % chunk);
  if (first + c >= z.columns) return;
  auto slot = [&](int p, int e) {
    return partial[((b * parts + p) * (chunk + 1) + e) * n + i];
  };
  float scale = 1.f;
  if (FindLse) {
    float total = 0.f;
    for (int p = 0; p < parts; ++p) total += slot(p, chunk);
    bool const safe = total >= kSmallestSum && total <= FLT_MAX;
    if (c == 0)
      z.lse[b * z.lse_stride + i] =
          safe
              ? float((double(potential_shift(h, b, i)) + log2(double(total))) *
                      0.6931471805599453)
              : NAN;
    if (!safe) return;
    scale = 1.f / total;
  }
  float sum = 0.f;
  for (int p = 0; p < parts; ++p) sum += slot(p, c);
  z.sums[(b * n + i) * z.columns + first + c] = sum * scale;
}

// t_ij as the measurement forms it (the cost directly), for a d known at
// run time.
__device__ float measured_exponent(const HalfIteration& h, std::int64_t b,
                                   std::int64_t i, std::int64_t j, float unit) {
  int const d = h.d;
  float const* x = h.rows.points + (b * h.rows.n + i) * d;
  float const* y = h.columns.points + (b * h.columns.n + j) * d;
  float cost = 0.f;
  if (h.low_rank) {
    for (int e = 0; e < d; ++e) cost = fmaf(x[e], y[e], cost);
    cost = (own_term(h.rows, b, i) + own_term(h.columns, b, j)) - cost;
  } else {
    for (int e = 0; e < d; ++e) {
      float const diff = x[e] - y[e];
      cost = fmaf(diff, diff, cost);
    }
    cost *= h.cost_scale;
  }
  return fmaf(-unit, cost, measured_head(h, b, j, unit));
}

// The rows weighted_finish marked (z.lse NaN): their log-sum-exps and the
// chunk's weighted sums again, exactly: the maximum first, then the sums
// under it (one warp a row; lanes stride over the columns).
template <int M>
__global__ void __launch_bounds__(kFinishWarps * 32)
    weighted_exact_rows(HalfIteration h, Weighted z, std::int64_t row_blocks) {
  std::int64_t const b = blockIdx.x / row_blocks;
  int const warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  std::int64_t const n = h.rows.n, k = h.columns.n;
  std::int64_t const i = (blockIdx.x % row_blocks) * kFinishWarps + warp;
  if (i >= n || !isnan(z.lse[b * z.lse_stride + i])) return;
  float const unit = kLog2e / epsilon_of(h, b);
  int const width = min(M, z.columns);
  float m = -INFINITY;
  for (std::int64_t j = lane; j < k; j += 32)
    m = fmaxf(m, measured_exponent(h, b, i, j, unit));
  m = warp_max(m);
  float total = 0.f, acc[M] = {};
  for (std::int64_t j = lane; j < k; j += 32) {
    float const e = exp2_approx(measured_exponent(h, b, i, j, unit) - m);
    total += e;
    float const* zj = z.values + (b * k + j) * z.columns;
    for (int c = 0; c < M; ++c)
      if (c < width) acc[c] = fmaf(e, zj[c], acc[c]);
  }
  total = warp_sum(total);
  for (int c = 0; c < M; ++c) {
    float const sum = warp_sum(acc[c]);
    if (lane == 0 && c < width)
      z.sums[(b * n + i) * z.columns + c] = sum / total;
  }
  if (lane == 0)
    z.lse[b * z.lse_stride + i] =
        float((double(m) + log2(double(total))) * 0.6931471805599453);
}

// How a pass is laid out: persistent blocks, as many as the device holds
// at once, and about kItemsPerBlock items each, so that blocks that finish
// early take more and no SM idles while others finish a last wave. Parts
// cover at least two tiles.
constexpr int kItemsPerBlock = 4;

// The current device's SM count, asked of the runtime once per device: every
// launch plan reads it (two hundred times in a 50-iteration solve).
int multiprocessors() {
  constexpr int kKnownDevices = 64;
  static std::array<std::atomic<int>, kKnownDevices> known{};
  int device = 0, sms = 0;
  SOFTWAVE_CUDA_CHECK(cudaGetDevice(&device));
  if (device < kKnownDevices && (sms = known[device].load()) > 0) return sms;
  SOFTWAVE_CUDA_CHECK(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (device < kKnownDevices) known[device].store(sms);
  return sms;
}

std::int64_t parts_for(std::int64_t blocks, std::int64_t tiles,
                       std::int64_t grid) {
  return std::clamp<std::int64_t>((kItemsPerBlock * grid + blocks - 1) / blocks,
                                  1, std::max<std::int64_t>(1, tiles / 2));
}

Work work_of(std::int64_t batch, std::int64_t n, std::int64_t k,
             int rows_per_block, int tile_columns, std::int64_t grid) {
  Work w;
  w.row_blocks = (n + rows_per_block - 1) / rows_per_block;
  std::int64_t const tiles = (k + tile_columns - 1) / tile_columns;
  std::int64_t const parts = parts_for(batch * w.row_blocks, tiles, grid);
  w.tiles_per_part = int((tiles + parts - 1) / parts);
  w.parts = int((tiles + w.tiles_per_part - 1) / w.tiles_per_part);
  w.items = batch * w.row_blocks * w.parts;
  return w;
}

// The most parts any layout takes (the fewest row blocks, an SM full of
// blocks): what the workspace holds partials for.
std::int64_t most_parts(std::int64_t batch, std::int64_t n, std::int64_t k) {
  std::int64_t const sms = multiprocessors();
  auto most = [&](int rows_per_block, int tile_columns, int threads) {
    std::int64_t const blocks =
        batch * ((n + rows_per_block - 1) / rows_per_block);
    std::int64_t const tiles = (k + tile_columns - 1) / tile_columns;
    return parts_for(blocks, tiles, sms * (2048 / threads));
  };
  return std::max({most(8 * kThreads, kTile / 2, kThreads),
                   most(kTensorRows, kTensorTile, kTensorThreads<1>),
                   most(kTensorRows, kTensorTile, kTensorThreads<2>)});
}

// Where update() keeps things in its workspace: the ticket counter (4
// floats' room), the rows' shifts, the partials, and with tensor cores the
// columns' heads (their records are the caller's Records).
struct Layout {
  std::int64_t shift, partial, heads, total;
};
Layout layout_of(std::int64_t batch, std::int64_t n, std::int64_t k, int d,
                 bool low_rank, bool tf32) {
  Layout l;
  l.shift = 4;
  l.partial = l.shift + batch * n;
  l.heads = l.partial + batch * n * most_parts(batch, n, k);
  l.total = l.heads + (uses_tensor_cores(d, low_rank, tf32) ? batch * k : 0);
  return l;
}

// Records::data: the records (16-byte aligned, as their loads are), the
// own terms, then the maxima.
struct RecordLayout {
  std::int64_t own, maxima, total;
};
RecordLayout record_layout_of(std::int64_t batch, std::int64_t k, int d,
                              bool low_rank, bool tf32) {
  RecordLayout l{0, 0, 0};
  if (!uses_tensor_cores(d, low_rank, tf32)) return l;
  l.own = batch * k * tensor_record_floats(d, low_rank);
  l.maxima = l.own + batch * k;
  l.total = l.maxima + 2 * batch;
  return l;
}

// Blocks of `kernel` (with `threads` threads and `shared` bytes of dynamic
// shared memory) an SM holds at once. Beyond 48 KiB the kernel is allowed
// that much first, on the current device (an attribute of each device's).
template <auto kernel>
int resident_blocks(int threads, int shared = 0) {
  if (shared > 48 * 1024)
    SOFTWAVE_CUDA_CHECK(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, shared));
  static int const count = [threads, shared] {
    int blocks = 0;
    SOFTWAVE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &blocks, kernel, threads, shared));
    return std::max(blocks, 1);
  }();
  return count;
}

template <Pass pass>
using PassConstant = std::integral_constant<Pass, pass>;

// Rows per thread: 0 the library's choice (set_rows_per_thread).
int g_rows_per_thread = 0;

struct Launcher {
  cudaStream_t stream;
  const HalfIteration& h;
  float* workspace;
  Layout l;
  std::uint64_t& tickets;
  Records& kept;

  float* shift() const { return workspace + l.shift; }
  float* partial() const { return workspace + l.partial; }
  unsigned long long* counter() const {
    return reinterpret_cast<unsigned long long*>(workspace);
  }

  // One launch of a persistent sums kernel over its items (with `shared`
  // bytes of dynamic shared memory); their layout.
  template <auto kernel, class... Extra>
  Work persistent(int threads, int shared, int rows_per_block, int tile_columns,
                  Extra... extra) {
    std::int64_t const slots = std::int64_t(multiprocessors()) *
                               resident_blocks<kernel>(threads, shared);
    Work const w = work_of(h.batch, h.rows.n, h.columns.n, rows_per_block,
                           tile_columns, slots);
    std::int64_t const grid = std::min(slots, w.items);
    kernel<<<unsigned(grid), threads, shared, stream>>>(
        h, w, partial(), shift(), counter(), tickets, extra...);
    SOFTWAVE_CUDA_CHECK(cudaGetLastError());
    tickets += std::uint64_t(w.items + grid);
    return w;
  }

  // The passes of one half-iteration (run(PassConstant<pass>) launches a
  // pass's sums kernel), then the finishing kernel, whose exact sums take
  // d coordinates (0: h.d at run time).
  template <int d, class Run>
  void passes(Run run) {
    Work w;
    if (h.cold) {
      w = run(PassConstant<Pass::maximum>());
      std::int64_t const rows = h.batch * h.rows.n;
      maximum_shift<<<unsigned((rows + 255) / 256), 256, 0, stream>>>(
          h, w.parts, partial(), shift());
      SOFTWAVE_CUDA_CHECK(cudaGetLastError());
      w = run(PassConstant<Pass::sum_given>());
    } else {
      w = run(PassConstant<Pass::sum_previous>());
    }
    std::int64_t const finish_blocks =
        (h.rows.n + kFinishWarps - 1) / kFinishWarps;
    finish<d>
        <<<unsigned(h.batch * finish_blocks), kFinishWarps * 32, 0, stream>>>(
            h, finish_blocks, w.parts, partial(), shift());
    SOFTWAVE_CUDA_CHECK(cudaGetLastError());
  }

  template <int d, int R>
  void exact_half_iteration() {
    passes<d>([&](auto pass) {
      return persistent<partial_sums<d, R, decltype(pass)::value>>(
          kThreads, 0, R * kThreads, kTileColumns<d>);
    });
  }

  template <int KS>
  void tensor_half_iteration() {
    if (g_tensor_operands == TensorOperands::tf32)
      tensor_half_iteration<KS, false>();
    else
      tensor_half_iteration<KS, true>();
  }

  template <int KS, bool fp16>
  void tensor_half_iteration() {
    RecordLayout const r = record_layout_of(h.batch, h.columns.n, h.d,
                                            h.low_rank, h.tf32_low_rank);
    float* const records = kept.data;
    float* const own = kept.data + r.own;
    auto* const maxima = reinterpret_cast<unsigned*>(kept.data + r.maxima);
    float* const heads = workspace + l.heads;
    std::int64_t const columns = h.batch * h.columns.n;
    unsigned const column_blocks = unsigned((columns + 255) / 256);
    if (!(kept.epsilon_factor == h.epsilon_factor)) {
      if (fp16) {
        SOFTWAVE_CUDA_CHECK(
            cudaMemsetAsync(maxima, 0, 2 * h.batch * sizeof(unsigned), stream));
        // About 8 coordinates a thread, so that enough loads are in flight
        // (a block an SM left a 100k × 64 pass latency-bound at ~0.2 ms).
        std::int64_t const elements =
            std::max(h.rows.n, h.columns.n) * std::int64_t(h.d);
        unsigned const blocks =
            unsigned(std::clamp<std::int64_t>(elements / (8 * 256), 1, 65535));
        unsigned const problems =
            unsigned(std::min<std::int64_t>(h.batch, 65535));
        coordinate_maxima<<<dim3(blocks, problems), 256, 0, stream>>>(h,
                                                                      maxima);
        SOFTWAVE_CUDA_CHECK(cudaGetLastError());
      }
      tensor_records<KS, fp16>
          <<<unsigned((columns * 32 + 255) / 256), 256, 0, stream>>>(
              h, records, own, maxima);
      SOFTWAVE_CUDA_CHECK(cudaGetLastError());
      kept.epsilon_factor = h.epsilon_factor;
    }
    tensor_heads<<<column_blocks, 256, 0, stream>>>(h, heads, own);
    SOFTWAVE_CUDA_CHECK(cudaGetLastError());
    auto const run = [&](auto row_tiles) {
      constexpr int R = decltype(row_tiles)::value;
      passes<0>([&](auto pass) {
        return persistent<
            tensor_partial_sums<KS, R, decltype(pass)::value, fp16>>(
            kTensorThreads<R>, kTensorSharedBytes<KS, fp16>, kTensorRows,
            kTensorTile, static_cast<const float*>(records),
            static_cast<const float*>(heads),
            static_cast<const unsigned*>(maxima));
      });
    };
    if constexpr (two_row_tiles_fit<KS, fp16>) {
      if (two_row_tiles<KS, fp16>())
        return run(std::integral_constant<int, 2>());
    }
    run(std::integral_constant<int, 1>());
  }

  // The half-iteration for the runtime d: exact FP32 exponents up to
  // max_exact_features (8 rows a thread compiled for d ≤ 4 only, where the
  // exp2s bound the kernel and a record's reuse from registers matters
  // most), tensor-core products above, for d rounded up to their k = 8.
  template <int d = 1>
  void for_features() {
    if constexpr (d <= max_exact_features) {
      if (h.d != d) return for_features<d + 1>();
      if constexpr (d <= 4)
        if (g_rows_per_thread == 8) return exact_half_iteration<d, 8>();
      exact_half_iteration<d, 4>();
    } else if constexpr (d % 8 != 0) {
      for_features<(d + 7) / 8 * 8>();
    } else if constexpr (d <= max_features) {
      if ((h.d + 7) / 8 * 8 != d) return for_features<d + 8>();
      tensor_half_iteration<d / 8>();
    } else {
      throw std::logic_error("softwave: no CUDA Sinkhorn update for d = " +
                             std::to_string(h.d));
    }
  }

  // A low-rank cost of rank above max_exact_features: exact FP32 products
  // for the rank rounded up to 16, 2 rows a thread to 32 and 1 above (the
  // rows' factors stay in registers), or (h.tf32_low_rank) tensor-core
  // products with 10-bit mantissas for the rank rounded up to 16.
  template <int d = 32>
  void for_ranks() {
    if constexpr (d > max_rank) {
      throw std::logic_error("softwave: no CUDA Sinkhorn update for rank " +
                             std::to_string(h.d));
    } else {
      if ((h.d + 15) / 16 * 16 != d) return for_ranks<d + 16>();
      static_assert(tensor_record_floats(d, true) == d);
      if (h.tf32_low_rank) return tensor_half_iteration<d / 8>();
      exact_half_iteration<d, (d <= 32 ? 2 : 1)>();
    }
  }
};

// f(std::integral_constant<int, D>()) for the measurement kernels' D of d
// (LowRank: of a low-rank cost's rank).
template <bool LowRank, int D = 4, class F>
void for_padded_features(int d, F&& f) {
  if constexpr (D > (LowRank ? max_rank : max_features)) {
    throw std::logic_error("softwave: no CUDA Sinkhorn measurement for d = " +
                           std::to_string(d));
  } else {
    if (padded_features(d, LowRank) == D)
      return f(std::integral_constant<int, D>());
    for_padded_features<LowRank, (D < 16 ? D + 4 : D + (LowRank ? 16 : 8))>(d,
                                                                            f);
  }
}

// The measurement's items and where its workspace keeps the rows' maxima
// and the partial sums.
struct MeasuredLayout {
  Work w;
  std::int64_t shift, partial, partial_cost, total;
};
template <int D, bool LowRank>
MeasuredLayout measured_layout(std::int64_t batch, std::int64_t n,
                               std::int64_t k) {
  constexpr int R = measured_rows(D);
  std::int64_t const slots =
      std::int64_t(multiprocessors()) *
      resident_blocks<measured_sums<D, R, LowRank, false>>(kThreads);
  MeasuredLayout l;
  l.w = work_of(batch, n, k, R * kThreads, kTileColumns<D>, slots);
  l.shift = 0;
  l.partial = batch * n;
  l.partial_cost = l.partial + batch * n * l.w.parts;
  l.total = l.partial_cost + batch * n * l.w.parts;
  return l;
}

// f(D, LowRank) as compile-time constants for a measurement of h's shape.
template <class F>
void for_measurement(bool low_rank, int d, F&& f) {
  if (low_rank)
    for_padded_features<true>(d, [&](auto D) { f(D, std::true_type()); });
  else
    for_padded_features<false>(d, [&](auto D) { f(D, std::false_type()); });
}

// The weighted sums' items (a chunk's) for D.
template <int D, bool LowRank>
Work weighted_work(std::int64_t batch, std::int64_t n, std::int64_t k) {
  constexpr int R = kWeightedRows<D>;
  std::int64_t const slots =
      std::int64_t(multiprocessors()) *
      resident_blocks<weighted_sums<D, R, LowRank, true>>(kThreads);
  return work_of(batch, n, k, R * kThreads, kWeightedColumns<D>, slots);
}

}  // namespace

std::int64_t measurement_floats(std::int64_t batch, std::int64_t n,
                                std::int64_t k, int d, bool low_rank) {
  std::int64_t floats = 0;
  for_measurement(low_rank, d, [&](auto D, auto low) {
    floats =
        measured_layout<decltype(D)::value, decltype(low)::value>(batch, n, k)
            .total;
  });
  return floats;
}

void measure(cudaStream_t stream, const HalfIteration& h,
             const Measurement& out, float* workspace) {
  if (h.batch == 0 || h.rows.n == 0 || h.columns.n == 0) return;
  for_measurement(h.low_rank, h.d, [&](auto features, auto low) {
    constexpr int D = decltype(features)::value, R = measured_rows(D);
    constexpr bool LowRank = decltype(low)::value;
    auto const l = measured_layout<D, LowRank>(h.batch, h.rows.n, h.columns.n);
    float* const shift = workspace + l.shift;
    float* const partial = workspace + l.partial;
    float* const partial_cost = workspace + l.partial_cost;
    measured_sums<D, R, LowRank, true>
        <<<unsigned(l.w.items), kThreads, 0, stream>>>(h, l.w, partial,
                                                       partial_cost, shift);
    SOFTWAVE_CUDA_CHECK(cudaGetLastError());
    std::int64_t const rows = h.batch * h.rows.n;
    maximum_shift<<<unsigned((rows + 255) / 256), 256, 0, stream>>>(
        h, l.w.parts, partial, shift);
    SOFTWAVE_CUDA_CHECK(cudaGetLastError());
    measured_sums<D, R, LowRank, false>
        <<<unsigned(l.w.items), kThreads, 0, stream>>>(h, l.w, partial,
                                                       partial_cost, shift);
    SOFTWAVE_CUDA_CHECK(cudaGetLastError());
    std::int64_t const finish_blocks =
        (h.rows.n + kFinishWarps - 1) / kFinishWarps;
    measured_finish<<<unsigned(h.batch * finish_blocks), kFinishWarps * 32, 0,
                      stream>>>(h, out, finish_blocks, l.w.parts, partial,
                                partial_cost, shift);
    SOFTWAVE_CUDA_CHECK(cudaGetLastError());
  });
}

std::int64_t weighted_floats(std::int64_t batch, std::int64_t n, std::int64_t k,
                             int d, bool low_rank) {
  std::int64_t floats = 0;
  for_measurement(low_rank, d, [&](auto features, auto low) {
    constexpr int D = decltype(features)::value;
    if constexpr (D <= max_weighted_features) {
      Work const w = weighted_work<D, decltype(low)::value>(batch, n, k);
      floats = batch * w.parts * (kWeightedChunk<D> + 1) * n;
    }
  });
  return floats;
}

void weighted(cudaStream_t stream, const HalfIteration& h, const Weighted& z,
              float* workspace) {
  if (h.batch == 0 || h.rows.n == 0 || h.columns.n == 0 || z.columns == 0)
    return;
  if (h.d > max_weighted_features)
    throw std::logic_error("softwave: no CUDA weighted sums for d = " +
                           std::to_string(h.d));
  for_measurement(h.low_rank, h.d, [&](auto features, auto low) {
    constexpr int D = decltype(features)::value;
    if constexpr (D <= max_weighted_features) {
      constexpr int R = kWeightedRows<D>, M = kWeightedChunk<D>;
      constexpr bool LowRank = decltype(low)::value;
      Work const w = weighted_work<D, LowRank>(h.batch, h.rows.n, h.columns.n);
      unsigned const finish_blocks =
          unsigned((h.batch * M * h.rows.n + 255) / 256);
      // One chunk's sums and their finish (FindLse: finding the LSEs).
      auto chunk = [&](int first, auto find_lse) {
        constexpr bool FindLse = decltype(find_lse)::value;
        weighted_sums<D, R, LowRank, FindLse>
            <<<unsigned(w.items), kThreads, 0, stream>>>(h, z, first, w,
                                                         workspace);
        SOFTWAVE_CUDA_CHECK(cudaGetLastError());
        weighted_finish<FindLse><<<finish_blocks, 256, 0, stream>>>(
            h, z, M, first, w.parts, workspace);
        SOFTWAVE_CUDA_CHECK(cudaGetLastError());
      };
      // The first chunk finds the log-sum-exps (its unsafe rows again,
      // exactly); the others read them.
      chunk(0, std::true_type());
      std::int64_t const row_blocks =
          (h.rows.n + kFinishWarps - 1) / kFinishWarps;
      weighted_exact_rows<M>
          <<<unsigned(h.batch * row_blocks), kFinishWarps * 32, 0, stream>>>(
              h, z, row_blocks);
      SOFTWAVE_CUDA_CHECK(cudaGetLastError());
      for (int first = M; first < z.columns; first += M)
        chunk(first, std::false_type());
    }
  });
}

void set_rows_per_thread(int rows) { g_rows_per_thread = rows; }

void set_tensor_row_tiles(int tiles) { g_tensor_row_tiles = tiles; }

void set_tensor_operands(TensorOperands operands) {
  g_tensor_operands = operands;
}

std::int64_t workspace_floats(std::int64_t batch, std::int64_t n,
                              std::int64_t k, int d, bool low_rank,
                              bool tf32_low_rank) {
  return layout_of(batch, n, k, d, low_rank, tf32_low_rank).total;
}

std::int64_t record_floats(std::int64_t batch, std::int64_t k, int d,
                           bool low_rank, bool tf32_low_rank) {
  return record_layout_of(batch, k, d, low_rank, tf32_low_rank).total;
}

void update(cudaStream_t stream, const HalfIteration& h, float* workspace,
            std::uint64_t& tickets, Records& records) {
  if (h.batch == 0 || h.rows.n == 0 || h.columns.n == 0) return;
  Launcher launcher{stream,
                    h,
                    workspace,
                    layout_of(h.batch, h.rows.n, h.columns.n, h.d, h.low_rank,
                              h.tf32_low_rank),
                    tickets,
                    records};
  if (h.low_rank && h.d > max_exact_features)
    launcher.for_ranks();
  else
    launcher.for_features();
}

}  // namespace softwave::impl::cuda_sinkhorn
