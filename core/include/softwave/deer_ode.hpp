#pragma once
// Ordinary differential equations dy/dt = f(y, u) on a time grid, evaluated
// for all grid points at once by DEER (the paper's second use: neural ODEs).
//
// OdeCell<Field> makes a vector field a cell of softwave::deer: step t of
// sequence b advances y from grid point t to t + 1 by one classical
// Runge–Kutta step (RK4) of length Δ_t, the input u_t held over it, so
// that deer(), deer_gradients() and DeerMethod::sequential (the plain
// fixed-step integrator, and the guard's fallback) all solve the same
// discrete recurrence. Its inputs x (B, T, 1 + m) hold Δ_t in column 0 and
// u_t in columns 1 .. m; y (B, T, n) holds y(t_1) .. y(t_T), y0 is y(t_0).
// Δ_t may differ from step to step and sequence to sequence (a sequence's
// own grid), and be negative (integration backwards).
//
// Why RK4 and not the DEER paper's discretisation: the paper linearises
// the ODE around the current guess, averages the linearisation over each
// interval and steps it with a matrix exponential. That iteration is not
// Newton on the scheme it converges to, and that scheme's exact gradient
// needs the field's second derivatives. On RK4's recurrence DEER is
// Newton itself (quadratic convergence from its Jacobian, exact through the
// stages' chain rule), the result is the sequential integrator's to
// rounding, and the gradients by implicit differentiation are those of the
// discrete solution (the field's first derivatives only), which is what a
// neural ODE trained on a fixed grid differentiates. RK4 is fourth order:
// on a grid fine enough for the field, its error is far below the paper's
// second-order scheme.
//
// A Field is a copyable functor callable on the space's device, with
//   using value_type = float or double;
//   KOKKOS_FUNCTION int state_size() const;  // n
//   KOKKOS_FUNCTION int input_size() const;  // m (0: an autonomous field)
//   KOKKOS_FUNCTION int work_size() const;   // scratch values a call may use
//   // dydt = f(y, u); with jacobian non-null also ∂f/∂y: n×n row-major
//   // (jacobian[i*n + j] = ∂f_i/∂y_j) for DeerJacobian::full, its n
//   // diagonal entries for DeerJacobian::diagonal.
//   KOKKOS_FUNCTION void field(const T* y, const T* u, T* dydt, T* jacobian,
//                              DeerJacobian kind, T* work) const;
//   // grad_y = (∂f/∂y)ᵀ μ and grad_u = (∂f/∂u)ᵀ μ; either may be null.
//   KOKKOS_FUNCTION void field_vector_jacobian(const T* y, const T* u,
//                                              const T* mu, T* grad_y,
//                                              T* grad_u, T* work) const;
// tests/test_deer_ode.cpp's TanhField is an example. A field may also share
// its evaluation among a team's threads, which the sequential loop then
// uses on a device (DeerOptions::sequential_team_size): a constant
// `static constexpr bool team_loop = true;` with
//   KOKKOS_FUNCTION int team_values() const;  // values of T a team keeps
//   KOKKOS_FUNCTION int team_width() const;   // its products' rows
//   template <class Member> KOKKOS_FUNCTION
//   void team_begin(const Member&, T* shared) const;  // once a sequence
//   // slope(i, f_i(y, u)) once for each i; ends with the team's barrier
//   template <class Member, class Slope> KOKKOS_FUNCTION
//   void team_field(const Member&, const T* y, const T* u, T* shared,
//                   const Slope& slope) const;
// as MlpField below.
//
// Jacobians: DeerJacobian::full is the step's exact Jacobian (O(n³) a
// step: the four stages' Jacobians chained). With diagonal (and for the
// adjoint's quasi-Newton iterations) the stages' diagonals are chained:
// the exact diagonal where the field's Jacobian is diagonal, otherwise an
// approximation, which changes the iterations' count, not their fixed
// point (the residual is the exact step's). block keeps the exact
// Jacobian's diagonal blocks.
//
// The field's own parameters θ: DeerGradients::adjoint gives λ_t, and
// stage_adjoints(y_{t−1}, x_t, λ_t, work, visit) calls
// visit(y_stage, u, μ_stage) for the four stages of step t, so that
// dL/dθ = Σ_t Σ_stages (∂f/∂θ (y_stage, u_t))ᵀ μ_stage. A visit that forms
// what the field's vector–Jacobian product forms again (the hidden units
// of a network) may do both: with
//   static constexpr bool takes_vector_jacobian = true;
//   KOKKOS_FUNCTION void vector_jacobian(const T* y, const T* u,
//       const T* mu, T* grad_y, T* grad_u, T* work) const;
// it is called instead of visit(...) and field_vector_jacobian(...), with
// the field's work.

