// The sampled-GW benchmarks of softwave_bench (registered by its main in
// bench_softdtw.cpp, on the same grid flags):
//
//   BM_SampledGw/N/K  TorchGW's scale task: spiral (N points) → Swiss roll
//                     (K points) as tests/reference/gw_reference.hpp makes
//                     them, landmark mode (5-NN graphs, 50 farthest-point
//                     landmarks), ε = 0.005, M = 80 anchors, α = 0.9, at
//                     most 300 iterations (the default relative
//                     tolerance, 0.05, from 50 on),
//                     float32, seed 0. The time includes the graphs and
//                     the landmark embeddings, as TorchGW's does.
//   BM_SampledGw_fp32_products/N/K  the same with mixed_precision off (the
//                     low-rank solves' products in FP32 FMAs, not TF32).
//   BM_CosineGw/N     matching embeddings by their cosine distances
//                     (perf/bench_gw_cosine.py's task: N points of rank-8
//                     structure plus noise in 64 dimensions, and a rotated,
//                     10 % noisy, shuffled copy), GwSide's cosine mode (each
//                     solve's cost exact, of rank 66), ε = 0.005, defaults
//                     otherwise, float32, seed 0; the time includes making
//                     the unit vectors. Counter precision_at_1: the share of
//                     points whose plan row peaks at their counterpart.
//   BM_ShortestPaths_host/N/S and BM_ShortestPaths_device/N/S
//                     graph_distances on the 5-NN graph of TorchGW's spiral
//                     of N points (built beforehand), from S sources spread
//                     evenly, with Dijkstra on the host or the device
//                     method: S = 80 is one iteration's anchors in
//                     dijkstra mode, S = N the geodesic mode's matrix.
//   BM_Landmarks_host/N and BM_Landmarks_device/N
//                     landmark_embedding of that graph with 50 landmarks
//                     (one run after another), by either method.
//                     Counters: ms; edges, the graph's (each listed from
//                     both ends).
//
// With SOFTWAVE_BENCH_KERNEL_TIMES=1 in the environment, the timed call also
// prints where its time went: each kernel label's total and each profiling
// region's (the CUDA-specialised Sinkhorn updates are regions, not Kokkos
// kernels), the instance fenced around every kernel and region, so the
// sums are a breakdown, not the ms above.
// SOFTWAVE_BENCH_GW_TOLERANCE, _SINKHORN_ITERATIONS, _ANCHORS, _EPSILON,
// _MAX_ITERATIONS, _RESTARTS, _RESTART_ITERATIONS (a race, as
// GwOptions::restart_iterations), _EXACT_ITERATIONS, _SEED,
// _MIXED_PRECISION (0 or 1),
// _DENSE_COST_ENTRIES and _COUPLING_RANK (low-rank couplings, as
// sampled_lowrank_gw) replace those options (for choosing defaults; in
// BM_CosineGw too); SOFTWAVE_BENCH_GW_SIZES="NxK,NxK,..."
// replaces the GPU grid's sizes; SOFTWAVE_BENCH_GW_OBJECTIVE=1 computes the
// objective too (estimated from drawn pairs above 2^24 entries) and reports
// it and its standard error; SOFTWAVE_BENCH_GW_TRACE=1 prints every check's
// relative change; SOFTWAVE_BENCH_GW_TF32=1 runs the CUDA tensor-core
// products on TF32 operands instead of scaled FP16 (set_tensor_operands);
// SOFTWAVE_BENCH_GW_ROW_TILES=1 or 2 sets the 16-row tiles each warp of
// their kernel owns (set_tensor_row_tiles; unset: the library's choice);
// SOFTWAVE_BENCH_GW_DEVICE_PATHS=1 finds the graphs' shortest paths (the
// landmark embeddings') with ShortestPaths::device.
//
// Counters: ms; iterations; rho, the signed Spearman correlation of the
// row-argmax matching with the right (increasing) one, 1 for the forward
// matching and −1 for the reversed one; peak_workspace_MB (the plan is
// never N×K: the objective is not computed here, it would be);
// shortcut_edges, the graphs' edges between points whose angles differ by
// more than π: only a noise outlier makes one, and it makes the geodesics
// cut across the spiral's arms, so that the increasing matching ρ measures
// against is no longer the GW optimum (the Swiss roll of 50,000 points has
// one: point 1181 lies 0.11 from point 35435, an arm further out).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <random>
#include <softwave/graph.hpp>
#include <softwave/gw.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "reference/gw_reference.hpp"
#if defined(KOKKOS_ENABLE_CUDA)
#include "sinkhorn/updates.hpp"  // set_tensor_operands, _row_tiles
#endif

