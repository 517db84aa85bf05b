// softwave cluster: k-means under Soft-DTW with Soft-DTW barycenters as
// centroids (Cuturi & Blondel 2017, §3; tslearn's TimeSeriesKMeans with
// metric="softdtw"); writes the labels, prints one JSON object.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "barycenter_runner.hpp"
#include "commands.hpp"
#include "distance_blocks.hpp"
#include "distance_settings.hpp"
#include "json_line.hpp"
#include "output_file.hpp"
#include "ranks.hpp"
#include "series_input.hpp"
#include "series_tools.hpp"

namespace softwave::cli {
namespace {

struct KMeansSettings {
  std::size_t k = 2;
  int max_iter = 50;
  PairwiseValue assign_by = PairwiseValue::soft_dtw;
  SoftDTWOptions softdtw;
  BarycenterOptions barycenter;
};

struct Clustering {
  std::vector<std::int64_t> labels;  // cluster of each series, 0..k-1
  SeriesSet centroids;               // k series of the input's length
  double inertia = 0;  // Σ over series of the distance to its centroid
  int iterations = 0;  // centroid updates
  bool converged = false;
};

template <class T>
class KMeans {
 public:
  KMeans(const SeriesSet& set, const KMeansSettings& settings, std::string name)
      : set_(set),
        settings_(settings),
        name_(std::move(name)),
        ranges_(ranks().split(set.count, {})) {}

  Clustering run(std::uint64_t seed) const {
    Clustering result;
    result.centroids = initial_centroids(seed);
    std::vector<double> nearest;
    result.labels = assign(result.centroids, nearest);
    while (result.iterations < settings_.max_iter) {
      update(result.centroids, result.labels, nearest);
      ++result.iterations;
      std::vector<std::int64_t> labels = assign(result.centroids, nearest);
      const bool same = labels == result.labels;
      result.labels = std::move(labels);
      if (same) {
        result.converged = true;
        break;
      }
    }
    result.inertia = 0;
    for (const double d : nearest) result.inertia += d;
    return result;
  }

 private:
  // n × centroids.count matrix, row-major, on every rank: each computes
  // its rows.
  std::vector<double> distances(const SeriesSet& centroids,
                                PairwiseValue what) const {
    const Ranks& job = ranks();
    std::vector<double> matrix(set_.count * centroids.count);
    pairwise_in_blocks<T>(
        set_, centroids, settings_.softdtw, what, name_, "the centroids",
        job.mine(ranges_),
        [&](std::size_t first, std::size_t rows, const T* values) {
          std::copy(values, values + rows * centroids.count,
                    matrix.begin() + first * centroids.count);
        });
    job.checkpoint();
    const Ranks::Exchange exchange(job);
    job.gather_to_all(ranges_, matrix.data(), centroids.count);
    return matrix;
  }

  // k-means++ (Arthur & Vassilvitskii 2007): each next centre is drawn with
  // probability proportional to its distance to the nearest centre so far.
  // The distance is the Soft-DTW divergence whatever --divergence says: it
  // is >= 0 and 0 at a centre itself, as the sampling needs (plain
  // Soft-DTW values can be negative). Like a squared distance, it is used
  // as it is, not squared again.
  SeriesSet initial_centroids(std::uint64_t seed) const {
    std::mt19937_64 rng(seed);
    std::vector<std::size_t> chosen = {
        std::uniform_int_distribution<std::size_t>(0, set_.count - 1)(rng)};
    std::vector<double> nearest =
        distances(subset(set_, chosen), PairwiseValue::divergence);
    while (chosen.size() < settings_.k) {
      double total = 0;
      for (const double d : nearest) total += std::max(d, 0.0);
      std::size_t next = 0;
      if (total > 0) {
        double target = std::uniform_real_distribution<double>(0, total)(rng);
        for (next = 0; next + 1 < set_.count; ++next) {
          target -= std::max(nearest[next], 0.0);
          if (target < 0 && nearest[next] > 0) break;
        }
      } else {  // every series sits on a centre: any unused one will do
        while (std::find(chosen.begin(), chosen.end(), next) != chosen.end())
          ++next;
      }
      chosen.push_back(next);
      const std::vector<double> to_next =
          distances(subset(set_, {next}), PairwiseValue::divergence);
      for (std::size_t s = 0; s < set_.count; ++s)
        nearest[s] = std::min(nearest[s], to_next[s]);
    }
    return subset(set_, chosen);
  }

