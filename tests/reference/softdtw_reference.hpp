#pragma once
// Plain float64 Soft-DTW reference, used only by the tests.
//
// Scalar loops over full N×M tables, written straight from the definitions in
// core/include/softwave/softdtw.hpp (Cuturi & Blondel 2017), with no tiling,
// no offsets and no cleverness, so that it can be read and trusted. It is
// header-only and needs neither Kokkos nor the library, so its own tests
// (tests/test_reference.cpp) run on their own.
//
// Indexing: series and tables are 0-based (cell (i, j) pairs x_i with y_j);
// the R table is 1-based with the usual border row and column: R(0, 0) = 0,
// R(i, 0) = R(0, j) = +inf.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace softwave_ref {

enum class Cost { sqeuclidean, l1, cosine };

inline const char* to_string(Cost cost) {
  switch (cost) {
    case Cost::sqeuclidean: return "sqeuclidean";
    case Cost::l1: return "l1";
    case Cost::cosine: return "cosine";
  }
  return "?";
}

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kCosineEps = 1e-8;  // the header's ε clamp on ‖x‖ and ‖y‖

// Row-major rows×cols table of doubles.
struct Table {
  int rows = 0;
  int cols = 0;
  std::vector<double> a;

  Table() = default;
  Table(int r, int c, double fill = 0.0)
      : rows(r), cols(c), a(static_cast<std::size_t>(r) * c, fill) {}
  double& operator()(int i, int j) {
    return a[static_cast<std::size_t>(i) * cols + j];
  }
  double operator()(int i, int j) const {
    return a[static_cast<std::size_t>(i) * cols + j];
  }
};

// One series: n points of d features, row-major.
struct Series {
  int n = 0;
  int d = 0;
  std::vector<double> v;

  Series() = default;
  Series(int n_, int d_) : n(n_), d(d_), v(static_cast<std::size_t>(n_) * d_) {}
  double& operator()(int i, int k) {
    return v[static_cast<std::size_t>(i) * d + k];
  }
  double operator()(int i, int k) const {
    return v[static_cast<std::size_t>(i) * d + k];
  }
  const double* row(int i) const { return v.data() + static_cast<std::size_t>(i) * d; }
};

struct Options {
  double gamma = 1.0;
  Cost cost = Cost::sqeuclidean;
  std::optional<std::int64_t> band;
};

// ---------------------------------------------------------------- costs

inline double norm(const double* a, int d) {
  double s = 0.0;
  for (int k = 0; k < d; ++k) s += a[k] * a[k];
  return std::sqrt(s);
}

inline double cost_value(const double* a, const double* b, int d, Cost cost) {
  switch (cost) {
    case Cost::sqeuclidean: {
      double s = 0.0;
      for (int k = 0; k < d; ++k) s += (a[k] - b[k]) * (a[k] - b[k]);
      return s;
    }
    case Cost::l1: {
      double s = 0.0;
      for (int k = 0; k < d; ++k) s += std::fabs(a[k] - b[k]);
      return s;
    }
    case Cost::cosine: {
      double dot = 0.0;
      for (int k = 0; k < d; ++k) dot += a[k] * b[k];
      const double na = std::max(norm(a, d), kCosineEps);
      const double nb = std::max(norm(b, d), kCosineEps);
      return 1.0 - dot / (na * nb);
    }
  }
  return 0.0;
}

// ∂δ(a, b)/∂a added to ga (scaled by w), ∂δ(a, b)/∂b added to gb.
inline void add_cost_gradient(const double* a, const double* b, int d,
                              Cost cost, double w, double* ga, double* gb) {
  switch (cost) {
    case Cost::sqeuclidean:
      for (int k = 0; k < d; ++k) {
        ga[k] += w * 2.0 * (a[k] - b[k]);
        gb[k] -= w * 2.0 * (a[k] - b[k]);
      }
      return;
    case Cost::l1:
      for (int k = 0; k < d; ++k) {
        const double diff = a[k] - b[k];
        const double s = diff > 0.0 ? 1.0 : (diff < 0.0 ? -1.0 : 0.0);
        ga[k] += w * s;
        gb[k] -= w * s;
      }
      return;
    case Cost::cosine: {
      // δ = 1 − a·b / (na' nb'), na' = max(‖a‖, ε): where ‖a‖ > ε,
      // ∂δ/∂a = −b/(na' nb') + (a·b) a / (‖a‖³ nb'); where ‖a‖ < ε the clamp
      // is constant and only the first term stays. Same for b.
      double dot = 0.0;
      for (int k = 0; k < d; ++k) dot += a[k] * b[k];
      const double ra = norm(a, d), rb = norm(b, d);
      const double na = std::max(ra, kCosineEps), nb = std::max(rb, kCosineEps);
      for (int k = 0; k < d; ++k) {
        double da = -b[k] / (na * nb);
        if (ra > kCosineEps) da += dot * a[k] / (ra * ra * ra * nb);
        double db = -a[k] / (na * nb);
        if (rb > kCosineEps) db += dot * b[k] / (rb * rb * rb * na);
        ga[k] += w * da;
        gb[k] += w * db;
      }
      return;
    }
  }
}

