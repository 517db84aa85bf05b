#pragma once
// The soft-min recursion over one anti-diagonal of a pair's cells, for a
// host thread that walks the pair on its own (pair_walk.hpp). The cells of
// an anti-diagonal are independent, so the loop runs in SIMD lanes with
// polynomial exp/log instead of a chain of libm calls cell after cell.

#include <cstdint>

namespace softwave::impl {

// For q in [0, count): out[q] = cost[q] + softmin_γ(diag[q], up[q], up[q + 1])
// (up[q + 1] is cell q's left neighbour: the previous anti-diagonal holds
// both), with relax()'s handling of non-finite values: +∞ where the cost or
// every predecessor is +∞, NaN where a NaN reaches the cell. γ > 0. Agrees
// with relax() to a few ulps (the exponentials and the logarithm are
// polynomials accurate to about 1 ulp).
void soft_diagonal(const double* cost, const double* diag, const double* up,
                   double* out, std::int64_t count, double gamma);

// The costs of an anti-diagonal's cells from features laid out along it:
// for q in [0, count), out[q] = Σ_f term(a[f·a_pitch + q], b[f·b_pitch + q])
// with term (a − b)² or, for l1, |a − b|, the features summed in order (as
// a cell's cost is summed everywhere). In SIMD lanes across the cells; a
// walk that summed each cell's d terms on its own would wait on a chain of
// d additions per cell.
void diagonal_feature_costs(const double* a, std::int64_t a_pitch,
                            const double* b, std::int64_t b_pitch, int d,
                            bool l1, double* out, std::int64_t count);

}  // namespace softwave::impl
