#pragma once
// A call's intermediate arrays on Kokkos::Cuda come from stream-ordered
// memory on the instance's stream (core/src/common/call_memory.hpp includes
// this file in CUDA builds).

#include "stream_allocator.hpp"

namespace softwave::impl {

template <>
struct CallMemory<Kokkos::Cuda> {
  static constexpr bool stream_ordered = true;
  static void* allocate(const Kokkos::Cuda& space, std::size_t bytes) {
    return cuda_support::stream_allocate(space, bytes);
  }
  static void release(const Kokkos::Cuda& space, void* pointer) {
    cuda_support::stream_free(space, pointer);
  }
};

}  // namespace softwave::impl
