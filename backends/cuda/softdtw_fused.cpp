// The CUDA-specialised Soft-DTW kernels (see softdtw_fused.hpp for the
// design). Compiled only when Kokkos has its CUDA backend.

#include "softdtw_fused.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cuda/atomic>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>

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
  // 32/2048/64 8.86 → 8.00 ms (left weight, one warp) → 6.82 (y rows,
  // session 15); 32/512/64 1.04 → 0.90 (two warps, which now fit). At d ≤ 16
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
constexpr std::size_t kChunkBytes = std::size_t(256) << 20;

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
  unsigned long long* tickets;  // [0] forward, [1] backward
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

// Takes the block's strip ticket (`slot`: the block's shared copy); false
// when the block has no strip to run. Every thread of the block must call it.
template <class In>
__device__ bool take_strip(const Params& P, int which, bool bottom_up,
                           unsigned long long* slot, Strip& s) {
  std::int64_t const total = P.problem.pairs * P.strips;
  if (threadIdx.x == 0) *slot = atomicAdd(P.tickets + which, 1ull);
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
  s.g = q.begin + s.p;
  s.x_series = q.y_count ? s.g / q.y_count : s.g;
  s.y_series = q.y_count ? s.g % q.y_count : s.g;
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

// ----------------------------------------------------------------- features

// Loads k < d of a row into registers (zeros beyond d). kVec: d % 4 == 0 and
// the rows are 16-byte aligned.
template <int kD, bool kVec, class In>
__device__ __forceinline__ void load_row(float (&r)[kD], const In* row, int d) {
  if constexpr (kVec) {
#pragma unroll
    for (int k = 0; k < kD; k += 4) {
      float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
      if (k < d) v = load4(row + k);
      r[k] = v.x;
      r[k + 1] = v.y;
      r[k + 2] = v.z;
      r[k + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int k = 0; k < kD; ++k) r[k] = k < d ? load1(row + k) : 0.f;
  }
}

// Copies rows [0, count) of a (·, d) row-major array into shared memory
// (row pitch row_pitch<kVec>(d)), coalesced: all of it is in flight at once.
template <bool kVec, class In>
__device__ __forceinline__ void stage_rows(float* to, const In* from, int count,
                                           int d, int lane) {
  if constexpr (kVec) {
    int const per_row = d / 4, n = count * per_row;
    // Element e's row, e / per_row, by a float reciprocal: an integer
    // division by a divisor known only at run time is ~20 instructions an
    // element (the backward stages a tile's y rows twice per block). Exact
    // here: (e + ½) / per_row lies at least ½ / per_row (≥ 1/32, d ≤ 64)
    // from an integer, and e < 32 · 16, so float rounding cannot cross one.
    float const inverse = 1.f / float(per_row);
    auto* t = reinterpret_cast<float4*>(to);
    for (int e = lane; e < n; e += kLanes) {
      int const row = int((float(e) + 0.5f) * inverse);
      t[e + row] = load4(from, e);  // pitch: per_row + 1 float4s
    }
  } else {
    for (int e = lane, n = count * d; e < n; e += kLanes)
      to[e] = load1(from + e);
  }
  __syncwarp();
}

// Calls f(k, v) for the features k < d of a row in shared memory that every
// lane reads at once (a broadcast).
template <int kD, bool kVec, class F>
__device__ __forceinline__ void for_features(const float* row, int d,
                                             const F& f) {
  if constexpr (kVec) {
#pragma unroll
    for (int k = 0; k < kD; k += 4)
      if (k < d) {
        float4 const v = *reinterpret_cast<const float4*>(row + k);
        f(k, v.x);
        f(k + 1, v.y);
        f(k + 2, v.z);
        f(k + 3, v.w);
      }
  } else {
#pragma unroll
    for (int k = 0; k < kD; ++k)
      if (k < d) f(k, row[k]);
  }
}

// ------------------------------------------------------------ cost tiles

// 3xTF32 tensor-core products: v = hi + lo with hi, lo in TF32, and
// a·b ≈ a_lo·b_hi + a_hi·b_lo + a_hi·b_hi, which keeps float32 accuracy
// (a single TF32 product would lose 13 bits).
struct Tf32Split {
  unsigned hi, lo;
};

// v = hi + lo as TF32 operands, each rounded to nearest (ties away), the
// values cvt.rna.tf32.f32 gives. The rounding is done here in integer
// arithmetic: the tensor cores read the top 19 bits of a TF32 operand and
// ignore the low 13 (nvcc's own lowering of cvt.rna passes them unmasked to
// HMMA as well), so adding half a TF32 unit (0x1000) to the bits rounds the
// magnitude, carries included. nvcc lowers cvt.rna.tf32.f32 on sm_90 to a
// finiteness test and a select around that add: 7 instructions a split
// against 4 here. Finite values split bit for bit as with cvt.rna; an
// infinite v gives hi = ±∞ and lo = NaN as before.
__device__ __forceinline__ Tf32Split split_tf32(float v) {
  constexpr unsigned kHalfUnit = 0x1000u, kTf32Bits = 0xffffe000u;
  unsigned const hi = __float_as_uint(v) + kHalfUnit;
  float const lo = v - __uint_as_float(hi & kTf32Bits);
  return {hi, __float_as_uint(lo) + kHalfUnit};
}

__device__ __forceinline__ void mma_tf32(float* d, unsigned a0, unsigned a1,
                                         unsigned a2, unsigned a3, unsigned b0,
                                         unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// acc (an m16n8 accumulator fragment) += A·B in 3xTF32. Fragments of
// m16n8k8 (g = lane/4, t = lane%4): a[r] is A's row g + 8(r%2), column
// t + 4(r/2); b[r] is B's row t + 4r, column g; acc[r] is row g + 8(r/2),
// column 2t + r%2.
__device__ __forceinline__ void mma_3xtf32(float* acc, const Tf32Split (&a)[4],
                                           const Tf32Split (&b)[2]) {
  mma_tf32(acc, a[0].lo, a[1].lo, a[2].lo, a[3].lo, b[0].hi, b[1].hi);
  mma_tf32(acc, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b[0].lo, b[1].lo);
  mma_tf32(acc, a[0].hi, a[1].hi, a[2].hi, a[3].hi, b[0].hi, b[1].hi);
}

// Where a lane's m16n8 accumulators sit in a 32-row block: element
// [mi][ni][2h + e] is at row accumulator_row(mi, h, lane) and column
// accumulator_column(ni, e, lane).
__device__ __forceinline__ int accumulator_row(int mi, int h, int lane) {
  return 16 * mi + (lane >> 2) + 8 * h;
}
__device__ __forceinline__ int accumulator_column(int ni, int e, int lane) {
  return 8 * ni + 2 * (lane & 3) + e;
}

// The values that lanes hold for their own row (or column) of the block,
// gathered at the 4 rows (8 columns) of this lane's accumulators: one
// shuffle each rather than one per accumulator. lane_of(o, e) names the
// lane that holds out[o][e].
template <int kOuter, class LaneOf>
__device__ __forceinline__ void gather_lanes(float (&out)[kOuter][2], float v,
                                             const LaneOf& lane_of) {
#pragma unroll
  for (int o = 0; o < kOuter; ++o)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      out[o][e] = __shfl_sync(kFull, v, lane_of(o, e));
}
__device__ __forceinline__ void gather_accumulator_rows(float (&out)[2][2],
                                                        float v, int lane) {
  gather_lanes(out, v,
               [lane](int mi, int h) { return accumulator_row(mi, h, lane); });
}
__device__ __forceinline__ void gather_accumulator_columns(float (&out)[4][2],
                                                           float v, int lane) {
  gather_lanes(out, v, [lane](int ni, int e) {
    return accumulator_column(ni, e, lane);
  });
}

// acc (the 32×32 product (X − μ)(Y − μ)ᵀ of 32 staged x rows and 32 staged
// y rows, d features, d % 8 == 0) in m16n8 accumulator fragments:
// acc[mi][ni][r] is row 16mi + g + 8(r/2), column 8ni + 2t + r%2, with
// g = lane/4, t = lane%4.
template <int kD>
__device__ __forceinline__ void tile_products(float (&acc)[2][4][4],
                                              const float* x_rows,
                                              const float* y_rows,
                                              const float* mu, int pitch, int d,
                                              int lane) {
  int const g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int mi = 0; mi < 2; ++mi) {
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[mi][ni][r] = 0.f;
  }
  // Rolled up for d > 16: unrolled, the per-tile code of the backward
  // outgrew the instruction cache (ncu: 29% of its stalls were instruction
  // fetch), and rolling these loops up made d = 64 fwd+bwd 4–6% faster.
  // (At kD = 16 the loop has two iterations and the rolled-up one measured
  // 1–2% slower at 8/8192/16.)
#pragma unroll(kD > 16 ? 1 : (kD + 7) / 8)
  for (int k = 0; k < kD; k += 8) {
    if (k >= d) break;
    Tf32Split a[2][4], b[4][2];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        a[mi][r] = split_tf32(
            x_rows[(16 * mi + g + 8 * (r & 1)) * pitch + k + t + 4 * (r >> 1)] -
            mu[k + t + 4 * (r >> 1)]);
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
      for (int r = 0; r < 2; ++r)
        b[ni][r] = split_tf32(y_rows[(8 * ni + g) * pitch + k + t + 4 * r] -
                              mu[k + t + 4 * r]);
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) mma_3xtf32(acc[mi][ni], a[mi], b[ni]);
  }
}

// Σ_k (v_k − μ_k)² of a staged row (d % 4 == 0 and 16-byte aligned rows,
// as the tensor-core path has them): float4 reads and four chains. A
// scalar loop over a run-time d indexed its partial sums by k & 3, which
// put them in local memory. Up to kD = 16 the loop is unrolled over kD; at
// kD = 64 it runs to d. Measured on an H100 against the other form (same
// call, session 19): unrolled at kD = 16 the forward at 8/8192/16 took 0.88
// of the time; over kD at kD = 64 the forward at 32/4096/64 took 1.08.
template <int kD>
__device__ __forceinline__ float squared_norm(const float* row, const float* mu,
                                              int d) {
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  auto add = [&](int k) {
    float4 const v = *reinterpret_cast<const float4*>(row + k);
    float4 const m = *reinterpret_cast<const float4*>(mu + k);
    acc.x = fmaf(v.x - m.x, v.x - m.x, acc.x);
    acc.y = fmaf(v.y - m.y, v.y - m.y, acc.y);
    acc.z = fmaf(v.z - m.z, v.z - m.z, acc.z);
    acc.w = fmaf(v.w - m.w, v.w - m.w, acc.w);
  };
  if constexpr (kD <= 16) {
#pragma unroll
    for (int k = 0; k < kD; k += 4)
      if (k < d) add(k);
  } else {
    for (int k = 0; k < d; k += 4) add(k);
  }
  return (acc.x + acc.y) + (acc.z + acc.w);
}

// Whether the cost tiles run on tensor cores.
template <int kD, bool kVec>
__device__ __forceinline__ bool uses_tensor_cores(int d) {
  return kVec && kD >= 16 && d >= 16 && d % 8 == 0;
}

// Whether ∇x/∇y do too: only for d > 16. At d = 16 the FMA products were
// faster (8/8192/16 fwd+bwd 21.9 vs 22.3 ms on an H100), at d = 64 slower
// (32/2048/64: 9.0 vs 8.6 ms).
template <int kD, bool kVec>
__device__ __forceinline__ bool tensor_core_gradients(int d) {
  return kD > 16 && uses_tensor_cores<kD, kVec>(d);
}

// Costs of tile c (columns 32c.. of the strip) into the ring. Series: the
// tile's y rows are staged in shared memory (`y_tile`), and lane l forms row
// l's 32 squared distances from its x row in registers.

template <int kD, bool kVec, bool kSeries, class In>
__device__ void load_tile(const Params& P, const Strip& s, const Ring& ring,
                          float* y_tile, const float* x_strip, const float* mu,
                          float x_norm, int c) {
  int const j0 = kLanes * c;
  int const cols = min(kLanes, s.m - j0);
  int const d = P.problem.d;
  if constexpr (kSeries) {
    stage_rows<kVec>(y_tile, as<In>(s.y) + std::int64_t(j0) * d, cols, d,
                     s.lane);
    int const pitch = row_pitch<kVec>(d);
    if (uses_tensor_cores<kD, kVec>(d)) {
      // Tensor cores: C = ‖x − μ‖² + ‖y − μ‖² − 2 (x − μ)·(y − μ), clamped
      // at 0 against rounding, with μ the strip's mean x row (stage_strip).
      float const y_norm = squared_norm<kD>(y_tile + s.lane * pitch, mu, d);
      float acc[2][4][4];
      tile_products<kD>(acc, x_strip, y_tile, mu, pitch, d, s.lane);
      float nx[2][2], ny[4][2];
      gather_accumulator_rows(nx, x_norm, s.lane);
      gather_accumulator_columns(ny, y_norm, s.lane);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            int const row = accumulator_row(mi, r >> 1, s.lane);
            int const col = accumulator_column(ni, r & 1, s.lane);
            if (row < s.rows && col < cols)
              ring.at(j0 + col, row) = fmaxf(
                  nx[mi][r >> 1] + ny[ni][r & 1] - 2.f * acc[mi][ni][r], 0.f);
          }
    } else if (s.row_ok) {
      float xr[kD];
      load_row<kD, kVec>(xr, as<In>(s.x) + std::int64_t(s.i) * d, d);
#pragma unroll 4
      for (int q = 0; q < cols; ++q) {
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        for_features<kD, kVec>(y_tile + q * pitch, d, [&](int k, float v) {
          float const t = xr[k] - v;
          acc[k & 3] = fmaf(t, t, acc[k & 3]);
        });
        ring.at(j0 + q, s.lane) = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      }
    }
    __syncwarp();  // y_tile is reused by the next staging
  } else {
    // Lane q reads column j0 + q of every row: coalesced along the rows.
    if (s.lane < cols) {
      Problem const& q = P.problem;
      const In* cost = as<In>(q.cost) +
                       (s.g * q.n_max + kLanes * s.w) * q.m_max + j0 + s.lane;
      for (int l = 0; l < s.rows; ++l)
        ring.at(j0 + s.lane, l) = load1(cost + l * q.m_max);
    }
  }
  __syncwarp();
}

