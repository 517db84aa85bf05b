// softwave knn: k-nearest-neighbour classification of a test set against a
// training set under Soft-DTW (hard DTW at γ = 0); prints one JSON object
// and, with -o, writes every test series' neighbours.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "commands.hpp"
#include "device_series.hpp"
#include "distance_blocks.hpp"
#include "distance_settings.hpp"
#include "json_line.hpp"
#include "matrix_writer.hpp"
#include "output_file.hpp"
#include "progress_bar.hpp"
#include "ranks.hpp"
#include "series_input.hpp"

namespace softwave::cli {
namespace {

// How the neighbours are found: the library's pruned search
// (softwave::nearest_neighbours: hard DTW, sqeuclidean or l1) or every
// distance (pairwise_in_blocks).
enum class Search { pruned, brute };

// The k neighbours of every test series, nearest first, ties to the lower
// training index.
template <class T>
struct Neighbours {
  std::size_t k = 1;
  std::vector<std::int64_t> indices;  // (n_test, k)
  std::vector<T> distances;           // (n_test, k)
  SearchStatistics statistics;        // pruned search only
};

// Queries a search call takes at a time: the progress bar moves between
// calls, and the references' envelopes, recomputed by each, stay cheap
// beside them.
constexpr std::size_t kSearchBlock = 256;

template <class T>
std::vector<MemoryPart> search_memory(const SeriesSet& train,
                                      const SeriesSet& test, std::size_t k) {
  const double values = double(train.values.size() + test.values.size());
  const double block = double(std::min(kSearchBlock, test.count));
  // softwave::nearest_neighbours (softdtw.hpp): envelopes in the work type
  // (at most 8 bytes), per query 12·B2 + 8·(N + M + 2) + 2·M·d·8 +
  // 4·max(N, M) bytes, at most 256 MiB of queries in flight.
  const double per_query = 12.0 * double(train.count) +
                           8.0 * double(test.length + train.length + 2) +
                           16.0 * double(train.length * train.dims) +
                           4.0 * double(std::max(test.length, train.length));
  return {{"series read", 8.0 * values},
          {"series in the execution space", double(sizeof(T)) * values},
          {"envelopes", 16.0 * double(train.count * test.length * test.dims)},
          {"search arrays", std::min(256.0 * 1024 * 1024, block * per_query)},
          {"neighbours", 2.0 * 16.0 * double(test.count * k)}};
}

// The neighbours of the test series in `queries`, appended to `out`.
template <class T>
void search_pruned(const SeriesSet& train, const SeriesSet& test,
                   const RowRange& queries_range,
                   const SoftDTWOptions& checked_options,
                   const std::string& train_name, const std::string& test_name,
                   Neighbours<T>& out, ProgressBar& progress) {
  SoftDTWOptions options = checked_options;
  options.check_values = false;  // checked when read
  const Space space;
  const auto train_device = to_device<T>(space, train, "softwave::cli::train");
  const auto test_device = to_device<T>(space, test, "softwave::cli::test");
  const std::size_t block = std::min(kSearchBlock, test.count), k = out.k;
  ArrayView2<std::int64_t, Space> indices(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string("softwave::cli::indices")),
      block, k);
  ArrayView2<T, Space> distances(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string("softwave::cli::distances")),
      block, k);
  auto indices_host = Kokkos::create_mirror_view(indices);
  auto distances_host = Kokkos::create_mirror_view(distances);
  const std::size_t end = queries_range.first + queries_range.count;
  for (std::size_t first = queries_range.first; first < end; first += block) {
    const std::size_t rows = std::min(block, end - first);
    const auto used = std::make_pair(std::size_t{0}, rows);
    const auto queries =
        Kokkos::subview(test_device, std::make_pair(first, first + rows),
                        Kokkos::ALL, Kokkos::ALL);
    SearchStatistics part;
    softwave::nearest_neighbours(space, queries, train_device,
                                 Kokkos::subview(indices, used, Kokkos::ALL),
                                 Kokkos::subview(distances, used, Kokkos::ALL),
                                 options, {}, &part);
    Kokkos::deep_copy(space, indices_host, indices);
    Kokkos::deep_copy(space, distances_host, distances);
    space.fence();
    check_finite_block(distances_host.data(), first, rows, k, options,
                       test_name, train_name, indices_host.data());
    out.indices.insert(out.indices.end(), indices_host.data(),
                       indices_host.data() + rows * k);
    out.distances.insert(out.distances.end(), distances_host.data(),
                         distances_host.data() + rows * k);
    out.statistics.pairs += part.pairs;
    out.statistics.pruned += part.pruned;
    out.statistics.pruned_reverse += part.pruned_reverse;
    out.statistics.abandoned += part.abandoned;
    out.statistics.completed += part.completed;
    progress.update(first + rows - queries_range.first);
  }
}

