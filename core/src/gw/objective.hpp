#pragma once
// One side's distances as a device function, and the exact GW objective
// (square loss) of a dense plan.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <softwave/gw.hpp>
#include <softwave/kokkos_compat.hpp>
#include <string>
#include <utility>

#include "../common/call_memory.hpp"
#include "plan_terms.hpp"

namespace softwave::impl {

// D(i, j) of a GwDistances: the matrix entry, or ‖z_i − z_j‖₂ (squared
// for squared coordinates) in float64.
template <class T, class Space>
struct SideDistances {
  OTView2<const T, Space> matrix, coordinates;
  // Coordinates' distances formed once in float64 (formed_distances), read
  // in their place.
  OTView2<const double, Space> formed;
  bool dense = false, squared = false;

  explicit SideDistances(const GwDistances<T, Space>& d)
      : matrix(d.matrix),
        coordinates(d.squared_coordinates.extent(0) > 0 ? d.squared_coordinates
                                                        : d.coordinates),
        dense(d.matrix.extent(0) > 0),
        squared(d.squared_coordinates.extent(0) > 0) {}
  std::int64_t size() const {
    return dense ? matrix.extent(0) : coordinates.extent(0);
  }
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t i,
                                           std::int64_t j) const {
    if (dense) return matrix(i, j);
    if (formed.extent(0) > 0) return formed(i, j);
    double s = 0;
    for (std::size_t e = 0; e < coordinates.extent(1); ++e) {
      double const diff = double(coordinates(i, e)) - coordinates(j, e);
      s += diff * diff;
    }
    return squared ? s : compat::sqrt(s);
  }
};

// A side given by coordinates with its distances formed once, in float64
// (O(N²·L) work, N² doubles): the exact objective reads every distance
// K + 1 times and each exact iteration once more, O(N²K·L) work when each
// read computes it from the coordinates. The same values either way.
template <class T, class Space>
SideDistances<T, Space> formed_distances(const Space& space,
                                         const SideDistances<T, Space>& side,
                                         const char* label) {
  std::int64_t const n = side.size();
  auto const out = uninitialised<double**>(space, label, n, n);
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<Space>(space, 0, n * n),
      KOKKOS_LAMBDA(std::int64_t q) {
        out(q / n, q % n) = side(q / n, q % n);
      });
  SideDistances<T, Space> formed = side;
  formed.formed = out;
  return formed;
}

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

// r = T1 and c = Tᵀ1 of a dense plan T (N×K), in float64.
template <class T, class Space, class Rows, class Columns>
void plan_marginals(const Space& space, const OTView2<const T, Space>& plan,
                    const Rows& r, const Columns& c) {
  using Range = Kokkos::RangePolicy<Space>;
  std::int64_t const n = plan.extent(0), k = plan.extent(1);
  Kokkos::parallel_for(
      "softwave::gw::plan_rows", Range(space, 0, n),
      KOKKOS_LAMBDA(std::int64_t i) {
        double s = 0;
        for (std::int64_t j = 0; j < k; ++j) s += plan(i, j);
        r(i) = s;
      });
  Kokkos::parallel_for(
      "softwave::gw::plan_columns", Range(space, 0, k),
      KOKKOS_LAMBDA(std::int64_t j) {
        double s = 0;
        for (std::int64_t i = 0; i < n; ++i) s += plan(i, j);
        c(j) = s;
      });
}

// E = T D_Y · scale (N×K, float64) of a dense plan T: O(NK²).
template <class T, class Space, class Out>
void plan_times_distances(const Space& space,
                          const OTView2<const T, Space>& plan,
                          const SideDistances<T, Space>& dy, double scale,
                          const Out& e, const char* label) {
  std::int64_t const n = plan.extent(0), k = plan.extent(1);
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<Space>(space, 0, n * k),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const i = q / k, j = q % k;
        double s = 0;
        for (std::int64_t l = 0; l < k; ++l) s += plan(i, l) * dy(l, j);
        e(i, j) = s * scale;
      });
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
  plan_marginals(space, plan, r, c);
  plan_times_distances(space, plan, dy, 1.0, e,
                       "softwave::gw::objective_plan_dy");
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

// The GW objective estimated from S pairs p_s = (i_s, k_s) drawn from a
// plan of mass μ (side x's points at x_index(s), y's at y_index(s)): the
// U-statistics over s ≠ t of D_X(i_s, i_t)², D_Y(k_s, k_t)² and their
// product, times μ² (unbiased for pairs drawn from the plan), and the
// objective's standard error by Hoeffding's decomposition, 2·sd(g)/√S
// with g_s the mean over t ≠ s of (D_X − D_Y)².
struct SampledObjective {
  GwObjectiveParts parts;
  double error = NAN;
};

