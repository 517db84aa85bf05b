#pragma once
// The CUDA specialisation of core's VendorScan (core/src/deer/
// linear_recurrence_arrays.hpp; linear_recurrence.cpp includes this file in
// CUDA builds): the whole scan as one kernel that reads each step's inputs
// once and writes its outputs once, the floor of the recurrence's traffic.
//
// A chained scan with decoupled look-back (Merrill & Garland, 2016): a
// block takes the next tile of one row (an atomic ticket hands tiles out in
// row order, so a block only waits for tiles that running blocks hold),
// composes its steps' affine maps, publishes the tile's map, composes the
// maps of the tiles before it back to the nearest published prefix (the
// state at a tile's end), publishes its own prefix and replays its steps.
//
// Two choices make it a copy-speed kernel rather than a latency-bound one:
//  - Whole-line accesses without shared memory: a thread's steps are R runs
//    of V consecutive steps (16 bytes, one vector load or store), run k of
//    lane l at k·32·V + l·V within its warp's part of the tile. Each run
//    index is scanned across the warp by shuffles, and the warp's rows of
//    runs are composed in order.
//  - A tile's published map is one word, (a, e) together, written and read
//    by single accesses: no fence between a value and its flag. An unset
//    word holds all ones, a NaN no map can hold (a published a that is NaN
//    is stored as the canonical NaN). A prefix is the constant map (−0,
//    state): the look-back stops at the nearest map whose a is −0.
// The float word is 8 bytes; the double word is 16, accessed by one vector
// instruction, which the hardware performs as one access (as the CUB
// library's tile states assume) though PTX's memory model promises it per
// element only.

#include <cuda_runtime.h>

#include <Kokkos_Core.hpp>
#include <common/call_memory.hpp>
#include <cstdint>
#include <deer/linear_recurrence_arrays.hpp>
#include <string>
#include <type_traits>

#include "../common/affine_warp_scan.hpp"
#include "../common/check.hpp"

namespace softwave::impl::scan {

namespace cuda_scan {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kAllLanes = 0xffffffffu;

// Runs a thread (R): 0 lets the library choose (4); the benchmark sets 2
// or 4 to compare them in one run.
inline int& runs_override() {
  static int runs = 0;
  return runs;
}

// Steps a run: one 16-byte access.
template <class T>
__host__ __device__ constexpr int run_steps() {
  return int(16 / sizeof(T));
}
template <class T, int R>
__host__ __device__ constexpr std::int64_t tile_steps() {
  return std::int64_t(kThreads) * R * run_steps<T>();
}

// What the kernel reads besides the scan's arrays.
struct Tiles {
  unsigned long long* ticket;
  std::uint64_t* maps;  // one word a tile: 1 (float) or 2 (double) uint64
  std::int64_t tiles;   // per row
};

__device__ inline std::uint64_t* word(const Tiles& d, std::int64_t tile,
                                      int words) {
  return d.maps + tile * words;
}

// A prefix's a is −0, which no aggregate's is (a zero aggregate a is
// stored as +0): an aggregate whose product of a underflowed is composed
// like any other, so that a NaN or infinite state before it still reaches
// the steps after it, as it does step by step.
__device__ inline bool is_prefix(float a) {
  return __float_as_uint(a) == 0x80000000u;
}
__device__ inline bool is_prefix(double a) {
  return std::uint64_t(__double_as_longlong(a)) == 0x8000000000000000ull;
}
template <class T>
__device__ inline T aggregate_a(T a) {
  return a == T(0) ? T(0) : a;
}

__device__ inline void publish(const Tiles& d, std::int64_t tile, float a,
                               float e) {
  if (a != a) a = __uint_as_float(0x7fffffffu);
  std::uint64_t const w =
      std::uint64_t(__float_as_uint(e)) << 32 | __float_as_uint(a);
  asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(word(d, tile, 1)),
               "l"(w)
               : "memory");
}
__device__ inline void publish(const Tiles& d, std::int64_t tile, double a,
                               double e) {
  if (a != a) a = __longlong_as_double(0x7fffffffffffffffll);
  asm volatile(
      "st.relaxed.gpu.global.v2.u64 [%0], {%1, %2};" ::"l"(word(d, tile, 2)),
      "l"(__double_as_longlong(a)), "l"(__double_as_longlong(e))
      : "memory");
}
// False while tile's map is unset.
__device__ inline bool read_map(const Tiles& d, std::int64_t tile, float& a,
                                float& e) {
  std::uint64_t w;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];"
               : "=l"(w)
               : "l"(word(d, tile, 1))
               : "memory");
  if (std::uint32_t(w) == 0xffffffffu) return false;
  a = __uint_as_float(std::uint32_t(w));
  e = __uint_as_float(std::uint32_t(w >> 32));
  return true;
}
__device__ inline bool read_map(const Tiles& d, std::int64_t tile, double& a,
                                double& e) {
  std::uint64_t wa, we;
  asm volatile("ld.relaxed.gpu.global.v2.u64 {%0, %1}, [%2];"
               : "=l"(wa), "=l"(we)
               : "l"(word(d, tile, 2))
               : "memory");
  if (wa == ~std::uint64_t(0)) return false;
  a = __longlong_as_double(std::int64_t(wa));
  e = __longlong_as_double(std::int64_t(we));
  return true;
}

