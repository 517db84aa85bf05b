#pragma once
// Soft-DTW barycenters (Cuturi & Blondel 2017, §3): the series z (L×d) that
// minimises
//     f(z) = Σ_b w_b · sdtw_γ(z, X_b)
// over a batch X of B series (padded to N×d, with optional per-series
// lengths N_b ≤ N). The weights default to 1/B; given weights are divided
// by their sum (only their ratios matter). f is smooth for γ > 0; its
// gradient is Σ_b w_b · ∇_z sdtw_γ(z, X_b), computed by the same Soft-DTW
// kernels as soft_dtw_value_and_grad (z is the x side of every pair), so the
// barycenter runs wherever those run, on the given execution-space instance.
//
// Optimisers (the iterate lives in the space's memory, in double whatever T
// is, so small steps are not lost to float rounding; the optimiser's few
// O(L·d) vector updates run there too):
//   lbfgs: limited-memory BFGS (history `history`) with a line search that
//          enforces the strong Wolfe conditions; stops when the gradient's
//          max-norm falls below tol · max(1, |f|) or the relative decrease of
//          f over one iteration, (f_prev − f) / max(|f_prev|, |f|, 1), falls
//          below tol. Where f is flat to rounding along the direction (a
//          float objective near its minimum), the step is found from the
//          directional derivative alone, which is still resolved there, and
//          f's change is not a stopping rule for it. When neither finds a
//          step, it retries along −∇f with the history cleared, then stops,
//          not converged.
//   adam:  Adam (β1 = 0.9, β2 = 0.999, ε = 1e-8) with step `learning_rate`;
//          stops when the relative change of f over one iteration,
//          |f_prev − f| / max(|f_prev|, |f|, 1), falls below tol (after at
//          least 10 iterations), or at max_iter. It returns its last iterate.
//
// Memory (beyond inputs and outputs): the broadcast copy of z and the
// per-pair gradients, 2·B·L·d values of T, the Soft-DTW workspace of a
// forward + backward call on B pairs (softdtw.hpp), and O(history · L·d)
// doubles for the optimiser.
//
// Every kernel and allocation runs on the given instance and is labelled
// softwave::barycenter::* (the Soft-DTW calls and the argument checks
// shared with them keep their softwave::softdtw::* labels).

#include <Kokkos_Core.hpp>
#include <softwave/softdtw.hpp>

namespace softwave {

enum class BarycenterMethod { lbfgs, adam };

struct BarycenterOptions {
  // gamma (> 0), cost, band and kernel of the Soft-DTW terms.
  SoftDTWOptions softdtw;
  BarycenterMethod method = BarycenterMethod::lbfgs;
  int max_iter = 100;           // ≥ 1 optimiser iterations
  double tol = 1e-5;            // > 0, see the stopping rules above
  int history = 10;             // L-BFGS memory, ≥ 1
  double learning_rate = 1e-2;  // Adam step, > 0
};

struct BarycenterReport {
  int iterations = 0;      // optimiser iterations taken
  int evaluations = 0;     // objective + gradient evaluations
  double objective = 0.0;  // f at the returned barycenter
  bool converged = false;  // a stopping rule fired before max_iter
};

template <class T, class Space>
using WeightsView = Kokkos::View<const T*, typename Space::memory_space>;
template <class Space>
using LengthsView = Kokkos::View<const int*, typename Space::memory_space>;

namespace impl {
template <class Space, class T>
BarycenterReport barycenter(const Space& space, ConstSeriesView<T, Space> X,
                            ArrayView2<T, Space> z,
                            const BarycenterOptions& options,
                            WeightsView<T, Space> weights,
                            LengthsView<Space> lengths);
template <class Space, class T>
double barycenter_objective(const Space& space, ConstSeriesView<T, Space> X,
                            ArrayView2<const T, Space> z,
                            ArrayView2<T, Space> gradient,
                            const SoftDTWOptions& options,
                            WeightsView<T, Space> weights,
                            LengthsView<Space> lengths);
}  // namespace impl

// X: (B, N, d) series, B ≥ 1. z: (L, d), read as the starting point and
// overwritten with the result (L may differ from N). weights: (B,) ≥ 0,
// finite, not all zero, with a finite sum; empty = 1/B each (others are
// divided by their sum, so need not sum to 1). A result whose objective is
// not finite (values beyond double, e.g. a huge gamma) throws too. lengths:
// (B,) per-series lengths 1 ≤ N_b ≤ N; empty = N. Bad arguments throw
// softwave::invalid_argument naming the argument (X, barycenter, weights,
// lengths, gamma, max_iter, tol, history, learning_rate, method, or an
// option of options.softdtw). Returns after the result is in z (the
// optimiser reads f on the host each iteration, so this call fences the
// instance).
template <class Space, class XView, class ZView>
BarycenterReport barycenter(
    const Space& space, const XView& X, const ZView& z,
    const BarycenterOptions& options = {},
    WeightsView<typename ZView::non_const_value_type, Space> weights = {},
    LengthsView<Space> lengths = {}) {
  using T = impl::input_t<ZView>;
  static_assert(impl::view_for<ZView, Space, 2> &&
                    (std::is_same_v<impl::output_t<ZView>, float> ||
                     std::is_same_v<impl::output_t<ZView>, double>),
                "softwave::barycenter: z must be a rank-2 Kokkos::View (L, d) "
                "of float or double, not const, LayoutRight, in the execution "
                "space's memory space");
  static_assert(impl::view_for<XView, Space, 3> &&
                    std::is_same_v<impl::input_t<XView>, T>,
                "softwave::barycenter: X must be a rank-3 Kokkos::View "
                "(B, N, d) of z's value type, LayoutRight, in the execution "
                "space's memory space");
  return impl::barycenter<Space, T>(space, X, z, options, weights, lengths);
}

// f(z) as barycenter() defines it (same arguments and checks, γ > 0), and,
// when `gradient` (L, d) is given, ∇f(z) in it: the function and gradient
// the optimisers use. Fences the instance.
template <class Space, class XView, class ZView>
double barycenter_objective(
    const Space& space, const XView& X, const ZView& z,
    ArrayView2<typename ZView::non_const_value_type, Space> gradient = {},
    const SoftDTWOptions& options = {},
    WeightsView<typename ZView::non_const_value_type, Space> weights = {},
    LengthsView<Space> lengths = {}) {
  using T = impl::input_t<ZView>;
  static_assert(impl::view_for<ZView, Space, 2> &&
                    (std::is_same_v<T, float> || std::is_same_v<T, double>),
                "softwave::barycenter_objective: z must be a rank-2 "
                "Kokkos::View (L, d) of float or double, LayoutRight, in the "
                "execution space's memory space");
  static_assert(impl::view_for<XView, Space, 3> &&
                    std::is_same_v<impl::input_t<XView>, T>,
                "softwave::barycenter_objective: X must be a rank-3 "
                "Kokkos::View (B, N, d) of z's value type, LayoutRight, in the "
                "execution space's memory space");
  return impl::barycenter_objective<Space, T>(space, X, z, gradient, options,
                                              weights, lengths);
}

}  // namespace softwave
