#pragma once
// The backward kernel: the recompute of a block's soft-argmin weights, the
// expected alignment's reverse walk and the ∇x, ∇y tile products.
//
// One part of the CUDA-specialised Soft-DTW kernels (fused.hpp has the
// design), included only by fused.cpp: the parts form one translation unit,
// in this order: strips.hpp, features.hpp, cost_tiles.hpp, forward_kernel.hpp,
// backward_kernel.hpp, and the host code in fused.cpp.

#include "forward_kernel.hpp"

namespace softwave::impl::cuda_fused {
namespace {

// Adds float pairs v0, v1 to at[0], at[1] (8-byte aligned), atomically.
__device__ __forceinline__ void atomic_add_pair(float* at, float v0, float v1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(at), make_float2(v0, v1));
#else
  atomicAdd(at, v0);
  atomicAdd(at + 1, v1);
#endif
}

// acc += A·B in 3xTF32 for a 32 × 32 A and a 32 × d B (d % 8 == 0) given
// element-wise by a_at(row, k) and b_at(k, feature), with acc in m16n8
// fragments: acc[(kD/8 · mi + ni) · 4 + r] is row 16mi + g + 8(r/2),
// feature 8ni + 2t + r%2 (g = lane/4, t = lane%4). The k loop stays rolled
// up for the instruction cache (see tile_products). With kRowSums, each A
// value this lane loads is also added to row_sums[mi][h] (A's row
// 16mi + g + 8h): summed over the four lanes of the quad (quad_sum), A's
// row sums, for the price of an add per load.
template <int kD, bool kRowSums, class AAt, class BAt>
__device__ __forceinline__ void fragment_product(float (&acc)[kD], int d,
                                                 int lane, const AAt& a_at,
                                                 const BAt& b_at,
                                                 float (&row_sums)[2][2]) {
  constexpr int kBlocks = kD / 8;  // n8 blocks of features
  int const g = lane >> 2, t = lane & 3;
#pragma unroll 1
  for (int ks = 0; ks < kLanes / 8; ++ks) {
    Tf32Split a[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        float const v =
            a_at(16 * mi + g + 8 * (r & 1), 8 * ks + t + 4 * (r >> 1));
        if constexpr (kRowSums) row_sums[mi][r & 1] += v;
        a[mi][r] = split_tf32(v);
      }
#pragma unroll
    for (int ni = 0; ni < kBlocks; ++ni) {
      if (8 * ni >= d) break;
      Tf32Split b[2];
#pragma unroll
      for (int r = 0; r < 2; ++r)
        b[r] = split_tf32(b_at(8 * ks + t + 4 * r, 8 * ni + g));
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        mma_3xtf32(acc + (kBlocks * mi + ni) * 4, a[mi], b);
    }
  }
}

// Sums each of fragment_product's row sums over the lanes of its quad.
__device__ __forceinline__ void quad_sum(float (&row_sums)[2][2]) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      row_sums[mi][h] += __shfl_xor_sync(kFull, row_sums[mi][h], 1);
      row_sums[mi][h] += __shfl_xor_sync(kFull, row_sums[mi][h], 2);
    }
}

// The gradient rows of a product in fragment_product's layout: for each
// row (< rows) and feature pair f, f + 1 that this lane holds,
// add(row, f, 2w (Σ (v_row − μ) − acc) for f and f + 1), with Σ the row's
// sum of E (sums[mi][h] for row 16mi + g + 8h) and v_row = rows_of + row ·
// pitch, the row's staged values: ∇y_j from the y rows, ∇x_i from the x
// rows.
template <int kD, class Add>
__device__ __forceinline__ void add_fragment_rows(
    const float (&acc)[kD], const float (&sums)[2][2], int rows,
    const float* rows_of, int pitch, const float* mu, float two_w, int d,
    int lane, const Add& add) {
  constexpr int kBlocks = kD / 8;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int const row = accumulator_row(mi, h, lane);
      float const sum = sums[mi][h];
      if (row >= rows) continue;
      float const* v = rows_of + row * pitch;
#pragma unroll
      for (int ni = 0; ni < kBlocks; ++ni) {
        int const f = accumulator_column(ni, 0, lane);
        if (f >= d) break;
        float const* a = acc + (kBlocks * mi + ni) * 4 + 2 * h;
        add(row, f, two_w * (sum * (v[f] - mu[f]) - a[0]),
            two_w * (sum * (v[f + 1] - mu[f + 1]) - a[1]));
      }
    }
}