using cuda_support::compose_over_warp;

// By the block's first warp (every lane calls it): publishes tile `tile` of
// row r (its map δ ↦ total_a δ + total_e), composes the maps of the tiles
// before it back to the nearest constant one (a prefix; the row's initial
// state before its first tile), publishes the tile's prefix and returns
// the state before the tile.
template <class T>
__device__ T look_back(const Tiles& d, std::int64_t r, std::int64_t tile,
                       T init, T total_a, T total_e) {
  int const lane = threadIdx.x % 32;
  std::int64_t const self = r * d.tiles + tile;
  if (tile == 0) {
    if (lane == 0) publish(d, self, T(-0.0), total_a * init + total_e);
    return init;
  }
  if (lane == 0) publish(d, self, aggregate_a(total_a), total_e);
  std::int64_t const row_first = r * d.tiles;
  // acc: the state at the end of the window's nearest tile ↦ the state
  // before this tile.
  T acc_a = 1, acc_e = 0;
  for (std::int64_t nearest = self - 1;; nearest -= 32) {
    std::int64_t const seen = nearest - 31 + lane;
    T wa = T(-0.0), we = init;  // before the row: its initial state
    if (seen >= row_first)
      while (!read_map(d, seen, wa, we)) {
      }
    unsigned const constants = __ballot_sync(kAllLanes, is_prefix(wa));
    int const stop = constants ? 31 - __clz(constants) : -1;
    if (lane < stop) {
      wa = 1;
      we = 0;
    }
    compose_over_warp(wa, we, lane);
    T const window_a = __shfl_sync(kAllLanes, wa, 31);
    T const window_e = __shfl_sync(kAllLanes, we, 31);
    acc_e = acc_a * window_e + acc_e;
    acc_a = acc_a * window_a;
    if (constants) break;
  }
  T const carry = acc_e;  // acc_a is 0: the window held a prefix
  if (lane == 0) publish(d, self, T(-0.0), total_a * carry + total_e);
  return carry;
}

template <class T>
struct VectorOf;
template <>
struct VectorOf<float> {
  using type = float4;
};
template <>
struct VectorOf<double> {
  using type = double2;
};

// The V steps of a run at positions p … p+V−1 of a row (memory offsets
// ascending forward, descending with reverse), in the scan's order.
template <class T, bool Vector>
__device__ inline void load_run(const T* row, std::int64_t p, std::int64_t L,
                                bool reverse, T fill, T (&v)[16 / sizeof(T)]) {
  constexpr int V = run_steps<T>();
  using Vec = typename VectorOf<T>::type;
  if constexpr (Vector) {
    if (p >= L) {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = fill;
      return;
    }
    T memory[V];
    *reinterpret_cast<Vec*>(memory) =
        *reinterpret_cast<const Vec*>(row + (reverse ? L - p - V : p));
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = memory[reverse ? V - 1 - i : i];
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i)
      v[i] = p + i < L ? row[reverse ? L - 1 - p - i : p + i] : fill;
  }
}

