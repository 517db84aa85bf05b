#pragma once
// The CUDA-specialised row argmax of sampled GW's plan, the weighted sum of
// Sinkhorn plans kept as their factors (core/src/gw/plan_terms.hpp):
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
};

struct Mixture {
  MixtureTerm terms[max_terms];
  int count = 0;  // 1 ..= max_terms
  std::int64_t n = 0, k = 0;
  int rank = 0;              // 0 ..= max_rank
  const float* b = nullptr;  // (k,) column weights; null: uniform
  int* matching = nullptr;   // (n,), written
};

// Bytes of workspace row_argmax() needs (any contents).
std::int64_t workspace_bytes(const Mixture& m);

// Queues matching(i) for every row on `stream`.
void row_argmax(cudaStream_t stream, const Mixture& m, void* workspace);

}  // namespace softwave::impl::cuda_gw
