// End-to-end tests of the `softwave` executable on the shipped UCR data:
// runs the real binary through the shell and checks its JSON, matrices,
// exit codes and error lines. Needs no Python.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cli_runner.hpp"
#include "matrix_writer.hpp"
#include "npy_reader.hpp"
#include "ucr_reader.hpp"

namespace {

using namespace cli_test;
using cli_test::softwave;  // not the namespace softwave

double json_number(const std::string& json, const std::string& key) {
  const std::string text = json_field(json, key);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  EXPECT_TRUE(!text.empty() && *end == '\0')
      << key << " is not a number: " << text;
  return value;
}

// A flat array of numbers, "key": [a,b,...].
std::vector<double> json_numbers(const std::string& json,
                                 const std::string& key) {
  const std::string tag = "\"" + key + "\": [";
  const std::size_t at = json.find(tag);
  EXPECT_NE(at, std::string::npos) << "no array " << key << " in " << json;
  if (at == std::string::npos) return {};
  std::vector<double> values;
  const char* p = json.c_str() + at + tag.size();
  while (*p != ']') {
    char* end = nullptr;
    values.push_back(std::strtod(p, &end));
    EXPECT_NE(end, p) << key << ": not a number at " << p;
    if (end == p) return values;
    p = *end == ',' ? end + 1 : end;
  }
  return values;
}

using Matrix = std::vector<std::vector<double>>;

Matrix parse_csv(const std::string& text) {
  Matrix rows;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::vector<double> row;
    const char* p = line.c_str();
    while (*p != '\0') {
      char* end = nullptr;
      row.push_back(std::strtod(p, &end));
      EXPECT_NE(end, p) << "bad CSV line: " << line;
      if (end == p) break;
      p = *end == ',' ? end + 1 : end;
    }
    rows.push_back(row);
  }
  return rows;
}

void expect_shape(const Matrix& matrix, std::size_t rows, std::size_t cols) {
  ASSERT_EQ(matrix.size(), rows);
  for (const auto& row : matrix) ASSERT_EQ(row.size(), cols);
}

// Plain float64 Soft-DTW with squared Euclidean cost on scalar series
// (γ = 0: hard DTW), optional Sakoe–Chiba band for equal lengths.
double reference_sdtw(const std::vector<double>& x,
                      const std::vector<double>& y, double gamma,
                      std::int64_t band = -1) {
  const std::size_t n = x.size(), m = y.size();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> r(n + 1, std::vector<double>(m + 1, inf));
  r[0][0] = 0;
  for (std::size_t i = 1; i <= n; ++i) {
    for (std::size_t j = 1; j <= m; ++j) {
      if (band >= 0 && std::llabs(static_cast<long long>(i) -
                                  static_cast<long long>(j)) > band) {
        continue;
      }
      const double a = r[i - 1][j - 1], b = r[i - 1][j], c = r[i][j - 1];
      const double low = std::min({a, b, c});
      double soft = low;
      if (gamma > 0 && low < inf) {
        soft = low - gamma * std::log(std::exp(-(a - low) / gamma) +
                                      std::exp(-(b - low) / gamma) +
                                      std::exp(-(c - low) / gamma));
      }
      r[i][j] = (x[i - 1] - y[j - 1]) * (x[i - 1] - y[j - 1]) + soft;
    }
  }
  return r[n][m];
}

void expect_close(double actual, double expected, double relative) {
  EXPECT_NEAR(actual, expected, relative * std::max(1.0, std::fabs(expected)));
}

// --- help and version -------------------------------------------------------

TEST(Cli, HelpAndVersion) {
  const Result top = softwave({"--help"});
  EXPECT_EQ(top.status, 0);
  EXPECT_NE(top.out.find("usage: softwave"), std::string::npos);
  EXPECT_NE(top.out.find("knn"), std::string::npos);
  EXPECT_NE(top.out.find("pairwise"), std::string::npos);
  EXPECT_NE(top.out.find("barycenter"), std::string::npos);
  EXPECT_NE(top.out.find("cluster"), std::string::npos);
  const Result barycenter = softwave({"barycenter", "--help"});
  EXPECT_EQ(barycenter.status, 0);
  EXPECT_NE(barycenter.out.find("--init"), std::string::npos);
  EXPECT_NE(barycenter.out.find(".npy"), std::string::npos);
  const Result cluster = softwave({"cluster", "-h"});
  EXPECT_EQ(cluster.status, 0);
  EXPECT_NE(cluster.out.find("--n-init"), std::string::npos);
  EXPECT_NE(cluster.out.find("--centroids"), std::string::npos);
  const Result knn = softwave({"knn", "--help"});
  EXPECT_EQ(knn.status, 0);
  EXPECT_NE(knn.out.find("--band-pct"), std::string::npos);
  EXPECT_NE(knn.out.find("(default 1.0)"), std::string::npos);
  EXPECT_NE(knn.out.find("--train-labels"), std::string::npos);
  const Result pairwise = softwave({"pairwise", "-h"});
  EXPECT_EQ(pairwise.status, 0);
  EXPECT_NE(pairwise.out.find("--divergence"), std::string::npos);
  const Result version = softwave({"--version"});
  EXPECT_EQ(version.status, 0);
  EXPECT_EQ(version.out.rfind("softwave ", 0), 0u);
  EXPECT_TRUE(top.err.empty() && knn.err.empty() && version.err.empty());
}

// --- knn on the UCR sets ----------------------------------------------------

// Expected 1-NN error counts on the test split. They were computed for this
// test (2026-11-22) with an independent float64 NumPy brute force: the full
// O(N·M) dynamic programme per pair, np.argmin (first minimum) for ties,
// w = ceil(pct/100 · L). The hard-DTW counts agree with the UCR archive's
// DataSummary.csv error rates "ED (w=0)", "DTW (w=100)" and
// "DTW (learned_w)" (count / n_test, to its 4 digits); the soft-DTW γ = 1
// counts come from the same brute force only. In every case used here the
// nearest neighbour beats the best candidate of another class by a
// relative margin ≥ 8e-5, far above rounding differences.
struct UcrCase {
  const char* name;
  int n_test;
  int euclidean;    // hard DTW, --band 0
  int dtw;          // hard DTW, full window
  int learned_pct;  // the archive's learned window, % of the length
  int learned;      // hard DTW, --band-pct learned_pct
  // Test time: on short series (one tile) a banded run costs as much as the
  // full window, so the banded runs are made where they add a check.
  bool check_euclidean;
  bool check_learned;  // learned_pct > 0 (0 is the --band 0 run)
  // Lightning2's full window (1.5e9 cells) costs as much as all the other
  // sets together: it is registered disabled (run it with
  // --gtest_also_run_disabled_tests); its learned window (6%) has the same
  // published error, 8, and runs by default.
  bool long_full_window;
};

const UcrCase ucr_cases[] = {
    {"GunPoint", 150, 13, 14, 0, 13, true, false, false},
    {"ECG200", 100, 12, 23, 0, 12, true, false, false},
    {"Coffee", 28, 0, 0, 0, 0, true, false, false},
    {"BeetleFly", 20, 5, 6, 7, 6, true, true, false},
    {"ItalyPowerDemand", 1029, 46, 51, 0, 46, true, false, false},
    {"SyntheticControl", 300, 36, 2, 6, 5, false, true, false},
    {"FaceFour", 88, 19, 15, 2, 10, true, true, false},
    {"Trace", 100, 24, 0, 3, 1, false, false, false},
    {"Beef", 30, 10, 11, 0, 10, true, false, false},
    {"Lightning2", 61, 15, 8, 6, 8, true, true, true},
};

void PrintTo(const UcrCase& c, std::ostream* os) { *os << c.name; }

// The cases whose `flag` equals `value`.
std::vector<UcrCase> ucr_cases_with(bool UcrCase::*flag, bool value = true) {
  std::vector<UcrCase> chosen;
  for (const UcrCase& c : ucr_cases) {
    if (c.*flag == value) chosen.push_back(c);
  }
  return chosen;
}

class UcrKnn : public ::testing::TestWithParam<UcrCase> {
 protected:
  // Runs knn and checks the JSON; returns it.
  std::string knn(const std::vector<std::string>& extra, int errors) {
    const UcrCase& c = GetParam();
    std::vector<std::string> arguments = {
        "knn", "--train", ucr(c.name, "TRAIN"), "--test", ucr(c.name, "TEST")};
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    const Result result = softwave(arguments);
    EXPECT_EQ(result.status, 0) << result.err;
    EXPECT_EQ(result.err, "");  // no progress bar: stderr is not a terminal
    const std::string& json = result.out;
    EXPECT_EQ(json.substr(0, 1), "{");
    EXPECT_EQ(json.find('\n'), json.size() - 1) << "one JSON line";
    EXPECT_EQ(json_number(json, "n_test"), c.n_test);
    EXPECT_EQ(json_number(json, "errors"), errors) << json;
    EXPECT_DOUBLE_EQ(json_number(json, "error_rate"),
                     static_cast<double>(errors) / c.n_test);
    EXPECT_DOUBLE_EQ(json_number(json, "accuracy"),
                     1.0 - static_cast<double>(errors) / c.n_test);
    EXPECT_GE(json_number(json, "seconds"), 0.0);
    return json;
  }
};

class UcrEuclidean : public UcrKnn {};
class UcrFullWindow : public UcrKnn {};
class UcrLearnedWindow : public UcrKnn {};

TEST_P(UcrEuclidean, HardDtwBandZeroIsEuclidean) {
  const std::string json =
      knn({"--gamma", "0", "--band", "0"}, GetParam().euclidean);
  EXPECT_EQ(json_field(json, "band"), "0");
  EXPECT_EQ(json_field(json, "gamma"), "0");
}

TEST_P(UcrFullWindow, HardDtwMatchesArchive) {
  const std::string json = knn({"--gamma", "0"}, GetParam().dtw);
  EXPECT_EQ(json_field(json, "band"), "null");
}

TEST_P(UcrLearnedWindow, HardDtwBandPctMatchesArchive) {
  const UcrCase& c = GetParam();
  knn({"--gamma", "0", "--band-pct", std::to_string(c.learned_pct)}, c.learned);
}

std::string case_name(const ::testing::TestParamInfo<UcrCase>& info) {
  return info.param.name;
}
INSTANTIATE_TEST_SUITE_P(
    Ucr, UcrEuclidean,
    ::testing::ValuesIn(ucr_cases_with(&UcrCase::check_euclidean)), case_name);
INSTANTIATE_TEST_SUITE_P(
    Ucr, UcrFullWindow,
    ::testing::ValuesIn(ucr_cases_with(&UcrCase::long_full_window, false)),
    case_name);
INSTANTIATE_TEST_SUITE_P(
    DISABLED_Long, UcrFullWindow,
    ::testing::ValuesIn(ucr_cases_with(&UcrCase::long_full_window)), case_name);
INSTANTIATE_TEST_SUITE_P(
    Ucr, UcrLearnedWindow,
    ::testing::ValuesIn(ucr_cases_with(&UcrCase::check_learned)), case_name);

TEST(CliKnn, JsonReportsTheSettings) {
  const Result result =
      softwave({"knn", "--train", ucr("Coffee", "TRAIN"), "--test",
                ucr("Coffee", "TEST"), "--gamma", "0.5", "--band-pct", "10",
                "--cost", "l1", "--dtype", "float32", "--threads", "1"});
  ASSERT_EQ(result.status, 0) << result.err;
  const std::string& json = result.out;
  EXPECT_EQ(json_field(json, "train"), "\"" + ucr("Coffee", "TRAIN") + "\"");
  EXPECT_EQ(json_field(json, "test"), "\"" + ucr("Coffee", "TEST") + "\"");
  EXPECT_EQ(json_number(json, "n_train"), 28);
  EXPECT_EQ(json_number(json, "gamma"), 0.5);
  EXPECT_EQ(json_number(json, "band"), 29);  // ceil(10/100 · 286)
  EXPECT_EQ(json_number(json, "band_pct"), 10);
  EXPECT_EQ(json_field(json, "cost"), "\"l1\"");
  EXPECT_EQ(json_field(json, "dtype"), "\"float32\"");
  // --threads sets the host threads; a GPU reports its own concurrency.
  const std::string space = json_field(json, "execution_space");
  if (space == "\"OpenMP\"" || space == "\"Serial\"")
    EXPECT_EQ(json_number(json, "concurrency"), 1);
  EXPECT_LE(json_number(json, "errors"), 3);  // Coffee is easy
}

