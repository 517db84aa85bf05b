#pragma once
// A line search for the strong Wolfe conditions (Nocedal & Wright,
// Numerical Optimization, 2nd ed., Algorithms 3.5 and 3.6): along a descent
// direction p from x, find α with
//   φ(α) ≤ φ(0) + c1·α·φ'(0)         (sufficient decrease)
//   |φ'(α)| ≤ c2·|φ'(0)|             (curvature)
// where φ(α) = f(x + α·p). The curvature condition keeps sᵀy > 0, which
// L-BFGS needs for a positive-definite inverse-Hessian model. Host logic
// only: φ is evaluated by the caller.

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

namespace softwave::impl {

struct LinePoint {
  double alpha = 0;  // step
  double value = 0;  // φ(α)
  double slope = 0;  // φ'(α)
};

struct WolfeSettings {
  double c1 = 1e-4;
  double c2 = 0.9;  // the usual choice for quasi-Newton directions
  int max_evaluations = 30;
};

namespace line_search_detail {

// The minimiser of the cubic that interpolates φ and φ' at a and b, when it
// lies well inside the interval (at least 10% of its width from either end);
// otherwise the midpoint, so each zoom step shrinks the interval.
inline double interpolate(const LinePoint& a, const LinePoint& b) {
  double const lo = std::min(a.alpha, b.alpha), hi = std::max(a.alpha, b.alpha);
  double const margin = 0.1 * (hi - lo);
  double const d1 =
      a.slope + b.slope - 3 * (a.value - b.value) / (a.alpha - b.alpha);
  double const discriminant = d1 * d1 - a.slope * b.slope;
  if (discriminant >= 0) {
    double const d2 = std::copysign(std::sqrt(discriminant), b.alpha - a.alpha);
    double const alpha = b.alpha - (b.alpha - a.alpha) * (b.slope + d2 - d1) /
                                       (b.slope - a.slope + 2 * d2);
    if (std::isfinite(alpha) && alpha >= lo + margin && alpha <= hi - margin)
      return alpha;
  }
  return 0.5 * (lo + hi);
}

}  // namespace line_search_detail

// phi(α) returns LinePoint{α, φ(α), φ'(α)}. The accepted point is always the
// last one evaluated, so a caller that keeps the last trial's state keeps the
// accepted one. Returns nothing when no acceptable step was found within the
// evaluation budget (or the bracket shrank to rounding): φ is then flat to
// rounding along p, or p is not a descent direction.
template <class Phi>
std::optional<LinePoint> strong_wolfe(Phi&& phi, const LinePoint& start,
                                      double first_step,
                                      const WolfeSettings& settings = {}) {
  using line_search_detail::interpolate;
  int evaluations = 0;
  // NaN or inf counts as too high: the step shrinks away from it.
  auto decreases_enough = [&](const LinePoint& p) {
    return p.value <= start.value + settings.c1 * p.alpha * start.slope &&
           std::isfinite(p.slope);
  };
  auto flat_enough = [&](const LinePoint& p) {
    return std::fabs(p.slope) <= -settings.c2 * start.slope;
  };
  // Algorithm 3.6: lo satisfies sufficient decrease and has the lowest value
  // so far; the slope at lo points towards hi.
  auto zoom = [&](LinePoint lo, LinePoint hi) -> std::optional<LinePoint> {
    while (evaluations < settings.max_evaluations) {
      // No cubic through a non-finite end: bisect towards lo.
      bool const finite_hi = std::isfinite(hi.value) && std::isfinite(hi.slope);
      double const alpha =
          finite_hi ? interpolate(lo, hi) : 0.5 * (lo.alpha + hi.alpha);
      if (!(std::fabs(hi.alpha - lo.alpha) >
            1e-12 * std::max(std::fabs(lo.alpha), std::fabs(hi.alpha))))
        return std::nullopt;
      LinePoint const p = phi(alpha);
      ++evaluations;
      if (!decreases_enough(p) || p.value >= lo.value) {
        hi = p;
        continue;
      }
      if (flat_enough(p)) return p;
      if (p.slope * (hi.alpha - lo.alpha) >= 0) hi = lo;
      lo = p;
    }
    return std::nullopt;
  };

  // Algorithm 3.5: grow the step until it brackets an acceptable one.
  if (!(start.slope < 0)) return std::nullopt;
  LinePoint previous = start;
  double alpha = first_step;
  while (evaluations < settings.max_evaluations) {
    LinePoint const p = phi(alpha);
    ++evaluations;
    if (!decreases_enough(p) || (evaluations > 1 && p.value >= previous.value))
      return zoom(previous, p);
    if (flat_enough(p)) return p;
    if (p.slope >= 0) return zoom(p, previous);
    previous = p;
    alpha *= 2;
  }
  return std::nullopt;
}

// When φ rounds to the same value over the whole step (a float objective
// near its minimum: |f|·ε exceeds the decrease left), strong_wolfe finds no
// step although φ' is still resolved. This search uses φ' alone: it doubles
// the step while φ' < 0 and then bisects the bracket where φ' changes sign,
// until |φ'(α)| ≤ c2·|φ'(0)|, so φ' rose from φ'(0) < 0 and the pair it
// gives L-BFGS has sᵀy > 0. A non-finite point counts as past the minimum.
// Returns nothing when the bracket shrinks to rounding or the evaluation
// budget runs out (φ' is noise there); otherwise the last point evaluated.
template <class Phi>
std::optional<LinePoint> slope_search(Phi&& phi, const LinePoint& start,
                                      double first_step,
                                      const WolfeSettings& settings = {}) {
  if (!(start.slope < 0)) return std::nullopt;
  double lo = 0, hi = std::numeric_limits<double>::infinity();
  double alpha = first_step;
  for (int evaluations = 0; evaluations < settings.max_evaluations;
       ++evaluations) {
    LinePoint const p = phi(alpha);
    bool const finite = std::isfinite(p.value) && std::isfinite(p.slope);
    if (finite && std::fabs(p.slope) <= -settings.c2 * start.slope) return p;
    if (finite && p.slope < 0)
      lo = alpha;
    else
      hi = alpha;
    alpha = std::isinf(hi) ? 2 * alpha : 0.5 * (lo + hi);
    if (!(hi - lo > 1e-12 * hi)) return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace softwave::impl
