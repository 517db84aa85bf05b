#pragma once
// PyTorch's recurrent cells and ParaRNN's LSTM (softwave/deer.hpp, RnnCell)
// as DEER cells over projected inputs: step t reads p_t = W_ih x_t + b_ih
// (G·H values, formed once for all steps), so that a step's work is the
// hidden-side product W_hh h alone. Besides the cell interface of deer.hpp,
// each gives the gradients of its gates' pre-activations, from which the
// weights' gradients are summed:
//   gate_gradients(h_prev, p, λ, g_in, g_h, grad_y_prev, work)
// with g_in = dL/d(W_ih x + b_ih) and g_h = dL/d(W_hh h + b_hh) (they
// differ only in GRU's candidate gate, which multiplies the hidden side by
// r).

#include <Kokkos_Core.hpp>
#include <softwave/deer.hpp>
#include <softwave/kokkos_compat.hpp>

// Loops whose trip count is a compile-time constant (a cell of fixed
// shape, FixedHidden below) are unrolled whole in device code, so that a
// step's work arrays live in registers; a runtime trip count leaves the
// pragma without effect. Host compilers do not take it.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define SOFTWAVE_DEER_UNROLL _Pragma("unroll")
#else
#define SOFTWAVE_DEER_UNROLL
#endif

namespace softwave::impl::deer {

template <class T>
KOKKOS_INLINE_FUNCTION T sigmoid(T a) {
  return T(1) / (T(1) + compat::exp(-a));
}
template <class T>
KOKKOS_INLINE_FUNCTION T tanh_of(T a) {
  // tanh from one exp, finite for every finite a.
  T const e = compat::exp(-2 * compat::fabs(a));
  T const t = (T(1) - e) / (T(1) + e);
  return a < 0 ? -t : t;
}

// The gates and the state size of each cell.
KOKKOS_INLINE_FUNCTION constexpr int gates_of(RnnCell cell) {
  return cell == RnnCell::elman ? 1 : (cell == RnnCell::lstm ? 4 : 3);
}
KOKKOS_INLINE_FUNCTION constexpr int state_of(RnnCell cell, int H) {
  return cell == RnnCell::lstm || cell == RnnCell::cifg_lstm ? 2 * H : H;
}

// The hidden-side pre-activations W_hh h + b_hh (rows G·H). FixedHidden > 0
// is the hidden size known at compile time (H must equal it): every loop
// of the cells below then has a constant trip count. With `diagonal`
// (RnnWeights::diagonal_hh) W_hh is stored as its G·H diagonal entries,
// weight(k, 0) for row k and column k mod H: a row's product is then one
// term, and the cells read W_hh through at(). Row k is read at
// first_row + k of weight and bias (one unit's rows, DiagonalUnits).
// cifg_lstm's peepholes C_f, C_o of unit k are read at first_peephole + k
// and first_peephole + H + k.
template <class T, class Space, int FixedHidden = 0>
struct HiddenWeights {
  DeerView2<const T, Space> weight;  // (G·H, H), or (G·H, 1) if diagonal
  DeerView1<const T, Space> bias;    // (G·H), zeros if none were given
  int H = 0;
  bool diagonal = false;
  int first_row = 0;
  DeerView1<const T, Space> peephole;  // (2H), cifg_lstm only
  int first_peephole = 0;

