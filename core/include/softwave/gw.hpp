#pragma once
// Sampled Gromov–Wasserstein (GW) between two metric spaces, on any Kokkos
// execution space, with the plan kept as the factors that define it.
//
// Source points i (N), target points k (K), intra-set distances D_X (N×N)
// and D_Y (K×K), weights a (N) and b (K). The GW problem (square loss) is
//   min_T Σ_ijkl (D_X(i,j) − D_Y(k,l))² T_ik T_jl  over couplings T of a, b.
// Each outer iteration t:
//  1. samples M anchor pairs (j_m, l_m) from the current plan T_{t−1};
//  2. gathers the anchors' distance columns X_im = D_X(i, j_m)/s_X and
//     Y_km = D_Y(k, l_m)/s_Y (s_X, s_Y: each side's largest distance among
//     the first iteration's anchor columns, fixed from then on, so that ε
//     means the same at every iteration and for any units);
//  3. solves entropic OT with the sampled GW cost
//       Λ_ik = mean_m X_im² + mean_m Y_km² − (2/M) Σ_m X_im Y_km,
//     which has rank M + 2: it goes to the low-rank Sinkhorn of
//     softwave/sinkhorn.hpp (u = mean X², v = mean Y², P = √(2/M) X,
//     Q = √(2/M) Y), or, where N×K is small (dense_cost_entries), is
//     formed once for a dense solve; warm-started from the last potentials,
//     at ε_t, annealed geometrically from ε to max(ε/10, min(5e-4, ε)) over
//     max_iterations (TorchGW's schedule; exact costs below: over
//     min_iterations);
//  4. mixes T_t = (1 − α) T_{t−1} + α π_t, from T_0 = a⊗b/Σb or the plan
//     given as a warm start (GwOptions::warm_start).
// The plan is never stored: T_t is the weighted sum of the recent solves'
// plans, each kept as its potentials and factors ((N + K)(M + 4) values);
// weights below `term_tolerance` are dropped (and the rest renormalised).
// Anchors are drawn from that mixture exactly: a term by its weight (times
// its mass where the source marginal is relaxed), then a row from a (from
// that term's row sums where relaxed) and a column from that term's row by
// Gumbel-max. Memory is O((N + K)·M·terms), never N×K, unless the dense
// plan or the exact objective is asked for.
//
// Stops once t >= min_iterations and the relative change
//   ‖T_t − T_{t−1}‖_F / ‖T_t‖_F <= tolerance
// (checked every check_every iterations from min_iterations on, both norms
// over check_rows rows spread evenly through the source) or at
// max_iterations. Relative, because ‖T‖_F itself shrinks like 1/√(NK) as a
// plan spreads: an absolute tolerance (TorchGW's) stops large problems
// before their plan has formed. Several restarts (seeds) in one call keep the
// plan with the lowest GW objective, so that a run ending in a reversed
// (mirror) matching is not returned when another restart found the forward one.
//
// Randomness is counter-based (seed, restart, iteration, anchor): the same
// seed gives the same anchors on every backend and thread count.
//
// Fused GW (GwLinearCost, GwOptions::fused_alpha = β > 0) adds a linear
// cost C between the two sets' features (Vayer et al. 2019, TorchGW's
// fgw_alpha with C_linear): each solve's cost is (1 − β)·Λ + β·C, with Λ
// the sampled GW cost above (normalised distances, so Λ is about 0 to 2:
// scale C to that range). C is a dense (N, K) matrix, which makes every
// solve dense (an N×K cost formed each iteration, beside the one given),
// or the squared Euclidean distances of features F (N, e) and G (K, e):
//   C_ik = ‖F_i‖² + ‖G_k‖² − 2 F_i·G_k,
// folded into the low-rank factors (rank M + e + 2), so that the N×K
// memory bound above holds for fused GW too.
//
// Embeddings: where both sides' distances are squared Euclidean distances
// of points (GwDistances::squared_coordinates, and so cosine distances),
// no anchors are drawn. Such a matrix has rank e + 2 (D = F Gᵀ, f_i =
// (‖z_i‖², 1, z_i), g_j = (1, ‖z_j‖², −2 z_j)), so the cost each solve
// would sample has an exact expectation that is low-rank too:
//   Λ_ik = (Σ_j X_ij² r_j + Σ_l Y_kl² c_l − 2 (X T Y)_ik) / μ
//        = (f_iᵀ R f_i / s_X² + f'_kᵀ C f'_k / s_Y²
//           − 2 f_iᵀ H f'_k / (s_X s_Y)) / μ,
// with r = T1, c = Tᵀ1, μ = Σ T and the small matrices R = G_Xᵀ diag(r) G_X,
// C = G_Yᵀ diag(c) G_Y, H = G_Xᵀ T G_Y, all linear in T: each mixture
// term's are kept (from one application of its plan to G_Y, O(NK(e + 2))),
// and the mixture's are their weighted sum. Each solve's cost is then POT's
// entropic GW cost (its linearised square loss) of T_{t−1}, of rank
// min(e_X, e_Y) + 2, with no sampling noise: the dense cosine distances of
// word-embedding matching, on which M sampled anchors fail, are matched as
// POT matches them, in O((N + K)·e) memory. The scales s_X, s_Y are still
// the largest distances to the first iteration's M anchors (ε means what it
// means for the same distances given as matrices); cost_ema_beta averages
// the iterations' exact costs. ε reaches its final value by iteration
// min_iterations (counted from 1; the first change check) rather than
// max_iterations and stays there: without sampling noise the plan settles
// at each ε, and the change test would otherwise stop while ε is still
// large, with a blurred plan (on a cosine matching at 300 points, a GW
// objective 66 times POT's instead of 3 % below it). Restarts differ only
// in the first iteration's anchors, the scales: without sampling they find
// nearly the same plan.
//
// GwSide (below) builds one side's distances from a single array in any
// of TorchGW's distance modes, as the Python and CLI front ends take them.
//
// Every kernel and allocation runs on the execution-space instance given
// first and is labelled softwave::gw::*. Calls fence it for the convergence
// checks and inside each solve's residual checks; with a graph side also
// each iteration, to read back the anchors its Dijkstra runs start from.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <softwave/errors.hpp>
#include <softwave/graph.hpp>
#include <softwave/kernel_choice.hpp>
#include <softwave/sinkhorn.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace softwave {

