// softwave/deer_ode.hpp: the built-in neural-ODE field (MlpField) through
// the DEER solver, its argument checks, and its weights' gradients.

#include <algorithm>
#include <softwave/deer_ode.hpp>

#include "../common/call_memory.hpp"
#include "../common/data_checks.hpp"

// Not in an unnamed namespace: nvcc takes no device lambda in a function
// of internal linkage.
namespace softwave::impl::deer::ode {

// The field of these weights for x with `columns` values a step (Δ_t,
// then u_t), every shape checked against the others.
template <class Space, class T>
MlpField<T, Space> checked_field(const Space& space,
                                 const NeuralOdeWeights<T, Space>& w,
                                 std::size_t columns, bool check_values) {
  std::size_t const n = w.weight_out.extent(0), h = w.weight_out.extent(1);
  if (n == 0 || h == 0)
    throw_invalid_argument(
        "weight_out must be (state size, hidden size), both >= 1 (got (", n,
        ", ", h, "))");
  if (columns == 0)
    throw_invalid_argument(
        "x must hold each step's length Δ_t in column 0 (then the inputs "
        "u_t); it has no columns");
  std::size_t const m = columns - 1;
  check_extent(w.weight_hidden, "weight_hidden", {h, n + m},
               "(hidden size, state size + input size), hidden size from "
               "weight_out and input size from x's columns after Δ_t");
  if (w.bias_hidden.size())
    check_extent(w.bias_hidden, "bias_hidden", {h}, "(hidden size)");
  if (w.bias_out.size())
    check_extent(w.bias_out, "bias_out", {n}, "(state size)");
  DataChecks<Space> checks(space, check_values, "deer");
  checks.finite_values(w.weight_hidden, "weight_hidden");
  checks.finite_values(w.bias_hidden, "bias_hidden");
  checks.finite_values(w.weight_out, "weight_out");
  checks.finite_values(w.bias_out, "bias_out");
  checks.finish();
  MlpField<T, Space> field;
  field.weights = w;
  field.n = int(n);
  field.m = int(m);
  field.h = int(h);
  return field;
}

// The weights' gradients in one array: W_hidden (h·(n + m)), b_hidden (h),
// W_out (n·h), b_out (n).
struct ParameterLayout {
  int n, m, h;
  KOKKOS_INLINE_FUNCTION int bias_hidden() const { return h * (n + m); }
  KOKKOS_INLINE_FUNCTION int weight_out() const { return bias_hidden() + h; }
  KOKKOS_INLINE_FUNCTION int bias_out() const { return weight_out() + n * h; }
  KOKKOS_INLINE_FUNCTION int count() const { return bias_out() + n; }
};

// stage_adjoints' visit: one stage's terms of the weights' gradients,
// dL/dW_hidden += δ [y; u]ᵀ, dL/db_hidden += δ, dL/dW_out += μ aᵀ and
// dL/db_out += μ (δ and a from MlpField::backpropagate), into `sums` (null:
// no weight is asked for), with
// the stage's vector–Jacobian product from the same δ.
template <class T, class Space>
struct StageTerms {
  static constexpr bool takes_vector_jacobian = true;
  MlpField<T, Space> field;
  T* sums;
  KOKKOS_INLINE_FUNCTION void vector_jacobian(const T* y, const T* u,
                                              const T* mu, T* grad_y, T* grad_u,
                                              T* work) const {
    int const n = field.n, m = field.m, h = field.h;
    ParameterLayout const at{n, m, h};
    field.backpropagate(y, u, mu, work);
    T const* const delta = work;
    T const* const a = work + h;
    for (int k = 0; sums && k < h; ++k) {
      T* const row = sums + k * (n + m);
      for (int j = 0; j < n; ++j) row[j] += delta[k] * y[j];
      for (int j = 0; j < m; ++j) row[n + j] += delta[k] * u[j];
      sums[at.bias_hidden() + k] += delta[k];
    }
    for (int i = 0; sums && i < n; ++i) {
      for (int k = 0; k < h; ++k)
        sums[at.weight_out() + i * h + k] += mu[i] * a[k];
      sums[at.bias_out() + i] += mu[i];
    }
    field.inputs_of(delta, grad_y, grad_u);
  }
};

// The terms of one step t of sequence b at λ_t: the weights' (into sums),
// dL/dx_t (grad_x(b, t), where asked for) and J_tᵀ λ_t (into grad_y_prev,
// where not null). init: n values for y_0; work: the cell's.
template <class Space, class T>
struct StepTerms {
  OdeCell<MlpField<T, Space>> cell;
  DeerView3<const T, Space> x, y;
  DeerView2<const T, Space> y0;
  DeerView3<T, Space> grad_x;
  KOKKOS_INLINE_FUNCTION void operator()(int b, int t, const T* lambda,
                                         T* grad_y_prev, T* sums, T* init,
                                         T* work) const {
    int const n = cell.field.n;
    T const* const y_prev = previous_state(y, y0, b, t, n, init);
    cell.stage_adjoints(
        y_prev, &x(b, t, 0), lambda, grad_y_prev,
        grad_x.extent(0) ? &grad_x(b, t, 0) : static_cast<T*>(nullptr), work,
        StageTerms<T, Space>{cell.field, sums});
  }
  KOKKOS_INLINE_FUNCTION void clear_inputs(int b, int t) const {
    if (grad_x.extent(0))
      for (int j = 0; j < 1 + cell.field.m; ++j) grad_x(b, t, j) = 0;
  }
  // Values of T a thread needs beside its sums: y_0, then the work.
  KOKKOS_INLINE_FUNCTION int values() const {
    return cell.field.n + cell.work_size();
  }
};

template <class View, class T>
KOKKOS_INLINE_FUNCTION void add_to_totals(const View& totals, const T* sums,
                                          int count) {
  for (int v = 0; v < count; ++v) Kokkos::atomic_add(&totals(v), sums[v]);
}

// With the adjoint solved: a thread takes a run of consecutive steps (of
// the flattened (b, t) order), sums their weights' terms in its own values
// and adds them to the call's totals (per_run steps a thread keep the
// atomic additions to runs · P), writing dL/dx_t and, at t = 0, dL/dy_0 on
// the way.
template <class Space, class T>
struct TermsOfRuns {
  StepTerms<Space, T> terms;
  DeerView3<const T, Space> adjoint;
  DeerView2<T, Space> grad_y0;
  DeerView1<T, Space> totals;
  Lengths<Space> length;
  std::int64_t steps, total, per_run;
  int count;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t run, T* values) const {
    T* const sums = values;
    T* const init = sums + count;
    for (int v = 0; v < count; ++v) sums[v] = 0;
    std::int64_t const end = (run + 1) * per_run;
    std::int64_t const last = end < total ? end : total;
    for (std::int64_t q = run * per_run; q < last; ++q) {
      int const b = int(q / steps), t = int(q % steps);
      if (t >= length(b)) {
        terms.clear_inputs(b, t);
        continue;
      }
      T* const into_y0 = t == 0 && grad_y0.extent(0) ? &grad_y0(b, 0)
                                                     : static_cast<T*>(nullptr);
      terms(b, t, &adjoint(b, t, 0), into_y0, count ? sums : nullptr, init,
            init + terms.cell.field.n);
    }
    add_to_totals(totals, sums, count);
  }
};

