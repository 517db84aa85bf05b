// softwave gw: sampled Gromov–Wasserstein between two point sets or two
// distance matrices (softwave/gw.hpp), with a JSON summary on stdout and the
// plan and the row-wise matching written atomically on request.

#include <Kokkos_Core.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <softwave/gw.hpp>
#include <string>
#include <vector>

#include "commands.hpp"
#include "distance_settings.hpp"
#include "json_line.hpp"
#include "output_file.hpp"
#include "point_input.hpp"
#include "progress_bar.hpp"

namespace softwave::cli {
namespace {

struct GwOutcome {
  std::vector<double> plan;
  std::vector<std::int64_t> matching;
  double objective = NAN, objective_error = NAN, linear_objective = NAN,
         last_change = NAN, final_epsilon = NAN, source_scale = NAN,
         target_scale = NAN;
  int iterations = 0, joined_components = 0, polish_anchors = 0;
  bool converged = false, dense_solves = false;
  std::uint64_t seed = 0;
  std::vector<double> restart_objectives;
};

// A (rows, cols) array of the values on the space (cols 0: a vector).
template <class T, class Space>
Kokkos::View<T**, Kokkos::LayoutRight, typename Space::memory_space> on_space(
    const std::vector<double>& v, std::size_t rows, std::size_t cols,
    const char* label) {
  Kokkos::View<T**, Kokkos::LayoutRight, typename Space::memory_space> out(
      std::string("softwave::cli::") + label, rows, cols);
  auto host = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < rows * cols; ++i) host.data()[i] = T(v[i]);
  Kokkos::deep_copy(out, host);
  return out;
}

// Fused GW's linear cost as read: a matrix, or features of both sides.
struct LinearInput {
  std::optional<SeriesSet> matrix, source_features, target_features;
};

// --linear-cost and --initial-plan: N x K values.
SeriesSet read_pair_matrix(const char* option, const std::string& path,
                           std::size_t n, std::size_t k) {
  SeriesSet m = read_points(option, path);
  if (m.count != n || m.length != k)
    throw usage_error(std::string(option) + " has " + std::to_string(m.count) +
                      " x " + std::to_string(m.length) + " values, expected " +
                      std::to_string(n) + " x " + std::to_string(k) +
                      " (source points x target points)");
  return m;
}

template <class T>
GwOutcome solve(const SeriesSet& x, const SeriesSet& y,
                const std::optional<std::vector<double>>& a,
                const std::optional<std::vector<double>>& b,
                const LinearInput& linear_input,
                const std::optional<SeriesSet>& initial, GwDistanceMode mode,
                int k, int landmarks, int coarse_points, GwOptions options,
                bool plan, bool matching, bool objective) {
  using Space = Kokkos::DefaultExecutionSpace;
  Space const space;
  std::size_t const N = x.count, K = y.count;
  auto const source_data = on_space<T, Space>(x.values, N, x.length, "source");
  auto const target_data = on_space<T, Space>(y.values, K, y.length, "target");
  GwSide<T, Space> const source(space, source_data, mode, k, landmarks,
                                options.shortest_paths);
  GwSide<T, Space> const target(space, target_data, mode, k, landmarks,
                                options.shortest_paths);
  // The weights as vectors over arrays this scope keeps.
  using Array = decltype(on_space<T, Space>({}, 0, 0, ""));
  Array const a2 = a ? on_space<T, Space>(*a, N, 1, "a") : Array();
  Array const b2 = b ? on_space<T, Space>(*b, K, 1, "b") : Array();
  GwMarginals<T, Space> marginals;
  if (a) marginals.a = OTView1<const T, Space>(a2.data(), N);
  if (b) marginals.b = OTView1<const T, Space>(b2.data(), K);
  auto linear_array = [](const std::optional<SeriesSet>& s, const char* label) {
    return s ? on_space<T, Space>(s->values, s->count, s->length, label)
             : Array();
  };
  Array const linear_matrix = linear_array(linear_input.matrix, "linear"),
              source_features =
                  linear_array(linear_input.source_features, "source_features"),
              target_features =
                  linear_array(linear_input.target_features, "target_features");
  GwLinearCost<T, Space> const linear{linear_matrix, source_features,
                                      target_features};
  GwResult<T, Space> r;
  r.compute_objective = objective;
  if (initial)  // the warm start, read from the plan's array
    r.plan = on_space<T, Space>(initial->values, N, K, "plan");
  else if (plan)
    r.plan = OTView2<T, Space>("softwave::cli::plan", N, K);
  if (matching) r.matching = OTView1<int, Space>("softwave::cli::matching", N);
  if (coarse_points > 0) {  // the warm start from a coarse problem
    if (r.plan.size() == 0)
      r.plan = OTView2<T, Space>("softwave::cli::multiscale_start", N, K);
    multiscale_start<Space, T>(space, source_data, target_data, mode, k,
                               landmarks, linear, marginals, options,
                               coarse_points, r.plan);
    options.warm_start = true;
  }
  // A progress bar over every restart's iterations, on a terminal.
  // (A race runs every seed's first iterations, then the winner's all.)
  bool const race = options.restarts > 1 && options.restart_iterations > 0 &&
                    options.restart_iterations < options.max_iterations;
  std::size_t const per_seed =
      std::size_t(race ? options.restart_iterations : options.max_iterations);
  ProgressBar progress("gw",
                       std::size_t(options.restarts) * per_seed +
                           (race ? std::size_t(options.max_iterations) : 0));
  std::size_t done = 0;  // iterations run, each reported once
  options.on_iteration = [&](int, int) { progress.update(++done); };
  sampled_gw(space, source.distances(), target.distances(), linear, marginals,
             r, options);
  GwOutcome out;
  if (plan) {
    auto const p =
        Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.plan);
    out.plan.assign(p.data(), p.data() + N * K);
  }
  if (matching) {
    auto const m =
        Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), r.matching);
    out.matching.assign(m.data(), m.data() + N);
  }
  out.objective = r.objective;
  out.objective_error = r.objective_error;
  out.linear_objective = r.linear_objective;
  out.last_change = r.last_change;
  out.final_epsilon = r.final_epsilon;
  out.source_scale = r.source_scale;
  out.target_scale = r.target_scale;
  out.iterations = r.iterations;
  out.converged = r.converged;
  out.dense_solves = r.dense_solves;
  out.polish_anchors = r.polish_anchors;
  out.seed = r.seed;
  out.restart_objectives = r.restart_objectives;
  out.joined_components =
      source.joined_components() + target.joined_components();
  return out;
}

}  // namespace

