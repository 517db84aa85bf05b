#pragma once
// How the tile sweeps run: the scratch plan (tile edge, scratch level),
// team sizes, the boundary rows a checkpointed sweep keeps, and the Sweeper
// that launches one anti-diagonal of tiles after another.
//
// One part of the Soft-DTW drivers (drivers.hpp, whose entry points use
// these; nothing else includes them): sweeper.hpp, then call_arrays.hpp.

#include <algorithm>
#include <climits>
#include <memory>
#include <softwave/softdtw.hpp>
#include <vector>

#include "costs.hpp"
#include "geometry.hpp"
#include "pair_walk.hpp"
#include "specialised.hpp"
#include "sweep.hpp"

namespace softwave::impl {
namespace {

template <class Space>
std::size_t backward_scratch_bytes(int tile) {
  return BackwardTiles<Space, TensorCost<double, Space>>::scratch_bytes(
      tile, kFeatureChunk);
}

// Tile edge and team-scratch level for a sweep. Host backends use level 1:
// both levels are ordinary memory there and level 0 is capped at 32 KiB.
// Devices prefer on-chip level 0 and fall back to level 1 (global memory,
// slower) for a requested tile too large for it.
struct ScratchPlan {
  int tile;
  int level;
};

template <class Space>
ScratchPlan scratch_plan(const SoftDTWOptions& options) {
  check_options(options);
  using Policy = Kokkos::TeamPolicy<Space>;
  auto const level_for = [](int tile) {
    std::size_t const bytes = backward_scratch_bytes<Space>(tile);
    if (!runs_on_host<Space>() &&
        bytes <= std::size_t(Policy::scratch_size_max(0)))
      return 0;
    return bytes <= std::size_t(Policy::scratch_size_max(1)) ? 1 : -1;
  };
  int const preferred_level = runs_on_host<Space>() ? 1 : 0;
  if (options.tile > 0) {
    int const level = level_for(options.tile);
    if (level < 0)
      throw_invalid_argument(
          "tile = ", options.tile, " needs ",
          backward_scratch_bytes<Space>(options.tile),
          " bytes of team scratch, more than this execution space offers (",
          Policy::scratch_size_max(1), " bytes)");
    return {options.tile, level};
  }
  int tile = runs_on_host<Space>() ? 64 : 32;
  while (tile > 4 && level_for(tile) != preferred_level) tile /= 2;
  return {tile, level_for(tile)};
}

// Host backends run one thread per tile (rows in order, cache-resident).
// On devices one thread per tile row walks the anti-diagonals, and the cost
// and gradient products, most of a tile's time at larger d, spread over the
// whole team. A team takes up to four times as many threads while the launch
// (`teams` tiles) stays under an eighth of the device's concurrency: beyond
// that the extra threads cost occupancy. On an H100, fwd+bwd 16/512/64 went
// from 6.6 to 3.8 ms with four threads per row; two per row on every launch
// made 32/2048/1 slower, 15.8 to 24.3 ms.
template <class Space>
int team_size_for(const Space& space, int tile, std::int64_t teams) {
  if constexpr (runs_on_host<Space>()) return 1;
  std::int64_t const budget = std::int64_t(space.concurrency()) / 8;
  int size = std::min(tile, 128);
  while (size < 4 * tile && size * 2 <= 128 && teams * size * 2 <= budget)
    size *= 2;
  return size;
}

template <class Space>
using AccValues = Kokkos::View<acc_t*, typename Space::memory_space>;

template <class Space>
CallArray<AccValues<Space>> acc_values(const Space& space, std::int64_t count) {
  return call_array<AccValues<Space>>(space, "softwave::softdtw::values_acc",
                                      /*zero=*/false, count);
}

// Cells one boundary row (or column) of a checkpointed sweep keeps: the whole
// row, or with a band its in-band part, at most Band::row_cells.
template <class Space, class CostProvider>
std::pair<std::int64_t, std::int64_t> boundary_cells(
    const Space& space, const CostProvider& cost, Band band, std::int64_t pairs,
    std::int64_t n_max, std::int64_t m_max) {
  if (band.width < 0) return {m_max + 1, n_max + 1};
  std::int64_t row = 0, col = 0;
  Kokkos::parallel_reduce(
      "softwave::softdtw::band_cells",
      Kokkos::RangePolicy<Space>(space, 0, pairs),
      KOKKOS_LAMBDA(std::int64_t p, std::int64_t & row_max,
                    std::int64_t & col_max) {
        std::int64_t const n = cost.n(p), m = cost.m(p);
        std::int64_t const r = band.row_cells(n, m), c = band.row_cells(m, n);
        row_max = r > row_max ? r : row_max;
        col_max = c > col_max ? c : col_max;
      },
      Kokkos::Max<std::int64_t>(row), Kokkos::Max<std::int64_t>(col));
  return {std::min(row, m_max + 1), std::min(col, n_max + 1)};
}

// Whether a call of `pairs` pairs takes the pair-parallel walks: when asked
// for, and by `automatic` on host backends with at least four pairs a
// thread (fewer leave threads idle that the wavefront would use).
template <class Space>
bool takes_pair_walks(const Space& space, const SoftDTWOptions& options,
                      std::int64_t pairs) {
  if (options.kernel == Kernel::pairs) return true;
  return options.kernel == Kernel::automatic && runs_on_host<Space>() &&
         pairs >= 4 * std::int64_t(space.concurrency());
}

// The blocks of work the host's anti-diagonal walks allocate: one for each
// thread, whose UniqueToken picks it (threads take pairs dynamically, for
// uneven lengths).
template <class Space>
std::int64_t diagonal_blocks(const Space& space) {
  return Kokkos::Experimental::UniqueToken<Space>(space).size();
}
// `automatic` takes the pair-parallel backward while a thread's block of
// work stays under this (pairs up to about 2,900 × 2,900 points without a
// band): past it, the tiled sweeps' checkpoints take far less memory.
constexpr std::int64_t kBackwardBlockLimit = 128ll << 20;

// Bytes of one block's work in the pair-parallel backward: `stored` cells
// of anti-diagonals (stored_diagonal_cells) for pairs of up to n × m points
// whose features are laid out as `features` says.
inline std::int64_t gradient_block_bytes(std::int64_t stored, std::int64_t n,
                                         std::int64_t m,
                                         GradientFeatures features) {
  return (gradient_walk_cells(stored, n, m, features) +
          gradient_walk_indices(n, m)) *
         std::int64_t(sizeof(acc_t));
}

// The pair-parallel forward: each thread runs whole pairs (walk_pair), in
// one rolling row of R (rows(p, 0, ·), M + 1 cells) and only over the
// band's cells. For many short pairs (the CPU main job: thousands of series
// of 60 to 2,000 points) it beats the tiled wavefront, whose per-tile work
// (scratch, boundaries, a launch per anti-diagonal) dominates there; one
// long pair keeps the wavefront, which spreads a pair over many threads.
template <class Space, class CostProvider>
void pair_forward(const Space& space, const CostProvider& cost, Band band,
                  acc_t gamma, std::int64_t pairs,
                  const AccValues<Space>& values, const Array3<Space>& rows) {
  using W = typename CostProvider::work_type;
  SoftMin<W> const soft(gamma);
  bool const hard = gamma == 0;
  Kokkos::parallel_for(
      "softwave::softdtw::pair_forward",
      Kokkos::RangePolicy<Space>(space, 0, pairs),
      KOKKOS_LAMBDA(std::int64_t p) {
        values(p) = walk_pair(cost, band, soft, hard, p, &rows(p, 0, 0));
      });
}

// The pair-parallel Soft-DTW forward on host backends: each pair walked
// anti-diagonal by anti-diagonal in SIMD lanes (walk_pair_diagonals) in the
// work(t, 0, ·) of the thread's token t (diagonal_blocks). Host code only:
// the lanes' loop is compiled for the host's vector units
// (host_diagonal.cpp).
template <class Space, class CostProvider>
void pair_forward_diagonals(const Space& space, const CostProvider& cost,
                            Band band, acc_t gamma, std::int64_t pairs,
                            const AccValues<Space>& values,
                            const Array3<Space>& work) {
  Kokkos::Experimental::UniqueToken<Space> const token(space);
  Kokkos::parallel_for(
      "softwave::softdtw::pair_forward_diagonals",
      Kokkos::RangePolicy<Space, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0,
                                                                    pairs),
      [=](std::int64_t p) {
        int const t = token.acquire();
        values(p) = walk_pair_diagonals(cost, band, gamma, p, &work(t, 0, 0));
        token.release(t);
      });
}

// The pair-parallel Soft-DTW forward and backward on host backends: each
// pair walked by walk_pair_gradients in the work(t, 0, ·) and index(t, ·)
// of the thread's token t, which writes the pair's alignment and adds its
// gradients (pairs write disjoint outputs: gradients are of batched pairs,
// one series pair each).
template <class Space, class CostProvider, class T>
void pair_backward_diagonals(
    const Space& space, const CostProvider& cost, Band band, acc_t gamma,
    std::int64_t pairs, std::int64_t stored, const AccValues<Space>& values,
    const BackwardOutputs<T, Space>& outputs, const Array3<Space>& work,
    const Kokkos::View<std::int64_t**, Kokkos::LayoutRight,
                       typename Space::memory_space>& index) {
  Kokkos::Experimental::UniqueToken<Space> const token(space);
  Kokkos::parallel_for(
      "softwave::softdtw::pair_backward_diagonals",
      Kokkos::RangePolicy<Space, Kokkos::Schedule<Kokkos::Dynamic>>(space, 0,
                                                                    pairs),
      [=](std::int64_t p) {
        // E is the pair's own alignment; the incoming gradient weights it
        // only where gradients are formed (as in BackwardTiles).
        acc_t const weight =
            outputs.scale * (outputs.grad_output.extent(0)
                                 ? acc_t(outputs.grad_output(p))
                                 : acc_t(1));
        PairBackward<ArrayView3<T, Space>> const out{
            outputs.alignment,
            outputs.alignment_is_gradient ? weight : acc_t(1), weight};
        int const t = token.acquire();
        values(p) = walk_pair_gradients(cost, band, gamma, p, stored, out,
                                        &work(t, 0, 0), &index(t, 0));
        token.release(t);
      });
}

// Hard DTW's optimal paths by the pair-parallel walk: each thread walks a
// pair (walk_pair<true>) keeping every cell's Step (steps(p, ·), N·M
// bytes), then follows the path back (trace_path) into path_first and
// path_last. On host backends for many short pairs this is what the
// forward-backward tile sweeps cost several times over.
template <class Space, class CostProvider, class T>
void pair_paths(const Space& space, const CostProvider& cost, Band band,
                std::int64_t begin, std::int64_t pairs,
                const AccValues<Space>& values, const Array3<Space>& rows,
                const Kokkos::View<unsigned char**, Kokkos::LayoutRight,
                                   typename Space::memory_space>& steps,
                const BackwardOutputs<T, Space>& outputs) {
  using W = typename CostProvider::work_type;
  SoftMin<W> const unused;
  auto const first = outputs.path_first, last = outputs.path_last;
  Kokkos::parallel_for(
      "softwave::softdtw::pair_paths",
      Kokkos::RangePolicy<Space>(space, 0, pairs),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const p = begin + q;
        values(p) = walk_pair<true>(cost, band, unused, true, p, &rows(q, 0, 0),
                                    &steps(q, 0));
        trace_path(&steps(q, 0), cost.n(p), cost.m(p),
                   Kokkos::subview(first, p, Kokkos::ALL),
                   Kokkos::subview(last, p, Kokkos::ALL));
      });
}

