// Drivers of the public Soft-DTW entry points: argument checks, workspace,
// the forward and backward tile sweeps, and the explicit instantiations.

#include <algorithm>
#include <climits>
#include <memory>
#include <softwave/softdtw.hpp>
#include <vector>

#include "costs.hpp"
#include "geometry.hpp"
#include "specialised.hpp"
#include "sweep.hpp"
#include "validate.hpp"

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
    if (specialised_)
      return Specialised::run(space_, cost_, options_, pairs, values.data(),
                              &outputs);
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
    if (options.kernel == Kernel::portable) return false;
    std::string const why = Specialised::unavailable(cost, options);
    if (why.empty()) return true;
    if (options.kernel == Kernel::specialised)
      throw_invalid_argument("kernel = specialised does not apply: ", why);
    return false;
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
    ws.corners = workspace_array("softwave::softdtw::corners", false, pairs,
                                 tiling_.rows, tiling_.cols);
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
};

template <class Space, class CostProvider>
Sweeper<Space, CostProvider> make_sweeper(const Space& space,
                                          const CostProvider& cost,
                                          const SoftDTWOptions& options,
                                          std::int64_t n_max,
                                          std::int64_t m_max) {
  return Sweeper<Space, CostProvider>(space, cost, options, n_max, m_max);
}

// Calls f(SeriesCost<T, Space, metric>{...}) for the metric in `options`.
template <class T, class Space, class F>
void with_metric(const SoftDTWOptions& options, ConstSeriesView<T, Space> x,
                 ConstSeriesView<T, Space> y, const PairLengths<Space>& lengths,
                 const ArrayView3<value_t<T>, Space>& grad_x,
                 const ArrayView3<value_t<T>, Space>& grad_y, const F& f) {
  switch (options.cost) {
    case Cost::sqeuclidean:
      return f(SeriesCost<T, Space, Cost::sqeuclidean>{x, y, lengths, grad_x,
                                                       grad_y});
    case Cost::l1:
      return f(SeriesCost<T, Space, Cost::l1>{x, y, lengths, grad_x, grad_y});
    case Cost::cosine:
      return f(
          SeriesCost<T, Space, Cost::cosine>{x, y, lengths, grad_x, grad_y});
  }
  throw_invalid_argument("cost must be sqeuclidean, l1 or cosine (got ",
                         static_cast<int>(options.cost), ")");
}

template <class Space, class T>
void store_values(const Space& space, const AccValues<Space>& from,
                  const ArrayView1<T, Space>& to) {
  if (to.extent(0) == 0) return;
  Kokkos::parallel_for(
      "softwave::softdtw::store_values",
      Kokkos::RangePolicy<Space>(space, 0, to.extent(0)),
      KOKKOS_LAMBDA(std::int64_t b) { to(b) = T(from(b)); });
}

template <class Space, class T>
void add_into(const Space& space, const ArrayView3<T, Space>& to,
              const ArrayView3<T, Space>& from) {
  Kokkos::parallel_for(
      "softwave::softdtw::add_gradients",
      Kokkos::RangePolicy<Space>(space, 0, to.size()),
      KOKKOS_LAMBDA(std::int64_t q) { to.data()[q] += from.data()[q]; });
}

// Where a gradient the caller asked for is accumulated: the caller's array
// itself, or for 16-bit inputs a float array that round_into() rounds into
// the caller's array once the sweeps are done. Starts at zero; empty when the
// gradient was not asked for.
template <class T, class Space>
CallArray<ArrayView3<value_t<T>, Space>> gradient_accumulator(
    const Space& space, const ArrayView3<T, Space>& out, const char* label) {
  CallArray<ArrayView3<value_t<T>, Space>> sum;
  if (out.extent(0) == 0 && out.data() == nullptr) return sum;
  if constexpr (std::is_same_v<value_t<T>, T>) {
    Kokkos::deep_copy(space, out, T(0));
    sum.view = out;
  } else {
    sum = call_array<ArrayView3<value_t<T>, Space>>(
        space, label, /*zero=*/true, out.extent(0), out.extent(1),
        out.extent(2));
  }
  return sum;
}

