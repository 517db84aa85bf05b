#pragma once
// Entropic optimal transport by log-domain Sinkhorn iterations, batched, on
// any Kokkos execution space, without ever forming the N×K cost or plan
// unless asked to.
//
// Problem b of a batch: source weights a (N), target weights b (K), a cost
// C (N×K) and ε > 0:
//   OT_ε = min_π ⟨π, C⟩ + ε KL(π | a⊗b) + ρ_a KL(π1 | a) + ρ_b KL(πᵀ1 | b),
// with KL(p | q) = Σ p log(p/q) − p + q; ρ = ∞ (the default) makes that side
// a hard constraint (balanced), one finite ρ is semi-relaxed, two unbalanced.
// The solver keeps dual potentials f (N), g (K), and
//   π_ij = a_i b_j exp((f_i + g_j − C_ij) / ε)
// (the plan is never stored). Each iteration updates f from g, then g from f:
//   f_i ← −λ_a ε LSE_j(g_j/ε + log b_j − C_ij/ε),  λ_a = ρ_a / (ρ_a + ε)
// (λ = 1 balanced), and the same for g. Each row's log-sum-exp is one pass
// over its columns with a running maximum, so no exp overflows or underflows
// to a NaN at any ε: float32 stays finite down to ε = 1e-4 of the cost scale.
//
// Cost forms (each gives the same answer for the same C; tests check it):
//   CostMatrix  C given as (B, N, K);
//   PointClouds C_ij = c·‖x_i − y_j‖², c = 1 (sqeuclidean) or ½
//               (half_sqeuclidean: GeomLoss's p = 2 convention), formed
//               exactly from the coordinates (x_i − y_j, squared) as each
//               pair is visited;
//   LowRankCost C_ij = u_i + v_j − P_i·Q_j (P: N×r, Q: K×r; u, v optional),
//               formed pair by pair from the factors: the shape sampled
//               Gromov–Wasserstein produces.
//
// Convergence: the residual of an iteration is the L1 violation of the f
// update's fixed point, Σ_i a_i |exp((f_i − f_i')/ε) − 1| with f' the update;
// for a balanced source that is exactly the row-marginal error ‖π1 − a‖₁ of
// the current potentials (the column marginal is exact after each g update).
// It is formed inside the update itself and read back only every
// `check_every` iterations (one fence). A problem whose residual is at most
// `tolerance` stops (its later iterations cost nothing); after the last
// iteration both sides' residuals are recomputed exactly from the returned
// potentials, and `converged` is 1 only where both are within tolerance.
//
// Every entry point takes the execution-space instance first; every kernel,
// allocation and copy runs on it and is labelled softwave::sinkhorn::*.
// Calls fence the instance only to read back residuals (every check_every
// iterations when tolerance > 0), once for the data checks (check_values)
// and once to count the annealing steps (epsilon_scaling > 0). A solve with
// none of these (a fixed iteration count, unchecked, no annealing) never
// waits for the device, so it can be captured in a CUDA graph, as can the
// gradients and the plan queries. Memory beyond inputs and outputs:
// O(B·(N + K)).

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdint>
#include <softwave/errors.hpp>
#include <softwave/kernel_choice.hpp>
#include <type_traits>