// One side's intra-set distances: exactly one of
//   matrix       (N, N) distances, symmetric, finite, >= 0 (precomputed:
//                shortest paths, diffusion distances, anything);
//   coordinates  (N, e): the distance of i and j is ‖z_i − z_j‖₂ (the
//                points themselves for Euclidean distances, or a landmark
//                embedding: each point's distances to e landmarks);
//   graph        shortest paths on a graph (softwave/graph.hpp), from each
//                iteration's anchors (TorchGW's "dijkstra" mode: M runs of
//                Dijkstra an iteration, on the host); the objective then
//                takes all N of them once (an N×N matrix).
//   squared_coordinates  (N, e): the distance of i and j is ‖z_i − z_j‖²
//                (squared Euclidean; cosine distances 1 − cos(x_i, x_j)
//                are those of z_i = x_i / (√2 ‖x_i‖)). Where both sides
//                are given so, every solve's cost is exact (above).
template <class T, class Space>
struct GwDistances {
  OTView2<const T, Space> matrix;
  OTView2<const T, Space> coordinates;
  const Graph* graph = nullptr;
  OTView2<const T, Space> squared_coordinates;
};

// The linear cost of fused GW: none (both empty), a matrix, or features on
// both sides (see above); finite values.
template <class T, class Space>
struct GwLinearCost {
  OTView2<const T, Space> matrix;           // (N, K)
  OTView2<const T, Space> source_features;  // (N, e)
  OTView2<const T, Space> target_features;  // (K, e)
};

