#pragma once
// Cost providers for the tile kernels. A provider answers, for pair p, the
// lengths n(p), m(p); writes the costs of a tile's cells into team scratch;
// and turns a tile of the expected alignment E into gradient contributions.
// Costs are computed where they are needed and never stored as a B×N×M
// tensor.

#include <softwave/softdtw.hpp>
#include <type_traits>

#include "metrics.hpp"
#include "tile_scratch.hpp"

namespace softwave::impl {

// Costs from series x (Bx, N, d) and y (By, M, d) with a built-in metric.
// Gradients are accumulated in value_t<T> (float for 16-bit inputs).
template <class T, class Space, Cost metric>
struct SeriesCost {
  using value_type = T;
  using work_type = work_t<T, Space>;
  using gradient_type = value_t<T>;
  using member_type = typename Kokkos::TeamPolicy<Space>::member_type;
  using W = work_type;
  static constexpr int kBlock = Blocking<Space>::edge;
  static constexpr int kGradientRows = Blocking<Space>::rows;
  static constexpr int kGradientFeatures = Blocking<Space>::features;
  static constexpr bool kExpanded =
      metric == Cost::sqeuclidean && Metric<Cost::sqeuclidean>::expanded<W>;
  // Whether a host thread's walk_pair_gradients forms this cost's gradients
  // (from the features, or cosine's unit vectors): every built-in cost.
  static constexpr bool kPairGradients = true;

  ConstSeriesView<T, Space> x, y;
  PairLengths<Space> lengths;
  ArrayView3<gradient_type, Space> grad_x, grad_y;  // added to; may be empty

  void zero_gradients(const Space& space) const {
    if (grad_x.extent(0)) compat::fill(space, grad_x, gradient_type(0));
    if (grad_y.extent(0)) compat::fill(space, grad_y, gradient_type(0));
  }

  KOKKOS_INLINE_FUNCTION std::int64_t n(std::int64_t p) const {
    return lengths.n(p);
  }
  KOKKOS_INLINE_FUNCTION std::int64_t m(std::int64_t p) const {
    return lengths.m(p);
  }
  // Features staged at a time.
  int feature_chunk() const {
    return int(x.extent(2)) < kFeatureChunk ? int(x.extent(2)) : kFeatureChunk;
  }

  // Pair p's cells C(i, j) (0-based), for a thread that walks the pair on
  // its own (pair_walk.hpp): its terms summed in W as the tiles sum them.
  // The pair's series are found once, not per cell.
  struct PairCells {
    // Costs summed over features term by term (not cosine): a host walk may
    // sum them along an anti-diagonal instead (walk_pair_diagonals).
    static constexpr bool kFeatureTerms = metric != Cost::cosine;
    static constexpr bool kL1 = metric == Cost::l1;
    static constexpr bool kCosine = metric == Cost::cosine;
    const T* x;
    const T* y;
    std::int64_t x_step, y_step;  // between consecutive points
    int d;
    KOKKOS_INLINE_FUNCTION acc_t operator()(std::int64_t i,
                                            std::int64_t j) const {
      const T* const u = x + i * x_step;
      const T* const v = y + j * y_step;
      if constexpr (metric == Cost::cosine) {
        acc_t dot = 0, uu = 0, vv = 0;
        for (int k = 0; k < d; ++k) {
          acc_t const a = acc_t(W(u[k])), b = acc_t(W(v[k]));
          dot += a * b;
          uu += a * a;
          vv += b * b;
        }
        return 1 - dot * Metric<metric>::inverse_norm(uu) *
                       Metric<metric>::inverse_norm(vv);
      } else {
        // Univariate series are the common case; the test is the same for
        // every cell, so a walk's loop is unswitched on it.
        if (d == 1) return acc_t(Metric<metric>::term(W(u[0]), W(v[0])));
        W sum = 0;
        for (int k = 0; k < d; ++k)
          sum += Metric<metric>::term(W(u[k]), W(v[k]));
        return acc_t(sum);
      }
    }