namespace softwave {

// The cost between point clouds.
enum class PointCost {
  sqeuclidean,       // ‖x − y‖²
  half_sqeuclidean,  // ½‖x − y‖² (GeomLoss, p = 2)
};

struct SinkhornOptions {
  // ε > 0 and finite: absolute, or (epsilon_relative) a fraction of each
  // problem's cost scale, max_ij C_ij (taken as 1 where every cost is <= 0).
  double epsilon = 0.05;
  bool epsilon_relative = false;
  // ε-scaling: with 0 < epsilon_scaling < 1, iteration k uses
  // max(ε, scale · epsilon_scaling^k) (scale as above), annealing from the
  // cost scale down to ε; residuals are checked only once ε is reached.
  // 0 runs every iteration at ε.
  double epsilon_scaling = 0;
  // KL penalties of the marginals: > 0; infinity is a hard constraint.
  double rho_a = INFINITY;
  double rho_b = INFINITY;
  int max_iterations = 1000;  // >= 1
  // Stop a problem once its residual is <= tolerance; <= 0 runs exactly
  // max_iterations (benchmarks). `converged` is then judged against 0, i.e.
  // false, unless the residual is exactly zero.
  double tolerance = 1e-6;
  int check_every = 10;  // >= 1: iterations between residual read-backs
  // Start from the potentials in the outputs' f and g (their values are
  // read) instead of zeros; with ε-scaling the schedule still runs.
  bool warm_start = false;
  // Data checks (finite inputs, non-negative weights with positive mass),
  // read back with one fence per call; see SoftDTWOptions::check_values.
  bool check_values = true;
  // Which kernels run the iterations (softwave/kernel_choice.hpp). The
  // CUDA-specialised updates apply on Kokkos::Cuda to float point clouds
  // with d <= 64 and float low-rank costs of rank <= 128 (exact FP32
  // products at every rank); `automatic` takes them where both sides have
  // at least 512 points (200 for low-rank costs under tf32_low_rank). Up
  // to d = 16 they form each cost exactly in FP32 FMAs (the clouds centred on
  // their common mean, so that the expansion ‖x‖² + ‖y‖² − 2x·y loses no
  // digits to an offset); above, the products x·y run on tensor cores with
  // 10-bit mantissas (FP16 operands, each problem's two scaled by powers of
  // two into FP16's range: TF32's significands, as FlashSinkhorn's TF32
  // mode, at twice TF32's product rate; the exact marginal_error of the
  // result then carries that rounding, and `converged` stays false for
  // tolerances below it). Each row's
  // exponentials are shifted by its previous log-sum-exp, so one exp2 per
  // pair is all the special-function work; a row whose sum leaves the safe
  // range is summed again exactly, after its maximum. The exact
  // measurements of the result (transport cost, marginal errors,
  // `converged`) take specialised kernels under the same choice, each cost
  // formed directly as c·Σ(x − y)² (or u + v − p·q) in FP32 at every d,
  // and so do the plan's products in gradients and plan queries (π v,
  // πᵀu; d or rank ≤ 64, the portable kernels above).
  Kernel kernel = Kernel::automatic;
  // Low-rank costs of rank above 16 on the CUDA-specialised updates: the
  // products p_i·q_j on tensor cores too, as the points' above (faster
  // where they bound it; each exponent then carries a rounding of about
  // 2⁻¹¹·|p_i||q_j|/ε).
  // For costs whose own error is larger (sampled GW's); no effect
  // elsewhere.
  bool tf32_low_rank = false;
};

template <class T, class Space>
using OTView3 =
    Kokkos::View<T***, Kokkos::LayoutRight, typename Space::memory_space>;
template <class T, class Space>
using OTView2 =
    Kokkos::View<T**, Kokkos::LayoutRight, typename Space::memory_space>;
template <class T, class Space>
using OTView1 = Kokkos::View<T*, typename Space::memory_space>;

// The three cost forms. Views are row-major in the space's memory.
template <class T, class Space>
struct CostMatrix {
  OTView3<const T, Space> cost;  // (B, N, K)
};
template <class T, class Space>
struct PointClouds {
  OTView3<const T, Space> x;  // (B, N, d)
  OTView3<const T, Space> y;  // (B, K, d)
  PointCost cost = PointCost::sqeuclidean;
};
template <class T, class Space>
struct LowRankCost {
  OTView2<const T, Space> u;  // (B, N), or empty for 0
  OTView2<const T, Space> v;  // (B, K), or empty for 0
  OTView3<const T, Space> p;  // (B, N, r)
  OTView3<const T, Space> q;  // (B, K, r)
};

// Marginal weights: non-negative, finite, each problem's sum positive. An
// empty view is uniform (1/N, 1/K). Unbalanced problems may have different
// masses on the two sides.
template <class T, class Space>
struct Marginals {
  OTView2<const T, Space> a;  // (B, N)
  OTView2<const T, Space> b;  // (B, K)
};

// Outputs of sinkhorn(). f and g are required (and read as the starting
// point with warm_start); every other view is optional (empty: skipped;
// without value, transport_cost, marginal_error and converged the final
// exact measurement, two passes over every pair, is skipped too).
template <class T, class Space>
struct SinkhornResult {
  OTView2<T, Space> f;  // (B, N)
  OTView2<T, Space> g;  // (B, K)
  // The dual objective at (f, g), which equals OT_ε at convergence:
  //   Σ_i a_i φ_a(f_i) + Σ_j b_j φ_b(g_j) − ε (Σ_ij π_ij − Σa Σb),
  // φ(f) = f on a balanced side, ρ (1 − exp(−f/ρ)) on a relaxed one.
  OTView1<T, Space> value;           // (B,)
  OTView1<T, Space> transport_cost;  // (B,) ⟨π, C⟩
  // ‖π1 − a‖₁ and ‖πᵀ1 − b‖₁ of the returned potentials.
  OTView2<T, Space> marginal_error;  // (B, 2)
  OTView1<int, Space> iterations;    // (B,) iterations run
  OTView1<int, Space> converged;     // (B,) 1 where both residuals <= tol
};

// Gradients of Σ_b grad_output[b] · value[b] (grad_output empty: all ones)
// at the given potentials, by the envelope theorem: exact at the optimum,
// with nothing differentiated through the iterations. Every member is
// optional; each given one is overwritten. Only the members of the call's
// cost form may be given.
//   grad_x_i = c' Σ_j π_ij (x_i − y_j)   (c' = 2 sqeuclidean, 1 half)
//   grad_cost = π;  grad_u = π1,  grad_v = πᵀ1,  grad_p = −πQ,  grad_q = −πᵀP
//   grad_a_i = φ_a(f_i) − ε ((π1)_i / a_i − Σb)  (likewise grad_b)
template <class T, class Space>
struct SinkhornGradients {
  OTView3<T, Space> grad_x, grad_y;  // PointClouds
  OTView3<T, Space> grad_cost;       // CostMatrix
  OTView2<T, Space> grad_u, grad_v;  // LowRankCost
  OTView3<T, Space> grad_p, grad_q;  // LowRankCost
  OTView2<T, Space> grad_a, grad_b;
  OTView1<const T, Space> grad_output;  // (B,)
};

// What the plan of given potentials is used for, without forming it.
template <class T, class Space>
struct PlanQueries {
  // Applied to a matrix: out = π V with V: (B, K, m) -> (B, N, m), and
  // out_t = πᵀ U with U: (B, N, m) -> (B, K, m). Either pair may be empty.
  OTView3<const T, Space> v;
  OTView3<T, Space> plan_v;
  OTView3<const T, Space> u;
  OTView3<T, Space> plan_t_u;
  // argmax_j π_ij: (B, N).
  OTView2<int, Space> row_argmax;
  // samples(b, i, s) ~ π_i· / (π1)_i, independent draws (Gumbel-max on a
  // counter-based generator: the same seed gives the same samples on every
  // backend and thread count). (B, N, S).
  OTView3<int, Space> row_samples;
  std::uint64_t seed = 0;
  // The dense plan (B, N, K), only on request.
  OTView3<T, Space> plan;
};

// How sinkhorn_plan_vjp differentiates a plan (below).
enum class PlanDerivative {
  // At the fixed point: the adjoint linear system of the optimality
  // conditions, solved by preconditioned conjugate gradients.
  implicit,
  // Through `iterations` alternating updates (f from g, then g from f)
  // started at the fixed point: what backpropagation through a solve's last
  // iterations gives once its potentials have settled (the first
  // `iterations` terms of the implicit solution's Neumann series).
  unrolled,
};

struct PlanVjpOptions {
  PlanDerivative mode = PlanDerivative::implicit;
  // implicit: at most this many conjugate-gradient iterations; unrolled:
  // the updates differentiated through. >= 1.
  int iterations = 1000;
  // implicit: stop once the adjoint system's residual is at most this
  // fraction of its right-hand side (every problem). >= 0.
  double tolerance = 1e-6;
  // Data checks: a non-negative, finite plan and a finite grad_plan.
  bool check_values = true;
};

struct PlanVjpReport {
  int iterations = 0;     // conjugate-gradient iterations (or updates) run
  double residual = 0;    // implicit: the largest relative residual left
  bool converged = true;  // implicit: every residual <= tolerance
};

namespace impl {
template <class Space, class T, class Form>
void sinkhorn(const Space& space, const Form& form,
              const Marginals<T, Space>& marginals,
              const SinkhornResult<T, Space>& result,
              const SinkhornOptions& options);
template <class Space, class T, class Form>
void sinkhorn_gradients(const Space& space, const Form& form,
                        const Marginals<T, Space>& marginals,
                        OTView2<const T, Space> f, OTView2<const T, Space> g,
                        const SinkhornGradients<T, Space>& gradients,
                        const SinkhornOptions& options);
template <class Space, class T, class Form>
void sinkhorn_plan_queries(const Space& space, const Form& form,
                           const Marginals<T, Space>& marginals,
                           OTView2<const T, Space> f, OTView2<const T, Space> g,
                           const PlanQueries<T, Space>& queries,
                           const SinkhornOptions& options);
template <class Space, class T>
void sinkhorn_divergence(const Space& space, const PointClouds<T, Space>& form,
                         const Marginals<T, Space>& marginals,
                         OTView1<T, Space> values,
                         const SinkhornGradients<T, Space>* gradients,
                         const SinkhornOptions& options,
                         OTView1<int, Space> converged);
template <class Space, class T>
PlanVjpReport sinkhorn_plan_vjp(const Space& space,
                                OTView3<const T, Space> plan,
                                OTView3<const T, Space> grad_plan,
                                OTView3<T, Space> grad_cost,
                                const SinkhornOptions& options,
                                const PlanVjpOptions& vjp);
}  // namespace impl

// Solves every problem of the batch. form: CostMatrix, PointClouds or
// LowRankCost of float or double.
template <class Space, class T, template <class, class> class Form>
void sinkhorn(const Space& space, const Form<T, Space>& form,
              const Marginals<T, Space>& marginals,
              const SinkhornResult<T, Space>& result,
              const SinkhornOptions& options = {}) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "softwave::sinkhorn: float or double data");
  impl::sinkhorn<Space, T, Form<T, Space>>(space, form, marginals, result,
                                           options);
}