namespace softwave_bench {
namespace {

softwave::OTView2<float, Space> device_points(const std::vector<double>& x,
                                              std::int64_t n, int dim,
                                              const char* label) {
  softwave::OTView2<float, Space> view(std::string(label), n, dim);
  auto host = Kokkos::create_mirror_view(view);
  for (std::int64_t i = 0; i < n; ++i)
    for (int e = 0; e < dim; ++e) host(i, e) = float(x[i * dim + e]);
  Kokkos::deep_copy(view, host);
  return view;
}

// Per-label kernel times through Kokkos' tool callbacks, while alive.
class KernelTimes {
 public:
  KernelTimes() {
    saved_ = Kokkos::Tools::Experimental::get_callbacks();
    Kokkos::Tools::Experimental::set_begin_parallel_for_callback(&begin);
    Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(&begin);
    Kokkos::Tools::Experimental::set_begin_parallel_scan_callback(&begin);
    Kokkos::Tools::Experimental::set_end_parallel_for_callback(&end);
    Kokkos::Tools::Experimental::set_end_parallel_reduce_callback(&end);
    Kokkos::Tools::Experimental::set_end_parallel_scan_callback(&end);
    Kokkos::Tools::Experimental::set_push_region_callback(&push);
    Kokkos::Tools::Experimental::set_pop_region_callback(&pop);
    totals().clear();
    regions().clear();
  }
  ~KernelTimes() {
    Kokkos::Tools::Experimental::set_callbacks(saved_);
    print("kernel", totals());
    print("region", regions());
  }