    // Cosine (host): each point's unit vector v/‖v‖_ε, by point at `pitch`
    // and zero-padded, and its 1/‖v‖_ε; the terms pass through W as the
    // cells' do.
    void unit_points(std::int64_t n, std::int64_t m, int pitch, acc_t* x_rows,
                     acc_t* y_rows, acc_t* x_scale, acc_t* y_scale) const {
      auto const units = [&](const T* points, std::int64_t step,
                             std::int64_t count, acc_t* rows, acc_t* scale) {
        for (std::int64_t q = 0; q < count; ++q) {
          acc_t* const row = rows + q * pitch;
          acc_t squared = 0;
          for (int k = 0; k < d; ++k) {
            row[k] = acc_t(W(points[q * step + k]));
            squared += row[k] * row[k];
          }
          scale[q] = Metric<Cost::cosine>::inverse_norm(squared);
          for (int k = 0; k < pitch; ++k)
            row[k] = k < d ? row[k] * scale[q] : acc_t(0);
        }
      };
      units(x, x_step, n, x_rows, x_scale);
      units(y, y_step, m, y_rows, y_scale);
    }
    // Cosine (host): sums[q] = Σ E·û over the other side's unit vectors
    // becomes Σ E·∂C/∂v_q = −(sums − (v̂·sums)·v̂)/‖v‖_ε, the radial part
    // only where the clamp is inactive (∂‖v‖_ε/∂v = 0 where it is), in
    // place.
    static void unit_gradients(std::int64_t count, int pitch, int d,
                               const acc_t* rows, const acc_t* scale,
                               acc_t* sums) {
      for (std::int64_t q = 0; q < count; ++q) {
        const acc_t* const unit = rows + q * pitch;
        acc_t* const sum = sums + q * pitch;
        acc_t along = 0;
        if (Metric<Cost::cosine>::radial(scale[q]) != 0)
          for (int k = 0; k < d; ++k) along += unit[k] * sum[k];
        for (int k = 0; k < d; ++k)
          sum[k] = -scale[q] * (sum[k] - along * unit[k]);
      }
    }
  };
  KOKKOS_INLINE_FUNCTION PairCells pair_cells(std::int64_t p) const {
    return {x.data() + lengths.pairs.x(p) * std::int64_t(x.stride(0)),
            y.data() + lengths.pairs.y(p) * std::int64_t(y.stride(0)),
            std::int64_t(x.stride(1)), std::int64_t(y.stride(1)),
            int(x.extent(2))};
  }

  // Adds weight · ∂value/∂x and ∂value/∂y of pair p to its gradients (those
  // asked for) from walk_pair_gradients' sums x_sum(i, f) = Σ_j E_ij
  // ∂term/∂x_if and y_sum(j, f) (0-based points); the (x − y)² term's
  // factor 2 is applied here. Host code (one thread, one pair).
  template <class XSum, class YSum>
  void add_pair_gradients(std::int64_t p, acc_t weight, const XSum& x_sum,
                          const YSum& y_sum) const {
    acc_t const factor = metric == Cost::sqeuclidean ? 2 * weight : weight;
    int const d = int(x.extent(2));
    if (grad_x.extent(0)) {
      std::int64_t const a = lengths.pairs.x(p);
      for (std::int64_t i = 0; i < n(p); ++i)
        for (int f = 0; f < d; ++f)
          grad_x(a, i, f) += gradient_type(factor * x_sum(i, f));
    }
    if (grad_y.extent(0)) {
      std::int64_t const b = lengths.pairs.y(p);
      for (std::int64_t j = 0; j < m(p); ++j)
        for (int f = 0; f < d; ++f)
          grad_y(b, j, f) += gradient_type(factor * y_sum(j, f));
    }
  }

