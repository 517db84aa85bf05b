#pragma once
// The plan of sampled GW as a weighted sum of Sinkhorn plans, each kept as
// the potentials and low-rank cost factors that define it, and the kernels
// that evaluate that sum without storing it: the dense plan on request, each
// row's argmax, and the Frobenius norm of a signed combination (an
// iteration's change).

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <softwave/kokkos_compat.hpp>
#include <softwave/sinkhorn.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../sinkhorn/passes.hpp"

namespace softwave::impl {

// An array of the call, row-major in the instance's memory, not
// initialised (compat::uninitialised_array: arrays of structs are
// constructed, and get no memory where empty).
template <class Data, class Space, class... Extents>
Kokkos::View<Data, Kokkos::LayoutRight, typename Space::memory_space>
uninitialised(const Space& space, const char* label, Extents... extents) {
  using View =
      Kokkos::View<Data, Kokkos::LayoutRight, typename Space::memory_space>;
  return compat::uninitialised_array<View>(
      space, std::string(label), (std::size_t(extents) * ... * std::size_t(1)),
      extents...);
}

// A host vector copied into a new array of the call (fenced: the host
// staging copy is freed on return).
template <class Value, class Space>
Kokkos::View<Value*, Kokkos::LayoutRight, typename Space::memory_space>
on_device(const Space& space, const std::vector<Value>& values,
          const char* label) {
  auto const out = uninitialised<Value*>(space, label, values.size());
  auto const host = compat::host_mirror(std::string(label) + "_host", out);
  for (std::size_t q = 0; q < values.size(); ++q) host(q) = values[q];
  Kokkos::deep_copy(space, out, host);
  space.fence();
  return out;
}

// first_index_of's reduction. (A functor, not a lambda: this header is
// compiled into several units, and nvcc's extended lambdas keep their
// host-side hooks per unit; tests/static_checks/lambda_wrappers.py.)
template <class Values>
struct FirstIndexOf {
  Values values;
  double value;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i,
                                         std::int64_t& least) const {
    if (values(i) == value && i < least) least = i;
  }
};

// The first i with values(i) == value (for the maximum, the argmax a
// sequential scan picks among ties); values.extent(0) where there is none.
template <class Space, class Values>
std::int64_t first_index_of(const Space& space, const Values& values,
                            double value, const char* label) {
  std::int64_t first = values.extent(0);
  Kokkos::parallel_reduce(
      label, Kokkos::RangePolicy<Space>(space, 0, values.extent(0)),
      FirstIndexOf<Values>{values, value}, Kokkos::Min<std::int64_t>(first));
  // (A reduction starts from the reducer's identity, not from `first`.)
  return std::min<std::int64_t>(first, values.extent(0));
}

// One term of a sum on the device: `slot` of PlanTerms (−1: the initial
// coupling, the product plan a⊗b or the plan given as a warm start), its
// weight and 1/ε.
struct TermWeight {
  int slot;
  double weight;
  double inverse_epsilon;
  // A low-rank coupling (GwOptions::coupling_rank): the slot's factors hold
  // Q diag(1/√g) and R diag(1/√g), and the term is P_i·Q_k itself.
  bool coupling = false;
};

// Storage for up to `slots` terms: term s is
//   π_s(i, k) = a_i b_k exp((f_i + g_k − u_i − v_k + P_i·Q_k − βC_ik) / ε_s),
// with βC_ik the dense linear cost of fused GW, shared by every term (0
// without one), or for a low-rank coupling π_s(i, k) = P_i·Q_k.
template <class T, class Space>
struct PlanTerms {
  std::int64_t n = 0, k = 0, rank = 0;
  int slots = 0;
  OTView2<T, Space> u, f;          // (slots, N)
  OTView2<T, Space> v, g;          // (slots, K)
  OTView3<T, Space> p;             // (slots, N, rank)
  OTView3<T, Space> q;             // (slots, K, rank)
  OTView2<const T, Space> linear;  // (N, K) or empty
  T linear_weight = 0;             // β

  KOKKOS_INLINE_FUNCTION T linear_at(std::int64_t i, std::int64_t j) const {
    return linear.extent(0) ? linear_weight * linear(i, j) : T(0);
  }

  PlanTerms() = default;
  PlanTerms(const Space& space, std::int64_t n_, std::int64_t k_,
            std::int64_t rank_, int slots_)
      : n(n_), k(k_), rank(rank_), slots(slots_) {
    u = uninitialised<T**>(space, "softwave::gw::term_u", slots, n);
    f = uninitialised<T**>(space, "softwave::gw::term_f", slots, n);
    v = uninitialised<T**>(space, "softwave::gw::term_v", slots, k);
    g = uninitialised<T**>(space, "softwave::gw::term_g", slots, k);
    p = uninitialised<T***>(space, "softwave::gw::term_p", slots, n, rank);
    q = uninitialised<T***>(space, "softwave::gw::term_q", slots, k, rank);
  }