// Soft-DTW at the default γ = 1 (no --gamma), counts from the same NumPy
// brute force.
struct SoftCase {
  const char* name;
  int errors;
};
void PrintTo(const SoftCase& c, std::ostream* os) { *os << c.name; }

class UcrSoftDtw : public ::testing::TestWithParam<SoftCase> {};

TEST_P(UcrSoftDtw, DefaultGamma) {
  const SoftCase& c = GetParam();
  const Result result = softwave(
      {"knn", "--train", ucr(c.name, "TRAIN"), "--test", ucr(c.name, "TEST")});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(json_number(result.out, "gamma"), 1.0);
  EXPECT_EQ(json_field(result.out, "band"), "null");
  EXPECT_EQ(json_number(result.out, "errors"), c.errors);
}

INSTANTIATE_TEST_SUITE_P(Ucr, UcrSoftDtw,
                         ::testing::Values(SoftCase{"ItalyPowerDemand", 55},
                                           SoftCase{"Coffee", 0}),
                         [](const auto& info) {
                           return std::string(info.param.name);
                         });

TEST(CliKnn, Float32HardDtw) {
  const Result result = softwave(
      {"knn", "--train", ucr("ItalyPowerDemand", "TRAIN"), "--test",
       ucr("ItalyPowerDemand", "TEST"), "--gamma", "0", "--dtype", "float32"});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(json_number(result.out, "errors"), 51);
}

// --- knn: the pruned search, k neighbours, -o --------------------------------

// The pruned search (UCR Suite bounds, early abandoning) and every distance
// give the same neighbour files, byte for byte, on every shipped set; the
// report's counts add up.
class UcrSearch : public ::testing::TestWithParam<UcrCase> {};

TEST_P(UcrSearch, PrunedEqualsBruteWithBand) {
  const UcrCase& c = GetParam();
  const fs::path dir = scratch();
  std::string files[2];
  for (const char* search : {"pruned", "brute"}) {
    const fs::path out = dir / (std::string(search) + ".npy");
    const Result result =
        softwave({"knn", "--train", ucr(c.name, "TRAIN"), "--test",
                  ucr(c.name, "TEST"), "--gamma", "0", "--band-pct", "10",
                  "--k", "3", "--search", search, "-o", out.string()});
    ASSERT_EQ(result.status, 0) << result.err;
    EXPECT_EQ(json_field(result.out, "search"),
              "\"" + std::string(search) + "\"");
    EXPECT_EQ(json_number(result.out, "k"), 3);
    files[search[0] == 'b'] = read_file(out);
    if (search[0] == 'p') {
      const std::string& json = result.out;
      const double pairs = json_number(json, "pairs");
      EXPECT_EQ(pairs, double(c.n_test) * json_number(json, "n_train"));
      EXPECT_EQ(json_number(json, "lb_pruned") +
                    json_number(json, "lb_pruned_reverse") +
                    json_number(json, "abandoned") +
                    json_number(json, "completed"),
                pairs);
      EXPECT_NEAR(json_number(json, "pruning_rate"),
                  (json_number(json, "lb_pruned") +
                   json_number(json, "lb_pruned_reverse")) /
                      pairs,
                  1e-6);
    }
  }
  EXPECT_FALSE(files[0].empty());
  EXPECT_TRUE(files[0] == files[1]) << "the neighbour files differ";
}

INSTANTIATE_TEST_SUITE_P(Ucr, UcrSearch, ::testing::ValuesIn(ucr_cases),
                         case_name);

// Two neighbour CSVs (k indices, then k distances, per test series) agree:
// distances to `relative`, and the same index at each rank unless that
// rank's distance ties a neighbouring rank's to `relative` (then either
// order is right).
void expect_same_neighbours(const Matrix& a, const Matrix& b, std::size_t k,
                            double relative) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t q = 0; q < a.size(); ++q) {
    SCOPED_TRACE("test series " + std::to_string(q));
    ASSERT_EQ(a[q].size(), 2 * k);
    ASSERT_EQ(b[q].size(), 2 * k);
    auto tied = [&](std::size_t r, std::size_t s) {
      double const x = a[q][k + r], y = a[q][k + s];
      return std::fabs(x - y) <= relative * std::max(1.0, std::fabs(x));
    };
    for (std::size_t r = 0; r < k; ++r) {
      expect_close(a[q][k + r], b[q][k + r], relative);
      if ((r > 0 && tied(r, r - 1)) || (r + 1 < k && tied(r, r + 1))) continue;
      EXPECT_EQ(a[q][r], b[q][r]) << "rank " << r;
    }
  }
}

// Full window, the l1 cost, float32 and CSV: the same neighbours again, and
// the CSV holds k indices then k distances per test series, the distances
// those of the plain float64 recursion. The two searches' kernels may round
// the squared cost differently (a GPU contracts its products and sums into
// FMAs where its compiler chooses), so the files agree to rounding.
TEST(CliKnn, PrunedEqualsBruteFullWindowL1AndCsv) {
  const fs::path dir = scratch();
  for (const char* cost : {"sqeuclidean", "l1"})
    for (const char* dtype : {"float32", "float64"}) {
      SCOPED_TRACE(std::string(cost) + " " + dtype);
      std::string files[2];
      for (const char* search : {"pruned", "brute"}) {
        const fs::path out = dir / (std::string(search) + ".csv");
        const Result result = softwave(
            {"knn", "--train", ucr("ECG200", "TRAIN"), "--test",
             ucr("ECG200", "TEST"), "--gamma", "0", "--k", "4", "--cost", cost,
             "--dtype", dtype, "--search", search, "-o", out.string()});
        ASSERT_EQ(result.status, 0) << result.err;
        files[search[0] == 'b'] = read_file(out);
      }
      const Matrix rows = parse_csv(files[0]);
      expect_shape(rows, 100, 8);
      expect_same_neighbours(rows, parse_csv(files[1]), 4,
                             std::string(dtype) == "float32" ? 1e-5 : 1e-12);
      if (std::string(cost) != "sqeuclidean" || std::string(dtype) != "float64")
        continue;
      using softwave::cli::Labels;
      using softwave::cli::SeriesSet;
      const SeriesSet train = softwave::cli::read_series_file(
                          ucr("ECG200", "TRAIN"), Labels::first_column),
                      test = softwave::cli::read_series_file(
                          ucr("ECG200", "TEST"), Labels::first_column);
      auto series = [](const SeriesSet& set, std::size_t s) {
        return std::vector<double>(set.series(s),
                                   set.series(s) + set.series_size());
      };
      for (std::size_t q : {std::size_t{0}, std::size_t{57}, std::size_t{99}})
        for (int r = 0; r < 4; ++r) {
          const double index = rows[q][r];
          EXPECT_EQ(index, std::floor(index));
          ASSERT_LT(index, double(train.count));
          expect_close(rows[q][4 + r],
                       reference_sdtw(series(test, q),
                                      series(train, std::size_t(index)), 0.0),
                       1e-12);
          if (r > 0) EXPECT_LE(rows[q][3 + r], rows[q][4 + r]);
        }
    }
}

// The .npy holds records (index int64, distance float64), shape (n_test, k).
TEST(CliKnn, NeighbourNpyIsRecords) {
  const fs::path out = scratch() / "n.npy";
  const Result result = softwave({"knn", "--train", ucr("Coffee", "TRAIN"),
                                  "--test", ucr("Coffee", "TEST"), "--gamma",
                                  "0", "--k", "2", "-o", out.string()});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(json_field(result.out, "output"), "\"" + out.string() + "\"");
  const std::string bytes = read_file(out);
  EXPECT_NE(bytes.find("'descr': [('index', '<i8'), ('distance', '<f8')]"),
            std::string::npos);
  EXPECT_NE(bytes.find("'shape': (28, 2)"), std::string::npos);
  const std::size_t data = bytes.size() - 28 * 2 * 16;
  EXPECT_EQ(data % 64, 0u);
  for (std::size_t q = 0; q < 28; ++q) {
    std::int64_t index[2];
    double distance[2];
    for (int r = 0; r < 2; ++r) {
      std::memcpy(&index[r], &bytes[data + (q * 2 + r) * 16], 8);
      std::memcpy(&distance[r], &bytes[data + (q * 2 + r) * 16 + 8], 8);
      EXPECT_GE(index[r], 0);
      EXPECT_LT(index[r], 28);
    }
    EXPECT_NE(index[0], index[1]);
    EXPECT_LE(distance[0], distance[1]);
  }
}

// k = 2 with one neighbour of each label: the vote is a tie, which goes to
// the smallest label; k = 1 takes the nearest.
TEST(CliKnn, VoteTieGoesToTheSmallestLabel) {
  const fs::path dir = scratch();
  write_file(dir / "train.tsv", "5\t0\t0\t0\n3\t2\t2\t2\n9\t9\t9\t9\n");
  write_file(dir / "test.tsv", "3\t0.5\t0.5\t0.5\n5\t0.5\t0.5\t0.5\n");
  auto errors = [&](const char* k) {
    const Result result =
        softwave({"knn", "--train", (dir / "train.tsv").string(), "--test",
                  (dir / "test.tsv").string(), "--gamma", "0", "--k", k});
    EXPECT_EQ(result.status, 0) << result.err;
    return json_number(result.out, "errors");
  };
  EXPECT_EQ(errors("1"), 1);  // both nearest to label 5
  EXPECT_EQ(errors("2"), 1);  // 5 and 3 tie: 3
  EXPECT_EQ(errors("3"), 1);  // 5, 3 and 9 tie: 3
}

TEST(CliKnn, SearchAndKErrors) {
  const fs::path dir = scratch();
  const std::vector<std::string> knn = {"knn", "--train",
                                        ucr("Coffee", "TRAIN"), "--test",
                                        ucr("Coffee", "TEST")};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> arguments = knn;
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return softwave(arguments);
  };
  expect_error_containing(with({"--k", "0"}), "--k");
  expect_error(with({"--k", "29"}),
               "option --k: expected at most the 28 training series, got 29");
  expect_error_containing(with({"--search", "fast"}), "--search");
  expect_error_containing(with({"--search", "pruned"}), "--search pruned");
  expect_error_containing(
      with({"--search", "pruned", "--gamma", "0", "--cost", "cosine"}),
      "--search pruned");
  const fs::path out = dir / "n.txt";
  expect_error_containing(with({"--gamma", "0", "-o", out.string()}),
                          "--output");
  EXPECT_FALSE(fs::exists(out));
  const fs::path kept = dir / "n.npy";
  write_file(kept, "previous");
  expect_error_containing(
      with({"--gamma", "0", "--k", "40", "-o", kept.string()}), "--k");
  EXPECT_EQ(read_file(kept), "previous");
}

// --- pairwise ---------------------------------------------------------------

TEST(CliPairwise, CsvSymmetricForOneSet) {
  const Result result =
      softwave({"pairwise", "--x", ucr("ItalyPowerDemand", "TRAIN")});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.err, "");
  const Matrix d = parse_csv(result.out);
  expect_shape(d, 67, 67);
  for (std::size_t i = 0; i < 67; ++i) {
    for (std::size_t j = 0; j < i; ++j) expect_close(d[i][j], d[j][i], 1e-12);
  }
}