template <class T>
void search_brute(const SeriesSet& train, const SeriesSet& test,
                  const RowRange& queries_range, const SoftDTWOptions& options,
                  const std::string& train_name, const std::string& test_name,
                  Neighbours<T>& out, ProgressBar& progress) {
  const std::size_t k = out.k;
  std::vector<std::int64_t> order(train.count);
  pairwise_in_blocks<T>(
      test, train, options, PairwiseValue::soft_dtw, test_name, train_name,
      queries_range,
      [&](std::size_t first, std::size_t rows, const T* distances) {
        for (std::size_t r = 0; r < rows; ++r) {
          const T* row = distances + r * train.count;
          for (std::size_t j = 0; j < train.count; ++j) order[j] = j;
          std::partial_sort(order.begin(), order.begin() + k, order.end(),
                            [&](std::int64_t a, std::int64_t b) {
                              return row[a] < row[b] ||
                                     (row[a] == row[b] && a < b);
                            });
          for (std::size_t n = 0; n < k; ++n) {
            out.indices.push_back(order[n]);
            out.distances.push_back(row[order[n]]);
          }
        }
        progress.update(first + rows - queries_range.first);
      });
}

// The most frequent label among a test series' k neighbours; a tie goes to
// the smallest label, as in scikit-learn's KNeighborsClassifier.
std::int64_t vote(const SeriesSet& train, const std::int64_t* neighbours,
                  std::size_t k) {
  std::map<std::int64_t, std::size_t> counts;
  for (std::size_t n = 0; n < k; ++n) ++counts[train.labels[neighbours[n]]];
  std::int64_t best = counts.begin()->first;
  std::size_t most = 0;
  for (const auto& [label, count] : counts)
    if (count > most) {
      best = label;
      most = count;
    }
  return best;
}

struct KnnResult {
  std::size_t errors = 0;
  double seconds = 0;
  SearchStatistics statistics;
};

