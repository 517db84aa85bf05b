// The `softwave` binary under mpirun (a CLI built with SOFTWAVE_ENABLE_MPI):
// knn, pairwise and cluster on 2 and 3 ranks give the output of one process
// (bit for bit for hard DTW), and a failure on any rank stops every rank
// with one error line and no output file.

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli_mpi_paths.hpp"
#include "cli_runner.hpp"
#include "npy_reader.hpp"

namespace {

using namespace cli_test;
using cli_test::softwave;  // not the namespace softwave

// mpirun with `ranks` processes in front of the binary: -q keeps its own
// notices off stderr, --oversubscribe lets 3 ranks share 2 cores, and the
// two variables let CI, which runs as root, start it.
std::string mpirun(int ranks) {
  return "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 " +
         shell_quote(SOFTWAVE_MPIEXEC) + " -q --oversubscribe " +
         SOFTWAVE_MPIEXEC_NUMPROC_FLAG + " " + std::to_string(ranks);
}

// The values of a float64 .npy matrix.
std::vector<double> npy_values(const fs::path& path) {
  const softwave::cli::NpyArray array =
      softwave::cli::parse_npy(read_file(path), path.string());
  std::vector<double> values(array.size());
  for (std::size_t q = 0; q < values.size(); ++q) values[q] = array.element(q);
  return values;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t q = 0; q < a.size(); ++q)
    EXPECT_NEAR(a[q], b[q], 1e-9 * (1 + std::abs(a[q]))) << "entry " << q;
}

TEST(CliMpi, PairwiseHardDtwIsBitForBitOnTwoAndThreeRanks) {
  const fs::path dir = scratch();
  for (const std::string extension : {".npy", ".csv"}) {
    const std::vector<std::string> arguments = {"pairwise",
                                                "--x",
                                                ucr("GunPoint", "TEST"),
                                                "--y",
                                                ucr("GunPoint", "TRAIN"),
                                                "--gamma",
                                                "0",
                                                "--band-pct",
                                                "10"};
    auto with_output = [&](const std::string& name) {
      std::vector<std::string> a = arguments;
      a.insert(a.end(), {"-o", (dir / (name + extension)).string()});
      return a;
    };
    const Result one = softwave(with_output("one"));
    ASSERT_EQ(one.status, 0) << one.err;
    for (const int ranks : {2, 3}) {
      const std::string name = "ranks" + std::to_string(ranks);
      const Result many = softwave(with_output(name), mpirun(ranks));
      ASSERT_EQ(many.status, 0) << many.err;
      EXPECT_EQ(many.err, "");
      EXPECT_EQ(read_file(dir / (name + extension)),
                read_file(dir / ("one" + extension)))
          << ranks << " ranks, " << extension;
    }
  }
  // The ranks wrote the .npy in place into rank 0's temporary file, which
  // is gone once renamed.
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_NE(entry.path().filename().string().front(), '.') << entry.path();
}

// One set with itself: every rank walks its share of the upper triangle
// (split by pairs) and the mirror is filled in, by rank 0 from the rows as
// they arrive (CSV) or by each rank in the file (.npy): the same bytes as
// one process for hard DTW, the same values to rounding for soft. 700
// series make three blocks of 256 rows on one rank.
TEST(CliMpi, PairwiseOfOneSetMatchesOneProcess) {
  const fs::path dir = scratch();
  write_series(dir / "set.tsv", 700, 5, 1.0, 3);
  for (const std::string gamma : {"0", "0.5"}) {
    for (const std::string extension : {".npy", ".csv"}) {
      if (gamma != "0" && extension == ".csv") continue;  // values compared
      auto run = [&](const std::string& name, const std::string& launcher) {
        return softwave(
            {"pairwise", "--x", (dir / "set.tsv").string(), "--gamma", gamma,
             "-o", (dir / (name + extension)).string()},
            launcher);
      };
      const Result one = run("one", "");
      ASSERT_EQ(one.status, 0) << one.err;
      for (const int ranks : {2, 3}) {
        const std::string name = "ranks" + std::to_string(ranks);
        const Result many = run(name, mpirun(ranks));
        ASSERT_EQ(many.status, 0) << many.err;
        if (gamma == "0")
          EXPECT_EQ(read_file(dir / (name + extension)),
                    read_file(dir / ("one" + extension)))
              << ranks << " ranks, " << extension;
        else
          expect_close(npy_values(dir / (name + extension)),
                       npy_values(dir / ("one" + extension)));
      }
    }
  }
}