#include <softwave/deer.hpp>
#include <type_traits>

namespace softwave {

namespace impl {
// stage_adjoints' visit where no one looks (a functor: a lambda defined in
// a device function is host code to nvcc).
struct NoVisit {
  template <class T>
  KOKKOS_INLINE_FUNCTION void operator()(const T*, const T*, const T*) const {}
};

// Whether a visit takes over the field's vector–Jacobian product (see
// stage_adjoints).
template <class Visit, class = void>
struct TakesVectorJacobian : std::false_type {};
template <class Visit>
struct TakesVectorJacobian<Visit,
                           std::void_t<decltype(Visit::takes_vector_jacobian)>>
    : std::bool_constant<Visit::takes_vector_jacobian> {};
}  // namespace impl

template <class Field>
struct OdeCell {
  using value_type = typename Field::value_type;
  using T = value_type;
  Field field;

  KOKKOS_INLINE_FUNCTION int state_size() const { return field.state_size(); }
  KOKKOS_INLINE_FUNCTION int input_size() const {
    return 1 + field.input_size();
  }
  // step: the stage's point and slope, the slopes' weighted sum (3n), the
  // field's Jacobian and two stage Jacobians (3n²); vector_jacobian and
  // stage_adjoints: the four slopes, three stage points, two adjoints and
  // the input's gradient (9n + m).
  KOKKOS_INLINE_FUNCTION int work_size() const {
    int const n = field.state_size(), m = field.input_size();
    int const stepping = 3 * n + 3 * n * n;
    int const adjoint = 9 * n + m;
    return (stepping > adjoint ? stepping : adjoint) + field.work_size();
  }

  // The classic RK4 tableau: stage s is evaluated at
  // y_prev + rk4_offset(s)·dt·k_{s−1} and weighted rk4_weight(s)/6.
  KOKKOS_INLINE_FUNCTION static T rk4_offset(int s) {
    return s == 0 ? T(0) : s == 3 ? T(1) : T(0.5);
  }
  KOKKOS_INLINE_FUNCTION static T rk4_weight(int s) {
    return s == 0 || s == 3 ? T(1) : T(2);
  }

  // y = RK4 step of length x[0] from y_prev with u = x + 1; jacobian as a
  // cell's (see above).
  KOKKOS_INLINE_FUNCTION void step(const T* y_prev, const T* x, T* y,
                                   T* jacobian, DeerJacobian kind,
                                   T* work) const {
    int const n = field.state_size();
    T const dt = x[0];
    T const* const u = x + 1;
    bool const full = kind == DeerJacobian::full;
    int const side = full ? n * n : n;
    T* const point = work;
    T* const slope = point + n;
    T* const sum = slope + n;
    T* const field_jacobian = sum + n;
    T* const previous = field_jacobian + n * n;  // the last stage's ∂k/∂y
    T* const current = previous + n * n;
    T* const field_work = current + n * n;
    for (int s = 0; s < 4; ++s) {
      for (int i = 0; i < n; ++i)
        point[i] =
            s == 0 ? y_prev[i] : y_prev[i] + rk4_offset(s) * dt * slope[i];
      field.field(point, u, slope, jacobian ? field_jacobian : nullptr, kind,
                  field_work);
      for (int i = 0; i < n; ++i)
        sum[i] = s == 0 ? rk4_weight(s) * slope[i]
                        : sum[i] + rk4_weight(s) * slope[i];
      if (!jacobian) continue;
      // ∂k_s/∂y_prev = J_s (I + c_s·dt·∂k_{s−1}/∂y_prev).
      if (s == 0) {
        for (int q = 0; q < side; ++q) current[q] = field_jacobian[q];
      } else if (full) {
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < n; ++j) {
            T acc = field_jacobian[i * n + j];
            for (int k = 0; k < n; ++k)
              acc += rk4_offset(s) * dt * field_jacobian[i * n + k] *
                     previous[k * n + j];
            current[i * n + j] = acc;
          }
      } else {
        for (int i = 0; i < n; ++i)
          current[i] =
              field_jacobian[i] * (1 + rk4_offset(s) * dt * previous[i]);
      }
      for (int q = 0; q < side; ++q)
        jacobian[q] = s == 0 ? rk4_weight(s) * current[q]
                             : jacobian[q] + rk4_weight(s) * current[q];
      for (int q = 0; q < side; ++q) previous[q] = current[q];
    }
    for (int i = 0; i < n; ++i) y[i] = y_prev[i] + dt / 6 * sum[i];
    if (!jacobian) return;
    for (int q = 0; q < side; ++q) jacobian[q] *= dt / 6;
    for (int i = 0; i < n; ++i) jacobian[full ? i * n + i : i] += 1;
  }

