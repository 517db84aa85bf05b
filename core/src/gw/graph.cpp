// kNN graphs, shortest paths and landmark embeddings (softwave/graph.hpp).

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <softwave/errors.hpp>
#include <softwave/graph.hpp>
#include <softwave/kokkos_compat.hpp>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../common/data_checks.hpp"
#include "plan_terms.hpp"

namespace softwave::impl {
namespace {

// Neighbour lists are kept in registers while the points stream by.
constexpr int kMaxNeighbours = 64;

template <class T, class Space>
KOKKOS_INLINE_FUNCTION double point_distance(const OTView2<const T, Space>& x,
                                             std::int64_t i, std::int64_t j) {
  double s = 0;
  for (std::size_t e = 0; e < x.extent(1); ++e) {
    double const d = double(x(i, e)) - x(j, e);
    s += d * d;
  }
  return compat::sqrt(s);
}

// Shortest-path distances from `source` to every node, into out[i·stride].
template <class Out>
void dijkstra(const Graph& graph, int source, Out&& out) {
  std::int64_t const n = graph.nodes();
  std::vector<double> dist(n, std::numeric_limits<double>::infinity());
  using Item = std::pair<double, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  dist[source] = 0;
  heap.push({0.0, source});
  while (!heap.empty()) {
    auto const top = heap.top();
    heap.pop();
    int const v = top.second;
    if (top.first > dist[v]) continue;
    for (std::int64_t e = graph.offsets[v]; e < graph.offsets[v + 1]; ++e) {
      int const w = graph.targets[e];
      double const d = top.first + graph.lengths[e];
      if (d < dist[w]) {
        dist[w] = d;
        heap.push({d, w});
      }
    }
  }
  for (std::int64_t i = 0; i < n; ++i) out(i, dist[i]);
}

// run(c) for c in [0, count), in parallel on the host: on Kokkos' host
// space (with the threads the caller gave it), except where that is
// Serial, as in the GPU builds, whose host cores would otherwise idle while
// one of them runs every Dijkstra: there on std::threads, one per hardware
// thread.
template <class Run>
void for_each_source(std::int64_t count, const Run& run) {
  using Host = Kokkos::DefaultHostExecutionSpace;
#ifdef KOKKOS_ENABLE_SERIAL
  if constexpr (std::is_same_v<Host, Kokkos::Serial>) {
    std::int64_t const workers = std::min<std::int64_t>(
        count, std::max(1u, std::thread::hardware_concurrency()));
    std::atomic<std::int64_t> next{0};
    std::vector<std::thread> threads;
    for (std::int64_t w = 0; w < workers; ++w)
      threads.emplace_back([&] {
        for (std::int64_t c = next++; c < count; c = next++) run(c);
      });
    for (auto& t : threads) t.join();
    return;
  }
#endif
  Kokkos::parallel_for("softwave::graph::dijkstra",
                       Kokkos::RangePolicy<Host>(0, count), run);
}

// Which nodes node 0 reaches over the adjacency lists.
std::vector<char> reached_from_first(
    const std::vector<std::vector<std::pair<int, double>>>& adjacent) {
  std::vector<char> reached(adjacent.size(), 0);
  if (adjacent.empty()) return reached;
  std::vector<int> stack = {0};
  reached[0] = 1;
  while (!stack.empty()) {
    int const v = stack.back();
    stack.pop_back();
    for (auto const& edge : adjacent[v])
      if (!reached[edge.first]) {
        reached[edge.first] = 1;
        stack.push_back(edge.first);
      }
  }
  return reached;
}

void check_graph(const Graph& graph) {
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

bool runs_on_device(ShortestPaths method) {
  return method == ShortestPaths::device;
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

  FrontierPaths(const Space& space, const Graph& graph, std::int64_t runs)
      : n_(graph.nodes()),
        offsets_(on_device(space, graph.offsets, "softwave::graph::offsets")),
        targets_(on_device(space, graph.targets, "softwave::graph::targets")),
        lengths_(on_device(space, graph.lengths, "softwave::graph::lengths")) {
    std::int64_t const chunk =
        std::clamp<std::int64_t>(kWorkBytes / (kBytesPerNode * n_), 1, runs);
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
    sources_host_ = Kokkos::create_mirror_view(sources_);
    double total = 0;
    for (double length : graph.lengths) total += length;
    step_ = kStepEdges * total /
            double(std::max<std::size_t>(1, graph.lengths.size()));
    // (Zero-length edges only: one list, no threshold.)
    if (!(step_ > 0)) step_ = compat::infinity<double>();
  }

  std::int64_t chunk() const { return distance.extent(0); }

  // distance(c, i) = the path length from sources[first + c] to node i, for
  // c < min(chunk(), S - first).
  void run(const Space& space, const std::vector<int>& sources,
           std::int64_t first) {
    int const width = int(
        std::min<std::int64_t>(chunk(), std::int64_t(sources.size()) - first));
    space.fence();  // the last run's sources have been read
    for (int c = 0; c < width; ++c) sources_host_(c) = sources[first + c];
    Kokkos::deep_copy(space, sources_, sources_host_);
    auto const distance_ = distance;
    auto const flags = flags_;
    auto const lists = lists_;
    auto const sizes = sizes_;
    auto const run_sources = sources_;
    auto const offsets = offsets_;
    auto const targets = targets_;
    auto const lengths = lengths_;
    std::int64_t const n = n_;
    double const step = step_;
    // Lists 0 and 1: this round's near nodes and the next round's; 2 and 3:
    // the far nodes and those kept when the threshold moves. Every thread
    // keeps the same `now`, `far` and `threshold`: each follows the same
    // branches, on sizes read after a barrier.
    auto const kernel = KOKKOS_LAMBDA(const Member& team) {
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
    };
    Policy const probe(space, width, 1);
    int const team_size = std::min(
        kTeamSize, probe.team_size_max(kernel, Kokkos::ParallelForTag()));
    Kokkos::parallel_for("softwave::graph::frontier_paths",
                         Policy(space, width, team_size), kernel);
  }

  template <class Data>
  using Array = Kokkos::View<Data, Kokkos::LayoutRight, Memory>;
  Array<double**> distance;

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

}  // namespace

template <class Space, class T>
Graph knn_graph(const Space& space, const OTView2<const T, Space>& points,
                int k) {
  using Memory = typename Space::memory_space;
  compat::ScopedRegion region("softwave::graph::knn_graph");
  std::int64_t const n = points.extent(0);
  if (n < 2 || points.extent(1) < 1)
    throw_invalid_argument("points has shape (", n, ", ", points.extent(1),
                           "), expected at least 2 points of >= 1 feature");
  if (k < 1 || k > kMaxNeighbours || k >= n)
    throw_invalid_argument("k = ", k, " must be in [1, min(N - 1, ",
                           kMaxNeighbours, ")] (N = ", n, ")");
  DataChecks<Space> checks(space, true, "graph");
  std::int64_t const dim = points.extent(1);
  checks.count(
      "points", " non-finite value(s) (NaN or inf)", n * dim,
      "softwave::graph::check_points",
      KOKKOS_LAMBDA(std::int64_t q)->std::int64_t {
        return !compat::isfinite(double(points(q / dim, q % dim)));
      });
  checks.finish();

  Kokkos::View<int**, Kokkos::LayoutRight, Memory> neighbours(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string("softwave::graph::neighbours")),
      n, k);
  Kokkos::View<double**, Kokkos::LayoutRight, Memory> lengths(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string("softwave::graph::neighbour_lengths")),
      n, k);
  Kokkos::parallel_for(
      "softwave::graph::nearest_neighbours",
      Kokkos::RangePolicy<Space>(space, 0, n), KOKKOS_LAMBDA(std::int64_t i) {
        double best[kMaxNeighbours];
        int index[kMaxNeighbours];
        int found = 0;
        for (std::int64_t j = 0; j < n; ++j) {
          if (j == i) continue;
          double const d = point_distance<T, Space>(points, i, j);
          if (found == k && !(d < best[k - 1])) continue;
          int slot = found < k ? found++ : k - 1;
          while (slot > 0 && best[slot - 1] > d) {
            best[slot] = best[slot - 1];
            index[slot] = index[slot - 1];
            --slot;
          }
          best[slot] = d;
          index[slot] = int(j);
        }
        for (int r = 0; r < k; ++r) {
          neighbours(i, r) = index[r];
          lengths(i, r) = best[r];
        }
      });
  auto const neighbours_host =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), neighbours);
  auto const lengths_host =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lengths);

  std::vector<std::vector<std::pair<int, double>>> adjacent(n);
  for (std::int64_t i = 0; i < n; ++i)
    for (int r = 0; r < k; ++r) {
      int const j = neighbours_host(i, r);
      adjacent[i].push_back({j, lengths_host(i, r)});
      adjacent[j].push_back({int(i), lengths_host(i, r)});
    }

  // Join the components: the closest pair between node 0's and the rest.
  Graph graph;
  Kokkos::View<char*, Memory> reached(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string("softwave::graph::reached")),
      n);
  for (;;) {
    auto const from_first = reached_from_first(adjacent);
    if (std::all_of(from_first.begin(), from_first.end(),
                    [](char c) { return c != 0; }))
      break;
    Kokkos::View<const char*, Kokkos::HostSpace,
                 Kokkos::MemoryTraits<Kokkos::Unmanaged>>
        host(from_first.data(), n);
    Kokkos::deep_copy(space, reached, host);
    using Reducer = Kokkos::MinLoc<double, std::int64_t>;
    typename Reducer::value_type closest;
    Kokkos::parallel_reduce(
        "softwave::graph::join_components",
        Kokkos::RangePolicy<Space>(space, 0, n),
        KOKKOS_LAMBDA(std::int64_t i, typename Reducer::value_type & out) {
          if (reached(i)) return;
          for (std::int64_t j = 0; j < n; ++j) {
            if (!reached(j)) continue;
            double const d = point_distance<T, Space>(points, i, j);
            if (d < out.val) {
              out.val = d;
              out.loc = i * n + j;
            }
          }
        },
        Reducer(closest));
    int const i = int(closest.loc / n), j = int(closest.loc % n);
    adjacent[i].push_back({j, closest.val});
    adjacent[j].push_back({i, closest.val});
    ++graph.joined_components;
  }

  graph.offsets.assign(n + 1, 0);
  for (std::int64_t i = 0; i < n; ++i)
    graph.offsets[i + 1] = graph.offsets[i] + std::int64_t(adjacent[i].size());
  graph.targets.reserve(graph.offsets[n]);
  graph.lengths.reserve(graph.offsets[n]);
  for (auto const& edges : adjacent)
    for (auto const& edge : edges) {
      graph.targets.push_back(edge.first);
      graph.lengths.push_back(edge.second);
    }
  return graph;
}

