// sinkhorn_plan_vjp: the derivative of dense entropic plans with respect to
// their costs (softwave/sinkhorn.hpp has the equations), from the plan
// alone. Vectors are float64 whatever the plan's type: the adjoint system
// of a sharp plan is badly conditioned, and its vectors are only O(N + K).

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <softwave/sinkhorn.hpp>
#include <string>
#include <vector>

#include "../common/data_checks.hpp"
#include "options_check.hpp"

namespace softwave::impl {
namespace {

template <class Space>
using Vectors =
    Kokkos::View<double**, Kokkos::LayoutRight, typename Space::memory_space>;

template <class Space>
Vectors<Space> vectors(const Space& space, const char* name, std::int64_t b,
                       std::int64_t n) {
  return Vectors<Space>(
      Kokkos::view_alloc(space, std::string("softwave::sinkhorn::vjp_") + name),
      b, n);
}

// out(b, i) = Σ_j π(b, i, j) · w(b, i, j) · v(b, j), with w = 1 where
// `weights` is empty and v = 1 where `v` is empty: one team per row.
template <class Space, class T>
void apply_rows(const Space& space, const OTView3<const T, Space>& plan,
                const OTView3<const T, Space>& weights, const Vectors<Space>& v,
                const Vectors<Space>& out) {
  using Policy = Kokkos::TeamPolicy<Space>;
  std::int64_t const n = plan.extent(1), k = plan.extent(2);
  bool const weighted = weights.size() > 0, scaled = v.size() > 0;
  Kokkos::parallel_for(
      "softwave::sinkhorn::vjp_rows",
      Policy(space, plan.extent(0) * n, Kokkos::AUTO),
      KOKKOS_LAMBDA(const typename Policy::member_type& team) {
        std::int64_t const b = team.league_rank() / n,
                           i = team.league_rank() % n;
        double sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, k),
            [&](std::int64_t j, double& s) {
              double e = double(plan(b, i, j));
              if (weighted) e *= double(weights(b, i, j));
              if (scaled) e *= v(b, j);
              s += e;
            },
            sum);
        Kokkos::single(Kokkos::PerTeam(team), [&] { out(b, i) = sum; });
      });
}

// out(b, j) = Σ_i π(b, i, j) · w(b, i, j) · u(b, i) (empty w, u: ones): one
// thread per column, so that neighbouring threads read neighbouring entries.
template <class Space, class T>
void apply_columns(const Space& space, const OTView3<const T, Space>& plan,
                   const OTView3<const T, Space>& weights,
                   const Vectors<Space>& u, const Vectors<Space>& out) {
  std::int64_t const n = plan.extent(1), k = plan.extent(2);
  bool const weighted = weights.size() > 0, scaled = u.size() > 0;
  Kokkos::parallel_for(
      "softwave::sinkhorn::vjp_columns",
      Kokkos::RangePolicy<Space>(space, 0, plan.extent(0) * k),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const b = q / k, j = q % k;
        double sum = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          double e = double(plan(b, i, j));
          if (weighted) e *= double(weights(b, i, j));
          if (scaled) e *= u(b, i);
          sum += e;
        }
        out(b, j) = sum;
      });
}

// out(b, slot) = Σ_j u(b, j) · v(b, j), one team per problem.
template <class Space>
void dot(const Space& space, const Vectors<Space>& u, const Vectors<Space>& v,
         const Vectors<Space>& out, int slot) {
  using Policy = Kokkos::TeamPolicy<Space>;
  std::int64_t const k = u.extent(1);
  Kokkos::parallel_for(
      "softwave::sinkhorn::vjp_dot", Policy(space, u.extent(0), Kokkos::AUTO),
      KOKKOS_LAMBDA(const typename Policy::member_type& team) {
        std::int64_t const b = team.league_rank();
        double sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, k),
            [&](std::int64_t j, double& s) { s += u(b, j) * v(b, j); }, sum);
        Kokkos::single(Kokkos::PerTeam(team), [&] { out(b, slot) = sum; });
      });
}