// The sequential method's whole backward pass in one loop a sequence:
// λ_t = dL/dy_t + J_{t+1}ᵀ λ_{t+1} from the last step back, each step's
// terms taken as λ_t is known (J_tᵀ λ_t is the next step's carry, and at
// t = 0 dL/dy_0): one RK4 reverse sweep a step instead of three (the
// adjoint, the inputs' and the weights').
template <class Space, class T>
struct SequentialBackward {
  StepTerms<Space, T> terms;
  DeerView3<const T, Space> grad_y;
  DeerView3<T, Space> adjoint;  // written where asked for
  DeerView2<T, Space> grad_y0;
  DeerView1<T, Space> totals;
  Lengths<Space> length;
  int steps, count;
  std::int64_t first = 0;  // the sequence of item 0
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item, T* values) const {
    int const b = int(first + item), n = terms.cell.field.n;
    T* const sums = values;
    T* const lambda = sums + count;
    T* const carry = lambda + n;
    T* const init = carry + n;
    for (int v = 0; v < count; ++v) sums[v] = 0;
    for (int i = 0; i < n; ++i) carry[i] = 0;
    int const L = length(b);
    for (int t = steps - 1; t >= L; --t) {
      terms.clear_inputs(b, t);
      for (int i = 0; adjoint.extent(0) && i < n; ++i) adjoint(b, t, i) = 0;
    }
    for (int t = L - 1; t >= 0; --t) {
      for (int i = 0; i < n; ++i) lambda[i] = grad_y(b, t, i) + carry[i];
      if (adjoint.extent(0))
        for (int i = 0; i < n; ++i) adjoint(b, t, i) = lambda[i];
      terms(b, t, lambda, carry, count ? sums : nullptr, init, init + n);
    }
    if (grad_y0.extent(0))
      for (int i = 0; i < n; ++i) grad_y0(b, i) = carry[i];
    add_to_totals(totals, sums, count);
  }
};

