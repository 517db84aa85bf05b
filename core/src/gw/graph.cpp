// kNN graphs, shortest paths and landmark embeddings (softwave/graph.hpp).

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <softwave/errors.hpp>
#include <softwave/graph.hpp>
#include <softwave/kokkos_compat.hpp>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../common/call_memory.hpp"
#include "../common/data_checks.hpp"
#include "frontier_paths.hpp"
#include "plan_terms.hpp"

namespace softwave::impl {
namespace {

// The most neighbours knn_graph takes.
constexpr int kMaxNeighbours = 64;

template <class T, class Space>
KOKKOS_INLINE_FUNCTION double squared_point_distance(
    const OTView2<const T, Space>& x, std::int64_t i, std::int64_t j) {
  double s = 0;
  for (std::size_t e = 0; e < x.extent(1); ++e) {
    double const d = double(x(i, e)) - x(j, e);
    s += d * d;
  }
  return s;
}
template <class T, class Space>
KOKKOS_INLINE_FUNCTION double point_distance(const OTView2<const T, Space>& x,
                                             std::int64_t i, std::int64_t j) {
  return compat::sqrt(squared_point_distance<T, Space>(x, i, j));
}

// Dijkstra's algorithm, its arrays kept from one run to the next (a run
// allocates nothing), with an indexed 4-ary heap: a node whose distance
// falls moves up in place, so each node enters the queue once and leaves
// once (a binary heap of (distance, node) pairs took a new entry each time
// and skipped the stale ones). On the 5-NN graph of TorchGW's 50,000-point
// spiral, 8–10 % faster a run than that heap in the same process
// (8.4–9.1 against 9.0–9.9 ms on a 2-core x86 machine).
class DijkstraRuns {
 public:
  explicit DijkstraRuns(std::int64_t n) : distance_(n), where_(n) {
    heap_.reserve(n);
    settled_.reserve(n);
  }

  // Shortest-path distances from `source` to every node i, as out(i, d).
  template <class Out>
  void run(const Graph& graph, int source, Out&& out) {
    search(graph, source,
           [](int) { return std::numeric_limits<double>::infinity(); });
    for (std::int64_t i = 0; i < graph.nodes(); ++i) out(i, distance_[i]);
  }

  // The run from `source` kept to the nodes it brings below bound[i], as
  // out(i, d) for those nodes only; no other node is entered. Exact where
  // bound holds shortest-path distances from other sources (or their
  // minimum): those satisfy bound[v] <= bound[u] + length(u, v) on every
  // edge, rounded, so every node on the way to a node below its bound is
  // below its own, and the kept run gives the full run's distances there.
  template <class Out>
  void run_below(const Graph& graph, int source,
                 const std::vector<double>& bound, Out&& out) {
    search(graph, source, [&](int i) { return bound[i]; });
    for (int i : settled_) out(i, distance_[i]);
  }

 private:
  struct Item {
    double key;
    int node;
  };

  // Dijkstra from `source`, entering a node only at a distance below
  // bound(node); the nodes settled, in order, in settled_.
  template <class Bound>
  void search(const Graph& graph, int source, const Bound& bound) {
    std::fill(distance_.begin(), distance_.end(),
              std::numeric_limits<double>::infinity());
    std::fill(where_.begin(), where_.end(), kUnseen);
    heap_.clear();
    settled_.clear();
    distance_[source] = 0;
    push({0.0, source});
    while (!heap_.empty()) {
      Item const top = heap_.front();
      where_[top.node] = kSettled;
      settled_.push_back(top.node);
      Item const last = heap_.back();
      heap_.pop_back();
      if (!heap_.empty()) sift_down(0, last);
      for (std::int64_t e = graph.offsets[top.node];
           e < graph.offsets[top.node + 1]; ++e) {
        int const w = graph.targets[e];
        double const d = top.key + graph.lengths[e];
        if (d < distance_[w] && d < bound(w)) {
          distance_[w] = d;
          if (where_[w] == kUnseen)
            push({d, w});
          else
            sift_up(where_[w], {d, w});
        }
      }
    }
  }
  // where_[v]: v's place in the heap, or one of these.
  static constexpr int kUnseen = -1, kSettled = -2;