// One set with itself (no --y) walks each pair once, in blocks of 256 rows,
// and mirrors it: for every output and value kind the matrix is exactly
// symmetric and holds what the every-pair walk against a copy of the set
// gives. Hard DTW is exactly symmetric, so there the bytes are the same;
// Soft-DTW's value of (j, i) differs from that of (i, j) in the last bits,
// and the library walks a block's own square once in the orientation its
// kernels choose (on CUDA's portable kernels not always (i, j)), so there
// the values agree to rounding. 800 series make four blocks; the memory
// limit makes the .npy mirror's groups 655 columns wide, so the third block
// starts a group with rows after it.
TEST(CliPairwise, OneSetIsComputedOnceAndMirrored) {
  const fs::path dir = scratch();
  write_series(dir / "set.tsv", 800, 6, 1.0, 11);
  fs::copy_file(dir / "set.tsv", dir / "copy.tsv");
  const std::vector<std::vector<std::string>> variants = {
      {"--gamma", "0"},
      {"--gamma", "0.5", "--max-memory", "64M"},
      {"--gamma", "0.3", "--divergence"},
      {"--gamma", "1", "--dtype", "float32", "--band", "2"}};
  for (const auto& variant : variants) {
    for (const std::string output : {"", "m.csv", "m.npy"}) {
      SCOPED_TRACE(variant[1] + " " + output);
      auto run = [&](bool copy, const std::string& name) {
        std::vector<std::string> arguments = {"pairwise", "--x",
                                              (dir / "set.tsv").string()};
        if (copy)
          arguments.insert(arguments.end(),
                           {"--y", (dir / "copy.tsv").string()});
        arguments.insert(arguments.end(), variant.begin(), variant.end());
        if (!name.empty())
          arguments.insert(arguments.end(), {"-o", (dir / name).string()});
        const Result result = softwave(arguments);
        EXPECT_EQ(result.status, 0) << result.err;
        return name.empty() ? result.out : read_file(dir / name);
      };
      const std::string once =
          run(false, output.empty() ? "" : "once" + output);
      const std::string every =
          run(true, output.empty() ? "" : "every" + output);
      if (variant[1] == "0") EXPECT_TRUE(once == every);
      auto values = [&](const std::string& bytes) {
        std::vector<double> v;
        if (output == "m.npy") {
          const softwave::cli::NpyArray array =
              softwave::cli::parse_npy(bytes, output);
          for (std::size_t q = 0; q < array.size(); ++q)
            v.push_back(array.element(q));
        } else {
          for (const auto& row : parse_csv(bytes))
            v.insert(v.end(), row.begin(), row.end());
        }
        return v;
      };
      const std::vector<double> got = values(once), want = values(every);
      constexpr std::size_t n = 800;
      ASSERT_EQ(got.size(), n * n);
      ASSERT_EQ(want.size(), n * n);
      const bool float32 =
          std::find(variant.begin(), variant.end(), "float32") != variant.end();
      const double tolerance = float32 ? 1e-6 : 1e-12;
      std::size_t asymmetric = 0, off = 0;
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < n; ++j) {
          const double a = got[i * n + j], b = want[i * n + j];
          asymmetric += a != got[j * n + i];
          off += !(std::abs(a - b) <= tolerance * (1 + std::abs(b)));
        }
      EXPECT_EQ(asymmetric, 0u);
      EXPECT_EQ(off, 0u);
    }
  }
  // What the mirror holds is counted against the limit, by output kind.
  const std::vector<std::string> tight = {
      "pairwise", "--x", (dir / "set.tsv").string(), "--max-memory", "3M"};
  expect_error_containing(softwave(tight),
                          "mirrored entries held for the rows to come");
  std::vector<std::string> to_npy = tight;
  to_npy.insert(to_npy.end(), {"-o", (dir / "tight.npy").string()});
  expect_error_containing(softwave(to_npy),
                          "mirrored columns gathered for the file");
  EXPECT_FALSE(fs::exists(dir / "tight.npy"));
}

TEST(CliPairwise, DivergenceIsZeroOnTheDiagonal) {
  const Result result =
      softwave({"pairwise", "--x", ucr("ItalyPowerDemand", "TRAIN"),
                "--divergence", "--gamma", "0.1"});
  ASSERT_EQ(result.status, 0) << result.err;
  const Matrix d = parse_csv(result.out);
  expect_shape(d, 67, 67);
  for (std::size_t i = 0; i < 67; ++i) {
    EXPECT_NEAR(d[i][i], 0.0, 1e-9);
    for (std::size_t j = 0; j < 67; ++j) EXPECT_GE(d[i][j], -1e-9);
  }
}

// Two label-less files of different lengths against the plain reference.
TEST(CliPairwise, ValuesMatchReference) {
  const fs::path dir = scratch();
  const std::vector<std::vector<double>> x = {{0.1, -0.4, 1.3, 0.7, -2.0},
                                              {1.0, 1.0, 0.5, -0.5, 0.0},
                                              {-1.2, 0.3, 0.9, 2.2, 0.4}};
  const std::vector<std::vector<double>> y = {
      {0.0, 0.5, -0.5, 1.5, 0.25, -1.0, 0.75},
      {2.0, 1.0, 0.0, -1.0, -2.0, -1.0, 0.0},
      {0.3, 0.3, 0.3, 0.3, 0.3, 0.3, 0.3},
      {-0.7, 1.1, -0.2, 0.6, 1.9, -0.8, 0.05}};
  auto write = [](const fs::path& path, const auto& rows) {
    std::ostringstream text;
    text.precision(17);
    for (const auto& row : rows) {
      for (std::size_t t = 0; t < row.size(); ++t) {
        text << (t ? "," : "") << row[t];
      }
      text << "\n";
    }
    write_file(path, text.str());
  };
  write(dir / "x.csv", x);
  write(dir / "y.csv", y);
  for (const double gamma : {0.0, 0.5, 2.0}) {
    const Result result =
        softwave({"pairwise", "--x", (dir / "x.csv").string(), "--y",
                  (dir / "y.csv").string(), "--no-labels", "--gamma",
                  std::to_string(gamma)});
    ASSERT_EQ(result.status, 0) << result.err;
    const Matrix d = parse_csv(result.out);
    expect_shape(d, 3, 4);
    for (std::size_t i = 0; i < 3; ++i) {
      for (std::size_t j = 0; j < 4; ++j) {
        expect_close(d[i][j], reference_sdtw(x[i], y[j], gamma), 1e-12);
      }
    }
  }
  // A band on equal lengths: |i - j| <= 1.
  const Result banded =
      softwave({"pairwise", "--x", (dir / "x.csv").string(), "--no-labels",
                "--gamma", "0", "--band", "1"});
  ASSERT_EQ(banded.status, 0) << banded.err;
  const Matrix d = parse_csv(banded.out);
  expect_shape(d, 3, 3);
  for (std::size_t i = 0; i < 3; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      expect_close(d[i][j], reference_sdtw(x[i], x[j], 0.0, 1), 1e-12);
    }
  }
}

// Both dtypes to stdout, to .csv and to .npy: the files hold what stdout
// holds, float32 agrees with float64, and the .npy parses. Lengths 24 × 286.
TEST(CliPairwise, NpyAndCsvFiles) {
  const fs::path dir = scratch();
  constexpr std::size_t rows = 67, cols = 28;
  Matrix float64;
  for (const std::string dtype : {"float64", "float32"}) {
    SCOPED_TRACE(dtype);
    const std::vector<std::string> common = {"pairwise",
                                             "--x",
                                             ucr("ItalyPowerDemand", "TRAIN"),
                                             "--y",
                                             ucr("Coffee", "TEST"),
                                             "--band",
                                             "3",
                                             "--dtype",
                                             dtype};
    const Result csv_stdout = softwave(common);
    ASSERT_EQ(csv_stdout.status, 0) << csv_stdout.err;
    std::vector<std::string> to_csv = common, to_npy = common;
    to_csv.insert(to_csv.end(), {"-o", (dir / "m.csv").string()});
    to_npy.insert(to_npy.end(), {"--output", (dir / "m.npy").string()});
    const Result csv_file = softwave(to_csv), npy_file = softwave(to_npy);
    ASSERT_EQ(csv_file.status, 0) << csv_file.err;
    ASSERT_EQ(npy_file.status, 0) << npy_file.err;
    EXPECT_EQ(csv_file.out, "");
    EXPECT_EQ(npy_file.out, "");
    EXPECT_EQ(read_file(dir / "m.csv"), csv_stdout.out);

    const Matrix expected = parse_csv(csv_stdout.out);
    expect_shape(expected, rows, cols);
    if (dtype == "float64") {
      float64 = expected;
    } else {
      for (std::size_t i = 0; i < rows; ++i) {
        for (std::size_t j = 0; j < cols; ++j) {
          expect_close(expected[i][j], float64[i][j], 1e-5);
        }
      }
    }
    const std::string npy = read_file(dir / "m.npy");
    ASSERT_GE(npy.size(), 10u);
    EXPECT_EQ(npy.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    const std::size_t header_length = static_cast<unsigned char>(npy[8]) +
                                      256 * static_cast<unsigned char>(npy[9]);
    const std::size_t data_start = 10 + header_length;
    EXPECT_EQ(data_start % 64, 0u);
    const std::string header = npy.substr(10, header_length);
    const std::string descr = dtype == "float64" ? "<f8" : "<f4";
    EXPECT_EQ(
        header.rfind(
            "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                std::to_string(rows) + ", " + std::to_string(cols) + "), }",
            0),
        0u)
        << header;
    EXPECT_EQ(header.back(), '\n');
    const std::size_t item = dtype == "float64" ? 8 : 4;
    ASSERT_EQ(npy.size(), data_start + rows * cols * item);
    for (std::size_t k = 0; k < rows * cols; ++k) {
      double value = 0;
      if (item == 8) {
        std::memcpy(&value, npy.data() + data_start + 8 * k, 8);
      } else {
        float single = 0;
        std::memcpy(&single, npy.data() + data_start + 4 * k, 4);
        value = single;
      }
      // %.17g / %.9g print enough digits to read back the same double /
      // float, so both files hold the same value.
      const double from_csv = expected[k / cols][k % cols];
      EXPECT_EQ(value, item == 8 ? from_csv : static_cast<float>(from_csv))
          << k;
    }
  }
}

// --- bad input and bad usage ------------------------------------------------

TEST(CliErrors, BadFiles) {
  const fs::path dir = scratch();
  const std::string good = ucr("Coffee", "TRAIN");
  struct Case {
    const char* file;
    const char* text;
    const char* what;  // after "FILE:"
  };
  const Case cases[] = {
      {"empty.tsv", "", "1: no series (the file is empty)"},
      {"ragged.tsv", "1\t0.5\t1\n2\t0.5\t1\n1\t0.5\t1\t2\n",
       "3: ragged rows: 3 values, but the first series has 2"},
      {"word.tsv", "1\t0.5\t1\n2\t0.5\tabc\n",
       "2: field 3: 'abc' is not a number"},
      {"nan.csv", "1,0.5,1\n2,nan,1\n",
       "2: field 2: 'nan' is not a finite number"},
      {"inf.tsv", "1\t0.5\tinf\r\n",
       "1: field 3: 'inf' is not a finite number"},
      {"nolabels.tsv", "0.5\t1\t2\n",
       "1: label '0.5' is not an integer (a "
       "file without labels needs --no-labels)"},
  };
  for (const Case& c : cases) {
    const std::string path = (dir / c.file).string();
    write_file(path, c.text);
    SCOPED_TRACE(c.file);
    expect_error(softwave({"knn", "--train", good, "--test", path}),
                 path + ":" + c.what);
    expect_error(softwave({"knn", "--train", path, "--test", good}),
                 path + ":" + c.what);
    if (std::string(c.file) != "nolabels.tsv") {
      expect_error(softwave({"pairwise", "--x", path}), path + ":" + c.what);
    }
  }
  const std::string missing = (dir / "missing.tsv").string();
  expect_error(softwave({"knn", "--train", missing, "--test", good}),
               missing + ": cannot open: No such file or directory");
  // The label-less file is fine with --no-labels.
  const Result ok = softwave(
      {"pairwise", "--x", (dir / "nolabels.tsv").string(), "--no-labels"});
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(parse_csv(ok.out).size(), 1u);
}

