#pragma once
// The one kernel shape every Sinkhorn step is made of: a pass over all
// (row, column) pairs of each problem in which every row reduces over its
// columns. Each thread owns rows; the columns stream through team scratch in
// tiles (their potential and log-weight folded into h_j = g_j/ε + log b_j,
// plus what the cost form and the visitor need), and for each pair the
// visitor sees s_ij = h_j − C_ij/ε, i.e. log π_ij up to the row's own terms.
// A visitor keeps a per-row state (an online log-sum-exp, a weighted sum, an
// argmax), writes per-row results in finish(), and may add to per-problem
// sums, which are reduced over the team before one atomic add per team.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <softwave/kokkos_compat.hpp>
#include <string>
#include <type_traits>

#include "../common/call_memory.hpp"
#include "forms.hpp"
#include "host_lse.hpp"

namespace softwave::impl {

// ε of each problem at one iteration: max(target, scale · factor).
template <class T, class Space>
struct EpsilonAt {
  OTView1<const T, Space> target, scale;
  T factor = 0;
  KOKKOS_INLINE_FUNCTION T operator()(std::int64_t b) const {
    T const annealed = scale(b) * factor;
    return annealed > target(b) ? annealed : target(b);
  }
};

// The streamed side of a pass.
template <class T, class Space>
struct ColumnSide {
  OTView2<const T, Space> potential;   // (B, K)
  OTView2<const T, Space> log_weight;  // (B, K)
};

// The smallest finite value: a running maximum's start, which, unlike −∞,
// keeps exp(s − m) at 0 (not NaN) for a zero-weight column's s = −∞.
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T lowest() {
  return sizeof(T) == 4 ? T(-FLT_MAX) : T(-DBL_MAX);
}

// Online log-sum-exp: adds exp(s) to exp(m)·sum, one exp per term.
template <class T>
KOKKOS_INLINE_FUNCTION void lse_add(T& m, T& sum, T s) {
  if (s > m) {
    sum = sum * compat::exp(m - s) + T(1);
    m = s;
  } else {
    sum += compat::exp(s - m);
  }
}

// Finishes the rows of one team (state[r] for row i0 + t + r·TS) and adds
// their per-problem sums, reduced over the team, to visitor.totals(b, ·).
template <class Shape, class T, class Member, class Visitor>
KOKKOS_INLINE_FUNCTION void finish_rows(const Member& team,
                                        const Visitor& visitor, std::int64_t b,
                                        std::int64_t i0, std::int64_t n, T eps,
                                        typename Visitor::State* state) {
  constexpr int S = Visitor::sums;
  int const t = team.team_rank();
  double sums[S > 0 ? S : 1] = {};
  for (int r = 0; r < Shape::rows_per_thread; ++r) {
    std::int64_t const i = i0 + t + r * Shape::team_size;
    if (i < n) visitor.finish(b, i, state[r], eps, sums);
  }
  // (plain ifs: nvcc refuses captures first made inside if constexpr)
  for (int e = 0; e < S; ++e) {
    double total = sums[e];
    if (Shape::team_size > 1) team.team_reduce(Kokkos::Sum<double>(total));
    if (t == 0) Kokkos::atomic_add(&visitor.totals(b, e), total);
  }
}

// How many parts a pass splits each row's columns into: enough teams to
// fill the device (a row block per team alone gives B·N/128 teams on a GPU,
// 79 for one problem of 10,000 points), each part at least four tiles on
// a GPU, one on a host (64 teams keep its threads busy). Where even that
// leaves fewer than 64 teams (a few hundred points), parts of one tile:
// each team's walk over its columns is a latency-bound chain, so more,
// shorter chains finish sooner despite the merge.
template <class Shape>
std::int64_t column_parts(std::int64_t teams, std::int64_t k) {
  std::int64_t const wanted = Shape::host ? 64 : 2048;
  bool const few =
      teams * std::max<std::int64_t>(1, k / (4 * Shape::columns)) < 64;
  std::int64_t const tiles = (Shape::host || few ? 1 : 4) * Shape::columns;
  std::int64_t const most = std::max<std::int64_t>(1, k / tiles);
  std::int64_t const parts = (wanted + teams - 1) / teams;
  return std::max<std::int64_t>(1, std::min(parts, most));
}

// Whether a host pass hands the visitor a row's values a tile at a time
// (Visitor::visit_tile, where it says visits_tiles) rather than one at a
// time (visit).
template <class Visitor, class = void>
struct VisitsTiles : std::false_type {};
template <class Visitor>
struct VisitsTiles<Visitor, std::void_t<decltype(Visitor::visits_tiles)>>
    : std::bool_constant<Visitor::visits_tiles> {};

template <class Space, class T, class Form, class Visitor>
void tiled_pass(const Space& space, const std::string& label, const Form& form,
                const ColumnSide<T, Space>& columns,
                const EpsilonAt<T, Space>& epsilon, const Visitor& visitor) {
  using Shape = PassShape<Space, T>;
  using Policy = Kokkos::TeamPolicy<Space>;
  using Member = typename Policy::member_type;
  using State = typename Visitor::State;
  constexpr int R = Shape::rows, W = Shape::columns, TS = Shape::team_size,
                RPT = Shape::rows_per_thread;
  std::int64_t const batch = form.batch(), n = form.rows(), k = form.columns();
  if (batch == 0 || n == 0 || k == 0) return;
  std::int64_t const blocks = (n + R - 1) / R;
  std::int64_t const parts = column_parts<Shape>(batch * blocks, k);
  // Each part covers whole tiles.
  std::int64_t const tiles = (k + W - 1) / W;
  std::int64_t const tiles_per_part = (tiles + parts - 1) / parts;
  std::int64_t const form_values = form.tile_values(W);
  int const extra = visitor.tile_extra();
  std::size_t const bytes =
      sizeof(T) * std::size_t(W + form_values + std::int64_t(W) * extra);
  // Partial states of split rows, merged by a second kernel.
  auto partial_memory =
      parts > 1
          ? call_array<Kokkos::View<State*, typename Space::memory_space>>(
                space, ("softwave::sinkhorn::" + label + "_parts").c_str(),
                false, std::size_t(batch * n * parts))
          : CallArray<Kokkos::View<State*, typename Space::memory_space>>{};
  auto const partial = partial_memory.view;
  auto const policy =
      compat::light_weight(Policy(space, batch * blocks * parts, TS))
          .set_scratch_size(0, Kokkos::PerTeam(bytes));
  Kokkos::parallel_for(
      "softwave::sinkhorn::" + label, policy,
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const part = team.league_rank() % parts;
        std::int64_t const block = team.league_rank() / parts;
        std::int64_t const b = block / blocks;
        std::int64_t const i0 = (block % blocks) * R;
        if (!visitor.active(b)) return;
        T* const h = static_cast<T*>(team.team_scratch(0).get_shmem(bytes));
        T* const tile = h + W;
        T* const ext = tile + form_values;
        T const eps = epsilon(b);
        T const inv_eps = T(1) / eps;
        int const t = team.team_rank();
        // (captured here: nvcc refuses a first capture inside if constexpr)
        int const extra_stride = extra;
        State state[RPT];
        for (int r = 0; r < RPT; ++r) {
          std::int64_t const i = i0 + t + r * TS;
          if (i < n) visitor.init(b, i, state[r]);
        }
        std::int64_t const first = part * tiles_per_part * W;
        std::int64_t const last_tile = (part + 1) * tiles_per_part * W;
        std::int64_t const last = last_tile < k ? last_tile : k;
        for (std::int64_t j0 = first; j0 < last; j0 += W) {
          int const w = last - j0 < W ? int(last - j0) : W;
          team.team_barrier();  // the previous tile is no longer read
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w), [&](int jj) {
            h[jj] = columns.potential(b, j0 + jj) * inv_eps +
                    columns.log_weight(b, j0 + jj);
          });
          form.load_tile(team, b, i0, j0, w, tile);
          visitor.load_extra(team, b, j0, w, ext);
          team.team_barrier();
          for (int r = 0; r < RPT; ++r) {
            int const ii = t + r * TS;
            std::int64_t const i = i0 + ii;
            if (i >= n) break;
            if constexpr (Shape::host && VisitsTiles<Visitor>::value) {
              // The row's values over the tile, then the visitor's vector
              // loop over them.
              T values[W];
              for (int jj = 0; jj < w; ++jj)
                values[jj] = h[jj] - form.cost(b, i, ii, jj, w, tile) * inv_eps;
              visitor.visit_tile(state[r], values, w);
            } else {
              for (int jj = 0; jj < w; ++jj) {
                T const c = form.cost(b, i, ii, jj, w, tile);
                visitor.visit(state[r], h[jj] - c * inv_eps, c, j0 + jj,
                              ext + jj * extra_stride);
              }
            }
          }
        }
        if (parts == 1) {
          finish_rows<Shape>(team, visitor, b, i0, n, eps, state);
        } else {
          for (int r = 0; r < RPT; ++r) {
            std::int64_t const i = i0 + t + r * TS;
            if (i < n) partial((b * n + i) * parts + part) = state[r];
          }
        }
      });
  if (parts == 1) return;
  Kokkos::parallel_for(
      "softwave::sinkhorn::" + label + "_merge",
      compat::light_weight(Policy(space, batch * blocks, TS)),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const b = team.league_rank() / blocks;
        std::int64_t const i0 = (team.league_rank() % blocks) * R;
        if (!visitor.active(b)) return;
        State state[RPT];
        for (int r = 0; r < RPT; ++r) {
          std::int64_t const i = i0 + team.team_rank() + r * TS;
          if (i >= n) continue;
          state[r] = partial((b * n + i) * parts);
          for (std::int64_t p = 1; p < parts; ++p)
            visitor.merge(state[r], partial((b * n + i) * parts + p));
        }
        finish_rows<Shape>(team, visitor, b, i0, n, epsilon(b), state);
      });
}