struct GwOptions {
  // M >= 1: anchor pairs a iteration (with exact costs, the first
  // iteration's only, for the scales).
  int anchors = 50;
  double alpha = 0.9;        // momentum, in (0, 1]
  int max_iterations = 500;  // >= 1
  int min_iterations = 50;   // no stop before (min_iter_before_converge)
  // On the relative change (above); <= 0 runs them all. A sampled plan's
  // change never reaches zero: each iteration's M anchors are fresh, and
  // in TorchGW's scale task (M = 80) the relative change stays between
  // 0.03 and 0.15 once the plan has formed. 0.05 stops at the first check
  // that falls below it (there: 50 to 75 iterations, matchings with
  // ρ ≥ 0.9994 at 4k to 20k points).
  double tolerance = 0.05;
  int check_every = 5;    // >= 1: iterations between change checks
  int check_rows = 1024;  // rows the change is measured on (0: all)
  // > 0: ε at the first iteration (see above), TorchGW's: the solves' cost
  // is Λ of the distances divided by s_X and s_Y. POT's entropic GW (its
  // Sinkhorn cost is the gradient 2Λ of the distances as given) solves the
  // same problem at epsilon = 2·ε·s_X·s_Y; exact_iterations reach its plan.
  double epsilon = 1e-3;
  // KL penalties of the source and target marginals: infinity (kept) or
  // > 0. rho_b alone is the semi-relaxed problem; TorchGW's semi_relaxed
  // relaxes both (its rho_a = rho_b = 1 by default).
  double rho_a = INFINITY;
  double rho_b = INFINITY;
  // Each solve: at most sinkhorn_iterations, stopping once the row
  // marginals' L1 error (softwave::SinkhornOptions::tolerance, checked every
  // 10 iterations) is at most sinkhorn_tolerance: 0.1 % of the mass by
  // default. The warm-started solves of a noisy sampled cost need no more
  // (TorchGW's stop, a largest row error below 5e-4, ends its solves after
  // 10 iterations at these sizes; 20 here gave the same matchings in TorchGW's
  // scale task, at twice the time).
  int sinkhorn_iterations = 10;
  double sinkhorn_tolerance = 1e-3;
  // Sampled costs: the solves of the iterations before the last check_every
  // ahead of the first possible stop (iteration t, counted from 1, with
  // t + check_every <= min(min_iterations, max_iterations)) take at most
  // this many iterations: −1 (automatic) half of sinkhorn_iterations,
  // rounded up; 0 sinkhorn_iterations (no shorter solves). The plan is
  // still forming there and each solve is warm-started from the last, so
  // shorter solves cost less and lose nothing the later ones do not make
  // up; the solves the change checks see, and every one after, take
  // sinkhorn_iterations (five of ten throughout made the stop come later,
  // or never, on geodesic tasks; perf/RESULTS.md, "Shorter solves while the
  // plan forms").
  int early_sinkhorn_iterations = -1;
  // Where N·K is at most this, each solve forms the sampled cost densely
  // (one N×K array, N·K·M work once) and iterates on it: one exp a pair an
  // update instead of an M-long product. Above, the low-rank form (memory
  // O((N + K)·M)). 0: always low-rank. −1 (automatic): 2²⁴ where the
  // low-rank solves would run on the portable kernels (a CPU), 0 where they
  // take the CUDA-specialised ones, which are the faster there.
  std::int64_t dense_cost_entries = -1;
  // The low-rank solves' products p_i·q_j on tensor cores with 10-bit
  // mantissas (TF32's; scaled FP16 operands) where the CUDA-specialised
  // updates run them (SinkhornOptions::tf32_low_rank;
  // TorchGW's mixed_precision): their rounding, about 2⁻¹¹ of each product,
  // is far below the sampled cost's own error, the spread of its M
  // anchors' terms. No effect on other kernels, nor on exact costs
  // (embeddings), whose only error is rounding: there TF32 left a 5,000-point
  // cosine matching still changing by more than the tolerance after 500
  // iterations.
  bool mixed_precision = true;
  // The objective (GwResult::objective, and the restarts' choice) is exact
  // where N·K is at most this (it needs an N×K plan and O(N²K + NK²)
  // work), else estimated from objective_samples pairs drawn from the plan
  // (O(S²) distances; a graph side's from S Dijkstra runs), with its
  // standard error.
  std::int64_t exact_objective_entries = std::int64_t(1) << 24;
  int objective_samples = 2048;  // >= 2
  // After the sampled iterations, this many exact ones (>= 0): the plan P
  // made dense, then P ← the Sinkhorn plan of the exact linearised cost
  //   L_ik = (Σ_j X_ij² r_j + Σ_l Y_kl² c_l − 2 (X P Y)_ik) / μ
  // (X, Y the distances normalised as above, r = P1, c = Pᵀ1, μ = Σ P: the
  // sampled cost's expectation over anchors drawn from P; fused GW blends
  // it with C as before) at the last iteration's ε, with no momentum:
  // POT's entropic GW iteration, started from the sampled plan. Each takes
  // O(N²K + NK²) work and an N×K plan and cost, so it needs N·K <=
  // exact_objective_entries; each solve runs until sinkhorn_tolerance or
  // max(1000, sinkhorn_iterations) iterations. The plan, matching and
  // objective returned are the refined plan's.
  int exact_iterations = 0;
  // Sampled costs with Sinkhorn solves (not exact costs, not low-rank
  // couplings): after the last sampled iteration, one more from its plan
  // with this many anchors, momentum 1 and the last iteration's ε, whose
  // solve (warm-started from the last one's potentials) is the plan
  // returned; the restarts compare the plans so polished (a race's first
  // iterations are not). A sampled plan carries the noise of its last
  // solves' M anchors, and with momentum it mixes several of them, which
  // blurs it: at 1,000 × 1,250 (TorchGW's spiral task, M = 80, 7 seeds)
  // the plan as returned was −0.6 … +3.1 % from POT's entropic GW
  // objective at the same problem, after one such iteration with 128
  // anchors −0.7 … +1.3 %, with 640 −0.7 … +0.1 %; on an H100 with 128,
  // −0.8 … +0.9 % at 10,000 and 20,000 points a side (perf/RESULTS.md,
  // "Where the excess over POT comes from"). It costs one solve at that
  // rank, and (N + K)·polish_anchors values of memory beside the run's. The
  // solve stops as each iteration's does (sinkhorn_iterations,
  // sinkhorn_tolerance): at 1,000 × 1,250 (seed 0) its rows were 0.43 % of
  // the mass off (80 iterations reach 0.1 %, for an objective 0.15 %
  // higher), the unpolished mixture's 0.53 %.
  // 0: none; −1 (automatic): 8·M, but where the iterations' solves take
  // the specialised passes, no more than a solve that still takes them
  // (CUDA's: rank 128 with the features' e), and not below M; none where
  // exact_iterations > 0, which start from the plan and reach the exact
  // iteration's objective anyway (given explicitly, it runs before them).
  int polish_anchors = -1;
  // Mixture terms whose weight falls below this are dropped.
  double term_tolerance = 1e-6;
  // Low-rank couplings (TorchGW's sampled_lowrank_gw, Scetbon, Cuturi and
  // Peyré 2021): with coupling_rank = r > 0 each solve is not a Sinkhorn
  // solve but the coupling π = Q diag(1/g) Rᵀ of non-negative rank r
  // (Q 1 = a, R 1 = b, Qᵀ1 = Rᵀ1 = g >= 1e-10·Σa) that mirror descent
  // finds for ⟨C, π⟩ − ε H(Q, R, g): coupling_iterations steps (TorchGW's
  // lr_max_iter), each
  //   Q ← Q^(1−γε) exp(−γ C R diag(1/g)),  R ← R^(1−γε) exp(−γ Cᵀ Q diag(1/g)),
  //   g ← g^(1−γε) exp(γ diag(Qᵀ C R)/g²)
  // with the adaptive step γ = coupling_step/‖∇‖²_∞ (‖∇‖_∞ the largest
  // entry of the three gradients, C R diag(1/g) + ε log Q,
  // Cᵀ Q diag(1/g) + ε log R and −diag(Qᵀ C R)/g² + ε log g), then projected
  // back on those constraints by dykstra_iterations of Dykstra's alternating KL
  // projections (lr_dykstra_max_iter; stopped once the marginal error is at
  // most dykstra_tolerance·Σa). The low-rank cost never becomes N×K: C R
  // is u Σ_k R_k + (vᵀR) − P (Q_Cᵀ R), so a step costs O((N + K)·r·rank C)
  // (an N×K pass more with a dense C_linear). Each term of the plan is then
  // its (Q, R, g), O((N + K)·r); the next iteration's solve starts from the
  // last coupling (every restart from a fixed one: Q_ic ∝ a_i (1 + φ_ic),
  // φ_ic the fractional part of (i·r + c)·0.618…, R likewise, g = Σa/r).
  // Balanced problems of sampled costs only (TorchGW's too: no rho_a, rho_b;
  // not with embeddings' exact costs).
  // TorchGW also keeps γ >= 1/ε, which overshoots at small ε: at ε = 0.005
  // the transport cost of a 1-D coupling rose from the independent
  // coupling's 0.167 to 0.26 in 50 steps, and spiral → Swiss-roll plans
  // had 30 times the objective. coupling_step 1 matched 6 of 6 of those
  // runs (signed ρ >= 0.998), 10 reversed 4 of 6.
  int coupling_rank = 0;
  double coupling_step = 1;  // > 0
  int coupling_iterations = 5;
  int dykstra_iterations = 50;
  double dykstra_tolerance = 1e-7;
  // TorchGW's lambda_ema_beta: each solve's GW cost is an exponential
  // moving average of the iterations' sampled costs,
  //   Λ̄_t = (1 − β) Λ̄_{t−1} + β Λ_t,  Λ̄_0 = Λ_0,
  // which trades the variance of M fresh anchors for a bias that fades as
  // the plan settles (β in [0, 1]; 0 and 1: off, each solve its own Λ_t).
  // Every Λ_s is kept as its factors, so the average is a low-rank cost too:
  // the last W iterations' anchors, W the fewest whose left-out weight
  // (1 − β)^W is at most cost_ema_tolerance (at most kCostEmaWindow), their
  // weights renormalised once older ones are left out. The solves' rank,
  // their time and the plan's memory grow W-fold (W·M + e + 2); with β =
  // 0.5, W = 10 at the default tolerance. A fused GW's linear cost is the
  // same every iteration and is not averaged.
  double cost_ema_beta = 0;
  double cost_ema_tolerance = 1e-3;  // in (0, 1)
  std::uint64_t seed = 0;
  int restarts = 1;  // >= 1: seeds seed, seed + 1, ...
  // With restarts > 1, > 0: a race instead of whole restarts. Each seed
  // runs its first restart_iterations iterations (ε on the schedule of the
  // whole run; it only stops early), the seed whose plan then has the
  // lowest objective (as the restarts compare them below) is run again
  // from its start to the end, and its plan is returned: the same plan as
  // a single run of that seed. The orientation of a matching (forward or
  // reversed) is settled once the plan has formed, well before the end, so
  // this costs restarts·restart_iterations + one run's iterations instead
  // of restarts whole runs. 0 (or >= the iterations a run takes): every
  // restart runs to the end.
  int restart_iterations = 0;
  // Start from the plan in GwResult::plan (read; TorchGW's T_init) instead
  // of a⊗b/Σb: non-negative, finite, with mass (scaled to a's). Its
  // anchors are drawn from it (a row by its sum, then a column by its
  // entries); it stays a term of the mixture, N×K memory, until its
  // weight falls below term_tolerance. Every restart starts from it.
  bool warm_start = false;
  // β of fused GW, in [0, 1] (TorchGW's fgw_alpha): > 0 needs a linear
  // cost, and a linear cost needs β > 0. β = 1 is entropic OT with cost C,
  // iterated with the same momentum and annealing.
  double fused_alpha = 0;
  // Called on the host after each outer iteration's solve with the
  // restart (0 .. restarts − 1) and the iterations it has done (a progress
  // bar's hook: it is called once an iteration, the race's included);
  // empty: none.
  std::function<void(int restart, int iterations)> on_iteration;
  // Graph sides: the device memory (bytes, each side) that keeps the
  // anchors' shortest-path columns across iterations and restarts, so that
  // a node drawn again is not run again (TorchGW keeps 2,000 rows a side).
  // The least recently used make room; too small a budget for one
  // iteration's anchors (or 0) runs every anchor every iteration. Where
  // all N² distances fit and N is at most half of min_iterations · anchors
  // (or the objective needs them anyway), every node runs once up front
  // and the side is a matrix from then on. The plan is the same either way.
  std::int64_t graph_cache_bytes = std::int64_t(256) << 20;
  // Graph sides: how their shortest paths are found (softwave/graph.hpp).
  // With ShortestPaths::device the graph is copied to the instance once a
  // call and every iteration's runs stay there. The plan is the same
  // either way (the distances are).
  ShortestPaths shortest_paths = ShortestPaths::automatic;
  // Finite, non-negative distances and weights, checked (one fence).
  bool check_values = true;
  // The kernels of the Sinkhorn solves (softwave/kernel_choice.hpp).
  Kernel kernel = Kernel::automatic;
};