  // One slot's arrays as a batch of one problem, as the Sinkhorn takes them.
  OTView2<T, Space> row(const OTView2<T, Space>& all, int s) const {
    return OTView2<T, Space>(all.data() + s * all.extent(1), 1, all.extent(1));
  }
  OTView3<T, Space> factor(const OTView3<T, Space>& all, int s) const {
    return OTView3<T, Space>(all.data() + s * all.extent(1) * rank, 1,
                             all.extent(1), rank);
  }
  LowRankCost<T, Space> cost(int s) const {
    return {row(u, s), row(v, s), factor(p, s), factor(q, s)};
  }
};

// The weights of a plan's terms and its marginals, on the device.
template <class T, class Space>
struct TermSum {
  PlanTerms<T, Space> terms;
  Kokkos::View<const TermWeight*, typename Space::memory_space> list;
  OTView1<const T, Space> a, b;  // empty: uniform
  // 1/Σb: the product plan a⊗b/Σb has marginals a and b.
  double product_scale = 1;
  // The rows the kernels below cover, in order (empty: all N).
  Kokkos::View<const int*, typename Space::memory_space> row_list;
  // The initial coupling where one was given (N, K), and the factor that
  // gives it a's mass (else the product plan).
  OTView2<const T, Space> initial;
  double initial_scale = 1;

  // Rows block() evaluates together: each column's factor row is read
  // once for all of them (per row it would be read N times a pass).
  static constexpr int rows = 16;

  KOKKOS_INLINE_FUNCTION double a_at(std::int64_t i) const {
    return a.extent(0) ? double(a(i)) : 1.0 / double(terms.n);
  }
  KOKKOS_INLINE_FUNCTION double b_at(std::int64_t j) const {
    return b.extent(0) ? double(b(j)) : 1.0 / double(terms.k);
  }
  // Rows covered, and the row at position q of them.
  KOKKOS_INLINE_FUNCTION std::int64_t row_count() const {
    return row_list.extent(0) ? std::int64_t(row_list.extent(0)) : terms.n;
  }
  KOKKOS_INLINE_FUNCTION std::int64_t row_at(std::int64_t q) const {
    return row_list.extent(0) ? std::int64_t(row_list(q)) : q;
  }
  // How many rows the block of `height` rows from position q0 has.
  KOKKOS_INLINE_FUNCTION int rows_from(std::int64_t q0,
                                       int height = rows) const {
    std::int64_t const left = row_count() - q0;
    return left < height ? int(left) : height;
  }
  // A kernel term's exponent's parts other than its factors' product:
  // f_i − u_i per row, g_j − v_j per column.
  KOKKOS_INLINE_FUNCTION T row_term(int slot, std::int64_t i) const {
    return terms.f(slot, i) - terms.u(slot, i);
  }
  KOKKOS_INLINE_FUNCTION T column_term(int slot, std::int64_t j) const {
    return terms.g(slot, j) - terms.v(slot, j);
  }
  // π_s(i, j) / (a_i b_j) for a kernel term, from its parts and its
  // factors' product.
  KOKKOS_INLINE_FUNCTION T kernel_term(const TermWeight& t, T row, T column,
                                       T dot, std::int64_t i,
                                       std::int64_t j) const {
    T const s = row + column + dot - terms.linear_at(i, j);
    return compat::exp(s * T(t.inverse_epsilon));
  }
  // The parts of w_s π_s(i, j) that are not kernel terms: the product
  // plan's (to be scaled by a_i b_j, into `scaled`), the given coupling's
  // and a low-rank coupling's (entries themselves, into `given`).
  KOKKOS_INLINE_FUNCTION void add_other(const TermWeight& t, std::int64_t i,
                                        std::int64_t j, T dot, double& scaled,
                                        double& given) const {
    if (t.slot < 0 && initial.extent(0))
      given += t.weight * initial_scale * double(initial(i, j));
    else if (t.slot < 0)
      scaled += t.weight * product_scale;
    else  // a coupling
      given += t.weight * double(dot);
  }

  // out[r] = Σ_s w_s π_s(row_at(q0 + r), j) for the block's rows r < count
  // (its last rows may be fewer; their loads repeat the last row). For
  // callers that take one column at a time; team kernels use visit_block.
  KOKKOS_INLINE_FUNCTION void block(std::int64_t q0, int count, std::int64_t j,
                                    double* out) const {
    std::int64_t row[rows];
    for (int r = 0; r < rows; ++r)
      row[r] = row_at(q0 + (r < count ? r : count - 1));
    double given[rows];
    for (int r = 0; r < rows; ++r) out[r] = given[r] = 0;
    for (std::size_t e = 0; e < list.extent(0); ++e) {
      TermWeight const t = list(e);
      T dot[rows] = {};
      if (t.slot >= 0)
        for (std::int64_t c = 0; c < terms.rank; ++c) {
          T const qc = terms.q(t.slot, j, c);
          for (int r = 0; r < rows; ++r)
            dot[r] += terms.p(t.slot, row[r], c) * qc;
        }
      if (t.slot < 0 || t.coupling) {
        for (int r = 0; r < count; ++r)
          add_other(t, row[r], j, dot[r], out[r], given[r]);
        continue;
      }
      T const column = column_term(t.slot, j);
      for (int r = 0; r < count; ++r)
        out[r] += t.weight * double(kernel_term(t, row_term(t.slot, row[r]),
                                                column, dot[r], row[r], j));
    }
    double const bj = b_at(j);
    for (int r = 0; r < count; ++r)
      out[r] = out[r] * a_at(row[r]) * bj + given[r];
  }