// SequentialBackward a team a sequence (loop_team): the weights, the state,
// the adjoint and the stages' values in the team's fast memory, the field's
// products across its threads (MlpField::team_hidden, team_inputs_of), and
// each weight's sum kept by the thread of its hidden unit or state, so that
// no two threads add to one sum.
template <class Space, class T>
struct TeamSequentialBackward {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  using Cell = OdeCell<MlpField<T, Space>>;
  MlpField<T, Space> field;
  DeerView3<const T, Space> x, y, grad_y;
  DeerView2<const T, Space> y0;
  DeerView3<T, Space> grad_x, adjoint;
  DeerView2<T, Space> grad_y0;
  DeerView1<T, Space> totals;
  Lengths<Space> length;
  int steps, count;

  // The team's values: the field's, the sums, then y_{t−1}, λ_t, the carry
  // (J_tᵀ λ_t as it accumulates), the four slopes, the three later stages'
  // points, μ, each state's share of dL/dΔ_t (12n), and dL/du_t's sums
  // (1 + m).
  KOKKOS_INLINE_FUNCTION static int values(const MlpField<T, Space>& f,
                                           int count) {
    return f.team_values() + count + 12 * f.n + 1 + f.m;
  }
  std::size_t bytes() const {
    return std::size_t(values(field, count)) * sizeof(T);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    int const b = member.league_rank();
    int const n = field.n, m = field.m, h = field.h;
    ParameterLayout const at{n, m, h};
    T* const shared = static_cast<T*>(member.team_scratch(0).get_shmem(
        std::size_t(values(field, count)) * sizeof(T)));
    auto const fs = field.team_shared(shared);
    T* const sums = shared + field.team_values();
    T* const y_prev = sums + count;
    T* const lambda = y_prev + n;
    T* const carry = lambda + n;
    T* const slopes = carry + n;
    T* const points = slopes + 4 * n;
    T* const mu = points + 3 * n;
    T* const dt_part = mu + n;
    T* const gx = dt_part + n;
    bool const inputs = grad_x.extent(0) > 0;
    field.team_begin(member, shared);
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, count),
                         [&](int v) { sums[v] = 0; });
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, n),
                         [&](int i) { carry[i] = 0; });
    int const L = length(b);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, L, steps), [&](int t) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, 1 + m),
                           [&](int j) {
                             if (inputs) grad_x(b, t, j) = 0;
                           });
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, n), [&](int i) {
        if (adjoint.extent(0)) adjoint(b, t, i) = 0;
      });
    });
    member.team_barrier();
    for (int t = L - 1; t >= 0; --t) {
      T const* const xt = &x(b, t, 0);
      T const dt = xt[0];
      T const* const u = xt + 1;
      // λ_t = dL/dy_t + J_{t+1}ᵀ λ_{t+1}; J_tᵀ λ_t starts from λ_t.
      Kokkos::parallel_for(Kokkos::TeamVectorRange(member, n), [&](int i) {
        T const l = grad_y(b, t, i) + carry[i];
        lambda[i] = l;
        carry[i] = l;
        if (adjoint.extent(0)) adjoint(b, t, i) = l;
        y_prev[i] = t > 0 ? y(b, t - 1, i) : (y0.extent(0) ? y0(b, i) : T(0));
      });
      Kokkos::parallel_for(Kokkos::TeamVectorRange(member, 1 + m),
                           [&](int j) { gx[j] = 0; });
      member.team_barrier();
      // The step's four stages again, as OdeCell::stage_adjoints.
      for (int s = 0; s < 4; ++s)
        field.team_field(member, s == 0 ? y_prev : points + (s - 1) * n, u,
                         shared, [&](int i, T k) {
                           slopes[s * n + i] = k;
                           if (s < 3)
                             points[s * n + i] =
                                 y_prev[i] + Cell::rk4_offset(s + 1) * dt * k;
                         });
      Kokkos::parallel_for(Kokkos::TeamVectorRange(member, n), [&](int i) {
        dt_part[i] = lambda[i] *
                     (slopes[i] + 2 * slopes[n + i] + 2 * slopes[2 * n + i] +
                      slopes[3 * n + i]) /
                     6;
        mu[i] = Cell::rk4_weight(3) * dt / 6 * lambda[i];
      });
      member.team_barrier();
      for (int s = 3; s >= 0; --s) {
        T const* const point = s == 0 ? y_prev : points + (s - 1) * n;
        // δ = sech²(z) ⊙ W_outᵀ μ; the unit's weight terms δ_k [y; u],
        // δ_k and μ a_k.
        field.team_hidden(member, point, u, mu, fs, [&](int k, T a, T delta) {
          if (count == 0) return;
          T* const row = sums + k * (n + m);
          Kokkos::parallel_for(
              Kokkos::ThreadVectorRange(member, n + m),
              [&](int j) { row[j] += delta * (j < n ? point[j] : u[j - n]); });
          Kokkos::parallel_for(
              Kokkos::ThreadVectorRange(member, n),
              [&](int i) { sums[at.weight_out() + i * h + k] += mu[i] * a; });
          Kokkos::single(Kokkos::PerThread(member),
                         [&] { sums[at.bias_hidden() + k] += delta; });
        });
        // W_hiddenᵀ δ: into the carry and dL/du_t; the next stage's μ.
        field.team_inputs_of(member, fs, inputs && m > 0, [&](int j, T back) {
          if (j >= n) {
            gx[1 + j - n] += back;
            return;
          }
          carry[j] += back;
          if (count) sums[at.bias_out() + j] += mu[j];
          if (s > 0) {
            dt_part[j] += Cell::rk4_offset(s) * slopes[(s - 1) * n + j] * back;
            mu[j] = Cell::rk4_weight(s - 1) * dt / 6 * lambda[j] +
                    Cell::rk4_offset(s) * dt * back;
          }
        });
      }
      if (inputs) {
        Kokkos::single(Kokkos::PerTeam(member), [&] {
          T total = 0;
          for (int i = 0; i < n; ++i) total += dt_part[i];
          grad_x(b, t, 0) = total;
        });
        Kokkos::parallel_for(Kokkos::TeamVectorRange(member, m),
                             [&](int j) { grad_x(b, t, 1 + j) = gx[1 + j]; });
      }
      member.team_barrier();
    }
    if (grad_y0.extent(0))
      Kokkos::parallel_for(Kokkos::TeamVectorRange(member, n),
                           [&](int i) { grad_y0(b, i) = carry[i]; });
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, count), [&](int v) {
      Kokkos::atomic_add(&totals(v), sums[v]);
    });
  }
};

