#pragma once
// The CUDA specialisation of core's SolveMemoryOf (softwave/deer_engine.hpp;
// core/src/deer/deer.cpp includes this file in CUDA builds): a solve's own
// arrays come from the memory of a call's intermediate arrays on this space
// (CallMemory, stream-ordered on the instance's stream). Views would be made
// with cudaMalloc and freed with cudaFree, which waits for the whole device
// and cannot be captured in a CUDA graph.

#include <common/call_memory.hpp>
#include <softwave/deer.hpp>

namespace softwave::impl::deer {

template <class Recurrence>
struct SolveMemoryOf<Kokkos::Cuda, Recurrence> {
  static SolveMemory<Kokkos::Cuda> make(const Kokkos::Cuda& space) {
    return SolveMemory<Kokkos::Cuda>(space, &CallMemory<Kokkos::Cuda>::allocate,
                                     &CallMemory<Kokkos::Cuda>::release);
  }
};

}  // namespace softwave::impl::deer
