#pragma once
// The DEER solver behind softwave/deer.hpp: templates over the recurrence,
// so that a user's cell is compiled where it is defined. Include
// softwave/deer.hpp, not this header.
//
// A recurrence (internal concept) is z_s = F_b,s(z_{s−1}) for s < L_b,
// z_{−1} = initial(b), with z stored at slot t(s) = s (forward in time) or
// L_b − 1 − s (the adjoint, backward in time). It provides state_size(),
// work_size(), length(b), initial(b, z) and step(b, t, z_prev, z, jacobian,
// kind, work) as the cells of deer.hpp do, indexed by the slot t of z.

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <softwave/deer.hpp>
#include <softwave/errors.hpp>
#include <softwave/kokkos_compat.hpp>
#include <string>
#include <type_traits>
#include <vector>

namespace softwave::impl::deer {

// What a step linearises: nothing, the full Jacobian, its diagonal, or its
// diagonal blocks (of the recurrence's block size).
enum class Linearise : int { none, full, diagonal, block };

// The linearisation of Jacobians kept in diagonal blocks of `block` values
// a side: blocks of 1 are the diagonal, one block of n the full matrix.
KOKKOS_INLINE_FUNCTION Linearise linearise(int block, int n) {
  return block == n ? Linearise::full
                    : (block == 1 ? Linearise::diagonal : Linearise::block);
}

// Whether a cell (or field) can share a step among a team's threads: its
// constant team_loop, with team_values(), team_width(), team_begin() and
// team_step() (OdeCell's, for MlpField). The sequential loop then runs a
// team a sequence on a device.
template <class X, class = void>
struct TeamLoop : std::false_type {};
template <class X>
struct TeamLoop<X, std::void_t<decltype(X::team_loop)>>
    : std::bool_constant<X::team_loop> {};
// Whether a cell can share its vector–Jacobian product among a team's
// threads (its constant team_adjoint, with team_adjoint_values() and
// team_vector_jacobian(): TorchCell's), for the adjoint's sequential loop.
template <class X, class = void>
struct TeamAdjoint : std::false_type {};
template <class X>
struct TeamAdjoint<X, std::void_t<decltype(X::team_adjoint)>>
    : std::bool_constant<X::team_adjoint> {};

// Whether a cell linearises a step a unit at a time: its constant
// unit_steps, with units() and step_unit(i, z_prev, p, row) (TorchCell's;
// a recurrence's is step_unit(b, t, z_prev, i, row)). Unit i gives its
// states s and their Jacobian rows as row(s, z_s, entry), entry(j) =
// ∂z_s/∂z_prev_j, from z_prev alone. A team a chunk then makes its steps'
// maps a thread a unit (Solver::Data::run_team_item), not a thread a step.
template <class X, class = void>
struct UnitSteps : std::false_type {};
template <class X>
struct UnitSteps<X, std::void_t<decltype(X::unit_steps)>>
    : std::bool_constant<X::unit_steps> {};

// Whether a recurrence that is linear in its state (the adjoint) makes its
// steps' full maps a unit a thread: its constant unit_columns, with
// units(), last(b, t) (a step that reads no state: its map is zero),
// step_unit_columns(b, t, i, column), where unit i gives its columns s of
// the map as column(s, entry), entry(j) = A(j, s), and direct(b, t, j),
// the step's value at a zero state.
template <class X, class = void>
struct UnitColumns : std::false_type {};
template <class X>
struct UnitColumns<X, std::void_t<decltype(X::unit_columns)>>
    : std::bool_constant<X::unit_columns> {};

// Per-sequence state of the iterations (Solver::status).
enum Status : int {
  active = 0,
  converged_even = 1,    // converged; the result is in the first buffer
  converged_odd = 2,     // in the second
  diverged = 3,          // to be evaluated sequentially
  converged_damped = 4,  // converged damped iterations; in the first buffer
};

// Whether Space runs on the host (its threads share the host's memory).
template <class Space>
inline constexpr bool runs_on_host =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                               typename Space::memory_space>::accessible;

// A range of n work items on `space` whose kernel takes its functor as a
// launch argument (compat::light_weight): Kokkos' CUDA backend otherwise
// passes a functor over 512 bytes through constant memory, waiting on the
// host for the previous such launch, which a CUDA-graph capture cannot hold.
template <class Space>
auto work_items(const Space& space, std::int64_t n) {
  return compat::light_weight(Kokkos::RangePolicy<Space>(space, 0, n));
}

// for_each_step's kernel: a team per run of one sequence's consecutive
// steps, its threads every team_size-th step of the run.
template <class Space, class Body>
struct StepRuns {
  Body body;
  std::int64_t steps;
  int runs, run_length;
  KOKKOS_INLINE_FUNCTION void operator()(
      const typename Kokkos::TeamPolicy<Space>::member_type& member) const {
    int const b = member.league_rank() / runs;
    std::int64_t const first =
        std::int64_t(member.league_rank() - b * runs) * run_length;
    int const count =
        int(steps - first < run_length ? steps - first : run_length);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, count),
                         [&](int i) { body(b, first + i); });
  }
};

// body(b, t) for every step t < steps of each of `batch` sequences. A flat
// range over batch·steps split every index with a 64-bit division, which
// cost more than the work itself in a pass over the whole trajectory: at
// n = 1, B = 16, T = 1M such a pass took 156 µs on an H200, several times
// its bytes. Here the division is one a team, and a warp's threads take
// consecutive steps (whole lines where a step's values are contiguous).
template <class Space, class Body>
void for_each_step(const Space& space, const std::string& label,
                   std::int64_t batch, std::int64_t steps, const Body& body) {
  if (batch <= 0 || steps <= 0) return;
  bool const host = runs_on_host<Space>;
  int const team_size = host ? 1 : 256;
  // Runs of 8 steps a thread on a device; longer where the league would
  // not fit Kokkos' int league size.
  std::int64_t run_length = host ? 4096 : 8 * team_size;
  std::int64_t const most_runs = std::int64_t(1) << 30;
  while (batch * ((steps + run_length - 1) / run_length) > most_runs)
    run_length *= 2;
  int const runs = int((steps + run_length - 1) / run_length);
  Kokkos::parallel_for(
      label,
      compat::light_weight(
          Kokkos::TeamPolicy<Space>(space, int(batch * runs), team_size)),
      StepRuns<Space, Body>{body, steps, runs, int(run_length)});
}

// Sequence b and step t of flat step index q = b·steps + t, by a 32-bit
// division where q allows (a 64-bit one costs several times as many
// instructions on a GPU, where a kernel of a thread a step runs it once a
// step).
KOKKOS_INLINE_FUNCTION void split_step(std::int64_t q, std::int64_t steps,
                                       int& b, int& t) {
  std::int64_t const quotient =
      q <= std::int64_t(0xffffffffu) && steps <= std::int64_t(0xffffffffu)
          ? std::int64_t(std::uint32_t(q) / std::uint32_t(steps))
          : q / steps;
  b = int(quotient);
  t = int(q - quotient * steps);
}

// Resolved settings of one solve.
struct Settings {
  double atol = 0, rtol = 0;
  int max_iterations = 1;
  int chunk = 0;  // 0: choose
  bool warm_start = false;
  int start_warm_up = -1;  // DeerOptions::start_warm_up; -1: unset
  DeerMethod method = DeerMethod::automatic;
  DeerJacobian jacobian = DeerJacobian::full;
  int block = 1;         // the Jacobians' diagonal blocks: n full, 1 diagonal
  bool strided = false;  // DeerBlockLayout::strided (block_state)
  Kernel kernel = Kernel::automatic;
  double damping = 0;
  // A linear recurrence (the adjoint): with full Jacobians one pass is the
  // exact solution, and no second pass is run to confirm it.
  bool linear = false;
  int check_every = 1;      // DeerOptions::check_every
  int team_size = 0;        // DeerOptions::sequential_team_size
  int chunk_team_size = 0;  // DeerOptions::chunk_team_size
};

// Checks a call's arguments (softwave/src/deer/deer.cpp, for float and
// double on each space the library is built for): shapes against n and m,
// lengths in [1, T], finite inputs and initial states, the options. Throws
// softwave::invalid_argument naming the argument. Returns the settings.
template <class Space, class T>
Settings check_call(const Space& space, const DeerInputs<T, Space>& inputs,
                    int n, int m, const DeerOptions& options,
                    const char* y_name, std::size_t y_extent0,
                    std::size_t y_extent1, std::size_t y_extent2);

// --- small dense algebra on a thread's own arrays ---------------------------

// Jacobians in diagonal blocks of k×k (n/k blocks, each row-major, one
// after another: k = n is the full matrix, k = 1 its diagonal). Block q
// couples the states block_state(q, 0 … k − 1): consecutive ones, or with
// `strided` (DeerBlockLayout::strided) every (n/k)-th. Only the maps'
// action on a state (apply) and their extraction from a full Jacobian
// (diagonal_blocks) see the layout; products of maps do not.
KOKKOS_INLINE_FUNCTION int block_state(int q, int i, int k, int n,
                                       bool strided) {
  return strided ? q + i * (n / k) : q * k + i;
}

// out = A v.
template <class T>
KOKKOS_INLINE_FUNCTION void apply(const T* A, int k, int n, bool strided,
                                  const T* v, T* out) {
  for (int q = 0; q < n / k; ++q) {
    T const* const a = A + q * k * k;
    for (int i = 0; i < k; ++i) {
      T sum = 0;
      for (int j = 0; j < k; ++j)
        sum += a[i * k + j] * v[block_state(q, j, k, n, strided)];
      out[block_state(q, i, k, n, strided)] = sum;
    }
  }
}

// P ← A P (tmp: k values).
template <class T>
KOKKOS_INLINE_FUNCTION void compose(const T* A, int k, int n, T* P, T* tmp) {
  for (int g = 0; g < n; g += k) {
    T const* const a = A + g * k;
    T* const p = P + g * k;
    for (int j = 0; j < k; ++j) {
      for (int i = 0; i < k; ++i) {
        T sum = 0;
        for (int q = 0; q < k; ++q) sum += a[i * k + q] * p[q * k + j];
        tmp[i] = sum;
      }
      for (int i = 0; i < k; ++i) p[i * k + j] = tmp[i];
    }
  }
}

template <class T>
KOKKOS_INLINE_FUNCTION void set_identity(T* P, int k, int n) {
  for (int g = 0; g < n; g += k)
    for (int i = 0; i < k * k; ++i)
      P[g * k + i] = (i % (k + 1) == 0) ? T(1) : T(0);
}

// The diagonal blocks (k×k) of J (n×n row-major) into blocks; transposed
// blocks where `transposed`.
template <class T>
KOKKOS_INLINE_FUNCTION void diagonal_blocks(const T* J, int k, int n,
                                            bool strided, bool transposed,
                                            T* blocks) {
  for (int q = 0; q < n / k; ++q)
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j) {
        int const row = block_state(q, i, k, n, strided);
        int const column = block_state(q, j, k, n, strided);
        blocks[q * k * k + i * k + j] =
            transposed ? J[column * n + row] : J[row * n + column];
      }
}

// Row s of a Jacobian, entry(j) = J(s, j), into its diagonal blocks of k×k
// (apply's layout): the k entries of the block that holds state s.
template <class T, class Entry>
KOKKOS_INLINE_FUNCTION void block_row(T* blocks, int s, int k, int n,
                                      bool strided, const Entry& entry) {
  int const groups = n / k;
  int const q = strided ? s % groups : s / k;
  int const i = strided ? s / groups : s % k;
  T* const row = blocks + (q * k + i) * k;
  for (int j = 0; j < k; ++j) row[j] = entry(block_state(q, j, k, n, strided));
}

// The tolerance ratio of a step's update δ to its new value y.
template <class R>
KOKKOS_INLINE_FUNCTION R tolerance_ratio(R delta, R y, R atol, R rtol) {
  return compat::fabs(delta) / (atol + rtol * compat::fabs(y));
}

// The larger of worst and ratio, a NaN ratio counting as +∞.
template <class R>
KOKKOS_INLINE_FUNCTION R worse(R worst, R ratio) {
  if (ratio <= worst) return worst;
  return ratio == ratio ? ratio : compat::infinity<R>();
}

// --- per-thread scratch -----------------------------------------------------

// A team policy whose threads each run one work item with `values` values
// of T of their own: in fast team memory where they fit, else in the
// global scratch Kokkos keeps for resident teams. One thread a team on the
// host (a team per OpenMP thread), 64 on a device.
template <class Space>
struct ThreadItems {
  static constexpr bool host = runs_on_host<Space>;
  using Policy = Kokkos::TeamPolicy<Space>;
  using Member = typename Policy::member_type;
  int team_size = host ? 1 : 64;
  int level = 0;
  std::size_t bytes = 0;
  std::int64_t items = 0;

  std::int64_t league = 0;  // the teams; 0: a thread per item
  // With `global`, each thread's values are its slot of this array.
  Kokkos::View<char*, typename Space::memory_space> global;

  template <class T>
  ThreadItems(std::int64_t item_count, std::int64_t values, T) {
    items = item_count;
    bytes = (std::size_t(std::max<std::int64_t>(values, 1)) * sizeof(T) + 15) /
            16 * 16;
    std::size_t const fast = Policy::scratch_size_max(0);
    level = bytes * team_size <= fast / 2 ? 0 : 1;
  }

  // The most memory the items' level-1 values may take on a device.
  static constexpr std::size_t kMaxSlotBytes = std::size_t(1) << 28;

