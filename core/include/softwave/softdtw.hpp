#pragma once
// Soft-DTW: values, gradients, expected alignments, divergences, all-pairs
// matrices and hard DTW, batched, on any Kokkos execution space.
//
// Definitions (x: N×d, y: M×d, cost C_ij = δ(x_i, y_j), γ ≥ 0, 1-based cells):
//   R_00 = 0, R_i0 = R_0j = +∞,
//   R_ij = C_ij + softmin_γ(R_{i-1,j-1}, R_{i-1,j}, R_{i,j-1}),
//   softmin_γ(a) = −γ log Σ_k exp(−a_k/γ)   (γ = 0: plain min, hard DTW),
//   sdtw(x, y) = R_NM.
// The gradient with respect to C is the expected alignment E (entries in
// [0, 1]); for γ = 0 it is the indicator of the optimal warping path. Ties in
// hard DTW are broken deterministically: diagonal, then up (i-1, j), then left
// (i, j-1), both in the value's argmin and in the path.
//
// Sakoe–Chiba band of half-width w (0-based cells i < N, j < M): the band
// follows the diagonal of the N×M rectangle, measured along its longer side.
// For N ≤ M, row i keeps the columns j with
//     floor(i·M/N) − w  ≤  j  ≤  ceil((i+1)·M/N) − 1 + w,
// i.e. the cells the straight diagonal crosses, widened by w on each side; for
// N > M the same holds with rows and columns swapped. For N = M this is exactly
// |i − j| ≤ w. The band always contains a warping path, so values stay finite;
// a band at least max(N, M) wide equals no band. Tiles outside the band are
// never computed.
//
// Variable lengths: lengths.x[b] = N_b ≤ N and lengths.y[b] = M_b ≤ M restrict
// pair b to the top-left N_b×M_b corner of its padded inputs (the band then
// follows the diagonal of N_b×M_b). Padding is never read.
//
// Precision: inputs are float, double, bfloat16 or float16 (half_types.hpp).
// Values, grad_output and all-pairs matrices have type value_t<T> (float for
// the 16-bit types, else T); gradients and alignments have the input type,
// and for the 16-bit types are accumulated in float and rounded once at the
// end. The 16-bit inputs are read in place (no float copy is made). R and E
// are carried in double whatever the input type, so the soft-argmin weights
// that make up E keep their digits at small γ. On host backends everything
// else is double too: float32 inputs give value and gradient errors below
// 1e-7 against a float64 reference for γ ∈ {1, 0.1, 0.01} at N = 1024
// (tests/test_softdtw_accuracy.cpp). On devices, for float and 16-bit inputs,
// both the portable kernels and the CUDA-specialised path (Kernel) form costs
// and gradient products in float and take the soft-min's exp and log in float
// (on differences formed in double): on an H100, value errors stay below 2e-7
// and gradient errors below 1e-5 there. Double inputs are double throughout.
//
// Memory (beyond inputs and outputs), with T the tile size (tile_size()),
// P the pairs in flight, N, M the padded lengths, R = ceil(N/T) tile rows and
// C = ceil(M/T) tile columns (bytes; measured by perf/ to within 1.3%):
//   forward only:        8·P·((N + 1) + (M + 1) + 3·R + 1)
//   forward + backward:  8·P·(2·R·Wr + 2·C·Wc + 1)
// with Wr = M + 1 and Wc = N + 1 without a band. With a band of half-width w
// the checkpoints keep only in-band cells: Wr = min(M + 1, 2w + 3 +
// ceil(M_b/N_b)) and Wc = min(N + 1, 2w + 3 + ceil(N_b/M_b)), maximised over
// the pairs, so band-limited work takes band-limited memory. These are
// tile-boundary checkpoints of R and of the backward messages
// (workspace_bytes() gives the total); no B×N×M table, nor any array of
// R·C tiles, is ever held (the optional alignment output E is the
// caller's). Host backends add a per-thread team scratch of about
// 4·(T+1)²·8 bytes.
// For 16-bit inputs, the gradients asked for add their float accumulators:
// 4·(B·N·d) bytes for grad_x, 4·(B·M·d) for grad_y.
// All-pairs streams pairs through the forward kernel in chunks whose
// workspace stays under 256 MiB.
//
// Every entry point takes the execution-space instance first; every kernel,
// allocation and copy runs on it and is labelled softwave::softdtw::*. Calls
// are asynchronous with respect to the host except where noted: the checks
// that read the data fence the instance once per call unless
// SoftDTWOptions::check_values is false, and a band fences it once to size
// its checkpoints. On Kokkos::Cuda every call's workspace is stream-ordered
// (cudaMallocAsync on the instance's stream), so nothing else waits.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <optional>
#include <softwave/errors.hpp>
#include <softwave/half_types.hpp>
#include <softwave/kernel_choice.hpp>
#include <type_traits>

