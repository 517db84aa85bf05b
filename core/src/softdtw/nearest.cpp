// Exact k-nearest-neighbour search under hard DTW with the UCR Suite's
// lower-bound cascade (softwave::nearest_neighbours in softdtw.hpp).

#include <algorithm>
#include <climits>
#include <isa_clones.hpp>
#include <softwave/softdtw.hpp>
#include <string>

#include "call_arrays.hpp"
#include "pair_walk.hpp"

namespace softwave::impl {
namespace {

// Counters of SearchStatistics, in this order.
enum Outcome { kPruned, kPrunedReverse, kAbandoned, kCompleted, kOutcomes };

// A limit at or above the least V above `value` (a V, >= 0 or +∞), as
// acc_t: a candidate whose distance reaches it rounds (to V) above `value`,
// so it can neither beat nor tie the k-th best. value·(1 + 2^-21) passes the
// next float for normal floats (an ulp is at most 2^-23 of the value), and
// value·(1 + 2^-50) the next double; the added term covers subnormals and
// zero. (Arithmetic, not bit patterns: device compilers refuse memcpy.)
template <class V>
KOKKOS_INLINE_FUNCTION acc_t next_above(acc_t value) {
  constexpr bool single = sizeof(V) == sizeof(float);
  acc_t const relative = single ? 0x1p-21 : 0x1p-50;
  acc_t const smallest = single ? 0x1p-148 : 0x1p-1073;
  return value * (1 + relative) + smallest;
}

// The band's window along one side of a pair: for step t of the side with
// `steps` steps, the other side's indices [first(t), last(t)] (both never
// decrease in t). Symmetric: the rows of column j are window (m, n) at j.
struct BandWindow {
  Band band;
  std::int64_t steps, other;
  KOKKOS_INLINE_FUNCTION std::int64_t first(std::int64_t t) const {
    return band.width < 0 ? 0 : band.first(t, steps, other);
  }
  KOKKOS_INLINE_FUNCTION std::int64_t last(std::int64_t t) const {
    return band.width < 0 ? other - 1 : band.last(t, steps, other);
  }
};

// A query's envelope (query, t, k) keeps a point's d values together; the
// references' (c, t, k) keep every reference's value at (t, k) together, so
// that one pass bounds all references at once (Search::keogh_bounds).
template <class W, class Space>
using EnvelopeView =
    Kokkos::View<W***, Kokkos::LayoutRight, typename Space::memory_space>;
template <class W, class Space>
using ReferenceEnvelopeView =
    Kokkos::View<W***, Kokkos::LayoutLeft, typename Space::memory_space>;

// upper(e, t, k) and lower(e, t, k) for t < window.steps: the greatest and
// least of series s(b, ·, k) over the window's indices at t. A monotone
// deque (`deque`, room for window.other indices) makes it O(steps + other).
template <class W, class Series, class Envelope>
KOKKOS_INLINE_FUNCTION void envelope(const Series& s, std::int64_t b,
                                     const BandWindow& window,
                                     const Envelope& upper,
                                     const Envelope& lower, std::int64_t e,
                                     int* deque) {
  int const d = int(s.extent(2));
  for (int k = 0; k < d; ++k)
    for (int greatest = 1; greatest >= 0; --greatest) {
      auto const& out = greatest ? upper : lower;
      int head = 0, tail = 0;
      std::int64_t next = 0;
      for (std::int64_t t = 0; t < window.steps; ++t) {
        for (std::int64_t const last = window.last(t); next <= last; ++next) {
          W const v = W(s(b, next, k));
          while (tail > head) {
            W const back = W(s(b, deque[tail - 1], k));
            if (greatest ? back > v : back < v) break;
            --tail;
          }
          deque[tail++] = int(next);
        }
        while (deque[head] < window.first(t)) ++head;
        out(e, t, k) = W(s(b, deque[head], k));
      }
    }
}

// Marks a loop whose iterations are independent lanes for the host
// compiler: GCC vectorises `a < b ? a : b` (min3, a clamp) only where told
// so. A device thread runs the lanes one after another anyway.
#if defined(_OPENMP) && !defined(__CUDA_ARCH__) && \
    !defined(__HIP_DEVICE_COMPILE__)
#define SOFTWAVE_EACH_LANE _Pragma("omp simd")
#else
#define SOFTWAVE_EACH_LANE
#endif

// term(a, the nearest point of [lo, hi]) for one feature.
template <Cost metric, class W>
KOKKOS_INLINE_FUNCTION W feature_gap(W a, W hi, W lo) {
  return Metric<metric>::term(a, a > hi ? hi : (a < lo ? lo : a));
}

// sums[c] += feature_gap(a, hi[c], lo[c]) for c < count: one point of a
// univariate query's LB_Keogh against every reference (Search::keogh_bounds),
// in vector lanes on the host, none fusing a product into a sum.
template <Cost metric, class W>
SOFTWAVE_HOST_ISA_CLONES_EXACT KOKKOS_INLINE_FUNCTION void add_gaps(
    W a, const W* hi, const W* lo, acc_t* sums, std::int64_t count) {
  SOFTWAVE_EACH_LANE
  for (std::int64_t c = 0; c < count; ++c)
    sums[c] += acc_t(feature_gap<metric>(a, hi[c], lo[c]));
}

// Σ_k term(v_k, the nearest point of [lower_k, upper_k]) over the d
// features of one point (the envelope's k-th at upper[k·feature_step]):
// termwise at most the cost of v against any point inside, summed in the
// same order as the cost, so it is at most every in-window cell's cost bit
// for bit.
template <Cost metric, class W, class T>
KOKKOS_INLINE_FUNCTION acc_t gap(const T* v, const W* upper, const W* lower,
                                 int d, std::int64_t feature_step) {
  if (d == 1)  // as cells
    return acc_t(feature_gap<metric>(W(v[0]), upper[0], lower[0]));
  W sum = 0;
  for (int k = 0; k < d; ++k)
    sum += feature_gap<metric>(W(v[k]), upper[k * feature_step],
                               lower[k * feature_step]);
  return acc_t(sum);
}

// LB_Keogh of `count` points of a series (`step` apart) against a query's
// envelope (d values a point): their gaps summed in order, only until the
// sum reaches `limit` (it is then a bound that cuts all the same).
template <Cost metric, class W, class T>
KOKKOS_INLINE_FUNCTION acc_t keogh_bound(const T* series, std::int64_t step,
                                         const W* upper, const W* lower, int d,
                                         std::int64_t count, acc_t limit) {
  acc_t sum = 0;
  for (std::int64_t t = 0; t < count && sum < limit; ++t)
    sum += gap<metric>(series + t * step, upper + t * d, lower + t * d, d, 1);
  return sum;
}

// The limits of a walk's rows (walk_pair_below): a cell of row i (1-based)
// whose value v reaches threshold / keep − rest[i] cannot be on a path whose
// distance rounds to no more than the k-th best, since v plus the bound of
// the rows after it reaches the threshold (`keep` is the rounding margin,
// which covers both sums and the limit's own rounding). rest[i − 1] − rest[i]
// is row i's bound, at most its least in-band cost, as the walk requires.
struct RowLimits {
  const acc_t* rest;  // rest[i]: bound of rows i.. (0-based), rest[n] = 0
  acc_t widened;      // threshold / keep
  KOKKOS_INLINE_FUNCTION acc_t row(std::int64_t i) const {
    return widened - rest[i];
  }
};

// Candidates of one query walked together, a lane each (walk_together).
constexpr int kLanes = 8;

// Hard DTW of one query of n points against kLanes references of n points
// each, every lane under its own row limits, as walk_pair_below walks each
// pair alone: the same cells of the band |i − j| <= w (w >= 0), each
// cost + min3(diag, up, left) of the same operands, a cell at or above its
// row's limit dropped (+∞), so a lane's value is walk_pair's bit for bit
// where it stays below the limits and +∞ otherwise. What it buys: the
// lanes' cells of one column are independent, so their add-and-min chains
// overlap (and vectorise), where one pair's row waits on each left
// neighbour; that chain is what a short, narrow-banded pair costs.
//   x[i·x_step + f]         the query's points
//   y[(j·d + f)·kLanes + e] lane e's points, as W
//   limit[i·kLanes + e]     row i's limit (1-based rows) of lane e
//   r                       (n + 1)·kLanes values of scratch
// out[e] = lane e's value, or +∞. On the host a clone for each vector width
// (kLanes doubles are one AVX-512 vector), none fusing a product into a sum.
template <Cost metric, class W, class T>
SOFTWAVE_HOST_ISA_CLONES_EXACT KOKKOS_INLINE_FUNCTION void walk_lanes_below(
    const T* x, std::int64_t x_step, const acc_t* y, int d, std::int64_t n,
    std::int64_t w, const acc_t* limit, acc_t* r, acc_t* out) {
  constexpr int L = kLanes;
  acc_t const inf = compat::infinity<acc_t>();
  for (std::int64_t q = 0; q < (n + 1) * L; ++q) r[q] = q < L ? 0 : inf;
  // Row i − 1's cells in columns [done_first, done_last] hold its values,
  // the first with a live lane at live_first; the rest of r holds +∞.
  std::int64_t done_first = 0, done_last = 0, live_first = 0;
  bool abandoned = false;
  for (std::int64_t i = 1; i <= n && !abandoned; ++i) {
    std::int64_t const lo = i - w > 1 ? i - w : 1;
    std::int64_t const hi = i + w < n ? i + w : n;
    std::int64_t const first = lo > live_first ? lo : live_first;
    if (first > hi) {
      abandoned = true;
      break;
    }
    acc_t diag[L], left[L], row_limit[L];
    for (int e = 0; e < L; ++e) {
      diag[e] = r[(first - 1) * L + e];
      left[e] = inf;
      row_limit[e] = limit[i * L + e];
    }
    const T* const u = x + (i - 1) * x_step;
    for (std::int64_t j = first; j <= hi; ++j) {
      // Each step a loop over the lanes alone, on local arrays, so that the
      // compiler vectorises it.
      acc_t cost[L], up[L];
      const acc_t* const v = y + (j - 1) * d * L;
      if (d == 1) {  // as SeriesCost's cells
        W const a = W(u[0]);
        SOFTWAVE_EACH_LANE
        for (int e = 0; e < L; ++e)
          cost[e] = acc_t(Metric<metric>::term(a, W(v[e])));
      } else {
        W sum[L] = {};
        for (int f = 0; f < d; ++f) {
          W const a = W(u[f]);
          SOFTWAVE_EACH_LANE
          for (int e = 0; e < L; ++e)
            sum[e] += Metric<metric>::term(a, W(v[f * L + e]));
        }
        for (int e = 0; e < L; ++e) cost[e] = acc_t(sum[e]);
      }
      acc_t* const column = r + j * L;
      for (int e = 0; e < L; ++e) up[e] = column[e];
      SOFTWAVE_EACH_LANE
      for (int e = 0; e < L; ++e) {
        acc_t const value = cost[e] + min3(diag[e], up[e], left[e]);
        diag[e] = up[e];
        left[e] = value < row_limit[e] ? value : inf;
      }
      for (int e = 0; e < L; ++e) column[e] = left[e];
    }
    // Row i − 1's values outside [first, hi] would read as row i's.
    for (std::int64_t q = done_first; q < first; ++q)
      for (int e = 0; e < L; ++e) r[q * L + e] = inf;
    for (std::int64_t q = hi + 1; q <= done_last; ++q)
      for (int e = 0; e < L; ++e) r[q * L + e] = inf;
    done_first = first;
    done_last = hi;
    for (live_first = first; live_first <= hi; ++live_first) {
      bool live = false;
      for (int e = 0; e < L; ++e) live |= r[live_first * L + e] < inf;
      if (live) break;
    }
    abandoned = live_first > hi;
  }
  for (int e = 0; e < L; ++e) out[e] = abandoned ? inf : r[n * L + e];
}

// The search of one chunk of queries, one thread each (see softdtw.hpp).
template <class T, class Space, Cost metric>
struct Search {
  using W = work_t<T, Space>;
  using V = value_t<T>;
  using Provider = SeriesCost<T, Space, metric>;
  using Memory = typename Space::memory_space;
  template <class U>
  using Array2 = Kokkos::View<U**, Kokkos::LayoutRight, Memory>;

