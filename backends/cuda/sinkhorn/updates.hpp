#pragma once
// The CUDA-specialised Sinkhorn half-iteration for float point clouds with
// squared-Euclidean costs (d <= max_features) and for low-rank costs C =
// u 1ᵀ + 1 vᵀ − P Qᵀ (rank <= max_rank): f_i ← −λ ε LSE_j(g_j/ε + log b_j −
// C_ij/ε) for every row of every active problem.
//
// Its floor is the special-function unit: one exp2 per pair, 16 a clock
// per SM, against 128 FP32 instructions. A pair costs d + 1 FMA-pipe
// instructions to form its exponent, one exp2 and one add, so below d ≈ 6
// the exp2s bound the kernel. To keep it at one exp2 a pair:
//   - costs are formed as C_ij = c(‖x_i‖² + ‖y_j‖² − 2 x_i·y_j), with
//     everything per column (c‖y_j‖², g_j, log b_j, the 2c/ε scale, log₂e)
//     folded into a record of d + 1 floats when a tile of columns is
//     staged in shared memory, and everything per row into one register:
//     the exponent is then d FMAs and one add, exactly in FP32 (no TF32).
//     The clouds are centred on their common mean first (the caller's
//     copies), so the norms carry no offset for the expansion to cancel.
//     A low-rank cost has this shape already: p_i in registers, q_j/ε and
//     (g_j − v_j)/ε in the record, −u_i/ε per row;
//   - no running maximum: each row's terms are shifted by its previous
//     log-sum-exp (from its potential, f_i = −λ ε LSE_i), which the update
//     moves little once the iterations settle. The sum is accepted when it
//     is finite and ≥ 2⁻⁶⁴ (no term can have overflowed, and the terms
//     flushed to zero are below 2⁻¹²⁶ each); otherwise the finishing
//     kernel sums that row again exactly, maximum first. The first update
//     from zero potentials takes every row's maximum first, in a pass of
//     the same kernel without exp2s.
// A work item is a block of rows (4 or 8 per thread, so a staged record is
// used that often from registers) against a part of the columns; persistent
// blocks take items from a ticket counter, so none idles while others
// finish. The parts' partial sums, all under the same shift, are added in a
// fixed order by the finishing kernel (one warp a row), which also forms
// the residual: results do not depend on which block took which item.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