// Runs the sweeps for `pairs` pairs of one cost provider.
template <class Space, class CostProvider>
class Sweeper {
 public:
  using T = typename CostProvider::value_type;

  Sweeper(const Space& space, const CostProvider& cost,
          const SoftDTWOptions& options, std::int64_t n_max, std::int64_t m_max)
      : space_(space),
        cost_(cost),
        band_(band_of(options)),
        gamma_(options.gamma),
        plan_(scratch_plan<Space>(options)),
        tiling_(plan_.tile, n_max, m_max),
        n_max_(n_max),
        m_max_(m_max),
        options_(options),
        specialised_(use_specialised(cost, options)) {}

  CostProvider& cost() { return cost_; }

  // Forward only, O(N + M) memory per pair: values (double) of `pairs` pairs.
  void forward(std::int64_t pairs, const AccValues<Space>& values) {
    if (specialised_)
      return Specialised::run(space_, cost_, options_, pairs, values.data(),
                              nullptr);
    if (pair_parallel(pairs)) {
      if constexpr (runs_on_host<Space>()) {
        if (gamma_ > 0) return forward_diagonals(pairs, values);
      }
      if (pair_rows_.view.extent(0) < std::size_t(pairs))
        pair_rows_ =
            call_array<Array3<Space>>(space_, "softwave::softdtw::pair_rows",
                                      false, pairs, 1, m_max_ + 1);
      return pair_forward(space_, cost_, band_, gamma_, pairs, values,
                          pair_rows_.view);
    }
    if (workspace_.row_checkpoints.extent(0) < std::size_t(pairs))
      workspace_ = allocate(pairs, /*backward=*/false);
    ForwardTiles<Space, CostProvider> tiles;
    setup(tiles);
    tiles.values = values;
    for (int k = 0; k < tiling_.diagonals(); ++k)
      launch(tiles, k, pairs, "softwave::softdtw::forward_tiles");
  }

