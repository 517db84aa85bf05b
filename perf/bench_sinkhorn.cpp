// The Sinkhorn benchmarks of softwave_bench (registered by its main in
// bench_softdtw.cpp, on the same grid flags):
//
//   BM_Sinkhorn/N/d[_specialised]  softwave::sinkhorn between point clouds
//                                  x, y ~ N(0, 1) (N × d each, float32),
//                                  uniform weights, C = ‖x − y‖², ε = 0.1,
//                                  exactly 100 iterations (tolerance 0): the
//                                  shape of perf/bench_sinkhorn_peers.py.
//                                  _specialised: Kernel::specialised (CUDA,
//                                  d <= 64); else Kernel::portable.
//   BM_Sinkhorn_specialised_rowsR/N/d  the same with R rows a thread in the
//                                  CUDA sums kernel (set_rows_per_thread),
//                                  to compare the variants in one run.
//   BM_Sinkhorn_specialised_tilesT/N/d  the same with T 16-row tiles a warp
//                                  in the tensor-core sums kernel (d > 16;
//                                  set_tensor_row_tiles).
//   BM_Sinkhorn_specialised_tf32/N/d  the same with TF32 operands instead of
//                                  scaled FP16 (set_tensor_operands).
//
// Timing as the Soft-DTW benchmarks: manual time between fences, inputs
// allocated once, one un-timed call first that records the peak of what
// the library allocates.
//
// Counters: ms; value, the transport value; pairs_per_s (N² pairs per
// half-iteration, 2 half-iterations per iteration); exp_floor_ms, the
// special-function floor of one exp per pair per half-iteration at 4.2e12
// exp/s (an H100's or H200's 132 SMs × 16 a clock × 1.98 GHz), and x_floor
// = ms / exp_floor_ms (GPU grid);
// peak_workspace_MB; peer_ms and speedup_vs_peer where a peer figure of the
// same shape exists (table below).

#include <benchmark/benchmark.h>

#include <chrono>
#include <exception>
#include <softwave/sinkhorn.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include "sinkhorn/updates.hpp"  // set_rows_per_thread
#endif