// Stages the strip's x rows in shared memory (series only). For the
// tensor-core costs it also sets μ, the strip's mean x row, and returns
// ‖x_lane − μ‖². Centring keeps the norms of the norm expansion of the order
// of the distances, so it cancels no digits (an offset in the data would
// otherwise be squared into it).
template <int kD, bool kVec, bool kSeries, class In>
__device__ __forceinline__ float stage_strip(const Params& P, const Strip& s,
                                             float* x_strip, float* mu) {
  if constexpr (!kSeries) return 0.f;
  int const d = P.problem.d, pitch = row_pitch<kVec>(d);
  stage_rows<kVec>(x_strip, as<In>(s.x) + std::int64_t(kLanes) * s.w * d,
                   s.rows, d, s.lane);
  if (!uses_tensor_cores<kD, kVec>(d)) return 0.f;
  // Four partial sums in named registers: indexed by r & 3 in a loop of
  // run-time length they would live in local memory.
  for (int k = s.lane; k < d; k += kLanes) {
    float const* column = x_strip + k;
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    int r = 0;
    for (; r + 4 <= s.rows; r += 4) {
      s0 += column[r * pitch];
      s1 += column[(r + 1) * pitch];
      s2 += column[(r + 2) * pitch];
      s3 += column[(r + 3) * pitch];
    }
    for (; r < s.rows; ++r) s0 += column[r * pitch];
    mu[k] = ((s0 + s1) + (s2 + s3)) / float(s.rows);
  }
  __syncwarp();
  return squared_norm<kD>(x_strip + s.lane * pitch, mu, d);
}

