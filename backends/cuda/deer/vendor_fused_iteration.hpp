#pragma once
// The CUDA specialisation of core's FusedIteration (softwave/deer_engine.hpp;
// core/src/deer/deer.cpp includes this file in CUDA builds): one Newton
// iteration of DEER with diagonal Jacobians as one kernel, a single pass
// over the trajectory that reads each step's inputs and old state once and
// writes its new state.
//
// The portable iteration is three passes of a thread per chunk (compose the
// chunk's maps, scan the chunks' maps level by level, replay the chunk),
// each evaluating the cell again and reading a chunk's steps with a stride
// of the chunk across a warp. Here, instead, a chained scan with decoupled
// look-back (Merrill & Garland, 2016):
//  - a block of kThreads threads takes the next tile of kThreads·K
//    consecutive steps of one sequence (tiles are handed out by an atomic
//    ticket in sequence order, so that a block only ever waits for tiles
//    that blocks already running hold); each thread linearises its K
//    steps, keeping each step's diagonal a_t and residual e_t =
//    f(z_{t−1}) − z_t in registers, and composes them into one affine map
//    per state component, δ ↦ A δ + E;
//  - the block scans its threads' maps (warp shuffles, then the warps'
//    totals), and publishes the tile's composed map (flag kAggregate);
//  - its first warp walks back over the preceding tiles' descriptors, 32
//    at a time (a lane each), composing aggregates until it meets a tile
//    whose δ at its last step (its inclusive prefix: the update before a
//    sequence's first step is 0) is published (flag kPrefix), and
//    publishes its own;
//  - every thread replays its K steps from its carried-in δ: z'_t = z_t +
//    δ_t, δ_t = a_t δ_{t−1} + e_t, folding the tolerance ratio into the
//    sequence's error.
// Memory traffic is the inputs and the old trajectory read once and the
// new one written once: the floor of an iteration. The library's cells at
// hidden sizes 1 to 16 (powers of two) run with their shape fixed at
// compile time (with_fixed_shape, core/src/deer/cells.hpp): the generic
// cell's run-time loops and work arrays in local memory cost several
// times the GRU's math. What bounds the n = 1 kernel is latency, not bytes
// (perf/RESULTS.md: 18 % of DRAM bandwidth; warps wait on L1 and, while
// the first warp looks back, at the block's barrier). A thread's K
// consecutive steps make each warp access touch 32 lines, but coalescing
// them (a lane every 32nd step, runs scanned by shuffles) measured no
// faster.
//
// Applies to state sizes n <= kMaxState with a cell workspace of at most
// kMaxWork values; n <= kSmallState takes K = kSmallSteps steps a thread,
// larger n one step a thread. Full Jacobians at n = 2 (an LSTM unit's
// (h, c), DiagonalUnits) take fused_pair_iteration: the same scan over
// affine maps whose A is the 2×2 Jacobian, K = kSmallSteps. PyTorch's GRU
// forward at hidden sizes 2 to 16 with dense hidden weights takes
// fused_gru_unit_iteration: a unit a lane, kUnitSteps steps a group of n
// lanes.

#include <cuda_runtime.h>

#include <Kokkos_Core.hpp>
#include <common/call_memory.hpp>
#include <cstdint>
#include <deer/cells.hpp>
#include <softwave/deer.hpp>
#include <string>
#include <type_traits>

#include "../common/affine_warp_scan.hpp"
#include "../common/check.hpp"