template <class T, class Space>
void round_into(const Space& space,
                const CallArray<ArrayView3<value_t<T>, Space>>& sum,
                const ArrayView3<T, Space>& out) {
  if constexpr (!std::is_same_v<value_t<T>, T>) {
    if (sum.view.extent(0) == 0) return;
    auto const from = sum.view;
    Kokkos::parallel_for(
        "softwave::softdtw::round_gradients",
        Kokkos::RangePolicy<Space>(space, 0, out.size()),
        KOKKOS_LAMBDA(std::int64_t q) { out.data()[q] = T(from.data()[q]); });
  }
}

// matrix entries of pairs [begin, begin + count) (numbered row-major); the
// divergence when the self terms are given.
template <class Space, class T>
void store_pairwise(const Space& space, const AccValues<Space>& values,
                    std::int64_t begin, std::int64_t count, std::int64_t b2,
                    const AccValues<Space>& self_x,
                    const AccValues<Space>& self_y,
                    const ArrayView2<T, Space>& matrix) {
  bool const divergence = self_x.extent(0) > 0;
  Kokkos::parallel_for(
      "softwave::softdtw::store_pairwise",
      Kokkos::RangePolicy<Space>(space, 0, count),
      KOKKOS_LAMBDA(std::int64_t p) {
        acc_t value = values(p);
        std::int64_t const q = begin + p;
        if (divergence) value -= (self_x(q / b2) + self_y(q % b2)) / 2;
        matrix(q / b2, q % b2) = T(value);
      });
}

template <class Space>
PairLengths<Space> batch_lengths(
    Kokkos::View<const int*, typename Space::memory_space> x,
    Kokkos::View<const int*, typename Space::memory_space> y,
    std::int64_t n_max, std::int64_t m_max) {
  return PairLengths<Space>{x, y, n_max, m_max, PairMap{}};
}

// Checks shared by every entry point on two batches of series; returns the
// lengths the call uses (see DataChecks::lengths).
template <class Space, class T>
Lengths<Space> check_series_pair(DataChecks<Space>& checks,
                                 ConstSeriesView<T, Space> x,
                                 ConstSeriesView<T, Space> y,
                                 const Lengths<Space>& lengths,
                                 bool same_batch) {
  check_sequences(x, "x");
  check_sequences(y, "y");
  if (same_batch && x.extent(0) != y.extent(0))
    throw_invalid_argument("x and y have different batch sizes (x: ",
                           x.extent(0), ", y: ", y.extent(0), ")");
  if (x.extent(0) && y.extent(0) && x.extent(2) != y.extent(2))
    throw_invalid_argument("x and y have different feature counts (x: ",
                           x.extent(2), ", y: ", y.extent(2), ")");
  Lengths<Space> const used{
      checks.lengths(lengths.x, "lengths.x", x.extent(0), x.extent(1)),
      checks.lengths(lengths.y, "lengths.y", y.extent(0), y.extent(1))};
  checks.template finite_series<T>(x, used.x, "x");
  checks.template finite_series<T>(y, used.y, "y");
  return used;
}

template <class Space, class T>
void check_gradients(DataChecks<Space>& checks,
                     const SeriesGradients<T, Space>& g,
                     ConstSeriesView<T, Space> x, ConstSeriesView<T, Space> y) {
  std::size_t const B = x.extent(0);
  if (g.grad_x.extent(0) || g.grad_x.data())
    check_extent(g.grad_x, "grad_x", {B, x.extent(1), x.extent(2)},
                 "(the shape of x)");
  if (g.grad_y.extent(0) || g.grad_y.data())
    check_extent(g.grad_y, "grad_y", {B, y.extent(1), y.extent(2)},
                 "(the shape of y)");
  if (g.alignment.extent(0) || g.alignment.data())
    check_extent(g.alignment, "alignment", {B, x.extent(1), y.extent(1)},
                 "(batch, N, M)");
  if (g.grad_output.extent(0) || g.grad_output.data())
    check_extent(g.grad_output, "grad_output", {B}, "(one per pair)");
  checks.template finite_weights<value_t<T>>(g.grad_output);
}

template <class View>
bool given(const View& v) {
  return v.extent(0) > 0 || v.data() != nullptr;
}

}  // namespace

template <class Space>
int tile_size(const Space&, const SoftDTWOptions& options) {
  return scratch_plan<Space>(options).tile;
}