TEST(CliErrors, BadUsage) {
  const std::string train = ucr("Coffee", "TRAIN"),
                    test = ucr("Coffee", "TEST");
  const std::vector<std::string> knn = {"knn", "--train", train, "--test",
                                        test};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> arguments = knn;
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return softwave(arguments);
  };
  expect_error(softwave({}), "missing command (see 'softwave --help')");
  expect_error(softwave({"frobnicate"}),
               "unknown command 'frobnicate' (see 'softwave --help')");
  expect_error(with({"--frobnicate"}), "unknown option '--frobnicate'");
  expect_error(softwave({"knn", "--train", train}),
               "missing required option --test");
  expect_error(softwave({"pairwise"}), "missing required option --x");
  expect_error(with({"--gamma"}), "option --gamma needs a value");
  expect_error(with({"--gamma", "abc"}),
               "option --gamma: expected a number, got 'abc'");
  expect_error(with({"--band", "-1"}),
               "option --band: expected an integer >= 0, got '-1'");
  expect_error(with({"--band", "2.5"}),
               "option --band: expected an integer, got '2.5'");
  expect_error(with({"--band-pct", "-5"}),
               "option --band-pct: expected a percentage >= 0, got '-5'");
  expect_error(with({"--band", "3", "--band-pct", "10"}),
               "options --band and --band-pct are mutually exclusive");
  expect_error(with({"--cost", "l2"}),
               "option --cost: expected sqeuclidean|l1|cosine, got 'l2'");
  expect_error(with({"--dtype", "float16"}),
               "option --dtype: expected float32|float64, got 'float16'");
  expect_error(with({"--threads", "0"}),
               "option --threads: expected an integer >= 1, got '0'");
  expect_error(with({"--no-labels"}), "unknown option '--no-labels'");
  expect_error(softwave({"pairwise", "--x", train, "-o", "out.txt"}),
               "option --output: 'out.txt' must end in .csv or .npy");
  const fs::path no_dir = scratch() / "no" / "such" / "dir" / "m.csv";
  expect_error(softwave({"pairwise", "--x", train, "-o", no_dir.string()}),
               "option --output: cannot write '" + no_dir.string() +
                   "': No such file or directory");
}

// Bad values the library rejects (softwave::invalid_argument).
TEST(CliErrors, LibraryRejectsGamma) {
  const std::string train = ucr("Coffee", "TRAIN"),
                    test = ucr("Coffee", "TEST");
  for (const std::string gamma : {"-1", "nan", "inf"}) {
    SCOPED_TRACE(gamma);
    expect_error_containing(
        softwave({"knn", "--train", train, "--test", test, "--gamma", gamma}),
        "gamma");
    expect_error_containing(
        softwave({"pairwise", "--x", test, "--gamma", gamma}), "gamma");
  }
  // No half-written output is left behind.
  const fs::path out = scratch() / "m.npy";
  expect_error_containing(
      softwave({"pairwise", "--x", test, "--gamma", "-1", "-o", out.string()}),
      "gamma");
  EXPECT_FALSE(fs::exists(out));
}

// --- .npy input -------------------------------------------------------------

namespace cli = softwave::cli;

// Writes `values` as a C-order .npy of T with the given shape.
template <class T>
void write_npy(const fs::path& path, const std::vector<std::size_t>& shape,
               const std::vector<double>& values) {
  std::string bytes = cli::npy_header<T>(shape);
  for (const double v : values) {
    const T item = static_cast<T>(v);
    bytes.append(reinterpret_cast<const char*>(&item), sizeof item);
  }
  write_file(path, bytes);
}

cli::SeriesSet read_ucr(const std::string& name, const std::string& split) {
  return cli::read_series_file(ucr(name, split), cli::Labels::first_column);
}

// A UCR set as `<stem>.npy` (n, length) of T and `<stem>_labels.npy` (n,).
template <class T>
void ucr_as_npy(const cli::SeriesSet& set, const fs::path& stem) {
  write_npy<T>(stem.string() + ".npy", {set.count, set.length}, set.values);
  write_npy<std::int64_t>(
      stem.string() + "_labels.npy", {set.count},
      std::vector<double>(set.labels.begin(), set.labels.end()));
}

cli::NpyArray read_npy(const fs::path& path) {
  return cli::parse_npy(read_file(path), path.string());
}

