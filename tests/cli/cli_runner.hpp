#pragma once
// Running the real `softwave` binary from the CLI tests: a scratch
// directory per test, the binary through the shell with stdout and stderr
// captured, and the checks of its one-line errors.

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_test_paths.hpp"

#ifndef SOFTWAVE_CLI_EXE
#error "SOFTWAVE_CLI_EXE (path of the softwave binary) must be defined"
#endif
#ifndef SOFTWAVE_UCR_DIR
#error "SOFTWAVE_UCR_DIR (the repository's data/ucr) must be defined"
#endif

namespace cli_test {

namespace fs = std::filesystem;

struct Result {
  int status = -1;  // exit code
  std::string out, err;
};

inline std::string shell_quote(const std::string& text) {
  std::string quoted = "'";
  for (const char c : text) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

inline std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// A directory of its own for each test (ctest may run them in parallel).
inline fs::path scratch() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = std::string(info->test_suite_name()) + "_" + info->name();
  std::replace(name.begin(), name.end(), '/', '_');
  const fs::path dir =
      fs::path(::testing::TempDir()) /
      ("softwave_cli_" + name + "_" + std::to_string(::getpid()));
  // A process id comes round again: a test starts from an empty folder,
  // not one an earlier run left (its links would make create_symlink fail),
  // and keeps it across its own calls.
  static std::set<fs::path> emptied;
  if (emptied.insert(dir).second) fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Runs softwave with `arguments`; stdin is empty, stdout and stderr are
// files (so stderr is not a terminal).
// `environment` ("NAME=value ...") prefixes the command.
inline Result softwave(const std::vector<std::string>& arguments,
                       const std::string& environment = "") {
  const fs::path dir = scratch();
  std::string command = environment + " " + shell_quote(SOFTWAVE_CLI_EXE);
  for (const std::string& argument : arguments) {
    command += " " + shell_quote(argument);
  }
  command += " </dev/null >" + shell_quote((dir / "stdout").string()) + " 2>" +
             shell_quote((dir / "stderr").string());
  const int raw = std::system(command.c_str());
  Result result;
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  result.out = read_file(dir / "stdout");
  result.err = read_file(dir / "stderr");
  return result;
}

// A UCR-style text file of `count` series of `length` values (two classes).
inline void write_series(const fs::path& path, int count, int length,
                         double scale, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> value(-1, 1);
  std::ostringstream text;
  text.precision(17);
  for (int s = 0; s < count; ++s) {
    text << (s % 2 + 1);
    for (int t = 0; t < length; ++t) text << '\t' << scale * value(rng);
    text << '\n';
  }
  write_file(path, text.str());
}

inline std::string ucr(const std::string& name, const std::string& split) {
  return std::string(SOFTWAVE_UCR_DIR) + "/" + name + "/" + name + "_" + split +
         ".tsv";
}

// The value after "key": in a flat JSON object, as text.
std::string json_field(const std::string& json, const std::string& key) {
  const std::string tag = "\"" + key + "\": ";
  const std::size_t at = json.find(tag);
  if (at == std::string::npos) return "(missing " + key + ")";
  const std::size_t begin = at + tag.size();
  const std::size_t end = json.find_first_of(",}", begin);
  return json.substr(begin, end - begin);
}

// Exit code 2, nothing on stdout, exactly the line `softwave: error: <what>`.
inline void expect_error(const Result& result, const std::string& what) {
  EXPECT_EQ(result.status, 2);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, "softwave: error: " + what + "\n");
}

// One error line on stderr that contains `part`.
inline void expect_error_containing(const Result& result,
                                    const std::string& part) {
  EXPECT_EQ(result.status, 2);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err.rfind("softwave: error: ", 0), 0u) << result.err;
  EXPECT_EQ(result.err.find('\n'), result.err.size() - 1) << result.err;
  EXPECT_NE(result.err.find(part), std::string::npos) << result.err;
}

}  // namespace cli_test
