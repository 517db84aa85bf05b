// Failure paths of the `softwave` binary: an output file is replaced only
// by a complete result (failures, SIGINT/SIGTERM/SIGKILL mid-run), two
// outputs may not name one file, thread counts Kokkos cannot run are
// refused, results that overflow are errors, and a bounded fuzz of .npy and
// text inputs never crashes, hangs or touches an existing output.

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli_runner.hpp"
#include "matrix_writer.hpp"

namespace {

using namespace cli_test;
using cli_test::softwave;  // not the namespace softwave

const std::string kPrevious = "PRECIOUS\n";

// The names in `dir`, sorted.
std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir))
    names.insert(entry.path().filename().string());
  return names;
}

// Each failing command leaves the previous output as it was and nothing
// else in its directory; a successful one replaces it, keeping the file's
// permissions.
TEST(CliOutputs, ReplacedOnlyByCompleteResults) {
  const fs::path dir = scratch() / "work";
  fs::create_directories(dir);
  const fs::path huge = dir / "huge.tsv", out = dir / "prev.csv",
                 centroids = dir / "centroids.csv";
  write_file(huge, "1\t1e39\t2\t3\n2\t3\t2\t1\n");
  const std::string gunpoint = ucr("GunPoint", "TEST");
  const std::vector<std::vector<std::string>> failing = {
      {"barycenter", "--x", huge.string(), "--dtype", "float32", "-o",
       out.string()},
      {"barycenter", "--x", gunpoint, "--gamma", "1e308", "-o", out.string()},
      {"pairwise", "--x", gunpoint, "--gamma", "1e308", "-o", out.string()},
      {"cluster", "--x", gunpoint, "-k", "2", "--gamma", "1e308", "-o",
       out.string(), "--centroids", centroids.string()},
      {"cluster", "--x", gunpoint, "-k", "2", "-o", out.string(), "--centroids",
       (dir / "missing" / "c.csv").string()},
  };
  for (const auto& arguments : failing) {
    SCOPED_TRACE(arguments[0] + " " + arguments[arguments.size() - 1]);
    write_file(out, kPrevious);
    const Result result = softwave(arguments);
    EXPECT_EQ(result.status, 2) << result.err;
    EXPECT_EQ(read_file(out), kPrevious);
    EXPECT_EQ(listing(dir), (std::set<std::string>{"huge.tsv", "prev.csv"}));
  }
  write_file(out, kPrevious);
  fs::permissions(out, fs::perms::owner_read | fs::perms::owner_write |
                           fs::perms::group_read);
  const Result ok =
      softwave({"pairwise", "--x", ucr("Coffee", "TRAIN"), "-o", out.string()});
  ASSERT_EQ(ok.status, 0) << ok.err;
  const std::string matrix = read_file(out);
  EXPECT_EQ(std::count(matrix.begin(), matrix.end(), '\n'), 28);
  EXPECT_EQ(
      fs::status(out).permissions() & fs::perms::all,
      fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read);
  EXPECT_EQ(listing(dir), (std::set<std::string>{"huge.tsv", "prev.csv"}));
}

// Written through a symbolic link, the file it points to is replaced and
// the link stays.
TEST(CliOutputs, LinksAreFollowed) {
  const fs::path dir = scratch();
  const fs::path target = dir / "target.csv", link = dir / "link.csv";
  write_file(target, kPrevious);
  fs::create_symlink(target, link);
  const Result ok = softwave(
      {"pairwise", "--x", ucr("Coffee", "TRAIN"), "-o", link.string()});
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_NE(read_file(target), kPrevious);
}

// Two outputs naming one file (the same path, another spelling, a link or
// a hard link) are refused before any work: only the last would remain.
TEST(CliOutputs, TwoOutputsMayNotNameOneFile) {
  const fs::path dir = scratch();
  const fs::path labels = dir / "s.csv", other = dir / "t.csv";
  write_file(other, kPrevious);
  fs::create_symlink(labels, dir / "link.csv");
  fs::create_hard_link(other, dir / "hard.csv");
  const std::vector<std::pair<fs::path, fs::path>> same = {
      {labels, labels},
      {labels, dir / "." / "s.csv"},
      {labels, dir / "link.csv"},
      {other, dir / "hard.csv"}};
  for (const auto& [output, centroids] : same) {
    SCOPED_TRACE(centroids.string());
    const Result result =
        softwave({"cluster", "--x", ucr("Coffee", "TRAIN"), "-k", "2", "-o",
                  output.string(), "--centroids", centroids.string()});
    expect_error_containing(result,
                            "options --output and --centroids name "
                            "the same file");
  }
  EXPECT_FALSE(fs::exists(labels));
  EXPECT_EQ(read_file(other), kPrevious);
}

