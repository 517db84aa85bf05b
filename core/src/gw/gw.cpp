// Sampled Gromov–Wasserstein: the outer loop around the low-rank Sinkhorn
// (softwave/gw.hpp says what each iteration does).

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <softwave/gw.hpp>
#include <softwave/kokkos_compat.hpp>
#include <tuple>
#include <utility>
#include <vector>

#include "../common/call_memory.hpp"
#include "../common/data_checks.hpp"
#include "../sinkhorn/passes.hpp"
#include "../sinkhorn/specialised.hpp"
#include "exact_cost.hpp"
#include "frontier_paths.hpp"
#include "graph_rows.hpp"
#include "lowrank_coupling.hpp"
#include "objective.hpp"
#include "plan_terms.hpp"
#include "specialised.hpp"

namespace softwave::impl {
namespace {

// A uniform draw in (0, 1) for one (seed, restart, iteration, anchor, use)
// counter: the same on every backend.
double uniform_draw(std::uint64_t seed, std::uint64_t iteration,
                    std::uint64_t anchor, std::uint64_t use) {
  std::uint64_t key = mix64(seed + 0x9e3779b97f4a7c15ull);
  key = mix64(key + iteration);
  key = mix64(key + anchor);
  key = mix64(key + 0x632be59bd9b4e019ull * (use + 1));
  return (double(key >> 11) + 0.5) * 0x1p-53;
}

// The index drawn from cumulative weights (last entry the total).
int draw_index(const std::vector<double>& cumulative, double u) {
  double const target = u * cumulative.back();
  auto const at =
      std::upper_bound(cumulative.begin(), cumulative.end(), target);
  return int(
      std::min<std::ptrdiff_t>(at - cumulative.begin(), cumulative.size() - 1));
}

// Cumulative host sums of weights (uniform when empty), and their total.
template <class T, class Space>
std::vector<double> cumulative_weights(const Space& space,
                                       const OTView1<const T, Space>& w,
                                       std::int64_t count) {
  std::vector<double> out(count);
  if (w.extent(0) == 0) {
    for (std::int64_t i = 0; i < count; ++i) out[i] = double(i + 1);
    return out;
  }
  Kokkos::View<T*, Kokkos::HostSpace> host(
      Kokkos::view_alloc(Kokkos::WithoutInitializing,
                         std::string("softwave::gw::weights_host")),
      count);
  Kokkos::deep_copy(space, host, w);
  space.fence();
  double s = 0;
  for (std::int64_t i = 0; i < count; ++i) out[i] = s += double(host(i));
  return out;
}

// Every entry of `a` finite (`name` labels the check and its error).
template <class T, class Space>
void check_finite(DataChecks<Space>& checks, const OTView2<const T, Space>& a,
                  const char* name) {
  std::int64_t const cols = a.extent(1);
  checks.count(
      name, " non-finite value(s) (NaN or inf)", a.extent(0) * cols,
      std::string("softwave::gw::check_") + name,
      KOKKOS_LAMBDA(std::int64_t q)->std::int64_t {
        return !compat::isfinite(double(a(q / cols, q % cols)));
      });
}

template <class T, class Space>
void check_side(DataChecks<Space>& checks, const GwDistances<T, Space>& d,
                const char* side, const char* matrix_name,
                const char* coordinates_name, const char* squared_name) {
  bool const has_matrix = d.matrix.size() > 0,
             has_coordinates = d.coordinates.size() > 0,
             has_squared = d.squared_coordinates.size() > 0,
             has_graph = d.graph != nullptr;
  if (int(has_matrix) + int(has_coordinates) + int(has_squared) +
          int(has_graph) !=
      1)
    throw_invalid_argument(side, ": give exactly one of ", matrix_name, " (",
                           d.matrix.extent(0), "×", d.matrix.extent(1), "), ",
                           coordinates_name, " (", d.coordinates.extent(0), "×",
                           d.coordinates.extent(1), "), ", squared_name, " (",
                           d.squared_coordinates.extent(0), "×",
                           d.squared_coordinates.extent(1), ") and ", side,
                           ".graph (", has_graph ? "given" : "none", ")");
  if (has_graph) {
    Graph const& g = *d.graph;
    if (g.nodes() < 1 || std::int64_t(g.targets.size()) != g.offsets.back() ||
        g.lengths.size() != g.targets.size())
      throw_invalid_argument(side,
                             ".graph is not a compressed-row graph (offsets "
                             "N + 1, targets and lengths offsets[N] each)");
    for (double length : g.lengths)
      if (!(std::isfinite(length) && length >= 0))
        throw_invalid_argument(side, ".graph has an edge of length ", length,
                               " (lengths are finite and >= 0)");
    for (int target : g.targets)
      if (target < 0 || target >= g.nodes())
        throw_invalid_argument(side, ".graph has an edge to ", target,
                               ", not a node (N = ", g.nodes(), ")");
  } else if (has_matrix) {
    if (d.matrix.extent(0) != d.matrix.extent(1))
      throw_invalid_argument(matrix_name, " has shape (", d.matrix.extent(0),
                             ", ", d.matrix.extent(1),
                             "), expected a square matrix");
    auto const m = d.matrix;
    std::int64_t const n = m.extent(0);
    checks.count(
        matrix_name, " negative or non-finite value(s)", n * n,
        std::string("softwave::gw::check_") + matrix_name,
        KOKKOS_LAMBDA(std::int64_t q)->std::int64_t {
          double const v = m(q / n, q % n);
          return !(compat::isfinite(v) && v >= 0);
        });
  } else if (has_squared) {
    check_finite(checks, d.squared_coordinates, squared_name);
  } else {
    check_finite(checks, d.coordinates, coordinates_name);
  }
}

template <class T, class Space>
void check_weights(DataChecks<Space>& checks, const OTView1<const T, Space>& w,
                   std::int64_t count, const char* name) {
  if (w.extent(0) == 0) return;
  if (std::int64_t(w.extent(0)) != count)
    throw_invalid_argument(name, " has ", w.extent(0), " entries, expected ",
                           count, " (one per point)");
  checks.count(
      name, " negative or non-finite value(s)", count,
      std::string("softwave::gw::check_") + name,
      KOKKOS_LAMBDA(std::int64_t i)->std::int64_t {
        double const v = w(i);
        return !(compat::isfinite(v) && v >= 0);
      });
}

void check_options(const GwOptions& o) {
  if (o.anchors < 1)
    throw_invalid_argument("anchors = ", o.anchors, " must be >= 1");
  if (!(o.alpha > 0 && o.alpha <= 1))
    throw_invalid_argument("alpha = ", o.alpha, " must be in (0, 1]");
  if (o.max_iterations < 1)
    throw_invalid_argument("max_iterations = ", o.max_iterations,
                           " must be >= 1");
  if (o.min_iterations < 0)
    throw_invalid_argument("min_iterations = ", o.min_iterations,
                           " must be >= 0");
  if (o.check_every < 1)
    throw_invalid_argument("check_every = ", o.check_every, " must be >= 1");
  if (o.check_rows < 0)
    throw_invalid_argument("check_rows = ", o.check_rows,
                           " must be >= 0 (0: all rows)");
  if (!(o.epsilon > 0 && std::isfinite(o.epsilon)))
    throw_invalid_argument("epsilon = ", o.epsilon,
                           " must be positive and finite");
  if (!(o.rho_a > 0))
    throw_invalid_argument("rho_a = ", o.rho_a,
                           " must be > 0 (infinity: the source kept)");
  if (!(o.rho_b > 0))
    throw_invalid_argument("rho_b = ", o.rho_b,
                           " must be > 0 (infinity: balanced)");
  if (o.sinkhorn_iterations < 1)
    throw_invalid_argument("sinkhorn_iterations = ", o.sinkhorn_iterations,
                           " must be >= 1");
  if (o.early_sinkhorn_iterations < -1)
    throw_invalid_argument(
        "early_sinkhorn_iterations = ", o.early_sinkhorn_iterations,
        " must be >= 0 (0: sinkhorn_iterations), or -1 (automatic)");
  if (!(o.term_tolerance >= 0 && o.term_tolerance < 1))
    throw_invalid_argument("term_tolerance = ", o.term_tolerance,
                           " must be in [0, 1)");
  if (o.exact_objective_entries < 0)
    throw_invalid_argument("exact_objective_entries = ",
                           o.exact_objective_entries, " must be >= 0");
  if (o.objective_samples < 2)
    throw_invalid_argument("objective_samples = ", o.objective_samples,
                           " must be >= 2");
  if (o.dense_cost_entries < -1)
    throw_invalid_argument("dense_cost_entries = ", o.dense_cost_entries,
                           " must be >= 0, or -1 (automatic)");
  if (o.graph_cache_bytes < 0)
    throw_invalid_argument("graph_cache_bytes = ", o.graph_cache_bytes,
                           " must be >= 0");
  if (o.restarts < 1)
    throw_invalid_argument("restarts = ", o.restarts, " must be >= 1");
  if (o.restart_iterations < 0)
    throw_invalid_argument("restart_iterations = ", o.restart_iterations,
                           " must be >= 0 (0: whole restarts)");
  if (!(o.cost_ema_beta >= 0 && o.cost_ema_beta <= 1))
    throw_invalid_argument("cost_ema_beta = ", o.cost_ema_beta,
                           " must be in [0, 1] (0: no average)");
  if (!(o.cost_ema_tolerance > 0 && o.cost_ema_tolerance < 1))
    throw_invalid_argument("cost_ema_tolerance = ", o.cost_ema_tolerance,
                           " must be in (0, 1)");
  if (!(o.fused_alpha >= 0 && o.fused_alpha <= 1))
    throw_invalid_argument("fused_alpha = ", o.fused_alpha,
                           " must be in [0, 1]");
  if (o.exact_iterations < 0)
    throw_invalid_argument("exact_iterations = ", o.exact_iterations,
                           " must be >= 0");
  if (o.polish_anchors < -1)
    throw_invalid_argument("polish_anchors = ", o.polish_anchors,
                           " must be >= 0 (0: none), or -1 (automatic)");
  if (o.kernel == Kernel::pairs)
    throw_invalid_argument(
        "kernel = pairs is a Soft-DTW kernel; sampled GW takes automatic, "
        "portable or specialised");
  if (o.coupling_rank < 0)
    throw_invalid_argument("coupling_rank = ", o.coupling_rank,
                           " must be >= 0 (0: Sinkhorn solves)");
  if (o.coupling_rank > 0) {
    if (!(o.coupling_step > 0 && std::isfinite(o.coupling_step)))
      throw_invalid_argument("coupling_step = ", o.coupling_step,
                             " must be positive and finite");
    if (o.coupling_iterations < 1)
      throw_invalid_argument("coupling_iterations = ", o.coupling_iterations,
                             " must be >= 1");
    if (o.dykstra_iterations < 1)
      throw_invalid_argument("dykstra_iterations = ", o.dykstra_iterations,
                             " must be >= 1");
    if (!(o.dykstra_tolerance >= 0))
      throw_invalid_argument("dykstra_tolerance = ", o.dykstra_tolerance,
                             " must be >= 0");
    if (!std::isinf(o.rho_a) || !std::isinf(o.rho_b))
      throw_invalid_argument(
          "coupling_rank = ", o.coupling_rank,
          ": low-rank couplings are balanced (rho_a and rho_b must be "
          "infinite)");
  }
}

// Fused GW's linear cost: a matrix or features on both sides, finite, and
// given exactly when fused_alpha > 0.
template <class T, class Space>
void check_linear(DataChecks<Space>& checks, const GwLinearCost<T, Space>& c,
                  std::int64_t n, std::int64_t k, double fused_alpha) {
  bool const matrix = c.matrix.size() > 0,
             features =
                 c.source_features.size() > 0 || c.target_features.size() > 0;
  if (matrix && features)
    throw_invalid_argument(
        "linear cost: give a matrix or features on both sides, not both");
  if (fused_alpha > 0 && !matrix && !features)
    throw_invalid_argument("fused_alpha = ", fused_alpha,
                           " needs a linear cost (a matrix or features)");
  if (fused_alpha == 0 && (matrix || features))
    throw_invalid_argument(
        "a linear cost was given with fused_alpha = 0, where it has no "
        "effect: set fused_alpha in (0, 1]");
  if (matrix) {
    check_extent(c.matrix, "linear.matrix", {std::size_t(n), std::size_t(k)},
                 "(source points, target points)");
    check_finite(checks, c.matrix, "linear_matrix");
  } else if (features) {
    if (std::int64_t(c.source_features.extent(0)) != n ||
        std::int64_t(c.target_features.extent(0)) != k ||
        c.source_features.extent(1) != c.target_features.extent(1) ||
        c.source_features.extent(1) == 0)
      throw_invalid_argument(
          "linear.source_features has shape (", c.source_features.extent(0),
          ", ", c.source_features.extent(1), ") and linear.target_features (",
          c.target_features.extent(0), ", ", c.target_features.extent(1),
          "): expected (", n, ", e) and (", k, ", e) with the same e >= 1");
    check_finite(checks, c.source_features, "linear_source_features");
    check_finite(checks, c.target_features, "linear_target_features");
  }
}

// How many terms can carry weight >= tolerance at once (plus the slot the
// next solve is written to), at most 32.
int slot_count(const GwOptions& o) {
  int alive = 1;
  if (o.alpha < 1) {
    double const tol = std::max(o.term_tolerance, 1e-12);
    alive += int(std::ceil(std::log(tol) / std::log1p(-o.alpha)));
  }
  return std::min(alive + 1, 32);
}

// How many iterations' sampled costs each solve's average takes
// (GwOptions::cost_ema_beta; 1: no average).
int cost_window(const GwOptions& o) {
  double const beta = o.cost_ema_beta;
  if (!(beta > 0 && beta < 1)) return 1;
  double const window =
      std::ceil(std::log(o.cost_ema_tolerance) / std::log1p(-beta));
  return int(std::clamp(window, 1.0, double(kCostEmaWindow)));
}

// The weights of iterations t, t − 1, ... in iteration t's cost average:
// β(1 − β)^j for age j, the first iteration's cost (1 − β)^t, the weights
// of the ages kept (at most `window`) renormalised to sum 1.
std::vector<double> cost_weights(double beta, int window, int t) {
  int const count = std::min(t + 1, window);
  std::vector<double> weights(count);
  double total = 0;
  for (int j = 0; j < count; ++j)
    total += weights[j] = (j == t ? 1.0 : beta) * std::pow(1 - beta, j);
  for (auto& w : weights) w /= total;
  return weights;
}

template <class T, class Space>
struct Problem {
  SideDistances<T, Space> dx, dy;
  GwLinearCost<T, Space> linear;
  double fused_alpha = 0;  // β
  GwMarginals<T, Space> marginals;
  // The initial coupling given as a warm start (or empty: a⊗b/Σb), the
  // factor that gives it a's mass, and its cumulative row sums.
  OTView2<const T, Space> initial;
  double initial_scale = 1;
  std::vector<double> initial_rows;
  std::int64_t n, k;
  OTView2<const T, Space> a2, b2;  // (1, N), (1, K) or empty
  std::vector<double> a_cumulative, b_cumulative;
  const Graph *source_graph, *target_graph;  // or null
  Problem(const GwDistances<T, Space>& source,
          const GwDistances<T, Space>& target,
          const GwLinearCost<T, Space>& linear_cost, double beta,
          const GwMarginals<T, Space>& weights)
      : dx(source),
        dy(target),
        linear(linear_cost),
        fused_alpha(beta),
        marginals(weights),
        n(source.graph ? source.graph->nodes() : dx.size()),
        k(target.graph ? target.graph->nodes() : dy.size()),
        source_graph(source.graph),
        target_graph(target.graph) {}
  double product_scale() const {
    return marginals.b.extent(0) ? 1.0 / b_cumulative.back() : 1.0;
  }
  // The plan's mass: Σa, 1 for uniform weights.
  double mass() const {
    return marginals.a.extent(0) ? a_cumulative.back() : 1.0;
  }
  // The weighted sum of plan terms (over `rows`; empty: all).
  TermSum<T, Space> sum(
      const Space& space, const PlanTerms<T, Space>& terms,
      const std::vector<TermWeight>& weights,
      const Kokkos::View<const int*, typename Space::memory_space>& rows = {})
      const {
    TermSum<T, Space> out{terms,           term_list<T, Space>(space, weights),
                          marginals.a,     marginals.b,
                          product_scale(), rows};
    out.initial = initial;
    out.initial_scale = initial_scale;
    return out;
  }
  // The features' width e (0 without features): the factors' last e
  // columns.
  std::int64_t features() const {
    return std::int64_t(linear.source_features.extent(1));
  }
};

// 0, 1, ..., count − 1.
template <class Space>
Kokkos::View<int*, Kokkos::LayoutRight, typename Space::memory_space>
identity_indices(const Space& space, std::int64_t count, const char* label) {
  auto const out = uninitialised<int*>(space, label, count);
  Kokkos::parallel_for(
      label, Kokkos::RangePolicy<Space>(space, 0, count),
      KOKKOS_LAMBDA(std::int64_t c) { out(c) = int(c); });
  return out;
}

// One restart's outcome: the terms of its plan and what it reports.
struct Run {
  std::vector<TermWeight> terms;
  // Where the source marginal is relaxed (rho_a finite), each slot's
  // cumulative row sums: its rows are drawn by them, and its mass is the
  // last. Else every solve's rows are a's.
  std::vector<std::vector<double>> slot_rows;
  int iterations = 0;
  bool converged = false;
  double last_change = NAN;
  std::vector<double> changes;
  double source_scale = NAN, target_scale = NAN, final_epsilon = NAN;
  std::vector<int> source_anchors, target_anchors;
  bool dense_solves = false;
  int polish_anchors = 0;  // 0: not polished