  // The team kernels' evaluation, tiled as a matrix product. A team takes
  // a tile of kTileRows rows and kTileColumns columns at a time, each
  // thread kRowsEach of its rows (r = y + kThreadRows·a, a < kRowsEach)
  // and kColumnsEach of its columns (x + kThreadColumns·b), and forms each
  // kernel term's products P_i·Q_j over pieces of kPiece factor columns.
  // On a GPU each piece of P and Q is first staged in the team's scratch
  // (zero-padded past the rank; Q's rows padded so that the threads' reads
  // meet distinct banks), with every load of a thread issued before its
  // stores; then each staged value serves kRowsEach or kColumnsEach
  // products from registers. A tile of 64 rows reads each term's Q once
  // for 64 rows (a team of 16 rows streamed it from memory four times as
  // often, and was bound by those loads). Kernel terms are summed in T
  // (the weights' sum is 1; float32 resolves entries far beyond what an
  // argmax, a row sum or a plan in T needs). On the host a team is one
  // thread and reads the factors in place.
  static constexpr bool kStaged =
      !Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                                  typename Space::memory_space>::accessible;
  static constexpr int kRowsEach = 8, kColumnsEach = 8, kPiece = 16;
  static constexpr int kThreadRows = kStaged ? 8 : 1;
  static constexpr int kThreadColumns = kStaged ? 16 : 1;
  static constexpr int kTileRows = kThreadRows * kRowsEach;
  static constexpr int kTileColumns = kThreadColumns * kColumnsEach;
  static constexpr int kTeam = kThreadRows * kThreadColumns;
  static constexpr std::size_t kScratchBytes =
      kStaged ? (kTileRows * kPiece + kTileColumns * (kPiece + 1)) * sizeof(T)
              : 0;

  // The thread's place in the tile's grid of threads.
  struct TileThread {
    int y, x;
    KOKKOS_INLINE_FUNCTION int row(int a) const { return y + kThreadRows * a; }
    KOKKOS_INLINE_FUNCTION int column(int b) const {
      return x + kThreadColumns * b;
    }
  };
  template <class Member>
  KOKKOS_INLINE_FUNCTION static TileThread tile_thread(const Member& team) {
    return {team.team_rank() / kThreadColumns,
            team.team_rank() % kThreadColumns};
  }

