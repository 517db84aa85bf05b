// The workspace a call allocates, measured through Kokkos Tools allocation
// callbacks and, on CUDA, the stream-ordered pool's high-water mark
// (allocation_tracker.hpp), against the formula documented in
// softdtw.hpp: no B×N×M table, and a band shrinks the backward checkpoints.

#include <cstdint>

#include "allocation_tracker.hpp"
#include "test_helpers.hpp"

namespace {

using namespace swt;
using softwave_tools::AllocationTracker;

// Peak "softwave::*" bytes of one forward+backward call (grad_x only).
template <class Space>
std::uint64_t backward_workspace(const Space& space, int B, int n, int m,
                                 const softwave::SoftDTWOptions& options) {
  Dev3<double, Space> x("x", B, n, 1), y("y", B, m, 1), gx("gx", B, n, 1);
  Kokkos::deep_copy(x, 0.25);
  Kokkos::deep_copy(y, 0.5);
  Dev1<double, Space> values("values", B);
  softwave::SeriesGradients<double, Space> g;
  g.grad_x = gx;
  AllocationTracker::start();
  softwave_tools::StreamOrderedPeak::start();
  softwave::soft_dtw_value_and_grad(space, x, y, values, g, options);
  Kokkos::fence();
  return AllocationTracker::stop().workspace +
         softwave_tools::StreamOrderedPeak::stop();
}

// Peak "softwave::*" bytes of one forward-only call.
template <class Space>
std::uint64_t forward_workspace(const Space& space, int B, int n, int m,
                                const softwave::SoftDTWOptions& options) {
  Dev3<double, Space> x("x", B, n, 1), y("y", B, m, 1);
  Kokkos::deep_copy(x, 0.25);
  Kokkos::deep_copy(y, 0.5);
  Dev1<double, Space> values("values", B);
  AllocationTracker::start();
  softwave_tools::StreamOrderedPeak::start();
  softwave::soft_dtw(space, x, y, values, options);
  Kokkos::fence();
  return AllocationTracker::stop().workspace +
         softwave_tools::StreamOrderedPeak::stop();
}

// The header's formula, written out, for forward + backward with
// row/column widths wr, wc.
double formula(int B, int n, int m, int tile, double wr, double wc) {
  double const rows = (n + tile - 1) / tile, cols = (m + tile - 1) / tile;
  return 8.0 * B * (2 * rows * wr + 2 * cols * wc + 1);
}

template <class Space>
class Memory : public ::testing::Test {};
TYPED_TEST_SUITE(Memory, ExecutionSpaces);

TYPED_TEST(Memory, BackwardWorkspaceFollowsTheFormula) {
  const TypeParam space;
  const int B = 3, n = 700, m = 500;
  softwave::SoftDTWOptions options;
  const int tile = softwave::tile_size(space, options);
  const double bytes =
      static_cast<double>(backward_workspace(space, B, n, m, options));
  const double expected = formula(B, n, m, tile, m + 1, n + 1);
  EXPECT_LE(bytes, expected * 1.001 + 4096);
  EXPECT_GE(bytes, expected * 0.98);
  EXPECT_LT(bytes, 0.25 * 8.0 * B * n * m) << "a B×N×M table would be 4× this";
  EXPECT_NEAR(static_cast<double>(softwave::workspace_bytes(
                  space, B, n, m, options, /*backward=*/true)),
              expected, 1.0);
}

TYPED_TEST(Memory, BandKeepsOnlyInBandCheckpoints) {
  const TypeParam space;
  const int B = 2, n = 2048, m = 1536, w = 8;
  softwave::SoftDTWOptions options;
  const int tile = softwave::tile_size(space, options);
  const double full =
      static_cast<double>(backward_workspace(space, B, n, m, options));
  options.band = w;
  const double banded =
      static_cast<double>(backward_workspace(space, B, n, m, options));
  // Wr = 2w + 3 + ceil(m/n), Wc = 2w + 3 + ceil(n/m).
  const double expected = formula(B, n, m, tile, 2 * w + 3 + 1, 2 * w + 3 + 2);
  EXPECT_LE(banded, expected * 1.001 + 4096);
  EXPECT_LT(banded, 0.1 * full)
      << "full " << full << " B, banded " << banded << " B";
  EXPECT_NEAR(static_cast<double>(softwave::workspace_bytes(
                  space, B, n, m, options, /*backward=*/true)),
              expected, 1.0);
}

// The pair-parallel backward (kernel = pairs, host backends) allocates
// what workspace_bytes says: blocks of each anti-diagonal's R and soft-min
// parts over the band's cells, and the features and their gradients (for
// cosine, the unit vectors by point).
TYPED_TEST(Memory, PairBackwardFollowsTheFormula) {
  const TypeParam space;
  if constexpr (on_host<TypeParam>) {
    softwave::SoftDTWOptions options;
    options.kernel = softwave::Kernel::pairs;
    for (auto [cost, band] :
         {std::pair(softwave::Cost::sqeuclidean, std::optional<std::int64_t>()),
          std::pair(softwave::Cost::sqeuclidean,
                    std::optional<std::int64_t>(5)),
          std::pair(softwave::Cost::cosine, std::optional<std::int64_t>())}) {
      SCOPED_TRACE(cost == softwave::Cost::cosine ? "cosine" : "sqeuclidean");
      options.cost = cost;
      options.band = band;
      const int B = 3, n = 300, m = 200;
      const double bytes =
          static_cast<double>(backward_workspace(space, B, n, m, options));
      const double expected = static_cast<double>(
          softwave::workspace_bytes(space, B, n, m, options, true, 1));
      EXPECT_LE(bytes, expected * 1.001 + 4096);
      EXPECT_GE(bytes, expected * 0.98);
      // Per thread (one block of work each): 16 bytes (R and P) a band
      // cell, a band cell or more a row, at most 2w + 3; beyond them the
      // rows around each anti-diagonal's cells, the cost anti-diagonal, the
      // points laid out, their gradient sums and the indices (about 28·(N +
      // M) doubles) and a tile.
      const double threads =
          Kokkos::Experimental::UniqueToken<TypeParam>(space).size();
      const double most_cells = band ? double(n) * (2 * *band + 3) : n * m;
      EXPECT_GE(expected / threads, 16.0 * (band ? n : n * m));
      EXPECT_LE(expected / threads,
                16.0 * most_cells + 8.0 * (30 * (n + m) + 1100));
    }
  }
}

// Band-limited work takes band-limited memory, forward and backward alike:
// a pair of 60,000 points with a band of 2 needs a few MB (an array of
// tiles, as there once was, would be (N/T)² doubles: hundreds of MB here;
// 45 GB at 5e6 points).
TYPED_TEST(Memory, LongBandedPairsTakeLinearMemory) {
  const TypeParam space;
  const int n = 60000;
  softwave::SoftDTWOptions options;
  options.band = 2;
  const double forward =
      static_cast<double>(forward_workspace(space, 1, n, n, options));
  const double backward =
      static_cast<double>(backward_workspace(space, 1, n, n, options));
  const double f_expected = static_cast<double>(
      softwave::workspace_bytes(space, 1, n, n, options, false));
  const double b_expected = static_cast<double>(
      softwave::workspace_bytes(space, 1, n, n, options, true));
  EXPECT_LE(forward, f_expected * 1.001 + 4096);
  EXPECT_GE(forward, f_expected * 0.98);
  EXPECT_LE(backward, b_expected * 1.001 + 4096);
  EXPECT_GE(backward, b_expected * 0.98);
  EXPECT_LT(forward, 64.0 * n) << "linear in N";
  EXPECT_LT(backward, 64.0 * n) << "linear in N";
}

}  // namespace