  // The cumulative row sums of term w.
  template <class Problem>
  const std::vector<double>& rows_of(const TermWeight& w,
                                     const Problem& problem) const {
    if (w.slot >= 0 && !slot_rows.empty()) return slot_rows[w.slot];
    if (w.slot < 0 && problem.initial.size() > 0) return problem.initial_rows;
    return problem.a_cumulative;
  }
  // Term w's mass (a given plan is scaled to the problem's).
  template <class Problem>
  double mass_of(const TermWeight& w, const Problem& problem) const {
    if (w.slot >= 0 && !slot_rows.empty()) return slot_rows[w.slot].back();
    return problem.mass();
  }
  // The mixture's mass.
  template <class Problem>
  double mass(const Problem& problem) const {
    double total = 0;
    for (auto const& w : terms) total += w.weight * mass_of(w, problem);
    return total;
  }
};

// Pairs (row, column) drawn from a plan's mixture of terms, `count` at a
// time: a term by its weight times its mass and a row by the term's row
// sums on the host (Run::rows_of), then a column from that term's
// row on the device (the product plan's from b on the host). Every draw is
// keyed by (seed, round, pair): the same pairs on every backend.
template <class T, class Space>
struct PairDraws {
  using Memory = typename Space::memory_space;
  Kokkos::View<int*, Kokkos::LayoutRight, Memory> rows, columns;
  typename Kokkos::View<int*, Kokkos::LayoutRight, Memory>::HostMirror
      rows_host,
      columns_host;
  Kokkos::View<AnchorDraw*, Kokkos::LayoutRight, Memory> draws;
  typename Kokkos::View<AnchorDraw*, Kokkos::LayoutRight, Memory>::HostMirror
      draws_host;
  ColumnSampler<T, Space> sampler;

  PairDraws(const Space& space, std::int64_t count, std::int64_t k)
      : rows(uninitialised<int*>(space, "softwave::gw::drawn_rows", count)),
        columns(
            uninitialised<int*>(space, "softwave::gw::drawn_columns", count)),
        rows_host(compat::host_mirror("softwave::gw::drawn_rows_host", rows)),
        columns_host(
            compat::host_mirror("softwave::gw::drawn_columns_host", columns)),
        draws(uninitialised<AnchorDraw*>(space, "softwave::gw::draws", count)),
        draws_host(compat::host_mirror("softwave::gw::draws_host", draws)),
        sampler(space, count, k) {}