template <class T, bool Vector>
__device__ inline void store_run(T* row, std::int64_t p, std::int64_t L,
                                 bool reverse, const T (&v)[16 / sizeof(T)]) {
  constexpr int V = run_steps<T>();
  using Vec = typename VectorOf<T>::type;
  if constexpr (Vector) {
    if (p >= L) return;
    T memory[V];
#pragma unroll
    for (int i = 0; i < V; ++i) memory[reverse ? V - 1 - i : i] = v[i];
    *reinterpret_cast<Vec*>(row + (reverse ? L - p - V : p)) =
        *reinterpret_cast<const Vec*>(memory);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (p + i < L) row[reverse ? L - 1 - p - i : p + i] = v[i];
  }
}

// One tile of the scan a block (ScanArrays says what is read and written).
// Vector: every row's length and pitch a multiple of V and the arrays
// 16-byte aligned, so that each run is one aligned access.
// At R = 4 the float forward takes 70 registers, 3 blocks a multiprocessor
// (perf/RESULTS.md: 56 % of DRAM bandwidth, occupancy-bound); the
// benchmark's runs2 variant is the first step towards more.
template <class T, int R, bool Adjoint, bool Vector>
__global__ void __launch_bounds__(kThreads)
    scan_tiles(const ScanArrays<T> s, const Tiles d) {
  constexpr int V = run_steps<T>();
  __shared__ unsigned long long ticket;
  __shared__ T warp_a[kWarps], warp_e[kWarps];
  __shared__ T carried;
  if (threadIdx.x == 0) ticket = atomicAdd(d.ticket, 1ull);
  __syncthreads();
  std::int64_t const r = std::int64_t(ticket) / d.tiles;
  std::int64_t const tile = std::int64_t(ticket) % d.tiles;
  int const lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  std::int64_t const L = s.length;
  bool const reverse = s.reverse;
  std::int64_t const first =
      tile * tile_steps<T, R>() + std::int64_t(warp) * (R * 32 * V) + lane * V;
  auto const position = [&](int k) { return first + k * (32 * V); };

  // Every load of the tile in flight before the first use. Steps past the
  // row's end are the identity map.
  T a[R][V], b[R][V], next_y[R][V];
  T const* const row_a = s.a + r * s.pitch_a;
  T const* const row_b = s.b + r * s.pitch_b;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    load_run<T, Vector>(row_a, position(k), L, reverse, T(1), a[k]);
    load_run<T, Vector>(row_b, position(k), L, reverse, T(0), b[k]);
  }
  bool const grad_a = Adjoint && s.grad_a;
  if (grad_a) {
    // The forward state before each step: y one position on (y0 at the
    // row's end).
    T const* const row_y = s.y + r * s.pitch_y;
    T const y_end = s.y0 ? s.y0[r] : T(0);
#pragma unroll
    for (int k = 0; k < R; ++k) {
      T y[V];
      load_run<T, Vector>(row_y, position(k), L, reverse, T(0), y);
#pragma unroll
      for (int i = 0; i + 1 < V; ++i)
        next_y[k][i] = position(k) + i + 1 < L ? y[i + 1] : y_end;
      std::int64_t const after = position(k) + V;
      next_y[k][V - 1] =
          after < L ? row_y[reverse ? L - 1 - after : after] : y_end;
    }
  }

  // Each run's map, each run index scanned over the warp (exclusive: the
  // map before the lane's run within its row of runs), the rows composed.
  T before_a[R], before_e[R];  // the map from the warp's start to the run
  T warp_total_a = 1, warp_total_e = 0;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    T A = 1, E = 0;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      T const e = Adjoint ? a[k][i] * b[k][i] : b[k][i];
      E = a[k][i] * E + e;
      A = a[k][i] * A;
    }
    compose_over_warp(A, E, lane);
    T const row_a = __shfl_sync(kAllLanes, A, 31);
    T const row_e = __shfl_sync(kAllLanes, E, 31);
    T const lane_a = __shfl_up_sync(kAllLanes, A, 1);
    T const lane_e = __shfl_up_sync(kAllLanes, E, 1);
    T const ex_a = lane == 0 ? T(1) : lane_a;
    T const ex_e = lane == 0 ? T(0) : lane_e;
    before_a[k] = ex_a * warp_total_a;
    before_e[k] = ex_a * warp_total_e + ex_e;
    warp_total_e = row_a * warp_total_e + row_e;
    warp_total_a = row_a * warp_total_a;
  }
  if (lane == 0) {
    warp_a[warp] = warp_total_a;
    warp_e[warp] = warp_total_e;
  }
  __syncthreads();

  if (warp == 0) {
    T total_a = 1, total_e = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      total_e = warp_a[w] * total_e + warp_e[w];
      total_a = warp_a[w] * total_a;
    }
    T const init = !Adjoint && s.y0 ? s.y0[r] : T(0);
    T const carry = look_back(d, r, tile, init, total_a, total_e);
    if (lane == 0) carried = carry;
  }
  __syncthreads();

  T state_at_warp = carried;
  for (int w = 0; w < warp; ++w)
    state_at_warp = warp_a[w] * state_at_warp + warp_e[w];
  T* const row_out = s.out + r * s.pitch_out;
  T* const row_grad_a = grad_a ? s.grad_a + r * s.pitch_grad_a : nullptr;
