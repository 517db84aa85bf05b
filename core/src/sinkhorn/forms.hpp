#pragma once
// The cost forms as the tiled passes see them (passes.hpp): one side owns
// rows (one per thread), the other side is streamed through team scratch in
// tiles of columns, and each form says what a tile holds and how a pair's
// cost is formed from it: cost(b, i, ii, jj, w, tile) for global row i,
// row ii of the team's block, column jj of a tile of width w. A column pass is
// a row pass of the transposed form (transposed()), so every update reads
// memory in order.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <softwave/sinkhorn.hpp>

namespace softwave::impl {

// Rows owned by a team and columns per tile. On a GPU each thread owns one
// row; on a host each team is one thread that owns `rows` rows, so a tile
// is reused across them from cache. A GPU tile of a cost matrix holds
// rows × columns values: 32 KiB in float and in double, within the 48 KiB
// of team scratch every GPU has.
template <class Space, class T>
struct PassShape {
  static constexpr bool host =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                 typename Space::memory_space>::accessible;
  static constexpr int team_size = host ? 1 : 128;
  static constexpr int rows_per_thread = host ? 16 : 1;
  static constexpr int rows = team_size * rows_per_thread;
  static constexpr int columns = host ? 256 : (sizeof(T) == 8 ? 32 : 64);
};

// C_ij = c·‖x_i − y_j‖². The tile holds the columns' coordinates; a row's
// coordinates are read from global memory (its cache keeps them).
template <class T, class Space>
struct PointsForm {
  OTView3<const T, Space> x, y;
  T scale;  // c

  KOKKOS_INLINE_FUNCTION std::int64_t batch() const { return x.extent(0); }
  KOKKOS_INLINE_FUNCTION std::int64_t rows() const { return x.extent(1); }
  KOKKOS_INLINE_FUNCTION std::int64_t columns() const { return y.extent(1); }
  std::int64_t tile_values(int columns) const {
    return std::int64_t(columns) * std::int64_t(x.extent(2));
  }
  PointsForm transposed() const { return {y, x, scale}; }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void load_tile(const Member& team, std::int64_t b,
                                        std::int64_t, std::int64_t j0, int w,
                                        T* tile) const {
    int const d = x.extent(2);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w * d),
                         [&](int e) { tile[e] = y(b, j0 + e / d, e % d); });
  }
  KOKKOS_INLINE_FUNCTION T cost(std::int64_t b, std::int64_t i, int, int jj,
                                int, const T* tile) const {
    int const d = x.extent(2);
    T const* yj = tile + jj * d;
    T sum = 0;
    for (int k = 0; k < d; ++k) {
      T const diff = x(b, i, k) - yj[k];
      sum += diff * diff;
    }
    return scale * sum;
  }
  KOKKOS_INLINE_FUNCTION T pair_cost(std::int64_t b, std::int64_t i,
                                     std::int64_t j) const {
    int const d = x.extent(2);
    T sum = 0;
    for (int k = 0; k < d; ++k) {
      T const diff = x(b, i, k) - y(b, j, k);
      sum += diff * diff;
    }
    return scale * sum;
  }
};

// C_ij = u_i + v_j − P_i·Q_j. The tile holds the columns' Q_j and v_j.
template <class T, class Space>
struct LowRankForm {
  OTView2<const T, Space> u, v;
  OTView3<const T, Space> p, q;