// Every rank searches for its share of the test series; rank 0 gathers
// the neighbours, votes and writes them (the other ranks return no errors).
template <class T>
KnnResult classify(const SeriesSet& train, const SeriesSet& test,
                   const SoftDTWOptions& options, Search search, std::size_t k,
                   const std::string& train_name, const std::string& test_name,
                   OutputFile* file) {
  const Ranks& job = ranks();
  const std::vector<RowRange> ranges = job.split(test.count, {});
  const RowRange mine = job.mine(ranges);
  Neighbours<T> neighbours;
  neighbours.k = k;
  neighbours.indices.reserve((job.root() ? test.count : mine.count) * k);
  neighbours.distances.reserve((job.root() ? test.count : mine.count) * k);
  ProgressBar progress("knn", mine.count, job.root());
  const auto start = std::chrono::steady_clock::now();
  if (search == Search::pruned)
    search_pruned<T>(train, test, mine, options, train_name, test_name,
                     neighbours, progress);
  else
    search_brute<T>(train, test, mine, options, train_name, test_name,
                    neighbours, progress);
  job.checkpoint();
  {
    const Ranks::Exchange exchange(job);
    job.send_to_root(ranges, neighbours.indices.data(), k,
                     [&](std::size_t, std::size_t rows, const std::int64_t* v) {
                       neighbours.indices.insert(neighbours.indices.end(), v,
                                                 v + rows * k);
                     });
    job.send_to_root(ranges, neighbours.distances.data(), k,
                     [&](std::size_t, std::size_t rows, const T* v) {
                       neighbours.distances.insert(neighbours.distances.end(),
                                                   v, v + rows * k);
                     });
    SearchStatistics& st = neighbours.statistics;
    std::int64_t counts[5] = {st.pairs, st.pruned, st.pruned_reverse,
                              st.abandoned, st.completed};
    job.sum(counts, 5);
    st = {counts[0], counts[1], counts[2], counts[3], counts[4]};
  }
  KnnResult result;
  result.statistics = neighbours.statistics;
  if (!job.root()) return result;
  for (std::size_t q = 0; q < test.count; ++q)
    if (vote(train, &neighbours.indices[q * k], k) != test.labels[q])
      ++result.errors;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (file)
    write_neighbours(file->get(), file->path(), file->format(), test.count, k,
                     neighbours.indices.data(), neighbours.distances.data());
  return result;
}

}  // namespace

std::string knn_help() {
  return std::string(
             "usage: softwave knn --train TRAIN.tsv --test TEST.tsv [options]\n"
             "\n"
             "k-nearest-neighbour classification of every test series against "
             "the\n"
             "training series under Soft-DTW (hard DTW with --gamma 0): the "
             "most frequent\n"
             "label among its k nearest training series, a tie between labels "
             "going to\n"
             "the smallest label (as scikit-learn does). Neighbours are "
             "ordered by\n"
             "distance, equal distances by training index. Prints one JSON "
             "object with\n"
             "n_train, n_test, k, errors, error_rate, accuracy, seconds "
             "(neighbour search\n"
             "and classification), the search used and the settings; a pruned "
             "search adds\n"
             "its counts: pairs, lb_pruned and lb_pruned_reverse (cut by the "
             "lower bounds\n"
             "LB_Kim/LB_Keogh before any work, and by LB_Keogh the other "
             "way), abandoned\n"
             "(stopped early), completed, and pruning_rate = (lb_pruned + "
             "lb_pruned_reverse)\n"
             "/ pairs.\n"
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
             "  --test-labels F    labels of a .npy --test file (1-D .npy)\n"
             "  --k K              neighbours that vote, 1 <= K <= n_train "
             "(default 1)\n"
             "  --search S         auto, pruned or brute (default auto). "
             "pruned: exact\n"
             "                     search with the UCR Suite's lower bounds "
             "and early\n"
             "                     abandoning, for --gamma 0 with the "
             "sqeuclidean or l1\n"
             "                     cost; brute: every distance. auto: pruned "
             "where it\n"
             "                     applies on a CPU build, else brute. Both "
             "give the same\n"
             "                     neighbours.\n"
             "  -o, --output FILE  the neighbours: .npy of records (index "
             "int64, distance\n"
             "                     in --dtype), shape (n_test, K), or .csv "
             "lines of the K\n"
             "                     training indices (0-based) then the K "
             "distances\n") +
         distance_options_help() + series_files_help() +
         "  -h, --help         this help\n";
}

