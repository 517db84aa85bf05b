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
#include <vector>

#include "../sinkhorn/passes.hpp"

namespace softwave::impl {

// An array of the call, row-major in the instance's memory, not
// initialised.
template <class Data, class Space, class... Extents>
Kokkos::View<Data, Kokkos::LayoutRight, typename Space::memory_space>
uninitialised(const Space& space, const char* label, Extents... extents) {
  return Kokkos::View<Data, Kokkos::LayoutRight, typename Space::memory_space>(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                         std::string(label)),
      extents...);
}

// A host vector copied into a new array of the call (fenced: the host
// staging copy is freed on return).
template <class Value, class Space>
Kokkos::View<Value*, Kokkos::LayoutRight, typename Space::memory_space>
on_device(const Space& space, const std::vector<Value>& values,
          const char* label) {
  auto const out = uninitialised<Value*>(space, label, values.size());
  auto const host = Kokkos::create_mirror_view(out);
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

  // Rows a team evaluates together: each column's factor row is read
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
  // The first position of a team's block (a team per block), and how many
  // rows the block from position q0 has.
  template <class Member>
  KOKKOS_INLINE_FUNCTION std::int64_t first_row(const Member& team) const {
    return std::int64_t(team.league_rank()) * rows;
  }
  KOKKOS_INLINE_FUNCTION int rows_from(std::int64_t q0) const {
    std::int64_t const left = row_count() - q0;
    return left < rows ? int(left) : rows;
  }
  // out[r] = Σ_s w_s π_s(row_at(q0 + r), j) for the block's rows r < count
  // (its last rows may be fewer; their loads repeat the last row).
  KOKKOS_INLINE_FUNCTION void block(std::int64_t q0, int count, std::int64_t j,
                                    double* out) const {
    std::int64_t row[rows];
    for (int r = 0; r < rows; ++r)
      row[r] = row_at(q0 + (r < count ? r : count - 1));
    // The given initial coupling's part, added after the a_i b_j below.
    double given[rows];
    for (int r = 0; r < rows; ++r) out[r] = given[r] = 0;
    for (std::size_t e = 0; e < list.extent(0); ++e) {
      TermWeight const t = list(e);
      if (t.slot < 0 && initial.extent(0)) {
        for (int r = 0; r < count; ++r)
          given[r] += t.weight * initial_scale * double(initial(row[r], j));
        continue;
      }
      if (t.slot < 0) {
        for (int r = 0; r < rows; ++r) out[r] += t.weight * product_scale;
        continue;
      }
      T dot[rows] = {};
      for (std::int64_t c = 0; c < terms.rank; ++c) {
        T const qc = terms.q(t.slot, j, c);
        for (int r = 0; r < rows; ++r)
          dot[r] += terms.p(t.slot, row[r], c) * qc;
      }
      if (t.coupling) {  // the entry itself, not scaled by a_i b_j
        for (int r = 0; r < count; ++r) given[r] += t.weight * double(dot[r]);
        continue;
      }
      T const column = terms.g(t.slot, j) - terms.v(t.slot, j);
      T const inverse = T(t.inverse_epsilon);
      for (int r = 0; r < count; ++r) {
        T const s = terms.f(t.slot, row[r]) - terms.u(t.slot, row[r]) + column +
                    dot[r] - terms.linear_at(row[r], j);
        out[r] += t.weight * double(compat::exp(s * inverse));
      }
    }
    double const bj = b_at(j);
    for (int r = 0; r < count; ++r)
      out[r] = out[r] * a_at(row[r]) * bj + given[r];
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

// A team per block of TermSum::rows rows, its threads over the columns.
template <class T, class Space>
Kokkos::TeamPolicy<Space> block_policy(const Space& space,
                                       const TermSum<T, Space>& sum) {
  constexpr int R = TermSum<T, Space>::rows;
  return Kokkos::TeamPolicy<Space>(space, (sum.row_count() + R - 1) / R,
                                   Kokkos::AUTO);
}

// plan(i, j) = sum(i, j).
template <class T, class Space>
void render_plan(const Space& space, const TermSum<T, Space>& sum,
                 const OTView2<T, Space>& plan) {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = TermSum<T, Space>::rows;
  std::int64_t const k = sum.terms.k;
  Kokkos::parallel_for(
      "softwave::gw::render_plan", block_policy(space, sum),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const i0 = sum.first_row(team);
        int const count = sum.rows_from(i0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k),
                             [&](std::int64_t j) {
                               double out[R];
                               sum.block(i0, count, j, out);
                               for (int r = 0; r < count; ++r)
                                 plan(i0 + r, j) = T(out[r]);
                             });
      });
}