// Whether tile products may take their full-tile variant: 32 rows, 32
// columns and d = kD (the interior tiles of the grid's d = 64 shapes).
template <int kD>
__device__ __forceinline__ bool full_tile(const Strip& s, int cols, int d) {
  return s.rows == kLanes && cols == kLanes && d == kD;
}

// The tile's gradient products on tensor cores (3xTF32, d % 8 == 0),
// centred on the strip's mean x row μ like the costs:
//   gx (fragments, summed over the strip's tiles) += E (Y − μ),
//   ∇y_j += 2w (Σ_l E_lj (y_j − μ) − Σ_l E_lj (x_l − μ)),
// with E the tile's 32×32 block (rows l, columns j), zero outside the pair,
// and gx in the fragments of fragment_product. All 32 lanes must call it.
// kFullTile: the tile is full (32 rows, 32 columns) and d = kD, so every bound
// test folds away and the row pitch is a constant (full_tile).
template <int kD, bool kFullTile>
__device__ void tile_gradient_products(const Params& P, const Strip& s,
                                       const Ring& ring, const float* y_tile,
                                       const float* x_strip, const float* mu,
                                       int c, float weight, float (&gx)[kD]) {
  Outputs const& o = P.outputs;
  Problem const& q = P.problem;
  int const j0 = kLanes * c;
  int const cols = kFullTile ? kLanes : min(kLanes, s.m - j0);
  int const rows = kFullTile ? kLanes : s.rows;
  int const d = kFullTile ? kD : q.d;
  int const pitch = row_pitch<true>(d);
  auto e_at = [&](int l, int j) {
    return l < rows && j < cols ? ring.at(j0 + j, l) : 0.f;
  };
  // ∇x: A = E (rows l, k = columns j), B = Y − μ (k = columns j). E's row
  // sums come from the E walk (finish).
  float col_sums[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
  if (o.grad_x)
    fragment_product<kD, false>(
        gx, d, s.lane, e_at,
        [&](int j, int f) {
          return j < cols ? y_tile[j * pitch + f] - mu[f] : 0.f;
        },
        col_sums);
  if (!o.grad_y) return;
  // ∇y: A = Eᵀ (rows j, k = rows l), B = X − μ (k = rows l); A's row sums
  // are E's column sums Σ_l E_lj.
  float gy[kD];
#pragma unroll
  for (int k = 0; k < kD; ++k) gy[k] = 0.f;
  fragment_product<kD, true>(
      gy, d, s.lane, [&](int j, int l) { return e_at(l, j); },
      [&](int l, int f) {
        return l < rows ? x_strip[l * pitch + f] - mu[f] : 0.f;
      },
      col_sums);
  quad_sum(col_sums);
  // Row addresses in 64 bits, as in finish(): the float kernels' register
  // allocation at d = 64 is sensitive to this arithmetic.
  std::int64_t const first = s.y_series * q.m_max + j0;
  add_fragment_rows<kD>(gy, col_sums, cols, y_tile, pitch, mu, 2.f * weight, d,
                        s.lane, [&](int j, int f, float a, float b) {
                          atomic_add_pair(o.grad_y + (first + j) * d + f, a, b);
                        });
}

// The same products in FP32 FMAs (d < 16 or off the vector path): lane l
// sums its row's E·y (∇x) and, as column j = l, its column's E·x (∇y).
template <int kD, bool kVec, class In>
__device__ void tile_gradients_fma(const Params& P, const Strip& s,
                                   const Ring& ring, const float* y_tile,
                                   const float* x_strip, int c, float weight,
                                   float (&gx)[kD]) {
  Outputs const& o = P.outputs;
  Problem const& q = P.problem;
  int const j0 = kLanes * c, cols = min(kLanes, s.m - j0), d = q.d;
  if (o.grad_x && s.row_ok)
#pragma unroll 2
    for (int col = 0; col < cols; ++col) {
      float const e = ring.at(j0 + col, s.lane);
      for_features<kD, kVec>(
          y_tile + col * row_pitch<kVec>(d), d,
          [&](int k, float v) { gx[k] = fmaf(e, v, gx[k]); });
    }
  if (o.grad_y && s.lane < cols) {
    int const j = j0 + s.lane;
    float acc[kD];
#pragma unroll
    for (int k = 0; k < kD; ++k) acc[k] = 0.f;
    float col_sum = 0.f;
#pragma unroll 2
    for (int l = 0; l < s.rows; ++l) {
      float const e = ring.at(j, l);
      col_sum += e;
      for_features<kD, kVec>(
          x_strip + l * row_pitch<kVec>(d), d,
          [&](int k, float v) { acc[k] = fmaf(e, v, acc[k]); });
    }
    float yr[kD];
    load_row<kD, kVec>(yr, as<In>(s.y) + std::int64_t(j) * d, d);
    float* gy = o.grad_y + (s.y_series * q.m_max + j) * d;
    float const two_w = 2.f * weight;
#pragma unroll
    for (int k = 0; k < kD; ++k) acc[k] = two_w * (col_sum * yr[k] - acc[k]);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kVec) {
#pragma unroll
      for (int k = 0; k < kD; k += 4)
        if (k < d)
          atomicAdd(reinterpret_cast<float4*>(gy + k),
                    make_float4(acc[k], acc[k + 1], acc[k + 2], acc[k + 3]));
    } else
#endif
    {
#pragma unroll
      for (int k = 0; k < kD; ++k)
        if (k < d) atomicAdd(gy + k, acc[k]);
    }
  }
}