namespace softwave::impl::cuda_sinkhorn {

// Exponents formed exactly in FP32 FMAs up to max_exact_features
// coordinates; with tensor-core products (10-bit mantissas,
// set_tensor_operands) up to max_features.
constexpr int max_exact_features = 16;
constexpr int max_features = 64;
// Ranks of a low-rank cost the updates take (exact FP32 at every rank, or
// on request tensor-core products above max_exact_features).
constexpr int max_rank = 128;

// Whether the update of d features runs its products on tensor cores, and
// the floats of a column's record there: d rounded up to the k = 8 of the
// products (points) or to 16 (a low-rank cost's rank, as its FP32 kernels
// are compiled).
constexpr bool uses_tensor_cores(int d, bool low_rank, bool tf32_low_rank) {
  return d > max_exact_features && (!low_rank || tf32_low_rank);
}
constexpr int tensor_record_floats(int d, bool low_rank) {
  return low_rank ? (d + 15) / 16 * 16 : (d + 7) / 8 * 8;
}

// One side of a pass: points (B, n, d) contiguous (for a low-rank cost,
// its factor: p for the rows of C, q for its columns), potentials and
// log-weights (B, n) row-major with the given row strides, and for a
// low-rank cost the side's own term (u or v, (B, n); null: zero).
struct Side {
  const float* points = nullptr;
  const float* potential = nullptr;
  std::int64_t potential_stride = 0;
  const float* log_weight = nullptr;
  std::int64_t log_weight_stride = 0;
  std::int64_t n = 0;
  const float* own_term = nullptr;
  std::int64_t own_term_stride = 0;
};

struct HalfIteration {
  Side rows, columns;
  float* updated = nullptr;  // the rows' potentials, updated in place
  std::int64_t batch = 0;
  int d = 0;
  float cost_scale = 1;  // C = cost_scale · ‖x − y‖²
  // C = u_i + v_j − p_i·q_j instead (the sides' own terms and factors),
  // with d = r; the products are exact FP32 FMAs at every rank, or with
  // tf32_low_rank above max_exact_features tensor-core products (the
  // records' q_j/ε rounded to 10-bit mantissas, as for points above).
  bool low_rank = false;
  bool tf32_low_rank = false;
  double rho = INFINITY;  // the rows' marginal penalty
  // ε of problem b: max(epsilon_target[b], epsilon_scale[b] · factor).
  const float* epsilon_target = nullptr;
  const float* epsilon_scale = nullptr;
  float epsilon_factor = 0;
  const int* active = nullptr;  // (B,): 0 skips the problem
  // With `measure`, residual[b · residual_stride] +=
  // Σ_i a_i |exp((f_i − f_i')/ε) − 1| over the updated potentials f'.
  double* residual = nullptr;
  std::int64_t residual_stride = 0;
  bool measure = false;
  // The rows' potentials say nothing of their sums yet (the first update
  // from zeros): take each row's maximum first, in a pass without exp2s.
  bool cold = false;
};

// Floats of workspace update() needs for `batch` problems of n rows and k
// columns (a low-rank cost's rank d, or points of d coordinates). It must
// start zeroed (its first 8 bytes are a ticket counter that update()
// advances) and stay with one `tickets` count.
std::int64_t workspace_floats(std::int64_t batch, std::int64_t n,
                              std::int64_t k, int d, bool low_rank,
                              bool tf32_low_rank);

// The tensor-core updates' records of one side, kept between its
// half-iterations: its points as the products' B operands (scaled by
// log₂e/ε, and with FP16 operands by each problem's balancing power of
// two), each point's own cost term, and both sides' coordinate maxima.
// They follow from the points and ε alone, so a solve, which updates each
// side in turn, keeps one set a side: update() forms them where
// `epsilon_factor` is not the half-iteration's (NaN: not formed yet), and
// otherwise only the columns' heads, which follow their potentials. (At
// rank 80 and 50,000 columns the records took 90 µs and the maxima 30 µs
// of each 1.3 ms half-iteration.) `data` holds record_floats() floats.
struct Records {
  float* data = nullptr;
  float epsilon_factor = NAN;
};

// Floats of Records::data for the columns side of `batch` problems of k
// columns; 0 where the update takes no tensor cores (Records unused).
std::int64_t record_floats(std::int64_t batch, std::int64_t k, int d,
                           bool low_rank, bool tf32_low_rank);

// Queues the half-iteration on `stream`; `tickets` counts the tickets the
// workspace's counter has handed out; `records` are the columns side's
// (above), for this solve's points.
void update(cudaStream_t stream, const HalfIteration& h, float* workspace,
            std::uint64_t& tickets, Records& records);

// The exact state of the rows' potentials against the columns' (what
// core's MeasureVisitor computes): each row's log-sum-exp into
// lse[b · lse_stride + i], and per problem [mass of π, ‖π1 − a‖₁, residual,
// Σ a φ(f), ⟨π, C⟩] added to totals[b · totals_stride + e · sum_stride],
// e = 0..4. Each cost is
// formed directly, C_ij = c Σ_k (x_ik − y_jk)², in FP32 for every d (no
// expansion, no tensor cores: it is the reference the iterations are held
// to); a maximum pass, then every row's sums under its maximum, so any
// finite potentials measure exactly. h.updated, h.active and h.residual are
// not used; h's points need not be centred.
struct Measurement {
  float* lse = nullptr;
  std::int64_t lse_stride = 0;
  double* totals = nullptr;
  std::int64_t totals_stride = 0, sum_stride = 0;
};

// Floats of workspace measure() needs (no ticket counter, any contents).
std::int64_t measurement_floats(std::int64_t batch, std::int64_t n,
                                std::int64_t k, int d, bool low_rank);

// Queues the measurement on `stream`.
void measure(cudaStream_t stream, const HalfIteration& h,
             const Measurement& out, float* workspace);

// The rows of the plan, normalised to sum to 1, applied to values on the
// columns (core's WeightedVisitor): sums_ic = Σ_j w_ij values_jc with
// w_ij = exp(s_ij − lse_i), s_ij as the measurement's exponent (each cost
// formed directly in FP32) and lse_i the row's log-sum-exp, found in the
// same pass and written: the terms are shifted by the rows' potentials
// (f_i = −λ ε LSE_i, as the updates shift them), and a row whose sum
// leaves the safe range is summed again exactly, maximum first. Gradients
// w.r.t. positions take the columns' own points as values. Each pass takes a
// chunk of max(d, 16) value columns (d rounded up as the measurement's), and
// the parts of a row's columns are added in a fixed order: results do not
// depend on the launch.
constexpr int max_weighted_features = 64;
struct Weighted {
  float* lse = nullptr;  // lse[b · lse_stride + i], written
  std::int64_t lse_stride = 0;
  const float* values = nullptr;  // (B, k, columns), contiguous
  float* sums = nullptr;          // (B, n, columns), contiguous
  int columns = 0;
};

// Floats of workspace weighted() needs (any contents; d <=
// max_weighted_features).
std::int64_t weighted_floats(std::int64_t batch, std::int64_t n, std::int64_t k,
                             int d, bool low_rank);

// Queues the weighted sums on `stream` (h.d <= max_weighted_features; h's
// points need not be centred; h.rows' potentials give the shifts; h.updated,
// h.active and h.residual are not used).
void weighted(cudaStream_t stream, const HalfIteration& h, const Weighted& z,
              float* workspace);

// Rows each thread of the sums kernel owns: 4 or, for d <= 4, 8; 0 (the
// default) lets the library choose. For benchmarks comparing the two.
void set_rows_per_thread(int rows);

// 16-row tiles each warp of the tensor-core sums kernel (d > 16) owns: 1 or
// 2 (sharing each B fragment; up to d = 64 with TF32 operands, 128 with
// FP16); 0 (the default) lets the library choose. For tests and benchmarks
// comparing the two.
void set_tensor_row_tiles(int tiles);

// The tensor-core products' operands: FP16, each problem's two operands
// scaled by powers of two to meet within FP16's range (the default: the
// 11-bit significands of TF32 at twice its product rate), or TF32. For
// tests and benchmarks comparing the two.
enum class TensorOperands { fp16, tf32 };
void set_tensor_operands(TensorOperands operands);

}  // namespace softwave::impl::cuda_sinkhorn