template <class Space, class T>
void graph_distances(const Space& space, const Graph& graph,
                     const std::vector<int>& sources,
                     const OTView2<T, Space>& distances, ShortestPaths method) {
  compat::ScopedRegion region("softwave::graph::graph_distances");
  check_graph(graph);
  std::int64_t const n = graph.nodes(), s = sources.size();
  if (std::int64_t(distances.extent(0)) != n ||
      std::int64_t(distances.extent(1)) != s)
    throw_invalid_argument("distances has shape (", distances.extent(0), ", ",
                           distances.extent(1), "), expected (", n, ", ", s,
                           ") (nodes, sources)");
  for (std::int64_t c = 0; c < s; ++c)
    if (sources[c] < 0 || sources[c] >= n)
      throw_invalid_argument("sources[", c, "] = ", sources[c],
                             " is not a node (N = ", n, ")");
  if (s == 0) return;
  if (runs_on_device(method)) {
    FrontierPaths<Space> paths(space, graph, s);
    auto const runs = paths.distance;
    for (std::int64_t first = 0; first < s; first += paths.chunk()) {
      paths.run(space, sources, first);
      std::int64_t const width = std::min(paths.chunk(), s - first);
      Kokkos::parallel_for(
          "softwave::graph::distances",
          Kokkos::RangePolicy<Space>(space, 0, n * width),
          KOKKOS_LAMBDA(std::int64_t q) {
            std::int64_t const i = q / width, c = q % width;
            distances(i, first + c) = T(runs(c, i));
          });
    }
    space.fence();
    return;
  }
  Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace> host(
      Kokkos::view_alloc(Kokkos::WithoutInitializing,
                         std::string("softwave::graph::distances_host")),
      n, s);
  for_each_source(s, [&](std::int64_t c) {
    dijkstra(graph, sources[c],
             [&](std::int64_t i, double d) { host(i, c) = T(d); });
  });
  Kokkos::deep_copy(space, distances, host);
  space.fence();
}