template <class Space, class T>
void soft_dtw(const Space& space, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView1<value_t<T>, Space> values,
              const SeriesGradients<T, Space>* gradients,
              const SoftDTWOptions& options, const Lengths<Space>& lengths) {
  check_options(options);
  DataChecks<Space> checks(space, options.check_values);
  auto const used = check_series_pair(checks, x, y, lengths,
                                      /*same_batch=*/true);
  std::size_t const B = x.extent(0);
  if (!gradients || given(values))
    check_extent(values, "values", {B}, "(one per pair)");
  if (gradients) check_gradients(checks, *gradients, x, y);
  checks.finish();
  if (B == 0) return;

  auto const pair_lengths =
      batch_lengths<Space>(used.x, used.y, x.extent(1), y.extent(1));
  auto const acc_memory = acc_values(space, B);
  auto const& acc = acc_memory.view;
  CallArray<ArrayView3<value_t<T>, Space>> grad_x, grad_y;
  if (gradients) {
    grad_x = gradient_accumulator(space, gradients->grad_x,
                                  "softwave::softdtw::grad_x_sum");
    grad_y = gradient_accumulator(space, gradients->grad_y,
                                  "softwave::softdtw::grad_y_sum");
    if (given(gradients->alignment))
      Kokkos::deep_copy(space, gradients->alignment, T(0));
  }
  with_metric<T, Space>(options, x, y, pair_lengths, grad_x.view, grad_y.view,
                        [&](const auto& cost) {
                          auto sweeper = make_sweeper(space, cost, options,
                                                      x.extent(1), y.extent(1));
                          if (!gradients) return sweeper.forward(B, acc);
                          BackwardOutputs<T, Space> outputs;
                          outputs.grad_output = gradients->grad_output;
                          outputs.alignment = gradients->alignment;
                          sweeper.forward_backward(B, acc, outputs);
                        });
  store_values(space, acc, values);
  if (gradients) {
    round_into(space, grad_x, gradients->grad_x);
    round_into(space, grad_y, gradients->grad_y);
  }
}

template <class Space, class T>
void soft_dtw_cost(const Space& space, ConstSeriesView<T, Space> cost,
                   ArrayView1<value_t<T>, Space> values,
                   const CostGradients<T, Space>* gradients,
                   const SoftDTWOptions& options,
                   const Lengths<Space>& lengths) {
  check_options(options);
  std::size_t const B = cost.extent(0);
  if (B > 0 && (cost.extent(1) == 0 || cost.extent(2) == 0))
    throw_invalid_argument("cost is empty (shape (", B, ", ", cost.extent(1),
                           ", ", cost.extent(2),
                           ")): sequences need at least one element");
  if (!gradients || given(values))
    check_extent(values, "values", {B}, "(one per pair)");
  if (gradients) {
    check_extent(gradients->grad_cost, "grad_cost",
                 {B, cost.extent(1), cost.extent(2)}, "(the shape of cost)");
    if (given(gradients->grad_output))
      check_extent(gradients->grad_output, "grad_output", {B},
                   "(one per pair)");
  }
  DataChecks<Space> checks(space, options.check_values);
  Lengths<Space> const used{
      checks.lengths(lengths.x, "lengths.x", B, cost.extent(1)),
      checks.lengths(lengths.y, "lengths.y", B, cost.extent(2))};
  checks.template finite_costs<T>(cost, used, band_of(options));
  if (gradients)
    checks.template finite_weights<value_t<T>>(gradients->grad_output);
  checks.finish();
  if (B == 0) return;

  TensorCost<T, Space> const provider{
      cost,
      batch_lengths<Space>(used.x, used.y, cost.extent(1), cost.extent(2))};
  auto sweeper =
      make_sweeper(space, provider, options, cost.extent(1), cost.extent(2));
  auto const acc_memory = acc_values(space, B);
  auto const& acc = acc_memory.view;
  if (!gradients) {
    sweeper.forward(B, acc);
  } else {
    Kokkos::deep_copy(space, gradients->grad_cost, T(0));
    BackwardOutputs<T, Space> outputs;
    outputs.grad_output = gradients->grad_output;
    outputs.alignment = gradients->grad_cost;
    outputs.alignment_is_gradient = true;
    sweeper.forward_backward(B, acc, outputs);
  }
  store_values(space, acc, values);
}