  // visit(a, r, j, value) with value = Σ_s w_s π_s(row_at(q0 + r), j) for
  // the thread's rows r = tile_thread(team).row(a) < count of the block of
  // kTileRows rows from position q0 and every column j in [begin, end) the
  // thread takes (its columns of each tile, in increasing order). Every
  // thread of the team must call it. Kernel terms are tiled; the rest (the
  // initial coupling, low-rank couplings) are added per entry as visited.
  template <class Member, class Visit>
  KOKKOS_INLINE_FUNCTION void visit_block(const Member& team, std::int64_t q0,
                                          int count, std::int64_t begin,
                                          std::int64_t end,
                                          const Visit& visit) const {
    TileThread const me = tile_thread(team);
    int const flat = team.team_rank();
    T* const p_piece = kStaged ? static_cast<T*>(team.team_scratch(0).get_shmem(
                                     kTileRows * kPiece * sizeof(T)))
                               : nullptr;
    T* const q_piece = kStaged ? static_cast<T*>(team.team_scratch(0).get_shmem(
                                     kTileColumns * (kPiece + 1) * sizeof(T)))
                               : nullptr;
    // Block row r (rows past the last repeat it).
    auto const row = [&](int r) {
      return row_at(q0 + (r < count ? r : count - 1));
    };
    int i[kRowsEach];
    double ai[kRowsEach];
    for (int a = 0; a < kRowsEach; ++a) {
      i[a] = int(row(me.row(a)));
      ai[a] = a_at(i[a]);
    }
    std::int64_t const rank = terms.rank;
    // Whether any term is not a kernel term (the initial coupling, a
    // low-rank coupling): they are added entry by entry.
    bool others = false;
    for (std::size_t e = 0; e < list.extent(0); ++e)
      others = others || list(e).slot < 0 || list(e).coupling;
    for (std::int64_t tile = begin; tile < end; tile += kTileColumns) {
      int const width =
          int(end - tile < kTileColumns ? end - tile : kTileColumns);
      // The thread's columns (those past the tile's last repeat its first).
      int j[kColumnsEach];
      for (int b = 0; b < kColumnsEach; ++b)
        j[b] = int(tile + (me.column(b) < width ? me.column(b) : 0));
      T scaled[kRowsEach][kColumnsEach];
      for (int a = 0; a < kRowsEach; ++a)
        for (int b = 0; b < kColumnsEach; ++b) scaled[a][b] = 0;
      for (std::size_t e = 0; e < list.extent(0); ++e) {
        TermWeight const t = list(e);
        if (t.slot < 0 || t.coupling) continue;
        T dot[kRowsEach][kColumnsEach] = {};
        for (std::int64_t c0 = 0; c0 < rank; c0 += kPiece) {
          if constexpr (kStaged) {
            constexpr int kP = kTileRows * kPiece / kTeam;
            constexpr int kQ = kTileColumns * kPiece / kTeam;
            T staged[kP + kQ];
            for (int v = 0; v < kP; ++v) {
              int const at = flat + kTeam * v;
              std::int64_t const c = c0 + at % kPiece;
              staged[v] = c < rank ? terms.p(t.slot, row(at / kPiece), c) : 0;
            }
            for (int v = 0; v < kQ; ++v) {
              int const at = flat + kTeam * v;
              std::int64_t const c = c0 + at % kPiece;
              staged[kP + v] = c < rank && at / kPiece < width
                                   ? terms.q(t.slot, tile + at / kPiece, c)
                                   : 0;
            }
            team.team_barrier();  // the last piece's reads are done
            for (int v = 0; v < kP; ++v) p_piece[flat + kTeam * v] = staged[v];
            for (int v = 0; v < kQ; ++v) {
              int const at = flat + kTeam * v;
              q_piece[(at / kPiece) * (kPiece + 1) + at % kPiece] =
                  staged[kP + v];
            }
            team.team_barrier();
            for (int c = 0; c < kPiece; ++c) {
              T pc[kRowsEach], qc[kColumnsEach];
              for (int a = 0; a < kRowsEach; ++a)
                pc[a] = p_piece[me.row(a) * kPiece + c];
              for (int b = 0; b < kColumnsEach; ++b)
                qc[b] = q_piece[me.column(b) * (kPiece + 1) + c];
              for (int a = 0; a < kRowsEach; ++a)
                for (int b = 0; b < kColumnsEach; ++b)
                  dot[a][b] += pc[a] * qc[b];
            }
          } else {
            std::int64_t const last = rank - c0 < kPiece ? rank : c0 + kPiece;
            for (std::int64_t c = c0; c < last; ++c) {
              T qc[kColumnsEach];
              for (int b = 0; b < kColumnsEach; ++b)
                qc[b] = terms.q(t.slot, j[b], c);
              for (int a = 0; a < kRowsEach; ++a) {
                T const pc = terms.p(t.slot, i[a], c);
                for (int b = 0; b < kColumnsEach; ++b) dot[a][b] += pc * qc[b];
              }
            }
          }
        }
        T const weight = T(t.weight);
        T from_row[kRowsEach];
        for (int a = 0; a < kRowsEach; ++a)
          from_row[a] = row_term(t.slot, i[a]);
        for (int b = 0; b < kColumnsEach; ++b) {
          T const from_column = column_term(t.slot, j[b]);
          for (int a = 0; a < kRowsEach; ++a)
            scaled[a][b] += weight * kernel_term(t, from_row[a], from_column,
                                                 dot[a][b], i[a], j[b]);
        }
      }
      for (int b = 0; b < kColumnsEach; ++b) {
        if (me.column(b) >= width) continue;
        double const bj = b_at(j[b]);
        for (int a = 0; a < kRowsEach; ++a) {
          if (me.row(a) >= count) continue;
          double value = double(scaled[a][b]), given = 0;
          if (others)
            for (std::size_t e = 0; e < list.extent(0); ++e) {
              TermWeight const t = list(e);
              if (t.slot >= 0 && !t.coupling) continue;
              T dot = 0;
              if (t.coupling)
                for (std::int64_t c = 0; c < rank; ++c)
                  dot += terms.p(t.slot, i[a], c) * terms.q(t.slot, j[b], c);
              add_other(t, i[a], j[b], dot, value, given);
            }
          visit(a, me.row(a), j[b], value * ai[a] * bj + given);
        }
      }
    }
  }
};

template <class T, class Space>
Kokkos::View<const TermWeight*, typename Space::memory_space> term_list(
    const Space& space, const std::vector<TermWeight>& host) {
  auto const out =
      uninitialised<TermWeight*>(space, "softwave::gw::term_list", host.size());
  Kokkos::View<const TermWeight*, Kokkos::HostSpace,
               Kokkos::MemoryTraits<Kokkos::Unmanaged>>
      from(host.data(), host.size());
  Kokkos::deep_copy(space, out, from);
  // `host` may go before the copy is done.
  space.fence();
  return out;
}

// `teams` teams of visit_block's size and scratch. Their functors hold the
// plan's terms and pass 512 bytes: light-weight launches take them as an
// argument, where Kokkos' CUDA backend would otherwise stage them in
// constant memory and wait on the host for the previous such kernel, once
// an iteration (sampled GW's column draws and dense costs do the same).
template <class T, class Space>
auto visit_policy(const Space& space, std::int64_t teams) {
  using Sum = TermSum<T, Space>;
  return compat::light_weight(
             Kokkos::TeamPolicy<Space>(space, teams, Sum::kTeam))
      .set_scratch_size(0, Kokkos::PerTeam(Sum::kScratchBytes));
}

// A team per block of visit_block's kTileRows rows.
template <class T, class Space>
auto block_policy(const Space& space, const TermSum<T, Space>& sum) {
  constexpr int R = TermSum<T, Space>::kTileRows;
  return visit_policy<T>(space, (sum.row_count() + R - 1) / R);
}

