#pragma once
// The processes of one softwave run: one, or, in a CLI built with
// SOFTWAVE_ENABLE_MPI and started by an MPI launcher (mpirun, mpiexec,
// srun), the ranks of MPI_COMM_WORLD. knn, pairwise and cluster split their
// rows across the ranks; rank 0 reads the same files as every rank, writes
// the outputs and prints the report.
//
// Failures: a rank that fails tells the others at their next checkpoint(),
// where every rank stops with the first failing rank's error (rank 0 reports
// it, every rank exits with its code). A failure inside an Exchange, where
// ranks wait on each other's messages, cannot wait for a checkpoint: the
// rank reports it and aborts the job.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#ifdef SOFTWAVE_CLI_MPI
#include <softwave/mpi.hpp>
#endif

namespace softwave::cli {

// Rows [first, first + count) of a set.
struct RowRange {
  std::size_t first = 0;
  std::size_t count = 0;
};

// Thrown at a checkpoint on the ranks that did not fail: the failing rank's
// exit code and message.
class peer_failure : public std::runtime_error {
 public:
  peer_failure(int code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

class Ranks {
 public:
  // Joins MPI when started by a launcher (and built with MPI); once, from
  // main(), before any other use.
  static void start(int* argc, char*** argv);
  // Leaves MPI (where joined) and returns exit_code.
  static int finish(int exit_code);

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool root() const { return rank_ == 0; }
  // The rank among those on this node and their number: the GPU a rank
  // takes, and its share of the cores.
  int node_rank() const { return node_rank_; }
  int node_size() const { return node_size_; }

  // Every rank's range of rows 0..rows-1, contiguous and in rank order,
  // balanced by row_cost (one value per row, e.g. series lengths).
  std::vector<RowRange> split(std::size_t rows,
                              const std::vector<std::int64_t>& row_cost) const;
  RowRange mine(const std::vector<RowRange>& ranges) const {
    return ranges[std::size_t(rank_)];
  }

  // Collective. Throws peer_failure when another rank has failed.
  void checkpoint() const;
  // Collective, from main() on a rank that failed (outside an Exchange):
  // the first failing rank's code and message, for every rank to exit with.
  std::pair<int, std::string> first_failure(int code,
                                            const std::string& message) const;
  // Ends the job from a rank whose failure the others cannot hear about.
  [[noreturn]] void abort(int code) const;
  // Whether an error left an Exchange on this rank.
  bool failed_in_exchange() const { return failed_in_exchange_; }

  // Rows the other ranks hold, to rank 0 (see softwave::mpi::
  // send_rows_to_root); on rank 0 on_rows(first_row, rows, values) sees
  // every other range. Nothing happens on one rank. Inside an Exchange.
  template <class V, class OnRows>
  void send_to_root(const std::vector<RowRange>& ranges, const V* local,
                    std::size_t row_size, OnRows&& on_rows) const;
  // Every rank's rows onto every rank: each fills its own range of `all`
  // (every row, row_size values each) and finds the others'. Inside an
  // Exchange.
  void gather_to_all(const std::vector<RowRange>& ranges, double* all,
                     std::size_t row_size) const;
  // `values` of rank `from` onto every rank. Inside an Exchange.
  void broadcast(double* values, std::size_t count, int from) const;
  void broadcast(std::string& text, int from) const;
  // The sums over the ranks, on every rank. Inside an Exchange.
  void sum(std::int64_t* values, int count) const;

  // Marks the calls above, which only return once the other ranks have
  // taken part.
  class Exchange {
   public:
    explicit Exchange(const Ranks& ranks)
        : ranks_(ranks), errors_(std::uncaught_exceptions()) {}
    ~Exchange() {
      if (std::uncaught_exceptions() > errors_)
        ranks_.failed_in_exchange_ = true;
    }
    Exchange(const Exchange&) = delete;
    Exchange& operator=(const Exchange&) = delete;

   private:
    const Ranks& ranks_;
    int errors_;
  };

 private:
  int rank_ = 0, size_ = 1, node_rank_ = 0, node_size_ = 1;
  mutable bool failed_in_exchange_ = false;
  friend const Ranks& ranks();
  static Ranks& instance();
};

// The run's ranks (one until Ranks::start joins MPI).
const Ranks& ranks();

#ifdef SOFTWAVE_CLI_MPI
namespace impl {
std::vector<softwave::mpi::RowRange> mpi_ranges(
    const std::vector<RowRange>& ranges);
}

template <class V, class OnRows>
void Ranks::send_to_root(const std::vector<RowRange>& ranges, const V* local,
                         std::size_t row_size, OnRows&& on_rows) const {
  if (size_ == 1) return;
  softwave::mpi::send_rows_to_root(
      MPI_COMM_WORLD, 0, impl::mpi_ranges(ranges), local,
      std::int64_t(row_size),
      [&](std::int64_t first, std::int64_t rows, const V* values) {
        on_rows(std::size_t(first), std::size_t(rows), values);
      });
}
#else
template <class V, class OnRows>
void Ranks::send_to_root(const std::vector<RowRange>&, const V*, std::size_t,
                         OnRows&&) const {}
#endif

}  // namespace softwave::cli