std::string gw_help() {
  return "usage: softwave gw --source A --target B [options]\n"
         "\n"
         "Sampled Gromov-Wasserstein between two point sets (rows of a text "
         "file of\n"
         "numbers or a 2-D .npy), or two distance matrices with --mode "
         "precomputed.\n"
         "Prints one JSON line: n_source, n_target, mode, iterations, "
         "converged,\n"
         "last_change, final_epsilon (the last solve's epsilon), "
         "source_scale and\n"
         "target_scale (what each side's distances were divided by: POT's "
         "entropic GW\n"
         "solves the same problem at 2 final_epsilon source_scale "
         "target_scale),\n"
         "objective (the GW objective of the plan; null with\n"
         "--no-objective), objective_error (its standard error where it is "
         "estimated,\n"
         "else 0), linear_objective (<C, T> with --fgw-alpha), seed,\n"
         "restart_objectives (with --restarts: what chose the seed) and "
         "seconds.\n"
         "\n"
         "options:\n"
         "  --source FILE          source points or (N, N) distances "
         "(required)\n"
         "  --target FILE          target points or (K, K) distances "
         "(required)\n"
         "  --mode NAME            dijkstra (default): shortest paths on k-NN "
         "graphs;\n"
         "                         landmark: graph distances to landmarks as "
         "coordinates;\n"
         "                         geodesic: all shortest paths on k-NN graphs "
         "(N x N);\n"
         "                         euclidean; precomputed;\n"
         "                         sqeuclidean, cosine: embeddings, each "
         "solve's cost exact\n"
         "                         (no sampled anchors)\n"
         "  --k K                  neighbours of the k-NN graphs (default "
         "30)\n"
         "  --landmarks L          landmarks in landmark mode (default 50)\n"
         "  --shortest-paths WHERE the k-NN graphs' shortest paths: "
         "automatic\n"
         "                         (default: the device on a GPU for 64 or "
         "more sources\n"
         "                         at a time, else the host), host "
         "(Dijkstra) or device\n"
         "                         (on the device); the same distances\n"
         "  --source-weights FILE  weights, one per source point (default "
         "uniform)\n"
         "  --target-weights FILE  weights, one per target point (default "
         "uniform)\n"
         "  --anchors M            anchor pairs an iteration (default 50)\n"
         "  --alpha A              momentum in (0, 1] (default 0.9)\n"
         "  --epsilon E            first iteration's epsilon > 0 (default "
         "0.001)\n"
         "  --max-iterations N     (default 500)\n"
         "  --min-iterations N     no stop before (default 50)\n"
         "  --tolerance T          relative change of the plan to stop at "
         "(default 0.05)\n"
         "  --sinkhorn-iterations N  Sinkhorn iterations a solve at most "
         "(default 10)\n"
         "  --sinkhorn-tolerance T   a solve stops once its row marginals' "
         "L1 error is\n"
         "                         at most T (default 0.001; <= 0: never)\n"
         "  --early-sinkhorn-iterations N  sampled costs: at most N a solve "
         "until 5\n"
         "                         iterations before --min-iterations "
         "(default half of\n"
         "                         --sinkhorn-iterations; 0: all of them)\n"
         "  --semi-relaxed RHO     KL penalty of the target marginal "
         "(default balanced)\n"
         "  --relax-source RHO     KL penalty of the source marginal "
         "(default kept)\n"
         "  --restarts R           seeds tried, the lowest objective kept "
         "(default 1)\n"
         "  --restart-iterations S race the seeds over their first S "
         "iterations and\n"
         "                         run the best one to the end (default 0: "
         "every seed\n"
         "                         runs to the end)\n"
         "  --lambda-ema-beta B    each solve's cost an exponential moving "
         "average of\n"
         "                         the sampled costs, weight B in [0, 1] "
         "for the\n"
         "                         newest (default 0: none)\n"
         "  --fgw-alpha A          fused GW: weight in (0, 1] of a linear cost "
         "C, each\n"
         "                         solve's cost (1 - A) GW + A C; C from one "
         "of:\n"
         "  --linear-cost FILE     C as an N x K matrix (dense solves)\n"
         "  --source-features FILE, --target-features FILE\n"
         "                         C_ik = |F_i - G_k|^2 of features, N x e "
         "and K x e\n"
         "                         (kept low-rank)\n"
         "  --initial-plan FILE    N x K plan to start from (default the "
         "product of\n"
         "                         the weights)\n"
         "  --multiscale           start from the same problem between "
         "farthest\n"
         "                         points of each side (Euclidean, or the "
         "matrix's\n"
         "                         distances), its plan spread over each "
         "point's\n"
         "                         nearest one (an N x K plan)\n"
         "  --n-coarse C           its points a side (default max(min(500, "
         "N/4, K/4), 10))\n"
         "  --seed S               (default 0)\n"
         "  --no-objective         skip the objective\n"
         "  --exact-objective-entries E\n"
         "                         the exact objective (an N x K plan) where "
         "N x K <= E\n"
         "                         (default 2^24), else an estimate\n"
         "  --objective-samples S  pairs drawn for the estimate (default "
         "2048)\n"
         "  --exact-iterations N   then N exact entropic GW steps from the "
         "plan (its exact\n"
         "                         linearised cost; N x K at most "
         "the entries above)\n"
         "  --polish-anchors P     after the sampled iterations, one from "
         "their plan with P\n"
         "                         anchors, no momentum and the last epsilon, "
         "whose plan is\n"
         "                         returned (0: none; default 8 x M, at most "
         "what CUDA's\n"
         "                         specialised solves take; none with "
         "--exact-iterations,\n"
         "                         which, given P, start from its plan; "
         "none with\n"
         "                         --coupling-rank)\n"
         "  --dense-cost-entries E each solve's sampled cost formed as an N x "
         "K array\n"
         "                         where N x K <= E (0: always low-rank; "
         "default 2^24\n"
         "                         where the low-rank solves would run on "
         "portable\n"
         "                         kernels, 0 on CUDA's specialised ones)\n"
         "  --coupling-rank R      low-rank couplings of rank R instead of "
         "Sinkhorn\n"
         "                         solves (TorchGW's sampled_lowrank_gw; "
         "balanced)\n"
         "  --coupling-iterations N  their mirror steps a solve (default 5)\n"
         "  --dykstra-iterations N   Dykstra iterations a step (default 50)\n"
         "  --dtype NAME           float32 (default) or float64\n"
         "  --threads N            OpenMP threads (default: Kokkos')\n"
         "  -o, --output FILE      the plan, N x K (.npy or .csv)\n"
         "  --matching FILE        argmax_k of each plan row (.npy or .csv)\n"
         "  -h, --help             this help\n"
         "\n"
         "Exit status: 0 when converged or not (see 'converged'); 2 for bad "
         "usage or\n"
         "input. Files are written whole or not at all.\n";
}