  // Draws into rows (and rows_host) and columns; columns_host once
  // copy_columns() is called.
  void draw(const Space& space, const Problem<T, Space>& problem,
            const PlanTerms<T, Space>& terms, const Run& run,
            std::uint64_t seed, std::uint64_t round) {
    std::vector<double> term_cumulative;
    double total = 0;
    for (auto const& w : run.terms)
      term_cumulative.push_back(total += w.weight * run.mass_of(w, problem));
    for (std::int64_t c = 0; c < std::int64_t(rows.extent(0)); ++c) {
      TermWeight const& w = run.terms[draw_index(
          term_cumulative, uniform_draw(seed, round, c, 0))];
      bool const given = w.slot < 0 && problem.initial.size() > 0;
      int const row =
          draw_index(run.rows_of(w, problem), uniform_draw(seed, round, c, 1));
      int const column = w.slot < 0 && !given
                             ? draw_index(problem.b_cumulative,
                                          uniform_draw(seed, round, c, 2))
                             : -1;
      rows_host(c) = row;
      draws_host(c) =
          AnchorDraw{w.slot, row, column, w.inverse_epsilon, w.coupling};
    }
    Kokkos::deep_copy(space, rows, rows_host);
    Kokkos::deep_copy(space, draws, draws_host);
    sampler.sample(space, terms, problem.marginals.b, problem.initial, draws,
                   draws_host, mix64(seed ^ mix64(round + 0x51ed27ull)),
                   columns);
  }
  void copy_columns(const Space& space) {
    Kokkos::deep_copy(space, columns_host, columns);
    space.fence();
  }
};

// A term's cumulative row sums into `out` (N), through `rows` and its host
// mirror: the draws of a relaxed source's rows (Run::slot_rows).
template <class T, class Space, class HostRows>
void cumulative_row_sums(
    const Space& space, const TermSum<T, Space>& term,
    const Kokkos::View<double*, typename Space::memory_space>& rows,
    const HostRows& rows_host, std::vector<double>& out) {
  row_sums(space, term, rows);
  Kokkos::deep_copy(space, rows_host, rows);
  space.fence();
  out.resize(rows.extent(0));
  double total = 0;
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = total += rows_host(i);
}

// X_im = D(i, anchor_m)/scale into √(2s/M)·X (the factor's first M
// columns) and s·mean_m X² (own), with s = 1 − β the GW cost's share.
template <class T, class Space>
void anchor_factors(
    const Space& space, const SideDistances<T, Space>& d,
    const Kokkos::View<const int*, typename Space::memory_space>& anchors,
    double scale, double share, const OTView2<T, Space>& own,
    const OTView3<T, Space>& factor) {
  std::int64_t const m = anchors.extent(0);
  double const weight = std::sqrt(2.0 * share / double(m)), inv = 1.0 / scale;
  // A thread a (point, anchor), then a thread a point for its mean square
  // (from the factor, s·mean X² = Σ_m factor²/2: its rounding to T is far
  // below the cost's own).
  if (!d.dense && d.formed.extent(0) == 0) {
    // Coordinates: the anchors' first, a coordinate's M values side by
    // side, so that a warp's threads (consecutive anchors of one or two
    // points) read consecutive values; each read of another point's row
    // across a warp took a line of its own (265 µs a side at 40,000 points,
    // 50 coordinates and 80 anchors on an H100, 26 ms of a 50-iteration GW
    // call). The same sums in the same order as d(i, j).
    std::int64_t const dims = d.coordinates.extent(1);
    auto const gathered = call_array<
        Kokkos::View<T**, Kokkos::LayoutRight, typename Space::memory_space>>(
        space, "softwave::gw::anchor_coordinates", false, dims, m);
    auto const at = gathered.view;
    auto const coordinates = d.coordinates;
    Kokkos::parallel_for(
        "softwave::gw::anchor_coordinates",
        Kokkos::RangePolicy<Space>(space, 0, dims * m),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const e = q / m, c = q % m;
          at(e, c) = coordinates(anchors(c), e);
        });
    Kokkos::parallel_for(
        "softwave::gw::anchor_factors",
        Kokkos::RangePolicy<Space>(space, 0, d.size() * m),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const i = q / m, c = q % m;
          double const distance =
              d.from_coordinates(i, [&](std::size_t e) { return at(e, c); });
          factor(0, i, c) = T(weight * distance * inv);
        });
  } else {
    Kokkos::parallel_for(
        "softwave::gw::anchor_factors",
        Kokkos::RangePolicy<Space>(space, 0, d.size() * m),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const i = q / m, c = q % m;
          factor(0, i, c) = T(weight * d(i, anchors(c)) * inv);
        });
  }
  Kokkos::parallel_for(
      "softwave::gw::anchor_mean_squares",
      Kokkos::RangePolicy<Space>(space, 0, d.size()),
      KOKKOS_LAMBDA(std::int64_t i) {
        double sum = 0;
        for (std::int64_t c = 0; c < m; ++c) {
          double const x = double(factor(0, i, c));
          sum += x * x;
        }
        own(0, i) = T(sum / 2);
      });
}

// The cost average (GwOptions::cost_ema_beta): the last `window`
// iterations' anchor factors and mean squares of each side (iteration t in
// block t mod window), and each solve's cost made from them: the weighted
// sum of low-rank costs u_s + v_s − P_s·Q_s is the low-rank cost with
// u = Σ w_s u_s, v = Σ w_s v_s and the blocks √w_s P_s, √w_s Q_s side by
// side (rank window·M; blocks not yet drawn are 0).
template <class T, class Space>
struct CostHistory {
  int window;
  std::int64_t m;
  OTView2<T, Space> u, v;  // (window, N), (window, K)
  OTView3<T, Space> p, q;  // (window, N, M), (window, K, M)
  Kokkos::View<double*, typename Space::memory_space> weights;
  typename Kokkos::View<double*, typename Space::memory_space>::HostMirror
      weights_host;

  CostHistory(const Space& space, int window_, std::int64_t n, std::int64_t k,
              std::int64_t m_)
      : window(window_),
        m(m_),
        u(uninitialised<T**>(space, "softwave::gw::history_u", window, n)),
        v(uninitialised<T**>(space, "softwave::gw::history_v", window, k)),
        p(uninitialised<T***>(space, "softwave::gw::history_p", window, n, m)),
        q(uninitialised<T***>(space, "softwave::gw::history_q", window, k, m)),
        weights(uninitialised<double*>(space, "softwave::gw::history_weights",
                                       window)),
        weights_host(compat::host_mirror("softwave::gw::history_weights_host",
                                         weights)) {}

  // Block r of a side's arrays, as a batch of one.
  static OTView2<T, Space> row(const OTView2<T, Space>& all, int r) {
    return OTView2<T, Space>(all.data() + r * all.extent(1), 1, all.extent(1));
  }
  static OTView3<T, Space> block(const OTView3<T, Space>& all, int r) {
    return OTView3<T, Space>(all.data() + r * all.extent(1) * all.extent(2), 1,
                             all.extent(1), all.extent(2));
  }

  // Iteration t's average into a term's own terms and first window·M
  // factor columns, both sides.
  void average(const Space& space, double beta, int t,
               const OTView2<T, Space>& term_u, const OTView3<T, Space>& term_p,
               const OTView2<T, Space>& term_v,
               const OTView3<T, Space>& term_q) {
    auto const w = cost_weights(beta, window, t);
    for (int j = 0; j < window; ++j)
      weights_host(j) = j < int(w.size()) ? w[j] : 0.0;
    Kokkos::deep_copy(space, weights, weights_host);
    side(space, t, u, p, term_u, term_p);
    side(space, t, v, q, term_v, term_q);
  }

  // One side's average (public: nvcc refuses a device lambda in a private
  // member function).
  void side(const Space& space, int t, const OTView2<T, Space>& own,
            const OTView3<T, Space>& factor, const OTView2<T, Space>& term_own,
            const OTView3<T, Space>& term_factor) const {
    auto const w = weights;
    int const count = window;
    std::int64_t const columns = m;
    Kokkos::parallel_for(
        "softwave::gw::average_cost",
        Kokkos::RangePolicy<Space>(space, 0, own.extent(1)),
        KOKKOS_LAMBDA(std::int64_t i) {
          double sum = 0;
          for (int j = 0; j < count; ++j) {
            int const r = ((t - j) % count + count) % count;
            double const root = compat::sqrt(w(j));
            if (w(j) > 0) sum += w(j) * double(own(r, i));
            for (std::int64_t c = 0; c < columns; ++c)
              term_factor(0, i, j * columns + c) =
                  w(j) > 0 ? T(root * double(factor(r, i, c))) : T(0);
          }
          term_own(0, i) = T(sum);
        });
  }
};

// Fused GW's features F (N, e) into the factor's columns M .. M + e − 1 as
// √(2β)·F, and β‖F_i‖² added to own: β‖F_i − G_k‖² in the low-rank cost.
template <class T, class Space>
void feature_factors(const Space& space, const OTView2<const T, Space>& f,
                     std::int64_t first_column, double beta,
                     const OTView2<T, Space>& own,
                     const OTView3<T, Space>& factor) {
  std::int64_t const e = f.extent(1);
  double const weight = std::sqrt(2.0 * beta);
  Kokkos::parallel_for(
      "softwave::gw::feature_factors",
      Kokkos::RangePolicy<Space>(space, 0, f.extent(0)),
      KOKKOS_LAMBDA(std::int64_t i) {
        double squares = 0;
        for (std::int64_t c = 0; c < e; ++c) {
          double const x = f(i, c);
          squares += x * x;
          factor(0, i, first_column + c) = T(weight * x);
        }
        own(0, i) = T(double(own(0, i)) + beta * squares);
      });
}

// C_ik = u_i + v_k − P_i·Q_k + βC_ik (slot s of the terms) into a (1, N, K)
// array, P·Qᵀ a tile at a time (a thread an entry read Q's rows strided,
// all K of them again for every row).
template <class T, class Space>
void form_cost(const Space& space, const PlanTerms<T, Space>& terms, int slot,
               const OTView3<T, Space>& cost) {
  auto const low_rank = terms.cost(slot);
  tiled_product(
      space, "softwave::gw::form_cost", cost.extent(1), cost.extent(2),
      low_rank.p.extent(2),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t r) {
        return low_rank.p(0, i, r);
      },
      KOKKOS_LAMBDA(std::int64_t r, std::int64_t j) {
        return low_rank.q(0, j, r);
      },
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j, double dot) {
        cost(0, i, j) = T(double(low_rank.u(0, i)) + double(low_rank.v(0, j)) -
                          dot + double(terms.linear_at(i, j)));
        return 0.0;
      });
}

// The largest distance from any point to an anchor (1 where all are 0).
template <class T, class Space>
double anchor_scale(
    const Space& space, const SideDistances<T, Space>& d,
    const Kokkos::View<const int*, typename Space::memory_space>& anchors) {
  std::int64_t const m = anchors.extent(0);
  double largest = 0;
  Kokkos::parallel_reduce(
      "softwave::gw::anchor_scale",
      Kokkos::RangePolicy<Space>(space, 0, d.size() * m),
      KOKKOS_LAMBDA(std::int64_t q, double& out) {
        double const x = d(q / m, anchors(q % m));
        if (x > out) out = x;
      },
      Kokkos::Max<double>(largest));
  return largest > 0 ? largest : 1.0;
}

// The distances of every point to this iteration's anchors, as a side and
// the anchors' indices in it: the side itself, or for a graph the (N, M)
// shortest paths from the anchors (`columns`, from the graph's kept rows),
// indexed 0 .. M − 1.
template <class T, class Space, class HostAnchors>
std::pair<SideDistances<T, Space>,
          Kokkos::View<const int*, typename Space::memory_space>>
