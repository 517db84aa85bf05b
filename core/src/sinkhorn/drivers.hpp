#pragma once
// Drivers of the Sinkhorn entry points: argument checks, the iteration loop
// with its rare residual read-backs, the exact measurements of the returned
// potentials, gradients and plan queries, all built from the tiled passes
// (passes.hpp) over the three cost forms (forms.hpp), and the macros that
// instantiate them. sinkhorn_<type>.cpp instantiate one value type each, so
// that a build compiles them in parallel: under nvcc the two together were
// one source of about 13 minutes.

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <softwave/sinkhorn.hpp>
#include <type_traits>
#include <vector>

#include "../common/call_memory.hpp"
#include "../common/data_checks.hpp"
#include "options_check.hpp"
#include "passes.hpp"
#include "specialised.hpp"

namespace softwave::impl {

namespace {

template <class Space>
using Memory = typename Space::memory_space;
template <class Space>
using Totals = Kokkos::View<double**, Memory<Space>>;
template <class Space>
using Mask = Kokkos::View<int*, Memory<Space>>;
// Keeps a parameter out of template argument deduction, so that a view of
// T converts to a view of const T at the call.
template <class U>
struct same_type {
  using type = U;
};
template <class U>
using same_t = typename same_type<U>::type;

template <class View, class Space, class... Extents>
CallArray<View> scratch(const Space& space, const char* name, bool zero,
                        Extents... extents) {
  return call_array<View>(space,
                          (std::string("softwave::sinkhorn::") + name).c_str(),
                          zero, extents...);
}

// Every value of v finite.
template <class Space, class View>
void check_finite(DataChecks<Space>& checks, const View& v, const char* name) {
  checks.finite_values(v, name);
}

template <class T, class Space>
struct Sizes {
  std::size_t batch, rows, columns;
};

template <class T, class Space>
Sizes<T, Space> check_form(DataChecks<Space>& checks,
                           const PointClouds<T, Space>& form) {
  std::size_t const B = form.x.extent(0), d = form.x.extent(2);
  if (form.y.extent(0) != B || form.y.extent(2) != d)
    throw_invalid_argument("y has shape (", form.y.extent(0), ", ",
                           form.y.extent(1), ", ", form.y.extent(2),
                           "), expected (", B, ", K, ", d,
                           ") (x's batch and dimension)");
  if (B > 0 && d == 0) throw_invalid_argument("x and y have no coordinates");
  check_finite(checks, form.x, "x");
  check_finite(checks, form.y, "y");
  return {B, form.x.extent(1), form.y.extent(1)};
}

template <class T, class Space>
Sizes<T, Space> check_form(DataChecks<Space>& checks,
                           const CostMatrix<T, Space>& form) {
  check_finite(checks, form.cost, "cost");
  return {form.cost.extent(0), form.cost.extent(1), form.cost.extent(2)};
}

template <class T, class Space>
Sizes<T, Space> check_form(DataChecks<Space>& checks,
                           const LowRankCost<T, Space>& form) {
  std::size_t const B = form.p.extent(0), N = form.p.extent(1),
                    r = form.p.extent(2), K = form.q.extent(1);
  check_extent(form.q, "q", {B, K, r}, "(p's batch and rank)");
  if (form.u.extent(0) || form.u.extent(1))
    check_extent(form.u, "u", {B, N}, "(one per row of p)");
  if (form.v.extent(0) || form.v.extent(1))
    check_extent(form.v, "v", {B, K}, "(one per row of q)");
  check_finite(checks, form.p, "p");
  check_finite(checks, form.q, "q");
  check_finite(checks, form.u, "u");
  check_finite(checks, form.v, "v");
  return {B, N, K};
}

// Log-weights (−∞ for a zero weight) and each problem's mass.
template <class T, class Space>
struct Weights {
  CallArray<OTView2<T, Space>> log_a, log_b;
  CallArray<Kokkos::View<double*, Memory<Space>>> mass_a, mass_b;
};

// A team a chunk of kWeightChunk weights, each chunk's mass into
// partial(b, chunk), then each problem's chunks added in order: a team a
// problem (one block on a GPU) took 141 µs for 50,000 weights on an H100,
// 14 ms of a 40,000 × 50,000 GW call, which solves 100 times.
template <class T, class Space>
void log_weights(const Space& space, same_t<OTView2<const T, Space>> w,
                 const OTView2<T, Space>& out,
                 const Kokkos::View<double*, Memory<Space>>& mass) {
  using Policy = Kokkos::TeamPolicy<Space>;
  constexpr std::int64_t kWeightChunk = 4096;
  std::int64_t const batch = out.extent(0), n = out.extent(1);
  std::int64_t const chunks =
      std::max<std::int64_t>(1, (n + kWeightChunk - 1) / kWeightChunk);
  auto const partial = scratch<Kokkos::View<double**, Memory<Space>>>(
      space, "weight_chunks", false, batch, chunks);
  auto const part = partial.view;
  bool const uniform = w.extent(0) == 0;
  Kokkos::parallel_for(
      "softwave::sinkhorn::log_weights",
      compat::light_weight(Policy(space, batch * chunks, Kokkos::AUTO)),
      KOKKOS_LAMBDA(const typename Policy::member_type& team) {
        std::int64_t const b = team.league_rank() / chunks;
        std::int64_t const chunk = team.league_rank() % chunks;
        std::int64_t const first = chunk * kWeightChunk;
        std::int64_t const last =
            first + kWeightChunk < n ? first + kWeightChunk : n;
        double total = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, first, last),
            [&](std::int64_t i, double& sum) {
              double const wi = uniform ? 1.0 / double(n) : double(w(b, i));
              out(b, i) = wi > 0 ? T(compat::log(wi)) : T(-INFINITY);
              sum += wi;
            },
            total);
        Kokkos::single(Kokkos::PerTeam(team),
                       [&]() { part(b, chunk) = total; });
      });
  Kokkos::parallel_for(
      "softwave::sinkhorn::weight_masses",
      compat::light_weight(Kokkos::RangePolicy<Space>(space, 0, batch)),
      KOKKOS_LAMBDA(std::int64_t b) {
        double total = 0;
        for (std::int64_t chunk = 0; chunk < chunks; ++chunk)
          total += part(b, chunk);
        mass(b) = total;
      });
}

template <class Space, class T>
void check_weights(DataChecks<Space>& checks, same_t<OTView2<const T, Space>> w,
                   const char* name, std::size_t B, std::size_t n) {
  if (w.extent(0) == 0 && w.extent(1) == 0) return;
  check_extent(w, name, {B, n}, "(one weight per point)");
  auto const data = w;
  checks.count(
      name, " negative or non-finite weight(s)", B * n,
      std::string("softwave::sinkhorn::check_weights"),
      KOKKOS_LAMBDA(std::int64_t q) {
        double const v = data(q / n, q % n);
        return std::int64_t(!(v >= 0) || !compat::isfinite(v));
      });
  checks.count(
      name, " problem(s) whose weights sum to 0", B,
      std::string("softwave::sinkhorn::check_mass"),
      KOKKOS_LAMBDA(std::int64_t b) {
        double sum = 0;
        for (std::size_t i = 0; i < n; ++i) sum += data(b, i);
        return std::int64_t(!(sum > 0));
      });
}