  // These items with their values in an array of `memory` (a solve's
  // SolveMemory) where they would take level-1 scratch and either `wanted`
  // (a solve that never waits for the device) or Kokkos' scratch would pass
  // kMaxSlotBytes. Kokkos grows an instance's level-1 scratch at its first
  // use with an allocation and a fence, which a CUDA-graph capture cannot
  // hold, and sizes it for every thread the device keeps resident (270,336
  // on an H200): a cell of 1 MB of values a thread would ask for 264 GB. A
  // slot per thread of a league capped at the resident teams and at
  // kMaxSlotBytes (one team at least), each team striding over the items.
  template <class Memory>
  ThreadItems values_in(Memory& memory, const Space& space, bool wanted) const {
    if (level == 0 || host) return *this;
    std::size_t const team_bytes = std::size_t(team_size) * bytes;
    std::int64_t const resident = space.concurrency() / team_size;
    bool const too_large = std::size_t(resident) * team_bytes > kMaxSlotBytes;
    if (!wanted && !too_large) return *this;
    ThreadItems out = *this;
    out.league = std::max<std::int64_t>(
        1,
        std::min<std::int64_t>({resident, (items + team_size - 1) / team_size,
                                std::int64_t(kMaxSlotBytes / team_bytes)}));
    out.global =
        memory
            .template array<Kokkos::View<char*, typename Space::memory_space>>(
                "item_values", false,
                std::size_t(out.league) * team_size * bytes);
    out.level = 0;
    return out;
  }

  Policy policy(const Space& space) const {
    std::int64_t const teams =
        league > 0 ? league : (items + team_size - 1) / team_size;
    return Policy(space, std::max<std::int64_t>(teams, 1), team_size)
        .set_scratch_size(level, Kokkos::PerThread(global.data() ? 0 : bytes));
  }

  // body(item, values) for every item in [0, items), each on a thread with
  // its own `values`. (A functor, not a lambda: CUDA's device lambdas may
  // not be defined in a function template instantiated with a lambda type.)
  template <class T, class Body>
  struct Kernel {
    Body body;
    int level;
    std::size_t bytes;
    int team_size;
    std::int64_t items;
    char* global;
    KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
      std::int64_t const thread =
          std::int64_t(member.league_rank()) * team_size + member.team_rank();
      if (global) {
        T* const values = reinterpret_cast<T*>(global + thread * bytes);
        std::int64_t const threads =
            std::int64_t(member.league_size()) * team_size;
        for (std::int64_t item = thread; item < items; item += threads)
          body(item, values);
        return;
      }
      T* const values =
          static_cast<T*>(member.thread_scratch(level).get_shmem(bytes));
      if (thread < items) body(thread, values);
    }
  };
  template <class T, class Body>
  void for_each(const Space& space, const std::string& label,
                const Body& body) const {
    Kokkos::parallel_for(
        label, compat::light_weight(policy(space)),
        Kernel<T, Body>{body, level, bytes, team_size, items, global.data()});
  }
};

// --- a team a chunk ---------------------------------------------------------

// The team that folds one chunk of maps in the Newton iterations' passes
// (Solver::iterate, solve_chunks): `threads` threads (0: a thread a chunk,
// ThreadItems) which make up to `steps` positions' maps at once (a thread
// a unit of each where the recurrence can, UnitSteps; else a thread each)
// and divide each position's products among them, with `bytes` of the
// team's fast memory.
struct FoldTeam {
  int threads = 0, steps = 0;
  std::size_t bytes = 0;
};

// The values of a fold in the team's fast memory: the composed map and its
// next value (n·k each), the offset and its next value (n), then for each
// position made at once its map (n·k), offset (n) and `work` values.
inline std::size_t fold_values(int n, int block, int steps, int work) {
  std::size_t const na = std::size_t(n) * block;
  return 2 * na + 2 * std::size_t(n) + std::size_t(steps) * (na + n + work);
}

// The fold team for DeerOptions::chunk_team_size `asked`, maps of n/k
// blocks of k×k, `work` values to make a position's map, chunks of `chunk`
// positions. 0 chooses a team on a device for blocks of k >= 4, where a
// thread a chunk keeps its n·k-value maps in global scratch and waits on
// memory at each of a step's n·k² products (on an H200, n = 16 full, B =
// 16, T = 100k: 1.59 s forward), and a thread on the host (its threads
// already run chunks side by side, a chunk's maps in their cache); 1 a
// thread; above 1 that many threads (at most the host's, or 256 on a
// device). On a device, a thread per entry of the maps, 32 to 256. The
// positions made at once: at most one a thread and `chunk`, as many as
// fit 24 KB (several teams to a multiprocessor), else the fast memory; a
// thread a chunk where one does not fit.
template <class Space, class T>
FoldTeam fold_team(const Space& space, int asked, int n, int block, int work,
                   std::int64_t chunk) {
  bool const host = runs_on_host<Space>;
  if (asked == 1 || (asked == 0 && (host || block < 4))) return {};
  FoldTeam out;
  if (asked > 1) {
    out.threads = std::min(asked, host ? int(space.concurrency()) : 256);
  } else {
    out.threads = 32;
    while (out.threads < 256 && out.threads < n * block) out.threads *= 2;
  }
  if (out.threads <= 1) return {};
  std::size_t const fast = Kokkos::TeamPolicy<Space>::scratch_size_max(0);
  std::size_t const wanted = std::min<std::size_t>(fast, 24 * 1024);
  auto const bytes = [&](int steps) {
    return fold_values(n, block, steps, work) * sizeof(T);
  };
  int steps = int(std::min<std::int64_t>(out.threads, chunk));
  while (steps > 1 && bytes(steps) > wanted) --steps;
  if (bytes(steps) > fast) return {};
  out.steps = steps;
  out.bytes = bytes(steps);
  return out;
}

// Folds positions [first, last) of one chunk on a team: w ← A_p w + c_p
// from w_i = start(i), and P ← A_p P from the identity where `composing`,
// A_p in n/k blocks of k×k (as apply and compose) and c_p made team.steps
// positions at once by load(p0, count, A, c, work), which all the team's
// threads call and which writes positions p0 … p0 + count − 1 (A_p at
// A + (p − p0)·n·k, c_p at c + (p − p0)·n, with `work` values each);
// visit(p, i, w_i) for each state of each new w. w and P are left pointing
// at their ends in `shared` (fold_values' layout: P, its next value, w,
// its next value, the positions' values). Ends with the team's barrier.
template <class T, class Member, class Start, class Load, class Visit>
KOKKOS_INLINE_FUNCTION void team_fold(
    const Member& member, const FoldTeam& team, int n, int block, bool strided,
    int work, std::int64_t first, std::int64_t last, bool composing, T* shared,
    T*& w, T*& P, const Start& start, const Load& load, const Visit& visit) {
  int const k = block, na = n * k, groups = n / k;
  P = shared;
  w = shared + 2 * na;
  T* P_next = P + na;
  T* w_next = w + n;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n),
                       [&](int i) { w[i] = start(i); });
  if (composing)
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, na), [&](int e) {
      P[e] = e % (k * k) % (k + 1) == 0 ? T(1) : T(0);
    });
  member.team_barrier();
  T* const maps = shared + 2 * na + 2 * n;
  T* const offsets = maps + std::size_t(team.steps) * na;
  T* const works = offsets + std::size_t(team.steps) * n;
  for (std::int64_t p0 = first; p0 < last; p0 += team.steps) {
    int const count =
        int(last - p0 < team.steps ? last - p0 : std::int64_t(team.steps));
    load(p0, count, maps, offsets, works);
    member.team_barrier();
    for (int s = 0; s < count; ++s) {
      T const* const A = maps + s * na;
      T const* const c = offsets + s * n;
      T const* const w_now = w;
      T const* const P_now = P;
      T* const w_out = w_next;
      T* const P_out = P_next;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n), [&](int r) {
        int const q = strided ? r % groups : r / k;
        int const i = strided ? r / groups : r % k;
        T const* const a = A + q * k * k + i * k;
        T sum = c[r];
        for (int j = 0; j < k; ++j)
          sum += a[j] * w_now[block_state(q, j, k, n, strided)];
        w_out[r] = sum;
        visit(p0 + s, r, sum);
      });
      if (composing)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, na), [&](int e) {
          int const g = e / (k * k), i = e % (k * k) / k, j = e % k;
          T const* const a = A + g * k * k + i * k;
          T const* const p = P_now + g * k * k + j;
          T sum = 0;
          for (int q = 0; q < k; ++q) sum += a[q] * p[q * k];
          P_out[e] = sum;
        });
      member.team_barrier();
      w_next = w;
      w = w_out;
      if (composing) {
        P_next = P;
        P = P_out;
      }
    }
  }
}

// A pass of a team an item, for a worker with run_team_item(member, item,
// shared, replay) (Solver::Data, ChunkLevel).
template <class Space, class T, class Worker>
struct TeamItemPass {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  Worker worker;
  std::size_t bytes;
  bool replay;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    T* const shared = static_cast<T*>(member.team_scratch(0).get_shmem(bytes));
    worker.run_team_item(member, member.league_rank(), shared, replay);
  }
};
template <class Space, class T, class Worker>
void for_each_team(const Space& space, const std::string& label,
                   std::int64_t items, const FoldTeam& team,
                   const Worker& worker, bool replay) {
  Kokkos::parallel_for(
      label,
      compat::light_weight(
          Kokkos::TeamPolicy<Space>(
              space, int(std::max<std::int64_t>(items, 1)), team.threads)
              .set_scratch_size(0, Kokkos::PerTeam(team.bytes))),
      TeamItemPass<Space, T, Worker>{worker, team.bytes, replay});
}

// --- the solver ------------------------------------------------------------

inline std::string label(const char* what) {
  return std::string("softwave::deer::") + what;
}

// The host's copy of `view` for reading it back (compat::host_mirror),
// labelled softwave::deer::<what>.
template <class View>
typename View::HostMirror host_copy(const char* what, const View& view) {
  return compat::host_mirror(label(what), view);
}

// Steps per chunk: enough chunks to fill the space (a few per thread on the
// host, about one per thread a device keeps resident), at least the block
// size k so that the chunks' composed maps (n·k each) take no more memory
// than the trajectory.
inline int choose_chunk(std::int64_t batch, std::int64_t length, int block,
                        std::int64_t concurrency, bool host) {
  std::int64_t const target = host ? 4 * concurrency : concurrency;
  std::int64_t chunk =
      (batch * length + target - 1) / std::max<std::int64_t>(target, 1);
  chunk = std::max<std::int64_t>(chunk, host ? 16 : 8);
  chunk = std::max<std::int64_t>(chunk, block);
  return int(std::min<std::int64_t>(chunk, std::max<std::int64_t>(length, 1)));
}

// Whether DEER is expected to beat the sequential loop (DeerMethod::automatic),
// a rule read off the GRU benchmark (perf/RESULTS.md, BM_DeerGru):
//  - on a device the loop runs a thread a sequence, T dependent steps of
//    about (1 + n²/8) µs on an H200, or a team a sequence (loop_team),
//    6 µs a step of the GRU at n = 16 and 15 µs at n = 64; an iteration of
//    the portable DEER kernels costs a few launches plus a throughput-bound
//    pass whose cost grows like n³ with full Jacobians (a team a chunk
//    shares it a unit a thread, fold_team). DEER won from T ≥ 2000 at n = 1
//    and T ≥ 1000 at n = 4 to 32, with full Jacobians too (on an H100,
//    T = 1k: 0.57 against 6.1 ms for the team loop at n = 16, 4.4 against
//    7.1 ms at n = 32; diagonal ones 6.1 ms at n = 32); against the team
//    loop it lost at n = 64 (diagonal, T = 1k, H200: 96 against 15 ms).
//    Taken where T·n ≥ 2000, with full Jacobians for n up to the
//    recurrence's full_limit (FullJacobianDeviceLimit: 32, the GRU's,
//    unless its cell says otherwise), with diagonal or block ones, where
//    the loop runs a team, for n up to quasi_limit
//    (QuasiJacobianDeviceLimit; 0: no bound). Where a backend's own loop
//    runs the sequences instead (SequentialLoop: on CUDA a block a
//    sequence, 3.3–9.9× the team loop on an H100), its deer_state_limit
//    bounds both (16 on CUDA: from n = 32 that loop beat DEER, 0.92
//    against 4.4 ms at T = 1k).
//    The fused iteration (FusedIteration, `fused`) costs a launch an
//    iteration: at n = 1, T = 1000 it took a third of the loop's time, and
//    it is taken where T·n ≥ 1000;
//  - on the host the loop already runs the sequences side by side, and
//    DEER's extra work (a few iterations of two passes each) pays only
//    where most threads would otherwise idle: B <= concurrency / 4 and
//    T >= 10,000.
inline bool deer_expected_faster(std::int64_t batch, std::int64_t length, int n,
                                 DeerJacobian jacobian,
                                 std::int64_t concurrency, bool host,
                                 bool fused, int full_limit, int quasi_limit) {
  bool const full = jacobian == DeerJacobian::full;
  if (host)
    return 4 * batch <= concurrency && length >= 10000 && (!full || n <= 8);
  return length * n >= (fused ? 1000 : 2000) &&
         (full ? n <= full_limit : quasi_limit == 0 || n <= quasi_limit);
}

// The largest state size at which a device's automatic method takes DEER
// with full Jacobians (deer_expected_faster): a cell's or recurrence's
// constant full_jacobian_device_limit, else 32 (the GRU's).
template <class X, class = void>
struct FullJacobianDeviceLimit : std::integral_constant<int, 32> {};
template <class X>
struct FullJacobianDeviceLimit<
    X, std::void_t<decltype(X::full_jacobian_device_limit)>>
    : std::integral_constant<int, X::full_jacobian_device_limit> {};
// The same with diagonal or block Jacobians where the sequential loop runs
// a team a sequence: a constant quasi_jacobian_device_limit, else 32 (the
// GRU's).
template <class X, class = void>
struct QuasiJacobianDeviceLimit : std::integral_constant<int, 32> {};
template <class X>
struct QuasiJacobianDeviceLimit<
    X, std::void_t<decltype(X::quasi_jacobian_device_limit)>>
    : std::integral_constant<int, X::quasi_jacobian_device_limit> {};

// The shape of a sequential loop that runs a team a sequence: `threads`
// threads of `lanes` vector lanes (threads = 0: a thread a sequence).
struct LoopTeam {
  int threads = 0, lanes = 1;
};

