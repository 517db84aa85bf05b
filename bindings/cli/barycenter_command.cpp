// softwave barycenter: the Soft-DTW barycenter of the series of a file (or
// of one class), written as an L×d array; prints one JSON object.

#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "barycenter_runner.hpp"
#include "commands.hpp"
#include "distance_blocks.hpp"
#include "distance_settings.hpp"
#include "json_line.hpp"
#include "output_file.hpp"
#include "series_input.hpp"
#include "series_tools.hpp"

namespace softwave::cli {
namespace {

// The series a barycenter is taken over: all of them, or those of --class.
SeriesSet chosen_series(const SeriesSet& set, const std::string& path,
                        std::optional<std::int64_t> label) {
  if (!label) return set;
  if (set.labels.empty()) {
    throw usage_error("option --class: '" + path + "' has no labels" +
                      (is_npy_path(path) ? " (give them with --labels)"
                                         : " (drop --no-labels)"));
  }
  const std::vector<std::size_t> members = series_with_label(set, *label);
  if (members.empty()) {
    throw usage_error("option --class: no series in '" + path + "' has label " +
                      std::to_string(*label));
  }
  return subset(set, members);
}

template <class T>
BarycenterRun compute(const SeriesSet& members, std::size_t L, bool medoid,
                      const BarycenterOptions& options,
                      const std::string& name) {
  const std::vector<double> start =
      medoid ? medoid_of<T>(members, L, options.softdtw, name)
             : mean_series(members, L);
  return barycenter_of<T>(members, start, L, options, name);
}

}  // namespace

std::string barycenter_help() {
  return std::string(
             "usage: softwave barycenter --x FILE -o OUT [options]\n"
             "\n"
             "The Soft-DTW barycenter (Cuturi & Blondel 2017) of the series "
             "in FILE, or\n"
             "of those of one class: the z (L x d) minimising "
             "sum_b sdtw(z, X_b) / B.\n"
             "Writes z to OUT (.csv: L rows of d values; .npy: shape (L, d)) "
             "and prints\n"
             "one JSON object: n_series, length, d, gamma, method, "
             "iterations, objective\n"
             "(sum_b sdtw(z, X_b) / B at z), converged, seconds (start and "
             "optimisation).\n"
             "\n"
             "options:\n"
             "  --x FILE           the series (required)\n"
             "  -o, --output FILE  the barycenter, .csv or .npy (required)\n"
             "  --class LABEL      only the series with this label\n"
             "  --no-labels        the text file has no label column\n"
             "  --labels FILE      labels of a .npy --x (1-D .npy), for "
             "--class\n"
             "  --method M         lbfgs (default) or adam\n"
             "  --max-iter N       optimiser iterations (default 100)\n"
             "  --tol T            stopping tolerance > 0 (default 1e-5; see "
             "softwave/barycenter.hpp)\n"
             "  --learning-rate R  Adam step > 0 (default 0.01)\n"
             "  --length L         barycenter length (default: the series "
             "length)\n"
             "  --init I           start: mean (per-time-step mean, each "
             "series linearly\n"
             "                     resampled to L; default) or medoid (the "
             "series with the\n"
             "                     smallest summed Soft-DTW to the others, "
             "resampled)\n") +
         distance_options_help() +
         "                     (gamma must be > 0 here: the barycenter is "
         "found by\n"
         "                     gradient descent on a smooth objective)\n" +
         series_files_help() + "  -h, --help         this help\n";
}

int run_barycenter(const std::vector<std::string>& arguments) {
  std::vector<OptionSpec> specs = {{"--output", true, "-o"},
                                   {"--class"},
                                   {"--method"},
                                   {"--max-iter"},
                                   {"--tol"},
                                   {"--learning-rate"},
                                   {"--length"},
                                   {"--init"}};
  for (const auto& group : {x_input_specs(), distance_option_specs()})
    specs.insert(specs.end(), group.begin(), group.end());
  const ParsedOptions parsed(arguments, specs);
  const std::string x_path = parsed.required("--x");
  const std::string output = parsed.required("--output");
  output_format("--output", output);
  const DistanceSettings settings = parse_distance_settings(parsed);
  BarycenterOptions options;
  const std::string method =
      parsed.choice("--method", {"lbfgs", "adam"}).value_or("lbfgs");
  options.method =
      method == "adam" ? BarycenterMethod::adam : BarycenterMethod::lbfgs;
  options.max_iter = static_cast<int>(
      parsed.integer_at_least("--max-iter", 1).value_or(options.max_iter));
  options.tol = parsed.positive_number("--tol").value_or(options.tol);
  options.learning_rate =
      parsed.positive_number("--learning-rate").value_or(options.learning_rate);
  const std::optional<std::int64_t> length =
      parsed.integer_at_least("--length", 1);
  const std::string init =
      parsed.choice("--init", {"mean", "medoid"}).value_or("mean");
  const std::optional<std::int64_t> label = parsed.integer("--class");

  const SeriesSet set = read_x_input(parsed, settings.memory.read_limit());
  check_fits_dtype(set, x_path, "--x", settings.dtype);
  const SeriesSet members = chosen_series(set, x_path, label);
  const std::size_t L = length ? static_cast<std::size_t>(*length) : set.length;
  options.softdtw = settings.options(L, set.length);
  OutputFile file("--output", output);

  const KokkosScope kokkos(settings.threads);
  const bool float32 = settings.dtype == Dtype::float32;
  check_memory(settings.memory, "barycenter",
               float32 ? barycenter_memory<float>(members, L, options)
                       : barycenter_memory<double>(members, L, options));
  if (init == "medoid") {
    check_memory(
        settings.memory, "barycenter (--init medoid)",
        float32 ? pairwise_memory<float>(members, members, options.softdtw)
                : pairwise_memory<double>(members, members, options.softdtw));
  }
  const auto start = std::chrono::steady_clock::now();
  const bool medoid = init == "medoid";
  const std::string name = "--x '" + x_path + "'";
  const BarycenterRun run =
      settings.dtype == Dtype::float32
          ? compute<float>(members, L, medoid, options, name)
          : compute<double>(members, L, medoid, options, name);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  file.write_values(run.z, settings.dtype == Dtype::float32, L, set.dims,
                    {L, set.dims});
  file.close();

  JsonLine json;
  json.add("command", std::string("barycenter"))
      .add("x", x_path)
      .add("class", label)
      .add("n_series", members.count)
      .add("series_length", set.length)
      .add("length", L)
      .add("d", set.dims);
  add_distance_settings(json, settings, options.softdtw)
      .add("method", method)
      .add("init", init)
      .add("max_iter", options.max_iter)
      .add("tol", options.tol)
      .add("iterations", run.report.iterations)
      .add("evaluations", run.report.evaluations)
      .add("objective", run.report.objective)
      .add("converged", run.report.converged);
  add_execution_space(json).add("seconds", seconds, "%.6f");
  std::fputs(json.str().c_str(), stdout);
  return 0;
}

}  // namespace softwave::cli