  // Forward with checkpoints, then backward: values and every output asked
  // for in `outputs` and in the cost provider (gradients are added to).
  void forward_backward(std::int64_t pairs, const AccValues<Space>& values,
                        const BackwardOutputs<T, Space>& outputs) {
    // The specialised backward zeroes them inside its forward kernel.
    if (outputs.start_gradients_at_zero && !(specialised_ && gamma_ > 0))
      cost_.zero_gradients(space_);
    // Hard-DTW paths alone (dtw_path) may take the pair-parallel walk.
    bool const paths_only = outputs.path_first.extent(0) > 0 &&
                            outputs.alignment.extent(0) == 0 && gamma_ == 0;
    if (paths_only && pair_parallel(pairs))
      return walk_paths(pairs, values, outputs);
    if constexpr (runs_on_host<Space>() && CostProvider::kPairGradients) {
      if (gamma_ > 0 && outputs.path_first.extent(0) == 0 &&
          pair_parallel(pairs) && backward_diagonals(pairs, values, outputs))
        return;
    }
    if (options_.kernel == Kernel::pairs)
      throw_invalid_argument(
          "kernel = pairs computes values, hard-DTW paths and, on host "
          "backends, gradients and alignments for gamma > 0; the others "
          "take kernel = automatic, portable or specialised");
    // The specialised path's backward is Soft-DTW's: hard DTW's gradients,
    // alignments and paths take the portable kernels.
    if (specialised_ && gamma_ > 0)
      return Specialised::run(space_, cost_, options_, pairs, values.data(),
                              &outputs);
    if (specialised_ && options_.kernel == Kernel::specialised)
      throw_invalid_argument(
          "kernel = specialised computes hard-DTW (gamma = 0) values only; "
          "their gradients, alignments and paths take kernel = automatic or "
          "portable");
    workspace_ = allocate(pairs, /*backward=*/true);
    ForwardTiles<Space, CostProvider> forward_tiles;
    setup(forward_tiles);
    forward_tiles.values = values;
    for (int k = 0; k < tiling_.diagonals(); ++k)
      launch(forward_tiles, k, pairs, "softwave::softdtw::forward_tiles");
    BackwardTiles<Space, CostProvider> backward_tiles;
    setup(backward_tiles);
    backward_tiles.outputs = outputs;
    for (int k = tiling_.diagonals() - 1; k >= 0; --k)
      launch(backward_tiles, k, pairs, "softwave::softdtw::backward_tiles");
  }