namespace impl {
// The rows x_i / (√2 ‖x_i‖) of `points` (N, e), whose squared Euclidean
// distances are the cosine distances 1 − cos(x_i, x_j); a zero row (no
// direction) is an error.
template <class Space, class T>
OTView2<T, Space> cosine_coordinates(const Space& space,
                                     const OTView2<const T, Space>& points);
}  // namespace impl

// TorchGW's distance modes, for front ends that take each side's data as
// one array: precomputed (an (N, N) distance matrix), euclidean (points,
// their Euclidean distances), landmark (points: a k-NN graph, then each
// point's shortest paths to farthest-point landmarks as coordinates),
// dijkstra (points: a k-NN graph, shortest paths from each iteration's
// anchors) and geodesic (points: a k-NN graph, then all its shortest paths
// as an (N, N) matrix, TorchGW's "precomputed" mode given points: N runs of
// Dijkstra once and N² memory, for graphs small enough that every
// iteration's anchors should not pay for their own runs), and the two
// whose costs are exact (above): sqeuclidean (points, their squared
// Euclidean distances) and cosine (points, 1 − cos of each pair; no point
// may be 0).
enum class GwDistanceMode {
  precomputed,
  euclidean,
  landmark,
  dijkstra,
  geodesic,
  sqeuclidean,
  cosine
};

