#pragma once
// The tiled wavefront (docs/design.md §4.2). One launch per tile anti-diagonal;
// one team per (pair, tile) walks its tile's own anti-diagonals in team
// scratch.
//
// Forward keeps only tile boundaries of R: the last row of every tile row
// (row_checkpoints) and the last column of every tile column
// (col_checkpoints); a tile's top-left corner is a cell of the row above's
// checkpoint. Forward-only calls keep one rolling row and column per pair
// instead, and the corners in flight (corners), so their memory is O(N + M)
// and, with a band, that of the backward follows the band too.
//
// Backward visits the tile diagonals in reverse. A tile recomputes its R from
// the checkpoints, turns R into the local soft-argmin weights of every cell
// (how much each cell's value depends on its diagonal / up / left
// predecessor), and pulls E_ij = Σ_successors E_s · w_s→ij through the tile.
// What crosses a tile edge travels as a message: from_below(p, I, j) is the
// part of E at (I·T, j) owed to row I·T + 1 (up and diagonal successors);
// from_right(p, J, i) the part of E at (i, J·T) owed to column J·T + 1 (left
// successors, and diagonal ones within the same tile row).

#include <climits>
#include <softwave/kokkos_compat.hpp>
#include <type_traits>

#include "cell.hpp"
#include "costs.hpp"
#include "geometry.hpp"

namespace softwave::impl {

template <class Space>
using Array3 =
    Kokkos::View<acc_t***, Kokkos::LayoutRight, typename Space::memory_space>;

// Device memory one sweep needs (see the memory formula in softdtw.hpp).
template <class Space>
struct Workspace {
  Array3<Space> row_checkpoints;  // (P, tile rows or 1, M + 1)
  Array3<Space> col_checkpoints;  // (P, tile cols or 1, N + 1)
  Array3<Space> corners;          // (P, 3, tile rows), rolling only
  Array3<Space> from_below;       // (P, tile rows, M + 1), backward only
  Array3<Space> from_right;       // (P, tile cols, N + 1), backward only
  bool rolling = false;           // forward only: one row/column per pair
};

// Row pitch of the tile matrices in team scratch (R, E, weights): room for
// columns 0 .. tile + 1 (the backward pads column w + 1, see
// BackwardTiles::receive_messages), and even, so that the cells (r, s − r) of
// one anti-diagonal, which consecutive threads walk, lie an odd number of
// elements apart and fall on distinct shared-memory banks. With an odd pitch
// such as 33, all 32 threads of a step hit the same bank.
KOKKOS_INLINE_FUNCTION constexpr int tile_pitch(int tile) {
  return tile % 2 ? tile + 3 : tile + 2;
}

// Team scratch of one tile: R (which the backward turns into E in place),
// the backward's soft-argmin weights, a staging area for feature chunks of
// the tile's series rows, and per-row/column vectors. The tile matrices have
// rows 0 .. tile + 1: the backward pads row h + 1 of a tile of h rows.
// The staging area shares its memory with the weights: it is used before the
// walk writes them and after the alignment pass has read them for the last
// time.
template <class Space, class W>
struct TileScratch {
  using Elements = Kokkos::View<W*, typename Space::scratch_memory_space,
                                Kokkos::MemoryUnmanaged>;

  ScratchMatrix<Space> R;
  Elements shared;
  ScratchMatrix<Space, W> diag, up, left;  // backward only
  Staging<W, Space> staged;
  TileVectors<Space> vectors;

