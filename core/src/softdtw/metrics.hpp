#pragma once
// The built-in costs (sqeuclidean, l1, cosine) per feature, and the scratch
// vectors their gradients use.

#include "tile_scratch.hpp"

namespace softwave::impl {

// ε of the cosine cost: 1 − x·y / (max(‖x‖, ε) max(‖y‖, ε)).
constexpr acc_t cosine_epsilon = 1e-8;

// What differs between the built-in metrics, per feature: term(x, y) is the
// cost's summand (for cosine the dot product's), and factor(v, u) what E
// multiplies in the gradient of side v against a row u of the other side,
// ∂C/∂v_k = Σ over the other side of E · factor(v_k, u_k), before the
// metric's finishing step in SeriesCost::side_gradient.
template <Cost metric>
struct Metric;

template <>
struct Metric<Cost::sqeuclidean> {
  template <class W>
  KOKKOS_INLINE_FUNCTION static W term(W x, W y) {
    W const diff = x - y;
    return diff * diff;
  }
  // Σ_q e_q · 2(v − u_q). In float the products are of differences, since
  // the expanded 2(v Σ_q e_q − Σ_q e_q u_q) cancels where v ≈ u; double has
  // the digits to spare and takes the expanded form, one operation per term
  // fewer (finished with the E mass in SeriesCost::side_gradient).
  template <class W>
  static constexpr bool expanded = std::is_same_v<W, double>;
  template <class W>
  KOKKOS_INLINE_FUNCTION static W factor(W v, W u) {
    if constexpr (expanded<W>) {
      return u;
    } else {
      return v - u;
    }
  }
};

template <>
struct Metric<Cost::l1> {
  template <class W>
  KOKKOS_INLINE_FUNCTION static W term(W x, W y) {
    W const diff = x - y;
    return diff < 0 ? -diff : diff;
  }
  template <class W>
  KOKKOS_INLINE_FUNCTION static W factor(W v, W u) {
    return v > u ? W(1) : (v < u ? W(-1) : W(0));
  }
};

template <>
struct Metric<Cost::cosine> {
  template <class W>
  KOKKOS_INLINE_FUNCTION static W term(W x, W y) {
    return x * y;
  }
  template <class W>
  KOKKOS_INLINE_FUNCTION static W factor(W, W u) {
    return u;
  }
  // 1/‖v‖_ε from ‖v‖².
  KOKKOS_INLINE_FUNCTION static acc_t inverse_norm(acc_t squared_norm) {
    acc_t const norm = compat::sqrt(squared_norm);
    return 1 / (norm > cosine_epsilon ? norm : cosine_epsilon);
  }
  // ∂‖v‖_ε/∂v = v/‖v‖ where the clamp is inactive, else 0; this is the
  // factor 1/‖v‖² that multiplies v in ∂C/∂v, from 1/‖v‖_ε.
  KOKKOS_INLINE_FUNCTION static acc_t radial(acc_t inverse_norm) {
    return inverse_norm < 1 / cosine_epsilon ? inverse_norm * inverse_norm
                                             : acc_t(0);
  }
};

// Scratch vectors over a tile's rows and columns (1-based, like R). Cosine
// keeps the inverse norms 1/‖v‖_ε (set by tile_costs, read by the gradient)
// and the weighted similarities Σ_q E_q s_q of the gradient step; the
// expanded squared-Euclidean gradient keeps the E masses Σ_q E_q in the
// latter.
template <class Space>
struct TileVectors {
  ScratchVector<Space> row_norm, col_norm, row_similarity, col_similarity;

  static std::size_t bytes(int tile) {
    return 4 * ScratchVector<Space>::shmem_size(tile + 1);
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION TileVectors(const Member& team, int level, int tile)
      : row_norm(team.team_scratch(level), tile + 1),
        col_norm(team.team_scratch(level), tile + 1),
        row_similarity(team.team_scratch(level), tile + 1),
        col_similarity(team.team_scratch(level), tile + 1) {}
};

}  // namespace softwave::impl