  KOKKOS_INLINE_FUNCTION std::int64_t batch() const { return p.extent(0); }
  KOKKOS_INLINE_FUNCTION std::int64_t rows() const { return p.extent(1); }
  KOKKOS_INLINE_FUNCTION std::int64_t columns() const { return q.extent(1); }
  std::int64_t tile_values(int columns) const {
    return std::int64_t(columns) * std::int64_t(q.extent(2) + 1);
  }
  LowRankForm transposed() const { return {v, u, q, p}; }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void load_tile(const Member& team, std::int64_t b,
                                        std::int64_t, std::int64_t j0, int w,
                                        T* tile) const {
    int const r1 = q.extent(2) + 1;
    bool const has_v = v.extent(0) != 0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w * r1), [&](int e) {
      int const jj = e / r1, k = e % r1;
      tile[e] = k + 1 < r1 ? q(b, j0 + jj, k) : (has_v ? v(b, j0 + jj) : T(0));
    });
  }
  KOKKOS_INLINE_FUNCTION T cost(std::int64_t b, std::int64_t i, int, int jj,
                                int, const T* tile) const {
    int const r = p.extent(2);
    T const* qj = tile + jj * (r + 1);
    T c = qj[r] + (u.extent(0) ? u(b, i) : T(0));
    for (int k = 0; k < r; ++k) c -= p(b, i, k) * qj[k];
    return c;
  }
  KOKKOS_INLINE_FUNCTION T pair_cost(std::int64_t b, std::int64_t i,
                                     std::int64_t j) const {
    int const r = p.extent(2);
    T c = (u.extent(0) ? u(b, i) : T(0)) + (v.extent(0) ? v(b, j) : T(0));
    for (int k = 0; k < r; ++k) c -= p(b, i, k) * q(b, j, k);
    return c;
  }
};

// A given cost matrix. The tile holds the block of the team's rows × the
// tile's columns, read so that consecutive threads touch consecutive
// addresses whichever way the matrix is traversed. Its rows are one value
// longer than a tile is wide: the threads of a warp, one row each, read one
// column at a time, and with a stride of a power of two they would all hit
// one shared-memory bank.
template <class T, class Space>
struct MatrixForm {
  OTView3<const T, Space> c;  // (B, N, K)
  bool transpose = false;     // rows are c's columns
  static constexpr int stride = PassShape<Space, T>::columns + 1;

  KOKKOS_INLINE_FUNCTION std::int64_t batch() const { return c.extent(0); }
  KOKKOS_INLINE_FUNCTION std::int64_t rows() const {
    return transpose ? c.extent(2) : c.extent(1);
  }
  KOKKOS_INLINE_FUNCTION std::int64_t columns() const {
    return transpose ? c.extent(1) : c.extent(2);
  }
  std::int64_t tile_values(int) const {
    return std::int64_t(stride) * PassShape<Space, T>::rows;
  }
  MatrixForm transposed() const { return {c, !transpose}; }

  template <class Member>
  KOKKOS_INLINE_FUNCTION void load_tile(const Member& team, std::int64_t b,
                                        std::int64_t i0, std::int64_t j0, int w,
                                        T* tile) const {
    constexpr int R = PassShape<Space, T>::rows;
    std::int64_t const n = rows();
    int const h = n - i0 < R ? int(n - i0) : R;
    if (!transpose) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, h * w), [&](int e) {
        int const ii = e / w, jj = e % w;
        tile[ii * stride + jj] = c(b, i0 + ii, j0 + jj);
      });
    } else {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, h * w), [&](int e) {
        int const jj = e / h, ii = e % h;
        tile[ii * stride + jj] = c(b, j0 + jj, i0 + ii);
      });
    }
  }
  // ii: the row within the team's block.
  KOKKOS_INLINE_FUNCTION T cost(std::int64_t, std::int64_t, int ii, int jj, int,
                                const T* tile) const {
    return tile[ii * stride + jj];
  }
  KOKKOS_INLINE_FUNCTION T pair_cost(std::int64_t b, std::int64_t i,
                                     std::int64_t j) const {
    return transpose ? c(b, j, i) : c(b, i, j);
  }
};

// The internal form of each public one.
template <class T, class Space>
PointsForm<T, Space> internal_form(const PointClouds<T, Space>& f) {
  return {f.x, f.y, f.cost == PointCost::half_sqeuclidean ? T(0.5) : T(1)};
}
template <class T, class Space>
LowRankForm<T, Space> internal_form(const LowRankCost<T, Space>& f) {
  return {f.u, f.v, f.p, f.q};
}
template <class T, class Space>
MatrixForm<T, Space> internal_form(const CostMatrix<T, Space>& f) {
  return {f.cost, false};
}

}  // namespace softwave::impl
