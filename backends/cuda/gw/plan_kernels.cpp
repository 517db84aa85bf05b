// The CUDA-specialised row argmax of sampled GW's plan (plan_kernels.hpp has
// the design). Compiled only when Kokkos has its CUDA backend.

#include "plan_kernels.hpp"

#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <stdexcept>
#include <utility>

#include "common/check.hpp"
#include "common/half_products.hpp"

namespace softwave::impl::cuda_gw {
namespace {

using cuda_support::exp2_approx;
using cuda_support::mma_fp16;
using cuda_support::within_half_range;

constexpr float kLog2e = 1.4426950408889634f;
constexpr int kThreads = 128;  // a block of the argmax: four warps
constexpr int kRows = 64;      // of 16 rows each
// Blocks an SM keeps: four (16 warps) caps the registers at 128 a thread,
// so that the products' chains of warps overlap.
constexpr int kBlocksPerSm = 4;
// Parts of the columns: enough blocks to fill the GPU, none under 256
// columns (each part's rows are read again).
constexpr std::int64_t kBlocks = 2048;
constexpr std::int64_t kLeastPartColumns = 256;

// Products along k (16 each) for a rank, and the FP16 values of a record
// (hi then lo, 16 a product each).
__host__ __device__ constexpr int steps_of(int rank) {
  return (rank + 15) / 16;
}
__host__ __device__ constexpr std::int64_t record_halves(int rank) {
  return 32 * steps_of(rank);
}
// Rows in blocks of 16 (a product's A), columns in blocks of 8 (its B).
__host__ __device__ constexpr std::int64_t row_blocks(std::int64_t n) {
  return (n + 15) / 16;
}
__host__ __device__ constexpr std::int64_t column_blocks(std::int64_t k) {
  return (k + 7) / 8;
}

std::int64_t parts_of(const Mixture& m) {
  std::int64_t const blocks = (m.n + kRows - 1) / kRows;
  return std::max<std::int64_t>(
      1, std::min((kBlocks + blocks - 1) / blocks, m.k / kLeastPartColumns));
}

// Where each array of the workspace is (256-byte aligned).
struct Layout {
  unsigned* maxima;  // [2t] max |p_t|, [2t + 1] max |q_t| (float bits)
  // The records in the products' fragment order (fragment_word below):
  // (count, row blocks of 16, record_halves · 16) and (count, column
  // blocks of 8, record_halves · 8) FP16 values.
  __half* rows;
  __half* columns;
  float* row_heads;  // (count, n): (f − u)·log₂e/ε
  float* column_heads;  // (count, k): (g − v)·log₂e/ε + log₂ w + log₂ b_j
  float* best;          // (parts, n): each part's best value of a row
  int* best_column;  // (parts, n): and its first column
  // (row blocks, parts, 2): squared_norms' sums of a warp's rows over a
  // part, for the two weightings.
  double* totals;
  std::int64_t parts;
  std::int64_t bytes;
};

Layout layout_of(const Mixture& m, void* workspace) {
  Layout out{};
  out.parts = parts_of(m);
  auto* const base = static_cast<char*>(workspace);
  std::int64_t at = 0;
  auto next = [&](std::int64_t bytes) {
    char* const here = base ? base + at : nullptr;
    at += (bytes + 255) / 256 * 256;
    return here;
  };
  std::int64_t const halves = record_halves(m.rank);
  out.maxima = reinterpret_cast<unsigned*>(next(8 * m.count));
  out.rows = reinterpret_cast<__half*>(
      next(2 * m.count * row_blocks(m.n) * 16 * halves));
  out.columns = reinterpret_cast<__half*>(
      next(2 * m.count * column_blocks(m.k) * 8 * halves));
  out.row_heads = reinterpret_cast<float*>(next(4 * m.count * m.n));
  out.column_heads = reinterpret_cast<float*>(next(4 * m.count * m.k));
  out.best = reinterpret_cast<float*>(next(4 * out.parts * m.n));
  out.best_column = reinterpret_cast<int*>(next(4 * out.parts * m.n));
  out.totals =
      reinterpret_cast<double*>(next(16 * row_blocks(m.n) * out.parts));
  out.bytes = at;
  return out;
}

// maxima[2t + side] = max |value| over term t's factor of that side (0: p,
// 1: q), as float bits (zeroed beforehand; non-negative floats order as
// their bits do). Blocks along x over the values, y the term, z the side.
__global__ void __launch_bounds__(256)
    factor_maxima(Mixture m, unsigned* maxima) {
  int const t = blockIdx.y, side = blockIdx.z;
  MixtureTerm const& term = m.terms[t];
  // (Over all of the factor's rows where a list takes some: the scales
  // then follow from the terms alone.)
  std::int64_t const rows = m.rows ? m.source_n : m.n;
  cuda_support::largest_magnitude(side == 0 ? term.p : term.q,
                                  (side == 0 ? rows : m.k) * m.rank,
                                  maxima + 2 * t + side);
}

// Where value c (along k) of row or column `at` of its block goes, as a
// 32-bit word (two FP16 values, c's parity the half) of its side's records,
// hi (part 0) or lo (part 1): each product's operands of a block are one
// contiguous load of the warp, lane g·4 + t's at its place. Rows: blocks of
// 16, a lane's four words (rows g, g + 8 at k = 2t, 2t + 1, then at k + 8) a
// 128-bit load; columns: blocks of 8, a lane's two words (column g at k =
// 2t, 2t + 1, then at k + 8) a 64-bit load.
__device__ __forceinline__ std::int64_t fragment_word(bool row_side,
                                                      std::int64_t block,
                                                      int at, int c, int part,
                                                      int steps) {
  int const s = c / 16, kk = c % 16, t = (kk % 8) / 2, high = kk / 8;
  int const g = at % 8, words = row_side ? 4 : 2;
  int const within = row_side ? at / 8 + 2 * high : high;
  return ((block * steps + s) * 2 + part) * 32 * words + (g * 4 + t) * words +
         within;
}

// The records and heads of every row of every term's two sides, a warp a
// row (its lanes taking the values in turn: contiguous loads), the rows
// and columns past the last zero. The heads of the argmax hold log₂ w_t
// (its weights are positive) and no row weight; with `norms` they hold the
// rows' and columns' weights, log₂ a_i and log₂ b_j, and no term weight
// (squared_norms' weights are signed): 2^(heads + products) is then the
// entry of π_t.
__global__ void __launch_bounds__(256)
    factor_records(Mixture m, Layout out, bool norms) {
  std::int64_t const q =
      (std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  int const lane = threadIdx.x % 32;
  std::int64_t const rows = row_blocks(m.n) * 16,
                     columns = column_blocks(m.k) * 8;
  std::int64_t const per_term = rows + columns;
  if (q >= m.count * per_term) return;
  int const t = int(q / per_term);
  std::int64_t const r = q % per_term;
  bool const row_side = r < rows;
  std::int64_t const i = row_side ? r : r - rows;
  bool const real = i < (row_side ? m.n : m.k);
  MixtureTerm const& term = m.terms[t];
  float const unit = term.inverse_epsilon * kLog2e;
  int const e = cuda_support::balancing_exponent(
      __uint_as_float(out.maxima[2 * t]),
      __uint_as_float(out.maxima[2 * t + 1]) * unit);
  float const scale = row_side ? ldexpf(1.f, -e) : ldexpf(unit, e);
  int const steps = steps_of(m.rank);
  // (The row's place in the source: rows past the last read none.)
  std::int64_t const source_i = row_side && m.rows && real ? m.rows[i] : i;
  float const* values = (row_side ? term.p : term.q) + source_i * m.rank;
  // The term's records, and this row's block and place in it.
  std::int64_t const block_values = (row_side ? 16 : 8) * record_halves(m.rank);
  __half* const records =
      row_side ? out.rows + t * row_blocks(m.n) * block_values
               : out.columns + t * column_blocks(m.k) * block_values;
  std::int64_t const block = i / (row_side ? 16 : 8);
  int const at = int(i % (row_side ? 16 : 8));
  for (int c = lane; c < 16 * steps; c += 32) {
    float const v = real && c < m.rank ? values[c] * scale : 0.f;
    __half const hi = __float2half_rn(within_half_range(v));
    __half const lo = __float2half_rn(within_half_range(v - __half2float(hi)));
    records[2 * fragment_word(row_side, block, at, c, 0, steps) + c % 2] = hi;
    records[2 * fragment_word(row_side, block, at, c, 1, steps) + c % 2] = lo;
  }
  if (lane != 0 || !real) return;
  if (row_side) {
    float const row_weight = !norms ? 0.f
                             : m.a  ? log2f(m.a[source_i])
                                    : -log2f(float(m.source_n));
    out.row_heads[t * m.n + i] =
        (term.f[source_i] - term.u[source_i]) * unit + row_weight;
  } else {
    float const column_weight = m.b     ? log2f(m.b[i])
                                : norms ? -log2f(float(m.k))
                                        : 0.f;
    out.column_heads[t * m.k + i] = (term.g[i] - term.v[i]) * unit +
                                    (norms ? 0.f : log2f(term.weight)) +
                                    column_weight;
  }
}

// The part of the columns blockIdx.y takes, whole column blocks (the
// products' B operands): [begin, end).
struct ColumnPart {
  std::int64_t index, begin, end;
};
__device__ __forceinline__ ColumnPart column_part(const Mixture& m,
                                                  const Layout& out) {
  std::int64_t const part = blockIdx.y, blocks = column_blocks(m.k);
  std::int64_t const begin = part * blocks / out.parts * 8,
                     stop = (part + 1) * blocks / out.parts * 8;
  return {part, begin, stop < m.k ? stop : m.k};
}

// A warp's block of 16 rows (kRows / 16 warps a block of kThreads), and
// this lane's rows g and g + 8 of it, with where their heads are read (past
// the last row: the last row's; their records are zero).
struct LaneRows {
  std::int64_t block, n;
  int g;
  __device__ std::int64_t row(int h) const { return block * 16 + g + 8 * h; }
  __device__ std::int64_t loaded(int h) const {
    return row(h) < n ? row(h) : n - 1;
  }
};
__device__ __forceinline__ LaneRows lane_rows(const Mixture& m) {
  int const warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4;
  return {std::int64_t(blockIdx.x) * (kRows / 16) + warp, m.n, g};
}

// The mixture's terms over a warp's 16 rows (`rows`: this lane's rows g
// and g + 8, their heads read at rows.loaded(0..1)) and the
// columns [begin, end), in tiles of 8·G: add(t, b8, c, x) for term t and
// the lane's accumulator entry c of column group b8 (columns 2·t4 + c % 2
// of the group, row c / 2), x = 2^(row head + column head + P·Q scaled);
// done(tile) after all terms of a tile. Columns past the last give x = 0.
template <int S, int G, class Add, class Done>
__device__ __forceinline__ void visit_tiles(const Mixture& m, const Layout& out,
                                            const LaneRows& rows,
                                            std::int64_t begin,
                                            std::int64_t end, Add&& add,
                                            Done&& done) {
  int const lane = threadIdx.x % 32, t4 = lane % 4;
  std::int64_t const n = m.n, k = m.k;
  // The term's records as the products' loads: a row block's (s, part) at
  // [(block·S + s)·2 + part] (32 lanes' 128-bit words), a column block's
  // likewise (64-bit words).
  std::int64_t const term_rows = row_blocks(n) * S * 2 * 32,
                     term_columns = column_blocks(k) * S * 2 * 32;
  for (std::int64_t tile = begin; tile < end; tile += 8 * G) {
    for (int t = 0; t < m.count; ++t) {
      unsigned a_hi[S > 0 ? S : 1][4], a_lo[S > 0 ? S : 1][4];
      uint4 const* const a = reinterpret_cast<const uint4*>(out.rows) +
                             t * term_rows + rows.block * S * 2 * 32 + lane;
#pragma unroll
      for (int s = 0; s < S; ++s) {
        uint4 const hi = a[(2 * s) * 32], lo = a[(2 * s + 1) * 32];
        a_hi[s][0] = hi.x, a_hi[s][1] = hi.y, a_hi[s][2] = hi.z;
        a_hi[s][3] = hi.w;
        a_lo[s][0] = lo.x, a_lo[s][1] = lo.y, a_lo[s][2] = lo.z;
        a_lo[s][3] = lo.w;
      }
      float const row_head[2] = {out.row_heads[t * n + rows.loaded(0)],
                                 out.row_heads[t * n + rows.loaded(1)]};
#pragma unroll
      for (int b8 = 0; b8 < G; ++b8) {
        // The product's B operands (its columns past the last: zero
        // records, to the last column block, then that block again), and
        // its accumulator's columns 2·t4 and 2·t4 + 1.
        std::int64_t const column_block = tile / 8 + b8 < column_blocks(k)
                                              ? tile / 8 + b8
                                              : column_blocks(k) - 1;
        uint2 const* const b = reinterpret_cast<const uint2*>(out.columns) +
                               t * term_columns + column_block * S * 2 * 32 +
                               lane;
        // The hi·hi products and the two cross terms in two chains.
        float d[4] = {0.f, 0.f, 0.f, 0.f}, cross[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int s = 0; s < S; ++s) {
          uint2 const hi = b[(2 * s) * 32], lo = b[(2 * s + 1) * 32];
          mma_fp16(d, a_hi[s], hi.x, hi.y);
          mma_fp16(cross, a_hi[s], lo.x, lo.y);
          mma_fp16(cross, a_lo[s], hi.x, hi.y);
        }
        std::int64_t const j = tile + 8 * b8 + 2 * t4;
        float const head[2] = {
            j < end ? out.column_heads[t * k + j] : -INFINITY,
            j + 1 < end ? out.column_heads[t * k + j + 1] : -INFINITY};
#pragma unroll
        for (int c = 0; c < 4; ++c)
          add(t, b8, c,
              exp2_approx(row_head[c / 2] + head[c % 2] + (d[c] + cross[c])));
      }
    }
    done(tile);
  }
}

// Each row's best over part blockIdx.y of the columns: the largest Σ_t
// 2^(row head + column head + P·Q scaled) and its first column, into
// out.best and out.best_column. S: products along k.
template <int S>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    mixture_argmax(Mixture m, Layout out) {
  int const t4 = threadIdx.x % 4;
  std::int64_t const n = m.n, k = m.k;
  ColumnPart const part = column_part(m, out);
  LaneRows const rows = lane_rows(m);
  if (rows.block >= row_blocks(n)) return;  // (no block-wide step follows)
  float best[2] = {-1.f, -1.f};
  std::int64_t best_column[2] = {k, k};
  float mixture[8][4] = {};
  // After each tile, the lane's columns in increasing order: a later one
  // replaces the best only when larger.
  visit_tiles<S, 8>(
      m, out, rows, part.begin, part.end,
      [&](int, int b8, int c, float x) { mixture[b8][c] += x; },
      [&](std::int64_t tile) {
#pragma unroll
        for (int b8 = 0; b8 < 8; ++b8)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            std::int64_t const j = tile + 8 * b8 + 2 * t4 + c % 2;
            if (j < part.end && mixture[b8][c] > best[c / 2])
              best[c / 2] = mixture[b8][c], best_column[c / 2] = j;
            mixture[b8][c] = 0.f;
          }
      });
  // Over the quad that shares the rows: the largest, the first column of
  // it.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    for (int o = 1; o < 4; o *= 2) {
      float const other = __shfl_xor_sync(0xffffffffu, best[h], o);
      std::int64_t const other_column =
          __shfl_xor_sync(0xffffffffu, best_column[h], o);
      if (other > best[h] ||
          (other == best[h] && other_column < best_column[h]))
        best[h] = other, best_column[h] = other_column;
    }
    if (t4 == 0 && rows.row(h) < n) {
      out.best[part.index * n + rows.row(h)] = best[h];
      out.best_column[part.index * n + rows.row(h)] = int(best_column[h]);
    }
  }
}