namespace softwave::impl::deer {

namespace cuda_deer {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kSmallState = 1, kSmallSteps = 8, kSmallWork = 32;
constexpr int kMaxState = 16, kMaxWork = 512;
constexpr unsigned kAllLanes = 0xffffffffu;

// A tile descriptor's flag.
enum : int { kEmpty = 0, kAggregate = 1, kPrefix = 2 };

// What the kernel reads besides the iteration's arrays: the tiles'
// descriptors, (B·tiles) each, n values an entry, and the ticket counter.
template <class T>
struct Descriptors {
  int* flags;      // [0] is the ticket counter, then B·tiles flags
  T* aggregate_a;  // the tile's composed map δ ↦ A δ + E
  T* aggregate_e;
  T* prefix;           // δ at the tile's last step
  std::int64_t tiles;  // per sequence
};

template <class T>
__device__ inline T load_volatile(const T* p) {
  return *static_cast<const volatile T*>(p);
}

using cuda_support::compose_over_warp;

// The tile a block takes: sequence b's tile `tile` (tiles are handed out
// by an atomic ticket in sequence order), the sequence's length L.
struct Tile {
  int b = 0, L = 0;
  std::int64_t tile = 0, first = 0;  // first: the tile's first step
};
// False where the block has nothing to do: the sequence has converged, or
// the tile lies past its length. `ticket` is the block's shared word.
template <std::int64_t TileSteps, class Recurrence, class T>
__device__ inline bool take_tile(
    const IterationArrays<Kokkos::Cuda, Recurrence>& it,
    const Descriptors<T>& d, std::int64_t& ticket, Tile& tile) {
  if (threadIdx.x == 0) ticket = atomicAdd(d.flags, 1);
  __syncthreads();
  tile.b = int(ticket / d.tiles);
  tile.tile = ticket % d.tiles;
  if (it.status(tile.b) != active) return false;
  tile.L = it.rec.length(tile.b);
  tile.first = tile.tile * TileSteps;
  return tile.first < tile.L;
}

// The state before step s of sequence b: its initial state at s = 0 (in
// init), else the old trajectory's (zeros on a zero start).
template <class Recurrence, class Slot, class T>
__device__ inline const T* state_before(
    const IterationArrays<Kokkos::Cuda, Recurrence>& it, int b, std::int64_t s,
    const Slot& slot, T* init, const T* zeros) {
  if (s == 0) {
    it.rec.initial(b, init);
    return init;
  }
  return it.zero_start ? zeros : &it.old_z(b, slot(s - 1), 0);
}

// The look-back: tile `seen`'s flag once its block has published it
// (tiles before the sequence count as prefixes of 0).
__device__ inline int published_flag(const int* flags, std::int64_t seen,
                                     bool outside) {
  int flag = outside ? int(kPrefix) : load_volatile(&flags[1 + seen]);
  while (__any_sync(kAllLanes, flag == kEmpty))
    if (flag == kEmpty) flag = load_volatile(&flags[1 + seen]);
  __threadfence();
  return flag;
}

// The tile's look-back, by the block's first warp (each of its lanes calls
// it): lane i < n holds component i's map over the tile, δ ↦ total_a δ +
// total_e. Publishes the tile's aggregate, composes the preceding tiles'
// maps back to the nearest published prefix (tiles before the sequence's
// first count as prefixes of 0), publishes the tile's own prefix (δ at its
// last step) and returns δ before the tile's first step for component
// `lane` (0 for lanes from n on). n <= Width.
//
// A window of 32 tiles is composed one of two ways. Up to Width 2, lane j
// holds tile j's map of one component at a time and the warp scans it by
// shuffles. From Width 3 on that would put n round trips to L2 in series,
// each followed by ten dependent shuffles, on the path every later block
// waits for; instead lane j loads all of its tile's n components at once
// (the loads in flight together), stages them in shared memory, and lane i
// composes component i along the window (the GRU's adjoint a step a thread
// at n = 16, T = 100k, B = 16: 2.62 to 2.44 ms an iteration on an H100).
// The window's 4.3 KB (float, Width 16) count towards a kernel's shared
// memory: see the unit kernel's carveout.
template <int Width, class T>
__device__ inline T look_back(const Descriptors<T>& d, int b, std::int64_t tile,
                              int n, T total_a, T total_e) {
  int const lane = threadIdx.x % 32;
  bool const mine = lane < n;  // lane i carries state component i
  std::int64_t const self = std::int64_t(b) * d.tiles + tile;
  T carry = 0;  // δ before the tile's first step
  if (tile > 0) {
    if (mine) {
      d.aggregate_a[self * n + lane] = total_a;
      d.aggregate_e[self * n + lane] = total_e;
    }
    __threadfence();
    __syncwarp();
    if (lane == 0) atomicExch(&d.flags[1 + self], kAggregate);
    // The look-back, 32 tiles at a time: lane j looks at tile `nearest` −
    // 31 + j. acc maps δ at the end of the window's nearest tile to δ
    // before this tile (for component `lane`).
    std::int64_t const sequence_first = std::int64_t(b) * d.tiles;
    T acc_a = 1, acc_e = 0;
    for (std::int64_t nearest = self - 1;; nearest -= 32) {
      std::int64_t const seen = nearest - 31 + lane;
      bool const outside = seen < sequence_first;
      int const flag = published_flag(d.flags, seen, outside);
      unsigned const prefixes = __ballot_sync(kAllLanes, flag == kPrefix);
      // The window's map: the nearest prefix (δ ↦ prefix, A = 0), then the
      // aggregates after it; lanes before it are the identity.
      int const stop = prefixes ? 31 - __clz(prefixes) : -1;
      // Lane j's tile's map of component i, δ ↦ wa δ + we.
      auto const tile_map = [&](int i, T& wa, T& we) {
        wa = 1;
        we = 0;
        if (lane == stop) {
          wa = 0;
          we = outside ? T(0) : load_volatile(&d.prefix[seen * n + i]);
        } else if (lane > stop) {
          wa = load_volatile(&d.aggregate_a[seen * n + i]);
          we = load_volatile(&d.aggregate_e[seen * n + i]);
        }
      };
      if constexpr (Width <= 2) {
        for (int i = 0; i < n; ++i) {
          T wa, we;
          tile_map(i, wa, we);
          compose_over_warp(wa, we, lane);
          T const window_a = __shfl_sync(kAllLanes, wa, 31);
          T const window_e = __shfl_sync(kAllLanes, we, 31);
          if (lane == i) {
            acc_e = acc_a * window_e + acc_e;
            acc_a *= window_a;
          }
        }
      } else {
        // Rows padded to Width + 1 values: lane j's stores of its row and
        // the lanes' reads of one row's components hit distinct banks.
        __shared__ T window_a[32][Width + 1], window_e[32][Width + 1];
        T wa[Width], we[Width];
#pragma unroll
        for (int i = 0; i < Width; ++i) {
          wa[i] = 1;
          we[i] = 0;
          if (i < n) tile_map(i, wa[i], we[i]);
        }
#pragma unroll
        for (int i = 0; i < Width; ++i) {
          window_a[lane][i] = wa[i];
          window_e[lane][i] = we[i];
        }
        __syncwarp();
        // Nearest tile first: acc ← acc ∘ (tile j's map), back to the
        // prefix (lanes before it are the identity).
        if (mine)
#pragma unroll
          for (int j = 31; j >= 0; --j)
            if (j >= stop) {
              acc_e = acc_a * window_e[j][lane] + acc_e;
              acc_a *= window_a[j][lane];
            }
        __syncwarp();  // the next window overwrites these rows
      }
      if (prefixes) break;
    }
    carry = acc_e;  // acc_a is 0: the window with the prefix
  }
  if (mine) d.prefix[self * n + lane] = total_a * carry + total_e;
  __threadfence();
  __syncwarp();
  if (lane == 0) atomicExch(&d.flags[1 + self], kPrefix);
  return mine ? carry : T(0);
}

// The first warp's part once the block has scanned its maps: the tile's
// map from the warps' totals (warp w's of component i at [w][i]), the
// look-back, and δ before the tile into carried[i], i < n. Every lane of
// the first warp calls it.
template <int Width, class T>
__device__ inline void carry_into_tile(const Descriptors<T>& d, int b,
                                       std::int64_t tile, int n,
                                       const T (&warp_a)[kWarps][Width],
                                       const T (&warp_e)[kWarps][Width],
                                       T* carried) {
  int const lane = threadIdx.x % 32;
  T total_a = 1, total_e = 0;
  if (lane < n)
    for (int w = 0; w < kWarps; ++w) {
      total_e = warp_a[w][lane] * total_e + warp_e[w][lane];
      total_a *= warp_a[w][lane];
    }
  T const carry = look_back<Width>(d, b, tile, n, total_a, total_e);
  if (lane < n) carried[lane] = carry;
}

// The block's largest tolerance ratio into the sequence's error; every
// thread of the block calls it.
template <class T>
__device__ inline void fold_worst(T worst_step, double* warp_worst,
                                  double& error) {
  int const lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double worst = double(worst_step);
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    double const other = __shfl_down_sync(kAllLanes, worst, offset);
    worst = worse(worst, other);
  }
  if (lane == 0) warp_worst[warp] = worst;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) worst = worse(worst, warp_worst[w]);
    Kokkos::atomic_fetch_max(&error, worst);
  }
}

// An affine map of a pair, δ ↦ A δ + E with A 2×2 (row-major a[0..3]).
template <class T>
struct PairMap {
  T a[4], e[2];
  __device__ static PairMap identity() { return {{1, 0, 0, 1}, {0, 0}}; }
  // A constant map: δ ↦ value.
  __device__ static PairMap constant(T v0, T v1) {
    return {{0, 0, 0, 0}, {v0, v1}};
  }
  // This map after `earlier`.
  __device__ PairMap after(const PairMap& m) const {
    return {{a[0] * m.a[0] + a[1] * m.a[2], a[0] * m.a[1] + a[1] * m.a[3],
             a[2] * m.a[0] + a[3] * m.a[2], a[2] * m.a[1] + a[3] * m.a[3]},
            {a[0] * m.e[0] + a[1] * m.e[1] + e[0],
             a[2] * m.e[0] + a[3] * m.e[1] + e[1]}};
  }
  __device__ void apply(T& d0, T& d1) const {
    T const n0 = a[0] * d0 + a[1] * d1 + e[0];
    d1 = a[2] * d0 + a[3] * d1 + e[1];
    d0 = n0;
  }
  __device__ PairMap shuffled_up(int offset) const {
    PairMap m;
#pragma unroll
    for (int i = 0; i < 4; ++i)
      m.a[i] = __shfl_up_sync(kAllLanes, a[i], offset);
#pragma unroll
    for (int i = 0; i < 2; ++i)
      m.e[i] = __shfl_up_sync(kAllLanes, e[i], offset);
    return m;
  }
  __device__ PairMap from_lane(int lane) const {
    PairMap m;
#pragma unroll
    for (int i = 0; i < 4; ++i) m.a[i] = __shfl_sync(kAllLanes, a[i], lane);
#pragma unroll
    for (int i = 0; i < 2; ++i) m.e[i] = __shfl_sync(kAllLanes, e[i], lane);
    return m;
  }
};