// The team of a recurrence that shares its steps (TeamLoop) over `width`
// products' terms with `bytes` of the team's fast memory a sequence, for
// DeerOptions::sequential_team_size `asked`: 0 chooses a team on a device,
// where a thread a sequence waits on memory at every product of a step
// (on an H200, 23–383 µs a step of the neural ODE at h = 16–64, 33–478 µs
// of the GRU at n = 16–64), and a thread on the host
// (where the threads already run sequences side by side); 1 a thread;
// above 1 that many threads (at most the host's, or 32 on a device). A
// team only where its memory fits the fast kind, and the cell can share
// its step (width > 0), and, chosen, where it has 8 rows or more: on an
// H200 the GRU at n = 1 (3 rows) took 1.45 ms for 1k steps a team a
// sequence against 0.87 ms a thread, at n = 16 (48 rows) 6.1 against 34 ms.
// On a device the threads have 8 lanes each and take the step's `width`
// product rows (a field's hidden units, a cell's gate rows) between them:
// 4 to 32 threads, one per 8 rows.
template <class Space>
LoopTeam loop_team(const Space& space, int asked, int width,
                   std::size_t bytes) {
  bool const host = runs_on_host<Space>;
  if (width <= 0 || asked == 1 || (asked == 0 && (host || width < 8)))
    return {};
  if (bytes > std::size_t(Kokkos::TeamPolicy<Space>::scratch_size_max(0)))
    return {};
  LoopTeam out;
  out.lanes = host ? 1 : 8;
  if (asked > 1) {
    out.threads = std::min(asked, host ? int(space.concurrency()) : 32);
  } else {
    out.threads = 4;
    while (out.threads < 32 && out.threads * out.lanes < width)
      out.threads *= 2;
  }
  if (out.threads * out.lanes <= 1) return {};
  return out;
}

// --- scalar scans of the damped iterations ----------------------------------

// A step's map of one value, v ← map(v), and composition, for the damped
// iterations' scans (map entries e[0..size)).
// Affine: v ← a v + b, e = {a, b}.
struct AffineMap {
  static constexpr int size = 2;
  template <class T>
  KOKKOS_INLINE_FUNCTION static void identity(T* e) {
    e[0] = 1;
    e[1] = 0;
  }
  // e ← next ∘ e
  template <class T>
  KOKKOS_INLINE_FUNCTION static void then(T* e, const T* next) {
    e[1] = next[0] * e[1] + next[1];
    e[0] = next[0] * e[0];
  }
  template <class T>
  KOKKOS_INLINE_FUNCTION static T apply(const T* e, T v) {
    return e[0] * v + e[1];
  }
};

// Möbius: v ← (a v + b) / (c v + d), e = {a, b, c, d}, composed as 2×2
// matrices and rescaled to their largest entry: the Riccati maps' entries
// are >= 0, so the products keep their direction and never overflow, and a
// map is applied to the value itself (bounded), never to homogeneous
// coordinates.
struct MobiusMap {
  static constexpr int size = 4;
  template <class T>
  KOKKOS_INLINE_FUNCTION static void identity(T* e) {
    e[0] = e[3] = 1;
    e[1] = e[2] = 0;
  }
  template <class T>
  KOKKOS_INLINE_FUNCTION static void then(T* e, const T* next) {
    T const a = next[0] * e[0] + next[1] * e[2];
    T const b = next[0] * e[1] + next[1] * e[3];
    T const c = next[2] * e[0] + next[3] * e[2];
    T const d = next[2] * e[1] + next[3] * e[3];
    T const ab =
        compat::fabs(a) > compat::fabs(b) ? compat::fabs(a) : compat::fabs(b);
    T const cd =
        compat::fabs(c) > compat::fabs(d) ? compat::fabs(c) : compat::fabs(d);
    T const scale = ab > cd ? ab : cd;
    T const k = scale > 0 ? T(1) / scale : T(1);
    e[0] = a * k;
    e[1] = b * k;
    e[2] = c * k;
    e[3] = d * k;
  }
  template <class T>
  KOKKOS_INLINE_FUNCTION static T apply(const T* e, T v) {
    return (e[0] * v + e[1]) / (e[2] * v + e[3]);
  }
};

// The memory of a solve's own arrays, released when the solve ends: labelled
// views, or, where `allocate` is given, blocks from it (a backend's
// stream-ordered memory, which a CUDA graph can capture; cudaMalloc and
// cudaFree it cannot).
template <class Space>
class SolveMemory {
 public:
  using Allocate = void* (*)(const Space&, std::size_t);
  using Release = void (*)(const Space&, void*);

  explicit SolveMemory(const Space& space, Allocate allocate = nullptr,
                       Release release = nullptr)
      : space_(space), allocate_(allocate), release_(release) {}

  // A new array of the extents, zero-filled where `zero`.
  template <class View, class... Extents>
  View array(const char* what, bool zero, Extents... extents) {
    if (!allocate_)
      return zero ? View(Kokkos::view_alloc(space_, label(what)), extents...)
                  : View(Kokkos::view_alloc(space_, Kokkos::WithoutInitializing,
                                            label(what)),
                         extents...);
    void* const memory =
        allocate_(space_, View::required_allocation_size(extents...));
    owners_.emplace_back(memory, [space = space_, release = release_](void* p) {
      release(space, p);
    });
    View const out(static_cast<typename View::pointer_type>(memory),
                   extents...);
    if (zero) compat::fill(space_, out, typename View::non_const_value_type(0));
    return out;
  }

 private:
  Space space_;
  Allocate allocate_;
  Release release_;
  std::vector<std::shared_ptr<void>> owners_;
};

// Where the solves of a recurrence get their memory. The primary template
// gives views; backends/<vendor>/deer/vendor_solve_memory.hpp specialises
// it for its execution space, and core/src/deer/deer.cpp brings that in for
// the library's cells.
template <class Space, class Recurrence>
struct SolveMemoryOf {
  static SolveMemory<Space> make(const Space& space) {
    return SolveMemory<Space>(space);
  }
};

// Item q of a scalar scan's (b, c, i) grid (c < chunks, i < width), and the
// positions [first, last) of its chunk of `per` out of `total`.
struct GridItem {
  int b, i;
  std::int64_t c;
  KOKKOS_INLINE_FUNCTION GridItem(std::int64_t q, int width,
                                  std::int64_t chunks)
      : b(int(q / width / chunks)), i(int(q % width)), c(q / width % chunks) {}
  KOKKOS_INLINE_FUNCTION std::int64_t first(int per) const { return c * per; }
  KOKKOS_INLINE_FUNCTION std::int64_t last(int per, std::int64_t total) const {
    return (c + 1) * per < total ? (c + 1) * per : total;
  }
};

// v_p = map_p(v_{p−1}), v_{−1} = 0, for p < steps.count(b), independently
// for each sequence b and entry i < n. Steps gives count(b), map(b, p, i, e)
// and store(b, p, i, v). Up to 32 positions one after another; beyond, by
// the chunked scheme of the solver below: compose each chunk's maps, solve
// the chunks' composed maps the same way one level up (their Steps is
// Stored), replay each chunk from its carried-in value. The levels' arrays
// are made on first use and kept between calls (the iterations' scans all
// have the same sizes).
template <class Space, class T>
struct ScalarScan {
  using Memory = typename Space::memory_space;
  SolveMemory<Space>& memory;  // the solve's: the levels' arrays
  static constexpr int kMaxSize = 4;
  struct Level {
    DeerView3<T, Space> maps;    // (B, chunks, n·kMaxSize)
    DeerView3<T, Space> values;  // (B, chunks, n): v after each chunk
    Kokkos::View<int*, Memory> count;
    std::int64_t chunks = 0;
    int chunk = 1;
  };
  // A level's composed maps as the positions of the level above.
  template <class Map>
  struct Stored {
    Level level;
    KOKKOS_INLINE_FUNCTION int count(int b) const { return level.count(b); }
    KOKKOS_INLINE_FUNCTION void map(int b, int c, int i, T* e) const {
      for (int k = 0; k < Map::size; ++k)
        e[k] = level.maps(b, c, i * kMaxSize + k);
    }
    KOKKOS_INLINE_FUNCTION void store(int b, int c, int i, T v) const {
      level.values(b, c, i) = v;
    }
  };
  Space space;
  std::int64_t batch = 0;
  int n = 1;
  std::int64_t concurrency = 1;
  bool host = true;
  int chunk_setting = 0;  // DeerOptions::chunk: > 1 fixes every level's
  std::vector<Level> levels;

  const Level& level(std::size_t depth, std::int64_t length) {
    if (levels.size() <= depth) {
      Level l;
      l.chunk = chunk_setting > 1
                    ? chunk_setting
                    : std::max(8, choose_chunk(batch * n, length, 1,
                                               concurrency, host));
      l.chunks = (length + l.chunk - 1) / l.chunk;
      auto const alloc = [&](const char* what, std::int64_t width) {
        return memory.template array<DeerView3<T, Space>>(what, false, batch,
                                                          l.chunks, width);
      };
      l.maps = alloc("damped_maps", n * kMaxSize);
      l.values = alloc("damped_values", n);
      l.count = memory.template array<Kokkos::View<int*, Memory>>(
          "damped_count", false, batch);
      levels.push_back(l);
    }
    return levels[depth];
  }

  // The kernels of run(): a thread per sequence and entry (Carry), per
  // sequence (CountChunks), per sequence, chunk and entry (ChunkPass).
  template <class Map, class Steps>
  struct Carry {
    Steps steps;
    int width;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t q) const {
      int const b = int(q / width), i = int(q % width);
      T v = 0;
      T step[kMaxSize];
      for (int p = 0; p < steps.count(b); ++p) {
        steps.map(b, p, i, step);
        v = Map::apply(step, v);
        steps.store(b, p, i, v);
      }
    }
  };
  template <class Steps>
  struct CountChunks {
    Steps steps;
    Kokkos::View<int*, Memory> count;
    int chunk;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b) const {
      count(b) = (steps.count(int(b)) + chunk - 1) / chunk;
    }
  };
  // Compose (replay = false): each chunk's maps composed into the level's
  // maps; replay (true): each chunk's values from the level's carried-in
  // value.
  template <class Map, class Steps>
  struct ChunkPass {
    Steps steps;
    Level level;
    int width;
    bool replay;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t q) const {
      GridItem const it(q, width, level.chunks);
      if (it.c >= level.count(it.b)) return;
      T e[kMaxSize], step[kMaxSize];
      T v = replay && it.c > 0 ? level.values(it.b, it.c - 1, it.i) : T(0);
      if (!replay) Map::identity(e);
      for (std::int64_t p = it.first(level.chunk),
                        end = it.last(level.chunk, steps.count(it.b));
           p < end; ++p) {
        steps.map(it.b, int(p), it.i, step);
        if (replay) {
          v = Map::apply(step, v);
          steps.store(it.b, int(p), it.i, v);
        } else {
          Map::then(e, step);
        }
      }
      if (!replay)
        for (int k = 0; k < Map::size; ++k)
          level.maps(it.b, it.c, it.i * kMaxSize + k) = e[k];
    }
  };

  // length: the largest steps.count(b).
  template <class Map, class Steps>
  void run(const Steps& steps, std::int64_t length, std::size_t depth = 0) {
    int const width = n;
    if (length <= 32) {
      Kokkos::parallel_for("softwave::deer::damped_carry",
                           work_items(space, batch * width),
                           Carry<Map, Steps>{steps, width});
      return;
    }
    Level const l = level(depth, length);
    Kokkos::parallel_for("softwave::deer::damped_count_chunks",
                         work_items(space, batch),
                         CountChunks<Steps>{steps, l.count, l.chunk});
    Kokkos::parallel_for(
        "softwave::deer::damped_compose",
        work_items(space, batch * l.chunks * width),
        ChunkPass<Map, Steps>{steps, l, width, /*replay=*/false});
    run<Map>(Stored<Map>{l}, l.chunks, depth + 1);
    Kokkos::parallel_for(
        "softwave::deer::damped_replay",
        work_items(space, batch * l.chunks * width),
        ChunkPass<Map, Steps>{steps, l, width, /*replay=*/true});
  }
};

// The damped (quasi-ELK) update of one iteration, per sequence b with
// steps(b) > 0 (its length while it iterates, else 0) and entry i, from the
// Jacobians' diagonal J and residuals r = f(z_{s−1}) − z_s at solve
// position s (arrays (B, T, n) indexed by s), λ = lambda:
//   variance  P_s = P⁻_s / (λ P⁻_s + 1),  P⁻_s = J_s² P_{s−1} + 1,  P_{−1} = 0
//   filter    m_s = (J_s m_{s−1} + r_s) / (λ P⁻_s + 1)
//   smoother  δ_s = m_s + G_s (δ_{s+1} − J_{s+1} m_s − r_{s+1}),
//             G_s = P_s J_{s+1} / P⁻_{s+1},  δ_{L−1} = m_{L−1}
// (the Kalman filter and Rauch–Tung–Striebel smoother of DeerOptions'
// state-space model), and z_{slot(s)} += δ_s. With full Jacobians J and P
// hold n² values a step, the Jacobians and the filter's covariances, and
// the update is ElkUpdate's (softwave/deer_elk.hpp).
template <class Space, class T>
struct DampedStep {
  DeerView3<T, Space> J, r, P, m, z;
  Kokkos::View<int*, typename Space::memory_space> steps;
  DeerView1<T, Space> lambda;  // (B) each sequence's λ
  bool reversed;

  KOKKOS_INLINE_FUNCTION T prior(int b, int s, int i) const {
    T const j = J(b, s, i);
    return j * j * (s > 0 ? P(b, s - 1, i) : T(0)) + 1;
  }