  // One tile matrix: rows 0 .. tile + 1, tile_pitch(tile) columns.
  KOKKOS_INLINE_FUNCTION static std::size_t matrix_elements(int tile) {
    return std::size_t(tile + 2) * std::size_t(tile_pitch(tile));
  }
  KOKKOS_INLINE_FUNCTION static std::size_t shared_elements(int tile,
                                                            bool backward,
                                                            int chunk) {
    std::size_t const weights = backward ? 3 * matrix_elements(tile) : 0;
    std::size_t const staging = Staging<W, Space>::elements(tile, chunk);
    return weights > staging ? weights : staging;
  }
  // `chunk`: features staged at a time (the cost provider's feature_chunk).
  static std::size_t bytes(int tile, bool backward, int chunk) {
    return ScratchMatrix<Space>::shmem_size(tile + 2, tile_pitch(tile)) +
           Elements::shmem_size(shared_elements(tile, backward, chunk)) +
           TileVectors<Space>::bytes(tile);
  }

  template <class Member>
  KOKKOS_INLINE_FUNCTION TileScratch(const Member& team, int level, int tile,
                                     bool backward, int chunk)
      : R(team.team_scratch(level), tile + 2, tile_pitch(tile)),
        shared(team.team_scratch(level),
               shared_elements(tile, backward, chunk)),
        diag(weight_matrix(0, tile, backward)),
        up(weight_matrix(1, tile, backward)),
        left(weight_matrix(2, tile, backward)),
        staged(shared.data(), tile, chunk),
        vectors(team, level, tile) {}

 private:
  KOKKOS_INLINE_FUNCTION ScratchMatrix<Space, W> weight_matrix(
      int which, int tile, bool backward) const {
    if (!backward) return ScratchMatrix<Space, W>();
    return ScratchMatrix<Space, W>(
        shared.data() + which * matrix_elements(tile), tile + 2,
        tile_pitch(tile));
  }
};

// State shared by the forward and backward tile functors.
template <class Space, class CostProvider>
struct TileSweep {
  using member_type = typename Kokkos::TeamPolicy<Space>::member_type;

  using W = typename CostProvider::work_type;
  using Scratch = TileScratch<Space, W>;

  CostProvider cost;
  Band band;
  SoftMin<W> soft;
  Tiling tiling;
  Workspace<Space> workspace;
  // Team scratch level: 0 (on-chip) on devices; 1 on host backends, where
  // both levels are ordinary memory and level 0 is capped at 32 KiB.
  int scratch_level = 0;
  int feature_chunk = 0;  // features staged at a time, see TileScratch
  // Set per launch: which tile anti-diagonal, its first tile row and size.
  int diagonal = 0, first_row = 0, tiles_on = 1;

  KOKKOS_INLINE_FUNCTION int slot(int index) const {
    return workspace.rolling ? 0 : index;
  }

  // Rolling buffers lose a tile's corner: tile (I, J − 1) overwrites the
  // rolling row there one diagonal before tile (I, J) reads it. So a tile of
  // diagonal k leaves the corner of (I + 1, J + 1), read on diagonal k + 2,
  // in slot (k + 2) mod 3, which no tile of diagonals k + 1 or k + 2 writes.
  KOKKOS_INLINE_FUNCTION static int corner_slot(int diagonal) {
    return diagonal % 3;
  }

  // Where cell (i, j) (1-based, inside the band) sits in the row-boundary
  // arrays (row_checkpoints, from_below) and the column-boundary arrays
  // (col_checkpoints, from_right). With a band, checkpointed rows and columns
  // keep only their in-band cells; rolling buffers keep whole rows, since
  // consecutive rows would shift under each other.
  KOKKOS_INLINE_FUNCTION std::int64_t in_row(std::int64_t i, std::int64_t j,
                                             std::int64_t n,
                                             std::int64_t m) const {
    if (workspace.rolling || band.width < 0) return j;
    return j - 1 - band.first(i - 1, n, m);
  }
  KOKKOS_INLINE_FUNCTION std::int64_t in_col(std::int64_t i, std::int64_t j,
                                             std::int64_t n,
                                             std::int64_t m) const {
    if (workspace.rolling || band.width < 0) return i;
    return i - 1 - band.first(j - 1, m, n);
  }