// m ← the composition of lanes 0..lane's maps, in lane order.
template <class T>
__device__ inline void compose_over_warp(PairMap<T>& m, int lane) {
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    PairMap<T> const earlier = m.shuffled_up(offset);
    if (lane >= offset) m = m.after(earlier);
  }
}

// fused_iteration for n = 2 with full Jacobians: each step's map is
// δ ↦ J_t δ + e_t, J_t the 2×2 Jacobian. The tile descriptors hold 4
// values of A, 2 of E and 2 of the prefix per tile (FusedIteration sizes
// them). Otherwise as fused_iteration, which the comments there explain.
template <class Recurrence, int K, int MaxWork>
__global__ void __launch_bounds__(kThreads, 4)
    fused_pair_iteration(const IterationArrays<Kokkos::Cuda, Recurrence> it,
                         const Descriptors<typename Recurrence::value_type> d) {
  using T = typename Recurrence::value_type;
  using Map = PairMap<T>;
  __shared__ std::int64_t ticket;
  __shared__ Map warp_total[kWarps];
  __shared__ T carried[2];
  __shared__ double warp_worst[kWarps];

  Tile taken;
  if (!take_tile<std::int64_t(kThreads) * K>(it, d, ticket, taken)) return;
  int const b = taken.b, L = taken.L;
  std::int64_t const tile = taken.tile, tile_first = taken.first;
  Recurrence const& rec = it.rec;
  int const lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  std::int64_t const first = tile_first + std::int64_t(threadIdx.x) * K;
  auto const slot = [&](std::int64_t s) {
    return int(it.reversed ? L - 1 - s : s);
  };
  auto const old = [&](int t, int i) {
    return it.zero_start ? T(0) : it.old_z(b, t, i);
  };

  Map step_map[K];
  Map thread_map = Map::identity();
  T f[2], J[4], init[2], zeros[2] = {0, 0}, work[MaxWork];
#pragma unroll
  for (int k = 0; k < K; ++k) {
    std::int64_t const s = first + k;
    if (s >= L) break;
    int const t = slot(s);
    T const* z_prev = state_before(it, b, s, slot, init, zeros);
    rec.step(b, t, z_prev, f, J, Linearise::full, work);
    step_map[k] = {{J[0], J[1], J[2], J[3]},
                   {f[0] - old(t, 0), f[1] - old(t, 1)}};
    thread_map = step_map[k].after(thread_map);
  }

  // The block's scan: each lane's inclusive map over its warp, the map
  // before it, each warp's total.
  Map inclusive = thread_map;
  compose_over_warp(inclusive, lane);
  if (lane == 31) warp_total[warp] = inclusive;
  Map const shifted = inclusive.shuffled_up(1);
  Map const before_lane = lane == 0 ? Map::identity() : shifted;
  __syncthreads();

  if (warp == 0) {
    Map total = Map::identity();
    for (int w = 0; w < kWarps; ++w) total = warp_total[w].after(total);
    std::int64_t const self = std::int64_t(b) * d.tiles + tile;
    T carry0 = 0, carry1 = 0;
    if (tile > 0) {
      if (lane < 4) d.aggregate_a[self * 4 + lane] = total.a[lane];
      if (lane < 2) d.aggregate_e[self * 2 + lane] = total.e[lane];
      __threadfence();
      __syncwarp();
      if (lane == 0) atomicExch(&d.flags[1 + self], kAggregate);
      std::int64_t const sequence_first = std::int64_t(b) * d.tiles;
      Map acc = Map::identity();  // δ at the window's nearest tile's end
                                  // to δ before this tile
      for (std::int64_t nearest = self - 1;; nearest -= 32) {
        std::int64_t const seen = nearest - 31 + lane;
        bool const outside = seen < sequence_first;
        int const flag = published_flag(d.flags, seen, outside);
        unsigned const prefixes = __ballot_sync(kAllLanes, flag == kPrefix);
        int const stop = prefixes ? 31 - __clz(prefixes) : -1;
        Map m = Map::identity();
        if (lane == stop) {
          m = outside ? Map::constant(0, 0)
                      : Map::constant(load_volatile(&d.prefix[seen * 2]),
                                      load_volatile(&d.prefix[seen * 2 + 1]));
        } else if (lane > stop) {
#pragma unroll
          for (int i = 0; i < 4; ++i)
            m.a[i] = load_volatile(&d.aggregate_a[seen * 4 + i]);
#pragma unroll
          for (int i = 0; i < 2; ++i)
            m.e[i] = load_volatile(&d.aggregate_e[seen * 2 + i]);
        }
        compose_over_warp(m, lane);
        acc = acc.after(m.from_lane(31));
        if (prefixes) break;
      }
      carry0 = acc.e[0];  // acc.a is 0: the window with the prefix
      carry1 = acc.e[1];
    }
    T p0 = carry0, p1 = carry1;
    total.apply(p0, p1);
    if (lane == 0) {
      d.prefix[self * 2] = p0;
      d.prefix[self * 2 + 1] = p1;
    }
    __threadfence();
    __syncwarp();
    if (lane == 0) {
      atomicExch(&d.flags[1 + self], kPrefix);
      carried[0] = carry0;
      carried[1] = carry1;
    }
  }
  __syncthreads();

  // Replay this thread's steps from the δ carried into it.
  T d0 = carried[0], d1 = carried[1];
  for (int w = 0; w < warp; ++w) warp_total[w].apply(d0, d1);
  before_lane.apply(d0, d1);
  T worst_step = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    std::int64_t const s = first + k;
    if (s >= L) break;
    int const t = slot(s);
    step_map[k].apply(d0, d1);
    T const y0 = old(t, 0) + d0, y1 = old(t, 1) + d1;
    it.new_z(b, t, 0) = y0;
    it.new_z(b, t, 1) = y1;
    worst_step = worse(worst_step, tolerance_ratio(d0, y0, it.atol, it.rtol));
    worst_step = worse(worst_step, tolerance_ratio(d1, y1, it.atol, it.rtol));
  }
  fold_worst(worst_step, warp_worst, it.error(b));
}