TEST(CliNpy, PairwiseSameAsText) {
  const fs::path dir = scratch();
  const cli::SeriesSet set = read_ucr("ItalyPowerDemand", "TRAIN");
  ucr_as_npy<double>(set, dir / "f64");
  ucr_as_npy<float>(set, dir / "f32");
  write_npy<double>(dir / "f64_3d.npy", {set.count, set.length, 1}, set.values);
  const std::string text = ucr("ItalyPowerDemand", "TRAIN");
  const Result from_text =
      softwave({"pairwise", "--x", text, "--gamma", "0.5"});
  ASSERT_EQ(from_text.status, 0) << from_text.err;
  for (const char* npy : {"f64.npy", "f64_3d.npy"}) {
    SCOPED_TRACE(npy);
    const Result r =
        softwave({"pairwise", "--x", (dir / npy).string(), "--gamma", "0.5"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, from_text.out);
  }
  // float32 data computed in float32 match text data cast to float32.
  const Result text32 =
      softwave({"pairwise", "--x", text, "--dtype", "float32"});
  const Result npy32 = softwave(
      {"pairwise", "--x", (dir / "f32.npy").string(), "--dtype", "float32"});
  ASSERT_EQ(npy32.status, 0) << npy32.err;
  EXPECT_EQ(npy32.out, text32.out);
}

TEST(CliNpy, KnnTakesLabelsFromCompanionFiles) {
  const fs::path dir = scratch();
  ucr_as_npy<double>(read_ucr("ItalyPowerDemand", "TRAIN"), dir / "train");
  ucr_as_npy<double>(read_ucr("ItalyPowerDemand", "TEST"), dir / "test");
  const std::string train = (dir / "train.npy").string(),
                    test = (dir / "test.npy").string();
  const Result result = softwave(
      {"knn", "--train", train, "--train-labels",
       (dir / "train_labels.npy").string(), "--test", test, "--test-labels",
       (dir / "test_labels.npy").string(), "--gamma", "0"});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(json_number(result.out, "errors"), 51);  // as from the .tsv files
  expect_error(softwave({"knn", "--train", train, "--test",
                         ucr("ItalyPowerDemand", "TEST")}),
               "'" + train +
                   "' holds no class labels (a .npy file has none): give them "
                   "with --train-labels FILE.npy");
}

// --- barycenter -------------------------------------------------------------

TEST(CliBarycenter, GunPointClassOne) {
  const fs::path dir = scratch();
  const std::string train = ucr("GunPoint", "TRAIN");
  const Result csv = softwave({"barycenter", "--x", train, "--class", "1", "-o",
                               (dir / "b.csv").string()});
  ASSERT_EQ(csv.status, 0) << csv.err;
  EXPECT_EQ(csv.err, "");
  const std::string& json = csv.out;
  EXPECT_EQ(json.find('\n'), json.size() - 1) << "one JSON line";
  EXPECT_EQ(json_number(json, "n_series"), 24);
  EXPECT_EQ(json_number(json, "length"), 150);
  EXPECT_EQ(json_number(json, "d"), 1);
  EXPECT_EQ(json_number(json, "class"), 1);
  EXPECT_EQ(json_number(json, "gamma"), 1);
  EXPECT_EQ(json_field(json, "method"), "\"lbfgs\"");
  EXPECT_EQ(json_field(json, "converged"), "true");
  EXPECT_GE(json_number(json, "iterations"), 1);
  EXPECT_GE(json_number(json, "seconds"), 0);
  const double objective = json_number(json, "objective");
  EXPECT_TRUE(std::isfinite(objective));
  const Matrix z = parse_csv(read_file(dir / "b.csv"));
  expect_shape(z, 150, 1);

  // The same run to .npy: shape (150, 1), the values the CSV holds.
  const Result npy = softwave({"barycenter", "--x", train, "--class", "1", "-o",
                               (dir / "b.npy").string()});
  ASSERT_EQ(npy.status, 0) << npy.err;
  const cli::NpyArray array = read_npy(dir / "b.npy");
  EXPECT_EQ(array.shape, (std::vector<std::size_t>{150, 1}));
  ASSERT_EQ(array.size(), 150u);
  for (std::size_t t = 0; t < 150; ++t) EXPECT_EQ(array.element(t), z[t][0]);

  // One iteration from the same start ends higher; the optimum is not
  // far from the class mean, which every GunPoint series is near.
  const Result one =
      softwave({"barycenter", "--x", train, "--class", "1", "--max-iter", "1",
                "-o", (dir / "one.csv").string()});
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_GE(json_number(one.out, "objective"), objective);
  EXPECT_EQ(json_field(one.out, "converged"), "false");
}

TEST(CliBarycenter, MedoidAdamMultivariateNpy) {
  const fs::path dir = scratch();
  // GunPoint class 2 as d = 2 series: each value and its successor.
  const cli::SeriesSet set = read_ucr("GunPoint", "TRAIN");
  std::vector<double> values;
  std::vector<double> labels;
  for (std::size_t s = 0; s < set.count; ++s) {
    const double* x = set.series(s);
    for (std::size_t t = 0; t < set.length; ++t) {
      values.push_back(x[t]);
      values.push_back(x[std::min(t + 1, set.length - 1)]);
    }
    labels.push_back(static_cast<double>(set.labels[s]));
  }
  write_npy<float>(dir / "x.npy", {set.count, set.length, 2}, values);
  write_npy<double>(dir / "labels.npy", {set.count}, labels);
  const Result r = softwave({"barycenter",
                             "--x",
                             (dir / "x.npy").string(),
                             "--labels",
                             (dir / "labels.npy").string(),
                             "--class",
                             "2",
                             "--init",
                             "medoid",
                             "--method",
                             "adam",
                             "--max-iter",
                             "20",
                             "--length",
                             "40",
                             "--dtype",
                             "float32",
                             "--gamma",
                             "0.5",
                             "-o",
                             (dir / "b.npy").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json_number(r.out, "length"), 40);
  EXPECT_EQ(json_number(r.out, "series_length"), 150);
  EXPECT_EQ(json_number(r.out, "d"), 2);
  EXPECT_EQ(json_field(r.out, "init"), "\"medoid\"");
  EXPECT_EQ(json_field(r.out, "method"), "\"adam\"");
  EXPECT_LE(json_number(r.out, "iterations"), 20);
  const cli::NpyArray array = read_npy(dir / "b.npy");
  EXPECT_EQ(array.shape, (std::vector<std::size_t>{40, 2}));
  EXPECT_EQ(array.item_size, 4u);  // float32 in, float32 out
}

// --- cluster ----------------------------------------------------------------

TEST(CliCluster, SyntheticControlRecoversTheClasses) {
  const fs::path dir = scratch();
  const std::string train = ucr("SyntheticControl", "TRAIN");
  const Result r = softwave({"cluster", "--x", train, "-k", "6", "-o",
                             (dir / "labels.csv").string(), "--centroids",
                             (dir / "centroids.npy").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(json_number(r.out, "k"), 6);
  EXPECT_EQ(json_number(r.out, "n_series"), 300);
  EXPECT_GE(json_number(r.out, "iterations"), 1);
  EXPECT_TRUE(std::isfinite(json_number(r.out, "inertia")));
  // Six well-separated shapes: soft-DTW k-means (γ = 1, seed 0) finds them
  // with ARI 0.74 (0.56 to 0.78 over seeds 0-22); chance is 0.
  EXPECT_GT(json_number(r.out, "ari"), 0.4) << r.out;
  const Matrix labels = parse_csv(read_file(dir / "labels.csv"));
  expect_shape(labels, 300, 1);
  std::vector<int> sizes(6, 0);
  for (const auto& row : labels) {
    ASSERT_GE(row[0], 0);
    ASSERT_LE(row[0], 5);
    ++sizes[static_cast<std::size_t>(row[0])];
  }
  for (const int size : sizes) EXPECT_GT(size, 0);
  const cli::NpyArray centroids = read_npy(dir / "centroids.npy");
  EXPECT_EQ(centroids.shape, (std::vector<std::size_t>{6, 60}));
}

TEST(CliCluster, NpyInputNpyLabelsAndNoAriWithoutLabels) {
  const fs::path dir = scratch();
  ucr_as_npy<double>(read_ucr("ItalyPowerDemand", "TRAIN"), dir / "ipd");
  const Result r =
      softwave({"cluster", "--x", (dir / "ipd.npy").string(), "-k", "2",
                "--n-init", "2", "--divergence", "--barycenter-iter", "5", "-o",
                (dir / "labels.npy").string()});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json_field(r.out, "ari"), "(missing ari)");
  EXPECT_EQ(json_field(r.out, "divergence"), "true");
  EXPECT_EQ(json_number(r.out, "n_init"), 2);
  const cli::NpyArray labels = read_npy(dir / "labels.npy");
  EXPECT_EQ(labels.shape, (std::vector<std::size_t>{67}));
  EXPECT_EQ(labels.kind, 'i');
  for (std::size_t s = 0; s < 67; ++s) {
    EXPECT_TRUE(labels.element(s) == 0 || labels.element(s) == 1);
  }
  // With its labels, the same run reports the ARI; the seed decides.
  const std::vector<std::string> labelled = {"cluster",
                                             "--x",
                                             (dir / "ipd.npy").string(),
                                             "--labels",
                                             (dir / "ipd_labels.npy").string(),
                                             "-k",
                                             "2",
                                             "--barycenter-iter",
                                             "5",
                                             "--seed",
                                             "7",
                                             "-o",
                                             (dir / "l.csv").string()};
  const Result a = softwave(labelled), b = softwave(labelled);
  ASSERT_EQ(a.status, 0) << a.err;
  const double ari = json_number(a.out, "ari");
  EXPECT_GE(ari, -1);
  EXPECT_LE(ari, 1);
  EXPECT_EQ(json_field(a.out, "inertia"), json_field(b.out, "inertia"));
}

TEST(CliErrors, BadNpyFilesForEveryCommand) {
  const fs::path dir = scratch();
  const std::string good = ucr("Coffee", "TRAIN");
  write_npy<double>(dir / "labels.npy", {28}, std::vector<double>(28, 1.0));
  const std::string header = cli::npy_header<double>({2, 3});
  struct Case {
    const char* file;
    std::string bytes;
    const char* what;
  };
  const Case cases[] = {
      {"magic.npy", "1\t2\t3\n",
       "not a NumPy .npy file (no \\x93NUMPY magic string)"},
      {"truncated.npy", header + std::string(40, '\0'),
       "truncated: shape (2, 3) of '<f8' needs 48 bytes of data, the file "
       "has 40"},
      {"fortran.npy",
       std::string("\x93NUMPY\x01\x00\x46\x00", 10) +
           "{'descr': '<f8', 'fortran_order': True, 'shape': (1, 1), }      "
           "\n" +
           std::string(8, '\0'),
       "Fortran-order arrays are not supported (save a C-order array, e.g. "
       "np.save(path, np.ascontiguousarray(a)))"},
      {"ints.npy", cli::npy_header<std::int64_t>({1, 1}) + std::string(8, '\0'),
       "series must be float32 or float64, not an integer array"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string path = (dir / c.file).string();
    write_file(path, c.bytes);
    const std::string what = path + ": " + c.what;
    expect_error(softwave({"pairwise", "--x", path}), what);
    expect_error(softwave({"pairwise", "--x", good, "--y", path}), what);
    expect_error(softwave({"knn", "--train", path, "--train-labels",
                           (dir / "labels.npy").string(), "--test", good}),
                 what);
    expect_error(
        softwave({"barycenter", "--x", path, "-o", (dir / "b.csv").string()}),
        what);
    expect_error(softwave({"cluster", "--x", path, "-k", "2", "-o",
                           (dir / "l.csv").string()}),
                 what);
    EXPECT_FALSE(fs::exists(dir / "b.csv"));
    EXPECT_FALSE(fs::exists(dir / "l.csv"));
  }
  // Labels that do not match the series.
  const std::string labels = (dir / "labels.npy").string();
  write_npy<double>(dir / "x.npy", {3, 4}, std::vector<double>(12, 0.5));
  expect_error(
      softwave({"barycenter", "--x", (dir / "x.npy").string(), "--labels",
                labels, "-o", (dir / "b.csv").string()}),
      labels + ": 28 labels for 3 series in " + (dir / "x.npy").string());
}

TEST(CliErrors, BarycenterAndClusterUsage) {
  const fs::path dir = scratch();
  const std::string coffee = ucr("Coffee", "TRAIN");
  const std::string out = (dir / "out.csv").string();
  auto barycenter = [&](std::vector<std::string> extra) {
    std::vector<std::string> arguments = {"barycenter", "--x", coffee, "-o",
                                          out};
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return softwave(arguments);
  };
  auto cluster = [&](std::vector<std::string> extra) {
    std::vector<std::string> arguments = {"cluster", "--x", coffee, "-o", out};
    arguments.insert(arguments.end(), extra.begin(), extra.end());
    return softwave(arguments);
  };
  expect_error(softwave({"barycenter", "--x", coffee}),
               "missing required option --output");
  expect_error(softwave({"barycenter", "-o", out}),
               "missing required option --x");
  expect_error(barycenter({"--max-iter", "0"}),
               "option --max-iter: expected an integer >= 1, got '0'");
  expect_error(barycenter({"--tol", "0"}),
               "option --tol: expected a number > 0, got '0'");
  expect_error(barycenter({"--learning-rate", "-1"}),
               "option --learning-rate: expected a number > 0, got '-1'");
  expect_error(barycenter({"--method", "sgd"}),
               "option --method: expected lbfgs|adam, got 'sgd'");
  expect_error(barycenter({"--init", "random"}),
               "option --init: expected mean|medoid, got 'random'");
  expect_error(barycenter({"--length", "0"}),
               "option --length: expected an integer >= 1, got '0'");
  expect_error(barycenter({"--class", "7"}),
               "option --class: no series in '" + coffee + "' has label 7");
  expect_error(barycenter({"--class", "1", "--no-labels"}),
               "option --class: '" + coffee +
                   "' has no labels (drop "
                   "--no-labels)");
  expect_error(softwave({"barycenter", "--x", coffee, "-o", "b.txt"}),
               "option --output: 'b.txt' must end in .csv or .npy");
  expect_error_containing(barycenter({"--gamma", "0"}), "gamma");
  expect_error(softwave({"cluster", "--x", coffee, "-o", out}),
               "missing required option -k");
  expect_error(cluster({"-k", "0"}),
               "option -k: expected an integer >= 1, got '0'");
  expect_error(cluster({"-k", "29"}), "option -k: 29 clusters for 28 series");
  expect_error(cluster({"-k", "2", "--n-init", "0"}),
               "option --n-init: expected an integer >= 1, got '0'");
  expect_error(cluster({"-k", "2", "--seed", "-1"}),
               "option --seed: expected an integer >= 0, got '-1'");
  expect_error(cluster({"-k", "2", "--barycenter-iter", "0"}),
               "option --barycenter-iter: expected an integer >= 1, got '0'");
  expect_error(cluster({"-k", "2", "--max-iter", "x"}),
               "option --max-iter: expected an integer, got 'x'");
  expect_error(cluster({"-k", "2", "--centroids", "c.txt"}),
               "option --centroids: 'c.txt' must end in .csv or .npy");
  expect_error_containing(cluster({"-k", "2", "--gamma", "0"}), "gamma");
  EXPECT_FALSE(fs::exists(out));  // nothing half-written is left behind
}

// Two small point clouds as CSV files in `dir`: 12 source and 9 target
// points in the plane, at fixed places.
void write_clouds(const fs::path& dir, double source_factor = 1) {
  std::string source, target;
  for (int i = 0; i < 12; ++i)
    source += std::to_string(source_factor * std::cos(0.5 * i)) + "," +
              std::to_string(source_factor * 0.1 * i) + "\n";
  for (int j = 0; j < 9; ++j)
    target += std::to_string(0.2 * j - 0.5) + "," +
              std::to_string(std::sin(0.7 * j) + 0.3) + "\n";
  write_file(dir / "source.csv", source);
  write_file(dir / "target.csv", target);
}

TEST(CliSinkhorn, ConvergesAndWritesPotentialsAndMatching) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const double eps = 0.3;
  const Result result = softwave(
      {"sinkhorn", "--source", (dir / "source.csv").string(), "--target",
       (dir / "target.csv").string(), "--epsilon", "0.3", "--tolerance",
       "1e-12", "--max-iterations", "100000", "-o", (dir / "f.csv").string(),
       "--target-output", (dir / "g.npy").string(), "--matching",
       (dir / "m.csv").string()});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_EQ(json_field(result.out, "converged"), "true") << result.out;
  EXPECT_EQ(json_number(result.out, "n_source"), 12);
  EXPECT_EQ(json_number(result.out, "n_target"), 9);
  EXPECT_LE(json_number(result.out, "marginal_error_source"), 1e-12);
  const Matrix f = parse_csv(read_file(dir / "f.csv"));
  const Matrix m = parse_csv(read_file(dir / "m.csv"));
  const softwave::cli::NpyArray g = softwave::cli::parse_npy(
      read_file(dir / "g.npy"), (dir / "g.npy").string());
  expect_shape(f, 12, 1);
  expect_shape(m, 12, 1);
  ASSERT_EQ(g.shape, std::vector<std::size_t>{9});
  // At the optimum the value is the dual Σ a f + Σ b g (uniform weights),
  // and each row's argmax is that of g_j − C_ij.
  const Matrix x = parse_csv(read_file(dir / "source.csv"));
  const Matrix y = parse_csv(read_file(dir / "target.csv"));
  double dual = 0;
  for (std::size_t i = 0; i < 12; ++i) dual += f[i][0] / 12;
  for (std::size_t j = 0; j < 9; ++j) dual += g.element(j) / 9;
  expect_close(json_number(result.out, "value"), dual, 1e-10);
  for (std::size_t i = 0; i < 12; ++i) {
    double best = -1e300;
    std::size_t at = 0;
    for (std::size_t j = 0; j < 9; ++j) {
      const double dx = x[i][0] - y[j][0], dy = x[i][1] - y[j][1];
      const double score = (g.element(j) - (dx * dx + dy * dy)) / eps;
      if (score > best) best = score, at = j;
    }
    EXPECT_EQ(m[i][0], double(at)) << "row " << i;
  }
}

TEST(CliSinkhorn, BadInputIsAnErrorAndWritesNothing) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const std::string source = (dir / "source.csv").string();
  const std::string target = (dir / "target.csv").string();
  const std::string out = (dir / "f.npy").string();
  auto sinkhorn = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"sinkhorn", "--source", source, "--target",
                                     target,     "-o",       out};
    args.insert(args.end(), more.begin(), more.end());
    return softwave(args);
  };
  expect_error(sinkhorn({"--epsilon", "0"}),
               "option --epsilon: expected a number > 0, got '0'");
  expect_error(
      sinkhorn({"--cost", "l1"}),
      "option --cost: expected sqeuclidean|half_sqeuclidean, got 'l1'");
  write_file(dir / "w.csv", "0.5\n0.5\n");
  expect_error_containing(
      sinkhorn({"--target-weights", (dir / "w.csv").string()}),
      "holds 2 weights for 9 points");
  write_file(dir / "line.csv", "1,2,3\n");
  expect_error_containing(softwave({"sinkhorn", "--source", source, "--target",
                                    (dir / "line.csv").string(), "-o", out}),
                          "coordinates");
  write_file(dir / "neg.csv", "1\n1\n1\n1\n1\n1\n1\n1\n-1\n");
  expect_error_containing(
      sinkhorn({"--target-weights", (dir / "neg.csv").string()}), "negative");
  EXPECT_FALSE(fs::exists(out));  // nothing half-written is left behind
}

