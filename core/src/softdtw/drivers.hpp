#pragma once
// Drivers of the public Soft-DTW entry points: argument checks, workspace,
// the forward and backward tile sweeps (sweeper.hpp, call_arrays.hpp), and
// the macros that instantiate them. softdtw_<type>.cpp instantiate one value
// type each, so that a build compiles them in parallel: under nvcc the four
// together were one source of about 16 minutes.

#include <softwave/softdtw.hpp>

#include "call_arrays.hpp"

namespace softwave::impl {

template <class Space>
int tile_size(const Space&, const SoftDTWOptions& options) {
  return scratch_plan<Space>(options).tile;
}

template <class Space>
std::uint64_t workspace_bytes(const Space& space, std::int64_t pairs,
                              std::int64_t n, std::int64_t m,
                              const SoftDTWOptions& options, bool backward,
                              int d) {
  check_options(options);
  if (pairs < 0 || n < 0 || m < 0 || d < 0)
    throw_invalid_argument(
        "workspace_bytes: pairs, n, m and d must be >= 0 (got ", pairs, ", ", n,
        ", ", m, ", ", d, ")");
  if (pairs == 0 || n == 0 || m == 0) return 0;
  // The host's pair-parallel walks (sweeper.hpp): a block of work a thread.
  if (runs_on_host<Space>() && takes_pair_walks(space, options, pairs)) {
    std::uint64_t const blocks = diagonal_blocks(space);
    bool const per_feature = options.cost != Cost::cosine;
    if (backward && options.gamma > 0) {
      std::int64_t const block = gradient_block_bytes(
          stored_diagonal_cells(band_of(options), n, m), n, m,
          gradient_features(per_feature, !per_feature, d));
      if (options.kernel == Kernel::pairs || block <= kBackwardBlockLimit)
        return std::uint64_t(block) * blocks;
    }
    if (!backward && options.gamma > 0)
      return std::uint64_t(
                 diagonal_walk_cells(n, m, per_feature && d > 1 ? d : 0)) *
             sizeof(acc_t) * blocks;
    if (!backward)  // hard DTW: one rolling row a pair
      return std::uint64_t(pairs) * std::uint64_t(m + 1) * sizeof(acc_t);
  }
  // In double: the point is to refuse sizes whose bytes overflow too.
  Tiling const tiling(impl::tile_size(space, options), n, m);
  double const rows = tiling.rows, cols = tiling.cols;
  double per_pair = 0;
  if (!backward) {
    per_pair = double(n + 1) + double(m + 1) + 3 * rows + 1;
  } else {
    double row_cells = double(m + 1), col_cells = double(n + 1);
    if (options.band && *options.band >= 0) {
      double const w = double(*options.band);
      row_cells = std::min(row_cells, 2 * w + 3 + double((m + n - 1) / n));
      col_cells = std::min(col_cells, 2 * w + 3 + double((n + m - 1) / m));
    }
    per_pair = 2 * rows * row_cells + 2 * cols * col_cells + 1;
  }
  double const bytes = 8.0 * double(pairs) * per_pair;
  return bytes >= 1.8e19 ? std::uint64_t(-1) : std::uint64_t(bytes);
}

// The values a checked call returns, or, for a call that returns none
// (gradients only), the double sums they would come from: one that is not
// finite overflowed (check_finite_results).
template <class Space, class Values, class Sums>
void check_results(const Space& space, const SoftDTWOptions& options,
                   const Values& values, const Sums& sums, const char* inputs,
                   double gamma) {
  if (given(values))
    check_finite_results(space, options.check_values, values, "softdtw", inputs,
                         gamma);
  else
    check_finite_results(space, options.check_values, sums, "softdtw", inputs,
                         gamma);
}

template <class Space, class T>
void soft_dtw(const Space& space, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView1<value_t<T>, Space> values,
              const SeriesGradients<T, Space>* gradients,
              const SoftDTWOptions& options, const Lengths<Space>& lengths) {
  check_options(options);
  DataChecks<Space> checks(space, options.check_values, "softdtw");
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
    // Left for the sweep to zero: the CUDA-specialised path does it inside
    // its forward kernel, which saves a small call two launches.
    grad_x = gradient_accumulator(space, gradients->grad_x,
                                  "softwave::softdtw::grad_x_sum",
                                  /*zero=*/false);
    grad_y = gradient_accumulator(space, gradients->grad_y,
                                  "softwave::softdtw::grad_y_sum",
                                  /*zero=*/false);
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
                          outputs.start_gradients_at_zero = true;
                          sweeper.forward_backward(B, acc, outputs);
                        });
  store_values(space, acc, values);
  if (gradients) {
    round_into(space, grad_x, gradients->grad_x);
    round_into(space, grad_y, gradients->grad_y);
  }
  check_results(space, options, values, acc, "x and y", options.gamma);
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
  DataChecks<Space> checks(space, options.check_values, "softdtw");
  Lengths<Space> const used{
      checks.lengths(lengths.x, "lengths.x", B, cost.extent(1)),
      checks.lengths(lengths.y, "lengths.y", B, cost.extent(2))};
  finite_costs<Space, T>(checks, cost, used, band_of(options));
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
  check_results(space, options, values, acc, "cost", options.gamma);
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
  DataChecks<Space> checks(space, options.check_values, "softdtw");
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
  check_results(space, options, values, xy, "x and y", options.gamma);
}