// ∇x, ∇y and the alignment output of tile c, whose E is complete in the
// ring. y_tile holds the tile's y rows, x_strip the strip's x rows.
template <int kD, bool kVec, bool kSeries, class In>
__device__ void tile_outputs(const Params& P, const Strip& s, const Ring& ring,
                             const float* y_tile, const float* x_strip,
                             const float* mu, int c, float weight,
                             float (&gx)[kD]) {
  Outputs const& o = P.outputs;
  Problem const& q = P.problem;
  int const j0 = kLanes * c, cols = min(kLanes, s.m - j0), d = q.d;
  if constexpr (kSeries) {
    bool tensor_cores = false;
    if constexpr (kVec && kD > 16) {
      tensor_cores = tensor_core_gradients<kD, kVec>(d);
      if (tensor_cores && (o.grad_x || o.grad_y)) {
        if (full_tile<kD>(s, cols, d))
          tile_gradient_products<kD, true>(P, s, ring, y_tile, x_strip, mu, c,
                                           weight, gx);
        else
          tile_gradient_products<kD, false>(P, s, ring, y_tile, x_strip, mu, c,
                                            weight, gx);
      }
    }
    if (!tensor_cores)
      tile_gradients_fma<kD, kVec, In>(P, s, ring, y_tile, x_strip, c, weight,
                                       gx);
  }
  if (o.alignment && s.lane < cols) {
    float const factor = o.alignment_is_gradient ? weight : 1.f;
    In* out = static_cast<In*>(o.alignment) +
              (s.g * q.n_max + kLanes * s.w) * q.m_max + j0 + s.lane;
    for (int l = 0; l < s.rows; ++l)
      store1(out + l * q.m_max, factor * ring.at(j0 + s.lane, l));
  }
}