  // Reverse mode through the step's four stages: visit(y_stage, u, μ_stage)
  // for each stage, last first, with μ_stage = dL/dk_stage; grad_y_prev
  // (n) and grad_x (1 + m: dt, then u) are the step's vector–Jacobian
  // products with λ = dL/dy (either may be null).
  template <class Visit>
  KOKKOS_INLINE_FUNCTION void stage_adjoints(const T* y_prev, const T* x,
                                             const T* lambda, T* grad_y_prev,
                                             T* grad_x, T* work,
                                             const Visit& visit) const {
    int const n = field.state_size(), m = field.input_size();
    T const dt = x[0];
    T const* const u = x + 1;
    T* const slopes = work;            // k_1 .. k_4
    T* const points = slopes + 4 * n;  // the points of stages 2 .. 4
    T* const mu = points + 3 * n;      // dL/dk of the stage at hand
    T* const back = mu + n;            // (∂f/∂y)ᵀ μ of that stage
    T* const grad_u = back + n;        // (∂f/∂u)ᵀ μ of that stage
    T* const field_work = grad_u + m;
    for (int s = 0; s < 4; ++s) {
      T* const point = s == 0 ? nullptr : points + (s - 1) * n;
      for (int i = 0; s > 0 && i < n; ++i)
        point[i] = y_prev[i] + rk4_offset(s) * dt * slopes[(s - 1) * n + i];
      field.field(s == 0 ? y_prev : point, u, slopes + s * n,
                  static_cast<T*>(nullptr), DeerJacobian::full, field_work);
    }
    // y = y_prev + dt/6 Σ w_s k_s; k_s = f(y_prev + c_s dt k_{s−1}, u).
    T grad_dt = 0;
    if (grad_y_prev)
      for (int i = 0; i < n; ++i) grad_y_prev[i] = lambda[i];
    if (grad_x)
      for (int j = 0; j < m; ++j) grad_x[1 + j] = 0;
    for (int i = 0; i < n; ++i)
      grad_dt += lambda[i] *
                 (slopes[i] + 2 * slopes[n + i] + 2 * slopes[2 * n + i] +
                  slopes[3 * n + i]) /
                 6;
    for (int i = 0; i < n; ++i) mu[i] = rk4_weight(3) * dt / 6 * lambda[i];
    for (int s = 3; s >= 0; --s) {
      T const* const point = s == 0 ? y_prev : points + (s - 1) * n;
      T* const into_u = grad_x && m > 0 ? grad_u : nullptr;
      if constexpr (impl::TakesVectorJacobian<Visit>::value) {
        visit.vector_jacobian(point, u, static_cast<const T*>(mu), back, into_u,
                              field_work);
      } else {
        visit(point, u, static_cast<const T*>(mu));
        field.field_vector_jacobian(point, u, mu, back, into_u, field_work);
      }
      if (grad_x)
        for (int j = 0; j < m; ++j) grad_x[1 + j] += grad_u[j];
      if (grad_y_prev)
        for (int i = 0; i < n; ++i) grad_y_prev[i] += back[i];
      if (s == 0) break;
      // The stage's point moved with k_{s−1} (weight c_s·dt) and with dt.
      for (int i = 0; i < n; ++i) {
        grad_dt += rk4_offset(s) * slopes[(s - 1) * n + i] * back[i];
        mu[i] = rk4_weight(s - 1) * dt / 6 * lambda[i] +
                rk4_offset(s) * dt * back[i];
      }
    }
    if (grad_x) grad_x[0] = grad_dt;
  }

  KOKKOS_INLINE_FUNCTION void vector_jacobian(const T* y_prev, const T* x,
                                              const T* lambda, T* grad_y_prev,
                                              T* grad_x, T* work) const {
    stage_adjoints(y_prev, x, lambda, grad_y_prev, grad_x, work,
                   impl::NoVisit{});
  }