 private:
  using Clock = std::chrono::steady_clock;
  using Totals = std::map<std::string, std::pair<double, long>>;
  static void print(const char* what, const Totals& totals) {
    std::vector<std::pair<double, std::string>> rows;
    double sum = 0;
    for (auto const& [label, t] : totals) {
      rows.push_back({t.first, label + " (" + std::to_string(t.second) + ")"});
      sum += t.first;
    }
    std::sort(rows.rbegin(), rows.rend());
    std::printf("%s times, ms (calls), %.1f ms in all:\n", what, 1e3 * sum);
    for (auto const& [t, label] : rows)
      if (t > 1e-3 * sum) std::printf("  %10.2f  %s\n", 1e3 * t, label.c_str());
  }
  static Totals& totals() {
    static Totals t;
    return t;
  }
  static Totals& regions() {
    static Totals t;
    return t;
  }
  static std::vector<std::pair<std::string, Clock::time_point>>& open() {
    static std::vector<std::pair<std::string, Clock::time_point>> o;
    return o;
  }
  static void push(const char* name) {
    Kokkos::fence();
    open().push_back({name, Clock::now()});
  }
  static void pop() {
    Kokkos::fence();
    if (open().empty()) return;
    auto const [name, at] = open().back();
    open().pop_back();
    auto& t = regions()[name];
    t.first += std::chrono::duration<double>(Clock::now() - at).count();
    ++t.second;
  }
  static std::string& current() {
    static std::string name;
    return name;
  }
  static Clock::time_point& started() {
    static Clock::time_point t;
    return t;
  }
  static void begin(const char* name, std::uint32_t, std::uint64_t*) {
    Kokkos::fence();
    current() = name;
    started() = Clock::now();
  }
  static void end(std::uint64_t) {
    Kokkos::fence();
    auto& t = totals()[current()];
    t.first += std::chrono::duration<double>(Clock::now() - started()).count();
    ++t.second;
  }
  Kokkos::Tools::Experimental::EventSet saved_;
};

// The call's peak memory and time (into peaks and total_s), and with
// SOFTWAVE_BENCH_KERNEL_TIMES its breakdown; false (the benchmark skipped
// with the error) where it threw.
template <class Call>
bool measure(benchmark::State& state, const Space& space, const Call& call,
             softwave_tools::AllocationTracker::Peaks& peaks, double& total_s) {
  try {
    peaks = measured_call(space, call);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return false;
  }
  total_s = timed_calls(state, space, call);
  if (std::getenv("SOFTWAVE_BENCH_KERNEL_TIMES")) {
    KernelTimes const times;
    call();
    space.fence();
  }
  return true;
}

// The options the environment replaces (the header says which).
void options_from_environment(softwave::GwOptions& options) {
  if (char const* tolerance = std::getenv("SOFTWAVE_BENCH_GW_TOLERANCE"))
    options.tolerance = std::atof(tolerance);
  if (char const* its = std::getenv("SOFTWAVE_BENCH_GW_SINKHORN_ITERATIONS"))
    options.sinkhorn_iterations = std::atoi(its);
  if (char const* anchors = std::getenv("SOFTWAVE_BENCH_GW_ANCHORS"))
    options.anchors = std::atoi(anchors);
  if (char const* epsilon = std::getenv("SOFTWAVE_BENCH_GW_EPSILON"))
    options.epsilon = std::atof(epsilon);
  if (char const* mixed = std::getenv("SOFTWAVE_BENCH_GW_MIXED_PRECISION"))
    options.mixed_precision = std::atoi(mixed) != 0;
  if (char const* its = std::getenv("SOFTWAVE_BENCH_GW_MAX_ITERATIONS"))
    options.max_iterations = std::atoi(its);
  if (char const* restarts = std::getenv("SOFTWAVE_BENCH_GW_RESTARTS"))
    options.restarts = std::atoi(restarts);
  if (char const* its = std::getenv("SOFTWAVE_BENCH_GW_RESTART_ITERATIONS"))
    options.restart_iterations = std::atoi(its);
  if (char const* its = std::getenv("SOFTWAVE_BENCH_GW_EXACT_ITERATIONS"))
    options.exact_iterations = std::atoi(its);
  if (char const* anchors = std::getenv("SOFTWAVE_BENCH_GW_POLISH_ANCHORS"))
    options.polish_anchors = std::atoi(anchors);
  if (char const* seed = std::getenv("SOFTWAVE_BENCH_GW_SEED"))
    options.seed = std::strtoull(seed, nullptr, 10);
  if (char const* entries = std::getenv("SOFTWAVE_BENCH_GW_DENSE_COST_ENTRIES"))
    options.dense_cost_entries = std::atoll(entries);
  if (char const* rank = std::getenv("SOFTWAVE_BENCH_GW_COUPLING_RANK"))
    options.coupling_rank = std::atoi(rank);
  if (char const* device = std::getenv("SOFTWAVE_BENCH_GW_DEVICE_PATHS"))
    if (std::atoi(device) != 0)
      options.shortest_paths = softwave::ShortestPaths::device;
#if defined(KOKKOS_ENABLE_CUDA)
  namespace cs = softwave::impl::cuda_sinkhorn;
  char const* tf32 = std::getenv("SOFTWAVE_BENCH_GW_TF32");
  cs::set_tensor_operands(tf32 && std::atoi(tf32) ? cs::TensorOperands::tf32
                                                  : cs::TensorOperands::fp16);
  char const* tiles = std::getenv("SOFTWAVE_BENCH_GW_ROW_TILES");
  cs::set_tensor_row_tiles(tiles ? std::atoi(tiles) : 0);
#endif
}

void run_sampled_gw(benchmark::State& state, bool mixed_precision) {
  Space const space;
  std::int64_t const n = state.range(0), k = state.range(1);
  int const neighbours = 5, landmarks = 50;
  auto const x = device_points(softwave_ref::spiral(int(n), 0, false), n, 2,
                               "softwave_bench::spiral");
  auto const y = device_points(softwave_ref::spiral(int(k), 1, true), k, 3,
                               "softwave_bench::swiss_roll");
  softwave::OTView2<float, Space> zx("softwave_bench::zx", n, landmarks);
  softwave::OTView2<float, Space> zy("softwave_bench::zy", k, landmarks);
  softwave::GwOptions options;
  options.anchors = 80;
  options.epsilon = 0.005;
  options.max_iterations = 300;
  options.mixed_precision = mixed_precision;
  options_from_environment(options);
  bool const objective = std::getenv("SOFTWAVE_BENCH_GW_OBJECTIVE") != nullptr;
  auto const paths = options.shortest_paths;
  softwave::GwResult<float, Space> result;
  result.compute_objective = objective;
  result.matching =
      softwave::OTView1<int, Space>("softwave_bench::matching", n);
  auto const call = [&] {
    auto const gx = softwave::knn_graph(
        space, softwave::OTView2<const float, Space>(x), neighbours);
    auto const gy = softwave::knn_graph(
        space, softwave::OTView2<const float, Space>(y), neighbours);
    softwave::landmark_embedding(space, gx, zx, paths);
    softwave::landmark_embedding(space, gy, zy, paths);
    softwave::sampled_gw(space, softwave::GwDistances<float, Space>{{}, zx},
                         softwave::GwDistances<float, Space>{{}, zy}, {},
                         result, options);
  };
  softwave_tools::AllocationTracker::Peaks peaks;
  double total_s = 0;
  if (!measure(state, space, call, peaks, total_s)) return;
  if (std::getenv("SOFTWAVE_BENCH_GW_TRACE")) {
    std::printf("BM_SampledGw/%lld/%lld tolerance %g changes:", (long long)n,
                (long long)k, options.tolerance);
    for (double c : result.changes) std::printf(" %.3g", c);
    std::printf("\n");
  }
  auto const shortcut_edges = [&](const softwave::Graph& graph) {
    std::int64_t const count = graph.nodes();
    long edges = 0;
    for (std::int64_t i = 0; i < count; ++i)
      for (auto e = graph.offsets[i]; e < graph.offsets[i + 1]; ++e)
        edges +=
            9.0 * double(std::abs(i - graph.targets[e])) / double(count - 1) >
            M_PI;
    return edges / 2;  // each edge is listed from both ends
  };
  long const shortcuts =
      shortcut_edges(softwave::knn_graph(
          space, softwave::OTView2<const float, Space>(x), neighbours)) +
      shortcut_edges(softwave::knn_graph(
          space, softwave::OTView2<const float, Space>(y), neighbours));
  auto const matching =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), result.matching);
  std::vector<int> m(matching.data(), matching.data() + n);
  using benchmark::Counter;
  state.counters["ms"] = Counter(
      state.iterations() ? 1e3 * total_s / double(state.iterations()) : 0);
  state.counters["iterations"] = Counter(result.iterations);
  state.counters["polish_anchors"] = Counter(result.polish_anchors);
  state.counters["rho"] = Counter(softwave_ref::spearman(m));
  state.counters["peak_workspace_MB"] = Counter(double(peaks.workspace) / kMiB);
  state.counters["shortcut_edges"] = Counter(double(shortcuts));
  if (objective) {
    state.counters["objective"] = Counter(result.objective);
    state.counters["objective_error"] = Counter(result.objective_error);
  }
}