  KOKKOS_INLINE_FUNCTION std::int64_t pair_of(const member_type& team) const {
    return team.league_rank() / tiles_on;
  }
  KOKKOS_INLINE_FUNCTION int tile_row_of(const member_type& team) const {
    return first_row + team.league_rank() % tiles_on;
  }

  // The columns [first, second] (1-based, empty when first > second) of the
  // tile's row r that lie inside the band: a row's in-band cells are one
  // interval, so a row costs two divisions instead of two per cell.
  KOKKOS_INLINE_FUNCTION Kokkos::pair<int, int> band_columns(
      const TileCells& tile, int r, std::int64_t n, std::int64_t m) const {
    if (band.width < 0) return {1, tile.w};
    std::int64_t const i = tile.i0 + r - 1;
    auto const column = [&](std::int64_t j) {  // clamped to 0 .. w + 1
      std::int64_t const c = j - tile.j0 + 1;
      return int(c < 0 ? 0 : c > tile.w + 1 ? tile.w + 1 : c);
    };
    return {column(band.first(i, n, m)), column(band.last(i, n, m))};
  }

  // R on the tile's top row / left column (1-based grid cell (i, j)), read
  // from the checkpoints the neighbouring tiles left.
  KOKKOS_INLINE_FUNCTION acc_t boundary(std::int64_t p, const TileCells& tile,
                                        std::int64_t i, std::int64_t j,
                                        std::int64_t n, std::int64_t m) const {
    if (i == 0 && j == 0) return 0;
    if (i == 0 || j == 0 || !band.contains(i - 1, j - 1, n, m))
      return compat::infinity<acc_t>();
    if (i == tile.i0 && j == tile.j0 && workspace.rolling)
      return workspace.corners(p, corner_slot(tile.I + tile.J), tile.I);
    if (i == tile.i0)
      return workspace.row_checkpoints(p, slot(tile.I), in_row(i, j, n, m));
    return workspace.col_checkpoints(p, slot(tile.J), in_col(i, j, n, m));
  }

