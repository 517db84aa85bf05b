#pragma once
// What the softwave_bench sources share: the execution space, normal random
// inputs, the allocation peak of one call, and the Sinkhorn benchmarks'
// registrations (bench_sinkhorn.cpp, bench_gw.cpp, bench_deer.cpp) for the
// main in bench_softdtw.cpp.

#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "allocation_tracker.hpp"

namespace softwave_bench {

using Space = Kokkos::DefaultExecutionSpace;
constexpr double kMiB = 1024.0 * 1024.0;

// v ← N(0, 1) values from `seed`, drawn in chunks of 256 per generator.
template <class View>
void fill_normal(const View& v, std::uint64_t seed) {
  using T = typename View::non_const_value_type;
  Kokkos::Random_XorShift64_Pool<Space> pool(seed);
  T* const data = v.data();
  std::int64_t const size = std::int64_t(v.size());
  constexpr std::int64_t chunk = 256;
  Kokkos::parallel_for(
      "softwave_bench::fill_normal",
      Kokkos::RangePolicy<Space>(0, (size + chunk - 1) / chunk),
      KOKKOS_LAMBDA(std::int64_t c) {
        auto gen = pool.get_state();
        std::int64_t const end =
            (c + 1) * chunk < size ? (c + 1) * chunk : size;
        for (std::int64_t i = c * chunk; i < end; ++i)
          data[i] = T(float(gen.normal()));
        pool.free_state(gen);
      });
  Kokkos::fence();
}

// Runs `call` once (a warm-up) and returns the peaks of what it allocated;
// an exception propagates after the trackers are stopped.
inline softwave_tools::AllocationTracker::Peaks measured_call(
    const Space& space, const std::function<void()>& call) {
  using softwave_tools::AllocationTracker;
  try {
    AllocationTracker::start();
    softwave_tools::StreamOrderedPeak::start();
    call();
    space.fence();
    auto peaks = AllocationTracker::stop();
    std::size_t const stream_ordered =
        softwave_tools::StreamOrderedPeak::stop();
    peaks.workspace += stream_ordered;
    peaks.all += stream_ordered;
    return peaks;
  } catch (...) {
    AllocationTracker::stop();
    softwave_tools::StreamOrderedPeak::stop();
    throw;
  }
}

// Times `call` once per benchmark iteration (manual time, between fences
// of the space); returns the total seconds.
template <class State, class Call>
double timed_calls(State& state, const Space& space, const Call& call) {
  using Clock = std::chrono::steady_clock;
  double total_s = 0;
  for (auto _ : state) {
    space.fence();
    auto const begin = Clock::now();
    call();
    space.fence();
    double const s =
        std::chrono::duration<double>(Clock::now() - begin).count();
    state.SetIterationTime(s);
    total_s += s;
  }
  return total_s;
}

// Registers BM_Sinkhorn (bench_sinkhorn.cpp) for the CPU or the GPU grid.
void register_sinkhorn(bool gpu, bool checks);

// Registers BM_SampledGw (bench_gw.cpp) for the CPU or the GPU grid.
void register_sampled_gw(bool gpu);

// Registers BM_DeerGru (bench_deer.cpp) for the CPU or the GPU grid.
void register_deer(bool gpu);

// Registers BM_LinearRecurrence and BM_DeviceCopy
// (bench_linear_recurrence.cpp) for the CPU or the GPU grid.
void register_linear_recurrence(bool gpu);

}  // namespace softwave_bench
