#pragma once
// L-BFGS and Adam on a smooth objective over flat double vectors in the
// execution space's memory (device_vectors.hpp). The objective is a
// callable double(const Vector& z, const Vector& gradient) that returns f(z)
// and writes ∇f(z). Stopping rules: see softwave/barycenter.hpp.

#include <algorithm>
#include <cmath>
#include <softwave/barycenter.hpp>
#include <utility>
#include <vector>

#include "device_vectors.hpp"
#include "line_search.hpp"

namespace softwave::impl {

// (f_prev − f) / max(|f_prev|, |f|, 1): the scale keeps the test meaningful
// for objectives near 0, which Soft-DTW values (γ > 0) can be or cross.
inline double relative_change(double previous, double current) {
  return (previous - current) /
         std::max({std::fabs(previous), std::fabs(current), 1.0});
}

// The L-BFGS memory: the last `capacity` pairs s = x_{k+1} − x_k,
// y = ∇f_{k+1} − ∇f_k with ρ = 1 / sᵀy, oldest first.
template <class Space>
class LbfgsHistory {
 public:
  LbfgsHistory(const VectorOps<Space>& ops, int capacity)
      : ops_(ops), capacity_(capacity) {}

  bool empty() const { return pairs_.empty(); }
  void clear() { pairs_.clear(); }

  // Stores s and y from x_new − x and g_new − g. A pair with sᵀy ≤ 0 (only
  // rounding can make one after a strong-Wolfe step) would make the model
  // indefinite and is dropped.
  void add(const Vector<Space>& x_new, const Vector<Space>& x,
           const Vector<Space>& g_new, const Vector<Space>& g) {
    Pair pair;
    if (pairs_.size() == std::size_t(capacity_)) {
      pair = pairs_.front();  // reuse the oldest pair's memory
      pairs_.erase(pairs_.begin());
    } else {
      pair.s = ops_.make("lbfgs_s");
      pair.y = ops_.make("lbfgs_y");
    }
    ops_.combine(pair.s, 1, x_new, -1, x);
    ops_.combine(pair.y, 1, g_new, -1, g);
    double const sy = ops_.dot(pair.s, pair.y);
    double const yy = ops_.dot(pair.y, pair.y);
    if (!(sy > 0) || !std::isfinite(yy)) return;
    pair.rho = 1 / sy;
    pair.yy = yy;
    pairs_.push_back(pair);
  }

  // direction = −H·g by the two-loop recursion, with H0 = (sᵀy / yᵀy)·I
  // from the newest pair (I without history).
  void direction(const Vector<Space>& g, const Vector<Space>& direction) {
    ops_.combine(direction, -1, g, 0, g);
    std::vector<double> a(pairs_.size());
    for (std::size_t k = pairs_.size(); k-- > 0;) {
      a[k] = pairs_[k].rho * ops_.dot(pairs_[k].s, direction);
      ops_.combine(direction, 1, direction, -a[k], pairs_[k].y);
    }
    if (!pairs_.empty()) {
      double const scale = 1 / (pairs_.back().rho * pairs_.back().yy);
      ops_.combine(direction, scale, direction, 0, direction);
    }
    for (std::size_t k = 0; k < pairs_.size(); ++k) {
      double const b = pairs_[k].rho * ops_.dot(pairs_[k].y, direction);
      ops_.combine(direction, 1, direction, a[k] - b, pairs_[k].s);
    }
  }

 private:
  struct Pair {
    Vector<Space> s, y;
    double rho = 0, yy = 0;
  };
  VectorOps<Space> ops_;
  int capacity_;
  std::vector<Pair> pairs_;
};

// Minimises from x (overwritten with the result).
template <class Space, class Objective>
BarycenterReport lbfgs(const VectorOps<Space>& ops, Objective& objective,
                       Vector<Space>& x, const BarycenterOptions& options) {
  BarycenterReport report;
  Vector<Space> g = ops.make("gradient"), x_trial = ops.make("trial"),
                g_trial = ops.make("trial_gradient"), p = ops.make("direction");
  double f = objective(x, g);
  report.evaluations = 1;
  auto gradient_small = [&](double value, const Vector<Space>& gradient) {
    return ops.max_abs(gradient) <=
           options.tol * std::max(1.0, std::fabs(value));
  };
  report.converged = gradient_small(f, g);
  LbfgsHistory<Space> history(ops, options.history);

  // φ(α) = f(x + α·p); the trial point and its gradient stay in x_trial and
  // g_trial, so the accepted (last evaluated) point is there afterwards.
  auto phi = [&](double alpha) {
    ops.combine(x_trial, 1, x, alpha, p);
    double const value = objective(x_trial, g_trial);
    ++report.evaluations;
    return LinePoint{alpha, value, ops.dot(g_trial, p)};
  };

  while (!report.converged && report.iterations < options.max_iter) {
    history.direction(g, p);
    double slope = ops.dot(g, p);
    if (!(slope < 0)) {  // rounding spoilt the model: steepest descent
      history.clear();
      history.direction(g, p);
      slope = ops.dot(g, p);
    }
    // Without history the direction is −∇f, whose scale says nothing about
    // a good step: start from a unit move of the largest entry.
    double const first_step =
        history.empty() ? std::min(1.0, 1 / ops.max_abs(g)) : 1.0;
    LinePoint const start{0, f, slope};
    auto accepted = strong_wolfe(phi, start, first_step);
    // Without a resolved decrease of f, its change says nothing either.
    bool const f_resolved = accepted.has_value();
    if (!accepted) accepted = slope_search(phi, start, first_step);
    if (!accepted) {
      if (history.empty()) break;  // even steepest descent found no step
      history.clear();
      continue;
    }
    history.add(x_trial, x, g_trial, g);
    std::swap(x, x_trial);
    std::swap(g, g_trial);
    double const previous = f;
    f = accepted->value;
    ++report.iterations;
    report.converged =
        gradient_small(f, g) ||
        (f_resolved && relative_change(previous, f) <= options.tol);
  }
  report.objective = f;
  return report;
}

template <class Space, class Objective>
BarycenterReport adam(const VectorOps<Space>& ops, Objective& objective,
                      const Vector<Space>& x,
                      const BarycenterOptions& options) {
  constexpr double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  constexpr int min_iterations = 10;
  BarycenterReport report;
  Vector<Space> g = ops.make("gradient"), m = ops.make("adam_m"),
                v = ops.make("adam_v");
  double f = objective(x, g);
  report.evaluations = 1;
  double beta1_t = 1, beta2_t = 1;  // β1^t and β2^t for the bias corrections
  while (report.iterations < options.max_iter) {
    beta1_t *= beta1;
    beta2_t *= beta2;
    double const step = options.learning_rate;
    double const correct1 = 1 / (1 - beta1_t), correct2 = 1 / (1 - beta2_t);
    Kokkos::parallel_for(
        "softwave::barycenter::adam_step", ops.policy(),
        KOKKOS_LAMBDA(std::int64_t q) {
          m(q) = beta1 * m(q) + (1 - beta1) * g(q);
          v(q) = beta2 * v(q) + (1 - beta2) * g(q) * g(q);
          x(q) -= step * (m(q) * correct1) /
                  (compat::sqrt(v(q) * correct2) + epsilon);
        });
    double const previous = f;
    f = objective(x, g);
    ++report.evaluations;
    ++report.iterations;
    if (report.iterations >= min_iterations &&
        std::fabs(relative_change(previous, f)) <= options.tol) {
      report.converged = true;
      break;
    }
  }
  report.objective = f;
  return report;
}

}  // namespace softwave::impl
