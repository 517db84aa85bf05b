#pragma once
// Where cells and tiles lie: the Sakoe–Chiba band, the tile grid and its
// anti-diagonal wavefront, and which pair of series a work item belongs to.

#include <cstdint>
#include <softwave/kokkos_compat.hpp>

namespace softwave::impl {

// The recursion runs in double for every input type (see softdtw.hpp).
using acc_t = double;

// Host backends (OpenMP, Serial) run one thread per tile; devices one team.
template <class Space>
constexpr bool runs_on_host() {
  return Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                    typename Space::memory_space>::accessible;
}

// Sakoe–Chiba band following the diagonal of an n×m grid (0-based cells).
// For n <= m, row i keeps floor(i·m/n) − w <= j <= ceil((i+1)·m/n) − 1 + w:
// the columns the straight diagonal crosses in that row, widened by w. These
// row intervals are non-decreasing and overlap or touch, so a warping path
// always exists inside. For n > m the roles of rows and columns swap.
struct Band {
  std::int64_t width = -1;  // < 0: no band

  KOKKOS_INLINE_FUNCTION static std::int64_t lower(std::int64_t i,
                                                   std::int64_t short_side,
                                                   std::int64_t long_side,
                                                   std::int64_t w) {
    return (i * long_side) / short_side - w;
  }
  KOKKOS_INLINE_FUNCTION static std::int64_t upper(std::int64_t i,
                                                   std::int64_t short_side,
                                                   std::int64_t long_side,
                                                   std::int64_t w) {
    return ((i + 1) * long_side + short_side - 1) / short_side - 1 + w;
  }

  KOKKOS_INLINE_FUNCTION bool contains(std::int64_t i, std::int64_t j,
                                       std::int64_t n, std::int64_t m) const {
    if (width < 0) return true;
    if (n <= m) return lower(i, n, m, width) <= j && j <= upper(i, n, m, width);
    return lower(j, m, n, width) <= i && i <= upper(j, m, n, width);
  }

  // The first in-band column of row i (0-based). For n > m it is the least j
  // whose row interval [lower(j), upper(j)] reaches i: upper(j) >= i holds
  // exactly when j + 1 > (i − w)·m/n.
  KOKKOS_INLINE_FUNCTION std::int64_t first(std::int64_t i, std::int64_t n,
                                            std::int64_t m) const {
    if (n <= m) {
      std::int64_t const low = lower(i, n, m, width);
      return low > 0 ? low : 0;
    }
    return i - width > 0 ? ((i - width) * m) / n : 0;
  }

  // The last in-band column of row i (0-based). For n > m it is the greatest
  // j whose row interval reaches down to i: lower(j) <= i holds exactly when
  // j·n < (i + w + 1)·m.
  KOKKOS_INLINE_FUNCTION std::int64_t last(std::int64_t i, std::int64_t n,
                                           std::int64_t m) const {
    std::int64_t const high =
        n <= m ? upper(i, n, m, width) : ((i + width + 1) * m - 1) / n;
    return high < m - 1 ? high : m - 1;
  }

  // At most this many cells of one row are inside: ceil(m/n) + 2 + 2w for
  // n <= m, and (2w + 1)·m/n + 2 <= 2w + 3 for n > m.
  KOKKOS_INLINE_FUNCTION std::int64_t row_cells(std::int64_t n,
                                                std::int64_t m) const {
    return 2 * width + 3 + (m + n - 1) / n;
  }

  // Whether any cell of rows [r0, r1] × columns [c0, c1] is inside. The band
  // is a monotone staircase, so its rows' union over [r0, r1] is one interval.
  KOKKOS_INLINE_FUNCTION bool touches(std::int64_t r0, std::int64_t r1,
                                      std::int64_t c0, std::int64_t c1,
                                      std::int64_t n, std::int64_t m) const {
    if (width < 0) return true;
    if (n <= m)
      return lower(r0, n, m, width) <= c1 && upper(r1, n, m, width) >= c0;
    return lower(c0, m, n, width) <= r1 && upper(c1, m, n, width) >= r0;
  }
};

// The N×M grid cut into T×T tiles. Tile (I, J) needs the last row of
// (I−1, J), the last column of (I, J−1) and the corner of (I−1, J−1), so all
// tiles with I + J = k can run at once: k is the tile anti-diagonal.
struct Tiling {
  int tile = 0;
  int rows = 0;  // tile rows: ceil(N / T)
  int cols = 0;  // tile columns: ceil(M / T)

