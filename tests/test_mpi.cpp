// softwave::mpi (softwave/mpi.hpp), run under mpirun with 2 ranks (and
// also passing on one): the row split, pairwise gathered on a root, the
// distributed nearest-neighbour search, and errors that every rank sees.
// Each rank checks the distributed answer against the single-process
// entry point on the same fresh random inputs (the same seed on every
// rank), which the rest of the suite checks against the float64 reference.

#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <softwave/errors.hpp>
#include <softwave/mpi.hpp>
#include <string>
#include <vector>

namespace {

using Space = Kokkos::DefaultExecutionSpace;
template <class T>
using Series = Kokkos::View<T***, Kokkos::LayoutRight, Space::memory_space>;
template <class T>
using Matrix = Kokkos::View<T**, Kokkos::LayoutRight, Space::memory_space>;
using Ints = Kokkos::View<int*, Space::memory_space>;

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int ranks() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// One seed for every rank: rank 0's fresh one (or SOFTWAVE_TEST_SEED).
std::uint64_t shared_seed() {
  std::uint64_t seed = std::random_device{}();
  if (const char* s = std::getenv("SOFTWAVE_TEST_SEED")) seed = std::stoull(s);
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  return seed;
}

template <class T>
Series<T> random_series(std::mt19937_64& random, std::size_t count,
                        std::size_t length, std::size_t dims) {
  Series<T> view("series", count, length, dims);
  auto host = Kokkos::create_mirror_view(view);
  std::normal_distribution<double> normal;
  for (std::size_t q = 0; q < host.size(); ++q)
    host.data()[q] = T(normal(random));
  Kokkos::deep_copy(view, host);
  return view;
}

Ints random_lengths(std::mt19937_64& random, std::size_t count, int most) {
  Ints view("lengths", count);
  auto host = Kokkos::create_mirror_view(view);
  std::uniform_int_distribution<int> length(1, most);
  for (std::size_t q = 0; q < count; ++q) host(q) = length(random);
  Kokkos::deep_copy(view, host);
  return view;
}

template <class V>
std::vector<V> to_vector(const V* data, std::size_t size) {
  return std::vector<V>(data, data + size);
}

template <class View>
std::vector<typename View::non_const_value_type> host_values(const View& v) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return to_vector(host.data(), host.size());
}

TEST(MpiSplit, RangesCoverTheRowsInOrderAndBalanceTheCost) {
  const std::vector<std::int64_t> lengths = {100, 1, 1, 1, 1,  1,
                                             1,   1, 1, 1, 50, 50};
  for (int parts = 1; parts <= 5; ++parts) {
    for (const std::int64_t block : {1, 3}) {
      const auto ranges = softwave::mpi::split_rows(
          parts, std::int64_t(lengths.size()), lengths.data(), block);
      ASSERT_EQ(int(ranges.size()), parts);
      // Each range's cost is within one block's cost of an even share.
      double total = 0, largest_block = 0;
      for (std::size_t b = 0; b < lengths.size(); b += std::size_t(block)) {
        double cost = 0;
        for (std::size_t r = b; r < std::min(lengths.size(), b + block); ++r)
          cost += double(lengths[r]);
        total += cost;
        largest_block = std::max(largest_block, cost);
      }
      std::int64_t next = 0;
      for (const auto& r : ranges) {
        EXPECT_EQ(r.first, next);
        if (r.count > 0 && r.first + r.count < std::int64_t(lengths.size()))
          EXPECT_EQ(r.count % block, 0) << "whole blocks";
        double cost = 0;
        for (std::int64_t q = r.first; q < r.first + r.count; ++q)
          cost += double(lengths[std::size_t(q)]);
        EXPECT_LE(std::abs(cost - total / parts), largest_block)
            << parts << " parts, block " << block;
        next = r.first + r.count;
      }
      EXPECT_EQ(next, std::int64_t(lengths.size()));
    }
  }
  // 105 against 104: the long first series and five short ones, then the
  // rest.
  const auto two = softwave::mpi::split_rows(2, 12, lengths.data());
  EXPECT_EQ(two[0].count, 6);
  EXPECT_EQ(two[1].count, 6);
  // Uniform costs: counts differ by at most one.
  const auto even = softwave::mpi::split_rows(4, 10);
  for (const auto& r : even) EXPECT_TRUE(r.count == 2 || r.count == 3);
  // Fewer rows than ranks: some ranks get none.
  const auto few = softwave::mpi::split_rows(4, 2);
  std::int64_t total = 0;
  for (const auto& r : few) total += r.count;
  EXPECT_EQ(total, 2);
}

TEST(MpiSplit, BadArgumentsAreNamed) {
  EXPECT_THROW(softwave::mpi::split_rows(0, 5), softwave::invalid_argument);
  EXPECT_THROW(softwave::mpi::split_rows(2, -1), softwave::invalid_argument);
  EXPECT_THROW(softwave::mpi::split_rows(2, 5, nullptr, 0),
               softwave::invalid_argument);
  const std::int64_t negative[] = {1, -2};
  try {
    softwave::mpi::split_rows(2, 2, negative);
    ADD_FAILURE() << "no error";
  } catch (const softwave::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("row_cost"), std::string::npos);
  }
}

