#pragma once
// 32×32 tiles of squared-Euclidean costs: split-TF32 tensor-core products
// and FP32 FMAs, and the mean x row they are centred on.
//
// One part of the CUDA-specialised Soft-DTW kernels (fused.hpp has the
// design), included only by fused.cpp: the parts form one translation unit,
// in this order: strips.hpp, features.hpp, cost_tiles.hpp, forward_kernel.hpp,
// backward_kernel.hpp, and the host code in fused.cpp.

#include "common/tf32.hpp"
#include "features.hpp"

namespace softwave::impl::cuda_fused {
namespace {

using cuda_support::mma_tf32;
using cuda_support::split_tf32;
using cuda_support::Tf32Split;

// acc (an m16n8 accumulator fragment) += A·B in 3xTF32 (fragments as in
// common/tf32.hpp).
__device__ __forceinline__ void mma_3xtf32(float* acc, const Tf32Split (&a)[4],
                                           const Tf32Split (&b)[2]) {
  mma_tf32(acc, a[0].lo, a[1].lo, a[2].lo, a[3].lo, b[0].hi, b[1].hi);
  mma_tf32(acc, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b[0].lo, b[1].lo);
  mma_tf32(acc, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b[0].hi, b[1].hi);
}

// Where a lane's m16n8 accumulators sit in a 32-row block: element
// [mi][ni][2h + e] is at row accumulator_row(mi, h, lane) and column
// accumulator_column(ni, e, lane).
__device__ __forceinline__ int accumulator_row(int mi, int h, int lane) {
  return 16 * mi + (lane >> 2) + 8 * h;
}
__device__ __forceinline__ int accumulator_column(int ni, int e, int lane) {
  return 8 * ni + 2 * (lane & 3) + e;
}

// The values that lanes hold for their own row (or column) of the block,
// gathered at the 4 rows (8 columns) of this lane's accumulators: one
// shuffle each rather than one per accumulator. lane_of(o, e) names the
// lane that holds out[o][e].
template <int kOuter, class LaneOf>
__device__ __forceinline__ void gather_lanes(float (&out)[kOuter][2], float v,
                                             const LaneOf& lane_of) {
#pragma unroll
  for (int o = 0; o < kOuter; ++o)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      out[o][e] = __shfl_sync(kFull, v, lane_of(o, e));
}
__device__ __forceinline__ void gather_accumulator_rows(float (&out)[2][2],
                                                        float v, int lane) {
  gather_lanes(out, v,
               [lane](int mi, int h) { return accumulator_row(mi, h, lane); });
}
__device__ __forceinline__ void gather_accumulator_columns(float (&out)[4][2],
                                                           float v, int lane) {
  gather_lanes(out, v, [lane](int ni, int e) {
    return accumulator_column(ni, e, lane);
  });
}

// acc (the 32×32 product (X − μ)(Y − μ)ᵀ of 32 staged x rows and 32 staged
// y rows, d features, d % 8 == 0) in m16n8 accumulator fragments:
// acc[mi][ni][r] is row 16mi + g + 8(r/2), column 8ni + 2t + r%2, with
// g = lane/4, t = lane%4.
template <int kD>
__device__ __forceinline__ void tile_products(float (&acc)[2][4][4],
                                              const float* x_rows,
                                              const float* y_rows,
                                              const float* mu, int pitch, int d,
                                              int lane) {
  int const g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.f;
  }
  // Rolled up for d > 16: unrolled, the per-tile code of the backward
  // outgrew the instruction cache (ncu: 29% of its stalls were instruction
  // fetch), and rolling these loops up made d = 64 fwd+bwd 4–6% faster.
  // (At kD = 16 the loop has two iterations and the rolled-up one measured
  // 1–2% slower at 8/8192/16.)
#pragma unroll(kD > 16 ? 1 : (kD + 7) / 8)
  for (int k = 0; k < kD; k += 8) {
    if (k >= d) break;
    Tf32Split a[2][4], b[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        a[mi][r] = split_tf32(
            x_rows[(16 * mi + g + 8 * (r & 1)) * pitch + k + t + 4 * (r >> 1)] -
            mu[k + t + 4 * (r >> 1)]);
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        b[ni][r] = split_tf32(y_rows[(8 * ni + g) * pitch + k + t + 4 * r] -
                              mu[k + t + 4 * r]);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) mma_3xtf32(acc[mi][ni], a[mi], b[ni]);
  }
}

// Σ_k (v_k − μ_k)² of a staged row (d % 4 == 0 and 16-byte aligned rows,
// as the tensor-core path has them): float4 reads and four chains. A
// scalar loop over a run-time d indexed its partial sums by k & 3, which
// put them in local memory. Up to kD = 16 the loop is unrolled over kD
// (the forward at 8/8192/16 takes 0.88 of the time); at kD = 64 it runs to d
// (unrolled, the forward at 32/4096/64 takes 1.08). Same-call A/Bs on an
// H100, perf/RESULTS.md, "Measured choices".
template <int kD>
__device__ __forceinline__ float squared_norm(const float* row, const float* mu,
                                              int d) {
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  auto add = [&](int k) {
    float4 const v = *reinterpret_cast<const float4*>(row + k);
    float4 const m = *reinterpret_cast<const float4*>(mu + k);
    acc.x = fmaf(v.x - m.x, v.x - m.x, acc.x);
    acc.y = fmaf(v.y - m.y, v.y - m.y, acc.y);
    acc.z = fmaf(v.z - m.z, v.z - m.z, acc.z);
    acc.w = fmaf(v.w - m.w, v.w - m.w, acc.w);
  };
  if constexpr (kD <= 16) {
#pragma unroll
    for (int k = 0; k < kD; k += 4)
      if (k < d) add(k);
  } else {
    for (int k = 0; k < d; k += 4) add(k);
  }
  return (acc.x + acc.y) + (acc.z + acc.w);
}

// Whether the cost tiles run on tensor cores.
template <int kD, bool kVec>
__device__ __forceinline__ bool uses_tensor_cores(int d) {
  return kVec && kD >= 16 && d >= 16 && d % 8 == 0;
}

// Whether ∇x/∇y do too: only for d > 16. At d = 16 the FMA products were
// faster (8/8192/16 fwd+bwd 21.9 vs 22.3 ms on an H100), at d = 64 slower
// (32/2048/64: 9.0 vs 8.6 ms).
template <int kD, bool kVec>
__device__ __forceinline__ bool tensor_core_gradients(int d) {
  return kD > 16 && uses_tensor_cores<kD, kVec>(d);
}

// Costs of tile c (columns 32c.. of the strip) into the ring. Series: the
// tile's y rows are staged in shared memory (`y_tile`), and lane l forms row
// l's 32 squared distances from its x row in registers.

template <int kD, bool kVec, bool kSeries, class In>
__device__ void load_tile(const Params& P, const Strip& s, const Ring& ring,
                          float* y_tile, const float* x_strip, const float* mu,
                          float x_norm, int c) {
  int const j0 = kLanes * c;
  int const cols = min(kLanes, s.m - j0);
  int const d = P.problem.d;
  if constexpr (kSeries) {
    stage_rows<kVec>(y_tile, as<In>(s.y) + std::int64_t(j0) * d, cols, d,
                     s.lane);
    int const pitch = row_pitch<kVec>(d);
    if (uses_tensor_cores<kD, kVec>(d)) {
      // Tensor cores: C = ‖x − μ‖² + ‖y − μ‖² − 2 (x − μ)·(y − μ), clamped
      // at 0 against rounding, with μ the strip's mean x row (stage_strip).
      float const y_norm = squared_norm<kD>(y_tile + s.lane * pitch, mu, d);
      float acc[2][4][4];
      tile_products<kD>(acc, x_strip, y_tile, mu, pitch, d, s.lane);
      float nx[2][2], ny[4][2];
      gather_accumulator_rows(nx, x_norm, s.lane);
      gather_accumulator_columns(ny, y_norm, s.lane);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            int const row = accumulator_row(mi, r >> 1, s.lane);
            int const col = accumulator_column(ni, r & 1, s.lane);
            if (row < s.rows && col < cols)
              ring.at(j0 + col, row) = fmaxf(
                  nx[mi][r >> 1] + ny[ni][r & 1] - 2.f * acc[mi][ni][r], 0.f);
          }
    } else if (s.row_ok) {
      float xr[kD];
      load_row<kD, kVec>(xr, as<In>(s.x) + std::int64_t(s.i) * d, d);
#pragma unroll 4
      for (int q = 0; q < cols; ++q) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        for_features<kD, kVec>(y_tile + q * pitch, d, [&](int k, float v) {
          float const t = xr[k] - v;
          acc[k & 3] = fmaf(t, t, acc[k & 3]);
        });
        ring.at(j0 + q, s.lane) = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      }
    }
    __syncwarp();  // y_tile is reused by the next staging
  } else {
    // Lane q reads column j0 + q of every row: coalesced along the rows.
    if (s.lane < cols) {
      Problem const& q = P.problem;
      const In* cost = as<In>(q.cost) +
                       (s.g * q.n_max + kLanes * s.w) * q.m_max + j0 + s.lane;
      for (int l = 0; l < s.rows; ++l)
        ring.at(j0 + s.lane, l) = load1(cost + l * q.m_max);
    }
  }
  __syncwarp();
}