// The reciprocal of κ·m where the marginal m is positive, else 0 (an empty
// row or column takes no part).
template <class Space>
void inverse_scaled(const Space& space, const Vectors<Space>& marginal,
                    double kappa, const Vectors<Space>& out) {
  std::int64_t const n = marginal.extent(1);
  Kokkos::parallel_for(
      "softwave::sinkhorn::vjp_inverse",
      Kokkos::RangePolicy<Space>(space, 0, marginal.size()),
      KOKKOS_LAMBDA(std::int64_t q) {
        double const m = marginal(q / n, q % n);
        out(q / n, q % n) = m > 0 ? 1.0 / (kappa * m) : 0.0;
      });
}

// Slots of the conjugate-gradient scalars, per problem.
enum Scalar { kRz = 0, kPq, kRzNext, kRr, kRhs, kScalars };

template <class Space, class T>
PlanVjpReport run_plan_vjp(const Space& space,
                           const OTView3<const T, Space>& plan,
                           const OTView3<const T, Space>& grad_plan,
                           const OTView3<T, Space>& grad_cost,
                           const SinkhornOptions& o,
                           const PlanVjpOptions& vjp) {
  using Range = Kokkos::RangePolicy<Space>;
  std::int64_t const batch = plan.extent(0), n = plan.extent(1),
                     k = plan.extent(2);
  double const eps = o.epsilon;
  double const kappa_a = std::isinf(o.rho_a) ? 1.0 : 1.0 + eps / o.rho_a;
  double const kappa_b = std::isinf(o.rho_b) ? 1.0 : 1.0 + eps / o.rho_b;
  bool const balanced = std::isinf(o.rho_a) && std::isinf(o.rho_b);
  OTView3<const T, Space> const none;
  Vectors<Space> const ones;
  auto const rows = vectors(space, "rows", batch, n);
  auto const columns = vectors(space, "columns", batch, k);
  auto const source = vectors(space, "source", batch, n);  // (G ⊙ π) 1
  auto const target = vectors(space, "target", batch, k);  // (G ⊙ π)ᵀ 1
  apply_rows(space, plan, none, ones, rows);
  apply_columns(space, plan, none, ones, columns);
  apply_rows(space, plan, grad_plan, ones, source);
  apply_columns(space, plan, grad_plan, ones, target);
  auto const inv_a = vectors(space, "inverse_rows", batch, n);
  auto const inv_b = vectors(space, "inverse_columns", batch, k);
  inverse_scaled(space, rows, kappa_a, inv_a);
  inverse_scaled(space, columns, kappa_b, inv_b);
  auto const x = vectors(space, "x", batch, n);
  auto const y = vectors(space, "y", batch, k);
  auto const scratch_n = vectors(space, "scratch_rows", batch, n);
  auto const scratch_k = vectors(space, "scratch_columns", batch, k);
  PlanVjpReport report;

  if (vjp.mode == PlanDerivative::unrolled) {
    // Reverse sweep: the adjoint of g enters each update's (G(f)) cost
    // term as y += φ_g / (κ_b c) and passes −π (that) to f; f's update
    // (F(g)) likewise, x += φ_f / (κ_a r), passing −πᵀ (that) back to g.
    // The output's adjoints, (G ⊙ π) 1 and its transpose, seed the last
    // update of each.
    auto const phi_f = scratch_n, phi_g = scratch_k;
    Kokkos::deep_copy(space, phi_g, target);
    for (int step = 0; step < vjp.iterations; ++step) {
      // After the first step φ_g is πᵀ of the last x step, its sign taken here.
      double const sign = step == 0 ? 1.0 : -1.0;
      Kokkos::parallel_for(
          "softwave::sinkhorn::vjp_unroll_g", Range(space, 0, batch * k),
          KOKKOS_LAMBDA(std::int64_t q) {
            std::int64_t const b = q / k, j = q % k;
            phi_g(b, j) *= sign * inv_b(b, j);
            y(b, j) += phi_g(b, j);
          });
      apply_rows(space, plan, none, phi_g, phi_f);
      bool const first = step == 0;
      Kokkos::parallel_for(
          "softwave::sinkhorn::vjp_unroll_f", Range(space, 0, batch * n),
          KOKKOS_LAMBDA(std::int64_t q) {
            std::int64_t const b = q / n, i = q % n;
            double const adjoint =
                ((first ? source(b, i) : 0.0) - phi_f(b, i)) * inv_a(b, i);
            phi_f(b, i) = adjoint;
            x(b, i) += adjoint;
          });
      apply_columns(space, plan, none, phi_f, phi_g);
    }
    report.iterations = vjp.iterations;
  } else {
    // The Schur complement on y: S y = κ_b c ⊙ y − πᵀ (π y / (κ_a r)),
    // right-hand side (G ⊙ π)ᵀ 1 − πᵀ ((G ⊙ π) 1 / (κ_a r)). An empty
    // column's equation is y_j = 0.
    auto const rhs = vectors(space, "rhs", batch, k);
    Kokkos::parallel_for(
        "softwave::sinkhorn::vjp_scaled_source", Range(space, 0, batch * n),
        KOKKOS_LAMBDA(std::int64_t q) {
          scratch_n(q / n, q % n) = source(q / n, q % n) * inv_a(q / n, q % n);
        });
    apply_columns(space, plan, none, scratch_n, rhs);
    auto const scalars = vectors(space, "scalars", batch, kScalars);
    Kokkos::parallel_for(
        "softwave::sinkhorn::vjp_rhs", Range(space, 0, batch * k),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const b = q / k, j = q % k;
          rhs(b, j) = columns(b, j) > 0 ? target(b, j) - rhs(b, j) : 0.0;
        });
    if (balanced) {  // remove the rounding along the null space, 1
      using Policy = Kokkos::TeamPolicy<Space>;
      Kokkos::parallel_for(
          "softwave::sinkhorn::vjp_project", Policy(space, batch, Kokkos::AUTO),
          KOKKOS_LAMBDA(const typename Policy::member_type& team) {
            std::int64_t const b = team.league_rank();
            double sum = 0, count = 0;
            Kokkos::parallel_reduce(
                Kokkos::TeamThreadRange(team, k),
                [&](std::int64_t j, double& s) { s += rhs(b, j); }, sum);
            Kokkos::parallel_reduce(
                Kokkos::TeamThreadRange(team, k),
                [&](std::int64_t j, double& c) { c += columns(b, j) > 0; },
                count);
            double const mean = count > 0 ? sum / count : 0.0;
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k),
                                 [&](std::int64_t j) {
                                   if (columns(b, j) > 0) rhs(b, j) -= mean;
                                 });
          });
    }
    auto const residual = vectors(space, "residual", batch, k);
    auto const preconditioned = vectors(space, "preconditioned", batch, k);
    auto const direction = vectors(space, "direction", batch, k);
    auto const product = scratch_k;
    Kokkos::deep_copy(space, residual, rhs);
    auto const precondition = KOKKOS_LAMBDA(std::int64_t q) {
      std::int64_t const b = q / k, j = q % k;
      preconditioned(b, j) =
          columns(b, j) > 0 ? residual(b, j) * inv_b(b, j) : residual(b, j);
    };
    Kokkos::parallel_for("softwave::sinkhorn::vjp_precondition",
                         Range(space, 0, batch * k), precondition);
    Kokkos::deep_copy(space, direction, preconditioned);
    dot(space, residual, preconditioned, scalars, kRz);
    dot(space, rhs, rhs, scalars, kRhs);
    // Problems still iterating (1) or done (0), from the host's tests.
    Kokkos::View<int*, typename Space::memory_space> const active(
        Kokkos::view_alloc(space,
                           std::string("softwave::sinkhorn::vjp_active")),
        batch);
    auto active_host =
        compat::host_mirror("softwave::sinkhorn::vjp_active_host", active);
    auto scalars_host =
        compat::host_mirror("softwave::sinkhorn::vjp_scalars_host", scalars);
    Kokkos::deep_copy(space, scalars_host, scalars);
    space.fence();
    std::vector<double> rhs_norm(batch);
    double worst = 0;
    for (std::int64_t b = 0; b < batch; ++b) {
      rhs_norm[b] = std::sqrt(scalars_host(b, kRhs));
      active_host(b) = rhs_norm[b] > 0;
    }
    int step = 0;
    auto const any_active = [&] {
      for (std::int64_t b = 0; b < batch; ++b)
        if (active_host(b)) return true;
      return false;
    };
    while (any_active() && step < vjp.iterations) {
      Kokkos::deep_copy(space, active, active_host);
      // product = S · direction.
      apply_rows(space, plan, none, direction, scratch_n);
      Kokkos::parallel_for(
          "softwave::sinkhorn::vjp_scale_rows", Range(space, 0, batch * n),
          KOKKOS_LAMBDA(std::int64_t q) {
            scratch_n(q / n, q % n) *= inv_a(q / n, q % n);
          });
      auto const mixed = rhs;  // rhs is not read again: reuse it
      apply_columns(space, plan, none, scratch_n, mixed);
      Kokkos::parallel_for(
          "softwave::sinkhorn::vjp_schur", Range(space, 0, batch * k),
          KOKKOS_LAMBDA(std::int64_t q) {
            std::int64_t const b = q / k, j = q % k;
            double const d = direction(b, j);
            product(b, j) = columns(b, j) > 0
                                ? kappa_b * columns(b, j) * d - mixed(b, j)
                                : d;
          });
      dot(space, direction, product, scalars, kPq);
      Kokkos::parallel_for(
          "softwave::sinkhorn::vjp_step", Range(space, 0, batch * k),
          KOKKOS_LAMBDA(std::int64_t q) {
            std::int64_t const b = q / k, j = q % k;
            double const pq = scalars(b, kPq);
            if (!active(b) || !(pq > 0)) return;
            double const alpha = scalars(b, kRz) / pq;
            y(b, j) += alpha * direction(b, j);
            residual(b, j) -= alpha * product(b, j);
          });
      Kokkos::parallel_for("softwave::sinkhorn::vjp_precondition",
                           Range(space, 0, batch * k), precondition);
      dot(space, residual, preconditioned, scalars, kRzNext);
      dot(space, residual, residual, scalars, kRr);
      Kokkos::parallel_for(
          "softwave::sinkhorn::vjp_direction", Range(space, 0, batch * k),
          KOKKOS_LAMBDA(std::int64_t q) {
            std::int64_t const b = q / k, j = q % k;
            if (!active(b)) return;
            double const rz = scalars(b, kRz);
            double const beta = rz > 0 ? scalars(b, kRzNext) / rz : 0.0;
            direction(b, j) = preconditioned(b, j) + beta * direction(b, j);
          });
      Kokkos::parallel_for(
          "softwave::sinkhorn::vjp_next", Range(space, 0, batch),
          KOKKOS_LAMBDA(std::int64_t b) {
            if (active(b)) scalars(b, kRz) = scalars(b, kRzNext);
          });
      Kokkos::deep_copy(space, scalars_host, scalars);
      space.fence();
      ++step;
      worst = 0;
      for (std::int64_t b = 0; b < batch; ++b) {
        if (rhs_norm[b] == 0) continue;
        double const relative = std::sqrt(scalars_host(b, kRr)) / rhs_norm[b];
        worst = std::max(worst, relative);
        // Also done: a direction of no curvature (the rest of the residual
        // lies along the null space) or a step that made no progress.
        if (relative <= vjp.tolerance || !(scalars_host(b, kPq) > 0))
          active_host(b) = 0;
      }
    }
    report.iterations = step;
    report.residual = worst;
    report.converged = worst <= vjp.tolerance;
    // x = ((G ⊙ π) 1 − π y) / (κ_a r).
    apply_rows(space, plan, none, y, scratch_n);
    Kokkos::parallel_for(
        "softwave::sinkhorn::vjp_x", Range(space, 0, batch * n),
        KOKKOS_LAMBDA(std::int64_t q) {
          std::int64_t const b = q / n, i = q % n;
          x(b, i) = (source(b, i) - scratch_n(b, i)) * inv_a(b, i);
        });
  }

  double const inverse_eps = 1.0 / eps;
  Kokkos::parallel_for(
      "softwave::sinkhorn::vjp_grad_cost", Range(space, 0, batch * n * k),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const b = q / (n * k), i = (q / k) % n, j = q % k;
        double const p = double(plan(b, i, j));
        grad_cost(b, i, j) = T(
            p * (x(b, i) + y(b, j) - double(grad_plan(b, i, j))) * inverse_eps);
      });
  return report;
}

}  // namespace

