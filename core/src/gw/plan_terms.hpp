#pragma once
// The plan of sampled GW as a weighted sum of Sinkhorn plans, each kept as
// the potentials and low-rank cost factors that define it, and the kernels
// that evaluate that sum without storing it: the dense plan on request, each
// row's argmax, and the Frobenius norm of a signed combination (an
// iteration's change).

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <softwave/kokkos_compat.hpp>
#include <softwave/sinkhorn.hpp>
#include <string>
#include <vector>

namespace softwave::impl {

// One term of a sum on the device: `slot` of PlanTerms (−1: the product
// plan a⊗b, the initial coupling), its weight and 1/ε.
struct TermWeight {
  int slot;
  double weight;
  double inverse_epsilon;
};

// Storage for up to `slots` terms: term s is
//   π_s(i, k) = a_i b_k exp((f_i + g_k − u_i − v_k + P_i·Q_k) / ε_s).
template <class T, class Space>
struct PlanTerms {
  std::int64_t n = 0, k = 0, rank = 0;
  int slots = 0;
  OTView2<T, Space> u, f;  // (slots, N)
  OTView2<T, Space> v, g;  // (slots, K)
  OTView3<T, Space> p;     // (slots, N, rank)
  OTView3<T, Space> q;     // (slots, K, rank)

  PlanTerms() = default;
  PlanTerms(const Space& space, std::int64_t n_, std::int64_t k_,
            std::int64_t rank_, int slots_)
      : n(n_), k(k_), rank(rank_), slots(slots_) {
    auto make2 = [&](const char* label, std::int64_t m) {
      return OTView2<T, Space>(
          Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                             std::string(label)),
          slots, m);
    };
    auto make3 = [&](const char* label, std::int64_t m) {
      return OTView3<T, Space>(
          Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                             std::string(label)),
          slots, m, rank);
    };
    u = make2("softwave::gw::term_u", n);
    f = make2("softwave::gw::term_f", n);
    v = make2("softwave::gw::term_v", k);
    g = make2("softwave::gw::term_g", k);
    p = make3("softwave::gw::term_p", n);
    q = make3("softwave::gw::term_q", k);
  }

  // One slot's arrays as a batch of one problem, as the Sinkhorn takes them.
  OTView2<T, Space> row(const OTView2<T, Space>& all, int s) const {
    return OTView2<T, Space>(all.data() + s * all.extent(1), 1, all.extent(1));
  }
  OTView3<T, Space> factor(const OTView3<T, Space>& all, int s) const {
    return OTView3<T, Space>(all.data() + s * all.extent(1) * rank, 1,
                             all.extent(1), rank);
  }
  LowRankCost<T, Space> cost(int s) const {
    return {row(u, s), row(v, s), factor(p, s), factor(q, s)};
  }
};

// The weights of a plan's terms and its marginals, on the device.
template <class T, class Space>
struct TermSum {
  PlanTerms<T, Space> terms;
  Kokkos::View<const TermWeight*, typename Space::memory_space> list;
  OTView1<const T, Space> a, b;  // empty: uniform
  // 1/Σb: the product plan a⊗b/Σb has marginals a and b.
  double product_scale = 1;

  KOKKOS_INLINE_FUNCTION double a_at(std::int64_t i) const {
    return a.extent(0) ? double(a(i)) : 1.0 / double(terms.n);
  }
  KOKKOS_INLINE_FUNCTION double b_at(std::int64_t j) const {
    return b.extent(0) ? double(b(j)) : 1.0 / double(terms.k);
  }
  // Σ_s w_s π_s(i, j).
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t i,
                                           std::int64_t j) const {
    double const mass = a_at(i) * b_at(j);
    double sum = 0;
    for (std::size_t e = 0; e < list.extent(0); ++e) {
      TermWeight const t = list(e);
      if (t.slot < 0) {
        sum += t.weight * product_scale;
        continue;
      }
      T dot = 0;
      for (std::int64_t r = 0; r < terms.rank; ++r)
        dot += terms.p(t.slot, i, r) * terms.q(t.slot, j, r);
      double const s = double(terms.f(t.slot, i)) + terms.g(t.slot, j) -
                       terms.u(t.slot, i) - terms.v(t.slot, j) + dot;
      sum += t.weight * compat::exp(s * t.inverse_epsilon);
    }
    return mass * sum;
  }
};

template <class T, class Space>
Kokkos::View<const TermWeight*, typename Space::memory_space> term_list(
    const Space& space, const std::vector<TermWeight>& host) {
  Kokkos::View<TermWeight*, typename Space::memory_space> out(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         "softwave::gw::term_list"),
      host.size());
  Kokkos::View<const TermWeight*, Kokkos::HostSpace,
               Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      from(host.data(), host.size());
  Kokkos::deep_copy(space, out, from);
  // `host` may go before the copy is done.
  space.fence();
  return out;
}

// plan(i, j) = sum(i, j).
template <class T, class Space>
void render_plan(const Space& space, const TermSum<T, Space>& sum,
                 const OTView2<T, Space>& plan) {
  using Policy = Kokkos::TeamPolicy<Space>;
  std::int64_t const k = sum.terms.k;
  Kokkos::parallel_for(
      "softwave::gw::render_plan", Policy(space, sum.terms.n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const typename Policy::member_type& team) {
        std::int64_t const i = team.league_rank();
        Kokkos::parallel_for(
            Kokkos::TeamThreadRange(team, k),
            [&](std::int64_t j) { plan(i, j) = T(sum(i, j)); });
      });
}

// matching(i) = argmax_j sum(i, j) (the first maximum).
template <class T, class Space>
void row_argmax(const Space& space, const TermSum<T, Space>& sum,
                const OTView1<int, Space>& matching) {
  using Policy = Kokkos::TeamPolicy<Space>;
  using Reducer = Kokkos::MaxLoc<double, std::int64_t>;
  std::int64_t const k = sum.terms.k;
  Kokkos::parallel_for(
      "softwave::gw::row_argmax", Policy(space, sum.terms.n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const typename Policy::member_type& team) {
        std::int64_t const i = team.league_rank();
        typename Reducer::value_type best;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, k),
            [&](std::int64_t j, typename Reducer::value_type& b) {
              double const value = sum(i, j);
              if (value > b.val || (value == b.val && j < b.loc)) {
                b.val = value;
                b.loc = j;
              }
            },
            Reducer(best));
        Kokkos::single(Kokkos::PerTeam(team),
                       [&]() { matching(i) = int(best.loc); });
      });
}

// ‖sum‖_F, accumulated in float64 (signed weights make it a difference).
template <class T, class Space>
double frobenius_norm(const Space& space, const TermSum<T, Space>& sum) {
  using Policy = Kokkos::TeamPolicy<Space>;
  std::int64_t const k = sum.terms.k;
  double total = 0;
  Kokkos::parallel_reduce(
      "softwave::gw::frobenius_norm", Policy(space, sum.terms.n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const typename Policy::member_type& team, double& out) {
        std::int64_t const i = team.league_rank();
        double row = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, k),
            [&](std::int64_t j, double& s) {
              double const value = sum(i, j);
              s += value * value;
            },
            row);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { out += row; });
      },
      total);
  return std::sqrt(total);
}

}  // namespace softwave::impl
