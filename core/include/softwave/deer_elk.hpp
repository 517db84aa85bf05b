#pragma once
// The damped (Levenberg–Marquardt) update of DEER with full Jacobians: ELK
// (Gonzalez et al., NeurIPS 2024). softwave/deer_engine.hpp includes this
// after DampedStep, whose scalar scans are the same update with the
// Jacobians' diagonal (quasi-ELK).
//
// Each iteration's update δ minimises
//   Σ_s |δ_s − F_s δ_{s−1} − u_s|² + λ Σ_s |δ_s|²,   δ_{−1} = 0,
// F_s the Jacobian at step s (n×n) and u_s the residual f(z_{s−1}) − z_s:
// the posterior mean of the linear-Gaussian state-space model
//   δ_s = F_s δ_{s−1} + u_s + w_s,  w_s ~ N(0, I);  0 = δ_s + v_s,
//   v_s ~ N(0, I/λ).
// Its Kalman filter is a parallel scan over the filtering elements of
// Särkkä and García-Fernández (IEEE TAC 2021), (A, b, C, η, J), which for
// this model (observation matrix and noises the identity, κ = 1/(1 + λ))
// are
//   A = κ F_s,  b = κ u_s,  C = κ I,  η = −λκ F_sᵀ u_s,  J = λκ F_sᵀ F_s
// (F_0 = 0: δ_{−1} is known); the prefix of elements 0 … s carries the
// filtered mean m_s in b and covariance P_s in C. The Rauch–Tung–Striebel
// smoother is then an affine map back in s,
//   δ_s = E_s δ_{s+1} + g_s,  E_s = P_s F_{s+1}ᵀ Σ_{s+1}⁻¹,
//   g_s = m_s − E_s (F_{s+1} m_s + u_{s+1}),  Σ_{s+1} = F_{s+1} P_s F_{s+1}ᵀ +
//   I, δ_{L−1} = m_{L−1},
// composed as any affine map. Both scans run a thread per chunk of steps:
// compose the chunk, carry across the sequence's chunks (a thread per
// sequence), replay the chunk from what is carried in. The filter's replay
// is the plain Kalman step, m_s = (I + λΣ_s)⁻¹ (F_s m_{s−1} + u_s) and
// P_s = (I + λΣ_s)⁻¹ Σ_s, Σ_s = F_s P_{s−1} F_sᵀ + I.
//
// Work is O(n³) a step (a few products and one solve of n×n systems);
// memory the Jacobians and covariances, (B, T, n²) each, and 13n² + 8n
// values a thread. The carry is sequential over a sequence's chunks, so
// chunks hold about √T steps or more (Solver::damped).

// (Not a header of its own: it uses the engine's ThreadItems, DampedStep
// and label, defined before the engine includes it.)

#include <Kokkos_Core.hpp>
#include <cstdint>

