#pragma once
// The CUDA-specialised Soft-DTW path: one persistent kernel per direction
// (docs/design.md §4.3).
//
// Each warp owns a strip of 32 rows of one pair (lane l = row l) and walks
// the strip's anti-diagonals from the left edge to the right in one go:
// the left neighbour is the lane's own previous cell, the upper and diagonal
// neighbours come from lane l − 1 by warp shuffle, and the strip above hands
// over its bottom row through global memory in chunks of 4 columns, each
// loaded a chunk ahead of its use.
// Hand-over entries start as an all-ones NaN that no arithmetic produces and
// are written once with relaxed atomic stores, so the data is its own ready
// flag and no fence sits on the wavefront. Strips take tickets from an atomic
// counter in the order they start running, so a strip only ever waits on one
// that is already resident: no deadlock, one launch per direction. Tickets go
// strip-major (every pair's first strip, then every pair's second, ...), so
// the resident slots hold strips that can work rather than strips waiting on
// the ones above them.
//
// Costs arrive 32×32 tiles at a time into a shared-memory ring laid out by
// anti-diagonal step, so every cell read in the walk is conflict-free. For
// the squared-Euclidean cost a tile is a small matrix product of the strip's
// x rows and the tile's y rows, both staged in shared memory: on tensor cores
// (split-TF32 products, centred on the strip's mean x row) for d ≥ 16 with
// d % 8 == 0, else in FP32 FMAs with each lane's x row in registers. The
// forward pass keeps only each strip's bottom row and, for the backward, the
// lanes' state every 32 steps. The backward pass restores that state,
// recomputes the 32 steps' soft-argmin weights on chip, runs the expected
// alignment E through them in reverse (messages to the strip above handed
// over the same way), and forms ∇x (per strip, in registers) and ∇y (per
// 32×32 tile, then atomically added) from the E tile: split-TF32 products
// on tensor cores for d > 16 (centred on the strip's mean x row), FP32
// FMAs below, where they measured faster. Both kernels come with one or
// two warps per strip. With two, the forward forms the next tile's costs
// while the walk runs through the current block, and the backward's
// recompute of one block overlaps E's walk through the block before; with
// one (chosen where residency matters more), they alternate.
//
// Inputs are float, bfloat16 or float16 (Problem::storage; the kernels are
// instantiated per storage, so float runs the same code as before 16-bit
// support), widened to float as they are staged; the alignment output is
// written in the same storage, the gradients always in float.
//
// Numerics: R is carried in double (adds only); the soft-min's exponentials
// and logarithm use the float special-function unit on differences that are
// ≤ 0 and formed in double, so no digits are lost to the size of R.

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "softdtw/geometry.hpp"  // PairMap

namespace softwave::impl::cuda_fused {

// Widest feature count handled with the x row in registers.
constexpr int max_features = 64;

// How the inputs (x and y, or cost) and the alignment output are stored.
// 16-bit inputs are read as they are and widened to float on chip.
enum class Storage { float32, bfloat16, float16 };

struct Problem {
  // Squared-Euclidean series (x, y) or a cost tensor (cost), row-major and
  // contiguous: x (Bx, N, d), y (By, M, d), cost (P, N, M).
  const void* x = nullptr;
  const void* y = nullptr;
  const void* cost = nullptr;
  Storage storage = Storage::float32;
  int d = 0;
  std::int64_t n_max = 0, m_max = 0;
  const int* lengths_x = nullptr;  // indexed by the x series, or null
  const int* lengths_y = nullptr;  // indexed by the y series, or null
  // Which series pair p reads (batch, all pairs or one set's triangle), as
  // everywhere in the library.
  PairMap map;
  std::int64_t pairs = 0;
  double gamma = 1;
};

struct Outputs {
  float* grad_x = nullptr;    // added to; may be null
  float* grad_y = nullptr;    // added to (atomically); may be null
  void* alignment = nullptr;  // written where in the pair, stored like the
                              // inputs (Problem::storage); may be null
  bool alignment_is_gradient = false;  // write weight·E instead of E
  const float* grad_output = nullptr;  // (pairs,) or null for ones
  double scale = 1;
  // Where set, the forward kernel zeroes grad_x and grad_y (the whole
  // arrays, grad_x_size and grad_y_size floats) before the backward adds to
  // them, instead of a fill of its own launch before the call.
  bool zero_gradients = false;
  std::int64_t grad_x_size = 0, grad_y_size = 0;
};

// Warps per strip of the forward and the backward kernel: 0 (the default)
// lets the library choose (see two_warp_forward and two_warp_backward in
// fused.cpp); 1 or 2 forces one, so tests can run every variant on
// the same inputs. Process-wide.
void set_kernel_warps(int forward, int backward);

// values[p] (double) for p < problem.pairs; problem.gamma = 0 gives hard
// DTW's values (a minimum and an add a cell instead of the soft minimum).
void forward(const Kokkos::Cuda& space, const Problem& problem, double* values);
// values and every output asked for in `outputs` (gamma > 0).
void forward_backward(const Kokkos::Cuda& space, const Problem& problem,
                      double* values, const Outputs& outputs);

}  // namespace softwave::impl::cuda_fused
