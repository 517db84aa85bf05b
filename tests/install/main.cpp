// Soft-DTW of two short series through the installed softwave, checked
// against the recursion written out here in float64. Exits non-zero on a
// mismatch, so tests/install/run.sh fails.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <softwave/softdtw.hpp>
#include <vector>

namespace {

// sdtw_γ(x, y) for 1-D series with the squared-difference cost:
// R_ij = (x_i − y_j)² + softmin_γ(R_{i−1,j−1}, R_{i−1,j}, R_{i,j−1}).
double reference_soft_dtw(const std::vector<double>& x,
                          const std::vector<double>& y, double gamma) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::size_t n = x.size(), m = y.size();
  std::vector<std::vector<double>> r(n + 1, std::vector<double>(m + 1, inf));
  r[0][0] = 0.0;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = 1; j <= m; ++j) {
      const double a[3] = {r[i - 1][j - 1], r[i - 1][j], r[i][j - 1]};
      const double low = std::min({a[0], a[1], a[2]});
      double sum = 0.0;
      for (double v : a) sum += std::exp(-(v - low) / gamma);
      const double cost = (x[i - 1] - y[j - 1]) * (x[i - 1] - y[j - 1]);
      r[i][j] = cost + low - gamma * std::log(sum);
    }
  return r[n][m];
}

int run() {
  using Space = Kokkos::DefaultExecutionSpace;
  const std::vector<double> x = {0.0, 1.0, 2.0, 1.5, -0.5};
  const std::vector<double> y = {0.2, 1.8, 0.9, -1.0};
  const double gamma = 0.5;

  // One pair, d = 1. The API takes row-major views (LayoutRight), which is
  // not the default layout on GPUs, so it is spelled out.
  const int n = static_cast<int>(x.size()), m = static_cast<int>(y.size());
  using Series =
      Kokkos::View<double***, Kokkos::LayoutRight, Space::memory_space>;
  Series dx("x", 1, n, 1);
  Series dy("y", 1, m, 1);
  Kokkos::View<double*, Space::memory_space> values("values", 1);
  auto hx = Kokkos::create_mirror_view(dx);
  auto hy = Kokkos::create_mirror_view(dy);
  for (int i = 0; i < n; ++i) hx(0, i, 0) = x[i];
  for (int j = 0; j < m; ++j) hy(0, j, 0) = y[j];
  Kokkos::deep_copy(dx, hx);
  Kokkos::deep_copy(dy, hy);

  softwave::SoftDTWOptions options;
  options.gamma = gamma;
  softwave::soft_dtw(Space(), dx, dy, values, options);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), values);

  const double want = reference_soft_dtw(x, y, gamma);
  const double got = hv(0);
  const double error = std::abs(got - want) / std::max(1.0, std::abs(want));
  std::printf("softwave::soft_dtw on %s: %.15g, reference %.15g, error %.2e\n",
              Space::name(), got, want, error);
  if (!(error <= 1e-12)) {
    std::printf("FAIL: the installed softwave disagrees with the reference\n");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Kokkos::ScopeGuard kokkos(argc, argv);
  return run();
}