TEST(CliGw, WritesPlanMatchingAndObjective) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result result = softwave({"gw",
                                  "--source",
                                  (dir / "source.csv").string(),
                                  "--target",
                                  (dir / "target.csv").string(),
                                  "--mode",
                                  "euclidean",
                                  "--anchors",
                                  "5",
                                  "--max-iterations",
                                  "8",
                                  "--epsilon",
                                  "0.05",
                                  "--dtype",
                                  "float64",
                                  "--seed",
                                  "3",
                                  "-o",
                                  (dir / "plan.npy").string(),
                                  "--matching",
                                  (dir / "m.csv").string()});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_EQ(json_number(result.out, "n_source"), 12);
  EXPECT_EQ(json_number(result.out, "n_target"), 9);
  EXPECT_EQ(json_field(result.out, "mode"), "\"euclidean\"");
  EXPECT_EQ(json_number(result.out, "iterations"), 8);  // min 50: no stop
  EXPECT_EQ(json_number(result.out, "seed"), 3);
  const softwave::cli::NpyArray plan = softwave::cli::parse_npy(
      read_file(dir / "plan.npy"), (dir / "plan.npy").string());
  ASSERT_EQ(plan.shape, (std::vector<std::size_t>{12, 9}));
  const Matrix m = parse_csv(read_file(dir / "m.csv"));
  expect_shape(m, 12, 1);
  // Each row's argmax; the plan's column sums (each solve ends on them)
  // 1/9; the objective the quadruple sum over the written plan.
  const Matrix x = parse_csv(read_file(dir / "source.csv"));
  const Matrix y = parse_csv(read_file(dir / "target.csv"));
  auto at = [&](std::size_t i, std::size_t j) {
    return plan.element(i * 9 + j);
  };
  for (std::size_t i = 0; i < 12; ++i) {
    std::size_t best = 0;
    for (std::size_t j = 1; j < 9; ++j)
      if (at(i, j) > at(i, best)) best = j;
    EXPECT_EQ(m[i][0], double(best)) << "row " << i;
  }
  for (std::size_t j = 0; j < 9; ++j) {
    double column = 0;
    for (std::size_t i = 0; i < 12; ++i) column += at(i, j);
    expect_close(column, 1.0 / 9, 1e-9);
  }
  auto distance = [](const Matrix& p, std::size_t i, std::size_t j) {
    return std::hypot(p[i][0] - p[j][0], p[i][1] - p[j][1]);
  };
  double objective = 0;
  for (std::size_t i = 0; i < 12; ++i)
    for (std::size_t k = 0; k < 9; ++k)
      for (std::size_t j = 0; j < 12; ++j)
        for (std::size_t l = 0; l < 9; ++l) {
          const double d = distance(x, i, j) - distance(y, k, l);
          objective += d * d * at(i, k) * at(j, l);
        }
  expect_close(json_number(result.out, "objective"), objective, 1e-9);
  EXPECT_EQ(json_number(result.out, "objective_error"), 0);
  // The same run with the objective estimated from 400 drawn pairs.
  const Result estimated = softwave({"gw",
                                     "--source",
                                     (dir / "source.csv").string(),
                                     "--target",
                                     (dir / "target.csv").string(),
                                     "--mode",
                                     "euclidean",
                                     "--anchors",
                                     "5",
                                     "--max-iterations",
                                     "8",
                                     "--epsilon",
                                     "0.05",
                                     "--dtype",
                                     "float64",
                                     "--seed",
                                     "3",
                                     "--exact-objective-entries",
                                     "0",
                                     "--objective-samples",
                                     "400"});
  ASSERT_EQ(estimated.status, 0) << estimated.err;
  const double error = json_number(estimated.out, "objective_error");
  EXPECT_GT(error, 0);
  EXPECT_LE(std::fabs(json_number(estimated.out, "objective") - objective),
            5 * error);
}

// A short float64 `softwave gw` on write_clouds' points (5 anchors, 6
// iterations, ε = 0.05, seed 4) with `more` options, its plan written to
// `plan` in dir; and that plan read back.
Result short_gw(const fs::path& dir, const std::string& plan,
                const std::vector<std::string>& more,
                const std::string& seed = "4") {
  std::vector<std::string> args = {"gw",
                                   "--source",
                                   (dir / "source.csv").string(),
                                   "--target",
                                   (dir / "target.csv").string(),
                                   "--anchors",
                                   "5",
                                   "--max-iterations",
                                   "6",
                                   "--epsilon",
                                   "0.05",
                                   "--dtype",
                                   "float64",
                                   "--seed",
                                   seed,
                                   "-o",
                                   (dir / plan).string()};
  args.insert(args.end(), more.begin(), more.end());
  return softwave(args);
}
softwave::cli::NpyArray plan_in(const fs::path& dir, const std::string& plan) {
  return softwave::cli::parse_npy(read_file(dir / plan), plan);
}

// A race (--restarts 3 --restart-iterations 2) reports each seed's
// objective after 2 iterations and writes the whole run of the lowest:
// the same plan as that seed alone; whole restarts report each seed's
// final objective.
TEST(CliGw, RaceWritesTheLowestSeedsWholeRun) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result race = short_gw(
      dir, "race.npy",
      {"--mode", "euclidean", "--restarts", "3", "--restart-iterations", "2"});
  ASSERT_EQ(race.status, 0) << race.err;
  EXPECT_EQ(json_number(race.out, "restart_iterations"), 2);
  const std::vector<double> early =
      json_numbers(race.out, "restart_objectives");
  ASSERT_EQ(early.size(), 3u);
  const int winner =
      int(std::min_element(early.begin(), early.end()) - early.begin());
  EXPECT_EQ(json_number(race.out, "seed"), 4 + winner);
  const Result alone = short_gw(dir, "alone.npy", {"--mode", "euclidean"},
                                std::to_string(4 + winner));
  ASSERT_EQ(alone.status, 0) << alone.err;
  EXPECT_EQ(plan_in(dir, "race.npy").data, plan_in(dir, "alone.npy").data);
  EXPECT_EQ(json_field(race.out, "objective"),
            json_field(alone.out, "objective"));
  EXPECT_TRUE(json_numbers(alone.out, "restart_objectives").empty());
  const Result whole =
      short_gw(dir, "whole.npy", {"--mode", "euclidean", "--restarts", "3"});
  ASSERT_EQ(whole.status, 0) << whole.err;
  const std::vector<double> final_objectives =
      json_numbers(whole.out, "restart_objectives");
  ASSERT_EQ(final_objectives.size(), 3u);
  EXPECT_EQ(*std::min_element(final_objectives.begin(), final_objectives.end()),
            json_number(whole.out, "objective"));
  expect_error(short_gw(dir, "bad.npy", {"--restart-iterations", "-1"}),
               "option --restart-iterations: expected an integer >= 0, got "
               "'-1'");
}

// The graph's shortest paths as matrices (geodesic) or from each
// iteration's anchors (dijkstra) are the same distances: the same plan and
// objective for the same seed.
TEST(CliGw, GeodesicMatricesAreTheDijkstraRuns) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result geodesic =
      short_gw(dir, "geodesic.npy", {"--mode", "geodesic", "--k", "3"});
  const Result dijkstra =
      short_gw(dir, "dijkstra.npy", {"--mode", "dijkstra", "--k", "3"});
  ASSERT_EQ(geodesic.status, 0) << geodesic.err;
  ASSERT_EQ(dijkstra.status, 0) << dijkstra.err;
  EXPECT_EQ(json_field(geodesic.out, "mode"), "\"geodesic\"");
  const auto a = plan_in(dir, "geodesic.npy"), b = plan_in(dir, "dijkstra.npy");
  ASSERT_EQ(a.shape, (std::vector<std::size_t>{12, 9}));
  ASSERT_EQ(b.shape, a.shape);
  for (std::size_t q = 0; q < 12 * 9; ++q)
    expect_close(a.element(q), b.element(q), 1e-12);
  expect_close(json_number(geodesic.out, "objective"),
               json_number(dijkstra.out, "objective"), 1e-12);
}

// The summary gives what POT's entropic GW needs to solve the same problem
// (its epsilon is 2 final_epsilon source_scale target_scale): the last
// solve's epsilon, below the first one after annealing, and each side's
// scale, which follows its distances (a source three times as large: three
// times the scale, the same plan and epsilon).
TEST(CliGw, ReportsTheLastEpsilonAndTheScales) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result once = short_gw(dir, "once.npy", {"--mode", "euclidean"});
  write_clouds(dir, 3);
  const Result thrice = short_gw(dir, "thrice.npy", {"--mode", "euclidean"});
  ASSERT_EQ(once.status, 0) << once.err;
  ASSERT_EQ(thrice.status, 0) << thrice.err;
  const double epsilon = json_number(once.out, "final_epsilon");
  EXPECT_GT(epsilon, 0);
  EXPECT_LT(epsilon, 0.05);  // short_gw's first epsilon
  expect_close(json_number(thrice.out, "final_epsilon"), epsilon, 1e-12);
  const double source_scale = json_number(once.out, "source_scale");
  EXPECT_GT(source_scale, 0);
  EXPECT_GT(json_number(once.out, "target_scale"), 0);
  expect_close(json_number(thrice.out, "source_scale"), 3 * source_scale, 1e-5);
  expect_close(json_number(thrice.out, "target_scale"),
               json_number(once.out, "target_scale"), 1e-12);
  const auto a = plan_in(dir, "once.npy"), b = plan_in(dir, "thrice.npy");
  ASSERT_EQ(b.shape, a.shape);
  for (std::size_t q = 0; q < 12 * 9; ++q)
    expect_close(b.element(q), a.element(q), 1e-5);
}

// --shortest-paths device gives Dijkstra's distances, so the same plan, in
// each graph mode, as does the default (automatic); other values are
// refused.
TEST(CliGw, DeviceShortestPathsGiveTheSamePlan) {
  const fs::path dir = scratch();
  write_clouds(dir);
  for (std::string mode : {"dijkstra", "landmark", "geodesic"}) {
    SCOPED_TRACE(mode);
    const Result host = short_gw(dir, "host.npy",
                                 {"--mode", mode, "--k", "3", "--landmarks",
                                  "4", "--shortest-paths", "host"});
    const Result device = short_gw(dir, "device.npy",
                                   {"--mode", mode, "--k", "3", "--landmarks",
                                    "4", "--shortest-paths", "device"});
    const Result automatic = short_gw(
        dir, "automatic.npy", {"--mode", mode, "--k", "3", "--landmarks", "4"});
    ASSERT_EQ(host.status, 0) << host.err;
    ASSERT_EQ(device.status, 0) << device.err;
    ASSERT_EQ(automatic.status, 0) << automatic.err;
    EXPECT_EQ(read_file(dir / "device.npy"), read_file(dir / "host.npy"));
    EXPECT_EQ(read_file(dir / "automatic.npy"), read_file(dir / "host.npy"));
    EXPECT_EQ(json_number(device.out, "objective"),
              json_number(host.out, "objective"));
  }
  expect_error(
      short_gw(dir, "bad.npy", {"--shortest-paths", "gpu"}),
      "option --shortest-paths: expected automatic|host|device, got 'gpu'");
}

