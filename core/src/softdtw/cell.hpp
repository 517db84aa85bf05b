#pragma once
// One cell of the recursion: the soft minimum and its weights (relax), and
// the orders in which a team visits a tile's cells (wavefront,
// row_wavefront).

#include <softwave/kokkos_compat.hpp>
#include <type_traits>

#include "geometry.hpp"

namespace softwave::impl {

KOKKOS_INLINE_FUNCTION acc_t min3(acc_t a, acc_t b, acc_t c) {
  acc_t const ab = a < b ? a : b;
  return ab < c ? ab : c;
}

// min3(diag, up, left) from low_diag_left = (diag < left ? diag : left),
// formed before `up` is known, bit for bit, NaN included: min3 lets a NaN
// through only from `left` (a NaN cell reaches its successors' values through
// the soft-min's exponentials, or as its right neighbour's left), and a walk
// must not change which.
KOKKOS_INLINE_FUNCTION acc_t min3_given(acc_t low_diag_left, acc_t up,
                                        acc_t left) {
  return up < low_diag_left ? up : (up != up ? left : low_diag_left);
}

// ∂R_ij/∂(diag, up, left): the soft-argmin of the predecessors; for γ = 0 the
// indicator of the argmin with ties to diagonal, then up, then left.
template <class W>
struct Weights {
  W diag = 0, up = 0, left = 0;
};

// The soft-min's special functions in work type W (see work_t), on shifts
// shift = a_k − min(a) >= 0 formed in double: only the scaled shift meets a
// float exponential.
template <class W>
struct SoftMin {
  acc_t gamma = 1;
  acc_t log2e_over_gamma = 0;  // float: exp(−s/γ) = 2^(−s·log2(e)/γ)
  acc_t gamma_ln2 = 0;         // float: γ·ln(sum) = γ·ln(2)·log2(sum)

  SoftMin() = default;
  explicit SoftMin(acc_t g)
      : gamma(g),
        log2e_over_gamma(g > 0 ? 1.4426950408889634 / g : 0),
        gamma_ln2(g * 0.6931471805599453) {}

