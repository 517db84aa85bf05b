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

}  // namespace softwave::impl