// The first iteration's own start (IterationArrays::start_warm_up), for
// fused_iteration: start[k] ← the state z0 at this thread's step k, its
// steps evaluated one after another from the state before them, which the
// thread reaches from zeros warm_up steps earlier (from the initial state
// where that reaches step 0). The tile's first thread, whose predecessor
// runs in another block, reaches back warm_up + K steps: to the state that
// predecessor ends on. Then each step's linearisation (a, e): step k > 0
// at z0 of step k − 1, whose residual f − z0 is 0; the first step at the
// predecessor's last state (shuffled within the warp, through shared
// memory across warps), its residual the gap between the two threads'
// states. Every thread of the block calls it (it shuffles and syncs).
template <int K, int MaxState, class Recurrence, class Slot, class T>
__device__ inline void start_locally(
    const IterationArrays<Kokkos::Cuda, Recurrence>& it, int b, int L,
    std::int64_t first, const Slot& slot, T (&warp_last)[kWarps][MaxState],
    T (&start)[K][MaxState], T (&a)[K][MaxState], T (&e)[K][MaxState],
    T* work) {
  Recurrence const& rec = it.rec;
  int const n = rec.state_size();
  int const lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  bool const runs = first < L;
  T state[MaxState], next[MaxState], f[MaxState], J[MaxState];
  if (runs) {
    std::int64_t s = first - it.start_warm_up - (threadIdx.x == 0 ? K : 0);
    if (s <= 0) {
      s = 0;
      rec.initial(b, state);
    } else {
#pragma unroll
      for (int i = 0; i < MaxState; ++i) state[i] = 0;
    }
    // The warm-up, two steps at a time so that both states stay in
    // registers; its last state back in `state`.
    for (; s + 1 < first; s += 2) {
      rec.step(b, slot(s), state, next, static_cast<T*>(nullptr),
               Linearise::none, work);
      rec.step(b, slot(s + 1), next, state, static_cast<T*>(nullptr),
               Linearise::none, work);
    }
    if (s < first) {
      rec.step(b, slot(s), state, next, static_cast<T*>(nullptr),
               Linearise::none, work);
#pragma unroll
      for (int i = 0; i < MaxState; ++i) state[i] = next[i];
    }
    rec.step(b, slot(first), state, start[0], static_cast<T*>(nullptr),
             Linearise::none, work);
#pragma unroll
    for (int k = 1; k < K; ++k) {
      std::int64_t const s = first + k;
      if (s >= L) break;
      rec.step(b, slot(s), start[k - 1], start[k], J, Linearise::diagonal,
               work);
#pragma unroll
      for (int i = 0; i < MaxState; ++i) {
        if (i >= n) break;
        a[k][i] = J[i];
        e[k][i] = 0;
      }
    }
  }
  // The predecessor's last state. (A thread with fewer than K steps has no
  // successor that runs: what it shuffles on is not read.)
  T previous[MaxState];
#pragma unroll
  for (int i = 0; i < MaxState; ++i) {
    if (i >= n) break;
    previous[i] = __shfl_up_sync(kAllLanes, start[K - 1][i], 1);
    if (lane == 31) warp_last[warp][i] = start[K - 1][i];
  }
  __syncthreads();
  if (lane == 0)
#pragma unroll
    for (int i = 0; i < MaxState; ++i) {
      if (i >= n) break;
      previous[i] = warp > 0 ? warp_last[warp - 1][i] : state[i];
    }
  if (runs) {
    rec.step(b, slot(first), previous, f, J, Linearise::diagonal, work);
#pragma unroll
    for (int i = 0; i < MaxState; ++i) {
      if (i >= n) break;
      a[0][i] = J[i];
      e[0][i] = f[i] - start[0][i];
    }
  }
}

// Whether fused_iteration takes IterationArrays::start_warm_up for
// Recurrence: the forward recurrences. (The adjoint, linear, is not given
// a start; leaving start_locally out of its kernels keeps their code and
// compile time as they were.)
template <class Recurrence>
struct StartsLocally : std::false_type {};
template <class Cell>
struct StartsLocally<Forward<Kokkos::Cuda, Cell>> : std::true_type {};

template <class Recurrence, int K, int MaxState, int MaxWork, int MinBlocks>
__global__ void __launch_bounds__(kThreads, MinBlocks)
    fused_iteration(const IterationArrays<Kokkos::Cuda, Recurrence> it,
                    const Descriptors<typename Recurrence::value_type> d) {
  using T = typename Recurrence::value_type;
  __shared__ std::int64_t ticket;
  __shared__ T warp_a[kWarps][MaxState], warp_e[kWarps][MaxState];
  __shared__ T carried[MaxState];
  __shared__ double warp_worst[kWarps];
  __shared__ T warp_last[kWarps][MaxState];  // start_locally's exchange

  Tile taken;
  if (!take_tile<std::int64_t(kThreads) * K>(it, d, ticket, taken)) return;
  int const b = taken.b, L = taken.L;
  std::int64_t const tile = taken.tile, tile_first = taken.first;
  Recurrence const& rec = it.rec;
  int const n = rec.state_size();
  int const lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  std::int64_t const first = tile_first + std::int64_t(threadIdx.x) * K;
  auto const slot = [&](std::int64_t s) {
    return int(it.reversed ? L - 1 - s : s);
  };

  // Linearise this thread's steps (around the old trajectory, or the
  // start this iteration evaluates) and compose them.
  T a[K][MaxState], e[K][MaxState], A[MaxState], E[MaxState];
  T start[K][MaxState] = {};  // the local start's states: the updates' base
  T f[MaxState], J[MaxState], init[MaxState], zeros[MaxState], work[MaxWork];
  bool const local = StartsLocally<Recurrence>::value && it.start_warm_up > 0;
  auto const old = [&](int k, int t, int i) {
    return local ? start[k][i] : it.zero_start ? T(0) : it.old_z(b, t, i);
  };
#pragma unroll
  for (int i = 0; i < MaxState; ++i) {
    A[i] = 1;
    E[i] = 0;
    zeros[i] = 0;
  }
  if constexpr (StartsLocally<Recurrence>::value)
    if (local)
      start_locally(it, b, L, first, slot, warp_last, start, a, e, work);
#pragma unroll
  for (int k = 0; k < K; ++k) {
    std::int64_t const s = first + k;
    if (s >= L) break;
    if (!local) {
      int const t = slot(s);
      T const* z_prev = state_before(it, b, s, slot, init, zeros);
      rec.step(b, t, z_prev, f, J, Linearise::diagonal, work);
#pragma unroll
      for (int i = 0; i < MaxState; ++i) {
        if (i >= n) break;
        a[k][i] = J[i];
        e[k][i] = f[i] - old(k, t, i);
      }
    }
#pragma unroll
    for (int i = 0; i < MaxState; ++i) {
      if (i >= n) break;
      E[i] = a[k][i] * E[i] + e[k][i];
      A[i] *= a[k][i];
    }
  }

  // Scan the block's maps: each lane's inclusive map over its warp, the
  // map before it (exclusive), and each warp's total.
  T lane_a[MaxState], lane_e[MaxState];
#pragma unroll
  for (int i = 0; i < MaxState; ++i) {
    if (i >= n) break;
    T ai = A[i], ei = E[i];
    compose_over_warp(ai, ei, lane);
    if (lane == 31) {
      warp_a[warp][i] = ai;
      warp_e[warp][i] = ei;
    }
    T const ax = __shfl_up_sync(kAllLanes, ai, 1);
    T const ex = __shfl_up_sync(kAllLanes, ei, 1);
    lane_a[i] = lane == 0 ? T(1) : ax;
    lane_e[i] = lane == 0 ? T(0) : ex;
  }
  __syncthreads();

  // The first warp: the tile's map, the look-back, the tile's prefix.
  if (warp == 0) carry_into_tile(d, b, tile, n, warp_a, warp_e, carried);
  __syncthreads();

  // Replay this thread's steps from the δ carried into it.
  T delta[MaxState];
#pragma unroll
  for (int i = 0; i < MaxState; ++i) {
    if (i >= n) break;
    T v = carried[i];
    for (int w = 0; w < warp; ++w) v = warp_a[w][i] * v + warp_e[w][i];
    delta[i] = lane_a[i] * v + lane_e[i];
  }
  // The tolerance ratio in T: a double division a step would cost more
  // than the cell.
  T worst_step = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    std::int64_t const s = first + k;
    if (s >= L) break;
    int const t = slot(s);
#pragma unroll
    for (int i = 0; i < MaxState; ++i) {
      if (i >= n) break;
      delta[i] = a[k][i] * delta[i] + e[k][i];
      T const y = old(k, t, i) + delta[i];
      it.new_z(b, t, i) = y;
      worst_step =
          worse(worst_step, tolerance_ratio(delta[i], y, it.atol, it.rtol));
    }
  }
  fold_worst(worst_step, warp_worst, it.error(b));
}