// plan(i, j) = sum(i, j).
template <class T, class Space>
void render_plan(const Space& space, const TermSum<T, Space>& sum,
                 const OTView2<T, Space>& plan) {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = TermSum<T, Space>::kTileRows;
  std::int64_t const k = sum.terms.k;
  Kokkos::parallel_for(
      "softwave::gw::render_plan", block_policy(space, sum),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const i0 = std::int64_t(team.league_rank()) * R;
        sum.visit_block(team, i0, sum.rows_from(i0, R), 0, k,
                        [&](int, int r, std::int64_t j, double value) {
                          plan(i0 + r, j) = T(value);
                        });
      });
}

// rows(q) = Σ_j sum(row_at(q), j), in float64.
template <class T, class Space>
void row_sums(const Space& space, const TermSum<T, Space>& sum,
              const Kokkos::View<double*, typename Space::memory_space>& rows) {
  using Sum = TermSum<T, Space>;
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = Sum::kTileRows;
  std::int64_t const k = sum.terms.k;
  Kokkos::parallel_for(
      "softwave::gw::row_sums", block_policy(space, sum),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const q0 = std::int64_t(team.league_rank()) * R;
        int const count = sum.rows_from(q0, R);
        // Each thread's sums of its rows' columns, then each row's over
        // the threads that hold it.
        double partial[Sum::kRowsEach] = {};
        sum.visit_block(team, q0, count, 0, k,
                        [&](int a, int, std::int64_t, double value) {
                          partial[a] += value;
                        });
        auto const me = Sum::tile_thread(team);
        for (int r = 0; r < count; ++r) {
          double total =
              r % Sum::kThreadRows == me.y ? partial[r / Sum::kThreadRows] : 0;
          team.team_reduce(Kokkos::Sum<double>(total));
          if (team.team_rank() == 0) rows(q0 + r) = total;
        }
      });
}

// matching(i) = argmax_j sum(i, j) (the first maximum).
template <class T, class Space>
void row_argmax(const Space& space, const TermSum<T, Space>& sum,
                const OTView1<int, Space>& matching) {
  using Sum = TermSum<T, Space>;
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = Sum::kTileRows;
  std::int64_t const k = sum.terms.k;
  Kokkos::parallel_for(
      "softwave::gw::row_argmax", block_policy(space, sum),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const i0 = std::int64_t(team.league_rank()) * R;
        int const count = sum.rows_from(i0, R);
        // Each thread's best of its columns for each of its rows, then
        // each row's over the threads: the largest value, and the first
        // column that has it.
        double value[Sum::kRowsEach];
        std::int64_t column[Sum::kRowsEach];
        for (int a = 0; a < Sum::kRowsEach; ++a) value[a] = -1, column[a] = k;
        sum.visit_block(team, i0, count, 0, k,
                        [&](int a, int, std::int64_t j, double out) {
                          if (out > value[a]) value[a] = out, column[a] = j;
                        });
        auto const me = Sum::tile_thread(team);
        for (int r = 0; r < count; ++r) {
          bool const holds = r % Sum::kThreadRows == me.y;
          int const a = r / Sum::kThreadRows;
          double best = holds ? value[a] : -1;
          team.team_reduce(Kokkos::Max<double>(best));
          std::int64_t first = holds && value[a] == best ? column[a] : k;
          team.team_reduce(Kokkos::Min<std::int64_t>(first));
          if (team.team_rank() == 0) matching(i0 + r) = int(first);
        }
      });
}

// matching(i) = argmax_j plan(i, j) of a dense plan (the first maximum,
// as a sequential scan takes it), a team a row.
template <class T, class Space>
void plan_row_argmax(const Space& space, const OTView2<const T, Space>& plan,
                     const OTView1<int, Space>& matching) {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  std::int64_t const k = plan.extent(1);
  Kokkos::parallel_for(
      "softwave::gw::plan_row_argmax",
      Kokkos::TeamPolicy<Space>(space, plan.extent(0), Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const i = team.league_rank();
        T best = -1;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, k),
            [&](std::int64_t j, T& largest) {
              if (plan(i, j) > largest) largest = plan(i, j);
            },
            Kokkos::Max<T>(best));
        std::int64_t first = k;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, k),
            [&](std::int64_t j, std::int64_t& least) {
              if (plan(i, j) == best && j < least) least = j;
            },
            Kokkos::Min<std::int64_t>(first));
        Kokkos::single(Kokkos::PerTeam(team),
                       [&]() { matching(i) = int(first); });
      });
}

// One anchor pair's draw from the plan's mixture: the term (its slot, −1:
// the initial coupling) and 1/ε, the source row, and for the product plan
// the target column (drawn from b on the host; −1 otherwise).
struct AnchorDraw {
  int slot;
  int row;
  int column;
  double inverse_epsilon;
  bool coupling;  // TermWeight::coupling
};

// A Gumbel draw for (key, column): −log(−log u), u uniform in (0, 1).
KOKKOS_INLINE_FUNCTION double gumbel(std::uint64_t key, std::int64_t j) {
  double const u =
      (double(mix64(key + std::uint64_t(j)) >> 11) + 0.5) * 0x1p-53;
  return -compat::log(-compat::log(u));
}