inline Table cost_table(const Series& x, const Series& y, Cost cost) {
  if (x.d != y.d) throw std::invalid_argument("reference: feature mismatch");
  Table c(x.n, y.n);
  for (int i = 0; i < x.n; ++i)
    for (int j = 0; j < y.n; ++j) c(i, j) = cost_value(x.row(i), y.row(j), x.d, cost);
  return c;
}

// ----------------------------------------------------------------- band

// The header's Sakoe–Chiba band, 0-based cell (i, j) of an n×m grid. For
// n ≤ m row i keeps floor(i·m/n) − w ≤ j ≤ ceil((i+1)·m/n) − 1 + w; for n > m
// the same with rows and columns swapped. No band keeps every cell.
inline bool in_band(int i, int j, int n, int m, std::optional<std::int64_t> band) {
  if (!band) return true;
  if (n > m) return in_band(j, i, m, n, band);
  const std::int64_t w = *band;
  const std::int64_t lo = (static_cast<std::int64_t>(i) * m) / n - w;
  const std::int64_t hi =
      (static_cast<std::int64_t>(i + 1) * m + n - 1) / n - 1 + w;
  return lo <= j && j <= hi;
}

// -------------------------------------------------------------- forward

// softmin_γ(a, b, c) = −γ log Σ exp(−a_k/γ); γ = 0 is the plain min.
inline double softmin(double a, double b, double c, double gamma) {
  const double m = std::min({a, b, c});
  if (gamma == 0.0 || std::isinf(m)) return m;
  const double s = std::exp(-(a - m) / gamma) + std::exp(-(b - m) / gamma) +
                   std::exp(-(c - m) / gamma);
  return m - gamma * std::log(s);
}

// Full (n+1)×(m+1) table R; cells outside the band stay +inf.
inline Table forward(const Table& c, double gamma, std::optional<std::int64_t> band) {
  const int n = c.rows, m = c.cols;
  Table r(n + 1, m + 1, kInf);
  r(0, 0) = 0.0;
  for (int i = 1; i <= n; ++i)
    for (int j = 1; j <= m; ++j)
      if (in_band(i - 1, j - 1, n, m, band))
        r(i, j) = c(i - 1, j - 1) +
                  softmin(r(i - 1, j - 1), r(i - 1, j), r(i, j - 1), gamma);
  return r;
}

// ------------------------------------------------------------ hard path

// Optimal warping path (0-based cells, from (0, 0) to (n−1, m−1)) read back
// from R with the header's tie-break: diagonal, then up (i−1, j), then left
// (i, j−1).
inline std::vector<std::pair<int, int>> hard_path(const Table& r) {
  int i = r.rows - 1, j = r.cols - 1;
  std::vector<std::pair<int, int>> path;
  for (;;) {
    path.emplace_back(i - 1, j - 1);
    if (i == 1 && j == 1) break;
    const double diag = r(i - 1, j - 1), up = r(i - 1, j), left = r(i, j - 1);
    if (diag <= up && diag <= left) {
      --i;
      --j;
    } else if (up <= left) {
      --i;
    } else {
      --j;
    }
    if (i < 1 || j < 1) throw std::logic_error("reference: path left the grid");
  }
  std::reverse(path.begin(), path.end());
  return path;
}

// ------------------------------------------------------------- backward

// Expected alignment E = ∂R_nm/∂C (n×m), by the reverse recursion
// (Cuturi & Blondel 2017, Alg. 2), written as: E(n−1, m−1) = 1 and every other
// cell collects E_s · P(s came from it) over its three successors s, where
// P = exp((R_s − C_s − R_cell)/γ) since R_s − C_s is the softmin over s's
// predecessors. Cells outside the band have E = 0. γ = 0: indicator of the
// tie-broken optimal path.
inline Table alignment(const Table& c, const Table& r, double gamma,
                       std::optional<std::int64_t> band) {
  const int n = c.rows, m = c.cols;
  Table e(n, m, 0.0);
  if (gamma == 0.0) {
    for (const auto& [i, j] : hard_path(r)) e(i, j) = 1.0;
    return e;
  }
  for (int i = n - 1; i >= 0; --i) {
    for (int j = m - 1; j >= 0; --j) {
      if (i == n - 1 && j == m - 1) {
        e(i, j) = 1.0;
        continue;
      }
      if (!in_band(i, j, n, m, band)) continue;
      const double r_cell = r(i + 1, j + 1);
      double sum = 0.0;
      const int succ[3][2] = {{i + 1, j}, {i, j + 1}, {i + 1, j + 1}};
      for (const auto& s : succ) {
        const int si = s[0], sj = s[1];
        if (si >= n || sj >= m || !in_band(si, sj, n, m, band)) continue;
        const double softmin_s = r(si + 1, sj + 1) - c(si, sj);
        sum += e(si, sj) * std::exp((softmin_s - r_cell) / gamma);
      }
      e(i, j) = sum;
    }
  }
  return e;
}