// body(item, values) for items [0, count), each thread's `values` a row of
// an array of the call's: Kokkos' level-1 scratch would be sized by the
// whole device's concurrency (Kokkos 3.4), and its first growth fences,
// which a CUDA-graph capture cannot hold.
template <class T, class Body, class Rows>
struct WithRows {
  Body body;
  Rows rows;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item) const {
    body(item, &rows(item, 0));
  }
};

template <class T, class Space, class Body>
void for_each_with_rows(const Space& space, const char* what,
                        std::int64_t count, DeerView2<T, Space> rows,
                        const Body& body) {
  Kokkos::parallel_for(label(what), Kokkos::RangePolicy<Space>(space, 0, count),
                       WithRows<T, Body, DeerView2<T, Space>>{body, rows});
}

// The weights' totals into the gradients asked for.
template <class Space, class T>
void scatter_totals(const Space& space, DeerView1<T, Space> sums,
                    ParameterLayout at,
                    const NeuralOdeWeightGradients<T, Space>& out) {
  Kokkos::parallel_for(
      "softwave::deer::ode_weight_gradients", work_items(space, at.count()),
      KOKKOS_LAMBDA(int v) {
        int const stride = at.n + at.m;
        if (v < at.bias_hidden()) {
          if (out.weight_hidden.extent(0))
            out.weight_hidden(v / stride, v % stride) = sums(v);
        } else if (v < at.weight_out()) {
          if (out.bias_hidden.extent(0))
            out.bias_hidden(v - at.bias_hidden()) = sums(v);
        } else if (v < at.bias_out()) {
          int const w = v - at.weight_out();
          if (out.weight_out.extent(0))
            out.weight_out(w / at.h, w % at.h) = sums(v);
        } else if (out.bias_out.extent(0)) {
          out.bias_out(v - at.bias_out()) = sums(v);
        }
      });
}