 private:
  using Specialised = SpecialisedPath<Space, CostProvider>;

  static bool use_specialised(const CostProvider& cost,
                              const SoftDTWOptions& options) {
    if (options.kernel == Kernel::portable || options.kernel == Kernel::pairs)
      return false;
    std::string const why = Specialised::unavailable(cost, options);
    if (why.empty()) return true;
    if (options.kernel == Kernel::specialised)
      throw_invalid_argument("kernel = specialised does not apply: ", why);
    return false;
  }

  // pair_forward_diagonals, one block of work a thread (a block's work
  // grows with d·(N + M)).
  void forward_diagonals(std::int64_t pairs, const AccValues<Space>& values) {
    std::int64_t const cells = diagonal_walk_cells(
        n_max_, m_max_, diagonal_features(cost_.pair_cells(0)));
    std::int64_t const blocks = diagonal_blocks(space_);
    if (pair_rows_.view.extent(0) < std::size_t(blocks) ||
        pair_rows_.view.extent(2) < std::size_t(cells))
      pair_rows_ = call_array<Array3<Space>>(
          space_, "softwave::softdtw::diagonal_work", false, blocks, 1, cells);
    pair_forward_diagonals(space_, cost_, band_, gamma_, pairs, values,
                           pair_rows_.view);
  }