// The cosine task: source rows Z = A·B + 0.3·E (n × 64, A: n × 8, B: 8 ×
// 64, E standard normal), target rows Z·Q + 0.1·std(Z)·E' (Q a rotation)
// in a shuffled order; `counterpart[i]` is the target row of source row i.
struct CosineTask {
  std::vector<double> source, target;
  std::vector<int> counterpart;
  static constexpr int dim = 64, rank = 8;
  explicit CosineTask(std::int64_t n) : source(n * dim), target(n * dim) {
    std::mt19937_64 engine(0);
    std::normal_distribution<double> normal;
    std::vector<double> a(n * rank), b(rank * dim), q(dim * dim);
    for (double& e : a) e = normal(engine);
    for (double& e : b) e = normal(engine);
    double sum = 0, squares = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (int c = 0; c < dim; ++c) {
        double z = 0.3 * normal(engine);
        for (int r = 0; r < rank; ++r) z += a[i * rank + r] * b[r * dim + c];
        source[i * dim + c] = z;
        sum += z;
        squares += z * z;
      }
    double const spread = std::sqrt(squares / double(n * dim) -
                                    std::pow(sum / double(n * dim), 2));
    for (double& e : q) e = normal(engine);
    softwave_ref::orthonormalise_rows(q, dim);
    std::vector<int> order(n);
    for (std::int64_t i = 0; i < n; ++i) order[i] = int(i);
    std::shuffle(order.begin(), order.end(), engine);
    counterpart.resize(n);
    for (std::int64_t row = 0; row < n; ++row) {
      std::int64_t const i = order[row];
      counterpart[i] = int(row);
      for (int c = 0; c < dim; ++c) {
        double y = 0.1 * spread * normal(engine);
        for (int r = 0; r < dim; ++r) y += source[i * dim + r] * q[r * dim + c];
        target[row * dim + c] = y;
      }
    }
  }
};