  // The scans' steps (ScalarScan's Steps): each iterating sequence's.
  struct Scan {
    DampedStep d;
    KOKKOS_INLINE_FUNCTION int count(int b) const { return d.steps(b); }
  };
  struct Variance : Scan {
    using Scan::d;
    KOKKOS_INLINE_FUNCTION void map(int b, int s, int i, T* e) const {
      T const j2 = d.J(b, s, i) * d.J(b, s, i);
      e[0] = j2;
      e[1] = 1;
      T const lambda = d.lambda(b);
      e[2] = lambda * j2;
      e[3] = lambda + 1;
    }
    KOKKOS_INLINE_FUNCTION void store(int b, int s, int i, T v) const {
      d.P(b, s, i) = v;
    }
  };
  struct Filter : Scan {
    using Scan::d;
    KOKKOS_INLINE_FUNCTION void map(int b, int s, int i, T* e) const {
      T const k = T(1) / (d.lambda(b) * d.prior(b, s, i) + 1);
      e[0] = d.J(b, s, i) * k;
      e[1] = d.r(b, s, i) * k;
    }
    KOKKOS_INLINE_FUNCTION void store(int b, int s, int i, T v) const {
      d.m(b, s, i) = v;
    }
  };
  // Backwards: position p is s = L − 1 − p.
  struct Smoother : Scan {
    using Scan::d;
    KOKKOS_INLINE_FUNCTION void map(int b, int p, int i, T* e) const {
      int const L = d.steps(b), s = L - 1 - p;
      T const mean = d.m(b, s, i);
      if (s == L - 1) {
        e[0] = 0;
        e[1] = mean;
        return;
      }
      T const j = d.J(b, s + 1, i);
      T const gain = d.P(b, s, i) * j / d.prior(b, s + 1, i);
      e[0] = gain;
      e[1] = mean - gain * (j * mean + d.r(b, s + 1, i));
    }
    KOKKOS_INLINE_FUNCTION void store(int b, int p, int i, T v) const {
      int const L = d.steps(b), s = L - 1 - p;
      d.z(b, d.reversed ? L - 1 - s : s, i) += v;
    }
  };
};

}  // namespace softwave::impl::deer

#include <softwave/deer_elk.hpp>

namespace softwave::impl::deer {

// One pass over a worker's items, for ThreadItems::for_each: the item's
// body is Worker::run_item(item, values, replay).
template <class Worker>
struct ItemPass {
  Worker worker;
  bool replay;
  template <class T>
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item, T* values) const {
    worker.run_item(item, values, replay);
  }
};

// One level of the scan over chunks' composed maps (Solver::solve_chunks):
// the maps and offsets of count(b) chunks, grouped `chunk` to a group.
template <class Space, class T>
struct ChunkLevel {
  using Memory = typename Space::memory_space;
  using Member = typename ThreadItems<Space>::Member;
  DeerView3<T, Space> maps, offsets;
  Kokkos::View<int*, Memory> count;
  DeerView3<T, Space> group_maps, group_offsets;
  Kokkos::View<int*, Memory> group_count;
  std::int64_t chunk, groups;
  int n;
  int block;      // the maps' diagonal blocks (k)
  bool strided;   // their layout (block_state)
  FoldTeam team;  // a team a group where team.threads > 0

  // replay = false: composes each group into group_maps / group_offsets;
  // true: replays each group from its carried-in value (group_offsets
  // solved), leaving w_c in offsets.
  void pass(const Space& space, const ThreadItems<Space>& items,
            bool replay) const {
    if (team.threads > 0)
      for_each_team<Space, T>(
          space, label(replay ? "team_replay_chunks" : "team_compose_chunks"),
          items.items, team, *this, replay);
    else
      items.template for_each<T>(
          space, label(replay ? "replay_chunks" : "compose_chunks"),
          ItemPass<ChunkLevel>{*this, replay});
  }

  // run_group on a team (team_fold): the chunks' maps and offsets are
  // copied in a value a thread, the first chunk's map (never composed, and
  // applied to zeros) as zeros.
  KOKKOS_INLINE_FUNCTION void run_team_item(const Member& member,
                                            std::int64_t item, T* shared,
                                            bool replay) const {
    std::int64_t const b = item / groups, g = item % groups;
    if (g >= group_count(b)) return;
    int const na = n * block;
    std::int64_t const c0 = g * chunk;
    std::int64_t const c1 =
        c0 + chunk < count(b) ? c0 + chunk : std::int64_t(count(b));
    bool const composing = !replay && g > 0;
    T *w, *P;
    team_fold(
        member, team, n, block, strided, 0, c0, c1, composing, shared, w, P,
        [&](int i) {
          return replay && g > 0 ? group_offsets(b, g - 1, i) : T(0);
        },
        [&](std::int64_t first, int count, T* A, T* offset, T*) {
          // A value a thread, a chunk's map and offset in a row.
          int const values = na + n;
          Kokkos::parallel_for(
              Kokkos::TeamThreadRange(member, count * values), [&](int e) {
                int const s = e / values, v = e % values;
                std::int64_t const c = first + s;
                if (v < na)
                  A[s * na + v] = c == 0 ? T(0) : maps(b, c, v);
                else
                  offset[s * n + v - na] = offsets(b, c, v - na);
              });
        },
        [&](std::int64_t c, int i, T v) {
          if (replay) offsets(b, c, i) = v;
        });
    if (replay) return;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n),
                         [&](int i) { group_offsets(b, g, i) = w[i]; });
    if (composing)
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, na),
                           [&](int e) { group_maps(b, g, e) = P[e]; });
  }

  KOKKOS_INLINE_FUNCTION void run_item(std::int64_t item, T* Q,
                                       bool replay) const {
    run_group(item / groups, item % groups, Q, replay);
  }

  KOKKOS_INLINE_FUNCTION void run_group(std::int64_t b, std::int64_t g, T* Q,
                                        bool replay) const {
    if (g >= group_count(b)) return;
    int const na = n * block;
    T* const w = Q + na;
    T* const tmp = w + n;
    std::int64_t const c0 = g * chunk;
    std::int64_t const c1 =
        c0 + chunk < count(b) ? c0 + chunk : std::int64_t(count(b));
    for (int i = 0; i < n; ++i)
      w[i] = replay && g > 0 ? group_offsets(b, g - 1, i) : T(0);
    bool const composing = !replay && g > 0;
    if (composing) set_identity(Q, block, n);
    for (std::int64_t c = c0; c < c1; ++c) {
      bool const first = c == 0;
      if (!first) apply(&maps(b, c, 0), block, n, strided, w, tmp);
      for (int i = 0; i < n; ++i)
        w[i] = offsets(b, c, i) + (first ? T(0) : tmp[i]);
      if (replay)
        for (int i = 0; i < n; ++i) offsets(b, c, i) = w[i];
      else if (composing)
        compose(&maps(b, c, 0), block, n, Q, tmp);
    }
    if (!replay) {
      for (int i = 0; i < n; ++i) group_offsets(b, g, i) = w[i];
      if (composing)
        for (int i = 0; i < na; ++i) group_maps(b, g, i) = Q[i];
    }
  }
};

// What one Newton iteration reads and writes: old_z → new_z for every
// sequence whose status is active, each sequence's worst tolerance ratio
// folded into error(b) (worse). zero_start: old_z is all zeros (the first
// iteration of a cold start) and is not read. start_warm_up > 0 (the first
// iteration of a cold start, where FusedIteration::starts_locally()): the
// kernel evaluates its own starting trajectory instead of reading old_z,
// each of its threads' runs of steps from zeros start_warm_up steps before
// it (Settings::start_warm_up, as LocalStart does chunk by chunk).
template <class Space, class Recurrence>
struct IterationArrays {
  using T = typename Recurrence::value_type;
  using Memory = typename Space::memory_space;
  Recurrence rec;
  DeerView3<T, Space> old_z, new_z;
  Kokkos::View<int*, Memory> status;
  Kokkos::View<double*, Memory> error;
  T atol, rtol;
  bool reversed;
  bool zero_start;
  int start_warm_up = 0;
};

// A vendor's fused Newton iteration (linearise, scan and update in one
// kernel; diagonal linearisations, or full ones of small states), where a
// backend provides one:
// backends/<vendor>/deer/vendor_fused_iteration.hpp specialises this for
// its execution space, and core/src/deer/deer.cpp brings it in for the
// library's cells. The primary template is the portable answer: none.
// unavailable() says why it cannot run (empty when it can); an instance,
// made once per solve (`full`: the Jacobians are full), holds its
// workspace; run() is one iteration. starts_locally(): whether its first
// iteration evaluates the start itself (IterationArrays::start_warm_up);
// default_start_warm_up(): the warm-up it takes where
// DeerOptions::start_warm_up is unset (0: from zeros).
template <class Space, class Recurrence>
struct FusedIteration {
  static std::string unavailable(const Recurrence&, bool /*full*/) {
    return "the fused Newton iteration runs on Kokkos::Cuda, for the "
           "library's cells (deer_rnn, deer_rnn_gradients)";
  }
  FusedIteration(const Space&, const Recurrence&, std::int64_t /*batch*/,
                 std::int64_t /*length*/, bool /*full*/) {}
  bool starts_locally() const { return false; }
  int default_start_warm_up() const { return 0; }
  void run(const Space&, const IterationArrays<Space, Recurrence>&) const {}
};

// A vendor's sequential loop (a block a sequence, the whole loop in one
// kernel, the weights in registers) where a backend provides one:
// backends/<vendor>/deer/vendor_sequential_loop.hpp specialises this for
// its execution space, and core/src/deer/deer.cpp brings it in for the
// library's cells. applies(): whether it takes the recurrence; run()
// evaluates the sequences whose status is diverged. The primary template
// is the portable answer: none.
template <class Space, class Recurrence>
struct SequentialLoop {
  // The largest state size at which the automatic method takes DEER over
  // this loop, with either Jacobian (0: no bound of the loop's own).
  static constexpr int deer_state_limit = 0;
  static bool applies(const Recurrence&) { return false; }
  template <class Buffer, class Counts>
  static void run(const Space&, const Recurrence&, const Buffer&, const Counts&,
                  std::int64_t /*batch*/, bool /*reversed*/) {}
};

// Every member is public: CUDA's device lambdas may not be defined in
// private member functions.
template <class Space, class Recurrence>
struct Solver {
  using T = typename Recurrence::value_type;
  using Memory = typename Space::memory_space;
  using Buffer = DeerView3<T, Space>;
  using Items = ThreadItems<Space>;
  using Member = typename Items::Member;

  Solver(const Space& space, const Recurrence& recurrence, Buffer z,
         std::int64_t batch, std::int64_t length, bool reversed,
         const Settings& settings)
      : space_(space),
        rec_(recurrence),
        z_(z),
        batch_(batch),
        length_(length),
        reversed_(reversed),
        settings_(settings),
        memory_(SolveMemoryOf<Space, Recurrence>::make(space)),
        never_wait_(settings.check_every == 0) {}

  // Whether the host reads the iterations' convergence back after
  // iteration k (Settings::check_every).
  bool check_after(int k) const {
    return settings_.check_every > 0 && k % settings_.check_every == 0;
  }

  // Solves every sequence into z (its contents are the starting trajectory
  // with warm_start). iterations and path (optional, (B)) report each
  // sequence.
  void run(DeerView1<int, Space> iterations, DeerView1<int, Space> path) {
    if (batch_ == 0) return;
    int const n = rec_.state_size();
    bool const host = Items::host;
    std::int64_t const concurrency = space_.concurrency();
    bool const blocks = settings_.block != 1 && settings_.block != n;
    std::string const why_not =
        blocks ? std::string(
                     "the fused Newton iteration takes full or "
                     "diagonal Jacobians, not blocks")
               : FusedIteration<Space, Recurrence>::unavailable(
                     rec_, settings_.block == n);
    bool const fused = why_not.empty() && settings_.kernel != Kernel::portable;
    bool use_deer = settings_.method == DeerMethod::deer;
    if (settings_.method == DeerMethod::automatic) {
      // The backend's loop bounds DEER's state sizes with either Jacobian.
      int const bound =
          vendor_loop() ? SequentialLoop<Space, Recurrence>::deer_state_limit
                        : 0;
      auto const bounded = [&](int limit) {
        return bound == 0 ? limit : limit == 0 ? bound : std::min(limit, bound);
      };
      use_deer = deer_expected_faster(
          batch_, length_, n, settings_.jacobian, concurrency, host, fused,
          bounded(FullJacobianDeviceLimit<Recurrence>::value),
          bounded(!host && loop_shape().threads > 0
                      ? QuasiJacobianDeviceLimit<Recurrence>::value
                      : 0));
    }
    if (use_deer && settings_.kernel == Kernel::specialised && !why_not.empty())
      throw_invalid_argument("kernel = specialised: ", why_not);
    auto const status = memory_.template array<Kokkos::View<int*, Memory>>(
        "status", true, batch_);
    auto const count = memory_.template array<Kokkos::View<int*, Memory>>(
        "iterations", true, batch_);
    if (!use_deer) {
      Kokkos::deep_copy(space_, status, int(diverged));
      sequential(status);
      finish(status, count, iterations, path, DeerPath::sequential);
      return;
    }
    if (settings_.damping > 0)
      damped(status, count, concurrency, host);
    else
      iterate(status, count, concurrency, host, fused);
    sequential(status);
    finish(status, count, iterations, path, DeerPath::fallback);
  }

  // What every kernel of an iteration reads, copied into each.
  struct Data {
    Recurrence rec;
    Buffer old_z, new_z;
    DeerView3<T, Space> maps;     // (B, chunks, n² or n) composed Jacobians
    DeerView3<T, Space> offsets;  // (B, chunks, n) composed offsets
    Kokkos::View<int*, Memory> chunk_count;  // (B) chunks still iterating
    Kokkos::View<double*, Memory> error;     // (B) worst |δ| / tolerance
    std::int64_t length, chunk, chunks;
    int n, na;
    int block;     // the Jacobians' diagonal blocks (k)
    bool strided;  // their layout (block_state)
    bool reversed;
    T atol, rtol;

    FoldTeam team;  // a team a chunk where team.threads > 0
    // With a team, each step linearised a unit a thread where the
    // recurrence can (UnitSteps), not a step a thread.
    static constexpr bool by_units = UnitSteps<Recurrence>::value;