// rows(q) = Σ_j sum(row_at(q), j), in float64.
template <class T, class Space>
void row_sums(const Space& space, const TermSum<T, Space>& sum,
              const Kokkos::View<double*, typename Space::memory_space>& rows) {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = TermSum<T, Space>::rows;
  std::int64_t const k = sum.terms.k;
  Kokkos::parallel_for(
      "softwave::gw::row_sums", block_policy(space, sum),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const q0 = sum.first_row(team);
        int const count = sum.rows_from(q0);
        // Each thread's sums of its columns, then the team's.
        double partial[R];
        for (int r = 0; r < R; ++r) partial[r] = 0;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k),
                             [&](std::int64_t j) {
                               double out[R];
                               sum.block(q0, count, j, out);
                               for (int r = 0; r < count; ++r)
                                 partial[r] += out[r];
                             });
        for (int r = 0; r < count; ++r) {
          double total = partial[r];
          team.team_reduce(Kokkos::Sum<double>(total));
          if (team.team_rank() == 0) rows(q0 + r) = total;
        }
      });
}

// matching(i) = argmax_j sum(i, j) (the first maximum).
template <class T, class Space>
void row_argmax(const Space& space, const TermSum<T, Space>& sum,
                const OTView1<int, Space>& matching) {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = TermSum<T, Space>::rows;
  std::int64_t const k = sum.terms.k;
  Kokkos::parallel_for(
      "softwave::gw::row_argmax", block_policy(space, sum),
      KOKKOS_LAMBDA(const Member& team) {
        std::int64_t const i0 = sum.first_row(team);
        int const count = sum.rows_from(i0);
        // Each thread's best of its columns, then the team's: the largest
        // value, and the first column that has it.
        double value[R];
        std::int64_t column[R];
        for (int r = 0; r < R; ++r) value[r] = -1, column[r] = k;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, k),
                             [&](std::int64_t j) {
                               double out[R];
                               sum.block(i0, count, j, out);
                               for (int r = 0; r < count; ++r)
                                 if (out[r] > value[r])
                                   value[r] = out[r], column[r] = j;
                             });
        for (int r = 0; r < count; ++r) {
          double best = value[r];
          team.team_reduce(Kokkos::Max<double>(best));
          std::int64_t first = value[r] == best ? column[r] : k;
          team.team_reduce(Kokkos::Min<std::int64_t>(first));
          if (team.team_rank() == 0) matching(i0 + r) = int(first);
        }
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
// with the counter-based key (key, c, column), all anchors at once: a team
// per anchor and part of the columns keeps its best, then a thread per
// anchor takes the best of the parts in order (the first column of the
// largest score: the same draw for any number of parts).
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
                                 anchors, parts_)) {}

  void sample(const Space& space, const PlanTerms<T, Space>& terms,
              const OTView1<const T, Space>& b,
              const OTView2<const T, Space>& initial,
              const Kokkos::View<const AnchorDraw*, Memory>& draws,
              std::uint64_t key, const Kokkos::View<int*, Memory>& columns) {
    using Member = typename Kokkos::TeamPolicy<Space>::member_type;
    std::int64_t const k = terms.k, rank = terms.rank, parts = parts_;
    auto const best = best_;
    auto const at = at_;
    Kokkos::parallel_for(
        "softwave::gw::sample_columns",
        Kokkos::TeamPolicy<Space>(space, draws.extent(0) * parts, Kokkos::AUTO),
        KOKKOS_LAMBDA(const Member& team) {
          std::int64_t const c = team.league_rank() / parts,
                             part = team.league_rank() % parts;
          AnchorDraw const d = draws(c);
          if (d.column >= 0) return;  // drawn on the host
          bool const given = d.slot < 0;
          std::uint64_t const anchor_key = mix64(key + std::uint64_t(c));
          // (A coupling's slot has no potentials: its f and u are unset.)
          T const row = given || d.coupling
                            ? T(0)
                            : terms.f(d.slot, d.row) - terms.u(d.slot, d.row);
          // The thread's best score and its first column, then the team's.
          double score_of_thread = -INFINITY;
          std::int64_t column_of_thread = k;
          Kokkos::parallel_for(
              Kokkos::TeamThreadRange(team, part * k / parts,
                                      (part + 1) * k / parts),
              [&](std::int64_t j) {
                if (given) {  // log of the entry (zero: never drawn)
                  double const score = compat::log(double(initial(d.row, j))) +
                                       gumbel(anchor_key, j);
                  if (score > score_of_thread)
                    score_of_thread = score, column_of_thread = j;
                  return;
                }
                T dot = 0;
                for (std::int64_t r = 0; r < rank; ++r)
                  dot += terms.p(d.slot, d.row, r) * terms.q(d.slot, j, r);
                if (d.coupling) {  // the entry's log (zero: never drawn)
                  double const score =
                      compat::log(double(dot)) + gumbel(anchor_key, j);
                  if (score > score_of_thread)
                    score_of_thread = score, column_of_thread = j;
                  return;
                }
                double score =
                    double(row + terms.g(d.slot, j) - terms.v(d.slot, j) + dot -
                           terms.linear_at(d.row, j)) *
                        d.inverse_epsilon +
                    gumbel(anchor_key, j);
                if (b.extent(0)) score += compat::log(double(b(j)));
                if (score > score_of_thread)
                  score_of_thread = score, column_of_thread = j;
              });
          double top = score_of_thread;
          team.team_reduce(Kokkos::Max<double>(top));
          std::int64_t first = score_of_thread == top ? column_of_thread : k;
          team.team_reduce(Kokkos::Min<std::int64_t>(first));
          Kokkos::single(Kokkos::PerTeam(team), [&]() {
            best(c, part) = top;
            at(c, part) = int(first);
          });
        });
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

 private:
  static constexpr std::int64_t kLeastColumns = 256, kMostParts = 64;
  std::int64_t parts_;
  Kokkos::View<double**, Kokkos::LayoutRight, Memory> best_;
  Kokkos::View<int**, Kokkos::LayoutRight, Memory> at_;
};

