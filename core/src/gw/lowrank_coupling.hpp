#pragma once
// Low-rank couplings of a low-rank cost (GwOptions::coupling_rank, gw.hpp
// has the iteration): mirror descent on (Q, R, g) and Dykstra's
// projections, every array O((N + K)·r) and in float64 (the step's
// exponents span hundreds of units at small ε).

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <softwave/gw.hpp>
#include <softwave/kokkos_compat.hpp>

#include "plan_terms.hpp"

namespace softwave::impl {

template <class Space>
using CouplingMatrix =
    Kokkos::View<double**, Kokkos::LayoutRight, typename Space::memory_space>;
template <class Space>
using CouplingVector = Kokkos::View<double*, typename Space::memory_space>;

// u(i) of a vector, u(i, c) of a matrix (a free function: nvcc refuses
// `if constexpr` around a device lambda's first use of a capture).
template <class Weights>
KOKKOS_INLINE_FUNCTION double weight_at(const Weights& u, std::int64_t i,
                                        std::int64_t c) {
  if constexpr (Weights::rank == 1)
    return u(i);
  else
    return u(i, c);
}

// out(j, c) = Σ_i w_j(i) X(i, c) over one side's points, for the weights
// w_0 = 1, w_1 = own (u or v) and w_{2+m} = factor column m: what C R and
// Cᵀ Q need of the other side. A team per output.
template <class T, class Space>
void side_moments(const Space& space, const OTView2<const T, Space>& own,
                  const OTView3<const T, Space>& factor,
                  const CouplingMatrix<Space>& x,
                  const CouplingMatrix<Space>& out) {
  using Policy = Kokkos::TeamPolicy<Space>;
  std::int64_t const n = x.extent(0), r = x.extent(1);
  Kokkos::parallel_for(
      "softwave::gw::coupling_moments",
      Policy(space, out.extent(0) * r, Kokkos::AUTO),
      KOKKOS_LAMBDA(const typename Policy::member_type& team) {
        std::int64_t const j = team.league_rank() / r,
                           c = team.league_rank() % r;
        double sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n),
            [&](std::int64_t i, double& s) {
              double const w = j == 0   ? 1.0
                               : j == 1 ? double(own(0, i))
                                        : double(factor(0, i, j - 2));
              s += w * x(i, c);
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&] { out(j, c) = sum; });
      });
}

// cost_x(i, c) = Σ_k C_ik X'(k, c) from the other side's moments:
// own_i·Σ_k X'_kc + Σ_k own'_k X'_kc − Σ_m factor_im Σ_k factor'_km X'_kc
// (the cost u_i + v_k − P_i·Q_k), plus β Σ_k L_ik X'_kc where a dense
// linear cost L is given (`transpose`: L_ki, for the target side).
template <class T, class Space>
void cost_times(const Space& space, const OTView2<const T, Space>& own,
                const OTView3<const T, Space>& factor,
                const CouplingMatrix<Space>& moments,
                const PlanTerms<T, Space>& terms, bool transpose,
                const CouplingMatrix<Space>& other,
                const CouplingMatrix<Space>& out) {
  std::int64_t const n = out.extent(0), r = out.extent(1),
                     m = std::int64_t(moments.extent(0)) - 2,
                     others = other.extent(0);
  bool const dense = terms.linear.extent(0) > 0;
  auto const linear = terms.linear;
  double const beta = double(terms.linear_weight);
  Kokkos::parallel_for(
      "softwave::gw::coupling_cost_times",
      Kokkos::RangePolicy<Space>(space, 0, n * r),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const i = q / r, c = q % r;
        double s = double(own(0, i)) * moments(0, c) + moments(1, c);
        for (std::int64_t j = 0; j < m; ++j)
          s -= double(factor(0, i, j)) * moments(2 + j, c);
        if (dense) {
          double l = 0;
          for (std::int64_t k = 0; k < others; ++k)
            l += double(transpose ? linear(k, i) : linear(i, k)) * other(k, c);
          s += beta * l;
        }
        out(i, c) = s;
      });
}