  // exp(below/γ) for below = min(a) − a_k <= 0 (the sign is the caller's
  // subtraction, so no negation sits on the walk's critical path). Double
  // saves the exponential of the minimum (exactly 1); in float a branch costs
  // more than the exponential it saves, and 2^0 is 1.
  KOKKOS_INLINE_FUNCTION W exp_below(acc_t below) const {
    if constexpr (std::is_same_v<W, double>) {
      return below == 0 ? 1.0 : compat::exp(below / gamma);
    } else {
      return compat::exp2(W(below * log2e_over_gamma));
    }
  }
  // γ·ln(sum).
  KOKKOS_INLINE_FUNCTION acc_t log_sum(W sum) const {
    if constexpr (std::is_same_v<W, double>) {
      return gamma * compat::log(sum);
    } else {
      return gamma_ln2 * acc_t(compat::log2(sum));
    }
  }
};

// R_ij = C_ij + softmin_γ(diag, up, left), and optionally ∂R_ij/∂(predecessors)
// from the same exponentials. A cost of +∞ marks a cell outside the band
// (costs are finite elsewhere when inputs are checked); such cells get zero
// weights. A NaN (unchecked inputs, SoftDTWOptions::check_values = false)
// stays NaN instead of reading as +∞, so it reaches the pair's value: min3
// drops a NaN diagonal or upper neighbour, so a cell whose other predecessors
// are +∞ (the first column, a band's edge) looks at them itself; both are
// known before `left`, off the walk's critical path.
// `low` is min3(diag, up, left), which a walk may have partly formed early.
template <bool with_weights, class W>
KOKKOS_INLINE_FUNCTION acc_t relax(acc_t cost, acc_t diag, acc_t up, acc_t left,
                                   acc_t low, const SoftMin<W>& soft,
                                   Weights<W>& weights) {
  acc_t const inf = compat::infinity<acc_t>();
  bool const finite = cost < inf && low < inf;
  bool const nan_before =
      cost != cost || low != low || diag != diag || up != up;
  acc_t const not_finite = nan_before ? cost + low + diag + up : inf;
  if (soft.gamma == 0) {
    if (!finite) {
      if constexpr (with_weights) weights = Weights<W>{};
      return not_finite;
    }
    if constexpr (with_weights) {
      weights = Weights<W>{};
      if (diag == low)
        weights.diag = 1;
      else if (up == low)
        weights.up = 1;
      else
        weights.left = 1;
    }
    return cost + low;
  }
  // Shifting by the minimum keeps every exponent <= 0 (no overflow), and the
  // differences that decide the weights are taken in double. The soft-min is
  // formed whatever `finite` says and chosen after: the walk's critical path
  // then waits on no branch (a non-finite minimum only makes it NaN, which
  // the choice discards).
  W const e_diag = soft.exp_below(low - diag);
  W const e_up = soft.exp_below(low - up);
  W const e_left = soft.exp_below(low - left);
  W const sum = e_diag + e_up + e_left;
  if constexpr (with_weights) {
    W const inverse = 1 / sum;
    weights.diag = finite ? e_diag * inverse : W(0);
    weights.up = finite ? e_up * inverse : W(0);
    weights.left = finite ? e_left * inverse : W(0);
  }
  acc_t const value = cost + low - soft.log_sum(sum);
  return finite ? value : not_finite;
}

template <bool with_weights, class W>
KOKKOS_INLINE_FUNCTION acc_t relax(acc_t cost, acc_t diag, acc_t up, acc_t left,
                                   const SoftMin<W>& soft,
                                   Weights<W>& weights) {
  return relax<with_weights>(cost, diag, up, left, min3(diag, up, left), soft,
                             weights);
}

// Visits the cells (r, c), 1 <= r <= h, 1 <= c <= w, anti-diagonal by
// anti-diagonal, so every cell comes after (forward) or before (reverse) its
// three predecessors. The cells of one anti-diagonal are independent: team
// threads share them on devices, and on a one-thread host team their
// exp/log latencies overlap (about 30% faster than walking rows).
template <class Member, class CellFunction>
KOKKOS_INLINE_FUNCTION void wavefront(const Member& team, int h, int w,
                                      bool reverse, const CellFunction& cell) {
  for (int step = 0; step < h + w - 1; ++step) {
    int const diagonal = reverse ? h + w - 2 - step : step;  // (r-1) + (c-1)
    int const r_begin = diagonal - (w - 1) > 0 ? diagonal - (w - 1) : 0;
    int const r_end = (diagonal < h - 1 ? diagonal : h - 1) + 1;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, r_begin, r_end),
                         [&](int r) { cell(r + 1, diagonal - r + 1); });
    team.team_barrier();
  }
}

// The same order with one thread per tile row, for teams of at least h
// threads (devices): thread r − 1 owns row r for the whole tile and visits
// its cell of each anti-diagonal. What a cell needs from its own row, and
// what the thread read from the neighbouring row one step earlier, stays in
// the caller's per-thread variables; one neighbour crosses threads through
// scratch. A step thus loads two values instead of four (forward) and four
// instead of six (backward), at addresses without the anti-diagonal's index
// arithmetic.
template <class Member>
KOKKOS_INLINE_FUNCTION int walk_row(const Member& team) {
  return team.team_rank() + 1;  // the tile row this thread owns (1-based)
}

template <class Member, class CellFunction>
KOKKOS_INLINE_FUNCTION void row_wavefront(const Member& team, int h, int w,
                                          bool reverse,
                                          const CellFunction& cell) {
  int const r = walk_row(team);
  for (int step = 0; step < h + w - 1; ++step) {
    int const diagonal = reverse ? h + w - 2 - step : step;  // (r-1) + (c-1)
    int const c = diagonal - r + 2;
    if (r <= h && c >= 1 && c <= w) cell(r, c);
    team.team_barrier();
  }
}

// Whether the team can own one tile row per thread (see row_wavefront).
template <class Member>
KOKKOS_INLINE_FUNCTION bool row_per_thread(const Member& team, int h) {
  return team.team_size() >= h;
}

}  // namespace softwave::impl