template <class T, class Space, class Index>
SampledObjective sampled_gw_objective(const Space& space,
                                      const SideDistances<T, Space>& dx,
                                      const Index& x_index,
                                      const SideDistances<T, Space>& dy,
                                      const Index& y_index, double mass) {
  std::int64_t const count = x_index.extent(0);
  // Each s's sums over t (D_X², D_Y², D_X·D_Y, (D_X − D_Y)²), added up on
  // the host: S rows.
  auto const rows_memory =
      call_array<Kokkos::View<double* [4], Kokkos::LayoutRight,
                              typename Space::memory_space>>(
          space, "softwave::gw::sampled_objective", false, count);
  auto const rows = rows_memory.view;
  Kokkos::parallel_for(
      "softwave::gw::sampled_objective",
      Kokkos::RangePolicy<Space>(space, 0, count),
      KOKKOS_LAMBDA(std::int64_t s) {
        double xx = 0, yy = 0, xy = 0, h = 0;
        for (std::int64_t t = 0; t < count; ++t) {
          if (t == s) continue;
          double const x = dx(x_index(s), x_index(t)),
                       y = dy(y_index(s), y_index(t));
          xx += x * x;
          yy += y * y;
          xy += x * y;
          h += (x - y) * (x - y);
        }
        rows(s, 0) = xx, rows(s, 1) = yy, rows(s, 2) = xy, rows(s, 3) = h;
      });
  auto const host =
      compat::host_mirror("softwave::gw::sampled_objective_host", rows);
  Kokkos::deep_copy(space, host, rows);
  space.fence();
  double xx = 0, yy = 0, xy = 0, g_sum = 0, g_squares = 0;
  for (std::int64_t s = 0; s < count; ++s) {
    xx += host(s, 0), yy += host(s, 1), xy += host(s, 2);
    double const g = host(s, 3) / double(count - 1);
    g_sum += g, g_squares += g * g;
  }
  double const pairs = double(count) * double(count - 1), scale = mass * mass;
  SampledObjective out;
  out.parts = {scale * xx / pairs, scale * yy / pairs, scale * xy / pairs};
  double const mean = g_sum / double(count);
  double const variance = std::max(
      0.0, (g_squares - double(count) * mean * mean) / double(count - 1));
  out.error = scale * 2 * std::sqrt(variance / double(count));
  return out;
}

// C(i, j) of fused GW's linear cost on the device, in float64: the
// matrix's entry, or ‖F_i − G_j‖² of the features.
template <class T, class Space>
struct LinearCostAt {
  OTView2<const T, Space> c, f, g;
  explicit LinearCostAt(const GwLinearCost<T, Space>& linear)
      : c(linear.matrix),
        f(linear.source_features),
        g(linear.target_features) {}
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t i,
                                           std::int64_t j) const {
    if (c.extent(0)) return c(i, j);
    double sum = 0;
    for (std::size_t d = 0; d < f.extent(1); ++d) {
      double const diff = double(f(i, d)) - double(g(j, d));
      sum += diff * diff;
    }
    return sum;
  }
};

// ⟨C, T⟩ of fused GW's linear cost and a dense plan, in float64.
template <class T, class Space>
double linear_objective(const Space& space,
                        const GwLinearCost<T, Space>& linear,
                        const OTView2<const T, Space>& plan) {
  std::int64_t const k = plan.extent(1);
  LinearCostAt<T, Space> const cost(linear);
  double total = 0;
  Kokkos::parallel_reduce(
      "softwave::gw::linear_objective",
      Kokkos::RangePolicy<Space>(space, 0, plan.extent(0) * k),
      KOKKOS_LAMBDA(std::int64_t q, double& out) {
        std::int64_t const i = q / k, j = q % k;
        out += cost(i, j) * double(plan(i, j));
      },
      total);
  return total;
}

// ⟨C, T⟩ estimated from S pairs drawn from a plan of mass μ: μ·mean_s
// C(i_s, k_s), and its standard error μ·sd/√S.
template <class T, class Space, class Index>
std::pair<double, double> sampled_linear_objective(
    const Space& space, const GwLinearCost<T, Space>& linear, const Index& rows,
    const Index& columns, double mass) {
  std::int64_t const count = rows.extent(0);
  LinearCostAt<T, Space> const cost(linear);
  auto const costs_memory =
      call_array<Kokkos::View<double*, typename Space::memory_space>>(
          space, "softwave::gw::sampled_linear_objective", false, count);
  auto const costs = costs_memory.view;
  Kokkos::parallel_for(
      "softwave::gw::sampled_linear_objective",
      Kokkos::RangePolicy<Space>(space, 0, count),
      KOKKOS_LAMBDA(std::int64_t s) {
        std::int64_t const i = rows(s), j = columns(s);
        costs(s) = cost(i, j);
      });
  auto const host =
      compat::host_mirror("softwave::gw::sampled_linear_objective_host", costs);
  Kokkos::deep_copy(space, host, costs);
  space.fence();
  double sum = 0, squares = 0;
  for (std::int64_t s = 0; s < count; ++s)
    sum += host(s), squares += host(s) * host(s);
  double const mean = sum / double(count);
  double const variance =
      count > 1 ? std::max(0.0, (squares - double(count) * mean * mean) /
                                    double(count - 1))
                : 0.0;
  return {mass * mean, mass * std::sqrt(variance / double(count))};
}

}  // namespace softwave::impl