template <class T>
void expect_pairwise_as_one_process(softwave::SoftDTWOptions options,
                                    bool exact) {
  std::mt19937_64 random(shared_seed());
  const Space space;
  const auto x = random_series<T>(random, 37, 21, 2);
  const auto y = random_series<T>(random, 11, 17, 2);
  softwave::Lengths<Space> lengths{random_lengths(random, 37, 21),
                                   random_lengths(random, 11, 17)};
  options.kernel = softwave::Kernel::portable;  // the same kernel either way
  for (const int root : {0, ranks() - 1}) {
    Matrix<T> one("one", 37, 11), gathered("gathered", 37, 11);
    softwave::pairwise(space, x, y, one, options,
                       softwave::PairwiseValue::soft_dtw, lengths);
    softwave::mpi::pairwise(space, MPI_COMM_WORLD, x, y, gathered, options,
                            softwave::PairwiseValue::soft_dtw, lengths, root);
    if (rank() != root) continue;
    const auto a = host_values(one), b = host_values(gathered);
    for (std::size_t q = 0; q < a.size(); ++q) {
      if (exact)
        EXPECT_EQ(a[q], b[q]) << "entry " << q;
      else
        EXPECT_NEAR(a[q], b[q], 1e-5 * (1 + std::abs(a[q]))) << "entry " << q;
    }
  }
}

TEST(MpiPairwise, HardDtwGatheredOnRootIsBitForBit) {
  softwave::SoftDTWOptions options;
  options.gamma = 0;
  options.band = 6;
  expect_pairwise_as_one_process<double>(options, true);
  expect_pairwise_as_one_process<float>(options, true);
}

TEST(MpiPairwise, SoftDtwWithAPinnedKernelIsBitForBit) {
  softwave::SoftDTWOptions options;
  options.gamma = 0.3;
  expect_pairwise_as_one_process<double>(options, true);
}

TEST(MpiNearest, EveryRankGetsTheNeighboursAndSummedCounts) {
  std::mt19937_64 random(shared_seed());
  const Space space;
  const auto queries = random_series<double>(random, 29, 24, 1);
  const auto references = random_series<double>(random, 40, 24, 1);
  softwave::SoftDTWOptions options;
  options.gamma = 0;
  options.band = 3;
  Matrix<std::int64_t> one_indices("one_indices", 29, 3),
      indices("indices", 29, 3);
  Matrix<double> one_distances("one_distances", 29, 3),
      distances("distances", 29, 3);
  softwave::SearchStatistics one_counts, counts;
  softwave::nearest_neighbours(space, queries, references, one_indices,
                               one_distances, options, {}, &one_counts);
  softwave::mpi::nearest_neighbours(space, MPI_COMM_WORLD, queries, references,
                                    indices, distances, options, {}, &counts);
  EXPECT_EQ(host_values(indices), host_values(one_indices));
  EXPECT_EQ(host_values(distances), host_values(one_distances));
  EXPECT_EQ(counts.pairs, one_counts.pairs);
  EXPECT_EQ(counts.pruned, one_counts.pruned);
  EXPECT_EQ(counts.pruned_reverse, one_counts.pruned_reverse);
  EXPECT_EQ(counts.abandoned, one_counts.abandoned);
  EXPECT_EQ(counts.completed, one_counts.completed);
}

// The root's matrix has the wrong shape: root refuses it, and every other
// rank throws too (naming the root), instead of waiting for the gather.
TEST(MpiErrors, AnArgumentOneRankRefusesIsRefusedEverywhere) {
  std::mt19937_64 random(shared_seed());
  const Space space;
  const auto x = random_series<double>(random, 6, 8, 1);
  const auto y = random_series<double>(random, 5, 8, 1);
  const int root = ranks() - 1;
  Matrix<double> matrix("matrix", rank() == root ? 6 : 0,
                        rank() == root ? 4 : 0);
  try {
    softwave::mpi::pairwise(space, MPI_COMM_WORLD, x, y, matrix, {},
                            softwave::PairwiseValue::soft_dtw, {}, root);
    ADD_FAILURE() << "no error on rank " << rank();
  } catch (const softwave::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("matrix must be (6, 5)"), std::string::npos) << what;
    if (rank() != root)
      EXPECT_NE(what.find("rank " + std::to_string(root)), std::string::npos)
          << what;
  }
  // The communicator is still usable: a good call goes through.
  Matrix<double> good("good", 6, 5);
  softwave::mpi::pairwise(space, MPI_COMM_WORLD, x, y, good, {},
                          softwave::PairwiseValue::soft_dtw, {}, root);
}

TEST(MpiFailure, EveryRankLearnsTheFirstFailure) {
  const softwave::mpi::Failure none =
      softwave::mpi::first_failure(MPI_COMM_WORLD, nullptr);
  EXPECT_EQ(none.rank, -1);
  const int failing = ranks() - 1;
  const softwave::mpi::Failure mine{rank(), 7,
                                    "rank " + std::to_string(rank())};
  const softwave::mpi::Failure first = softwave::mpi::first_failure(
      MPI_COMM_WORLD, rank() == failing ? &mine : nullptr);
  EXPECT_EQ(first.rank, failing);
  EXPECT_EQ(first.code, 7);
  EXPECT_EQ(first.message, "rank " + std::to_string(failing));
}

// The failures of a rank other than 0, which prints nothing else.
class RankFailures : public ::testing::EmptyTestEventListener {
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank(),
                 result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  // Rank 0 prints the run; the others only their failures. Every rank
  // runs every test (they are collective) and the exit code is the worst.
  if (rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailures);
  }
  Kokkos::initialize(argc, argv);
  int failed = RUN_ALL_TESTS();
  Kokkos::finalize();
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failed;
}
