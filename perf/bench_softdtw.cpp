// softwave_bench: Google Benchmark harness for the Soft-DTW entry points
// (docs/design.md §8). Runs on Kokkos::DefaultExecutionSpace, so the same
// source times OpenMP here and CUDA on the GPU machine.
//
//   BM_Forward/B/N/d          softwave::soft_dtw (values only)
//   BM_ForwardBackward/B/N/d  softwave::soft_dtw_value_and_grad, values +
//                             grad_x + grad_y (the peers' "forward + backward
//                             of the summed values")
//   BM_Pairwise/B1/B2/N/d     softwave::pairwise (all-pairs matrix of values)
//   BM_CostForward/B/N        softwave::soft_dtw_cost on a (B, N, N) cost
//                             tensor C ~ N(0, 1) (values only)
//   BM_CostForwardBackward/B/N  soft_dtw_cost_value_and_grad, values +
//                             grad_cost
//
// float32 inputs x, y ~ N(0, 1) (as the peers), γ = 1 (--softwave_gamma=G:
// another γ, 0 for hard DTW), squared Euclidean cost, M = N, no band, tile
// chosen by the library.
//
// Grids: the default is the CPU grid; `--softwave_grid=gpu` (stripped from
// argv before benchmark::Initialize, like Kokkos' --kokkos-* flags) registers
// the GPU grid instead; on CUDA, `--softwave_warps=F,B` forces the
// specialised kernels' warps per strip (see take_softwave_flags). Every
// other flag is Google Benchmark's.
//
// Timing: manual time, measured between fences of the execution space
// instance around each call. Inputs and outputs are allocated and filled once,
// outside the timed loop. Before the timed loop each benchmark makes one
// un-timed call (the warm-up) during which Kokkos Tools allocation callbacks
// record what the library allocates.
//
// Counters (per benchmark):
//   cells_per_s         B·N·M (B1·B2·N·M for pairwise) per second
//   ms                  mean manual time of one call, milliseconds
//   peak_workspace_MB   measured peak of the live bytes of allocations
//                       labelled "softwave::*" during one call, MiB (2^20 B)
//   peak_all_MB         the same for every Kokkos allocation made during the
//                       call whatever its label. Kokkos-internal buffers that
//                       persist across calls (the OpenMP per-thread team
//                       scratch pool, CUDA reduction/scratch buffers) show up
//                       only in a call that grows them; Google Benchmark
//                       reports the counters of its last trial run, so they
//                       are usually absent. SOFTWAVE_BENCH_TRACE_ALLOCATIONS=1
//                       lists every allocation of the tracked calls on stderr.
//   formula_MB          the memory formula of softwave/softdtw.hpp, MiB
//   tile                the tile edge T the library uses (tile_size())
//   peer_ms, peer_cells_per_s, peer_B, speedup_vs_peer (cells/s ratio),
//   peer_peak_MB (GPU grid, forward+backward): the matching peer figure, where
//   one exists (tables below).

#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>
#include <softwave/softdtw.hpp>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocation_tracker.hpp"
#include "bench_common.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>

#include "softdtw/fused.hpp"  // set_kernel_warps (--softwave_warps)
#endif