namespace softwave_bench {
namespace {

constexpr int kIterations = 100;
constexpr double kEpsilon = 0.1;
constexpr double kExpPerSecond = 4.2e12;

// FlashSinkhorn 0.4.1, alternating updates in TF32, fixed 100 iterations,
// ε = 0.1 on ‖x − y‖², x, y ~ N(0, 1), float32, on an NVIDIA H200
// (perf/bench_sinkhorn_peers.py, perf/results/sinkhorn-peers-h200-*.json;
// perf/RESULTS.md names the run).
struct Peer {
  std::int64_t n, d;
  double ms;
};
constexpr Peer kFlashTf32[] = {
    {10000, 3, 20.03}, {50000, 3, 235.13}, {100000, 3, 897.45}};

// A variant of the CUDA sums kernels: rows a thread (the exact kernel),
// 16-row tiles a warp and TF32 instead of scaled FP16 operands (the
// tensor-core kernel); 0 / false is the library's choice.
struct Variant {
  int rows = 0, tiles = 0;
  bool tf32 = false;
};

// Sets a variant for one benchmark, and the library's choice back after it.
struct ForcedVariant {
  explicit ForcedVariant(Variant v) { set(v); }
  ~ForcedVariant() { set(Variant{}); }
  static void set([[maybe_unused]] Variant v) {
#if defined(KOKKOS_ENABLE_CUDA)
    softwave::impl::cuda_sinkhorn::set_rows_per_thread(v.rows);
    softwave::impl::cuda_sinkhorn::set_tensor_row_tiles(v.tiles);
    softwave::impl::cuda_sinkhorn::set_tensor_operands(
        v.tf32 ? softwave::impl::cuda_sinkhorn::TensorOperands::tf32
               : softwave::impl::cuda_sinkhorn::TensorOperands::fp16);
#endif
  }
};

void run_sinkhorn(benchmark::State& state, softwave::Kernel kernel, bool checks,
                  bool gpu, Variant variant) {
  ForcedVariant const forced(variant);
  Space const space;
  std::int64_t const N = state.range(0), d = state.range(1);
  using Points = softwave::OTView3<float, Space>;
  Points x(Kokkos::view_alloc(Kokkos::WithoutInitializing, "softwave_bench::x"),
           1, N, d);
  Points y(Kokkos::view_alloc(Kokkos::WithoutInitializing, "softwave_bench::y"),
           1, N, d);
  fill_normal(x, 12345);
  fill_normal(y, 67890);
  softwave::SinkhornResult<float, Space> result;
  result.f = softwave::OTView2<float, Space>("softwave_bench::f", 1, N);
  result.g = softwave::OTView2<float, Space>("softwave_bench::g", 1, N);
  result.value = softwave::OTView1<float, Space>("softwave_bench::value", 1);
  softwave::SinkhornOptions options;
  options.epsilon = kEpsilon;
  options.max_iterations = kIterations;
  options.tolerance = 0;
  options.kernel = kernel;
  options.check_values = checks;
  softwave::PointClouds<float, Space> const clouds{x, y};
  auto const call = [&] {
    softwave::sinkhorn(space, clouds, softwave::Marginals<float, Space>{},
                       result, options);
  };
  space.fence();

  softwave_tools::AllocationTracker::Peaks peaks;
  try {
    peaks = measured_call(space, call);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  double const total_s = softwave_bench::timed_calls(state, space, call);
  double const exps = 2.0 * kIterations * double(N) * double(N);
  double const mean_ms =
      state.iterations() ? 1e3 * total_s / double(state.iterations()) : 0;
  using benchmark::Counter;
  state.counters["ms"] = Counter(mean_ms);
  state.counters["pairs_per_s"] =
      Counter(exps, Counter::kIsIterationInvariantRate);
  state.counters["peak_workspace_MB"] = Counter(double(peaks.workspace) / kMiB);
  // The transport value, so that variants can be seen to agree.
  Kokkos::View<float*, Kokkos::HostSpace> value("softwave_bench::value_host",
                                                1);
  Kokkos::deep_copy(value, result.value);
  state.counters["value"] = Counter(double(value(0)));
  if (gpu) {
    double const floor_ms = 1e3 * exps / kExpPerSecond;
    state.counters["exp_floor_ms"] = Counter(floor_ms);
    state.counters["x_floor"] = Counter(mean_ms / floor_ms);
  }
  for (auto const& peer : kFlashTf32)
    if (peer.n == N && peer.d == d && gpu) {
      state.counters["peer_ms"] = Counter(peer.ms);
      if (mean_ms > 0)
        state.counters["speedup_vs_peer"] = Counter(peer.ms / mean_ms);
      state.SetLabel("peer=FlashSinkhorn TF32 alternating (H200)");
    }
}

}  // namespace

void register_sinkhorn(bool gpu, bool checks) {
  // (N, d, specialised, variant): the peers' shapes on a GPU (the portable
  // kernels at the smallest beside them), smaller clouds on a CPU.
  struct Shape {
    std::int64_t n, d;
    bool specialised;
    Variant variant;
  };
  std::vector<Shape> shapes;
  if (gpu) {
    shapes = {{10000, 3, false, {}}};
#if defined(KOKKOS_ENABLE_CUDA)
    for (int rows : {0, 4, 8})
      for (std::int64_t n : {10000, 50000, 100000})
        shapes.push_back({n, 3, true, {rows, 0}});
    shapes.push_back({10000, 16, true, {}});
    for (int tiles : {0, 1, 2}) {
      for (std::int64_t n : {10000, 50000, 100000})
        shapes.push_back({n, 64, true, {0, tiles}});
      shapes.push_back({50000, 48, true, {0, tiles}});
    }
    for (std::int64_t n : {10000, 50000, 100000})
      shapes.push_back({n, 64, true, {0, 0, true}});
    shapes.push_back({50000, 48, true, {0, 0, true}});
#endif
  } else {
    shapes = {{1000, 3, false, {}}, {1000, 64, false, {}}};
  }
  for (auto const& s : shapes) {
    auto const kernel = s.specialised ? softwave::Kernel::specialised
                                      : softwave::Kernel::portable;
    std::string name =
        s.specialised ? "BM_Sinkhorn_specialised" : "BM_Sinkhorn";
    if (s.variant.rows) name += "_rows" + std::to_string(s.variant.rows);
    if (s.variant.tiles) name += "_tiles" + std::to_string(s.variant.tiles);
    if (s.variant.tf32) name += "_tf32";
    Variant const variant = s.variant;
    benchmark::RegisterBenchmark(
        name.c_str(),
        [kernel, checks, gpu, variant](benchmark::State& state) {
          run_sinkhorn(state, kernel, checks, gpu, variant);
        })
        ->Args({s.n, s.d})
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace softwave_bench