namespace softwave::impl::deer {

// --- dense algebra on a thread's own arrays ---------------------------------

// C ← α op(A) op(B) + β C, op(A) n×k and op(B) k×m, row-major with leading
// dimensions lda, ldb, ldc; `ta` / `tb`: A / B stored transposed. β = 0
// does not read C. C may not alias A or B.
template <class T>
KOKKOS_INLINE_FUNCTION void gemm(bool ta, bool tb, int n, int k, int m, T alpha,
                                 const T* A, int lda, const T* B, int ldb,
                                 T beta, T* C, int ldc) {
  for (int r = 0; r < n; ++r)
    for (int c = 0; c < m; ++c) {
      T sum = 0;
      for (int q = 0; q < k; ++q)
        sum += (ta ? A[q * lda + r] : A[r * lda + q]) *
               (tb ? B[c * ldb + q] : B[q * ldb + c]);
      C[r * ldc + c] =
          beta == T(0) ? alpha * sum : alpha * sum + beta * C[r * ldc + c];
    }
}

// B ← M⁻¹ B (M n×n, overwritten by its elimination; B n×m, leading
// dimension ldb) by Gaussian elimination with partial pivoting. The
// systems here are I + (positive semidefinite)·(positive semidefinite) or
// symmetric positive definite: never singular in exact arithmetic; a zero
// pivot gives non-finite values, which the judge reads as divergence.
template <class T>
KOKKOS_INLINE_FUNCTION void solve_in_place(T* M, int n, T* B, int m, int ldb) {
  for (int p = 0; p < n; ++p) {
    int pivot = p;
    for (int r = p + 1; r < n; ++r)
      if (compat::fabs(M[r * n + p]) > compat::fabs(M[pivot * n + p]))
        pivot = r;
    if (pivot != p) {
      for (int c = 0; c < n; ++c) {
        T const t = M[p * n + c];
        M[p * n + c] = M[pivot * n + c];
        M[pivot * n + c] = t;
      }
      for (int c = 0; c < m; ++c) {
        T const t = B[p * ldb + c];
        B[p * ldb + c] = B[pivot * ldb + c];
        B[pivot * ldb + c] = t;
      }
    }
    T const inverse = T(1) / M[p * n + p];
    for (int r = p + 1; r < n; ++r) {
      T const factor = M[r * n + p] * inverse;
      if (factor == T(0)) continue;
      for (int c = p + 1; c < n; ++c) M[r * n + c] -= factor * M[p * n + c];
      for (int c = 0; c < m; ++c) B[r * ldb + c] -= factor * B[p * ldb + c];
    }
  }
  for (int p = n - 1; p >= 0; --p) {
    T const inverse = T(1) / M[p * n + p];
    for (int c = 0; c < m; ++c) {
      T sum = B[p * ldb + c];
      for (int q = p + 1; q < n; ++q) sum -= M[p * n + q] * B[q * ldb + c];
      B[p * ldb + c] = sum * inverse;
    }
  }
}

// S ← (S + Sᵀ) / 2: covariances stay symmetric against rounding.
template <class T>
KOKKOS_INLINE_FUNCTION void symmetrise(T* S, int n) {
  for (int r = 0; r < n; ++r)
    for (int c = r + 1; c < n; ++c) {
      T const mean = (S[r * n + c] + S[c * n + r]) / 2;
      S[r * n + c] = S[c * n + r] = mean;
    }
}

template <class T>
KOKKOS_INLINE_FUNCTION void copy_values(const T* from, int count, T* to) {
  for (int i = 0; i < count; ++i) to[i] = from[i];
}

// A filtering element (A, b, C, η, J) in one array of size(n) values: A, C
// and J (n×n), then b and η (n).
template <class T>
struct KalmanElement {
  T* v;
  int n;
  KOKKOS_INLINE_FUNCTION static int size(int n) { return 3 * n * n + 2 * n; }
  KOKKOS_INLINE_FUNCTION T* A() const { return v; }
  KOKKOS_INLINE_FUNCTION T* C() const { return v + n * n; }
  KOKKOS_INLINE_FUNCTION T* J() const { return v + 2 * n * n; }
  KOKKOS_INLINE_FUNCTION T* b() const { return v + 3 * n * n; }
  KOKKOS_INLINE_FUNCTION T* eta() const { return v + 3 * n * n + n; }
};

// Values combine() works in.
KOKKOS_INLINE_FUNCTION int combine_work(int n) { return 4 * n * n + 2 * n; }

// out ← i ⊗ j, the elements of consecutive runs of steps, i the earlier:
//   M = (I + C_i J_j)⁻¹,  X = M A_i,  Y = M (b_i + C_i η_j),  Z = M C_i
//   A = A_j X,  b = A_j Y + b_j,  C = A_j Z A_jᵀ + C_j,
//   η = Xᵀ (η_j − J_j b_i) + η_i,  J = Xᵀ J_j A_i + J_i
// ((I + J_j C_i)⁻¹ = Mᵀ, C and J being symmetric). out may not alias i or
// j.
template <class T>
KOKKOS_INLINE_FUNCTION void combine(const KalmanElement<T>& i,
                                    const KalmanElement<T>& j,
                                    const KalmanElement<T>& out, T* work) {
  int const n = i.n, w = 2 * n + 1;
  T* const M = work;
  T* const R = M + n * n;  // [A_i | C_i | b_i + C_i η_j], then [X | Z | Y]
  T* const tmp = R + n * w;
  T* const v = tmp + n * n;
  gemm(false, false, n, n, n, T(1), i.C(), n, j.J(), n, T(0), M, n);
  for (int r = 0; r < n; ++r) M[r * n + r] += 1;
  gemm(false, false, n, n, 1, T(1), i.C(), n, j.eta(), 1, T(0), v, 1);
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) {
      R[r * w + c] = i.A()[r * n + c];
      R[r * w + n + c] = i.C()[r * n + c];
    }
    R[r * w + 2 * n] = i.b()[r] + v[r];
  }
  solve_in_place(M, n, R, w, w);
  T const* const X = R;
  T const* const Z = R + n;
  T const* const Y = R + 2 * n;
  gemm(false, false, n, n, n, T(1), j.A(), n, X, w, T(0), out.A(), n);
  copy_values(j.b(), n, out.b());
  gemm(false, false, n, n, 1, T(1), j.A(), n, Y, w, T(1), out.b(), 1);
  gemm(false, false, n, n, n, T(1), j.A(), n, Z, w, T(0), tmp, n);
  copy_values(j.C(), n * n, out.C());
  gemm(false, true, n, n, n, T(1), tmp, n, j.A(), n, T(1), out.C(), n);
  symmetrise(out.C(), n);
  copy_values(j.eta(), n, v);
  gemm(false, false, n, n, 1, T(-1), j.J(), n, i.b(), 1, T(1), v, 1);
  copy_values(i.eta(), n, out.eta());
  gemm(true, false, n, n, 1, T(1), X, w, v, 1, T(1), out.eta(), 1);
  gemm(false, false, n, n, n, T(1), j.J(), n, i.A(), n, T(0), tmp, n);
  copy_values(i.J(), n * n, out.J());
  gemm(true, false, n, n, n, T(1), X, w, tmp, n, T(1), out.J(), n);
  symmetrise(out.J(), n);
}

