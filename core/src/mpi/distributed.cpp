// softwave::mpi: the row split, agreement on failures, and pairwise /
// nearest_neighbours across the ranks of a communicator (softwave/mpi.hpp).

#include <climits>
#include <exception>
#include <softwave/errors.hpp>
#include <softwave/mpi.hpp>
#include <stdexcept>
#include <string>
#include <utility>

namespace softwave::mpi {
namespace {

int size_of(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

// Runs `step` on every rank; when it throws on any rank, every rank throws:
// the rank that failed its own error, the others an error of the same kind
// naming that rank and what it said.
template <class Step>
void agree(MPI_Comm comm, const char* function, Step&& step) {
  constexpr int argument_error = 1, other_error = 2;
  std::exception_ptr error;
  Failure mine;
  try {
    step();
  } catch (const softwave::invalid_argument& e) {
    error = std::current_exception();
    mine = {rank_in(comm), argument_error, e.what()};
  } catch (const std::exception& e) {
    error = std::current_exception();
    mine = {rank_in(comm), other_error, e.what()};
  } catch (...) {
    error = std::current_exception();
    mine = {rank_in(comm), other_error, "unknown error"};
  }
  const Failure first = first_failure(comm, error ? &mine : nullptr);
  if (first.rank < 0) return;
  if (error) std::rethrow_exception(error);
  std::string said = first.message;
  const std::string prefix = "softwave: ";
  if (said.rfind(prefix, 0) == 0) said.erase(0, prefix.size());
  const std::string where = std::string("mpi::") + function + ": rank " +
                            std::to_string(first.rank) + " ";
  if (first.code == argument_error)
    throw softwave::invalid_argument(where + "refused its arguments: " + said);
  throw std::runtime_error(prefix + where + "failed: " + said);
}

// The lengths of `x`'s series on the host: lengths.x where given, else the
// padded length of every series (the rows' costs for split_rows).
template <class Space, class T>
std::vector<std::int64_t> row_lengths(
    const Space& space, ConstSeriesView<T, Space> x,
    const Kokkos::View<const int*, typename Space::memory_space>& lengths) {
  std::vector<std::int64_t> costs(x.extent(0), std::int64_t(x.extent(1)));
  if (lengths.extent(0) == 0) return costs;
  if (lengths.extent(0) != x.extent(0))
    softwave::impl::throw_invalid_argument(
        "lengths.x must have one length per series (", x.extent(0), "), got ",
        lengths.extent(0));
  using Layout =
      typename Kokkos::View<const int*,
                            typename Space::memory_space>::array_layout;
  Kokkos::View<int*, Layout, Kokkos::HostSpace> host(
      Kokkos::view_alloc(Kokkos::WithoutInitializing,
                         std::string("softwave::mpi::lengths")),
      lengths.extent(0));
  Kokkos::deep_copy(space, host, lengths);
  space.fence();
  for (std::size_t s = 0; s < costs.size(); ++s)
    costs[s] = std::max(host(s), 0);
  return costs;
}

template <class V>
using HostRows = Kokkos::View<V**, Kokkos::LayoutRight, Kokkos::HostSpace>;

template <class V, class Space>
HostRows<V> to_host(const Space& space, const ArrayView2<V, Space>& rows,
                    const std::string& label) {
  HostRows<V> host(Kokkos::view_alloc(Kokkos::WithoutInitializing, label),
                   rows.extent(0), rows.extent(1));
  Kokkos::deep_copy(space, host, rows);
  space.fence();
  return host;
}

}  // namespace

std::vector<RowRange> split_rows(int ranks, std::int64_t rows,
                                 const std::int64_t* row_cost,
                                 std::int64_t block) {
  if (ranks < 1)
    softwave::impl::throw_invalid_argument("ranks must be >= 1, got ", ranks);
  if (rows < 0)
    softwave::impl::throw_invalid_argument("rows must be >= 0, got ", rows);
  if (block < 1)
    softwave::impl::throw_invalid_argument("block must be >= 1, got ", block);
  // The cost of each block, then each rank's boundary: the first block at
  // which the running cost reaches its share, rank r starting where the
  // cost before it reaches r / ranks of the total.
  const std::int64_t blocks = (rows + block - 1) / block;
  std::vector<double> before(std::size_t(blocks) + 1, 0.0);
  for (std::int64_t b = 0; b < blocks; ++b) {
    double cost = 0;
    for (std::int64_t r = b * block; r < std::min(rows, (b + 1) * block); ++r) {
      if (row_cost && row_cost[r] < 0)
        softwave::impl::throw_invalid_argument("row_cost must be >= 0, got ",
                                               row_cost[r], " for row ", r);
      cost += row_cost ? double(row_cost[r]) : 1.0;
    }
    before[std::size_t(b) + 1] = before[std::size_t(b)] + cost;
  }
  const double total = before.back();
  std::vector<std::int64_t> start(std::size_t(ranks) + 1, blocks);
  std::int64_t b = 0;
  for (int r = 0; r < ranks; ++r) {
    const double share = total * double(r) / double(ranks);
    // The boundary is the block whose start is nearest the share.
    while (b < blocks &&
           before[std::size_t(b) + 1] - share <= share - before[std::size_t(b)])
      ++b;
    start[std::size_t(r)] = r == 0 ? 0 : b;
  }
  std::vector<RowRange> ranges(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const std::int64_t first = std::min(rows, start[std::size_t(r)] * block);
    const std::int64_t last = std::min(rows, start[std::size_t(r) + 1] * block);
    ranges[std::size_t(r)] = {first, last - first};
  }
  return ranges;
}

RowRange rank_rows(MPI_Comm comm, std::int64_t rows,
                   const std::int64_t* row_cost, std::int64_t block) {
  return split_rows(size_of(comm), rows, row_cost,
                    block)[std::size_t(rank_in(comm))];
}

NodeRank node_rank(MPI_Comm comm) {
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank_in(comm), MPI_INFO_NULL,
                      &node);
  NodeRank result;
  MPI_Comm_rank(node, &result.rank);
  MPI_Comm_size(node, &result.size);
  MPI_Comm_free(&node);
  return result;
}

Failure first_failure(MPI_Comm comm, const Failure* mine) {
  const int size = size_of(comm);
  const int said = mine ? rank_in(comm) : size;
  int first = size;
  MPI_Allreduce(&said, &first, 1, MPI_INT, MPI_MIN, comm);
  Failure failure;
  if (first == size) return failure;
  failure.rank = first;
  if (mine && said == first) failure = {first, mine->code, mine->message};
  int header[2] = {failure.code, int(failure.message.size())};
  MPI_Bcast(header, 2, MPI_INT, first, comm);
  failure.code = header[0];
  failure.message.resize(std::size_t(header[1]));
  MPI_Bcast(failure.message.data(), header[1], MPI_CHAR, first, comm);
  return failure;
}

namespace impl {

std::int64_t rows_per_message(std::int64_t row_size, std::size_t value_bytes,
                              std::size_t chunk_bytes) {
  const std::int64_t per_row = std::max<std::int64_t>(row_size, 1);
  if (per_row > INT_MAX)
    softwave::impl::throw_invalid_argument(
        "mpi: a row of ", row_size,
        " values is more than one MPI message holds");
  const std::int64_t fit =
      std::int64_t(chunk_bytes / (std::size_t(per_row) * value_bytes));
  return std::clamp<std::int64_t>(fit, 1, INT_MAX / per_row);
}

template <class Space, class T>
void pairwise(const Space& space, MPI_Comm comm, ConstSeriesView<T, Space> x,
              ConstSeriesView<T, Space> y, ArrayView2<value_t<T>, Space> matrix,
              const SoftDTWOptions& options, PairwiseValue what,
              const Lengths<Space>& lengths, int root) {
  using V = value_t<T>;
  const int size = size_of(comm), rank = rank_in(comm);
  const std::int64_t columns = std::int64_t(y.extent(0));
  std::vector<RowRange> ranges;
  HostRows<V> mine;
  agree(comm, "pairwise", [&] {
    if (root < 0 || root >= size)
      softwave::impl::throw_invalid_argument(
          "root must be a rank of comm (0 to ", size - 1, "), got ", root);
    if (rank == root &&
        (matrix.extent(0) != x.extent(0) || matrix.extent(1) != y.extent(0)))
      softwave::impl::throw_invalid_argument(
          "matrix must be (", x.extent(0), ", ", y.extent(0),
          ") on root, got (", matrix.extent(0), ", ", matrix.extent(1), ")");
    const std::vector<std::int64_t> costs =
        row_lengths<Space, T>(space, x, lengths.x);
    ranges = split_rows(size, std::int64_t(x.extent(0)), costs.data());
    const RowRange range = ranges[std::size_t(rank)];
    const auto rows = std::make_pair(range.first, range.first + range.count);
    ArrayView2<V, Space> local(
        Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                           std::string("softwave::mpi::matrix_rows")),
        range.count, columns);
    if (range.count > 0) {
      Lengths<Space> part = lengths;
      if (lengths.x.extent(0) > 0) part.x = Kokkos::subview(lengths.x, rows);
      softwave::pairwise(space,
                         ConstSeriesView<T, Space>(Kokkos::subview(
                             x, rows, Kokkos::ALL, Kokkos::ALL)),
                         y, local, options, what, part);
    }
    mine = to_host(space, local, "softwave::mpi::matrix_rows_host");
  });
  HostRows<V> all;
  if (rank == root) {
    all = HostRows<V>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing,
                           std::string("softwave::mpi::matrix_host")),
        x.extent(0), y.extent(0));
    const RowRange own = ranges[std::size_t(root)];
    std::copy(mine.data(), mine.data() + own.count * columns,
              all.data() + own.first * columns);
  }
  send_rows_to_root(
      comm, root, ranges, mine.data(), columns,
      [&](std::int64_t first, std::int64_t rows, const V* values) {
        std::copy(values, values + rows * columns,
                  all.data() + first * columns);
      });
  if (rank == root) {
    Kokkos::deep_copy(space, matrix, all);
    space.fence();
  }
}