anchored(
    const Space& space, const SideDistances<T, Space>& side,
    GraphRows<T, Space>* graph_rows,
    const Kokkos::View<const int*, typename Space::memory_space>& anchors,
    const HostAnchors& host_anchors, const OTView2<T, Space>& columns,
    const Kokkos::View<const int*, typename Space::memory_space>& identity) {
  if (graph_rows == nullptr) return {side, anchors};
  std::vector<int> const sources(host_anchors.data(),
                                 host_anchors.data() + anchors.extent(0));
  graph_rows->gather(space, sources, columns);
  return {SideDistances<T, Space>(GwDistances<T, Space>{columns, {}, nullptr}),
          identity};
}

// An iteration's M anchor pairs, drawn from a plan, and each side's
// distances to them (anchored): what a sampled cost is made of, for every
// iteration and for the polishing one.
template <class T, class Space>
struct AnchorDistances {
  PairDraws<T, Space> pairs;
  OTView2<T, Space> source_columns, target_columns;  // graph sides'
  Kokkos::View<int*, Kokkos::LayoutRight, typename Space::memory_space>
      identity;

  AnchorDistances(const Space& space, const Problem<T, Space>& problem,
                  std::int64_t m)
      : pairs(space, m, problem.k),
        identity(identity_indices(space, m, "softwave::gw::identity")) {
    if (problem.source_graph)
      source_columns = uninitialised<T**>(space, "softwave::gw::source_columns",
                                          problem.n, m);
    if (problem.target_graph)
      target_columns = uninitialised<T**>(space, "softwave::gw::target_columns",
                                          problem.k, m);
  }
  // The drawn pairs' distances: (xs, ys), each as anchored() gives it.
  auto distances(const Space& space, const Problem<T, Space>& problem,
                 GraphRows<T, Space>* source_rows,
                 GraphRows<T, Space>* target_rows) const {
    return std::make_pair(
        anchored(space, problem.dx, source_rows, pairs.rows, pairs.rows_host,
                 source_columns, identity),
        anchored(space, problem.dy, target_rows, pairs.columns,
                 pairs.columns_host, target_columns, identity));
  }
};

// The options of each outer iteration's Sinkhorn solve (ε set per solve).
SinkhornOptions solve_options(const GwOptions& o, bool exact_cost) {
  SinkhornOptions sink;
  sink.rho_a = o.rho_a;
  sink.rho_b = o.rho_b;
  sink.max_iterations = o.sinkhorn_iterations;
  sink.tolerance = o.sinkhorn_tolerance;
  sink.check_values = false;
  sink.kernel = o.kernel;
  // TF32 rounding is far below a sampled cost's noise, not an exact one's.
  sink.tf32_low_rank = o.mixed_precision && !exact_cost;
  return sink;
}

// Up to how many entries (N·K) each solve forms its sampled cost densely:
// GwOptions::dense_cost_entries, or by default (−1) 0 where the low-rank
// solves take the specialised passes (plain Sinkhorn's automatic choice:
// from 200 points a side with mixed precision, else 512) and 2²⁴ where
// they would run on the portable ones. On two CPU threads the dense passes
// are the faster (BM_SampledGw/2000/2500, 10 iterations: 2.4 against
// 14.6 s); on an H100 CUDA's low-rank passes are (0.26 against 0.79 s for
// TorchGW's random 2,000 × 2,500 task, 0.031 against 0.057 s for its
// 400 × 500 landmark one).
template <class T, class Space>
std::int64_t dense_entries(const GwOptions& o, const PlanTerms<T, Space>& terms,
                           const SinkhornOptions& sink) {
  if (o.dense_cost_entries >= 0) return o.dense_cost_entries;
  return specialised_for<Space, T>(terms.cost(0), sink) ? 0
                                                        : std::int64_t(1) << 24;
}

// An N×K low-rank cost of this rank as a shape: what the specialised
// passes' questions read (extents, no data).
template <class T, class Space>
LowRankCost<T, Space> low_rank_shape(std::int64_t n, std::int64_t k,
                                     std::int64_t rank) {
  return {OTView2<const T, Space>(nullptr, 1, n),
          OTView2<const T, Space>(nullptr, 1, k),
          OTView3<const T, Space>(nullptr, 1, n, rank),
          OTView3<const T, Space>(nullptr, 1, k, rank)};
}

// Whether the solves of these terms form their sampled cost as an N×K
// array (a dense linear cost, or GwOptions::dense_cost_entries) rather
// than iterate on its factors.
template <class T, class Space>
bool dense_solves(const GwOptions& o, const Problem<T, Space>& problem,
                  const PlanTerms<T, Space>& terms,
                  const SinkhornOptions& sink) {
  return problem.linear.matrix.size() > 0 ||
         problem.n * problem.k <= dense_entries<T>(o, terms, sink);
}

// A sampled cost into slot `slot`'s factors: this iteration's anchor
// factors (xs, ys: each side's distances to them), or with a cost average
// their history's average.
template <class T, class Space, class Anchored>
void sampled_factors(const Space& space, const Problem<T, Space>& problem,
                     const PlanTerms<T, Space>& terms,
                     std::optional<CostHistory<T, Space>>& history,
                     const Anchored& xs, const Anchored& ys, const Run& run,
                     const GwOptions& o, int slot, int t) {
  double const share = 1 - problem.fused_alpha;
  if (history) {  // this iteration's cost into the history, then the average
    int const r = t % history->window;
    anchor_factors(space, xs.first, xs.second, run.source_scale, share,
                   history->row(history->u, r), history->block(history->p, r));
    anchor_factors(space, ys.first, ys.second, run.target_scale, share,
                   history->row(history->v, r), history->block(history->q, r));
    history->average(space, o.cost_ema_beta, t, terms.row(terms.u, slot),
                     terms.factor(terms.p, slot), terms.row(terms.v, slot),
                     terms.factor(terms.q, slot));
  } else {
    anchor_factors(space, xs.first, xs.second, run.source_scale, share,
                   terms.row(terms.u, slot), terms.factor(terms.p, slot));
    anchor_factors(space, ys.first, ys.second, run.target_scale, share,
                   terms.row(terms.v, slot), terms.factor(terms.q, slot));
  }
}

// The fused linear cost's columns of slot `slot`'s factors, from column
// `first` on.
template <class T, class Space>
void slot_feature_factors(const Space& space, const Problem<T, Space>& problem,
                          const PlanTerms<T, Space>& terms, int slot,
                          std::int64_t first) {
  feature_factors(space, problem.linear.source_features, first,
                  problem.fused_alpha, terms.row(terms.u, slot),
                  terms.factor(terms.p, slot));
  feature_factors(space, problem.linear.target_features, first,
                  problem.fused_alpha, terms.row(terms.v, slot),
                  terms.factor(terms.q, slot));
}

// Slot `slot`'s Sinkhorn solve at sink.epsilon into its potentials (their
// start where sink.warm_start): on dense_cost, formed from the slot's
// factors, where it is given, else on the factors. An exact cost keeps
// what its next iteration reads of the solve.
template <class T, class Space>
void solve_slot(const Space& space, const Problem<T, Space>& problem,
                const PlanTerms<T, Space>& terms, int slot,
                const SinkhornOptions& sink,
                const OTView3<T, Space>& dense_cost,
                ExactCost<T, Space>* exact) {
  SinkhornResult<T, Space> solved;
  solved.f = terms.row(terms.f, slot);
  solved.g = terms.row(terms.g, slot);
  Marginals<T, Space> const weights{problem.a2, problem.b2};
  if (dense_cost.size() > 0) {
    form_cost(space, terms, slot, dense_cost);
    sinkhorn(space, CostMatrix<T, Space>{dense_cost}, weights, solved, sink);
    if (exact)
      exact->record_dense(space, slot, dense_cost, problem.marginals.a,
                          problem.marginals.b, solved, sink.epsilon);
  } else {
    sinkhorn(space, terms.cost(slot), weights, solved, sink);
    if (exact)
      exact->record(space, slot, terms.cost(slot), weights, solved, sink);
  }
}