// Farthest-point landmarks on the instance: each landmark's run, then the
// next is the first node of the largest distance to those chosen (as
// std::max_element picks it on the host).
template <class Space, class T>
std::vector<int> device_landmarks(const Space& space, const Graph& graph,
                                  const OTView2<T, Space>& embedding) {
  std::int64_t const n = graph.nodes(), count = embedding.extent(1);
  FrontierPaths<Space> paths(space, graph, 1);
  auto const run = paths.distance;
  auto const nearest =
      uninitialised<double*>(space, "softwave::graph::nearest_landmark", n);
  std::vector<int> landmarks = {0};
  for (std::int64_t c = 0; c < count; ++c) {
    paths.run(space, landmarks, c);
    bool const first = c == 0;
    double farthest = 0;
    Kokkos::parallel_reduce(
        "softwave::graph::landmark_column",
        Kokkos::RangePolicy<Space>(space, 0, n),
        KOKKOS_LAMBDA(std::int64_t i, double& top) {
          double const d = run(0, i);
          embedding(i, c) = T(d);
          double const near = first || d < nearest(i) ? d : nearest(i);
          nearest(i) = near;
          if (near > top) top = near;
        },
        Kokkos::Max<double>(farthest));
    if (c + 1 == count) break;
    landmarks.push_back(int(first_index_of(space, nearest, farthest,
                                           "softwave::graph::next_landmark")));
  }
  space.fence();
  return landmarks;
}