  Tiling() = default;
  Tiling(int tile_edge, std::int64_t n, std::int64_t m)
      : tile(tile_edge),
        rows(static_cast<int>((n + tile_edge - 1) / tile_edge)),
        cols(static_cast<int>((m + tile_edge - 1) / tile_edge)) {}

  int diagonals() const { return rows + cols - 1; }
  int first_row(int k) const { return k - cols + 1 > 0 ? k - cols + 1 : 0; }
  int tiles_on(int k) const {
    int const last = k < rows - 1 ? k : rows - 1;
    return last - first_row(k) + 1;
  }
};

// The cells of tile (I, J) for one pair: 1-based grid rows i0+1 .. i0+h and
// columns j0+1 .. j0+w (row/column 0 of the grid is the R boundary).
struct TileCells {
  int I, J;
  std::int64_t i0, j0;
  int h, w;

  KOKKOS_INLINE_FUNCTION TileCells(int tile_row, int tile_col, int tile,
                                   std::int64_t n, std::int64_t m)
      : I(tile_row),
        J(tile_col),
        i0(std::int64_t(tile_row) * tile),
        j0(std::int64_t(tile_col) * tile),
        h(static_cast<int>(n - i0 < tile ? n - i0 : tile)),
        w(static_cast<int>(m - j0 < tile ? m - j0 : tile)) {}

  KOKKOS_INLINE_FUNCTION bool exists() const { return h > 0 && w > 0; }
  // Whether the grid goes on below / to the right of the tile.
  KOKKOS_INLINE_FUNCTION bool rows_below(std::int64_t n) const {
    return i0 + h < n;
  }
  KOKKOS_INLINE_FUNCTION bool cols_right(std::int64_t m) const {
    return j0 + w < m;
  }
  KOKKOS_INLINE_FUNCTION bool touches(const Band& band, std::int64_t n,
                                      std::int64_t m) const {
    return band.touches(i0, i0 + h - 1, j0, j0 + w - 1, n, m);
  }
};

// Which series a pair reads: batch mode pairs x[b] with y[b]; all-pairs mode
// numbers the pairs (a, b) of X × Y row-major, starting at `begin`; the
// triangle (all pairs of one set with itself, whose matrix is symmetric)
// numbers only those with a <= b, row-major: row a starts at pair
// a·B − a(a − 1)/2 for B = y_count series.
struct PairMap {
  std::int64_t begin = 0;
  std::int64_t y_count = 0;  // 0: batch mode
  bool triangle = false;

  KOKKOS_INLINE_FUNCTION std::int64_t x(std::int64_t p) const {
    if (triangle) return triangle_row(begin + p);
    return y_count ? (begin + p) / y_count : begin + p;
  }
  KOKKOS_INLINE_FUNCTION std::int64_t y(std::int64_t p) const {
    if (triangle) {
      std::int64_t const a = triangle_row(begin + p);
      return a + (begin + p - row_start(a));
    }
    return y_count ? (begin + p) % y_count : begin + p;
  }
  // Pairs numbered in all: B1·B2, or B(B + 1)/2 for the triangle.
  static std::int64_t count(std::int64_t x_count, std::int64_t y_count,
                            bool triangle) {
    return triangle ? y_count * (y_count + 1) / 2 : x_count * y_count;
  }

 private:
  KOKKOS_INLINE_FUNCTION std::int64_t row_start(std::int64_t a) const {
    return a * y_count - a * (a - 1) / 2;
  }
  // The row a with row_start(a) <= t < row_start(a + 1): the root of the
  // quadratic, then exact integer steps for its rounding.
  KOKKOS_INLINE_FUNCTION std::int64_t triangle_row(std::int64_t t) const {
    double const b = double(2 * y_count + 1);
    std::int64_t a =
        std::int64_t((b - compat::sqrt(b * b - 8.0 * double(t))) / 2);
    a = a < 0 ? 0 : (a >= y_count ? y_count - 1 : a);
    while (a > 0 && row_start(a) > t) --a;
    while (a + 1 < y_count && row_start(a + 1) <= t) ++a;
    return a;
  }
};

}  // namespace softwave::impl
