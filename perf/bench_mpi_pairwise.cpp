// softwave_bench_mpi: all-pairs Soft-DTW / hard DTW of B series against
// themselves across the ranks of mpirun (softwave::mpi::pairwise), for the
// scaling figures of perf/RESULTS.md. Not Google Benchmark: the quantity is
// a collective one (every rank's share, then the gather on rank 0), timed
// between barriers.
//
//   mpirun -n R softwave_bench_mpi --series B --length N [--dims d]
//          [--gamma g] [--kernel automatic|portable|specialised]
//          [--repeats K] [--warmup 0|1]
//
// Each rank takes its GPU by node-local rank (compat::initialize), makes x ~
// N(0, 1) (float32, B × N × d) and, after a warm-up (of each; --warmup 0
// skips it where one call takes seconds), times K repeats of
//   compute: softwave::pairwise on the rank's rows (mpi::rank_rows), fenced;
//            the slowest rank's time is the step's;
//   total:   softwave::mpi::pairwise, the whole matrix on rank 0 (device to
//            host, MPI to rank 0, host to device), between barriers.
// Rank 0 prints one JSON object: medians, cells/s (B²·N² cells) of both,
// and the gather's share.

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <softwave/kokkos_compat.hpp>
#include <softwave/mpi.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace {

using Space = Kokkos::DefaultExecutionSpace;
using Clock = std::chrono::steady_clock;

struct Settings {
  std::int64_t series = 10000, length = 128, dims = 1;
  double gamma = 1.0;
  softwave::Kernel kernel = softwave::Kernel::automatic;
  std::string kernel_name = "automatic";
  int repeats = 3;
  bool warmup = true;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "softwave_bench_mpi: %s\nusage: softwave_bench_mpi --series B "
               "--length N [--dims d] [--gamma g] [--kernel "
               "automatic|portable|specialised] [--repeats K] [--warmup 0|1]\n",
               why.c_str());
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::exit(2);
}

Settings parse(int argc, char** argv) {
  Settings s;
  for (int a = 1; a < argc; ++a) {
    const std::string flag = argv[a];
    if (flag.rfind("--kokkos", 0) == 0) continue;
    if (a + 1 >= argc) usage("missing value of " + flag);
    const std::string value = argv[++a];
    if (flag == "--series")
      s.series = std::stoll(value);
    else if (flag == "--length")
      s.length = std::stoll(value);
    else if (flag == "--dims")
      s.dims = std::stoll(value);
    else if (flag == "--gamma")
      s.gamma = std::stod(value);
    else if (flag == "--repeats")
      s.repeats = std::stoi(value);
    else if (flag == "--warmup")
      s.warmup = value != "0";
    else if (flag == "--kernel") {
      s.kernel_name = value;
      if (value == "automatic")
        s.kernel = softwave::Kernel::automatic;
      else if (value == "portable")
        s.kernel = softwave::Kernel::portable;
      else if (value == "specialised")
        s.kernel = softwave::Kernel::specialised;
      else
        usage("unknown kernel " + value);
    } else
      usage("unknown option " + flag);
  }
  if (s.series < 1 || s.length < 1 || s.dims < 1 || s.repeats < 1)
    usage("sizes and repeats must be >= 1");
  return s;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run(const Settings& s, int rank, int ranks) {
  const Space space;
  using Series = Kokkos::View<float***, Kokkos::LayoutRight, Space>;
  using Matrix = Kokkos::View<float**, Kokkos::LayoutRight, Space>;
  // Timing only: each rank fills its own x; the values are not compared.
  Series x(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                              std::string("softwave_bench::x")),
           s.series, s.length, s.dims);
  softwave_bench::fill_normal(x, 1234 + std::uint64_t(rank));
  softwave::SoftDTWOptions options;
  options.gamma = s.gamma;
  options.kernel = s.kernel;
  options.check_values = false;
  const softwave::mpi::RowRange mine =
      softwave::mpi::rank_rows(MPI_COMM_WORLD, s.series);
  Matrix rows(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                 std::string("softwave_bench::rows")),
              mine.count, s.series);
  Matrix matrix(Kokkos::view_alloc(Kokkos::WithoutInitializing,
                                   std::string("softwave_bench::matrix")),
                rank == 0 ? s.series : 0, rank == 0 ? s.series : 0);
  const auto my_x =
      Kokkos::subview(x, std::make_pair(mine.first, mine.first + mine.count),
                      Kokkos::ALL, Kokkos::ALL);

  auto compute = [&] {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    if (mine.count > 0) softwave::pairwise(space, my_x, x, rows, options);
    space.fence();
    double mine_s = seconds_since(start), slowest = 0;
    MPI_Allreduce(&mine_s, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
  };
  auto total = [&] {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto start = Clock::now();
    softwave::mpi::pairwise(space, MPI_COMM_WORLD, x, x, matrix, options);
    MPI_Barrier(MPI_COMM_WORLD);
    return seconds_since(start);
  };
  if (s.warmup) {
    compute();
    total();
  }
  std::vector<double> computes, totals;
  for (int r = 0; r < s.repeats; ++r) {
    computes.push_back(compute());
    totals.push_back(total());
  }
  if (rank != 0) return;
  const double cells =
      double(s.series) * double(s.series) * double(s.length) * double(s.length);
  const double c = median(computes), t = median(totals);
  std::printf(
      "{\"bench\": \"mpi_pairwise\", \"ranks\": %d, \"execution_space\": "
      "\"%s\", \"series\": %lld, \"length\": %lld, \"d\": %lld, \"gamma\": "
      "%g, \"kernel\": \"%s\", \"repeats\": %d, \"compute_s\": %.6f, "
      "\"total_s\": %.6f, \"compute_cells_per_s\": %.4e, "
      "\"total_cells_per_s\": "
      "%.4e, \"gather_share\": %.4f}\n",
      ranks, Space::name(), (long long)s.series, (long long)s.length,
      (long long)s.dims, s.gamma, s.kernel_name.c_str(), s.repeats, c, t,
      cells / c, cells / t, (t - c) / t);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Settings settings = parse(argc, argv);
  const softwave::mpi::NodeRank node = softwave::mpi::node_rank(MPI_COMM_WORLD);
  softwave::compat::initialize(0, /*quiet=*/true, node.rank);
  run(settings, rank, ranks);
  Kokkos::finalize();
  MPI_Finalize();
  return 0;
}