template <class Space, class T>
Weights<T, Space> weights(const Space& space,
                          const Marginals<T, Space>& marginals, std::size_t B,
                          std::size_t N, std::size_t K) {
  Weights<T, Space> out;
  out.log_a = scratch<OTView2<T, Space>>(space, "log_a", false, B, N);
  out.log_b = scratch<OTView2<T, Space>>(space, "log_b", false, B, K);
  out.mass_a =
      scratch<Kokkos::View<double*, Memory<Space>>>(space, "mass_a", false, B);
  out.mass_b =
      scratch<Kokkos::View<double*, Memory<Space>>>(space, "mass_b", false, B);
  log_weights<T, Space>(space, marginals.a, out.log_a.view, out.mass_a.view);
  log_weights<T, Space>(space, marginals.b, out.log_b.view, out.mass_b.view);
  return out;
}

// ε per problem: the target and the cost scale it is relative to (and
// anneals from), and how many iterations the annealing takes.
template <class T, class Space>
struct Epsilons {
  CallArray<OTView1<T, Space>> target, scale;
  int annealing = 0;
  EpsilonAt<T, Space> at(int iteration, double q) const {
    T const factor = iteration <= annealing ? T(std::pow(q, iteration)) : T(0);
    return {target.view, scale.view, factor};
  }
};

template <class T, class Space, class Form>
Epsilons<T, Space> epsilons(const Space& space, const Form& form,
                            const SinkhornOptions& options) {
  std::int64_t const B = form.batch(), N = form.rows();
  Epsilons<T, Space> out;
  out.target = scratch<OTView1<T, Space>>(space, "epsilon", false, B);
  out.scale = scratch<OTView1<T, Space>>(space, "cost_scale", false, B);
  auto const target = out.target.view, scale = out.scale.view;
  bool const need_scale =
      options.epsilon_relative || options.epsilon_scaling > 0;
  if (need_scale && N > 0 && form.columns() > 0) {
    auto rows = scratch<OTView2<T, Space>>(space, "row_max_cost", false, B, N);
    MaxCostVisitor<T, Space> visitor;
    visitor.rows = rows.view;
    auto ones = scratch<OTView1<T, Space>>(space, "unit", false, B);
    Kokkos::deep_copy(space, ones.view, T(1));
    auto zeros = scratch<OTView2<T, Space>>(space, "zero", true, B, 1);
    // The max-cost pass needs no column terms; give it any finite ones.
    auto const columns_k = form.columns();
    auto zero_columns =
        scratch<OTView2<T, Space>>(space, "zero_columns", true, B, columns_k);
    tiled_pass(space, "max_cost", form,
               ColumnSide<T, Space>{zero_columns.view, zero_columns.view},
               EpsilonAt<T, Space>{ones.view, ones.view, T(0)}, visitor);
    auto const row_max = rows.view;
    using Policy = Kokkos::TeamPolicy<Space>;
    Kokkos::parallel_for(
        "softwave::sinkhorn::cost_scale",
        compat::light_weight(Policy(space, B, Kokkos::AUTO)),
        KOKKOS_LAMBDA(const typename Policy::member_type& team) {
          std::int64_t const b = team.league_rank();
          T best = lowest<T>();
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, N),
              [&](std::int64_t i, T& m) {
                if (row_max(b, i) > m) m = row_max(b, i);
              },
              Kokkos::Max<T>(best));
          Kokkos::single(Kokkos::PerTeam(team),
                         [&]() { scale(b) = best > 0 ? best : T(1); });
        });
  } else {
    Kokkos::deep_copy(space, scale, T(1));
  }
  T const eps = T(options.epsilon);
  bool const relative = options.epsilon_relative;
  Kokkos::parallel_for(
      "softwave::sinkhorn::epsilon",
      compat::light_weight(Kokkos::RangePolicy<Space>(space, 0, B)),
      KOKKOS_LAMBDA(std::int64_t b) {
        target(b) = relative ? eps * scale(b) : eps;
      });
  if (options.epsilon_scaling > 0 && B > 0) {
    // Annealing runs until the largest scale/target ratio is reached.
    auto const host_scale =
        compat::host_mirror("softwave::sinkhorn::epsilon_scale_host", scale);
    auto const host_target =
        compat::host_mirror("softwave::sinkhorn::epsilon_host", target);
    Kokkos::deep_copy(space, host_scale, scale);
    Kokkos::deep_copy(space, host_target, target);
    space.fence();
    double ratio = 1;
    for (std::int64_t b = 0; b < B; ++b)
      ratio = std::max(ratio, double(host_scale(b)) / double(host_target(b)));
    out.annealing =
        int(std::ceil(std::log(ratio) / -std::log(options.epsilon_scaling)));
  }
  return out;
}

// Both sides' exact measurements of potentials f, g: totals(b, side, ·) =
// [mass of π, marginal L1 error, residual, Σ w φ(potential), ⟨π, C⟩], and
// each row's and column's LSE; a side not `wanted` ({rows, columns}) is not
// measured (its arrays are left as allocated).
template <class T, class Space>
struct Measurements {
  CallArray<Kokkos::View<double**, Memory<Space>>> rows, columns;
  CallArray<OTView2<T, Space>> row_lse, column_lse;
};

template <class Space, class T, class Form>
Measurements<T, Space> measure(const Space& space, const Form& form,
                               const Weights<T, Space>& w,
                               same_t<OTView2<const T, Space>> f,
                               same_t<OTView2<const T, Space>> g,
                               const EpsilonAt<T, Space>& eps,
                               const SinkhornOptions& options,
                               std::array<bool, 2> wanted = {true, true}) {
  std::int64_t const B = form.batch();
  Measurements<T, Space> out;
  out.rows = scratch<Totals<Space>>(space, "row_totals", true, B, 5);
  out.columns = scratch<Totals<Space>>(space, "column_totals", true, B, 5);
  out.row_lse =
      scratch<OTView2<T, Space>>(space, "row_lse", false, B, form.rows());
  out.column_lse =
      scratch<OTView2<T, Space>>(space, "column_lse", false, B, form.columns());
  // MeasureVisitor reads its own potential only; the view is non-const in
  // RowSide, which the updates write through.
  OTView2<T, Space> const f_rw(const_cast<T*>(f.data()), f.extent(0),
                               f.extent(1));
  OTView2<T, Space> const g_rw(const_cast<T*>(g.data()), g.extent(0),
                               g.extent(1));
  MeasureVisitor<T, Space> rows;
  rows.own = {f_rw, w.log_a.view, options.rho_a};
  rows.lse = out.row_lse.view;
  rows.totals = out.rows.view;
  MeasureVisitor<T, Space> columns;
  columns.own = {g_rw, w.log_b.view, options.rho_b};
  columns.lse = out.column_lse.view;
  columns.totals = out.columns.view;
  ColumnSide<T, Space> const g_side{g, w.log_b.view}, f_side{f, w.log_a.view};
  if (specialised_for<Space, T>(form, options)) {
    using Specialised = SpecialisedPasses<Space, T, Form>;
    if (wanted[0]) Specialised::measure(space, form, true, g_side, eps, rows);
    if (wanted[1])
      Specialised::measure(space, form, false, f_side, eps, columns);
  } else {
    if (wanted[0]) tiled_pass(space, "measure_rows", form, g_side, eps, rows);
    if (wanted[1])
      tiled_pass(space, "measure_columns", form.transposed(), f_side, eps,
                 columns);
  }
  return out;
}