// One side's distances made from its data as `mode` says, and what they
// are made of (graph, embedding), kept while the side lives: pass
// distances() to sampled_gw. Not copyable (the distances may point at the
// graph).
template <class T, class Space>
class GwSide {
 public:
  GwSide(const Space& space, const OTView2<const T, Space>& data,
         GwDistanceMode mode, int k = 30, int landmarks = 50,
         ShortestPaths shortest_paths = ShortestPaths::automatic) {
    if (mode == GwDistanceMode::precomputed) {
      distances_.matrix = data;
      return;
    }
    if (mode == GwDistanceMode::euclidean) {
      distances_.coordinates = data;
      return;
    }
    if (mode == GwDistanceMode::sqeuclidean) {
      distances_.squared_coordinates = data;
      return;
    }
    if (mode == GwDistanceMode::cosine) {
      computed_ = impl::cosine_coordinates(space, data);
      distances_.squared_coordinates = computed_;
      return;
    }
    graph_ = softwave::knn_graph(space, data, k);
    if (mode == GwDistanceMode::dijkstra) {
      distances_.graph = &graph_;
      return;
    }
    std::int64_t const n = data.extent(0);
    if (mode == GwDistanceMode::geodesic) {
      computed_ = OTView2<T, Space>(
          Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                             std::string("softwave::gw::geodesic_distances")),
          n, n);
      std::vector<int> every_node(n);
      for (std::int64_t i = 0; i < n; ++i) every_node[i] = int(i);
      softwave::graph_distances(space, graph_, every_node, computed_,
                                shortest_paths);
      distances_.matrix = computed_;
      return;
    }
    computed_ = OTView2<T, Space>(
        Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                           std::string("softwave::gw::landmark_embedding")),
        n, landmarks);
    softwave::landmark_embedding(space, graph_, computed_, shortest_paths);
    distances_.coordinates = computed_;
  }
  GwSide(const GwSide&) = delete;
  GwSide& operator=(const GwSide&) = delete;

  const GwDistances<T, Space>& distances() const { return distances_; }
  // Edges added to join the k-NN graph's components (0 without a graph).
  int joined_components() const { return graph_.joined_components; }

 private:
  Graph graph_;
  // The landmark embedding, geodesic matrix or cosine mode's unit points.
  OTView2<T, Space> computed_;
  GwDistances<T, Space> distances_;
};