// --no-objective still writes the plan (the same one), and reports the
// objective as null.
TEST(CliGw, NoObjectiveStillWritesThePlan) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result with = short_gw(dir, "with.npy", {"--mode", "euclidean"});
  const Result without =
      short_gw(dir, "without.npy", {"--mode", "euclidean", "--no-objective"});
  ASSERT_EQ(with.status, 0) << with.err;
  ASSERT_EQ(without.status, 0) << without.err;
  EXPECT_EQ(json_field(without.out, "objective"), "null");
  const auto a = plan_in(dir, "with.npy"), b = plan_in(dir, "without.npy");
  ASSERT_EQ(b.shape, a.shape);
  for (std::size_t q = 0; q < 12 * 9; ++q)
    EXPECT_EQ(b.element(q), a.element(q)) << "entry " << q;
}

// --sinkhorn-iterations and --sinkhorn-tolerance bound each solve: solved
// to 1e-13, every solve's plan (so their mixture) has the source's row sums
// 1/12; one iteration a solve leaves them off. Both end on the column
// update, so the columns sum to 1/9 either way.
TEST(CliGw, SinkhornIterationsBoundEachSolve) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result long_solves =
      short_gw(dir, "long.npy",
               {"--mode", "euclidean", "--sinkhorn-iterations", "100000",
                "--sinkhorn-tolerance", "1e-13", "--no-objective"});
  const Result one_step =
      short_gw(dir, "one.npy",
               {"--mode", "euclidean", "--sinkhorn-iterations", "1",
                "--sinkhorn-tolerance", "0", "--no-objective"});
  ASSERT_EQ(long_solves.status, 0) << long_solves.err;
  ASSERT_EQ(one_step.status, 0) << one_step.err;
  auto worst_row_error = [&](const std::string& name) {
    const auto plan = plan_in(dir, name);
    double worst = 0;
    for (std::size_t i = 0; i < 12; ++i) {
      double row = 0;
      for (std::size_t j = 0; j < 9; ++j) row += plan.element(i * 9 + j);
      worst = std::max(worst, std::fabs(row - 1.0 / 12));
    }
    for (std::size_t j = 0; j < 9; ++j) {
      double column = 0;
      for (std::size_t i = 0; i < 12; ++i) column += plan.element(i * 9 + j);
      expect_close(column, 1.0 / 9, 1e-9);
    }
    return worst;
  };
  EXPECT_LE(worst_row_error("long.npy"), 1e-10);
  EXPECT_GE(worst_row_error("one.npy"), 1e-4);
  expect_error_containing(
      short_gw(dir, "bad.npy", {"--sinkhorn-iterations", "0"}),
      "--sinkhorn-iterations");
}

// --early-sinkhorn-iterations bounds the solves before the last 5
// iterations ahead of the first possible stop (here the first of 6): one
// iteration there gives another plan than solved ones, and 0 solves them as
// the others.
TEST(CliGw, EarlySinkhornIterationsBoundTheFirstSolves) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const std::vector<std::string> solved = {"--mode",
                                           "euclidean",
                                           "--sinkhorn-iterations",
                                           "100000",
                                           "--sinkhorn-tolerance",
                                           "1e-13",
                                           "--no-objective"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), solved.begin(), solved.end());
    return more;
  };
  const Result all =
      short_gw(dir, "all.npy", with({"--early-sinkhorn-iterations", "0"}));
  const Result whole = short_gw(
      dir, "whole.npy", with({"--early-sinkhorn-iterations", "100000"}));
  const Result one =
      short_gw(dir, "one.npy", with({"--early-sinkhorn-iterations", "1"}));
  ASSERT_EQ(all.status, 0) << all.err;
  ASSERT_EQ(whole.status, 0) << whole.err;
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_EQ(read_file(dir / "all.npy"), read_file(dir / "whole.npy"));
  EXPECT_NE(read_file(dir / "all.npy"), read_file(dir / "one.npy"));
  expect_error_containing(
      short_gw(dir, "bad.npy", {"--early-sinkhorn-iterations", "-1"}),
      "--early-sinkhorn-iterations");
}

// --dense-cost-entries 0 keeps every solve's sampled cost low-rank: the
// same cost as the default's dense array at this size, so on the CPU the
// same plan to rounding.
TEST(CliGw, DenseAndLowRankSolvesGiveTheSamePlan) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result dense = short_gw(dir, "dense.npy", {"--mode", "euclidean"});
  const Result low_rank =
      short_gw(dir, "low_rank.npy",
               {"--mode", "euclidean", "--dense-cost-entries", "0"});
  ASSERT_EQ(dense.status, 0) << dense.err;
  ASSERT_EQ(low_rank.status, 0) << low_rank.err;
  EXPECT_EQ(json_field(dense.out, "dense_solves"), "true") << dense.out;
  EXPECT_EQ(json_field(low_rank.out, "dense_solves"), "false");
  const auto a = plan_in(dir, "dense.npy"), b = plan_in(dir, "low_rank.npy");
  ASSERT_EQ(b.shape, a.shape);
  for (std::size_t q = 0; q < 12 * 9; ++q)
    expect_close(b.element(q), a.element(q), 1e-6);
  expect_error_containing(
      short_gw(dir, "bad.npy", {"--dense-cost-entries", "-1"}),
      "--dense-cost-entries");
}

// Exact entropic GW steps after the sampled ones descend: a lower
// objective than the sampled plan's, reported with the steps' count, and
// the same refined plan without the objective.
TEST(CliGw, ExactIterationsLowerTheObjective) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result sampled = short_gw(dir, "sampled.npy", {"--mode", "euclidean"});
  const Result refined = short_gw(
      dir, "refined.npy", {"--mode", "euclidean", "--exact-iterations", "5"});
  const Result quiet = short_gw(
      dir, "quiet.npy",
      {"--mode", "euclidean", "--exact-iterations", "5", "--no-objective"});
  ASSERT_EQ(sampled.status, 0) << sampled.err;
  ASSERT_EQ(refined.status, 0) << refined.err;
  ASSERT_EQ(quiet.status, 0) << quiet.err;
  EXPECT_EQ(json_number(refined.out, "exact_iterations"), 5);
  EXPECT_LT(json_number(refined.out, "objective"),
            json_number(sampled.out, "objective"));
  const auto a = plan_in(dir, "refined.npy"), b = plan_in(dir, "quiet.npy");
  ASSERT_EQ(b.shape, a.shape);
  for (std::size_t q = 0; q < 12 * 9; ++q)
    EXPECT_EQ(b.element(q), a.element(q)) << "entry " << q;
}

// The polishing iteration: 8·M anchors by default (float64 runs on the
// portable solves), the count given, or none; reported with the anchors it
// drew, its plan not the unpolished one, and exact iterations leave it out
// unless it is asked for.
TEST(CliGw, PolishAnchorsAreReported) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result automatic =
      short_gw(dir, "automatic.npy", {"--mode", "euclidean"});
  const Result given = short_gw(
      dir, "given.npy", {"--mode", "euclidean", "--polish-anchors", "7"});
  const Result none = short_gw(
      dir, "none.npy", {"--mode", "euclidean", "--polish-anchors", "0"});
  const Result exact = short_gw(
      dir, "exact.npy", {"--mode", "euclidean", "--exact-iterations", "1"});
  ASSERT_EQ(automatic.status, 0) << automatic.err;
  ASSERT_EQ(given.status, 0) << given.err;
  ASSERT_EQ(none.status, 0) << none.err;
  ASSERT_EQ(exact.status, 0) << exact.err;
  EXPECT_EQ(json_number(automatic.out, "polish_anchors"), 40);
  EXPECT_EQ(json_number(given.out, "polish_anchors"), 7);
  EXPECT_EQ(json_number(none.out, "polish_anchors"), 0);
  EXPECT_EQ(json_number(exact.out, "polish_anchors"), 0);
  const auto polished = plan_in(dir, "given.npy"),
             plain = plan_in(dir, "none.npy");
  ASSERT_EQ(polished.shape, plain.shape);
  double difference = 0;
  for (std::size_t q = 0; q < 12 * 9; ++q)
    difference += std::fabs(polished.element(q) - plain.element(q));
  EXPECT_GT(difference, 1e-6);
  expect_error_containing(
      short_gw(dir, "bad.npy",
               {"--mode", "euclidean", "--polish-anchors", "-1"}),
      "--polish-anchors");
}

// Low-rank couplings: reported, their plan a coupling of the uniform
// weights (Dykstra run long), of rank at most 2 a term, and not the
// Sinkhorn solves' plan.
TEST(CliGw, LowRankCouplingsAreCouplings) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result sinkhorn =
      short_gw(dir, "sinkhorn.npy", {"--mode", "euclidean"});
  const Result low_rank =
      short_gw(dir, "low_rank.npy",
               {"--mode", "euclidean", "--coupling-rank", "2",
                "--dykstra-iterations", "3000", "--alpha", "1"});
  ASSERT_EQ(sinkhorn.status, 0) << sinkhorn.err;
  ASSERT_EQ(low_rank.status, 0) << low_rank.err;
  EXPECT_EQ(json_number(low_rank.out, "coupling_rank"), 2);
  EXPECT_EQ(json_number(sinkhorn.out, "coupling_rank"), 0);
  const auto plan = plan_in(dir, "low_rank.npy");
  const auto other = plan_in(dir, "sinkhorn.npy");
  ASSERT_EQ(plan.shape, (std::vector<std::size_t>{12, 9}));
  double rows[12] = {}, columns[9] = {}, difference = 0;
  for (std::size_t q = 0; q < 12 * 9; ++q) {
    rows[q / 9] += plan.element(q);
    columns[q % 9] += plan.element(q);
    difference =
        std::max(difference, std::fabs(plan.element(q) - other.element(q)));
  }
  for (double r : rows) EXPECT_NEAR(r, 1.0 / 12, 1e-5);
  for (double c : columns) EXPECT_NEAR(c, 1.0 / 9, 1e-5);
  EXPECT_GT(difference, 1e-3 / (12 * 9));
  // α = 1: the plan is the last coupling alone, of rank 2: every 3 × 3
  // minor of its first rows and columns vanishes.
  auto at = [&](int i, int j) { return plan.element(std::size_t(i) * 9 + j); };
  double const minor = at(0, 0) * (at(1, 1) * at(2, 2) - at(1, 2) * at(2, 1)) -
                       at(0, 1) * (at(1, 0) * at(2, 2) - at(1, 2) * at(2, 0)) +
                       at(0, 2) * (at(1, 0) * at(2, 1) - at(1, 1) * at(2, 0));
  EXPECT_NEAR(minor, 0.0, 1e-12);
  expect_error_containing(short_gw(dir, "bad.npy",
                                   {"--mode", "euclidean", "--coupling-rank",
                                    "2", "--semi-relaxed", "1"}),
                          "rho_a and rho_b");
}

