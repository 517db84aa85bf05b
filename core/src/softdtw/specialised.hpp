#pragma once
// Dispatch from the portable sweeps to a vendor-specialised path (backends/)
// where one exists for the execution space, data type, cost and options.
// SpecialisedPath<Space, CostProvider>::unavailable() says why it cannot run
// (empty when it can); run() does the forward (and backward) sweeps.
//
// The primary template below is the portable answer. A backend specialises
// it for its execution space in backends/<vendor>/softdtw/
// vendor_specialised_path.hpp, whose folder is on the include path only in
// a build with that backend, so core names no vendor and a new one adds
// files without editing these.

#include <memory>
#include <string>
#include <type_traits>

#include "common/call_memory.hpp"
#include "costs.hpp"
#include "sweep.hpp"
#include "validate.hpp"

namespace softwave::impl {

template <class Space, class CostProvider>
struct SpecialisedPath {
  using T = typename CostProvider::value_type;
  static std::string unavailable(const CostProvider&, const SoftDTWOptions&) {
    return "the specialised path exists only for Kokkos::Cuda (a CUDA build)";
  }
  static void run(const Space&, const CostProvider&, const SoftDTWOptions&,
                  std::int64_t, acc_t*, const BackwardOutputs<T, Space>*) {}
};

}  // namespace softwave::impl

#if __has_include(<softdtw/vendor_specialised_path.hpp>)
#include <softdtw/vendor_specialised_path.hpp>
#endif