int run_gw(const std::vector<std::string>& arguments) {
  const ParsedOptions parsed(arguments, {{"--source"},
                                         {"--target"},
                                         {"--mode"},
                                         {"--k"},
                                         {"--landmarks"},
                                         {"--shortest-paths"},
                                         {"--source-weights"},
                                         {"--target-weights"},
                                         {"--anchors"},
                                         {"--alpha"},
                                         {"--epsilon"},
                                         {"--max-iterations"},
                                         {"--min-iterations"},
                                         {"--tolerance"},
                                         {"--sinkhorn-iterations"},
                                         {"--sinkhorn-tolerance"},
                                         {"--early-sinkhorn-iterations"},
                                         {"--semi-relaxed"},
                                         {"--relax-source"},
                                         {"--restarts"},
                                         {"--restart-iterations"},
                                         {"--lambda-ema-beta"},
                                         {"--fgw-alpha"},
                                         {"--linear-cost"},
                                         {"--source-features"},
                                         {"--target-features"},
                                         {"--initial-plan"},
                                         {"--multiscale", false},
                                         {"--n-coarse"},
                                         {"--objective-samples"},
                                         {"--exact-objective-entries"},
                                         {"--exact-iterations"},
                                         {"--polish-anchors"},
                                         {"--dense-cost-entries"},
                                         {"--coupling-rank"},
                                         {"--coupling-iterations"},
                                         {"--dykstra-iterations"},
                                         {"--seed"},
                                         {"--no-objective", false},
                                         {"--dtype"},
                                         {"--threads"},
                                         {"--output", true, "-o"},
                                         {"--matching"}});
  const std::string source = parsed.required("--source");
  const std::string target = parsed.required("--target");
  const std::string mode_name =
      parsed
          .choice("--mode", {"dijkstra", "landmark", "geodesic", "euclidean",
                             "precomputed", "sqeuclidean", "cosine"})
          .value_or("dijkstra");
  const GwDistanceMode mode =
      mode_name == "dijkstra"      ? GwDistanceMode::dijkstra
      : mode_name == "landmark"    ? GwDistanceMode::landmark
      : mode_name == "geodesic"    ? GwDistanceMode::geodesic
      : mode_name == "euclidean"   ? GwDistanceMode::euclidean
      : mode_name == "sqeuclidean" ? GwDistanceMode::sqeuclidean
      : mode_name == "cosine"      ? GwDistanceMode::cosine
                                   : GwDistanceMode::precomputed;
  const int k = int(parsed.integer_at_least("--k", 1).value_or(30));
  const int landmarks =
      int(parsed.integer_at_least("--landmarks", 1).value_or(50));
  GwOptions options;
  const std::string paths =
      parsed.choice("--shortest-paths", {"automatic", "host", "device"})
          .value_or("automatic");
  options.shortest_paths = paths == "device" ? ShortestPaths::device
                           : paths == "host" ? ShortestPaths::host_dijkstra
                                             : ShortestPaths::automatic;
  options.anchors = int(parsed.integer_at_least("--anchors", 1).value_or(50));
  options.alpha = parsed.positive_number("--alpha").value_or(0.9);
  if (options.alpha > 1) throw usage_error("--alpha must be in (0, 1]");
  options.epsilon = parsed.positive_number("--epsilon").value_or(1e-3);
  options.max_iterations =
      int(parsed.integer_at_least("--max-iterations", 1).value_or(500));
  options.min_iterations =
      int(parsed.integer_at_least("--min-iterations", 0).value_or(50));
  options.tolerance = parsed.number("--tolerance").value_or(0.05);
  options.sinkhorn_iterations =
      int(parsed.integer_at_least("--sinkhorn-iterations", 1).value_or(10));
  options.sinkhorn_tolerance =
      parsed.number("--sinkhorn-tolerance").value_or(1e-3);
  options.early_sinkhorn_iterations = int(
      parsed.integer_at_least("--early-sinkhorn-iterations", 0).value_or(-1));
  if (auto rho = parsed.positive_number("--semi-relaxed")) options.rho_b = *rho;
  if (auto rho = parsed.positive_number("--relax-source")) options.rho_a = *rho;
  options.restarts = int(parsed.integer_at_least("--restarts", 1).value_or(1));
  options.restart_iterations =
      int(parsed.integer_at_least("--restart-iterations", 0).value_or(0));
  options.fused_alpha = parsed.positive_number("--fgw-alpha").value_or(0);
  options.cost_ema_beta = parsed.number("--lambda-ema-beta").value_or(0);
  if (!(options.cost_ema_beta >= 0 && options.cost_ema_beta <= 1))
    throw usage_error("--lambda-ema-beta must be in [0, 1]");
  options.objective_samples =
      int(parsed.integer_at_least("--objective-samples", 2).value_or(2048));
  options.exact_objective_entries =
      parsed.integer_at_least("--exact-objective-entries", 0)
          .value_or(std::int64_t(1) << 24);
  options.exact_iterations =
      int(parsed.integer_at_least("--exact-iterations", 0).value_or(0));
  options.polish_anchors =
      int(parsed.integer_at_least("--polish-anchors", 0).value_or(-1));
  options.dense_cost_entries =
      parsed.integer_at_least("--dense-cost-entries", 0).value_or(-1);
  options.coupling_rank =
      int(parsed.integer_at_least("--coupling-rank", 1).value_or(0));
  options.coupling_iterations =
      int(parsed.integer_at_least("--coupling-iterations", 1).value_or(5));
  options.dykstra_iterations =
      int(parsed.integer_at_least("--dykstra-iterations", 1).value_or(50));
  if (options.fused_alpha > 1)
    throw usage_error("--fgw-alpha must be in (0, 1]");
  options.seed =
      std::uint64_t(parsed.integer_at_least("--seed", 0).value_or(0));
  const bool objective = !parsed.has("--no-objective");
  const std::string dtype =
      parsed.choice("--dtype", {"float32", "float64"}).value_or("float32");
  const int threads = int(parsed.integer_at_least("--threads", 1).value_or(0));
  bool const has_linear = parsed.has("--linear-cost") ||
                          parsed.has("--source-features") ||
                          parsed.has("--target-features");
  if (has_linear != (options.fused_alpha > 0))
    throw usage_error(has_linear ? "a linear cost needs --fgw-alpha"
                                 : "--fgw-alpha needs --linear-cost or "
                                   "--source-features and --target-features");
  // Outputs are checked (extension, directory) before any work is done.
  std::unique_ptr<OutputFile> plan_file, matching_file;
  if (auto p = parsed.text("--output"))
    plan_file = std::make_unique<OutputFile>("--output", *p);
  if (auto p = parsed.text("--matching"))
    matching_file = std::make_unique<OutputFile>("--matching", *p);

  const SeriesSet x = read_points("--source", source);
  const SeriesSet y = read_points("--target", target);
  std::optional<std::vector<double>> a, b;
  if (auto p = parsed.text("--source-weights"))
    a = read_weights("--source-weights", *p, x.count);
  if (auto p = parsed.text("--target-weights"))
    b = read_weights("--target-weights", *p, y.count);
  LinearInput linear;
  if (auto p = parsed.text("--linear-cost"))
    linear.matrix = read_pair_matrix("--linear-cost", *p, x.count, y.count);
  std::optional<SeriesSet> initial;
  if (auto p = parsed.text("--initial-plan")) {
    initial = read_pair_matrix("--initial-plan", *p, x.count, y.count);
    options.warm_start = true;
  }
  int coarse_points = 0;
  if (parsed.has("--multiscale")) {
    if (initial)
      throw usage_error(
          "give --initial-plan or --multiscale, not both (--multiscale makes "
          "the initial plan)");
    coarse_points = int(parsed.integer_at_least("--n-coarse", 1)
                            .value_or(default_coarse_points(
                                std::int64_t(x.count), std::int64_t(y.count))));
    if (std::size_t(coarse_points) >= std::min(x.count, y.count))
      throw usage_error("--n-coarse (" + std::to_string(coarse_points) +
                        ") must be below the source's and the target's "
                        "points (" +
                        std::to_string(x.count) + " and " +
                        std::to_string(y.count) + ")");
  } else if (parsed.has("--n-coarse")) {
    throw usage_error(
        "--n-coarse is the size of --multiscale's coarse "
        "problem: give it with --multiscale");
  }
  if (auto p = parsed.text("--source-features"))
    linear.source_features = read_points("--source-features", *p);
  if (auto p = parsed.text("--target-features"))
    linear.target_features = read_points("--target-features", *p);
  if (bool(linear.source_features) != bool(linear.target_features))
    throw usage_error("--source-features and --target-features go together");
  if (linear.source_features &&
      (linear.source_features->count != x.count ||
       linear.target_features->count != y.count ||
       linear.source_features->length != linear.target_features->length))
    throw usage_error(
        "--source-features and --target-features need a row per point "
        "and the same number of columns (got " +
        std::to_string(linear.source_features->count) + " x " +
        std::to_string(linear.source_features->length) + " and " +
        std::to_string(linear.target_features->count) + " x " +
        std::to_string(linear.target_features->length) + " for " +
        std::to_string(x.count) + " and " + std::to_string(y.count) +
        " points)");
  if (linear.matrix && linear.source_features)
    throw usage_error(
        "give --linear-cost or --source-features/--target-features, not "
        "both");

  GwOutcome out;
  double seconds = 0;
  {
    const KokkosScope kokkos(threads);
    auto const start = std::chrono::steady_clock::now();
    bool const plan = bool(plan_file), matching = bool(matching_file);
    out =
        dtype == "float32"
            ? solve<float>(x, y, a, b, linear, initial, mode, k, landmarks,
                           coarse_points, options, plan, matching, objective)
            : solve<double>(x, y, a, b, linear, initial, mode, k, landmarks,
                            coarse_points, options, plan, matching, objective);
    seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
  }
  if (plan_file) {
    plan_file->write_values(out.plan, dtype == "float32", x.count, y.count);
    plan_file->close();
  }
  if (matching_file) {
    matching_file->write(out.matching.data(), out.matching.size(), 1,
                         {out.matching.size()});
    matching_file->close();
  }
  JsonLine json;
  json.add("command", std::string("gw"))
      .add("n_source", x.count)
      .add("n_target", y.count)
      .add("mode", mode_name)
      .add("dtype", dtype)
      .add("iterations", out.iterations)
      .add("converged", out.converged)
      .add("last_change", out.last_change)
      .add("final_epsilon", out.final_epsilon)
      .add("source_scale", out.source_scale)
      .add("target_scale", out.target_scale)
      .add("objective", objective ? std::optional<double>(out.objective)
                                  : std::optional<double>())
      .add("objective_error", objective
                                  ? std::optional<double>(out.objective_error)
                                  : std::optional<double>())
      .add("fgw_alpha", options.fused_alpha)
      .add("lambda_ema_beta", options.cost_ema_beta)
      .add("exact_iterations", options.exact_iterations)
      .add("polish_anchors", out.polish_anchors)
      .add("dense_solves", out.dense_solves)
      .add("coupling_rank", options.coupling_rank)
      .add("linear_objective", objective && has_linear
                                   ? std::optional<double>(out.linear_objective)
                                   : std::optional<double>())
      .add("seed", std::int64_t(out.seed))
      .add("restart_iterations", options.restart_iterations)
      .add("restart_objectives", out.restart_objectives)
      .add("coarse_points", coarse_points)
      .add("joined_components", out.joined_components)
      .add("seconds", seconds, "%.6g");
  std::fputs(json.str().c_str(), stdout);
  return 0;
}

}  // namespace softwave::cli