template <class Space, class T>
void nearest_neighbours(const Space& space, MPI_Comm comm,
                        ConstSeriesView<T, Space> queries,
                        ConstSeriesView<T, Space> references,
                        ArrayView2<std::int64_t, Space> indices,
                        ArrayView2<value_t<T>, Space> distances,
                        const SoftDTWOptions& options,
                        const Lengths<Space>& lengths,
                        SearchStatistics* statistics) {
  using V = value_t<T>;
  const int size = size_of(comm), rank = rank_in(comm);
  const std::int64_t k = std::int64_t(indices.extent(1));
  std::vector<RowRange> ranges;
  HostRows<std::int64_t> my_indices;
  HostRows<V> my_distances;
  SearchStatistics counted;
  agree(comm, "nearest_neighbours", [&] {
    if (indices.extent(0) != queries.extent(0) ||
        distances.extent(0) != queries.extent(0) ||
        distances.extent(1) != indices.extent(1))
      softwave::impl::throw_invalid_argument(
          "indices and distances must both be (", queries.extent(0),
          ", k), got (", indices.extent(0), ", ", indices.extent(1), ") and (",
          distances.extent(0), ", ", distances.extent(1), ")");
    const std::vector<std::int64_t> costs =
        row_lengths<Space, T>(space, queries, lengths.x);
    ranges = split_rows(size, std::int64_t(queries.extent(0)), costs.data());
    const RowRange range = ranges[std::size_t(rank)];
    const auto rows = std::make_pair(range.first, range.first + range.count);
    Lengths<Space> part = lengths;
    if (lengths.x.extent(0) > 0) part.x = Kokkos::subview(lengths.x, rows);
    const auto my_queries = ConstSeriesView<T, Space>(
        Kokkos::subview(queries, rows, Kokkos::ALL, Kokkos::ALL));
    const ArrayView2<std::int64_t, Space> found_indices(
        Kokkos::subview(indices, rows, Kokkos::ALL));
    const ArrayView2<V, Space> found_distances(
        Kokkos::subview(distances, rows, Kokkos::ALL));
    if (range.count > 0)
      softwave::nearest_neighbours(space, my_queries, references, found_indices,
                                   found_distances, options, part,
                                   statistics ? &counted : nullptr);
    my_indices = to_host(space, found_indices, "softwave::mpi::indices_host");
    my_distances =
        to_host(space, found_distances, "softwave::mpi::distances_host");
  });
  HostRows<std::int64_t> all_indices(
      Kokkos::view_alloc(Kokkos::WithoutInitializing,
                         std::string("softwave::mpi::all_indices")),
      queries.extent(0), std::size_t(k));
  HostRows<V> all_distances(
      Kokkos::view_alloc(Kokkos::WithoutInitializing,
                         std::string("softwave::mpi::all_distances")),
      queries.extent(0), std::size_t(k));
  const RowRange own = ranges[std::size_t(rank)];
  std::copy(my_indices.data(), my_indices.data() + own.count * k,
            all_indices.data() + own.first * k);
  std::copy(my_distances.data(), my_distances.data() + own.count * k,
            all_distances.data() + own.first * k);
  gather_to_all(comm, ranges, all_indices.data(), k);
  gather_to_all(comm, ranges, all_distances.data(), k);
  Kokkos::deep_copy(space, indices, all_indices);
  Kokkos::deep_copy(space, distances, all_distances);
  space.fence();
  if (statistics) {
    std::int64_t sums[5] = {counted.pairs, counted.pruned,
                            counted.pruned_reverse, counted.abandoned,
                            counted.completed};
    MPI_Allreduce(MPI_IN_PLACE, sums, 5, MPI_INT64_T, MPI_SUM, comm);
    *statistics = {sums[0], sums[1], sums[2], sums[3], sums[4]};
  }
}