template <class T, class Space>
Run run_restart(const Space& space, const Problem<T, Space>& problem,
                PlanTerms<T, Space>& terms, const GwOptions& o, int restart,
                GraphRows<T, Space>* source_rows,
                GraphRows<T, Space>* target_rows, ExactCost<T, Space>* exact,
                LowRankCoupling<T, Space>* coupling,
                int stop_after = std::numeric_limits<int>::max()) {
  std::uint64_t const seed = o.seed + std::uint64_t(restart);
  if (coupling)
    coupling->start(space, problem.marginals.a, problem.marginals.b,
                    problem.mass());
  std::int64_t const m = o.anchors;
  Run run;
  run.terms = {{-1, 1.0, 0.0}};
  std::vector<int> free_slots;
  for (int s = terms.slots - 1; s >= 0; --s) free_slots.push_back(s);
  int latest = -1;  // the slot of the last solve (its potentials warm-start)

  // ε falls geometrically to final_eps over max_iterations, or with an
  // exact cost by the last iteration before the first change check
  // (iteration min_iterations, counted from 1) and stays there: an exact
  // cost's plan settles at each ε, so the check would pass while ε is still
  // large and return a blurred plan.
  double const final_eps = std::max(o.epsilon / 10, std::min(5e-4, o.epsilon));
  int const annealing =
      std::max(1, exact ? std::min(o.min_iterations, o.max_iterations) - 1
                        : o.max_iterations);
  double const decay = std::pow(final_eps / o.epsilon, 1.0 / annealing);
  // The iterations whose solves are shorter (GwOptions::
  // early_sinkhorn_iterations): sampled costs only, before the last
  // check_every iterations ahead of the first possible stop.
  int const early_solves =
      exact || o.early_sinkhorn_iterations == 0
          ? 0
          : std::max(0, std::min(o.min_iterations, o.max_iterations) -
                            o.check_every);
  int const early_solve_iterations =
      o.early_sinkhorn_iterations < 0
          ? (o.sinkhorn_iterations + 1) / 2
          : std::min(o.early_sinkhorn_iterations, o.sinkhorn_iterations);

  // The anchors j_m (rows) and l_m (columns) of each iteration.
  AnchorDistances<T, Space> drawn(space, problem, m);
  PairDraws<T, Space>& anchors = drawn.pairs;
  auto const &source_anchors = anchors.rows, &target_anchors = anchors.columns;
  auto const &source_host = anchors.rows_host,
             &target_host = anchors.columns_host;
  bool const graph_side = problem.source_graph || problem.target_graph;
  // The rows the change checks read.
  std::int64_t const checked =
      o.check_rows > 0 ? std::min<std::int64_t>(o.check_rows, problem.n)
                       : problem.n;
  auto const check_list =
      uninitialised<int*>(space, "softwave::gw::checked_rows", checked);
  auto check_host =
      compat::host_mirror("softwave::gw::checked_rows_host", check_list);

  // The dense sampled cost, where it is small enough or a dense linear cost
  // makes every solve dense.
  SinkhornOptions sink = solve_options(o, exact != nullptr);
  OTView3<T, Space> dense_cost;
  if (!coupling && dense_solves(o, problem, terms, sink))
    dense_cost = uninitialised<T***>(space, "softwave::gw::dense_cost", 1,
                                     problem.n, problem.k);
  run.dense_solves = dense_cost.size() > 0;

  // The cost average's history, where each solve's cost is one.
  std::optional<CostHistory<T, Space>> history;
  if (cost_window(o) > 1 && !exact)
    history.emplace(space, cost_window(o), problem.n, problem.k, m);

  // A relaxed source: each solve's row sums, for the draws from it.
  Kokkos::View<double*, typename Space::memory_space> slot_row_sums;
  if (!std::isinf(o.rho_a)) {
    run.slot_rows.resize(terms.slots);
    slot_row_sums =
        uninitialised<double*>(space, "softwave::gw::slot_row_sums", problem.n);
  }
  auto slot_row_sums_host =
      compat::host_mirror("softwave::gw::slot_row_sums_host", slot_row_sums);

  for (int t = 0; t < std::min(o.max_iterations, stop_after); ++t) {
    double const eps = o.epsilon * std::pow(decay, std::min(t, annealing));
    int const slot = free_slots.back();
    free_slots.pop_back();
    double const share = 1 - problem.fused_alpha;
    // 1. Anchors from the mixture T_{t−1} (an exact cost's, for the scales
    // only).
    if (!exact || t == 0) {
      anchors.draw(space, problem, terms, run, seed, std::uint64_t(t));
      if (graph_side)  // the graph's Dijkstra runs start on the host
        anchors.copy_columns(space);
    }
    if (exact) {
      if (t == 0) {
        run.source_scale = anchor_scale(space, problem.dx, source_anchors);
        run.target_scale = anchor_scale(space, problem.dy, target_anchors);
      }
      // 2. The exact cost of T_{t−1}.
      exact_factors(space, exact->x, exact->y,
                    exact->cost_of(run.terms, t, o.cost_ema_beta),
                    run.source_scale, run.target_scale, share,
                    terms.row(terms.u, slot), terms.factor(terms.p, slot),
                    terms.row(terms.v, slot), terms.factor(terms.q, slot));
    } else {
      // 2. The anchors' distances, normalised by the first iteration's
      // scale.
      auto const [xs, ys] =
          drawn.distances(space, problem, source_rows, target_rows);
      if (t == 0) {
        run.source_scale = anchor_scale(space, xs.first, xs.second);
        run.target_scale = anchor_scale(space, ys.first, ys.second);
      }
      sampled_factors(space, problem, terms, history, xs, ys, run, o, slot, t);
    }
    if (problem.features() > 0)
      slot_feature_factors(space, problem, terms, slot,
                           exact ? exact->rank() : m * cost_window(o));

    // 3. The solve, warm-started from the last one's potentials (a
    // coupling: from the last coupling).
    sink.epsilon = eps;
    sink.warm_start = latest >= 0;
    sink.max_iterations =
        t < early_solves ? early_solve_iterations : o.sinkhorn_iterations;
    if (coupling) {
      compat::ScopedRegion solve_region("softwave::gw::coupling");
      coupling->solve(space, terms, slot, eps, o);
      coupling->write(space, terms, slot);
    } else if (latest >= 0) {
      Kokkos::deep_copy(space, terms.row(terms.f, slot),
                        terms.row(terms.f, latest));
      Kokkos::deep_copy(space, terms.row(terms.g, slot),
                        terms.row(terms.g, latest));
    }
    if (!coupling) {
      compat::ScopedRegion solve_region("softwave::gw::solve");
      solve_slot(space, problem, terms, slot, sink, dense_cost, exact);
    }
    if (!run.slot_rows.empty())  // the source relaxed: this solve's rows
      cumulative_row_sums(
          space, problem.sum(space, terms, {{slot, 1.0, 1.0 / eps}}),
          slot_row_sums, slot_row_sums_host, run.slot_rows[slot]);
    latest = slot;
    run.final_epsilon = eps;
    run.iterations = t + 1;
    if (o.on_iteration) o.on_iteration(restart, t + 1);

    // 4. T_t = (1 − α) T_{t−1} + α π_t.
    bool const last = t + 1 == o.max_iterations;
    bool const check = (o.tolerance > 0 && t + 1 >= o.min_iterations &&
                        (t + 1 - o.min_iterations) % o.check_every == 0) ||
                       last;
    std::vector<TermWeight> next;
    double kept = 0;
    for (auto w : run.terms) {
      w.weight *= 1 - o.alpha;
      if (w.weight >= o.term_tolerance && w.weight > 0 &&
          int(next.size()) + 2 <= terms.slots) {
        next.push_back(w);
        kept += w.weight;
      } else if (w.slot >= 0) {
        free_slots.push_back(w.slot);
      }
    }
    next.push_back({slot, o.alpha, 1.0 / eps, coupling != nullptr});
    kept += o.alpha;
    for (auto& w : next) w.weight /= kept;
    if (check) {
      compat::ScopedRegion check_region("softwave::gw::check");
      // The change ‖T_t − T_{t−1}‖_F relative to ‖T_t‖_F, both on
      // `checked` rows spread evenly from an offset drawn per check (all
      // rows when checked = N). T_t is the mixture as kept (α π_t +
      // (1 − α) T_{t−1} but for the dropped terms): its terms' weights less
      // T_{t−1}'s, a slot's two weights as one.
      std::vector<TermWeight> difference = next;
      for (auto const& w : run.terms) {
        auto const same =
            std::find_if(difference.begin(), difference.end(),
                         [&](const TermWeight& d) { return d.slot == w.slot; });
        if (same != difference.end())
          same->weight -= w.weight;
        else {
          TermWeight negated = w;
          negated.weight = -w.weight;
          difference.push_back(negated);
        }
      }
      double const offset = uniform_draw(seed, t, 0, 3);
      for (std::int64_t q = 0; q < checked; ++q)
        check_host(q) = int(std::min<double>(
            problem.n - 1,
            std::floor((double(q) + (checked < problem.n ? offset : 0)) *
                       double(problem.n) / double(checked))));
      Kokkos::deep_copy(space, check_list, check_host);
      auto const [change, size] = mixture_frobenius_norms(
          space, problem.sum(space, terms, difference, check_list),
          problem.sum(space, terms, next, check_list), difference, next);
      run.last_change = size > 0 ? change / size : change;
      run.changes.push_back(run.last_change);
    }
    run.terms = next;
    if (check && o.tolerance > 0 && t + 1 >= o.min_iterations &&
        run.last_change <= o.tolerance) {
      run.converged = true;
      break;
    }
  }
  // The last iteration's anchors, as the result reports them.
  anchors.copy_columns(space);
  run.source_anchors.assign(source_host.data(), source_host.data() + m);
  run.target_anchors.assign(target_host.data(), target_host.data() + m);
  return run;
}

// The anchors of the polishing iteration (GwOptions::polish_anchors), 0
// where there is none: sampled costs with Sinkhorn solves only. The
// automatic count is 8·M, lowered where the iterations' low-rank solves
// take the specialised passes and a solve of that rank could not (CUDA's
// take rank <= 128: 128 − e anchors for M = 80), but not below M. A count
// given whose low-rank solve could not take them is an error before the
// run where kernel = specialised insists on them.
template <class T, class Space>
int polish_count(const GwOptions& o, bool exact_cost, bool dense_iterations,
                 const Problem<T, Space>& problem) {
  if (exact_cost || o.coupling_rank > 0) return 0;
  std::int64_t const n = problem.n, k = problem.k, e = problem.features();
  auto why_not = [&](std::int64_t anchors) {
    return specialised_unavailable<Space, T>(
        low_rank_shape<T, Space>(n, k, anchors + e));
  };
  if (o.polish_anchors >= 0) {
    bool const low_rank =
        problem.linear.matrix.size() == 0 &&
        !(o.dense_cost_entries >= 0 && n * k <= o.dense_cost_entries);
    if (o.kernel == Kernel::specialised && o.polish_anchors > 0 && low_rank &&
        !why_not(o.polish_anchors).empty())
      throw_invalid_argument(
          "polish_anchors = ", o.polish_anchors,
          " with kernel = specialised: ", why_not(o.polish_anchors));
    return o.polish_anchors;
  }
  if (o.exact_iterations > 0) return 0;
  std::int64_t const m = o.anchors;
  std::int64_t count = 8 * m;
  bool const iterations_specialised =
      !dense_iterations &&
      specialised_for<Space, T>(
          low_rank_shape<T, Space>(n, k, m * cost_window(o) + e),
          solve_options(o, false));
  if (iterations_specialised && !why_not(count).empty()) {
    // The most anchors, from M up, whose solve still could.
    std::int64_t low = m, high = count;
    while (high - low > 1) {
      std::int64_t const middle = (low + high) / 2;
      (why_not(middle).empty() ? low : high) = middle;
    }
    count = low;
  }
  return int(count);
}