// Shapes, data checks and weights shared by every entry point.
template <class Space, class T, class PublicForm>
Sizes<T, Space> prepare(const Space& space, const PublicForm& form,
                        const Marginals<T, Space>& marginals,
                        const SinkhornOptions& options,
                        DataChecks<Space>& checks) {
  check_sinkhorn_options(options);
  auto const sizes = check_form(checks, form);
  check_weights<Space, T>(checks, marginals.a, "a", sizes.batch, sizes.rows);
  check_weights<Space, T>(checks, marginals.b, "b", sizes.batch, sizes.columns);
  return sizes;
}

template <class Space, class T>
void check_potentials(DataChecks<Space>& checks, const char* f_name,
                      same_t<OTView2<const T, Space>> f, const char* g_name,
                      same_t<OTView2<const T, Space>> g, std::size_t B,
                      std::size_t N, std::size_t K) {
  check_extent(f, f_name, {B, N}, "(one potential per source point)");
  check_extent(g, g_name, {B, K}, "(one potential per target point)");
  check_finite(checks, f, f_name);
  check_finite(checks, g, g_name);
}

// The dual objective of measured potentials (SinkhornResult::value).
template <class Space, class T>
void dual_value(const Space& space, const Measurements<T, Space>& m,
                const Weights<T, Space>& w, OTView1<const T, Space> epsilon,
                const OTView1<T, Space>& value) {
  auto const rows = m.rows.view, cols = m.columns.view;
  auto const mass_a = w.mass_a.view, mass_b = w.mass_b.view;
  Kokkos::parallel_for(
      "softwave::sinkhorn::dual_value",
      compat::light_weight(
          Kokkos::RangePolicy<Space>(space, 0, value.extent(0))),
      KOKKOS_LAMBDA(std::int64_t b) {
        value(b) = T(rows(b, 3) + cols(b, 3) -
                     double(epsilon(b)) * (rows(b, 0) - mass_a(b) * mass_b(b)));
      });
}

// Where one side's gradient terms go: positions (or the low-rank factor of
// that side), the linear term, and the weights; each optional. Terms are
// scaled by factor·grad_output[b] and written, or added when `accumulate`.
template <class T, class Space>
struct SideTargets {
  OTView3<T, Space> positions;  // grad_x / grad_y, or grad_p / grad_q
  OTView2<T, Space> linear;     // grad_u / grad_v
  OTView2<T, Space> weights;    // grad_a / grad_b
};

template <class T, class Space>
struct GradientScale {
  OTView1<const T, Space> grad_output;
  T factor = 1;
  bool accumulate = false;
  KOKKOS_INLINE_FUNCTION T operator()(std::int64_t b) const {
    return grad_output.extent(0) ? factor * grad_output(b) : factor;
  }
  KOKKOS_INLINE_FUNCTION void store(T& out, T term) const {
    out = accumulate ? out + term : term;
  }
};

// One row side's plan mass (π1)_i = exp(log a_i + f_i/ε + LSE_i).
template <class T, class Space>
struct RowMass {
  OTView2<const T, Space> log_weight, potential, lse;
  EpsilonAt<T, Space> epsilon;
  KOKKOS_INLINE_FUNCTION T operator()(std::int64_t b, std::int64_t i) const {
    return compat::exp(log_weight(b, i) + potential(b, i) / epsilon(b) +
                       lse(b, i));
  }
};

// out(b, i, k) ← scale·(π1)_i·(alpha·own(b, i, k) − Σ_j w_ij Z_jk).
template <class T, class Space>
struct RowWeightedEpilogue {
  OTView3<T, Space> out;
  OTView3<const T, Space> own;  // read where alpha != 0
  T alpha = 0;
  RowMass<T, Space> mass;
  GradientScale<T, Space> scale;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b, std::int64_t i, int k,
                                         T sum) const {
    T const own_k = alpha != T(0) ? alpha * own(b, i, k) : T(0);
    scale.store(out(b, i, k), scale(b) * mass(b, i) * (own_k - sum));
  }
};

// Whether a side's weighted sums run on the backend's kernels (the
// solve's kernel choice is specialised and the backend takes the form):
// they find the rows' log-sum-exps in the same pass, so that side needs no
// measurement.
template <class Space, class T, class Form>
bool specialised_weighted_rows(const Form& form, bool specialised_solve) {
  return specialised_solve &&
         SpecialisedPasses<Space, T, Form>::takes_weighted_rows(form);
}

// Σ_j π_ij Z_j for every row of `own`, through `epilogue`, the rows' LSEs
// in `lse` (found and written with `specialised`, else given). On the
// backend's kernels, then the epilogue; or on the portable passes: 8
// columns of Z a pass where Z has at most 16, else 64. A pass costs a cost
// evaluation (d products) and `chunk` products a pair, so at d = 64 one
// pass of 64 columns replaces eight of 8 (the gradient at 1 × 4096 × 4096,
// d = 64, took 36.7 ms on an H200 that way, four times the 50-iteration
// solve).
template <class Space, class T, class Form>
void weighted_rows(const Space& space, const Form& form,
                   const RowSide<T, Space>& own,
                   const ColumnSide<T, Space>& columns,
                   const EpsilonAt<T, Space>& eps, const OTView2<T, Space>& lse,
                   same_t<OTView3<const T, Space>> z,
                   const RowWeightedEpilogue<T, Space>& epilogue,
                   bool specialised) {
  int const m = z.extent(2);
  if (specialised) {
    std::int64_t const B = form.batch(), N = form.rows();
    auto const sums =
        scratch<OTView3<T, Space>>(space, "weighted_sums", false, B, N, m);
    SpecialisedPasses<Space, T, Form>::weighted_rows(space, form, own, columns,
                                                     eps, lse, z, sums.view);
    auto const sum = sums.view;
    Kokkos::parallel_for(
        "softwave::sinkhorn::weighted_epilogue",
        compat::light_weight(Kokkos::RangePolicy<Space>(space, 0, B * N * m)),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const b = q / (N * m), i = q / m % N;
          int const k = int(q % m);
          epilogue(b, i, k, sum(b, i, k));
        });
    return;
  }
  auto const passes = [&](auto chunk) {
    using Visitor = WeightedVisitor<T, Space, RowWeightedEpilogue<T, Space>,
                                    decltype(chunk)::value>;
    for (int k0 = 0; k0 < m; k0 += Visitor::chunk) {
      Visitor visitor;
      visitor.lse = lse;
      visitor.z = z;
      visitor.k0 = k0;
      visitor.width = std::min(Visitor::chunk, m - k0);
      visitor.epilogue = epilogue;
      tiled_pass(space, "weighted_rows", form, columns, eps, visitor);
    }
  };
  if (m <= 16)
    passes(std::integral_constant<int, 8>());
  else
    passes(std::integral_constant<int, 64>());
}