  Provider cost;  // pair p = q·B2 + c
  Band band;
  std::int64_t N, M, references, begin;  // begin: the chunk's first query
  ReferenceEnvelopeView<W, Space> reference_upper, reference_lower;  // B2,N,d
  EnvelopeView<W, Space> query_upper, query_lower;  // (chunk, M, d)
  Array2<acc_t> bound, row, rest;                   // per query
  Array2<int> order, deque;
  // Per query, where lanes apply (host, N = M and a band): walk_together's
  // kLanes references, row limits, rows and values; else no columns.
  Array2<acc_t> lanes;
  ArrayView2<std::int64_t, Space> indices;
  ArrayView2<V, Space> distances;
  Kokkos::View<std::int64_t[kOutcomes], Memory> outcomes;

  // (bound, index) order, for the heap of candidates.
  KOKKOS_INLINE_FUNCTION bool before(std::int64_t l, int a, int b) const {
    acc_t const x = bound(l, a), y = bound(l, b);
    return x < y || (x == y && a < b);
  }

  KOKKOS_INLINE_FUNCTION void sift_down(std::int64_t l, int top,
                                        int size) const {
    for (;;) {
      int child = 2 * top + 1;
      if (child >= size) return;
      if (child + 1 < size && before(l, order(l, child + 1), order(l, child)))
        ++child;
      if (!before(l, order(l, child), order(l, top))) return;
      int const swap = order(l, child);
      order(l, child) = order(l, top);
      order(l, top) = swap;
      top = child;
    }
  }

