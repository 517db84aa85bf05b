// softwave::multiscale_start (softwave/gw.hpp): TorchGW's coarse-to-fine
// warm start, built from the library's own pieces: farthest-point samples
// of each side, sampled GW between them, and their plan spread back over
// every point.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <limits>
#include <softwave/gw.hpp>
#include <softwave/kokkos_compat.hpp>
#include <string>
#include <vector>

#include "plan_terms.hpp"

namespace softwave::impl {

namespace {

template <class Space>
using Indices = Kokkos::View<int*, typename Space::memory_space>;

// Farthest-point sampling from point 0 (each next point the one farthest
// from those chosen, the first on ties): the chosen points, and in
// `nearest_chosen` each point's nearest chosen one (the first on ties).
// Distances are Euclidean between the rows of `points`, or, where
// `rows_are_distances`, read from the rows of a distance matrix.
template <class Space, class T>
std::vector<int> farthest_points(const Space& space,
                                 const OTView2<const T, Space>& points,
                                 bool rows_are_distances, int count,
                                 const Indices<Space>& nearest_chosen) {
  std::int64_t const n = points.extent(0);
  int const features = int(points.extent(1));
  auto const nearest = uninitialised<double*>(
      space, "softwave::gw::multiscale_nearest_distance", n);
  Kokkos::deep_copy(space, nearest, std::numeric_limits<double>::infinity());
  std::vector<int> chosen;
  std::int64_t next = 0;
  for (int c = 0; c < count; ++c) {
    chosen.push_back(int(next));
    std::int64_t const from = next;
    double farthest = 0;
    Kokkos::parallel_reduce(
        "softwave::gw::multiscale_farthest",
        Kokkos::RangePolicy<Space>(space, 0, n),
        KOKKOS_LAMBDA(std::int64_t i, double& most) {
          double d;
          if (rows_are_distances) {
            d = double(points(from, i));
          } else {
            double sum = 0;
            for (int f = 0; f < features; ++f) {
              double const diff =
                  double(points(i, f)) - double(points(from, f));
              sum += diff * diff;
            }
            d = compat::sqrt(sum);
          }
          if (d < nearest(i)) {
            nearest(i) = d;
            nearest_chosen(i) = c;
          }
          if (nearest(i) > most) most = nearest(i);
        },
        Kokkos::Max<double>(farthest));
    if (c + 1 == count) break;
    next = first_index_of(space, nearest, farthest,
                          "softwave::gw::multiscale_first_farthest");
  }
  return chosen;
}

// data's rows `rows` and, where `columns` has entries, only those columns
// of them (else every column).
template <class Space, class T>
OTView2<T, Space> pick(const Space& space, const OTView2<const T, Space>& data,
                       const Indices<Space>& rows,
                       const Indices<Space>& columns, const char* label) {
  std::int64_t const r = rows.extent(0);
  bool const some = columns.extent(0) > 0;
  std::int64_t const c =
      some ? std::int64_t(columns.extent(0)) : std::int64_t(data.extent(1));
  auto const out = uninitialised<T**>(space, label, r, c);
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<Space>(space, 0, r * c),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const i = q / c, j = q % c;
        out(i, j) = data(rows(i), some ? columns(j) : j);
      });
  return out;
}

// One pass of the scaling to the marginals: each row of plan (or, with
// `columns`, each column) times its weight over its sum (at least 1e-30);
// empty weights are uniform, 1 over the rows' (columns') number.
template <class Space, class T>
void scale_lines(const Space& space, const OTView2<T, Space>& plan,
                 const OTView1<const T, Space>& weights, bool columns) {
  std::int64_t const lines = plan.extent(columns ? 1 : 0),
                     across = plan.extent(columns ? 0 : 1);
  bool const uniform = weights.extent(0) == 0;
  T const each = T(1.0 / double(lines));
  Kokkos::parallel_for(
      columns ? "softwave::gw::multiscale_scale_columns"
              : "softwave::gw::multiscale_scale_rows",
      Kokkos::RangePolicy<Space>(space, 0, lines),
      KOKKOS_LAMBDA(std::int64_t l) {
        T sum = 0;
        for (std::int64_t q = 0; q < across; ++q)
          sum += columns ? plan(q, l) : plan(l, q);
        T const factor =
            (uniform ? each : weights(l)) / (sum > T(1e-30) ? sum : T(1e-30));
        for (std::int64_t q = 0; q < across; ++q)
          (columns ? plan(q, l) : plan(l, q)) *= factor;
      });
}

}  // namespace