// The coupling of GwOptions::coupling_rank, kept across one restart's
// iterations (each solve starts from the last).
template <class T, class Space>
struct LowRankCoupling {
  std::int64_t n, k;
  int rank;
  CouplingMatrix<Space> q, r;        // Q (N, r), R (K, r)
  CouplingVector<Space> g;           // (r)
  CouplingVector<Space> a, b;        // the marginals
  CouplingMatrix<Space> xi_q, xi_r;  // C R, then the step's kernels
  CouplingMatrix<Space> moments_q, moments_r;
  // Per-r vectors of the step and of Dykstra's projections.
  CouplingMatrix<Space> vectors;
  CouplingVector<Space> u_q, u_r;  // (N), (K): the row scalings
  double mass = 1;

  // Rows of `vectors`.
  enum Row {
    kXi = 0,  // the kernel of g
    kOmega,   // diag(Qᵀ C R)
    kV1,
    kV2,
    kQ1,
    kQ2,
    kQ31,
    kQ32,
    kS1,  // ξ_Qᵀ u_Q
    kS2,
    kRows
  };

  LowRankCoupling(const Space& space, std::int64_t n_, std::int64_t k_,
                  int rank_, std::int64_t cost_columns)
      : n(n_),
        k(k_),
        rank(rank_),
        q(uninitialised<double**>(space, "softwave::gw::coupling_q", n, rank)),
        r(uninitialised<double**>(space, "softwave::gw::coupling_r", k, rank)),
        g(uninitialised<double*>(space, "softwave::gw::coupling_g", rank)),
        a(uninitialised<double*>(space, "softwave::gw::coupling_a", n)),
        b(uninitialised<double*>(space, "softwave::gw::coupling_b", k)),
        xi_q(uninitialised<double**>(space, "softwave::gw::coupling_xi_q", n,
                                     rank)),
        xi_r(uninitialised<double**>(space, "softwave::gw::coupling_xi_r", k,
                                     rank)),
        moments_q(uninitialised<double**>(
            space, "softwave::gw::coupling_moments_q", cost_columns + 2, rank)),
        moments_r(uninitialised<double**>(
            space, "softwave::gw::coupling_moments_r", cost_columns + 2, rank)),
        vectors(uninitialised<double**>(space, "softwave::gw::coupling_vectors",
                                        int(kRows), rank)),
        u_q(uninitialised<double*>(space, "softwave::gw::coupling_u_q", n)),
        u_r(uninitialised<double*>(space, "softwave::gw::coupling_u_r", k)) {}

  // The marginals as doubles (empty: uniform), and the fixed start.
  void start(const Space& space, const OTView1<const T, Space>& weights_a,
             const OTView1<const T, Space>& weights_b, double mass_a) {
    mass = mass_a;  // b's too: a balanced problem's masses agree
    marginal(space, weights_a, a);
    marginal(space, weights_b, b);
    start_factor(space, a, q);
    start_factor(space, b, r);
    Kokkos::deep_copy(space, g, mass / rank);
  }

  // (Public: nvcc refuses device lambdas in private member functions.)
  void marginal(const Space& space, const OTView1<const T, Space>& weights,
                const CouplingVector<Space>& out) const {
    std::int64_t const count = out.extent(0);
    bool const uniform = weights.extent(0) == 0;
    Kokkos::parallel_for(
        "softwave::gw::coupling_marginal",
        Kokkos::RangePolicy<Space>(space, 0, count),
        KOKKOS_LAMBDA(std::int64_t i) {
          out(i) = uniform ? 1.0 / double(count) : double(weights(i));
        });
  }
  // X_ic = w_i (1 + φ_ic) / Σ_c (1 + φ_ic), φ_ic = frac((i·r + c)·φ), φ
  // the golden ratio's fractional part: rows of mass w_i whose columns
  // differ (equal columns would stay equal under every step).
  void start_factor(const Space& space, const CouplingVector<Space>& w,
                    const CouplingMatrix<Space>& x) const {
    std::int64_t const r_ = x.extent(1);
    Kokkos::parallel_for(
        "softwave::gw::coupling_start",
        Kokkos::RangePolicy<Space>(space, 0, x.extent(0)),
        KOKKOS_LAMBDA(std::int64_t i) {
          double total = 0;
          for (std::int64_t c = 0; c < r_; ++c) {
            double const t = double(i * r_ + c) * 0.6180339887498949;
            double const e = 1 + (t - compat::floor(t));
            x(i, c) = e;
            total += e;
          }
          for (std::int64_t c = 0; c < r_; ++c) x(i, c) *= w(i) / total;
        });
  }

