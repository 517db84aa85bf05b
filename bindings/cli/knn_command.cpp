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
#include "json_line.hpp"
#include "progress_bar.hpp"
#include "series_input.hpp"

namespace softwave::cli {
namespace {

struct KnnResult {
  std::size_t errors = 0;
  double seconds = 0;
};

// Nearest training series of each test series; ties go to the first in file
// order (strict < while scanning).
template <class T>
KnnResult classify(const SeriesSet& train, const SeriesSet& test,
                   const SoftDTWOptions& options, const std::string& train_name,
                   const std::string& test_name) {
  KnnResult result;
  ProgressBar progress("knn", test.count);
  const auto start = std::chrono::steady_clock::now();
  pairwise_in_blocks<T>(
      test, train, options, PairwiseValue::soft_dtw, test_name, train_name,
      [&](std::size_t first, std::size_t rows, const T* distances) {
        for (std::size_t r = 0; r < rows; ++r) {
          const T* row = distances + r * train.count;
          std::size_t nearest = 0;
          for (std::size_t j = 0; j < train.count; ++j) {
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
             "Text files must carry labels (first column). A .npy file needs "
             "its labels\n"
             "from --train-labels / --test-labels; all series of a file share "
             "one length.\n"
             "\n"
             "options:\n"
             "  --train FILE       training series (required)\n"
             "  --test FILE        series to classify (required)\n"
             "  --train-labels F   labels of a .npy --train file (1-D .npy)\n"
             "  --test-labels F    labels of a .npy --test file (1-D .npy)\n") +
         distance_options_help() + series_files_help() +
         "  -h, --help         this help\n";
}

int run_knn(const std::vector<std::string>& arguments) {
  std::vector<OptionSpec> specs = {
      {"--train"}, {"--test"}, {"--train-labels"}, {"--test-labels"}};
  for (const OptionSpec& spec : distance_option_specs()) specs.push_back(spec);
  const ParsedOptions parsed(arguments, specs);
  const std::string train_path = parsed.required("--train");
  const std::string test_path = parsed.required("--test");
  const DistanceSettings settings = parse_distance_settings(parsed);

  const ReadLimit limit = settings.memory.read_limit();
  const SeriesSet train = read_labelled_input(
      train_path, parsed.text("--train-labels"), "--train-labels", limit);
  const SeriesSet test = read_labelled_input(
      test_path, parsed.text("--test-labels"), "--test-labels", limit);
  check_same_dims(train, "--train", test, "--test");
  check_fits_dtype(train, train_path, "--train", settings.dtype);
  check_fits_dtype(test, test_path, "--test", settings.dtype);
  const SoftDTWOptions options = settings.options(test.length, train.length);

  const KokkosScope kokkos(settings.threads);
  check_memory(settings.memory, "knn",
               settings.dtype == Dtype::float32
                   ? pairwise_memory<float>(test, train, options)
                   : pairwise_memory<double>(test, train, options));
  const std::string train_name = "--train '" + train_path + "'";
  const std::string test_name = "--test '" + test_path + "'";
  const KnnResult result =
      settings.dtype == Dtype::float32
          ? classify<float>(train, test, options, train_name, test_name)
          : classify<double>(train, test, options, train_name, test_name);
  const double error_rate = static_cast<double>(result.errors) / test.count;
  JsonLine json;
  json.add("command", std::string("knn"))
      .add("train", train_path)
      .add("test", test_path)
      .add("n_train", train.count)
      .add("n_test", test.count)
      .add("train_length", train.length)
      .add("test_length", test.length)
      .add("d", train.dims);
  add_distance_settings(json, settings, options);
  add_execution_space(json)
      .add("errors", result.errors)
      .add("error_rate", error_rate)
      .add("accuracy", 1.0 - error_rate)
      .add("seconds", result.seconds, "%.6f");
  std::fputs(json.str().c_str(), stdout);
  return 0;
}

}  // namespace softwave::cli