template <class Space, class T>
void multiscale_start(const Space& space, const OTView2<const T, Space>& source,
                      const OTView2<const T, Space>& target,
                      GwDistanceMode mode, int k, int landmarks,
                      const GwLinearCost<T, Space>& linear,
                      const GwMarginals<T, Space>& marginals,
                      const GwOptions& options, int coarse_points,
                      const OTView2<T, Space>& plan,
                      const OTView2<const T, Space>& source_points,
                      const OTView2<const T, Space>& target_points) {
  std::int64_t const n = source.extent(0), m = target.extent(0);
  int const count = coarse_points;
  if (count < 1)
    throw_invalid_argument("multiscale's coarse points must be >= 1 (got ",
                           count, ")");
  if (count >= n || count >= m)
    throw_invalid_argument(
        "multiscale's coarse points (", count,
        ") must be fewer than the source's and the target's points (", n,
        " and ", m, "): a problem this small needs no coarse start");
  if (std::int64_t(plan.extent(0)) != n || std::int64_t(plan.extent(1)) != m)
    throw_invalid_argument("multiscale's plan must be (", n, ", ", m,
                           "), got (", plan.extent(0), ", ", plan.extent(1),
                           ")");
  if (source_points.size() > 0 && std::int64_t(source_points.extent(0)) != n)
    throw_invalid_argument("multiscale's source points must be ", n,
                           " rows, got ", source_points.extent(0));
  if (target_points.size() > 0 && std::int64_t(target_points.extent(0)) != m)
    throw_invalid_argument("multiscale's target points must be ", m,
                           " rows, got ", target_points.extent(0));
  bool const matrices = mode == GwDistanceMode::precomputed;

  // The coarse points, and each point's nearest one.
  auto const source_of =
      uninitialised<int*>(space, "softwave::gw::multiscale_source_of", n);
  auto const target_of =
      uninitialised<int*>(space, "softwave::gw::multiscale_target_of", m);
  bool const source_sampled = source_points.size() > 0,
             target_sampled = target_points.size() > 0;
  Indices<Space> const source_chosen =
      on_device(space,
                farthest_points(space, source_sampled ? source_points : source,
                                matrices && !source_sampled, count, source_of),
                "softwave::gw::multiscale_source_points");
  Indices<Space> const target_chosen =
      on_device(space,
                farthest_points(space, target_sampled ? target_points : target,
                                matrices && !target_sampled, count, target_of),
                "softwave::gw::multiscale_target_points");

  // The coarse problem: the same data at the chosen points, uniform weights.
  Indices<Space> const every;
  auto const source_data =
      pick(space, source, source_chosen, matrices ? source_chosen : every,
           "softwave::gw::multiscale_source");
  auto const target_data =
      pick(space, target, target_chosen, matrices ? target_chosen : every,
           "softwave::gw::multiscale_target");
  GwSide<T, Space> const x(space, source_data, mode, std::min(k, count - 1),
                           std::min(landmarks, count), options.shortest_paths);
  GwSide<T, Space> const y(space, target_data, mode, std::min(k, count - 1),
                           std::min(landmarks, count), options.shortest_paths);
  OTView2<T, Space> linear_matrix, source_features, target_features;
  if (linear.matrix.size() > 0)
    linear_matrix = pick(space, linear.matrix, source_chosen, target_chosen,
                         "softwave::gw::multiscale_linear");
  if (linear.source_features.size() > 0) {
    source_features = pick(space, linear.source_features, source_chosen, every,
                           "softwave::gw::multiscale_source_features");
    target_features = pick(space, linear.target_features, target_chosen, every,
                           "softwave::gw::multiscale_target_features");
  }
  GwLinearCost<T, Space> const coarse_linear{linear_matrix, source_features,
                                             target_features};
  GwOptions coarse = options;
  coarse.anchors = std::min(options.anchors, std::max(count / 2, 10));
  // A reversed coarse matching would pass to the fine solve and to each of
  // its restarts (they all start from this plan): the coarse problem, small,
  // takes several seeds and keeps the best.
  coarse.restarts = std::max(options.restarts, kMultiscaleRestarts);
  coarse.warm_start = false;
  coarse.on_iteration = {};
  GwResult<T, Space> solved;
  solved.plan = uninitialised<T**>(
      space, "softwave::gw::multiscale_coarse_plan", count, count);
  solved.compute_objective = false;
  softwave::sampled_gw(space, x.distances(), y.distances(), coarse_linear,
                       GwMarginals<T, Space>{}, solved, coarse);

  // Spread over each point's nearest chosen point, then scaled to the
  // marginals.
  auto const coarse_plan = solved.plan;
  Kokkos::parallel_for(
      "softwave::gw::multiscale_spread",
      Kokkos::RangePolicy<Space>(space, 0, n * m),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const i = q / m, j = q % m;
        T const v = coarse_plan(source_of(i), target_of(j));
        plan(i, j) = v > T(1e-30) ? v : T(1e-30);
      });
  for (int round = 0; round < 10; ++round) {
    scale_lines(space, plan, marginals.a, /*columns=*/false);
    scale_lines(space, plan, marginals.b, /*columns=*/true);
  }
  space.fence();
}

#define SOFTWAVE_INSTANTIATE_MULTISCALE(SPACE, T)                  \
  template void multiscale_start<SPACE, T>(                        \
      const SPACE&, const OTView2<const T, SPACE>&,                \
      const OTView2<const T, SPACE>&, GwDistanceMode, int, int,    \
      const GwLinearCost<T, SPACE>&, const GwMarginals<T, SPACE>&, \
      const GwOptions&, int, const OTView2<T, SPACE>&,             \
      const OTView2<const T, SPACE>&, const OTView2<const T, SPACE>&);

SOFTWAVE_INSTANTIATE_MULTISCALE(Kokkos::DefaultExecutionSpace, float)
SOFTWAVE_INSTANTIATE_MULTISCALE(Kokkos::DefaultExecutionSpace, double)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_MULTISCALE(Kokkos::DefaultHostExecutionSpace, float)
SOFTWAVE_INSTANTIATE_MULTISCALE(Kokkos::DefaultHostExecutionSpace, double)
#endif

}  // namespace softwave::impl