namespace {

using softwave_tools::AllocationTracker;

using softwave_bench::kMiB;
using softwave_bench::Space;
using Memory = Space::memory_space;
template <class T>
using Series = Kokkos::View<T***, Kokkos::LayoutRight, Memory>;
using Values = Kokkos::View<float*, Memory>;
using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, Memory>;

// --softwave_input=float32|bfloat16|float16: the inputs' (and gradients')
// type; values are float32 for all three.
enum class Input { float32, bfloat16, float16 };

enum class Grid { cpu, gpu };
enum class Kind { forward, forward_backward, pairwise, cost, cost_backward };

// The implementations a run compares: the portable kernels always, and the
// specialised path where this backend has one (CUDA).
constexpr bool kHasSpecialised =
#if defined(KOKKOS_ENABLE_CUDA)
    std::is_same_v<Space, Kokkos::Cuda>;
#else
    false;
#endif
constexpr bool kOnHost =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                               typename Space::memory_space>::accessible;

Grid g_grid = Grid::cpu;
int g_tile = 0;        // --softwave_tile
bool g_checks = true;  // --softwave_checks=on|off: SoftDTWOptions::check_values
double g_gamma = 1.0;  // --softwave_gamma
Input g_input = Input::float32;
// --softwave_warps=F,B: warps per strip of the CUDA-specialised forward and
// backward kernels (0: the library's choice), to time the variants in one
// run.
int g_forward_warps = 0, g_backward_warps = 0;

// ---------------------------------------------------------------------------
// Peer figures.

// From /work/shared/perf/peers-softdtw-cpu.md: Blondel's soft-dtw (Cython),
// float64, ONE core, B = 1 (one pair per call), γ = 1, M = N, x, y ~ N(0, 1),
// best of 3, measured 2026-11-21 on a machine of this workplace's kind.
// fwd = value; fwd+bwd = value, E and the gradient w.r.t. x.
struct CpuPeer {
  int n, d;
  double fwd_ms, fwd_mcells, fwdbwd_ms, fwdbwd_mcells;
};
constexpr CpuPeer kCpuPeers[] = {
    {128, 1, 0.9, 19.1, 1.2, 14.0},     {512, 1, 11.9, 22.1, 20.5, 12.8},
    {512, 64, 17.6, 14.9, 33.8, 7.8},   {1024, 1, 49.4, 21.2, 103.7, 10.1},
    {1024, 64, 71.5, 14.7, 158.1, 6.6}, {2048, 1, 202.0, 20.8, 443.0, 9.5},
};

// From /work/shared/perf/peers-softdtw-h200.csv: peer GPU implementations on
// one NVIDIA H200 (2026-11-21), fp32, γ = 1, M = N, x, y ~ N(0, 1); medians.
// fwdbwd_ms: forward + backward of the summed values; fwd_ms: forward only;
// peak_mb: device memory used on top of the inputs. kErr: the peer failed.
// The benchmark compares with the best (fastest) peer mode of each shape.
constexpr double kErr = -1;
struct GpuPeer {
  const char* impl;
  int b, n, d;
  double fwdbwd_ms, fwd_ms, peak_mb;
};
constexpr GpuPeer kGpuPeers[] = {
    {"maghoumi", 16, 128, 1, 2.074, 0.836, 6.1},
    {"sdtw_cuda_torch_unfused", 16, 128, 1, 2.659, 0.574, 7.1},
    {"sdtw_cuda_torch_fused", 16, 128, 1, 25.747, 10.037, 4.1},
    {"maghoumi", 16, 128, 64, 1.931, 0.649, 258.0},
    {"sdtw_cuda_torch_unfused", 16, 128, 64, 2.293, 0.568, 8.1},
    {"sdtw_cuda_torch_fused", 16, 128, 64, 27.354, 9.549, 5.1},
    {"maghoumi", 16, 512, 1, 3.396, 1.528, 96.4},
    {"sdtw_cuda_torch_unfused", 16, 512, 1, 3.299, 1.361, 112.6},
    {"sdtw_cuda_torch_fused", 16, 512, 1, 85.585, 41.334, 64.4},
    {"maghoumi", 16, 512, 64, 8.539, 3.643, 4116.0},
    {"sdtw_cuda_torch_unfused", 16, 512, 64, 3.363, 1.430, 116.5},
    {"sdtw_cuda_torch_fused", 16, 512, 64, 86.730, 39.556, 68.4},
    {"maghoumi", 16, 1024, 1, kErr, kErr, kErr},
    {"sdtw_cuda_torch_unfused", 16, 1024, 1, kErr, kErr, kErr},
    {"sdtw_cuda_torch_fused", 16, 1024, 1, 185.419, 79.491, 256.9},
    {"maghoumi", 16, 1024, 64, kErr, kErr, kErr},
    {"sdtw_cuda_torch_unfused", 16, 1024, 64, kErr, kErr, kErr},
    {"sdtw_cuda_torch_fused", 16, 1024, 64, 179.837, 81.801, 264.8},
    {"sdtw_cuda_torch_unfused", 16, 2048, 1, 346.052, 129.538, 1794.3},
    {"sdtw_cuda_torch_fused", 16, 2048, 1, 347.946, 210.230, 1025.8},
    {"sdtw_cuda_torch_unfused", 16, 2048, 64, 385.920, 200.715, 1810.0},
    {"sdtw_cuda_torch_fused", 16, 2048, 64, 394.042, 160.773, 1041.5},
    {"maghoumi", 32, 128, 1, 1.807, 0.557, 12.2},
    {"sdtw_cuda_torch_unfused", 32, 128, 1, 1.988, 0.567, 14.3},
    {"sdtw_cuda_torch_fused", 32, 128, 1, 27.992, 9.708, 8.2},
    {"maghoumi", 32, 128, 64, 2.354, 0.811, 516.0},
    {"sdtw_cuda_torch_unfused", 32, 128, 64, 2.219, 0.575, 16.3},
    {"sdtw_cuda_torch_fused", 32, 128, 64, 30.096, 12.779, 10.2},
    {"maghoumi", 32, 512, 1, 3.673, 1.523, 192.9},
    {"sdtw_cuda_torch_unfused", 32, 512, 1, 3.472, 1.562, 225.1},
    {"sdtw_cuda_torch_fused", 32, 512, 1, 105.407, 37.368, 128.9},
    {"maghoumi", 32, 512, 64, 13.717, 6.188, 8232.0},
    {"sdtw_cuda_torch_unfused", 32, 512, 64, 3.593, 1.643, 233.0},
    {"sdtw_cuda_torch_fused", 32, 512, 64, 88.386, 37.415, 136.8},
    {"maghoumi", 32, 1024, 1, kErr, kErr, kErr},
    {"sdtw_cuda_torch_unfused", 32, 1024, 1, kErr, kErr, kErr},
    {"sdtw_cuda_torch_fused", 32, 1024, 1, 160.622, 72.408, 513.8},
    {"maghoumi", 32, 1024, 64, kErr, kErr, kErr},
    {"sdtw_cuda_torch_unfused", 32, 1024, 64, kErr, kErr, kErr},
    {"sdtw_cuda_torch_fused", 32, 1024, 64, 176.433, 68.646, 529.5},
    {"sdtw_cuda_torch_unfused", 32, 2048, 1, 281.854, 119.199, 3592.5},
    {"sdtw_cuda_torch_fused", 32, 2048, 1, 301.486, 128.620, 2054.5},
    {"sdtw_cuda_torch_unfused", 32, 2048, 64, 255.729, 117.025, 3624.0},
    {"sdtw_cuda_torch_fused", 32, 2048, 64, 454.886, 174.314, 2086.0},
    {"sdtw_cuda_torch_unfused", 32, 4096, 64, 513.149, 244.804, 14408.0},
    {"sdtw_cuda_torch_unfused", 8, 8192, 16, 956.138, 457.720, 14352.0},
};

struct PeerFigure {
  std::string impl;
  double ms = 0;           // one call of the peer
  double cells_per_s = 0;  // the peer's own cells per second
  double batch = 1;        // pairs per peer call
  double peak_mb = -1;     // < 0: not reported
};

std::optional<PeerFigure> peer_figure(Kind kind, std::int64_t B, std::int64_t N,
                                      std::int64_t d) {
  if (kind != Kind::forward && kind != Kind::forward_backward)
    return std::nullopt;
  bool const backward = kind == Kind::forward_backward;
  if (g_grid == Grid::cpu) {
    for (auto const& p : kCpuPeers) {
      if (p.n != N || p.d != d) continue;
      PeerFigure f;
      f.impl = "blondel-cython-f64-1core-B1";
      f.ms = backward ? p.fwdbwd_ms : p.fwd_ms;
      f.cells_per_s = 1e6 * (backward ? p.fwdbwd_mcells : p.fwd_mcells);
      return f;
    }
    return std::nullopt;
  }
  std::optional<PeerFigure> best;
  for (auto const& p : kGpuPeers) {
    if (p.b != B || p.n != N || p.d != d) continue;
    double const ms = backward ? p.fwdbwd_ms : p.fwd_ms;
    if (ms == kErr) continue;
    if (best && best->ms <= ms) continue;
    PeerFigure f;
    f.impl = p.impl;
    f.ms = ms;
    f.batch = double(B);
    f.cells_per_s = double(B) * double(N) * double(N) / (ms * 1e-3);
    if (backward) f.peak_mb = p.peak_mb;
    best = f;
  }
  return best;
}

// ---------------------------------------------------------------------------
// The header's memory formula (softwave/softdtw.hpp), in bytes, for P pairs in
// flight. N/T is taken as the number of tile rows ceil(N/T) (equal to N/T on
// every grid shape here).
double formula_bytes(bool backward, double P, std::int64_t N, std::int64_t M,
                     int T) {
  double const nt = double((N + T - 1) / T), mt = double((M + T - 1) / T);
  if (!backward) return 8.0 * P * (double(N + 1) + double(M + 1) + 3 * nt + 1);
  return 8.0 * P * (2 * nt * double(M + 1) + 2 * mt * double(N + 1) + 1);
}

// All-pairs: "streams pairs through the forward kernel in chunks whose
// workspace stays under 256 MiB" — P is the number of pairs of one chunk.
double pairwise_formula_bytes(std::int64_t pairs, std::int64_t N,
                              std::int64_t M, int T) {
  double const per_pair = formula_bytes(false, 1, N, M, T);
  double const chunk = std::max(1.0, std::floor(256.0 * kMiB / per_pair));
  return formula_bytes(false, std::min(double(pairs), chunk), N, M, T);
}

// The specialised path's workspace (softwave/softdtw.hpp, Kernel), bytes,
// with its launches of at most 256 MiB.
double specialised_formula_bytes(bool backward, double pairs, std::int64_t N,
                                 std::int64_t M) {
  double const S = double((N + 31) / 32), blocks = double((M + 62) / 32);
  double per_pair = 8 * S * double(M);
  if (backward) per_pair += 4 * S * double(M) + 512 * S * blocks;
  double const chunk = std::max(1.0, std::floor(256.0 * kMiB / per_pair));
  return per_pair * std::min(pairs, chunk);
}

// ---------------------------------------------------------------------------

// x ~ N(0, 1), filled once on the execution space.
template <class T>
Series<T> random_series(const std::string& label, std::int64_t B,
                        std::int64_t N, std::int64_t d, std::uint64_t seed) {
  Series<T> v(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), B, N, d);
  softwave_bench::fill_normal(v, seed);
  return v;
}

