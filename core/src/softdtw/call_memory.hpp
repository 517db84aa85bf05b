#pragma once
// Memory for one call's intermediate arrays.

#include <Kokkos_Core.hpp>
#include <memory>
#include <string>
#include <type_traits>

#if defined(KOKKOS_ENABLE_CUDA)
#include "softdtw_fused.hpp"
#endif

namespace softwave::impl {

// A device array for a call's intermediate results, and what keeps its
// memory alive. On Kokkos::Cuda the memory is stream-ordered on the
// instance's stream (Kokkos 3.4 frees views with cudaFree, which waits for the
// whole device); elsewhere it is an ordinary labelled view.
template <class View>
struct CallArray {
  View view;
  std::shared_ptr<void> owner;
};

template <class View, class Space, class... Extents>
CallArray<View> call_array(const Space& space, const char* label, bool zero,
                           Extents... extents) {
  CallArray<View> out;
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same_v<Space, Kokkos::Cuda>) {
    void* memory = cuda_fused::stream_allocate(
        space, View::required_allocation_size(extents...));
    out.owner = std::shared_ptr<void>(
        memory, [space](void* p) { cuda_fused::stream_free(space, p); });
    out.view =
        View(static_cast<typename View::pointer_type>(memory), extents...);
    if (zero) Kokkos::deep_copy(space, out.view, 0);
    return out;
  }
#endif
  if (zero)
    out.view = View(Kokkos::view_alloc(space, std::string(label)), extents...);
  else
    out.view = View(Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                                       std::string(label)),
                    extents...);
  return out;
}

}  // namespace softwave::impl