  // pair_backward_diagonals, one block of work a thread; false, and
  // nothing run, where `automatic` would give a block more than
  // kBackwardBlockLimit.
  bool backward_diagonals(std::int64_t pairs, const AccValues<Space>& values,
                          const BackwardOutputs<T, Space>& outputs) {
    std::int64_t stored = 0;
    CostProvider const cost = cost_;
    Band const band = band_;
    Kokkos::parallel_reduce(
        "softwave::softdtw::stored_diagonal_cells",
        Kokkos::RangePolicy<Space>(space_, 0, pairs),
        [=](std::int64_t p, std::int64_t& most) {
          std::int64_t const cells =
              stored_diagonal_cells(band, cost.n(p), cost.m(p));
          most = cells > most ? cells : most;
        },
        Kokkos::Max<std::int64_t>(stored));
    GradientFeatures const features = gradient_features(cost_.pair_cells(0));
    std::int64_t const block_bytes =
        gradient_block_bytes(stored, n_max_, m_max_, features);
    if (options_.kernel != Kernel::pairs && block_bytes > kBackwardBlockLimit)
      return false;
    std::int64_t const blocks = diagonal_blocks(space_);
    std::int64_t const cells =
        gradient_walk_cells(stored, n_max_, m_max_, features);
    std::int64_t const indices = gradient_walk_indices(n_max_, m_max_);
    using Index = Kokkos::View<std::int64_t**, Kokkos::LayoutRight,
                               typename Space::memory_space>;
    auto const work = call_array<Array3<Space>>(
        space_, "softwave::softdtw::gradient_work", false, blocks, 1, cells);
    auto const index = call_array<Index>(
        space_, "softwave::softdtw::gradient_index", false, blocks, indices);
    pair_backward_diagonals(space_, cost_, band_, gamma_, pairs, stored, values,
                            outputs, work.view, index.view);
    return true;
  }

  // pair_paths in chunks whose Steps (N·M bytes a pair) stay under 256 MiB.
  void walk_paths(std::int64_t pairs, const AccValues<Space>& values,
                  const BackwardOutputs<T, Space>& outputs) {
    using Steps = Kokkos::View<unsigned char**, Kokkos::LayoutRight,
                               typename Space::memory_space>;
    std::int64_t const cells = std::max<std::int64_t>(1, n_max_ * m_max_);
    std::int64_t const chunk =
        std::clamp<std::int64_t>((256ll << 20) / cells, 1, pairs);
    auto const steps = call_array<Steps>(space_, "softwave::softdtw::steps",
                                         false, chunk, cells);
    auto const rows = call_array<Array3<Space>>(
        space_, "softwave::softdtw::pair_rows", false, chunk, 1, m_max_ + 1);
    for (std::int64_t begin = 0; begin < pairs; begin += chunk)
      pair_paths(space_, cost_, band_, begin, std::min(chunk, pairs - begin),
                 values, rows.view, steps.view, outputs);
  }