// ------------------------------------------------------------------ walk

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
// ~50 of a step's ~400 cycles (perf/RESULTS.md, session 8). The pair's last
// cell, which writes the value or seeds E, is never in one.
__device__ __forceinline__ bool interior_block(const Strip& s, int c) {
  return s.rows == kLanes && c >= 1 && kLanes * c + kLanes - 1 < s.m - 1;
}

// Which kernels' walks take the interior variant where they can, from
// same-call A/Bs against the general walk alone on an H100 (perf/RESULTS.md,
// session 17):
// - series forwards: 0.86–1.01 of the time on every shape of the grid;
// - series backwards with two warps or d ≤ 16: fwd+bwd 0.91–0.98;
// - the one-warp series backward at d = 64 (32/2048/64, 32/4096/64):
//   1.013–1.014 with its walks split and 0.998–1.001 with only its recompute
//   split (session 18), so it keeps the general walk (its registers, 255 a
//   thread since session 19, are the tightest of the kernels; series take
//   it only when forced, see two_warp_backward);
// - cost tensors: the forward 0.66–0.79, but fwd+bwd 1.03–1.06 with their
//   checkpointing forward split too (not profiled), and 1.00–1.01 with it
//   and the backward general.
template <int kD, int kWarps, bool kSeries>
constexpr bool interior_walks = kSeries && (kWarps == 2 || kD <= 16);
template <bool kSeries, bool kCheckpoint>
constexpr bool interior_forward_walks = kSeries || !kCheckpoint;