// Stages the strip's x rows in shared memory (series only). For the
// tensor-core costs it also sets μ, the strip's mean x row, and returns
// ‖x_lane − μ‖². Centring keeps the norms of the norm expansion of the order
// of the distances, so it cancels no digits (an offset in the data would
// otherwise be squared into it).
template <int kD, bool kVec, bool kSeries, class In>
__device__ __forceinline__ float stage_strip(const Params& P, const Strip& s,
                                             float* x_strip, float* mu) {
  if constexpr (!kSeries) return 0.f;
  int const d = P.problem.d, pitch = row_pitch<kVec>(d);
  stage_rows<kVec>(x_strip, as<In>(s.x) + std::int64_t(kLanes) * s.w * d,
                   s.rows, d, s.lane);
  if (!uses_tensor_cores<kD, kVec>(d)) return 0.f;
  // Four partial sums in named registers: indexed by r & 3 in a loop of
  // run-time length they would live in local memory.
  for (int k = s.lane; k < d; k += kLanes) {
    float const* column = x_strip + k;
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    int r = 0;
    for (; r + 4 <= s.rows; r += 4) {
      s0 += column[r * pitch];
      s1 += column[(r + 1) * pitch];
      s2 += column[(r + 2) * pitch];
      s3 += column[(r + 3) * pitch];
    }
    for (; r < s.rows; ++r) s0 += column[r * pitch];
    mu[k] = ((s0 + s1) + (s2 + s3)) / float(s.rows);
  }
  __syncwarp();
  return squared_norm<kD>(x_strip + s.lane * pitch, mu, d);
}

}  // namespace
}  // namespace softwave::impl::cuda_fused