// Draws each anchor's column from row draws(c).row of its term's plan
// π_s(i, ·) ∝ b_k exp((f_i + g_k − u_i − v_k + P_i·Q_k − βC_ik)/ε_s) (a
// coupling's ∝ P_i·Q_k), or
// of the initial coupling given (a column with column = −1), by Gumbel-max
// with the counter-based key (key, c, column), all anchors at once, each
// part of the columns first keeping each anchor's best, then a thread per
// anchor takes the best of the parts in order (the first column of the
// largest score: the same draw for any number of parts).
//
// On a host a team is one thread, an anchor and a part. On a GPU a team
// takes a group of anchors of the same term and a part: each piece of
// kPiece factor columns of its columns and of the anchors' rows is staged
// in scratch (a thread reading its own column's factor row strides through
// memory), and each staged column serves every anchor of the group. Groups
// are as large as still gives kTeams teams, up to kGroup: a team an anchor
// read all of Q once per anchor (0.73 ms a draw of 80 anchors over 50,000
// columns on an H100, 0.27 ms in groups of 16), but few columns make few
// parts, and groups there left most of the GPU idle (TorchGW's 400 × 500
// tasks 10–25 % slower in groups of 16). The products are summed in the
// same order either way, so every backend draws the same columns.
template <class T, class Space>
class ColumnSampler {
 public:
  using Memory = typename Space::memory_space;
  ColumnSampler(const Space& space, std::int64_t anchors, std::int64_t k)
      : parts_(std::max<std::int64_t>(
            1, std::min<std::int64_t>(k / kLeastColumns, kMostParts))),
        best_(uninitialised<double**>(space, "softwave::gw::sampled_scores",
                                      anchors, parts_)),
        at_(uninitialised<int**>(space, "softwave::gw::sampled_columns",
                                 anchors, parts_)),
        groups_(uninitialised<int*>(space, "softwave::gw::anchor_groups",
                                    3 * anchors + 1)),
        groups_host_(
            compat::host_mirror("softwave::gw::anchor_groups_host", groups_)) {}

  void sample(
      const Space& space, const PlanTerms<T, Space>& terms,
      const OTView1<const T, Space>& b, const OTView2<const T, Space>& initial,
      const Kokkos::View<const AnchorDraw*, Memory>& draws,
      const Kokkos::View<const AnchorDraw*, Kokkos::HostSpace>& draws_host,
      std::uint64_t key, const Kokkos::View<int*, Memory>& columns) {
    std::int64_t const parts = parts_;
    auto const best = best_;
    auto const at = at_;
    ColumnScore const score{terms, b, initial, key};
    if constexpr (TermSum<T, Space>::kStaged)
      grouped_parts(space, terms, draws, draws_host, score);
    else
      anchor_parts(space, terms, draws, score);
    Kokkos::parallel_for(
        "softwave::gw::sampled_column",
        Kokkos::RangePolicy<Space>(space, 0, draws.extent(0)),
        KOKKOS_LAMBDA(std::int64_t c) {
          AnchorDraw const d = draws(c);
          if (d.column >= 0) {
            columns(c) = d.column;
            return;
          }
          double top = -INFINITY;
          int column = 0;  // (no finite score: a solve cannot give it, and
                           // a row drawn from the given plan has mass)
          for (std::int64_t part = 0; part < parts; ++part)
            if (best(c, part) > top) top = best(c, part), column = at(c, part);
          columns(c) = column;
        });
  }

  // The two ways to best(c, part) and at(c, part) below are public only
  // because nvcc's extended lambdas need a public enclosing function.

  // Anchor c's Gumbel score for column j, from the product P_row·Q_j of its
  // row's and the column's factors (unused for a row of the given plan). (A
  // functor, not a lambda: FirstIndexOf above says why.)
  struct ColumnScore {
    PlanTerms<T, Space> terms;
    OTView1<const T, Space> b;
    OTView2<const T, Space> initial;
    std::uint64_t key;
    KOKKOS_INLINE_FUNCTION double operator()(const AnchorDraw& d,
                                             std::int64_t c, std::int64_t j,
                                             T dot) const {
      double const noise = gumbel(mix64(key + std::uint64_t(c)), j);
      if (d.slot < 0)  // log of the entry (zero: never drawn)
        return compat::log(double(initial(d.row, j))) + noise;
      if (d.coupling)  // the entry's log (zero: never drawn)
        return compat::log(double(dot)) + noise;
      double out = double(terms.f(d.slot, d.row) - terms.u(d.slot, d.row) +
                          terms.g(d.slot, j) - terms.v(d.slot, j) + dot -
                          terms.linear_at(d.row, j)) *
                       d.inverse_epsilon +
                   noise;
      if (b.extent(0)) out += compat::log(double(b(j)));
      return out;
    }
  };

  static constexpr std::int64_t kLeastColumns = 256, kMostParts = 64;
  static constexpr int kPiece = TermSum<T, Space>::kPiece, kGroup = 16;
  static constexpr std::int64_t kTeams = 256;