// grad of the value w.r.t. one side's weights:
// φ(f_i) − ε((π1)_i / a_i − mass of the other side).
template <class Space, class T>
void weight_gradient(const Space& space, const RowSide<T, Space>& side,
                     same_t<OTView2<const T, Space>> lse,
                     Kokkos::View<const double*, Memory<Space>> other_mass,
                     const EpsilonAt<T, Space>& eps,
                     const GradientScale<T, Space>& scale,
                     const OTView2<T, Space>& out) {
  std::int64_t const n = out.extent(1);
  Kokkos::parallel_for(
      "softwave::sinkhorn::weight_gradient",
      compat::light_weight(
          Kokkos::RangePolicy<Space>(space, 0, out.extent(0) * n)),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const b = q / n, i = q % n;
        double const e = eps(b), f = side.potential(b, i);
        double const ratio = compat::exp(f / e + double(lse(b, i)));
        scale.store(out(b, i),
                    T(scale(b) * (side.phi(f) - e * (ratio - other_mass(b)))));
      });
}

// The plan π (B, N, K), scaled.
template <class Space, class T, class Form>
void dense_plan(const Space& space, const Form& form,
                const Weights<T, Space>& w, same_t<OTView2<const T, Space>> f,
                same_t<OTView2<const T, Space>> g,
                const EpsilonAt<T, Space>& eps,
                const GradientScale<T, Space>& scale,
                const OTView3<T, Space>& out) {
  std::int64_t const N = out.extent(1), K = out.extent(2);
  auto const log_a = w.log_a.view, log_b = w.log_b.view;
  Kokkos::parallel_for(
      "softwave::sinkhorn::plan",
      compat::light_weight(
          Kokkos::RangePolicy<Space>(space, 0, out.extent(0) * N * K)),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const b = q / (N * K), i = (q / K) % N, j = q % K;
        T const inv = T(1) / eps(b);
        T const c = form.pair_cost(b, i, j);
        scale.store(out(b, i, j),
                    T(scale(b)) * compat::exp(log_a(b, i) + log_b(b, j) +
                                              (f(b, i) + g(b, j) - c) * inv));
      });
}

template <class T, class Space>
OTView3<const T, Space> own_positions(const PointsForm<T, Space>& form) {
  return form.x;
}
template <class T, class Space>
OTView3<const T, Space> own_positions(const LowRankForm<T, Space>& form) {
  return form.p;
}

// One side's gradient terms (rows of `form`, whose columns are the other
// side), given the measurements of both sides' potentials.
template <class Space, class T, class Form>
void side_gradients(const Space& space, const Form& form,
                    const RowSide<T, Space>& own,
                    const ColumnSide<T, Space>& other,
                    const OTView2<T, Space>& lse,
                    Kokkos::View<const double*, Memory<Space>> other_mass,
                    const EpsilonAt<T, Space>& eps,
                    const GradientScale<T, Space>& scale,
                    const SideTargets<T, Space>& out, bool specialised) {
  RowMass<T, Space> const mass{own.log_weight, own.potential, lse, eps};
  // The positions first: on the backend's kernels they find the LSEs the
  // rest read.
  if constexpr (!std::is_same_v<Form, MatrixForm<T, Space>>) {
    if (out.positions.extent(0)) {
      // Points: c'·(π1)_i·(x_i − Σ_j w_ij y_j), c' = 2c; low rank:
      // −(π1)_i Σ_j w_ij Q_j (alpha = 0).
      RowWeightedEpilogue<T, Space> epilogue;
      epilogue.out = out.positions;
      epilogue.mass = mass;
      epilogue.scale = scale;
      auto const form_t = form.transposed();
      if constexpr (std::is_same_v<Form, PointsForm<T, Space>>) {
        epilogue.own = form.x;
        epilogue.alpha = 1;
        epilogue.scale.factor *= 2 * form.scale;
      }
      weighted_rows(space, form, own, other, eps, lse, own_positions(form_t),
                    epilogue, specialised);
    }
  }
  if (out.weights.extent(0))
    weight_gradient(space, own, lse, other_mass, eps, scale, out.weights);
  if constexpr (std::is_same_v<Form, LowRankForm<T, Space>>) {
    if (out.linear.extent(0)) {
      auto const target = out.linear;
      std::int64_t const n = target.extent(1);
      Kokkos::parallel_for(
          "softwave::sinkhorn::linear_gradient",
          compat::light_weight(
              Kokkos::RangePolicy<Space>(space, 0, target.extent(0) * n)),
          KOKKOS_LAMBDA(std::int64_t q) {
            std::int64_t const b = q / n, i = q % n;
            scale.store(target(b, i), scale(b) * mass(b, i));
          });
    }
  }
}

}  // namespace

namespace {

// f ← ½ (f + g) where g = T(f) is the update of a symmetric problem (the
// same points and weights on both sides), adding Σ_i a_i |exp((f_i −
// g_i)/ε) − 1| to residual(b) when `measure`.
template <class Space, class T>
void symmetric_average(const Space& space, const OTView2<T, Space>& f,
                       same_t<OTView2<const T, Space>> g,
                       same_t<OTView2<const T, Space>> log_a,
                       const EpsilonAt<T, Space>& eps,
                       const Totals<Space>& residual, bool measure) {
  using Policy = Kokkos::TeamPolicy<Space>;
  std::int64_t const n = f.extent(1);
  Kokkos::parallel_for(
      "softwave::sinkhorn::symmetric_average",
      compat::light_weight(Policy(space, f.extent(0), Kokkos::AUTO)),
      KOKKOS_LAMBDA(const typename Policy::member_type& team) {
        std::int64_t const b = team.league_rank();
        double const e = eps(b);
        double total = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, n),
            [&](std::int64_t i, double& sum) {
              double const fi = f(b, i), gi = g(b, i);
              if (measure && log_a(b, i) > -INFINITY)
                sum += compat::exp(double(log_a(b, i))) *
                       compat::fabs(compat::expm1((fi - gi) / e));
              f(b, i) = T(0.5 * (fi + gi));
            },
            total);
        Kokkos::single(Kokkos::PerTeam(team), [&]() {
          if (measure) residual(b, 0) += total;
        });
      });
}

}  // namespace