// GwOptions::polish_anchors: one more iteration from the restart's plan
// (run.terms of `terms`) with polished.rank − e anchors, momentum 1 and its
// last ε, into slot 0 of `polished`; the run's plan becomes that solve's
// alone, and its anchors the run's last.
template <class T, class Space>
void polish(const Space& space, const Problem<T, Space>& problem,
            const PlanTerms<T, Space>& terms, PlanTerms<T, Space>& polished,
            Run& run, const GwOptions& o, int restart,
            GraphRows<T, Space>* source_rows,
            GraphRows<T, Space>* target_rows) {
  compat::ScopedRegion region("softwave::gw::polish");
  // The draws' round: apart from every iteration's and the objective's.
  constexpr std::uint64_t kPolishRound = std::uint64_t(1) << 41;
  std::uint64_t const seed = o.seed + std::uint64_t(restart);
  std::int64_t const m = polished.rank - problem.features();
  std::int64_t const n = problem.n, k = problem.k;
  AnchorDistances<T, Space> drawn(space, problem, m);
  drawn.pairs.draw(space, problem, terms, run, seed, kPolishRound);
  drawn.pairs.copy_columns(space);
  auto const [xs, ys] =
      drawn.distances(space, problem, source_rows, target_rows);
  std::optional<CostHistory<T, Space>> no_history;  // momentum 1: no average
  sampled_factors(space, problem, polished, no_history, xs, ys, run, o, 0, 0);
  if (problem.features() > 0)
    slot_feature_factors(space, problem, polished, 0, m);
  int const latest = run.terms.back().slot;
  Kokkos::deep_copy(space, polished.row(polished.f, 0),
                    terms.row(terms.f, latest));
  Kokkos::deep_copy(space, polished.row(polished.g, 0),
                    terms.row(terms.g, latest));
  SinkhornOptions sink = solve_options(o, false);
  sink.epsilon = run.final_epsilon;
  sink.warm_start = true;
  OTView3<T, Space> dense_cost;
  if (dense_solves(o, problem, polished, sink))
    dense_cost =
        uninitialised<T***>(space, "softwave::gw::polish_dense_cost", 1, n, k);
  solve_slot(space, problem, polished, 0, sink, dense_cost,
             static_cast<ExactCost<T, Space>*>(nullptr));
  TermWeight const alone{0, 1.0, 1.0 / run.final_epsilon};
  if (!run.slot_rows.empty()) {  // the source relaxed: the solve's rows
    auto const sums =
        uninitialised<double*>(space, "softwave::gw::polish_row_sums", n);
    std::vector<std::vector<double>> rows(1);
    cumulative_row_sums(
        space, problem.sum(space, polished, {alone}), sums,
        compat::host_mirror("softwave::gw::polish_row_sums_host", sums),
        rows[0]);
    run.slot_rows = std::move(rows);
  }
  run.terms = {alone};
  run.source_anchors.assign(drawn.pairs.rows_host.data(),
                            drawn.pairs.rows_host.data() + m);
  run.target_anchors.assign(drawn.pairs.columns_host.data(),
                            drawn.pairs.columns_host.data() + m);
  run.polish_anchors = int(m);
}

// The exact linearised cost of a plan P from E = P Y (below): entry (i, j)
// share·(Σ_l X_il² r_l + Σ_l Y_jl² c_l − 2 (X E)_ij)/μ, with the squared
// sums given, plus β times the fused linear cost.
template <class T, class Space, class Read, class PlanDy, class Squares>
void exact_linear_cost(const Space& space, const Read& dx, double inv_x,
                       const PlanDy& plan_dy, const Squares& source_squares,
                       const Squares& target_squares, double inv_mass,
                       double share, double beta,
                       const GwLinearCost<T, Space>& linear,
                       const OTView3<T, Space>& cost) {
  std::int64_t const n = cost.extent(1), k = cost.extent(2);
  std::int64_t const features = linear.source_features.extent(1);
  tiled_product(
      space, "softwave::gw::exact_cost", n, k, n,
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t l) {
        return dx(i, l) * inv_x;
      },
      KOKKOS_LAMBDA(std::int64_t l, std::int64_t j) { return plan_dy(l, j); },
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t j, double cross) {
        double c = share * (source_squares(i) + target_squares(j) - 2 * cross) *
                   inv_mass;
        if (linear.matrix.extent(0) > 0) {
          c += beta * double(linear.matrix(i, j));
        } else if (features > 0) {
          double d2 = 0;
          for (std::int64_t e = 0; e < features; ++e) {
            double const diff = double(linear.source_features(i, e)) -
                                double(linear.target_features(j, e));
            d2 += diff * diff;
          }
          c += beta * d2;
        }
        cost(0, i, j) = T(c);
        return 0.0;
      });
}

// GwOptions::exact_iterations: steps P ← the Sinkhorn plan of the exact
// linearised cost L(P) (gw.hpp) from the dense plan given, in place, at the
// restart's last ε and distance scales; the last solve's row argmax into
// `matching` where given. The first solve starts from the potentials of
// the restart's last sampled solve (`terms`), whose cost estimates this
// one: at 1,000 × 1,250 and ε = 5.2e-4 it then reached the tolerance in 530
// iterations instead of 730 from zeros.
template <class T, class Space>
void refine_exactly(const Space& space, const Problem<T, Space>& problem,
                    const SideDistances<T, Space>& dx,
                    const SideDistances<T, Space>& dy, const Run& run,
                    const PlanTerms<T, Space>& terms, const GwOptions& o,
                    const OTView2<T, Space>& plan,
                    const OTView1<int, Space>& matching) {
  using Range = Kokkos::RangePolicy<Space>;
  std::int64_t const n = problem.n, k = problem.k;
  auto const cost =
      uninitialised<T***>(space, "softwave::gw::exact_cost", 1, n, k);
  auto const plan_dy =
      uninitialised<double**>(space, "softwave::gw::exact_plan_dy", n, k);
  auto const rows =
      uninitialised<double*>(space, "softwave::gw::exact_rows", n);
  auto const columns =
      uninitialised<double*>(space, "softwave::gw::exact_columns", k);
  // Σ_l X_il² r_l and Σ_l Y_jl² c_l, once a step (not once an entry).
  auto const source_squares =
      uninitialised<double*>(space, "softwave::gw::exact_source_squares", n);
  auto const target_squares =
      uninitialised<double*>(space, "softwave::gw::exact_target_squares", k);
  auto const f = uninitialised<T**>(space, "softwave::gw::exact_f", 1, n);
  auto const g = uninitialised<T**>(space, "softwave::gw::exact_g", 1, k);
  OTView3<T, Space> const plan3(plan.data(), 1, n, k);
  OTView2<int, Space> const matching2(matching.data(), 1,
                                      matching.size() > 0 ? n : 0);
  Marginals<T, Space> const weights{problem.a2, problem.b2};
  SinkhornOptions sink;
  sink.rho_a = o.rho_a;
  sink.rho_b = o.rho_b;
  sink.epsilon = run.final_epsilon;
  sink.max_iterations = std::max(1000, o.sinkhorn_iterations);
  sink.tolerance = o.sinkhorn_tolerance;
  sink.check_values = false;
  sink.kernel = o.kernel;
  double const inv_x = 1.0 / run.source_scale, inv_y = 1.0 / run.target_scale;
  double const beta = problem.fused_alpha, share = 1 - beta;
  auto const linear = problem.linear;
  TermWeight const last_solve = run.terms.back();
  for (int step = 0; step < o.exact_iterations; ++step) {
    plan_marginals(space, OTView2<const T, Space>(plan), rows, columns);
    double mass = 0;
    Kokkos::parallel_reduce(
        "softwave::gw::exact_mass", Range(space, 0, n),
        KOKKOS_LAMBDA(std::int64_t i, double& out) { out += rows(i); }, mass);
    // P Y, then each cost entry from it (X P Y) and the squared distances
    // weighted by the plan's marginals.
    plan_times_distances(space, OTView2<const T, Space>(plan), dy, inv_y,
                         plan_dy, "softwave::gw::exact_plan_dy");
    Kokkos::parallel_for(
        "softwave::gw::exact_source_squares", Range(space, 0, n),
        KOKKOS_LAMBDA(std::int64_t i) {
          double s = 0;
          for (std::int64_t l = 0; l < n; ++l) {
            double const x = dx(i, l) * inv_x;
            s += x * x * rows(l);
          }
          source_squares(i) = s;
        });
    Kokkos::parallel_for(
        "softwave::gw::exact_target_squares", Range(space, 0, k),
        KOKKOS_LAMBDA(std::int64_t j) {
          double s = 0;
          for (std::int64_t l = 0; l < k; ++l) {
            double const y = dy(j, l) * inv_y;
            s += y * y * columns(l);
          }
          target_squares(j) = s;
        });
    double const inv_mass = 1.0 / mass;
    with_distance_reads(dx, [&](const auto& read) {
      exact_linear_cost(space, read, inv_x, plan_dy, source_squares,
                        target_squares, inv_mass, share, beta, linear, cost);
    });
    if (step == 0 && !last_solve.coupling) {
      Kokkos::deep_copy(space, f, terms.row(terms.f, last_solve.slot));
      Kokkos::deep_copy(space, g, terms.row(terms.g, last_solve.slot));
    }
    sink.warm_start = step > 0 || !last_solve.coupling;
    SinkhornResult<T, Space> solved;
    solved.f = f;
    solved.g = g;
    CostMatrix<T, Space> const form{cost};
    sinkhorn(space, form, weights, solved, sink);
    PlanQueries<T, Space> queries;
    queries.plan = plan3;
    if (step + 1 == o.exact_iterations) queries.row_argmax = matching2;
    sinkhorn_plan_queries(space, form, weights, OTView2<const T, Space>(f),
                          OTView2<const T, Space>(g), queries, sink);
  }
}

// The GW objective estimated from pairs drawn from a restart's plan
// (sampled_gw_objective): distances among the drawn points of each side
// from the side itself, or for a graph from Dijkstra runs from them, a
// chunk of sources at a time (an S×S matrix, never N×N).
template <class T, class Space>
struct ObjectiveSample {
  using Index = Kokkos::View<const int*, typename Space::memory_space>;
  // The draws' round: apart from every iteration's.
  static constexpr std::uint64_t kRound = std::uint64_t(1) << 40;
  static constexpr std::int64_t kChunk = 64;
  PairDraws<T, Space> pairs;
  Kokkos::View<int*, Kokkos::LayoutRight, typename Space::memory_space>
      identity;
  ShortestPaths shortest_paths;
  // Each graph side's runs, kept across restarts (made on first use).
  std::optional<GraphPaths<Space>> source_paths, target_paths;

  ObjectiveSample(const Space& space, std::int64_t count, std::int64_t k,
                  ShortestPaths method)
      : pairs(space, count, k),
        identity(
            identity_indices(space, count, "softwave::gw::sample_identity")),
        shortest_paths(method) {}

  // One side's distances among the drawn points `index` (host copy
  // `index_host`), with the points' indices in them.
  template <class HostIndex>
  std::pair<SideDistances<T, Space>, Index> among(
      const Space& space, const SideDistances<T, Space>& side,
      const Graph* graph, std::optional<GraphPaths<Space>>& paths,
      const Index& index, const HostIndex& index_host) const {
    if (graph == nullptr) return {side, index};
    std::int64_t const count = index.extent(0);
    auto const matrix = uninitialised<T**>(
        space, "softwave::gw::sample_distances", count, count);
    std::int64_t const chunk = std::min(kChunk, count);
    auto const columns = uninitialised<T**>(
        space, "softwave::gw::sample_columns", graph->nodes(), chunk);
    for (std::int64_t first = 0; first < count; first += chunk) {
      std::int64_t const width = std::min(chunk, count - first);
      // (The last chunk's runs are padded with its first source.)
      std::vector<int> sources(chunk, index_host(first));
      for (std::int64_t c = 0; c < width; ++c)
        sources[c] = index_host(first + c);
      if (!paths) paths.emplace(*graph, shortest_paths, chunk);
      paths->compute(space, sources, columns);
      Kokkos::parallel_for(
          "softwave::gw::sample_distances",
          Kokkos::RangePolicy<Space>(space, 0, count * width),
          KOKKOS_LAMBDA(std::int64_t q) {
            std::int64_t const t = q / width, c = q % width;
            matrix(t, first + c) = columns(index(t), c);
          });
    }
    return {SideDistances<T, Space>(GwDistances<T, Space>{matrix, {}, nullptr}),
            identity};
  }