  // The weights of the backward's padding row h + 1 and column w + 1, which
  // hold the incoming messages in E (see BackwardTiles::receive_messages):
  // E(h + 1, c) reaches (h, c) whole through up = 1, E(r, w + 1) reaches
  // (r, w) whole through left = 1, and no padding cell is a diagonal
  // successor. Written once the staging area, which shares their memory, is
  // done with.
  KOKKOS_FUNCTION static void pad_weights(const member_type& team,
                                          const TileCells& tile,
                                          const Scratch& scratch) {
    int const h = tile.h, w = tile.w;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, 1, (h > w ? h : w) + 2),
                         [&](int k) {
                           if (k <= w + 1) {
                             scratch.up(h + 1, k) = W(k <= w);
                             scratch.diag(h + 1, k) = 0;
                           }
                           if (k <= h) {
                             scratch.left(k, w + 1) = 1;
                             scratch.diag(k, w + 1) = 0;
                           }
                         });
  }

  // Fills R(0..h, 0..w) of the tile: boundaries, then the recursion. With
  // weights, also the soft-argmin weights of every cell (backward).
  template <bool with_weights>
  KOKKOS_FUNCTION void fill(const member_type& team, std::int64_t p,
                            const TileCells& tile, std::int64_t n,
                            std::int64_t m, const Scratch& scratch) const {
    auto const& R = scratch.R;
    // A team may reuse the scratch of the tile its threads just finished
    // (Kokkos loops a block over several league ranks without a barrier).
    team.team_barrier();
    Kokkos::parallel_for(
        Kokkos::TeamThreadRange(team, 0, tile.w + 1), [&](int c) {
          R(0, c) = boundary(p, tile, tile.i0, tile.j0 + c, n, m);
        });
    Kokkos::parallel_for(
        Kokkos::TeamThreadRange(team, 1, tile.h + 1), [&](int r) {
          R(r, 0) = boundary(p, tile, tile.i0 + r, tile.j0, n, m);
        });
    cost.tile_costs(team, p, tile, R, scratch.staged, scratch.vectors);
    team.team_barrier();
    if (band.width >= 0)
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, 1, tile.h + 1),
                           [&](int r) {
                             auto const in_band = band_columns(tile, r, n, m);
                             for (int c = 1; c <= tile.w; ++c)
                               if (c < in_band.first || c > in_band.second)
                                 R(r, c) = compat::infinity<acc_t>();
                           });
    if constexpr (with_weights) pad_weights(team, tile, scratch);
    team.team_barrier();
    auto const store_weights = [&](int r, int c, const Weights<W>& weights) {
      if constexpr (with_weights) {
        scratch.diag(r, c) = weights.diag;
        scratch.up(r, c) = weights.up;
        scratch.left(r, c) = weights.left;
      }
    };
    if (row_per_thread(team, tile.h)) {
      // The thread's last value is its next cell's left neighbour, and the
      // cell above its last cell is the next cell's diagonal one. Only the
      // cell above is new after a step's barrier: the next cell's cost and
      // the minimum of its other two predecessors are read and formed before.
      int const row = walk_row(team);
      acc_t left = 0, diag = 0, low_diag_left = 0, cost = 0;
      if (row <= tile.h) {
        left = R(row, 0);
        diag = R(row - 1, 0);
        low_diag_left = diag < left ? diag : left;
        cost = R(row, 1);
      }
      row_wavefront(team, tile.h, tile.w, /*reverse=*/false, [&](int r, int c) {
        acc_t const up = R(r - 1, c);
        acc_t const low = min3_given(low_diag_left, up, left);
        Weights<W> weights;
        left = relax<with_weights>(cost, diag, up, left, low, soft, weights);
        R(r, c) = left;
        store_weights(r, c, weights);
        diag = up;
        low_diag_left = diag < left ? diag : left;
        cost = R(r, c + 1);  // past the last column: padding, not used
      });
    } else {
      wavefront(team, tile.h, tile.w, /*reverse=*/false, [&](int r, int c) {
        Weights<W> weights;
        R(r, c) = relax<with_weights>(R(r, c), R(r - 1, c - 1), R(r - 1, c),
                                      R(r, c - 1), soft, weights);
        store_weights(r, c, weights);
      });
    }
    team.team_barrier();
  }

  // Leaves the tile's last row, last column and corner for the tiles after it.
  KOKKOS_FUNCTION void store_boundaries(const member_type& team, std::int64_t p,
                                        const TileCells& tile, std::int64_t n,
                                        std::int64_t m,
                                        const ScratchMatrix<Space>& R) const {
    bool const more_rows = tile.rows_below(n), more_cols = tile.cols_right(m);
    std::int64_t const last_row = tile.i0 + tile.h, last_col = tile.j0 + tile.w;
    if (more_rows)
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.w + 1), [&](int c) {
            std::int64_t const j = tile.j0 + c;
            if (band.contains(last_row - 1, j - 1, n, m))
              workspace.row_checkpoints(p, slot(tile.I + 1),
                                        in_row(last_row, j, n, m)) =
                  R(tile.h, c);
          });
    if (more_cols)
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.h + 1), [&](int r) {
            std::int64_t const i = tile.i0 + r;
            if (band.contains(i - 1, last_col - 1, n, m))
              workspace.col_checkpoints(p, slot(tile.J + 1),
                                        in_col(i, last_col, n, m)) =
                  R(r, tile.w);
          });
    if (workspace.rolling && more_rows && more_cols)
      Kokkos::single(Kokkos::PerTeam(team), [&]() {
        workspace.corners(p, corner_slot(tile.I + tile.J + 2), tile.I + 1) =
            R(tile.h, tile.w);
      });
  }
};

// Forward: R through every tile of the diagonal; the value R(n, m) of each
// pair (in double) when its last tile is done.
template <class Space, class CostProvider>
struct ForwardTiles : TileSweep<Space, CostProvider> {
  using base = TileSweep<Space, CostProvider>;
  using member_type = typename base::member_type;