template <class Space, class T>
std::vector<int> landmark_embedding(const Space& space, const Graph& graph,
                                    const OTView2<T, Space>& embedding,
                                    ShortestPaths method) {
  compat::ScopedRegion region("softwave::graph::landmark_embedding");
  check_graph(graph);
  std::int64_t const n = graph.nodes(), count = embedding.extent(1);
  if (std::int64_t(embedding.extent(0)) != n || count < 1 || count > n)
    throw_invalid_argument("embedding has shape (", embedding.extent(0), ", ",
                           count, "), expected (", n,
                           ", L) with 1 <= L <= N landmarks");
  if (runs_on_device(method)) return device_landmarks(space, graph, embedding);
  Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace> host(
      Kokkos::view_alloc(Kokkos::WithoutInitializing,
                         std::string("softwave::graph::embedding_host")),
      n, count);
  std::vector<double> nearest(n, std::numeric_limits<double>::infinity());
  std::vector<int> landmarks = {0};
  for (std::int64_t c = 0; c < count; ++c) {
    dijkstra(graph, landmarks.back(), [&](std::int64_t i, double d) {
      host(i, c) = T(d);
      nearest[i] = std::min(nearest[i], d);
    });
    if (c + 1 < count)
      landmarks.push_back(int(std::max_element(nearest.begin(), nearest.end()) -
                              nearest.begin()));
  }
  Kokkos::deep_copy(space, embedding, host);
  space.fence();
  return landmarks;
}

#define SOFTWAVE_INSTANTIATE_GRAPH(SPACE, T)                               \
  template Graph knn_graph<SPACE, T>(const SPACE&,                         \
                                     const OTView2<const T, SPACE>&, int); \
  template void graph_distances<SPACE, T>(                                 \
      const SPACE&, const Graph&, const std::vector<int>&,                 \
      const OTView2<T, SPACE>&, ShortestPaths);                            \
  template std::vector<int> landmark_embedding<SPACE, T>(                  \
      const SPACE&, const Graph&, const OTView2<T, SPACE>&, ShortestPaths);

SOFTWAVE_INSTANTIATE_GRAPH(Kokkos::DefaultExecutionSpace, float)
SOFTWAVE_INSTANTIATE_GRAPH(Kokkos::DefaultExecutionSpace, double)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_GRAPH(Kokkos::DefaultHostExecutionSpace, float)
SOFTWAVE_INSTANTIATE_GRAPH(Kokkos::DefaultHostExecutionSpace, double)
#endif

}  // namespace softwave::impl
