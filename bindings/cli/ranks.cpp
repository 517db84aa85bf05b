#include "ranks.hpp"

#include <algorithm>
#include <cstdlib>

#ifdef SOFTWAVE_CLI_MPI
#include <mpi.h>
#endif

namespace softwave::cli {

Ranks& Ranks::instance() {
  static Ranks ranks;
  return ranks;
}

const Ranks& ranks() { return Ranks::instance(); }

#ifdef SOFTWAVE_CLI_MPI

namespace {

// Whether an MPI launcher started this process: Open MPI's mpirun, a PMI
// launcher (MPICH's hydra, Intel MPI, srun --mpi=pmi2) or a PMIx one (srun
// --mpi=pmix, prterun). A plain run stays out of MPI, whose start-up costs
// a singleton about half a second.
bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

bool joined = false;

}  // namespace

namespace impl {
std::vector<softwave::mpi::RowRange> mpi_ranges(
    const std::vector<RowRange>& ranges) {
  std::vector<softwave::mpi::RowRange> converted;
  for (const RowRange& r : ranges)
    converted.push_back({std::int64_t(r.first), std::int64_t(r.count)});
  return converted;
}
}  // namespace impl

void Ranks::start(int* argc, char*** argv) {
  if (!launched_by_mpi()) return;
  // Only the main thread calls MPI; Kokkos' OpenMP threads never do.
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  joined = true;
  Ranks& r = instance();
  MPI_Comm_rank(MPI_COMM_WORLD, &r.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &r.size_);
  const softwave::mpi::NodeRank node = softwave::mpi::node_rank(MPI_COMM_WORLD);
  r.node_rank_ = node.rank;
  r.node_size_ = node.size;
}

int Ranks::finish(int exit_code) {
  if (joined) MPI_Finalize();
  joined = false;
  return exit_code;
}

std::vector<RowRange> Ranks::split(
    std::size_t rows, const std::vector<std::int64_t>& row_cost) const {
  std::vector<RowRange> ranges;
  for (const softwave::mpi::RowRange& r :
       softwave::mpi::split_rows(size_, std::int64_t(rows),
                                 row_cost.empty() ? nullptr : row_cost.data()))
    ranges.push_back({std::size_t(r.first), std::size_t(r.count)});
  return ranges;
}

void Ranks::checkpoint() const {
  if (size_ == 1) return;
  const softwave::mpi::Failure first =
      softwave::mpi::first_failure(MPI_COMM_WORLD, nullptr);
  if (first.rank >= 0) throw peer_failure(first.code, first.message);
}

std::pair<int, std::string> Ranks::first_failure(
    int code, const std::string& message) const {
  if (size_ == 1) return {code, message};
  const softwave::mpi::Failure mine{rank_, code, message};
  const softwave::mpi::Failure first =
      softwave::mpi::first_failure(MPI_COMM_WORLD, &mine);
  return {first.code, first.message};
}

void Ranks::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);  // MPI_Abort does not return; this keeps [[noreturn]]
}

void Ranks::gather_to_all(const std::vector<RowRange>& ranges, double* all,
                          std::size_t row_size) const {
  if (size_ == 1) return;
  softwave::mpi::gather_to_all(MPI_COMM_WORLD, impl::mpi_ranges(ranges), all,
                               std::int64_t(row_size));
}

void Ranks::broadcast(double* values, std::size_t count, int from) const {
  if (size_ == 1) return;
  for (std::size_t done = 0; done < count;) {
    const int part = int(std::min<std::size_t>(count - done, 1 << 30));
    MPI_Bcast(values + done, part, MPI_DOUBLE, from, MPI_COMM_WORLD);
    done += std::size_t(part);
  }
}

void Ranks::broadcast(std::string& text, int from) const {
  if (size_ == 1) return;
  std::int64_t size = std::int64_t(text.size());
  MPI_Bcast(&size, 1, MPI_INT64_T, from, MPI_COMM_WORLD);
  text.resize(std::size_t(size));
  MPI_Bcast(text.data(), int(size), MPI_CHAR, from, MPI_COMM_WORLD);
}

void Ranks::sum(std::int64_t* values, int count) const {
  if (size_ == 1) return;
  MPI_Allreduce(MPI_IN_PLACE, values, count, MPI_INT64_T, MPI_SUM,
                MPI_COMM_WORLD);
}

#else  // one process

void Ranks::start(int*, char***) {}
int Ranks::finish(int exit_code) { return exit_code; }
std::vector<RowRange> Ranks::split(std::size_t rows,
                                   const std::vector<std::int64_t>&) const {
  return {RowRange{0, rows}};
}
void Ranks::checkpoint() const {}
std::pair<int, std::string> Ranks::first_failure(
    int code, const std::string& message) const {
  return {code, message};
}
void Ranks::abort(int code) const { std::exit(code); }
void Ranks::gather_to_all(const std::vector<RowRange>&, double*,
                          std::size_t) const {}
void Ranks::broadcast(double*, std::size_t, int) const {}
void Ranks::broadcast(std::string&, int) const {}
void Ranks::sum(std::int64_t*, int) const {}

#endif

}  // namespace softwave::cli