  // Puts (value, c) into query q's sorted list if it goes before the last.
  KOKKOS_INLINE_FUNCTION void insert(std::int64_t q, V value,
                                     std::int64_t c) const {
    int r = int(indices.extent(1)) - 1;
    auto const after = [&](int s) {
      return value < distances(q, s) ||
             (value == distances(q, s) && c < indices(q, s));
    };
    if (!after(r)) return;
    for (; r > 0 && after(r - 1); --r) {
      distances(q, r) = distances(q, r - 1);
      indices(q, r) = indices(q, r - 1);
    }
    distances(q, r) = value;
    indices(q, r) = c;
  }

  // lb[c] = LB_Keogh of query q (of full length N) against reference c's
  // envelope, for every c at once: a pass over the query's points, each
  // against all references' envelopes at that point (contiguous), in place
  // of a bound a reference stopped early at the k-th best. The sums run in
  // the same order, so each is the bound keogh_bound would give.
  KOKKOS_INLINE_FUNCTION void keogh_bounds(std::int64_t q, acc_t* lb) const {
    std::int64_t const B2 = references;
    int const d = int(cost.x.extent(2));
    for (std::int64_t c = 0; c < B2; ++c) lb[c] = 0;
    for (std::int64_t t = 0; t < N; ++t) {
      if (d == 1) {
        add_gaps<metric>(W(cost.x(q, t, 0)), &reference_upper(0, t, 0),
                         &reference_lower(0, t, 0), lb, B2);
      } else {
        for (std::int64_t c = 0; c < B2; ++c) {
          W sum = 0;
          for (int f = 0; f < d; ++f)
            sum += feature_gap<metric>(W(cost.x(q, t, f)),
                                       reference_upper(c, t, f),
                                       reference_lower(c, t, f));
          lb[c] += acc_t(sum);
        }
      }
    }
  }

