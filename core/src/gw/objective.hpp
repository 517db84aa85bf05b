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
    return from_coordinates(i,
                            [&](std::size_t e) { return coordinates(j, e); });
  }
  // A coordinates side's distance from point i to the point whose
  // coordinate e is other(e).
  template <class Other>
  KOKKOS_INLINE_FUNCTION double from_coordinates(std::int64_t i,
                                                 const Other& other) const {
    double s = 0;
    for (std::size_t e = 0; e < coordinates.extent(1); ++e) {
      double const diff = double(coordinates(i, e)) - double(other(e));
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

// The dense products of the exact objective and the exact iterations,
// C = A·B (rows × columns, summed over `inner`) a tile at a time, in
// float64: each entry goes to finish(i, j, c) (tiled_product below).
// left(i, l) and right(l, j) read the factors. A plain loop per entry reads
// one factor down its columns, N·K times over: on two CPU cores the exact
// objective of a 2,000 × 2,500 plan took 23.0 s that way and 2.5–2.7 s
// tiled. On a device a team of 16 × 16 threads makes a 64 × 64 tile, each
// thread 4 × 4 entries from 16-long pieces of both factors staged in scratch;
// on the host a team is one thread making 8 × 8 entries from the factors in
// place (one row of B a step, eight of A).
template <class Space>
struct ProductTile {
  static constexpr bool kStaged =
      !Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                  typename Space::memory_space>::accessible;
  static constexpr int kThreadRows = kStaged ? 16 : 1;
  static constexpr int kThreadColumns = kStaged ? 16 : 1;
  static constexpr int kRowsEach = kStaged ? 4 : 8;
  static constexpr int kColumnsEach = kStaged ? 4 : 8;
  static constexpr int kRows = kThreadRows * kRowsEach;
  static constexpr int kColumns = kThreadColumns * kColumnsEach;
  static constexpr int kTeam = kThreadRows * kThreadColumns;
  static constexpr int kPiece = 16;
  // A's piece is stored a column at a time, padded (its loads run along
  // rows of A, so consecutive threads write consecutive columns).
  static constexpr int kLeftStride = kRows + 1;
  static constexpr std::size_t kScratchBytes =
      kStaged ? (kPiece * kLeftStride + kPiece * kColumns) * sizeof(double) : 0;

  // c[e][f] = Σ_l A(i0 + y + kThreadRows·e, l) B(l, j0 + x + kThreadColumns·f)
  // for the thread (y, x) of the tile at (i0, j0); every thread of the team
  // calls it. (A function of its own: a device lambda may not capture
  // variables inside `if constexpr`.)
  template <class Member, class Left, class Right>
  KOKKOS_INLINE_FUNCTION static void accumulate(
      const Member& team, std::int64_t i0, std::int64_t j0, int y, int x,
      std::int64_t rows, std::int64_t columns, std::int64_t inner,
      const Left& left, const Right& right,
      double (&c)[kRowsEach][kColumnsEach]) {
    double a[kRowsEach], b[kColumnsEach];
    if constexpr (kStaged) {
      auto* const a_piece = static_cast<double*>(team.team_scratch(0).get_shmem(
          kPiece * kLeftStride * sizeof(double)));
      auto* const b_piece = static_cast<double*>(
          team.team_scratch(0).get_shmem(kPiece * kColumns * sizeof(double)));
      for (std::int64_t l0 = 0; l0 < inner; l0 += kPiece) {
        team.team_barrier();  // the last piece is spent
        for (int q = team.team_rank(); q < kRows * kPiece; q += kTeam) {
          int const r = q / kPiece, l = q % kPiece;
          bool const inside = i0 + r < rows && l0 + l < inner;
          a_piece[l * kLeftStride + r] =
              inside ? double(left(i0 + r, l0 + l)) : 0.0;
        }
        for (int q = team.team_rank(); q < kPiece * kColumns; q += kTeam) {
          int const l = q / kColumns, s = q % kColumns;
          bool const inside = l0 + l < inner && j0 + s < columns;
          b_piece[q] = inside ? double(right(l0 + l, j0 + s)) : 0.0;
        }
        team.team_barrier();
        for (int l = 0; l < kPiece; ++l) {
          for (int e = 0; e < kRowsEach; ++e)
            a[e] = a_piece[l * kLeftStride + y + kThreadRows * e];
          for (int e = 0; e < kColumnsEach; ++e)
            b[e] = b_piece[l * kColumns + x + kThreadColumns * e];
          for (int e = 0; e < kRowsEach; ++e)
            for (int f = 0; f < kColumnsEach; ++f) c[e][f] += a[e] * b[f];
        }
      }
    } else {
      // Rows and columns past the end repeat the last (never finished).
      std::int64_t i[kRowsEach], j[kColumnsEach];
      for (int e = 0; e < kRowsEach; ++e)
        i[e] = i0 + e < rows ? i0 + e : rows - 1;
      for (int e = 0; e < kColumnsEach; ++e)
        j[e] = j0 + e < columns ? j0 + e : columns - 1;
      for (std::int64_t l = 0; l < inner; ++l) {
        for (int e = 0; e < kRowsEach; ++e) a[e] = double(left(i[e], l));
        for (int e = 0; e < kColumnsEach; ++e) b[e] = double(right(l, j[e]));
        for (int e = 0; e < kRowsEach; ++e)
          for (int f = 0; f < kColumnsEach; ++f) c[e][f] += a[e] * b[f];
      }
    }
  }
};

// tiled_product (above): with `summed`, the sum of what finish returns
// comes back (a reduction, which waits for the kernel); without, the call
// only queues the kernel and returns 0.
template <class Space, class Left, class Right, class Finish>
double tiled_product(const Space& space, const char* label, std::int64_t rows,
                     std::int64_t columns, std::int64_t inner, const Left& left,
                     const Right& right, const Finish& finish,
                     bool summed = false) {
  using Tile = ProductTile<Space>;
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  std::int64_t const tile_columns =
      (columns + Tile::kColumns - 1) / Tile::kColumns;
  std::int64_t const tiles =
      (rows + Tile::kRows - 1) / Tile::kRows * tile_columns;
  double total = 0;
  if (tiles == 0) return total;
  auto const policy =
      compat::light_weight(Kokkos::TeamPolicy<Space>(space, tiles, Tile::kTeam))
          .set_scratch_size(0, Kokkos::PerTeam(Tile::kScratchBytes));
  // A team's tile, each thread's entries finished; what the thread's
  // finish calls returned, summed.
  auto const tile = KOKKOS_LAMBDA(const Member& team) {
    std::int64_t const i0 =
        std::int64_t(team.league_rank()) / tile_columns * Tile::kRows;
    std::int64_t const j0 =
        std::int64_t(team.league_rank()) % tile_columns * Tile::kColumns;
    int const y = team.team_rank() / Tile::kThreadColumns;
    int const x = team.team_rank() % Tile::kThreadColumns;
    double c[Tile::kRowsEach][Tile::kColumnsEach] = {};
    Tile::accumulate(team, i0, j0, y, x, rows, columns, inner, left, right, c);
    double partial = 0;
    for (int e = 0; e < Tile::kRowsEach; ++e) {
      std::int64_t const i = i0 + y + Tile::kThreadRows * e;
      if (i >= rows) continue;
      for (int f = 0; f < Tile::kColumnsEach; ++f) {
        std::int64_t const j = j0 + x + Tile::kThreadColumns * f;
        if (j < columns) partial += finish(i, j, c[e][f]);
      }
    }
    return partial;
  };
  if (summed) {
    // Each thread's `out` is its own (a team policy's reduction joins
    // every member's), so each adds its entries' share.
    Kokkos::parallel_reduce(
        label, policy,
        KOKKOS_LAMBDA(const Member& team, double& out) { out += tile(team); },
        total);
  } else {
    Kokkos::parallel_for(
        label, policy, KOKKOS_LAMBDA(const Member& team) { tile(team); });
  }
  return total;
}

// A side's distances as plain reads of one storage: f(read) with read(i, j)
// an entry of its matrix or of its formed float64 copy, or the side itself
// where only coordinates hold them. The products' inner loops then read
// memory without testing the storage every entry (on two CPU cores a
// 2,000 × 2,500 objective took 5.2 s with that test, 2.5–2.7 s without).
template <class View>
struct MatrixRead {
  View matrix;
  KOKKOS_INLINE_FUNCTION double operator()(std::int64_t i,
                                           std::int64_t j) const {
    return double(matrix(i, j));
  }
};

template <class T, class Space, class F>
void with_distance_reads(const SideDistances<T, Space>& side, const F& f) {
  if (side.dense)
    f(MatrixRead<OTView2<const T, Space>>{side.matrix});
  else if (side.formed.extent(0) > 0)
    f(MatrixRead<OTView2<const double, Space>>{side.formed});
  else
    f(side);
}

// E = T D_Y · scale (N×K, float64) of a dense plan T: O(NK²).
template <class T, class Space, class Read, class Out>
void plan_times(const Space& space, const OTView2<const T, Space>& plan,
                const Read& dy, double scale, const Out& e, const char* label) {
  std::int64_t const n = plan.extent(0), k = plan.extent(1);
  tiled_product(
      space, label, n, k, k,
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t l) { return plan(i, l); },
      KOKKOS_LAMBDA(std::int64_t l, std::int64_t j) { return dy(l, j); },
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j, double product) {
        e(i, j) = product * scale;
        return 0.0;
      });
}

template <class T, class Space, class Out>
void plan_times_distances(const Space& space,
                          const OTView2<const T, Space>& plan,
                          const SideDistances<T, Space>& dy, double scale,
                          const Out& e, const char* label) {
  with_distance_reads(dy, [&](const auto& read) {
    plan_times(space, plan, read, scale, e, label);
  });
}

// Σ_ik T_ik (D_X E)_ik.
template <class T, class Space, class Read, class E>
double plan_cross(const Space& space, const Read& dx, const E& e,
                  const OTView2<const T, Space>& plan) {
  std::int64_t const n = plan.extent(0), k = plan.extent(1);
  return tiled_product(
      space, "softwave::gw::objective_cross", n, k, n,
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t l) { return dx(i, l); },
      KOKKOS_LAMBDA(std::int64_t l, std::int64_t j) { return e(l, j); },
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j, double product) {
        return double(plan(i, j)) * product;
      },
      true);
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
  double const source = weighted_squares(space, dx, r, "source");
  double const target = weighted_squares(space, dy, c, "target");
  double cross = 0;
  with_distance_reads(
      dx, [&](const auto& read) { cross = plan_cross(space, read, e, plan); });
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