// Column groups of 8 a tile of mixture_norms: its two weightings' sums
// take twice the argmax's accumulators.
constexpr int kNormGroups = 4;

// Σ over a warp's 16 rows and part blockIdx.y of the columns of
// (Σ_t w_t π_t(i, j))², for w = the terms' weights and second weights,
// into out.totals[(row block · parts + part) · 2 + e]: each entry summed
// over the terms in FP32, squared and added in float64 (an entry's square
// passes FP32's range from 2^64 on).
template <int S>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    mixture_norms(Mixture m, Layout out) {
  int const lane = threadIdx.x % 32;
  std::int64_t const n = m.n;
  ColumnPart const part = column_part(m, out);
  LaneRows const rows = lane_rows(m);
  if (rows.block >= row_blocks(n)) return;  // (no block-wide step follows)
  float first[kNormGroups][4] = {}, second[kNormGroups][4] = {};
  double squares[2][2] = {};  // [weighting][the lane's row]
  visit_tiles<S, kNormGroups>(
      m, out, rows, part.begin, part.end,
      [&](int t, int b8, int c, float x) {
        first[b8][c] = fmaf(m.terms[t].weight, x, first[b8][c]);
        second[b8][c] = fmaf(m.terms[t].second_weight, x, second[b8][c]);
      },
      [&](std::int64_t) {
#pragma unroll
        for (int b8 = 0; b8 < kNormGroups; ++b8)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            double const u = first[b8][c], v = second[b8][c];
            squares[0][c / 2] = fma(u, u, squares[0][c / 2]);
            squares[1][c / 2] = fma(v, v, squares[1][c / 2]);
            first[b8][c] = second[b8][c] = 0.f;
          }
      });
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    double total = (rows.row(0) < n ? squares[e][0] : 0.0) +
                   (rows.row(1) < n ? squares[e][1] : 0.0);
    for (int o = 16; o > 0; o /= 2)
      total += __shfl_xor_sync(0xffffffffu, total, o);
    if (lane == 0)
      out.totals[(rows.block * out.parts + part.index) * 2 + e] = total;
  }
}

