// softwave sinkhorn: entropic optimal transport between two point clouds
// (softwave/sinkhorn.hpp), with a JSON summary on stdout and the potentials
// (and the row-wise matching) written atomically on request.

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <softwave/sinkhorn.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "distance_settings.hpp"
#include "json_line.hpp"
#include "npy_reader.hpp"
#include "output_file.hpp"
#include "point_input.hpp"

namespace softwave::cli {
namespace {

template <class T, class Space>
OTView3<T, Space> to_space(const std::vector<double>& v, std::size_t rows,
                           std::size_t cols, const char* label) {
  OTView3<T, Space> out(std::string("softwave::cli::") + label, 1, rows, cols);
  auto host = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < rows * cols; ++i) host.data()[i] = T(v[i]);
  Kokkos::deep_copy(out, host);
  return out;
}

struct Outcome {
  std::vector<double> f, g;
  std::vector<std::int64_t> matching;
  double value = 0, transport = 0, error_source = 0, error_target = 0;
  int iterations = 0;
  bool converged = false;
};

template <class T>
Outcome solve(const SeriesSet& x, const SeriesSet& y,
              const std::optional<std::vector<double>>& a,
              const std::optional<std::vector<double>>& b, PointCost cost,
              const SinkhornOptions& options, bool matching) {
  using Space = Kokkos::DefaultExecutionSpace;
  Space const space;
  std::size_t const N = x.count, K = y.count, d = x.length;
  PointClouds<T, Space> clouds{to_space<T, Space>(x.values, N, d, "x"),
                               to_space<T, Space>(y.values, K, d, "y"), cost};
  Marginals<T, Space> marginals;
  // The weights as (1, n) views of arrays this scope keeps.
  OTView3<T, Space> a3, b3;
  if (a) {
    a3 = to_space<T, Space>(*a, 1, N, "a");
    marginals.a = OTView2<T, Space>(a3.data(), 1, N);
  }
  if (b) {
    b3 = to_space<T, Space>(*b, 1, K, "b");
    marginals.b = OTView2<T, Space>(b3.data(), 1, K);
  }
  SinkhornResult<T, Space> r;
  r.f = OTView2<T, Space>("softwave::cli::f", 1, N);
  r.g = OTView2<T, Space>("softwave::cli::g", 1, K);
  r.value = OTView1<T, Space>("softwave::cli::value", 1);
  r.transport_cost = OTView1<T, Space>("softwave::cli::transport", 1);
  r.marginal_error = OTView2<T, Space>("softwave::cli::errors", 1, 2);
  r.iterations = OTView1<int, Space>("softwave::cli::iterations", 1);
  r.converged = OTView1<int, Space>("softwave::cli::converged", 1);
  sinkhorn(space, clouds, marginals, r, options);
  Outcome out;
  auto const f = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.f);
  auto const g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.g);
  out.f.assign(f.data(), f.data() + N);
  out.g.assign(g.data(), g.data() + K);
  auto const value =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.value);
  auto const transport = Kokkos::create_mirror_view_and_copy(
      Kokkos::HostSpace(), r.transport_cost);
  auto const errors = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(),
                                                          r.marginal_error);
  auto const iterations =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.iterations);
  auto const converged =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.converged);
  out.value = value(0);
  out.transport = transport(0);
  out.error_source = errors(0, 0);
  out.error_target = errors(0, 1);
  out.iterations = iterations(0);
  out.converged = converged(0) != 0;
  if (matching) {
    PlanQueries<T, Space> queries;
    queries.row_argmax = OTView2<int, Space>("softwave::cli::matching", 1, N);
    sinkhorn_plan_queries(space, clouds, marginals,
                          OTView2<const T, Space>(r.f),
                          OTView2<const T, Space>(r.g), queries, options);
    auto const m = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(),
                                                       queries.row_argmax);
    out.matching.assign(m.data(), m.data() + N);
  }
  return out;
}

}  // namespace

std::string sinkhorn_help() {
  return "usage: softwave sinkhorn --source A --target B [options]\n"
         "\n"
         "Entropic optimal transport between two point clouds by log-domain "
         "Sinkhorn.\n"
         "Points are rows: a text file of numbers (no labels) or a 2-D .npy "
         "(N, d).\n"
         "Prints one JSON line: n_source, n_target, d, epsilon, "
         "iterations, converged,\n"
         "value (the entropic OT cost), transport_cost, the marginal errors "
         "and seconds.\n"
         "\n"
         "options:\n"
         "  --source FILE          source points (required)\n"
         "  --target FILE          target points (required)\n"
         "  --source-weights FILE  weights, one per source point (default "
         "uniform)\n"
         "  --target-weights FILE  weights, one per target point (default "
         "uniform)\n"
         "  --cost NAME            sqeuclidean (default) or half_sqeuclidean\n"
         "  --epsilon E            entropic regularisation > 0 (default "
         "0.05)\n"
         "  --relative             --epsilon is a fraction of the largest "
         "cost\n"
         "  --scaling Q            anneal epsilon from the largest cost by Q "
         "in (0, 1)\n"
         "  --rho R                KL penalty of both marginals "
         "(unbalanced)\n"
         "  --rho-source R, --rho-target R  one side's penalty "
         "(semi-relaxed)\n"
         "  --max-iterations N     (default 1000)\n"
         "  --tolerance T          marginal residual to stop at (default "
         "1e-6)\n"
         "  --check-every N        iterations between residual checks "
         "(default 10)\n"
         "  --dtype NAME           float64 (default) or float32\n"
         "  --threads N            OpenMP threads (default: Kokkos')\n"
         "  -o, --output FILE      source potentials f (.npy or .csv)\n"
         "  --target-output FILE   target potentials g (.npy or .csv)\n"
         "  --matching FILE        argmax_j of each plan row (.npy or .csv)\n"
         "  -h, --help             this help\n"
         "\n"
         "Exit status: 0 when converged or not (see 'converged'); 2 for bad "
         "usage or\n"
         "input. Files are written whole or not at all.\n";
}