// Which walks take soft_minimum_near_first, from same-call A/Bs on an H100
// (perf/RESULTS.md, session 20): the forwards 0.956–0.992 of the time on
// every shape measured; the series backward's recompute fwd+bwd 0.966 at
// 16/512/1 and 0.988 at 8/8192/16, but 1.014–1.019 at d = 64 (32/2048/64,
// 32/4096/64), where the two-warp backward is at 254 registers.
template <int kD, bool kRecompute>
constexpr bool near_first_walks = !kRecompute || kD <= 16;

// Runs the 32 steps of block c (kInterior: interior_block(s, c)). Lane 0
// reads the strip above's last row by shuffle from `above`, whose chunk
// kChunks·c must have been prefetched. The recompute (kRecompute) stores
// the soft-argmin weights of every cell; the first pass hands the strip's
// last row over (`bottom`) and writes the pair's value.
template <bool kRecompute, bool kInterior, bool kNearFirst>
__device__ __forceinline__ void walk_block_cells(
    const Params& P, const Strip& s, const Ring& ring,
    const BlockWeights& weights, WalkState& st, HandoverReader<double>& above,
    int c, double* bottom) {
  // R is walked in units of γ·ln 2 (Params::walk_scale): exp(−a/γ) is then
  // 2^(−a) and γ·ln(s) is log2(s), so each special function is one SFU op
  // with no scaling on the step's dependency chain.
  double const scale = P.walk_scale;
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
      } else {
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
// soft_minimum_near_first where kNearFirst.
template <bool kRecompute, bool kSplitInterior, bool kNearFirst>
__device__ __forceinline__ void walk_block(const Params& P, const Strip& s,
                                           const Ring& ring,
                                           const BlockWeights& weights,
                                           WalkState& st,
                                           HandoverReader<double>& above, int c,
                                           double* bottom) {
  if (kSplitInterior && interior_block(s, c))
    walk_block_cells<kRecompute, true, kNearFirst>(P, s, ring, weights, st,
                                                   above, c, bottom);
  else
    walk_block_cells<kRecompute, false, kNearFirst>(P, s, ring, weights, st,
                                                    above, c, bottom);
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
// than warp 0 walking (H100, perf/RESULTS.md, session 14). At d = 64, whose
// loading warp is busy with tensor-core products, it was 5–10% slower from
// 32/512/64 up, so there warp 0 walks. Warp 0 also walks when neither or
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
template <int kD, bool kVec, bool kSeries, class In, bool kCheckpoint,
          int kWarps>
__global__ void __launch_bounds__(kWarps* kLanes)
    forward_kernel(const Params P) {
  extern __shared__ float shared[];
  using Layout = SharedLayout<kD, kSeries>;
  auto const at = Layout::carve(shared, /*backward=*/false, kWarps);
  Ring const ring{at.ring, Layout::ring_steps(kWarps) - 1};
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
               near_first_walks<kD, false>>(P, s, ring, BlockWeights{}, st,
                                            above, c, bottom);
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

// ----------------------------------------------------------- backward

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

// ----------------------------------------------------------------- host

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("softwave::softdtw::fused: ") + what +
                             ": " + cudaGetErrorString(status));
}

// Stream-ordered workspace: allocated and freed on the caller's stream, so
// nothing synchronises the device.
class StreamBuffer {
 public:
  StreamBuffer(const Kokkos::Cuda& space, std::size_t bytes)
      : space_(space), data_(stream_allocate(space, bytes)) {}
  ~StreamBuffer() { stream_free(space_, data_); }
  StreamBuffer(const StreamBuffer&) = delete;
  StreamBuffer& operator=(const StreamBuffer&) = delete;
  template <class U>
  U* at(std::size_t offset) const {
    return reinterpret_cast<U*>(static_cast<char*>(data_) + offset);
  }

 private:
  Kokkos::Cuda space_;
  void* data_ = nullptr;
};

struct Layout {
  std::size_t tickets, bottom, messages, checkpoints, total;
};

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

Layout layout(std::int64_t pairs, int strips, int blocks, std::int64_t m_max,
              bool backward) {
  Layout l{};
  std::size_t const slots = std::size_t(pairs) * strips;
  std::size_t at = 0;
  auto take = [&](std::size_t bytes) {
    std::size_t const here = at;
    at += aligned(bytes);
    return here;
  };
  l.tickets = take(2 * sizeof(unsigned long long));
  l.bottom = take(slots * m_max * sizeof(double));
  if (backward) {
    l.messages = take(slots * m_max * sizeof(float));
    l.checkpoints = take(slots * blocks * 2 * kLanes * sizeof(double));
  }
  l.total = at;
  return l;
}

template <class U>
struct TypeTag {
  using type = U;
};

// Calls f(TypeTag<In>{}) with the inputs' element type.
template <class F>
void with_storage(Storage storage, const F& f) {
  switch (storage) {
    case Storage::float32:
      return f(TypeTag<float>{});
    case Storage::bfloat16:
      return f(TypeTag<__nv_bfloat16>{});
    case Storage::float16:
      return f(TypeTag<__half>{});
  }
  throw std::logic_error("softwave::softdtw::fused: unknown storage");
}

// Calls f(std::integral_constant<int, kD>, std::bool_constant<kVec>).
// kVec reads the inputs four elements at a time and adds to the float
// gradient outputs two or four at a time (float2 and float4 atomics), so
// the rows of all four must be aligned to that.
template <class F>
void with_features(const Problem& q, const Outputs& o, const F& f) {
  // Four elements at a time: 16 bytes of float, 8 of a 16-bit type.
  std::uintptr_t const four = q.storage == Storage::float32 ? 16 : 8;
  auto aligned_to = [](const void* p, std::uintptr_t bytes) {
    return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
  };
  bool const vec = q.d % 4 == 0 && aligned_to(q.x, four) &&
                   aligned_to(q.y, four) && aligned_to(o.grad_x, 16) &&
                   aligned_to(o.grad_y, 16);
  auto pick = [&](auto kd) {
    if constexpr (decltype(kd)::value % 4 == 0) {
      if (vec) return f(kd, std::true_type{});
    }
    f(kd, std::false_type{});
  };
  if (q.d <= 4) return pick(std::integral_constant<int, 4>{});
  if (q.d <= 16) return pick(std::integral_constant<int, 16>{});
  if (q.d <= max_features) return pick(std::integral_constant<int, 64>{});
  throw std::logic_error("softwave::softdtw::fused: d > max_features");
}

// A kernel's shared memory and how many of its blocks an SM holds, set up
// once per device: beyond 48 KiB a kernel must opt in to its shared memory.
struct KernelFit {
  int blocks_per_sm = 0;
  int sms = 0;
};

KernelFit fit_kernel(void (*kernel)(Params), int threads, std::size_t smem,
                     int device) {
  static std::mutex mutex;
  static std::map<std::pair<const void*, int>, KernelFit> fits;
  std::lock_guard<std::mutex> lock(mutex);
  std::pair<const void*, int> const key{reinterpret_cast<const void*>(kernel),
                                        device};
  auto const found = fits.find(key);
  if (found != fits.end()) return found->second;
  if (smem > 48 * 1024)
    check(cudaFuncSetAttribute(
              kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
          "kernel shared memory");
  KernelFit f;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&f.blocks_per_sm, kernel,
                                                      threads, smem),
        "kernel occupancy");
  check(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device),
        "multiprocessor count");
  return fits[key] = f;
}

