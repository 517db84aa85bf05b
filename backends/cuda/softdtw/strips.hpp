#pragma once
// A strip's shared memory, the kernels' parameters, the hand-over of rows
// between strips through global memory, strip tickets and the cost ring.
//
// One part of the CUDA-specialised Soft-DTW kernels (fused.hpp has the
// design), included only by fused.cpp: the parts form one translation unit,
// in this order: strips.hpp, features.hpp, cost_tiles.hpp, forward_kernel.hpp,
// backward_kernel.hpp, and the host code in fused.cpp.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cuda/atomic>

#include "fused.hpp"

namespace softwave::impl::cuda_fused {
namespace {

constexpr int kLanes = 32;  // rows per strip, columns per tile, steps/block
constexpr int kPitch = 33;  // floats per ring step (odd: conflict-free
                            // reads along both a column and a row of a tile)
constexpr unsigned kFull = 0xffffffffu;

// Shared memory of one strip (one block: strips are independent, and small
// blocks pack the SMs best), for the forward or the backward kernel with 1
// or 2 warps. Floats, in this order: the ring (a 32×32 tile spans 63
// anti-diagonal steps; with two warps the ring has 128, of which the
// forward's windows span 95 and the backward's 127, see forward_kernel and
// backward_kernel); the strip's x rows (series only); the strip's mean x
// row (tensor-core costs); then
// - forward: the y rows of one tile;
// - backward: one buffer of soft-argmin weights per warp (one being
//   written, one read with two warps; see BlockWeights), and with two warps
//   the recomputing warp's y rows. The E side's y rows (those its tile
//   gradient products read) share the weight buffer of the block it has
//   just walked, which is dead from the end of that walk until the next
//   phase's recompute writes it (backward_kernel);
// last the block's strip ticket.
template <int kD, bool kSeries>
struct SharedLayout {
  // Rows are padded by 4 floats: the tensor-core fragment loads (8 rows ×
  // 4 columns at a time) then hit 32 different banks.
  static constexpr int rows = kSeries ? kLanes * (kD + 4) : 0;
  static constexpr int center = kSeries ? kD + 4 : 0;
  __host__ __device__ static constexpr int ring_steps(int warps) {
    return warps == 2 ? 128 : 64;
  }
  // Whether each cell's left weight is kept in the ring in place of its
  // cost (see BlockWeights): 4 KiB less per weight buffer. At d = 64 this
  // and the y rows sharing the buffer (see the layout above) take the one-warp
  // backward from 5 strips per SM to 6 and then 8 (its registers' limit),
  // and the two-warp one from 3 to 4 (it needs both). H100, fwd+bwd:
  // 32/2048/64 8.86 → 8.00 ms (left weight, one warp) → 6.82 (y rows);
  // 32/512/64 1.04 → 0.90 (two warps, which now fit). At d ≤ 16
  // the two-warp backward keeps three weight arrays: there the smaller
  // footprint fits no more strips and measured slower (8/8192/16 +2.6%,
  // 16/512/1 +9%).
  __host__ __device__ static constexpr bool left_weight_in_ring(int warps) {
    return warps == 1 || kD > 16;
  }
  // Floats of one block's weights (see BlockWeights).
  __host__ __device__ static constexpr int weights(int warps) {
    return (left_weight_in_ring(warps) ? 2 : 3) * kLanes * kPitch;
  }
  // Floats of one weight buffer: the weights, or the E side's y rows.
  __host__ __device__ static constexpr int weight_buffer(int warps) {
    return weights(warps) > rows ? weights(warps) : rows;
  }
  __host__ __device__ static constexpr int floats(bool backward, int warps) {
    return ring_steps(warps) * kPitch + rows + center +
           (backward ? warps * weight_buffer(warps) + (warps == 2 ? rows : 0)
                     : rows);
  }
  static constexpr std::size_t bytes(bool backward, int warps) {
    return sizeof(float) * floats(backward, warps) + sizeof(unsigned long long);
  }
  struct Pointers {
    float *ring, *x_strip, *mu;
    // The y rows the tile costs are formed from (the one-warp backward's
    // are its weight buffer), and the backward's weight buffers (null
    // forward).
    float *y_tile, *weights;
    unsigned long long* ticket;
  };
  static __device__ Pointers carve(float* shared, bool backward, int warps) {
    float* const x_strip = shared + ring_steps(warps) * kPitch;
    float* const mu = x_strip + rows;
    float* const after_mu = mu + center;
    float* const weights = backward ? after_mu : nullptr;
    float* const y_tile = !backward    ? after_mu
                          : warps == 1 ? weights
                                       : weights + warps * weight_buffer(warps);
    // floats() is even (every term is), so the ticket is 8-byte aligned.
    auto* const ticket =
        reinterpret_cast<unsigned long long*>(shared + floats(backward, warps));
    return {shared, x_strip, mu, y_tile, weights, ticket};
  }
};

// Row pitch (floats) of staged rows.
template <bool kVec>
__device__ __forceinline__ int row_pitch(int d) {
  return kVec ? d + 4 : d;
}

struct Params {
  Problem problem;
  Outputs outputs;
  double* values;
  // The walks hold R in units of γ·ln 2, R·walk_scale = R·log2(e)/γ, and
  // so do the hand-over rows (`bottom`) and the checkpoints, which only
  // walks read; the pair's value is converted back (gamma_ln2 = γ·ln 2).
  double walk_scale, gamma_ln2;
  int strips;  // strips per pair: ceil(n_max / 32)
  int blocks;  // walk blocks per strip at most
  // Hand-over rows start as all-ones bits (see unwritten()) and each entry
  // is written once with a relaxed atomic store, so the data is its own
  // ready flag: a reader polls the entries it needs.
  double* bottom;       // (pairs, strips, m_max): each strip's last row of R
  float* messages;      // (pairs, strips, m_max): E owed to a strip's last row
  double* checkpoints;  // (pairs, strips, blocks, 2, 32): lane state
  // Taken with atomicAdd from all-ones (the workspace is set to all-ones in
  // one memset), so the first ticket is all-ones + 1 = 0.
  unsigned long long* tickets;  // [0] forward, [1] backward
  // Arrays the forward kernel zeroes (Outputs::zero_gradients), or null.
  float* clear[2];
  std::int64_t clear_size[2];
};

template <class U>
__device__ __forceinline__ U load_relaxed(U* at) {
  return cuda::atomic_ref<U, cuda::thread_scope_device>(*at).load(
      cuda::memory_order_relaxed);
}

template <class U>
__device__ __forceinline__ void store_relaxed(U* at, U value) {
  cuda::atomic_ref<U, cuda::thread_scope_device>(*at).store(
      value, cuda::memory_order_relaxed);
}

// Hand-over entries start with every bit set (a NaN that arithmetic never
// produces) and writers publish NaN results in the canonical form, so a
// reader waits for exactly the entries not yet written, also when
// non-finite inputs (SoftDTWOptions::check_values = false) make NaN results.
__device__ __forceinline__ bool unwritten(double v) {
  return __double_as_longlong(v) == -1ll;
}
__device__ __forceinline__ bool unwritten(float v) {
  return __float_as_int(v) == -1;
}
template <class U>
__device__ __forceinline__ void publish(U* at, U value) {
  store_relaxed(at, value == value ? value : U(NAN));
}

// Hand-over rows are read kGrain columns (a chunk) at a time: a strip can
// walk a chunk as soon as the strip that feeds it has published the chunk,
// so neighbouring strips trail each other by about 32 + kGrain steps. Each
// chunk is loaded one chunk ahead and checked only when its turn comes, so
// the load's latency hides behind kGrain steps of walking; entries that were
// not yet written when they were loaded are polled for then.
constexpr int kGrain = 4;
constexpr int kChunks = kLanes / kGrain;  // chunks per 32-step block

// One hand-over row as a warp reads it: chunk k belongs to block
// k / kChunks, and lane l of the chunk's lanes (kGrain·(k % kChunks) ...)
// holds column 32·(k / kChunks) + offset + l.
template <class U>
struct HandoverReader {
  U* row;      // null: the row does not exist (every entry is `outside`)
  int m;       // the row's columns; the others read as `outside`
  int offset;  // column of lane 0 relative to the block's first column
  U outside;
  U value = outside;  // this lane's entry of the chunk in use
  U next = outside;   // its entry of the chunk loaded ahead