  KOKKOS_INLINE_FUNCTION int size() const {
    if constexpr (FixedHidden > 0)
      return FixedHidden;
    else
      return H;
  }
  KOKKOS_INLINE_FUNCTION T peephole_f(int k) const {
    return peephole(first_peephole + k);
  }
  KOKKOS_INLINE_FUNCTION T peephole_o(int k) const {
    return peephole(first_peephole + size() + k);
  }
  // W_hh(k, j).
  KOKKOS_INLINE_FUNCTION T at(int k, int j) const {
    if (!diagonal) return weight(first_row + k, j);
    return j == k % size() ? weight(first_row + k, 0) : T(0);
  }
  // Row k of W_hh h + b_hh.
  KOKKOS_INLINE_FUNCTION T project_row(int k, const T* h) const {
    return diagonal ? diagonal_row(k, h) : dense_row(k, h);
  }
  KOKKOS_INLINE_FUNCTION T diagonal_row(int k, const T* h) const {
    return bias(first_row + k) + weight(first_row + k, 0) * h[k % size()];
  }
  KOKKOS_INLINE_FUNCTION T dense_row(int k, const T* h) const {
    T sum = bias(first_row + k);
    SOFTWAVE_DEER_UNROLL
    for (int j = 0; j < size(); ++j) sum += weight(first_row + k, j) * h[j];
    return sum;
  }
  // All `rows` rows, the weights' kind tested once, outside the loop: a
  // fixed shape unrolls it whole, and a test a row would be a branch a row
  // in the fused iteration's step.
  KOKKOS_INLINE_FUNCTION void project(const T* h, int rows, T* out) const {
    if (diagonal) {
      SOFTWAVE_DEER_UNROLL
      for (int k = 0; k < rows; ++k) out[k] = diagonal_row(k, h);
      return;
    }
    SOFTWAVE_DEER_UNROLL
    for (int k = 0; k < rows; ++k) out[k] = dense_row(k, h);
  }
  // out = W_hh h + b_hh for `rows` rows, a row a thread of a team, its
  // product across the thread's vector lanes. Ends with the team's barrier.
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_project(const Member& member, const T* h,
                                           int rows, T* out) const {
    int const columns = size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows), [&](int k) {
      T sum = 0;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(member, columns),
          [&](int j, T& acc) { acc += at(k, j) * h[j]; }, sum);
      Kokkos::single(Kokkos::PerThread(member),
                     [&] { out[k] = bias(first_row + k) + sum; });
    });
    member.team_barrier();
  }
  // grad_h += W_hhᵀ g over `rows` rows, a column a thread of a team, its
  // product across the thread's vector lanes. Ends with the team's barrier.
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_project_back(const Member& member,
                                                const T* g, int rows,
                                                T* grad_h) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, size()), [&](int j) {
      T sum = 0;
      Kokkos::parallel_reduce(
          Kokkos::ThreadVectorRange(member, rows),
          [&](int k, T& acc) { acc += at(k, j) * g[k]; }, sum);
      Kokkos::single(Kokkos::PerThread(member), [&] { grad_h[j] += sum; });
    });
    member.team_barrier();
  }
  // grad_h = W_hhᵀ g (+ what grad_h already holds when accumulate).
  KOKKOS_INLINE_FUNCTION void project_back(const T* g, int rows, T* grad_h,
                                           bool accumulate) const {
    int const columns = size();
    if (diagonal) {
      SOFTWAVE_DEER_UNROLL
      for (int j = 0; j < columns; ++j) {
        T sum = accumulate ? grad_h[j] : T(0);
        SOFTWAVE_DEER_UNROLL
        for (int k = j; k < rows; k += columns)
          sum += weight(first_row + k, 0) * g[k];
        grad_h[j] = sum;
      }
      return;
    }
    SOFTWAVE_DEER_UNROLL
    for (int j = 0; j < columns; ++j) {
      T sum = accumulate ? grad_h[j] : T(0);
      SOFTWAVE_DEER_UNROLL
      for (int k = 0; k < rows; ++k) sum += weight(first_row + k, j) * g[k];
      grad_h[j] = sum;
    }
  }
};

// h' = tanh(p + W_hh h + b_hh).
template <class T, class Space, int FixedHidden = 0>
struct ElmanCell {
  using value_type = T;
  HiddenWeights<T, Space, FixedHidden> w;

  KOKKOS_INLINE_FUNCTION int state_size() const { return w.size(); }
  KOKKOS_INLINE_FUNCTION int input_size() const { return w.size(); }
  KOKKOS_INLINE_FUNCTION int work_size() const { return 2 * w.size(); }

  KOKKOS_INLINE_FUNCTION void step(const T* h, const T* p, T* y, T* jacobian,
                                   DeerJacobian kind, T* work) const {
    int const H = w.size();
    w.project(h, H, work);
    SOFTWAVE_DEER_UNROLL
    for (int i = 0; i < H; ++i) {
      T const out = tanh_of(p[i] + work[i]);
      y[i] = out;
      if (!jacobian) continue;
      T const slope = T(1) - out * out;
      if (kind == DeerJacobian::diagonal)
        jacobian[i] = slope * w.at(i, i);
      else
        SOFTWAVE_DEER_UNROLL
      for (int j = 0; j < H; ++j) jacobian[i * H + j] = slope * w.at(i, j);
    }
  }

  // Unit i of the step alone (the engine's UnitSteps): row(i, y_i, entry),
  // entry(j) = ∂y_i/∂h_j.
  KOKKOS_INLINE_FUNCTION int units() const { return w.size(); }
  template <class Row>
  KOKKOS_INLINE_FUNCTION void step_unit(int i, const T* h, const T* p,
                                        const Row& row) const {
    T const out = tanh_of(p[i] + w.project_row(i, h));
    T const slope = T(1) - out * out;
    row(i, out, [&](int j) { return slope * w.at(i, j); });
  }

  // y_i of the step from h, p and hp = W_hh h + b_hh (y may be h).
  KOKKOS_INLINE_FUNCTION void unit_step(int i, const T* /*h*/, const T* p,
                                        const T* hp, T* y) const {
    y[i] = tanh_of(p[i] + hp[i]);
  }
  // For dL/dh' = λ: unit i's hidden-side gate gradient g_h[i], and its
  // state's gradient apart from W_hhᵀ g_h (none: direct[i] = 0).
  KOKKOS_INLINE_FUNCTION void unit_adjoint(int i, const T* /*h*/, const T* p,
                                           const T* hp, const T* lambda, T* g_h,
                                           T* direct) const {
    T const out = tanh_of(p[i] + hp[i]);
    g_h[i] = lambda[i] * (T(1) - out * out);
    direct[i] = 0;
  }

  KOKKOS_INLINE_FUNCTION void gate_gradients(const T* h, const T* p,
                                             const T* lambda, T* g_in, T* g_h,
                                             T* grad_h, T* work) const {
    int const H = w.size();
    w.project(h, H, work);
    SOFTWAVE_DEER_UNROLL
    for (int i = 0; i < H; ++i) {
      T const out = tanh_of(p[i] + work[i]);
      g_in[i] = lambda[i] * (T(1) - out * out);
      if (g_h) g_h[i] = g_in[i];
    }
    if (grad_h) w.project_back(g_in, H, grad_h, false);
  }