// Every gradient of a call after its forward: the sequential sweep where
// the call's method resolves to the loop, else the adjoint by DEER (the
// engine's solver) and then the terms of runs of steps.
template <class Space, class T>
void gradients(const Space& space, const OdeCell<MlpField<T, Space>>& cell,
               const DeerInputs<T, Space>& inputs, DeerView3<const T, Space> y,
               const DeerGradients<T, Space>& gradients,
               const NeuralOdeWeightGradients<T, Space>& out,
               const Settings& settings) {
  MlpField<T, Space> const& f = cell.field;
  ParameterLayout const at{f.n, f.m, f.h};
  std::int64_t const B = inputs.x.extent(0), steps = inputs.x.extent(1);
  bool const host = runs_on_host<Space>;
  // The weights' sums (none where no weight's gradient is asked for).
  bool const weights = out.weight_hidden.size() || out.bias_hidden.size() ||
                       out.weight_out.size() || out.bias_out.size();
  int const count = weights ? at.count() : 0;
  LoopTeam const loop = loop_team(
      space, settings.team_size, f.h,
      std::size_t(TeamSequentialBackward<Space, T>::values(f, count)) *
          sizeof(T));
  // On a device DEER's adjoint with full Jacobians up to n = 8, with
  // diagonal ones, where the sweep runs a team, up to n = 4: on the H200
  // (B = 16, T = 1k, forward and gradients) DEER took 36 against the team
  // sweep's 146 ms at n = 8 with full Jacobians, 437 ms with diagonal ones.
  bool const by_loop =
      settings.method == DeerMethod::sequential ||
      (settings.method == DeerMethod::automatic &&
       !deer_expected_faster(B, steps, f.n, settings.jacobian,
                             space.concurrency(), host,
                             /*fused=*/false, 8, loop.threads > 0 ? 4 : 0));
  auto const totals = call_array<DeerView1<T, Space>>(
      space, "softwave::deer::ode_weight_sums", true, count);
  StepTerms<Space, T> const terms{cell, inputs.x, y, inputs.y0,
                                  gradients.grad_x};
  Lengths<Space> const length{inputs.lengths, int(steps)};
  // Each thread's values (its sums first) in a row of an array bounded by
  // 2^25 values, so that neither its memory nor the atomic additions of the
  // sums grow with the space's threads or the batch.
  std::int64_t const cap = std::int64_t(1) << 25;
  LoopTeam const team = by_loop ? loop : LoopTeam{};
  if (team.threads > 0) {
    TeamSequentialBackward<Space, T> const body{f,
                                                inputs.x,
                                                y,
                                                gradients.grad_y,
                                                inputs.y0,
                                                gradients.grad_x,
                                                gradients.adjoint,
                                                gradients.grad_y0,
                                                totals.view,
                                                length,
                                                int(steps),
                                                count};
    Kokkos::parallel_for(
        label("ode_sequential_backward_teams"),
        compat::light_weight(
            Kokkos::TeamPolicy<Space>(space, int(B), team.threads, team.lanes)
                .set_scratch_size(0, Kokkos::PerTeam(body.bytes()))),
        body);
  } else if (by_loop) {
    int const values = count + 2 * f.n + terms.values();
    std::int64_t const group =
        std::max<std::int64_t>(1, std::min<std::int64_t>(B, cap / values));
    auto const rows = call_array<DeerView2<T, Space>>(
        space, "softwave::deer::ode_thread_values", false, group, values);
    SequentialBackward<Space, T> body{
        terms,       gradients.grad_y, gradients.adjoint, gradients.grad_y0,
        totals.view, length,           int(steps),        count};
    for (std::int64_t first = 0; first < B; first += group) {
      body.first = first;
      for_each_with_rows(space, "ode_sequential_backward",
                         std::min(group, B - first), rows.view, body);
    }
  } else {
    DeerGradients<T, Space> g = gradients;
    g.grad_x = {};
    g.grad_y0 = {};
    auto const adjoint = solve_adjoint(space, cell, inputs, y, g, settings);
    std::int64_t const total = B * steps;
    int const values = count + terms.values();
    // Runs: every thread of the space busy (four per host thread, for
    // uneven lengths), within the cap.
    std::int64_t const threads =
        std::int64_t(space.concurrency()) * (host ? 4 : 1);
    std::int64_t const runs =
        std::max<std::int64_t>(1, std::min({total, threads, cap / values}));
    std::int64_t const per_run = (total + runs - 1) / runs;
    std::int64_t const launched = (total + per_run - 1) / per_run;
    auto const rows = call_array<DeerView2<T, Space>>(
        space, "softwave::deer::ode_thread_values", false, launched, values);
    for_each_with_rows(
        space, "ode_gradient_terms", launched, rows.view,
        TermsOfRuns<Space, T>{terms, DeerView3<const T, Space>(adjoint),
                              gradients.grad_y0, totals.view, length, steps,
                              total, per_run, count});
  }
  if (weights) scatter_totals(space, totals.view, at, out);
}

}  // namespace softwave::impl::deer::ode