template <class In>
void run_typed(benchmark::State& state, Kind kind, softwave::Kernel kernel) {
  Space const space;
  std::int64_t B1, B2, N, d;
  bool const on_costs = kind == Kind::cost || kind == Kind::cost_backward;
  if (kind == Kind::pairwise) {
    B1 = state.range(0);
    B2 = state.range(1);
    N = state.range(2);
    d = state.range(3);
  } else if (on_costs) {
    B1 = B2 = state.range(0);
    N = state.range(1);
    d = 0;
  } else {
    B1 = B2 = state.range(0);
    N = state.range(1);
    d = state.range(2);
  }
  std::int64_t const M = N;

  softwave::SoftDTWOptions options;
  options.gamma = g_gamma;
  options.tile = g_tile;
  options.kernel = kernel;
  options.check_values = g_checks;
  bool const specialised = kernel == softwave::Kernel::specialised;
  bool const backward =
      kind == Kind::forward_backward || kind == Kind::cost_backward;
  if (specialised && backward && g_gamma == 0) {
    state.SkipWithError(
        "hard DTW's gradients take the portable kernels (specialised: values)");
    return;
  }
  int const T = softwave::tile_size(space, options);

  // Inputs and outputs: allocated and initialised once, outside the timing.
  // The cost tensor takes the place of x (M columns per row).
  auto const x =
      random_series<In>(on_costs ? "softwave_bench::cost" : "softwave_bench::x",
                        B1, N, on_costs ? M : d, 12345);
  auto const y = on_costs
                     ? Series<In>()
                     : random_series<In>("softwave_bench::y", B2, M, d, 67890);
  Values values;
  Matrix matrix;
  softwave::SeriesGradients<In, Space> gradients;
  softwave::CostGradients<In, Space> cost_gradients;
  std::function<void()> call;
  double formula = 0;
  // Every kind but the all-pairs matrix writes one value per pair and has
  // the per-pair memory formula.
  if (kind != Kind::pairwise) {
    values = Values("softwave_bench::values", B1);
    formula = specialised
                  ? specialised_formula_bytes(backward, double(B1), N, M)
                  : formula_bytes(backward, double(B1), N, M, T);
  }
  switch (kind) {
    case Kind::forward:
      call = [&] { softwave::soft_dtw(space, x, y, values, options); };
      break;
    case Kind::forward_backward:
      gradients.grad_x = Series<In>("softwave_bench::grad_x", B1, N, d);
      gradients.grad_y = Series<In>("softwave_bench::grad_y", B1, M, d);
      call = [&] {
        softwave::soft_dtw_value_and_grad(space, x, y, values, gradients,
                                          options);
      };
      break;
    case Kind::pairwise:
      matrix = Matrix("softwave_bench::matrix", B1, B2);
      call = [&] { softwave::pairwise(space, x, y, matrix, options); };
      formula = specialised
                    ? specialised_formula_bytes(false, double(B1 * B2), N, M)
                    : pairwise_formula_bytes(B1 * B2, N, M, T);
      break;
    case Kind::cost:
      call = [&] { softwave::soft_dtw_cost(space, x, values, options); };
      break;
    case Kind::cost_backward:
      cost_gradients.grad_cost =
          Series<In>("softwave_bench::grad_cost", B1, N, M);
      call = [&] {
        softwave::soft_dtw_cost_value_and_grad(space, x, values, cost_gradients,
                                               options);
      };
      break;
  }
  space.fence();

  // One un-timed call: warm-up, and the allocation peak of one call.
  AllocationTracker::Peaks peaks;
  try {
    peaks = softwave_bench::measured_call(space, call);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }

  double const total_s = softwave_bench::timed_calls(state, space, call);

  double const pairs =
      kind == Kind::pairwise ? double(B1) * double(B2) : double(B1);
  double const cells = pairs * double(N) * double(M);
  double const iterations = double(state.iterations());
  double const mean_s = iterations > 0 ? total_s / iterations : 0;
  using benchmark::Counter;
  state.counters["cells_per_s"] =
      Counter(cells, Counter::kIsIterationInvariantRate);
  state.counters["ms"] = Counter(mean_s * 1e3);
  state.counters["peak_workspace_MB"] = Counter(double(peaks.workspace) / kMiB);
  state.counters["peak_all_MB"] = Counter(double(peaks.all) / kMiB);
  state.counters["formula_MB"] = Counter(formula / kMiB);
  state.counters["tile"] = Counter(T);
  if (auto const peer = peer_figure(kind, B1, N, d)) {
    state.counters["peer_ms"] = Counter(peer->ms);
    state.counters["peer_cells_per_s"] = Counter(peer->cells_per_s);
    state.counters["peer_B"] = Counter(peer->batch);
    if (mean_s > 0)
      state.counters["speedup_vs_peer"] =
          Counter(cells / mean_s / peer->cells_per_s);
    if (peer->peak_mb >= 0)
      state.counters["peer_peak_MB"] = Counter(peer->peak_mb);
    state.SetLabel("peer=" + peer->impl);
  }
}