  Kokkos::View<acc_t*, typename Space::memory_space> values;

  static std::size_t scratch_bytes(int tile, int chunk) {
    return base::Scratch::bytes(tile, /*backward=*/false, chunk);
  }

  KOKKOS_FUNCTION void operator()(const member_type& team) const {
    std::int64_t const p = this->pair_of(team);
    int const I = this->tile_row_of(team);
    std::int64_t const n = this->cost.n(p), m = this->cost.m(p);
    TileCells const tile(I, this->diagonal - I, this->tiling.tile, n, m);
    if (!tile.exists() || !tile.touches(this->band, n, m)) return;
    typename base::Scratch const scratch(
        team, this->scratch_level, this->tiling.tile,
        /*backward=*/false, this->feature_chunk);
    this->template fill<false>(team, p, tile, n, m, scratch);
    this->store_boundaries(team, p, tile, n, m, scratch.R);
    if (tile.i0 + tile.h == n && tile.j0 + tile.w == m)
      Kokkos::single(Kokkos::PerTeam(team),
                     [&]() { values(p) = scratch.R(tile.h, tile.w); });
  }
};

// What the backward pass writes besides the cost provider's gradients.
template <class T, class Space>
struct BackwardOutputs {
  Kokkos::View<const value_t<T>*, typename Space::memory_space>
      grad_output;  // or empty
  acc_t scale = 1;  // gradients are of Σ_p scale · grad_output[p] · value[p]
  ArrayView3<T, Space> alignment;      // E (P, N, M), or empty
  bool alignment_is_gradient = false;  // write weight·E (the cost gradient)
  // The cost provider's gradient arrays (series costs) are not filled yet:
  // the sweep starts them at zero before adding to them.
  bool start_gradients_at_zero = false;
  // Hard DTW path: per pair and row, the first and last column on the path.
  Kokkos::View<int**, Kokkos::LayoutRight, typename Space::memory_space>
      path_first, path_last;
};

template <class Space, class CostProvider>
struct BackwardTiles : TileSweep<Space, CostProvider> {
  using base = TileSweep<Space, CostProvider>;
  using member_type = typename base::member_type;
  using T = typename CostProvider::value_type;
  using W = typename base::W;

  BackwardOutputs<T, Space> outputs;

  static std::size_t scratch_bytes(int tile, int chunk) {
    return base::Scratch::bytes(tile, /*backward=*/true, chunk);
  }

  KOKKOS_FUNCTION void operator()(const member_type& team) const {
    std::int64_t const p = this->pair_of(team);
    int const I = this->tile_row_of(team);
    std::int64_t const n = this->cost.n(p), m = this->cost.m(p);
    TileCells const tile(I, this->diagonal - I, this->tiling.tile, n, m);
    if (!tile.exists() || !tile.touches(this->band, n, m)) return;
    typename base::Scratch const scratch(
        team, this->scratch_level, this->tiling.tile,
        /*backward=*/true, this->feature_chunk);
    auto const& E = scratch.R;  // holds R until pull_alignment

    // Issued first, so their loads overlap the recompute; fill's first
    // barrier publishes them. The barrier before lets the team's previous
    // tile (Kokkos may loop a block over several league ranks) finish
    // reading E, whose rows and columns the padding may reuse.
    team.team_barrier();
    receive_messages(team, p, tile, n, m, E);
    this->template fill<true>(team, p, tile, n, m, scratch);

    pull_alignment(team, tile, n, m, E, scratch.up, scratch.left, scratch.diag);
    push_messages(team, p, tile, n, m, E, scratch.up, scratch.left,
                  scratch.diag);
    // E is the pair's own alignment (seeded with 1); the incoming gradient
    // weights it only where gradients are formed.
    acc_t const weight =
        outputs.scale *
        (outputs.grad_output.extent(0) ? acc_t(outputs.grad_output(p)) : 1);
    write_outputs(team, p, tile, E, weight);
    if (weight != 0) {
      team.team_barrier();  // the staging area reuses the weights' memory
      this->cost.accumulate_gradients(team, p, tile, E, weight, scratch.staged,
                                      scratch.vectors);
    }
  }

