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

// soft_diagonal that also writes each cell's soft-min part: part[q] =
// out[q] − cost[q] as computed before the cost is added (+∞ where no
// predecessor is finite), which the backward's weights read.
void soft_diagonal_parts(const double* cost, const double* diag,
                         const double* up, double* out, double* part,
                         std::int64_t count, double gamma);

// The expected alignment E over one anti-diagonal from the two after it
// (Cuturi & Blondel's backward recursion, in SIMD lanes as soft_diagonal).
// For q in [0, count), cell (i, j) at q: r_to_e[q] holds R(i, j) and
// receives E(i, j) = Σ_s E_s · exp((P_s − R(i, j))/γ) over its successors
// s: (i + 1, j) at next_*[q + 1], (i, j + 1) at next_*[q] (both on the next
// anti-diagonal) and (i + 1, j + 1) at after_*[q + 1]; P_s is the
// successor's soft-min part (soft_diagonal_parts). E is 0 where R(i, j) is
// +∞; a successor with E_s = 0 (outside the band) adds nothing. γ > 0.
void soft_diagonal_backward(double* r_to_e, const double* next_e,
                            const double* next_part, const double* after_e,
                            const double* after_part, std::int64_t count,
                            double gamma);

// The costs of `diagonals` (1 to 8) consecutive anti-diagonals' cells from
// features laid out along them: for s < diagonals and q in [0, count),
// out[s·out_pitch + q] = Σ_f term(a[f·a_pitch + q], b[f·b_pitch + q − s])
// with term (a − b)² or, for l1, |a − b|, the features summed in order.
// (With x by feature and y reversed, the cells (i, k + s − i) of
// anti-diagonal k + s read x at the same addresses for every s and y one
// further back.) In SIMD lanes across the cells, several anti-diagonals a
// pass over the features.
void diagonal_feature_costs(const double* a, std::int64_t a_pitch,
                            const double* b, std::int64_t b_pitch, int d,
                            bool l1, double* out, std::int64_t out_pitch,
                            std::int64_t count, int diagonals);

// The gradients of an anti-diagonal's costs weighted by its E, laid out as
// diagonal_feature_costs reads the features: for q in [0, count) and each
// feature f, with t = e[q] · ∂term/∂a (a − b for (a − b)², whose factor 2
// is the caller's; sign(a − b) for l1), a_gradient[f·a_pitch + q] += t and
// b_gradient[f·b_pitch + q] −= t.
void diagonal_feature_gradients(const double* a, std::int64_t a_pitch,
                                const double* b, std::int64_t b_pitch, int d,
                                bool l1, const double* e, double* a_gradient,
                                double* b_gradient, std::int64_t count);

// A tile of a pair's expected alignment E (tile[v·tile_pitch + q], rows v
// of one side against cells q of the other; `transpose` reads it as
// tile[q·tile_pitch + v], the other side's view) times the other side's
// points: for each of the `rows` rows v and f in [0, pitch), sums[v·pitch
// + f] += Σ_q E(v, q) · others[q·pitch + f], or with l1 Σ_q E(v, q) ·
// sign(self[v·pitch + f] − others[q·pitch + f]). Points lie at a pitch
// that is a multiple of 8 (zero-padded features); the sums stay in
// registers across a row's cells, 32 features at a time.
void tile_products(const double* tile, int tile_pitch, int rows, int cols,
                   bool transpose, const double* self, const double* others,
                   int pitch, bool l1, double* sums);

}  // namespace softwave::impl