// Unit u of PyTorch's GRU at hidden size H, a lane's: its rows of W_hh
// (gates r, z, n) and of b_hh, and their diagonal entries, in registers.
template <class T, int H>
struct GruUnitRows {
  T r[H], z[H], n[H];
  T b_r, b_z, b_n;  // b_hh
  T d_r, d_z, d_n;  // W_hh's entries (u, u)
  template <class Weights>
  __device__ GruUnitRows(const Weights& w, int u) {
#pragma unroll
    for (int j = 0; j < H; ++j) {
      r[j] = w.at(u, j);
      z[j] = w.at(H + u, j);
      n[j] = w.at(2 * H + u, j);
    }
    b_r = w.bias(w.first_row + u);
    b_z = w.bias(w.first_row + H + u);
    b_n = w.bias(w.first_row + 2 * H + u);
    d_r = w.at(u, u);
    d_z = w.at(H + u, u);
    d_n = w.at(2 * H + u, u);
  }
  // Unit u's rows of W_hh h + b_hh, each summed in HiddenWeights'
  // dense_row order (the same rounding as the cell's own step).
  __device__ void project(const T (&h)[H], T& hp_r, T& hp_z, T& hp_n) const {
    hp_r = b_r;
    hp_z = b_z;
    hp_n = b_n;
#pragma unroll
    for (int j = 0; j < H; ++j) {
      hp_r += r[j] * h[j];
      hp_z += z[j] * h[j];
      hp_n += n[j] * h[j];
    }
  }
};

// The end of a unit-a-lane iteration (fused_gru_unit_iteration), once
// each lane has linearised its unit u at its K steps from
// `first` (a[k], e[k]; steps from L on are left out): each lane's map over
// its steps, the scan over the tile's groups unit by unit (groups H lanes
// apart within a warp, then the warps' totals), fused_iteration's
// look-back with a component a unit, and the replay, each new state
// written as base(k, t) + δ. Every thread of the block calls it.
template <int H, int K, class Recurrence, class T, class Base>
__device__ inline void replay_units(
    const IterationArrays<Kokkos::Cuda, Recurrence>& it,
    const Descriptors<T>& d, const Tile& taken, std::int64_t first,
    const T (&a)[K], const T (&e)[K], const Base& base) {
  __shared__ T warp_a[kWarps][H], warp_e[kWarps][H];
  __shared__ T carried[H];
  __shared__ double warp_worst[kWarps];
  int const lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int const u = threadIdx.x % H, b = taken.b, L = taken.L;
  T lane_a = 1, lane_e = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    if (first + k >= L) break;
    lane_e = a[k] * lane_e + e[k];
    lane_a *= a[k];
  }
#pragma unroll
  for (int offset = H; offset < 32; offset *= 2) {
    T const earlier_a = __shfl_up_sync(kAllLanes, lane_a, offset);
    T const earlier_e = __shfl_up_sync(kAllLanes, lane_e, offset);
    if (lane >= offset) {
      lane_e = lane_a * earlier_e + lane_e;
      lane_a *= earlier_a;
    }
  }
  if (lane >= 32 - H) {
    warp_a[warp][u] = lane_a;
    warp_e[warp][u] = lane_e;
  }
  T const shifted_a = __shfl_up_sync(kAllLanes, lane_a, H);
  T const shifted_e = __shfl_up_sync(kAllLanes, lane_e, H);
  T const before_a = lane < H ? T(1) : shifted_a;
  T const before_e = lane < H ? T(0) : shifted_e;
  __syncthreads();

  // The first warp: the tile's map, the look-back, the tile's prefix.
  if (warp == 0) carry_into_tile(d, b, taken.tile, H, warp_a, warp_e, carried);
  __syncthreads();

  // Replay this lane's steps from the δ carried into them.
  T delta = carried[u];
  for (int w = 0; w < warp; ++w) delta = warp_a[w][u] * delta + warp_e[w][u];
  delta = before_a * delta + before_e;
  T worst_step = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    std::int64_t const s = first + k;
    if (s >= L) break;
    int const t = int(it.reversed ? L - 1 - s : s);
    delta = a[k] * delta + e[k];
    T const y = base(k, t) + delta;
    it.new_z(b, t, u) = y;
    worst_step = worse(worst_step, tolerance_ratio(delta, y, it.atol, it.rtol));
  }
  fold_worst(worst_step, warp_worst, it.error(b));
}