  KOKKOS_INLINE_FUNCTION void vector_jacobian(const T* h, const T* p,
                                              const T* lambda, T* grad_h,
                                              T* grad_p, T* work) const {
    T* const g = grad_p ? grad_p : work + w.size();
    gate_gradients(h, p, lambda, g, static_cast<T*>(nullptr), grad_h, work);
  }
};

// PyTorch's GRU: gates r, z, n in that order.
template <class T, class Space, int FixedHidden = 0>
struct GruCell {
  using value_type = T;
  HiddenWeights<T, Space, FixedHidden> w;

  KOKKOS_INLINE_FUNCTION int state_size() const { return w.size(); }
  KOKKOS_INLINE_FUNCTION int input_size() const { return 3 * w.size(); }
  KOKKOS_INLINE_FUNCTION int work_size() const { return 9 * w.size(); }

  // Unit i's gates from p and hp = W_hh h + b_hh.
  struct Gates {
    T r, z, n;
  };
  KOKKOS_INLINE_FUNCTION Gates gates(int i, const T* p, const T* hp) const {
    int const H = w.size();
    return gates_of(i, p, hp[i], hp[H + i], hp[2 * H + i]);
  }
  // The same from unit i's three rows of hp.
  KOKKOS_INLINE_FUNCTION Gates gates_of(int i, const T* p, T hp_r, T hp_z,
                                        T hp_n) const {
    int const H = w.size();
    return gates_from(p[i], p[H + i], p[2 * H + i], hp_r, hp_z, hp_n);
  }
  // The same from unit i's three rows of p (p_r = p[i], ...).
  KOKKOS_INLINE_FUNCTION static Gates gates_from(T p_r, T p_z, T p_n, T hp_r,
                                                 T hp_z, T hp_n) {
    Gates g;
    g.r = sigmoid(p_r + hp_r);
    g.z = sigmoid(p_z + hp_z);
    g.n = tanh_of(p_n + g.r * hp_n);
    return g;
  }
  // Row i of the Jacobian: ∂h'_i/∂h_j = a W_n(i,j) + c W_r(i,j) +
  // e W_z(i,j) + z δ_ij, from unit i's gates, its row of W_n h + b_n and h_i.
  struct Row {
    T a, c, e, z;
  };
  KOKKOS_INLINE_FUNCTION static Row row_of(const Gates& g, T hp_n, T h_i) {
    T const dn = (T(1) - g.z) * (T(1) - g.n * g.n);
    return {dn * g.r, dn * hp_n * g.r * (T(1) - g.r),
            (h_i - g.n) * g.z * (T(1) - g.z), g.z};
  }
  KOKKOS_INLINE_FUNCTION T entry(int i, int j, const Row& row) const {
    int const H = w.size();
    return entry_of(row, w.at(i, j), w.at(H + i, j), w.at(2 * H + i, j),
                    i == j);
  }
  // The same from W_hh's entries (i, j) of the gates r, z, n.
  KOKKOS_INLINE_FUNCTION static T entry_of(const Row& row, T w_r, T w_z, T w_n,
                                           bool diagonal) {
    return row.a * w_n + row.c * w_r + row.e * w_z + (diagonal ? row.z : T(0));
  }
  // For dL/dh' = λ: unit i's input-side gate gradients (r, z, n), the
  // hidden side's being (r, z, n·reset), and λ_i z (dh'_i/dh_i's term).
  struct UnitGradients {
    T r, z, n, reset, direct;
  };
  KOKKOS_INLINE_FUNCTION UnitGradients unit_gradients(int i, const T* h,
                                                      const T* p, const T* hp,
                                                      const T* lambda) const {
    int const H = w.size();
    Gates const g = gates(i, p, hp);
    UnitGradients u;
    u.n = lambda[i] * (T(1) - g.z) * (T(1) - g.n * g.n);
    u.r = u.n * hp[2 * H + i] * g.r * (T(1) - g.r);
    u.z = lambda[i] * (h[i] - g.n) * g.z * (T(1) - g.z);
    u.reset = g.r;
    u.direct = lambda[i] * g.z;
    return u;
  }
  // Unit i's hidden-side gate gradients (rows i, H + i, 2H + i of g_h) and
  // its state's gradient apart from W_hhᵀ g_h.
  KOKKOS_INLINE_FUNCTION void unit_adjoint(int i, const T* h, const T* p,
                                           const T* hp, const T* lambda, T* g_h,
                                           T* direct) const {
    int const H = w.size();
    UnitGradients const u = unit_gradients(i, h, p, hp, lambda);
    g_h[i] = u.r;
    g_h[H + i] = u.z;
    g_h[2 * H + i] = u.n * u.reset;
    direct[i] = u.direct;
  }

