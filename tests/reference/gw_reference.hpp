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

}  // namespace softwave_ref