  // Puts what the tile's last row and column receive into E's padding:
  // E(h + 1, c) is the part of E at (h, c) owed to the tile below (from_below),
  // E(r, w + 1) the part of E at (r, w) owed to the tile on the right
  // (from_right), zero where nothing comes; the grid's last cell gets its seed
  // 1 as E(h + 1, w). pad_weights makes both reach their cell whole, so the
  // walks pull every cell alike. Read inside the walk, each message would put
  // a global load's latency on the walk's critical path, once per step of the
  // row or column that reads it. The caller synchronises the team before
  // reading.
  KOKKOS_FUNCTION void receive_messages(const member_type& team, std::int64_t p,
                                        const TileCells& tile, std::int64_t n,
                                        std::int64_t m,
                                        const ScratchMatrix<Space>& E) const {
    bool const more_rows = tile.rows_below(n), more_cols = tile.cols_right(m);
    auto const& ws = this->workspace;
    Kokkos::parallel_for(
        Kokkos::TeamThreadRange(team, 1, tile.w + 2), [&](int c) {
          std::int64_t const i = tile.i0 + tile.h, j = tile.j0 + c;
          acc_t message = 0;  // c = w + 1, the padding's corner, stays 0
          if (c <= tile.w) {
            if (more_rows && this->band.contains(i - 1, j - 1, n, m))
              message = ws.from_below(p, tile.I + 1, this->in_row(i, j, n, m));
            else if (i == n && j == m)
              message = 1;  // the grid's last cell: its seed
          }
          E(tile.h + 1, c) = message;
        });
    Kokkos::parallel_for(
        Kokkos::TeamThreadRange(team, 1, tile.h + 1), [&](int r) {
          std::int64_t const i = tile.i0 + r, j = tile.j0 + tile.w;
          E(r, tile.w + 1) =
              more_cols && this->band.contains(i - 1, j - 1, n, m)
                  ? ws.from_right(p, tile.J + 1, this->in_col(i, j, n, m))
                  : acc_t(0);
        });
  }

  // E_ij = Σ over successors s of E_s · (weight of ij in s), in reverse order.
  // The padding (receive_messages, pad_weights) stands in for the successors
  // outside the tile, so every cell sums the same three products.
  KOKKOS_FUNCTION void pull_alignment(
      const member_type& team, const TileCells& tile, std::int64_t n,
      std::int64_t m, const ScratchMatrix<Space>& E,
      const ScratchMatrix<Space, W>& up, const ScratchMatrix<Space, W>& left,
      const ScratchMatrix<Space, W>& diag) const {
    // E(r, c) but for its below successor's share, from the E right and
    // below-right of it.
    auto const partial = [&](int r, int c, acc_t below_right, acc_t right) {
      return below_right * diag(r + 1, c + 1) + right * left(r, c + 1);
    };
    if (row_per_thread(team, tile.h)) {
      // The thread's last E is its next cell's right neighbour, and the E
      // below its last cell is the next cell's below-right one. Only the E
      // below is new after a step's barrier: the rest of the next cell's sum
      // and the weight of the E below are formed before it. E is zero outside
      // the band: the row's in-band cells are the columns [lo, hi].
      int const row = walk_row(team);
      auto const in_band = this->band_columns(tile, row, n, m);
      int const lo = in_band.first, hi = in_band.second;
      acc_t rest = 0;
      W below_weight = 0;
      if (row <= tile.h) {
        rest = partial(row, tile.w, E(row + 1, tile.w + 1), E(row, tile.w + 1));
        below_weight = up(row + 1, tile.w);
      }
      row_wavefront(team, tile.h, tile.w, /*reverse=*/true, [&](int r, int c) {
        acc_t const below = E(r + 1, c);
        acc_t const e =
            lo <= c && c <= hi ? rest + below * below_weight : acc_t(0);
        // The next cell's weights are read before this cell's E is stored:
        // scratch is reached through generic pointers, so the compiler must
        // assume the store may alias them.
        if (c > 1) {
          rest = partial(r, c - 1, below, e);
          below_weight = up(r + 1, c - 1);
        }
        E(r, c) = e;
      });
    } else {
      wavefront(team, tile.h, tile.w, /*reverse=*/true, [&](int r, int c) {
        E(r, c) = this->band.contains(tile.i0 + r - 1, tile.j0 + c - 1, n, m)
                      ? partial(r, c, E(r + 1, c + 1), E(r, c + 1)) +
                            E(r + 1, c) * up(r + 1, c)
                      : acc_t(0);
      });
    }
  }