  // The nearest centroid of each series (ties to the lowest index), and
  // the distance to it in `nearest`.
  std::vector<std::int64_t> assign(const SeriesSet& centroids,
                                   std::vector<double>& nearest) const {
    const std::vector<double> matrix =
        distances(centroids, settings_.assign_by);
    std::vector<std::int64_t> labels(set_.count, 0);
    nearest.assign(set_.count, 0);
    for (std::size_t s = 0; s < set_.count; ++s) {
      const double* row = matrix.data() + s * centroids.count;
      std::size_t best = 0;
      for (std::size_t j = 1; j < centroids.count; ++j)
        if (row[j] < row[best]) best = j;
      labels[s] = static_cast<std::int64_t>(best);
      nearest[s] = row[best];
    }
    return labels;
  }

  // Each centroid becomes the barycenter of its members, warm-started from
  // where it was. An empty cluster first takes the series farthest from its
  // own centroid (from a cluster that keeps other members) as its centroid.
  void update(SeriesSet& centroids, const std::vector<std::int64_t>& labels,
              std::vector<double> nearest) const {
    std::vector<std::vector<std::size_t>> members(settings_.k);
    for (std::size_t s = 0; s < set_.count; ++s)
      members[static_cast<std::size_t>(labels[s])].push_back(s);
    const std::size_t size = set_.series_size();
    auto centroid = [&](std::size_t j) {
      return centroids.values.data() + j * size;
    };
    for (std::size_t j = 0; j < settings_.k; ++j) {
      if (!members[j].empty()) continue;
      std::size_t farthest = set_.count;
      for (std::size_t s = 0; s < set_.count; ++s) {
        const bool movable =
            members[static_cast<std::size_t>(labels[s])].size() > 1;
        if (movable &&
            (farthest == set_.count || nearest[s] > nearest[farthest]))
          farthest = s;
      }
      if (farthest == set_.count) continue;  // nothing left to move
      nearest[farthest] = -std::numeric_limits<double>::infinity();
      auto& from = members[static_cast<std::size_t>(labels[farthest])];
      from.erase(std::find(from.begin(), from.end(), farthest));
      std::copy(set_.series(farthest), set_.series(farthest) + size,
                centroid(j));
    }
    // Centroid j is computed by rank j % ranks, and sent to the others:
    // every rank then holds the same bits.
    const Ranks& job = ranks();
    auto owner = [&](std::size_t j) {
      return int(j % std::size_t(job.size()));
    };
    for (std::size_t j = 0; j < settings_.k; ++j) {
      if (members[j].empty() || owner(j) != job.rank()) continue;
      const std::vector<double> start(centroid(j), centroid(j) + size);
      const BarycenterRun run = barycenter_of<T>(
          subset(set_, members[j]), start, set_.length, settings_.barycenter,
          "cluster " + std::to_string(j) + " of " + name_);
      std::copy(run.z.begin(), run.z.end(), centroid(j));
    }
    job.checkpoint();
    const Ranks::Exchange exchange(job);
    for (std::size_t j = 0; j < settings_.k; ++j)
      if (!members[j].empty()) job.broadcast(centroid(j), size, owner(j));
  }