// Whether a launch of `strips` strips takes at most two rounds of resident
// two-warp blocks: beyond that, the one-warp variant's residency can gain
// more than the overlap (two_warp_forward and two_warp_backward say where).
bool within_two_rounds(std::int64_t strips, KernelFit two) {
  return strips <= 2 * std::int64_t(two.blocks_per_sm) * two.sms;
}

// The two-warp backward overlaps a block's recompute with E's walk through
// the block before, but needs about twice the shared memory, so an SM holds
// about half as many strips (at d = 64, 4 instead of 8). Measured on an H100
// (perf/RESULTS.md, fwd+bwd, each variant forced in one run):
// - series, every shape measured: faster. d ≤ 16 since session 14; d = 64
//   since session 19, when the one-warp kernel's shorter tile products and
//   walks left its residency worth less than the overlap: 32/2048/64 4.51
//   against 4.95 ms and 32/4096/64 18.45 against 20.28 (4 and 8 rounds of
//   resident two-warp strips), 32/1024/64 1.47 against 1.88, 32/512/64 0.61
//   against 0.79 (in session 15 the one-warp kernel was 2–3% faster from
//   four rounds);
// - cost tensors (BM_CostForwardBackward, session 15), whose E side writes
//   each tile's 32 × 32 gradient to memory: 7–11% less time while every
//   strip fits at once (16/128, 32/512, 16/1024), 1% less at 1.6 times
//   (32/1024), 16% more at 3.1 times (32/2048: 5.17 against 4.44 ms).
bool two_warp_backward(const Problem& q, std::int64_t strips, KernelFit two) {
  return !q.cost || within_two_rounds(strips, two);
}

