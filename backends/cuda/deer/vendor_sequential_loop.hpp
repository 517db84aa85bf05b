#pragma once
// The CUDA specialisation of core's SequentialLoop (softwave/deer_engine.hpp;
// core/src/deer/deer.cpp includes this file in CUDA builds): PyTorch's
// cells with dense hidden weights evaluated one step after another, a
// block a sequence, the whole loop in one kernel.
//
// Thread k of a block holds row k of W_hh in registers for the whole
// sequence (the G·H rows of a step, a row a thread) and, at each step,
// forms that row of W_hh h + b_hh from h in shared memory (the same
// address across the block: a broadcast); after a barrier, thread i < H
// runs unit i's update (the cell's own unit_step, as the portable team
// loop does); after a second barrier the state is written out. Each
// thread loads its row of the next step's projections while the current
// step runs, so a step waits only for what is left of that load's latency
// (a step took about 290 cycles on an H100). The portable team loop reads
// W_hh from memory at every step, a row a thread of 8 vector lanes:
// 6 µs a step of the GRU at n = 16 and 15 µs at n = 64 on an H200
// (perf/RESULTS.md, "A team a sequence, a team a chunk").
//
// Applies to the forward recurrence of TorchCell with dense hidden weights,
// 8 gate rows a step or more and H up to kMaxHidden (the row's registers),
// where the solve asked for no team shape of its own
// (DeerOptions::sequential_team_size 0) and not for the portable kernels.

#include <cuda_runtime.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <deer/cells.hpp>
#include <softwave/deer.hpp>
#include <type_traits>

#include "../common/check.hpp"

namespace softwave::impl::deer {

namespace cuda_sequential {

// The recurrences the kernel takes: PyTorch's cells chosen at run time.
template <class Recurrence>
struct TakesRows : std::false_type {};
template <class T>
struct TakesRows<Forward<Kokkos::Cuda, TorchCell<T, Kokkos::Cuda>>>
    : std::true_type {};

// The largest hidden size: a row of W_hh in at most 64 registers (128 in
// double), LSTM's 256 rows a block of 256 threads.
inline constexpr int kMaxHidden = 64;

// The kernel's shape for hidden sizes up to MaxHidden: rows of LSTM's 4
// gates at most, rounded up to whole warps.
template <int MaxHidden>
inline constexpr int kMaxThreads = 4 * MaxHidden;

template <class T, int MaxHidden>
__global__ void __launch_bounds__(kMaxThreads<MaxHidden>)
    sequential_rows(const Forward<Kokkos::Cuda, TorchCell<T, Kokkos::Cuda>> rec,
                    const DeerView3<T, Kokkos::Cuda> z,
                    const Kokkos::View<int*, Kokkos::Cuda::memory_space> status,
                    const bool reversed) {
  int const b = blockIdx.x;
  if (status(b) != diverged) return;
  auto const& cell = rec.cell;
  int const H = cell.w.size(), n = cell.state_size();
  int const rows = cell.gates() * H;
  int const k = threadIdx.x;
  bool const row_thread = k < rows;
  // y: the state (n ≤ 2H), hp: W_hh h + b_hh, p: two steps' projections.
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  T* const y = reinterpret_cast<T*>(shared_bytes);
  T* const hp = y + 2 * MaxHidden;
  T* const p = hp + 4 * MaxHidden;

  T w[MaxHidden];
#pragma unroll
  for (int j = 0; j < MaxHidden; ++j)
    w[j] = row_thread && j < H ? cell.w.at(k, j) : T(0);
  T const bias = row_thread ? cell.w.bias(cell.w.first_row + k) : T(0);

  int const L = rec.length(b);
  auto const step_of = [&](int q) { return reversed ? L - 1 - q : q; };
  if (k == 0) rec.initial(b, y);
  if (row_thread) p[k] = rec.x(b, step_of(0), k);
  __syncthreads();
  for (int q = 0; q < L; ++q) {
    int const t = step_of(q);
    T* const p_now = p + (q % 2) * 4 * MaxHidden;
    T* const p_next = p + ((q + 1) % 2) * 4 * MaxHidden;
    T const next = row_thread && q + 1 < L ? rec.x(b, step_of(q + 1), k) : T(0);
    if (row_thread) {
      // Four partial sums: a chain of H dependent adds would be the step's
      // longest latency.
      T part[4] = {bias, T(0), T(0), T(0)};
#pragma unroll
      for (int j = 0; j < MaxHidden; ++j)
        if (j < H) part[j % 4] += w[j] * y[j];
      hp[k] = (part[0] + part[1]) + (part[2] + part[3]);
    }
    __syncthreads();
    if (k < H)
      cell.visit([&](const auto& c) {
        c.unit_step(k, y, p_now, hp, y);
        return 0;
      });
    if (row_thread) p_next[k] = next;
    __syncthreads();
    if (k < n) z(b, t, k) = y[k];
  }
}

}  // namespace cuda_sequential

template <class Recurrence>
struct SequentialLoop<Kokkos::Cuda, Recurrence> {
  using T = typename Recurrence::value_type;
  // Against this loop DEER won up to n = 16 and lost from n = 32 on an
  // H100 (GRU, B = 16, forward: quasi-DEER 0.18-4.8 ms against the loop's
  // 0.93-103 ms at n = 16, T = 1k-100k; at n = 32 the loop 0.92 and 10.5 ms
  // against full DEER's 4.4 and 19.5 ms at T = 1k and 10k; perf/RESULTS.md,
  // "The sequential loop a block a sequence (CUDA)").
  static constexpr int deer_state_limit = 16;