// Outputs. Every view is optional (empty: not computed); the scalars are
// always filled.
template <class T, class Space>
struct GwResult {
  OTView2<T, Space> plan;        // (N, K): the dense plan T
  OTView1<int, Space> matching;  // (N,): argmax_k T_ik
  // Optional (N, K): the last solve's own plan π_t (after exact_iterations,
  // the refined plan), with last_plan_weight its weight w in the returned
  // plan T = w·π_t + (the earlier terms) (w = α renormalised over the terms
  // kept, or 1 after exact_iterations). What differentiating T through its
  // last Sinkhorn solve needs (TorchGW's differentiable mode, which holds
  // T_{t−1} fixed): π_t's cost is (1 − β)Λ_t + β·C, so
  //   ∂⟨G, T⟩/∂C = w·β·sinkhorn_plan_vjp(π_t, G)
  // at ε = final_epsilon and the problem's rho_a, rho_b. (With
  // coupling_rank > 0, π_t is a low-rank coupling, not a Sinkhorn plan: that
  // derivative does not apply.)
  OTView2<T, Space> last_plan;
  double last_plan_weight = NAN;
  // The GW objective of the returned plan with the distances as given
  // (unnormalised), accumulated in float64: exact (an N×K plan, the `plan`
  // view or a temporary one, and O(N²K + NK²) work; a side given by
  // coordinates has its distances formed once, N² doubles, where N² is at
  // most exact_objective_entries) or, above
  // GwOptions::exact_objective_entries, the unbiased estimate from pairs
  // drawn from the plan (no N×K memory); NaN when compute_objective is
  // false and restarts == 1. With exact costs (embeddings, not fused) it
  // is exact at any size: each mixture term's plan applied to the distance
  // factors, the plan evaluated a block at a time and its products summed
  // in float64: O(NK·(terms·rank + e)), no N×K array. objective_error: the
  // estimate's standard error (0 when exact).
  bool compute_objective = true;
  double objective = NAN;
  double objective_error = NAN;
  // Fused GW: ⟨C, T⟩ of the returned plan, computed with the objective.
  // Restarts keep the lowest (1 − β)·GW + β·⟨C, T⟩, GW with the first
  // restart's normalised distances (the units of the solves' cost).
  double linear_objective = NAN;
  double linear_objective_error = NAN;  // as objective_error
  int iterations = 0;                   // outer iterations of the kept restart
  bool converged = false;               // it stopped on the tolerance
  std::uint64_t seed = 0;               // its seed
  // With restarts > 1, what chose among them: each seed's criterion (the
  // objective, or the fused one above) at the end of its run, or, in a race
  // (GwOptions::restart_iterations), after its first restart_iterations
  // iterations. Empty with one restart.
  std::vector<double> restart_objectives;
  double last_change = NAN;     // the relative change at its last check
  std::vector<double> changes;  // every check's relative change
  // The normalisation of each side's distances (s_X, s_Y above) and the
  // last iteration's anchors (j_m, l_m): what its sampled cost was made of
  // (the polishing iteration's where there is one; with exact costs, the
  // first iteration's, which made the scales).
  double source_scale = NAN, target_scale = NAN;
  std::vector<int> source_anchors, target_anchors;
  double final_epsilon = NAN;  // ε of the last iteration
  // The anchors of the polishing iteration (GwOptions::polish_anchors; 0:
  // none), which is not counted in `iterations`.
  int polish_anchors = 0;
  // Whether its solves iterated on the sampled cost formed as an N×K array
  // (GwOptions::dense_cost_entries) rather than on its factors.
  bool dense_solves = false;
};