// The ELK update of every iterating sequence of d (DampedStep with J and P
// of n² values a step): the filter into d.m and d.P, then the smoother's
// δ added to d.z. `chunk` steps a thread; `filter_maps` (B, chunks,
// KalmanElement::size(n)) and `carried` (B, chunks, n² + n) hold the
// chunks' composed maps and what is carried into them.
template <class Space, class T>
struct ElkUpdate {
  using Memory = typename Space::memory_space;
  using Items = ThreadItems<Space>;
  DampedStep<Space, T> d;
  DeerView3<T, Space> filter_maps, carried;
  std::int64_t chunks;
  int chunk, n;

  // A pass of a thread per chunk: item (b, c) runs Body::run(b, L, c, s0,
  // s1, values) over the chunk's steps [s0, s1) where the chunk lies within
  // sequence b's iterating length L.
  template <class Body>
  struct PerChunk {
    Body body;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item, T* values) const {
      ElkUpdate const& u = body.u;
      int const b = int(item / u.chunks);
      std::int64_t const c = item % u.chunks;
      int const L = u.d.steps(b);
      std::int64_t const s0 = c * u.chunk;
      if (s0 >= L) return;
      body.run(b, L, c, s0, s0 + u.chunk < L ? s0 + u.chunk : L, values);
    }
  };

  // Step s's filtering element.
  KOKKOS_INLINE_FUNCTION void step_element(int b, std::int64_t s,
                                           const KalmanElement<T>& e) const {
    T const lambda = d.lambda(b), kappa = 1 / (1 + lambda);
    T const* const F = &d.J(b, s, 0);
    T const* const u = &d.r(b, s, 0);
    int const nn = n * n;
    for (int q = 0; q < nn; ++q) {
      e.A()[q] = s > 0 ? kappa * F[q] : T(0);
      e.C()[q] = q % (n + 1) == 0 ? kappa : T(0);
    }
    for (int i = 0; i < n; ++i) e.b()[i] = kappa * u[i];
    if (s > 0) {
      gemm(true, false, n, n, n, lambda * kappa, F, n, F, n, T(0), e.J(), n);
      gemm(true, false, n, n, 1, -lambda * kappa, F, n, u, 1, T(0), e.eta(), 1);
    } else {
      for (int q = 0; q < nn; ++q) e.J()[q] = 0;
      for (int i = 0; i < n; ++i) e.eta()[i] = 0;
    }
  }

  // Filter, compose: each chunk's elements into filter_maps(b, c).
  struct FilterCompose {
    ElkUpdate u;
    KOKKOS_INLINE_FUNCTION void run(int b, int L, std::int64_t c,
                                    std::int64_t s0, std::int64_t s1,
                                    T* values) const {
      int const size = KalmanElement<T>::size(u.n);
      KalmanElement<T> acc{values, u.n}, next{values + size, u.n},
          step{values + 2 * size, u.n};
      T* const work = values + 3 * size;
      u.step_element(b, s0, acc);
      for (std::int64_t s = s0 + 1; s < s1; ++s) {
        u.step_element(b, s, step);
        combine(acc, step, next, work);
        T* const swap = acc.v;
        acc.v = next.v;
        next.v = swap;
      }
      for (int q = 0; q < size; ++q) u.filter_maps(b, c, q) = acc.v[q];
    }
  };

  // Filter, carry: each chunk's (m, P) before it, from the composed maps
  // of the chunks before, into carried(b, c) (m, then P).
  struct FilterCarry {
    ElkUpdate u;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b, T* values) const {
      int const L = u.d.steps(b), n = u.n, size = KalmanElement<T>::size(n);
      KalmanElement<T> prefix{values, n}, next{values + size, n},
          chunk_map{values + 2 * size, n};
      T* const work = values + 3 * size;
      for (int q = 0; q < size; ++q) prefix.v[q] = 0;
      for (std::int64_t c = 0; c * u.chunk < L; ++c) {
        for (int i = 0; i < n; ++i) u.carried(b, c, i) = prefix.b()[i];
        for (int q = 0; q < n * n; ++q) u.carried(b, c, n + q) = prefix.C()[q];
        for (int q = 0; q < size; ++q) chunk_map.v[q] = u.filter_maps(b, c, q);
        combine(prefix, chunk_map, next, work);
        T* const swap = prefix.v;
        prefix.v = next.v;
        next.v = swap;
      }
    }
  };

  // Filter, replay: each step's m_s and P_s from the chunk's carried-in
  // (m, P), by the Kalman step.
  struct FilterReplay {
    ElkUpdate u;
    KOKKOS_INLINE_FUNCTION void run(int b, int L, std::int64_t c,
                                    std::int64_t s0, std::int64_t s1,
                                    T* values) const {
      int const n = u.n, nn = n * n;
      T* const m = values;
      T* const P = m + n;
      T* const FP = P + nn;
      T* const M = FP + nn;
      T* const R = M + nn;  // [F m + u | Σ], n × (n + 1)
      T const lambda = u.d.lambda(b);
      for (int i = 0; i < n; ++i) m[i] = u.carried(b, c, i);
      for (int q = 0; q < nn; ++q) P[q] = u.carried(b, c, n + q);
      for (std::int64_t s = s0; s < s1; ++s) {
        T const* const F = &u.d.J(b, s, 0);
        // At s = 0 the m and P carried in are 0 (δ_{−1} = 0 is known), so
        // F_0 plays no part.
        gemm(false, false, n, n, 1, T(1), F, n, m, 1, T(0), R, n + 1);
        gemm(false, false, n, n, n, T(1), F, n, P, n, T(0), FP, n);
        gemm(false, true, n, n, n, T(1), FP, n, F, n, T(0), R + 1, n + 1);
        for (int i = 0; i < n; ++i) {
          R[i * (n + 1)] += u.d.r(b, s, i);
          R[i * (n + 1) + 1 + i] += 1;
          for (int j = 0; j < n; ++j)
            M[i * n + j] = lambda * R[i * (n + 1) + 1 + j] + (i == j);
        }
        solve_in_place(M, n, R, n + 1, n + 1);
        for (int i = 0; i < n; ++i) {
          m[i] = R[i * (n + 1)];
          for (int j = 0; j < n; ++j) P[i * n + j] = R[i * (n + 1) + 1 + j];
        }
        symmetrise(P, n);
        for (int i = 0; i < n; ++i) u.d.m(b, s, i) = m[i];
        for (int q = 0; q < nn; ++q) u.d.P(b, s, q) = P[q];
      }
    }
  };

  // The smoother's map at step s < L − 1: E_sᵀ into Et, g_s into g
  // (work: n² + n values).
  KOKKOS_INLINE_FUNCTION void smoother_map(int b, std::int64_t s, T* Et, T* g,
                                           T* work) const {
    T const* const F = &d.J(b, s + 1, 0);
    T const* const P = &d.P(b, s, 0);
    T const* const m = &d.m(b, s, 0);
    T* const Sigma = work;
    T* const v = Sigma + n * n;
    // Et = Σ⁻¹ F P (= E_sᵀ: Σ and P are symmetric), Σ = F P Fᵀ + I.
    gemm(false, false, n, n, n, T(1), F, n, P, n, T(0), Et, n);
    gemm(false, true, n, n, n, T(1), Et, n, F, n, T(0), Sigma, n);
    for (int i = 0; i < n; ++i) Sigma[i * n + i] += 1;
    solve_in_place(Sigma, n, Et, n, n);
    // g = m − E (F m + u_{s+1})
    gemm(false, false, n, n, 1, T(1), F, n, m, 1, T(0), v, 1);
    for (int i = 0; i < n; ++i) v[i] += d.r(b, s + 1, i);
    copy_values(m, n, g);
    gemm(true, false, n, n, 1, T(-1), Et, n, v, 1, T(1), g, 1);
  }

  // Smoother, compose: each chunk's map from δ after it (at s1) to δ at
  // its first step, (Ā, ḡ) into carried(b, c) (Ā, then ḡ).
  struct SmootherCompose {
    ElkUpdate u;
    KOKKOS_INLINE_FUNCTION void run(int b, int L, std::int64_t c,
                                    std::int64_t s0, std::int64_t s1,
                                    T* values) const {
      int const n = u.n, nn = n * n;
      T* const Abar = values;
      T* const gbar = Abar + nn;
      T* const Et = gbar + n;
      T* const g = Et + nn;
      T* const next = g + n;  // n² + n
      T* const work = next + nn + n;
      // Identity: the map of no steps.
      for (int q = 0; q < nn; ++q) Abar[q] = q % (n + 1) == 0 ? T(1) : T(0);
      for (int i = 0; i < n; ++i) gbar[i] = 0;
      for (std::int64_t s = s1 - 1; s >= s0; --s) {
        if (s == L - 1) {  // δ_{L−1} = m_{L−1}: a constant map
          for (int q = 0; q < nn; ++q) Abar[q] = 0;
          for (int i = 0; i < n; ++i) gbar[i] = u.d.m(b, s, i);
          continue;
        }
        u.smoother_map(b, s, Et, g, work);
        // (Ā, ḡ) ← (E Ā, E ḡ + g)
        gemm(true, false, n, n, n, T(1), Et, n, Abar, n, T(0), next, n);
        gemm(true, false, n, n, 1, T(1), Et, n, gbar, 1, T(0), next + nn, 1);
        copy_values(next, nn, Abar);
        for (int i = 0; i < n; ++i) gbar[i] = next[nn + i] + g[i];
      }
      for (int q = 0; q < nn; ++q) u.carried(b, c, q) = Abar[q];
      for (int i = 0; i < n; ++i) u.carried(b, c, nn + i) = gbar[i];
    }
  };

  // Smoother, carry: δ after each chunk (at its s1) into filter_maps(b, c)
  // (whose filter maps are spent), from the last chunk back.
  struct SmootherCarry {
    ElkUpdate u;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b, T* values) const {
      int const L = u.d.steps(b), n = u.n, nn = n * n;
      if (L == 0) return;
      T* const delta = values;
      T* const next = delta + n;
      for (int i = 0; i < n; ++i) delta[i] = 0;  // after the last step: unused
      for (std::int64_t c = (L - 1) / u.chunk; c >= 0; --c) {
        for (int i = 0; i < n; ++i) u.filter_maps(b, c, i) = delta[i];
        for (int i = 0; i < n; ++i) {
          T sum = u.carried(b, c, nn + i);
          for (int j = 0; j < n; ++j)
            sum += u.carried(b, c, i * n + j) * delta[j];
          next[i] = sum;
        }
        copy_values(next, n, delta);
      }
    }
  };

  // Smoother, replay: each step's δ_s from δ after the chunk, added to z.
  struct SmootherReplay {
    ElkUpdate u;
    KOKKOS_INLINE_FUNCTION void run(int b, int L, std::int64_t c,
                                    std::int64_t s0, std::int64_t s1,
                                    T* values) const {
      int const n = u.n, nn = n * n;
      T* const delta = values;
      T* const Et = delta + n;
      T* const g = Et + nn;
      T* const next = g + n;
      T* const work = next + n;
      for (int i = 0; i < n; ++i) delta[i] = u.filter_maps(b, c, i);
      for (std::int64_t s = s1 - 1; s >= s0; --s) {
        if (s == L - 1) {
          for (int i = 0; i < n; ++i) delta[i] = u.d.m(b, s, i);
        } else {
          u.smoother_map(b, s, Et, g, work);
          gemm(true, false, n, n, 1, T(1), Et, n, delta, 1, T(0), next, 1);
          for (int i = 0; i < n; ++i) delta[i] = next[i] + g[i];
        }
        int const t = u.d.reversed ? L - 1 - int(s) : int(s);
        for (int i = 0; i < n; ++i) u.d.z(b, t, i) += delta[i];
      }
    }
  };

  // The values a thread of the passes takes.
  static std::int64_t values(int n) {
    std::int64_t const element = KalmanElement<T>::size(n);
    return 3 * element + combine_work(n);  // 13n² + 8n, the largest
  }

  // One update: six passes, each a thread per chunk or per sequence, with
  // `values` a thread.
  template <class SolveMemoryType>
  void run(const Space& space, std::int64_t batch, SolveMemoryType& memory,
           bool never_wait) const {
    auto const pass = [&](std::int64_t items, const char* what,
                          const auto& body) {
      Items(items, values(n), T())
          .values_in(memory, space, never_wait)
          .template for_each<T>(space, label(what), body);
    };
    pass(batch * chunks, "elk_filter_compose",
         PerChunk<FilterCompose>{{*this}});
    pass(batch, "elk_filter_carry", FilterCarry{*this});
    pass(batch * chunks, "elk_filter_replay", PerChunk<FilterReplay>{{*this}});
    pass(batch * chunks, "elk_smoother_compose",
         PerChunk<SmootherCompose>{{*this}});
    pass(batch, "elk_smoother_carry", SmootherCarry{*this});
    pass(batch * chunks, "elk_smoother_replay",
         PerChunk<SmootherReplay>{{*this}});
  }
};

}  // namespace softwave::impl::deer
