#pragma once
// Dispatch from sampled GW's plan kernels to vendor-specialised ones where
// they exist for the execution space and type: the plan's row argmax and
// the change checks' norms.
// SpecialisedPlanKernels<Space, T>::takes_row_argmax(sum, terms) says
// whether they run for a sum of these terms. The primary template below is
// the portable answer; a backend specialises it in backends/<vendor>/gw/
// vendor_plan_kernels.hpp, whose folder is on the include path only in a
// build with that backend (as the Sinkhorn passes, sinkhorn/specialised.hpp).

#include <utility>
#include <vector>

#include "plan_terms.hpp"

namespace softwave::impl {

template <class Space, class T>
struct SpecialisedPlanKernels {
  static bool takes_row_argmax(const TermSum<T, Space>&,
                               const std::vector<TermWeight>&) {
    return false;
  }
  // matching(i) = argmax_j sum(i, j), the first maximum (sum's list is
  // `terms` on the device).
  static void row_argmax(const Space&, const TermSum<T, Space>&,
                         const std::vector<TermWeight>&,
                         const OTView1<int, Space>&) {}
  // Whether they take the norms of sum with its terms weighted by `first`
  // and by `second` (a change check's two sums), and those norms.
  static bool takes_norms(const TermSum<T, Space>&,
                          const std::vector<TermWeight>&,
                          const std::vector<TermWeight>&) {
    return false;
  }
  static std::pair<double, double> frobenius_norms(
      const Space&, const TermSum<T, Space>&, const std::vector<TermWeight>&,
      const std::vector<TermWeight>&) {
    return {0, 0};
  }
};

}  // namespace softwave::impl

#if __has_include(<gw/vendor_plan_kernels.hpp>)
#include <gw/vendor_plan_kernels.hpp>
#endif

namespace softwave::impl {

// matching(i) = argmax_j sum(i, j) (the first maximum), on the vendor's
// kernels where they take the sum, else the portable ones.
template <class T, class Space>
void mixture_row_argmax(const Space& space, const TermSum<T, Space>& sum,
                        const std::vector<TermWeight>& terms,
                        const OTView1<int, Space>& matching) {
  using Specialised = SpecialisedPlanKernels<Space, T>;
  if (Specialised::takes_row_argmax(sum, terms))
    Specialised::row_argmax(space, sum, terms, matching);
  else
    row_argmax(space, sum, matching);
}

// (‖first‖_F, ‖second‖_F) of sum with its terms weighted by the lists
// `first` and `second` (both of them on the device as first_sum's and
// second_sum's lists; the sums otherwise alike), on the vendor's kernels
// where they take them, else core's frobenius_norms.
template <class T, class Space>
std::pair<double, double> mixture_frobenius_norms(
    const Space& space, const TermSum<T, Space>& first_sum,
    const TermSum<T, Space>& second_sum, const std::vector<TermWeight>& first,
    const std::vector<TermWeight>& second) {
  using Specialised = SpecialisedPlanKernels<Space, T>;
  if (Specialised::takes_norms(first_sum, first, second))
    return Specialised::frobenius_norms(space, first_sum, first, second);
  return frobenius_norms(space, first_sum, second_sum);
}

}  // namespace softwave::impl