void run_cosine_gw(benchmark::State& state) {
  Space const space;
  std::int64_t const n = state.range(0);
  CosineTask const task(n);
  auto const x = device_points(task.source, n, CosineTask::dim,
                               "softwave_bench::cosine_source");
  auto const y = device_points(task.target, n, CosineTask::dim,
                               "softwave_bench::cosine_target");
  softwave::GwOptions options;
  options.epsilon = 0.005;
  options_from_environment(options);
  bool const objective = std::getenv("SOFTWAVE_BENCH_GW_OBJECTIVE") != nullptr;
  softwave::GwResult<float, Space> result;
  result.compute_objective = objective;
  result.matching =
      softwave::OTView1<int, Space>("softwave_bench::matching", n);
  using Mode = softwave::GwDistanceMode;
  auto const call = [&] {
    softwave::GwSide<float, Space> const source(
        space, softwave::OTView2<const float, Space>(x), Mode::cosine);
    softwave::GwSide<float, Space> const target(
        space, softwave::OTView2<const float, Space>(y), Mode::cosine);
    softwave::sampled_gw(space, source.distances(), target.distances(), {},
                         result, options);
  };
  softwave_tools::AllocationTracker::Peaks peaks;
  double total_s = 0;
  if (!measure(state, space, call, peaks, total_s)) return;
  auto const matching =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), result.matching);
  std::int64_t found = 0;
  for (std::int64_t i = 0; i < n; ++i)
    found += matching(i) == task.counterpart[i];
  using benchmark::Counter;
  state.counters["ms"] = Counter(
      state.iterations() ? 1e3 * total_s / double(state.iterations()) : 0);
  state.counters["iterations"] = Counter(result.iterations);
  state.counters["precision_at_1"] = Counter(double(found) / double(n));
  state.counters["peak_workspace_MB"] = Counter(double(peaks.workspace) / kMiB);
  if (objective) {
    state.counters["objective"] = Counter(result.objective);
    state.counters["objective_error"] = Counter(result.objective_error);
  }
}

// The spiral's 5-NN graph of n points, float32 coordinates.
softwave::Graph spiral_graph(const Space& space, std::int64_t n) {
  auto const x = device_points(softwave_ref::spiral(int(n), 0, false), n, 2,
                               "softwave_bench::spiral");
  return softwave::knn_graph(space, softwave::OTView2<const float, Space>(x),
                             5);
}

void run_shortest_paths(benchmark::State& state,
                        softwave::ShortestPaths method) {
  Space space;
  std::int64_t const n = state.range(0), count = state.range(1);
  auto const graph = spiral_graph(space, n);
  std::vector<int> sources(count);
  for (std::int64_t c = 0; c < count; ++c) sources[c] = int(c * n / count);
  softwave::OTView2<float, Space> distances("softwave_bench::distances", n,
                                            count);
  auto const call = [&] {
    softwave::graph_distances(space, graph, sources, distances, method);
  };
  softwave_tools::AllocationTracker::Peaks peaks;
  double total_s = 0;
  if (!measure(state, space, call, peaks, total_s)) return;
  state.counters["ms"] = 1e3 * total_s / double(state.iterations());
  state.counters["edges"] = double(graph.targets.size());
}

