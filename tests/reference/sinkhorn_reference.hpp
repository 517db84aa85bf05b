#pragma once
// A plain float64 entropic-OT reference: dense cost, log-domain Sinkhorn
// run until the potentials stop moving, then the plan, marginals, primal
// and dual objectives formed directly from their definitions. Independent of
// softwave and Kokkos; tests/test_sinkhorn.cpp checks it against itself
// (primal = dual at the optimum) beside every comparison.

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace softwave_ref {

struct OTProblem {
  int n = 0, k = 0;
  std::vector<double> cost;  // n×k row-major
  std::vector<double> a, b;  // weights (> 0 or 0)
  double eps = 1.0;
  double rho_a = std::numeric_limits<double>::infinity();
  double rho_b = std::numeric_limits<double>::infinity();
  double c(int i, int j) const { return cost[std::size_t(i) * k + j]; }
};

struct OTSolution {
  std::vector<double> f, g, plan;  // plan n×k
  std::vector<double> row_mass, column_mass;
  double dual = 0, primal = 0, transport = 0;
  int iterations = 0;
};

inline double lse(const std::vector<double>& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double e : v) m = std::max(m, e);
  if (m == -std::numeric_limits<double>::infinity()) return m;
  double s = 0;
  for (double e : v) s += std::exp(e - m);
  return m + std::log(s);
}

inline double phi(double f, double rho) {
  return std::isinf(rho) ? f : -rho * std::expm1(-f / rho);
}

inline double kl(double p, double q) {  // p log(p/q) − p + q
  if (p == 0) return q;
  return p * std::log(p / q) - p + q;
}

// Iterates until no potential moves by more than tol·(1 + max |potential|)
// (rounding bounds how far below 1e-13 that can go).
inline OTSolution solve_ot(const OTProblem& p, int max_iterations = 200000,
                           double tol = 1e-13) {
  OTSolution s;
  s.f.assign(p.n, 0.0);
  s.g.assign(p.k, 0.0);
  double const la = 1.0 / (1.0 + p.eps / p.rho_a);
  double const lb = 1.0 / (1.0 + p.eps / p.rho_b);
  std::vector<double> terms;
  for (int it = 1; it <= max_iterations; ++it) {
    double change = 0, size = 0;
    terms.resize(p.k);
    for (int i = 0; i < p.n; ++i) {
      for (int j = 0; j < p.k; ++j)
        terms[j] = p.b[j] > 0 ? (s.g[j] - p.c(i, j)) / p.eps + std::log(p.b[j])
                              : -std::numeric_limits<double>::infinity();
      double const f = -la * p.eps * lse(terms);
      change = std::max(change, std::fabs(f - s.f[i]));
      size = std::max(size, std::fabs(f));
      s.f[i] = f;
    }
    terms.resize(p.n);
    for (int j = 0; j < p.k; ++j) {
      for (int i = 0; i < p.n; ++i)
        terms[i] = p.a[i] > 0 ? (s.f[i] - p.c(i, j)) / p.eps + std::log(p.a[i])
                              : -std::numeric_limits<double>::infinity();
      double const g = -lb * p.eps * lse(terms);
      change = std::max(change, std::fabs(g - s.g[j]));
      size = std::max(size, std::fabs(g));
      s.g[j] = g;
    }
    s.iterations = it;
    if (change <= tol * (1 + size)) break;
  }
  s.plan.assign(std::size_t(p.n) * p.k, 0.0);
  s.row_mass.assign(p.n, 0.0);
  s.column_mass.assign(p.k, 0.0);
  double mass = 0, ma = 0, mb = 0, entropy = 0;
  for (int i = 0; i < p.n; ++i) ma += p.a[i];
  for (int j = 0; j < p.k; ++j) mb += p.b[j];
  for (int i = 0; i < p.n; ++i)
    for (int j = 0; j < p.k; ++j) {
      double const q = p.a[i] * p.b[j];
      double const pi =
          q > 0 ? q * std::exp((s.f[i] + s.g[j] - p.c(i, j)) / p.eps) : 0.0;
      s.plan[std::size_t(i) * p.k + j] = pi;
      s.row_mass[i] += pi;
      s.column_mass[j] += pi;
      mass += pi;
      s.transport += pi * p.c(i, j);
      entropy += kl(pi, q);
    }
  s.dual = -p.eps * (mass - ma * mb);
  for (int i = 0; i < p.n; ++i) s.dual += p.a[i] * phi(s.f[i], p.rho_a);
  for (int j = 0; j < p.k; ++j) s.dual += p.b[j] * phi(s.g[j], p.rho_b);
  s.primal = s.transport + p.eps * entropy;
  for (int i = 0; i < p.n; ++i)
    if (!std::isinf(p.rho_a)) s.primal += p.rho_a * kl(s.row_mass[i], p.a[i]);
  for (int j = 0; j < p.k; ++j)
    if (!std::isinf(p.rho_b))
      s.primal += p.rho_b * kl(s.column_mass[j], p.b[j]);
  return s;
}

// `iterations` updates (f from g, then g from f, as solve_ot) from the
// potentials given, in place.
inline void run_updates(const OTProblem& p, std::vector<double>& f,
                        std::vector<double>& g, int iterations) {
  double const la = 1.0 / (1.0 + p.eps / p.rho_a);
  double const lb = 1.0 / (1.0 + p.eps / p.rho_b);
  std::vector<double> terms;
  for (int it = 0; it < iterations; ++it) {
    terms.resize(p.k);
    for (int i = 0; i < p.n; ++i) {
      for (int j = 0; j < p.k; ++j)
        terms[j] = p.b[j] > 0 ? (g[j] - p.c(i, j)) / p.eps + std::log(p.b[j])
                              : -std::numeric_limits<double>::infinity();
      f[i] = -la * p.eps * lse(terms);
    }
    terms.resize(p.n);
    for (int j = 0; j < p.k; ++j) {
      for (int i = 0; i < p.n; ++i)
        terms[i] = p.a[i] > 0 ? (f[i] - p.c(i, j)) / p.eps + std::log(p.a[i])
                              : -std::numeric_limits<double>::infinity();
      g[j] = -lb * p.eps * lse(terms);
    }
  }
}

// The plan a_i b_j exp((f_i + g_j − C_ij)/ε) of given potentials (n×k).
inline std::vector<double> plan_of(const OTProblem& p,
                                   const std::vector<double>& f,
                                   const std::vector<double>& g) {
  std::vector<double> plan(std::size_t(p.n) * p.k, 0.0);
  for (int i = 0; i < p.n; ++i)
    for (int j = 0; j < p.k; ++j)
      if (p.a[i] > 0 && p.b[j] > 0)
        plan[std::size_t(i) * p.k + j] =
            p.a[i] * p.b[j] * std::exp((f[i] + g[j] - p.c(i, j)) / p.eps);
  return plan;
}

}  // namespace softwave_ref
