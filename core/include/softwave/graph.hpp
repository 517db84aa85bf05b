#pragma once
// Geodesic distances for sampled Gromov–Wasserstein: the symmetrised
// k-nearest-neighbour graph of a point cloud (connected by construction),
// shortest-path distances from chosen sources, and the farthest-point
// landmark embedding TorchGW's "landmark" mode uses (each point's
// distances to the landmarks; GwDistances::coordinates takes it).
//
// The neighbour search runs on the execution-space instance (brute force,
// O(N²·d), labelled softwave::graph::*); the graph is joined into one
// component as TorchGW does (while it is disconnected, an edge between the
// closest pair of points of node 0's component and the rest, found on the
// instance); shortest paths are found as ShortestPaths says: Dijkstra's
// on the host, in parallel over the sources (on
// Kokkos::DefaultHostExecutionSpace, or where that is Serial, as in the GPU
// builds, on one std::thread per hardware thread) and copied back, or on
// the instance itself.

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <softwave/sinkhorn.hpp>
#include <vector>

namespace softwave {

// An undirected weighted graph in compressed rows, on the host: the
// neighbours of node i are targets[offsets[i] .. offsets[i + 1]) at the
// given edge lengths (each edge listed from both ends).
struct Graph {
  std::vector<std::int64_t> offsets;  // N + 1
  std::vector<int> targets;
  std::vector<double> lengths;
  int joined_components = 0;  // edges added to connect it
  std::int64_t nodes() const {
    return offsets.empty() ? 0 : std::int64_t(offsets.size()) - 1;
  }
};

// How shortest paths are found.
//   host_dijkstra: Dijkstra's algorithm on the host, in parallel over the
//     sources; the distances are copied to the instance's memory.
//   device: on the instance, one team per source (a chunk of sources a
//     launch): a label-correcting method over a work list, each round
//     relaxing the edges of the nodes whose distance fell in the last one
//     below a threshold that moves up as they run out (Bellman–Ford with
//     a near-far split). The graph and every distance stay in the
//     instance's memory. A single source (each landmark's run) is one
//     team, a small part of a GPU.
//   automatic: device on a GPU for 64 or more sources at a time (the
//     landmarks' runs, one source each, stay on the host), else
//     host_dijkstra. On an H200 at 50,000 nodes 80 sources took 39.8 ms
//     on the device against 72.2 ms on 16 host threads, one source 35.8
//     against 11.3 ms.
// Both give the same distances to the last bit: each is the least fixed
// point of d(w) = min(d(w), d(v) + length(v, w)) over the same
// floating-point sums (float64).
enum class ShortestPaths { automatic, host_dijkstra, device };

namespace impl {
template <class Space, class T>
Graph knn_graph(const Space& space, const OTView2<const T, Space>& points,
                int k);
template <class Space, class T>
void graph_distances(const Space& space, const Graph& graph,
                     const std::vector<int>& sources,
                     const OTView2<T, Space>& distances, ShortestPaths method);
template <class Space, class T>
std::vector<int> landmark_embedding(const Space& space, const Graph& graph,
                                    const OTView2<T, Space>& embedding,
                                    ShortestPaths method);
}  // namespace impl

// The k-nearest-neighbour graph of points (N, d) (Euclidean lengths,
// symmetrised, 1 <= k < N), joined into one component.
template <class Space, class T>
Graph knn_graph(const Space& space, const OTView2<const T, Space>& points,
                int k) {
  return impl::knn_graph<Space, T>(space, points, k);
}

// distances(i, s) = the shortest-path distance from sources[s] to node i,
// (N, S). The edge lengths must be finite and >= 0.
template <class Space, class T>
void graph_distances(const Space& space, const Graph& graph,
                     const std::vector<int>& sources,
                     const OTView2<T, Space>& distances,
                     ShortestPaths method = ShortestPaths::automatic) {
  impl::graph_distances<Space, T>(space, graph, sources, distances, method);
}

// Farthest-point landmarks (the first node 0, each next one the node
// farthest from those chosen) and every node's distances to them:
// embedding (N, L) for L = embedding.extent(1) landmarks. Returns them.
template <class Space, class T>
std::vector<int> landmark_embedding(
    const Space& space, const Graph& graph, const OTView2<T, Space>& embedding,
    ShortestPaths method = ShortestPaths::automatic) {
  return impl::landmark_embedding<Space, T>(space, graph, embedding, method);
}

}  // namespace softwave