    // Every chunk of every iterating sequence: compose (replay = false) or
    // replay (true), a thread each, or a team each (run_team_item).
    void pass(const Space& space, const Items& items, bool replay) const {
      if (team.threads > 0)
        for_each_team<Space, T>(
            space, label(replay ? "team_replay" : "team_linearise"),
            items.items, team, *this, replay);
      else
        items.template for_each<T>(space,
                                   label(replay ? "replay" : "linearise"),
                                   ItemPass<Data>{*this, replay});
    }

    // The values of making one step's map on a team (run_team_item): the
    // initial state, and the recurrence's work where a thread makes it.
    KOKKOS_INLINE_FUNCTION int team_work() const {
      return by_units || by_columns() ? n : n + rec.work_size();
    }
    // With a team, full maps a unit a thread where the recurrence is
    // linear and can (UnitColumns).
    KOKKOS_INLINE_FUNCTION bool by_columns() const {
      return UnitColumns<Recurrence>::value && block == n;
    }

    // Steps first … first + count − 1 of chunk c of sequence b linearised
    // on a team (team_fold's load): their maps (J) and offsets (f(z_prev) −
    // z). A thread a unit of each step where by_units: on a GPU a thread a
    // step runs a step's whole product alone while most of the team waits.
    template <class Member>
    KOKKOS_INLINE_FUNCTION void team_linearise(const Member& member, int b,
                                               int L, std::int64_t first,
                                               int count, T* maps, T* offsets,
                                               T* works) const {
      Linearise const kind = linearise(block, n);
      if constexpr (by_units) {
        // The first step's previous state, in the first step's values.
        if (first == 0) {
          Kokkos::single(Kokkos::PerTeam(member),
                         [&] { rec.initial(b, works); });
          member.team_barrier();
        }
        int const units = rec.units();
        Kokkos::parallel_for(
            Kokkos::TeamThreadRange(member, count * units), [&](int e) {
              int const s = e / units;
              std::int64_t const q = first + s;
              int const t = slot(L, int(q));
              T const* const z_prev =
                  q == 0 ? works : &old_z(b, slot(L, int(q - 1)), 0);
              T* const J = maps + s * na;
              T* const offset = offsets + s * n;
              rec.step_unit(b, t, z_prev, e % units,
                            [&](int i, T z, const auto& entry) {
                              offset[i] = z - old_z(b, t, i);
                              block_row(J, i, block, n, strided, entry);
                            });
            });
        return;
      }
      if constexpr (UnitColumns<Recurrence>::value) {
        if (by_columns()) {
          team_linearise_columns(member, b, L, first, count, maps, offsets,
                                 works);
          return;
        }
      }
      int const work = team_work();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, count), [&](int s) {
        std::int64_t const q = first + s;
        int const t = slot(L, int(q));
        T* const step_work = works + s * work;
        T* const offset = offsets + s * n;
        T const* z_prev = step_work;
        if (q == 0)
          rec.initial(b, step_work);
        else
          z_prev = &old_z(b, slot(L, int(q - 1)), 0);
        rec.step(b, t, z_prev, offset, maps + s * na, kind, step_work + n);
        for (int i = 0; i < n; ++i) offset[i] -= old_z(b, t, i);
      });
    }

    // run_chunk on a team (team_fold): each step linearised by a thread of
    // its own, its map on δ and on the composed map divided among them.
    KOKKOS_INLINE_FUNCTION void run_team_item(const Member& member,
                                              std::int64_t item, T* shared,
                                              bool replay) const {
      std::int64_t const b = item / chunks, c = item % chunks;
      if (c >= chunk_count(b)) return;
      int const L = rec.length(int(b));
      std::int64_t const s0 = c * chunk;
      std::int64_t const s1 = s0 + chunk < L ? s0 + chunk : L;
      bool const composing = !replay && c > 0;
      T *delta, *P;
      double worst = 0;
      team_fold(
          member, team, n, block, strided, team_work(), s0, s1, composing,
          shared, delta, P,
          [&](int i) { return replay && c > 0 ? offsets(b, c - 1, i) : T(0); },
          [&](std::int64_t first, int count, T* J, T* offset, T* work) {
            team_linearise(member, int(b), L, first, count, J, offset, work);
          },
          [&](std::int64_t q, int i, T d) {
            if (!replay) return;
            int const t = slot(L, int(q));
            T const y = old_z(b, t, i) + d;
            new_z(b, t, i) = y;
            worst = worse(worst, tolerance_ratio(double(d), double(y),
                                                 double(atol), double(rtol)));
          });
      if (replay) {
        // One atomic a team: the sequence's (B) values take one from each
        // of its chunks, and a thread's each would be n times as many on
        // as few addresses (a double's maximum is a compare-and-swap loop).
        member.team_reduce(Kokkos::Max<double>(worst));
        if (member.team_rank() == 0) Kokkos::atomic_fetch_max(&error(b), worst);
        return;
      }
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n),
                           [&](int i) { offsets(b, c, i) = delta[i]; });
      if (composing)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, na),
                             [&](int e) { maps(b, c, e) = P[e]; });
    }

    // team_linearise for a linear recurrence's full maps (UnitColumns): the
    // maps a unit a thread, then each offset, direct(b, t, j) + the map's
    // row j · z_prev − z_j, a state a thread.
    template <class Member>
    KOKKOS_INLINE_FUNCTION void team_linearise_columns(
        const Member& member, int b, int L, std::int64_t first, int count,
        T* maps, T* offsets, T* works) const {
      if (first == 0) {
        Kokkos::single(Kokkos::PerTeam(member), [&] { rec.initial(b, works); });
        member.team_barrier();
      }
      int const units = rec.units();
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(member, count * units), [&](int e) {
            int const s = e / units, u = e % units;
            int const t = slot(L, int(first + s));
            T* const A = maps + s * na;
            if (rec.last(b, t)) {
              for (int v = u; v < na; v += units) A[v] = 0;
              return;
            }
            rec.step_unit_columns(b, t, u, [&](int i, const auto& entry) {
              for (int j = 0; j < n; ++j) A[j * n + i] = entry(j);
            });
          });
      member.team_barrier();
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(member, count * n), [&](int e) {
            int const s = e / n, j = e % n;
            std::int64_t const q = first + s;
            int const t = slot(L, int(q));
            T const* const z_prev =
                q == 0 ? works : &old_z(b, slot(L, int(q - 1)), 0);
            T const* const a = maps + s * na + j * n;
            T sum = 0;
            for (int i = 0; i < n; ++i) sum += a[i] * z_prev[i];
            offsets[s * n + j] = rec.direct(b, t, j) + sum - old_z(b, t, j);
          });
    }

    KOKKOS_INLINE_FUNCTION void run_item(std::int64_t item, T* s,
                                         bool replay) const {
      std::int64_t const b = item / chunks, c = item % chunks;
      if (c < chunk_count(b)) run_chunk(int(b), c, s, replay);
    }

    KOKKOS_INLINE_FUNCTION int slot(int L, int s) const {
      return reversed ? L - 1 - s : s;
    }

    // Chunk c of sequence b: composes its steps' affine maps (replay =
    // false) or replays them from the carried-in δ, writing new_z and the
    // worst tolerance ratio (replay = true).
    KOKKOS_INLINE_FUNCTION void run_chunk(int b, std::int64_t c, T* s,
                                          bool replay) const {
      int const L = rec.length(b);
      std::int64_t const s0 = c * chunk;
      std::int64_t const s1 = s0 + chunk < L ? s0 + chunk : L;
      T* const init = s;
      T* const f = init + n;
      T* const J = f + n;
      T* const P = J + na;
      T* const delta = P + na;
      T* const tmp = delta + n;
      T* const work = tmp + n;
      Linearise const kind = linearise(block, n);
      if (replay && c > 0)
        for (int i = 0; i < n; ++i) delta[i] = offsets(b, c - 1, i);
      else
        for (int i = 0; i < n; ++i) delta[i] = 0;
      bool const composing = !replay && c > 0;
      if (composing) set_identity(P, block, n);
      double worst = 0;
      for (std::int64_t q = s0; q < s1; ++q) {
        int const t = slot(L, int(q));
        T const* z_prev;
        if (q == 0) {
          rec.initial(b, init);
          z_prev = init;
        } else {
          z_prev = &old_z(b, slot(L, int(q - 1)), 0);
        }
        rec.step(b, t, z_prev, f, J, kind, work);
        apply(J, block, n, strided, delta, tmp);
        for (int i = 0; i < n; ++i) delta[i] = f[i] - old_z(b, t, i) + tmp[i];
        if (replay) {
          for (int i = 0; i < n; ++i) {
            T const y = old_z(b, t, i) + delta[i];
            new_z(b, t, i) = y;
            worst = worse(worst, tolerance_ratio(double(delta[i]), double(y),
                                                 double(atol), double(rtol)));
          }
        } else if (composing) {
          compose(J, block, n, P, tmp);
        }
      }
      if (replay) {
        Kokkos::atomic_fetch_max(&error(b), worst);
      } else {
        for (int i = 0; i < n; ++i) offsets(b, c, i) = delta[i];
        if (composing)
          for (int i = 0; i < na; ++i) maps(b, c, i) = P[i];
      }
    }
  };

  // The solver's kernels. Functors, not lambdas: nvcc keeps each extended
  // lambda's copy and call hooks per translation unit, and a cell's solver
  // compiled in two units could then be copied through the hooks of the
  // unit that never made it (tests/static_checks/lambda_wrappers.py).
  using Counts = Kokkos::View<int*, Memory>;

  // solve_chunks: each sequence's chunks one after another.
  struct CarryChunks {
    DeerView3<T, Space> maps, offsets;
    Counts count;
    int n, block;
    bool strided;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b, T* w) const {
      T* const tmp = w + n;
      for (int i = 0; i < n; ++i) w[i] = 0;
      for (int c = 0; c < count(b); ++c) {
        if (c > 0) apply(&maps(b, c, 0), block, n, strided, w, tmp);
        for (int i = 0; i < n; ++i)
          w[i] = offsets(b, c, i) + (c > 0 ? tmp[i] : T(0));
        for (int i = 0; i < n; ++i) offsets(b, c, i) = w[i];
      }
    }
  };

  // solve_chunks: the groups of `chunk` chunks of each sequence.
  struct CountGroups {
    Counts count, groups;
    int chunk;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b) const {
      groups(b) = int((count(b) + chunk - 1) / chunk);
    }
  };

  // iterate: the chunks of each sequence still iterating.
  struct CountIterating {
    Data d;
    Counts status;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b) const {
      d.chunk_count(b) =
          status(b) == active
              ? int((d.rec.length(int(b)) + d.chunk - 1) / d.chunk)
              : 0;
    }
  };

  // iterate: each sequence after iteration k, by its worst tolerance ratio.
  struct Judge {
    Data d;
    Counts status, count;
    Kokkos::View<int, Memory> still;
    int k, max_iterations;
    bool linear_exact, odd;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b) const {
      if (status(b) != active) return;
      double const e = d.error(b);
      d.error(b) = 0;
      count(b) = k;
      if (linear_exact || e <= 1)
        status(b) = odd ? converged_odd : converged_even;
      else if (!(e < 1e300) || k == max_iterations)
        status(b) = diverged;
      else
        Kokkos::atomic_add(&still(), 1);
    }
  };

  // iterate: the sequences that ended in the second buffer, copied home.
  struct Gather {
    Buffer home, away;
    Recurrence rec;
    Counts status;
    int n;
    KOKKOS_INLINE_FUNCTION void operator()(int b, std::int64_t t) const {
      if (status(b) != converged_odd || t >= rec.length(b)) return;
      for (int i = 0; i < n; ++i) home(b, t, i) = away(b, t, i);
    }
  };

  // damped: every sequence iterating, at the starting λ.
  struct DampedStart {
    DampedStep<Space, T> d;
    Recurrence rec;
    Counts status;
    Kokkos::View<double*, Memory> previous;
    T lambda;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b) const {
      status(b) = active;
      d.steps(b) = rec.length(int(b));
      d.lambda(b) = lambda;
      previous(b) = compat::infinity<double>();
    }
  };

  // damped: the Jacobians (their diagonal, or full ones for ELK) and the
  // residuals of one chunk of steps, and its worst residual ratio.
  struct DampedLinearise {
    DampedStep<Space, T> d;
    Recurrence rec;
    Kokkos::View<double*, Memory> error;
    std::int64_t chunks;
    int chunk, n;
    T atol, rtol;
    bool reversed;
    bool full;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item, T* init) const {
      int const b = int(item / chunks);
      int const L = d.steps(b);
      std::int64_t const s0 = (item % chunks) * chunk;
      if (s0 >= L) return;
      std::int64_t const s1 = s0 + chunk < L ? s0 + chunk : L;
      T* const f = init + n;
      T* const J = f + n;
      T* const work = J + (full ? n * n : n);
      double worst = 0;
      for (std::int64_t s = s0; s < s1; ++s) {
        int const t = reversed ? L - 1 - int(s) : int(s);
        T const* z_prev;
        if (s == 0) {
          rec.initial(b, init);
          z_prev = init;
        } else {
          z_prev = &d.z(b, reversed ? L - int(s) : int(s) - 1, 0);
        }
        rec.step(b, t, z_prev, f, J,
                 full ? Linearise::full : Linearise::diagonal, work);
        if (full)
          for (int q = 0; q < n * n; ++q) d.J(b, s, q) = J[q];
        for (int i = 0; i < n; ++i) {
          T const residual = f[i] - d.z(b, t, i);
          if (!full) d.J(b, s, i) = J[i];
          d.r(b, s, i) = residual;
          worst = worse(worst,
                        tolerance_ratio(double(residual), double(d.z(b, t, i)),
                                        double(atol), double(rtol)));
        }
      }
      Kokkos::atomic_fetch_max(&error(b), worst);
    }
  };

  // damped: each sequence after linearisation k, and its next λ.
  struct DampedJudge {
    DampedStep<Space, T> d;
    Counts status, count;
    Kokkos::View<double*, Memory> error, previous;
    Kokkos::View<int, Memory> still;
    T lambda;
    int k, max_iterations;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b) const {
      if (d.steps(b) == 0) return;
      double const e = error(b);
      error(b) = 0;
      if (e <= 1) {
        status(b) = converged_damped;
        d.steps(b) = 0;
      } else if (!(e < 1e300) || k == max_iterations) {
        status(b) = diverged;
        d.steps(b) = 0;
      } else {
        // Trust-region schedule: half the damping after a step that
        // lowered the residual, back to the starting λ after one that did
        // not (growing it further stalled short runs).
        T const l = e < previous(b) ? d.lambda(b) / 2 : lambda;
        d.lambda(b) = l < T(1e-6) ? T(1e-6) : l;
        previous(b) = e;
        count(b) += 1;
        Kokkos::atomic_add(&still(), 1);
      }
    }
  };

  // iterate: the starting trajectory without a warm start
  // (Settings::start_warm_up): chunk c of sequence b evaluated step by step
  // from zeros `warm_up` steps before it (from the initial state where that
  // reaches its first step), a thread a chunk. The warm-up's states
  // alternate between the thread's two vectors.
  struct LocalStart {
    Recurrence rec;
    Buffer z;
    std::int64_t chunks;
    int chunk, warm_up, n;
    bool reversed;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item, T* values) const {
      int const b = int(item / chunks);
      int const L = rec.length(b);
      std::int64_t const s0 = (item % chunks) * chunk;
      if (s0 >= L) return;
      std::int64_t const s1 = s0 + chunk < L ? s0 + chunk : L;
      T* const vectors[2] = {values, values + n};
      T* const work = values + 2 * n;
      std::int64_t s = s0 - warm_up;
      if (s <= 0) {
        s = 0;
        rec.initial(b, vectors[0]);
      } else {
        for (int i = 0; i < n; ++i) vectors[0][i] = 0;
      }
      T const* previous = vectors[0];
      for (int parity = 1; s < s1; ++s, parity ^= 1) {
        int const t = reversed ? L - 1 - int(s) : int(s);
        T* const out = s >= s0 ? &z(b, t, 0) : vectors[parity];
        rec.step(b, t, previous, out, static_cast<T*>(nullptr), Linearise::none,
                 work);
        previous = out;
      }
    }
  };

  // LocalStart a thread a unit (UnitSteps): `per_team` chunks a team, each
  // step's units side by side and its state in the team's fast memory. A
  // thread a chunk runs each step's whole product alone (on an H200 a GRU
  // step at n = 16 is about 1,500 dependent multiply-adds and loads).
  struct UnitLocalStart {
    using Member = typename Kokkos::TeamPolicy<Space>::member_type;
    LocalStart start;
    std::int64_t items;  // B · chunks
    int per_team;
    std::size_t bytes;  // per_team · 2n values
    KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
      auto const& rec = start.rec;
      int const n = start.n, units = rec.units();
      std::int64_t const chunk = start.chunk, warm_up = start.warm_up;
      T* const shared =
          static_cast<T*>(member.team_scratch(0).get_shmem(bytes));
      std::int64_t const first_item =
          std::int64_t(member.league_rank()) * per_team;
      // Chunk c's state before its first step: the initial state where the
      // warm-up reaches the sequence's start, else zeros.
      Kokkos::parallel_for(
          Kokkos::TeamThreadRange(member, per_team), [&](int c) {
            std::int64_t const item = first_item + c;
            if (item >= items) return;
            std::int64_t const s0 = (item % start.chunks) * chunk;
            T* const state = shared + 2 * n * c;
            if (s0 - warm_up <= 0)
              rec.initial(int(item / start.chunks), state);
            else
              for (int i = 0; i < n; ++i) state[i] = 0;
          });
      member.team_barrier();
      for (int r = 0; r < chunk + warm_up; ++r) {
        Kokkos::parallel_for(
            Kokkos::TeamThreadRange(member, per_team * units), [&](int e) {
              int const c = e / units;
              std::int64_t const item = first_item + c;
              if (item >= items) return;
              int const b = int(item / start.chunks);
              int const L = rec.length(b);
              std::int64_t const s0 = (item % start.chunks) * chunk;
              if (s0 >= L) return;
              std::int64_t const s1 = s0 + chunk < L ? s0 + chunk : L;
              std::int64_t const s = (s0 > warm_up ? s0 - warm_up : 0) + r;
              if (s >= s1) return;
              int const t = start.reversed ? L - 1 - int(s) : int(s);
              T const* const previous = shared + 2 * n * c + n * (r % 2);
              T* const next = shared + 2 * n * c + n * ((r + 1) % 2);
              rec.step_unit(b, t, previous, e % units,
                            [&](int i, T value, const auto&) {
                              next[i] = value;
                              if (s >= s0) start.z(b, t, i) = value;
                            });
            });
        member.team_barrier();
      }
    }
  };

  // The local start a thread a unit (UnitLocalStart) where
  // DeerOptions::chunk_team_size asks for a team, or, unset, on a device
  // for 8 units or more (below, a thread a chunk's step is short);
  // returns whether it ran.
  bool unit_local_start(const LocalStart& start) {
    if constexpr (!UnitSteps<Recurrence>::value) {
      return false;
    } else {
      bool const host = runs_on_host<Space>;
      int const asked = settings_.chunk_team_size, units = rec_.units();
      if (asked == 1 || (asked == 0 && (host || units < 8))) return false;
      int const threads =
          asked > 1 ? std::min(asked, host ? int(space_.concurrency()) : 256)
                    : 256;
      int const per_team = std::max(1, threads / units);
      std::size_t const bytes = std::size_t(per_team) * 2 * start.n * sizeof(T);
      if (threads <= 1 ||
          bytes > std::size_t(Kokkos::TeamPolicy<Space>::scratch_size_max(0)))
        return false;
      std::int64_t const items = batch_ * start.chunks;
      Kokkos::parallel_for(
          label("team_local_start"),
          compat::light_weight(
              Kokkos::TeamPolicy<Space>(
                  space_, int((items + per_team - 1) / per_team), threads)
                  .set_scratch_size(0, Kokkos::PerTeam(bytes))),
          UnitLocalStart{start, items, per_team, bytes});
      return true;
    }
  }

  // sequential: a diverged sequence by the loop over its steps.
  struct Sequential {
    Recurrence rec;
    Buffer z;
    Counts status;
    int n;
    bool reversed;
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b, T* init) const {
      if (status(b) != diverged) return;
      T* const work = init + n;
      int const L = rec.length(int(b));
      rec.initial(int(b), init);
      T const* z_prev = init;
      for (int q = 0; q < L; ++q) {
        int const t = reversed ? L - 1 - q : q;
        rec.step(int(b), t, z_prev, &z(b, t, 0), static_cast<T*>(nullptr),
                 Linearise::none, work);
        z_prev = &z(b, t, 0);
      }
    }
  };

  // sequential: a diverged sequence by the loop over its steps, a team
  // together (TeamLoop), the state in the team's fast memory.
  struct TeamSequential {
    Recurrence rec;
    Buffer z;
    Counts status;
    int n;
    bool reversed;
    std::size_t bytes;
    KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
      int const b = member.league_rank();
      if (status(b) != diverged) return;
      T* const y = static_cast<T*>(member.team_scratch(0).get_shmem(bytes));
      T* const shared = y + n;
      rec.team_begin(member, shared);
      Kokkos::single(Kokkos::PerTeam(member), [&] { rec.initial(b, y); });
      member.team_barrier();
      int const L = rec.length(b);
      for (int q = 0; q < L; ++q) {
        int const t = reversed ? L - 1 - q : q;
        // (Its last barrier orders the state's writes before these reads;
        // the next write to it comes after the next step's first barrier.)
        rec.team_step(member, b, t, y, shared);
        Kokkos::parallel_for(Kokkos::TeamVectorRange(member, n),
                             [&](int i) { z(b, t, i) = y[i]; });
      }
    }
  };

  // finish: zeros past each length.
  struct ClearTail {
    Recurrence rec;
    Buffer z;
    int n;
    KOKKOS_INLINE_FUNCTION void operator()(int b, std::int64_t t) const {
      if (t < rec.length(b)) return;
      for (int i = 0; i < n; ++i) z(b, t, i) = 0;
    }
  };

  // finish: each sequence's iterations and path, where asked for.
  struct Report {
    Counts status, count;
    DeerView1<int, Space> iterations, path;
    int fallback;  // the path of a sequence that diverged
    KOKKOS_INLINE_FUNCTION void operator()(std::int64_t b) const {
      if (iterations.extent(0)) iterations(b) = count(b);
      if (path.extent(0))
        path(b) = status(b) == diverged
                      ? fallback
                      : int(status(b) == converged_damped ? DeerPath::damped
                                                          : DeerPath::deer);
    }
  };

  // The linear recurrence w_c = A_c w_{c−1} + e_c, w_{−1} = 0, over the
  // composed maps of each sequence's first count(b) chunks, solved in place
  // (offsets(b, c) becomes w_c): sequentially where there are few, else by
  // the same chunked scheme one level up.
  void solve_chunks(DeerView3<T, Space> maps, DeerView3<T, Space> offsets,
                    Kokkos::View<int*, Memory> count, int n, int block,
                    std::int64_t concurrency, bool host, int depth = 0) {
    std::int64_t const M = offsets.extent(1);
    int const na = n * block;
    if (M <= 32) {
      Items const items =
          Items(batch_, 2 * n, T()).values_in(memory_, space_, never_wait_);
      items.template for_each<T>(
          space_, label("carry_chunks"),
          CarryChunks{maps, offsets, count, n, block, settings_.strided});
      return;
    }
    int const chunk =
        settings_.chunk > 1
            ? settings_.chunk
            : std::max(8, choose_chunk(batch_, M, block, concurrency, host));
    std::int64_t const chunks = (M + chunk - 1) / chunk;
    // Each level's arrays are made on the first iteration and kept: the
    // levels' sizes do not change between iterations.
    if (levels_.size() <= std::size_t(depth))
      levels_.push_back(make_level(chunks, na, n));
    auto const maps2 = levels_[depth].maps;
    auto const offsets2 = levels_[depth].offsets;
    auto const count2 = levels_[depth].count;
    Kokkos::parallel_for(label("count_chunks"), work_items(space_, batch_),
                         CountGroups{count, count2, chunk});
    FoldTeam const team = fold_team<Space, T>(space_, settings_.chunk_team_size,
                                              n, block, 0, chunk);
    Items items(batch_ * chunks, 2 * na + 2 * n, T());
    if (team.threads == 0)
      items = items.values_in(memory_, space_, never_wait_);
    ChunkLevel<Space, T> const next{
        maps,  offsets, count, maps2, offsets2,          count2,
        chunk, chunks,  n,     block, settings_.strided, team};
    next.pass(space_, items, /*replay=*/false);
    solve_chunks(maps2, offsets2, count2, n, block, concurrency, host,
                 depth + 1);
    next.pass(space_, items, /*replay=*/true);
  }

  // The Newton iterations, by the fused kernel of FusedIteration where
  // `fused`, else by the portable passes.
  void iterate(Kokkos::View<int*, Memory> status,
               Kokkos::View<int*, Memory> count, std::int64_t concurrency,
               bool host, bool fused) {
    int const n = rec_.state_size();
    int const block = settings_.block;
    int const na = n * block;
    int const chunk =
        settings_.chunk > 0
            ? int(std::min<std::int64_t>(settings_.chunk, length_))
            : choose_chunk(batch_, length_, block, concurrency, host);
    std::int64_t const chunks = (length_ + chunk - 1) / chunk;
    auto const other =
        memory_.template array<Buffer>("trajectory", false, batch_, length_, n);
    std::optional<FusedIteration<Space, Recurrence>> fused_iteration;
    if (fused)
      fused_iteration.emplace(space_, rec_, batch_, length_, block == n);
    // The start: the given trajectory, one evaluated chunk by chunk (by the
    // fused iteration's first pass where it starts locally, else by
    // LocalStart), or zeros (which the fused iteration takes without
    // reading them). Unset, a warm-up of 32 steps, or the fused
    // iteration's choice where it runs.
    bool const linear_exact = settings_.linear && block == n;
    int const warm_up = settings_.warm_start || linear_exact ? 0
                        : settings_.start_warm_up >= 0 ? settings_.start_warm_up
                        : fused ? fused_iteration->default_start_warm_up()
                                : 32;
    bool const fused_start =
        warm_up > 0 && fused && fused_iteration->starts_locally();
    bool const local_start = warm_up > 0 && !fused_start;
    if (local_start) {
      LocalStart const start{rec_, z_, chunks, chunk, warm_up, n, reversed_};
      if (!unit_local_start(start))
        Items(batch_ * chunks, 2 * n + rec_.work_size(), T())
            .values_in(memory_, space_, never_wait_)
            .template for_each<T>(space_, label("local_start"), start);
    } else if (!settings_.warm_start && !fused) {
      compat::fill(space_, z_, T(0));
    }
    bool const from_zeros = !settings_.warm_start && warm_up == 0;
    Level const first = fused ? Level{} : make_level(chunks, na, n);
    Data data{rec_,
              z_,
              other,
              first.maps,
              first.offsets,
              first.count,
              memory_.template array<Kokkos::View<double*, Memory>>(
                  "error", true, batch_),
              length_,
              chunk,
              chunks,
              n,
              na,
              block,
              settings_.strided,
              reversed_,
              T(settings_.atol),
              T(settings_.rtol)};
    data.team = fold_team<Space, T>(space_, settings_.chunk_team_size, n, block,
                                    data.team_work(), chunk);
    // The thread path's values (none where a team a chunk runs).
    Items items(batch_ * chunks, 5 * n + 2 * na + rec_.work_size(), T());
    if (data.team.threads == 0)
      items = items.values_in(memory_, space_, never_wait_);
    auto const still =
        memory_.template array<Kokkos::View<int, Memory>>("active", false);
    auto still_host = host_copy("active_host", still);
    int const max_iterations = linear_exact ? 1 : settings_.max_iterations;
    // A first fused iteration that reads no old trajectory (from zeros, or
    // from the start it evaluates) writes z itself: a sequence that
    // converges there then needs no copy home (a whole-trajectory pass).
    bool const first_home = fused && (from_zeros || fused_start);
    if (first_home) std::swap(data.old_z, data.new_z);
    int last = 0;  // the iterations run
    for (int k = 1; k <= max_iterations; ++k) {
      last = k;
      if (k > 1) std::swap(data.old_z, data.new_z);
      bool const odd = data.new_z.data() != z_.data();  // ends in `other`
      auto const d = data;
      if (fused) {
        fused_iteration->run(
            space_, IterationArrays<Space, Recurrence>{
                        d.rec, d.old_z, d.new_z, status, d.error, d.atol,
                        d.rtol, d.reversed, k == 1 && from_zeros,
                        k == 1 && fused_start ? warm_up : 0});
      } else {
        Kokkos::parallel_for(label("count_chunks"), work_items(space_, batch_),
                             CountIterating{d, status});
        d.pass(space_, items, /*replay=*/false);
        solve_chunks(d.maps, d.offsets, d.chunk_count, n, block, concurrency,
                     host);
        d.pass(space_, items, /*replay=*/true);
      }
      compat::fill(space_, still, 0);
      Kokkos::parallel_for(
          label("judge"), work_items(space_, batch_),
          Judge{d, status, count, still, k, max_iterations, linear_exact, odd});
      if (!check_after(k)) continue;
      Kokkos::deep_copy(space_, still_host, still);
      space_.fence();
      if (still_host() == 0) break;
    }
    // Results that ended in the second buffer come home (none can where
    // one iteration, home, was all).
    if (!(first_home && last == 1))
      for_each_step(space_, label("gather"), batch_, length_,
                    Gather{z_, other, rec_, status, n});
  }

  // Damped (Levenberg–Marquardt, quasi-ELK) iterations of every sequence,
  // in place in z (from its contents with warm_start, else from zeros).
  // Each iteration linearises every iterating sequence (Jacobians'
  // diagonal, residuals, the residual's tolerance ratio), judges it, then
  // runs DampedStep's three scans; a sequence whose residual is within
  // tolerance ends converged_damped, one that overflows or runs out of
  // iterations diverged. λ starts at settings.damping and follows a
  // trust-region schedule per sequence: halved after an update that
  // lowered the worst residual ratio, reset to its start after one that
  // did not.
  void damped(Kokkos::View<int*, Memory> status,
              Kokkos::View<int*, Memory> count, std::int64_t concurrency,
              bool host) {
    double const lambda = settings_.damping;
    int const n = rec_.state_size();
    // ELK: full Jacobians of a state of more than one value.
    bool const full = settings_.block == n && n > 1;
    auto const array = [&](const char* what, int width) {
      return memory_.template array<DeerView3<T, Space>>(what, false, batch_,
                                                         length_, width);
    };
    DampedStep<Space, T> const d{
        array("damped_jacobians", full ? n * n : n),
        array("damped_residuals", n),
        array("damped_variances", full ? n * n : n),
        array("damped_means", n),
        z_,
        memory_.template array<Kokkos::View<int*, Memory>>("damped_steps", true,
                                                           batch_),
        memory_.template array<DeerView1<T, Space>>("damped_lambda", false,
                                                    batch_),
        reversed_};
    auto const previous = memory_.template array<Kokkos::View<double*, Memory>>(
        "damped_previous", true, batch_);
    auto const error = memory_.template array<Kokkos::View<double*, Memory>>(
        "damped_error", true, batch_);
    auto const still = memory_.template array<Kokkos::View<int, Memory>>(
        "damped_active", false);
    auto still_host = host_copy("damped_active_host", still);
    if (!settings_.warm_start) compat::fill(space_, z_, T(0));
    Kokkos::parallel_for(label("damped_start"), work_items(space_, batch_),
                         DampedStart{d, rec_, status, previous, T(lambda)});
    // ELK's scans carry sequentially over a sequence's chunks: at least
    // √T steps a chunk balances that carry against the chunks' passes.
    int chunk = choose_chunk(batch_, length_, 1, concurrency, host);
    if (full)
      chunk = settings_.chunk > 0
                  ? int(std::min<std::int64_t>(settings_.chunk, length_))
                  : std::max(chunk, int(std::ceil(std::sqrt(double(length_)))));
    std::int64_t const chunks = (length_ + chunk - 1) / chunk;
    Items const items =
        Items(batch_ * chunks, 2 * n + (full ? n * n : n) + rec_.work_size(),
              T())
            .values_in(memory_, space_, never_wait_);
    ScalarScan<Space, T> scan{memory_};
    scan.space = space_;
    scan.batch = batch_;
    scan.n = n;
    scan.concurrency = concurrency;
    scan.host = host;
    scan.chunk_setting = settings_.chunk;
    DampedLinearise const linearise{d,
                                    rec_,
                                    error,
                                    chunks,
                                    chunk,
                                    n,
                                    T(settings_.atol),
                                    T(settings_.rtol),
                                    reversed_,
                                    full};
    auto const per_chunk = [&](const char* what, int width) {
      return full ? memory_.template array<Buffer>(what, false, batch_, chunks,
                                                   width)
                  : Buffer();
    };
    ElkUpdate<Space, T> elk{
        d,
        per_chunk("elk_chunk_maps", KalmanElement<T>::size(n)),
        per_chunk("elk_carried", n * n + n),
        chunks,
        chunk,
        n,
        settings_.chunk_team_size};
    // The judge of iteration max_iterations ends every sequence.
    for (int k = 0; k <= settings_.max_iterations; ++k) {
      items.template for_each<T>(space_, label("damped_linearise"), linearise);
      compat::fill(space_, still, 0);
      Kokkos::parallel_for(label("damped_judge"), work_items(space_, batch_),
                           DampedJudge{d, status, count, error, previous, still,
                                       T(lambda), k, settings_.max_iterations});
      if (k == settings_.max_iterations) break;
      if (check_after(k + 1)) {
        Kokkos::deep_copy(space_, still_host, still);
        space_.fence();
        if (still_host() == 0) break;
      }
      if (full) {
        elk.run(space_, batch_, memory_);
        continue;
      }
      scan.template run<MobiusMap>(typename DampedStep<Space, T>::Variance{{d}},
                                   length_);
      scan.template run<AffineMap>(typename DampedStep<Space, T>::Filter{{d}},
                                   length_);
      scan.template run<AffineMap>(typename DampedStep<Space, T>::Smoother{{d}},
                                   length_);
    }
  }

  // The sequences marked diverged, by the loop over t: a team each where
  // the recurrence shares its steps (loop_team), else a thread each.
  // The team of the sequential loop (loop_team; none: a thread a sequence)
  // and its fast memory.
  std::size_t loop_bytes() const {
    if constexpr (TeamLoop<Recurrence>::value)
      return std::size_t(rec_.state_size() + rec_.team_values()) * sizeof(T);
    return 0;
  }
  LoopTeam loop_shape() const {
    if constexpr (TeamLoop<Recurrence>::value)
      return loop_team(space_, settings_.team_size, rec_.team_width(),
                       loop_bytes());
    return {};
  }

  // The vendor's loop where it takes the recurrence, unless a thread or
  // team shape of the portable loop, or the portable kernels, were asked
  // for.
  bool vendor_loop() const {
    return settings_.team_size == 0 && settings_.kernel != Kernel::portable &&
           SequentialLoop<Space, Recurrence>::applies(rec_);
  }

  void sequential(Kokkos::View<int*, Memory> status) {
    int const n = rec_.state_size();
    if (vendor_loop()) {
      SequentialLoop<Space, Recurrence>::run(space_, rec_, z_, status, batch_,
                                             reversed_);
      return;
    }
    if constexpr (TeamLoop<Recurrence>::value) {
      std::size_t const bytes = loop_bytes();
      LoopTeam const team = loop_shape();
      if (team.threads > 0) {
        Kokkos::parallel_for(
            label("sequential_teams"),
            compat::light_weight(
                Kokkos::TeamPolicy<Space>(space_, int(batch_), team.threads,
                                          team.lanes)
                    .set_scratch_size(0, Kokkos::PerTeam(bytes))),
            TeamSequential{rec_, z_, status, n, reversed_, bytes});
        return;
      }
    }
    Items const items = Items(batch_, n + rec_.work_size(), T())
                            .values_in(memory_, space_, never_wait_);
    items.template for_each<T>(space_, label("sequential"),
                               Sequential{rec_, z_, status, n, reversed_});
  }

  // Zeros past each length; the report.
  void finish(Kokkos::View<int*, Memory> status,
              Kokkos::View<int*, Memory> count,
              DeerView1<int, Space> iterations, DeerView1<int, Space> path,
              DeerPath sequential_path) {
    // (Without lengths every sequence runs to the end: no tail to clear.)
    if (rec_.lengths.lengths.extent(0))
      for_each_step(space_, label("clear_tail"), batch_, length_,
                    ClearTail{rec_, z_, rec_.state_size()});
    Kokkos::parallel_for(
        label("report"), work_items(space_, batch_),
        Report{status, count, iterations, path, int(sequential_path)});
  }

  // The arrays of the scan's levels above the first (solve_chunks).
  struct Level {
    DeerView3<T, Space> maps, offsets;
    Kokkos::View<int*, Memory> count;
  };
  std::vector<Level> levels_;

  // One level's arrays for `chunks` chunks of every sequence.
  Level make_level(std::int64_t chunks, int na, int n) {
    auto const array = [&](const char* what, std::int64_t width) {
      return memory_.template array<DeerView3<T, Space>>(what, false, batch_,
                                                         chunks, width);
    };
    return Level{array("chunk_maps", na), array("chunk_offsets", n),
                 memory_.template array<Kokkos::View<int*, Memory>>(
                     "chunk_count", false, batch_)};
  }

  Space space_;
  Recurrence rec_;
  Buffer z_;
  std::int64_t batch_, length_;
  bool reversed_;
  Settings settings_;
  SolveMemory<Space> memory_;
  // check_every = 0: nothing waits for the device (ThreadItems::values_in).
  bool never_wait_ = false;
};