  // Sends what this tile's first row and column owe to the cells above and
  // to the left. Every target is written by one tile per launch, and the
  // tiles that add to the same target run in different launches.
  KOKKOS_FUNCTION void push_messages(
      const member_type& team, std::int64_t p, const TileCells& tile,
      std::int64_t n, std::int64_t m, const ScratchMatrix<Space>& E,
      const ScratchMatrix<Space, W>& up, const ScratchMatrix<Space, W>& left,
      const ScratchMatrix<Space, W>& diag) const {
    auto const& ws = this->workspace;
    if (tile.I > 0)
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 0, tile.w + 1), [&](int c) {
            std::int64_t const i = tile.i0, j = tile.j0 + c;  // the target
            // The grid's boundary column and cells outside the band have no E.
            if (j == 0 || !this->band.contains(i - 1, j - 1, n, m)) return;
            acc_t message = c >= 1 ? E(1, c) * up(1, c) : acc_t(0);
            if (c + 1 <= tile.w) message += E(1, c + 1) * diag(1, c + 1);
            ws.from_below(p, tile.I, this->in_row(i, j, n, m)) += message;
          });
    if (tile.J > 0)
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.h + 1), [&](int r) {
            std::int64_t const i = tile.i0 + r, j = tile.j0;  // the target
            if (!this->band.contains(i - 1, j - 1, n, m)) return;
            acc_t message = E(r, 1) * left(r, 1);
            if (r + 1 <= tile.h) message += E(r + 1, 1) * diag(r + 1, 1);
            ws.from_right(p, tile.J, this->in_col(i, j, n, m)) += message;
          });
  }

  KOKKOS_FUNCTION void write_outputs(const member_type& team, std::int64_t p,
                                     const TileCells& tile,
                                     const ScratchMatrix<Space>& E,
                                     acc_t weight) const {
    acc_t const scale = outputs.alignment_is_gradient ? weight : acc_t(1);
    if (outputs.alignment.extent(0))
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(team, 1, tile.h + 1), [&](int r) {
            for (int c = 1; c <= tile.w; ++c)
              outputs.alignment(p, tile.i0 + r - 1, tile.j0 + c - 1) =
                  T(scale * E(r, c));
          });
    if (outputs.path_first.extent(0))
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, 1, tile.h + 1),
                           [&](int r) {
                             // In hard DTW, E is exactly 1 on the path and 0
                             // elsewhere.
                             int first = INT_MAX, last = -1;
                             for (int c = 1; c <= tile.w; ++c)
                               if (E(r, c) > acc_t(0.5)) {
                                 int const j = int(tile.j0) + c - 1;
                                 first = first < j ? first : j;
                                 last = j;
                               }
                             std::int64_t const i = tile.i0 + r - 1;
                             if (first < outputs.path_first(p, i))
                               outputs.path_first(p, i) = first;
                             if (last > outputs.path_last(p, i))
                               outputs.path_last(p, i) = last;
                           });
  }
};

}  // namespace softwave::impl
