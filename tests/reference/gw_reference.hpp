#pragma once
// Plain float64 pieces for the sampled-GW tests: the GW objective by its
// quadruple sum, geodesic distances (Dijkstra on a symmetrised kNN graph),
// farthest-point landmarks, TorchGW's spiral → Swiss-roll task and the
// signed Spearman correlation of a matching. Independent of softwave and
// Kokkos.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <queue>
#include <random>
#include <utility>
#include <vector>

namespace softwave_ref {

// Σ_ijkl (DX_ij − DY_kl)² T_ik T_jl, directly.
inline double gw_objective(const std::vector<double>& dx,
                           const std::vector<double>& dy,
                           const std::vector<double>& plan, int n, int k) {
  double total = 0;
  for (int i = 0; i < n; ++i)
    for (int q = 0; q < k; ++q) {
      double const tik = plan[std::size_t(i) * k + q];
      if (tik == 0) continue;
      for (int j = 0; j < n; ++j)
        for (int l = 0; l < k; ++l) {
          double const diff =
              dx[std::size_t(i) * n + j] - dy[std::size_t(q) * k + l];
          total += diff * diff * tik * plan[std::size_t(j) * k + l];
        }
    }
  return total;
}

// The same sum through the plan's marginals r = T1, c = Tᵀ1:
//   Σ_ij DX_ij² r_i r_j + Σ_kl DY_kl² c_k c_l − 2 Σ_ik T_ik (DX T DY)_ik,
// O(N²K + NK²) instead of O(N²K²), for the larger problems.
inline double gw_objective_by_products(const std::vector<double>& dx,
                                       const std::vector<double>& dy,
                                       const std::vector<double>& plan, int n,
                                       int k) {
  std::vector<double> r(n, 0), c(k, 0), e(std::size_t(n) * k, 0);
  for (int i = 0; i < n; ++i)
    for (int q = 0; q < k; ++q) {
      r[i] += plan[std::size_t(i) * k + q];
      c[q] += plan[std::size_t(i) * k + q];
    }
  for (int i = 0; i < n; ++i)  // E = T DY
    for (int l = 0; l < k; ++l) {
      double const t = plan[std::size_t(i) * k + l];
      for (int q = 0; q < k; ++q)
        e[std::size_t(i) * k + q] += t * dy[std::size_t(l) * k + q];
    }
  double total = 0;
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j)
      total +=
          dx[std::size_t(i) * n + j] * dx[std::size_t(i) * n + j] * r[i] * r[j];
  for (int q = 0; q < k; ++q)
    for (int l = 0; l < k; ++l)
      total +=
          dy[std::size_t(q) * k + l] * dy[std::size_t(q) * k + l] * c[q] * c[l];
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double const d = dx[std::size_t(i) * n + j];
      for (int q = 0; q < k; ++q)
        total -=
            2 * plan[std::size_t(i) * k + q] * d * e[std::size_t(j) * k + q];
    }
  return total;
}

// The rows of a square matrix q (dim × dim, row-major) made orthonormal by
// Gram–Schmidt, in order: a random rotation from a matrix of normal draws.
inline void orthonormalise_rows(std::vector<double>& q, int dim) {
  for (int c = 0; c < dim; ++c) {
    for (int d = 0; d < c; ++d) {
      double dot = 0;
      for (int r = 0; r < dim; ++r) dot += q[c * dim + r] * q[d * dim + r];
      for (int r = 0; r < dim; ++r) q[c * dim + r] -= dot * q[d * dim + r];
    }
    double norm = 0;
    for (int r = 0; r < dim; ++r) norm += q[c * dim + r] * q[c * dim + r];
    for (int r = 0; r < dim; ++r) q[c * dim + r] /= std::sqrt(norm);
  }
}

// Euclidean distances of points (n × dim, row-major).
inline std::vector<double> euclidean(const std::vector<double>& x, int n,
                                     int dim) {
  std::vector<double> d(std::size_t(n) * n);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int e = 0; e < dim; ++e) {
        double const diff =
            x[std::size_t(i) * dim + e] - x[std::size_t(j) * dim + e];
        s += diff * diff;
      }
      d[std::size_t(i) * n + j] = std::sqrt(s);
    }
  return d;
}