  // h'_i from its gates and h_i.
  KOKKOS_INLINE_FUNCTION static T next(const Gates& g, T h) {
    return (T(1) - g.z) * g.n + g.z * h;
  }
  // y_i of the step (y may be h: only h_i is read).
  KOKKOS_INLINE_FUNCTION void unit_step(int i, const T* h, const T* p,
                                        const T* hp, T* y) const {
    y[i] = next(gates(i, p, hp), h[i]);
  }

  KOKKOS_INLINE_FUNCTION void step(const T* h, const T* p, T* y, T* jacobian,
                                   DeerJacobian kind, T* work) const {
    int const H = w.size();
    T* const hp = work;  // W_hh h + b_hh
    w.project(h, 3 * H, hp);
    SOFTWAVE_DEER_UNROLL
    for (int i = 0; i < H; ++i) {
      Gates const g = gates(i, p, hp);
      y[i] = next(g, h[i]);
      if (!jacobian) continue;
      Row const row = row_of(g, hp[2 * H + i], h[i]);
      if (kind == DeerJacobian::diagonal)
        jacobian[i] = entry(i, i, row);
      else
        SOFTWAVE_DEER_UNROLL
      for (int j = 0; j < H; ++j) jacobian[i * H + j] = entry(i, j, row);
    }
  }

  // Unit i of the step alone (the engine's UnitSteps): row(i, h'_i, entry),
  // entry(j) = ∂h'_i/∂h_j, from its three rows of W_hh h + b_hh.
  KOKKOS_INLINE_FUNCTION int units() const { return w.size(); }
  template <class RowOut>
  KOKKOS_INLINE_FUNCTION void step_unit(int i, const T* h, const T* p,
                                        const RowOut& out) const {
    int const H = w.size();
    T const hp_n = w.project_row(2 * H + i, h);
    Gates const g =
        gates_of(i, p, w.project_row(i, h), w.project_row(H + i, h), hp_n);
    Row const row = row_of(g, hp_n, h[i]);
    out(i, next(g, h[i]), [&](int j) { return entry(i, j, row); });
  }

  KOKKOS_INLINE_FUNCTION void gate_gradients(const T* h, const T* p,
                                             const T* lambda, T* g_in, T* g_h,
                                             T* grad_h, T* work) const {
    int const H = w.size();
    T* const hp = work;
    T* const gh = g_h ? g_h : work + 3 * H;
    w.project(h, 3 * H, hp);
    SOFTWAVE_DEER_UNROLL
    for (int i = 0; i < H; ++i) {
      UnitGradients const u = unit_gradients(i, h, p, hp, lambda);
      g_in[i] = u.r;
      g_in[H + i] = u.z;
      g_in[2 * H + i] = u.n;
      gh[i] = u.r;
      gh[H + i] = u.z;
      gh[2 * H + i] = u.n * u.reset;
      // Unit i reads h_i and λ_i alone, so grad_h may be either.
      if (grad_h) grad_h[i] = u.direct;
    }
    if (grad_h) w.project_back(gh, 3 * H, grad_h, /*accumulate=*/true);
  }

  KOKKOS_INLINE_FUNCTION void vector_jacobian(const T* h, const T* p,
                                              const T* lambda, T* grad_h,
                                              T* grad_p, T* work) const {
    T* const g = grad_p ? grad_p : work + 6 * w.size();
    gate_gradients(h, p, lambda, g, static_cast<T*>(nullptr), grad_h, work);
  }
};

// What a cell with state (h, c) (n = 2H) gives of unit k for its step,
// Jacobian and gradients: h'_k = o ⊙ tanh(c'_k), o's pre-activation reading
// W_hh's row o_row, and c'_k depending on h through the pre-activations of
// the gates in c_rows (∂c'_k/∂ each: dc_dpre) and on c through c_k alone.
template <class T, int CGates>
struct CellStateUnit {
  static constexpr int kCGates = CGates;
  T o, c, tc;  // output gate, new cell state, tanh of it
  T dh_do;     // ∂h'_k/∂(o's pre-activation)
  T dh_dc;     // dh'_k/dc'_k (through tanh(c'_k), and o where it reads c')
  T dc_dc;     // ∂c'_k/∂c_k
  int o_row;
  int c_rows[CGates];
  T dc_dpre[CGates];
};

// Unit k's G rows of W_hh h + b_hh, read as the whole array's rows g·H + k
// are (a cell's unit() reads a[g·H + k]).
template <class T, int G>
struct UnitRows {
  T value[G];
  int H;
  KOKKOS_INLINE_FUNCTION T operator[](int row) const { return value[row / H]; }
};

// The step, Jacobian and gradients of a cell with state (h, c) from its
// units (Cell::unit, CellStateUnit) and its G gates' rows: shared by
// PyTorch's LSTM and ParaRNN's.
template <class Cell, class T, int G>
struct CellStateSteps {
  KOKKOS_INLINE_FUNCTION const Cell& cell() const {
    return static_cast<const Cell&>(*this);
  }
  KOKKOS_INLINE_FUNCTION int state_size() const { return 2 * cell().w.size(); }
  KOKKOS_INLINE_FUNCTION int input_size() const { return G * cell().w.size(); }
  // The hidden-side pre-activations, then (vector_jacobian) the gates'
  // gradients.
  KOKKOS_INLINE_FUNCTION int work_size() const {
    return 2 * G * cell().w.size();
  }

