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
// dL/db_out += μ (δ and a from MlpField::backpropagate), into `sums`.
template <class T, class Space>
struct StageTerms {
  MlpField<T, Space> field;
  T* sums;
  T* work;  // 2h
  KOKKOS_INLINE_FUNCTION void operator()(const T* y, const T* u,
                                         const T* mu) const {
    int const n = field.n, m = field.m, h = field.h;
    ParameterLayout const at{n, m, h};
    field.backpropagate(y, u, mu, work);
    T const* const delta = work;
    T const* const a = work + h;
    for (int k = 0; k < h; ++k) {
      T* const row = sums + k * (n + m);
      for (int j = 0; j < n; ++j) row[j] += delta[k] * y[j];
      for (int j = 0; j < m; ++j) row[n + j] += delta[k] * u[j];
      sums[at.bias_hidden() + k] += delta[k];
    }
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < h; ++k)
        sums[at.weight_out() + i * h + k] += mu[i] * a[k];
      sums[at.bias_out() + i] += mu[i];
    }
  }
};

// A thread sums the terms of a run of consecutive steps (of the flattened
// (b, t) order) in its own values, then adds them to the call's totals:
// `per_run` steps a thread keeps the atomic additions to runs · P.
template <class Space, class T>
struct ParameterSums {
  OdeCell<MlpField<T, Space>> cell;
  DeerView3<const T, Space> x, y, adjoint;
  DeerView2<const T, Space> y0;
  DeerView1<T, Space> totals;
  Lengths<Space> length;
  std::int64_t steps, total, per_run;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t run, T* values) const {
    MlpField<T, Space> const& f = cell.field;
    int const n = f.n;
    int const count = ParameterLayout{f.n, f.m, f.h}.count();
    T* const sums = values;
    T* const init = sums + count;
    T* const stage_work = init + n;
    T* const term_work = stage_work + cell.work_size();
    for (int v = 0; v < count; ++v) sums[v] = 0;
    StageTerms<T, Space> const terms{f, sums, term_work};
    std::int64_t const end = (run + 1) * per_run;
    std::int64_t const last = end < total ? end : total;
    for (std::int64_t q = run * per_run; q < last; ++q) {
      int const b = int(q / steps), t = int(q % steps);
      if (t >= length(b)) continue;
      T const* const y_prev = previous_state(y, y0, b, t, n, init);
      cell.stage_adjoints(y_prev, &x(b, t, 0), &adjoint(b, t, 0),
                          static_cast<T*>(nullptr), static_cast<T*>(nullptr),
                          stage_work, terms);
    }
    for (int v = 0; v < count; ++v) Kokkos::atomic_add(&totals(v), sums[v]);
  }
};

template <class Space, class T>
void parameter_gradients(const Space& space,
                         const OdeCell<MlpField<T, Space>>& cell,
                         const DeerInputs<T, Space>& inputs,
                         DeerView3<const T, Space> y,
                         DeerView3<const T, Space> adjoint,
                         const NeuralOdeWeightGradients<T, Space>& out) {
  MlpField<T, Space> const& f = cell.field;
  ParameterLayout const at{f.n, f.m, f.h};
  std::int64_t const B = inputs.x.extent(0), steps = inputs.x.extent(1);
  std::int64_t const total = B * steps;
  // Runs: every thread of the space busy (four per host thread, for
  // uneven lengths), but no more than 2^25 atomic additions in all.
  std::int64_t const threads =
      std::int64_t(space.concurrency()) * (runs_on_host<Space> ? 4 : 1);
  std::int64_t const runs = std::max<std::int64_t>(
      1, std::min({total, threads, (std::int64_t(1) << 25) / at.count()}));
  std::int64_t const per_run = (total + runs - 1) / runs;
  auto const totals = call_array<DeerView1<T, Space>>(
      space, "softwave::deer::ode_parameter_sums", true, at.count());
  ThreadItems<Space>((total + per_run - 1) / per_run,
                     at.count() + f.n + cell.work_size() + f.work_size(), T())
      .template for_each<T>(
          space, label("ode_parameter_gradients"),
          ParameterSums<Space, T>{cell, inputs.x, y, adjoint, inputs.y0,
                                  totals.view,
                                  Lengths<Space>{inputs.lengths, int(steps)},
                                  steps, total, per_run});
  auto const sums = totals.view;
  Kokkos::parallel_for(
      "softwave::deer::ode_parameter_gradients_out",
      work_items(space, at.count()), KOKKOS_LAMBDA(int v) {
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
  bool const weights_wanted = wg.weight_hidden.size() ||
                              wg.bias_hidden.size() || wg.weight_out.size() ||
                              wg.bias_out.size();
  // The adjoint λ is what the weights' sums read: the caller's, or one of
  // this call's own.
  DeerGradients<T, Space> g = gradients;
  if (weights_wanted && g.adjoint.size() == 0 && inputs.x.extent(0) > 0)
    g.adjoint = DeerView3<T, Space>(
        Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                           std::string("softwave::deer::ode_adjoint")),
        inputs.x.extent(0), inputs.x.extent(1), n);
  deer_gradients(space, cell, inputs, y, g, options);
  if (!weights_wanted) return;
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
  d::parameter_gradients(space, cell, inputs, y,
                         DeerView3<const T, Space>(g.adjoint), wg);
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