void run_benchmark(benchmark::State& state, Kind kind,
                   softwave::Kernel kernel) {
  switch (g_input) {
    case Input::float32:
      return run_typed<float>(state, kind, kernel);
    case Input::bfloat16:
      return run_typed<softwave::bfloat16>(state, kind, kernel);
    case Input::float16:
      return run_typed<softwave::float16>(state, kind, kernel);
  }
}

benchmark::internal::Benchmark* configure(benchmark::internal::Benchmark* b) {
  // Iterations: Google Benchmark's default min time (0.5 s, or
  // --benchmark_min_time) on the manual time; the large CPU shapes take
  // seconds per call and so run one iteration (plus the un-timed call).
  return b->UseManualTime()->Unit(benchmark::kMillisecond);
}

void register_grid(Grid grid) {
  // (B, N, d): the peers' grid, then the GPU issue's large shapes.
  std::vector<std::vector<std::int64_t>> shapes;
  for (std::int64_t B : {16, 32})
    for (std::int64_t N : {128, 512, 1024, 2048})
      for (std::int64_t d : {1, 64}) shapes.push_back({B, N, d});
  std::int64_t pairwise_batch = 100;
  // (B, N) of the cost-tensor benchmarks: the (B, N, N) tensor is an input
  // (and grad_cost an output), so B·N² floats each; N = 2048 at B = 32 is
  // 512 MiB.
  std::vector<std::vector<std::int64_t>> cost_shapes = {{16, 128}, {16, 512}};
  if (grid == Grid::gpu) {
    cost_shapes = {{16, 128}, {32, 512}, {16, 1024}, {32, 1024}, {32, 2048}};
    shapes.push_back({32, 4096, 64});
    shapes.push_back({8, 8192, 16});
    shapes.push_back({1, 32768, 8});
    pairwise_batch = 1000;
  }
  std::vector<std::pair<softwave::Kernel, std::string>> kernels = {
      {softwave::Kernel::portable, ""}};
  if (kHasSpecialised)
    kernels.push_back({softwave::Kernel::specialised, "_specialised"});
  // On host backends the pair-parallel walks too (each thread walks whole
  // pairs, in SIMD lanes along anti-diagonals for γ > 0).
  if (kOnHost) kernels.push_back({softwave::Kernel::pairs, "_pairs"});
  for (auto const& [kernel, suffix] : kernels) {
    // Structured bindings are captured by init-capture: C++17 does not let
    // a lambda capture them directly (clang and hipcc refuse it).
    auto add = [&, kernel = kernel, suffix = suffix](const std::string& name,
                                                     Kind kind) {
      return configure(benchmark::RegisterBenchmark(
          (name + suffix).c_str(), [kind, kernel](benchmark::State& state) {
            run_benchmark(state, kind, kernel);
          }));
    };
    auto* forward = add("BM_Forward", Kind::forward);
    for (auto const& s : shapes) forward->Args(s);
    auto* backward = add("BM_ForwardBackward", Kind::forward_backward);
    for (auto const& s : shapes) backward->Args(s);
    add("BM_Pairwise", Kind::pairwise)
        ->Args({pairwise_batch, pairwise_batch, 128, 1});
    auto* cost = add("BM_CostForward", Kind::cost);
    for (auto const& s : cost_shapes) cost->Args(s);
    auto* cost_backward = add("BM_CostForwardBackward", Kind::cost_backward);
    for (auto const& s : cost_shapes) cost_backward->Args(s);
  }
}