  const SeriesSet& set_;
  KMeansSettings settings_;
  std::string name_;              // "--x 'FILE'", for messages
  std::vector<RowRange> ranges_;  // each rank's series in the assignments
};

template <class T>
Clustering best_of(const SeriesSet& set, const KMeansSettings& settings,
                   std::uint64_t seed, int n_init, const std::string& name) {
  const KMeans<T> kmeans(set, settings, name);
  Clustering best;
  for (int r = 0; r < n_init; ++r) {
    // Run r's seed mixes the user's seed with r, so runs differ.
    std::seed_seq sequence{seed, static_cast<std::uint64_t>(r)};
    std::uint32_t words[2];
    sequence.generate(words, words + 2);
    const std::uint64_t run_seed = (std::uint64_t(words[0]) << 32) | words[1];
    Clustering c = kmeans.run(run_seed);
    if (r == 0 || c.inertia < best.inertia) best = std::move(c);
  }
  return best;
}

}  // namespace

std::string cluster_help() {
  return std::string(
             "usage: softwave cluster --x FILE -k K -o LABELS [options]\n"
             "\n"
             "k-means of the series in FILE under Soft-DTW, with Soft-DTW "
             "barycenters as\n"
             "centroids (Cuturi & Blondel 2017; tslearn's TimeSeriesKMeans, "
             "metric softdtw).\n"
             "Centres start by k-means++ (seeded; sampled by Soft-DTW "
             "divergence); each\n"
             "iteration assigns every series to its nearest centroid, then "
             "moves each\n"
             "centroid to the barycenter of its members (an empty cluster "
             "takes the series\n"
             "farthest from its centroid); it stops when no assignment "
             "changes or after\n"
             "--max-iter updates. Writes the labels (0..K-1; .csv: one per "
             "line, .npy:\n"
             "int64 shape (n,)) and prints one JSON object: k, n_series, "
             "iterations,\n"
             "converged, inertia (sum of each series' distance to its "
             "centroid), seconds,\n"
             "and ari (adjusted Rand index against the file's labels) when "
             "it has labels.\n"
             "\n"
             "options:\n"
             "  --x FILE           the series (required)\n"
             "  -k, --clusters K   number of clusters >= 1 (required)\n"
             "  -o, --output FILE  cluster labels, .csv or .npy (required)\n"
             "  --centroids FILE   also write the centroids (.csv: K rows of "
             "L*d values;\n"
             "                     .npy: shape (K, L) or (K, L, d))\n"
             "  --no-labels        the text file has no label column\n"
             "  --labels FILE      labels of a .npy --x (1-D .npy), for the "
             "ari\n"
             "  --divergence       assign by Soft-DTW divergence instead of "
             "Soft-DTW\n"
             "  --max-iter N       k-means iterations (default 50)\n"
             "  --barycenter-iter N  L-BFGS iterations per centroid update "
             "(default 30)\n"
             "  --seed S           k-means++ seed (default 0)\n"
             "  --n-init R         runs from different seeds, the lowest "
             "inertia kept\n"
             "                     (default 1)\n") +
         distance_options_help() +
         "                     (gamma must be > 0: the centroids are "
         "barycenters)\n" +
         series_files_help() + "  -h, --help         this help\n";
}

int run_cluster(const std::vector<std::string>& arguments) {
  std::vector<OptionSpec> specs = {{"-k", true, "--clusters"},
                                   {"--output", true, "-o"},
                                   {"--centroids"},
                                   {"--divergence", false},
                                   {"--max-iter"},
                                   {"--barycenter-iter"},
                                   {"--seed"},
                                   {"--n-init"}};
  for (const auto& group : {x_input_specs(), distance_option_specs()})
    specs.insert(specs.end(), group.begin(), group.end());
  const ParsedOptions parsed(arguments, specs);
  const std::string x_path = parsed.required("--x");
  parsed.required("-k");
  const std::string output = parsed.required("--output");
  output_format("--output", output);
  const std::optional<std::string> centroids_path = parsed.text("--centroids");
  if (centroids_path) {
    output_format("--centroids", *centroids_path);
    check_distinct_outputs("--output", output, "--centroids", *centroids_path);
  }
  const DistanceSettings distance = parse_distance_settings(parsed);
  KMeansSettings settings;
  settings.k = static_cast<std::size_t>(*parsed.integer_at_least("-k", 1));
  settings.max_iter = static_cast<int>(
      parsed.integer_at_least("--max-iter", 1).value_or(settings.max_iter));
  settings.barycenter.max_iter = static_cast<int>(
      parsed.integer_at_least("--barycenter-iter", 1).value_or(30));
  if (parsed.has("--divergence")) {
    settings.assign_by = PairwiseValue::divergence;
  }
  const std::uint64_t seed = static_cast<std::uint64_t>(
      parsed.integer_at_least("--seed", 0).value_or(0));
  const int n_init =
      static_cast<int>(parsed.integer_at_least("--n-init", 1).value_or(1));

  const SeriesSet set = read_x_input(parsed, distance.memory.read_limit());
  check_fits_dtype(set, x_path, "--x", distance.dtype);
  if (settings.k > set.count) {
    throw usage_error("option -k: " + std::to_string(settings.k) +
                      " clusters for " + std::to_string(set.count) + " series");
  }
  settings.softdtw = distance.options(set.length, set.length);
  settings.barycenter.softdtw = settings.softdtw;
  // Only rank 0 writes.
  const bool writes = ranks().root();
  std::optional<OutputFile> labels_file;
  if (writes) labels_file.emplace("--output", output);
  std::optional<OutputFile> centroids_file;
  if (centroids_path && writes)
    centroids_file.emplace("--centroids", *centroids_path);

  const KokkosScope kokkos(distance.threads);
  {
    // The assignments (every series against k centroids) and the largest
    // possible centroid update (one cluster of every series).
    std::vector<std::size_t> first_k(settings.k);
    for (std::size_t j = 0; j < settings.k; ++j) first_k[j] = j;
    const SeriesSet centroids = subset(set, first_k);
    const bool float32 = distance.dtype == Dtype::float32;
    check_memory(
        distance.memory, "cluster",
        float32 ? pairwise_memory<float>(set, centroids, settings.softdtw)
                : pairwise_memory<double>(set, centroids, settings.softdtw));
    check_memory(
        distance.memory, "cluster",
        float32
            ? barycenter_memory<float>(set, set.length, settings.barycenter)
            : barycenter_memory<double>(set, set.length, settings.barycenter));
  }
  const auto start = std::chrono::steady_clock::now();
  const std::string name = "--x '" + x_path + "'";
  const Clustering result =
      distance.dtype == Dtype::float32
          ? best_of<float>(set, settings, seed, n_init, name)
          : best_of<double>(set, settings, seed, n_init, name);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  if (labels_file) {
    labels_file->write(result.labels.data(), set.count, 1, {set.count});
    labels_file->close();
  }
  if (centroids_file) {
    const SeriesSet& c = result.centroids;
    std::vector<std::size_t> shape = {c.count, c.length};
    if (c.dims > 1) shape.push_back(c.dims);
    centroids_file->write_values(c.values, distance.dtype == Dtype::float32,
                                 c.count, c.series_size(), shape);
    centroids_file->close();
  }

  JsonLine json;
  json.add("command", std::string("cluster"))
      .add("x", x_path)
      .add("n_series", set.count)
      .add("length", set.length)
      .add("d", set.dims)
      .add("k", settings.k);
  add_distance_settings(json, distance, settings.softdtw)
      .add("divergence", parsed.has("--divergence"))
      .add("seed", seed)
      .add("n_init", n_init)
      .add("max_iter", settings.max_iter)
      .add("barycenter_iter", settings.barycenter.max_iter)
      .add("iterations", result.iterations)
      .add("converged", result.converged)
      .add("inertia", result.inertia);
  if (!set.labels.empty()) {
    json.add("ari", adjusted_rand_index(set.labels, result.labels));
  }
  add_execution_space(json).add("seconds", seconds, "%.6f");
  std::fputs(json.str().c_str(), stdout);
  return 0;
}

}  // namespace softwave::cli
