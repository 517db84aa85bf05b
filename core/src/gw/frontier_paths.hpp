#pragma once
// Shortest paths on the execution-space instance (ShortestPaths::device of
// softwave/graph.hpp), for graph_distances, landmark_embedding and the
// graph sides of sampled GW, which keep one across iterations.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <softwave/errors.hpp>
#include <softwave/graph.hpp>
#include <softwave/kokkos_compat.hpp>
#include <vector>

#include "plan_terms.hpp"

namespace softwave::impl {

// A compressed-row graph with what shortest paths need: targets that are
// nodes, lengths finite and >= 0.
inline void check_graph(const Graph& graph) {
  if (graph.nodes() < 1 || graph.offsets.front() != 0 ||
      std::int64_t(graph.targets.size()) != graph.offsets.back() ||
      graph.lengths.size() != graph.targets.size())
    throw_invalid_argument(
        "graph is not a compressed-row graph (offsets N + 1 from 0, targets "
        "and lengths offsets[N] each)");
  std::int64_t const n = graph.nodes();
  for (std::int64_t i = 0; i < n; ++i)
    if (graph.offsets[i + 1] < graph.offsets[i])
      throw_invalid_argument("graph offsets decrease at node ", i);
  for (std::size_t e = 0; e < graph.targets.size(); ++e) {
    if (graph.targets[e] < 0 || graph.targets[e] >= n)
      throw_invalid_argument("graph targets[", e, "] = ", graph.targets[e],
                             " is not a node (N = ", n, ")");
    // (Negative lengths have no shortest paths; NaN has no order.)
    if (!(graph.lengths[e] >= 0) || !std::isfinite(graph.lengths[e]))
      throw_invalid_argument("graph lengths[", e, "] = ", graph.lengths[e],
                             ": edge lengths must be finite and >= 0");
  }
}

// Below this many sources at a time `automatic` runs Dijkstra on the host:
// the device method runs a source a team, so a few runs leave a GPU idle
// while each walks its rounds. On an H200 against 16 host threads, the 5-NN
// graph of TorchGW's spiral (perf/RESULTS.md): 50,000 nodes, 1 source
// 35.8 ms against 11.3 ms, 80 sources 39.8 against 72.2 ms; 250,000 nodes,
// 80 sources 417 against 509 ms; 5,000 × 5,000 27.6 against 339 ms.
constexpr std::int64_t kDeviceSources = 64;

// Whether `method` runs on the instance for `sources` sources at a time
// (automatic: on a device from kDeviceSources on, else Dijkstra on the
// host).
template <class Space>
bool runs_on_device(ShortestPaths method, std::int64_t sources) {
  if (method != ShortestPaths::automatic)
    return method == ShortestPaths::device;
  bool const device =
      !Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                  typename Space::memory_space>::accessible;
  return device && sources >= kDeviceSources;
}

// Lowers *target to value if value is smaller; whether it did.
KOKKOS_INLINE_FUNCTION bool lower_to(double* target, double value) {
  double seen = *static_cast<volatile double*>(target);
  while (value < seen) {
    double const was = Kokkos::atomic_compare_exchange(target, seen, value);
    if (was == seen) return true;
    seen = was;
  }
  return false;
}

// Shortest paths on the execution-space instance: the graph copied there
// once, and room for `chunk` runs at a time, each by one team.
//
// A run is a label-correcting method with a near-far split (Bellman–Ford on
// a work list, kept close to Dijkstra's order): each round relaxes the
// edges of the near list, the nodes whose distance fell below a threshold
// in the last round; a node whose distance falls to the threshold or above
// waits in the far list. When no node is near, the threshold moves to the
// smallest waiting distance plus a step, and the far nodes below it become
// near. Distances only fall and every fall is passed on, so the run ends at
// the least fixed point, Dijkstra's distances. On k-NN graphs of a few
// thousand to 50,000 points of TorchGW's spiral (simulated), a step of 16
// mean edge lengths relaxes each node 1.2–1.4 times where a plain work list
// does it 4–23 times, in about twice as many rounds.
template <class Space>
class FrontierPaths {
 public:
  using Memory = typename Space::memory_space;
  using Policy = Kokkos::TeamPolicy<Space>;
  using Member = typename Policy::member_type;
  // Work space of a run: a distance, two flags and four list slots a node.
  static constexpr std::int64_t kBytesPerNode = sizeof(double) + 6 * 4;
  static constexpr std::int64_t kWorkBytes = std::int64_t(256) << 20;
  static constexpr double kStepEdges = 16;

