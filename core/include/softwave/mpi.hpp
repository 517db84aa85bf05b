#pragma once
// Soft-DTW across the ranks of an MPI communicator (target softwave::mpi,
// built with SOFTWAVE_ENABLE_MPI). Every rank holds the same series and calls
// the same function with the same arguments; the work is split by rows of
// the first set, in contiguous ranges balanced by the rows' lengths, and
// each rank runs its range on its own execution space (one GPU per rank:
// see rank_rows). Results travel through host memory, so no GPU-aware MPI is
// needed.
//
// The answer is that of one process: softwave::pairwise and
// softwave::nearest_neighbours compute each pair (each query) on its own,
// so hard DTW agrees bit for bit; Soft-DTW values agree to rounding, and bit
// for bit with an explicit options.kernel (the automatic choice looks at the
// number of pairs in a call, which a rank's share changes).
//
// Errors: an argument that one rank refuses is refused on every rank
// (softwave::invalid_argument, naming the rank that refused it and why)
// before any result is exchanged, so a bad call never leaves ranks waiting
// on each other.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <softwave/softdtw.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace softwave::mpi {

// Rows [first, first + count) of a set.
struct RowRange {
  std::int64_t first = 0;
  std::int64_t count = 0;
};

// Rows 0..rows-1 split into `ranks` contiguous ranges, in rank order, in
// whole blocks of `block` rows (the last may be short), so that the ranges'
// sums of row_cost are as even as whole blocks allow (row_cost: `rows`
// non-negative values, e.g. each series' length; null: every row costs 1).
// A rank can get no rows when there are fewer blocks than ranks.
std::vector<RowRange> split_rows(int ranks, std::int64_t rows,
                                 const std::int64_t* row_cost = nullptr,
                                 std::int64_t block = 1);

// This rank's range of split_rows(size of comm, ...).
RowRange rank_rows(MPI_Comm comm, std::int64_t rows,
                   const std::int64_t* row_cost = nullptr,
                   std::int64_t block = 1);

// The rank among those of comm on the same node (MPI_COMM_TYPE_SHARED) and
// their number: rank % devices is the GPU a rank should take (Kokkos'
// InitializationSettings::set_device_id) when it initialises Kokkos.
struct NodeRank {
  int rank = 0;
  int size = 1;
};
NodeRank node_rank(MPI_Comm comm);

// A failure that the ranks of a communicator agree on.
struct Failure {
  int rank = -1;  // the lowest rank that failed; -1: none did
  int code = 0;   // what that rank said about it (the caller's convention)
  std::string message;
};

// Collective: every rank says whether it failed (`mine`, null when it did
// not) and all learn the first failure, so that they can stop together
// instead of waiting on a rank that has given up.
Failure first_failure(MPI_Comm comm, const Failure* mine);

// Streams the rows that the other ranks hold to `root`, rank by rank in rank
// order: rank r (r != root) holds `local`, the ranges[r].count rows of
// row_size values of V it owns (host memory); root calls on_rows(first_row,
// rows, values) for each chunk of at most chunk_bytes as it arrives. Root's
// own range is not passed (root has it). V: float, double or std::int64_t.
template <class V, class OnRows>
void send_rows_to_root(MPI_Comm comm, int root,
                       const std::vector<RowRange>& ranges, const V* local,
                       std::int64_t row_size, OnRows&& on_rows,
                       std::size_t chunk_bytes = std::size_t(64) << 20);

// Every rank's rows onto every rank: `all` (host memory) holds every row of
// row_size values of V, in row order; each rank fills its own range of
// `ranges` before the call and finds the others' filled after it.
template <class V>
void gather_to_all(MPI_Comm comm, const std::vector<RowRange>& ranges, V* all,
                   std::int64_t row_size);

namespace impl {
// Compiled for float and double on Kokkos' default execution spaces.
template <class Space, class T>
void pairwise(const Space& space, MPI_Comm comm, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView2<value_t<T>, Space> matrix,
              const SoftDTWOptions& options, PairwiseValue what,
              const Lengths<Space>& lengths, int root);
template <class Space, class T>
void nearest_neighbours(const Space& space, MPI_Comm comm,
                        ConstSeriesView<T, Space> queries,
                        ConstSeriesView<T, Space> references,
                        ArrayView2<std::int64_t, Space> indices,
                        ArrayView2<value_t<T>, Space> distances,
                        const SoftDTWOptions& options,
                        const Lengths<Space>& lengths,
                        SearchStatistics* statistics);
}  // namespace impl