// fused_iteration for PyTorch's GRU at hidden size H (2 to 16) with dense
// hidden weights and diagonal Jacobians, a unit a lane. fused_iteration
// gives such a step a thread (from n = 2): the step's whole product W_hh h
// (3H² multiply-adds, each reading W_hh from memory) on one thread, in 255
// registers at n = 16 (one block an SM), and its local start runs each
// step's warm-up alone (17 cell evaluations a step at n = 16). Here a group
// of H consecutive lanes takes K consecutive steps, lane u unit u of each:
//  - the lane keeps its unit's rows of W_hh and b_hh in registers
//    (GruUnitRows) and reads a step's previous state whole (the same
//    addresses across its group);
//  - the local start runs the group's K steps as one chain from zeros
//    start_warm_up steps before them (the warp holding the tile's first
//    group K steps more: to the state the preceding tile's last group ends
//    on), the group's lanes exchanging each step's state by shuffles,
//    each step's inputs read from the block's copy of the tile's (staged
//    once, its loads in flight together);
//  - replay_units scans, looks back and replays.
// A tile is (kThreads / H)·K steps. The cell's own functions give the
// gates, the state and the Jacobian's entry (GruCell).
template <class Recurrence, int H, int K, int MinBlocks>
__global__ void __launch_bounds__(kThreads, MinBlocks) fused_gru_unit_iteration(
    const IterationArrays<Kokkos::Cuda, Recurrence> it,
    const Descriptors<typename Recurrence::value_type> d) {
  using T = typename Recurrence::value_type;
  using Gru = GruCell<T, Kokkos::Cuda, H>;
  constexpr int kGroups = kThreads / H;
  __shared__ std::int64_t ticket;
  __shared__ T before_group[kGroups][H];  // the local start's state before
                                          // each group's first step

  Tile taken;
  if (!take_tile<std::int64_t(kGroups) * K>(it, d, ticket, taken)) return;
  int const b = taken.b, L = taken.L;
  Recurrence const& rec = it.rec;
  Gru const cell{rec.cell.w};
  int const warp = threadIdx.x / 32;
  int const u = threadIdx.x % H, group = threadIdx.x / H;
  std::int64_t const first = taken.first + std::int64_t(group) * K;
  auto const slot = [&](std::int64_t s) {
    return int(it.reversed ? L - 1 - s : s);
  };
  GruUnitRows<T, H> const rows(cell.w, u);
  // The tile's input-side pre-activations (rec.x: W_ih x + b_ih, 3H a
  // step), from kStagedBack steps before it (the local start's reach at
  // the default warm-up) to its end, staged in shared memory by the whole
  // block with its loads in flight together: a chain's step waits on its
  // inputs, and from memory each would cost a round trip that nothing else
  // in the chain hides. In float only (double's would pass the 48 KB of
  // static shared memory at H = 16). A step's row is padded so that the
  // groups of a warp, K steps apart, read other banks (K·stride ≡ H mod 32
  // at H = 8, 16).
  constexpr bool kStaged = sizeof(T) == 4;
  constexpr int kStagedBack = 24, kStagedSteps = kStagedBack + kGroups * K;
  constexpr int kStride = 3 * H + (H >= 16 ? 2 : 1);
  __shared__ T staged[kStaged ? kStagedSteps * kStride : 1];
  std::int64_t const staged_first = taken.first - kStagedBack;
  if constexpr (kStaged) {
    for (int i = threadIdx.x; i < kStagedSteps * 3 * H; i += kThreads) {
      int const step = i / (3 * H), c = i % (3 * H);
      std::int64_t const s = staged_first + step;
      staged[step * kStride + c] =
          s >= 0 && s < L ? rec.x(b, slot(s), c) : T(0);
    }
    __syncthreads();
  }
  // Unit u's rows of step s's pre-activations; zeros outside the sequence.
  // Steps before the staged ones (a longer warm-up) and double's come from
  // memory: a chain loads the next step's while it evaluates this one. The
  // two branches keep their reads apart so that each is a load of its own
  // space (shared, global): one pointer chosen between them would make
  // every read on the chain's path a generic load.
  struct Inputs {
    T r = 0, z = 0, n = 0;
  };
  auto const inputs_at = [&](std::int64_t s) {
    Inputs in;
    std::int64_t const i = s - staged_first;
    if (kStaged && i >= 0 && i < kStagedSteps) {
      T const* p = &staged[i * kStride];
      in = {p[u], p[H + u], p[2 * H + u]};
    } else if (s >= 0 && s < L) {
      T const* p = &rec.x(b, slot(s), 0);
      in = {p[u], p[H + u], p[2 * H + u]};
    }
    return in;
  };
  // Unit u's state after the step of inputs `in` from the state h (h_u: its
  // own unit's value), and where asked its diagonal Jacobian entry.
  auto const step = [&](const Inputs& in, const T(&h)[H], T h_u, T* jacobian) {
    T hp_r, hp_z, hp_n;
    rows.project(h, hp_r, hp_z, hp_n);
    typename Gru::Gates const g =
        Gru::gates_from(in.r, in.z, in.n, hp_r, hp_z, hp_n);
    if (jacobian)
      *jacobian = Gru::entry_of(Gru::row_of(g, hp_n, h_u), rows.d_r, rows.d_z,
                                rows.d_n, true);
    return Gru::next(g, h_u);
  };
  bool const has_initial = rec.y0.extent(0) > 0;
  auto const initial = [&](int j) { return has_initial ? rec.y0(b, j) : T(0); };

  T a[K], e[K];
  T start[K] = {};  // the local start's states: the updates' base
  bool const local = it.start_warm_up > 0;
  if (local) {
    // The chain: from zeros `back` steps before the group's first step
    // (from the initial state where that reaches step 0), the same count
    // across a warp so that its lanes shuffle together.
    int const back = it.start_warm_up + (warp == 0 ? K : 0);
    std::int64_t const from = first - back;
    T state = from <= 0 ? initial(u) : T(0);
    T h[H];
    Inputs next = inputs_at(from);
    for (int r = 0; r < back; ++r) {
      std::int64_t const s = from + r;
      Inputs const in = next;
      next = inputs_at(s + 1);
#pragma unroll
      for (int j = 0; j < H; ++j) h[j] = __shfl_sync(kAllLanes, state, j, H);
      if (s >= 0 && s < L) state = step(in, h, state, nullptr);
    }
    if (group == 0) before_group[0][u] = state;
    // The group's steps: z0 and, from its second step on, the
    // linearisation at the previous step's z0 (residual 0).
    Inputs const first_inputs = next;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      std::int64_t const s = first + k;
      Inputs const in = next;
      if (k + 1 < K) next = inputs_at(s + 1);
#pragma unroll
      for (int j = 0; j < H; ++j) h[j] = __shfl_sync(kAllLanes, state, j, H);
      if (s < L) {
        if (k == 0) {
          state = step(in, h, state, nullptr);
        } else {
          state = step(in, h, state, &a[k]);
          e[k] = 0;
        }
      }
      start[k] = state;
    }
    if (group + 1 < kGroups) before_group[group + 1][u] = start[K - 1];
    __syncthreads();
    // The first step's linearisation at the state its predecessor (the
    // previous group, or the preceding tile's last) ends on.
    if (first < L) {
#pragma unroll
      for (int j = 0; j < H; ++j) h[j] = before_group[group][j];
      T const f = step(first_inputs, h, before_group[group][u], &a[0]);
      e[0] = f - start[0];
    }
  } else {
    // The linearisation at the old trajectory (zeros on a zero start).
#pragma unroll
    for (int k = 0; k < K; ++k) {
      std::int64_t const s = first + k;
      if (s >= L) break;
      T h[H], h_u;
      if (s == 0) {
#pragma unroll
        for (int j = 0; j < H; ++j) h[j] = initial(j);
        h_u = initial(u);
      } else if (it.zero_start) {
#pragma unroll
        for (int j = 0; j < H; ++j) h[j] = 0;
        h_u = 0;
      } else {
        int const previous = slot(s - 1);
#pragma unroll
        for (int j = 0; j < H; ++j) h[j] = it.old_z(b, previous, j);
        h_u = it.old_z(b, previous, u);
      }
      int const t = slot(s);
      T const f = step(inputs_at(s), h, h_u, &a[k]);
      e[k] = f - (it.zero_start ? T(0) : it.old_z(b, t, u));
    }
  }
  replay_units<H, K>(it, d, taken, first, a, e, [&](int k, int t) {
    return local ? start[k] : it.zero_start ? T(0) : it.old_z(b, t, u);
  });
}

