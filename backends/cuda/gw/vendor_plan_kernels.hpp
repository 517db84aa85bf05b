#pragma once
// The CUDA specialisation of core's SpecialisedPlanKernels (core/src/gw/
// specialised.hpp, which includes this file in CUDA builds): the row argmax
// and the change checks' norms of a float plan whose terms are all Sinkhorn
// plans of low-rank costs (plan_kernels.hpp has the kernels' design).

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "common/call_memory.hpp"
#include "plan_kernels.hpp"

namespace softwave::impl {

template <>
struct SpecialisedPlanKernels<Kokkos::Cuda, float> {
  using Space = Kokkos::Cuda;
  // Every term a Sinkhorn plan (not the initial coupling, nor a low-rank
  // coupling), no dense linear cost, all rows, and the kernels' limits.
  static bool takes_row_argmax(const TermSum<float, Space>& sum,
                               const std::vector<TermWeight>& terms) {
    if (terms.empty() || int(terms.size()) > cuda_gw::max_terms ||
        sum.terms.rank > cuda_gw::max_rank || sum.terms.linear.extent(0) ||
        sum.row_list.extent(0) || sum.terms.n == 0 || sum.terms.k == 0)
      return false;
    for (auto const& t : terms)
      if (t.slot < 0 || t.coupling) return false;
    return true;
  }

  static void row_argmax(const Space& space, const TermSum<float, Space>& sum,
                         const std::vector<TermWeight>& terms,
                         const OTView1<int, Space>& matching) {
    cuda_gw::Mixture m = mixture_of(sum, terms, {});
    m.matching = matching.data();
    auto workspace = call_array<Kokkos::View<char*, Space::memory_space>>(
        space, "softwave::gw::argmax_workspace", false,
        cuda_gw::workspace_bytes(m));
    cuda_gw::row_argmax(space.cuda_stream(), m, workspace.view.data());
  }

  // The norms of two sums that differ only in their terms' weights (a
  // change check's), under the argmax's conditions but for a row list,
  // with at most max_terms slots in the two lists together.
  static bool takes_norms(const TermSum<float, Space>& sum,
                          const std::vector<TermWeight>& first,
                          const std::vector<TermWeight>& second) {
    // A term a slot of the two lists, for the argmax's conditions.
    std::vector<TermWeight> both;
    for (int s : slots_of(first, second))
      for (auto const* list : {&first, &second})
        for (auto const& t : *list)
          if (t.slot == s && (both.empty() || both.back().slot != s))
            both.push_back(t);
    TermSum<float, Space> all_rows = sum;
    all_rows.row_list = {};
    return takes_row_argmax(all_rows, both);
  }

  // (‖first‖_F, ‖second‖_F) over sum's rows, each sum's terms weighted by
  // its list (core's frobenius_norms, with the terms' products on tensor
  // cores).
  static std::pair<double, double> frobenius_norms(
      const Space& space, const TermSum<float, Space>& sum,
      const std::vector<TermWeight>& first,
      const std::vector<TermWeight>& second) {
    cuda_gw::Mixture m = mixture_of(sum, first, second);
    auto workspace = call_array<Kokkos::View<char*, Space::memory_space>>(
        space, "softwave::gw::norms_workspace", false,
        cuda_gw::workspace_bytes(m));
    Kokkos::View<const double*, Space::memory_space,
                 Kokkos::MemoryTraits<Kokkos::Unmanaged>> const
        totals(cuda_gw::squared_norms(space.cuda_stream(), m,
                                      workspace.view.data()),
               cuda_gw::norm_totals(m));
    Kokkos::View<double*, Kokkos::HostSpace> host(
        "softwave::gw::norm_totals_host", totals.extent(0));
    Kokkos::deep_copy(space, host, totals);
    space.fence();
    double squares[2] = {0, 0};
    for (std::size_t e = 0; e < host.extent(0); ++e) squares[e % 2] += host(e);
    return {std::sqrt(squares[0]), std::sqrt(squares[1])};
  }

 private:
  // The slots of two lists, in order of first appearance.
  static std::vector<int> slots_of(const std::vector<TermWeight>& first,
                                   const std::vector<TermWeight>& second) {
    std::vector<int> slots;
    for (auto const* list : {&first, &second})
      for (auto const& t : *list)
        if (std::find(slots.begin(), slots.end(), t.slot) == slots.end())
          slots.push_back(t.slot);
    return slots;
  }

  // The mixture of sum's factors over its rows, a term a slot of the two
  // lists, weighted by `first` and (second_weight) `second` (zero where a
  // list does not have the slot).
  static cuda_gw::Mixture mixture_of(const TermSum<float, Space>& sum,
                                     const std::vector<TermWeight>& first,
                                     const std::vector<TermWeight>& second) {
    auto const& plan = sum.terms;
    cuda_gw::Mixture m;
    std::vector<int> const slots = slots_of(first, second);
    m.count = int(slots.size());
    m.n = sum.row_count();
    m.k = plan.k;
    m.rank = int(plan.rank);
    m.b = sum.b.extent(0) ? sum.b.data() : nullptr;
    m.rows = sum.row_list.extent(0) ? sum.row_list.data() : nullptr;
    m.source_n = plan.n;
    m.a = sum.a.extent(0) ? sum.a.data() : nullptr;
    for (int e = 0; e < m.count; ++e) {
      int const s = slots[e];
      double weight = 0, second_weight = 0, inverse_epsilon = 0;
      for (auto const& t : first)
        if (t.slot == s) weight = t.weight, inverse_epsilon = t.inverse_epsilon;
      for (auto const& t : second)
        if (t.slot == s)
          second_weight = t.weight, inverse_epsilon = t.inverse_epsilon;
      m.terms[e] = {plan.p.data() + s * plan.n * plan.rank,
                    plan.q.data() + s * plan.k * plan.rank,
                    plan.f.data() + s * plan.n,
                    plan.u.data() + s * plan.n,
                    plan.g.data() + s * plan.k,
                    plan.v.data() + s * plan.k,
                    float(weight),
                    float(inverse_epsilon),
                    float(second_weight)};
    }
    return m;
  }
};

}  // namespace softwave::impl