// The embedding modes (each solve's cost exact): sqeuclidean and cosine
// report the GW objective of the written plan with squared Euclidean and
// 1 − cos distances of the files' points, recomputed here.
TEST(CliGw, EmbeddingModesReportTheirDistancesObjective) {
  const fs::path dir = scratch();
  write_clouds(dir);
  std::vector<std::array<double, 2>> x, y;
  for (int i = 0; i < 12; ++i)
    x.push_back({std::stod(std::to_string(std::cos(0.5 * i))),
                 std::stod(std::to_string(0.1 * i))});
  for (int j = 0; j < 9; ++j)
    y.push_back({std::stod(std::to_string(0.2 * j - 0.5)),
                 std::stod(std::to_string(std::sin(0.7 * j) + 0.3))});
  for (const std::string mode : {"sqeuclidean", "cosine"}) {
    SCOPED_TRACE(mode);
    auto distance = [&](const std::array<double, 2>& p,
                        const std::array<double, 2>& q) {
      double const dot = p[0] * q[0] + p[1] * q[1],
                   pp = p[0] * p[0] + p[1] * p[1],
                   qq = q[0] * q[0] + q[1] * q[1];
      return mode == "cosine" ? 1 - dot / std::sqrt(pp * qq)
                              : pp + qq - 2 * dot;
    };
    const Result run = short_gw(dir, mode + ".npy", {"--mode", mode});
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_EQ(json_field(run.out, "mode"), "\"" + mode + "\"");
    const auto plan = plan_in(dir, mode + ".npy");
    ASSERT_EQ(plan.shape, (std::vector<std::size_t>{12, 9}));
    double gw = 0;  // Σ_ijkl (D_X(i,j) − D_Y(k,l))² T_ik T_jl
    for (int i = 0; i < 12; ++i)
      for (int k = 0; k < 9; ++k)
        for (int j = 0; j < 12; ++j)
          for (int l = 0; l < 9; ++l) {
            double const d = distance(x[i], x[j]) - distance(y[k], y[l]);
            gw += d * d * plan.element(i * 9 + k) * plan.element(j * 9 + l);
          }
    expect_close(json_number(run.out, "objective"), gw, 1e-10);
  }
}

// Fused GW with features (one column each) and with the matrix of their
// squared differences: the same plan for the same seed, and the reported
// linear objective is <C, T> of the written plan.
TEST(CliGw, FusedWithFeaturesOrMatrix) {
  const fs::path dir = scratch();
  write_clouds(dir);
  std::string f, g, c;
  for (int i = 0; i < 12; ++i) f += std::to_string(i / 11.0) + "\n";
  for (int j = 0; j < 9; ++j) g += std::to_string(j / 8.0) + "\n";
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 9; ++j) {
      double const d = std::stod(std::to_string(i / 11.0)) -
                       std::stod(std::to_string(j / 8.0));
      char entry[32];
      std::snprintf(entry, sizeof entry, "%.17g", d * d);
      c += entry + std::string(j == 8 ? "\n" : ",");
    }
  write_file(dir / "f.csv", f);
  write_file(dir / "g.csv", g);
  write_file(dir / "c.csv", c);
  auto gw = [&](std::vector<std::string> more, const std::string& plan) {
    std::vector<std::string> args = {"gw",
                                     "--source",
                                     (dir / "source.csv").string(),
                                     "--target",
                                     (dir / "target.csv").string(),
                                     "--mode",
                                     "euclidean",
                                     "--anchors",
                                     "4",
                                     "--max-iterations",
                                     "6",
                                     "--epsilon",
                                     "0.05",
                                     "--dtype",
                                     "float64",
                                     "--fgw-alpha",
                                     "0.5",
                                     "-o",
                                     (dir / plan).string()};
    args.insert(args.end(), more.begin(), more.end());
    return softwave(args);
  };
  const Result features = gw({"--source-features", (dir / "f.csv").string(),
                              "--target-features", (dir / "g.csv").string()},
                             "pf.npy");
  ASSERT_EQ(features.status, 0) << features.err;
  const Result matrix =
      gw({"--linear-cost", (dir / "c.csv").string()}, "pm.npy");
  ASSERT_EQ(matrix.status, 0) << matrix.err;
  EXPECT_EQ(json_number(features.out, "fgw_alpha"), 0.5);
  const softwave::cli::NpyArray pf = softwave::cli::parse_npy(
      read_file(dir / "pf.npy"), (dir / "pf.npy").string());
  const softwave::cli::NpyArray pm = softwave::cli::parse_npy(
      read_file(dir / "pm.npy"), (dir / "pm.npy").string());
  const Matrix cost = parse_csv(c);
  double inner = 0, largest = 0;
  for (std::size_t q = 0; q < 12 * 9; ++q) {
    inner += cost[q / 9][q % 9] * pf.element(q);
    largest = std::max(largest, pm.element(q));
  }
  for (std::size_t q = 0; q < 12 * 9; ++q)
    EXPECT_NEAR(pf.element(q), pm.element(q), 1e-9 * largest) << q;
  expect_close(json_number(features.out, "linear_objective"), inner, 1e-6);
  expect_close(json_number(matrix.out, "linear_objective"), inner, 1e-6);
  // With the sampled costs averaged (their factors side by side, the
  // features after them) the two forms agree too, and differ from before.
  const Result features_averaged =
      gw({"--source-features", (dir / "f.csv").string(), "--target-features",
          (dir / "g.csv").string(), "--lambda-ema-beta", "0.5"},
         "pfa.npy");
  ASSERT_EQ(features_averaged.status, 0) << features_averaged.err;
  EXPECT_EQ(json_number(features_averaged.out, "lambda_ema_beta"), 0.5);
  const Result matrix_averaged = gw(
      {"--linear-cost", (dir / "c.csv").string(), "--lambda-ema-beta", "0.5"},
      "pma.npy");
  ASSERT_EQ(matrix_averaged.status, 0) << matrix_averaged.err;
  const softwave::cli::NpyArray pfa = softwave::cli::parse_npy(
      read_file(dir / "pfa.npy"), (dir / "pfa.npy").string());
  const softwave::cli::NpyArray pma = softwave::cli::parse_npy(
      read_file(dir / "pma.npy"), (dir / "pma.npy").string());
  double moved = 0;
  for (std::size_t q = 0; q < 12 * 9; ++q) {
    EXPECT_NEAR(pfa.element(q), pma.element(q), 1e-9 * largest) << q;
    moved = std::max(moved, std::fabs(pfa.element(q) - pf.element(q)));
  }
  EXPECT_GT(moved, 1e-6 * largest);
}

// A warm start: after one iteration with momentum 0.5, half of the given
// plan (one column a row, scaled to mass 1) is still in every row.
TEST(CliGw, WarmStartsFromAPlan) {
  const fs::path dir = scratch();
  write_clouds(dir);
  std::string initial;
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 9; ++j)
      initial +=
          std::string(j == (5 * i) % 9 ? "1" : "0") + (j == 8 ? "\n" : ",");
  write_file(dir / "t0.csv", initial);
  // --polish-anchors=0: no polishing iteration, whose plan would be its
  // own solve's.
  const Result result =
      softwave({"gw", "--source", (dir / "source.csv").string(), "--target",
                (dir / "target.csv").string(), "--mode=euclidean",
                "--anchors=4", "--max-iterations=1", "--alpha=0.5",
                "--polish-anchors=0", "--dtype=float64", "--initial-plan",
                (dir / "t0.csv").string(), "-o", (dir / "plan.npy").string()});
  ASSERT_EQ(result.status, 0) << result.err;
  const softwave::cli::NpyArray plan = softwave::cli::parse_npy(
      read_file(dir / "plan.npy"), (dir / "plan.npy").string());
  for (std::size_t i = 0; i < 12; ++i)
    EXPECT_GE(plan.element(i * 9 + (5 * i) % 9), 0.5 / 12) << i;
  EXPECT_EQ(read_file(dir / "t0.csv"), initial);
}

// --multiscale: the warm start from a coarse problem (its definition is
// checked in test_gw and test_gw.py); a plan of the weights' mass.
TEST(CliGw, MultiscaleStartsFromACoarseProblem) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const Result result = softwave({"gw",
                                  "--source",
                                  (dir / "source.csv").string(),
                                  "--target",
                                  (dir / "target.csv").string(),
                                  "--mode",
                                  "euclidean",
                                  "--anchors",
                                  "4",
                                  "--max-iterations",
                                  "3",
                                  "--min-iterations",
                                  "0",
                                  "--dtype",
                                  "float64",
                                  "--multiscale",
                                  "--n-coarse",
                                  "4",
                                  "-o",
                                  (dir / "plan.npy").string()});
  ASSERT_EQ(result.status, 0) << result.err;
  EXPECT_EQ(json_number(result.out, "coarse_points"), 4);
  const softwave::cli::NpyArray plan = softwave::cli::parse_npy(
      read_file(dir / "plan.npy"), (dir / "plan.npy").string());
  double mass = 0;
  for (std::size_t q = 0; q < 12 * 9; ++q) {
    EXPECT_GE(plan.element(q), 0) << q;
    mass += plan.element(q);
  }
  EXPECT_NEAR(mass, 1, 1e-9);
}

TEST(CliGw, BadInputIsAnErrorAndWritesNothing) {
  const fs::path dir = scratch();
  write_clouds(dir);
  const std::string source = (dir / "source.csv").string();
  const std::string target = (dir / "target.csv").string();
  const std::string out = (dir / "plan.npy").string();
  auto gw = [&](std::vector<std::string> more) {
    std::vector<std::string> args = {"gw",   "--source", source, "--target",
                                     target, "-o",       out};
    args.insert(args.end(), more.begin(), more.end());
    return softwave(args);
  };
  expect_error(gw({"--mode", "graph"}),
               "option --mode: expected "
               "dijkstra|landmark|geodesic|euclidean|precomputed|sqeuclidean|"
               "cosine, got 'graph'");
  expect_error(gw({"--anchors", "0"}),
               "option --anchors: expected an integer >= 1, got '0'");
  expect_error(gw({"--epsilon", "0"}),
               "option --epsilon: expected a number > 0, got '0'");
  expect_error_containing(gw({"--alpha", "2"}), "--alpha must be in (0, 1]");
  expect_error(gw({"--relax-source", "0"}),
               "option --relax-source: expected a number > 0, got '0'");
  expect_error_containing(gw({"--mode", "precomputed"}), "square");
  write_file(dir / "w.csv", "0.5\n0.5\n");
  expect_error_containing(gw({"--target-weights", (dir / "w.csv").string()}),
                          "holds 2 weights for 9 points");
  // Fused GW: a weight without a cost, a cost without a weight, a cost of
  // the wrong shape, features of one side.
  write_file(dir / "c.csv", "1,2\n3,4\n");
  write_file(dir / "f.csv", "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n");
  expect_error_containing(gw({"--fgw-alpha", "0.5"}),
                          "--fgw-alpha needs --linear-cost");
  expect_error_containing(gw({"--fgw-alpha", "1.5"}),
                          "--fgw-alpha must be in (0, 1]");
  expect_error_containing(gw({"--lambda-ema-beta", "1.5"}),
                          "--lambda-ema-beta must be in [0, 1]");
  expect_error_containing(gw({"--mode", "euclidean", "--exact-iterations", "1",
                              "--exact-objective-entries", "1"}),
                          "exact_iterations = 1 needs a dense");
  expect_error_containing(gw({"--linear-cost", (dir / "c.csv").string()}),
                          "a linear cost needs --fgw-alpha");
  expect_error_containing(
      gw({"--fgw-alpha", "0.5", "--linear-cost", (dir / "c.csv").string()}),
      "--linear-cost has 2 x 2 values, expected 12 x 9");
  expect_error_containing(
      gw({"--fgw-alpha", "0.5", "--source-features", (dir / "f.csv").string()}),
      "go together");
  expect_error_containing(gw({"--initial-plan", (dir / "c.csv").string()}),
                          "--initial-plan has 2 x 2 values, expected 12 x 9");
  // --multiscale: its size alone, too many coarse points for 9 targets (the
  // default, 10, too), or with a plan of its own.
  expect_error_containing(gw({"--n-coarse", "4"}), "give it with --multiscale");
  expect_error_containing(gw({"--multiscale", "--n-coarse", "9"}),
                          "--n-coarse (9) must be below");
  expect_error_containing(gw({"--multiscale"}),
                          "--n-coarse (10) must be below");
  std::string ones;
  for (int i = 0; i < 12; ++i) ones += "1,1,1,1,1,1,1,1,1\n";
  write_file(dir / "t0.csv", ones);
  expect_error_containing(
      gw({"--multiscale", "--initial-plan", (dir / "t0.csv").string()}),
      "give --initial-plan or --multiscale, not both");
  EXPECT_FALSE(fs::exists(out));  // nothing half-written is left behind
}

}  // namespace