// --------------------------------------------------------- full results

struct Result {
  double value = 0.0;
  Table cost;       // n×m
  Table r;          // (n+1)×(m+1)
  Table e;          // n×m
  Series grad_x;    // n×d, gradient of the value w.r.t. x
  Series grad_y;    // m×d
};

inline void add_series_gradients(const Series& x, const Series& y, const Table& e,
                                 Cost cost, double scale, Series& gx, Series& gy) {
  for (int i = 0; i < x.n; ++i)
    for (int j = 0; j < y.n; ++j)
      if (e(i, j) != 0.0)
        add_cost_gradient(x.row(i), y.row(j), x.d, cost, scale * e(i, j),
                          &gx(i, 0), &gy(j, 0));
}

inline Result soft_dtw_cost(const Table& c, double gamma,
                            std::optional<std::int64_t> band) {
  Result out;
  out.cost = c;
  out.r = forward(c, gamma, band);
  out.value = out.r(c.rows, c.cols);
  out.e = alignment(c, out.r, gamma, band);
  return out;
}

inline Result soft_dtw(const Series& x, const Series& y, const Options& o) {
  Result out = soft_dtw_cost(cost_table(x, y, o.cost), o.gamma, o.band);
  out.grad_x = Series(x.n, x.d);
  out.grad_y = Series(y.n, y.d);
  add_series_gradients(x, y, out.e, o.cost, 1.0, out.grad_x, out.grad_y);
  return out;
}

inline double soft_dtw_value(const Series& x, const Series& y, const Options& o) {
  const Table c = cost_table(x, y, o.cost);
  return forward(c, o.gamma, o.band)(c.rows, c.cols);
}

// D(x, y) = sdtw(x, y) − ½ (sdtw(x, x) + sdtw(y, y)) and its gradients; the
// self terms depend on x (resp. y) through both arguments.
struct Divergence {
  double value = 0.0;
  Series grad_x;
  Series grad_y;
};

inline Divergence divergence(const Series& x, const Series& y, const Options& o) {
  const Result xy = soft_dtw(x, y, o), xx = soft_dtw(x, x, o), yy = soft_dtw(y, y, o);
  Divergence out;
  out.value = xy.value - 0.5 * (xx.value + yy.value);
  out.grad_x = xy.grad_x;
  out.grad_y = xy.grad_y;
  for (std::size_t k = 0; k < out.grad_x.v.size(); ++k)
    out.grad_x.v[k] -= 0.5 * (xx.grad_x.v[k] + xx.grad_y.v[k]);
  for (std::size_t k = 0; k < out.grad_y.v.size(); ++k)
    out.grad_y.v[k] -= 0.5 * (yy.grad_x.v[k] + yy.grad_y.v[k]);
  return out;
}

// ---------------------------------------------------------- brute force

// Calls visit(cells) for every warping path of an n×m grid inside the band
// (steps (1,0), (0,1), (1,1), from (0,0) to (n−1,m−1)).
inline void for_each_path(
    int n, int m, std::optional<std::int64_t> band,
    const std::function<void(const std::vector<std::pair<int, int>>&)>& visit) {
  std::vector<std::pair<int, int>> cells;
  std::function<void(int, int)> walk = [&](int i, int j) {
    if (i >= n || j >= m || !in_band(i, j, n, m, band)) return;
    cells.emplace_back(i, j);
    if (i == n - 1 && j == m - 1) {
      visit(cells);
    } else {
      walk(i + 1, j);
      walk(i, j + 1);
      walk(i + 1, j + 1);
    }
    cells.pop_back();
  };
  walk(0, 0);
}

struct BruteForce {
  double value = 0.0;  // −γ log Σ_paths exp(−cost/γ); γ = 0: min
  Table e;             // Σ_paths p(path) · 1[cell ∈ path] (γ > 0 only)
  long paths = 0;
};

inline BruteForce brute_force(const Table& c, double gamma,
                              std::optional<std::int64_t> band) {
  std::vector<double> costs;
  std::vector<std::vector<std::pair<int, int>>> all;
  for_each_path(c.rows, c.cols, band, [&](const std::vector<std::pair<int, int>>& p) {
    double s = 0.0;
    for (const auto& [i, j] : p) s += c(i, j);
    costs.push_back(s);
    all.push_back(p);
  });
  BruteForce out;
  out.paths = static_cast<long>(costs.size());
  out.e = Table(c.rows, c.cols, 0.0);
  const double lo = *std::min_element(costs.begin(), costs.end());
  if (gamma == 0.0) {
    out.value = lo;
    return out;
  }
  double z = 0.0;
  for (double s : costs) z += std::exp(-(s - lo) / gamma);
  out.value = lo - gamma * std::log(z);
  for (std::size_t p = 0; p < all.size(); ++p) {
    const double prob = std::exp(-(costs[p] - lo) / gamma) / z;
    for (const auto& [i, j] : all[p]) out.e(i, j) += prob;
  }
  return out;
}

}  // namespace softwave_ref