  static bool applies(const Recurrence& rec) {
    if constexpr (!cuda_sequential::TakesRows<Recurrence>::value) {
      return false;
    } else {
      // As the portable loop takes a team: from 8 gate rows a step (below,
      // a thread a sequence).
      return !rec.cell.w.diagonal &&
             rec.cell.gates() * rec.cell.w.size() >= 8 &&
             rec.cell.w.size() <= cuda_sequential::kMaxHidden;
    }
  }

  static void run(const Kokkos::Cuda& space, const Recurrence& rec,
                  const DeerView3<T, Kokkos::Cuda>& z,
                  const Kokkos::View<int*, Kokkos::Cuda::memory_space>& status,
                  std::int64_t batch, bool reversed) {
    if constexpr (cuda_sequential::TakesRows<Recurrence>::value) {
      if (batch == 0) return;
      if (rec.cell.w.size() <= 32)
        launch<32>(space, rec, z, status, batch, reversed);
      else
        launch<cuda_sequential::kMaxHidden>(space, rec, z, status, batch,
                                            reversed);
    }
  }

  template <int MaxHidden>
  static void launch(
      const Kokkos::Cuda& space, const Recurrence& rec,
      const DeerView3<T, Kokkos::Cuda>& z,
      const Kokkos::View<int*, Kokkos::Cuda::memory_space>& status,
      std::int64_t batch, bool reversed) {
    int const rows = rec.cell.gates() * rec.cell.w.size();
    int const threads = (rows + 31) / 32 * 32;
    // The state, the rows' values and two steps' projections.
    std::size_t const bytes =
        std::size_t(2 + 4 + 2 * 4) * MaxHidden * sizeof(T);
    // Named to Kokkos' tools as the library's other kernels are.
    std::uint64_t kernel_id = 0;
    Kokkos::Tools::beginParallelFor(
        "softwave::deer::sequential_rows",
        Kokkos::Tools::Experimental::device_id(space), &kernel_id);
    cuda_sequential::sequential_rows<T, MaxHidden>
        <<<unsigned(batch), threads, bytes, space.cuda_stream()>>>(
            rec, z, status, reversed);
    cudaError_t const launched = cudaGetLastError();
    Kokkos::Tools::endParallelFor(kernel_id);  // paired before any throw
    SOFTWAVE_CUDA_CHECK(launched);
  }
};

}  // namespace softwave::impl::deer
