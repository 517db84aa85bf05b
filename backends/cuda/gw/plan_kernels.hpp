#pragma once
// The CUDA-specialised row argmax of sampled GW's plan, the weighted sum of
// Sinkhorn plans kept as their factors (core/src/gw/plan_terms.hpp), and
// on the same products, the squared norms its change checks take:
//   matching(i) = argmax_j b_j Σ_t w_t exp((f_ti − u_ti + g_tj − v_tj +
//                                           P_ti·Q_tj) / ε_t)
// (a_i, the same for a whole row, left out), the first maximum of a row.
//
// The products P_ti·Q_tj run on tensor cores. Each factor value is split
// into two FP16 values, v = hi + lo (each term's two sides first scaled by
// powers of two to meet within FP16's range, exactly), and P·Q ≈ Phi·Qhi +
// Phi·Qlo + Plo·Qhi, three m16n8k16 products accumulated in FP32: about
// 2⁻²² of each product, near FP32's own rounding, where one FP16 product
// (the mixed-precision solves') would move each exponent by about 2⁻¹¹ of
// |P·Q|/ε, a factor of 2 and more in an entry at GW's ε. The portable
// kernel forms the same sums with FP32 FMAs at about a fifth of their rate
// (193 ms at 40,000 × 50,000 with six terms of rank 82 on an H100).
//
// Each term's factors are first written as records, their values × the
// side's scale as hi and lo in the products' fragment order: a warp's
// operands of one product are one contiguous load, 128 bits a lane for 16
// rows, 64 for 8 columns. Beside them, the exponent's parts
// per row (f − u)·log₂e/ε and per column (g − v)·log₂e/ε + log₂ w +
// log₂ b_j. A warp then takes 16 rows and each block of 64 columns of a
// part of the columns, all terms for each block (its rows' A operands in
// registers, the columns' B operands from the records, read through L1 by
// the block's four warps), and keeps each row's best; a last pass takes
// each row's best over the parts in order, so the argmax does not depend
// on the launch. The products' latency bounds it: at 40,000 × 50,000 on an
// H100, with records a row each (a warp's load eight 32-byte pieces) and
// with this order alone, 80–82 ms; with four blocks an SM (registers capped
// at 128) and the hi·hi products apart from the cross terms (two chains),
// 60 ms, about a tenth of the tensor cores' FP16 rate.

#include <cuda_runtime.h>

#include <cstdint>

namespace softwave::impl::cuda_gw {

constexpr int max_rank = 128;
constexpr int max_terms = 16;

// Term t: π_t(i, j) ∝ exp((f_i − u_i + g_j − v_j + p_i·q_j) / ε), weight w.
struct MixtureTerm {
  const float* p = nullptr;  // (n, rank), row-major
  const float* q = nullptr;  // (k, rank)
  const float* f = nullptr;  // (n,)
  const float* u = nullptr;  // (n,)
  const float* g = nullptr;  // (k,)
  const float* v = nullptr;  // (k,)
  float weight = 0;
  float inverse_epsilon = 0;
  float second_weight = 0;  // squared_norms' second weighting (signed)
};

struct Mixture {
  MixtureTerm terms[max_terms];
  int count = 0;  // 1 ..= max_terms
  std::int64_t n = 0, k = 0;
  int rank = 0;              // 0 ..= max_rank
  const float* b = nullptr;  // (k,) column weights; null: uniform
  int* matching = nullptr;   // (n,), written
  // squared_norms: the rows taken, rows[0 .. n) of the terms' source_n
  // (null: all, source_n = n), and the source's row weights a (null:
  // uniform).
  const int* rows = nullptr;
  std::int64_t source_n = 0;
  const float* a = nullptr;
};

// Bytes of workspace row_argmax() and squared_norms() need (any contents).
std::int64_t workspace_bytes(const Mixture& m);

// Queues matching(i) for every row on `stream`.
void row_argmax(cudaStream_t stream, const Mixture& m, void* workspace);

// The squared Frobenius norms of two weightings of the mixture's terms
// over its rows (a change check's), with the rows' and columns' weights:
//   Σ_i Σ_j (a_i b_j Σ_t w_t exp((f_ti − u_ti + g_tj − v_tj + P_ti·Q_tj)
//                                 / ε_t))²
// for w_t = each term's weight and its second_weight (either signed). The
// same split products as the argmax form each term's entry, each
// weighting's entries are summed over the terms in FP32 and squared, a
// row's squares summed in FP32, and a warp's 16 rows in float64 into one
// of norm_totals(m) partial totals, alternately the two weightings'. It
// returns where they are (in the workspace): adding them in order gives
// the same norms on every launch.
std::int64_t norm_totals(const Mixture& m);
const double* squared_norms(cudaStream_t stream, const Mixture& m,
                            void* workspace);

}  // namespace softwave::impl::cuda_gw