  // The k-th best distance of query q so far as a threshold, and the
  // rounding margin of pair p (see RowLimits).
  KOKKOS_INLINE_FUNCTION acc_t threshold_of(std::int64_t q) const {
    return next_above<V>(acc_t(distances(q, indices.extent(1) - 1)));
  }
  KOKKOS_INLINE_FUNCTION acc_t keep_of(std::int64_t p, std::int64_t n) const {
    return 1 - acc_t(n + cost.m(p)) * 0x1p-50;
  }

  // Whether LB_Keogh of reference c (of full length) against query q's
  // envelope (local l) cuts it; counted.
  KOKKOS_INLINE_FUNCTION bool cut_by_reverse(std::int64_t l, std::int64_t q,
                                             std::int64_t c, std::int64_t n,
                                             std::int64_t counts[]) const {
    std::int64_t const p = q * references + c, m = cost.m(p);
    acc_t const keep = keep_of(p, n), threshold = threshold_of(q);
    if (m != M || !(threshold < compat::infinity<acc_t>())) return false;
    auto const cells = cost.pair_cells(p);
    acc_t const reverse = keogh_bound<metric>(
        cells.y, cells.y_step, &query_upper(l, 0, 0), &query_lower(l, 0, 0),
        cells.d, m, threshold / keep);
    if (reverse * keep < threshold) return false;
    ++counts[kPrunedReverse];
    return true;
  }

