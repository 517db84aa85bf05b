#pragma once
// One side's distances as a device function, and the exact GW objective
// (square loss) of a dense plan.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <softwave/gw.hpp>
#include <softwave/kokkos_compat.hpp>
#include <string>

#include "../common/call_memory.hpp"

namespace softwave::impl {

// D(i, j) of a GwDistances: the matrix entry, or ‖z_i − z_j‖₂ in float64.
template <class T, class Space>
struct SideDistances {
  OTView2<const T, Space> matrix, coordinates;
  bool dense = false;

  explicit SideDistances(const GwDistances<T, Space>& d)
      : matrix(d.matrix),
        coordinates(d.coordinates),
        dense(d.matrix.extent(0) > 0) {}
  std::int64_t size() const {
    return dense ? matrix.extent(0) : coordinates.extent(0);
  }
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t i,
                                           std::int64_t j) const {
    if (dense) return matrix(i, j);
    double s = 0;
    for (std::size_t e = 0; e < coordinates.extent(1); ++e) {
      double const diff = double(coordinates(i, e)) - coordinates(j, e);
      s += diff * diff;
    }
    return compat::sqrt(s);
  }
};

// Σ_ij D(i, j)² w_i w_j.
template <class T, class Space, class Weights>
double weighted_squares(const Space& space, const SideDistances<T, Space>& d,
                        const Weights& w, const char* side) {
  std::int64_t const n = w.extent(0);
  double total = 0;
  Kokkos::parallel_reduce(
      std::string("softwave::gw::objective_") + side,
      Kokkos::RangePolicy<Space>(space, 0, n),
      KOKKOS_LAMBDA(std::int64_t i, double& out) {
        double s = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          double const x = d(i, j);
          s += x * x * w(j);
        }
        out += w(i) * s;
      },
      total);
  return total;
}

// The GW objective's three sums (below), so that it can be had for the
// distances scaled by 1/s_X and 1/s_Y without a second pass.
struct GwObjectiveParts {
  double source = 0, target = 0, cross = 0;
  double value(double source_scale = 1, double target_scale = 1) const {
    return source / (source_scale * source_scale) +
           target / (target_scale * target_scale) -
           2 * cross / (source_scale * target_scale);
  }
};

// Σ_ijkl (D_X(i,j) − D_Y(k,l))² T_ik T_jl
//   = Σ_ij D_X² r_i r_j + Σ_kl D_Y² c_k c_l − 2 Σ_ik T_ik (D_X T D_Y)_ik
// with r = T1, c = Tᵀ1: O(N²K + NK²) work, one N×K float64 temporary.
template <class T, class Space>
GwObjectiveParts gw_objective(const Space& space,
                              const SideDistances<T, Space>& dx,
                              const SideDistances<T, Space>& dy,
                              const OTView2<const T, Space>& plan) {
  using Memory = typename Space::memory_space;
  using Range = Kokkos::RangePolicy<Space>;
  std::int64_t const n = plan.extent(0), k = plan.extent(1);
  auto const r_memory = call_array<Kokkos::View<double*, Memory>>(
      space, "softwave::gw::objective_rows", false, n);
  auto const c_memory = call_array<Kokkos::View<double*, Memory>>(
      space, "softwave::gw::objective_columns", false, k);
  auto const e_memory =
      call_array<Kokkos::View<double**, Kokkos::LayoutRight, Memory>>(
          space, "softwave::gw::objective_plan_dy", false, n, k);
  auto const r = r_memory.view;
  auto const c = c_memory.view;
  auto const e = e_memory.view;
  Kokkos::parallel_for(
      "softwave::gw::objective_rows", Range(space, 0, n),
      KOKKOS_LAMBDA(std::int64_t i) {
        double s = 0;
        for (std::int64_t j = 0; j < k; ++j) s += plan(i, j);
        r(i) = s;
      });
  Kokkos::parallel_for(
      "softwave::gw::objective_columns", Range(space, 0, k),
      KOKKOS_LAMBDA(std::int64_t j) {
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += plan(i, j);
        c(j) = s;
      });
  // E = T D_Y.
  Kokkos::parallel_for(
      "softwave::gw::objective_plan_dy", Range(space, 0, n * k),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const i = q / k, j = q % k;
        double s = 0;
        for (std::int64_t l = 0; l < k; ++l) s += plan(i, l) * dy(l, j);
        e(i, j) = s;
      });
  double cross = 0;
  double const source = weighted_squares(space, dx, r, "source");
  double const target = weighted_squares(space, dy, c, "target");
  // Σ_ik T_ik (D_X E)_ik.
  Kokkos::parallel_reduce(
      "softwave::gw::objective_cross", Range(space, 0, n * k),
      KOKKOS_LAMBDA(std::int64_t q, double& out) {
        std::int64_t const i = q / k, j = q % k;
        double s = 0;
        for (std::int64_t l = 0; l < n; ++l) s += dx(i, l) * e(l, j);
        out += plan(i, j) * s;
      },
      cross);
  return {source, target, cross};
}

// ⟨C, T⟩ of fused GW's linear cost and a dense plan, in float64.
template <class T, class Space>
double linear_objective(const Space& space,
                        const GwLinearCost<T, Space>& linear,
                        const OTView2<const T, Space>& plan) {
  std::int64_t const k = plan.extent(1);
  auto const c = linear.matrix;
  auto const f = linear.source_features, g = linear.target_features;
  std::int64_t const e = f.extent(1);
  double total = 0;
  Kokkos::parallel_reduce(
      "softwave::gw::linear_objective",
      Kokkos::RangePolicy<Space>(space, 0, plan.extent(0) * k),
      KOKKOS_LAMBDA(std::int64_t q, double& out) {
        std::int64_t const i = q / k, j = q % k;
        double cost = 0;
        if (c.extent(0)) {
          cost = c(i, j);
        } else {
          for (std::int64_t d = 0; d < e; ++d) {
            double const diff = double(f(i, d)) - double(g(j, d));
            cost += diff * diff;
          }
        }
        out += cost * double(plan(i, j));
      },
      total);
  return total;
}

}  // namespace softwave::impl