// Merges two online log-sum-exp states (m, sum) (and, when given, their
// exp-weighted sums c).
template <class T>
KOKKOS_INLINE_FUNCTION void lse_merge(T& m, T& sum, T from_m, T from_sum) {
  if (from_m > m) {
    sum = sum * compat::exp(m - from_m) + from_sum;
    m = from_m;
  } else {
    sum += from_sum * compat::exp(from_m - m);
  }
}

// Where a row's own terms come from: its potential, log-weight and the
// marginal penalty of its side.
template <class T, class Space>
struct RowSide {
  OTView2<T, Space> potential;         // (B, N)
  OTView2<const T, Space> log_weight;  // (B, N)
  double rho = INFINITY;
  // f ← λ·(−ε LSE), λ = 1 / (1 + ε/ρ) (1 for ρ = ∞).
  KOKKOS_INLINE_FUNCTION T damping(T eps) const {
    return T(1) / (T(1) + eps / T(rho));
  }
  // φ(f): f on a balanced side, ρ(1 − exp(−f/ρ)) on a relaxed one.
  KOKKOS_INLINE_FUNCTION double phi(double f) const {
    return rho == INFINITY ? f : -rho * compat::expm1(-f / rho);
  }
};

// Members every visitor without a tile extra or a problem mask has.
template <class T>
struct PlainVisitor {
  int tile_extra() const { return 0; }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void load_extra(const Member&, std::int64_t,
                                         std::int64_t, int, T*) const {}
};

