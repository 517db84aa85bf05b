#pragma once
// Device helpers for products on tensor cores with FP16 operands, shared by
// the Sinkhorn updates and sampled GW's plan kernels: the operands' range,
// their layout within a record, one m16n8k16 product, and exp2.

#include <cuda_fp16.h>

namespace softwave::impl::cuda_support {

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// FP16's range is ±65504: operands are first scaled by powers of two
// (balancing_exponent) and clamped to it (NaN kept).
__device__ __forceinline__ float within_half_range(float v) {
  constexpr float kLargest = 65504.f;
  return v > kLargest ? kLargest : v < -kLargest ? -kLargest : v;
}
__device__ __forceinline__ unsigned half2_bits(float low, float high) {
  __half2 const v =
      __floats2half2_rn(within_half_range(low), within_half_range(high));
  return *reinterpret_cast<const unsigned*>(&v);
}

// The power of two 2^e that balances a product's operands: the rows' are
// x·2^−e, the columns' y·2^e (their product x·y exactly), so that the
// largest magnitudes of both, row_largest and column_largest before
// scaling, meet near their geometric mean.
__device__ __forceinline__ int balancing_exponent(float row_largest,
                                                  float column_largest) {
  int row_exponent = 0, column_exponent = 0;
  frexpf(row_largest, &row_exponent);
  frexpf(column_largest, &column_exponent);
  int const e = (row_exponent - column_exponent) / 2;
  return e < -100 ? -100 : e > 100 ? 100 : e;
}

// *largest = max(*largest, max |values[e]| over e < count), as float bits
// (*largest starts at zero; non-negative floats order as their bits do):
// the grid's blocks along x stride over the values, each warp's lanes
// reduced first. Every thread of the warp calls it.
__device__ __forceinline__ void largest_magnitude(const float* values,
                                                  long long count,
                                                  unsigned* largest) {
  float value = 0.f;
  for (long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
       e < count; e += (long long)gridDim.x * blockDim.x)
    value = fmaxf(value, fabsf(values[e]));
  for (int o = 16; o > 0; o /= 2)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, o));
  if (threadIdx.x % 32 == 0) atomicMax(largest, __float_as_uint(value));
}

// Position of coordinate k in an FP16 record: within each group of 16,
// lane t's operands of m16n8k16 (k = 2t, 2t + 1 and 2t + 8, 2t + 9) side
// by side, one 64-bit load.
__device__ __forceinline__ int permuted16(int k) {
  int const k16 = k % 16, pair = k16 / 2, low = k16 % 2;
  return k - k16 + (pair < 4 ? 4 * pair + low : 4 * (pair - 4) + 2 + low);
}

// d (an m16n8 accumulator fragment) += A·B, one FP16 m16n8k16 product
// (fragments as m16n8k8's, each register a pair of FP16 values along k:
// a[0..3] rows g, g + 8 at k = 2t, 2t + 1, then g, g + 8 at k + 8; b[0..1]
// column g at k = 2t, 2t + 1 and k + 8).
__device__ __forceinline__ void mma_fp16(float* d, const unsigned* a,
                                         unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace softwave::impl::cuda_support