// E·weight owed to this strip's last row by the strip below: lane l of
// block c at column 32c − 31 + l (lane 31 takes it at step 32c + 31, where
// its cell sits on that column), 0 past the pair and for the last strip.
// The walk runs backwards, so chunks are taken from the last down.
__device__ __forceinline__ HandoverReader<float> below_reader(const Params& P,
                                                              const Strip& s) {
  float* const row = kLanes * (s.w + 1) < s.n
                         ? P.messages + strip_slot(P, s, s.w) * P.problem.m_max
                         : nullptr;
  return {row, s.m, -(kLanes - 1), 0.f};
}

// Block c of the backward's recompute: loads the costs of tile c − 1 (block
// c's cells reach into it), restores the lane state the forward left at
// block c and walks the block again, storing its soft-argmin weights.
template <int kD, bool kVec, bool kSeries, class In, bool kSplitInterior>
__device__ __forceinline__ void recompute_block(
    const Params& P, const Strip& s, const Ring& ring,
    const BlockWeights& weights, float* y_tile, const float* x_strip,
    const float* mu, float x_norm, int c) {
  if (c >= 1)
    load_tile<kD, kVec, kSeries, In>(P, s, ring, y_tile, x_strip, mu, x_norm,
                                     c - 1);
  double const* ck = checkpoint(P, s, c);
  WalkState st{ck[0], ck[kLanes]};
  HandoverReader<double> above = above_reader(P, s);
  above.prefetch(kChunks * c, s.lane);
  walk_block<true, kSplitInterior, near_first_walks<kD, true>>(
      P, s, ring, weights, st, above, c, nullptr);
  __syncwarp();
}

// The E side of the backward for one strip: runs E through the blocks from
// the right with the weights of recompute_block, hands E·weight to the strip
// above, and forms each tile's ∇x/∇y/alignment outputs once its E is
// complete (after the walk of the block that ends it).
template <int kD, bool kVec, bool kSeries, class In>
struct ExpectationWalk {
  float weight;  // scale · grad_output of the pair
  float* messages_up;
  HandoverReader<float> below;
  // E·weight sent to this lane by its own previous cell (left), and by the
  // lane below one step ago (up) and two steps ago (diagonal).
  float from_left = 0.f, from_up = 0.f, from_diag = 0.f, pending_diag = 0.f;
  float last_diag = 0.f;  // lane 0: what its previous cell owes upwards
  // ∇x's Σ_j E_ij·y_j: the lane's row, or with tensor cores m16n8
  // fragments of the strip's rows (tile_gradient_products).
  float gx[kD];
  float row_sum = 0.f;  // Σ_j E_ij of the lane's row

  __device__ __forceinline__ ExpectationWalk(const Params& P, const Strip& s,
                                             int blocks)
      : weight(float(P.outputs.scale * (P.outputs.grad_output
                                            ? double(P.outputs.grad_output[s.g])
                                            : 1.0))),
        messages_up(s.w > 0 ? P.messages +
                                  strip_slot(P, s, s.w - 1) * P.problem.m_max
                            : nullptr),
        below(below_reader(P, s)) {
#pragma unroll
    for (int k = 0; k < kD; ++k) gx[k] = 0.f;
    below.prefetch(kChunks * blocks - 1, s.lane);
  }

  // E through the 32 steps of block b (kInterior: interior_block(s, b)).
  template <bool kInterior>
  __device__ __forceinline__ void walk(const Strip& s, const Ring& ring,
                                       const BlockWeights& weights, int b) {
#pragma unroll 4
    for (int t = kLanes - 1; t >= 0; --t) {
      if (t % kGrain == kGrain - 1) {
        int const k = kChunks * b + t / kGrain;
        below.take(k, s.lane, /*wait=*/true);
        below.prefetch(k - 1, s.lane);
      }
      int const step = kLanes * b + t, j = step - s.lane;
      float const from_below = __shfl_sync(kFull, below.value, t);
      float to_up = 0.f, to_diag = 0.f;
      if (kInterior || (s.row_ok && j >= 0 && j < s.m)) {
        float const incoming =
            s.lane == kLanes - 1 ? from_below : from_up + from_diag;
        float const e = (!kInterior && s.i == s.n - 1 && j == s.m - 1)
                            ? 1.f
                            : from_left + incoming;
        to_diag = e * weights.diag(t, s.lane);
        to_up = e * weights.up(t, s.lane);
        from_left = e * weights.left(ring, step, t, s.lane);
        ring.at_step(step, s.lane) = e;
        row_sum += e;
        if (messages_up && s.lane == 0)
          publish(messages_up + j, to_up + last_diag);
      } else {
        from_left = 0.f;
      }
      last_diag = to_diag;
      float const next_up = __shfl_down_sync(kFull, to_up, 1);
      float const next_diag = __shfl_down_sync(kFull, to_diag, 1);
      from_up = next_up;
      from_diag = pending_diag;
      pending_diag = next_diag;
    }
  }