  // Gap of query point i against reference c's envelope (row i's bound).
  KOKKOS_INLINE_FUNCTION acc_t row_gap(const T* x, std::int64_t x_step,
                                       std::int64_t c, std::int64_t i,
                                       int d) const {
    return gap<metric>(x + i * x_step, &reference_upper(c, i, 0),
                       &reference_lower(c, i, 0), d, reference_upper.stride(2));
  }

  // Files the outcome of a walk of reference c: its distance, or +∞ when
  // abandoned.
  KOKKOS_INLINE_FUNCTION void file(std::int64_t q, std::int64_t c, acc_t value,
                                   std::int64_t counts[]) const {
    if (value == compat::infinity<acc_t>()) {
      ++counts[kAbandoned];
      return;
    }
    ++counts[kCompleted];
    insert(q, V(value), c);
  }

  // Walks reference c for query q (local l) and files the distance.
  KOKKOS_INLINE_FUNCTION void walk(std::int64_t l, std::int64_t q,
                                   std::int64_t c, std::int64_t n,
                                   std::int64_t counts[]) const {
    std::int64_t const p = q * references + c;
    auto const cells = cost.pair_cells(p);
    // rest[i]: the bound of rows i.. for the walk's row limits.
    acc_t* const tail = &rest(l, 0);
    tail[n] = 0;
    for (std::int64_t i = n - 1; i >= 0; --i)
      tail[i] =
          tail[i + 1] +
          (n == N ? row_gap(cells.x, cells.x_step, c, i, cells.d) : acc_t(0));
    RowLimits const limits{tail, threshold_of(q) / keep_of(p, n)};
    file(q, c, walk_pair_below(cost, band, p, &row(l, 0), limits), counts);
  }

  // Walks references cs[0..count) (2 <= count <= kLanes; query and
  // references of full length N = M, a band) for query q together
  // (walk_lanes_below) and files their distances. Lanes past `count`
  // repeat the first reference, unfiled.
  KOKKOS_INLINE_FUNCTION void walk_together(std::int64_t l, std::int64_t q,
                                            const int* cs, int count,
                                            std::int64_t counts[]) const {
    constexpr int L = kLanes;
    int const d = int(cost.x.extent(2));
    acc_t* const y = &lanes(l, 0);
    acc_t* const limit = y + N * d * L;
    acc_t* const r = limit + (N + 1) * L;
    acc_t* const out = r + (N + 1) * L;
    std::int64_t const first = q * references + cs[0];
    acc_t const widened = threshold_of(q) / keep_of(first, N);
    auto const query = cost.pair_cells(first);
    for (int e = 0; e < L; ++e) {
      int const c = cs[e < count ? e : 0];
      auto const cells = cost.pair_cells(q * references + c);
      for (std::int64_t j = 0; j < N * d; ++j)  // point j / d, feature j % d
        y[j * L + e] = acc_t(W(cells.y[j / d * cells.y_step + j % d]));
      // Row i's limit less the bound of the rows after it, summed as walk's.
      acc_t after = 0;
      for (std::int64_t i = N; i >= 1; --i) {
        limit[i * L + e] = widened - after;
        after = after + row_gap(query.x, query.x_step, c, i - 1, d);
      }
    }
    walk_lanes_below<metric, W>(query.x, query.x_step, y, d, N, band.width,
                                limit, r, out);
    for (int e = 0; e < count; ++e) file(q, cs[e], out[e], counts);
  }

