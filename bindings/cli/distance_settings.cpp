#include "distance_settings.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <softwave/kokkos_compat.hpp>
#include <thread>

#include "ranks.hpp"
#include "series_input.hpp"

namespace softwave::cli {

SoftDTWOptions DistanceSettings::options(std::size_t n, std::size_t m) const {
  SoftDTWOptions result;
  result.gamma = gamma;
  result.cost = cost;
  if (band) result.band = *band;
  if (band_pct) {
    // P·L is exact for integer P, so exact multiples of 100 stay exact.
    const double length = static_cast<double>(std::max(n, m));
    result.band = static_cast<std::int64_t>(
        std::ceil(std::min(*band_pct, 100.0) * length / 100.0));
  }
  return result;
}

void check_fits_dtype(const SeriesSet& set, const std::string& path,
                      const std::string& option, Dtype dtype) {
  if (dtype != Dtype::float32) return;
  constexpr double largest = std::numeric_limits<float>::max();
  for (std::size_t q = 0; q < set.values.size(); ++q) {
    const double value = set.values[q];
    // Values that round to float32's largest finite value are still fine.
    if (std::fabs(value) <= largest || std::isfinite(static_cast<float>(value)))
      continue;
    const std::size_t s = q / set.series_size(),
                      t = q % set.series_size() / set.dims, k = q % set.dims;
    std::string place;
    if (is_npy_path(path)) {
      place = "value [" + std::to_string(s) + ", " + std::to_string(t) +
              (set.dims > 1 ? ", " + std::to_string(k) : "") + "]";
    } else {
      const std::size_t label_fields = set.labels.empty() ? 0 : 1;
      place = "line " + std::to_string(s + 1) + ", field " +
              std::to_string(t + 1 + label_fields);
    }
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", value);
    throw input_error(path + ": " + place + ": " + shown +
                      " is beyond the float32 range (about 3.4e38) that " +
                      option + " is read in with --dtype float32 (use " +
                      "--dtype float64)");
  }
}

std::vector<OptionSpec> distance_option_specs() {
  return {{"--gamma"}, {"--band"},    {"--band-pct"},  {"--cost"},
          {"--dtype"}, {"--threads"}, {"--max-memory"}};
}

DistanceSettings parse_distance_settings(const ParsedOptions& options) {
  DistanceSettings settings;
  if (const auto gamma = options.number("--gamma")) settings.gamma = *gamma;
  if (options.has("--band") && options.has("--band-pct")) {
    throw usage_error("options --band and --band-pct are mutually exclusive");
  }
  settings.band = options.integer_at_least("--band", 0);
  if (const auto pct = options.number("--band-pct")) {
    if (!(*pct >= 0) || !std::isfinite(*pct)) {
      throw usage_error("option --band-pct: expected a percentage >= 0, got '" +
                        *options.text("--band-pct") + "'");
    }
    settings.band_pct = pct;
  }
  if (const auto cost =
          options.choice("--cost", {"sqeuclidean", "l1", "cosine"})) {
    settings.cost_name = *cost;
    settings.cost = *cost == "l1"       ? Cost::l1
                    : *cost == "cosine" ? Cost::cosine
                                        : Cost::sqeuclidean;
  }
  if (const auto dtype = options.choice("--dtype", {"float32", "float64"})) {
    settings.dtype_name = *dtype;
    settings.dtype = *dtype == "float32" ? Dtype::float32 : Dtype::float64;
  }
  if (const auto threads = options.integer_at_least("--threads", 1)) {
    if (*threads > compat::max_openmp_threads) {
      throw usage_error("option --threads: at most " +
                        std::to_string(compat::max_openmp_threads) +
                        " (the most Kokkos' OpenMP backend runs), got '" +
                        *options.text("--threads") + "'");
    }
    settings.threads = static_cast<int>(*threads);
  }
  settings.memory = memory_limit(options);
  return settings;
}

const char* distance_options_help() {
  return "  --gamma G          soft-min smoothing gamma >= 0; 0 is hard DTW "
         "(default 1.0)\n"
         "  --band W           Sakoe-Chiba half-width: keep cells with "
         "|i - j| <= W\n"
         "  --band-pct P       band as a percentage of the series length L:\n"
         "                     W = ceil(P/100 * L) (exclusive with --band; "
         "default: no band)\n"
         "  --cost C           sqeuclidean (default), l1 or cosine\n"
         "  --dtype T          float64 (default) or float32 inputs and "
         "results\n"
         "  --threads N        host threads for Kokkos (default: Kokkos' "
         "choice)\n"
         "  --max-memory SIZE  refuse work estimated to need more (bytes, or "
         "K, M, G, T;\n"
         "                     default: MemAvailable in /proc/meminfo)\n";
}

JsonLine& add_distance_settings(JsonLine& json,
                                const DistanceSettings& settings,
                                const SoftDTWOptions& options) {
  return json.add("gamma", settings.gamma)
      .add("band", options.band)
      .add("band_pct", settings.band_pct)
      .add("cost", settings.cost_name)
      .add("dtype", settings.dtype_name);
}

JsonLine& add_execution_space(JsonLine& json) {
  return json
      .add("execution_space",
           std::string(Kokkos::DefaultExecutionSpace::name()))
      .add("concurrency",
           static_cast<int>(Kokkos::DefaultExecutionSpace().concurrency()))
      .add("ranks", ranks().size());
}

KokkosScope::KokkosScope(int threads) {
  const Ranks& job = ranks();
  // Ranks that share a node share its cores (where neither --threads nor
  // OMP_NUM_THREADS says otherwise) and take its GPUs in turn.
  if (job.node_size() > 1 && threads == 0 && !std::getenv("OMP_NUM_THREADS"))
    threads =
        std::max(1, int(std::thread::hardware_concurrency()) / job.node_size());
  // Quiet: Kokkos' start-up warnings would land in the JSON/CSV on stdout.
  compat::initialize(threads, /*quiet=*/true,
                     job.size() > 1 ? job.node_rank() : -1);
}

KokkosScope::~KokkosScope() { Kokkos::finalize(); }

}  // namespace softwave::cli