int run_sinkhorn(const std::vector<std::string>& arguments) {
  const ParsedOptions parsed(arguments, {{"--source"},
                                         {"--target"},
                                         {"--source-weights"},
                                         {"--target-weights"},
                                         {"--cost"},
                                         {"--epsilon"},
                                         {"--relative", false},
                                         {"--scaling"},
                                         {"--rho"},
                                         {"--rho-source"},
                                         {"--rho-target"},
                                         {"--max-iterations"},
                                         {"--tolerance"},
                                         {"--check-every"},
                                         {"--dtype"},
                                         {"--threads"},
                                         {"--output", true, "-o"},
                                         {"--target-output"},
                                         {"--matching"}});
  const std::string source = parsed.required("--source");
  const std::string target = parsed.required("--target");
  SinkhornOptions options;
  options.epsilon = parsed.positive_number("--epsilon").value_or(0.05);
  options.epsilon_relative = parsed.has("--relative");
  options.epsilon_scaling = parsed.number("--scaling").value_or(0.0);
  if (!(options.epsilon_scaling >= 0 && options.epsilon_scaling < 1))
    throw usage_error("--scaling must be in [0, 1)");
  if (auto rho = parsed.positive_number("--rho"))
    options.rho_a = options.rho_b = *rho;
  if (auto rho = parsed.positive_number("--rho-source")) options.rho_a = *rho;
  if (auto rho = parsed.positive_number("--rho-target")) options.rho_b = *rho;
  options.max_iterations =
      int(parsed.integer_at_least("--max-iterations", 1).value_or(1000));
  options.tolerance = parsed.number("--tolerance").value_or(1e-6);
  options.check_every =
      int(parsed.integer_at_least("--check-every", 1).value_or(10));
  const std::string cost_name =
      parsed.choice("--cost", {"sqeuclidean", "half_sqeuclidean"})
          .value_or("sqeuclidean");
  const PointCost cost = cost_name == "sqeuclidean"
                             ? PointCost::sqeuclidean
                             : PointCost::half_sqeuclidean;
  const std::string dtype =
      parsed.choice("--dtype", {"float64", "float32"}).value_or("float64");
  const int threads = int(parsed.integer_at_least("--threads", 1).value_or(0));
  // Outputs are checked (extension, directory) before any work is done.
  std::unique_ptr<OutputFile> f_file, g_file, matching_file;
  if (auto p = parsed.text("--output"))
    f_file = std::make_unique<OutputFile>("--output", *p);
  if (auto p = parsed.text("--target-output"))
    g_file = std::make_unique<OutputFile>("--target-output", *p);
  if (auto p = parsed.text("--matching"))
    matching_file = std::make_unique<OutputFile>("--matching", *p);

  const SeriesSet x = read_points("--source", source);
  const SeriesSet y = read_points("--target", target);
  if (x.length != y.length)
    throw usage_error("--source points have " + std::to_string(x.length) +
                      " coordinates but --target points have " +
                      std::to_string(y.length));
  std::optional<std::vector<double>> a, b;
  if (auto p = parsed.text("--source-weights"))
    a = read_weights("--source-weights", *p, x.count);
  if (auto p = parsed.text("--target-weights"))
    b = read_weights("--target-weights", *p, y.count);

  Outcome out;
  double seconds = 0;
  {
    const KokkosScope kokkos(threads);
    auto const start = std::chrono::steady_clock::now();
    out = dtype == "float32"
              ? solve<float>(x, y, a, b, cost, options, bool(matching_file))
              : solve<double>(x, y, a, b, cost, options, bool(matching_file));
    seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  }
  if (f_file) {
    f_file->write_values(out.f, dtype == "float32", out.f.size(), 1,
                         {out.f.size()});
    f_file->close();
  }
  if (g_file) {
    g_file->write_values(out.g, dtype == "float32", out.g.size(), 1,
                         {out.g.size()});
    g_file->close();
  }
  if (matching_file) {
    matching_file->write(out.matching.data(), out.matching.size(), 1,
                         {out.matching.size()});
    matching_file->close();
  }
  JsonLine json;
  json.add("command", std::string("sinkhorn"))
      .add("n_source", x.count)
      .add("n_target", y.count)
      .add("d", x.length)
      .add("cost", cost_name)
      .add("epsilon", options.epsilon)
      .add("epsilon_relative", options.epsilon_relative)
      .add("dtype", dtype)
      .add("iterations", out.iterations)
      .add("converged", out.converged)
      .add("value", out.value)
      .add("transport_cost", out.transport)
      .add("marginal_error_source", out.error_source)
      .add("marginal_error_target", out.error_target)
      .add("seconds", seconds, "%.6g");
  std::fputs(json.str().c_str(), stdout);
  return 0;
}

}  // namespace softwave::cli
