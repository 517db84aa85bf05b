#pragma once
// The host's log-sum-exp of one row over one tile of columns (tiled_pass
// with an UpdateVisitor on a host space): the online form's compare, exp
// and branch a value do not vectorise; a tile's largest value first, then
// the sum of exp(s − largest) by an exp of arithmetic only (host_exp.hpp),
// in the widest vectors the CPU has (host_lse.cpp: SOFTWAVE_HOST_ISA_CLONES).

namespace softwave::impl {

// (m, sum) ← the log-sum-exp state of exp(m)·sum + Σ_{j < w} exp(values[j]),
// as lse_add over the values would leave it (to rounding).
void host_lse_tile(const float* values, int w, float& m, float& sum);
void host_lse_tile(const double* values, int w, double& m, double& sum);

}  // namespace softwave::impl