// Marginals a (N) and b (K): non-negative, finite, positive mass; empty
// for uniform. Balanced problems need equal masses (b is used as given).
template <class T, class Space>
struct GwMarginals {
  OTView1<const T, Space> a;
  OTView1<const T, Space> b;
};

// The most iterations the cost average keeps (GwOptions::cost_ema_beta).
constexpr int kCostEmaWindow = 64;

// The restarts multiscale_start's coarse problem takes at least.
constexpr int kMultiscaleRestarts = 4;

// TorchGW's default number of multiscale coarse points for N and K points:
// max(min(500, N/4, K/4), 10).
inline int default_coarse_points(std::int64_t n, std::int64_t k) {
  std::int64_t const quarter = std::min(n, k) / 4;
  return int(std::max<std::int64_t>(std::min<std::int64_t>(500, quarter), 10));
}

namespace impl {
template <class Space, class T>
void multiscale_start(const Space& space, const OTView2<const T, Space>& source,
                      const OTView2<const T, Space>& target,
                      GwDistanceMode mode, int k, int landmarks,
                      const GwLinearCost<T, Space>& linear,
                      const GwMarginals<T, Space>& marginals,
                      const GwOptions& options, int coarse_points,
                      const OTView2<T, Space>& plan,
                      const OTView2<const T, Space>& source_points,
                      const OTView2<const T, Space>& target_points);
}  // namespace impl

