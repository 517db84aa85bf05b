// The installed softwave::mpi: all-pairs hard DTW of 9 × 4 short series
// split across the ranks and gathered on rank 0, which compares it with the
// single-process softwave::pairwise. Exits non-zero on any rank's mismatch.

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <softwave/mpi.hpp>

namespace {

int run(int rank) {
  using Space = Kokkos::DefaultExecutionSpace;
  using Series =
      Kokkos::View<double***, Kokkos::LayoutRight, Space::memory_space>;
  using Matrix =
      Kokkos::View<double**, Kokkos::LayoutRight, Space::memory_space>;
  Series x("x", 9, 6, 1), y("y", 4, 5, 1);
  auto hx = Kokkos::create_mirror_view(x);
  auto hy = Kokkos::create_mirror_view(y);
  for (std::size_t q = 0; q < hx.size(); ++q) hx.data()[q] = double(q % 7) - 3;
  for (std::size_t q = 0; q < hy.size(); ++q) hy.data()[q] = double(q % 5) - 2;
  Kokkos::deep_copy(x, hx);
  Kokkos::deep_copy(y, hy);
  softwave::SoftDTWOptions options;
  options.gamma = 0;
  Matrix one("one", 9, 4), gathered("gathered", 9, 4);
  softwave::pairwise(Space(), x, y, one, options);
  softwave::mpi::pairwise(Space(), MPI_COMM_WORLD, x, y, gathered, options);
  if (rank != 0) return 0;
  auto a = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), one);
  auto b = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), gathered);
  for (std::size_t q = 0; q < a.size(); ++q)
    if (a.data()[q] != b.data()[q]) {
      std::printf(
          "FAIL: softwave::mpi::pairwise entry %zu: %g, one process %g\n", q,
          b.data()[q], a.data()[q]);
      return 1;
    }
  std::printf("softwave::mpi::pairwise: 9 x 4 hard DTW as one process\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int failed = 0;
  {
    Kokkos::ScopeGuard kokkos(argc, argv);
    failed = run(rank);
  }
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
