#pragma once
// The Python extension's bridge to the C++ library. The nanobind glue
// (module.cpp) turns framework arrays into Borrowed descriptors and calls
// these functions; they pick the Kokkos execution space from the arrays'
// device, wrap the memory in unmanaged views (zero copy) and call
// softwave. Nothing here includes Kokkos, so the glue compiles with the host
// compiler even in CUDA builds.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "array_kinds.hpp"

namespace softwave::python {

// A C-contiguous array owned by Python (numpy, torch, jax); `data` is null
// for an argument that was not given.
struct Borrowed {
  const char* name = "";  // the Python argument's name, for errors
  void* data = nullptr;
  DType dtype = DType::other;
  Device device = Device::cpu;
  int device_id = 0;
  std::vector<std::int64_t> shape;

  bool given() const { return data != nullptr; }
};

// The Soft-DTW options of one call, plus the CUDA stream (cudaStream_t as an
// integer, 0 = the legacy default stream) that CUDA work is queued on.
struct Settings {
  double gamma = 1.0;
  std::string cost = "sqeuclidean";  // sqeuclidean, l1 or cosine
  std::int64_t band = -1;            // < 0: no band
  std::string kernel = "automatic";  // automatic, portable or specialised
  bool check_values = true;          // SoftDTWOptions::check_values
  std::uintptr_t stream = 0;
};

// values (B,) and, where given, grad_x (B,N,d), grad_y (B,M,d), alignment
// (B,N,M) scaled by nothing, grad_output (B,); divergence picks the
// Soft-DTW divergence. lengths_x/lengths_y: int32 (B,).
void soft_dtw(const Settings& settings, const Borrowed& x, const Borrowed& y,
              const Borrowed& values, const Borrowed& grad_x,
              const Borrowed& grad_y, const Borrowed& alignment,
              const Borrowed& grad_output, const Borrowed& lengths_x,
              const Borrowed& lengths_y, bool divergence);

// Soft-DTW on a (B,N,M) cost tensor; grad_cost (B,N,M) = E · grad_output.
void soft_dtw_cost(const Settings& settings, const Borrowed& cost,
                   const Borrowed& values, const Borrowed& grad_cost,
                   const Borrowed& grad_output, const Borrowed& lengths_x,
                   const Borrowed& lengths_y);

// matrix (B1,B2) of Soft-DTW values or divergences.
void pairwise(const Settings& settings, const Borrowed& x, const Borrowed& y,
              const Borrowed& matrix, const Borrowed& lengths_x,
              const Borrowed& lengths_y, bool divergence);

// Hard DTW values (B,) and warping paths: path int32 (B, N+M-1, 2),
// path_length int32 (B,).
void dtw_path(const Settings& settings, const Borrowed& x, const Borrowed& y,
              const Borrowed& values, const Borrowed& path,
              const Borrowed& path_length, const Borrowed& lengths_x,
              const Borrowed& lengths_y);

// The k nearest references (hard DTW, sqeuclidean or l1) of every query:
// indices int64 (B1, k) and distances (B1, k) of the value type,
// softwave::nearest_neighbours; returns its counts by name (pairs, pruned,
// pruned_reverse, abandoned, completed).
std::map<std::string, std::int64_t> nearest_neighbours(
    const Settings& settings, const Borrowed& queries,
    const Borrowed& references, const Borrowed& indices,
    const Borrowed& distances, const Borrowed& lengths_x,
    const Borrowed& lengths_y);

struct BarycenterSettings {
  std::string method = "lbfgs";  // lbfgs or adam
  int max_iter = 100;
  double tol = 1e-5;
  int history = 10;
  double learning_rate = 1e-2;
};

struct BarycenterResult {
  int iterations = 0;
  int evaluations = 0;
  double objective = 0.0;
  bool converged = false;
};

// Soft-DTW barycenter of X (B,N,d) into z (L,d) (read as the start);
// weights (B,) and lengths int32 (B,) optional.
BarycenterResult barycenter(const Settings& settings,
                            const BarycenterSettings& optimiser,
                            const Borrowed& X, const Borrowed& z,
                            const Borrowed& weights, const Borrowed& lengths);

// Entropic optimal transport (softwave/sinkhorn.hpp). The options of one
// call, as SinkhornOptions, plus the point cost, the samples' seed and the
// CUDA stream.
struct OTSettings {
  double epsilon = 0.05;
  bool epsilon_relative = false;
  double epsilon_scaling = 0;
  double rho_a = 1.0 / 0.0;
  double rho_b = 1.0 / 0.0;
  int max_iterations = 1000;
  double tolerance = 1e-6;
  int check_every = 10;
  bool warm_start = false;
  bool check_values = true;
  std::string cost = "sqeuclidean";  // or half_sqeuclidean
  std::string kernel = "automatic";  // automatic, portable or specialised
  std::uint64_t seed = 0;
  std::uintptr_t stream = 0;
};

// The arrays of one call by their names in sinkhorn.hpp (x, y | cost | u,
// v, p, q; a, b; f, g; value, transport_cost, marginal_error, iterations,
// converged; grad_*; v_apply, plan_v, u_apply, plan_t_u, row_argmax,
// row_samples, plan; values for the divergence). The cost form is the one
// whose arrays are given. operation: "solve", "gradients", "queries" or
// "divergence".
using OTArrays = std::map<std::string, Borrowed>;
void optimal_transport(const std::string& operation, const OTSettings& settings,
                       const OTArrays& arrays);

// The derivative of dense plans with respect to their costs
// (softwave::sinkhorn_plan_vjp): arrays plan (B, N, K), grad_plan and
// grad_cost of its shape; settings' epsilon (absolute), rho_a, rho_b,
// check_values and stream; mode "implicit" or "unrolled".
struct PlanVjpReport {
  int iterations = 0;
  double residual = 0;
  bool converged = true;
};
PlanVjpReport plan_vjp(const OTSettings& settings, const std::string& mode,
                       int iterations, double tolerance,
                       const OTArrays& arrays);

// Sampled Gromov–Wasserstein (softwave/gw.hpp) with TorchGW's distance
// modes: "precomputed" (source and target are (N, N), (K, K) distance
// matrices), "euclidean" (they are points; Euclidean distances),
// "landmark" (points: a k-NN graph each, then n_landmarks farthest-point
// landmarks' shortest paths as coordinates) and "dijkstra" (points: a
// k-NN graph each, shortest paths from each iteration's anchors).
struct GwSettings {
  std::string distance_mode = "dijkstra";
  int k = 30;
  int n_landmarks = 50;
  int anchors = 50;
  double alpha = 0.9;
  int max_iterations = 500;
  int min_iterations = 50;
  double tolerance = 0.05;
  int check_every = 5;
  int check_rows = 1024;
  double epsilon = 1e-3;
  double rho_a = 1.0 / 0.0;
  double rho_b = 1.0 / 0.0;
  int sinkhorn_iterations = 10;
  double sinkhorn_tolerance = 1e-3;
  int early_sinkhorn_iterations = -1;  // GwOptions::early_sinkhorn_iterations
  bool mixed_precision = true;
  std::uint64_t seed = 0;
  int restarts = 1;
  int restart_iterations = 0;  // GwOptions::restart_iterations
  double fused_alpha = 0;      // GwOptions::fused_alpha
  double cost_ema_beta = 0;    // GwOptions::cost_ema_beta
  int exact_iterations = 0;    // GwOptions::exact_iterations
  int polish_anchors = -1;     // GwOptions::polish_anchors (-1: automatic)
  // GwOptions::coupling_rank (0: Sinkhorn solves) and its iterations.
  int coupling_rank = 0;
  double coupling_step = 1;
  int coupling_iterations = 5;
  int dykstra_iterations = 50;
  double dykstra_tolerance = 1e-7;
  bool warm_start = false;  // GwOptions::warm_start: plan is read
  // > 0: multiscale_start with that many coarse points makes the warm
  // start (plan, then read), < 0: with default_coarse_points; the arrays
  // source_points and target_points, where given, are the points it
  // samples.
  int multiscale_points = 0;
  std::int64_t exact_objective_entries = std::int64_t(1) << 24;
  std::int64_t dense_cost_entries = -1;  // automatic
  int objective_samples = 2048;
  bool check_values = true;
  bool compute_objective = true;
  std::string kernel = "automatic";  // automatic, portable or specialised
  std::string shortest_paths = "automatic";  // automatic, host or device
  std::uintptr_t stream = 0;
};

// What GwResult reports beside the plan and matching.
struct GwReport {
  int iterations = 0;
  bool converged = false;
  std::uint64_t seed = 0;
  double objective = 0, objective_error = 0, linear_objective = 0,
         linear_objective_error = 0, last_change = 0, source_scale = 0,
         target_scale = 0, final_epsilon = 0;
  double last_plan_weight = 0;  // GwResult::last_plan_weight
  std::vector<double> changes;
  std::vector<double> restart_objectives;
  std::vector<int> source_anchors, target_anchors;
  int joined_components = 0;  // edges the k-NN graphs needed, both sides
  bool dense_solves = false;  // GwResult::dense_solves
  int polish_anchors = 0;     // GwResult::polish_anchors
};

// arrays: source, target (as the mode says), a (N,), b (K,) (absent:
// uniform), fused GW's linear cost as linear (N, K) or source_features
// (N, e) and target_features (K, e) (absent: none), plan (N, K),
// last_plan (N, K) and matching int32 (N,) (absent: not computed).
GwReport gromov_wasserstein(const GwSettings& settings, const OTArrays& arrays);

// The symmetrised k-NN graph of arrays' "points" (N, d), joined into one
// component (softwave/graph.hpp), in compressed rows on the host.
struct KnnGraphReport {
  std::vector<std::int64_t> offsets;  // N + 1
  std::vector<int> targets;
  std::vector<double> lengths;
  int joined_components = 0;
};
KnnGraphReport knn_graph(const OTArrays& arrays, int k, std::uintptr_t stream);

// DEER (softwave/deer.hpp) for PyTorch's cells. operation "forward":
// arrays x (B, T, m), y0 (B, n), lengths int32 (B,), weight_ih, weight_hh,
// bias_ih, bias_hh, y (B, T, n; read as the start with warm_start),
// iterations and path int32 (B,). "gradients": the same inputs, y (the
// states), grad_y, and the outputs grad_x, grad_y0, grad_weight_ih,
// grad_weight_hh, grad_bias_ih, grad_bias_hh (each optional).
struct DeerSettings {
  std::string cell = "gru";          // elman, gru or lstm
  std::string method = "auto";       // auto, deer or sequential
  std::string jacobian = "full";     // full or diagonal
  std::string kernel = "automatic";  // automatic, portable or specialised
  double atol = 0, rtol = 0;         // <= 0 or NaN: the type's default
  bool atol_given = false, rtol_given = false;
  int max_iterations = 100;
  int chunk = 0;
  int start_warm_up = -1;  // DeerOptions::start_warm_up; < 0: unset
  double damping = 0;      // DeerOptions::damping
  int block_size = 2;      // DeerOptions::block_size
  std::string block_layout = "contiguous";  // or strided
  bool diagonal = false;                    // RnnWeights::diagonal_hh
  bool warm_start = false;
  bool check_values = true;
  int check_every = 1;  // DeerOptions::check_every
  std::uintptr_t stream = 0;
};
void deer_rnn(const std::string& operation, const DeerSettings& settings,
              const OTArrays& arrays);

// softwave/linear_recurrence.hpp. operation "forward": arrays a, b
// (rows, T), y0 (rows; optional), y (rows, T). "gradients": a, y0, y,
// grad_y and the outputs grad_b, grad_a and grad_y0 (the last two
// optional).
struct ScanSettings {
  bool reverse = false;
  std::string kernel = "automatic";  // automatic, portable or specialised
  bool check_values = true;
  std::uintptr_t stream = 0;
};
void linear_recurrence(const std::string& operation,
                       const ScanSettings& settings, const OTArrays& arrays);

// Kokkos' lifetime: initialize() on import (a no-op when the host program
// already did it), finalize() at interpreter exit.
void initialize();
void finalize();
// "OpenMP", "Cuda", ... : Kokkos' default execution space.
std::string default_space();
std::string host_space();
bool has_cuda();
// The CUDA device Kokkos runs on (-1 without CUDA).
int cuda_device();
// Waits for the work queued on the given stream (CUDA) or returns (host).
void synchronize(std::uintptr_t stream);

}  // namespace softwave::python