  // Walks reference c for query q unless LB_Keogh of the reference against
  // the query's envelope cuts it.
  KOKKOS_INLINE_FUNCTION void visit(std::int64_t l, std::int64_t q,
                                    std::int64_t c, std::int64_t n,
                                    std::int64_t counts[]) const {
    if (!cut_by_reverse(l, q, c, n, counts)) walk(l, q, c, n, counts);
  }

  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t l) const {
    std::int64_t const q = begin + l, B2 = references;
    int const k = int(indices.extent(1));
    for (int r = 0; r < k; ++r) {
      distances(q, r) = compat::infinity<V>();
      indices(q, r) = B2;  // after every reference
    }
    std::int64_t const n = cost.n(q * B2);
    // The query's envelope along the references' columns, for the
    // references of full length M.
    envelope<W>(cost.x, q, BandWindow{band, M, n}, query_upper, query_lower, l,
                &deque(l, 0));
    std::int64_t counts[kOutcomes] = {};

    // Every reference's bound, the larger of LB_Kim and (for a query of
    // full length) LB_Keogh; the k least are walked first, so that the k-th
    // best is finite and cuts the others.
    acc_t* const lb = &bound(l, 0);
    if (n == N) {
      keogh_bounds(q, lb);
    } else {
      for (std::int64_t c = 0; c < B2; ++c) lb[c] = 0;
    }
    for (std::int64_t c = 0; c < B2; ++c) {
      std::int64_t const m = cost.m(q * B2 + c);
      auto const cells = cost.pair_cells(q * B2 + c);
      acc_t kim = cells(0, 0);
      if (n > 1 || m > 1) kim += cells(n - 1, m - 1);
      if (kim > lb[c]) lb[c] = kim;
    }
    acc_t const done = -1;  // a bound no reference has
    for (int r = 0; r < k; ++r) {
      std::int64_t least = -1;
      for (std::int64_t c = 0; c < B2; ++c)
        if (bound(l, c) != done && (least < 0 || bound(l, c) < bound(l, least)))
          least = c;
      bound(l, least) = done;
      visit(l, q, least, n, counts);
    }

    // The others: those whose bounds reach the k-th best are cut here, the
    // rest go on a heap.
    acc_t const threshold = threshold_of(q);
    int size = 0;
    for (std::int64_t c = 0; c < B2; ++c) {
      if (lb[c] == done) continue;
      if (lb[c] * keep_of(q * B2 + c, n) >= threshold) {
        ++counts[kPruned];
        continue;
      }
      order(l, size++) = int(c);
    }
    for (int top = size / 2 - 1; top >= 0; --top) sift_down(l, top, size);

    // In the order of the bounds, until they reach the k-th best. Where
    // they can, kLanes references below it are walked together.
    int together[kLanes] = {};
    int waiting = 0;
    auto const walk_waiting = [&]() {
      if (waiting == 1) walk(l, q, together[0], n, counts);
      if (waiting > 1) walk_together(l, q, together, waiting, counts);
      waiting = 0;
    };
    while (size > 0) {
      int const c = order(l, 0);
      if (bound(l, c) * keep_of(q * B2 + c, n) >= threshold_of(q)) {
        counts[kPruned] += size;  // the rest have bounds at least this
        break;
      }
      order(l, 0) = order(l, --size);
      sift_down(l, 0, size);
      if (cut_by_reverse(l, q, c, n, counts)) continue;
      if (lanes.extent(1) == 0 || n != N || cost.m(q * B2 + c) != M) {
        walk(l, q, c, n, counts);
        continue;
      }
      together[waiting++] = c;
      if (waiting == kLanes) walk_waiting();
    }
    walk_waiting();
    for (int o = 0; o < kOutcomes; ++o)
      if (counts[o]) Kokkos::atomic_add(&outcomes(o), counts[o]);
  }
};

template <class T, class Space, Cost metric>
void search(const Space& space, ConstSeriesView<T, Space> queries,
            ConstSeriesView<T, Space> references, const Lengths<Space>& used,
            ArrayView2<std::int64_t, Space> indices,
            ArrayView2<value_t<T>, Space> distances, Band band,
            SearchStatistics* statistics) {
  using S = Search<T, Space, metric>;
  using W = typename S::W;
  std::int64_t const B1 = queries.extent(0), B2 = references.extent(0);
  std::int64_t const N = queries.extent(1), M = references.extent(1);
  std::int64_t const d = queries.extent(2);
  S s;
  s.cost = typename S::Provider{
      queries,
      references,
      PairLengths<Space>{used.x, used.y, N, M, PairMap{0, B2}},
      {},
      {}};
  s.band = band;
  s.N = N;
  s.M = M;
  s.references = B2;
  s.indices = indices;
  s.distances = distances;
  auto const outcomes_memory =
      call_array<decltype(s.outcomes)>(space, "softwave::nearest::outcomes",
                                       /*zero=*/true);
  s.outcomes = outcomes_memory.view;

  // The references' envelopes along the queries' rows, for queries of full
  // length N.
  auto const upper_memory = call_array<ReferenceEnvelopeView<W, Space>>(
      space, "softwave::nearest::reference_upper", false, B2, N, d);
  auto const lower_memory = call_array<ReferenceEnvelopeView<W, Space>>(
      space, "softwave::nearest::reference_lower", false, B2, N, d);
  s.reference_upper = upper_memory.view;
  s.reference_lower = lower_memory.view;
  {
    auto const deque_memory = call_array<typename S::template Array2<int>>(
        space, "softwave::nearest::reference_deque", false, B2, M);
    auto const deque = deque_memory.view;
    auto const y = references;
    auto const lengths = s.cost.lengths;
    auto const upper = s.reference_upper, lower = s.reference_lower;
    Kokkos::parallel_for(
        "softwave::nearest::reference_envelopes",
        Kokkos::RangePolicy<Space>(space, 0, B2),
        KOKKOS_LAMBDA(std::int64_t c) {
          envelope<W>(y, c, BandWindow{band, N, lengths.m(c)}, upper, lower, c,
                      &deque(c, 0));
        });
  }

  // Queries in chunks whose per-query arrays stay under 256 MiB.
  // Lanes on the host only, where they vectorise: a device thread would run
  // them one after another, in scratch that shrinks the chunks.
  std::int64_t const lanes = runs_on_host<Space>() && N == M && band.width >= 0
                                 ? (N * d + 2 * (N + 1) + 1) * kLanes
                                 : 0;
  double const per_query =
      12.0 * double(B2) + 8.0 * double(N + M + 2) + 8.0 * double(lanes) +
      2.0 * double(M * d) * sizeof(W) + 4.0 * double(std::max(N, M));
  std::int64_t const chunk = std::clamp<std::int64_t>(
      std::int64_t(double(256ll << 20) / per_query), 1, B1);
  auto const array2 = [&](auto type, const char* label, std::int64_t cols) {
    using U = decltype(type);
    return call_array<typename S::template Array2<U>>(space, label, false,
                                                      chunk, cols);
  };
  auto const bound_memory = array2(acc_t{}, "softwave::nearest::bound", B2);
  auto const row_memory = array2(acc_t{}, "softwave::nearest::row", M + 1);
  auto const rest_memory = array2(acc_t{}, "softwave::nearest::rest", N + 1);
  auto const lanes_memory = array2(acc_t{}, "softwave::nearest::lanes", lanes);
  auto const order_memory = array2(int{}, "softwave::nearest::order", B2);
  auto const deque_memory = array2(int{}, "softwave::nearest::query_deque", N);
  auto const query_upper_memory = call_array<EnvelopeView<W, Space>>(
      space, "softwave::nearest::query_upper", false, chunk, M, d);
  auto const query_lower_memory = call_array<EnvelopeView<W, Space>>(
      space, "softwave::nearest::query_lower", false, chunk, M, d);
  s.bound = bound_memory.view;
  s.row = row_memory.view;
  s.rest = rest_memory.view;
  s.lanes = lanes_memory.view;
  s.order = order_memory.view;
  s.deque = deque_memory.view;
  s.query_upper = query_upper_memory.view;
  s.query_lower = query_lower_memory.view;
  for (std::int64_t begin = 0; begin < B1; begin += chunk) {
    s.begin = begin;
    Kokkos::parallel_for(
        "softwave::nearest::search",
        Kokkos::RangePolicy<Space, Kokkos::Schedule<Kokkos::Dynamic>>(
            space, 0, std::min(chunk, B1 - begin)),
        s);
  }
  if (statistics) {
    // A labelled host copy: a mirror of the stream-ordered counters
    // (Kokkos::Cuda) would be an unlabelled allocation.
    Kokkos::View<std::int64_t[kOutcomes], Kokkos::HostSpace> host(
        Kokkos::view_alloc(Kokkos::WithoutInitializing,
                           std::string("softwave::nearest::outcomes_host")));
    Kokkos::deep_copy(space, host, s.outcomes);
    space.fence();
    *statistics = SearchStatistics{B1 * B2, host(kPruned), host(kPrunedReverse),
                                   host(kAbandoned), host(kCompleted)};
  }
}

}  // namespace