  // Unit k's (h'_k, c'_k) from a = W_hh h + b_hh (y may be state: only
  // c_k is read).
  KOKKOS_INLINE_FUNCTION void unit_step(int k, const T* state, const T* p,
                                        const T* a, T* y) const {
    auto const u = cell().unit(state, p, a, k);
    y[k] = u.o * u.tc;
    y[cell().w.size() + k] = u.c;
  }

  KOKKOS_INLINE_FUNCTION void step(const T* state, const T* p, T* y,
                                   T* jacobian, DeerJacobian kind,
                                   T* work) const {
    auto const& w = cell().w;
    int const H = w.size(), n = 2 * H;
    T* const a = work;
    w.project(state, G * H, a);
    SOFTWAVE_DEER_UNROLL
    for (int k = 0; k < H; ++k) {
      auto const u = cell().unit(state, p, a, k);
      y[k] = u.o * u.tc;
      y[H + k] = u.c;
      if (!jacobian) continue;
      if (kind == DeerJacobian::diagonal) {
        jacobian[k] = u.dh_do * w.at(u.o_row, k) + u.dh_dc * dc_dh(u, k);
        jacobian[H + k] = u.dc_dc;
        continue;
      }
      SOFTWAVE_DEER_UNROLL
      for (int j = 0; j < H; ++j) {
        T const c_h = dc_dh(u, j);
        jacobian[(H + k) * n + j] = c_h;
        jacobian[k * n + j] = u.dh_do * w.at(u.o_row, j) + u.dh_dc * c_h;
        jacobian[(H + k) * n + H + j] = j == k ? u.dc_dc : T(0);
        jacobian[k * n + H + j] = j == k ? u.dh_dc * u.dc_dc : T(0);
      }
    }
  }

  // ∂c'_k/∂h_j of unit u (k).
  template <class Unit>
  KOKKOS_INLINE_FUNCTION T dc_dh(const Unit& u, int j) const {
    T sum = 0;
    SOFTWAVE_DEER_UNROLL
    for (int g = 0; g < Unit::kCGates; ++g)
      sum += u.dc_dpre[g] * cell().w.at(u.c_rows[g], j);
    return sum;
  }

  // Unit k of the step alone (the engine's UnitSteps): row(s, y_s, entry)
  // for its states s = k (h'_k) and H + k (c'_k), entry(j) = ∂y_s/∂state_j,
  // from its G rows of W_hh h + b_hh.
  KOKKOS_INLINE_FUNCTION int units() const { return cell().w.size(); }
  template <class Row>
  KOKKOS_INLINE_FUNCTION void step_unit(int k, const T* state, const T* p,
                                        const Row& row) const {
    auto const& w = cell().w;
    int const H = w.size();
    UnitRows<T, G> a{{}, H};
    SOFTWAVE_DEER_UNROLL
    for (int g = 0; g < G; ++g) a.value[g] = w.project_row(g * H + k, state);
    auto const u = cell().unit(state, p, a, k);
    row(k, u.o * u.tc, [&](int j) {
      if (j < H) return u.dh_do * w.at(u.o_row, j) + u.dh_dc * dc_dh(u, j);
      return j - H == k ? u.dh_dc * u.dc_dc : T(0);
    });
    row(H + k, u.c, [&](int j) {
      if (j < H) return dc_dh(u, j);
      return j - H == k ? u.dc_dc : T(0);
    });
  }

  // For dL/d(h', c') = λ: unit k's gate gradients (its G rows of g, the
  // same on both sides) and, where `direct` is given, its state's gradient
  // apart from W_hhᵀ g: c_k's (through c'_k), none for h_k.
  KOKKOS_INLINE_FUNCTION void unit_adjoint(int k, const T* state, const T* p,
                                           const T* a, const T* lambda, T* g,
                                           T* direct) const {
    int const H = cell().w.size();
    auto const u = cell().unit(state, p, a, k);
    T const dc = lambda[H + k] + lambda[k] * u.dh_dc;  // dL/dc'_k
    SOFTWAVE_DEER_UNROLL
    for (int q = 0; q < std::decay_t<decltype(u)>::kCGates; ++q)
      g[u.c_rows[q]] = dc * u.dc_dpre[q];
    g[u.o_row] = lambda[k] * u.dh_do;
    if (!direct) return;
    direct[k] = 0;
    direct[H + k] = dc * u.dc_dc;
  }

  KOKKOS_INLINE_FUNCTION void gate_gradients(const T* state, const T* p,
                                             const T* lambda, T* g_in, T* g_h,
                                             T* grad_state, T* work) const {
    auto const& w = cell().w;
    int const H = w.size();
    T* const a = work;
    w.project(state, G * H, a);
    SOFTWAVE_DEER_UNROLL
    for (int k = 0; k < H; ++k)
      unit_adjoint(k, state, p, a, lambda, g_in, grad_state);
    if (g_h) SOFTWAVE_DEER_UNROLL
    for (int k = 0; k < G * H; ++k) g_h[k] = g_in[k];
    if (grad_state) w.project_back(g_in, G * H, grad_state, false);
  }