#pragma unroll
  for (int k = 0; k < R; ++k) {
    T state = before_a[k] * state_at_warp + before_e[k];
    T out[V], ga[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if constexpr (Adjoint) {
        T const lambda = b[k][i] + state;
        state = a[k][i] * lambda;
        out[i] = lambda;
        ga[i] = lambda * next_y[k][i];
      } else {
        state = a[k][i] * state + b[k][i];
        out[i] = state;
      }
    }
    store_run<T, Vector>(row_out, position(k), L, reverse, out);
    if (grad_a) store_run<T, Vector>(row_grad_a, position(k), L, reverse, ga);
    // The row's last step: μ after it is a_0 λ_0 in the forward's terms
    // (steps past the end are the identity).
    if (Adjoint && s.grad_y0 && position(k) <= L - 1 && L - 1 < position(k) + V)
      s.grad_y0[r] = state;
  }
}

}  // namespace cuda_scan

template <class T>
struct VendorScan<Kokkos::Cuda, T> {
  static std::string unavailable(const ScanArrays<T>&) { return {}; }

  static void run(const Kokkos::Cuda& space, const ScanArrays<T>& s) {
    if (s.rows == 0 || s.length == 0) return;
    if (cuda_scan::runs_override() == 2)
      launch<2>(space, s);
    else
      launch<4>(space, s);
  }

  template <int R>
  static void launch(const Kokkos::Cuda& space, const ScanArrays<T>& s) {
    constexpr int V = cuda_scan::run_steps<T>();
    constexpr int words = sizeof(T) == 4 ? 1 : 2;
    constexpr std::int64_t tile = cuda_scan::tile_steps<T, R>();
    std::int64_t const tiles = (s.length + tile - 1) / tile;
    std::int64_t const entries = s.rows * tiles;
    // [0] the ticket, [1] padding (16-byte words), then the tiles' maps.
    auto const memory =
        call_array<Kokkos::View<std::uint64_t*, Kokkos::CudaSpace>>(
            space, "softwave::linear_recurrence::tiles", false,
            2 + entries * words);
    std::uint64_t* const base = memory.view.data();
    cudaStream_t const stream = space.cuda_stream();
    SOFTWAVE_CUDA_CHECK(
        cudaMemsetAsync(base, 0, 2 * sizeof(std::uint64_t), stream));
    SOFTWAVE_CUDA_CHECK(cudaMemsetAsync(
        base + 2, 0xff, entries * words * sizeof(std::uint64_t), stream));
    cuda_scan::Tiles const d{reinterpret_cast<unsigned long long*>(base),
                             base + 2, tiles};
    auto const aligned = [](const void* p) {
      return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
    };
    bool const vector =
        s.length % V == 0 && s.pitch_a % V == 0 && s.pitch_b % V == 0 &&
        s.pitch_out % V == 0 && aligned(s.a) && aligned(s.b) &&
        aligned(s.out) &&
        (!s.adjoint ||
         (s.pitch_y % V == 0 && aligned(s.y) &&
          (!s.grad_a || (s.pitch_grad_a % V == 0 && aligned(s.grad_a)))));
    auto const kernel =
        s.adjoint ? (vector ? cuda_scan::scan_tiles<T, R, true, true>
                            : cuda_scan::scan_tiles<T, R, true, false>)
                  : (vector ? cuda_scan::scan_tiles<T, R, false, true>
                            : cuda_scan::scan_tiles<T, R, false, false>);
    kernel<<<unsigned(entries), cuda_scan::kThreads, 0, stream>>>(s, d);
    SOFTWAVE_CUDA_CHECK(cudaGetLastError());
  }
};

}  // namespace softwave::impl::scan