  // Block b, whose weights are in `weights`; then tile b's outputs, from
  // its y rows staged in `y_tile`, which is the memory of `weights` (see
  // backward_kernel): they are staged only after the walk's __syncwarp.
  // kSplitInterior: see interior_walks.
  template <bool kSplitInterior>
  __device__ __forceinline__ void block(const Params& P, const Strip& s,
                                        const Ring& ring,
                                        const BlockWeights& weights,
                                        float* y_tile, const float* x_strip,
                                        const float* mu, int b, int tiles) {
    if (kSplitInterior && interior_block(s, b))
      walk<true>(s, ring, weights, b);
    else
      walk<false>(s, ring, weights, b);
    __syncwarp();
    if (b < tiles) {
      Problem const& q = P.problem;
      // The tensor-core ∇y reads the tile's y rows too.
      if constexpr (kSeries)
        if (P.outputs.grad_x ||
            (P.outputs.grad_y && tensor_core_gradients<kD, kVec>(q.d)))
          stage_rows<kVec>(y_tile, as<In>(s.y) + std::int64_t(kLanes * b) * q.d,
                           min(kLanes, s.m - kLanes * b), q.d, s.lane);
      tile_outputs<kD, kVec, kSeries, In>(P, s, ring, y_tile, x_strip, mu, b,
                                          weight, gx);
    }
    __syncwarp();
  }

  // Adds the strip's ∇x rows: 2w (Σ_j E_ij x_i − Σ_j E_ij y_j), centred on
  // μ with the tensor cores (x_strip, mu: the strip's staged rows).
  __device__ __forceinline__ void finish(const Params& P, const Strip& s,
                                         const float* x_strip,
                                         const float* mu) const {
    if constexpr (kSeries) {
      Problem const& q = P.problem;
      int const d = q.d;
      float const two_w = 2.f * weight;
      if (!P.outputs.grad_x) return;
      if (tensor_core_gradients<kD, kVec>(d)) {
        std::int64_t const first = s.x_series * q.n_max + kLanes * s.w;
        // Σ_j E_ij of the rows this lane holds in gx's fragments.
        float row_sums[2][2];
        gather_accumulator_rows(row_sums, row_sum, s.lane);
        add_fragment_rows<kD>(
            gx, row_sums, s.rows, x_strip, row_pitch<kVec>(d), mu, two_w, d,
            s.lane, [&](int i, int f, float a, float b) {
              float* const out = P.outputs.grad_x + (first + i) * d + f;
              out[0] += a;
              out[1] += b;
            });
      } else if (s.row_ok) {
        float xr[kD];
        load_row<kD, kVec>(xr, as<In>(s.x) + std::int64_t(s.i) * d, d);
        float* out = P.outputs.grad_x + (s.x_series * q.n_max + s.i) * d;
#pragma unroll
        for (int k = 0; k < kD; ++k)
          if (k < d) out[k] += two_w * (row_sum * xr[k] - gx[k]);
      }
    }
  }
};

