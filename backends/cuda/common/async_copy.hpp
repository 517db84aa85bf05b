#pragma once
// Asynchronous global → shared copies (cp.async, sm_80 and later): a block
// stages its next tile while its warps compute on the current one.

namespace softwave::impl::cuda_support {

// 16 bytes from global `source` into shared `target`, or 16 zero bytes
// where !valid (`source` must still be a mapped address: it is not read).
__device__ __forceinline__ void copy_async_16(void* target, const void* source,
                                              bool valid) {
  unsigned const address =
      static_cast<unsigned>(__cvta_generic_to_shared(target));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address),
               "l"(source), "r"(valid ? 16 : 0));
}

// 4 bytes, as copy_async_16 (always read).
__device__ __forceinline__ void copy_async_4(void* target, const void* source) {
  unsigned const address =
      static_cast<unsigned>(__cvta_generic_to_shared(target));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(address),
               "l"(source));
}

// Closes the thread's copies issued so far into one group.
__device__ __forceinline__ void commit_async() {
  asm volatile("cp.async.commit_group;\n" ::);
}

// Waits for every group of the thread's copies (a __syncthreads after it
// makes the whole block's copies visible to every thread).
__device__ __forceinline__ void wait_async_all() {
  asm volatile("cp.async.wait_all;\n" ::: "memory");
}

}  // namespace softwave::impl::cuda_support
