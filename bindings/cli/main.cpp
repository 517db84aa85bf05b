// softwave: command-line front end for batch Soft-DTW jobs on UCR-style
// files. Exit codes: 0 success, 2 bad usage or bad input (one line on
// stderr: "softwave: error: ..."), 1 any other failure.

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <exception>
#include <new>
#include <softwave/errors.hpp>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "commands.hpp"
#include "matrix_writer.hpp"
#include "ranks.hpp"
#include "ucr_reader.hpp"

#ifndef SOFTWAVE_VERSION
#error "SOFTWAVE_VERSION must be defined by the build"
#endif

namespace softwave::cli {

bool wants_help(const std::vector<std::string>& arguments) {
  for (const std::string& argument : arguments) {
    if (argument == "--help" || argument == "-h") return true;
  }
  return false;
}

namespace {

constexpr const char* top_help =
    "usage: softwave <command> [options]\n"
    "\n"
    "Soft-DTW on time-series files, UCR-style text (one series per line, "
    "label\n"
    "first) or NumPy .npy, computed with Kokkos on the default execution "
    "space.\n"
    "\n"
    "commands:\n"
    "  knn        1-nearest-neighbour classification (prints JSON)\n"
    "  pairwise   all-pairs Soft-DTW / divergence matrix (CSV or .npy)\n"
    "  barycenter Soft-DTW barycenter of a file or of one class (CSV or "
    ".npy, JSON)\n"
    "  cluster    k-means with Soft-DTW barycenters as centroids (labels, "
    "JSON)\n"
    "  sinkhorn   entropic optimal transport between two point clouds "
    "(JSON,\n"
    "             potentials and matching as CSV or .npy)\n"
    "  gw         sampled Gromov-Wasserstein between two point sets or "
    "distance\n"
    "             matrices (JSON, plan and matching as CSV or .npy)\n"
    "\n"
    "Soft-DTW smoothing defaults to --gamma 1.0; --gamma 0 is hard DTW.\n"
    "'softwave <command> --help' lists a command's options.\n"
    "\n"
    "options:\n"
    "  -h, --help     this help\n"
    "  --version      version of softwave and of Kokkos\n"
    "\n"
    "Exit status: 0 on success; 2 for bad usage or bad input (one line on "
    "stderr,\n"
    "'softwave: error: FILE:LINE: what' for a bad text file, 'FILE: what' "
    "for a bad\n"
    ".npy); 1 for any other failure.\n";

void print_version() {
  std::printf("softwave %s (Kokkos %d.%d.%d, default execution space %s)\n",
              SOFTWAVE_VERSION, KOKKOS_VERSION / 10000,
              KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100,
              Kokkos::DefaultExecutionSpace::name());
}

int run(const std::vector<std::string>& arguments) {
  if (arguments.empty()) {
    throw usage_error("missing command (see 'softwave --help')");
  }
  const std::string& command = arguments.front();
  const std::vector<std::string> rest(arguments.begin() + 1, arguments.end());
  if (command == "--help" || command == "-h" || command == "help") {
    std::fputs(top_help, stdout);
    return 0;
  }
  if (command == "--version") {
    print_version();
    return 0;
  }
  struct Command {
    const char* name;
    int (*run)(const std::vector<std::string>&);
    std::string (*help)();
  };
  static const Command commands[] = {
      {"knn", run_knn, knn_help},
      {"pairwise", run_pairwise, pairwise_help},
      {"barycenter", run_barycenter, barycenter_help},
      {"cluster", run_cluster, cluster_help},
      {"sinkhorn", run_sinkhorn, sinkhorn_help},
      {"gw", run_gw, gw_help},
  };
  for (const Command& c : commands) {
    if (command != c.name) continue;
    if (wants_help(rest)) {
      std::fputs(c.help().c_str(), stdout);
      return 0;
    }
    return c.run(rest);
  }
  if (!command.empty() && command[0] == '-') {
    throw usage_error("unknown option '" + command +
                      "' (see 'softwave --help')");
  }
  throw usage_error("unknown command '" + command +
                    "' (see 'softwave --help')");
}

// One line, whatever the message holds.
void report(std::string message) {
  const std::string prefix = "softwave: ";
  if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
  for (char& c : message) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!message.empty() && message.back() == ' ') message.pop_back();
  std::fflush(stdout);
  std::fprintf(stderr, "softwave: error: %s\n", message.c_str());
}

}  // namespace
}  // namespace softwave::cli

namespace {

// The exit code of an error, and its report.
int exit_code_of(const std::exception_ptr& error, std::string& message) {
  namespace cli = softwave::cli;
  try {
    std::rethrow_exception(error);
  } catch (const cli::usage_error& e) {
    message = e.what();
    return 2;
  } catch (const cli::input_error& e) {
    message = e.what();
    return 2;
  } catch (const softwave::invalid_argument& e) {
    message = e.what();
    return 2;
  } catch (const std::bad_alloc&) {
    message = "out of memory";
    return 1;
  } catch (const std::exception& e) {
    message = e.what();
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  namespace cli = softwave::cli;
  const std::vector<std::string> arguments(argv + 1, argv + argc);
  cli::Ranks::start(&argc, &argv);
  const cli::Ranks& ranks = cli::ranks();
  // Only rank 0 prints; the others' stdout would repeat it.
  if (!ranks.root()) std::freopen("/dev/null", "w", stdout);
  try {
    const int code = cli::run(arguments);
    // A rank that failed after the command's last exchange is heard here.
    ranks.checkpoint();
    return cli::Ranks::finish(code);
  } catch (const cli::peer_failure& failure) {
    if (ranks.root()) cli::report(failure.what());
    return cli::Ranks::finish(failure.code());
  } catch (...) {
    std::string message;
    const int code = exit_code_of(std::current_exception(), message);
    if (ranks.failed_in_exchange()) {
      // The other ranks wait on this one's messages and cannot be told.
      cli::report("rank " + std::to_string(ranks.rank()) + ": " + message);
      ranks.abort(code);
    }
    const auto [first_code, first_message] = ranks.first_failure(code, message);
    if (ranks.root()) cli::report(first_message);
    return cli::Ranks::finish(first_code);
  }
}