  // On a device the automatic method takes DEER only up to n = 4 (the
  // engine's FullJacobianDeviceLimit and QuasiJacobianDeviceLimit; 16 for
  // the GRU): a thread that differentiates four RK4 stages in n directions
  // costs about n loop steps, and the loop runs a team a sequence. On the
  // H200 (the MLP field, B = 16, T = 1k) DEER beat the team loop at n = 2
  // (5.2 against 15.7 ms, h = 16), was level with it at n = 8 with full
  // Jacobians (29.6 against 32.7 ms, h = 32) and lost with diagonal ones
  // (103 ms), and lost at n = 16 (470 and 362 against 37 ms, h = 64).
  static constexpr int full_jacobian_device_limit = 4;
  static constexpr int quasi_jacobian_device_limit = 4;

  // --- the step shared by a team's threads, where the field can share its
  // evaluation (team_field, as MlpField): the sequential loop's step on a
  // device. The team's fast memory: each stage's point and the slopes'
  // weighted sum (2n), then the field's team_values().
  static constexpr bool team_loop = impl::deer::TeamLoop<Field>::value;
  KOKKOS_INLINE_FUNCTION int team_values() const {
    return 2 * field.state_size() + field.team_values();
  }
  KOKKOS_INLINE_FUNCTION int team_width() const { return field.team_width(); }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_begin(const Member& member,
                                         T* shared) const {
    field.team_begin(member, shared + 2 * field.state_size());
  }
  // y ← the RK4 step of length x[0] from y (in the team's memory; read by
  // every thread, written by the thread of each state in the last stage),
  // u = x + 1. Ends with the team's barrier.
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_step(const Member& member, T* y, const T* x,
                                        T* shared) const {
    int const n = field.state_size();
    T const dt = x[0];
    T const* const u = x + 1;
    T* const point = shared;
    T* const sum = point + n;
    T* const field_shared = sum + n;
    for (int s = 0; s < 4; ++s)
      field.team_field(
          member, s == 0 ? y : point, u, field_shared, [&](int i, T slope) {
            T const total =
                s == 0 ? rk4_weight(s) * slope : sum[i] + rk4_weight(s) * slope;
            if (s < 3) {
              sum[i] = total;
              point[i] = y[i] + rk4_offset(s + 1) * dt * slope;
            } else {
              y[i] = y[i] + dt / 6 * total;
            }
          });
  }
};

// ---------------------------------------------------------------------------
// The built-in field: a perceptron with one hidden layer of h tanh units,
// the neural ODE of Chen et al. (2018) as its examples build it, with the
// input u_t beside the state:
//   dy/dt = f(y, u) = W_out tanh(W_hidden [y; u] + b_hidden) + b_out.
// deer_neural_ode() evaluates OdeCell<MlpField> over the grid (x as
// OdeCell's: Δ_t, then u_t) and deer_neural_ode_gradients() adds the
// weights' gradients to DeerGradients' (the sums over every step's four
// stages of stage_adjoints' μ, done on the space).
template <class T, class Space>
struct NeuralOdeWeights {
  DeerView2<const T, Space> weight_hidden;  // (h, n + m): [W_y | W_u]
  DeerView1<const T, Space> bias_hidden;    // (h), or empty for zeros
  DeerView2<const T, Space> weight_out;     // (n, h)
  DeerView1<const T, Space> bias_out;       // (n), or empty for zeros
};

// The weights' gradients, each optional (empty: not computed) and
// overwritten.
template <class T, class Space>
struct NeuralOdeWeightGradients {
  DeerView2<T, Space> weight_hidden;
  DeerView1<T, Space> bias_hidden;
  DeerView2<T, Space> weight_out;
  DeerView1<T, Space> bias_out;
};

template <class T, class Space>
struct MlpField {
  using value_type = T;
  NeuralOdeWeights<T, Space> weights;
  int n = 0, m = 0, h = 0;

  KOKKOS_INLINE_FUNCTION int state_size() const { return n; }
  KOKKOS_INLINE_FUNCTION int input_size() const { return m; }
  // The hidden units' values, and δ = sech²(z) ⊙ W_outᵀ μ in reverse.
  KOKKOS_INLINE_FUNCTION int work_size() const { return 2 * h; }