// TorchGW's multiscale start: the same problem between `coarse_points`
// farthest points of each side (farthest-point sampling from point 0,
// Euclidean between the points, or read from a precomputed side's distance
// matrix), solved with M capped at max(coarse_points / 2, 10), k and the
// landmarks at the coarse points' number, at least kMultiscaleRestarts
// restarts (a reversed coarse matching would pass to the fine solve),
// uniform weights and the same options otherwise; its plan spread over each
// point's nearest chosen point (at least 1e-30 an entry) and scaled to the
// marginals by 10 rounds of row and column scaling, into `plan` (N, K). Pass
// that plan as the warm start (result.plan, options.warm_start). `source` and
// `target` are each side's data as GwSide takes them in `mode`; `source_points`
// and `target_points`, where given, are the points to sample instead (for a
// precomputed side whose points are known). 1 <= coarse_points < N, K.
template <class Space, class T>
void multiscale_start(const Space& space, const OTView2<const T, Space>& source,
                      const OTView2<const T, Space>& target,
                      GwDistanceMode mode, int k, int landmarks,
                      const GwLinearCost<T, Space>& linear,
                      const GwMarginals<T, Space>& marginals,
                      const GwOptions& options, int coarse_points,
                      const OTView2<T, Space>& plan,
                      const OTView2<const T, Space>& source_points = {},
                      const OTView2<const T, Space>& target_points = {}) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "softwave::multiscale_start: float or double data");
  impl::multiscale_start<Space, T>(space, source, target, mode, k, landmarks,
                                   linear, marginals, options, coarse_points,
                                   plan, source_points, target_points);
}

namespace impl {
template <class Space, class T>
void sampled_gw(const Space& space, const GwDistances<T, Space>& source,
                const GwDistances<T, Space>& target,
                const GwLinearCost<T, Space>& linear,
                const GwMarginals<T, Space>& marginals,
                GwResult<T, Space>& result, const GwOptions& options);
}  // namespace impl

// Sampled GW between `source` and `target` (float or double).
template <class Space, class T>
void sampled_gw(const Space& space, const GwDistances<T, Space>& source,
                const GwDistances<T, Space>& target,
                const GwMarginals<T, Space>& marginals,
                GwResult<T, Space>& result, const GwOptions& options = {}) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "softwave::sampled_gw: float or double data");
  impl::sampled_gw<Space, T>(space, source, target, {}, marginals, result,
                             options);
}

// Fused GW: sampled GW with the linear cost `linear` of weight
// options.fused_alpha.
template <class Space, class T>
void sampled_gw(const Space& space, const GwDistances<T, Space>& source,
                const GwDistances<T, Space>& target,
                const GwLinearCost<T, Space>& linear,
                const GwMarginals<T, Space>& marginals,
                GwResult<T, Space>& result, const GwOptions& options) {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "softwave::sampled_gw: float or double data");
  impl::sampled_gw<Space, T>(space, source, target, linear, marginals, result,
                             options);
}

}  // namespace softwave
