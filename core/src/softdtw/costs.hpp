#pragma once
// Cost providers for the tile kernels. A provider answers, for pair p, the
// lengths n(p), m(p) and the cost of cell (i, j) (0-based), and turns a tile
// of the expected alignment E into gradient contributions. Costs are computed
// where they are needed and never stored as a B×N×M tensor.

#include <softwave/softdtw.hpp>

#include "geometry.hpp"

namespace softwave::impl {

// Lengths of both sides of a pair; empty length views mean "full extent".
template <class Space>
struct PairLengths {
  Kokkos::View<const int*, typename Space::memory_space> x, y;
  std::int64_t n_max = 0, m_max = 0;
  PairMap pairs;

  KOKKOS_INLINE_FUNCTION std::int64_t n(std::int64_t p) const {
    return x.extent(0) ? x(pairs.x(p)) : n_max;
  }
  KOKKOS_INLINE_FUNCTION std::int64_t m(std::int64_t p) const {
    return y.extent(0) ? y(pairs.y(p)) : m_max;
  }
};

// ε of the cosine cost: 1 − x·y / (max(‖x‖, ε) max(‖y‖, ε)).
constexpr acc_t cosine_epsilon = 1e-8;

// Σ_k term(k) over k < d with four independent partial sums: one serial
// chain of floating-point adds (the compiler may not reassociate) would cost
// its full latency per feature.
template <class Term>
KOKKOS_INLINE_FUNCTION acc_t feature_sum(int d, const Term& term) {
  acc_t partial[4] = {0, 0, 0, 0};
  int k = 0;
  for (; k + 4 <= d; k += 4)
    for (int lane = 0; lane < 4; ++lane) partial[lane] += term(k + lane);
  for (; k < d; ++k) partial[0] += term(k);
  return (partial[0] + partial[1]) + (partial[2] + partial[3]);
}

// Cost between x[a, i, :] and y[b, j, :] for one metric, plus the pieces of
// its gradient. Written once per metric and shared by the forward cost and
// the backward gradient.
template <Cost metric>
struct Metric;

template <>
struct Metric<Cost::sqeuclidean> {
  template <class XRow, class YRow>
  KOKKOS_INLINE_FUNCTION static acc_t cost(const XRow& a, const YRow& b,
                                           int d) {
    return feature_sum(d, [&](int k) {
      acc_t const diff = acc_t(a(k)) - acc_t(b(k));
      return diff * diff;
    });
  }
};

template <>
struct Metric<Cost::l1> {
  template <class XRow, class YRow>
  KOKKOS_INLINE_FUNCTION static acc_t cost(const XRow& a, const YRow& b,
                                           int d) {
    return feature_sum(d, [&](int k) {
      acc_t const diff = acc_t(a(k)) - acc_t(b(k));
      return diff < 0 ? -diff : diff;
    });
  }
  KOKKOS_INLINE_FUNCTION static acc_t sign(acc_t v) {
    return v > 0 ? acc_t(1) : (v < 0 ? acc_t(-1) : acc_t(0));
  }
};

template <>
struct Metric<Cost::cosine> {
  template <class Row>
  KOKKOS_INLINE_FUNCTION static acc_t norm(const Row& a, int d) {
    return compat::sqrt(
        feature_sum(d, [&](int k) { return acc_t(a(k)) * acc_t(a(k)); }));
  }
  KOKKOS_INLINE_FUNCTION static acc_t clamp(acc_t norm) {
    return norm > cosine_epsilon ? norm : cosine_epsilon;
  }
  // ∂‖v‖_ε/∂v = v/‖v‖ where the clamp is inactive, else 0; this returns the
  // factor 1/‖v‖_ε² that multiplies v in ∂C/∂v.
  KOKKOS_INLINE_FUNCTION static acc_t radial(acc_t norm) {
    return norm > cosine_epsilon ? 1 / (norm * norm) : acc_t(0);
  }
  template <class XRow, class YRow>
  KOKKOS_INLINE_FUNCTION static acc_t similarity(const XRow& a, const YRow& b,
                                                 int d, acc_t norm_a,
                                                 acc_t norm_b) {
    acc_t const dot =
        feature_sum(d, [&](int k) { return acc_t(a(k)) * acc_t(b(k)); });
    return dot / (clamp(norm_a) * clamp(norm_b));
  }
  template <class XRow, class YRow>
  KOKKOS_INLINE_FUNCTION static acc_t cost(const XRow& a, const YRow& b,
                                           int d) {
    return 1 - similarity(a, b, d, norm(a, d), norm(b, d));
  }
};

// Scratch rows the gradient step may use (norms of the tile's x and y rows).
template <class Space>
using ScratchVector = Kokkos::View<acc_t*, typename Space::scratch_memory_space,
                                   Kokkos::MemoryUnmanaged>;
template <class Space>
using ScratchMatrix =
    Kokkos::View<acc_t**, Kokkos::LayoutRight,
                 typename Space::scratch_memory_space, Kokkos::MemoryUnmanaged>;

// Costs from series x (Bx, N, d) and y (By, M, d) with a built-in metric.
// Gradients are accumulated in value_t<T> (float for 16-bit inputs).
template <class T, class Space, Cost metric>
struct SeriesCost {
  using value_type = T;
  using gradient_type = value_t<T>;
  using member_type = typename Kokkos::TeamPolicy<Space>::member_type;