  // a = tanh(W_hidden [y; u] + b_hidden), h values.
  KOKKOS_INLINE_FUNCTION void hidden(const T* y, const T* u, T* a) const {
    auto const& w = weights.weight_hidden;
    for (int k = 0; k < h; ++k) {
      T z = weights.bias_hidden.extent(0) ? weights.bias_hidden(k) : T(0);
      for (int j = 0; j < n; ++j) z += w(k, j) * y[j];
      for (int j = 0; j < m; ++j) z += w(k, n + j) * u[j];
      a[k] = compat::tanh(z);
    }
  }

  KOKKOS_INLINE_FUNCTION void field(const T* y, const T* u, T* dydt,
                                    T* jacobian, DeerJacobian kind,
                                    T* work) const {
    T* const a = work;
    hidden(y, u, a);
    auto const& w_out = weights.weight_out;
    for (int i = 0; i < n; ++i) {
      T s = weights.bias_out.extent(0) ? weights.bias_out(i) : T(0);
      for (int k = 0; k < h; ++k) s += w_out(i, k) * a[k];
      dydt[i] = s;
    }
    if (!jacobian) return;
    // ∂f/∂y = W_out diag(sech² z) W_y.
    for (int k = 0; k < h; ++k) a[k] = 1 - a[k] * a[k];
    auto const& w = weights.weight_hidden;
    bool const full = kind == DeerJacobian::full;
    for (int i = 0; i < n; ++i)
      for (int j = full ? 0 : i; j < (full ? n : i + 1); ++j) {
        T s = 0;
        for (int k = 0; k < h; ++k) s += w_out(i, k) * a[k] * w(k, j);
        jacobian[full ? i * n + j : i] = s;
      }
  }

  // work[h + k] = a_k and work[k] = δ_k = (1 − a_k²) Σ_i W_out(i, k) μ_i.
  KOKKOS_INLINE_FUNCTION void backpropagate(const T* y, const T* u, const T* mu,
                                            T* work) const {
    T* const a = work + h;
    hidden(y, u, a);
    for (int k = 0; k < h; ++k) {
      T s = 0;
      for (int i = 0; i < n; ++i) s += weights.weight_out(i, k) * mu[i];
      work[k] = (1 - a[k] * a[k]) * s;
    }
  }

  // grad_y = W_yᵀ δ and grad_u = W_uᵀ δ (either may be null).
  KOKKOS_INLINE_FUNCTION void inputs_of(const T* delta, T* grad_y,
                                        T* grad_u) const {
    auto const& w = weights.weight_hidden;
    for (int j = 0; grad_y && j < n; ++j) {
      T s = 0;
      for (int k = 0; k < h; ++k) s += w(k, j) * delta[k];
      grad_y[j] = s;
    }
    for (int j = 0; grad_u && j < m; ++j) {
      T s = 0;
      for (int k = 0; k < h; ++k) s += w(k, n + j) * delta[k];
      grad_u[j] = s;
    }
  }

  KOKKOS_INLINE_FUNCTION void field_vector_jacobian(const T* y, const T* u,
                                                    const T* mu, T* grad_y,
                                                    T* grad_u, T* work) const {
    backpropagate(y, u, mu, work);
    inputs_of(work, grad_y, grad_u);
  }