// Gradients of the value at potentials f, g (from sinkhorn() with the same
// form, marginals and options).
template <class Space, class T, template <class, class> class Form>
void sinkhorn_gradients(const Space& space, const Form<T, Space>& form,
                        const Marginals<T, Space>& marginals,
                        OTView2<const T, Space> f, OTView2<const T, Space> g,
                        const SinkhornGradients<T, Space>& gradients,
                        const SinkhornOptions& options = {}) {
  impl::sinkhorn_gradients<Space, T, Form<T, Space>>(space, form, marginals, f,
                                                     g, gradients, options);
}

// The plan of potentials f, g applied, its row argmax, row samples, or the
// plan itself (each query given is answered).
template <class Space, class T, template <class, class> class Form>
void sinkhorn_plan_queries(const Space& space, const Form<T, Space>& form,
                           const Marginals<T, Space>& marginals,
                           OTView2<const T, Space> f, OTView2<const T, Space> g,
                           const PlanQueries<T, Space>& queries,
                           const SinkhornOptions& options = {}) {
  impl::sinkhorn_plan_queries<Space, T, Form<T, Space>>(space, form, marginals,
                                                        f, g, queries, options);
}

// The debiased Sinkhorn divergence between point clouds,
//   S_ε = OT_ε(a, b) − ½ OT_ε(a, a) − ½ OT_ε(b, b)
// (≥ 0, 0 when the clouds and weights agree; balanced or unbalanced, where
// the ½ ε (Σa − Σb)² mass term of Séjourné et al. is added so that it stays
// non-negative). gradients (optional): grad_x, grad_y, grad_a, grad_b of
// Σ grad_output·S_ε. converged (optional, (B,)): 1 where all three solves
// converged.
template <class Space, class T>
void sinkhorn_divergence(const Space& space, const PointClouds<T, Space>& form,
                         const Marginals<T, Space>& marginals,
                         OTView1<T, Space> values,
                         const SinkhornGradients<T, Space>* gradients = nullptr,
                         const SinkhornOptions& options = {},
                         OTView1<int, Space> converged = {}) {
  impl::sinkhorn_divergence<Space, T>(space, form, marginals, values, gradients,
                                      options, converged);
}

