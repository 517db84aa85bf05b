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

// An array of the call, row-major in the instance's memory, not
// initialised.
template <class Data, class Space, class... Extents>
Kokkos::View<Data, Kokkos::LayoutRight, typename Space::memory_space>
uninitialised(const Space& space, const char* label, Extents... extents) {
  return Kokkos::View<Data, Kokkos::LayoutRight, typename Space::memory_space>(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string(label)),
      extents...);
}

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
    u = uninitialised<T**>(space, "softwave::gw::term_u", slots, n);
    f = uninitialised<T**>(space, "softwave::gw::term_f", slots, n);
    v = uninitialised<T**>(space, "softwave::gw::term_v", slots, k);
    g = uninitialised<T**>(space, "softwave::gw::term_g", slots, k);
    p = uninitialised<T***>(space, "softwave::gw::term_p", slots, n, rank);
    q = uninitialised<T***>(space, "softwave::gw::term_q", slots, k, rank);
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

  // Rows a team evaluates together: each column's factor row is read
  // once for all of them (per row it would be read N times a pass).
  static constexpr int rows = 16;

  KOKKOS_INLINE_FUNCTION double a_at(std::int64_t i) const {
    return a.extent(0) ? double(a(i)) : 1.0 / double(terms.n);
  }
  KOKKOS_INLINE_FUNCTION double b_at(std::int64_t j) const {
    return b.extent(0) ? double(b(j)) : 1.0 / double(terms.k);
  }
  // The first row of a team's block (a team per block), and how many rows
  // the block from i0 has.
  template <class Member>
  KOKKOS_INLINE_FUNCTION std::int64_t first_row(const Member& team) const {
    return std::int64_t(team.league_rank()) * rows;
  }
  KOKKOS_INLINE_FUNCTION int rows_from(std::int64_t i0) const {
    return terms.n - i0 < rows ? int(terms.n - i0) : rows;
  }
  // out[r] = Σ_s w_s π_s(i0 + r, j) for the block's rows r < count (its
  // last rows may be fewer; their loads repeat the last row).
  KOKKOS_INLINE_FUNCTION void block(std::int64_t i0, int count, std::int64_t j,
                                    double* out) const {
    for (int r = 0; r < rows; ++r) out[r] = 0;
    for (std::size_t e = 0; e < list.extent(0); ++e) {
      TermWeight const t = list(e);
      if (t.slot < 0) {
        for (int r = 0; r < rows; ++r) out[r] += t.weight * product_scale;
        continue;
      }
      T dot[rows] = {};
      for (std::int64_t c = 0; c < terms.rank; ++c) {
        T const qc = terms.q(t.slot, j, c);
        for (int r = 0; r < rows; ++r)
          dot[r] += terms.p(t.slot, i0 + (r < count ? r : count - 1), c) * qc;
      }
      T const column = terms.g(t.slot, j) - terms.v(t.slot, j);
      T const inverse = T(t.inverse_epsilon);
      for (int r = 0; r < count; ++r) {
        T const s =
            terms.f(t.slot, i0 + r) - terms.u(t.slot, i0 + r) + column + dot[r];
        out[r] += t.weight * double(compat::exp(s * inverse));
      }
    }
    double const bj = b_at(j);
    for (int r = 0; r < count; ++r) out[r] *= a_at(i0 + r) * bj;
  }
};

template <class T, class Space>
Kokkos::View<const TermWeight*, typename Space::memory_space> term_list(
    const Space& space, const std::vector<TermWeight>& host) {
  auto const out =
      uninitialised<TermWeight*>(space, "softwave::gw::term_list", host.size());
  Kokkos::View<const TermWeight*, Kokkos::HostSpace,
               Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      from(host.data(), host.size());
  Kokkos::deep_copy(space, out, from);
  // `host` may go before the copy is done.
  space.fence();
  return out;
}

// A team per block of TermSum::rows rows, its threads over the columns.
template <class T, class Space>
Kokkos::TeamPolicy<Space> block_policy(const Space& space,
                                       const TermSum<T, Space>& sum) {
  constexpr int R = TermSum<T, Space>::rows;
  return Kokkos::TeamPolicy<Space>(space, (sum.terms.n + R - 1) / R,
                                   Kokkos::AUTO);
}

// plan(i, j) = sum(i, j).
template <class T, class Space>
void render_plan(const Space& space, const TermSum<T, Space>& sum,
                 const OTView2<T, Space>& plan) {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = TermSum<T, Space>::rows;
  std::int64_t const k = sum.terms.k;
  Kokkos::parallel_for(
      "softwave::gw::render_plan", block_policy(space, sum),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const i0 = sum.first_row(team);
        int const count = sum.rows_from(i0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k),
                             [&](std::int64_t j) {
                               double out[R];
                               sum.block(i0, count, j, out);
                               for (int r = 0; r < count; ++r)
                                 plan(i0 + r, j) = T(out[r]);
                             });
      });
}

// matching(i) = argmax_j sum(i, j) (the first maximum).
template <class T, class Space>
void row_argmax(const Space& space, const TermSum<T, Space>& sum,
                const OTView1<int, Space>& matching) {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = TermSum<T, Space>::rows;
  std::int64_t const k = sum.terms.k;
  Kokkos::parallel_for(
      "softwave::gw::row_argmax", block_policy(space, sum),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const i0 = sum.first_row(team);
        int const count = sum.rows_from(i0);
        // Each thread's best of its columns, then the team's: the largest
        // value, and the first column that has it.
        double value[R];
        std::int64_t column[R];
        for (int r = 0; r < R; ++r) value[r] = -1, column[r] = k;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k),
                             [&](std::int64_t j) {
                               double out[R];
                               sum.block(i0, count, j, out);
                               for (int r = 0; r < count; ++r)
                                 if (out[r] > value[r])
                                   value[r] = out[r], column[r] = j;
                             });
        for (int r = 0; r < count; ++r) {
          double best = value[r];
          team.team_reduce(Kokkos::Max<double>(best));
          std::int64_t first = value[r] == best ? column[r] : k;
          team.team_reduce(Kokkos::Min<std::int64_t>(first));
          if (team.team_rank() == 0) matching(i0 + r) = int(first);
        }
      });
}

// ‖sum‖_F, accumulated in float64 (signed weights make it a difference).
template <class T, class Space>
double frobenius_norm(const Space& space, const TermSum<T, Space>& sum) {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = TermSum<T, Space>::rows;
  std::int64_t const k = sum.terms.k;
  double total = 0;
  Kokkos::parallel_reduce(
      "softwave::gw::frobenius_norm", block_policy(space, sum),
      KOKKOS_LAMBDA(const Member& team, double& out) {
        std::int64_t const i0 = sum.first_row(team);
        int const count = sum.rows_from(i0);
        double block_total = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, k),
            [&](std::int64_t j, double& s) {
              double values[R];
              sum.block(i0, count, j, values);
              for (int r = 0; r < count; ++r) s += values[r] * values[r];
            },
            block_total);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { out += block_total; });
      },
      total);
  return std::sqrt(total);
}

}  // namespace softwave::impl