template <class Space, class T>
void soft_dtw_divergence(const Space& space, ConstSeriesView<T, Space> x,
                         ConstSeriesView<T, Space> y,
                         ArrayView1<value_t<T>, Space> values,
                         const SeriesGradients<T, Space>* gradients,
                         const SoftDTWOptions& options,
                         const Lengths<Space>& lengths) {
  using G = value_t<T>;
  check_options(options);
  DataChecks<Space> checks(space, options.check_values);
  auto const used = check_series_pair(checks, x, y, lengths,
                                      /*same_batch=*/true);
  std::size_t const B = x.extent(0);
  if (!gradients || given(values))
    check_extent(values, "values", {B}, "(one per pair)");
  if (gradients) {
    if (given(gradients->alignment))
      throw_invalid_argument(
          "alignment must be empty for the divergence (it has three)");
    check_gradients(checks, *gradients, x, y);
  }
  checks.finish();
  if (B == 0) return;

  CallArray<ArrayView3<G, Space>> grad_x_sum, grad_y_sum;
  if (gradients) {
    grad_x_sum = gradient_accumulator(space, gradients->grad_x,
                                      "softwave::softdtw::grad_x_sum");
    grad_y_sum = gradient_accumulator(space, gradients->grad_y,
                                      "softwave::softdtw::grad_y_sum");
  }
  auto const grad_x = grad_x_sum.view, grad_y = grad_y_sum.view;
  // One term: sdtw(a, b) weighted by `scale`; the b-side gradient goes to a
  // scratch array when it must be added to the same array as the a side.
  auto term = [&](ConstSeriesView<T, Space> a, ConstSeriesView<T, Space> b,
                  Kokkos::View<const int*, typename Space::memory_space> la,
                  Kokkos::View<const int*, typename Space::memory_space> lb,
                  ArrayView3<G, Space> ga, ArrayView3<G, Space> gb,
                  acc_t scale) {
    auto acc_memory = acc_values(space, B);
    auto const& acc = acc_memory.view;
    auto const pair_lengths =
        batch_lengths<Space>(la, lb, a.extent(1), b.extent(1));
    with_metric<T, Space>(
        options, a, b, pair_lengths, ga, gb, [&](const auto& cost) {
          auto sweeper =
              make_sweeper(space, cost, options, a.extent(1), b.extent(1));
          if (!given(ga) && !given(gb)) return sweeper.forward(B, acc);
          BackwardOutputs<T, Space> outputs;
          outputs.grad_output = gradients->grad_output;
          outputs.scale = scale;
          sweeper.forward_backward(B, acc, outputs);
        });
    return acc_memory;
  };
  auto zeroed_like = [&](const ArrayView3<G, Space>& like, const char* label) {
    return call_array<ArrayView3<G, Space>>(space, label, /*zero=*/true,
                                            like.extent(0), like.extent(1),
                                            like.extent(2));
  };

  auto const xy_memory = term(x, y, used.x, used.y, grad_x, grad_y, 1);
  CallArray<ArrayView3<G, Space>> other_x, other_y;
  if (given(grad_x))
    other_x = zeroed_like(grad_x, "softwave::softdtw::grad_xx");
  if (given(grad_y))
    other_y = zeroed_like(grad_y, "softwave::softdtw::grad_yy");
  auto const xx_memory = term(x, x, used.x, used.x, grad_x, other_x.view, -0.5);
  auto const yy_memory = term(y, y, used.y, used.y, grad_y, other_y.view, -0.5);
  if (given(grad_x)) add_into(space, grad_x, other_x.view);
  if (given(grad_y)) add_into(space, grad_y, other_y.view);
  if (gradients) {
    round_into(space, grad_x_sum, gradients->grad_x);
    round_into(space, grad_y_sum, gradients->grad_y);
  }
  auto const xy = xy_memory.view, xx = xx_memory.view, yy = yy_memory.view;
  if (given(values))
    Kokkos::parallel_for(
        "softwave::softdtw::divergence_values",
        Kokkos::RangePolicy<Space>(space, 0, B), KOKKOS_LAMBDA(std::int64_t b) {
          values(b) = G(xy(b) - (xx(b) + yy(b)) / 2);
        });
}