// The recurrence `r` with its cell replaced by `cell` (the same inputs).
template <class Cell, class Other>
Forward<Kokkos::Cuda, Other> with_cell(const Forward<Kokkos::Cuda, Cell>& r,
                                       const Other& cell) {
  return {cell, r.x, r.y0, r.lengths, r.block};
}
template <class Cell, class Other>
Adjoint<Kokkos::Cuda, Other> with_cell(const Adjoint<Kokkos::Cuda, Cell>& r,
                                       const Other& cell) {
  return {cell, r.x, r.y, r.grad_y, r.lengths, r.block};
}

// Whether Recurrence runs the library's cells chosen at run time (a
// TorchCell, core/src/deer/cells.hpp), which with_fixed_shape can fix.
template <class Recurrence>
struct TakesFixedShapes : std::false_type {};
template <class T>
struct TakesFixedShapes<Forward<Kokkos::Cuda, TorchCell<T, Kokkos::Cuda>>>
    : std::true_type {};
template <class T>
struct TakesFixedShapes<Adjoint<Kokkos::Cuda, TorchCell<T, Kokkos::Cuda>>>
    : std::true_type {};

// Whether Recurrence runs the units of the library's cells with diagonal
// hidden weights, their cell chosen at run time (DiagonalUnits), which
// with_fixed_kind can fix.
template <class Recurrence>
struct TakesFixedKinds : std::false_type {};
template <class T>
struct TakesFixedKinds<Forward<Kokkos::Cuda, DiagonalUnits<T, Kokkos::Cuda>>>
    : std::true_type {};
template <class T>
struct TakesFixedKinds<Adjoint<Kokkos::Cuda, DiagonalUnits<T, Kokkos::Cuda>>>
    : std::true_type {};

// Whether fused_gru_unit_iteration takes rec's iterations: PyTorch's GRU
// forward at hidden size 2, 4, 8 or 16 with dense hidden weights and
// diagonal Jacobians (`full` false). kUnitSteps: a lane's steps. (Its
// adjoint a unit a lane, the gate gradients shared by shuffles and W_hh's
// columns read from the block's copy, took 3.4 ms an iteration at n = 16,
// T = 100k on an H100 against 2.6 ms a step a thread: perf/RESULTS.md.)
constexpr int kUnitSteps = 8;
constexpr bool unit_hidden_size(int H) {
  return H == 2 || H == 4 || H == 8 || H == 16;
}
template <class Recurrence>
bool takes_gru_units(const Recurrence& rec, bool full) {
  if constexpr (TakesFixedShapes<Recurrence>::value &&
                StartsLocally<Recurrence>::value) {
    int const H = rec.cell.w.size();
    return !full && rec.cell.kind == RnnCell::gru && !rec.cell.w.diagonal &&
           unit_hidden_size(H);
  } else {
    return false;
  }
}

}  // namespace cuda_deer

template <class Recurrence>
struct FusedIteration<Kokkos::Cuda, Recurrence> {
  using T = typename Recurrence::value_type;

  static std::string unavailable(const Recurrence& rec, bool full) {
    int const n = rec.state_size();
    if (full && n > 2)
      return "the fused Newton iteration takes diagonal Jacobians (full "
             "ones only at n <= 2), got full ones at n = " +
             std::to_string(n);
    if (n > cuda_deer::kMaxState)
      return "the fused Newton iteration takes state sizes up to " +
             std::to_string(cuda_deer::kMaxState) + ", got " +
             std::to_string(n);
    int const limit = n <= cuda_deer::kSmallState || (full && n == 2)
                          ? cuda_deer::kSmallWork
                          : cuda_deer::kMaxWork;
    if (rec.work_size() > limit)
      return "the fused Newton iteration takes cells with workspaces up to " +
             std::to_string(limit) + " values at n = " + std::to_string(n) +
             ", got " + std::to_string(rec.work_size());
    return "";
  }

  FusedIteration(const Kokkos::Cuda& space, const Recurrence& rec,
                 std::int64_t batch, std::int64_t length, bool full)
      : n_(rec.state_size()),
        pair_(full && rec.state_size() == 2),
        units_(cuda_deer::takes_gru_units(rec, full)) {
    steps_ = n_ <= cuda_deer::kSmallState || pair_ ? cuda_deer::kSmallSteps : 1;
    // The kernel's loads of a thread's consecutive steps and the cell's
    // per-thread arrays live in L1: all of it for L1, none for shared
    // memory beyond the kernel's few hundred bytes (the driver's choice
    // left L1 a tenth of the SM's memory, and the loads went to L2).
    SOFTWAVE_CUDA_CHECK(cudaFuncSetAttribute(
        small_kernel(), cudaFuncAttributePreferredSharedMemoryCarveout,
        int(cudaSharedmemCarveoutMaxL1)));
    SOFTWAVE_CUDA_CHECK(cudaFuncSetAttribute(
        large_kernel(), cudaFuncAttributePreferredSharedMemoryCarveout,
        int(cudaSharedmemCarveoutMaxL1)));
    SOFTWAVE_CUDA_CHECK(cudaFuncSetAttribute(
        pair_kernel(), cudaFuncAttributePreferredSharedMemoryCarveout,
        int(cudaSharedmemCarveoutMaxL1)));
    // fused_gru_unit_iteration: kUnitSteps steps a group of n lanes.
    std::int64_t const tile =
        units_ ? std::int64_t(cuda_deer::kThreads / n_) * cuda_deer::kUnitSteps
               : std::int64_t(cuda_deer::kThreads) * steps_;
    tiles_ = (length + tile - 1) / tile;
    std::int64_t const entries = batch * tiles_;
    flags_ = call_array<Kokkos::View<int*, Kokkos::CudaSpace>>(
        space, "softwave::deer::tile_flags", false, 1 + entries);
    // A tile's A (n values, or the pair's 2×2), E and prefix (n each).
    values_ = call_array<Kokkos::View<T*, Kokkos::CudaSpace>>(
        space, "softwave::deer::tile_maps", false,
        entries * (map_values() + 2 * n_));
  }

  int map_values() const { return pair_ ? n_ * n_ : n_; }

  // fused_iteration evaluates its first iteration's start (start_locally)
  // for the forward recurrences; fused_pair_iteration does not.
  bool starts_locally() const {
    return !pair_ && cuda_deer::StartsLocally<Recurrence>::value;
  }

  // Unset DeerOptions::start_warm_up: 32 steps where a thread takes
  // kSmallSteps steps (8 steps share one warm-up), 16 where it takes one
  // (each pays its own: GRU, B = 16, H200, diagonal Jacobians at n = 16,
  // T = 100k took 23.3 ms with 32, 17.3 with 16, 18.2 from zeros; at
  // n = 4, 2.28, 2.54 and 2.68 ms; perf/RESULTS.md, best of two rounds). Zeros
  // where the kernel cannot start itself: before the pair kernel, LocalStart's
  // pass (a thread per chunk of tens of steps) saved time on ParaRNN's LSTM at
  // n = 1, T = 1M (4.0 -> 3.5 ms) and lost it at n = 16, T = 100k
  // (8.3 -> 10.2 ms).
  int default_start_warm_up() const {
    return !starts_locally() ? 0 : steps_ > 1 ? 32 : 16;
  }

