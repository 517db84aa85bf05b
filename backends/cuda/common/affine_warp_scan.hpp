#pragma once
// The scan of affine maps δ ↦ a δ + e across a warp that the CUDA scans of
// linear recurrences share (DEER's fused iteration, linear_recurrence).

#include <cuda_runtime.h>

namespace softwave::impl::cuda_support {

// (a, e) ← the composition of lanes 0..lane's maps in lane order (an
// inclusive scan over the warp; every lane of the warp calls it).
template <class T>
__device__ inline void compose_over_warp(T& a, T& e, int lane) {
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    T const earlier_a = __shfl_up_sync(0xffffffffu, a, offset);
    T const earlier_e = __shfl_up_sync(0xffffffffu, e, offset);
    if (lane >= offset) {
      e = a * earlier_e + e;
      a = a * earlier_a;
    }
  }
}

}  // namespace softwave::impl::cuda_support