// --- recurrences from cells -------------------------------------------------

// Lengths as the kernels use them: within [1, T] whatever was passed (the
// data checks report a bad one; with them off, it is clamped).
template <class Space>
struct Lengths {
  Kokkos::View<const int*, typename Space::memory_space> lengths;
  int steps = 0;
  KOKKOS_INLINE_FUNCTION int operator()(int b) const {
    if (lengths.extent(0) == 0) return steps;
    int const l = lengths(b);
    return l < 1 ? 1 : (l > steps ? steps : l);
  }
};

// Whether Cell gives each sequence a cell of its own (a member cell_of(b)):
// the library's cells with diagonal hidden weights solve each unit of each
// sequence as a sequence of its own, with that unit's weights.
template <class Cell, class = void>
struct PerSequenceCells : std::false_type {};
template <class Cell>
struct PerSequenceCells<
    Cell, std::void_t<decltype(std::declval<const Cell&>().cell_of(0))>>
    : std::true_type {};

// The cell sequence b runs: `cell` itself, or its cell_of(b).
template <class Cell>
KOKKOS_INLINE_FUNCTION decltype(auto) sequence_cell(const Cell& cell, int b) {
  if constexpr (PerSequenceCells<Cell>::value)
    return cell.cell_of(b);
  else
    return (cell);
}