// The solver. symmetric: the two sides are the same points and weights
// (OT(a, a) of the divergence), solved by the averaged update
// f ← ½ (f + T(f)), which converges where alternating updates crawl, and
// returned with g = f.
template <class Space, class T, class PublicForm>
void solve(const Space& space, const PublicForm& public_form,
           const Marginals<T, Space>& marginals,
           const SinkhornResult<T, Space>& result,
           const SinkhornOptions& options, bool symmetric) {
  DataChecks<Space> checks(space, options.check_values, "sinkhorn");
  auto const [B, N, K] =
      prepare(space, public_form, marginals, options, checks);
  check_extent(result.f, "f", {B, N}, "(one potential per source point)");
  check_extent(result.g, "g", {B, K}, "(one potential per target point)");
  if (result.value.size()) check_extent(result.value, "value", {B}, "");
  if (result.transport_cost.size())
    check_extent(result.transport_cost, "transport_cost", {B}, "");
  if (result.marginal_error.size())
    check_extent(result.marginal_error, "marginal_error", {B, 2},
                 "(row and column errors)");
  if (result.iterations.size())
    check_extent(result.iterations, "iterations", {B}, "");
  if (result.converged.size())
    check_extent(result.converged, "converged", {B}, "");
  if (options.warm_start) {
    check_finite(checks, result.f, "f (warm start)");
    check_finite(checks, result.g, "g (warm start)");
  }
  if (B > 0 && (N == 0 || K == 0))
    throw_invalid_argument(N == 0 ? "the source" : "the target",
                           " has no points");
  checks.finish();
  if (B == 0) return;

  auto const form = internal_form(public_form);
  using Form = std::decay_t<decltype(form)>;
  using Specialised = SpecialisedPasses<Space, T, Form>;
  bool const use_specialised = specialised_for<Space, T>(form, options);
  auto const w = weights(space, marginals, B, N, K);
  auto const eps = epsilons<T, Space>(space, form, options);
  std::optional<Specialised> specialised;
  if (use_specialised) specialised.emplace(space, form, options);
  auto const transposed = form.transposed();
  // One half-iteration: the rows of `form` (rows_side) or its columns.
  auto update = [&](bool rows_side, const ColumnSide<T, Space>& other,
                    const EpsilonAt<T, Space>& at,
                    const UpdateVisitor<T, Space>& visitor) {
    if (specialised)
      specialised->update(space, rows_side, other, at, visitor);
    else if (rows_side)
      tiled_pass(space, "update_rows", form, other, at, visitor);
    else
      tiled_pass(space, "update_columns", transposed, other, at, visitor);
  };
  if (!options.warm_start) {
    Kokkos::deep_copy(space, result.f, T(0));
    Kokkos::deep_copy(space, result.g, T(0));
  }
  auto mask_memory = scratch<Mask<Space>>(space, "active", false, B);
  auto const mask = mask_memory.view;
  Kokkos::deep_copy(space, mask, 1);
  auto residual = scratch<Totals<Space>>(space, "residual", true, B, 1);
  auto const host_residual =
      compat::host_mirror("softwave::sinkhorn::residual_host", residual.view);
  std::vector<int> iterations(B, options.max_iterations);
  std::vector<int> host_mask(B, 1);
  auto const host_mask_view =
      Kokkos::View<int*, Kokkos::HostSpace,
                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>(host_mask.data(),
                                                            B);

  UpdateVisitor<T, Space> rows;
  rows.own = {result.f, w.log_a.view, options.rho_a};
  rows.mask = mask;
  rows.totals = residual.view;
  UpdateVisitor<T, Space> columns;
  columns.own = {result.g, w.log_b.view, options.rho_b};
  columns.mask = mask;
  columns.totals = residual.view;
  bool const checking = options.tolerance > 0;
  // A check at the last iteration stops nothing; it only says whether that
  // iteration met the tolerance, for `iterations`. A caller after the
  // potentials alone (sampled GW's solves, whose 10 iterations end at their
  // first check) has no read-back, and no wait, at all.
  bool const count_last = result.iterations.extent(0) > 0;
  std::size_t remaining = B;
  for (int it = 1; it <= options.max_iterations && remaining > 0; ++it) {
    auto const at = eps.at(it, options.epsilon_scaling);
    bool const last = it == options.max_iterations;
    rows.measure = checking && it > eps.annealing && (!last || count_last) &&
                   ((it - eps.annealing) % options.check_every == 0 || last);
    if (rows.measure) Kokkos::deep_copy(space, residual.view, 0.0);
    if (symmetric) {
      update(false, ColumnSide<T, Space>{result.f, w.log_a.view}, at, columns);
      symmetric_average(space, result.f, result.g, w.log_a.view, at,
                        residual.view, rows.measure);
    } else {
      update(true, ColumnSide<T, Space>{result.g, w.log_b.view}, at, rows);
      update(false, ColumnSide<T, Space>{result.f, w.log_a.view}, at, columns);
    }
    if (!rows.measure) continue;
    Kokkos::deep_copy(space, host_residual, residual.view);
    space.fence();
    bool changed = false;
    for (std::size_t b = 0; b < B; ++b)
      if (host_mask[b] && host_residual(b, 0) <= options.tolerance) {
        // The residual measured the potentials before this iteration,
        // which updated them once more.
        host_mask[b] = 0;
        iterations[b] = it;
        --remaining;
        changed = true;
      }
    if (changed && remaining > 0)
      Kokkos::deep_copy(space, mask, host_mask_view);
  }

  if (symmetric) Kokkos::deep_copy(space, result.g, result.f);
  // The exact measurement (two passes over every pair) only for the
  // outputs that need it: a caller after the potentials alone (sampled GW's
  // solves) skips it.
  auto const transport = result.transport_cost;
  auto const marginal = result.marginal_error;
  auto const converged = result.converged;
  if (result.value.extent(0) || transport.extent(0) || marginal.extent(0) ||
      converged.extent(0)) {
    auto const final_eps = eps.at(eps.annealing + 1, options.epsilon_scaling);
    auto const m =
        measure(space, form, w, result.f, result.g, final_eps, options);
    if (result.value.extent(0))
      dual_value<Space, T>(space, m, w, eps.target.view, result.value);
    auto const rows_t = m.rows.view, cols_t = m.columns.view;
    double const tol = options.tolerance > 0 ? options.tolerance : 0;
    Kokkos::parallel_for(
        "softwave::sinkhorn::results",
        compat::light_weight(Kokkos::RangePolicy<Space>(space, 0, B)),
        KOKKOS_LAMBDA(std::int64_t b) {
          if (transport.extent(0)) transport(b) = T(rows_t(b, 4));
          if (marginal.extent(0)) {
            marginal(b, 0) = T(rows_t(b, 1));
            marginal(b, 1) = T(cols_t(b, 1));
          }
          if (converged.extent(0))
            converged(b) = rows_t(b, 2) <= tol && cols_t(b, 2) <= tol;
        });
  }
  if (result.iterations.extent(0) && !checking) {
    // Every problem ran max_iterations. Filled on the device, so that a
    // solve with a fixed count never waits for the host: it can be captured
    // in a CUDA graph (nothing above reads the device back without checks).
    Kokkos::deep_copy(space, result.iterations, options.max_iterations);
  } else if (result.iterations.extent(0)) {
    auto const host = Kokkos::View<int*, Kokkos::HostSpace,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>(
        iterations.data(), B);
    Kokkos::deep_copy(space, result.iterations, host);
    // The host vector dies with this call: the copy must be done.
    space.fence();
  }
}

