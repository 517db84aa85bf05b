#pragma once
// Memory for one call's intermediate arrays, shared by every family.

#include <Kokkos_Core.hpp>
#include <softwave/kokkos_compat.hpp>
#include <memory>
#include <string>
#include <type_traits>

namespace softwave::impl {

// A device array for a call's intermediate results, and what keeps its
// memory alive.
template <class View>
struct CallArray {
  View view;
  std::shared_ptr<void> owner;
};

// Where a call's arrays get their memory on an execution space: an ordinary
// labelled view, unless a backend specialises this for its space with
// `static constexpr bool stream_ordered = true` and allocate(space, bytes) /
// release(space, pointer) (backends/<vendor>/common/vendor_call_memory.hpp,
// included below in a build with that backend). The CUDA backend does:
// Kokkos 3.4 frees views with cudaFree, which waits for the whole device.
template <class Space>
struct CallMemory {
  static constexpr bool stream_ordered = false;
};

template <class View, class Space, class... Extents>
CallArray<View> call_array(const Space& space, const char* label, bool zero,
                           Extents... extents) {
  CallArray<View> out;
  if constexpr (CallMemory<Space>::stream_ordered) {
    void* memory = CallMemory<Space>::allocate(
        space, View::required_allocation_size(extents...));
    out.owner = std::shared_ptr<void>(
        memory, [space](void* p) { CallMemory<Space>::release(space, p); });
    out.view =
        View(static_cast<typename View::pointer_type>(memory), extents...);
    // Arrays of structs (partial states) are never zero-filled: they are
    // written before they are read.
    if constexpr (std::is_arithmetic_v<typename View::non_const_value_type>)
      if (zero) compat::fill(space, out.view, 0);
    return out;
  } else {
    if (zero)
      out.view =
          View(Kokkos::view_alloc(space, std::string(label)), extents...);
    else
      out.view = View(Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                                         std::string(label)),
                      extents...);
    return out;
  }
}

}  // namespace softwave::impl

#if __has_include(<common/vendor_call_memory.hpp>)
#include <common/vendor_call_memory.hpp>
#endif