// y_t = f(y_{t−1}, x_t).
template <class Space, class Cell>
struct Forward {
  using value_type = typename Cell::value_type;
  using T = value_type;
  Cell cell;
  DeerView3<const T, Space> x;
  DeerView2<const T, Space> y0;
  Lengths<Space> lengths;
  int block = 1;  // Settings::block: above 1 and below n, the full Jacobian
                  // is formed in the work array and its blocks kept
  bool strided = false;  // Settings::strided

  KOKKOS_INLINE_FUNCTION int state_size() const { return cell.state_size(); }
  KOKKOS_INLINE_FUNCTION int work_size() const {
    int const n = cell.state_size();
    return cell.work_size() + (block > 1 && block < n ? n * n : 0);
  }
  KOKKOS_INLINE_FUNCTION int length(int b) const { return lengths(b); }
  KOKKOS_INLINE_FUNCTION void initial(int b, T* z) const {
    int const n = cell.state_size();
    for (int i = 0; i < n; ++i) z[i] = y0.extent(0) ? y0(b, i) : T(0);
  }

  // The cell's bounds on the automatic method's DEER (the adjoint keeps
  // the defaults: its linear solve is one pass).
  static constexpr int full_jacobian_device_limit =
      FullJacobianDeviceLimit<Cell>::value;
  static constexpr int quasi_jacobian_device_limit =
      QuasiJacobianDeviceLimit<Cell>::value;

  // The step shared by a team's threads, where the cell can (TeamLoop): z
  // in the team's memory, updated in place.
  static constexpr bool team_loop =
      TeamLoop<Cell>::value && !PerSequenceCells<Cell>::value;
  KOKKOS_INLINE_FUNCTION int team_values() const { return cell.team_values(); }
  KOKKOS_INLINE_FUNCTION int team_width() const { return cell.team_width(); }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_begin(const Member& member,
                                         T* shared) const {
    cell.team_begin(member, shared);
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_step(const Member& member, int b, int t,
                                        T* z, T* shared) const {
    cell.team_step(member, z, &x(b, t, 0), shared);
  }
  // A step's linearisation a unit a thread, where the cell can (UnitSteps).
  static constexpr bool unit_steps =
      UnitSteps<Cell>::value && !PerSequenceCells<Cell>::value;
  KOKKOS_INLINE_FUNCTION int units() const { return cell.units(); }
  template <class Row>
  KOKKOS_INLINE_FUNCTION void step_unit(int b, int t, const T* z_prev, int i,
                                        const Row& row) const {
    cell.step_unit(i, z_prev, &x(b, t, 0), row);
  }
  KOKKOS_INLINE_FUNCTION void step(int b, int t, const T* z_prev, T* z,
                                   T* jacobian, Linearise kind, T* work) const {
    auto const& cell = sequence_cell(this->cell, b);
    if (kind == Linearise::block) {
      int const n = cell.state_size();
      T* const full = work + cell.work_size();
      cell.step(z_prev, &x(b, t, 0), z, full, DeerJacobian::full, work);
      diagonal_blocks(full, block, n, strided, /*transposed=*/false, jacobian);
      return;
    }
    cell.step(z_prev, &x(b, t, 0), z, jacobian,
              kind == Linearise::diagonal ? DeerJacobian::diagonal
                                          : DeerJacobian::full,
              work);
  }
};

// λ_t = ḡ_t + J_{t+1}ᵀ λ_{t+1} backwards from λ_{L−1} = ḡ_{L−1}, J_{t+1} at
// (y_t, x_{t+1}); its Jacobian in λ_{t+1} is J_{t+1}ᵀ.
template <class Space, class Cell>
struct Adjoint {
  using value_type = typename Cell::value_type;
  using T = value_type;
  Cell cell;
  DeerView3<const T, Space> x;
  DeerView3<const T, Space> y;
  DeerView3<const T, Space> grad_y;
  Lengths<Space> lengths;
  int block = 1;         // Settings::block
  bool strided = false;  // Settings::strided