template <class Space, class T>
void pairwise(const Space& space, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView2<value_t<T>, Space> matrix,
              PairwiseValue what, const SoftDTWOptions& options,
              const Lengths<Space>& lengths) {
  check_options(options);
  DataChecks<Space> checks(space, options.check_values);
  auto const used = check_series_pair(checks, x, y, lengths,
                                      /*same_batch=*/false);
  std::int64_t const B1 = x.extent(0), B2 = y.extent(0);
  check_extent(matrix, "matrix", {std::size_t(B1), std::size_t(B2)},
               "(x batch, y batch)");
  checks.finish();
  if (B1 == 0 || B2 == 0) return;

  std::int64_t const N = x.extent(1), M = y.extent(1);
  // The self terms of the divergence, one per series of each side.
  CallArray<AccValues<Space>> self_x, self_y;
  if (what == PairwiseValue::divergence) {
    auto self = [&](ConstSeriesView<T, Space> s,
                    Kokkos::View<const int*, typename Space::memory_space> l) {
      auto acc_memory = acc_values(space, s.extent(0));
      with_metric<T, Space>(
          options, s, s, batch_lengths<Space>(l, l, s.extent(1), s.extent(1)),
          {}, {}, [&](const auto& cost) {
            make_sweeper(space, cost, options, s.extent(1), s.extent(1))
                .forward(s.extent(0), acc_memory.view);
          });
      return acc_memory;
    };
    self_x = self(x, used.x);
    self_y = self(y, used.y);
  }

  // Pairs stream through the forward sweep in chunks whose rolling workspace
  // stays under 256 MiB, so memory never grows with B1·B2.
  Tiling const tiling(impl::tile_size(space, options), N, M);
  std::int64_t const bytes_per_pair =
      sizeof(acc_t) *
      ((N + 1) + (M + 1) + std::int64_t(tiling.rows) * tiling.cols + 1);
  std::int64_t const total = B1 * B2;
  std::int64_t chunk =
      std::max<std::int64_t>(1, (256ll << 20) / bytes_per_pair);
  chunk = std::min(
      {chunk, total, std::int64_t(INT_MAX) / std::max(tiling.rows, 1) - 1});
  auto const acc_memory = acc_values(space, chunk);
  auto const& acc = acc_memory.view;
  with_metric<T, Space>(
      options, x, y, PairLengths<Space>{used.x, used.y, N, M, PairMap{}}, {},
      {}, [&](const auto& cost) {
        auto sweeper = make_sweeper(space, cost, options, N, M);
        for (std::int64_t begin = 0; begin < total; begin += chunk) {
          std::int64_t const count = std::min(chunk, total - begin);
          sweeper.cost().lengths.pairs = PairMap{begin, B2};
          sweeper.forward(count, acc);
          store_pairwise(space, acc, begin, count, B2, self_x.view, self_y.view,
                         matrix);
        }
      });
}