  // --- the field shared by a team's threads (the sequential loop on a
  // device: a thread a sequence there waits on memory at every product) ---
  // The team's fast memory: the weights (copied once a sequence, zeros for
  // absent biases), then the hidden units' values a and their δ.
  static constexpr bool team_loop = true;
  KOKKOS_INLINE_FUNCTION int team_values() const {
    return h * (n + m) + h + n * h + n + 2 * h;
  }
  // The parallelism of a product: the hidden units.
  KOKKOS_INLINE_FUNCTION int team_width() const { return h; }
  struct TeamShared {
    T *w_hidden, *b_hidden, *w_out, *b_out, *a, *delta;
  };
  KOKKOS_INLINE_FUNCTION TeamShared team_shared(T* shared) const {
    TeamShared s;
    s.w_hidden = shared;
    s.b_hidden = s.w_hidden + h * (n + m);
    s.w_out = s.b_hidden + h;
    s.b_out = s.w_out + n * h;
    s.a = s.b_out + n;
    s.delta = s.a + h;
    return s;
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_begin(const Member& member,
                                         T* shared) const {
    TeamShared const s = team_shared(shared);
    int const row = n + m;
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, h * row), [&](int v) {
      s.w_hidden[v] = weights.weight_hidden(v / row, v % row);
    });
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, n * h), [&](int v) {
      s.w_out[v] = weights.weight_out(v / h, v % h);
    });
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, h), [&](int k) {
      s.b_hidden[k] =
          weights.bias_hidden.extent(0) ? weights.bias_hidden(k) : T(0);
    });
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, n), [&](int i) {
      s.b_out[i] = weights.bias_out.extent(0) ? weights.bias_out(i) : T(0);
    });
    member.team_barrier();
  }

  // a = tanh(W_hidden [y; u] + b_hidden), a unit a thread, its product
  // across the thread's vector lanes; then, where `mu` is given,
  // δ = sech²(z) ⊙ W_outᵀ μ, and unit(k, a_k, δ_k) on the unit's thread
  // (all its lanes, for work across them). Ends with the team's barrier.
  template <class Member, class Unit>
  KOKKOS_INLINE_FUNCTION void team_hidden(const Member& member, const T* y,
                                          const T* u, const T* mu,
                                          const TeamShared& s,
                                          const Unit& unit) const {
    int const row = n + m;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, h), [&](int k) {
      T const* const w = s.w_hidden + k * row;
      T z = 0;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(member, row),
          [&](int j, T& acc) { acc += w[j] * (j < n ? y[j] : u[j - n]); }, z);
      T const a = compat::tanh(z + s.b_hidden[k]);
      T delta = 0;
      if (mu) {
        T back = 0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(member, n),
            [&](int i, T& acc) { acc += s.w_out[i * h + k] * mu[i]; }, back);
        delta = (1 - a * a) * back;
      }
      Kokkos::single(Kokkos::PerThread(member), [&] {
        s.a[k] = a;
        s.delta[k] = delta;
      });
      unit(k, a, delta);
    });
    member.team_barrier();
  }

  // slope(i, f_i(y, u)) on the thread of state i, after team_hidden (W_out a
  // across its lanes), once a state. Ends with the team's barrier.
  template <class Member, class Slope>
  KOKKOS_INLINE_FUNCTION void team_field(const Member& member, const T* y,
                                         const T* u, T* shared,
                                         const Slope& slope) const {
    TeamShared const s = team_shared(shared);
    team_hidden(member, y, u, static_cast<const T*>(nullptr), s,
                [](int, T, T) {});
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n), [&](int i) {
      T const* const w = s.w_out + i * h;
      T sum = 0;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(member, h),
          [&](int k, T& acc) { acc += w[k] * s.a[k]; }, sum);
      Kokkos::single(Kokkos::PerThread(member),
                     [&] { slope(i, sum + s.b_out[i]); });
    });
    member.team_barrier();
  }

  // W_hiddenᵀ δ after team_hidden with μ: into(j, (W_hiddenᵀ δ)_j) on the
  // thread of input j < n + m (the state's, then u's; those of u only
  // where `inputs`), once an input. Ends with the team's barrier.
  template <class Member, class Into>
  KOKKOS_INLINE_FUNCTION void team_inputs_of(const Member& member,
                                             const TeamShared& s, bool inputs,
                                             const Into& into) const {
    int const row = n + m;
    Kokkos::parallel_for(
        Kokkos::TeamThreadRange(member, inputs ? row : n), [&](int j) {
          T sum = 0;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(member, h),
              [&](int k, T& acc) {
                acc += s.w_hidden[k * row + j] * s.delta[k];
              },
              sum);
          Kokkos::single(Kokkos::PerThread(member), [&] { into(j, sum); });
        });
    member.team_barrier();
  }
};

// Evaluates the neural ODE on every sequence's grid (OdeCell's layout of x,
// y and y0). float or double. On a device, method = automatic takes the
// sequential loop from n = 5 (OdeCell::full_jacobian_device_limit,
// quasi_jacobian_device_limit); the gradients choose on their own.
template <class Space, class T>
void deer_neural_ode(const Space& space,
                     const NeuralOdeWeights<T, Space>& weights,
                     const DeerInputs<T, Space>& inputs,
                     const DeerResult<T, Space>& result,
                     const DeerOptions& options = {});

// Gradients at the states y that deer_neural_ode returned for the same
// weights and inputs (grad_x: dL/dΔ_t in column 0, dL/du_t after it).
template <class Space, class T>
void deer_neural_ode_gradients(
    const Space& space, const NeuralOdeWeights<T, Space>& weights,
    const DeerInputs<T, Space>& inputs, DeerView3<const T, Space> y,
    const DeerGradients<T, Space>& gradients,
    const NeuralOdeWeightGradients<T, Space>& weight_gradients,
    const DeerOptions& options = {});

}  // namespace softwave
