#pragma once
// TF32 tensor-core operands and the m16n8k8 product, shared by the
// CUDA-specialised kernels (Soft-DTW's cost tiles, Sinkhorn's exponents).
//
// Fragments of m16n8k8 (g = lane/4, t = lane%4): a[r] is A's row
// g + 8(r%2), column t + 4(r/2); b[r] is B's row t + 4r, column g; the
// accumulator's c[r] is row g + 8(r/2), column 2t + r%2.

namespace softwave::impl::cuda_support {

// 3xTF32 tensor-core products: v = hi + lo with hi, lo in TF32, and
// a·b ≈ a_lo·b_hi + a_hi·b_lo + a_hi·b_hi, which keeps float32 accuracy
// (a single TF32 product would lose 13 bits).
struct Tf32Split {
  unsigned hi, lo;
};

// v rounded to a TF32 operand, to nearest (ties away), the value
// cvt.rna.tf32.f32 gives. The rounding is done in integer arithmetic: the
// tensor cores read the top 19 bits of a TF32 operand and ignore the low 13
// (nvcc's own lowering of cvt.rna passes them unmasked to HMMA as well), so
// adding half a TF32 unit (0x1000) to the bits rounds the magnitude, carries
// included. nvcc lowers cvt.rna.tf32.f32 on sm_90 to a finiteness test and
// a select around that add: 7 instructions against 1 here.
__device__ __forceinline__ unsigned round_tf32(float v) {
  constexpr unsigned kHalfUnit = 0x1000u;
  return __float_as_uint(v) + kHalfUnit;
}

// v = hi + lo as TF32 operands, each rounded as round_tf32. Finite values
// split bit for bit as with cvt.rna; an infinite v gives hi = ±∞ and
// lo = NaN.
__device__ __forceinline__ Tf32Split split_tf32(float v) {
  constexpr unsigned kTf32Bits = 0xffffe000u;
  unsigned const hi = round_tf32(v);
  float const lo = v - __uint_as_float(hi & kTf32Bits);
  return {hi, round_tf32(lo)};
}

// d (an m16n8 accumulator fragment) += A·B, one TF32 product.
__device__ __forceinline__ void mma_tf32(float* d, unsigned a0, unsigned a1,
                                         unsigned a2, unsigned a3, unsigned b0,
                                         unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace softwave::impl::cuda_support