  // The step's kernel of one side in place of its cost product:
  // log ξ_ic = −γ (CX)_ic / g_c − (γε − 1) log X_ic, less its row's largest
  // (a row's scale is the projection's to set).
  void side_kernel(const Space& space, const CouplingMatrix<Space>& x,
                   const CouplingMatrix<Space>& xi, double gamma,
                   double eps) const {
    auto const g_ = g;
    std::int64_t const r_ = x.extent(1);
    double const keep = gamma * eps - 1;
    Kokkos::parallel_for(
        "softwave::gw::coupling_kernel",
        Kokkos::RangePolicy<Space>(space, 0, x.extent(0)),
        KOKKOS_LAMBDA(std::int64_t i) {
          double top = -INFINITY;
          for (std::int64_t c = 0; c < r_; ++c) {
            double const e = -gamma * xi(i, c) / g_(c) -
                             keep * compat::log(compat::fmax(x(i, c), 1e-300));
            xi(i, c) = e;
            top = compat::fmax(top, e);
          }
          for (std::int64_t c = 0; c < r_; ++c)
            xi(i, c) = compat::exp(xi(i, c) - top);
        });
  }

  // max_ic |(CX)_ic / g_c + ε log X_ic|: the step's gradient on one side.
  double gradient_size(const Space& space, const CouplingMatrix<Space>& x,
                       const CouplingMatrix<Space>& cx, double eps) const {
    auto const g_ = g;
    std::int64_t const r_ = x.extent(1);
    double largest = 0;
    Kokkos::parallel_reduce(
        "softwave::gw::coupling_gradient",
        Kokkos::RangePolicy<Space>(space, 0, x.extent(0) * r_),
        KOKKOS_LAMBDA(std::int64_t e, double& out) {
          std::int64_t const i = e / r_, c = e % r_;
          double const v =
              compat::fabs(cx(i, c) / g_(c) +
                           eps * compat::log(compat::fmax(x(i, c), 1e-300)));
          if (v > out) out = v;
        },
        Kokkos::Max<double>(largest));
    return largest;
  }

  // u = w / (ξ v) on one side's rows.
  void row_scaling(const Space& space, const CouplingMatrix<Space>& xi,
                   const CouplingVector<Space>& w, int v_row,
                   const CouplingVector<Space>& u) const {
    auto const vs = vectors;
    std::int64_t const r_ = xi.extent(1);
    Kokkos::parallel_for(
        "softwave::gw::coupling_row_scaling",
        Kokkos::RangePolicy<Space>(space, 0, xi.extent(0)),
        KOKKOS_LAMBDA(std::int64_t i) {
          double s = 0;
          for (std::int64_t c = 0; c < r_; ++c) s += xi(i, c) * vs(v_row, c);
          u(i) = w(i) / compat::fmax(s, 1e-300);
        });
  }