// softwave::pairwise (same arguments, float or double series) on every
// rank's rows of x, gathered into `matrix` (B1, B2) on `root`; on the other
// ranks `matrix` is not touched and may be empty. Returns on root once the
// whole matrix is there.
template <class Space, class XView, class YView, class MatrixView>
void pairwise(const Space& space, MPI_Comm comm, const XView& x, const YView& y,
              const MatrixView& matrix, const SoftDTWOptions& options = {},
              PairwiseValue what = PairwiseValue::soft_dtw,
              const Lengths<Space>& lengths = {}, int root = 0) {
  using T = softwave::impl::input_t<XView>;
  static_assert(softwave::impl::view_for<XView, Space, 3> &&
                    (std::is_same_v<T, float> || std::is_same_v<T, double>),
                "softwave::mpi::pairwise: x must be a rank-3 Kokkos::View "
                "(B1, N, d) of float or double, LayoutRight, in the execution "
                "space's memory space");
  impl::pairwise<Space, T>(space, comm, x, y, matrix, options, what, lengths,
                           root);
}

// softwave::nearest_neighbours (same arguments) with the queries split
// across the ranks; every rank receives all of `indices` and `distances`
// (B1, k), and `statistics` (when given) the sums over the ranks.
template <class Space, class QueryView, class ReferenceView, class IndexView,
          class DistanceView>
void nearest_neighbours(const Space& space, MPI_Comm comm,
                        const QueryView& queries,
                        const ReferenceView& references,
                        const IndexView& indices, const DistanceView& distances,
                        const SoftDTWOptions& options = {},
                        const Lengths<Space>& lengths = {},
                        SearchStatistics* statistics = nullptr) {
  using T = softwave::impl::input_t<QueryView>;
  static_assert(softwave::impl::view_for<QueryView, Space, 3> &&
                    (std::is_same_v<T, float> || std::is_same_v<T, double>),
                "softwave::mpi::nearest_neighbours: queries must be a rank-3 "
                "Kokkos::View (B1, N, d) of float or double, LayoutRight, in "
                "the execution space's memory space");
  impl::nearest_neighbours<Space, T>(space, comm, queries, references, indices,
                                     distances, options, lengths, statistics);
}

// Implementation of send_rows_to_root: every chunk of rows is one message.

namespace impl {

template <class V>
MPI_Datatype datatype();
template <>
inline MPI_Datatype datatype<float>() {
  return MPI_FLOAT;
}
template <>
inline MPI_Datatype datatype<double>() {
  return MPI_DOUBLE;
}
template <>
inline MPI_Datatype datatype<std::int64_t>() {
  return MPI_INT64_T;
}

// Rows per message: at most chunk_bytes, at least one row; the count of
// values in a message fits MPI's int.
std::int64_t rows_per_message(std::int64_t row_size, std::size_t value_bytes,
                              std::size_t chunk_bytes);

}  // namespace impl

template <class V>
void gather_to_all(MPI_Comm comm, const std::vector<RowRange>& ranges, V* all,
                   std::int64_t row_size) {
  if (row_size == 0) return;
  // One row is one element of a contiguous type, so the counts and offsets,
  // in rows, fit MPI's int for any set of fewer than 2^31 series; the call
  // refuses a row of more values than such a type can describe.
  impl::rows_per_message(row_size, sizeof(V), 0);
  MPI_Datatype row;
  MPI_Type_contiguous(int(row_size), impl::datatype<V>(), &row);
  MPI_Type_commit(&row);
  std::vector<int> counts, offsets;
  for (const RowRange& r : ranges) {
    counts.push_back(int(r.count));
    offsets.push_back(int(r.first));
  }
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts.data(),
                 offsets.data(), row, comm);
  MPI_Type_free(&row);
}

template <class V, class OnRows>
void send_rows_to_root(MPI_Comm comm, int root,
                       const std::vector<RowRange>& ranges, const V* local,
                       std::int64_t row_size, OnRows&& on_rows,
                       std::size_t chunk_bytes) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const std::int64_t chunk_rows =
      impl::rows_per_message(row_size, sizeof(V), chunk_bytes);
  if (rank != root) {
    const RowRange mine = ranges[std::size_t(rank)];
    for (std::int64_t done = 0; done < mine.count; done += chunk_rows) {
      const std::int64_t rows = std::min(chunk_rows, mine.count - done);
      MPI_Send(local + done * row_size, int(rows * row_size),
               impl::datatype<V>(), root, 0, comm);
    }
    return;
  }
  std::vector<V> buffer(std::size_t(chunk_rows * row_size));
  for (int from = 0; from < int(ranges.size()); ++from) {
    if (from == root) continue;
    const RowRange range = ranges[std::size_t(from)];
    for (std::int64_t done = 0; done < range.count; done += chunk_rows) {
      const std::int64_t rows = std::min(chunk_rows, range.count - done);
      MPI_Recv(buffer.data(), int(rows * row_size), impl::datatype<V>(), from,
               0, comm, MPI_STATUS_IGNORE);
      on_rows(range.first + done, rows, static_cast<const V*>(buffer.data()));
    }
  }
}

}  // namespace softwave::mpi
