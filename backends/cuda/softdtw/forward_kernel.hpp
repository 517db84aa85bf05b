#pragma once
// The walk of a strip through its anti-diagonals (the soft minimum in
// double, the hand-over rows) and the forward kernel.
//
// One part of the CUDA-specialised Soft-DTW kernels (fused.hpp has the
// design), included only by fused.cpp: the parts form one translation unit,
// in this order: strips.hpp, features.hpp, cost_tiles.hpp, forward_kernel.hpp,
// backward_kernel.hpp, and the host code in fused.cpp.

#include <cmath>

#include "cost_tiles.hpp"

namespace softwave::impl::cuda_fused {
namespace {

constexpr double kInf = INFINITY;

__device__ __forceinline__ double min_of(double a, double b) {
  return a < b ? a : b;
}

// The SFU's 2^x and log2 (relative error ~2^-22; subnormal results flush to
// 0, which is below anything a weight can contribute).
__device__ __forceinline__ float exp2_approx(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ float log2_approx(float x) {
  float r;
  asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// The SFU's 1/x (relative error ~2^-23). __frcp_rn's exact rounding costs a
// refinement and a branch to a slow path for extreme x; the walk's x (a sum
// of three weights, one of them 1) lies in [1, 3].
__device__ __forceinline__ float reciprocal_approx(float x) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// One cell's soft minimum in units of γ·ln 2: R = cost + lo − log2(sum),
// where e_* = 2^(lo − neighbour) and sum = e_diag + e_up + e_left (in
// [1, 3]: one of them is 1).
struct SoftMinimum {
  double lo;
  float sum, e_diag, e_up, e_left;
};

// lo = the minimum of all three. A plain compare-select: fmin's NaN
// handling would lengthen the step's dependency chain. A NaN (unchecked
// inputs) still reaches the sum through its exponential, so it propagates.
// min(diag, left) is known before `up` arrives by shuffle, so only one
// compare waits on it. Differences from the minimum are <= 0 and exact
// enough in double; only they meet the float special-function unit.
__device__ __forceinline__ SoftMinimum soft_minimum(double diag, double up,
                                                    double left) {
  double const lo = min_of(up, min_of(diag, left));
  float const e_diag = exp2_approx(float(lo - diag));
  float const e_up = exp2_approx(float(lo - up));
  float const e_left = exp2_approx(float(lo - left));
  return {lo, (e_diag + e_up) + e_left, e_diag, e_up, e_left};
}

// The same, with a shorter dependency chain through `up`, which arrives by
// shuffle a shuffle's latency after diag and left. Relative to near =
// min(diag, left), whose two exponentials are formed off the chain, `up`
// costs one difference and one exponential, e_far = 2^−|up − near|:
//   up ≥ near: lo = near, sum = (e_diag + e_left) + e_far;
//   up < near: lo = up,   sum = 1 + (e_diag + e_left)·e_far
// (a compare-select and an add fewer on the chain than soft_minimum).
// near = +∞ (diag and left both outside the pair: the first column) would
// make their differences ∞ − ∞; their weights are 0 there. Interior blocks
// never meet it. A NaN still propagates: through near into lo, or through
// up − near into the sum.
template <bool kInterior>
__device__ __forceinline__ SoftMinimum soft_minimum_near_first(double diag,
                                                               double up,
                                                               double left) {
  double const near = min_of(diag, left);
  float e_diag = exp2_approx(float(near - diag));
  float e_left = exp2_approx(float(near - left));
  if (!kInterior && !(near < kInf)) e_diag = e_left = 0.f;
  float const pair_sum = e_diag + e_left;
  double const up_minus_near = up - near;
  bool const up_lowest = up_minus_near < 0.0;
  float const e_far = exp2_approx(-fabsf(float(up_minus_near)));
  float const sum =
      fmaf(up_lowest ? pair_sum : 1.f, e_far, up_lowest ? 1.f : pair_sum);
  if (up_lowest) return {up, sum, e_diag * e_far, 1.f, e_left * e_far};
  return {near, sum, e_diag, e_far, e_left};
}

// The smaller of a and b, and a NaN where either is one (min_of keeps a
// NaN only from b): the hard walk's NaN (unchecked inputs) reaches the
// pair's value, as in the portable kernels. isnan(a) is known before b.
__device__ __forceinline__ double min_keeping_nan(double a, double b) {
  return (a != a || a < b) ? a : b;
}

// Lane state between blocks: R of the lane's last cell (the left neighbour
// of its next one) and what the lane received from the lane above one step
// ago (the diagonal neighbour of its next cell).
struct WalkState {
  double left;
  double up_last;
};

// R of the strip above's last row, lane l of block c at column 32c + l:
// +∞ past the pair and for the first strip (whose lane 0 takes its start
// value from up_last).
__device__ __forceinline__ HandoverReader<double> above_reader(const Params& P,
                                                               const Strip& s) {
  double* const row =
      s.w > 0 ? P.bottom + strip_slot(P, s, s.w - 1) * P.problem.m_max
              : nullptr;
  return {row, s.m, 0, kInf};
}

// Whether every cell that the 32 steps of block c visit lies inside the
// pair, short of its last cell: a full strip, and columns 32c − 31 through
// 32c + 31 in [0, m − 1). Such a block (all but a strip's first and last
// ones) walks without the per-step test of the cell's range, which costs
// ~50 of a step's ~400 cycles (perf/RESULTS.md, "Measured choices"). The pair's
// last cell, which writes the value or seeds E, is never in one.
__device__ __forceinline__ bool interior_block(const Strip& s, int c) {
  return s.rows == kLanes && c >= 1 && kLanes * c + kLanes - 1 < s.m - 1;
}

// Which kernels' walks take the interior variant where they can, from
// same-call A/Bs against the general walk alone on an H100 (perf/RESULTS.md,
// "Measured choices"):
// - series forwards: 0.86–1.01 of the time on every shape of the grid;
// - series backwards with two warps or d ≤ 16: fwd+bwd 0.91–0.98;
// - the one-warp series backward at d = 64 (32/2048/64, 32/4096/64):
//   1.013–1.014 with its walks split and 0.998–1.001 with only its recompute
//   split, so it keeps the general walk (its registers, 255 a thread, are
//   the tightest of the kernels; series take it only when forced, see
//   two_warp_backward);
// - cost tensors: the forward 0.66–0.79, but fwd+bwd 1.03–1.06 with their
//   checkpointing forward split too (not profiled), and 1.00–1.01 with it
//   and the backward general.
template <int kD, int kWarps, bool kSeries>
constexpr bool interior_walks = kSeries && (kWarps == 2 || kD <= 16);
template <bool kSeries, bool kCheckpoint>
constexpr bool interior_forward_walks = kSeries || !kCheckpoint;

// Which walks take soft_minimum_near_first, from same-call A/Bs on an H100
// (perf/RESULTS.md, "Measured choices"): the forwards 0.956–0.992 of the time
// on every shape measured; the series backward's recompute fwd+bwd 0.966 at
// 16/512/1 and 0.988 at 8/8192/16, but 1.014–1.019 at d = 64 (32/2048/64,
// 32/4096/64), where the two-warp backward is at 254 registers.
template <int kD, bool kRecompute>
constexpr bool near_first_walks = !kRecompute || kD <= 16;

// Runs the 32 steps of block c (kInterior: interior_block(s, c)). Lane 0
// reads the strip above's last row by shuffle from `above`, whose chunk
// kChunks·c must have been prefetched. The recompute (kRecompute) stores
// the soft-argmin weights of every cell; the first pass hands the strip's
// last row over (`bottom`) and writes the pair's value. kHard walks hard
// DTW (γ = 0): R = cost + the smallest neighbour, in the cost's own units
// (walk_scale = gamma_ln2 = 1), a minimum and an add on the step's chain
// instead of the soft minimum's exponentials and logarithm.
template <bool kRecompute, bool kInterior, bool kNearFirst, bool kHard>
__device__ __forceinline__ void walk_block_cells(
    const Params& P, const Strip& s, const Ring& ring,
    const BlockWeights& weights, WalkState& st, HandoverReader<double>& above,
    int c, double* bottom) {
  // R is walked in units of γ·ln 2 (Params::walk_scale): exp(−a/γ) is then
  // 2^(−a) and γ·ln(s) is log2(s), so each special function is one SFU op
  // with no scaling on the step's dependency chain.
  [[maybe_unused]] double const scale = P.walk_scale;
#pragma unroll 4
  for (int t = 0; t < kLanes; ++t) {
    if (t % kGrain == 0) {
      // The recompute reads a finished row and stops at its block's end.
      int const k = kChunks * c + t / kGrain;
      above.take(k, s.lane, /*wait=*/!kRecompute);
      if (!kRecompute || t / kGrain + 1 < kChunks)
        above.prefetch(k + 1, s.lane);
    }
    int const step = kLanes * c + t, j = step - s.lane;
    double const from_above = __shfl_sync(kFull, above.value, t);
    double const from_lane = __shfl_up_sync(kFull, st.left, 1);
    double const up = s.lane == 0 ? from_above : from_lane;
    double const diag = st.up_last;
    st.up_last = up;
    if (kInterior || (s.row_ok && j >= 0 && j < s.m)) {
      float const cost = ring.at_step(step, s.lane);
      if constexpr (kHard) {
        st.left =
            double(cost) + min_keeping_nan(up, min_keeping_nan(diag, st.left));
      } else {
        SoftMinimum const sm =
            kNearFirst ? soft_minimum_near_first<kInterior>(diag, up, st.left)
                       : soft_minimum(diag, up, st.left);
        // Formed while the exponentials wait, so that only one add follows
        // the logarithm.
        double const cost_plus_lo = fma(double(cost), scale, sm.lo);
        st.left = cost_plus_lo - double(log2_approx(sm.sum));
        if constexpr (kRecompute) {
          float const inv = reciprocal_approx(sm.sum);
          weights.diag(t, s.lane) = sm.e_diag * inv;
          weights.up(t, s.lane) = sm.e_up * inv;
          weights.left(ring, step, t, s.lane) = sm.e_left * inv;
        }
      }
      if constexpr (!kRecompute) {
        if (bottom && s.lane == kLanes - 1) publish(bottom + j, st.left);
        if (!kInterior && s.i == s.n - 1 && j == s.m - 1)
          P.values[s.p] = st.left * P.gamma_ln2;
      }
    } else {
      st.left = kInf;
    }
  }
}

// Block c's walk, without the range test where the block is interior and
// kSplitInterior (interior_forward_walks for the forward kernels,
// interior_walks for the backward's recompute), and with
// soft_minimum_near_first where kNearFirst (hard DTW where kHard).
template <bool kRecompute, bool kSplitInterior, bool kNearFirst,
          bool kHard = false>
__device__ __forceinline__ void walk_block(const Params& P, const Strip& s,
                                           const Ring& ring,
                                           const BlockWeights& weights,
                                           WalkState& st,
                                           HandoverReader<double>& above, int c,
                                           double* bottom) {
  static_assert(!(kHard && kRecompute), "hard DTW has no backward here");
  if (kSplitInterior && interior_block(s, c))
    walk_block_cells<kRecompute, true, kNearFirst, kHard>(P, s, ring, weights,
                                                          st, above, c, bottom);
  else
    walk_block_cells<kRecompute, false, kNearFirst, kHard>(
        P, s, ring, weights, st, above, c, bottom);
}

__device__ __forceinline__ WalkState initial_state(const Strip& s) {
  // R(−1, −1) = 0 feeds lane 0's first diagonal in the first strip.
  return WalkState{kInf, (s.w == 0 && s.lane == 0) ? 0.0 : kInf};
}

__device__ __forceinline__ int walk_blocks(const Strip& s) {
  return (s.m + s.rows - 1 + kLanes - 1) / kLanes;
}

__device__ __forceinline__ double* checkpoint(const Params& P, const Strip& s,
                                              int c) {
  return P.checkpoints + ((strip_slot(P, s, s.w) * P.blocks + c) * 2) * kLanes +
         s.lane;
}

// Which warp of a two-warp forward block walks, for d ≤ 16. We take an SM
// to issue a warp's instructions from sub-partition %warpid mod 4 (not
// documented; PTX also says %warpid may change while a warp runs, so this
// is a placement hint read once, and both warps act on the same reading,
// which keeps the roles consistent whatever it says). With warp 0
// walking in every block, the two-warp forward at d ≤ 4 was 10–20% slower
// than one warp from 8 strips per SM (16/2048/1, 32/1024/1, 32/2048/1), as
// if the walks shared fewer sub-partitions (not profiled). Letting the warp
// whose slot s has s mod 2 == (s / 4) mod 2 walk (slots 0, 2, 5, 7, ...: all
// four sub-partitions if a block's warps sit in slots 2p and 2p + 1) made
// those shapes 11–14% faster than one warp, and d = 8 and 16 12–14% faster
// than warp 0 walking (H100, perf/RESULTS.md, "Measured choices"). At d = 64,
// whose loading warp is busy with tensor-core products, it was 5–10% slower
// from 32/512/64 up, so there warp 0 walks. Warp 0 also walks when neither or
// both slots qualify. Every thread of the block must call it.
__device__ int walking_warp(unsigned* slots) {
  if (threadIdx.x % kLanes == 0) {
    unsigned slot;
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(slot));
    slots[threadIdx.x / kLanes] = slot;
  }
  __syncthreads();
  auto qualifies = [](unsigned slot) {
    return (slot & 1) == ((slot >> 2) & 1);
  };
  return qualifies(slots[1]) && !qualifies(slots[0]) ? 1 : 0;
}

// The forward pass over one strip, blocks from the left.
//
// kWarps = 1: one warp forms tile c's costs, then walks block c.
//
// kWarps = 2: one warp forms tile c + 1's costs while the other walks block
// c (warp 0 walks at d = 64; at d ≤ 16 see walking_warp), so a block costs
// the longer of the two rather than their sum (at d = 64 the tensor-core
// tile takes about two thirds of the walk's time). The price is a 128-step
// ring: a lane's cell of column j sits at step j + lane modulo 128, so the
// ring holds 128 consecutive columns per lane. In the phase of block c the
// walk reads columns [32c − 31, 32c + 31] (tiles c − 1 and c) and the other
// warp writes tile c + 1's, [32c + 32, 32c + 63]: within 95 columns of each
// other, so no two share a slot (64 steps would not do), and tile c, which
// the next phase reads, is not overwritten. One barrier per phase orders
// everything.
//
// kHard: hard DTW's values (no checkpoints: its backward is not here).
template <int kD, bool kVec, bool kSeries, class In, bool kCheckpoint,
          int kWarps, bool kHard = false>
__global__ void __launch_bounds__(kWarps* kLanes)
    forward_kernel(const Params P) {
  static_assert(!(kHard && kCheckpoint));
  extern __shared__ float shared[];
  using Layout = SharedLayout<kD, kSeries>;
  auto const at = Layout::carve(shared, /*backward=*/false, kWarps);
  Ring const ring{at.ring, Layout::ring_steps(kWarps) - 1};
  if constexpr (kCheckpoint) clear_arrays(P);
  Strip s;
  if (!take_strip<In>(P, 0, /*bottom_up=*/false, at.ticket, s)) return;
  __shared__ unsigned warp_slots[2];
  int const walker = kWarps == 2 && kD <= 16 ? walking_warp(warp_slots) : 0;
  bool const walks = int(threadIdx.x / kLanes) == walker;
  bool const loads = kWarps == 1 || !walks;
  float x_norm = 0.f;
  if (loads)
    x_norm = stage_strip<kD, kVec, kSeries, In>(P, s, at.x_strip, at.mu);
  std::int64_t const slot = strip_slot(P, s, s.w);
  bool const has_below = kLanes * (s.w + 1) < s.n;
  double* bottom = has_below ? P.bottom + slot * P.problem.m_max : nullptr;
  int const tiles = (s.m + kLanes - 1) / kLanes;
  WalkState st = initial_state(s);
  HandoverReader<double> above = above_reader(P, s);
  if (walks) above.prefetch(0, s.lane);
  auto load = [&](int c) {
    load_tile<kD, kVec, kSeries, In>(P, s, ring, at.y_tile, at.x_strip, at.mu,
                                     x_norm, c);
  };
  auto walk = [&](int c) {
    if constexpr (kCheckpoint) {
      double* ck = checkpoint(P, s, c);
      ck[0] = st.left;
      ck[kLanes] = st.up_last;
    }
    walk_block<false, interior_forward_walks<kSeries, kCheckpoint>,
               near_first_walks<kD, false>, kHard>(P, s, ring, BlockWeights{},
                                                   st, above, c, bottom);
    __syncwarp();
  };
  int const blocks = walk_blocks(s);
  if constexpr (kWarps == 1) {
    for (int c = 0; c < blocks; ++c) {
      if (c < tiles) load(c);
      walk(c);
    }
  } else {
    if (loads) load(0);
    __syncthreads();
    // Phase c: the walking warp walks block c, the other forms tile c + 1.
    for (int c = 0; c < blocks; ++c) {
      if (walks)
        walk(c);
      else if (c + 1 < tiles)
        load(c + 1);
      __syncthreads();
    }
  }
}

}  // namespace
}  // namespace softwave::impl::cuda_fused
