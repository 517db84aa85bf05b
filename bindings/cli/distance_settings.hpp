#pragma once
// The options knn and pairwise share (γ, band, cost, dtype, threads), their
// parsing, and the Kokkos scope they run in.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <softwave/softdtw.hpp>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "json_line.hpp"
#include "memory_limit.hpp"
#include "ucr_reader.hpp"

namespace softwave::cli {

enum class Dtype { float32, float64 };

struct DistanceSettings {
  double gamma = 1.0;
  Cost cost = Cost::sqeuclidean;
  std::string cost_name = "sqeuclidean";
  Dtype dtype = Dtype::float64;
  std::string dtype_name = "float64";
  std::optional<std::int64_t> band;  // --band W
  std::optional<double> band_pct;    // --band-pct P
  int threads = 0;                   // 0: Kokkos' default
  MemoryLimit memory;                // --max-memory or what is available

  // The library options for series of lengths n and m: --band-pct P becomes
  // w = ceil(P/100 · max(n, m)), the UCR archive's window convention.
  SoftDTWOptions options(std::size_t n, std::size_t m) const;
};

// input_error when --dtype float32 is asked for and a value of `set` (read
// from `path`, given by `option`) is beyond float32's range: it would turn
// into inf. The message gives the value's place in the file.
void check_fits_dtype(const SeriesSet& set, const std::string& path,
                      const std::string& option, Dtype dtype);

// --gamma, --band, --band-pct, --cost, --dtype, --threads, --max-memory.
std::vector<OptionSpec> distance_option_specs();

// usage_error for values out of range or --band with --band-pct; γ itself is
// checked by the library (softwave::invalid_argument).
DistanceSettings parse_distance_settings(const ParsedOptions& options);

// The help lines describing distance_option_specs().
const char* distance_options_help();

// "gamma", "band", "band_pct", "cost" and "dtype" as used by `options`.
JsonLine& add_distance_settings(JsonLine& json,
                                const DistanceSettings& settings,
                                const SoftDTWOptions& options);

// "execution_space" and "concurrency" of Kokkos::DefaultExecutionSpace
// (Kokkos initialised).
JsonLine& add_execution_space(JsonLine& json);

// Kokkos::initialize with the requested thread count for its lifetime.
// Kokkos' start-up warnings are switched off: they would go to stdout,
// which carries the results.
class KokkosScope {
 public:
  explicit KokkosScope(int threads);
  ~KokkosScope();
  KokkosScope(const KokkosScope&) = delete;
  KokkosScope& operator=(const KokkosScope&) = delete;
};

}  // namespace softwave::cli