  bool pair_parallel(std::int64_t pairs) const {
    return takes_pair_walks(space_, options_, pairs);
  }

  // The sweep's arrays come from call_array: stream-ordered on Kokkos::Cuda,
  // so releasing them waits for nothing (a Kokkos 3.4 view would be freed
  // with cudaFree, which waits for the whole device).
  Array3<Space> workspace_array(const char* label, bool zero, std::int64_t a,
                                std::int64_t b, std::int64_t c) {
    auto array = call_array<Array3<Space>>(space_, label, zero, a, b, c);
    workspace_memory_.push_back(array.owner);
    return array.view;
  }

  Workspace<Space> allocate(std::int64_t pairs, bool backward) {
    workspace_memory_.clear();
    Workspace<Space> ws;
    ws.rolling = !backward;
    int const row_slots = backward ? tiling_.rows : 1;
    int const col_slots = backward ? tiling_.cols : 1;
    auto const [row_cells, col_cells] =
        backward
            ? boundary_cells(space_, cost_, band_, pairs, n_max_, m_max_)
            : std::pair<std::int64_t, std::int64_t>{m_max_ + 1, n_max_ + 1};
    ws.row_checkpoints = workspace_array("softwave::softdtw::row_checkpoints",
                                         false, pairs, row_slots, row_cells);
    ws.col_checkpoints = workspace_array("softwave::softdtw::col_checkpoints",
                                         false, pairs, col_slots, col_cells);
    if (!backward)
      ws.corners = workspace_array("softwave::softdtw::corners", false, pairs,
                                   3, tiling_.rows);
    if (backward) {
      // Messages are added to by up to two tiles, so they start at zero.
      ws.from_below = workspace_array("softwave::softdtw::from_below", true,
                                      pairs, tiling_.rows, row_cells);
      ws.from_right = workspace_array("softwave::softdtw::from_right", true,
                                      pairs, tiling_.cols, col_cells);
    }
    return ws;
  }

  template <class Tiles>
  void setup(Tiles& tiles) const {
    tiles.cost = cost_;
    tiles.band = band_;
    tiles.soft = decltype(tiles.soft)(gamma_);
    tiles.feature_chunk = cost_.feature_chunk();
    tiles.tiling = tiling_;
    tiles.workspace = workspace_;
    tiles.scratch_level = plan_.level;
  }

  template <class Tiles>
  void launch(Tiles& tiles, int k, std::int64_t pairs,
              const char* label) const {
    tiles.diagonal = k;
    tiles.first_row = tiling_.first_row(k);
    tiles.tiles_on = tiling_.tiles_on(k);
    int const teams = int(pairs * tiles.tiles_on);
    auto policy = compat::light_weight(Kokkos::TeamPolicy<Space>(
        space_, teams, team_size_for(space_, tiling_.tile, teams)));
    policy.set_scratch_size(plan_.level,
                            Kokkos::PerTeam(Tiles::scratch_bytes(
                                tiling_.tile, tiles.feature_chunk)));
    Kokkos::parallel_for(label, policy, tiles);
  }

  Space space_;
  CostProvider cost_;
  Band band_;
  acc_t gamma_;
  ScratchPlan plan_;
  Tiling tiling_;
  std::int64_t n_max_, m_max_;
  SoftDTWOptions options_;
  bool specialised_;
  Workspace<Space> workspace_;
  std::vector<std::shared_ptr<void>> workspace_memory_;  // keeps workspace_
  CallArray<Array3<Space>> pair_rows_;  // the pair-parallel forward's rows
};

template <class Space, class CostProvider>
Sweeper<Space, CostProvider> make_sweeper(const Space& space,
                                          const CostProvider& cost,
                                          const SoftDTWOptions& options,
                                          std::int64_t n_max,
                                          std::int64_t m_max) {
  return Sweeper<Space, CostProvider>(space, cost, options, n_max, m_max);
}

}  // namespace
}  // namespace softwave::impl