  SampledObjective estimate(const Space& space,
                            const Problem<T, Space>& problem,
                            const PlanTerms<T, Space>& terms, const Run& run,
                            std::uint64_t seed) {
    pairs.draw(space, problem, terms, run, seed, kRound);
    pairs.copy_columns(space);
    auto const xs = among(space, problem.dx, problem.source_graph, source_paths,
                          pairs.rows, pairs.rows_host);
    auto const ys = among(space, problem.dy, problem.target_graph, target_paths,
                          pairs.columns, pairs.columns_host);
    return sampled_gw_objective(space, xs.first, xs.second, ys.first, ys.second,
                                run.mass(problem));
  }
};

}  // namespace

template <class Space, class T>
void sampled_gw(const Space& space, const GwDistances<T, Space>& source,
                const GwDistances<T, Space>& target,
                const GwLinearCost<T, Space>& linear,
                const GwMarginals<T, Space>& marginals,
                GwResult<T, Space>& result, const GwOptions& options) {
  compat::ScopedRegion region("softwave::gw::sampled_gw");
  check_options(options);
  DataChecks<Space> checks(space, options.check_values, "gw");
  check_side(checks, source, "source", "source.matrix", "source.coordinates",
             "source.squared_coordinates");
  check_side(checks, target, "target", "target.matrix", "target.coordinates",
             "target.squared_coordinates");
  Problem<T, Space> problem(source, target, linear, options.fused_alpha,
                            marginals);
  std::int64_t const n = problem.n, k = problem.k;
  check_linear(checks, linear, n, k, options.fused_alpha);
  check_weights(checks, marginals.a, n, "a");
  check_weights(checks, marginals.b, k, "b");
  if (result.plan.size() > 0 && (std::int64_t(result.plan.extent(0)) != n ||
                                 std::int64_t(result.plan.extent(1)) != k))
    check_extent(result.plan, "plan", {std::size_t(n), std::size_t(k)},
                 "(source points, target points)");
  if (options.warm_start) {
    if (result.plan.size() == 0)
      throw_invalid_argument(
          "warm_start reads the initial plan from result.plan: give it (", n,
          ", ", k, ")");
    auto const t0 = result.plan;
    checks.count(
        "result.plan (the warm start)", " negative or non-finite value(s)",
        n * k, "softwave::gw::check_initial_plan",
        KOKKOS_LAMBDA(std::int64_t q)->std::int64_t {
          double const v = t0(q / k, q % k);
          return !(compat::isfinite(v) && v >= 0);
        });
  }
  if (result.last_plan.size() > 0 &&
      (std::int64_t(result.last_plan.extent(0)) != n ||
       std::int64_t(result.last_plan.extent(1)) != k))
    check_extent(result.last_plan, "last_plan",
                 {std::size_t(n), std::size_t(k)},
                 "(source points, target points)");
  if (result.matching.size() > 0 &&
      std::int64_t(result.matching.extent(0)) != n)
    check_extent(result.matching, "matching", {std::size_t(n)},
                 "(source points)");
  checks.finish();

  problem.a_cumulative = cumulative_weights(space, marginals.a, n);
  problem.b_cumulative = cumulative_weights(space, marginals.b, k);
  double const mass_a = problem.a_cumulative.back(),
               mass_b = problem.b_cumulative.back();
  if (!(mass_a > 0)) throw_invalid_argument("a has no mass (sum 0)");
  if (!(mass_b > 0)) throw_invalid_argument("b has no mass (sum 0)");
  bool const a_uniform = marginals.a.extent(0) == 0,
             b_uniform = marginals.b.extent(0) == 0;
  if (std::isinf(options.rho_a) && std::isinf(options.rho_b) &&
      !(a_uniform && b_uniform)) {
    double const ma = a_uniform ? 1.0 : mass_a, mb = b_uniform ? 1.0 : mass_b;
    if (std::abs(ma - mb) > 1e-5 * std::max(ma, mb))
      throw_invalid_argument(
          "a and b have different masses (", ma, " and ", mb,
          "): a balanced problem needs equal masses (or set rho_a or "
          "rho_b)");
  }
  if (options.warm_start) {
    // A copy (result.plan is overwritten), its row sums and its scale.
    auto const t0 =
        uninitialised<T**>(space, "softwave::gw::initial_plan", n, k);
    Kokkos::deep_copy(space, t0, result.plan);
    auto const rows_device =
        uninitialised<double*>(space, "softwave::gw::initial_rows", n);
    auto const rows =
        compat::host_mirror("softwave::gw::initial_rows_host", rows_device);
    Kokkos::parallel_for(
        "softwave::gw::initial_rows", Kokkos::RangePolicy<Space>(space, 0, n),
        KOKKOS_LAMBDA(std::int64_t i) {
          double sum = 0;
          for (std::int64_t j = 0; j < k; ++j) sum += double(t0(i, j));
          rows_device(i) = sum;
        });
    Kokkos::deep_copy(space, rows, rows_device);
    space.fence();
    double total = 0;
    for (std::int64_t i = 0; i < n; ++i)
      problem.initial_rows.push_back(total += rows(i));
    if (!(total > 0))
      throw_invalid_argument("result.plan (the warm start) has no mass");
    problem.initial = t0;
    problem.initial_scale = problem.mass() / total;
  }
  if (marginals.a.extent(0))
    problem.a2 = OTView2<const T, Space>(marginals.a.data(), 1, n);
  if (marginals.b.extent(0))
    problem.b2 = OTView2<const T, Space>(marginals.b.data(), 1, k);

  // Embeddings on both sides: every solve's cost exact (gw.hpp).
  std::optional<ExactCost<T, Space>> exact_cost;
  if (source.squared_coordinates.size() > 0 &&
      target.squared_coordinates.size() > 0) {
    exact_cost.emplace(space, source.squared_coordinates,
                       target.squared_coordinates, slot_count(options));
    exact_cost->record_initial(space, problem.initial, problem.initial_scale,
                               marginals.a, marginals.b,
                               problem.product_scale());
  }
  std::int64_t const cost_rank =
      exact_cost ? exact_cost->rank()
                 : std::int64_t(options.anchors) * cost_window(options);
  // Low-rank couplings: their factors share the slots' (a slot holds a
  // cost, then the coupling solved for it).
  std::optional<LowRankCoupling<T, Space>> coupling;
  if (options.coupling_rank > 0) {
    if (exact_cost)
      throw_invalid_argument(
          "coupling_rank = ", options.coupling_rank,
          ": low-rank couplings take sampled costs, not the exact costs of "
          "embeddings (squared_coordinates on both sides)");
    coupling.emplace(space, n, k, options.coupling_rank,
                     cost_rank + problem.features());
  }
  PlanTerms<T, Space> terms(
      space, n, k,
      std::max<std::int64_t>(cost_rank + problem.features(),
                             options.coupling_rank),
      slot_count(options));
  terms.linear = linear.matrix;
  terms.linear_weight = T(options.fused_alpha);
  // The polishing iteration's factors (one slot).
  std::optional<PlanTerms<T, Space>> polished;
  bool const exact_costs = exact_cost.has_value();
  bool const dense_iterations =
      !coupling && dense_solves(options, problem, terms,
                                solve_options(options, exact_costs));
  if (int const count =
          polish_count(options, exact_costs, dense_iterations, problem);
      count > 0) {
    polished.emplace(space, n, k, count + problem.features(), 1);
    polished->linear = linear.matrix;
    polished->linear_weight = T(options.fused_alpha);
  }
  // The objective: exact from a dense plan where N·K is small enough, else
  // estimated from pairs drawn from the plan.
  bool const want_objective = result.compute_objective || options.restarts > 1;
  bool const exact = options.exact_iterations > 0;
  if (exact && n * k > options.exact_objective_entries)
    throw_invalid_argument(
        "exact_iterations = ", options.exact_iterations, " needs a dense ", n,
        " x ", k, " plan: N·K must be at most exact_objective_entries = ",
        options.exact_objective_entries);
  bool const need_dense =
      (want_objective || exact) && n * k <= options.exact_objective_entries;
  // Exact costs (not fused) have an exact objective at any size, from each
  // term's plan applied to the distance factors.
  bool const factored_objective = exact_cost && !(options.fused_alpha > 0);
  std::optional<ObjectiveSample<T, Space>> sample;
  if (want_objective && !need_dense && !factored_objective)
    sample.emplace(space, options.objective_samples, k, options.shortest_paths);
  OTView2<T, Space> dense = result.plan;
  if (need_dense && (dense.size() == 0 || options.restarts > 1))
    dense = uninitialised<T**>(space, "softwave::gw::dense_plan", n, k);

  // The objective needs every distance: a graph side's, all N sources once.
  auto all_pairs = [&](const Graph& graph, const char* label) {
    auto const out =
        uninitialised<T**>(space, label, graph.nodes(), graph.nodes());
    std::vector<int> sources(graph.nodes());
    for (std::size_t i = 0; i < sources.size(); ++i) sources[i] = int(i);
    softwave::graph_distances(space, graph, sources, out,
                              options.shortest_paths);
    return SideDistances<T, Space>(GwDistances<T, Space>{out, {}, nullptr});
  };
  SideDistances<T, Space> objective_x = problem.dx, objective_y = problem.dy;
  if (need_dense && problem.source_graph)
    objective_x =
        all_pairs(*problem.source_graph, "softwave::gw::source_all_pairs");
  if (need_dense && problem.target_graph)
    objective_y =
        all_pairs(*problem.target_graph, "softwave::gw::target_all_pairs");
  // Coordinates (Euclidean distances): formed once where N² fits the same
  // budget as the dense plan.
  auto from_coordinates = [&](const SideDistances<T, Space>& side) {
    return need_dense && !side.dense && !side.squared &&
           side.size() * side.size() <= options.exact_objective_entries;
  };
  if (from_coordinates(objective_x))
    objective_x =
        formed_distances(space, objective_x, "softwave::gw::source_distances");
  if (from_coordinates(objective_y))
    objective_y =
        formed_distances(space, objective_y, "softwave::gw::target_distances");

  // A graph side whose every shortest path fits the kept-columns budget
  // becomes a matrix side, as in the precomputed mode: its N runs once
  // (already done where the objective needs them) instead of M a side an
  // iteration, and each iteration's anchors are columns of the matrix. Done
  // where N is at most half the runs of the fewest iterations a run takes
  // (about half the anchors come back kept: 3,703 runs of 8,000 at 2,000 ×
  // 2,500), so no more runs at that rate; a run whose anchors repeat more
  // often could run fewer the other way. On the H200 it took TorchGW's
  // 400 × 500 dijkstra task from 0.45 to 0.11 s. The distances, so the
  // plan, are the same.
  std::int64_t const fewest_runs =
      std::int64_t(std::min(options.min_iterations, options.max_iterations)) *
      options.anchors;
  auto all_at_once = [&](const Graph* graph, bool formed) {
    if (graph == nullptr) return false;
    std::int64_t const nodes = graph->nodes();
    return nodes * nodes * std::int64_t(sizeof(T)) <=
               options.graph_cache_bytes &&
           (formed || 2 * nodes <= fewest_runs);
  };
  if (all_at_once(problem.source_graph, need_dense)) {
    problem.dx = need_dense ? objective_x
                            : all_pairs(*problem.source_graph,
                                        "softwave::gw::source_all_pairs");
    problem.source_graph = nullptr;
  }
  if (all_at_once(problem.target_graph, need_dense)) {
    problem.dy = need_dense ? objective_y
                            : all_pairs(*problem.target_graph,
                                        "softwave::gw::target_all_pairs");
    problem.target_graph = nullptr;
  }

  // Other graph sides: their anchors' shortest paths, kept across
  // iterations and restarts.
  std::optional<GraphRows<T, Space>> source_rows, target_rows;
  if (problem.source_graph)
    source_rows.emplace(space, *problem.source_graph, options.anchors,
                        options.graph_cache_bytes, options.shortest_paths);
  if (problem.target_graph)
    target_rows.emplace(space, *problem.target_graph, options.anchors,
                        options.graph_cache_bytes, options.shortest_paths);

  bool const fused = options.fused_alpha > 0;
  double first_source_scale = 1, first_target_scale = 1;
  // The objective of a run's plan (`sum` the mixture; `rendered`: the dense
  // plan already holds it, refined) and the restarts' criterion.
  struct Assessment {
    double objective = NAN, objective_error = NAN, linear_value = NAN,
           linear_error = NAN, criterion = NAN;
  };
  auto assess = [&](const Run& run, const PlanTerms<T, Space>& plan_terms,
                    const auto& sum, std::uint64_t seed, bool rendered) {
    Assessment a;
    GwObjectiveParts parts;
    if (sample) {
      auto const estimate =
          sample->estimate(space, problem, plan_terms, run, seed);
      parts = estimate.parts;
      a.objective = parts.value();
      a.objective_error = estimate.error;
      a.criterion = a.objective;
      if (fused) {
        std::tie(a.linear_value, a.linear_error) =
            sampled_linear_objective(space, linear, sample->pairs.rows,
                                     sample->pairs.columns, run.mass(problem));
      }
    } else if (want_objective && !need_dense) {  // factored_objective
      parts = exact_cost->mixture_objective(space, sum);
      a.objective = parts.value();
      a.objective_error = 0;
      a.criterion = a.objective;
    } else if (need_dense && want_objective) {
      if (!rendered) render_plan(space, sum, dense);
      OTView2<const T, Space> const plan(dense);
      parts = exact_cost ? exact_cost->objective(space, plan)
                         : gw_objective(space, objective_x, objective_y, plan);
      a.objective = parts.value();
      a.objective_error = 0;
      a.criterion = a.objective;
      if (fused) {
        a.linear_value = linear_objective(space, linear, plan);
        a.linear_error = 0;
      }
    }
    if (fused && want_objective)
      a.criterion = (1 - options.fused_alpha) *
                        parts.value(first_source_scale, first_target_scale) +
                    options.fused_alpha * a.linear_value;
    return a;
  };
  auto run_of = [&](int restart, int stop_after) {
    Run run = run_restart(space, problem, terms, options, restart,
                          source_rows ? &*source_rows : nullptr,
                          target_rows ? &*target_rows : nullptr,
                          exact_cost ? &*exact_cost : nullptr,
                          coupling ? &*coupling : nullptr, stop_after);
    if (restart == 0) {
      first_source_scale = run.source_scale;
      first_target_scale = run.target_scale;
    }
    return run;
  };

  // The restarts run to the end: all, or the race's winner alone (a rerun
  // from its start, which the counter-based draws make the same run).
  std::vector<int> finalists(options.restarts);
  std::iota(finalists.begin(), finalists.end(), 0);
  std::vector<double> criteria;
  bool const race = options.restarts > 1 && options.restart_iterations > 0 &&
                    options.restart_iterations < options.max_iterations;
  if (race) {
    for (int restart = 0; restart < options.restarts; ++restart) {
      Run const run = run_of(restart, options.restart_iterations);
      criteria.push_back(assess(run, terms,
                                problem.sum(space, terms, run.terms),
                                options.seed + std::uint64_t(restart), false)
                             .criterion);
    }
    // The first lowest (as whole restarts keep it).
    finalists = {int(std::min_element(criteria.begin(), criteria.end()) -
                     criteria.begin())};
  }

  double best = INFINITY;
  for (int restart : finalists) {
    std::uint64_t const seed = options.seed + std::uint64_t(restart);
    Run run = run_of(restart, std::numeric_limits<int>::max());
    if (polished)
      polish(space, problem, terms, *polished, run, options, restart,
             source_rows ? &*source_rows : nullptr,
             target_rows ? &*target_rows : nullptr);
    PlanTerms<T, Space> const& plan_terms = polished ? *polished : terms;
    auto const sum = problem.sum(space, plan_terms, run.terms);
    // The refined plan's matching, kept with the restart that wins.
    OTView1<int, Space> refined_matching;
    if (exact) {
      render_plan(space, sum, dense);
      if (result.matching.size() > 0)
        refined_matching =
            uninitialised<int*>(space, "softwave::gw::exact_matching", n);
      refine_exactly(space, problem, objective_x, objective_y, run, plan_terms,
                     options, dense, refined_matching);
    }
    auto const [objective, objective_error, linear_value, linear_error,
                criterion] = assess(run, plan_terms, sum, seed, exact);
    if (!race && options.restarts > 1) criteria.push_back(criterion);
    bool const keep = restart == finalists.front() || criterion < best;
    if (!keep) continue;
    best = criterion;
    // The plan asked for: rendered here, unless the objective's dense
    // plan is it (or holds it).
    if (result.plan.size() > 0) {
      if (!need_dense)
        render_plan(space, sum, result.plan);
      else if (dense.data() != result.plan.data())
        Kokkos::deep_copy(space, result.plan, dense);
    }
    // The last solve's own plan: after exact iterations the refined plan,
    // else the mixture's newest term alone.
    if (result.last_plan.size() > 0) {
      if (exact) {
        Kokkos::deep_copy(space, result.last_plan, dense);
        result.last_plan_weight = 1;
      } else {
        TermWeight alone = run.terms.back();
        result.last_plan_weight = alone.weight;
        alone.weight = 1;
        render_plan(space, problem.sum(space, plan_terms, {alone}),
                    result.last_plan);
      }
    }
    // The matching: the returned plan's argmax where there is one (the
    // same to the last entry), else the mixture's.
    if (result.matching.size() > 0) {
      if (exact)
        Kokkos::deep_copy(space, result.matching, refined_matching);
      else if (result.plan.size() > 0)
        plan_row_argmax(space, OTView2<const T, Space>(result.plan),
                        result.matching);
      else
        mixture_row_argmax(space, sum, run.terms, result.matching);
    }
    result.objective = objective;
    result.objective_error = objective_error;
    result.linear_objective = linear_value;
    result.linear_objective_error = linear_error;
    result.iterations = run.iterations;
    result.converged = run.converged;
    result.seed = seed;
    result.last_change = run.last_change;
    result.changes = run.changes;
    result.source_scale = run.source_scale;
    result.target_scale = run.target_scale;
    result.source_anchors = run.source_anchors;
    result.target_anchors = run.target_anchors;
    result.final_epsilon = run.final_epsilon;
    result.dense_solves = run.dense_solves;
    result.polish_anchors = run.polish_anchors;
  }
  result.restart_objectives = criteria;
  space.fence();
}