TEST(CliMpi, PairwiseSoftDtwAgreesToRounding) {
  const fs::path dir = scratch();
  const std::vector<std::string> arguments = {
      "pairwise", "--x", ucr("ECG200", "TEST"), "--y", ucr("ECG200", "TRAIN"),
      "--gamma",  "0.5"};
  auto run = [&](const std::string& name, const std::string& launcher) {
    std::vector<std::string> a = arguments;
    a.insert(a.end(), {"-o", (dir / name).string()});
    return softwave(a, launcher);
  };
  ASSERT_EQ(run("one.npy", "").status, 0);
  const Result two = run("two.npy", mpirun(2));
  ASSERT_EQ(two.status, 0) << two.err;
  expect_close(npy_values(dir / "two.npy"), npy_values(dir / "one.npy"));
}

TEST(CliMpi, KnnNeighboursAndCountsMatchOneProcess) {
  const fs::path dir = scratch();
  for (const std::string search : {"pruned", "brute"}) {
    auto run = [&](const std::string& name, const std::string& launcher) {
      return softwave(
          {"knn", "--train", ucr("Trace", "TRAIN"), "--test",
           ucr("Trace", "TEST"), "--gamma", "0", "--band-pct", "10", "--k", "3",
           "--search", search, "-o", (dir / name).string()},
          launcher);
    };
    const Result one = run("one.npy", "");
    ASSERT_EQ(one.status, 0) << one.err;
    const Result two = run("two.npy", mpirun(2));
    ASSERT_EQ(two.status, 0) << two.err;
    EXPECT_EQ(read_file(dir / "two.npy"), read_file(dir / "one.npy")) << search;
    EXPECT_EQ(json_field(two.out, "ranks"), "2");
    for (const std::string key :
         {"errors", "search", "pairs", "lb_pruned", "lb_pruned_reverse",
          "abandoned", "completed", "pruning_rate"})
      EXPECT_EQ(json_field(two.out, key), json_field(one.out, key))
          << search << ": " << key;
  }
}

TEST(CliMpi, ClusterMatchesOneProcess) {
  const fs::path dir = scratch();
  auto run = [&](const std::string& name, const std::string& launcher) {
    return softwave({"cluster", "--x", ucr("GunPoint", "TRAIN"), "-k", "3",
                     "--max-iter", "3", "--barycenter-iter", "5", "--gamma",
                     "1", "-o", (dir / (name + "_labels.npy")).string(),
                     "--centroids", (dir / (name + "_centroids.npy")).string()},
                    launcher);
  };
  const Result one = run("one", "");
  ASSERT_EQ(one.status, 0) << one.err;
  const Result three = run("three", mpirun(3));
  ASSERT_EQ(three.status, 0) << three.err;
  EXPECT_EQ(read_file(dir / "three_labels.npy"),
            read_file(dir / "one_labels.npy"));
  expect_close(npy_values(dir / "three_centroids.npy"),
               npy_values(dir / "one_centroids.npy"));
  EXPECT_EQ(json_field(three.out, "iterations"),
            json_field(one.out, "iterations"));
}

TEST(CliMpi, BadInputStopsEveryRankWithOneLine) {
  const fs::path dir = scratch();
  const Result result =
      softwave({"pairwise", "--x", (dir / "missing.tsv").string(), "-o",
                (dir / "out.npy").string()},
               mpirun(2));
  expect_error_containing(result, "missing.tsv: cannot open");
  EXPECT_FALSE(fs::exists(dir / "out.npy"));
}

// Only rank 1 fails: writing CSV, it holds its rows for rank 0, which the
// memory limit does not allow, while rank 0 (which writes as it goes)
// passes. Rank 0 reports rank 1's error and leaves no file. (A .npy is
// written by every rank in place, and nobody holds rows.)
TEST(CliMpi, AFailureOnOneRankStopsEveryRankAndLeavesNoFile) {
  const fs::path dir = scratch();
  std::mt19937 random(7);
  std::normal_distribution<double> normal;
  std::ostringstream text;
  for (int s = 0; s < 1200; ++s) {
    text << (s % 2);
    for (int t = 0; t < 4; ++t) text << '\t' << normal(random);
    text << '\n';
  }
  write_file(dir / "short.tsv", text.str());
  // --y names the same file, so every pair is computed (one set with
  // itself would have rank 0 hold the mirrored entries as well).
  const std::vector<std::string> arguments = {"pairwise",
                                              "--x",
                                              (dir / "short.tsv").string(),
                                              "--y",
                                              (dir / "short.tsv").string(),
                                              "--gamma",
                                              "0",
                                              "--max-memory",
                                              "6M",
                                              "-o",
                                              (dir / "out.csv").string()};
  // One process needs about 2.2 MB; on two ranks, rank 1 also holds its 600
  // rows (5.5 MB) for rank 0.
  ASSERT_EQ(softwave(arguments).status, 0) << "one process fits in 6M";
  fs::remove(dir / "out.csv");
  const Result result = softwave(arguments, mpirun(2));
  expect_error_containing(result, "rows held for rank 0");
  for (const auto& entry : fs::directory_iterator(dir))
    EXPECT_EQ(entry.path().filename().string().find("out.csv"),
              std::string::npos)
        << entry.path();
}

}  // namespace