  void run(const Kokkos::Cuda& space,
           const IterationArrays<Kokkos::Cuda, Recurrence>& it) const {
    std::int64_t const entries = flags_.view.extent(0);
    cudaStream_t const stream = space.cuda_stream();
    SOFTWAVE_CUDA_CHECK(
        cudaMemsetAsync(flags_.view.data(), 0, entries * sizeof(int), stream));
    T* const values = values_.view.data();
    std::int64_t const tiles = entries - 1;
    T* const aggregate_e = values + tiles * map_values();
    cuda_deer::Descriptors<T> const d{flags_.view.data(), values, aggregate_e,
                                      aggregate_e + tiles * n_, tiles_};
    unsigned const blocks = unsigned(entries - 1);
    if constexpr (cuda_deer::TakesFixedShapes<Recurrence>::value) {
      // The library's cells at the common small sizes: the same kernel
      // with the cell's shape fixed at compile time.
      bool const launched = with_fixed_shape(it.rec.cell, [&](const auto& c) {
        return launch_fixed(c, it, d, blocks, stream, pair_, units_);
      });
      if (launched) return;
    }
    if constexpr (cuda_deer::TakesFixedKinds<Recurrence>::value) {
      // Units of state 1 or 2 with their cell fixed: the kernels of the
      // library's cells at hidden size 1.
      bool const launched = with_fixed_kind(it.rec.cell, [&](const auto& c) {
        return launch_fixed(c, it, d, blocks, stream, pair_, false);
      });
      if (launched) return;
    }
    auto const kernel =
        pair_ ? pair_kernel() : (steps_ > 1 ? small_kernel() : large_kernel());
    kernel<<<blocks, cuda_deer::kThreads, 0, stream>>>(it, d);
    SOFTWAVE_CUDA_CHECK(cudaGetLastError());
  }

  // One iteration by the kernel instantiated for `cell`, a TorchCell of
  // fixed shape or DiagonalUnits of a fixed cell (fused_gru_unit_iteration
  // where `units`); false (nothing launched) where the kernel cannot take
  // it.
  template <class Cell>
  static bool launch_fixed(const Cell& cell,
                           const IterationArrays<Kokkos::Cuda, Recurrence>& it,
                           const cuda_deer::Descriptors<T>& d, unsigned blocks,
                           cudaStream_t stream, bool pair, bool units) {
    constexpr int n = Cell::kFixedState;
    if constexpr (n > cuda_deer::kMaxState) {
      return false;
    } else {
      using Fixed = decltype(cuda_deer::with_cell(it.rec, cell));
      using FixedKernel = void (*)(const IterationArrays<Kokkos::Cuda, Fixed>,
                                   const cuda_deer::Descriptors<T>);
      // Two blocks an SM in float (128 registers a thread); a double
      // lane's rows of W_hh alone take 6H registers.
      constexpr int unit_blocks = sizeof(T) == 4 ? 2 : 1;
      FixedKernel unit_kernel = nullptr;
      if constexpr (GruUnits<Cell>::value &&
                    cuda_deer::StartsLocally<Recurrence>::value)
        unit_kernel =
            cuda_deer::fused_gru_unit_iteration<Fixed, n, cuda_deer::kUnitSteps,
                                                unit_blocks>;
      if (units && !unit_kernel) return false;
      constexpr bool small = n <= cuda_deer::kSmallState;
      FixedKernel kernel = cuda_deer::fused_iteration < Fixed,
                  small ? cuda_deer::kSmallSteps : 1, n,
                  small ? cuda_deer::kSmallWork : cuda_deer::kMaxWork,
                  small ? 4 : 1 > ;
      FixedKernel pair_kernel = nullptr;
      if constexpr (n == 2)
        pair_kernel =
            cuda_deer::fused_pair_iteration<Fixed, cuda_deer::kSmallSteps,
                                            cuda_deer::kSmallWork>;
      if (pair && !pair_kernel) return false;
      // As in the constructor, for these instantiations (once per process).
      // The unit kernel stages its tile's inputs in shared memory (37 KB a
      // block at H = 16 in float). Under the smallest carveout (8 KB) two
      // blocks no longer fit: the look-back's window alone (7.5 KB a block
      // with the system's 1 KB) took the forward at n = 16, T = 100k from
      // 6.3 to 7.7 ms, which one block a multiprocessor explains. Half the
      // multiprocessor's memory holds two.
      static bool const carveout_set = [&] {
        for (FixedKernel k : {kernel, pair_kernel, unit_kernel})
          if (k)
            SOFTWAVE_CUDA_CHECK(cudaFuncSetAttribute(
                k, cudaFuncAttributePreferredSharedMemoryCarveout,
                k == unit_kernel ? 50 : int(cudaSharedmemCarveoutMaxL1)));
        return true;
      }();
      (void)carveout_set;
      if (pair) kernel = pair_kernel;
      if (units) kernel = unit_kernel;
      IterationArrays<Kokkos::Cuda, Fixed> const fixed{
          cuda_deer::with_cell(it.rec, cell),
          it.old_z,
          it.new_z,
          it.status,
          it.error,
          it.atol,
          it.rtol,
          it.reversed,
          it.zero_start,
          it.start_warm_up};
      kernel<<<blocks, cuda_deer::kThreads, 0, stream>>>(fixed, d);
      SOFTWAVE_CUDA_CHECK(cudaGetLastError());
      return true;
    }
  }

  using Kernel = void (*)(const IterationArrays<Kokkos::Cuda, Recurrence>,
                          const cuda_deer::Descriptors<T>);
  static Kernel small_kernel() {
    return cuda_deer::fused_iteration<Recurrence, cuda_deer::kSmallSteps,
                                      cuda_deer::kSmallState,
                                      cuda_deer::kSmallWork, 4>;
  }
  static Kernel large_kernel() {
    return cuda_deer::fused_iteration<Recurrence, 1, cuda_deer::kMaxState,
                                      cuda_deer::kMaxWork, 1>;
  }
  static Kernel pair_kernel() {
    return cuda_deer::fused_pair_iteration<Recurrence, cuda_deer::kSmallSteps,
                                           cuda_deer::kSmallWork>;
  }

  // Whether a TorchCell of fixed shape is PyTorch's GRU at a hidden size
  // fused_gru_unit_iteration takes (cuda_deer::takes_gru_units).
  template <class Cell, class = void>
  struct GruUnits : std::false_type {};
  template <class Cell>
  struct GruUnits<Cell, std::enable_if_t<(Cell::kFixedKind >= 0)>>
      : std::bool_constant<Cell::kFixedKind == int(RnnCell::gru) &&
                           cuda_deer::unit_hidden_size(Cell::kFixedState)> {};

  int n_;
  bool pair_ = false;   // full Jacobians at n = 2: fused_pair_iteration
  bool units_ = false;  // fused_gru_unit_iteration
  int steps_ = 1;
  std::int64_t tiles_ = 0;
  CallArray<Kokkos::View<int*, Kokkos::CudaSpace>> flags_;
  CallArray<Kokkos::View<T*, Kokkos::CudaSpace>> values_;
};

}  // namespace softwave::impl::deer