// The value of `arg` if it is `--softwave_<name>=<value>`, else null.
const char* flag_value(const char* arg, const char* name) {
  static constexpr char kPrefix[] = "--softwave_";
  std::size_t const prefix = sizeof(kPrefix) - 1, length = std::strlen(name);
  if (std::strncmp(arg, kPrefix, prefix) != 0 ||
      std::strncmp(arg + prefix, name, length) != 0 ||
      arg[prefix + length] != '=')
    return nullptr;
  return arg + prefix + length + 1;
}

// Sets `out` to the value of `choices` whose name is `value`; false (with a
// message naming the flag and its choices) when none is.
template <class T, std::size_t N>
bool choose(const char* flag, const std::string& value,
            const std::pair<const char*, T> (&choices)[N], T& out) {
  for (auto const& [name, choice] : choices)
    if (value == name) {
      out = choice;
      return true;
    }
  std::cerr << "softwave_bench: --softwave_" << flag << " must be";
  for (std::size_t k = 0; k < N; ++k)
    std::cerr << (k == 0       ? " "
                  : k + 1 == N ? " or "
                               : ", ")
              << choices[k].first;
  std::cerr << " (got '" << value << "')\n";
  return false;
}

// Removes --softwave_grid=cpu|gpu, --softwave_tile=T (0: the library's
// choice; to compare tile sizes in one run), --softwave_gamma=G (γ >= 0),
// --softwave_checks=on|off (the
// data checks, one fence per call; off as in the torch front end on CUDA)
// --softwave_input=float32|bfloat16|float16 and --softwave_warps=F,B (CUDA)
// from argv; false on a bad value.
bool take_softwave_flags(int& argc, char** argv, Grid& grid, int& tile,
                         bool& checks, Input& input) {
  static constexpr std::pair<const char*, Grid> kGrids[] = {{"cpu", Grid::cpu},
                                                            {"gpu", Grid::gpu}};
  static constexpr std::pair<const char*, bool> kChecks[] = {{"on", true},
                                                             {"off", false}};
  static constexpr std::pair<const char*, Input> kInputs[] = {
      {"float32", Input::float32},
      {"bfloat16", Input::bfloat16},
      {"float16", Input::float16}};
  int kept = 1;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    if (const char* value = flag_value(argv[i], "grid")) {
      ok = choose("grid", value, kGrids, grid) && ok;
    } else if (const char* value = flag_value(argv[i], "checks")) {
      ok = choose("checks", value, kChecks, checks) && ok;
    } else if (const char* value = flag_value(argv[i], "input")) {
      ok = choose("input", value, kInputs, input) && ok;
    } else if (const char* value = flag_value(argv[i], "warps")) {
      char tail = 0;
      if (!kHasSpecialised ||
          std::sscanf(value, "%d,%d%c", &g_forward_warps, &g_backward_warps,
                      &tail) != 2 ||
          g_forward_warps < 0 || g_forward_warps > 2 || g_backward_warps < 0 ||
          g_backward_warps > 2) {
        std::cerr << "softwave_bench: --softwave_warps must be F,B with F, B "
                     "in 0, 1, 2, on CUDA (got '"
                  << value << "')\n";
        ok = false;
      }
    } else if (const char* value = flag_value(argv[i], "gamma")) {
      char* end = nullptr;
      g_gamma = std::strtod(value, &end);
      if (end == value || *end != 0 || !(g_gamma >= 0) ||
          !std::isfinite(g_gamma)) {
        std::cerr << "softwave_bench: --softwave_gamma must be a number >= 0 "
                     "(got '"
                  << value << "')\n";
        ok = false;
      }
    } else if (const char* value = flag_value(argv[i], "tile")) {
      tile = std::atoi(value);
      if (tile < 0) {
        std::cerr << "softwave_bench: --softwave_tile must be >= 0\n";
        ok = false;
      }
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (!take_softwave_flags(argc, argv, g_grid, g_tile, g_checks, g_input))
    return 2;
  Kokkos::initialize(argc, argv);  // strips --kokkos-* flags
  int rc = 0;
  {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) {
      rc = 1;
    } else {
      Space const space;
      benchmark::AddCustomContext("softwave_grid",
                                  g_grid == Grid::gpu ? "gpu" : "cpu");
      benchmark::AddCustomContext("kokkos_execution_space", Space::name());
      benchmark::AddCustomContext("kokkos_concurrency",
                                  std::to_string(space.concurrency()));
      benchmark::AddCustomContext("softwave_checks", g_checks ? "on" : "off");
      benchmark::AddCustomContext("softwave_gamma", std::to_string(g_gamma));
      benchmark::AddCustomContext("softwave_input",
                                  g_input == Input::float32    ? "float32"
                                  : g_input == Input::bfloat16 ? "bfloat16"
                                                               : "float16");
      benchmark::AddCustomContext("kokkos_version",
                                  std::to_string(KOKKOS_VERSION));
      benchmark::AddCustomContext(
          "softwave_tile",
          std::to_string(softwave::tile_size(
              space, softwave::SoftDTWOptions{1.0, softwave::Cost::sqeuclidean,
                                              std::nullopt, g_tile})));
#if defined(KOKKOS_ENABLE_CUDA)
      softwave::impl::cuda_fused::set_kernel_warps(g_forward_warps,
                                                   g_backward_warps);
#endif
      benchmark::AddCustomContext("softwave_warps",
                                  std::to_string(g_forward_warps) + "," +
                                      std::to_string(g_backward_warps));
      register_grid(g_grid);
      softwave_bench::register_sinkhorn(g_grid == Grid::gpu, g_checks);
      softwave_bench::register_sampled_gw(g_grid == Grid::gpu);
      softwave_bench::register_deer(g_grid == Grid::gpu);
      softwave_bench::register_linear_recurrence(g_grid == Grid::gpu);
      benchmark::RunSpecifiedBenchmarks();
      if (!AllocationTracker::other_labels().empty()) {
        std::cerr << "softwave_bench: allocations outside \"softwave::*\" seen "
                     "during the tracked calls (counted in peak_all_MB only):";
        for (auto const& label : AllocationTracker::other_labels())
          std::cerr << " '" << label << "'";
        std::cerr << "\n";
      }
    }
    benchmark::Shutdown();
  }
  Kokkos::finalize();
  return rc;
}