// A pairwise run killed mid-way (by SIGINT, SIGTERM or SIGKILL) leaves the
// previous output whole and no temporary file beside it: CSV, and .npy,
// which one set with itself writes in place, its mirror included.
TEST(CliOutputs, KilledRunLeavesThePreviousFile) {
  const fs::path dir = scratch() / "work";
  fs::create_directories(dir);
  const fs::path input = dir / "many.tsv";
  // 700 series of 200 points: 245,000 pairs, seconds of work on any host.
  write_series(input, 700, 200, 1.0, 7);
  for (const std::string name : {"r.csv", "r.npy"}) {
    const fs::path out = dir / name;
    for (const int signal : {SIGINT, SIGTERM, SIGKILL}) {
      SCOPED_TRACE(name + " " + std::to_string(signal));
      write_file(out, kPrevious);
      const pid_t child = ::fork();
      ASSERT_GE(child, 0);
      if (child == 0) {
        const int null = ::open("/dev/null", O_WRONLY);
        ::dup2(null, STDOUT_FILENO);
        ::dup2(null, STDERR_FILENO);
        ::execl(SOFTWAVE_CLI_EXE, SOFTWAVE_CLI_EXE, "pairwise", "--x",
                input.c_str(), "-o", out.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      ::kill(child, signal);
      int status = 0;
      ::waitpid(child, &status, 0);
      ASSERT_TRUE(WIFSIGNALED(status)) << "the run ended before the signal";
      EXPECT_EQ(WTERMSIG(status), signal);
      EXPECT_EQ(read_file(out), kPrevious);
      EXPECT_EQ(listing(dir), (std::set<std::string>{"many.tsv", name}));
    }
    fs::remove(out);
  }
}

// Kokkos' OpenMP backend has 512 thread slots: more asked for with
// --threads is refused naming the option; more from OMP_NUM_THREADS (which
// crashed Kokkos' start-up) runs with 512 and says so.
TEST(CliThreads, MoreThanKokkosRunsIsRefusedOrLowered) {
  const std::string train = ucr("Coffee", "TRAIN"),
                    test = ucr("Coffee", "TEST");
  for (const std::string threads : {"513", "99999999999"}) {
    expect_error_containing(softwave({"knn", "--train", train, "--test", test,
                                      "--threads", threads}),
                            "option --threads: at most 512");
  }
  const Result lowered = softwave({"knn", "--train", train, "--test", test},
                                  "OMP_NUM_THREADS=600");
  EXPECT_EQ(lowered.status, 0) << lowered.err;
  if (SOFTWAVE_HOST_OPENMP) {  // a CUDA build's host may be Kokkos::Serial
    EXPECT_NE(lowered.err.find("600 OpenMP threads asked for"),
              std::string::npos)
        << lowered.err;
  }
  EXPECT_NE(lowered.out.find("\"accuracy\": 1"), std::string::npos)
      << lowered.out;
}

// Finite inputs whose Soft-DTW values overflow the working type are errors
// naming the series, the files and the cause, not a matrix of inf, an
// accuracy from tied infinities, or "converged" with a null inertia.
TEST(CliOverflow, ResultsBeyondTheTypeAreErrors) {
  const fs::path dir = scratch();
  const fs::path big32 = dir / "big32.tsv", big64 = dir / "big64.tsv";
  write_series(big32, 6, 12, 1e20, 1);
  write_series(big64, 6, 12, 1e155, 2);
  expect_error_containing(softwave({"knn", "--train", big32.string(), "--test",
                                    big32.string(), "--dtype", "float32"}),
                          "of --train '" + big32.string() +
                              "': the Soft-DTW value overflows float32");
  const Result as_double =
      softwave({"knn", "--train", big32.string(), "--test", big32.string()});
  EXPECT_EQ(as_double.status, 0) << as_double.err;
  EXPECT_NE(as_double.out.find("\"accuracy\": 1"), std::string::npos);
  expect_error_containing(
      softwave({"knn", "--train", big64.string(), "--test", big64.string()}),
      "overflows float64");
  const std::string gunpoint = ucr("GunPoint", "TEST");
  expect_error_containing(
      softwave({"pairwise", "--x", gunpoint, "--gamma", "1e308"}),
      "overflows float64 at --gamma 1e+308");
  expect_error_containing(
      softwave({"cluster", "--x", gunpoint, "-k", "2", "--gamma", "1e308", "-o",
                (dir / "c.csv").string()}),
      "overflows float64");
  expect_error_containing(softwave({"barycenter", "--x", gunpoint, "--gamma",
                                    "1e308", "-o", (dir / "b.csv").string()}),
                          "the barycenter of --x '" + gunpoint + "'");
}

// A value that float32 cannot hold is named by file, line and field (or
// .npy index) and option, not "x has 1 non-finite value(s)".
TEST(CliOverflow, Float32RangeIsCheckedWhereTheValueIs) {
  const fs::path dir = scratch();
  const fs::path text = dir / "f.tsv";
  write_file(text, "1\t1\t2\n2\t3\t-1e39\n");
  expect_error(
      softwave({"pairwise", "--x", text.string(), "--dtype", "float32"}),
      text.string() +
          ": line 2, field 3: -1e+39 is beyond the float32 range "
          "(about 3.4e38) that --x is read in with --dtype float32 "
          "(use --dtype float64)");
  const fs::path npy = dir / "f.npy";
  std::string bytes = softwave::cli::npy_header<double>({2, 2, 1});
  for (const double v : {1.0, 2.0, 3.0, 5e38}) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  write_file(npy, bytes);
  expect_error(
      softwave({"barycenter", "--x", npy.string(), "--dtype", "float32", "-o",
                (dir / "b.csv").string()}),
      npy.string() +
          ": value [1, 1]: 5e+38 is beyond the float32 range (about 3.4e38) "
          "that --x is read in with --dtype float32 (use --dtype "
          "float64)");
}

// --- memory ------------------------------------------------------------------

// Work whose estimate exceeds the limit is refused before it allocates
// (a 10-million-point barycenter was killed by the OOM killer at 24 GB);
// an endless input stops at the limit; banded work over long series needs
// memory linear in their length, so it runs within a small limit.
TEST(CliMemory, EstimatesAreCheckedBeforeAllocating) {
  const fs::path dir = scratch();
  const std::string gunpoint = ucr("GunPoint", "TRAIN");
  expect_error_containing(
      softwave({"barycenter", "--x", gunpoint, "--length", "10000000",
                "--max-memory", "8G", "-o", (dir / "b.csv").string()}),
      "barycenter needs about");
  expect_error_containing(
      softwave({"pairwise", "--x", gunpoint, "--max-memory", "200K"}),
      "pairwise needs about");
  expect_error_containing(
      softwave({"cluster", "--x", gunpoint, "-k", "2", "--max-memory", "200K",
                "-o", (dir / "c.csv").string()}),
      "cluster needs about");
  expect_error(
      softwave({"pairwise", "--x", "/dev/zero", "--max-memory", "10M"}),
      "/dev/zero: more than 10485760 bytes, the memory limit (--max-memory "
      "10M)");
  expect_error(softwave({"knn", "--train", gunpoint, "--test", gunpoint,
                         "--max-memory", "-1"}),
               "option --max-memory: expected a size > 0 in bytes, or with a "
               "K, M, G or T suffix, got '-1'");
  // One pair of 300,000 points with a band of 1 (hard DTW of a series with
  // itself: 0): an array over all tiles would be hundreds of MB; the banded
  // sweep needs a few.
  write_series(dir / "long.tsv", 1, 300000, 1.0, 5);
  const Result banded =
      softwave({"pairwise", "--x", (dir / "long.tsv").string(), "--band", "1",
                "--gamma", "0", "--max-memory", "48M"});
  EXPECT_EQ(banded.status, 0) << banded.err;
  EXPECT_EQ(banded.out, "0\n");
}

// --- bounded fuzzing --------------------------------------------------------

// One random change to a valid file: bytes flipped, replaced, inserted or
// deleted, the file cut short, a line repeated, or a number swapped for an
// extreme one.
std::string mutate(std::string bytes, std::mt19937& rng) {
  auto pick = [&](std::size_t n) {
    return n == 0 ? std::size_t{0}
                  : std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
  };
  static const char* const extremes[] = {"nan",
                                         "-inf",
                                         "1e309",
                                         "1e-400",
                                         "3.5e38",
                                         "1e20",
                                         "99999999999999999999",
                                         "-0",
                                         "0x1p3",
                                         "",
                                         ",",
                                         "\t\t",
                                         "\n\n",
                                         "'shape': (9,",
                                         "{",
                                         "\x93NUMPY"};
  const int kind = int(pick(7));
  const std::size_t at = pick(bytes.size() + 1);
  switch (kind) {
    case 0:  // flip bits
      for (int k = 0, n = 1 + int(pick(4)); k < n && !bytes.empty(); ++k)
        bytes[pick(bytes.size())] ^= char(1 << pick(8));
      break;
    case 1:  // random byte
      if (!bytes.empty()) bytes[pick(bytes.size())] = char(pick(256));
      break;
    case 2:  // insert an extreme token
      bytes.insert(at, extremes[pick(std::size(extremes))]);
      break;
    case 3:  // delete a run
      bytes.erase(std::min(at, bytes.size()), 1 + pick(16));
      break;
    case 4:  // truncate
      bytes.resize(pick(bytes.size() + 1));
      break;
    case 5: {  // repeat a run
      const std::size_t from = pick(bytes.size() + 1);
      bytes.insert(at, bytes.substr(from, 1 + pick(64)));
      break;
    }
    default:  // overwrite a run with random bytes
      for (std::size_t k = 0, n = 1 + pick(8); k < n && !bytes.empty(); ++k)
        bytes[pick(bytes.size())] = char(pick(256));
  }
  return bytes;
}

// Valid inputs mutated at random (fixed seed), each fed to a command whose
// output file already exists: every run exits 0 or 2 within its time
// limit, a failure says one line "softwave: error: ..." and leaves the
// output as it was, and a success writes a whole matrix. Bounded by a count
// and a time budget so that CI stays short.
TEST(CliFuzz, MutatedInputsNeverCrashHangOrLoseTheOutput) {
  const fs::path dir = scratch() / "work";
  fs::create_directories(dir);
  write_series(dir / "valid.tsv", 5, 16, 1.0, 3);
  const std::string valid_text = read_file(dir / "valid.tsv");
  std::string valid_npy = softwave::cli::npy_header<double>({4, 6, 2});
  for (int q = 0; q < 48; ++q) {
    const double v = 0.1 * (q % 11) - 0.4;
    valid_npy.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  std::string labels_npy = softwave::cli::npy_header<std::int64_t>({4});
  for (std::int64_t label : {1, 2, 1, 2})
    labels_npy.append(reinterpret_cast<const char*>(&label), sizeof label);
  write_file(dir / "labels.npy", labels_npy);

  std::mt19937 rng(20261125);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(90);
  int runs = 0, failures = 0;
  for (; runs < 600 && std::chrono::steady_clock::now() < deadline; ++runs) {
    const bool npy = runs % 2 == 1;
    const fs::path input = dir / (npy ? "m.npy" : "m.tsv");
    const fs::path out = dir / (runs % 3 == 0 ? "out.npy" : "out.csv");
    write_file(input, mutate(npy ? valid_npy : valid_text, rng));
    write_file(out, kPrevious);
    std::vector<std::string> arguments;
    switch (runs % 4) {
      case 0:
        arguments = {"pairwise", "--x", input.string(), "-o", out.string()};
        break;
      case 1:
        arguments = {"pairwise", "--x",          input.string(),
                     "--y",      input.string(), "--dtype",
                     "float32",  "--band",       "2",
                     "-o",       out.string()};
        break;
      case 2:
        arguments = {"barycenter", "--x", input.string(), "--max-iter",
                     "5",          "-o",  out.string()};
        break;
      default:
        arguments = {"knn", "--train", input.string(), "--test",
                     input.string()};
        if (npy) {
          arguments.insert(arguments.end(),
                           {"--train-labels", (dir / "labels.npy").string(),
                            "--test-labels", (dir / "labels.npy").string()});
        }
    }
    SCOPED_TRACE("run " + std::to_string(runs) + ": " + arguments[0] + " " +
                 read_file(input).substr(0, 80));
    const Result result = softwave(arguments, "timeout 30");
    ASSERT_TRUE(result.status == 0 || result.status == 2)
        << "exit " << result.status << " (124: hang, >= 128: signal)\n"
        << result.err;
    if (result.status == 2) {
      ++failures;
      EXPECT_EQ(result.err.rfind("softwave: error: ", 0), 0u) << result.err;
      EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1)
          << result.err;
      EXPECT_EQ(read_file(out), kPrevious);
    } else if (arguments[0] != "knn") {
      EXPECT_NE(read_file(out), kPrevious);
    }
    std::set<std::string> expected = {"valid.tsv", "labels.npy",
                                      input.filename().string()};
    for (const char* name : {"m.npy", "m.tsv", "out.csv", "out.npy"})
      if (fs::exists(dir / name)) expected.insert(name);
    EXPECT_EQ(listing(dir), expected);
  }
  // The mutations must reach both outcomes, or the test tests nothing.
  EXPECT_GT(failures, runs / 4);
  EXPECT_LT(failures, runs);
  std::printf("fuzz: %d runs, %d refused\n", runs, failures);
}

}  // namespace