  __device__ int column(int k, int lane) const {
    return kLanes * (k / kChunks) + offset + lane;
  }
  __device__ bool mine(int k, int lane) const {
    return lane / kGrain == k % kChunks;
  }
  __device__ bool inside(int j) const { return row && j >= 0 && j < m; }

  // Starts loading chunk k (nothing for k < 0).
  __device__ void prefetch(int k, int lane) {
    if (k < 0 || !mine(k, lane)) return;
    int const j = column(k, lane);
    next = inside(j) ? load_relaxed(row + j) : outside;
  }
  // Puts the prefetched chunk k in use; with `wait`, polls until every
  // entry of it has been written.
  __device__ void take(int k, int lane, bool wait) {
    bool const is_mine = mine(k, lane);
    if (is_mine) value = next;
    if (!wait) return;
    int const j = column(k, lane);
    bool const poll = is_mine && inside(j);
    while (!__all_sync(kFull, !poll || !unwritten(value))) {
      __nanosleep(32);
      if (poll) value = load_relaxed(row + j);
    }
  }
};

// Inputs are read as float from their storage, the kernels' In: float,
// __nv_bfloat16 or __half (a template parameter, so the float kernels are
// the same code as without 16-bit support), through the read-only cache.
__device__ __forceinline__ float load1(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load1(const __nv_bfloat16* p) {
  auto const h = __ldg(reinterpret_cast<const unsigned short*>(p));
  return __uint_as_float(unsigned(h) << 16);
}
__device__ __forceinline__ float load1(const __half* p) {
  auto const h = __ldg(reinterpret_cast<const unsigned short*>(p));
  return __half2float(__ushort_as_half(h));
}
// Elements [4q, 4q + 4) of p, which is aligned to 4 elements (see
// with_features). Indexed by quads, so the float loads address float4s as
// plain float4 code does (p + 4q in elements changes the float kernels'
// address arithmetic and, at d = 64, their register allocation).
__device__ __forceinline__ float4 load4(const float* p, int q = 0) {
  return __ldg(reinterpret_cast<const float4*>(p) + q);
}
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p, int q = 0) {
  uint2 const h = __ldg(reinterpret_cast<const uint2*>(p) + q);
  return make_float4(
      __uint_as_float(h.x << 16), __uint_as_float(h.x & 0xffff0000u),
      __uint_as_float(h.y << 16), __uint_as_float(h.y & 0xffff0000u));
}
__device__ __forceinline__ float4 load4(const __half* p, int q = 0) {
  uint2 const h = __ldg(reinterpret_cast<const uint2*>(p) + q);
  float2 const a = __half22float2(*reinterpret_cast<const __half2*>(&h.x));
  float2 const b = __half22float2(*reinterpret_cast<const __half2*>(&h.y));
  return make_float4(a.x, a.y, b.x, b.y);
}
// Outputs in the inputs' storage (the alignment), rounded to nearest even.
__device__ __forceinline__ void store1(float* p, float v) { *p = v; }
__device__ __forceinline__ void store1(__nv_bfloat16* p, float v) {
  *p = __float2bfloat16_rn(v);
}
__device__ __forceinline__ void store1(__half* p, float v) {
  *p = __float2half_rn(v);
}

template <class In>
__device__ __forceinline__ const In* as(const void* p) {
  return static_cast<const In*>(p);
}

// What one warp needs to know about its strip of one pair.
struct Strip {
  std::int64_t p;         // pair, local to this launch
  std::int64_t g;         // pair in the caller's numbering (begin + p)
  int w;                  // strip index; rows [32w, 32w + rows)
  int n, m;               // the pair's lengths
  int rows;               // rows of this strip inside the pair
  int lane, i;            // lane and its row
  bool row_ok;            // lane < rows
  const void* x;          // the pair's x series (N, d) of In, or null
  const void* y;          // the pair's y series (M, d) of In, or null
  std::int64_t x_series;  // index of x in the batch (for grad_x)
  std::int64_t y_series;
};

// Zeroes the arrays in P.clear, every block of the launch a share. The
// backward kernel, next on the stream, adds the gradients to them.
__device__ inline void clear_arrays(const Params& P) {
  std::int64_t const stride = std::int64_t(gridDim.x) * blockDim.x;
  std::int64_t const first =
      std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int a = 0; a < 2; ++a) {
    float* const to = P.clear[a];
    if (to == nullptr) continue;
    for (std::int64_t q = first; q < P.clear_size[a]; q += stride) to[q] = 0.f;
  }
}

// Takes the block's strip ticket (`slot`: the block's shared copy); false
// when the block has no strip to run. Every thread of the block must call it.
template <class In>
__device__ bool take_strip(const Params& P, int which, bool bottom_up,
                           unsigned long long* slot, Strip& s) {
  std::int64_t const total = P.problem.pairs * P.strips;
  if (threadIdx.x == 0) *slot = atomicAdd(P.tickets + which, 1ull) + 1ull;
  __syncthreads();
  unsigned long long const ticket = *slot;
  s.lane = threadIdx.x & (kLanes - 1);
  if (std::int64_t(ticket) >= total) return false;
  Problem const& q = P.problem;
  // Strip-major: every pair's first strip, then every pair's second, ...
  // Blocks stay resident from their first step to their last, and at
  // d = 64 only ~8 fit on an SM; taken pair by pair, the last strips of the
  // first pairs would hold those slots while they wait for the strips above
  // them, and the later pairs could not start until the first ones ended.
  s.p = std::int64_t(ticket) % q.pairs;
  int const k = int(std::int64_t(ticket) / q.pairs);
  s.w = bottom_up ? P.strips - 1 - k : k;
  s.g = q.map.begin + s.p;
  s.x_series = q.map.x(s.p);
  s.y_series = q.map.y(s.p);
  s.n = q.lengths_x ? q.lengths_x[s.x_series] : int(q.n_max);
  s.m = q.lengths_y ? q.lengths_y[s.y_series] : int(q.m_max);
  if (kLanes * s.w >= s.n) return false;
  s.rows = min(kLanes, s.n - kLanes * s.w);
  s.i = kLanes * s.w + s.lane;
  s.row_ok = s.lane < s.rows;
  s.x = q.x ? as<In>(q.x) + s.x_series * q.n_max * q.d : nullptr;
  s.y = q.y ? as<In>(q.y) + s.y_series * q.m_max * q.d : nullptr;
  return true;
}

__device__ __forceinline__ std::int64_t strip_slot(const Params& P,
                                                   const Strip& s, int w) {
  return s.p * P.strips + w;
}

// Costs (and, backward, E) of the strip's cells in shared memory by
// anti-diagonal step: cell (row l of the strip, column j) is in step j + l,
// modulo a power-of-two number of steps.
struct Ring {
  float* cells;
  int mask;  // steps − 1
  __device__ float& at_step(int step, int l) const {
    return cells[(step & mask) * kPitch + l];
  }
  __device__ float& at(int j, int l) const { return at_step(j + l, l); }
};

// Where the recompute leaves the soft-argmin weights of a block's cells for
// the E walk: the diagonal and upper ones in `diag_up` (step t of the block,
// lane l: t·kPitch + l, the upper one a block further), the left one there
// too (a third block) or, with left_in_ring, in the ring in place of the
// cell's cost: each cost is read once, by its own step of the recompute, and
// the E walk puts the cell's E there once it has read the weight.
struct BlockWeights {
  float* diag_up;
  bool left_in_ring;
  __device__ float& diag(int t, int lane) const {
    return diag_up[t * kPitch + lane];
  }
  __device__ float& up(int t, int lane) const {
    return diag_up[(kLanes + t) * kPitch + lane];
  }
  __device__ float& left(const Ring& ring, int step, int t, int lane) const {
    return left_in_ring ? ring.at_step(step, lane)
                        : diag_up[(2 * kLanes + t) * kPitch + lane];
  }
};

}  // namespace
}  // namespace softwave::impl::cuda_fused