namespace {

template <class Space, class T>
void check_gradient_targets(const SinkhornGradients<T, Space>& grads,
                            const PointClouds<T, Space>& form, std::size_t B,
                            std::size_t N, std::size_t K) {
  std::size_t const d = form.x.extent(2);
  if (grads.grad_x.size())
    check_extent(grads.grad_x, "grad_x", {B, N, d}, "(x's shape)");
  if (grads.grad_y.size())
    check_extent(grads.grad_y, "grad_y", {B, K, d}, "(y's shape)");
  if (grads.grad_cost.size() || grads.grad_u.size() || grads.grad_v.size() ||
      grads.grad_p.size() || grads.grad_q.size())
    throw_invalid_argument(
        "gradients: point clouds have grad_x, grad_y, grad_a and grad_b only");
}
template <class Space, class T>
void check_gradient_targets(const SinkhornGradients<T, Space>& grads,
                            const CostMatrix<T, Space>&, std::size_t B,
                            std::size_t N, std::size_t K) {
  if (grads.grad_cost.size())
    check_extent(grads.grad_cost, "grad_cost", {B, N, K}, "(cost's shape)");
  if (grads.grad_x.size() || grads.grad_y.size() || grads.grad_u.size() ||
      grads.grad_v.size() || grads.grad_p.size() || grads.grad_q.size())
    throw_invalid_argument(
        "gradients: a cost matrix has grad_cost, grad_a and grad_b only");
}
template <class Space, class T>
void check_gradient_targets(const SinkhornGradients<T, Space>& grads,
                            const LowRankCost<T, Space>& form, std::size_t B,
                            std::size_t N, std::size_t K) {
  std::size_t const r = form.p.extent(2);
  if (grads.grad_p.size())
    check_extent(grads.grad_p, "grad_p", {B, N, r}, "(p's shape)");
  if (grads.grad_q.size())
    check_extent(grads.grad_q, "grad_q", {B, K, r}, "(q's shape)");
  if (grads.grad_u.size())
    check_extent(grads.grad_u, "grad_u", {B, N}, "(one per row)");
  if (grads.grad_v.size())
    check_extent(grads.grad_v, "grad_v", {B, K}, "(one per column)");
  if (grads.grad_x.size() || grads.grad_y.size() || grads.grad_cost.size())
    throw_invalid_argument(
        "gradients: a low-rank cost has grad_u, grad_v, grad_p, grad_q, "
        "grad_a and grad_b only");
}

// The weights' gradients and grad_output, shared by the gradient entry
// points.
template <class Space, class T>
void check_weight_gradients(DataChecks<Space>& checks,
                            const SinkhornGradients<T, Space>& grads,
                            std::size_t B, std::size_t N, std::size_t K) {
  if (grads.grad_a.size())
    check_extent(grads.grad_a, "grad_a", {B, N}, "(one per source point)");
  if (grads.grad_b.size())
    check_extent(grads.grad_b, "grad_b", {B, K}, "(one per target point)");
  if (grads.grad_output.size())
    check_extent(grads.grad_output, "grad_output", {B}, "(one per problem)");
  check_finite(checks, grads.grad_output, "grad_output");
}

// The positions' gradient of one side (rows: the source) of a form:
// grad_x / grad_y for points, grad_p / grad_q for a low-rank cost, none
// for a cost matrix.
template <class T, class Space>
OTView3<T, Space> positions(const SinkhornGradients<T, Space>& g,
                            const PointsForm<T, Space>&, bool rows) {
  return rows ? g.grad_x : g.grad_y;
}
template <class T, class Space>
OTView3<T, Space> positions(const SinkhornGradients<T, Space>& g,
                            const LowRankForm<T, Space>&, bool rows) {
  return rows ? g.grad_p : g.grad_q;
}
template <class T, class Space>
OTView3<T, Space> positions(const SinkhornGradients<T, Space>&,
                            const MatrixForm<T, Space>&, bool) {
  return {};
}

// Both sides' gradient terms of potentials f, g into `rows` and `columns`
// (and the plan into grad_cost for a cost matrix).
template <class Space, class T, class Form>
void gradient_terms(
    const Space& space, const Form& form, const Weights<T, Space>& w,
    same_t<OTView2<const T, Space>> f, same_t<OTView2<const T, Space>> g,
    const EpsilonAt<T, Space>& eps, const SinkhornOptions& options,
    const GradientScale<T, Space>& scale, const SideTargets<T, Space>& rows,
    const SideTargets<T, Space>& columns, const OTView3<T, Space>& grad_cost) {
  // Each side's terms read its own log-sum-exps only: measured, or found
  // by the weighted sums of its positions' terms.
  bool const specialised = specialised_for<Space, T>(form, options);
  bool const row_sums = rows.positions.size() &&
                        specialised_weighted_rows<Space, T>(form, specialised);
  bool const column_sums =
      columns.positions.size() &&
      specialised_weighted_rows<Space, T>(form.transposed(), specialised);
  auto const measured = [](const SideTargets<T, Space>& side, bool found) {
    return !found &&
           (side.positions.size() || side.linear.size() || side.weights.size());
  };
  auto const m =
      measure(space, form, w, f, g, eps, options,
              {measured(rows, row_sums), measured(columns, column_sums)});
  OTView2<T, Space> const f_rw(const_cast<T*>(f.data()), f.extent(0),
                               f.extent(1));
  OTView2<T, Space> const g_rw(const_cast<T*>(g.data()), g.extent(0),
                               g.extent(1));
  side_gradients(space, form,
                 RowSide<T, Space>{f_rw, w.log_a.view, options.rho_a},
                 ColumnSide<T, Space>{g, w.log_b.view}, m.row_lse.view,
                 w.mass_b.view, eps, scale, rows, row_sums);
  side_gradients(space, form.transposed(),
                 RowSide<T, Space>{g_rw, w.log_b.view, options.rho_b},
                 ColumnSide<T, Space>{f, w.log_a.view}, m.column_lse.view,
                 w.mass_a.view, eps, scale, columns, column_sums);
  if constexpr (std::is_same_v<Form, MatrixForm<T, Space>>)
    if (grad_cost.extent(0))
      dense_plan(space, form, w, f, g, eps, scale, grad_cost);
}

}  // namespace

template <class Space, class T, class PublicForm>
void sinkhorn(const Space& space, const PublicForm& form,
              const Marginals<T, Space>& marginals,
              const SinkhornResult<T, Space>& result,
              const SinkhornOptions& options) {
  solve(space, form, marginals, result, options, /*symmetric=*/false);
}