void run_landmarks(benchmark::State& state, softwave::ShortestPaths method) {
  Space space;
  std::int64_t const n = state.range(0);
  auto const graph = spiral_graph(space, n);
  softwave::OTView2<float, Space> embedding("softwave_bench::embedding", n, 50);
  auto const call = [&] {
    softwave::landmark_embedding(space, graph, embedding, method);
  };
  softwave_tools::AllocationTracker::Peaks peaks;
  double total_s = 0;
  if (!measure(state, space, call, peaks, total_s)) return;
  state.counters["ms"] = 1e3 * total_s / double(state.iterations());
  state.counters["edges"] = double(graph.targets.size());
}

}  // namespace

void register_sampled_gw(bool gpu) {
  std::vector<std::pair<std::int64_t, std::int64_t>> sizes;
  if (gpu)
    sizes = {{4000, 5000},
             {10000, 12000},
             {20000, 25000},
             {30000, 35000},
             {40000, 50000}};
  else
    sizes = {{400, 500}, {2000, 2500}};
  if (char const* list =
          gpu ? std::getenv("SOFTWAVE_BENCH_GW_SIZES") : nullptr) {
    sizes.clear();
    long long n = 0, k = 0;
    int used = 0;
    for (char const* at = list;
         std::sscanf(at, "%lldx%lld%n", &n, &k, &used) == 2; at += used) {
      sizes.push_back({n, k});
      if (at[used] == ',') ++used;
    }
  }
  auto add = [](const char* name, std::int64_t n, std::int64_t k,
                bool mixed_precision) {
    benchmark::RegisterBenchmark(name,
                                 [mixed_precision](benchmark::State& state) {
                                   run_sampled_gw(state, mixed_precision);
                                 })
        ->Args({n, k})
        ->UseManualTime()
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  };
  for (auto const& s : sizes) add("BM_SampledGw", s.first, s.second, true);
  if (gpu) add("BM_SampledGw_fp32_products", 10000, 12000, false);
  std::vector<std::int64_t> cosine_sizes =
      gpu ? std::vector<std::int64_t>{1000, 5000, 20000, 50000}
          : std::vector<std::int64_t>{300, 1000};
  if (char const* list =
          gpu ? std::getenv("SOFTWAVE_BENCH_GW_COSINE_SIZES") : nullptr) {
    cosine_sizes.clear();
    for (char const* at = list; *at;) {
      char* end = nullptr;
      long long const n = std::strtoll(at, &end, 10);
      if (end == at) break;
      cosine_sizes.push_back(n);
      at = *end == ',' ? end + 1 : end;
    }
  }
  for (std::int64_t n : cosine_sizes)
    benchmark::RegisterBenchmark("BM_CosineGw", run_cosine_gw)
        ->Args({n})
        ->UseManualTime()
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  using softwave::ShortestPaths;
  for (auto const& [suffix, method] :
       {std::pair{"host", ShortestPaths::host_dijkstra},
        std::pair{"device", ShortestPaths::device}}) {
    auto const paths = std::string("BM_ShortestPaths_") + suffix;
    auto const shapes =
        gpu ? std::vector<std::pair<std::int64_t, std::int64_t>>{{50000, 1},
                                                                 {50000, 80},
                                                                 {250000, 80},
                                                                 {5000, 5000},
                                                                 {20000, 20000}}
            : std::vector<std::pair<std::int64_t, std::int64_t>>{
                  {5000, 1}, {5000, 80}, {2000, 2000}};
    for (auto const& [n, count] : shapes)
      benchmark::RegisterBenchmark(paths.c_str(),
                                   [method = method](benchmark::State& state) {
                                     run_shortest_paths(state, method);
                                   })
          ->Args({n, count})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    auto const landmarks = std::string("BM_Landmarks_") + suffix;
    for (std::int64_t n :
         gpu ? std::vector<std::int64_t>{50000, 250000, 1000000}
             : std::vector<std::int64_t>{5000})
      benchmark::RegisterBenchmark(landmarks.c_str(),
                                   [method = method](benchmark::State& state) {
                                     run_landmarks(state, method);
                                   })
          ->Args({n})
          ->UseManualTime()
          ->Iterations(1)
          ->Unit(benchmark::kMillisecond);
  }
}

}  // namespace softwave_bench