int run_knn(const std::vector<std::string>& arguments) {
  std::vector<OptionSpec> specs = {
      {"--train"}, {"--test"},   {"--train-labels"},      {"--test-labels"},
      {"--k"},     {"--search"}, {"--output", true, "-o"}};
  for (const OptionSpec& spec : distance_option_specs()) specs.push_back(spec);
  const ParsedOptions parsed(arguments, specs);
  const std::string train_path = parsed.required("--train");
  const std::string test_path = parsed.required("--test");
  const DistanceSettings settings = parse_distance_settings(parsed);
  const std::size_t k =
      std::size_t(parsed.integer_at_least("--k", 1).value_or(1));
  const std::string search_name =
      parsed.choice("--search", {"auto", "pruned", "brute"}).value_or("auto");
  const std::optional<std::string> output = parsed.text("--output");
  if (output) output_format("--output", *output);
  const bool prunable = settings.gamma == 0 && settings.cost != Cost::cosine;
  if (search_name == "pruned" && !prunable)
    throw usage_error(
        "option --search pruned: the lower bounds hold for hard DTW "
        "(--gamma 0) with the sqeuclidean or l1 cost; use --search brute");
  constexpr bool host_space =
      Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                 Space::memory_space>::accessible;
  const Search search = search_name == "brute" || !prunable ||
                                (search_name == "auto" && !host_space)
                            ? Search::brute
                            : Search::pruned;

  const ReadLimit limit = settings.memory.read_limit();
  const SeriesSet train = read_labelled_input(
      train_path, parsed.text("--train-labels"), "--train-labels", limit);
  const SeriesSet test = read_labelled_input(
      test_path, parsed.text("--test-labels"), "--test-labels", limit);
  check_same_dims(train, "--train", test, "--test");
  check_fits_dtype(train, train_path, "--train", settings.dtype);
  check_fits_dtype(test, test_path, "--test", settings.dtype);
  if (k > train.count)
    throw usage_error("option --k: expected at most the " +
                      std::to_string(train.count) + " training series, got " +
                      std::to_string(k));
  const SoftDTWOptions options = settings.options(test.length, train.length);
  const bool float32 = settings.dtype == Dtype::float32;

  // Only rank 0 writes.
  const std::unique_ptr<OutputFile> file =
      output && ranks().root()
          ? std::make_unique<OutputFile>("--output", *output)
          : nullptr;
  const KokkosScope kokkos(settings.threads);
  std::vector<MemoryPart> memory =
      search == Search::pruned
          ? (float32 ? search_memory<float>(train, test, k)
                     : search_memory<double>(train, test, k))
          : (float32 ? pairwise_memory<float>(test, train, options)
                     : pairwise_memory<double>(test, train, options));
  if (search == Search::brute)
    memory.push_back({"neighbours", 2.0 * 16.0 * double(test.count * k)});
  check_memory(settings.memory, "knn", memory);
  const std::string train_name = "--train '" + train_path + "'";
  const std::string test_name = "--test '" + test_path + "'";
  const KnnResult result =
      float32 ? classify<float>(train, test, options, search, k, train_name,
                                test_name, file.get())
              : classify<double>(train, test, options, search, k, train_name,
                                 test_name, file.get());
  if (file) file->close();
  const double error_rate = static_cast<double>(result.errors) / test.count;
  JsonLine json;
  json.add("command", std::string("knn"))
      .add("train", train_path)
      .add("test", test_path)
      .add("n_train", train.count)
      .add("n_test", test.count)
      .add("train_length", train.length)
      .add("test_length", test.length)
      .add("d", train.dims)
      .add("k", k);
  add_distance_settings(json, settings, options);
  add_execution_space(json);
  json.add("search",
           std::string(search == Search::pruned ? "pruned" : "brute"));
  if (search == Search::pruned) {
    const SearchStatistics& st = result.statistics;
    json.add("pairs", std::size_t(st.pairs))
        .add("lb_pruned", std::size_t(st.pruned))
        .add("lb_pruned_reverse", std::size_t(st.pruned_reverse))
        .add("abandoned", std::size_t(st.abandoned))
        .add("completed", std::size_t(st.completed))
        .add("pruning_rate",
             double(st.pruned + st.pruned_reverse) / double(st.pairs), "%.6f");
  }
  if (output) json.add("output", *output);
  json.add("errors", result.errors)
      .add("error_rate", error_rate)
      .add("accuracy", 1.0 - error_rate)
      .add("seconds", result.seconds, "%.6f");
  std::fputs(json.str().c_str(), stdout);
  return 0;
}

}  // namespace softwave::cli