  // vectors(row, c) = Σ_i ξ_ic u_i, u a vector or (ω) a matrix's column
  // c (a team per column).
  template <class Weights>
  void column_sums(const Space& space, const CouplingMatrix<Space>& xi,
                   const Weights& u, int row) const {
    using Policy = Kokkos::TeamPolicy<Space>;
    auto const vs = vectors;
    std::int64_t const count = xi.extent(0);
    Kokkos::parallel_for(
        "softwave::gw::coupling_column_sums",
        Policy(space, xi.extent(1), Kokkos::AUTO),
        KOKKOS_LAMBDA(const typename Policy::member_type& team) {
          std::int64_t const c = team.league_rank();
          double sum = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, count),
              [&](std::int64_t i, double& s) {
                s += xi(i, c) * weight_at(u, i, c);
              },
              sum);
          Kokkos::single(Kokkos::PerTeam(team), [&] { vs(row, c) = sum; });
        });
  }

  // Σ_i |u_i (ξ v)_i − w_i| on one side.
  double marginal_error(const Space& space, const CouplingMatrix<Space>& xi,
                        const CouplingVector<Space>& w, int v_row,
                        const CouplingVector<Space>& u) const {
    auto const vs = vectors;
    std::int64_t const r_ = xi.extent(1);
    double error = 0;
    Kokkos::parallel_reduce(
        "softwave::gw::coupling_marginal_error",
        Kokkos::RangePolicy<Space>(space, 0, xi.extent(0)),
        KOKKOS_LAMBDA(std::int64_t i, double& out) {
          double s = 0;
          for (std::int64_t c = 0; c < r_; ++c) s += xi(i, c) * vs(v_row, c);
          out += compat::fabs(u(i) * s - w(i));
        },
        error);
    return error;
  }

  // X = diag(u) ξ diag(v).
  void scaled_factor(const Space& space, const CouplingMatrix<Space>& xi,
                     const CouplingVector<Space>& u, int v_row,
                     const CouplingMatrix<Space>& x) const {
    auto const vs = vectors;
    std::int64_t const r_ = xi.extent(1);
    Kokkos::parallel_for(
        "softwave::gw::coupling_scaled_factor",
        Kokkos::RangePolicy<Space>(space, 0, xi.extent(0) * r_),
        KOKKOS_LAMBDA(std::int64_t e) {
          std::int64_t const i = e / r_, c = e % r_;
          x(i, c) = u(i) * xi(i, c) * vs(v_row, c);
        });
  }

  // Dykstra's projection of (ξ_Q, ξ_R, ξ_g) onto {Q1 = a, R1 = b, g >=
  // floor} ∩ {Qᵀ1 = Rᵀ1 = g}, into q, r, g.
  void project(const Space& space, const GwOptions& o) {
    auto const vs = vectors;
    auto const g_ = g;
    double const floor = 1e-10 * mass;
    Kokkos::parallel_for(
        "softwave::gw::coupling_dykstra_start",
        Kokkos::RangePolicy<Space>(space, 0, rank), KOKKOS_LAMBDA(int c) {
          g_(c) = vs(kXi, c);
          vs(kV1, c) = vs(kV2, c) = vs(kQ1, c) = vs(kQ2, c) = 1;
          vs(kQ31, c) = vs(kQ32, c) = 1;
        });
    for (int step = 0; step < o.dykstra_iterations; ++step) {
      // Onto the rows' marginals and g's floor.
      row_scaling(space, xi_q, a, kV1, u_q);
      row_scaling(space, xi_r, b, kV2, u_r);
      column_sums(space, xi_q, u_q, kS1);
      column_sums(space, xi_r, u_r, kS2);
      // Then onto the shared column sums g (a thread per column).
      Kokkos::parallel_for(
          "softwave::gw::coupling_dykstra_columns",
          Kokkos::RangePolicy<Space>(space, 0, rank), KOKKOS_LAMBDA(int c) {
            double const tiny = 1e-300;
            double g1 = compat::fmax(floor, g_(c) * vs(kQ31, c));
            vs(kQ31, c) = g_(c) * vs(kQ31, c) / compat::fmax(g1, tiny);
            double const s1 = compat::fmax(vs(kS1, c), tiny),
                         s2 = compat::fmax(vs(kS2, c), tiny);
            double const p1 = vs(kV1, c) * vs(kQ1, c) * s1,
                         p2 = vs(kV2, c) * vs(kQ2, c) * s2;
            double const g2 =
                compat::fmax(compat::cbrt(g1 * vs(kQ32, c) * p1 * p2), tiny);
            double const v1 = g2 / s1, v2 = g2 / s2;
            vs(kQ1, c) = vs(kV1, c) * vs(kQ1, c) / v1;
            vs(kQ2, c) = vs(kV2, c) * vs(kQ2, c) / v2;
            vs(kQ32, c) = g1 * vs(kQ32, c) / g2;
            vs(kV1, c) = v1;
            vs(kV2, c) = v2;
            g_(c) = g2;
          });
      if ((step + 1) % 10 == 0 || step + 1 == o.dykstra_iterations) {
        double const error = marginal_error(space, xi_q, a, kV1, u_q) +
                             marginal_error(space, xi_r, b, kV2, u_r);
        if (error <= o.dykstra_tolerance * mass) break;
      }
    }
    scaled_factor(space, xi_q, u_q, kV1, q);
    scaled_factor(space, xi_r, u_r, kV2, r);
  }

  // coupling_iterations mirror steps on the cost of `slot` (its low-rank
  // factors and the terms' dense linear cost) at ε.
  void solve(const Space& space, const PlanTerms<T, Space>& terms, int slot,
             double eps, const GwOptions& o) {
    auto const cost = terms.cost(slot);
    auto const vs = vectors;
    auto const g_ = g;
    std::int64_t const r_ = rank;
    for (int step = 0; step < o.coupling_iterations; ++step) {
      // C R and Cᵀ Q, and ω = diag(Qᵀ C R).
      side_moments(space, cost.v, cost.q, r, moments_r);
      side_moments(space, cost.u, cost.p, q, moments_q);
      cost_times(space, cost.u, cost.p, moments_r, terms, false, r, xi_q);
      cost_times(space, cost.v, cost.q, moments_q, terms, true, q, xi_r);
      column_sums(space, xi_q, q, kOmega);
      // The step: γ from the gradients' largest entry.
      double largest_g = 0;
      Kokkos::parallel_reduce(
          "softwave::gw::coupling_gradient_g",
          Kokkos::RangePolicy<Space>(space, 0, r_),
          KOKKOS_LAMBDA(int c, double& out) {
            double const v =
                compat::fabs(-vs(kOmega, c) / (g_(c) * g_(c)) +
                             eps * compat::log(compat::fmax(g_(c), 1e-300)));
            if (v > out) out = v;
          },
          Kokkos::Max<double>(largest_g));
      double const largest =
          std::max({gradient_size(space, q, xi_q, eps),
                    gradient_size(space, r, xi_r, eps), largest_g});
      // Scetbon et al.'s adaptive step. (TorchGW also keeps γ >= 1/ε; at
      // small ε that step overshoots: on 1-D points the transport cost rose
      // from the independent coupling's 0.167 to 0.26 over 50 steps.)
      double const gamma =
          largest > 0 ? o.coupling_step / (largest * largest) : 1.0 / eps;
      side_kernel(space, q, xi_q, gamma, eps);
      side_kernel(space, r, xi_r, gamma, eps);
      double const keep = gamma * eps - 1;
      // ξ_g = g^(1 − γε) exp(γ ω / g²), scaled by its largest (the mass of
      // g is fixed by a's, so the projection ignores a common factor).
      double top = -INFINITY;
      Kokkos::parallel_reduce(
          "softwave::gw::coupling_xi_g_top",
          Kokkos::RangePolicy<Space>(space, 0, r_),
          KOKKOS_LAMBDA(int c, double& out) {
            double const e = gamma * vs(kOmega, c) / (g_(c) * g_(c)) -
                             keep * compat::log(compat::fmax(g_(c), 1e-300));
            if (e > out) out = e;
          },
          Kokkos::Max<double>(top));
      Kokkos::parallel_for(
          "softwave::gw::coupling_xi_g",
          Kokkos::RangePolicy<Space>(space, 0, r_), KOKKOS_LAMBDA(int c) {
            double const e = gamma * vs(kOmega, c) / (g_(c) * g_(c)) -
                             keep * compat::log(compat::fmax(g_(c), 1e-300));
            vs(kXi, c) = compat::exp(e - top);
          });
      project(space, o);
    }
  }

  // The slot's factors as the coupling's: p_ic = Q_ic / √g_c, q_kc =
  // R_kc / √g_c in the first r columns, 0 in the rest (so that
  // P_i·Q_k = Σ_c Q_ic R_kc / g_c, the plan's entry).
  void write(const Space& space, const PlanTerms<T, Space>& terms,
             int slot) const {
    write_side(space, q, terms.factor(terms.p, slot));
    write_side(space, r, terms.factor(terms.q, slot));
  }
  void write_side(const Space& space, const CouplingMatrix<Space>& x,
                  const OTView3<T, Space>& factor) const {
    auto const g_ = g;
    std::int64_t const r_ = x.extent(1), width = factor.extent(2);
    Kokkos::parallel_for(
        "softwave::gw::coupling_write",
        Kokkos::RangePolicy<Space>(space, 0, factor.extent(1) * width),
        KOKKOS_LAMBDA(std::int64_t e) {
          std::int64_t const i = e / width, c = e % width;
          factor(0, i, c) = c < r_ ? T(x(i, c) / compat::sqrt(g_(c))) : T(0);
        });
  }
};

}  // namespace softwave::impl