// The backward pass over one strip, blocks from the right.
//
// kWarps = 1: one warp recomputes block c, then runs E through it. The y
// rows of its tiles (staged by the recompute's load_tile for the costs, and
// by the E walk for the gradient products) live in its weight buffer: the
// weights are written by the recompute walk and last read by the E walk,
// and the warp does these four in turn, each ending with a __syncwarp.
//
// kWarps = 2: warp 0 recomputes block c while warp 1 runs E through block
// c + 1 with the weights warp 0 left the phase before. E's chain is short
// (a few FMAs and a shuffle per step) and the recompute is a forward walk,
// so a block then costs the longer of the two rather than their sum; the
// price is about twice the shared memory (a 128-step ring, two weight
// buffers, and warp 0's own y rows), so fewer strips fit on an SM (see
// two_warp_backward). Warp 1 stages block c + 1's y rows in that block's
// weight buffer once it has walked it; warp 0 writes the buffer again
// only in the next phase (block c − 1).
// Shared memory per phase (ring of 128 steps): warp 0 writes costs at steps
// [32c − 32, 32c + 30] and reads [32c, 32c + 31] (at d = 64 also writing
// left weights there, see BlockWeights); warp 1 reads weights and writes E at
// [32c + 32, 32c + 63] and reads E at [32c + 32, 32c + 94] (E of block c + 2
// from the phase before included). The windows are disjoint modulo 128, so
// one barrier per phase orders everything.
template <int kD, bool kVec, bool kSeries, class In, int kWarps>
__global__ void __launch_bounds__(kWarps* kLanes)
    backward_kernel(const Params P) {
  constexpr bool kSplit = interior_walks<kD, kWarps, kSeries>;
  extern __shared__ float shared[];
  using Layout = SharedLayout<kD, kSeries>;
  auto const at = Layout::carve(shared, /*backward=*/true, kWarps);
  Ring const ring{at.ring, Layout::ring_steps(kWarps) - 1};
  Strip s;
  if (!take_strip<In>(P, 1, /*bottom_up=*/true, at.ticket, s)) return;
  bool const recomputes = kWarps == 1 || threadIdx.x < kLanes;  // warp 0
  float x_norm = 0.f;
  if (recomputes)
    x_norm = stage_strip<kD, kVec, kSeries, In>(P, s, at.x_strip, at.mu);
  if constexpr (kWarps > 1) __syncthreads();  // both warps read x_strip, μ

  int const tiles = (s.m + kLanes - 1) / kLanes;
  int const blocks = walk_blocks(s);
  ExpectationWalk<kD, kVec, kSeries, In> e(P, s, blocks);
  if (recomputes && blocks - 1 < tiles)
    load_tile<kD, kVec, kSeries, In>(P, s, ring, at.y_tile, at.x_strip, at.mu,
                                     x_norm, blocks - 1);
  if constexpr (kWarps == 1) {
    BlockWeights const weights{at.weights, Layout::left_weight_in_ring(1)};
    for (int c = blocks - 1; c >= 0; --c) {
      recompute_block<kD, kVec, kSeries, In, kSplit>(
          P, s, ring, weights, at.y_tile, at.x_strip, at.mu, x_norm, c);
      e.template block<kSplit>(P, s, ring, weights, at.y_tile, at.x_strip,
                               at.mu, c, tiles);
    }
  } else {
    auto weights_of = [&](int c) {
      return BlockWeights{at.weights + (c & 1) * Layout::weight_buffer(2),
                          Layout::left_weight_in_ring(2)};
    };
    // Phase f: warp 0 on block blocks − 1 − f, warp 1 on the block after.
    for (int f = 0; f <= blocks; ++f) {
      int const c = blocks - 1 - f;
      if (recomputes && c >= 0)
        recompute_block<kD, kVec, kSeries, In, kSplit>(
            P, s, ring, weights_of(c), at.y_tile, at.x_strip, at.mu, x_norm, c);
      else if (!recomputes && c + 1 < blocks)
        e.template block<kSplit>(P, s, ring, weights_of(c + 1),
                                 weights_of(c + 1).diag_up, at.x_strip, at.mu,
                                 c + 1, tiles);
      __syncthreads();
    }
  }
  if (kWarps == 1 || !recomputes) e.finish(P, s, at.x_strip, at.mu);
}

}  // namespace
}  // namespace softwave::impl::cuda_fused