template <class Space, class T>
OTView2<T, Space> cosine_coordinates(const Space& space,
                                     const OTView2<const T, Space>& points) {
  std::int64_t const n = points.extent(0), e = points.extent(1);
  auto const out =
      uninitialised<T**>(space, "softwave::gw::cosine_coordinates", n, e);
  std::int64_t zero_rows = 0;
  Kokkos::parallel_reduce(
      "softwave::gw::cosine_coordinates",
      Kokkos::RangePolicy<Space>(space, 0, n),
      KOKKOS_LAMBDA(std::int64_t i, std::int64_t & zero) {
        double norm = 0;
        for (std::int64_t c = 0; c < e; ++c) {
          double const x = points(i, c);
          norm += x * x;
        }
        // Non-finite rows pass through to the distance checks.
        bool const none = !(norm > 0);
        if (none && norm == 0) ++zero;
        double const scale = none ? 1.0 : 1.0 / compat::sqrt(2 * norm);
        for (std::int64_t c = 0; c < e; ++c)
          out(i, c) = T(double(points(i, c)) * scale);
      },
      zero_rows);
  if (zero_rows > 0)
    throw_invalid_argument(
        "cosine distances: ", zero_rows, " of the ", n,
        " points are zero vectors (a cosine needs a direction)");
  return out;
}

#define SOFTWAVE_INSTANTIATE_GW(SPACE, T)                                   \
  template void sampled_gw<SPACE, T>(                                       \
      const SPACE&, const GwDistances<T, SPACE>&,                           \
      const GwDistances<T, SPACE>&, const GwLinearCost<T, SPACE>&,          \
      const GwMarginals<T, SPACE>&, GwResult<T, SPACE>&, const GwOptions&); \
  template OTView2<T, SPACE> cosine_coordinates<SPACE, T>(                  \
      const SPACE&, const OTView2<const T, SPACE>&);

SOFTWAVE_INSTANTIATE_GW(Kokkos::DefaultExecutionSpace, float)
SOFTWAVE_INSTANTIATE_GW(Kokkos::DefaultExecutionSpace, double)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_GW(Kokkos::DefaultHostExecutionSpace, float)
SOFTWAVE_INSTANTIATE_GW(Kokkos::DefaultHostExecutionSpace, double)
#endif

}  // namespace softwave::impl