  // R(r, c) = C(i0 + r − 1, j0 + c − 1) for the tile's h × w cells (band
  // masking is the caller's). Feature chunks of the tile's rows are staged in
  // scratch, and each thread item sums a kBlock × kBlock block of cells.
  KOKKOS_FUNCTION void tile_costs(const member_type& team, std::int64_t p,
                                  const TileCells& tile,
                                  const ScratchMatrix<Space>& R,
                                  const Staging<W, Space>& staged,
                                  const TileVectors<Space>& vectors) const {
    int const d = int(x.extent(2));
    int const col_blocks = Blocking<Space>::count(tile.w);
    for (int k0 = 0; k0 < d; k0 += staged.chunk) {
      int const width = d - k0 < staged.chunk ? d - k0 : staged.chunk;
      stage<true>(team, p, tile, k0, width, staged);
      if constexpr (metric == Cost::cosine) {
        add_squared_norms(team, staged.xt, vectors.row_norm, tile.h, width, k0);
        add_squared_norms(team, staged.yt, vectors.col_norm, tile.w, width, k0);
      }
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team,
                                  Blocking<Space>::count(tile.h) * col_blocks),
          [&](int item) {
            int const r0 = (item / col_blocks) * kBlock;
            int const c0 = (item % col_blocks) * kBlock;
            W sum[kBlock][kBlock] = {};
            for (int k = 0; k < width; ++k) {
              W xv[kBlock], yv[kBlock];
              for (int a = 0; a < kBlock; ++a) xv[a] = staged.xt(k, r0 + a);
              for (int b = 0; b < kBlock; ++b) yv[b] = staged.yt(k, c0 + b);
              for (int a = 0; a < kBlock; ++a)
                for (int b = 0; b < kBlock; ++b)
                  sum[a][b] += Metric<metric>::term(xv[a], yv[b]);
            }
            for (int a = 0; a < kBlock && r0 + a < tile.h; ++a)
              for (int b = 0; b < kBlock && c0 + b < tile.w; ++b) {
                acc_t& cell = R(r0 + a + 1, c0 + b + 1);
                cell = (k0 == 0 ? acc_t(0) : cell) + acc_t(sum[a][b]);
              }
          });
      team.team_barrier();  // before the next chunk is staged
    }
    if constexpr (metric == Cost::cosine) {
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.h + 1), [&](int r) {
            vectors.row_norm(r) =
                Metric<metric>::inverse_norm(vectors.row_norm(r));
          });
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.w + 1), [&](int c) {
            vectors.col_norm(c) =
                Metric<metric>::inverse_norm(vectors.col_norm(c));
          });
      team.team_barrier();
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.h + 1), [&](int r) {
            for (int c = 1; c <= tile.w; ++c)
              R(r, c) = 1 - R(r, c) * vectors.row_norm(r) * vectors.col_norm(c);
          });
    }
  }

  // grad_x[i] += Σ_j E_ij ∂C_ij/∂x_i over the tile's rows, grad_y[j] likewise
  // over its columns, as blocked products of E with staged feature chunks.
  // Tiles of one tile row (or column) lie on different anti-diagonals, so no
  // two concurrent tiles touch the same gradient row. For cosine, tile_costs
  // of the same tile left the inverse norms in `vectors`.
  KOKKOS_FUNCTION void accumulate_gradients(
      const member_type& team, std::int64_t p, const TileCells& tile,
      const ScratchMatrix<Space>& E, acc_t weight,
      const Staging<W, Space>& staged,
      const TileVectors<Space>& vectors) const {
    bool const want_x = grad_x.extent(0), want_y = grad_y.extent(0);
    if (!want_x && !want_y) return;
    int const d = int(x.extent(2));
    std::int64_t const a = lengths.pairs.x(p), b = lengths.pairs.y(p);
    if constexpr (metric == Cost::cosine || kExpanded) {
      // Cosine adds its weighted similarities to zero below; the expanded
      // squared-Euclidean gradient needs the E masses.
      auto const start = [&](const ScratchVector<Space>& sums, int count,
                             int others, bool transpose) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, 1, count + 1),
                             [&](int v) {
                               acc_t mass = 0;
                               if constexpr (kExpanded)
                                 for (int q = 1; q <= others; ++q)
                                   mass += transpose ? E(q, v) : E(v, q);
                               sums(v) = mass;
                             });
      };
      start(vectors.row_similarity, tile.h, tile.w, /*transpose=*/false);
      start(vectors.col_similarity, tile.w, tile.h, /*transpose=*/true);
    }
    for (int k0 = 0; k0 < d; k0 += staged.chunk) {
      int const width = d - k0 < staged.chunk ? d - k0 : staged.chunk;
      stage<false>(team, p, tile, k0, width, staged);
      // Below kGradientFeatures features, a block's padding would be most of
      // its work (d = 1: 3/4 of the products, and x and y items shared warps):
      // items of one row and one feature instead.
      Block const chunk{0, 0, k0, width, weight};
      if (width < kGradientFeatures)
        gradient_items<1, 1>(team, tile, chunk, want_x, want_y, E, staged,
                             vectors, a, b);
      else
        gradient_items<kGradientRows, kGradientFeatures>(
            team, tile, chunk, want_x, want_y, E, staged, vectors, a, b);
      team.team_barrier();  // before the next chunk is staged
    }
    if constexpr (metric == Cost::cosine) {
      // The radial part s̄·v/‖v‖² of ∂C/∂v, s̄ = Σ_q E_q s_q complete now:
      // grad(series, first + v − 1, :) += weight · s̄ · radial · v.
      auto const radial = [&](const ConstSeriesView<T, Space>& v,
                              const ArrayView3<gradient_type, Space>& grad,
                              std::int64_t series, std::int64_t first,
                              int count, const ScratchVector<Space>& norm,
                              const ScratchVector<Space>& similarity) {
        Kokkos::parallel_for(
            Kokkos::TeamThreadRange(team, 1, count + 1), [&](int q) {
              acc_t const factor =
                  weight * similarity(q) * Metric<metric>::radial(norm(q));
              if (factor == 0) return;
              std::int64_t const row = first + q - 1;
              for (int k = 0; k < d; ++k)
                grad(series, row, k) +=
                    gradient_type(factor * acc_t(v(series, row, k)));
            });
      };
      if (want_x)
        radial(x, grad_x, a, tile.i0, tile.h, vectors.row_norm,
               vectors.row_similarity);
      if (want_y)
        radial(y, grad_y, b, tile.j0, tile.w, vectors.col_norm,
               vectors.col_similarity);
    }
  }

 private:
  // Features k0 .. k0 + width − 1 of the tile's x rows and y rows, by
  // feature (cost items) or by row (gradient items).
  template <bool kByFeature>
  KOKKOS_FUNCTION void stage(const member_type& team, std::int64_t p,
                             const TileCells& tile, int k0, int width,
                             const Staging<W, Space>& staged) const {
    // Consecutive threads read consecutive features of a row (coalesced).
    // Each thread loads a batch of its elements before it stores any, so
    // the loads' latencies overlap: an element's store may alias the next
    // element's load as far as the compiler knows, and one load at a time
    // made staging 57% of the d = 64 forward's stalls (ncu, H100).
    int const threads = team.team_size();
    int const q_step = threads / width, k_step = threads % width;
    auto const advance = [&](int& q, int& k) {
      q += q_step;
      k += k_step;
      if (k >= width) {
        k -= width;
        ++q;
      }
    };
    auto const side = [&](const ConstSeriesView<T, Space>& v,
                          std::int64_t series, std::int64_t first, int count,
                          const ScratchMatrix<Space, W>& out) {
      int q = team.team_rank() / width, k = team.team_rank() % width;
      while (q < count) {
        W values[kStageBatch];
        int const q0 = q, k0_batch = k;
        for (int b = 0; b < kStageBatch && q < count; ++b, advance(q, k))
          values[b] = W(v(series, first + q, k0 + k));
        q = q0;
        k = k0_batch;
        for (int b = 0; b < kStageBatch && q < count; ++b, advance(q, k)) {
          if constexpr (kByFeature)
            out(k, q) = values[b];
          else
            out(q, k) = values[b];
        }
      }
    };
    side(x, lengths.pairs.x(p), tile.i0, tile.h,
         kByFeature ? staged.xt : staged.x);
    side(y, lengths.pairs.y(p), tile.j0, tile.w,
         kByFeature ? staged.yt : staged.y);
    team.team_barrier();
  }

  // Cosine: adds the staged chunk's part of ‖v‖² to norms(1 .. count), from
  // a by-feature chunk.
  KOKKOS_FUNCTION static void add_squared_norms(
      const member_type& team, const ScratchMatrix<Space, W>& by_feature,
      const ScratchVector<Space>& norms, int count, int width, int k0) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count), [&](int q) {
      acc_t sum = k0 == 0 ? acc_t(0) : norms(q + 1);
      for (int k = 0; k < width; ++k)
        sum += acc_t(by_feature(k, q)) * acc_t(by_feature(k, q));
      norms(q + 1) = sum;
    });
  }

  // A gradient item: rows v0 .. v0 + rows − 1 of one side and features
  // f0 .. f0 + features − 1 of the staged chunk k0 .. k0 + width − 1.
  struct Block {
    int v0, f0, k0, width;
    acc_t weight;
  };

  // The gradient items of a staged chunk (v0 = f0 = 0), in blocks of
  // kItemRows × kItemFeatures: first every x item, then every y item, so
  // that the threads of a warp take one side where the counts allow.
  template <int kItemRows, int kItemFeatures>
  KOKKOS_FUNCTION void gradient_items(const member_type& team,
                                      const TileCells& tile, const Block& chunk,
                                      bool want_x, bool want_y,
                                      const ScratchMatrix<Space>& E,
                                      const Staging<W, Space>& staged,
                                      const TileVectors<Space>& vectors,
                                      std::int64_t a, std::int64_t b) const {
    int const feature_blocks =
        Blocking<Space>::count(chunk.width, kItemFeatures);
    int const x_items =
        want_x ? Blocking<Space>::count(tile.h, kItemRows) * feature_blocks : 0;
    int const y_items =
        want_y ? Blocking<Space>::count(tile.w, kItemRows) * feature_blocks : 0;
    Kokkos::parallel_for(
        Kokkos::TeamThreadRange(team, x_items + y_items), [&](int item) {
          bool const rows = item < x_items;
          int const local = rows ? item : item - x_items;
          Block block = chunk;
          block.v0 = (local / feature_blocks) * kItemRows;
          block.f0 = (local % feature_blocks) * kItemFeatures;
          if (rows)
            side_gradient<false, kItemRows, kItemFeatures>(
                block, tile.h, tile.w, E, staged.x, staged.y, vectors.row_norm,
                vectors.col_norm, vectors.row_similarity, grad_x, a, tile.i0);
          else
            side_gradient<true, kItemRows, kItemFeatures>(
                block, tile.w, tile.h, E, staged.y, staged.x, vectors.col_norm,
                vectors.row_norm, vectors.col_similarity, grad_y, b, tile.j0);
        });
  }

  // G(v, k) = Σ_q E(v, q) · s_q · factor(v_k, u_qk) over the `others` cells
  // of the other side (q), for the item's block of this side (rows of E, or
  // columns with kTranspose); s_q is the other side's inverse norm for
  // cosine, 1 otherwise. Adds weight · ∂C/∂v to grad(series, first + v, k).
  template <bool kTranspose, int kRows, int kFeatures>
  KOKKOS_INLINE_FUNCTION static void side_gradient(
      const Block& block, int count, int others, const ScratchMatrix<Space>& E,
      const ScratchMatrix<Space, W>& self, const ScratchMatrix<Space, W>& other,
      const ScratchVector<Space>& self_norm,
      const ScratchVector<Space>& other_norm,
      const ScratchVector<Space>& similarity,
      const ArrayView3<gradient_type, Space>& grad, std::int64_t series,
      std::int64_t first) {
    int const v0 = block.v0, f0 = block.f0;
    W vv[kRows][kFeatures];
    for (int a = 0; a < kRows; ++a)
      for (int f = 0; f < kFeatures; ++f) vv[a][f] = self(v0 + a, f0 + f);
    W sum[kRows][kFeatures] = {};
    for (int q = 0; q < others; ++q) {
      W const scale = metric == Cost::cosine ? W(other_norm(q + 1)) : W(1);
      W e[kRows], u[kFeatures];
      bool any = false;
      for (int a = 0; a < kRows; ++a) {
        int const v = v0 + a < count ? v0 + a : count - 1;  // in bounds
        e[a] = W(kTranspose ? E(q + 1, v + 1) : E(v + 1, q + 1)) * scale;
        any = any || e[a] != 0;
      }
      // A GPU warp would diverge on this skip for little gain.
      if constexpr (Blocking<Space>::host)
        if (!any) continue;
      for (int f = 0; f < kFeatures; ++f) u[f] = other(q, f0 + f);
      for (int a = 0; a < kRows; ++a)
        for (int f = 0; f < kFeatures; ++f)
          sum[a][f] += e[a] * Metric<metric>::factor(vv[a][f], u[f]);
    }
    // ∂C/∂v of the block, then one read-modify-write pass over its outputs:
    // all loads issue before any store, so their latencies overlap. In work
    // type W, like the sums (a float block in double took 32 more registers
    // of a GPU thread for no digits the float output keeps).
    W gradient[kRows][kFeatures];
    for (int a = 0; a < kRows; ++a) {
      if (v0 + a >= count) break;
      acc_t dot = 0;  // cosine: v·G over the block's features
      for (int f = 0; f < kFeatures; ++f) {
        W const g = sum[a][f];
        if constexpr (kExpanded) {
          gradient[a][f] = 2 * (vv[a][f] * similarity(v0 + a + 1) - g);
        } else if constexpr (metric == Cost::sqeuclidean) {
          gradient[a][f] = 2 * g;
        } else if constexpr (metric == Cost::l1) {
          gradient[a][f] = g;
        } else {
          // −Σ_q E_q u_q/(‖v‖_ε‖u_q‖_ε); the radial pass adds the rest.
          gradient[a][f] = W(-g * self_norm(v0 + a + 1));
          if (f0 + f < block.width) dot += acc_t(vv[a][f]) * acc_t(g);
        }
      }
      // s̄_v = Σ_q E_q (v·u_q)/(‖v‖_ε‖u_q‖_ε) = (v·G)/‖v‖_ε, added over the
      // feature blocks (several items).
      if constexpr (metric == Cost::cosine)
        Kokkos::atomic_add(&similarity(v0 + a + 1),
                           dot * self_norm(v0 + a + 1));
    }
    gradient_type current[kRows][kFeatures];
    for (int a = 0; a < kRows; ++a)
      for (int f = 0; f < kFeatures; ++f)
        if (v0 + a < count && f0 + f < block.width)
          current[a][f] = grad(series, first + v0 + a, block.k0 + f0 + f);
    for (int a = 0; a < kRows; ++a)
      for (int f = 0; f < kFeatures; ++f)
        if (v0 + a < count && f0 + f < block.width)
          grad(series, first + v0 + a, block.k0 + f0 + f) =
              current[a][f] + gradient_type(block.weight * gradient[a][f]);
  }
};

