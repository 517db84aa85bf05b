// softwave knn: 1-nearest-neighbour classification of a test set against a
// training set under Soft-DTW (hard DTW at γ = 0); prints one JSON object.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>

#include "commands.hpp"
#include "distance_blocks.hpp"
#include "distance_settings.hpp"
#include "progress_bar.hpp"
#include "ucr_reader.hpp"

namespace softwave::cli {
namespace {

std::string json_string(const std::string& text) {
  std::string quoted = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      quoted += '\\';
      quoted += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      quoted += escaped;
    } else {
      quoted += c;
    }
  }
  return quoted + "\"";
}

struct KnnResult {
  std::size_t errors = 0;
  double seconds = 0;
};

// Nearest training series of each test series; ties go to the first in file
// order (strict < while scanning).
template <class T>
KnnResult classify(const SeriesSet& train, const SeriesSet& test,
                   const SoftDTWOptions& options) {
  KnnResult result;
  ProgressBar progress("knn", test.count);
  const auto start = std::chrono::steady_clock::now();
  pairwise_in_blocks<T>(
      test, train, options, PairwiseValue::soft_dtw,
      [&](std::size_t first, std::size_t rows, const T* distances) {
        for (std::size_t r = 0; r < rows; ++r) {
          const T* row = distances + r * train.count;
          std::size_t nearest = 0;
          for (std::size_t j = 0; j < train.count; ++j) {
            if (std::isnan(row[j])) {
              throw std::runtime_error(
                  "the library returned NaN for test series " +
                  std::to_string(first + r + 1) + " and training series " +
                  std::to_string(j + 1));
            }
            if (row[j] < row[nearest]) nearest = j;
          }
          if (train.labels[nearest] != test.labels[first + r]) ++result.errors;
        }
        progress.update(first + rows);
      });
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

}  // namespace

std::string knn_help() {
  return std::string(
             "usage: softwave knn --train TRAIN.tsv --test TEST.tsv [options]\n"
             "\n"
             "1-nearest-neighbour classification of every test series against "
             "the\n"
             "training series under Soft-DTW (hard DTW with --gamma 0). Ties "
             "go "
             "to the\n"
             "first training series in file order. Prints one JSON object "
             "with\n"
             "n_train, n_test, errors, error_rate, accuracy, seconds "
             "(distance\n"
             "computation and classification) and the settings used.\n"
             "\n"
             "Files: one series per line, integer class label first, values "
             "separated\n"
             "by tabs, commas or spaces (UCR archive layout); all series the "
             "same length.\n"
             "\n"
             "options:\n"
             "  --train FILE       training series (required)\n"
             "  --test FILE        series to classify (required)\n") +
         distance_options_help() + "  -h, --help         this help\n";
}

int run_knn(const std::vector<std::string>& arguments) {
  std::vector<OptionSpec> specs = {{"--train"}, {"--test"}};
  for (const OptionSpec& spec : distance_option_specs()) specs.push_back(spec);
  const ParsedOptions parsed(arguments, specs);
  const std::string train_path = parsed.required("--train");
  const std::string test_path = parsed.required("--test");
  const DistanceSettings settings = parse_distance_settings(parsed);

  const SeriesSet train = read_series_file(train_path, Labels::first_column);
  const SeriesSet test = read_series_file(test_path, Labels::first_column);
  const SoftDTWOptions options = settings.options(test.length, train.length);

  const KokkosSession session(settings.threads);
  const KnnResult result = settings.dtype == Dtype::float32
                               ? classify<float>(train, test, options)
                               : classify<double>(train, test, options);
  const double error_rate = static_cast<double>(result.errors) / test.count;
  const std::string band =
      options.band ? std::to_string(*options.band) : std::string("null");
  char band_pct[32] = "null";
  if (settings.band_pct) {
    std::snprintf(band_pct, sizeof band_pct, "%.17g", *settings.band_pct);
  }
  std::printf(
      "{\"command\": \"knn\", \"train\": %s, \"test\": %s, "
      "\"n_train\": %zu, \"n_test\": %zu, \"train_length\": %zu, "
      "\"test_length\": %zu, \"gamma\": %.17g, \"band\": %s, "
      "\"band_pct\": %s, \"cost\": \"%s\", \"dtype\": \"%s\", "
      "\"execution_space\": \"%s\", \"concurrency\": %d, \"errors\": %zu, "
      "\"error_rate\": %.17g, \"accuracy\": %.17g, \"seconds\": %.6f}\n",
      json_string(train_path).c_str(), json_string(test_path).c_str(),
      train.count, test.count, train.length, test.length, settings.gamma,
      band.c_str(), band_pct, settings.cost_name.c_str(),
      settings.dtype_name.c_str(), Kokkos::DefaultExecutionSpace::name(),
      static_cast<int>(Kokkos::DefaultExecutionSpace().concurrency()),
      result.errors, error_rate, 1.0 - error_rate, result.seconds);
  return 0;
}

}  // namespace softwave::cli
