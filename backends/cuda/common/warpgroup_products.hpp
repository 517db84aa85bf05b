#pragma once
// Warpgroup products on Hopper's tensor cores (wgmma, PTX of sm_90a only):
// four warps multiply a 64-row A held in their registers by a B tile in
// shared memory, asynchronously, so that a warpgroup can take the
// exponentials of one tile's products while the tensor cores form the
// next tile's. SOFTWAVE_WARPGROUP_PRODUCTS is defined where they compile
// (the sm_90a image of a file built with that target, CMakeLists.txt);
// elsewhere callers keep their warp-level mma.sync kernels.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define SOFTWAVE_WARPGROUP_PRODUCTS 1
#endif

namespace softwave::impl::cuda_support {

#if defined(SOFTWAVE_WARPGROUP_PRODUCTS)

// The shared-memory descriptor of a K-major FP16 operand without swizzle:
// 8 × 8 core matrices (8 rows of 16 bytes, 128 bytes contiguous),
// `k_stride` bytes apart along k and `n_stride` bytes apart along the
// rows (n). Addresses and strides are in 16-byte units; bits 62–63 (the
// swizzle) stay zero.
__device__ __forceinline__ unsigned long long shared_descriptor(
    const void* tile, unsigned k_stride, unsigned n_stride) {
  auto const address = static_cast<unsigned long long>(
      static_cast<unsigned>(__cvta_generic_to_shared(tile)));
  return ((address & 0x3ffffull) >> 4) |
         (static_cast<unsigned long long>(k_stride >> 4) << 16) |
         (static_cast<unsigned long long>(n_stride >> 4) << 32);
}

// The warpgroup's registers may be read by products issued after this
// (every accumulator and A operand written before it).
__device__ __forceinline__ void warpgroup_arrive() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
// Closes the products issued since the last commit into one group.
__device__ __forceinline__ void warpgroup_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most `pending` groups of products are still running.
template <int pending>
__device__ __forceinline__ void warpgroup_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(pending) : "memory");
}
// Shared-memory writes of the generic proxy (stores, cp.async) made
// visible to the products, which read through the async proxy: each
// writing thread fences, then the block meets at a barrier.
__device__ __forceinline__ void async_proxy_fence() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
// Keeps the compiler from moving reads or writes of an accumulator across
// the window in which a product owns it.
__device__ __forceinline__ void hold_register(float& r) {
  asm volatile("" : "+f"(r)::"memory");
}

// d (the m64n64 accumulator of the warpgroup; this thread's 32 floats in
// mma.sync's m16n8 fragment order, 8 column groups of 4) += A·B: A this
// warp's 16 × 16 FP16 fragment (mma_fp16's a[0..3]), B the 64 columns × 16
// k of the descriptor's tile.
__device__ __forceinline__ void warpgroup_product(float* d, const unsigned* a,
                                                  unsigned long long b) {
  asm volatile(
      "{\n.reg .pred accumulate;\nsetp.ne.b32 accumulate, %37, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
      "%30, %31}, {%32, %33, %34, %35}, %36, accumulate, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
        "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]),
        "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),
        "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
        "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

#endif  // SOFTWAVE_WARPGROUP_PRODUCTS

}  // namespace softwave::impl::cuda_support