  void push(Item x) {
    heap_.push_back(x);
    sift_up(int(heap_.size()) - 1, x);
  }
  // x into place `at` or above it.
  void sift_up(int at, Item x) {
    while (at > 0) {
      int const parent = (at - 1) / 4;
      if (!(x.key < heap_[parent].key)) break;
      place(at, heap_[parent]);
      at = parent;
    }
    place(at, x);
  }
  // x into place `at` or below it.
  void sift_down(int at, Item x) {
    int const size = int(heap_.size());
    for (;;) {
      int const first = 4 * at + 1;
      if (first >= size) break;
      int least = first;
      for (int c = first + 1; c < std::min(first + 4, size); ++c)
        if (heap_[c].key < heap_[least].key) least = c;
      if (!(heap_[least].key < x.key)) break;
      place(at, heap_[least]);
      at = least;
    }
    place(at, x);
  }
  void place(int at, Item x) {
    heap_[at] = x;
    where_[x.node] = at;
  }

  std::vector<double> distance_;
  std::vector<int> where_, settled_;
  std::vector<Item> heap_;
};

// run(c) for c in [0, count), in parallel on the host: on Kokkos' host
// space (with the threads the caller gave it), except where that is
// Serial, as in the GPU builds, whose host cores would otherwise idle while
// one of them runs every Dijkstra: there on std::threads, one per hardware
// thread (host_workers() of them).
template <class Host>
constexpr bool on_std_threads() {
#ifdef KOKKOS_ENABLE_SERIAL
  return std::is_same_v<Host, Kokkos::Serial>;
#else
  return false;
#endif
}

std::int64_t host_workers() {
  using Host = Kokkos::DefaultHostExecutionSpace;
  if constexpr (on_std_threads<Host>())
    return std::max(1u, std::thread::hardware_concurrency());
  else
    return std::max(1, int(Host().concurrency()));
}

template <class Run>
void for_each_source(std::int64_t count, const Run& run) {
  using Host = Kokkos::DefaultHostExecutionSpace;
  if constexpr (on_std_threads<Host>()) {
    std::int64_t const workers = std::min(count, host_workers());
    std::atomic<std::int64_t> next{0};
    std::vector<std::thread> threads;
    for (std::int64_t w = 0; w < workers; ++w)
      threads.emplace_back([&] {
        for (std::int64_t c = next++; c < count; c = next++) run(c);
      });
    for (auto& t : threads) t.join();
  } else {
    Kokkos::parallel_for("softwave::graph::dijkstra",
                         Kokkos::RangePolicy<Host>(0, count), run);
  }
}

template <class T>
using HostColumns = Kokkos::View<T**, Kokkos::LayoutRight, Kokkos::HostSpace>;

// Columns [first, S) of `columns` (N, S): the distances from sources[c], the
// sources in contiguous groups, one a host thread, each group's runs sharing
// one workspace.
template <class T>
void fill_columns(const Graph& graph, const std::vector<int>& sources,
                  std::int64_t first, const HostColumns<T>& columns) {
  std::int64_t const s = std::int64_t(sources.size()) - first;
  if (s <= 0) return;
  std::int64_t const groups = std::min(s, host_workers());
  for_each_source(groups, [&](std::int64_t group) {
    DijkstraRuns runs(graph.nodes());
    for (std::int64_t c = first + group * s / groups;
         c < first + (group + 1) * s / groups; ++c)
      runs.run(graph, sources[c],
               [&](std::int64_t i, double d) { columns(i, c) = T(d); });
  });
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

// A point's K nearest by (length, index), K known at compile time so that
// the list stays in registers: a point enters at the last place and moves
// up by compare-exchanges at fixed places. Unused places hold (∞, the
// largest int), which no point precedes. `beyond` bounds the squared
// lengths whose (correctly rounded) roots can still enter: above it a
// point is passed over without taking its root, as most points are once
// the list fills.
template <int K>
struct NearestList {
  double length[K];
  int index[K];
  double beyond = INFINITY;

  KOKKOS_INLINE_FUNCTION NearestList() {
    for (int r = 0; r < K; ++r) {
      length[r] = INFINITY;
      index[r] = INT_MAX;
    }
  }
  // Point j at squared length s.
  KOKKOS_INLINE_FUNCTION void offer(double s, int j) {
    if (s > beyond) return;
    insert(compat::sqrt(s), j);
    // √s ≤ L needs s ≤ (L + ulp/2)², within 2⁻⁵¹ of L² (and L·L is
    // within 2⁻⁵³ of it): 2⁻⁴⁹ leaves room for both roundings.
    beyond = length[K - 1] * length[K - 1] * (1 + 0x1p-49);
  }
  KOKKOS_INLINE_FUNCTION static bool before(double a, int i, double b, int j) {
    return a < b || (a == b && i < j);
  }
  KOKKOS_INLINE_FUNCTION void insert(double d, int j) {
    if (!before(d, j, length[K - 1], index[K - 1])) return;
    length[K - 1] = d;
    index[K - 1] = j;
    for (int r = K - 1; r > 0; --r)
      if (before(length[r], index[r], length[r - 1], index[r - 1])) {
        double const l = length[r];
        length[r] = length[r - 1];
        length[r - 1] = l;
        int const x = index[r];
        index[r] = index[r - 1];
        index[r - 1] = x;
      }
  }
};

// Each point's k nearest (k <= K) into neighbours and lengths: the K
// nearest by (length, index), of which the first k are the scan's over
// all points in order (a later point of equal length does not displace an
// earlier one). On a GPU the other points split into `parts` ranges, each
// searched by a thread of its own (consecutive threads: consecutive points
// of one range, reading the same point at a time), and a second pass
// merges each point's lists: a thread a point, with its list in local
// memory, took 16 ms at 50,000 points on an H100 (each side of a
// 40,000 × 50,000 GW call).
template <int K, class T, class Space>
void nearest_neighbours(
    const Space& space, const OTView2<const T, Space>& points, int k,
    const Kokkos::View<int**, Kokkos::LayoutRight,
                       typename Space::memory_space>& neighbours,
    const Kokkos::View<double**, Kokkos::LayoutRight,
                       typename Space::memory_space>& lengths) {
  using Memory = typename Space::memory_space;
  std::int64_t const n = points.extent(0);
  constexpr bool host =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace, Memory>::accessible;
  // About 256 threads for every 2,048 an H100's 132 SMs hold, each range
  // of at least 64 points.
  std::int64_t const parts =
      host ? 1
           : std::clamp<std::int64_t>((std::int64_t(1) << 18) / n, 1,
                                      std::max<std::int64_t>(1, n / 64));
  auto const found_lengths =
      call_array<Kokkos::View<double**, Kokkos::LayoutRight, Memory>>(
          space, "softwave::graph::part_lengths", false, parts * n, K);
  auto const found_indices =
      call_array<Kokkos::View<int**, Kokkos::LayoutRight, Memory>>(
          space, "softwave::graph::part_neighbours", false, parts * n, K);
  auto const part_lengths = found_lengths.view;
  auto const part_indices = found_indices.view;
  Kokkos::parallel_for(
      "softwave::graph::nearest_in_parts",
      Kokkos::RangePolicy<Space>(space, 0, parts * n),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const part = q / n, i = q % n;
        std::int64_t const first = part * n / parts,
                           last = (part + 1) * n / parts;
        NearestList<K> list;
        for (std::int64_t j = first; j < last; ++j)
          if (j != i)
            list.offer(squared_point_distance<T, Space>(points, i, j), int(j));
        for (int r = 0; r < K; ++r) {
          part_lengths(q, r) = list.length[r];
          part_indices(q, r) = list.index[r];
        }
      });
  Kokkos::parallel_for(
      "softwave::graph::nearest_merged",
      Kokkos::RangePolicy<Space>(space, 0, n), KOKKOS_LAMBDA(std::int64_t i) {
        NearestList<K> list;
        for (std::int64_t part = 0; part < parts; ++part)
          for (int r = 0; r < K; ++r)
            list.insert(part_lengths(part * n + i, r),
                        part_indices(part * n + i, r));
        for (int r = 0; r < k; ++r) {
          neighbours(i, r) = list.index[r];
          lengths(i, r) = list.length[r];
        }
      });
}

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
  // The list's capacity: the first of 4, 8, 16, 32, 64 that holds k.
  if (k <= 4)
    nearest_neighbours<4, T>(space, points, k, neighbours, lengths);
  else if (k <= 8)
    nearest_neighbours<8, T>(space, points, k, neighbours, lengths);
  else if (k <= 16)
    nearest_neighbours<16, T>(space, points, k, neighbours, lengths);
  else if (k <= 32)
    nearest_neighbours<32, T>(space, points, k, neighbours, lengths);
  else
    nearest_neighbours<kMaxNeighbours, T>(space, points, k, neighbours,
                                          lengths);
  auto const neighbours_host =
      compat::host_mirror("softwave::graph::neighbours_host", neighbours);
  auto const lengths_host =
      compat::host_mirror("softwave::graph::neighbour_lengths_host", lengths);
  Kokkos::deep_copy(space, neighbours_host, neighbours);
  Kokkos::deep_copy(space, lengths_host, lengths);
  space.fence();

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
  std::int64_t const s = sources.size();
  GraphPaths<Space> paths(graph, method, s);  // checks the graph
  std::int64_t const n = graph.nodes();
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
  paths.compute(space, sources, distances);
  space.fence();
}

template <class Space, class T>
void host_graph_distances(const Space& space, const Graph& graph,
                          const std::vector<int>& sources,
                          const OTView2<T, Space>& distances) {
  HostColumns<T> host(
      Kokkos::view_alloc(Kokkos::WithoutInitializing,
                         std::string("softwave::graph::distances_host")),
      graph.nodes(), sources.size());
  fill_columns(graph, sources, 0, host);
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
  // One source a run: `automatic` keeps them on the host.
  if (runs_on_device<Space>(method, 1))
    return device_landmarks(space, graph, embedding);
  HostColumns<T> host(
      Kokkos::view_alloc(Kokkos::WithoutInitializing,
                         std::string("softwave::graph::embedding_host")),
      n, count);
  // Each landmark is the first node farthest from those before it. With
  // one host thread, each landmark's full run gives its column and moves
  // the nearest distances. With more, a run kept to the nodes the new
  // landmark brings closer (run_below, the same distances there) moves
  // them, and the columns' full runs go in parallel after the choice. On
  // TorchGW's 50,000-point spiral with 50 landmarks the kept runs enter
  // 3.0·N nodes in all, against 49·N: 370–440 ms became 143–266 ms on two
  // threads of a 2-core x86 machine, the rest being the full runs.
  bool const in_parallel = host_workers() > 1 && count > 2;
  std::vector<double> nearest(n);
  std::vector<int> landmarks = {0};
  DijkstraRuns runs(n);
  runs.run(graph, 0, [&](std::int64_t i, double d) {
    host(i, 0) = T(d);
    nearest[i] = d;
  });
  for (std::int64_t c = 1; c < count; ++c) {
    int const next =
        int(std::max_element(nearest.begin(), nearest.end()) - nearest.begin());
    landmarks.push_back(next);
    if (!in_parallel)
      runs.run(graph, next, [&](std::int64_t i, double d) {
        host(i, c) = T(d);
        nearest[i] = std::min(nearest[i], d);
      });
    else if (c + 1 < count)
      runs.run_below(graph, next, nearest,
                     [&](std::int64_t i, double d) { nearest[i] = d; });
  }
  if (in_parallel) fill_columns(graph, landmarks, 1, host);
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
  template void host_graph_distances<SPACE, T>(const SPACE&, const Graph&, \
                                               const std::vector<int>&,    \
                                               const OTView2<T, SPACE>&);  \
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
