#pragma once
// The CUDA specialisation of core's SpecialisedPlanKernels (core/src/gw/
// specialised.hpp, which includes this file in CUDA builds): the row argmax
// of a float plan whose terms are all Sinkhorn plans of low-rank costs
// (plan_kernels.hpp has the kernels' design).

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
    auto const& plan = sum.terms;
    cuda_gw::Mixture m;
    m.count = int(terms.size());
    m.n = plan.n;
    m.k = plan.k;
    m.rank = int(plan.rank);
    m.b = sum.b.extent(0) ? sum.b.data() : nullptr;
    m.matching = matching.data();
    for (int e = 0; e < m.count; ++e) {
      int const s = terms[e].slot;
      m.terms[e] = {plan.p.data() + s * plan.n * plan.rank,
                    plan.q.data() + s * plan.k * plan.rank,
                    plan.f.data() + s * plan.n,
                    plan.u.data() + s * plan.n,
                    plan.g.data() + s * plan.k,
                    plan.v.data() + s * plan.k,
                    float(terms[e].weight),
                    float(terms[e].inverse_epsilon)};
    }
    auto workspace = call_array<Kokkos::View<char*, Space::memory_space>>(
        space, "softwave::gw::argmax_workspace", false,
        cuda_gw::workspace_bytes(m));
    cuda_gw::row_argmax(space.cuda_stream(), m, workspace.view.data());
  }
};

}  // namespace softwave::impl
