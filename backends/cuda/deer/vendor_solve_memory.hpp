#pragma once
// The CUDA specialisation of core's SolveMemoryOf (softwave/deer_engine.hpp;
// core/src/deer/deer.cpp includes this file in CUDA builds): a solve's own
// arrays come from stream-ordered memory on the instance's stream. Views
// would be made with cudaMalloc and freed with cudaFree, which waits for the
// whole device and cannot be captured in a CUDA graph.

#include <softwave/deer.hpp>

#include "../common/stream_allocator.hpp"

namespace softwave::impl::deer {

template <class Recurrence>
struct SolveMemoryOf<Kokkos::Cuda, Recurrence> {
  static SolveMemory<Kokkos::Cuda> make(const Kokkos::Cuda& space) {
    return SolveMemory<Kokkos::Cuda>(space, &cuda_support::stream_allocate,
                                     &cuda_support::stream_free);
  }
};

}  // namespace softwave::impl::deer