namespace softwave {

// Built-in costs, computed inside the kernels (never stored as B×N×M):
//   sqeuclidean: Σ_k (x_k − y_k)²
//   l1:          Σ_k |x_k − y_k|             (subgradient sign(0) = 0)
//   cosine:      1 − x·y / (max(‖x‖, ε) · max(‖y‖, ε)),  ε = 1e-8
enum class Cost { sqeuclidean, l1, cosine };

// Which implementation runs the sweeps (Kernel, softwave/kernel_choice.hpp).
// The CUDA-specialised path (backends/cuda) applies on Kokkos::Cuda to
// float, bfloat16 or float16 data with γ > 0, no band, and either the
// sqeuclidean cost with d ≤ 64 or a cost tensor, all arrays contiguous. Its
// workspace for forward + backward is 8·S·M + 4·S·M + 512·S·ceil((M + 31)/32)
// bytes per pair (S = ceil(N/32) row strips; forward only: 8·S·M), allocated on
// the instance's stream in launches of at most 256 MiB (at least one pair). So
// that allocation stays cheap, the device's default memory pool is set to
// keep up to 256 MiB reserved between calls (a higher threshold is kept).
// ∇y is accumulated with atomic adds, so it can differ in the last bits
// from run to run.
//
// Kernel::pairs is the portable pair-parallel path: each thread runs whole
// pairs, visiting only the band's cells, so a pair costs O(N·w) with a band
// of half-width w. Values and hard-DTW paths on every backend (soft_dtw,
// soft_dtw_cost, divergences, pairwise, dtw_path): one rolling row of M + 1
// doubles per pair (dtw_path adds N·M bytes a pair in flight for the steps
// it follows back, in chunks of at most 256 MiB); on host backends, γ > 0
// walks anti-diagonals in SIMD lanes, in one block of 8·(7·(N + 2) + d·(N +
// M + 8)) bytes a thread (d = 0 for d = 1 and cosine). Gradients and
// alignments on host backends for γ > 0 (every built-in cost and cost
// tensors): the forward keeps each anti-diagonal's R and soft-min parts
// over the band's cells and E runs back along them, one block a thread of
// 8·(2·S + 4·(N + 2) + d·(N + M + 8) + G + 3·(N + M + 2)) bytes (S: the
// band's cells plus about 2·(N + M), N·M + 2·(N + M) + 4 without a band;
// G = (2·D + 1)·(N + M) + 1024 for d > 1 and for cosine, with D = d
// rounded up to a multiple of 8, else d·(N + M + 8); d = 0 in the d·(N +
// M + 8) term for cosine). Anything else asked of it
// (hard-DTW gradients, gradients on a device) is an argument error naming
// `kernel`. `automatic` takes it on host backends
// for calls of at least four pairs a thread (the CPU main job: many short
// series), for gradients while a thread's block stays under 128 MiB (pairs
// of up to about 2,900 × 2,900 points without a band); `portable` is the
// tiled wavefront, which spreads one pair over many threads.

struct SoftDTWOptions {
  double gamma = 1.0;             // γ ≥ 0 and finite; 0 is hard DTW
  Cost cost = Cost::sqeuclidean;  // ignored by the cost-tensor entry points
  std::optional<std::int64_t>
      band;  // Sakoe–Chiba half-width w ≥ 0; none = full
  // Tile edge T >= 1; 0 chooses from the execution space's team scratch
  // (64 on host backends, 32 on GPUs). Too large a tile for the scratch
  // available is an error naming `tile`.
  int tile = 0;
  Kernel kernel = Kernel::automatic;
  // Checks that read the data: lengths within [1, N] (or [1, M]) and
  // finite x, y, cost and grad_output. true: a violation throws
  // invalid_argument naming the argument; the checks are queued on the
  // instance and read back with one fence per call. false: no check fences
  // the instance (for training loops on a GPU, where a fence per call stalls
  // the host); lengths
  // outside the range are clamped into it, and
  // non-finite inputs are used as they are: the results of the pairs they
  // touch are unspecified (with γ > 0 their values come out NaN or +∞).
  // Shapes and options are always checked (on the host, without waiting).
  bool check_values = true;
};

// What pairwise() returns.
enum class PairwiseValue { soft_dtw, divergence };

// What nearest_neighbours() did with its query × reference pairs; every
// pair is counted once: pairs = pruned + pruned_reverse + abandoned +
// completed.
struct SearchStatistics {
  std::int64_t pairs = 0;
  // Cut, before any walk, by the larger of LB_Kim (the first and last
  // cells) and LB_Keogh (the query against the reference's envelope).
  std::int64_t pruned = 0;
  // Cut by LB_Keogh the other way (the reference against the query's
  // envelope).
  std::int64_t pruned_reverse = 0;
  std::int64_t abandoned = 0;  // walks stopped early against the k-th best
  std::int64_t completed = 0;  // walks that ran to the end
};

// Row-major views in the execution space's memory.
template <class T, class Space>
using ConstSeriesView =  // (B, N, d) series or (B, N, M) cost tensor
    Kokkos::View<const T***, Kokkos::LayoutRight, typename Space::memory_space>;
template <class T, class Space>
using ArrayView3 =
    Kokkos::View<T***, Kokkos::LayoutRight, typename Space::memory_space>;
template <class T, class Space>
using ArrayView2 =
    Kokkos::View<T**, Kokkos::LayoutRight, typename Space::memory_space>;
template <class T, class Space>
using ArrayView1 = Kokkos::View<T*, typename Space::memory_space>;

// Per-pair lengths for padded batches; an empty view means "full length".
template <class Space>
struct Lengths {
  Kokkos::View<const int*, typename Space::memory_space> x;  // (B,) or (B1,)
  Kokkos::View<const int*, typename Space::memory_space> y;  // (B,) or (B2,)
};

// Outputs of the backward pass on series. Every member is optional (leave it
// empty to skip it); every output given is overwritten, never added to.
// grad_x and grad_y are gradients of Σ_b grad_output[b] · value[b]
// (grad_output empty = all ones; it must be finite), so autograd can pass its
// incoming gradient. `alignment` is each pair's expected alignment E itself,
// not scaled by grad_output.
template <class T, class Space>
struct SeriesGradients {
  ArrayView3<T, Space> grad_x;     // (B, N, d)
  ArrayView3<T, Space> grad_y;     // (B, M, d)
  ArrayView3<T, Space> alignment;  // (B, N, M): E, zero outside each pair
  Kokkos::View<const value_t<T>*, typename Space::memory_space>
      grad_output;  // (B,)
};

// Outputs of the backward pass on a cost tensor: grad_cost is E scaled by
// grad_output (zero outside each pair's N_b×M_b corner and outside the band).
template <class T, class Space>
struct CostGradients {
  ArrayView3<T, Space> grad_cost;  // (B, N, M)
  Kokkos::View<const value_t<T>*, typename Space::memory_space>
      grad_output;  // (B,)
};

namespace impl {
// Keeps a parameter out of template argument deduction (std::type_identity).
template <class U>
struct nondeduced {
  using type = U;
};
template <class U>
using nondeduced_t = typename nondeduced<U>::type;

template <class Space, class T>
void soft_dtw(const Space& space, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView1<value_t<T>, Space> values,
              const SeriesGradients<T, Space>* gradients,
              const SoftDTWOptions& options, const Lengths<Space>& lengths);
template <class Space, class T>
void soft_dtw_cost(const Space& space, ConstSeriesView<T, Space> cost,
                   ArrayView1<value_t<T>, Space> values,
                   const CostGradients<T, Space>* gradients,
                   const SoftDTWOptions& options,
                   const Lengths<Space>& lengths);
template <class Space, class T>
void soft_dtw_divergence(const Space& space, ConstSeriesView<T, Space> x,
                         ConstSeriesView<T, Space> y,
                         ArrayView1<value_t<T>, Space> values,
                         const SeriesGradients<T, Space>* gradients,
                         const SoftDTWOptions& options,
                         const Lengths<Space>& lengths);
template <class Space, class T>
void pairwise(const Space& space, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView2<value_t<T>, Space> matrix,
              PairwiseValue what, const SoftDTWOptions& options,
              const Lengths<Space>& lengths);
template <class Space, class T>
void nearest_neighbours(const Space& space, ConstSeriesView<T, Space> queries,
                        ConstSeriesView<T, Space> references,
                        ArrayView2<std::int64_t, Space> indices,
                        ArrayView2<value_t<T>, Space> distances,
                        const SoftDTWOptions& options,
                        const Lengths<Space>& lengths,
                        SearchStatistics* statistics);
template <class Space, class T>
void dtw_path(const Space& space, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView1<value_t<T>, Space> values,
              ArrayView3<int, Space> path, ArrayView1<int, Space> path_length,
              const SoftDTWOptions& options, const Lengths<Space>& lengths);
template <class Space>
int tile_size(const Space& space, const SoftDTWOptions& options);
template <class Space>
std::uint64_t workspace_bytes(const Space& space, std::int64_t pairs,
                              std::int64_t n, std::int64_t m,
                              const SoftDTWOptions& options, bool backward,
                              int d);

// Compile-time checks of the entry points' arguments: a wrong argument fails
// at the call, in a static_assert that names it, instead of deep in a View
// conversion. view_for<V, Space, Rank> holds when V is a Kokkos::View of rank
// Rank in Space's memory space, LayoutRight from rank 2 up (rank-1 views
// convert between LayoutLeft and LayoutRight). input_t and output_t are a
// view's value type without and with const (void when V is not a View).
template <class V, class Space, unsigned Rank, class = void>
struct view_for_t : std::false_type {};
template <class V, class Space, unsigned Rank>
struct view_for_t<V, Space, Rank,
                  std::enable_if_t<Kokkos::is_view<V>::value &&
                                   Kokkos::is_execution_space<Space>::value>>
    : std::bool_constant<static_cast<unsigned>(V::rank) == Rank &&
                         std::is_same_v<typename V::memory_space,
                                        typename Space::memory_space> &&
                         (Rank == 1 || std::is_same_v<typename V::array_layout,
                                                      Kokkos::LayoutRight>)> {};
template <class V, class Space, unsigned Rank>
constexpr bool view_for = view_for_t<V, Space, Rank>::value;

template <class V, class = void>
struct value_types {
  using input = void;
  using output = void;
};
template <class V>
struct value_types<V, std::enable_if_t<Kokkos::is_view<V>::value>> {
  using input = typename V::non_const_value_type;
  using output = typename V::value_type;
};
template <class V>
using input_t = typename value_types<V>::input;
template <class V>
using output_t = typename value_types<V>::output;

// The input types the library is compiled for.
template <class T>
constexpr bool is_input_type =
    std::is_same_v<T, float> || std::is_same_v<T, double> || is_half_v<T>;
}  // namespace impl

// values[b] = sdtw_γ(x[b, :N_b], y[b, :M_b]).  x: (B, N, d), y: (B, M, d).
template <class Space, class XView, class YView, class ValuesView>
void soft_dtw(const Space& space, const XView& x, const YView& y,
              const ValuesView& values, const SoftDTWOptions& options = {},
              const Lengths<Space>& lengths = {}) {
  using T = impl::input_t<XView>;
  static_assert(
      impl::view_for<XView, Space, 3> && impl::is_input_type<T>,
      "softwave::soft_dtw: x must be a rank-3 Kokkos::View (B, N, d) of float, "
      "double, bfloat16 or float16, LayoutRight, in the execution space's "
      "memory space");
  static_assert(impl::view_for<YView, Space, 3> &&
                    std::is_same_v<impl::input_t<YView>, T>,
                "softwave::soft_dtw: y must be a rank-3 Kokkos::View (B, M, d) "
                "of x's value type, LayoutRight, in the execution space's "
                "memory space");
  static_assert(
      impl::view_for<ValuesView, Space, 1> &&
          std::is_same_v<impl::output_t<ValuesView>, value_t<T>>,
      "softwave::soft_dtw: values must be a rank-1 Kokkos::View (B,) of "
      "value_t<T> (float for float and 16-bit inputs, double for double), not "
      "const, in the execution space's memory space");
  impl::soft_dtw<Space, T>(space, x, y, values, nullptr, options, lengths);
}

// Values (optional: pass an empty view) and the requested gradients.
template <class Space, class XView, class YView, class T>
void soft_dtw_value_and_grad(
    const Space& space, const XView& x, const YView& y,
    impl::nondeduced_t<ArrayView1<value_t<T>, Space>> values,
    const SeriesGradients<T, Space>& gradients,
    const SoftDTWOptions& options = {}, const Lengths<Space>& lengths = {}) {
  static_assert(impl::view_for<XView, Space, 3> &&
                    std::is_same_v<impl::input_t<XView>, T>,
                "softwave::soft_dtw_value_and_grad: x must be a rank-3 "
                "Kokkos::View (B, N, d) of the gradients' value type, "
                "LayoutRight, in the execution space's memory space");
  static_assert(impl::view_for<YView, Space, 3> &&
                    std::is_same_v<impl::input_t<YView>, T>,
                "softwave::soft_dtw_value_and_grad: y must be a rank-3 "
                "Kokkos::View (B, M, d) of the gradients' value type, "
                "LayoutRight, in the execution space's memory space");
  impl::soft_dtw<Space, T>(space, x, y, values, &gradients, options, lengths);
}

// Soft-DTW on a caller-supplied cost tensor C: (B, N, M), for any other cost.
template <class Space, class CostView, class ValuesView>
void soft_dtw_cost(const Space& space, const CostView& cost,
                   const ValuesView& values, const SoftDTWOptions& options = {},
                   const Lengths<Space>& lengths = {}) {
  using T = impl::input_t<CostView>;
  static_assert(impl::view_for<CostView, Space, 3> && impl::is_input_type<T>,
                "softwave::soft_dtw_cost: cost must be a rank-3 Kokkos::View "
                "(B, N, M) of float, double, bfloat16 or float16, LayoutRight, "
                "in the execution space's memory space");
  static_assert(
      impl::view_for<ValuesView, Space, 1> &&
          std::is_same_v<impl::output_t<ValuesView>, value_t<T>>,
      "softwave::soft_dtw_cost: values must be a rank-1 Kokkos::View (B,) of "
      "value_t<T> (float for float and 16-bit inputs, double for double), not "
      "const, in the execution space's memory space");
  impl::soft_dtw_cost<Space, T>(space, cost, values, nullptr, options, lengths);
}

template <class Space, class CostView, class T>
void soft_dtw_cost_value_and_grad(
    const Space& space, const CostView& cost,
    impl::nondeduced_t<ArrayView1<value_t<T>, Space>> values,
    const CostGradients<T, Space>& gradients,
    const SoftDTWOptions& options = {}, const Lengths<Space>& lengths = {}) {
  static_assert(impl::view_for<CostView, Space, 3> &&
                    std::is_same_v<impl::input_t<CostView>, T>,
                "softwave::soft_dtw_cost_value_and_grad: cost must be a rank-3 "
                "Kokkos::View (B, N, M) of the gradients' value type, "
                "LayoutRight, in the execution space's memory space");
  impl::soft_dtw_cost<Space, T>(space, cost, values, &gradients, options,
                                lengths);
}

// D(x, y) = sdtw(x, y) − ½ (sdtw(x, x) + sdtw(y, y)), any N, M (≥ 0 for the
// built-in costs, 0 when x = y).
template <class Space, class XView, class YView, class ValuesView>
void soft_dtw_divergence(const Space& space, const XView& x, const YView& y,
                         const ValuesView& values,
                         const SoftDTWOptions& options = {},
                         const Lengths<Space>& lengths = {}) {
  using T = impl::input_t<XView>;
  static_assert(impl::view_for<XView, Space, 3> && impl::is_input_type<T>,
                "softwave::soft_dtw_divergence: x must be a rank-3 "
                "Kokkos::View (B, N, d) of float, double, bfloat16 or float16, "
                "LayoutRight, in the execution space's memory space");
  static_assert(impl::view_for<YView, Space, 3> &&
                    std::is_same_v<impl::input_t<YView>, T>,
                "softwave::soft_dtw_divergence: y must be a rank-3 "
                "Kokkos::View (B, M, d) of x's value type, LayoutRight, in the "
                "execution space's memory space");
  static_assert(impl::view_for<ValuesView, Space, 1> &&
                    std::is_same_v<impl::output_t<ValuesView>, value_t<T>>,
                "softwave::soft_dtw_divergence: values must be a rank-1 "
                "Kokkos::View (B,) of value_t<T> "
                "(float for float and 16-bit inputs, double for double), not "
                "const, in the execution space's memory space");
  impl::soft_dtw_divergence<Space, T>(space, x, y, values, nullptr, options,
                                      lengths);
}

// Gradients of Σ_b grad_output[b]·D(x_b, y_b); `alignment` must stay empty.
template <class Space, class XView, class YView, class T>
void soft_dtw_divergence_value_and_grad(
    const Space& space, const XView& x, const YView& y,
    impl::nondeduced_t<ArrayView1<value_t<T>, Space>> values,
    const SeriesGradients<T, Space>& gradients,
    const SoftDTWOptions& options = {}, const Lengths<Space>& lengths = {}) {
  static_assert(impl::view_for<XView, Space, 3> &&
                    std::is_same_v<impl::input_t<XView>, T>,
                "softwave::soft_dtw_divergence_value_and_grad: x must be a "
                "rank-3 Kokkos::View (B, N, d) of the gradients' value type, "
                "LayoutRight, in the execution space's memory space");
  static_assert(impl::view_for<YView, Space, 3> &&
                    std::is_same_v<impl::input_t<YView>, T>,
                "softwave::soft_dtw_divergence_value_and_grad: y must be a "
                "rank-3 Kokkos::View (B, M, d) of the gradients' value type, "
                "LayoutRight, in the execution space's memory space");
  impl::soft_dtw_divergence<Space, T>(space, x, y, values, &gradients, options,
                                      lengths);
}

// All pairs: matrix(i, j) = sdtw(X_i, Y_j) (or the divergence) for X: (B1, N,
// d), Y: (B2, M, d); lengths.x is (B1,), lengths.y is (B2,). Streams pairs in
// chunks: memory never grows with B1·B2·N·M.
template <class Space, class XView, class YView, class MatrixView>
void pairwise(const Space& space, const XView& x, const YView& y,
              const MatrixView& matrix, const SoftDTWOptions& options = {},
              PairwiseValue what = PairwiseValue::soft_dtw,
              const Lengths<Space>& lengths = {}) {
  using T = impl::input_t<XView>;
  static_assert(
      impl::view_for<XView, Space, 3> && impl::is_input_type<T>,
      "softwave::pairwise: x must be a rank-3 Kokkos::View (B1, N, d) of "
      "float, double, bfloat16 or float16, LayoutRight, in the execution "
      "space's memory space");
  static_assert(
      impl::view_for<YView, Space, 3> &&
          std::is_same_v<impl::input_t<YView>, T>,
      "softwave::pairwise: y must be a rank-3 Kokkos::View (B2, M, d) of x's "
      "value type, LayoutRight, in the execution space's memory space");
  static_assert(impl::view_for<MatrixView, Space, 2> &&
                    std::is_same_v<impl::output_t<MatrixView>, value_t<T>>,
                "softwave::pairwise: matrix must be a rank-2 Kokkos::View "
                "(B1, B2) of value_t<T> "
                "(float for float and 16-bit inputs, double for double), not "
                "const, LayoutRight, in the execution space's memory space");
  impl::pairwise<Space, T>(space, x, y, matrix, what, options, lengths);
}

// Exact k-nearest-neighbour search under hard DTW: for every query X_q (B1,
// N, d) the k references Y_c (B2, M, d) with the least DTW distances,
// nearest first: indices(q, r) is c (0-based) and distances(q, r) its
// distance, (B1, k) each, k = indices.extent(1) in [1, B2]. The answer is
// exactly that of sorting each row of pairwise() (same options, γ = 0) by
// value, ties to the lower index: distances are bit for bit those values
// (value_t<T>), and candidates are compared after rounding to it.
//
// options.gamma must be 0 and options.cost sqeuclidean or l1 (the lower
// bounds below hold for these); options.band, lengths and check_values act
// as in pairwise(); options.tile and options.kernel are not used. The search
// is the lower-bound cascade of the UCR Suite (Rakthanmanon et al., KDD
// 2012) with pruned, early-abandoned walks, one thread per query: LB_Kim
// (the first and last cells) of every reference; the k references with the
// least LB_Kim are walked first; every other reference gets the larger of
// LB_Kim and LB_Keogh (the query against the reference's envelope, computed
// once per reference), summed only until it passes the k-th best; the
// survivors are visited in the order of that bound until it passes the k-th
// best; each visited one must pass LB_Keogh the other way (against the
// query's envelope), and its walk (one rolling row, the band's cells) skips
// every cell whose value plus LB_Keogh of the rows after it passes the k-th
// best, and stops at a row without other cells (pruned DTW with early
// abandoning). The bounds are compared with a margin of (N + M)·2⁻⁵⁰
// relative, which covers the rounding of the sums, so nothing that could
// enter the answer is cut. With lengths, LB_Keogh applies where the other
// side has its full (padded) length; LB_Kim and the pruned walks apply to
// every pair. `statistics`, when given, receives the counts (one fence).
//
// Memory: the references' envelopes, 2·B2·N·d values of the work type
// (double on host backends), and per query in flight 12·B2 + 8·(N + M + 2)
// + 2·M·d·(work type) + 4·max(N, M) bytes, queries streamed so that this
// stays under 256 MiB.
template <class Space, class QueryView, class ReferenceView, class IndexView,
          class DistanceView>
void nearest_neighbours(const Space& space, const QueryView& queries,
                        const ReferenceView& references,
                        const IndexView& indices, const DistanceView& distances,
                        const SoftDTWOptions& options = {},
                        const Lengths<Space>& lengths = {},
                        SearchStatistics* statistics = nullptr) {
  using T = impl::input_t<QueryView>;
  static_assert(impl::view_for<QueryView, Space, 3> &&
                    (std::is_same_v<T, float> || std::is_same_v<T, double>),
                "softwave::nearest_neighbours: queries must be a rank-3 "
                "Kokkos::View (B1, N, d) of float or double, LayoutRight, in "
                "the execution space's memory space");
  static_assert(
      impl::view_for<ReferenceView, Space, 3> &&
          std::is_same_v<impl::input_t<ReferenceView>, T>,
      "softwave::nearest_neighbours: references must be a rank-3 "
      "Kokkos::View (B2, M, d) of the queries' value type, LayoutRight, in "
      "the execution space's memory space");
  static_assert(impl::view_for<IndexView, Space, 2> &&
                    std::is_same_v<impl::output_t<IndexView>, std::int64_t>,
                "softwave::nearest_neighbours: indices must be a rank-2 "
                "Kokkos::View (B1, k) of std::int64_t, not const, "
                "LayoutRight, in the execution space's memory space");
  static_assert(impl::view_for<DistanceView, Space, 2> &&
                    std::is_same_v<impl::output_t<DistanceView>, value_t<T>>,
                "softwave::nearest_neighbours: distances must be a rank-2 "
                "Kokkos::View (B1, k) of the queries' value type, not const, "
                "LayoutRight, in the execution space's memory space");
  impl::nearest_neighbours<Space, T>(space, queries, references, indices,
                                     distances, options, lengths, statistics);
}

// Hard DTW (options.gamma is ignored and taken as 0) with the optimal warping
// path of every pair: path(b, k, 0..1) = (i, j), 0-based, for k <
// path_length[b], running from (0, 0) to (N_b − 1, M_b − 1); entries past
// path_length[b] are set to −1. path: (B, N + M − 1, 2). values may be empty.
template <class Space, class XView, class YView, class ValuesView>
void dtw_path(const Space& space, const XView& x, const YView& y,
              const ValuesView& values, ArrayView3<int, Space> path,
              ArrayView1<int, Space> path_length,
              const SoftDTWOptions& options = {},
              const Lengths<Space>& lengths = {}) {
  using T = impl::input_t<XView>;
  static_assert(
      impl::view_for<XView, Space, 3> && impl::is_input_type<T>,
      "softwave::dtw_path: x must be a rank-3 Kokkos::View (B, N, d) of float, "
      "double, bfloat16 or float16, LayoutRight, in the execution space's "
      "memory space");
  static_assert(impl::view_for<YView, Space, 3> &&
                    std::is_same_v<impl::input_t<YView>, T>,
                "softwave::dtw_path: y must be a rank-3 Kokkos::View (B, M, d) "
                "of x's value type, LayoutRight, in the execution space's "
                "memory space");
  static_assert(
      impl::view_for<ValuesView, Space, 1> &&
          std::is_same_v<impl::output_t<ValuesView>, value_t<T>>,
      "softwave::dtw_path: values must be a rank-1 Kokkos::View (B,) of "
      "value_t<T> (float for float and 16-bit inputs, double for double), not "
      "const, in the execution space's memory space");
  impl::dtw_path<Space, T>(space, x, y, values, path, path_length, options,
                           lengths);
}

// The tile edge T the kernels use on this execution space for these options.
template <class Space>
int tile_size(const Space& space, const SoftDTWOptions& options = {}) {
  return impl::tile_size(space, options);
}

// The workspace in bytes, beyond inputs and outputs, that the portable
// kernels allocate for `pairs` pairs of lengths n and m with d features
// (0 for a cost tensor): the memory formulas above and with Kernel::pairs
// (with per-pair lengths, a band's widths follow each pair's ratio M_b/N_b
// instead). backward: the calls that return gradients, alignments or paths
// (dtw_path's steps not counted). Lets a caller refuse work that cannot fit
// before allocating. (The CUDA-specialised path, where it runs, allocates
// its own workspace, described with Kernel.)
template <class Space>
std::uint64_t workspace_bytes(const Space& space, std::int64_t pairs,
                              std::int64_t n, std::int64_t m,
                              const SoftDTWOptions& options = {},
                              bool backward = false, int d = 1) {
  return impl::workspace_bytes(space, pairs, n, m, options, backward, d);
}

}  // namespace softwave