// The vector–Jacobian product of entropic plans with respect to their
// costs: grad_cost = ∂⟨grad_plan, π(C)⟩/∂C, for each problem's plan π
// (B, N, K), dense, as sinkhorn_plan_queries renders it, at options'
// (absolute) epsilon and rho_a, rho_b. Only the plan is needed: with its
// marginals r = π1, c = πᵀ1, κ_a = 1 + ε/ρ_a and κ_b = 1 + ε/ρ_b (1 on a
// balanced side), the optimality conditions of the solve, perturbed, give
//   grad_cost_ij = π_ij (x_i + y_j − grad_plan_ij) / ε,
// with (x, y) the solution of the symmetric adjoint system
//   κ_a r ⊙ x + π y = (grad_plan ⊙ π) 1,
//   πᵀ x + κ_b c ⊙ y = (grad_plan ⊙ π)ᵀ 1
// (implicit: its Schur complement on y, diag(κ_b c) − πᵀ diag(1/(κ_a r)) π,
// by conjugate gradients preconditioned with diag(κ_b c); defined up to
// (1, −1) when both sides are balanced, which leaves x_i + y_j unchanged),
// or its first `iterations` terms (unrolled: exactly the reverse sweep of
// that many alternating updates f ← F(g), g ← G(f) from the fixed point).
// Empty rows and columns of the plan get no gradient. Work: two passes over
// the plan per iteration; memory O(B·(N + K)) beyond the arrays given.
// Fences once per conjugate-gradient iteration (to test the residual).
template <class Space, class T>
PlanVjpReport sinkhorn_plan_vjp(const Space& space,
                                OTView3<const T, Space> plan,
                                OTView3<const T, Space> grad_plan,
                                OTView3<T, Space> grad_cost,
                                const SinkhornOptions& options,
                                const PlanVjpOptions& vjp = {}) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "softwave::sinkhorn_plan_vjp: float or double data");
  return impl::sinkhorn_plan_vjp<Space, T>(space, plan, grad_plan, grad_cost,
                                           options, vjp);
}

}  // namespace softwave