  // best(c, part), at(c, part) for every anchor c and part: a team an
  // anchor and part, a thread a column (the host's path).
  void anchor_parts(const Space& space, const PlanTerms<T, Space>& terms,
                    const Kokkos::View<const AnchorDraw*, Memory>& draws,
                    const ColumnScore& score) {
    using Member = typename Kokkos::TeamPolicy<Space>::member_type;
    std::int64_t const k = terms.k, rank = terms.rank, parts = parts_;
    auto const best = best_;
    auto const at = at_;
    Kokkos::parallel_for(
        "softwave::gw::sample_columns",
        compat::light_weight(
            Kokkos::TeamPolicy<Space>(space, draws.extent(0) * parts, 1)),
        KOKKOS_LAMBDA(const Member& team) {
          std::int64_t const c = team.league_rank() / parts,
                             part = team.league_rank() % parts;
          AnchorDraw const d = draws(c);
          if (d.column >= 0) return;  // drawn on the host
          double top = -INFINITY;
          std::int64_t first = k;
          for (std::int64_t j = part * k / parts; j < (part + 1) * k / parts;
               ++j) {
            T dot = 0;
            if (d.slot >= 0)
              for (std::int64_t q = 0; q < rank; ++q)
                dot += terms.p(d.slot, d.row, q) * terms.q(d.slot, j, q);
            double const s = score(d, c, j, dot);
            if (s > top) top = s, first = j;
          }
          best(c, part) = top;
          at(c, part) = int(first);
        });
  }

  // The same on a GPU: a team a group of anchors of one term (the host
  // sorts them into groups_) and a part, a thread a column of each tile.
  void grouped_parts(
      const Space& space, const PlanTerms<T, Space>& terms,
      const Kokkos::View<const AnchorDraw*, Memory>& draws,
      const Kokkos::View<const AnchorDraw*, Kokkos::HostSpace>& draws_host,
      const ColumnScore& score) {
    // groups_: their count, each group's first position in the order and
    // its size, then the order (anchors drawn on the host left out): at
    // most 3·anchors + 1 values, one group an anchor.
    std::int64_t const anchors = draws_host.extent(0);
    std::vector<int> order;
    for (std::int64_t c = 0; c < anchors; ++c)
      if (draws_host(c).column < 0) order.push_back(int(c));
    auto const kind = [&](int c) {
      AnchorDraw const& d = draws_host(c);
      return std::pair(d.slot, d.coupling);
    };
    std::stable_sort(order.begin(), order.end(),
                     [&](int l, int r) { return kind(l) < kind(r); });
    int const most = int(std::clamp<std::int64_t>(
        std::int64_t(order.size()) * parts_ / kTeams, 1, kGroup));
    std::vector<std::pair<int, int>> groups;
    for (std::size_t q = 0; q < order.size(); ++q)
      if (q == 0 || kind(order[q]) != kind(order[q - 1]) ||
          groups.back().second == most)
        groups.push_back({int(q), 1});
      else
        ++groups.back().second;
    int const count = int(groups.size());
    groups_host_(0) = count;
    for (int e = 0; e < count; ++e) {
      groups_host_(1 + 2 * e) = groups[e].first;
      groups_host_(2 + 2 * e) = groups[e].second;
    }
    for (std::size_t q = 0; q < order.size(); ++q)
      groups_host_(1 + 2 * count + q) = order[q];
    if (count == 0) return;
    Kokkos::deep_copy(space, groups_, groups_host_);

    using Member = typename Kokkos::TeamPolicy<Space>::member_type;
    constexpr int kTeam = 128, kRowValues = kGroup * kPiece / kTeam;
    static_assert(kRowValues * kTeam == kGroup * kPiece);
    std::int64_t const k = terms.k, rank = terms.rank, parts = parts_;
    auto const best = best_;
    auto const at = at_;
    auto const info = groups_;
    Kokkos::parallel_for(
        "softwave::gw::sample_columns",
        compat::light_weight(
            Kokkos::TeamPolicy<Space>(space, count * parts, kTeam))
            .set_scratch_size(
                0, Kokkos::PerTeam((kTeam * (kPiece + 1) + kGroup * kPiece) *
                                   sizeof(T))),
        KOKKOS_LAMBDA(const Member& team) {
          std::int64_t const group = team.league_rank() / parts,
                             part = team.league_rank() % parts;
          int const first = info(1 + 2 * group), size = info(2 + 2 * group);
          int const* const members = &info(1 + 2 * info(0) + first);
          AnchorDraw const lead = draws(members[0]);
          bool const given = lead.slot < 0;
          int const me = team.team_rank();
          T* const q_piece = static_cast<T*>(
              team.team_scratch(0).get_shmem(kTeam * (kPiece + 1) * sizeof(T)));
          T* const p_piece = static_cast<T*>(
              team.team_scratch(0).get_shmem(kGroup * kPiece * sizeof(T)));
          // Each anchor's best score and its first column, this thread's.
          double top[kGroup];
          int column[kGroup];
          for (int a = 0; a < kGroup; ++a)
            top[a] = -INFINITY, column[a] = int(k);
          std::int64_t const lo = part * k / parts, hi = (part + 1) * k / parts;
          for (std::int64_t tile = lo; tile < hi; tile += kTeam) {
            int const width = int(hi - tile < kTeam ? hi - tile : kTeam);
            std::int64_t const j = tile + (me < width ? me : 0);
            T dot[kGroup] = {};
            if (!given)
              for (std::int64_t c0 = 0; c0 < rank; c0 += kPiece) {
                int const piece = rank - c0 < kPiece ? int(rank - c0) : kPiece;
                T staged[kPiece];
                for (int v = 0; v < kPiece; ++v) {
                  int const e = me + kTeam * v;
                  staged[v] = e % kPiece < piece && e / kPiece < width
                                  ? terms.q(lead.slot, tile + e / kPiece,
                                            c0 + e % kPiece)
                                  : T(0);
                }
                // The anchors' rows (zero past the group's last).
                T rows[kRowValues];
                for (int v = 0; v < kRowValues; ++v) {
                  int const e = me + kTeam * v;
                  rows[v] =
                      e / kPiece < size && e % kPiece < piece
                          ? terms.p(lead.slot, draws(members[e / kPiece]).row,
                                    c0 + e % kPiece)
                          : T(0);
                }
                team.team_barrier();  // the last piece's reads are done
                for (int v = 0; v < kPiece; ++v) {
                  int const e = me + kTeam * v;
                  q_piece[(e / kPiece) * (kPiece + 1) + e % kPiece] = staged[v];
                }
                for (int v = 0; v < kRowValues; ++v)
                  p_piece[me + kTeam * v] = rows[v];
                team.team_barrier();
                // (The bound is kGroup so that dot stays in registers; a
                // group of fewer anchors skips the rest's products.)
                for (int q = 0; q < piece; ++q) {
                  T const qv = q_piece[me * (kPiece + 1) + q];
                  for (int a = 0; a < kGroup; ++a)
                    if (a < size) dot[a] += p_piece[a * kPiece + q] * qv;
                }
              }
            if (me >= width) continue;
            for (int a = 0; a < kGroup; ++a) {
              if (a >= size) break;
              int const c = members[a];
              double const s = score(draws(c), c, j, dot[a]);
              if (s > top[a]) top[a] = s, column[a] = int(j);
            }
          }
          for (int a = 0; a < size; ++a) {
            double best_score = top[a];
            team.team_reduce(Kokkos::Max<double>(best_score));
            int first_column = top[a] == best_score ? column[a] : int(k);
            team.team_reduce(Kokkos::Min<int>(first_column));
            Kokkos::single(Kokkos::PerTeam(team), [&]() {
              best(members[a], part) = best_score;
              at(members[a], part) = first_column;
            });
          }
        });
  }