namespace softwave {

template <class Space, class T>
void deer_neural_ode(const Space& space,
                     const NeuralOdeWeights<T, Space>& weights,
                     const DeerInputs<T, Space>& inputs,
                     const DeerResult<T, Space>& result,
                     const DeerOptions& options) {
  OdeCell<MlpField<T, Space>> cell;
  cell.field = impl::deer::ode::checked_field(
      space, weights, inputs.x.extent(2), options.check_values);
  deer(space, cell, inputs, result, options);
}

template <class Space, class T>
void deer_neural_ode_gradients(
    const Space& space, const NeuralOdeWeights<T, Space>& weights,
    const DeerInputs<T, Space>& inputs, DeerView3<const T, Space> y,
    const DeerGradients<T, Space>& gradients,
    const NeuralOdeWeightGradients<T, Space>& weight_gradients,
    const DeerOptions& options) {
  namespace d = impl::deer::ode;
  OdeCell<MlpField<T, Space>> cell;
  cell.field = d::checked_field(space, weights, inputs.x.extent(2),
                                options.check_values);
  MlpField<T, Space> const& f = cell.field;
  auto const& wg = weight_gradients;
  std::size_t const n = f.n, m = f.m, h = f.h;
  if (wg.weight_hidden.size())
    impl::check_extent(wg.weight_hidden, "grad weight_hidden", {h, n + m},
                       "(weight_hidden's shape)");
  if (wg.bias_hidden.size())
    impl::check_extent(wg.bias_hidden, "grad bias_hidden", {h},
                       "(hidden size)");
  if (wg.weight_out.size())
    impl::check_extent(wg.weight_out, "grad weight_out", {n, h},
                       "(weight_out's shape)");
  if (wg.bias_out.size())
    impl::check_extent(wg.bias_out, "grad bias_out", {n}, "(state size)");
  impl::deer::Settings const settings = impl::deer::check_call<Space, T>(
      space, inputs, f.n, 1 + f.m, options, "y", y.extent(0), y.extent(1),
      y.extent(2));
  impl::deer::check_gradients(gradients, inputs.x.extent(0), inputs.x.extent(1),
                              n, 1 + m);
  if (inputs.x.extent(0) == 0) {
    // No steps: every sum is zero.
    auto zero = [&](const auto& v) {
      if (v.size()) Kokkos::deep_copy(space, v, T(0));
    };
    zero(wg.weight_hidden);
    zero(wg.bias_hidden);
    zero(wg.weight_out);
    zero(wg.bias_out);
    return;
  }
  d::gradients(space, cell, inputs, y, gradients, wg, settings);
}

#define SOFTWAVE_INSTANTIATE_NEURAL_ODE(SPACE, T)               \
  template void deer_neural_ode<SPACE, T>(                      \
      const SPACE&, const NeuralOdeWeights<T, SPACE>&,          \
      const DeerInputs<T, SPACE>&, const DeerResult<T, SPACE>&, \
      const DeerOptions&);                                      \
  template void deer_neural_ode_gradients<SPACE, T>(            \
      const SPACE&, const NeuralOdeWeights<T, SPACE>&,          \
      const DeerInputs<T, SPACE>&, DeerView3<const T, SPACE>,   \
      const DeerGradients<T, SPACE>&,                           \
      const NeuralOdeWeightGradients<T, SPACE>&, const DeerOptions&);

SOFTWAVE_INSTANTIATE_NEURAL_ODE(Kokkos::DefaultExecutionSpace, float)
SOFTWAVE_INSTANTIATE_NEURAL_ODE(Kokkos::DefaultExecutionSpace, double)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_NEURAL_ODE(Kokkos::DefaultHostExecutionSpace, float)
SOFTWAVE_INSTANTIATE_NEURAL_ODE(Kokkos::DefaultHostExecutionSpace, double)
#endif

}  // namespace softwave