// matching(i) = the first best column of row i over the parts in order.
__global__ void __launch_bounds__(256) best_of_parts(Mixture m, Layout out) {
  std::int64_t const i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m.n) return;
  float best = -1.f;
  int column = int(m.k);
  for (std::int64_t part = 0; part < out.parts; ++part)
    if (out.best[part * m.n + i] > best)
      best = out.best[part * m.n + i], column = out.best_column[part * m.n + i];
  m.matching[i] = column;
}

template <int S>
void launch_argmax(cudaStream_t stream, const Mixture& m, const Layout& out) {
  dim3 const grid(unsigned((m.n + kRows - 1) / kRows), unsigned(out.parts));
  mixture_argmax<S><<<grid, kThreads, 0, stream>>>(m, out);
}
template <int S>
void launch_norms(cudaStream_t stream, const Mixture& m, const Layout& out) {
  dim3 const grid(unsigned((m.n + kRows - 1) / kRows), unsigned(out.parts));
  mixture_norms<S><<<grid, kThreads, 0, stream>>>(m, out);
}

// launch<S> for S = 0 ..= steps_of(max_rank), by S.
using Launch = void (*)(cudaStream_t, const Mixture&, const Layout&);
template <template <int> class Kernel, std::size_t... S>
constexpr std::array<Launch, sizeof...(S)> launch_table(
    std::index_sequence<S...>) {
  return {&Kernel<int(S)>::launch...};
}
template <int S>
struct ArgmaxLaunch {
  static void launch(cudaStream_t stream, const Mixture& m, const Layout& out) {
    launch_argmax<S>(stream, m, out);
  }
};
template <int S>
struct NormsLaunch {
  static void launch(cudaStream_t stream, const Mixture& m, const Layout& out) {
    launch_norms<S>(stream, m, out);
  }
};
constexpr auto argmax_launches = launch_table<ArgmaxLaunch>(
    std::make_index_sequence<steps_of(max_rank) + 1>());