template <class Space, class T, class PublicForm>
void sinkhorn_gradients(const Space& space, const PublicForm& public_form,
                        const Marginals<T, Space>& marginals,
                        OTView2<const T, Space> f, OTView2<const T, Space> g,
                        const SinkhornGradients<T, Space>& grads,
                        const SinkhornOptions& options) {
  DataChecks<Space> checks(space, options.check_values, "sinkhorn");
  auto const [B, N, K] =
      prepare(space, public_form, marginals, options, checks);
  check_potentials<Space, T>(checks, "f", f, "g", g, B, N, K);
  check_gradient_targets(grads, public_form, B, N, K);
  check_weight_gradients(checks, grads, B, N, K);
  checks.finish();
  if (B == 0 || N == 0 || K == 0) return;
  auto const form = internal_form(public_form);
  auto const w = weights(space, marginals, B, N, K);
  auto const eps = epsilons<T, Space>(space, form, options);
  auto const at = eps.at(eps.annealing + 1, options.epsilon_scaling);
  GradientScale<T, Space> scale{grads.grad_output, T(1), false};
  gradient_terms(space, form, w, f, g, at, options, scale,
                 {positions(grads, form, true), grads.grad_u, grads.grad_a},
                 {positions(grads, form, false), grads.grad_v, grads.grad_b},
                 grads.grad_cost);
}

template <class Space, class T, class PublicForm>
void sinkhorn_plan_queries(const Space& space, const PublicForm& public_form,
                           const Marginals<T, Space>& marginals,
                           OTView2<const T, Space> f, OTView2<const T, Space> g,
                           const PlanQueries<T, Space>& queries,
                           const SinkhornOptions& options) {
  DataChecks<Space> checks(space, options.check_values, "sinkhorn");
  auto const [B, N, K] =
      prepare(space, public_form, marginals, options, checks);
  check_potentials<Space, T>(checks, "f", f, "g", g, B, N, K);
  if (queries.v.size() || queries.plan_v.size()) {
    std::size_t const m = queries.v.extent(2);
    check_extent(queries.v, "v", {B, K, m}, "(one row per target point)");
    check_extent(queries.plan_v, "plan_v", {B, N, m},
                 "(one row per source point)");
    check_finite(checks, queries.v, "v");
  }
  if (queries.u.size() || queries.plan_t_u.size()) {
    std::size_t const m = queries.u.extent(2);
    check_extent(queries.u, "u", {B, N, m}, "(one row per source point)");
    check_extent(queries.plan_t_u, "plan_t_u", {B, K, m},
                 "(one row per target point)");
    check_finite(checks, queries.u, "u");
  }
  if (queries.row_argmax.size())
    check_extent(queries.row_argmax, "row_argmax", {B, N},
                 "(one per source point)");
  if (queries.row_samples.size() && (queries.row_samples.extent(0) != B ||
                                     queries.row_samples.extent(1) != N))
    check_extent(queries.row_samples, "row_samples",
                 {B, N, queries.row_samples.extent(2)},
                 "(draws per source point)");
  if (queries.plan.size()) check_extent(queries.plan, "plan", {B, N, K}, "");
  checks.finish();
  if (B == 0 || N == 0 || K == 0) return;
  auto const form = internal_form(public_form);
  auto const w = weights(space, marginals, B, N, K);
  auto const eps = epsilons<T, Space>(space, form, options);
  auto const at = eps.at(eps.annealing + 1, options.epsilon_scaling);
  ColumnSide<T, Space> const g_side{g, w.log_b.view}, f_side{f, w.log_a.view};
  GradientScale<T, Space> const unit{{}, T(-1), false};
  if (queries.plan_v.size() || queries.plan_t_u.size()) {
    // A side whose weighted sums find its LSEs is not measured.
    bool const specialised = specialised_for<Space, T>(form, options);
    bool const row_sums =
        specialised_weighted_rows<Space, T>(form, specialised);
    bool const column_sums =
        specialised_weighted_rows<Space, T>(form.transposed(), specialised);
    auto const m = measure(space, form, w, f, g, at, options,
                           {queries.plan_v.size() > 0 && !row_sums,
                            queries.plan_t_u.size() > 0 && !column_sums});
    OTView2<T, Space> const f_rw(const_cast<T*>(f.data()), B, N);
    OTView2<T, Space> const g_rw(const_cast<T*>(g.data()), B, K);
    if (queries.plan_v.size()) {
      RowWeightedEpilogue<T, Space> epilogue;
      epilogue.out = queries.plan_v;
      epilogue.mass = RowMass<T, Space>{w.log_a.view, f, m.row_lse.view, at};
      epilogue.scale = unit;
      weighted_rows(space, form, {f_rw, w.log_a.view, options.rho_a}, g_side,
                    at, m.row_lse.view, queries.v, epilogue, row_sums);
    }
    if (queries.plan_t_u.size()) {
      RowWeightedEpilogue<T, Space> epilogue;
      epilogue.out = queries.plan_t_u;
      epilogue.mass = RowMass<T, Space>{w.log_b.view, g, m.column_lse.view, at};
      epilogue.scale = unit;
      weighted_rows(space, form.transposed(),
                    {g_rw, w.log_b.view, options.rho_b}, f_side, at,
                    m.column_lse.view, queries.u, epilogue, column_sums);
    }
  }
  ArgmaxVisitor<T, Space> argmax;
  if (queries.row_argmax.size()) {
    argmax.out = OTView3<int, Space>(queries.row_argmax.data(), B, N, 1);
    tiled_pass(space, "row_argmax", form, g_side, at, argmax);
  }
  argmax.gumbel = true;
  argmax.seed = queries.seed;
  argmax.out = queries.row_samples;
  for (std::size_t s = 0; s < queries.row_samples.extent(2); ++s) {
    argmax.slot = int(s);
    tiled_pass(space, "row_samples", form, g_side, at, argmax);
  }
  if (queries.plan.size())
    dense_plan(space, form, w, f, g, at, GradientScale<T, Space>{},
               queries.plan);
}