template <class Space, class T>
PlanVjpReport sinkhorn_plan_vjp(const Space& space,
                                OTView3<const T, Space> plan,
                                OTView3<const T, Space> grad_plan,
                                OTView3<T, Space> grad_cost,
                                const SinkhornOptions& options,
                                const PlanVjpOptions& vjp) {
  compat::ScopedRegion region("softwave::sinkhorn::plan_vjp");
  check_sinkhorn_options(options);
  if (options.epsilon_relative)
    throw_invalid_argument(
        "the plan's derivative needs an absolute epsilon (epsilon_relative "
        "scales it by a cost the plan does not carry)");
  if (vjp.iterations < 1)
    throw_invalid_argument("iterations must be >= 1 (got ", vjp.iterations,
                           ")");
  if (!(vjp.tolerance >= 0))
    throw_invalid_argument("tolerance must be >= 0 (got ", vjp.tolerance, ")");
  std::vector<std::size_t> const shape{plan.extent(0), plan.extent(1),
                                       plan.extent(2)};
  check_extent(grad_plan, "grad_plan", shape, "(the plan's shape)");
  check_extent(grad_cost, "grad_cost", shape, "(the plan's shape)");
  DataChecks<Space> checks(space, vjp.check_values, "sinkhorn");
  std::int64_t const n = plan.extent(1), k = plan.extent(2);
  checks.count(
      "plan", " negative or non-finite value(s)",
      std::int64_t(plan.extent(0)) * n * k, "softwave::sinkhorn::check_plan",
      KOKKOS_LAMBDA(std::int64_t q)->std::int64_t {
        double const v = plan(q / (n * k), (q / k) % n, q % k);
        return !(compat::isfinite(v) && v >= 0);
      });
  checks.finite_values(grad_plan, "grad_plan");
  checks.finish();
  if (plan.size() == 0) return {};
  return run_plan_vjp(space, plan, grad_plan, grad_cost, options, vjp);
}

#define SOFTWAVE_INSTANTIATE_PLAN_VJP(SPACE, T)                       \
  template PlanVjpReport sinkhorn_plan_vjp<SPACE, T>(                 \
      const SPACE&, OTView3<const T, SPACE>, OTView3<const T, SPACE>, \
      OTView3<T, SPACE>, const SinkhornOptions&, const PlanVjpOptions&);

SOFTWAVE_INSTANTIATE_PLAN_VJP(Kokkos::DefaultExecutionSpace, float)
SOFTWAVE_INSTANTIATE_PLAN_VJP(Kokkos::DefaultExecutionSpace, double)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_PLAN_VJP(Kokkos::DefaultHostExecutionSpace, float)
SOFTWAVE_INSTANTIATE_PLAN_VJP(Kokkos::DefaultHostExecutionSpace, double)
#endif

}  // namespace softwave::impl