#define SOFTWAVE_INSTANTIATE_MPI(SPACE, T)                               \
  template void pairwise<SPACE, T>(                                      \
      const SPACE&, MPI_Comm, ConstSeriesView<T, SPACE>,                 \
      ConstSeriesView<T, SPACE>, ArrayView2<value_t<T>, SPACE>,          \
      const SoftDTWOptions&, PairwiseValue, const Lengths<SPACE>&, int); \
  template void nearest_neighbours<SPACE, T>(                            \
      const SPACE&, MPI_Comm, ConstSeriesView<T, SPACE>,                 \
      ConstSeriesView<T, SPACE>, ArrayView2<std::int64_t, SPACE>,        \
      ArrayView2<value_t<T>, SPACE>, const SoftDTWOptions&,              \
      const Lengths<SPACE>&, SearchStatistics*);

SOFTWAVE_INSTANTIATE_MPI(Kokkos::DefaultExecutionSpace, float)
SOFTWAVE_INSTANTIATE_MPI(Kokkos::DefaultExecutionSpace, double)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_MPI(Kokkos::DefaultHostExecutionSpace, float)
SOFTWAVE_INSTANTIATE_MPI(Kokkos::DefaultHostExecutionSpace, double)
#endif

}  // namespace impl
}  // namespace softwave::mpi