// One half-iteration: f_i ← −λ ε LSE_j(s_ij), and, when `measure`, the
// residual Σ_i a_i |exp((f_i − f_i')/ε) − 1| added to totals(b, 0).
template <class T, class Space>
struct UpdateVisitor : PlainVisitor<T> {
  struct State {
    T m, sum;
  };
  static constexpr int sums = 1;
  RowSide<T, Space> own;
  Kokkos::View<const int*, typename Space::memory_space> mask;  // 1: active
  Kokkos::View<double**, typename Space::memory_space> totals;
  bool measure = false;

  KOKKOS_INLINE_FUNCTION bool active(std::int64_t b) const {
    return mask(b) != 0;
  }
  KOKKOS_INLINE_FUNCTION void init(std::int64_t, std::int64_t, State& s) const {
    s.m = lowest<T>();
    s.sum = 0;
  }
  KOKKOS_INLINE_FUNCTION void visit(State& s, T v, T, std::int64_t,
                                    const T*) const {
    lse_add(s.m, s.sum, v);
  }
  // On a host, a tile's values in vector loops (host_lse.hpp): on two CPU
  // threads a float 2,000 × 2,500 dense pass went from 15.4 to 5.7 ms (its
  // rows) and from 19.1 to 8.7 ms (its columns), BM_Sinkhorn/1000/3 from
  // 1.10 to 0.24 s.
  static constexpr bool visits_tiles = true;
  KOKKOS_INLINE_FUNCTION void visit_tile(State& s, const T* values,
                                         int w) const {
    SOFTWAVE_IF_ON_HOST((host_lse_tile(values, w, s.m, s.sum);))
  }
  KOKKOS_INLINE_FUNCTION void merge(State& s, const State& from) const {
    lse_merge(s.m, s.sum, from.m, from.sum);
  }
  KOKKOS_INLINE_FUNCTION void finish(std::int64_t b, std::int64_t i, State& s,
                                     T eps, double* out) const {
    T const updated = -own.damping(eps) * eps * (s.m + compat::log(s.sum));
    if (measure) {
      double const la = own.log_weight(b, i);
      if (la > -INFINITY)
        out[0] += compat::exp(la) *
                  compat::fabs(compat::expm1(
                      (double(own.potential(b, i)) - double(updated)) / eps));
    }
    own.potential(b, i) = updated;
  }
};

