#pragma once
// Shortest-path columns of a graph side, kept across iterations and
// restarts. Each iteration's anchors are the sources of Dijkstra runs on
// the host, and once a plan has formed the same nodes come back as anchors
// iteration after iteration (TorchGW keeps 2,000 rows a side for this).
// Up to `capacity` columns live in an (N, capacity) store on the device;
// the least recently used make room. A node's column is the same whether it
// was run now or kept, so the plan does not depend on the cache.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <softwave/graph.hpp>
#include <softwave/sinkhorn.hpp>
#include <unordered_map>
#include <vector>

#include "frontier_paths.hpp"
#include "plan_terms.hpp"

namespace softwave::impl {

// to(i, to_columns(j)) = from(i, from_columns(j)) for every row i and
// j < count.
template <class Space>
using ColumnList = Kokkos::View<const int*, typename Space::memory_space,
                                Kokkos::MemoryUnmanaged>;

template <class T, class Space>
void copy_graph_columns(const Space& space, const OTView2<const T, Space>& from,
                        const OTView2<T, Space>& to,
                        const ColumnList<Space>& from_columns,
                        const ColumnList<Space>& to_columns,
                        std::int64_t count) {
  std::int64_t const n = to.extent(0);
  if (count == 0 || n == 0) return;
  Kokkos::parallel_for(
      "softwave::gw::graph_columns",
      Kokkos::RangePolicy<Space>(space, 0, n * count),
      KOKKOS_LAMBDA(std::int64_t q) {
        std::int64_t const i = q / count, j = q % count;
        to(i, to_columns(j)) = from(i, from_columns(j));
      });
}

template <class T, class Space>
class GraphRows {
 public:
  using Memory = typename Space::memory_space;

  // capacity_bytes: the store's budget. Kept only where it holds at least
  // min(N, anchors) columns (one iteration's distinct anchors); else every
  // iteration runs its anchors.
  GraphRows(const Space& space, const Graph& graph, std::int64_t anchors,
            std::int64_t capacity_bytes, ShortestPaths method)
      : graph_(&graph),
        anchors_(anchors),
        lists_(uninitialised<int*>(space, "softwave::gw::graph_row_lists",
                                   4 * anchors)),
        lists_host_(
            compat::host_mirror("softwave::gw::graph_row_lists_host", lists_)),
        paths_(graph, method, anchors) {
    std::int64_t const n = graph.nodes();
    std::int64_t const fits =
        capacity_bytes / std::max<std::int64_t>(1, n * std::int64_t(sizeof(T)));
    std::int64_t const capacity = std::min(n, fits);
    if (capacity < std::min(n, anchors)) return;
    store_ = uninitialised<T**>(space, "softwave::gw::graph_rows", n, capacity);
    fresh_ =
        uninitialised<T*>(space, "softwave::gw::graph_fresh_rows", n * anchors);
    node_of_slot_.assign(capacity, -1);
    used_.assign(capacity, -1);
  }

  std::int64_t capacity() const { return store_.extent(1); }

  // columns(:, m) = the shortest paths from sources[m], for every m (any
  // number of sources: more than the anchors an iteration go a batch of
  // that many at a time, as the polishing iteration's do).
  void gather(const Space& space, const std::vector<int>& sources,
              const OTView2<T, Space>& columns) {
    if (capacity() == 0) {
      paths_.compute(space, sources, columns);
      return;
    }
    std::int64_t const count = sources.size();
    for (std::int64_t first = 0; first < count; first += anchors_)
      gather_batch(
          space,
          std::vector<int>(sources.begin() + first,
                           sources.begin() + std::min(count, first + anchors_)),
          columns, first);
  }

 private:
  // columns(:, first + m) = the shortest paths from sources[m], m < M.
  void gather_batch(const Space& space, const std::vector<int>& sources,
                    const OTView2<T, Space>& columns, std::int64_t first) {
    ++stamp_;
    space.fence();  // the last call's lists have reached the device
    std::int64_t const m = sources.size();
    std::vector<int> slot_of_anchor(m, -1), missing;
    std::unordered_map<int, int> missing_index;
    for (std::int64_t c = 0; c < m; ++c) {
      auto const kept = slot_of_node_.find(sources[c]);
      if (kept != slot_of_node_.end()) {
        slot_of_anchor[c] = kept->second;
        used_[kept->second] = stamp_;
      } else if (missing_index.emplace(sources[c], int(missing.size()))
                     .second) {
        missing.push_back(sources[c]);
      }
    }
    // Room for the missing nodes: the least recently used slots (free ones
    // first), never one this call reads.
    std::vector<int> slots(capacity());
    std::iota(slots.begin(), slots.end(), 0);
    std::stable_sort(slots.begin(), slots.end(),
                     [&](int x, int y) { return used_[x] < used_[y]; });
    int* const scatter_from = lists_host_.data();
    int* const scatter_to = scatter_from + anchors_;
    int* const gather_from = scatter_to + anchors_;
    int* const gather_to = gather_from + anchors_;
    for (std::size_t j = 0; j < missing.size(); ++j) {
      int const slot = slots[j];  // used_[slot] < stamp_ (see the class)
      if (node_of_slot_[slot] >= 0) slot_of_node_.erase(node_of_slot_[slot]);
      node_of_slot_[slot] = missing[j];
      slot_of_node_[missing[j]] = slot;
      used_[slot] = stamp_;
      scatter_from[j] = int(j);
      scatter_to[j] = slot;
    }
    for (std::int64_t c = 0; c < m; ++c) {
      gather_from[c] = slot_of_anchor[c] >= 0 ? slot_of_anchor[c]
                                              : slot_of_node_.at(sources[c]);
      gather_to[c] = int(first + c);
    }
    Kokkos::deep_copy(space, lists_, lists_host_);
    auto const list = [&](int part) {
      return ColumnList<Space>(lists_.data() + part * anchors_, anchors_);
    };
    if (!missing.empty()) {
      OTView2<T, Space> const fresh(fresh_.data(), graph_->nodes(),
                                    missing.size());
      paths_.compute(space, missing, fresh);
      copy_graph_columns<T, Space>(space, fresh, store_, list(0), list(1),
                                   missing.size());
    }
    copy_graph_columns<T, Space>(space, store_, columns, list(2), list(3), m);
  }

  const Graph* graph_;
  std::int64_t anchors_;
  OTView2<T, Space> store_;  // (N, capacity), empty: nothing kept
  Kokkos::View<T*, Kokkos::LayoutRight, Memory> fresh_;
  Kokkos::View<int*, Kokkos::LayoutRight, Memory> lists_;
  typename Kokkos::View<int*, Kokkos::LayoutRight, Memory>::HostMirror
      lists_host_;
  GraphPaths<Space> paths_;
  std::vector<int> node_of_slot_;   // -1: free
  std::vector<std::int64_t> used_;  // the call that last read each slot
  std::unordered_map<int, int> slot_of_node_;
  std::int64_t stamp_ = 0;
};

}  // namespace softwave::impl