constexpr auto norms_launches = launch_table<NormsLaunch>(
    std::make_index_sequence<steps_of(max_rank) + 1>());

void check_mixture(const Mixture& m) {
  if (m.count < 1 || m.count > max_terms || m.rank < 0 || m.rank > max_rank)
    throw std::invalid_argument(
        "softwave: the specialised plan kernels take 1 to 16 terms of rank "
        "up to 128");
}

// The maxima, records and heads of the mixture's terms, queued.
Layout queue_records(cudaStream_t stream, const Mixture& m, void* workspace,
                     bool norms) {
  Layout const out = layout_of(m, workspace);
  SOFTWAVE_CUDA_CHECK(
      cudaMemsetAsync(out.maxima, 0, 8 * std::size_t(m.count), stream));
  if (m.rank > 0) {
    dim3 const grid(64, unsigned(m.count), 2);
    factor_maxima<<<grid, 256, 0, stream>>>(m, out.maxima);
  }
  std::int64_t const warps =
      m.count * (row_blocks(m.n) * 16 + column_blocks(m.k) * 8);
  factor_records<<<unsigned((warps * 32 + 255) / 256), 256, 0, stream>>>(m, out,
                                                                         norms);
  SOFTWAVE_CUDA_CHECK(cudaGetLastError());
  return out;
}

}  // namespace

std::int64_t workspace_bytes(const Mixture& m) {
  return layout_of(m, nullptr).bytes;
}

void row_argmax(cudaStream_t stream, const Mixture& m, void* workspace) {
  check_mixture(m);
  if (m.n == 0) return;
  Layout const out = queue_records(stream, m, workspace, false);
  argmax_launches[steps_of(m.rank)](stream, m, out);
  best_of_parts<<<unsigned((m.n + 255) / 256), 256, 0, stream>>>(m, out);
  SOFTWAVE_CUDA_CHECK(cudaGetLastError());
}

std::int64_t norm_totals(const Mixture& m) {
  return 2 * row_blocks(m.n) * parts_of(m);
}

const double* squared_norms(cudaStream_t stream, const Mixture& m,
                            void* workspace) {
  check_mixture(m);
  Layout const out = queue_records(stream, m, workspace, true);
  if (m.n > 0) norms_launches[steps_of(m.rank)](stream, m, out);
  SOFTWAVE_CUDA_CHECK(cudaGetLastError());
  return out.totals;
}

}  // namespace softwave::impl::cuda_gw