// The exact state of given potentials, per side: each row's LSE (stored),
// and the per-problem sums [mass of π, ‖π1 − a‖₁, residual, Σ a φ(f),
// ⟨π, C⟩].
template <class T, class Space>
struct MeasureVisitor : PlainVisitor<T> {
  struct State {
    T m, sum, cost;
  };
  static constexpr int sums = 5;
  RowSide<T, Space> own;  // potential read only
  OTView2<T, Space> lse;  // (B, N) out
  Kokkos::View<double**, typename Space::memory_space> totals;

  KOKKOS_INLINE_FUNCTION bool active(std::int64_t) const { return true; }
  KOKKOS_INLINE_FUNCTION void init(std::int64_t, std::int64_t, State& s) const {
    s.m = lowest<T>();
    s.sum = 0;
    s.cost = 0;
  }
  KOKKOS_INLINE_FUNCTION void visit(State& s, T v, T c, std::int64_t,
                                    const T*) const {
    if (v > s.m) {
      T const scale = compat::exp(s.m - v);
      s.sum = s.sum * scale + T(1);
      s.cost = s.cost * scale + c;
      s.m = v;
    } else {
      T const w = compat::exp(v - s.m);
      s.sum += w;
      s.cost += w * c;
    }
  }
  KOKKOS_INLINE_FUNCTION void merge(State& s, const State& from) const {
    if (from.m > s.m) {
      T const scale = compat::exp(s.m - from.m);
      s.sum = s.sum * scale + from.sum;
      s.cost = s.cost * scale + from.cost;
      s.m = from.m;
    } else {
      T const scale = compat::exp(from.m - s.m);
      s.sum += from.sum * scale;
      s.cost += from.cost * scale;
    }
  }
  KOKKOS_INLINE_FUNCTION void finish(std::int64_t b, std::int64_t i, State& s,
                                     T eps, double* out) const {
    double const lse_i = double(s.m) + compat::log(double(s.sum));
    lse(b, i) = T(lse_i);
    double const la = own.log_weight(b, i);
    if (!(la > -INFINITY)) return;
    double const a = compat::exp(la), f = own.potential(b, i);
    double const ratio = compat::exp(f / eps + lse_i);  // (π1)_i / a_i
    double const row_mass = a * ratio;
    double const updated = -double(own.damping(eps)) * eps * lse_i;
    out[0] += row_mass;
    out[1] += compat::fabs(row_mass - a);
    out[2] += a * compat::fabs(compat::expm1((f - updated) / eps));
    out[3] += a * own.phi(f);
    out[4] += row_mass * double(s.cost) / double(s.sum);
  }
};

// The largest cost of each row, into rows(b, i) (ε-independent).
template <class T, class Space>
struct MaxCostVisitor : PlainVisitor<T> {
  struct State {
    T max;
  };
  static constexpr int sums = 0;
  OTView2<T, Space> rows;
  Kokkos::View<double**, typename Space::memory_space> totals;

  KOKKOS_INLINE_FUNCTION bool active(std::int64_t) const { return true; }
  KOKKOS_INLINE_FUNCTION void init(std::int64_t, std::int64_t, State& s) const {
    s.max = lowest<T>();
  }
  KOKKOS_INLINE_FUNCTION void visit(State& s, T, T c, std::int64_t,
                                    const T*) const {
    if (c > s.max) s.max = c;
  }
  KOKKOS_INLINE_FUNCTION void merge(State& s, const State& from) const {
    if (from.max > s.max) s.max = from.max;
  }
  KOKKOS_INLINE_FUNCTION void finish(std::int64_t b, std::int64_t i, State& s,
                                     T, double*) const {
    rows(b, i) = s.max;
  }
};