  KOKKOS_INLINE_FUNCTION void vector_jacobian(const T* state, const T* p,
                                              const T* lambda, T* grad_state,
                                              T* grad_p, T* work) const {
    T* const g = grad_p ? grad_p : work + G * cell().w.size();
    gate_gradients(state, p, lambda, g, static_cast<T*>(nullptr), grad_state,
                   work);
  }
};

// PyTorch's LSTM: gates i, f, g, o in that order; state (h, c).
template <class T, class Space, int FixedHidden = 0>
struct LstmCell : CellStateSteps<LstmCell<T, Space, FixedHidden>, T, /*G=*/4> {
  using value_type = T;
  HiddenWeights<T, Space, FixedHidden> w;

  // a: the hidden-side pre-activations W_hh h + b_hh.
  template <class A>
  KOKKOS_INLINE_FUNCTION CellStateUnit<T, 3> unit(const T* state, const T* p,
                                                  const A& a, int k) const {
    int const H = w.size();
    T const i = sigmoid(p[k] + a[k]);
    T const f = sigmoid(p[H + k] + a[H + k]);
    T const g = tanh_of(p[2 * H + k] + a[2 * H + k]);
    CellStateUnit<T, 3> u;
    u.o = sigmoid(p[3 * H + k] + a[3 * H + k]);
    u.c = f * state[H + k] + i * g;
    u.tc = tanh_of(u.c);
    u.dh_do = u.o * (T(1) - u.o) * u.tc;
    u.dh_dc = u.o * (T(1) - u.tc * u.tc);
    u.dc_dc = f;
    u.o_row = 3 * H + k;
    u.c_rows[0] = k;
    u.dc_dpre[0] = g * i * (T(1) - i);
    u.c_rows[1] = H + k;
    u.dc_dpre[1] = state[H + k] * f * (T(1) - f);
    u.c_rows[2] = 2 * H + k;
    u.dc_dpre[2] = i * (T(1) - g * g);
    return u;
  }
};

// ParaRNN's LSTM (RnnCell::cifg_lstm): gates f, o, c in that order, the
// input gate coupled to the forget gate, peepholes from the previous cell
// state into f and from the new one into o; state (h, c).
template <class T, class Space, int FixedHidden = 0>
struct CifgLstmCell
    : CellStateSteps<CifgLstmCell<T, Space, FixedHidden>, T, /*G=*/3> {
  using value_type = T;
  HiddenWeights<T, Space, FixedHidden> w;

  template <class A>
  KOKKOS_INLINE_FUNCTION CellStateUnit<T, 2> unit(const T* state, const T* p,
                                                  const A& a, int k) const {
    int const H = w.size();
    T const c_prev = state[H + k];
    T const f = sigmoid(p[k] + a[k] + w.peephole_f(k) * c_prev);
    T const candidate = tanh_of(p[2 * H + k] + a[2 * H + k]);
    CellStateUnit<T, 2> u;
    u.c = f * c_prev + (T(1) - f) * candidate;
    u.o = sigmoid(p[H + k] + a[H + k] + w.peephole_o(k) * u.c);
    u.tc = tanh_of(u.c);
    T const dc_df = (c_prev - candidate) * f * (T(1) - f);
    u.dh_do = u.o * (T(1) - u.o) * u.tc;
    u.dh_dc = u.dh_do * w.peephole_o(k) + u.o * (T(1) - u.tc * u.tc);
    u.dc_dc = f + dc_df * w.peephole_f(k);
    u.o_row = H + k;
    u.c_rows[0] = k;
    u.dc_dpre[0] = dc_df;
    u.c_rows[1] = 2 * H + k;
    u.dc_dpre[1] = (T(1) - f) * (T(1) - candidate * candidate);
    return u;
  }
};

// Any of the four, chosen at run time: one type for the solver's kernels
// instead of four (a quarter of the code to compile, for a branch per step
// that every thread takes the same way). FixedHidden > 0 and FixedKind >= 0
// (an RnnCell) fix the hidden size and the cell at compile time instead
// (with_fixed_shape): the CUDA backend's fused iteration instantiates those
// for the common small sizes, where a step is a few dozen instructions and
// the generic one's branches and work arrays in memory cost several times
// that.
template <class T, class Space, int FixedHidden = 0, int FixedKind = -1>
struct TorchCell {
  using value_type = T;
  // The state size where the shape is fixed (else 0).
  static constexpr int kFixedState = FixedHidden > 0 && FixedKind >= 0
                                         ? state_of(RnnCell(FixedKind),
                                                    FixedHidden)
                                         : 0;
  // Its hidden size and the gates' rows G·H where the shape is fixed.
  static constexpr int kFixedHidden = kFixedState > 0 ? FixedHidden : 0;
  static constexpr int kFixedRows =
      kFixedState > 0 ? gates_of(RnnCell(FixedKind)) * FixedHidden : 0;
  // A step's work values where the shape is fixed: the most any cell asks
  // (GRU's 9H).
  static constexpr int kFixedWork = 9 * kFixedHidden;
  // The cell's kind where the shape is fixed (an RnnCell, else -1).
  static constexpr int kFixedKind = kFixedState > 0 ? FixedKind : -1;
  RnnCell kind;
  HiddenWeights<T, Space, FixedHidden> w;