// The two-warp forward forms tile c + 1's costs while block c is walked;
// its ring is twice as large (8.25 KiB more per strip), so an SM holds
// fewer strips (at d = 1, 11 instead of 20). Measured against one warp on
// an H100 (perf/RESULTS.md, session 14), forward: 14–32% faster for series
// with d > 4, whose tiles are tensor-core or 16-wide FMA products, on
// every shape of the grid (up to about 5 rounds of resident strips,
// 32/4096/64; a launch that streams many more, as the all-pairs below, was
// not measured at d > 4); at d = 1, whose tiles are cheap, 8–17% faster
// (16/128/1: within 1%) up to 1.4 times as many strips as fit at once
// (32/2048/1), but 35% slower for the all-pairs 1000 × 1000 series of length
// 128 (4 strips per pair, ~60,000 pairs per launch), which stream through the
// SMs and gain more from residency than from overlap. So d ≤ 4 takes two warps
// while the launch fits in two rounds of resident strips. Cost tensors,
// whose tiles are 32 global row loads, follow the d ≤ 4 rule: up to 2,048
// strips (BM_CostForward, 32/2048, session 15) two warps took 3–13% less
// time; a streaming launch was not measured.
bool two_warp_forward(const Problem& q, std::int64_t strips, KernelFit two) {
  return (!q.cost && q.d > 4) || within_two_rounds(strips, two);
}