template <class Space, class T>
void pairwise(const Space& space, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView2<value_t<T>, Space> matrix,
              PairwiseValue what, const SoftDTWOptions& options,
              const Lengths<Space>& lengths) {
  check_options(options);
  DataChecks<Space> checks(space, options.check_values, "softdtw");
  auto const used = check_series_pair(checks, x, y, lengths,
                                      /*same_batch=*/false);
  std::int64_t const B1 = x.extent(0), B2 = y.extent(0);
  check_extent(matrix, "matrix", {std::size_t(B1), std::size_t(B2)},
               "(x batch, y batch)");
  checks.finish();
  if (B1 == 0 || B2 == 0) return;

  std::int64_t const N = x.extent(1), M = y.extent(1);
  // One set with itself: every built-in cost is symmetric, and so is the
  // band (that of M×N is the transpose of that of N×M), so D[b][a] is
  // D[a][b]: only the pairs a <= b are walked, and mirrored.
  bool const symmetric =
      x.data() == y.data() && B1 == B2 && N == M &&
      x.stride(0) == y.stride(0) && x.stride(1) == y.stride(1) &&
      x.extent(2) == y.extent(2) && used.x.data() == used.y.data() &&
      used.x.extent(0) == used.y.extent(0);
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
    self_y = symmetric ? self_x : self(y, used.y);
  }

  // Pairs stream through the forward sweep in chunks whose rolling workspace
  // stays under 256 MiB, so memory never grows with B1·B2.
  Tiling const tiling(impl::tile_size(space, options), N, M);
  std::int64_t const bytes_per_pair = std::int64_t(impl::workspace_bytes(
      space, 1, N, M, options, /*backward=*/false, int(x.extent(2))));
  std::int64_t const total = PairMap::count(B1, B2, symmetric);
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
          PairMap const pairs{begin, B2, symmetric};
          sweeper.cost().lengths.pairs = pairs;
          sweeper.forward(count, acc);
          store_pairwise(space, acc, begin, count, pairs, self_x.view,
                         self_y.view, matrix);
        }
      });
  check_finite_results(space, options.check_values, matrix, "softdtw",
                       "x and y", options.gamma);
}

template <class Space, class T>
void dtw_path(const Space& space, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView1<value_t<T>, Space> values,
              ArrayView3<int, Space> path, ArrayView1<int, Space> path_length,
              const SoftDTWOptions& options, const Lengths<Space>& lengths) {
  SoftDTWOptions hard = options;
  hard.gamma = 0;
  check_options(hard);
  DataChecks<Space> checks(space, options.check_values, "softdtw");
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
  check_results(space, options, values, acc, "x and y", 0.0);

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

// The explicit instantiations of T's entry points for SPACE.
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

#define SOFTWAVE_INSTANTIATE_SOFTDTW_SIZES(SPACE)                     \
  template int tile_size<SPACE>(const SPACE&, const SoftDTWOptions&); \
  template std::uint64_t workspace_bytes<SPACE>(                      \
      const SPACE&, std::int64_t, std::int64_t, std::int64_t,         \
      const SoftDTWOptions&, bool, int);

// T's entry points, and the sizes, for the default execution space and,
// when that is a device, the default host space as well.
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
#define SOFTWAVE_INSTANTIATE_SOFTDTW_SPACES(T)                   \
  SOFTWAVE_INSTANTIATE_SOFTDTW(Kokkos::DefaultExecutionSpace, T) \
  SOFTWAVE_INSTANTIATE_SOFTDTW(Kokkos::DefaultHostExecutionSpace, T)
#define SOFTWAVE_INSTANTIATE_SOFTDTW_SIZES_SPACES                   \
  SOFTWAVE_INSTANTIATE_SOFTDTW_SIZES(Kokkos::DefaultExecutionSpace) \
  SOFTWAVE_INSTANTIATE_SOFTDTW_SIZES(Kokkos::DefaultHostExecutionSpace)
#else
#define SOFTWAVE_INSTANTIATE_SOFTDTW_SPACES(T) \
  SOFTWAVE_INSTANTIATE_SOFTDTW(Kokkos::DefaultExecutionSpace, T)
#define SOFTWAVE_INSTANTIATE_SOFTDTW_SIZES_SPACES \
  SOFTWAVE_INSTANTIATE_SOFTDTW_SIZES(Kokkos::DefaultExecutionSpace)
#endif

}  // namespace softwave::impl