template <class Space, class T>
void dtw_path(const Space& space, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView1<value_t<T>, Space> values,
              ArrayView3<int, Space> path, ArrayView1<int, Space> path_length,
              const SoftDTWOptions& options, const Lengths<Space>& lengths) {
  SoftDTWOptions hard = options;
  hard.gamma = 0;
  check_options(hard);
  DataChecks<Space> checks(space, options.check_values);
  auto const used = check_series_pair(checks, x, y, lengths,
                                      /*same_batch=*/true);
  std::size_t const B = x.extent(0);
  std::size_t const N = x.extent(1), M = y.extent(1);
  if (given(values)) check_extent(values, "values", {B}, "(one per pair)");
  check_extent(path, "path", {B, N + M - 1, 2}, "(batch, N + M - 1, 2)");
  check_extent(path_length, "path_length", {B}, "(one per pair)");
  checks.finish();
  if (B == 0) return;

  BackwardOutputs<T, Space> outputs;
  using PathColumns = decltype(outputs.path_first);
  auto const first_memory = call_array<PathColumns>(
      space, "softwave::softdtw::path_first", false, B, N);
  auto const last_memory = call_array<PathColumns>(
      space, "softwave::softdtw::path_last", false, B, N);
  outputs.path_first = first_memory.view;
  outputs.path_last = last_memory.view;
  Kokkos::deep_copy(space, outputs.path_first, INT_MAX);
  Kokkos::deep_copy(space, outputs.path_last, -1);
  auto const acc_memory = acc_values(space, B);
  auto const& acc = acc_memory.view;
  auto const pair_lengths = batch_lengths<Space>(used.x, used.y, N, M);
  with_metric<T, Space>(
      hard, x, y, pair_lengths, {}, {}, [&](const auto& cost) {
        make_sweeper(space, cost, hard, N, M).forward_backward(B, acc, outputs);
      });
  store_values(space, acc, values);

  // A monotone path covers one run of columns per row: list them in order.
  auto const first = outputs.path_first, last = outputs.path_last;
  auto const lx = used.x;
  std::int64_t const steps = N + M - 1;
  Kokkos::parallel_for(
      "softwave::softdtw::path_list", Kokkos::RangePolicy<Space>(space, 0, B),
      KOKKOS_LAMBDA(std::int64_t b) {
        std::int64_t const n = lx.extent(0) ? lx(b) : std::int64_t(N);
        std::int64_t k = 0;
        // k < steps holds for any monotone path; the bound keeps unchecked
        // non-finite inputs (check_values = false) inside the output too.
        for (std::int64_t i = 0; i < n; ++i)
          for (int j = first(b, i); j <= last(b, i) && k < steps; ++j, ++k) {
            path(b, k, 0) = int(i);
            path(b, k, 1) = j;
          }
        path_length(b) = int(k);
        for (; k < steps; ++k) path(b, k, 0) = path(b, k, 1) = -1;
      });
}

// Explicit instantiations for the default execution space and, when that is
// a device, the default host space as well.
#define SOFTWAVE_INSTANTIATE_SOFTDTW(SPACE, T)                                \
  template void soft_dtw<SPACE, T>(                                           \
      const SPACE&, ConstSeriesView<T, SPACE>, ConstSeriesView<T, SPACE>,     \
      ArrayView1<value_t<T>, SPACE>, const SeriesGradients<T, SPACE>*,        \
      const SoftDTWOptions&, const Lengths<SPACE>&);                          \
  template void soft_dtw_cost<SPACE, T>(                                      \
      const SPACE&, ConstSeriesView<T, SPACE>, ArrayView1<value_t<T>, SPACE>, \
      const CostGradients<T, SPACE>*, const SoftDTWOptions&,                  \
      const Lengths<SPACE>&);                                                 \
  template void soft_dtw_divergence<SPACE, T>(                                \
      const SPACE&, ConstSeriesView<T, SPACE>, ConstSeriesView<T, SPACE>,     \
      ArrayView1<value_t<T>, SPACE>, const SeriesGradients<T, SPACE>*,        \
      const SoftDTWOptions&, const Lengths<SPACE>&);                          \
  template void pairwise<SPACE, T>(                                           \
      const SPACE&, ConstSeriesView<T, SPACE>, ConstSeriesView<T, SPACE>,     \
      ArrayView2<value_t<T>, SPACE>, PairwiseValue, const SoftDTWOptions&,    \
      const Lengths<SPACE>&);                                                 \
  template void dtw_path<SPACE, T>(                                           \
      const SPACE&, ConstSeriesView<T, SPACE>, ConstSeriesView<T, SPACE>,     \
      ArrayView1<value_t<T>, SPACE>, ArrayView3<int, SPACE>,                  \
      ArrayView1<int, SPACE>, const SoftDTWOptions&, const Lengths<SPACE>&);

#define SOFTWAVE_INSTANTIATE_SPACE(SPACE)       \
  SOFTWAVE_INSTANTIATE_SOFTDTW(SPACE, float)    \
  SOFTWAVE_INSTANTIATE_SOFTDTW(SPACE, double)   \
  SOFTWAVE_INSTANTIATE_SOFTDTW(SPACE, bfloat16) \
  SOFTWAVE_INSTANTIATE_SOFTDTW(SPACE, float16)  \
  template int tile_size<SPACE>(const SPACE&, const SoftDTWOptions&);

SOFTWAVE_INSTANTIATE_SPACE(Kokkos::DefaultExecutionSpace)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_SPACE(Kokkos::DefaultHostExecutionSpace)
#endif

}  // namespace softwave::impl