  KOKKOS_INLINE_FUNCTION int state_size() const { return cell.state_size(); }
  KOKKOS_INLINE_FUNCTION int work_size() const {
    int const n = cell.state_size();
    return cell.work_size() + n + n * n;
  }
  KOKKOS_INLINE_FUNCTION int length(int b) const { return lengths(b); }
  KOKKOS_INLINE_FUNCTION void initial(int, T* z) const {
    for (int i = 0; i < cell.state_size(); ++i) z[i] = 0;
  }

  // The step shared by a team's threads, where the cell can share its
  // vector–Jacobian product (TeamAdjoint): z (λ_{t+1} in, λ_t out) in the
  // team's memory, with a copy of λ_{t+1} and y_t beside the cell's values.
  static constexpr bool team_loop =
      TeamAdjoint<Cell>::value && !PerSequenceCells<Cell>::value;
  KOKKOS_INLINE_FUNCTION int team_values() const {
    return 2 * cell.state_size() + cell.team_adjoint_values();
  }
  KOKKOS_INLINE_FUNCTION int team_width() const { return cell.team_width(); }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_begin(const Member& member, T*) const {
    member.team_barrier();
  }
  template <class Member>
  KOKKOS_INLINE_FUNCTION void team_step(const Member& member, int b, int t,
                                        T* z, T* shared) const {
    int const n = cell.state_size();
    T* const next = shared;
    T* const y_t = next + n;
    if (t + 1 >= lengths(b)) {
      Kokkos::parallel_for(Kokkos::TeamVectorRange(member, n),
                           [&](int i) { z[i] = grad_y(b, t, i); });
      member.team_barrier();
      return;
    }
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, n), [&](int i) {
      next[i] = z[i];
      y_t[i] = y(b, t, i);
    });
    member.team_barrier();
    cell.team_vector_jacobian(member, y_t, &x(b, t + 1, 0), next, z, y_t + n);
    Kokkos::parallel_for(Kokkos::TeamVectorRange(member, n),
                         [&](int i) { z[i] += grad_y(b, t, i); });
    member.team_barrier();
  }
  // The full map J_{t+1}ᵀ a unit a thread, where the cell can (UnitSteps,
  // UnitColumns): the cell's unit i at (y_t, x_{t+1}) gives its rows of
  // J_{t+1}, the map's columns.
  static constexpr bool unit_columns =
      UnitSteps<Cell>::value && !PerSequenceCells<Cell>::value;
  KOKKOS_INLINE_FUNCTION int units() const { return cell.units(); }
  KOKKOS_INLINE_FUNCTION bool last(int b, int t) const {
    return t + 1 >= lengths(b);
  }
  template <class Column>
  KOKKOS_INLINE_FUNCTION void step_unit_columns(int b, int t, int i,
                                                const Column& column) const {
    cell.step_unit(i, &y(b, t, 0), &x(b, t + 1, 0),
                   [&](int s, T, const auto& entry) { column(s, entry); });
  }
  KOKKOS_INLINE_FUNCTION T direct(int b, int t, int j) const {
    return grad_y(b, t, j);
  }
  KOKKOS_INLINE_FUNCTION void step(int b, int t, const T* next, T* z,
                                   T* jacobian, Linearise kind, T* work) const {
    auto const& cell = sequence_cell(this->cell, b);
    int const n = cell.state_size();
    T* const value = work;
    T* const J = value + n;
    T* const cell_work = J + n * n;
    bool const last = t + 1 >= lengths(b);
    for (int i = 0; i < n; ++i) z[i] = grad_y(b, t, i);
    if (last) {
      if (jacobian)
        for (int i = 0; i < n * block; ++i) jacobian[i] = 0;
      return;
    }
    T const* const y_t = &y(b, t, 0);
    T const* const x_next = &x(b, t + 1, 0);
    if (kind == Linearise::full || kind == Linearise::block) {
      cell.step(y_t, x_next, value, J, DeerJacobian::full, cell_work);
      for (int i = 0; i < n; ++i) {
        T sum = 0;
        for (int k = 0; k < n; ++k) sum += J[k * n + i] * next[k];
        z[i] += sum;
      }
      // Jᵀ, or the transposes of J's diagonal blocks.
      diagonal_blocks(J, kind == Linearise::full ? n : block, n, strided,
                      /*transposed=*/true, jacobian);
      return;
    }
    cell.vector_jacobian(y_t, x_next, next, value, static_cast<T*>(nullptr),
                         cell_work);
    for (int i = 0; i < n; ++i) z[i] += value[i];
    if (kind == Linearise::diagonal)
      cell.step(y_t, x_next, value, jacobian, DeerJacobian::diagonal,
                cell_work);
  }
};

template <class T, class Space>
void check_report(const DeerResult<T, Space>& result, std::size_t B) {
  if (result.iterations.extent(0) != 0 && result.iterations.extent(0) != B)
    throw_invalid_argument("iterations has ", result.iterations.extent(0),
                           " entries, expected ", B, " (one per sequence)");
  if (result.path.extent(0) != 0 && result.path.extent(0) != B)
    throw_invalid_argument("path has ", result.path.extent(0),
                           " entries, expected ", B, " (one per sequence)");
}

template <class T, class Space>
void check_gradients(const DeerGradients<T, Space>& g, std::size_t B,
                     std::size_t steps, std::size_t n, std::size_t m) {
  auto const shape = [&](auto const& v, const char* name, std::size_t e2,
                         bool required) {
    if (!required && v.size() == 0) return;
    if (v.extent(0) != B || v.extent(1) != steps || v.extent(2) != e2)
      throw_invalid_argument(name, " has shape (", v.extent(0), ", ",
                             v.extent(1), ", ", v.extent(2), "), expected (", B,
                             ", ", steps, ", ", e2, ")");
  };
  shape(g.grad_y, "grad_y", n, true);
  shape(g.grad_x, "grad_x", m, false);
  shape(g.adjoint, "adjoint", n, false);
  if (g.grad_y0.size() &&
      (g.grad_y0.extent(0) != B || g.grad_y0.extent(1) != n))
    throw_invalid_argument("grad_y0 has shape (", g.grad_y0.extent(0), ", ",
                           g.grad_y0.extent(1), "), expected (", B, ", ", n,
                           ")");
}

template <class Space, class Cell>
void solve_forward(const Space& space, const Cell& cell,
                   const DeerInputs<typename Cell::value_type, Space>& inputs,
                   const DeerResult<typename Cell::value_type, Space>& result,
                   const Settings& settings) {
  std::int64_t const B = inputs.x.extent(0), steps = inputs.x.extent(1);
  Forward<Space, Cell> const forward{
      cell,           inputs.x,
      inputs.y0,      Lengths<Space>{inputs.lengths, int(steps)},
      settings.block, settings.strided};
  Solver<Space, Forward<Space, Cell>>(space, forward, result.y, B, steps,
                                      /*reversed=*/false, settings)
      .run(result.iterations, result.path);
}

// λ (B, T, n): into gradients.adjoint where given, else a new array.
template <class Space, class Cell>
DeerView3<typename Cell::value_type, Space> solve_adjoint(
    const Space& space, const Cell& cell,
    const DeerInputs<typename Cell::value_type, Space>& inputs,
    DeerView3<const typename Cell::value_type, Space> y,
    const DeerGradients<typename Cell::value_type, Space>& gradients,
    Settings settings) {
  using T = typename Cell::value_type;
  std::int64_t const B = inputs.x.extent(0), steps = inputs.x.extent(1);
  DeerView3<T, Space> adjoint = gradients.adjoint;
  if (adjoint.size() == 0)
    adjoint = DeerView3<T, Space>(
        Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                           label("adjoint")),
        B, steps, cell.state_size());
  Adjoint<Space, Cell> const backward{
      cell,
      inputs.x,
      y,
      gradients.grad_y,
      Lengths<Space>{inputs.lengths, int(steps)},
      settings.block,
      settings.strided};
  settings.linear = true;
  settings.warm_start = false;
  // The adjoint is linear: plain steps (exact in one pass with full
  // Jacobians).
  settings.damping = 0;
  Solver<Space, Adjoint<Space, Cell>>(space, backward, adjoint, B, steps,
                                      /*reversed=*/true, settings)
      .run({}, {});
  return adjoint;
}

// The state before step t of sequence b: y_{t−1}, or at t = 0 y0(b) (zeros
// where y0 is empty) written into init.
template <class Y, class Y0, class T>
KOKKOS_INLINE_FUNCTION const T* previous_state(const Y& y, const Y0& y0, int b,
                                               int t, int n, T* init) {
  if (t > 0) return &y(b, t - 1, 0);
  for (int i = 0; i < n; ++i) init[i] = y0.extent(0) ? y0(b, i) : T(0);
  return init;
}

// dL/dx_t = (∂f/∂x_t)ᵀ λ_t and dL/dy_0 = J_1ᵀ λ_1 of step q, a thread each
// (input_gradients).
template <class Space, class Cell>
struct InputGradients {
  using T = typename Cell::value_type;
  Cell cell;
  DeerView3<const T, Space> x, y, adjoint;
  DeerView2<const T, Space> y0;
  DeerView3<T, Space> grad_x;
  DeerView2<T, Space> grad_y0;
  Lengths<Space> lengths;
  std::int64_t steps;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t q, T* init) const {
    int const n = cell.state_size(), m = cell.input_size();
    int b, t;
    split_step(q, steps, b, t);
    bool const first = t == 0;
    if (t >= lengths(b)) {
      if (grad_x.size())
        for (int j = 0; j < m; ++j) grad_x(b, t, j) = 0;
      return;
    }
    if (!first && grad_x.size() == 0) return;
    T const* const y_prev = previous_state(y, y0, b, t, n, init);
    sequence_cell(cell, b).vector_jacobian(
        y_prev, &x(b, t, 0), &adjoint(b, t, 0),
        first && grad_y0.size() ? &grad_y0(b, 0) : static_cast<T*>(nullptr),
        grad_x.size() ? &grad_x(b, t, 0) : static_cast<T*>(nullptr), init + n);
  }
};

template <class Space, class Cell>
void input_gradients(
    const Space& space, const Cell& cell,
    const DeerInputs<typename Cell::value_type, Space>& inputs,
    DeerView3<const typename Cell::value_type, Space> y,
    DeerView3<const typename Cell::value_type, Space> adjoint,
    const DeerGradients<typename Cell::value_type, Space>& gradients,
    bool never_wait) {
  using T = typename Cell::value_type;
  if (gradients.grad_x.size() == 0 && gradients.grad_y0.size() == 0) return;
  std::int64_t const B = inputs.x.extent(0), steps = inputs.x.extent(1);
  auto memory = SolveMemoryOf<Space, Cell>::make(space);
  ThreadItems<Space> const items =
      ThreadItems<Space>(B * steps, cell.state_size() + cell.work_size(), T())
          .values_in(memory, space, never_wait);
  items.template for_each<T>(
      space, label("input_gradients"),
      InputGradients<Space, Cell>{cell, inputs.x, y, adjoint, inputs.y0,
                                  gradients.grad_x, gradients.grad_y0,
                                  Lengths<Space>{inputs.lengths, int(steps)},
                                  steps});
}

}  // namespace softwave::impl::deer

namespace softwave {

template <class Space, class Cell>
void deer(const Space& space, const Cell& cell,
          const DeerInputs<typename Cell::value_type, Space>& inputs,
          const DeerResult<typename Cell::value_type, Space>& result,
          const DeerOptions& options) {
  using T = typename Cell::value_type;
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>,
                "softwave::deer: cells of float or double");
  namespace d = impl::deer;
  std::size_t const B = inputs.x.extent(0);
  d::Settings const settings = d::check_call<Space, T>(
      space, inputs, cell.state_size(), cell.input_size(), options, "y",
      result.y.extent(0), result.y.extent(1), result.y.extent(2));
  d::check_report(result, B);
  if (B == 0) return;
  d::solve_forward(space, cell, inputs, result, settings);
}

template <class Space, class Cell>
void deer_gradients(
    const Space& space, const Cell& cell,
    const DeerInputs<typename Cell::value_type, Space>& inputs,
    DeerView3<const typename Cell::value_type, Space> y,
    const DeerGradients<typename Cell::value_type, Space>& gradients,
    const DeerOptions& options) {
  using T = typename Cell::value_type;
  namespace d = impl::deer;
  std::size_t const B = inputs.x.extent(0), steps = inputs.x.extent(1);
  d::Settings const settings = d::check_call<Space, T>(
      space, inputs, cell.state_size(), cell.input_size(), options, "y",
      y.extent(0), y.extent(1), y.extent(2));
  d::check_gradients(gradients, B, steps, cell.state_size(), cell.input_size());
  if (B == 0) return;
  auto const adjoint =
      d::solve_adjoint(space, cell, inputs, y, gradients, settings);
  d::input_gradients(space, cell, inputs, y, DeerView3<const T, Space>(adjoint),
                     gradients, settings.check_every == 0);
}

}  // namespace softwave