  KOKKOS_INLINE_FUNCTION RnnCell cell_kind() const {
    if constexpr (FixedKind >= 0)
      return RnnCell(FixedKind);
    else
      return kind;
  }
  // body(cell) with the cell of `kind`.
  template <class Body>
  KOKKOS_INLINE_FUNCTION auto visit(const Body& body) const {
    if constexpr (FixedKind == int(RnnCell::elman))
      return body(ElmanCell<T, Space, FixedHidden>{w});
    else if constexpr (FixedKind == int(RnnCell::gru))
      return body(GruCell<T, Space, FixedHidden>{w});
    else if constexpr (FixedKind == int(RnnCell::lstm))
      return body(LstmCell<T, Space, FixedHidden>{{}, w});
    else if constexpr (FixedKind == int(RnnCell::cifg_lstm))
      return body(CifgLstmCell<T, Space, FixedHidden>{{}, w});
    else
      switch (kind) {
        case RnnCell::elman:
          return body(ElmanCell<T, Space, FixedHidden>{w});
        case RnnCell::gru:
          return body(GruCell<T, Space, FixedHidden>{w});
        case RnnCell::lstm:
          return body(LstmCell<T, Space, FixedHidden>{{}, w});
        default:
          return body(CifgLstmCell<T, Space, FixedHidden>{{}, w});
      }
  }
  KOKKOS_INLINE_FUNCTION int gates() const { return gates_of(cell_kind()); }
  KOKKOS_INLINE_FUNCTION int state_size() const {
    return state_of(cell_kind(), w.size());
  }
  KOKKOS_INLINE_FUNCTION int input_size() const { return gates() * w.size(); }
  KOKKOS_INLINE_FUNCTION int work_size() const {
    return visit([](const auto& cell) { return cell.work_size(); });
  }
  KOKKOS_INLINE_FUNCTION void step(const T* y_prev, const T* p, T* y,
                                   T* jacobian, DeerJacobian mode,
                                   T* work) const {
    visit([&](const auto& cell) {
      cell.step(y_prev, p, y, jacobian, mode, work);
      return 0;
    });
  }
  KOKKOS_INLINE_FUNCTION void gate_gradients(const T* y_prev, const T* p,
                                             const T* lambda, T* g_in, T* g_h,
                                             T* grad_y_prev, T* work) const {
    visit([&](const auto& cell) {
      cell.gate_gradients(y_prev, p, lambda, g_in, g_h, grad_y_prev, work);
      return 0;
    });
  }
  KOKKOS_INLINE_FUNCTION void vector_jacobian(const T* y_prev, const T* p,
                                              const T* lambda, T* grad_y_prev,
                                              T* grad_p, T* work) const {
    visit([&](const auto& cell) {
      cell.vector_jacobian(y_prev, p, lambda, grad_y_prev, grad_p, work);
      return 0;
    });
  }

  // A step's linearisation a unit a thread (the engine's UnitSteps): each
  // of the H units gives its states and their Jacobian rows from its own
  // rows of W_hh h + b_hh. The fixed shapes keep a thread a step (their
  // steps live in registers).
  static constexpr bool unit_steps = FixedHidden == 0;
  KOKKOS_INLINE_FUNCTION int units() const { return w.size(); }
  template <class Row>
  KOKKOS_INLINE_FUNCTION void step_unit(int i, const T* y_prev, const T* p,
                                        const Row& row) const {
    visit([&](const auto& cell) {
      cell.step_unit(i, y_prev, p, row);
      return 0;
    });
  }

