#pragma once
// What the cost providers (costs.hpp) work with: the work type, a pair's
// lengths, matrices and vectors in team scratch, the blocking of the tile
// products and the staging of feature chunks.

#include <softwave/softdtw.hpp>
#include <type_traits>

#include "geometry.hpp"

namespace softwave::impl {

// Costs, the soft-min's exponentials and the gradient products are formed in
// work_t: float on devices for float and 16-bit inputs, as on the
// CUDA-specialised path (the tests' float32 tolerances are written for it);
// double for double inputs and on host backends, the validation path. R and E
// are double everywhere.
template <class T, class Space>
using work_t =
    std::conditional_t<std::is_same_v<T, double> || runs_on_host<Space>(),
                       double, float>;

// Lengths of both sides of a pair; empty length views mean "full extent".
template <class Space>
struct PairLengths {
  Kokkos::View<const int*, typename Space::memory_space> x, y;
  std::int64_t n_max = 0, m_max = 0;
  PairMap pairs;

  KOKKOS_INLINE_FUNCTION std::int64_t n(std::int64_t p) const {
    return x.extent(0) ? x(pairs.x(p)) : n_max;
  }
  KOKKOS_INLINE_FUNCTION std::int64_t m(std::int64_t p) const {
    return y.extent(0) ? y(pairs.y(p)) : m_max;
  }
};

template <class Space>
using ScratchVector = Kokkos::View<acc_t*, typename Space::scratch_memory_space,
                                   Kokkos::MemoryUnmanaged>;

// A row-major matrix in team scratch, addressed with int offsets. Kokkos 3.4
// Views index in 64 bits: on a GPU that arithmetic was a third of a walk
// step's instructions (SASS, H100). Bounds are checked where Kokkos
// checks View bounds.
template <class Space, class V = acc_t>
class ScratchMatrix {
 public:
  using Storage = Kokkos::View<V*, typename Space::scratch_memory_space,
                               Kokkos::MemoryUnmanaged>;

  ScratchMatrix() = default;
  KOKKOS_INLINE_FUNCTION ScratchMatrix(V* memory, int rows, int pitch)
      : data_(memory), rows_(rows), pitch_(pitch) {}
  // Takes rows × pitch elements of `scratch` (a team_scratch level).
  KOKKOS_INLINE_FUNCTION ScratchMatrix(
      const typename Space::scratch_memory_space& scratch, int rows, int pitch)
      : ScratchMatrix(Storage(scratch, std::size_t(rows) * pitch).data(), rows,
                      pitch) {}
  static std::size_t shmem_size(int rows, int pitch) {
    return Storage::shmem_size(std::size_t(rows) * pitch);
  }

  KOKKOS_INLINE_FUNCTION V& operator()(int r, int c) const {
#ifdef KOKKOS_ENABLE_DEBUG_BOUNDS_CHECK
    if (r < 0 || r >= rows_ || c < 0 || c >= pitch_)
      Kokkos::abort("softwave::ScratchMatrix: index out of bounds");
#endif
    return data_[r * pitch_ + c];
  }
  KOKKOS_INLINE_FUNCTION V* data() const { return data_; }

 private:
  V* data_ = nullptr;
  int rows_ = 0, pitch_ = 0;
};

// Thread items of the tile products hold a block of outputs in registers, so
// each value read from scratch serves several products.
// - Costs: edge × edge cells, 4 × 4 (on x86 hosts as fast as 2 × 2 at
//   d = 64 and faster at d = 1, measured; 3 × 3 is slower).
// - Gradients: rows × features of one side. Devices take 4 × 4. Hosts take
//   one row and 8 contiguous features and skip the cells where the row's E
//   is zero, which most of a tile's cells are away from the alignment path.
template <class Space>
struct Blocking {
  static constexpr bool host = runs_on_host<Space>();
  static constexpr int edge = 4;
  static constexpr int rows = host ? 1 : 4;
  static constexpr int features = host ? 8 : 4;
  KOKKOS_INLINE_FUNCTION static constexpr int count(int n, int block = edge) {
    return (n + block - 1) / block;
  }
};

// Features are staged at most kFeatureChunk at a time (fewer for smaller d,
// which leaves scratch to more teams).
constexpr int kFeatureChunk = 32;
// Elements of a staged chunk that a thread loads before it stores them.
constexpr int kStageBatch = 8;

// A feature chunk of a tile's x rows and y rows in team scratch, in one of
// two layouts of the same memory, so that each thread item reads its values
// at consecutive addresses (immediate offsets from one address, where a
// runtime stride cost a 64-bit address sum per value on a GPU):
// - by_row: x(q, k), for the gradient items (one row, several features);
// - by_feature: xt(k, q), for the cost items (one feature, several rows).
// Rows are padded to whole cost blocks and row pitches to whole feature
// blocks, so blocked loops read (and discard) only staged memory. Both
// pitches are odd: threads that touch the same feature of different rows,
// or consecutive features of one row, fall on different banks.
template <class W, class Space>
struct Staging {
  ScratchMatrix<Space, W> x, y;    // by_row
  ScratchMatrix<Space, W> xt, yt;  // by_feature
  int chunk;                       // features per chunk

  KOKKOS_INLINE_FUNCTION static int rows(int tile) {
    return Blocking<Space>::count(tile) * Blocking<Space>::edge;
  }
  KOKKOS_INLINE_FUNCTION static constexpr int pitch(int chunk) {
    int const padded =
        Blocking<Space>::count(chunk, Blocking<Space>::features) *
        Blocking<Space>::features;
    return padded % 2 ? padded : padded + 1;
  }
  KOKKOS_INLINE_FUNCTION static int feature_pitch(int tile) {
    return rows(tile) + 1;  // rows(tile) is a multiple of the block edge
  }
  // One side, in the larger of the two layouts.
  KOKKOS_INLINE_FUNCTION static std::size_t side_elements(int tile, int chunk) {
    std::size_t const by_row = std::size_t(rows(tile)) * pitch(chunk);
    std::size_t const by_feature = std::size_t(chunk) * feature_pitch(tile);
    return by_row > by_feature ? by_row : by_feature;
  }
  KOKKOS_INLINE_FUNCTION static std::size_t elements(int tile, int chunk) {
    return chunk > 0 ? 2 * side_elements(tile, chunk) : 0;
  }
  // Empty views when nothing is staged (features = 0, cost tensors).
  KOKKOS_INLINE_FUNCTION Staging(W* memory, int tile, int features)
      : x(memory, features ? rows(tile) : 0, pitch(features)),
        y(memory + side_elements(tile, features), features ? rows(tile) : 0,
          pitch(features)),
        xt(memory, features, feature_pitch(tile)),
        yt(memory + side_elements(tile, features), features,
           feature_pitch(tile)),
        chunk(features) {}
};

}  // namespace softwave::impl
