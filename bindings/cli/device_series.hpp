#pragma once
// A SeriesSet copied to Kokkos::DefaultExecutionSpace as (count, length,
// dims) values of T. Needs Kokkos initialised.

#include <softwave/softdtw.hpp>
#include <string>

#include "ucr_reader.hpp"

namespace softwave::cli {

using Space = Kokkos::DefaultExecutionSpace;

template <class T>
ArrayView3<T, Space> to_device(const Space& space, const SeriesSet& set,
                               const std::string& label) {
  ArrayView3<T, Space> device(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, label), set.count,
      set.length, set.dims);
  auto host = Kokkos::create_mirror_view(device);
  for (std::size_t q = 0; q < set.values.size(); ++q) {
    host.data()[q] = static_cast<T>(set.values[q]);
  }
  Kokkos::deep_copy(space, device, host);
  space.fence();  // `host` is freed on return
  return device;
}

}  // namespace softwave::cli