// Warps per strip set by set_kernel_warps (0: the library chooses).
std::atomic<int> forced_forward_warps{0}, forced_backward_warps{0};

// Launches the one- or two-warp variant of a kernel: `forced` if it is set,
// else the two-warp one where prefer_two(its fit) says so.
template <class PreferTwo>
void launch_variant(cudaStream_t stream, int device, const Params& P,
                    void (*one)(Params), std::size_t one_smem,
                    void (*two)(Params), std::size_t two_smem, int forced,
                    const PreferTwo& prefer_two, const char* what) {
  unsigned const grid = unsigned(P.problem.pairs * P.strips);
  fit_kernel(one, kLanes, one_smem, device);  // sets up its shared memory
  KernelFit const fit_two = fit_kernel(two, 2 * kLanes, two_smem, device);
  if (forced ? forced == 2 : prefer_two(fit_two))
    two<<<grid, 2 * kLanes, two_smem, stream>>>(P);
  else
    one<<<grid, kLanes, one_smem, stream>>>(P);
  check(cudaGetLastError(), what);
}

template <int kD, bool kVec, bool kSeries, class In>
void launch(cudaStream_t stream, int device, const Params& P, bool backward) {
  std::int64_t const strips = P.problem.pairs * P.strips;
  using Layout = SharedLayout<kD, kSeries>;
  auto forward = [&](auto with_checkpoints) {
    constexpr bool kCheckpoint = decltype(with_checkpoints)::value;
    launch_variant(
        stream, device, P,
        forward_kernel<kD, kVec, kSeries, In, kCheckpoint, 1>,
        Layout::bytes(false, 1),
        forward_kernel<kD, kVec, kSeries, In, kCheckpoint, 2>,
        Layout::bytes(false, 2),
        forced_forward_warps.load(std::memory_order_relaxed),
        [&](KernelFit two) { return two_warp_forward(P.problem, strips, two); },
        "forward kernel launch");
  };
  if (!backward) return forward(std::false_type{});
  forward(std::true_type{});
  launch_variant(
      stream, device, P, backward_kernel<kD, kVec, kSeries, In, 1>,
      Layout::bytes(true, 1), backward_kernel<kD, kVec, kSeries, In, 2>,
      Layout::bytes(true, 2),
      forced_backward_warps.load(std::memory_order_relaxed),
      [&](KernelFit two) { return two_warp_backward(P.problem, strips, two); },
      "backward kernel launch");
}