// ‖sum‖_F over its rows, accumulated in float64 (signed weights make it a
// difference). A team per block of rows and part of the columns: a check
// covers few rows (GwOptions::check_rows), and teams over whole rows alone
// would leave most of a GPU idle.
template <class T, class Space>
double frobenius_norm(const Space& space, const TermSum<T, Space>& sum) {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  constexpr int R = TermSum<T, Space>::rows;
  constexpr std::int64_t kTeams = 2048, kLeastColumns = 256;
  std::int64_t const k = sum.terms.k;
  std::int64_t const blocks = (sum.row_count() + R - 1) / R;
  std::int64_t const parts = std::max<std::int64_t>(
      1, std::min((kTeams + blocks - 1) / blocks, k / kLeastColumns));
  double total = 0;
  Kokkos::parallel_reduce(
      "softwave::gw::frobenius_norm",
      Kokkos::TeamPolicy<Space>(space, blocks * parts, Kokkos::AUTO),
      KOKKOS_LAMBDA(const Member& team, double& out) {
        std::int64_t const q0 = team.league_rank() / parts * R,
                           part = team.league_rank() % parts;
        int const count = sum.rows_from(q0);
        double block_total = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, part * k / parts,
                                    (part + 1) * k / parts),
            [&](std::int64_t j, double& s) {
              double values[R];
              sum.block(q0, count, j, values);
              for (int r = 0; r < count; ++r) s += values[r] * values[r];
            },
            block_total);
        Kokkos::single(Kokkos::PerTeam(team), [&]() { out += block_total; });
      },
      total);
  return std::sqrt(total);
}

}  // namespace softwave::impl