// All shortest paths on the symmetrised k-nearest-neighbour graph of the
// points (Dijkstra from every node), its components joined as TorchGW does:
// while it is disconnected, an edge between the closest pair of points of
// the first node's component and the rest.
inline std::vector<double> knn_geodesics(const std::vector<double>& x, int n,
                                         int dim, int k) {
  auto const d = euclidean(x, n, dim);
  std::vector<std::vector<std::pair<int, double>>> edges(n);
  for (int i = 0; i < n; ++i) {
    std::vector<int> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + std::min(n, k + 1),
                      order.end(), [&](int a, int b) {
                        return d[std::size_t(i) * n + a] <
                               d[std::size_t(i) * n + b];
                      });
    for (int r = 0; r < std::min(n, k + 1); ++r) {
      int const j = order[r];
      if (j == i) continue;
      edges[i].push_back({j, d[std::size_t(i) * n + j]});
      edges[j].push_back({i, d[std::size_t(i) * n + j]});
    }
  }
  for (;;) {
    std::vector<char> reached(n, 0);
    std::vector<int> stack = {0};
    reached[0] = 1;
    while (!stack.empty()) {
      int const v = stack.back();
      stack.pop_back();
      for (auto const& e : edges[v])
        if (!reached[e.first]) reached[e.first] = 1, stack.push_back(e.first);
    }
    double best = std::numeric_limits<double>::infinity();
    int bi = -1, bj = -1;
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < n; ++j)
        if (reached[i] && !reached[j] && d[std::size_t(i) * n + j] < best)
          best = d[std::size_t(i) * n + j], bi = i, bj = j;
    if (bi < 0) break;
    edges[bi].push_back({bj, best});
    edges[bj].push_back({bi, best});
  }
  std::vector<double> out(std::size_t(n) * n,
                          std::numeric_limits<double>::infinity());
  using Item = std::pair<double, int>;
  for (int s = 0; s < n; ++s) {
    double* dist = &out[std::size_t(s) * n];
    std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
    dist[s] = 0;
    heap.push({0, s});
    while (!heap.empty()) {
      auto const [ds, v] = heap.top();
      heap.pop();
      if (ds > dist[v]) continue;
      for (auto const& [w, len] : edges[v])
        if (ds + len < dist[w]) {
          dist[w] = ds + len;
          heap.push({dist[w], w});
        }
    }
  }
  return out;
}

// Each point's distances to `count` farthest-point landmarks (from point
// 0) of a distance matrix: an n × count embedding.
inline std::vector<double> landmark_embedding(const std::vector<double>& d,
                                              int n, int count) {
  std::vector<int> landmarks = {0};
  std::vector<double> nearest(n, std::numeric_limits<double>::infinity());
  while (int(landmarks.size()) < count) {
    int const last = landmarks.back();
    for (int i = 0; i < n; ++i)
      nearest[i] = std::min(nearest[i], d[std::size_t(last) * n + i]);
    landmarks.push_back(int(std::max_element(nearest.begin(), nearest.end()) -
                            nearest.begin()));
  }
  std::vector<double> z(std::size_t(n) * count);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < count; ++c)
      z[std::size_t(i) * count + c] = d[std::size_t(landmarks[c]) * n + i];
  return z;
}

// TorchGW's benchmark task: theta = linspace(0, 9, n), r = linspace(0.3, 1,
// n); the spiral (n × 2) is ((r + e1) cos θ, (r + e2) sin θ), the Swiss roll
// (n × 3) the same curve with its own noise and a uniform height, columns
// (x, z, y); e ~ N(0, 0.05²). Point i of either lies at θ_i, so the right
// matching is increasing.
inline std::vector<double> spiral(int n, std::uint64_t seed, bool roll) {
  std::mt19937_64 engine(seed);
  std::normal_distribution<double> noise(0.0, 0.05);
  std::uniform_real_distribution<double> height(0.0, 1.0);
  int const dim = roll ? 3 : 2;
  std::vector<double> x(std::size_t(n) * dim);
  for (int i = 0; i < n; ++i) {
    double const t = n > 1 ? double(i) / (n - 1) : 0.0;
    double const theta = 9 * t, r = 0.3 + 0.7 * t;
    double const px = (r + noise(engine)) * std::cos(theta);
    double const py = (r + noise(engine)) * std::sin(theta);
    double* row = &x[std::size_t(i) * dim];
    row[0] = px;
    if (roll) {
      row[1] = height(engine);
      row[2] = py;
    } else {
      row[1] = py;
    }
  }
  return x;
}