  ConstSeriesView<T, Space> x, y;
  PairLengths<Space> lengths;
  ArrayView3<gradient_type, Space> grad_x, grad_y;  // added to; may be empty

  KOKKOS_INLINE_FUNCTION std::int64_t n(std::int64_t p) const {
    return lengths.n(p);
  }
  KOKKOS_INLINE_FUNCTION std::int64_t m(std::int64_t p) const {
    return lengths.m(p);
  }
  KOKKOS_INLINE_FUNCTION auto x_row(std::int64_t p, std::int64_t i) const {
    return Kokkos::subview(x, lengths.pairs.x(p), i, Kokkos::ALL);
  }
  KOKKOS_INLINE_FUNCTION auto y_row(std::int64_t p, std::int64_t j) const {
    return Kokkos::subview(y, lengths.pairs.y(p), j, Kokkos::ALL);
  }
  KOKKOS_INLINE_FUNCTION acc_t operator()(std::int64_t p, std::int64_t i,
                                          std::int64_t j) const {
    return Metric<metric>::cost(x_row(p, i), y_row(p, j), int(x.extent(2)));
  }

  // grad_x[i] += Σ_j E_ij ∂C_ij/∂x_i over the tile's rows, grad_y[j] likewise
  // over its columns. Tiles of one tile row (or column) lie on different
  // anti-diagonals, so no two concurrent tiles touch the same gradient row.
  KOKKOS_FUNCTION void accumulate_gradients(
      const member_type& team, std::int64_t p, const TileCells& tile,
      const ScratchMatrix<Space>& E, acc_t weight,
      const ScratchVector<Space>& norm_x,
      const ScratchVector<Space>& norm_y) const {
    int const d = int(x.extent(2));
    std::int64_t const a = lengths.pairs.x(p), b = lengths.pairs.y(p);
    if constexpr (metric == Cost::cosine) {
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.h + 1), [&](int r) {
            norm_x(r) = Metric<metric>::norm(x_row(p, tile.i0 + r - 1), d);
          });
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.w + 1), [&](int c) {
            norm_y(c) = Metric<metric>::norm(y_row(p, tile.j0 + c - 1), d);
          });
      team.team_barrier();
    }
    if (grad_x.extent(0)) {
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.h + 1), [&](int r) {
            std::int64_t const i = tile.i0 + r - 1;
            auto const xi = x_row(p, i);
            row_gradient(xi, r, tile.w, d, tile.j0, b, y, E, weight, norm_x,
                         norm_y,
                         /*transpose=*/false,
                         Kokkos::subview(grad_x, a, i, Kokkos::ALL));
          });
    }
    if (grad_y.extent(0)) {
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.w + 1), [&](int c) {
            std::int64_t const j = tile.j0 + c - 1;
            auto const yj = y_row(p, j);
            row_gradient(
                yj, c, tile.h, d, tile.i0, a, x, E, weight, norm_y, norm_x,
                /*transpose=*/true, Kokkos::subview(grad_y, b, j, Kokkos::ALL));
          });
    }
  }

  // One side's gradient row: v is the row being differentiated (x_i or y_j),
  // the sum runs over the `count` cells of the other side (rows of `other`
  // starting at other_begin in series `other_index`). The cost is symmetric in
  // its two arguments, so the same code serves rows (E(r, c)) and columns
  // (E(c, r) with transpose). Features go in chunks held in registers, so the
  // other side's rows are read once per chunk, contiguously, in double.
  template <class Row, class Out>
  KOKKOS_INLINE_FUNCTION static void row_gradient(
      const Row& v, int rc, int count, int d, std::int64_t other_begin,
      std::int64_t other_index, const ConstSeriesView<T, Space>& other,
      const ScratchMatrix<Space>& E, acc_t weight,
      const ScratchVector<Space>& norm_self,
      const ScratchVector<Space>& norm_other, bool transpose, const Out& out) {
    auto e = [&](int q) { return transpose ? E(q, rc) : E(rc, q); };
    // E has one sign within a pair, so a zero mass means no contribution.
    acc_t mass = 0, weighted_similarity = 0;
    for (int q = 1; q <= count; ++q) {
      acc_t const eq = e(q);
      mass += eq;
      if constexpr (metric == Cost::cosine) {
        if (eq != 0) {
          auto const uq = Kokkos::subview(other, other_index,
                                          other_begin + q - 1, Kokkos::ALL);
          weighted_similarity +=
              eq * Metric<metric>::similarity(v, uq, d, norm_self(rc),
                                              norm_other(q));
        }
      }
    }
    if (mass == 0) return;
    constexpr int chunk = 8;
    for (int k0 = 0; k0 < d; k0 += chunk) {
      acc_t sum[chunk] = {};
      for (int q = 1; q <= count; ++q) {
        acc_t eq = e(q);
        if (eq == 0) continue;
        if constexpr (metric == Cost::cosine)
          eq /= Metric<metric>::clamp(norm_other(q));
        std::int64_t const row = other_begin + q - 1;
        for (int kk = 0; kk < chunk; ++kk) {
          if (k0 + kk >= d) break;
          acc_t const u = acc_t(other(other_index, row, k0 + kk));
          if constexpr (metric == Cost::l1)
            sum[kk] += eq * Metric<metric>::sign(acc_t(v(k0 + kk)) - u);
          else
            sum[kk] += eq * u;
        }
      }
      for (int kk = 0; kk < chunk && k0 + kk < d; ++kk) {
        acc_t const vk = acc_t(v(k0 + kk));
        acc_t gradient;
        if constexpr (metric == Cost::sqeuclidean) {
          // Σ_q e_q · 2(v − u_q) = 2(v Σ_q e_q − Σ_q e_q u_q)
          gradient = 2 * (vk * mass - sum[kk]);
        } else if constexpr (metric == Cost::l1) {
          gradient = sum[kk];
        } else {
          // ∂C/∂v = −u/(‖v‖_ε‖u‖_ε) + s·v·radial(‖v‖), s the similarity.
          acc_t const nv = norm_self(rc);
          gradient = -sum[kk] / Metric<metric>::clamp(nv) +
                     weighted_similarity * vk * Metric<metric>::radial(nv);
        }
        out(k0 + kk) += gradient_type(weight * gradient);
      }
    }
  }
};

// Costs read from a caller-supplied tensor C (B, N, M). Its gradient is E
// itself, which the sweep writes to the alignment output.
template <class T, class Space>
struct TensorCost {
  using value_type = T;
  using member_type = typename Kokkos::TeamPolicy<Space>::member_type;

  ConstSeriesView<T, Space> c;
  PairLengths<Space> lengths;

  KOKKOS_INLINE_FUNCTION std::int64_t n(std::int64_t p) const {
    return lengths.n(p);
  }
  KOKKOS_INLINE_FUNCTION std::int64_t m(std::int64_t p) const {
    return lengths.m(p);
  }
  KOKKOS_INLINE_FUNCTION acc_t operator()(std::int64_t p, std::int64_t i,
                                          std::int64_t j) const {
    return acc_t(c(lengths.pairs.x(p), i, j));
  }
  KOKKOS_FUNCTION void accumulate_gradients(const member_type&, std::int64_t,
                                            const TileCells&,
                                            const ScratchMatrix<Space>&, acc_t,
                                            const ScratchVector<Space>&,
                                            const ScratchVector<Space>&) const {
  }
};

}  // namespace softwave::impl