template <class Space, class T>
void sinkhorn_divergence(const Space& space, const PointClouds<T, Space>& form,
                         const Marginals<T, Space>& marginals,
                         OTView1<T, Space> values,
                         const SinkhornGradients<T, Space>* gradients,
                         const SinkhornOptions& options,
                         OTView1<int, Space> converged) {
  if (options.rho_a != options.rho_b)
    throw_invalid_argument("the Sinkhorn divergence needs rho_a == rho_b (got ",
                           options.rho_a, " and ", options.rho_b, ")");
  DataChecks<Space> checks(space, options.check_values, "sinkhorn");
  auto const [B, N, K] = prepare(space, form, marginals, options, checks);
  check_extent(values, "values", {B}, "(one per problem)");
  if (converged.size()) check_extent(converged, "converged", {B}, "");
  if (gradients) {
    check_gradient_targets(*gradients, form, B, N, K);
    check_weight_gradients(checks, *gradients, B, N, K);
  }
  if (B > 0 && (N == 0 || K == 0))
    throw_invalid_argument(N == 0 ? "the source" : "the target",
                           " has no points");
  checks.finish();
  if (B == 0) return;

  // The three problems: (x, y), (x, x) and (y, y), each solved as usual;
  // their potentials are kept for the gradients.
  SinkhornOptions solve_options = options;
  solve_options.check_values = false;  // checked above
  struct Part {
    PointClouds<T, Space> clouds;
    Marginals<T, Space> marginals;
    CallArray<OTView2<T, Space>> f, g;
    CallArray<OTView1<T, Space>> value;
    CallArray<OTView1<int, Space>> converged;
  };
  Part parts[3] = {
      {form, marginals, {}, {}, {}, {}},
      {{form.x, form.x, form.cost}, {marginals.a, marginals.a}, {}, {}, {}, {}},
      {{form.y, form.y, form.cost},
       {marginals.b, marginals.b},
       {},
       {},
       {},
       {}}};
  for (auto& part : parts) {
    std::size_t const n = part.clouds.x.extent(1), k = part.clouds.y.extent(1);
    part.f = scratch<OTView2<T, Space>>(space, "divergence_f", false, B, n);
    part.g = scratch<OTView2<T, Space>>(space, "divergence_g", false, B, k);
    part.value =
        scratch<OTView1<T, Space>>(space, "divergence_value", false, B);
    part.converged =
        scratch<OTView1<int, Space>>(space, "divergence_converged", false, B);
    SinkhornResult<T, Space> result;
    result.f = part.f.view;
    result.g = part.g.view;
    result.value = part.value.view;
    result.converged = part.converged.view;
    solve(space, part.clouds, part.marginals, result, solve_options,
          /*symmetric=*/&part != &parts[0]);
  }
  auto const w = weights(space, marginals, B, N, K);
  auto const mass_a = w.mass_a.view, mass_b = w.mass_b.view;
  auto const eps = epsilons<T, Space>(space, internal_form(form), options);
  auto const target = eps.target.view;
  auto const xy = parts[0].value.view, xx = parts[1].value.view,
             yy = parts[2].value.view;
  auto const c0 = parts[0].converged.view, c1 = parts[1].converged.view,
             c2 = parts[2].converged.view;
  Kokkos::parallel_for(
      "softwave::sinkhorn::divergence",
      compat::light_weight(Kokkos::RangePolicy<Space>(space, 0, B)),
      KOKKOS_LAMBDA(std::int64_t b) {
        double const gap = mass_a(b) - mass_b(b);
        values(b) = T(double(xy(b)) - 0.5 * (double(xx(b)) + double(yy(b))) +
                      0.5 * double(target(b)) * gap * gap);
        if (converged.extent(0)) converged(b) = c0(b) && c1(b) && c2(b);
      });
  if (!gradients) return;

  auto const at = eps.at(eps.annealing + 1, options.epsilon_scaling);
  auto const& gr = *gradients;
  GradientScale<T, Space> scale{gr.grad_output, T(1), false};
  gradient_terms(space, internal_form(parts[0].clouds), w, parts[0].f.view,
                 parts[0].g.view, at, options, scale,
                 {gr.grad_x, {}, gr.grad_a}, {gr.grad_y, {}, gr.grad_b}, {});
  // −½ OT(a, a): x is both sides, so both sides' terms add to grad_x.
  scale.factor = T(-0.5);
  scale.accumulate = true;
  for (int p = 1; p < 3; ++p) {
    auto const& part = parts[p];
    auto const wp = weights(space, part.marginals, B, part.clouds.x.extent(1),
                            part.clouds.y.extent(1));
    auto const positions = p == 1 ? gr.grad_x : gr.grad_y;
    auto const weights_out = p == 1 ? gr.grad_a : gr.grad_b;
    gradient_terms(space, internal_form(part.clouds), wp, part.f.view,
                   part.g.view, at, options, scale,
                   {positions, {}, weights_out}, {positions, {}, weights_out},
                   {});
  }
  // ½ ε (Σa − Σb)²: ±ε (Σa − Σb) on every weight.
  auto const grad_output = gr.grad_output;
  for (int side = 0; side < 2; ++side) {
    auto const out = side == 0 ? gr.grad_a : gr.grad_b;
    if (!out.size()) continue;
    double const sign = side == 0 ? 1 : -1;
    std::int64_t const n = out.extent(1);
    Kokkos::parallel_for(
        "softwave::sinkhorn::divergence_mass_gradient",
        compat::light_weight(Kokkos::RangePolicy<Space>(space, 0, B * n)),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const b = q / n, i = q % n;
          double const go =
              grad_output.extent(0) ? double(grad_output(b)) : 1.0;
          out(b, i) +=
              T(go * sign * double(target(b)) * (mass_a(b) - mass_b(b)));
        });
  }
}

// The explicit instantiations of T's entry points for SPACE.
#define SOFTWAVE_INSTANTIATE_SINKHORN_FORM(SPACE, T, FORM)             \
  template void sinkhorn<SPACE, T, FORM<T, SPACE>>(                    \
      const SPACE&, const FORM<T, SPACE>&, const Marginals<T, SPACE>&, \
      const SinkhornResult<T, SPACE>&, const SinkhornOptions&);        \
  template void sinkhorn_gradients<SPACE, T, FORM<T, SPACE>>(          \
      const SPACE&, const FORM<T, SPACE>&, const Marginals<T, SPACE>&, \
      OTView2<const T, SPACE>, OTView2<const T, SPACE>,                \
      const SinkhornGradients<T, SPACE>&, const SinkhornOptions&);     \
  template void sinkhorn_plan_queries<SPACE, T, FORM<T, SPACE>>(       \
      const SPACE&, const FORM<T, SPACE>&, const Marginals<T, SPACE>&, \
      OTView2<const T, SPACE>, OTView2<const T, SPACE>,                \
      const PlanQueries<T, SPACE>&, const SinkhornOptions&);

#define SOFTWAVE_INSTANTIATE_SINKHORN(SPACE, T)                               \
  SOFTWAVE_INSTANTIATE_SINKHORN_FORM(SPACE, T, CostMatrix)                    \
  SOFTWAVE_INSTANTIATE_SINKHORN_FORM(SPACE, T, PointClouds)                   \
  SOFTWAVE_INSTANTIATE_SINKHORN_FORM(SPACE, T, LowRankCost)                   \
  template void sinkhorn_divergence<SPACE, T>(                                \
      const SPACE&, const PointClouds<T, SPACE>&, const Marginals<T, SPACE>&, \
      OTView1<T, SPACE>, const SinkhornGradients<T, SPACE>*,                  \
      const SinkhornOptions&, OTView1<int, SPACE>);

// T's entry points for the default execution space and, when that is a
// device, the default host space as well.
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
#define SOFTWAVE_INSTANTIATE_SINKHORN_SPACES(T)                   \
  SOFTWAVE_INSTANTIATE_SINKHORN(Kokkos::DefaultExecutionSpace, T) \
  SOFTWAVE_INSTANTIATE_SINKHORN(Kokkos::DefaultHostExecutionSpace, T)
#else
#define SOFTWAVE_INSTANTIATE_SINKHORN_SPACES(T) \
  SOFTWAVE_INSTANTIATE_SINKHORN(Kokkos::DefaultExecutionSpace, T)
#endif

}  // namespace softwave::impl