// Costs read from a caller-supplied tensor C (B, N, M). Its gradient is E
// itself, which the sweep writes to the alignment output.
template <class T, class Space>
struct TensorCost {
  using value_type = T;
  using work_type = work_t<T, Space>;
  using member_type = typename Kokkos::TeamPolicy<Space>::member_type;

  ConstSeriesView<T, Space> c;
  PairLengths<Space> lengths;

  // Its gradient is the alignment output, which the caller fills.
  void zero_gradients(const Space&) const {}

  KOKKOS_INLINE_FUNCTION std::int64_t n(std::int64_t p) const {
    return lengths.n(p);
  }
  KOKKOS_INLINE_FUNCTION std::int64_t m(std::int64_t p) const {
    return lengths.m(p);
  }
  int feature_chunk() const { return 0; }  // nothing is staged
  // walk_pair_gradients applies: the gradient is E, the alignment output.
  static constexpr bool kPairGradients = true;
  // Pair p's cells C(i, j) (0-based), for a thread that walks the pair on
  // its own (pair_walk.hpp).
  struct PairCells {
    const T* c;
    std::int64_t row_step, column_step;
    KOKKOS_INLINE_FUNCTION acc_t operator()(std::int64_t i,
                                            std::int64_t j) const {
      return acc_t(c[i * row_step + j * column_step]);
    }
  };
  KOKKOS_INLINE_FUNCTION PairCells pair_cells(std::int64_t p) const {
    return {c.data() + lengths.pairs.x(p) * std::int64_t(c.stride(0)),
            std::int64_t(c.stride(1)), std::int64_t(c.stride(2))};
  }
  // Threads take columns, so each row of the tile is read contiguously.
  KOKKOS_FUNCTION void tile_costs(const member_type& team, std::int64_t p,
                                  const TileCells& tile,
                                  const ScratchMatrix<Space>& R,
                                  const Staging<work_type, Space>&,
                                  const TileVectors<Space>&) const {
    std::int64_t const a = lengths.pairs.x(p);
    Kokkos::parallel_for(
        Kokkos::TeamThreadRange(team, 1, tile.w + 1), [&](int col) {
          for (int r = 1; r <= tile.h; ++r)
            R(r, col) = acc_t(c(a, tile.i0 + r - 1, tile.j0 + col - 1));
        });
  }
  KOKKOS_FUNCTION void accumulate_gradients(const member_type&, std::int64_t,
                                            const TileCells&,
                                            const ScratchMatrix<Space>&, acc_t,
                                            const Staging<work_type, Space>&,
                                            const TileVectors<Space>&) const {}
};

}  // namespace softwave::impl