// Σ_j w_ij Z_j over a chunk of Z's columns, w_ij = exp(s_ij − LSE_i) (the
// row of π normalised to 1), handed to epilogue(b, i, k, sum_k) for the
// chunk's columns k0 + k. Each pass recomputes every pair's cost, so Z's
// columns go in as few chunks as the row state's registers allow
// (weighted_rows chooses Chunk).
template <class T, class Space, class Epilogue, int Chunk>
struct WeightedVisitor {
  static constexpr int chunk = Chunk;
  struct State {
    T lse;
    T acc[chunk];
  };
  static constexpr int sums = 0;
  OTView2<const T, Space> lse;  // (B, N) from MeasureVisitor
  OTView3<const T, Space> z;    // (B, K, m)
  int k0 = 0, width = chunk;    // the chunk's columns of z
  Epilogue epilogue;
  Kokkos::View<double**, typename Space::memory_space> totals;

  int tile_extra() const { return chunk; }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void load_extra(const Member& team, std::int64_t b,
                                         std::int64_t j0, int w, T* ext) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w * chunk), [&](int e) {
      int const jj = e / chunk, k = e % chunk;
      ext[e] = k < width ? z(b, j0 + jj, k0 + k) : T(0);
    });
  }
  KOKKOS_INLINE_FUNCTION bool active(std::int64_t) const { return true; }
  KOKKOS_INLINE_FUNCTION void init(std::int64_t b, std::int64_t i,
                                   State& s) const {
    s.lse = lse(b, i);
    for (int k = 0; k < chunk; ++k) s.acc[k] = 0;
  }
  KOKKOS_INLINE_FUNCTION void visit(State& s, T v, T, std::int64_t,
                                    const T* zj) const {
    T const w = compat::exp(v - s.lse);
    for (int k = 0; k < chunk; ++k) s.acc[k] += w * zj[k];
  }
  KOKKOS_INLINE_FUNCTION void merge(State& s, const State& from) const {
    for (int k = 0; k < chunk; ++k) s.acc[k] += from.acc[k];
  }
  KOKKOS_INLINE_FUNCTION void finish(std::int64_t b, std::int64_t i, State& s,
                                     T, double*) const {
    for (int k = 0; k < width; ++k) epilogue(b, i, k0 + k, s.acc[k]);
  }
};

// A 64-bit mix of a counter (SplitMix64's finaliser): independent uniform
// bits per (seed, problem, row, column, draw) on any backend.
KOKKOS_INLINE_FUNCTION std::uint64_t mix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// argmax_j of s_ij (+ a Gumbel draw per pair when `gumbel`: then the argmax
// is a sample from the row of π), into out(b, i, slot).
template <class T, class Space>
struct ArgmaxVisitor : PlainVisitor<T> {
  struct State {
    double best;
    std::int64_t j;
    std::uint64_t key;
  };
  static constexpr int sums = 0;
  OTView3<int, Space> out;
  int slot = 0;
  bool gumbel = false;
  std::uint64_t seed = 0;
  Kokkos::View<double**, typename Space::memory_space> totals;

  KOKKOS_INLINE_FUNCTION bool active(std::int64_t) const { return true; }
  KOKKOS_INLINE_FUNCTION void init(std::int64_t b, std::int64_t i,
                                   State& s) const {
    s.best = -INFINITY;
    s.j = 0;
    s.key = mix64(mix64(mix64(seed + 0x9e3779b97f4a7c15ull * (slot + 1)) +
                        std::uint64_t(b)) +
                  std::uint64_t(i));
  }
  KOKKOS_INLINE_FUNCTION void visit(State& s, T v, T, std::int64_t j,
                                    const T*) const {
    double score = v;
    if (gumbel) {
      // u in (0, 1): 53 random bits, offset by half a step.
      double const u =
          (double(mix64(s.key + std::uint64_t(j)) >> 11) + 0.5) * 0x1p-53;
      score -= compat::log(-compat::log(u));
    }
    if (score > s.best) {
      s.best = score;
      s.j = j;
    }
  }
  // Parts cover increasing columns: on a tie the earlier part's column,
  // the first maximum, stays (as in one pass).
  KOKKOS_INLINE_FUNCTION void merge(State& s, const State& from) const {
    if (from.best > s.best) {
      s.best = from.best;
      s.j = from.j;
    }
  }
  KOKKOS_INLINE_FUNCTION void finish(std::int64_t b, std::int64_t i, State& s,
                                     T, double*) const {
    out(b, i, slot) = int(s.j);
  }
};

}  // namespace softwave::impl