  // `graph` must have passed check_graph.
  FrontierPaths(const Space& space, const Graph& graph, std::int64_t runs)
      : n_(graph.nodes()),
        offsets_(on_device(space, graph.offsets, "softwave::graph::offsets")),
        targets_(on_device(space, graph.targets, "softwave::graph::targets")),
        lengths_(on_device(space, graph.lengths, "softwave::graph::lengths")) {
    std::int64_t const chunk = std::clamp<std::int64_t>(
        kWorkBytes / (kBytesPerNode * n_), 1, std::max<std::int64_t>(runs, 1));
    distance = uninitialised<double**>(space, "softwave::graph::run_distances",
                                       chunk, n_);
    flags_ = uninitialised<int***>(space, "softwave::graph::run_flags", chunk,
                                   2, n_);
    lists_ = uninitialised<int***>(space, "softwave::graph::run_lists", chunk,
                                   4, n_);
    sizes_ = uninitialised<int**>(space, "softwave::graph::run_list_sizes",
                                  chunk, 4);
    sources_ =
        uninitialised<int*>(space, "softwave::graph::run_sources", chunk);
    sources_host_ =
        compat::host_mirror("softwave::graph::run_sources_host", sources_);
    double total = 0;
    for (double length : graph.lengths) total += length;
    step_ = kStepEdges * total /
            double(std::max<std::size_t>(1, graph.lengths.size()));
    // (Zero-length edges only: one list, no threshold.)
    if (!(step_ > 0)) step_ = compat::infinity<double>();
  }

  std::int64_t chunk() const { return distance.extent(0); }

  // out(i, s) = the path length from sources[s] to node i, (N, S), a chunk
  // of runs at a time.
  template <class T>
  void compute(const Space& space, const std::vector<int>& sources,
               const OTView2<T, Space>& out) {
    std::int64_t const count = sources.size();
    for (std::int64_t first = 0; first < count; first += chunk()) {
      run(space, sources, first);
      std::int64_t const width = std::min(chunk(), count - first);
      Kokkos::parallel_for("softwave::graph::distances",
                           Kokkos::RangePolicy<Space>(space, 0, n_ * width),
                           RunsOut<T>{distance, out, width, first});
    }
  }

  // distance(c, i) = the path length from sources[first + c] to node i, for
  // c < min(chunk(), S - first).
  void run(const Space& space, const std::vector<int>& sources,
           std::int64_t first) {
    int const width = int(
        std::min<std::int64_t>(chunk(), std::int64_t(sources.size()) - first));
    space.fence();  // the last run's sources have been read
    for (int c = 0; c < width; ++c) sources_host_(c) = sources[first + c];
    Kokkos::deep_copy(space, sources_, sources_host_);
    Rounds const kernel{distance, flags_,   lists_,   sizes_, sources_,
                        offsets_, targets_, lengths_, n_,     step_};
    Policy const probe(space, width, 1);
    int const team_size = std::min(
        kTeamSize, probe.team_size_max(kernel, Kokkos::ParallelForTag()));
    Kokkos::parallel_for("softwave::graph::frontier_paths",
                         Policy(space, width, team_size), kernel);
  }

  template <class Data>
  using Array = Kokkos::View<Data, Kokkos::LayoutRight, Memory>;
  Array<double**> distance;

  // (The kernels' functors are public: nvcc's launch stubs name them
  // outside the class.)
  // A run a team: run c finds the paths from run_sources(c). Lists 0 and 1:
  // this round's near nodes and the next round's; 2 and 3: the far nodes
  // and those kept when the threshold moves. Every thread keeps the same
  // `now`, `far` and `threshold`: each follows the same branches, on sizes
  // read after a barrier. (Functors, not lambdas, here and in RunsOut:
  // this header is compiled into several units, and nvcc's extended
  // lambdas keep their host-side hooks per unit, so that a host space's
  // run could call through another unit's hook, never set;
  // tests/static_checks/lambda_wrappers.py.)
  struct Rounds {
    Array<double**> distance_;
    Array<int***> flags;
    Array<int***> lists;
    Array<int**> sizes;
    Array<int*> run_sources;
    Array<std::int64_t*> offsets;
    Array<int*> targets;
    Array<double*> lengths;
    std::int64_t n;
    double step;

    KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
      int const c = team.league_rank();
      double* const d = &distance_(c, 0);
      int* const in_near = &flags(c, 0, 0);
      int* const in_far = &flags(c, 1, 0);
      auto push = [&](int list, int w) {
        lists(c, list, Kokkos::atomic_fetch_add(&sizes(c, list), 1)) = w;
      };
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n),
                           [&](std::int64_t i) {
                             d[i] = compat::infinity<double>();
                             in_near[i] = 0;
                             in_far[i] = 0;
                           });
      team.team_barrier();
      Kokkos::single(Kokkos::PerTeam(team), [&]() {
        int const source = run_sources(c);
        d[source] = 0;
        lists(c, 0, 0) = source;
        sizes(c, 0) = 1;
        for (int list = 1; list < 4; ++list) sizes(c, list) = 0;
      });
      team.team_barrier();
      int now = 0, far = 2;
      double threshold = step;
      for (;;) {
        int const near = *static_cast<volatile int*>(&sizes(c, now));
        if (near > 0) {
          // A node may fall again while its edges are relaxed: clear its
          // flag first, so that such a fall queues it again.
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, near),
                               [&](int j) { in_near[lists(c, now, j)] = 0; });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, near), [&](int j) {
            int const v = lists(c, now, j);
            double const dv = *static_cast<volatile double*>(&d[v]);
            for (std::int64_t e = offsets(v); e < offsets(v + 1); ++e) {
              int const w = targets(e);
              double const candidate = dv + lengths(e);
              if (!lower_to(&d[w], candidate)) continue;
              if (candidate < threshold) {
                if (Kokkos::atomic_exchange(&in_near[w], 1) == 0)
                  push(now ^ 1, w);
              } else if (Kokkos::atomic_exchange(&in_far[w], 1) == 0) {
                push(far, w);
              }
            }
          });
          team.team_barrier();
          // Filled again two rounds on, after that round's first barrier.
          Kokkos::single(Kokkos::PerTeam(team), [&]() { sizes(c, now) = 0; });
          now ^= 1;
          continue;
        }
        int const waiting = *static_cast<volatile int*>(&sizes(c, far));
        if (waiting == 0) break;
        // (Kokkos 3.4's team reductions share one static scratch buffer
        // with no barrier after it: keep a barrier between two of them.)
        double smallest = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, waiting),
            [&](int j, double& m) {
              double const dw = d[lists(c, far, j)];
              if (dw < m) m = dw;
            },
            Kokkos::Min<double>(smallest));
        double next = (smallest > threshold ? smallest : threshold) + step;
        // (A step below the distances' spacing would not move it.)
        if (!(next > smallest)) next = compat::infinity<double>();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, waiting),
                             [&](int j) {
                               int const w = lists(c, far, j);
                               double const dw = d[w];
                               if (!(dw < next)) {
                                 push(far ^ 1, w);  // still far
                                 return;
                               }
                               in_far[w] = 0;
                               // Below the old threshold, it was queued near
                               // when it fell.
                               if (dw >= threshold &&
                                   Kokkos::atomic_exchange(&in_near[w], 1) == 0)
                                 push(now, w);
                             });
        team.team_barrier();
        Kokkos::single(Kokkos::PerTeam(team), [&]() { sizes(c, far) = 0; });
        team.team_barrier();
        far ^= 1;
        threshold = next;
      }
    }
  };

  // out(i, first + c) = the distance of run c to node i, c < width.
  template <class T>
  struct RunsOut {
    Array<double**> runs;
    OTView2<T, Space> out;
    std::int64_t width, first;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t q) const {
      std::int64_t const i = q / width, c = q % width;
      out(i, first + c) = T(runs(c, i));
    }
  };

 private:
  // A near list holds tens to hundreds of nodes on k-NN graphs of tens of
  // thousands of points: a small team (two NVIDIA warps, one AMD
  // wavefront) with cheap barriers, many teams resident at once.
  static constexpr int kTeamSize = 64;

  std::int64_t n_;
  Array<std::int64_t*> offsets_;
  Array<int*> targets_;
  Array<double*> lengths_;
  double step_ = 0;
  Array<int***> flags_;
  Array<int***> lists_;
  Array<int**> sizes_;
  Array<int*> sources_;
  typename Array<int*>::HostMirror sources_host_;
};

// graph_distances' host method on a graph that passed check_graph: one
// Dijkstra run a source, on host threads, copied to the instance
// (graph.cpp).
template <class Space, class T>
void host_graph_distances(const Space& space, const Graph& graph,
                          const std::vector<int>& sources,
                          const OTView2<T, Space>& distances);

// Shortest paths on one graph for callers that ask again and again (the
// graph sides of sampled GW): the graph is checked once, here, and the
// device method's work space is made on first use, for `runs` sources at a
// time, and kept.
template <class Space>
class GraphPaths {
 public:
  GraphPaths(const Graph& graph, ShortestPaths method, std::int64_t runs)
      : graph_(&graph), method_(method), runs_(runs) {
    check_graph(graph);
  }

  // out(i, s) = the path length from sources[s] to node i, (N, S).
  template <class T>
  void compute(const Space& space, const std::vector<int>& sources,
               const OTView2<T, Space>& out) {
    if (!runs_on_device<Space>(method_, std::int64_t(sources.size()))) {
      host_graph_distances(space, *graph_, sources, out);
      return;
    }
    if (!device_) device_.emplace(space, *graph_, runs_);
    device_->compute(space, sources, out);
  }

 private:
  const Graph* graph_;
  ShortestPaths method_;
  std::int64_t runs_;
  std::optional<FrontierPaths<Space>> device_;
};

}  // namespace softwave::impl