template <class Space, class T>
void nearest_neighbours(const Space& space, ConstSeriesView<T, Space> queries,
                        ConstSeriesView<T, Space> references,
                        ArrayView2<std::int64_t, Space> indices,
                        ArrayView2<value_t<T>, Space> distances,
                        const SoftDTWOptions& options,
                        const Lengths<Space>& lengths,
                        SearchStatistics* statistics) {
  check_options(options);
  if (options.gamma != 0)
    throw_invalid_argument(
        "gamma must be 0 for nearest_neighbours (got ", options.gamma,
        "): its lower bounds hold for hard DTW; use pairwise() for Soft-DTW");
  if (options.cost == Cost::cosine)
    throw_invalid_argument(
        "cost must be sqeuclidean or l1 for nearest_neighbours (got cosine): "
        "LB_Keogh does not bound the cosine cost; use pairwise()");
  DataChecks<Space> checks(space, options.check_values, "softdtw");
  auto const used = check_series_pair(checks, queries, references, lengths,
                                      /*same_batch=*/false);
  std::size_t const B1 = queries.extent(0), B2 = references.extent(0);
  std::size_t const k = indices.extent(1);
  if (k < 1 || k > B2)
    throw_invalid_argument("indices must have k columns with 1 <= k <= ", B2,
                           " (the number of references); got k = ", k);
  if (B2 > std::size_t(INT_MAX))
    throw_invalid_argument("references holds ", B2,
                           " series; nearest_neighbours takes at most ",
                           INT_MAX);
  check_extent(indices, "indices", {B1, k}, "(queries, k)");
  check_extent(distances, "distances", {B1, k}, "(queries, k)");
  checks.finish();
  if (B1 == 0) {
    if (statistics) *statistics = SearchStatistics{};
    return;
  }
  if (options.cost == Cost::sqeuclidean)
    search<T, Space, Cost::sqeuclidean>(space, queries, references, used,
                                        indices, distances, band_of(options),
                                        statistics);
  else
    search<T, Space, Cost::l1>(space, queries, references, used, indices,
                               distances, band_of(options), statistics);
}

#define SOFTWAVE_INSTANTIATE_NEAREST(SPACE, T)                            \
  template void nearest_neighbours<SPACE, T>(                             \
      const SPACE&, ConstSeriesView<T, SPACE>, ConstSeriesView<T, SPACE>, \
      ArrayView2<std::int64_t, SPACE>, ArrayView2<value_t<T>, SPACE>,     \
      const SoftDTWOptions&, const Lengths<SPACE>&, SearchStatistics*);

SOFTWAVE_INSTANTIATE_NEAREST(Kokkos::DefaultExecutionSpace, float)
SOFTWAVE_INSTANTIATE_NEAREST(Kokkos::DefaultExecutionSpace, double)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_NEAREST(Kokkos::DefaultHostExecutionSpace, float)
SOFTWAVE_INSTANTIATE_NEAREST(Kokkos::DefaultHostExecutionSpace, double)
#endif

}  // namespace softwave::impl
