#pragma once
// Stream-ordered device memory on a Kokkos::Cuda instance's stream
// (cudaMallocAsync / cudaFreeAsync). Kokkos 3.4 frees views with cudaFree,
// which waits for the whole device, so a call's own intermediate arrays and
// the specialised kernels' workspace come from here: nothing synchronises.

#include <Kokkos_Core.hpp>
#include <cstddef>

namespace softwave::impl::cuda_support {

// What the device's default memory pool keeps reserved between calls
// instead of returning it to the driver at each synchronisation.
constexpr std::size_t reserved_pool_bytes = std::size_t(256) << 20;

void* stream_allocate(const Kokkos::Cuda& space, std::size_t bytes);
void stream_free(const Kokkos::Cuda& space, void* pointer);

}  // namespace softwave::impl::cuda_support