 private:
  std::int64_t parts_;
  Kokkos::View<double**, Kokkos::LayoutRight, Memory> best_;
  Kokkos::View<int**, Kokkos::LayoutRight, Memory> at_;
  Kokkos::View<int*, Kokkos::LayoutRight, Memory> groups_;
  typename Kokkos::View<int*, Kokkos::LayoutRight, Memory>::HostMirror
      groups_host_;
};

// (‖first‖_F, ‖second‖_F) over their rows, accumulated in float64 (signed
// weights make one a difference): two sums of the same terms and rows with
// other weights, as a change check compares them, in one launch. A team per
// sum, block of rows and part of the columns: a check covers few rows
// (GwOptions::check_rows), and teams over whole rows alone would leave most
// of a GPU idle. Each team's total goes back to the host, summed there in
// order: one read-back for both, and the same totals on every run.
template <class T, class Space>
std::pair<double, double> frobenius_norms(const Space& space,
                                          const TermSum<T, Space>& first,
                                          const TermSum<T, Space>& second) {
  using Sum = TermSum<T, Space>;
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = Sum::kTileRows;
  constexpr std::int64_t kTeams = 2048;
  // (Parts of fewer columns stage each block's rows more often: at least
  // 128 a part took 4.8 against 3.6 ms a check at 1,024 × 12,000 on an
  // H100, with no gain at 1,024 × 2,500.)
  constexpr std::int64_t kLeastColumns = 256;
  std::int64_t const k = first.terms.k;
  std::int64_t const blocks = (first.row_count() + R - 1) / R;
  std::int64_t const parts = std::max<std::int64_t>(
      1, std::min((kTeams + blocks - 1) / blocks, k / kLeastColumns));
  std::int64_t const teams = blocks * parts;
  auto const totals = uninitialised<double*>(
      space, "softwave::gw::frobenius_totals", 2 * teams);
  Kokkos::parallel_for(
      "softwave::gw::frobenius_norms", visit_policy<T>(space, 2 * teams),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const q = team.league_rank() % teams;
        Sum const& sum = team.league_rank() < teams ? first : second;
        std::int64_t const q0 = q / parts * R, part = q % parts;
        double block_total = 0;
        sum.visit_block(team, q0, sum.rows_from(q0, R), part * k / parts,
                        (part + 1) * k / parts,
                        [&](int, int, std::int64_t, double value) {
                          block_total += value * value;
                        });
        team.team_reduce(Kokkos::Sum<double>(block_total));
        Kokkos::single(Kokkos::PerTeam(team),
                       [&]() { totals(team.league_rank()) = block_total; });
      });
  auto const host =
      compat::host_mirror("softwave::gw::frobenius_totals_host", totals);
  Kokkos::deep_copy(space, host, totals);
  space.fence();
  double squares[2] = {0, 0};
  for (std::int64_t q = 0; q < 2 * teams; ++q) squares[q / teams] += host(q);
  return {std::sqrt(squares[0]), std::sqrt(squares[1])};
}

}  // namespace softwave::impl