  // The step shared by a team's threads (the engine's TeamLoop): the G·H
  // rows of W_hh h across its threads, then the units. Dense hidden
  // weights only (team_width 0 otherwise: a diagonal row is one term); the
  // fixed shapes keep a thread a sequence (their steps live in registers).
  static constexpr bool team_loop = FixedHidden == 0;
  KOKKOS_INLINE_FUNCTION int team_values() const { return gates() * w.size(); }
  KOKKOS_INLINE_FUNCTION int team_width() const {
    return w.diagonal ? 0 : gates() * w.size();
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_begin(const Member&, T*) const {}
  // The adjoint's step shared by a team (the engine's Adjoint):
  // grad_state = Jᵀ λ at (state, p), with the rows' values and their
  // gradients in `shared` (team_adjoint_values()). Ends with the team's
  // barrier.
  static constexpr bool team_adjoint = FixedHidden == 0;
  KOKKOS_INLINE_FUNCTION int team_adjoint_values() const {
    return 2 * gates() * w.size();
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_vector_jacobian(const Member& member,
                                                   const T* state, const T* p,
                                                   const T* lambda,
                                                   T* grad_state,
                                                   T* shared) const {
    int const H = w.size(), rows = gates() * H;
    T* const hp = shared;
    T* const g = hp + rows;
    w.team_project(member, state, rows, hp);
    visit([&](const auto& cell) {
      Kokkos::parallel_for(Kokkos::TeamVectorRange(member, H), [&](int i) {
        cell.unit_adjoint(i, state, p, hp, lambda, g, grad_state);
      });
      return 0;
    });
    member.team_barrier();
    w.team_project_back(member, g, rows, grad_state);
  }

  // y ← the step from y (in the team's memory), hp: the rows' values.
  // Ends with the team's barrier.
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_step(const Member& member, T* y, const T* p,
                                        T* hp) const {
    int const H = w.size();
    w.team_project(member, y, gates() * H, hp);
    visit([&](const auto& cell) {
      Kokkos::parallel_for(Kokkos::TeamVectorRange(member, H),
                           [&](int i) { cell.unit_step(i, y, p, hp, y); });
      return 0;
    });
    member.team_barrier();
  }
};

// A cell with diagonal hidden weights as H independent cells of hidden
// size 1: a unit sees only its own past, so sequence b of a unit-major
// batch (softwave/src/deer/deer.cpp: sequences b·H … b·H + H − 1 are the
// units of the caller's sequence b) is unit b mod H, with that unit's G
// weights (and biases) in rows (b mod H)·G … of a unit-major copy. Each
// unit's state is 1 value (h), or 2 for LSTM (h, c), and its input the G
// gates' projections: B·H short recurrences instead of B wide ones, which
// parallel scans take at the speed of the hidden size 1. FixedKind >= 0
// (an RnnCell) fixes the cell at compile time (with_fixed_kind).
template <class T, class Space, int FixedKind = -1>
struct DiagonalUnits {
  using value_type = T;
  using Unit = TorchCell<T, Space, 1, FixedKind>;
  // The state size where the cell is fixed (else 0).
  static constexpr int kFixedState = Unit::kFixedState;
  RnnCell kind;
  DeerView2<const T, Space> weight;  // (H·G, 1), unit-major
  DeerView1<const T, Space> bias;    // (H·G), unit-major
  int H = 1;
  DeerView1<const T, Space> peephole;  // cifg_lstm's (H·2), unit-major

  KOKKOS_INLINE_FUNCTION Unit cell_of(int b) const {
    Unit unit{kind, {weight, bias, 1, true, 0, peephole, 0}};
    unit.w.first_row = (b % H) * unit.gates();
    unit.w.first_peephole = (b % H) * 2;
    return unit;
  }
  KOKKOS_INLINE_FUNCTION int state_size() const {
    return Unit{kind, {}}.state_size();
  }
  KOKKOS_INLINE_FUNCTION int input_size() const {
    return Unit{kind, {}}.input_size();
  }
  KOKKOS_INLINE_FUNCTION int work_size() const {
    return Unit{kind, {}}.work_size();
  }
};

// body(fixed) with `units` as DiagonalUnits of the same weights with their
// cell fixed at compile time, returning what body returns.
template <class T, class Space, class Body>
bool with_fixed_kind(const DiagonalUnits<T, Space>& units, const Body& body) {
  auto const as = [&](auto kind) {
    return body(DiagonalUnits<T, Space, decltype(kind)::value>{
        units.kind, units.weight, units.bias, units.H, units.peephole});
  };
  switch (units.kind) {
    case RnnCell::elman:
      return as(std::integral_constant<int, int(RnnCell::elman)>());
    case RnnCell::gru:
      return as(std::integral_constant<int, int(RnnCell::gru)>());
    case RnnCell::lstm:
      return as(std::integral_constant<int, int(RnnCell::lstm)>());
    default:
      return as(std::integral_constant<int, int(RnnCell::cifg_lstm)>());
  }
}

// The hidden sizes at which with_fixed_shape finds a fixed-shape cell.
constexpr int kFixedHiddenSizes[] = {1, 2, 4, 8, 16};

namespace fixed_shape {
template <int Index, class T, class Space, class Body>
bool visit_sizes(const TorchCell<T, Space>& cell, const Body& body) {
  if constexpr (Index == int(sizeof(kFixedHiddenSizes) / sizeof(int))) {
    return false;
  } else {
    constexpr int H = kFixedHiddenSizes[Index];
    if (cell.w.H != H) return visit_sizes<Index + 1>(cell, body);
    // ParaRNN's LSTM comes with diagonal hidden weights, as units
    // (with_fixed_kind); a dense one takes the generic cell.
    if (cell.kind == RnnCell::cifg_lstm) return false;
    HiddenWeights<T, Space, H> const w{cell.w.weight, cell.w.bias, H,
                                       cell.w.diagonal};
    switch (cell.kind) {
      case RnnCell::elman:
        return body(TorchCell<T, Space, H, int(RnnCell::elman)>{cell.kind, w});
      case RnnCell::gru:
        return body(TorchCell<T, Space, H, int(RnnCell::gru)>{cell.kind, w});
      default:
        return body(TorchCell<T, Space, H, int(RnnCell::lstm)>{cell.kind, w});
    }
  }
}
}  // namespace fixed_shape

// body(fixed) with `cell` as a TorchCell of fixed shape (the same weights,
// its hidden size and kind at compile time) where its hidden size is one
// of kFixedHiddenSizes, returning what body returns (a bool: whether it
// could use the cell); false for other sizes.
template <class T, class Space, class Body>
bool with_fixed_shape(const TorchCell<T, Space>& cell, const Body& body) {
  return fixed_shape::visit_sizes<0>(cell, body);
}

}  // namespace softwave::impl::deer