// Spearman's ρ between i and matching[i] (no ties in i; ties in the
// matching take their mean rank).
inline double spearman(const std::vector<int>& matching) {
  int const n = int(matching.size());
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return matching[a] < matching[b]; });
  std::vector<double> rank(n);
  for (int s = 0; s < n;) {
    int e = s;
    while (e + 1 < n && matching[order[e + 1]] == matching[order[s]]) ++e;
    for (int q = s; q <= e; ++q) rank[order[q]] = 0.5 * (s + e);
    s = e + 1;
  }
  double const mean = 0.5 * (n - 1);
  double sxy = 0, sxx = 0, syy = 0;
  for (int i = 0; i < n; ++i) {
    sxy += (i - mean) * (rank[i] - mean);
    sxx += (i - mean) * (i - mean);
    syy += (rank[i] - mean) * (rank[i] - mean);
  }
  return sxy / std::sqrt(sxx * syy);
}

// The low-rank coupling π = Q diag(1/g) Rᵀ of a dense cost C (n×k) as
// GwOptions::coupling_rank defines it (mirror steps from the fixed start,
// each projected by Dykstra's alternating KL projections), with dense
// products throughout. Returns π (n×k).
inline std::vector<double> lowrank_coupling(
    const std::vector<double>& cost, const std::vector<double>& a,
    const std::vector<double>& b, double eps, int rank, double step_size,
    int steps, int dykstra_steps, double dykstra_tolerance) {
  int const n = int(a.size()), k = int(b.size()), r = rank;
  double const mass = std::accumulate(a.begin(), a.end(), 0.0);
  auto start = [&](const std::vector<double>& w) {
    std::vector<double> x(w.size() * r);
    for (std::size_t i = 0; i < w.size(); ++i) {
      double total = 0;
      for (int c = 0; c < r; ++c) {
        double const t = double(i * r + c) * 0.6180339887498949;
        total += x[i * r + c] = 1 + (t - std::floor(t));
      }
      for (int c = 0; c < r; ++c) x[i * r + c] *= w[i] / total;
    }
    return x;
  };
  std::vector<double> q = start(a), rr = start(b), g(r, mass / r);
  for (int step = 0; step < steps; ++step) {
    std::vector<double> cr(std::size_t(n) * r, 0), cq(std::size_t(k) * r, 0),
        omega(r, 0);
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < k; ++j)
        for (int c = 0; c < r; ++c) {
          cr[i * r + c] += cost[std::size_t(i) * k + j] * rr[j * r + c];
          cq[j * r + c] += cost[std::size_t(i) * k + j] * q[i * r + c];
        }
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < r; ++c) omega[c] += q[i * r + c] * cr[i * r + c];
    double largest = 0;
    auto size = [&](const std::vector<double>& x,
                    const std::vector<double>& cx) {
      for (std::size_t e = 0; e < x.size(); ++e)
        largest = std::max(largest,
                           std::fabs(cx[e] / g[e % r] +
                                     eps * std::log(std::max(x[e], 1e-300))));
    };
    size(q, cr);
    size(rr, cq);
    for (int c = 0; c < r; ++c)
      largest =
          std::max(largest, std::fabs(-omega[c] / (g[c] * g[c]) +
                                      eps * std::log(std::max(g[c], 1e-300))));
    double const gamma =
        largest > 0 ? step_size / (largest * largest) : 1 / eps;
    double const keep = gamma * eps - 1;
    auto kernel = [&](const std::vector<double>& x,
                      const std::vector<double>& cx) {
      std::vector<double> xi(x.size());
      for (std::size_t i = 0; i < x.size() / r; ++i) {
        double top = -std::numeric_limits<double>::infinity();
        for (int c = 0; c < r; ++c) {
          double const e = -gamma * cx[i * r + c] / g[c] -
                           keep * std::log(std::max(x[i * r + c], 1e-300));
          xi[i * r + c] = e;
          top = std::max(top, e);
        }
        for (int c = 0; c < r; ++c)
          xi[i * r + c] = std::exp(xi[i * r + c] - top);
      }
      return xi;
    };
    auto const xi1 = kernel(q, cr), xi2 = kernel(rr, cq);
    std::vector<double> xi3(r);
    double top = -std::numeric_limits<double>::infinity();
    for (int c = 0; c < r; ++c)
      top = std::max(top, xi3[c] = gamma * omega[c] / (g[c] * g[c]) -
                                   keep * std::log(std::max(g[c], 1e-300)));
    for (double& e : xi3) e = std::exp(e - top);
    // Dykstra.
    std::vector<double> gt = xi3, v1(r, 1), v2(r, 1), q1(r, 1), q2(r, 1),
                        q31(r, 1), q32(r, 1), u1(n), u2(k);
    auto scale_rows =
        [&](const std::vector<double>& xi, const std::vector<double>& w,
            const std::vector<double>& v, std::vector<double>& u) {
          for (std::size_t i = 0; i < w.size(); ++i) {
            double s = 0;
            for (int c = 0; c < r; ++c) s += xi[i * r + c] * v[c];
            u[i] = w[i] / std::max(s, 1e-300);
          }
        };
    auto column_sums = [&](const std::vector<double>& xi,
                           const std::vector<double>& u) {
      std::vector<double> out(r, 0);
      for (std::size_t i = 0; i < u.size(); ++i)
        for (int c = 0; c < r; ++c) out[c] += xi[i * r + c] * u[i];
      return out;
    };
    auto error_of =
        [&](const std::vector<double>& xi, const std::vector<double>& w,
            const std::vector<double>& v, const std::vector<double>& u) {
          double e = 0;
          for (std::size_t i = 0; i < w.size(); ++i) {
            double s = 0;
            for (int c = 0; c < r; ++c) s += xi[i * r + c] * v[c];
            e += std::fabs(u[i] * s - w[i]);
          }
          return e;
        };
    for (int it = 0; it < dykstra_steps; ++it) {
      scale_rows(xi1, a, v1, u1);
      scale_rows(xi2, b, v2, u2);
      auto const s1 = column_sums(xi1, u1), s2 = column_sums(xi2, u2);
      for (int c = 0; c < r; ++c) {
        double const g1 = std::max(1e-10 * mass, gt[c] * q31[c]);
        q31[c] = gt[c] * q31[c] / g1;
        double const a1 = std::max(s1[c], 1e-300), a2 = std::max(s2[c], 1e-300);
        double const g2 =
            std::max(std::cbrt(g1 * q32[c] * (v1[c] * q1[c] * a1) *
                               (v2[c] * q2[c] * a2)),
                     1e-300);
        double const n1 = g2 / a1, n2 = g2 / a2;
        q1[c] = v1[c] * q1[c] / n1;
        q2[c] = v2[c] * q2[c] / n2;
        q32[c] = g1 * q32[c] / g2;
        v1[c] = n1;
        v2[c] = n2;
        gt[c] = g2;
      }
      if ((it + 1) % 10 == 0 &&
          error_of(xi1, a, v1, u1) + error_of(xi2, b, v2, u2) <=
              dykstra_tolerance * mass)
        break;
    }
    for (int i = 0; i < n; ++i)
      for (int c = 0; c < r; ++c) q[i * r + c] = u1[i] * xi1[i * r + c] * v1[c];
    for (int j = 0; j < k; ++j)
      for (int c = 0; c < r; ++c)
        rr[j * r + c] = u2[j] * xi2[j * r + c] * v2[c];
    g = gt;
  }
  std::vector<double> plan(std::size_t(n) * k, 0);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < k; ++j)
      for (int c = 0; c < r; ++c)
        plan[std::size_t(i) * k + j] += q[i * r + c] * rr[j * r + c] / g[c];
  return plan;
}

}  // namespace softwave_ref