void run(const Kokkos::Cuda& space, Problem problem, double* values,
         const Outputs& outputs, bool backward) {
  if (problem.pairs == 0) return;
  cudaStream_t const stream = space.cuda_stream();
  int const device = space.cuda_device();
  int const strips = int((problem.n_max + kLanes - 1) / kLanes);
  int const blocks = int((problem.m_max + 2 * (kLanes - 1)) / kLanes);
  // Pairs per launch: the workspace stays under 256 MiB (at least one pair).
  std::size_t const per_pair =
      layout(1, strips, blocks, problem.m_max, backward).total;
  std::int64_t const chunk = std::max<std::int64_t>(
      1, std::min<std::int64_t>(problem.pairs, kChunkBytes / per_pair));
  Layout const l = layout(chunk, strips, blocks, problem.m_max, backward);
  StreamBuffer buffer(space, l.total);

  std::int64_t const all = problem.pairs, first = problem.begin;
  for (std::int64_t done = 0; done < all; done += chunk) {
    Params P;
    P.problem = problem;
    P.problem.begin = first + done;
    P.problem.pairs = std::min(chunk, all - done);
    P.outputs = outputs;
    P.values = values + done;
    P.walk_scale = 1.4426950408889634 / problem.gamma;
    P.gamma_ln2 = problem.gamma * 0.6931471805599453;
    P.strips = strips;
    P.blocks = blocks;
    P.tickets = buffer.at<unsigned long long>(l.tickets);
    P.bottom = buffer.at<double>(l.bottom);
    P.messages = backward ? buffer.at<float>(l.messages) : nullptr;
    P.checkpoints = backward ? buffer.at<double>(l.checkpoints) : nullptr;
    // Tickets start at zero, hand-over rows at all-ones, for every launch.
    check(cudaMemsetAsync(buffer.at<char>(0), 0, l.bottom, stream),
          "workspace reset");
    std::size_t const rows_end = backward ? l.checkpoints : l.total;
    check(cudaMemsetAsync(buffer.at<char>(l.bottom), 0xff, rows_end - l.bottom,
                          stream),
          "workspace reset");
    with_storage(problem.storage, [&](auto in) {
      using In = typename decltype(in)::type;
      if (problem.cost) {
        launch<1, false, false, In>(stream, device, P, backward);
      } else {
        with_features(problem, outputs, [&](auto kd, auto vec) {
          launch<decltype(kd)::value, decltype(vec)::value, true, In>(
              stream, device, P, backward);
        });
      }
    });
  }
}

}  // namespace

namespace {
// The device's default memory pool returns every free block to the driver at
// each synchronisation (release threshold 0), so the next call's allocation
// maps memory anew: ~40 µs per allocation, measured on an H100. Keeping up to
// one chunk's worth of workspace (kChunkBytes) reserved makes it ~1 µs. The
// threshold is only ever raised, never lowered below what others set.
void keep_workspace_reserved(int device) {
  static std::mutex mutex;
  static std::set<int> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (!done.insert(device).second) return;
  cudaMemPool_t pool;
  check(cudaDeviceGetDefaultMemPool(&pool, device), "default memory pool");
  cuuint64_t threshold = 0;
  check(cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                &threshold),
        "memory pool release threshold");
  if (threshold < kChunkBytes) {
    threshold = kChunkBytes;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold,
                                  &threshold),
          "memory pool release threshold");
  }
}
}  // namespace

void* stream_allocate(const Kokkos::Cuda& space, std::size_t bytes) {
  void* pointer = nullptr;
  keep_workspace_reserved(space.cuda_device());
  if (bytes)
    check(cudaMallocAsync(&pointer, bytes, space.cuda_stream()),
          "stream-ordered allocation");
  return pointer;
}

void stream_free(const Kokkos::Cuda& space, void* pointer) {
  if (pointer) cudaFreeAsync(pointer, space.cuda_stream());
}

void set_kernel_warps(int forward, int backward) {
  auto valid = [](int warps) { return warps >= 0 && warps <= 2; };
  if (!valid(forward))
    throw std::invalid_argument(
        "softwave::softdtw::fused: forward warps must be 0, 1 or 2");
  if (!valid(backward))
    throw std::invalid_argument(
        "softwave::softdtw::fused: backward warps must be 0, 1 or 2");
  forced_forward_warps.store(forward, std::memory_order_relaxed);
  forced_backward_warps.store(backward, std::memory_order_relaxed);
}

void forward(const Kokkos::Cuda& space, const Problem& problem,
             double* values) {
  run(space, problem, values, Outputs{}, /*backward=*/false);
}

void forward_backward(const Kokkos::Cuda& space, const Problem& problem,
                      double* values, const Outputs& outputs) {
  run(space, problem, values, outputs, /*backward=*/true);
}

}  // namespace softwave::impl::cuda_fused
