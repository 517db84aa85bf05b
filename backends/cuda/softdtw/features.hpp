#pragma once
// Rows of features: loads into registers and staging into shared memory.
//
// One part of the CUDA-specialised Soft-DTW kernels (fused.hpp has the
// design), included only by fused.cpp: the parts form one translation unit,
// in this order: strips.hpp, features.hpp, cost_tiles.hpp, forward_kernel.hpp,
// backward_kernel.hpp, and the host code in fused.cpp.

#include "strips.hpp"

namespace softwave::impl::cuda_fused {
namespace {

// Loads k < d of a row into registers (zeros beyond d). kVec: d % 4 == 0 and
// the rows are 16-byte aligned.
template <int kD, bool kVec, class In>
__device__ __forceinline__ void load_row(float (&r)[kD], const In* row, int d) {
  if constexpr (kVec) {
#pragma unroll
    for (int k = 0; k < kD; k += 4) {
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (k < d) v = load4(row + k);
      r[k] = v.x;
      r[k + 1] = v.y;
      r[k + 2] = v.z;
      r[k + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kD; ++k) r[k] = k < d ? load1(row + k) : 0.f;
  }
}

// Copies rows [0, count) of a (·, d) row-major array into shared memory
// (row pitch row_pitch<kVec>(d)), coalesced: all of it is in flight at once.
template <bool kVec, class In>
__device__ __forceinline__ void stage_rows(float* to, const In* from, int count,
                                           int d, int lane) {
  if constexpr (kVec) {
    int const per_row = d / 4, n = count * per_row;
    // Element e's row, e / per_row, by a float reciprocal: an integer
    // division by a divisor known only at run time is ~20 instructions an
    // element (the backward stages a tile's y rows twice per block). Exact
    // here: (e + ½) / per_row lies at least ½ / per_row (≥ 1/32, d ≤ 64)
    // from an integer, and e < 32 · 16, so float rounding cannot cross one.
    float const inverse = 1.f / float(per_row);
    auto* t = reinterpret_cast<float4*>(to);
    for (int e = lane; e < n; e += kLanes) {
      int const row = int((float(e) + 0.5f) * inverse);
      t[e + row] = load4(from, e);  // pitch: per_row + 1 float4s
    }
  } else {
    for (int e = lane, n = count * d; e < n; e += kLanes)
      to[e] = load1(from + e);
  }
  __syncwarp();
}

// Calls f(k, v) for the features k < d of a row in shared memory that every
// lane reads at once (a broadcast).
template <int kD, bool kVec, class F>
__device__ __forceinline__ void for_features(const float* row, int d,
                                             const F& f) {
  if constexpr (kVec) {
#pragma unroll
    for (int k = 0; k < kD; k += 4)
      if (k < d) {
        float4 const v = *reinterpret_cast<const float4*>(row + k);
        f(k, v.x);
        f(k + 1, v.y);
        f(k + 2, v.z);
        f(k + 3, v.w);
      }
  } else {
#pragma unroll
    for (int k = 0; k < kD; ++k)
      if (k < d) f(k, row[k]);
  }
}

}  // namespace
}  // namespace softwave::impl::cuda_fused
