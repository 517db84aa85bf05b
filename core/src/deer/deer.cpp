// softwave/deer.hpp: argument checks, PyTorch's cells through the DEER
// solver, and their weights' gradients.

#include <limits>
#include <softwave/deer.hpp>

#include "../common/call_memory.hpp"
#include "../common/data_checks.hpp"
#include "cells.hpp"

// The CUDA backend's fused Newton iteration, sequential loop and
// stream-ordered solve memory, for these cells (its folder is on the
// include path in a CUDA build only).
#if __has_include(<deer/vendor_fused_iteration.hpp>)
#include <deer/vendor_fused_iteration.hpp>
#endif
#if __has_include(<deer/vendor_solve_memory.hpp>)
#include <deer/vendor_solve_memory.hpp>
#endif
#if __has_include(<deer/vendor_sequential_loop.hpp>)
#include <deer/vendor_sequential_loop.hpp>
#endif

namespace softwave::impl::deer {

template <class Space, class T>
Settings check_call(const Space& space, const DeerInputs<T, Space>& inputs,
                    int n, int m, const DeerOptions& options,
                    const char* y_name, std::size_t y0_, std::size_t y1,
                    std::size_t y2) {
  Settings s;
  bool const single = std::is_same_v<T, float>;
  // Damped runs stop on the residual, which bounds the error left only up
  // to 1 / (1 − |J|): their defaults are a hundredth of Newton's.
  double const scale = options.damping > 0 ? 0.01 : 1.0;
  s.atol = options.atol.value_or(scale * (single ? 1e-4 : 1e-10));
  s.rtol = options.rtol.value_or(scale * (single ? 1e-3 : 1e-8));
  if (!(s.atol > 0) || !std::isfinite(s.atol))
    throw_invalid_argument("atol must be finite and > 0 (got ", s.atol, ")");
  if (!(s.rtol > 0) || !std::isfinite(s.rtol))
    throw_invalid_argument("rtol must be finite and > 0 (got ", s.rtol, ")");
  if (options.max_iterations < 1)
    throw_invalid_argument("max_iterations must be >= 1 (got ",
                           options.max_iterations, ")");
  auto const non_negative = [](const char* name, int value) {
    if (value < 0)
      throw_invalid_argument(name, " must be >= 0 (got ", value, ")");
  };
  non_negative("check_every", options.check_every);
  non_negative("chunk", options.chunk);
  non_negative("sequential_team_size", options.sequential_team_size);
  non_negative("chunk_team_size", options.chunk_team_size);
  if (options.start_warm_up)
    non_negative("start_warm_up", *options.start_warm_up);
  if (!(options.damping >= 0) || !std::isfinite(options.damping))
    throw_invalid_argument("damping must be finite and >= 0 (got ",
                           options.damping, ")");
  if (options.damping > 0 && options.jacobian == DeerJacobian::block)
    throw_invalid_argument(
        "damping > 0 takes jacobian = diagonal (quasi-ELK's steps) or full "
        "(ELK's), not block");
  if (options.jacobian == DeerJacobian::block &&
      (options.block_size < 1 || n % options.block_size != 0))
    throw_invalid_argument(
        "block_size must be >= 1 and divide the state "
        "size ",
        n, " (got ", options.block_size, ")");
  s.block = options.jacobian == DeerJacobian::full       ? n
            : options.jacobian == DeerJacobian::diagonal ? 1
                                                         : options.block_size;
  s.strided = options.jacobian == DeerJacobian::block &&
              options.block_layout == DeerBlockLayout::strided;
  s.damping = options.damping;
  s.max_iterations = options.max_iterations;
  s.check_every = options.check_every;
  s.team_size = options.sequential_team_size;
  s.chunk_team_size = options.chunk_team_size;
  s.chunk = options.chunk;
  s.warm_start = options.warm_start;
  s.start_warm_up = options.start_warm_up.value_or(-1);
  s.method = options.method;
  s.jacobian = options.jacobian;
  s.kernel = options.kernel;
  if (options.kernel == Kernel::pairs)
    throw_invalid_argument(
        "kernel = pairs is Soft-DTW's; DEER takes automatic, portable or "
        "specialised");

  auto const& x = inputs.x;
  std::size_t const B = x.extent(0), steps = x.extent(1);
  if (B > 0 && steps == 0)
    throw_invalid_argument("x has no steps (x.extent(1) = 0)");
  if (B > 0 && x.extent(2) != std::size_t(m))
    throw_invalid_argument("x has ", x.extent(2),
                           " values a step (x.extent(2)), expected ", m,
                           " (the cell's input size)");
  if (inputs.y0.size())
    check_extent(inputs.y0, "y0", {B, std::size_t(n)},
                 "(one initial state per sequence)");
  if (y0_ != B || y1 != steps || y2 != std::size_t(n))
    throw_invalid_argument(y_name, " has shape (", y0_, ", ", y1, ", ", y2,
                           "), expected (", B, ", ", steps, ", ", n,
                           ") (x's batch and steps, the state size)");
  DataChecks<Space> checks(space, options.check_values, "deer");
  auto const lengths =
      checks.lengths(inputs.lengths, "lengths", B, std::int64_t(steps));
  checks.finite_series(x, lengths, "x");
  checks.finite_values(inputs.y0, "y0");
  checks.finish();
  return s;
}

namespace {

template <class T, class Space>
using V1 = DeerView1<T, Space>;
template <class T, class Space>
using V2 = DeerView2<T, Space>;
template <class T, class Space>
using V3 = DeerView3<T, Space>;

// The weights' shapes (and values, with the data checks); returns H.
template <class Space, class T>
int check_weights(const Space& space, const RnnWeights<T, Space>& w,
                  std::size_t m, bool check_values) {
  std::size_t const G = gates_of(w.cell);
  std::size_t const rows = w.weight_hh.extent(0);
  if (rows == 0 || rows % G != 0)
    throw_invalid_argument("weight_hh has ", rows, " rows, expected ", G,
                           "·hidden size (", G, " gates) and at least one");
  std::size_t const H = rows / G;
  if (w.diagonal_hh)
    check_extent(w.weight_hh, "weight_hh", {G * H, 1},
                 "(gates·hidden size, 1) with diagonal_hh");
  else
    check_extent(w.weight_hh, "weight_hh", {G * H, H},
                 "(gates·hidden size, hidden size)");
  if (w.weight_ih.size() == 0 && m != G * H)
    throw_invalid_argument(
        "weight_ih is empty, so x must hold the input projections, ", G * H,
        " values a step (gates·hidden size); x has ", m);
  if (w.weight_ih.size())
    check_extent(w.weight_ih, "weight_ih", {G * H, m},
                 "(gates·hidden size, x's input size)");
  if (w.bias_ih.size())
    check_extent(w.bias_ih, "bias_ih", {G * H}, "(gates·hidden size)");
  if (w.bias_hh.size())
    check_extent(w.bias_hh, "bias_hh", {G * H}, "(gates·hidden size)");
  if (w.cell == RnnCell::cifg_lstm)
    check_extent(w.peephole, "peephole", {2 * H},
                 "(2·hidden size: C_f, then C_o) for cifg_lstm");
  else if (w.peephole.size())
    throw_invalid_argument(
        "peephole is given, but only cifg_lstm has peepholes (leave it "
        "empty for the other cells)");
  DataChecks<Space> checks(space, check_values, "deer");
  checks.finite_values(w.weight_ih, "weight_ih");
  checks.finite_values(w.weight_hh, "weight_hh");
  checks.finite_values(w.bias_ih, "bias_ih");
  checks.finite_values(w.bias_hh, "bias_hh");
  checks.finite_values(w.peephole, "peephole");
  checks.finish();
  return int(H);
}

// The input projections of a call, and the array holding them where it is
// not x itself.
template <class Space, class T>
struct Projections {
  CallArray<V3<T, Space>> owner;
  V3<const T, Space> view;
};

// Products of a small matrix with every step's vector:
//   out(b, t, i) = bias(i) + Σ_c a(i, c) · in(b, t, c),
// a = weight (outputs × inputs), its transpose, or the identity where weight
// is empty. A thread a step with its own loop over i wrote each step's
// outputs alone, a warp's stores 32 lines apart: at n = 16, T = 100k,
// B = 16 the input projections took 4.57 ms on an H200 (409 MB, 0.1 ms of
// bytes; 0.9 ms in tiles). Here a team takes a tile of one sequence's steps:
// its inputs are staged in team memory (in chunks of columns), each thread owns
// an output i for kSteps steps of the tile (the coefficient read once for
// them), and a warp's threads take consecutive outputs, so that loads and
// stores are whole lines. With `units` (H > 0) row i = g·H + u goes unit-major
// to out(b·H + u, t, g) (transpose_units), a thread's steps then consecutive
// steps of the tile's threads. (On a host, and for few outputs a step,
// products_per_step below.)
template <class Space, class T>
struct StepProducts {
  static constexpr int kSteps = 8;
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  V3<const T, Space> in;
  V2<const T, Space> weight;  // empty: the identity
  bool transposed = false;
  V1<const T, Space> bias;  // may be empty
  V3<T, Space> out;
  int units = 0;
  std::int64_t batch = 0, steps = 0;
  int outputs = 0, inputs = 0;
  // Threads a tile per output block (min(outputs, team size)), groups of
  // them (each kSteps steps), columns staged at a time, tiles a sequence.
  int width = 1, groups = 1, chunk = 1;
  std::int64_t tiles = 1;

  KOKKOS_INLINE_FUNCTION int tile_steps() const { return groups * kSteps; }
  KOKKOS_INLINE_FUNCTION T coefficient(int i, int c) const {
    return transposed ? weight(c, i) : weight(i, c);
  }
  KOKKOS_INLINE_FUNCTION void stage(const Member& member, T* staged, int b,
                                    std::int64_t t0, int count, int c0) const {
    int const columns = inputs - c0 < chunk ? inputs - c0 : chunk;
    // Zeros past the sequence's end, which the threads' sums then read.
    for (int q = member.team_rank(); q < tile_steps() * columns;
         q += member.team_size()) {
      int const s = q / columns, c = q - s * columns;
      staged[s * (chunk + 1) + c] = s < count ? in(b, t0 + s, c0 + c) : T(0);
    }
  }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    for (std::int64_t tile = member.league_rank(); tile < batch * tiles;
         tile += member.league_size())
      product_of_tile(member, int(tile / tiles), tile % tiles);
  }
  KOKKOS_INLINE_FUNCTION void product_of_tile(const Member& member, int b,
                                              std::int64_t tile) const {
    std::int64_t const t0 = tile * tile_steps();
    int const count =
        int(steps - t0 < tile_steps() ? steps - t0 : tile_steps());
    T* const staged = static_cast<T*>(member.team_scratch(0).get_shmem(
        std::size_t(tile_steps()) * (chunk + 1) * sizeof(T)));
    bool const identity = weight.size() == 0;
    bool const staged_once = !identity && inputs <= chunk;
    if (staged_once) {
      member.team_barrier();  // the team's previous tile is read
      stage(member, staged, b, t0, count, 0);
      member.team_barrier();
    }
    int const rank = member.team_rank();
    int const lane = rank % width, group = rank / width;
    // Thread (lane, group)'s steps: with units consecutive, so that a
    // thread's unit-major stores are adjacent; otherwise every groups-th,
    // so that the tile's threads store consecutive steps' outputs.
    auto step_of = [&](int j) {
      return units > 0 ? group * kSteps + j : group + j * groups;
    };
    for (int i0 = 0; i0 < outputs; i0 += width) {
      int const i = i0 + lane;
      bool const active = group < groups && i < outputs;
      T sums[kSteps];
      for (int j = 0; j < kSteps; ++j) sums[j] = 0;
      if (identity) {
        for (int j = 0; j < kSteps; ++j)
          if (active && step_of(j) < count) sums[j] = in(b, t0 + step_of(j), i);
      } else {
        for (int c0 = 0; c0 < inputs; c0 += chunk) {
          if (!staged_once) {
            member.team_barrier();
            stage(member, staged, b, t0, count, c0);
            member.team_barrier();
          }
          int const columns = inputs - c0 < chunk ? inputs - c0 : chunk;
          if (active)
            for (int c = 0; c < columns; ++c) {
              T const a = coefficient(i, c0 + c);
              for (int j = 0; j < kSteps; ++j)
                sums[j] += a * staged[step_of(j) * (chunk + 1) + c];
            }
        }
      }
      if (!active) continue;
      T const offset = bias.size() ? bias(i) : T(0);
      for (int j = 0; j < kSteps; ++j) {
        int const s = step_of(j);
        if (s >= count) break;
        if (units > 0)
          out(std::int64_t(b) * units + i % units, t0 + s, i / units) =
              sums[j] + offset;
        else
          out(b, t0 + s, i) = sums[j] + offset;
      }
    }
  }
};

// At most this many outputs a step take products_per_step on a device.
constexpr int kPerStepOutputs = 4;

// step_products by a thread a step, each with its own loop over the
// outputs: on a host, and on a device where a step's outputs span at most
// kPerStepOutputs values, whose stores a warp then makes as whole lines
// (at n = 1, B = 16, T = 1M the tiles' staging made a GRU's forward and its
// gradients 12 % slower on an H200).
template <class Space, class T>
void products_per_step(const Space& space, const char* label,
                       const StepProducts<Space, T>& f) {
  for_each_step(
      space, std::string("softwave::deer::") + label, f.in.extent(0), f.steps,
      KOKKOS_LAMBDA(int b, std::int64_t t) {
        bool const identity = f.weight.size() == 0;
        for (int i = 0; i < f.outputs; ++i) {
          T sum = f.bias.size() ? f.bias(i) : T(0);
          if (identity)
            sum += f.in(b, t, i);
          else
            for (int c = 0; c < f.inputs; ++c)
              sum += f.coefficient(i, c) * f.in(b, t, c);
          if (f.units > 0)
            f.out(std::int64_t(b) * f.units + i % f.units, t, i / f.units) =
                sum;
          else
            f.out(b, t, i) = sum;
        }
      });
}

template <class Space, class T>
void step_products(const Space& space, const char* label, V3<const T, Space> in,
                   V2<const T, Space> weight, bool transposed,
                   V1<const T, Space> bias, V3<T, Space> out, int outputs,
                   int units = 0) {
  std::int64_t const B = in.extent(0), steps = in.extent(1);
  if (B == 0 || steps == 0 || outputs == 0) return;
  StepProducts<Space, T> f;
  f.in = in;
  f.weight = weight;
  f.transposed = transposed;
  f.bias = bias;
  f.out = out;
  f.units = units;
  f.steps = steps;
  f.outputs = outputs;
  f.inputs = weight.size() ? int(in.extent(2)) : outputs;
  if (runs_on_host<Space> || outputs <= kPerStepOutputs) {
    products_per_step(space, label, f);
    return;
  }
  constexpr int team_size = 256;
  f.width = std::min(outputs, team_size);
  f.groups = team_size / f.width;
  // At most 16 KB of staged inputs a team.
  std::int64_t const staged_values = 16384 / sizeof(T);
  f.chunk = int(std::clamp<std::int64_t>(staged_values / f.tile_steps() - 1, 1,
                                         std::max(f.inputs, 1)));
  f.batch = B;
  f.tiles = (steps + f.tile_steps() - 1) / f.tile_steps();
  // A team takes several tiles where the league's int would not hold them.
  std::int64_t const league =
      std::min<std::int64_t>(B * f.tiles, std::int64_t(1) << 30);
  std::size_t const scratch =
      std::size_t(f.tile_steps()) * (f.chunk + 1) * sizeof(T);
  // Four teams of 256 a multiprocessor: the kernel is bound by latency,
  // not bytes (perf/results/deer-step-products-ncu-h100-2026-12-07-9610648.txt:
  // 14 % of DRAM bandwidth at 96 registers, two teams a multiprocessor), and
  // at 64 registers it took 704 instead of 920 µs a call on an H100 (n = 16,
  // T = 100k, B = 16).
  Kokkos::parallel_for(
      std::string("softwave::deer::") + label,
      compat::light_weight(
          Kokkos::TeamPolicy<Space, Kokkos::LaunchBounds<team_size, 4>>(
              space, int(league), team_size)
              .set_scratch_size(0, Kokkos::PerTeam(scratch))),
      f);
}

// p_t = W_ih x_t + b_ih for every step, (B, T, G·H), by step_products; with
// `units` (H > 0) unit-major instead, (B·H, T, G) (transpose_units). With
// weight_ih empty x holds W_ih x_t (RnnWeights): p is x plus b_ih, and x
// itself where there is no b_ih to add or layout to change.
template <class Space, class T>
Projections<Space, T> project_inputs(const Space& space,
                                     const RnnWeights<T, Space>& w,
                                     V3<const T, Space> x, int units = 0) {
  std::int64_t const B = x.extent(0), steps = x.extent(1);
  std::int64_t const rows = w.weight_hh.extent(0);
  bool const projected = w.weight_ih.size() == 0;
  Projections<Space, T> out;
  if (projected && w.bias_ih.size() == 0 && units == 0) {
    out.view = x;
    return out;
  }
  std::int64_t const H = units > 0 ? units : 1;
  out.owner =
      units > 0
          ? call_array<V3<T, Space>>(space, "softwave::deer::unit_projections",
                                     false, B * H, steps, rows / H)
          : call_array<V3<T, Space>>(space, "softwave::deer::projected", false,
                                     B, steps, rows);
  step_products<Space, T>(space, "project_inputs", x, w.weight_ih, false,
                          w.bias_ih, out.owner.view, int(rows), units);
  out.view = out.owner.view;
  return out;
}

// The hidden-side weights, with zeros for a missing bias.
template <class Space, class T>
struct Hidden {
  HiddenWeights<T, Space> weights;
  CallArray<V1<T, Space>> zeros;
};
template <class Space, class T>
Hidden<Space, T> hidden_weights(const Space& space,
                                const RnnWeights<T, Space>& w, int H) {
  Hidden<Space, T> out;
  out.weights.weight = w.weight_hh;
  out.weights.H = H;
  out.weights.diagonal = w.diagonal_hh;
  out.weights.peephole = w.peephole;
  if (w.bias_hh.size()) {
    out.weights.bias = w.bias_hh;
  } else {
    out.zeros = call_array<V1<T, Space>>(space, "softwave::deer::zero_bias",
                                         true, w.weight_hh.extent(0));
    out.weights.bias = out.zeros.view;
  }
  return out;
}

// Sums of outer products over every step of every sequence:
//   out(k, j) = Σ_{b,t} g(b, t, k) · rows(b, t, k, j)  (j < J),
//   bias(k)   = Σ_{b,t} g(b, t, k),
// over parts of the steps, then over the parts (a team per sum), so that
// the sums are the same on every run. It is a product of two tall matrices
// (the steps' g rows and rows), so it is tiled as one: a team per part of
// the steps and block of the sums stages kChunk steps at a time of g and
// of rows in team memory (coalesced, every load of a chunk in flight
// together), and each thread adds a chunk's terms into a kTile × kTile
// tile of sums in registers (2·kTile reads of team memory for kTile²
// products), then into the team's sums. The bias column is a column of
// ones beside rows'. Rows whose value depends on k (Rows::per_row(): one
// column, J = 1) stage a value for each k instead. (A thread per sum
// reading g and rows from memory at each step was latency-bound on a
// device: 2.90 and 3.69 ms for the GRU's two sums at n = 16, T = 100k,
// B = 16 on an H100, 4 % of DRAM bandwidth, perf/RESULTS.md.)
template <class Space, class T, class Rows>
void sum_outer_products(const Space& space, V3<const T, Space> g,
                        const Rows& rows, std::int64_t J, V2<T, Space> out,
                        V1<T, Space> bias, const char* label) {
  if (out.size() == 0 && bias.size() == 0) return;
  std::int64_t const B = g.extent(0), steps = g.extent(1), K = g.extent(2);
  std::int64_t const R = B * steps;
  std::int64_t const width = J + 1, count = K * width;
  bool const per_row = rows.per_row();
  if (per_row && J != 1)
    throw std::logic_error(
        "softwave: sum_outer_products: rows by k need one column");
  using Policy = Kokkos::TeamPolicy<Space>;
  using Member = typename Policy::member_type;
  bool const host = ThreadItems<Space>::host;
  constexpr int kTile = 4, kChunk = sizeof(T) <= 4 ? 32 : 16, kInFlight = 8;
  // A block of sums: up to kBlockRows rows k, and as many columns as keep
  // the team's memory (each group's sums, a chunk of g and of rows, the
  // chunk's steps) within kTeamBytes.
  constexpr int kBlockRows = 64;
  constexpr std::size_t kTeamBytes = 32 * 1024;
  auto const round_up = [](std::int64_t v, std::int64_t to) {
    return (v + to - 1) / to * to;
  };
  int const block_k =
      int(std::min<std::int64_t>(round_up(K, kTile), kBlockRows));
  auto const team_bytes = [&](int groups, int columns) {
    int const row_values = per_row ? block_k : columns;
    return std::size_t(groups * block_k * columns +
                       kChunk * (block_k + row_values)) *
               sizeof(T) +
           2 * kChunk * sizeof(std::int64_t);
  };
  int block_w = int(round_up(width, kTile));
  while (block_w > kTile && team_bytes(1, block_w) > kTeamBytes)
    block_w -= kTile;
  int const row_values = per_row ? block_k : block_w;
  std::int64_t const k_blocks = (K + block_k - 1) / block_k;
  std::int64_t const blocks = k_blocks * ((width + block_w - 1) / block_w);
  int const tiles = (block_k / kTile) * (block_w / kTile);
  int const team_size =
      host ? 1 : int(std::clamp<std::int64_t>(round_up(tiles, 32), 64, 256));
  // Where the sums are one tile (K and J + 1 up to kTile: small states),
  // a chunk's staging and its two barriers would cost more than its steps'
  // products (at n = 1 a step's 16 for each thread), so each thread walks
  // every team-th step of the part from memory instead, kInFlight steps'
  // loads at a time, into a tile of its own: a group a thread. (Staged,
  // ParaRNN's LSTM at n = 1, T = 1M, B = 16 took 11.2 ms forward and
  // gradient on an H100 against 8.95 ms with the thread-a-sum kernel that
  // the tiling replaced, only the sums differing.) Where a block has
  // fewer tiles than the team has threads otherwise, groups of them each
  // take every groups-th step of a chunk into sums of their own, added at
  // the end.
  // The one-tile walk needs a group for each thread of the team (team_size
  // is 64 there, whose sums fit kTeamBytes in float and double alike).
  bool const direct = tiles == 1;
  int groups = direct ? team_size : std::clamp(team_size / tiles, 1, kChunk);
  while (!direct && groups > 1 && team_bytes(groups, block_w) > kTeamBytes)
    --groups;
  int const block_sums = block_k * block_w;
  // About a wave of teams on a device (a multiprocessor holds about 2048
  // threads), several teams a thread on a host for balance, and at least a
  // chunk a team: short calls (B = 16, T = 256) spread over the device
  // rather than walk their chunks in a few teams.
  std::int64_t const wanted =
      host ? 8 * std::int64_t(space.concurrency())
           : std::int64_t(space.concurrency()) / team_size / 2;
  std::int64_t const parts = std::clamp<std::int64_t>(
      std::min((wanted + blocks - 1) / blocks, (R + kChunk - 1) / kChunk), 1,
      std::max<std::int64_t>(1, (std::int64_t(1) << 24) / count));
  std::int64_t const per_part = (R + parts - 1) / parts;
  auto partial = call_array<V2<T, Space>>(space, "softwave::deer::partial_sums",
                                          false, parts, count);
  auto const sums = partial.view;
  std::size_t const scratch = team_bytes(groups, block_w);
  Kokkos::parallel_for(
      std::string("softwave::deer::") + label,
      compat::light_weight(Policy(space, parts * blocks, team_size)
                               .set_scratch_size(0, Kokkos::PerTeam(scratch))),
      KOKKOS_LAMBDA(const Member& member) {
        std::int64_t const part = member.league_rank() / blocks;
        std::int64_t const block = member.league_rank() % blocks;
        std::int64_t const k0 = block % k_blocks * block_k;
        std::int64_t const c0 = block / k_blocks * block_w;
        std::int64_t const r0 = part * per_part;
        std::int64_t const r1 = r0 + per_part < R ? r0 + per_part : R;
        auto const shared = member.team_scratch(0);
        // Each chunk step's sequence and step (b < 0 past the part).
        std::int64_t* const step_b = static_cast<std::int64_t*>(
            shared.get_shmem(kChunk * sizeof(std::int64_t)));
        std::int64_t* const step_t = static_cast<std::int64_t*>(
            shared.get_shmem(kChunk * sizeof(std::int64_t)));
        T* const team_sums =
            static_cast<T*>(shared.get_shmem(groups * block_sums * sizeof(T)));
        // A chunk's values of g, then of rows, side by side.
        T* const g_chunk = static_cast<T*>(
            shared.get_shmem(kChunk * (block_k + row_values) * sizeof(T)));
        T* const row_chunk = g_chunk + kChunk * block_k;
        int const rank = member.team_rank(), team = member.team_size();
        for (int i = rank; i < groups * block_sums; i += team) team_sums[i] = 0;
        // Zeroed before any thread adds its tile: a thread's tile is zeroed
        // by others, and the one-tile walk (or a part with no steps) reaches
        // add_terms without a chunk's barriers.
        member.team_barrier();
        // Where each thread has at most one (tile, group) item, its tile of
        // sums stays in registers over all of the part's chunks and goes to
        // team memory once at the end (small states: at n = 1 a thread adds
        // one step's 16 products a chunk, and writing 16 sums after each
        // would cost more than the products).
        bool const kept = tiles * groups <= team;
        T terms[kTile][kTile] = {};
        // One step's products: columns of the row's value and the bias
        // where rows depend on k, else every (k, column) pair.
        auto const add_step = [&](const T* gs, const T* rs) {
          if (per_row) {
            for (int a = 0; a < kTile; ++a) {
              terms[a][0] += gs[a] * rs[a];
              terms[a][1] += gs[a];
            }
          } else {
            for (int a = 0; a < kTile; ++a)
              for (int c = 0; c < kTile; ++c) terms[a][c] += gs[a] * rs[c];
          }
        };
        auto const add_terms = [&](int w) {
          int const tile = w % tiles, group = w / tiles;
          int const tk = tile / (block_w / kTile) * kTile;
          int const tw = tile % (block_w / kTile) * kTile;
          T* const own = team_sums + group * block_sums;
          for (int a = 0; a < kTile; ++a)
            for (int c = 0; c < kTile; ++c)
              own[(tk + a) * block_w + tw + c] += terms[a][c];
        };
        // Step (b, t)'s entry v of g, and of its row of products' other
        // factors (by k where per_row, else the columns, then 1 for the
        // bias), 0 past them.
        auto const g_value = [&](std::int64_t b, std::int64_t t,
                                 std::int64_t v) {
          return v < K ? g(b, t, v) : T(0);
        };
        auto const row_value = [&](std::int64_t b, std::int64_t t,
                                   std::int64_t v) {
          if (per_row) return v < K ? rows(b, t, v, 0) : T(0);
          return v < J ? rows(b, t, 0, v) : T(v == J);
        };
        // One tile (k0 = c0 = 0): a thread's steps straight from memory.
        for (std::int64_t first = r0 + rank; direct && first < r1;
             first += kInFlight * team) {
          T gs[kInFlight][kTile], rs[kInFlight][kTile];
          for (int u = 0; u < kInFlight; ++u) {
            std::int64_t const r = first + std::int64_t(u) * team;
            bool const in = r < r1;
            std::int64_t const b = in ? r / steps : 0, t = r - b * steps;
            for (int a = 0; a < kTile; ++a) {
              gs[u][a] = in ? g_value(b, t, a) : T(0);
              rs[u][a] = in ? row_value(b, t, a) : T(0);
            }
          }
          for (int u = 0; u < kInFlight; ++u) add_step(gs[u], rs[u]);
        }
        for (std::int64_t first = r0; !direct && first < r1; first += kChunk) {
          for (int s = rank; s < kChunk; s += team) {
            std::int64_t const r = first + s;
            step_b[s] = r < r1 ? r / steps : -1;
            step_t[s] = r < r1 ? r - r / steps * steps : 0;
          }
          member.team_barrier();  // also: the last chunk's terms are added
          // The chunk's values of g (kChunk × block_k), then of rows
          // (kChunk × row_values), kInFlight loads a thread at a time: a
          // load then a store to team memory each would wait on every load.
          auto const value_at = [&](int i) {
            bool const of_g = i < kChunk * block_k;
            int const columns = of_g ? block_k : row_values;
            int const e = of_g ? i : i - kChunk * block_k, s = e / columns;
            std::int64_t const b = step_b[s], t = step_t[s];
            std::int64_t const v = (of_g || per_row ? k0 : c0) + e % columns;
            if (b < 0) return T(0);
            return of_g ? g_value(b, t, v) : row_value(b, t, v);
          };
          int const staged = kChunk * (block_k + row_values);
          for (int i0 = rank; i0 < staged; i0 += kInFlight * team) {
            T values[kInFlight];
            for (int u = 0; u < kInFlight; ++u) {
              int const i = i0 + u * team;
              values[u] = i < staged ? value_at(i) : T(0);
            }
            for (int u = 0; u < kInFlight; ++u) {
              int const i = i0 + u * team;
              if (i < staged) g_chunk[i] = values[u];
            }
          }
          member.team_barrier();
          for (int w = rank; w < tiles * groups; w += team) {
            int const tile = w % tiles, group = w / tiles;
            int const tk = tile / (block_w / kTile) * kTile;
            int const tw = tile % (block_w / kTile) * kTile;
            if (!kept)
              for (int a = 0; a < kTile; ++a)
                for (int c = 0; c < kTile; ++c) terms[a][c] = 0;
            for (int s = group; s < kChunk; s += groups) {
              T gs[kTile], rs[kTile];
              for (int a = 0; a < kTile; ++a) {
                gs[a] = g_chunk[s * block_k + tk + a];
                rs[a] = per_row ? row_chunk[s * block_k + tk + a]
                                : row_chunk[s * block_w + tw + a];
              }
              add_step(gs, rs);
            }
            if (!kept) add_terms(w);
          }
        }
        if (kept && rank < tiles * groups) add_terms(rank);
        member.team_barrier();
        for (int i = rank; i < block_sums; i += team) {
          std::int64_t const k = k0 + i / block_w, j = c0 + i % block_w;
          T total = 0;
          for (int group = 0; group < groups; ++group)
            total += team_sums[group * block_sums + i];
          if (k < K && j < width) sums(part, k * width + j) = total;
        }
      });
  Kokkos::parallel_for(
      std::string("softwave::deer::") + label + "_total",
      compat::light_weight(Policy(space, int(count), host ? 1 : 128)),
      KOKKOS_LAMBDA(const Member& member) {
        std::int64_t const q = member.league_rank();
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(member, parts),
            [&](std::int64_t p, T& s) { s += sums(p, q); }, sum);
        Kokkos::single(Kokkos::PerTeam(member), [&]() {
          std::int64_t const k = q / width, j = q % width;
          if (j < J) {
            if (out.size()) out(k, j) = sum;
          } else if (bias.size()) {
            bias(k) = sum;
          }
        });
      });
}

template <class Space, class T>
struct InputRows {
  V3<const T, Space> x;
  bool per_row() const { return false; }
  KOKKOS_INLINE_FUNCTION T operator()(std::int64_t b, std::int64_t t,
                                      std::int64_t, std::int64_t j) const {
    return x(b, t, j);
  }
};

// The peepholes' inputs: for row k of cifg_lstm's forget gate (k < H) the
// previous cell state c_{t−1,k}, for row H + k of its output gate the new
// one c_{t,k}; zero for the candidate's rows.
template <class Space, class T>
struct PeepholeRows {
  V3<const T, Space> y;
  V2<const T, Space> y0;
  int H = 0;
  bool per_row() const { return true; }
  KOKKOS_INLINE_FUNCTION T operator()(std::int64_t b, std::int64_t t,
                                      std::int64_t k, std::int64_t) const {
    if (k >= 2 * H) return T(0);
    if (k >= H) return y(b, t, k);
    if (t > 0) return y(b, t - 1, H + k);
    return y0.extent(0) ? y0(b, H + k) : T(0);
  }
};

// h_{t−1}: the first H entries of the previous state (h of LSTM's (h, c)).
// With diagonal hidden weights (diagonal > 0, the hidden size H) row k has
// one column, h_{k mod H}.
template <class Space, class T>
struct PreviousHidden {
  V3<const T, Space> y;
  V2<const T, Space> y0;
  int diagonal = 0;
  bool per_row() const { return diagonal > 0; }
  KOKKOS_INLINE_FUNCTION T operator()(std::int64_t b, std::int64_t t,
                                      std::int64_t k, std::int64_t j) const {
    if (diagonal > 0) j = k % diagonal;
    if (t > 0) return y(b, t - 1, j);
    return y0.extent(0) ? y0(b, j) : T(0);
  }
};

// The gates' pre-activation gradients of every step (zero past each
// length) and dL/dy_0, a thread per step.
template <class Space, class Cell>
void gate_gradients(const Space& space, const Cell& cell,
                    const DeerInputs<typename Cell::value_type, Space>& inputs,
                    V3<const typename Cell::value_type, Space> y,
                    V3<const typename Cell::value_type, Space> adjoint,
                    V3<typename Cell::value_type, Space> g_in,
                    V3<typename Cell::value_type, Space> g_h,
                    V2<typename Cell::value_type, Space> grad_y0,
                    bool never_wait) {
  using T = typename Cell::value_type;
  std::int64_t const B = inputs.x.extent(0), steps = inputs.x.extent(1);
  int const n = cell.state_size(), rows = g_in.extent(2);
  auto const p = inputs.x;
  auto const y0 = inputs.y0;
  Lengths<Space> const lengths{inputs.lengths, int(steps)};
  std::int64_t const total = B * steps;
  auto memory = SolveMemoryOf<Space, Cell>::make(space);
  ThreadItems<Space> const items =
      ThreadItems<Space>(total, n + cell.work_size(), T())
          .values_in(memory, space, never_wait);
  items.template for_each<T>(
      space, "softwave::deer::gate_gradients",
      KOKKOS_LAMBDA(std::int64_t q, T * init) {
        int b, t;
        split_step(q, steps, b, t);
        if (t >= lengths(b)) {
          for (int k = 0; k < rows; ++k) g_in(b, t, k) = g_h(b, t, k) = 0;
          return;
        }
        bool const first = t == 0;
        T const* const y_prev = previous_state(y, y0, b, t, n, init);
        sequence_cell(cell, b).gate_gradients(
            y_prev, &p(b, t, 0), &adjoint(b, t, 0), &g_in(b, t, 0),
            &g_h(b, t, 0),
            first && grad_y0.size() ? &grad_y0(b, 0) : static_cast<T*>(nullptr),
            init + n);
      });
}

// gate_gradients for a TorchCell of fixed shape on a device: a thread a
// step wrote its step's 2·G·H gradients alone, a warp's stores 2·G·H
// values apart, and kept its work values in team memory (at n = 16,
// T = 100k, B = 16, 6.6 ms on an H200 for 1.1 GB of traffic). Here a team
// takes consecutive steps of the flat (b, t) order, each thread a step with
// its work values in registers, writes their gradients to team memory, and
// the team copies them out as the one contiguous block they are in g_in
// and in g_h.
template <class Space, class Cell>
struct GateGradientsOfTeam {
  using T = typename Cell::value_type;
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  static constexpr int kRows = Cell::kFixedRows, kState = Cell::kFixedState;
  Cell cell;
  V3<const T, Space> p, y, adjoint;
  V2<const T, Space> y0;
  V3<T, Space> g_in, g_h;
  V2<T, Space> grad_y0;
  Lengths<Space> lengths;
  std::int64_t steps, total;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    int const team = member.team_size(), rank = member.team_rank();
    std::int64_t const first = std::int64_t(member.league_rank()) * team;
    int const count = int(total - first < team ? total - first : team);
    T* const staged_in = static_cast<T*>(
        member.team_scratch(0).get_shmem(2 * team * (kRows + 1) * sizeof(T)));
    T* const staged_h = staged_in + team * (kRows + 1);
    if (rank < count) {
      T* const in = staged_in + rank * (kRows + 1);
      T* const h = staged_h + rank * (kRows + 1);
      int b, t;
      split_step(first + rank, steps, b, t);
      if (t >= lengths(b)) {
        SOFTWAVE_DEER_UNROLL
        for (int k = 0; k < kRows; ++k) in[k] = h[k] = 0;
      } else {
        T previous[kState], lambda[kState], gradient_previous[kState];
        T work[Cell::kFixedWork];
        SOFTWAVE_DEER_UNROLL
        for (int i = 0; i < kState; ++i) {
          previous[i] = t > 0 ? y(b, t - 1, i) : y0.extent(0) ? y0(b, i) : T(0);
          lambda[i] = adjoint(b, t, i);
        }
        bool const with_y0 = t == 0 && grad_y0.extent(0);
        cell.gate_gradients(
            previous, &p(b, t, 0), lambda, in, h,
            with_y0 ? gradient_previous : static_cast<T*>(nullptr), work);
        if (with_y0) {
          SOFTWAVE_DEER_UNROLL
          for (int i = 0; i < kState; ++i) grad_y0(b, i) = gradient_previous[i];
        }
      }
    }
    member.team_barrier();
    T* const out_in = g_in.data() + first * kRows;
    T* const out_h = g_h.data() + first * kRows;
    for (int q = rank; q < count * kRows; q += team) {
      int const s = q / kRows, k = q - s * kRows;
      out_in[q] = staged_in[s * (kRows + 1) + k];
      out_h[q] = staged_h[s * (kRows + 1) + k];
    }
  }
};

// The gate gradients by GateGradientsOfTeam where the cell has a fixed
// shape and the space is a device; false, with nothing done, elsewhere.
template <class Space, class T>
bool gate_gradients_by_teams(const Space& space,
                             const TorchCell<T, Space>& cell,
                             const DeerInputs<T, Space>& inputs,
                             V3<const T, Space> y, V3<const T, Space> adjoint,
                             V3<T, Space> g_in, V3<T, Space> g_h,
                             V2<T, Space> grad_y0) {
  if (!g_in.span_is_contiguous() || !g_h.span_is_contiguous()) return false;
  return with_fixed_shape(cell, [&](const auto& fixed) {
    using Fixed = std::decay_t<decltype(fixed)>;
    std::int64_t const B = y.extent(0), steps = y.extent(1);
    // Team memory of 32 KB at most: 64 steps a team, or 32.
    std::size_t const per_step = 2 * (Fixed::kFixedRows + 1) * sizeof(T);
    int const team = runs_on_host<Space> ? 1 : 64 * per_step <= 32768 ? 64 : 32;
    if (team * per_step > 32768) return false;
    std::int64_t const total = B * steps;
    std::int64_t const league = (total + team - 1) / team;
    if (league > std::numeric_limits<int>::max()) return false;
    Kokkos::parallel_for(
        "softwave::deer::gate_gradients",
        compat::light_weight(
            Kokkos::TeamPolicy<Space>(space, int(league), team)
                .set_scratch_size(0, Kokkos::PerTeam(team * per_step))),
        GateGradientsOfTeam<Space, Fixed>{
            fixed, inputs.x, y, adjoint, inputs.y0, g_in, g_h, grad_y0,
            Lengths<Space>{inputs.lengths, int(steps)}, steps, total});
    return true;
  });
}

// --- the weights' gradients in one pass, for cells of small fixed shape ---
// gate_gradients writes two (B, T, G·H) arrays that input_gradients and two
// sum_outer_products passes then read again, several times the bytes of the
// steps' own inputs: at hidden size 1 (B = 16, T = 1M) 384 MB written and
// over 1 GB read, where a step's gate gradients, dL/dx_t and its terms of
// the sums need only p_t, x_t, y_{t−1} and λ_t (28 bytes). For cells of
// small fixed shape a thread keeps its share of every sum in registers
// instead: one pass over the steps, each team's sums into an array of
// parts, then the parts' totals (in a fixed order, so that the sums are the
// same on every run).

// The shapes the one pass takes: hidden sizes up to kOnePassHidden and at
// most kOnePassInputs inputs a step (or projected inputs), whose sums fit
// in a thread's registers.
constexpr int kOnePassHidden = 2, kOnePassInputs = 4;

// The sums, in the order of the parts' array: W_ih's (rows × inputs, each
// row's bias after its columns), then W_hh's (rows × hidden_columns, and
// the bias).
struct OnePassLayout {
  int rows = 0, inputs = 0, hidden_columns = 0;
  KOKKOS_INLINE_FUNCTION int input_sums() const { return rows * (inputs + 1); }
  KOKKOS_INLINE_FUNCTION int count() const {
    return input_sums() + rows * (hidden_columns + 1);
  }
};

// The pass: a team per part of per_part consecutive steps of the flat
// (b, t) order, its threads every team-th step.
template <class Space, class Cell>
struct OnePassGradients {
  using T = typename Cell::value_type;
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  static constexpr int kHidden = Cell::kFixedHidden, kRows = Cell::kFixedRows,
                       kState = Cell::kFixedState, kInputs = kOnePassInputs;
  Cell cell;
  V3<const T, Space> p, x, y, adjoint;
  V2<const T, Space> y0;
  V2<const T, Space> weight_ih;  // empty: x holds the projections
  V3<T, Space> grad_x;
  V2<T, Space> grad_y0;
  V2<T, Space> parts;  // (parts, layout.count())
  Lengths<Space> lengths;
  OnePassLayout layout;
  std::int64_t steps, total, per_part;

  KOKKOS_INLINE_FUNCTION void step(int b, int t, T (&in)[kRows][kInputs + 1],
                                   T (&hidden)[kRows][kHidden + 1]) const {
    int const m = int(grad_x.extent(2));
    if (t >= lengths(b)) {
      for (int j = 0; j < m; ++j) grad_x(b, t, j) = 0;
      return;
    }
    T previous[kState], lambda[kState], gradient_previous[kState];
    T g_in[kRows], g_h[kRows], work[Cell::kFixedWork];
    SOFTWAVE_DEER_UNROLL
    for (int i = 0; i < kState; ++i) {
      previous[i] = t > 0 ? y(b, t - 1, i) : y0.extent(0) ? y0(b, i) : T(0);
      lambda[i] = adjoint(b, t, i);
    }
    bool const first = t == 0 && grad_y0.extent(0);
    cell.gate_gradients(previous, &p(b, t, 0), lambda, g_in, g_h,
                        first ? gradient_previous : static_cast<T*>(nullptr),
                        work);
    if (first) {
      SOFTWAVE_DEER_UNROLL
      for (int i = 0; i < kState; ++i) grad_y0(b, i) = gradient_previous[i];
    }
    // dL/dx_t = W_ihᵀ g_in (g_in itself for projected inputs).
    if (m > 0 && weight_ih.extent(0) == 0) {
      SOFTWAVE_DEER_UNROLL
      for (int k = 0; k < kRows; ++k) grad_x(b, t, k) = g_in[k];
    } else {
      for (int j = 0; j < m; ++j) {
        T sum = 0;
        SOFTWAVE_DEER_UNROLL
        for (int k = 0; k < kRows; ++k) sum += g_in[k] * weight_ih(k, j);
        grad_x(b, t, j) = sum;
      }
    }
    T inputs[kInputs];
    SOFTWAVE_DEER_UNROLL
    for (int j = 0; j < kInputs; ++j)
      inputs[j] = j < layout.inputs ? x(b, t, j) : T(0);
    bool const diagonal = layout.hidden_columns == 1 && kHidden > 1;
    SOFTWAVE_DEER_UNROLL
    for (int k = 0; k < kRows; ++k) {
      SOFTWAVE_DEER_UNROLL
      for (int j = 0; j < kInputs; ++j) in[k][j] += g_in[k] * inputs[j];
      in[k][kInputs] += g_in[k];
      // h_{t−1}: the state's first H values (LSTM's (h, c) too).
      if (diagonal) {
        hidden[k][0] += g_h[k] * previous[k % kHidden];
      } else {
        SOFTWAVE_DEER_UNROLL
        for (int j = 0; j < kHidden; ++j) hidden[k][j] += g_h[k] * previous[j];
      }
      hidden[k][kHidden] += g_h[k];
    }
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    std::int64_t const part = member.league_rank();
    std::int64_t const r0 = part * per_part;
    std::int64_t const r1 = r0 + per_part < total ? r0 + per_part : total;
    int const rank = member.team_rank(), team = member.team_size();
    T in[kRows][kInputs + 1] = {}, hidden[kRows][kHidden + 1] = {};
    if (r0 + rank < r1) {
      // (b, t) of step r, advanced with r rather than divided out of it.
      std::int64_t b = (r0 + rank) / steps;
      std::int64_t t = r0 + rank - b * steps;
      for (std::int64_t r = r0 + rank; r < r1; r += team) {
        step(int(b), int(t), in, hidden);
        for (t += team; t >= steps; t -= steps) ++b;
      }
    }
    // The team's sums: each thread's values in team memory (value-major),
    // then a thread per value adds the team's.
    int const count = layout.count();
    T* const shared = static_cast<T*>(
        member.team_scratch(0).get_shmem(team * count * sizeof(T)));
    auto const keep = [&](int v, T value) { shared[v * team + rank] = value; };
    int const stride = layout.inputs + 1;
    int const hidden_stride = layout.hidden_columns + 1;
    SOFTWAVE_DEER_UNROLL
    for (int k = 0; k < kRows; ++k) {
      SOFTWAVE_DEER_UNROLL
      for (int j = 0; j < kInputs; ++j)
        if (j < layout.inputs) keep(k * stride + j, in[k][j]);
      keep(k * stride + layout.inputs, in[k][kInputs]);
      int const first = layout.input_sums() + k * hidden_stride;
      SOFTWAVE_DEER_UNROLL
      for (int j = 0; j < kHidden; ++j)
        if (j < layout.hidden_columns) keep(first + j, hidden[k][j]);
      keep(first + layout.hidden_columns, hidden[k][kHidden]);
    }
    member.team_barrier();
    for (int v = rank; v < count; v += team) {
      T sum = 0;
      for (int q = 0; q < team; ++q) sum += shared[v * team + q];
      parts(part, v) = sum;
    }
  }
};

// The parts' totals, a team per sum, into the weights' gradients (those
// asked for).
template <class Space, class T>
struct OnePassTotals {
  using Member = typename Kokkos::TeamPolicy<Space>::member_type;
  V2<const T, Space> parts;
  OnePassLayout layout;
  RnnWeightGradients<T, Space> out;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    int const v = member.league_rank();
    T sum = 0;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(member, std::int64_t(parts.extent(0))),
        [&](std::int64_t q, T& s) { s += parts(q, v); }, sum);
    Kokkos::single(Kokkos::PerTeam(member), [&]() {
      bool const input_side = v < layout.input_sums();
      int const columns = input_side ? layout.inputs : layout.hidden_columns;
      int const w = input_side ? v : v - layout.input_sums();
      int const k = w / (columns + 1), j = w % (columns + 1);
      auto const weight = input_side ? out.weight_ih : out.weight_hh;
      auto const bias = input_side ? out.bias_ih : out.bias_hh;
      if (j < columns) {
        if (weight.extent(0)) weight(k, j) = sum;
      } else if (bias.extent(0)) {
        bias(k) = sum;
      }
    });
  }
};

// Whether the one pass takes a TorchCell of fixed shape with m inputs a
// step (0: x holds the projections) and no peepholes.
template <class Cell>
bool takes_one_pass(int m) {
  return Cell::kFixedState > 0 && Cell::kFixedHidden <= kOnePassHidden &&
         m <= kOnePassInputs;
}

template <class Space, class Cell>
void launch_one_pass(
    const Space& space, const Cell& cell,
    const RnnWeights<typename Cell::value_type, Space>& weights,
    const DeerInputs<typename Cell::value_type, Space>& inputs,
    V3<const typename Cell::value_type, Space> projected,
    V3<const typename Cell::value_type, Space> y,
    V3<const typename Cell::value_type, Space> adjoint,
    const DeerGradients<typename Cell::value_type, Space>& gradients,
    const RnnWeightGradients<typename Cell::value_type, Space>& wg) {
  using T = typename Cell::value_type;
  using Policy = Kokkos::TeamPolicy<Space>;
  std::int64_t const B = y.extent(0), steps = y.extent(1);
  OnePassLayout const layout{Cell::kFixedRows,
                             wg.weight_ih.size() ? int(inputs.x.extent(2)) : 0,
                             weights.diagonal_hh ? 1 : Cell::kFixedHidden};
  bool const host = runs_on_host<Space>;
  int const count = layout.count();
  // Team memory for the team's sums of 32 KB at most.
  int const team = host ? 1 : (128 * count * sizeof(T) <= 32768 ? 128 : 64);
  std::int64_t const total = B * steps;
  // 32 steps a thread on a device; on a host a few parts a thread.
  std::int64_t const per_part =
      host
          ? std::max<std::int64_t>(4096, (total + 4 * space.concurrency() - 1) /
                                             (4 * space.concurrency()))
          : std::int64_t(team) * 32;
  std::int64_t const part_count = (total + per_part - 1) / per_part;
  auto const parts = call_array<V2<T, Space>>(
      space, "softwave::deer::one_pass_parts", false, part_count, count);
  Kokkos::parallel_for(
      "softwave::deer::one_pass_gradients",
      compat::light_weight(
          Policy(space, int(part_count), team)
              .set_scratch_size(0, Kokkos::PerTeam(team * count * sizeof(T)))),
      OnePassGradients<Space, Cell>{
          cell, projected, inputs.x, y, adjoint, inputs.y0, weights.weight_ih,
          gradients.grad_x, gradients.grad_y0, parts.view,
          Lengths<Space>{inputs.lengths, int(steps)}, layout, steps, total,
          per_part});
  Kokkos::parallel_for(
      "softwave::deer::one_pass_totals",
      compat::light_weight(Policy(space, count, host ? 1 : 128)),
      OnePassTotals<Space, T>{parts.view, layout, wg});
}

// The weights' gradients, dL/dx and dL/dy_0 of a TorchCell of fixed shape
// in one pass (above); false, with nothing done, where the cell's shape is
// not one it takes.
template <class Space, class T>
bool one_pass_gradients(const Space& space, const TorchCell<T, Space>& cell,
                        const RnnWeights<T, Space>& weights,
                        const DeerInputs<T, Space>& inputs,
                        V3<const T, Space> projected, V3<const T, Space> y,
                        V3<const T, Space> adjoint,
                        const DeerGradients<T, Space>& gradients,
                        const RnnWeightGradients<T, Space>& wg) {
  if (weights.peephole.size()) return false;
  int const m = weights.weight_ih.size() ? int(inputs.x.extent(2)) : 0;
  return with_fixed_shape(cell, [&](const auto& fixed) {
    using Fixed = std::decay_t<decltype(fixed)>;
    if constexpr (Fixed::kFixedHidden > kOnePassHidden) {
      return false;
    } else {
      if (!takes_one_pass<Fixed>(m)) return false;
      launch_one_pass(space, fixed, weights, inputs, projected, y, adjoint,
                      gradients, wg);
      return true;
    }
  });
}

// --- diagonal hidden weights: each unit a sequence of its own ------------
// (DiagonalUnits, cells.hpp). Unit-major arrays put unit i of sequence b
// at b·H + i, with C values a step: a (B, T, C·H) array of the caller's
// (C = the gates' projections, or the state: h_i at i, LSTM's c_i at
// H + i) is (B·H, T, C).

// to_units: units(b·H + i, t, c) = caller(b, t, c·H + i); else back.
template <class Space, class T>
void transpose_units(const Space& space, V3<const T, Space> from,
                     V3<T, Space> to, int H, bool to_units) {
  V3<const T, Space> const units = to_units ? V3<const T, Space>(to) : from;
  std::int64_t const BH = units.extent(0), steps = units.extent(1),
                     C = units.extent(2);
  for_each_step(
      space,
      to_units ? "softwave::deer::to_units" : "softwave::deer::from_units", BH,
      steps, KOKKOS_LAMBDA(int u, std::int64_t t) {
        int const b = u / H, i = u % H;
        for (std::int64_t c = 0; c < C; ++c) {
          if (to_units)
            to(u, t, c) = from(b, t, c * H + i);
          else
            to(b, t, c * H + i) = from(u, t, c);
        }
      });
}

// A (B, C·H) array as one step of a (B, 1, C·H) one.
template <class View>
auto one_step(const View& v) {
  using Out =
      DeerView3<typename View::value_type, typename View::execution_space>;
  return Out(v.data(), v.extent(0), 1, v.extent(1));
}

// Whether a call with diagonal hidden weights solves the units as sequences
// of their own: where there are several (H > 1) and the batch alone leaves
// threads of the space idle (a GPU, always in practice). Otherwise the
// sequences' states stay together: on a host's few threads a step of the
// whole state costs less than its units' steps one by one (2 cores,
// B = 16, H = 16, T = 1,000: the sequential loop 10.6 ms together, 23 ms
// as units).
inline bool solve_by_units(std::int64_t batch, int hidden,
                           std::int64_t concurrency) {
  return hidden > 1 && batch <= concurrency;
}

// The arrays of a call with diagonal hidden weights, unit-major.
template <class Space, class T>
struct Units {
  DiagonalUnits<T, Space> cell;
  DeerInputs<T, Space> inputs;  // projections (B·H, T, G), y0, lengths
  CallArray<V2<T, Space>> weight;
  CallArray<V1<T, Space>> bias;
  CallArray<V1<T, Space>> peephole;
  Projections<Space, T> projections;
  CallArray<V2<T, Space>> y0;
  CallArray<Kokkos::View<int*, typename Space::memory_space>> lengths;
};

template <class Space, class T>
Units<Space, T> units_of(const Space& space, const RnnWeights<T, Space>& w,
                         const HiddenWeights<T, Space>& hidden,
                         const DeerInputs<T, Space>& inputs) {
  RnnCell const kind = w.cell;
  int const H = hidden.H, G = int(hidden.weight.extent(0)) / H;
  std::int64_t const B = inputs.x.extent(0);
  int const n_unit = state_of(kind, 1);
  Units<Space, T> u;
  u.weight = call_array<V2<T, Space>>(space, "softwave::deer::unit_weights",
                                      false, std::int64_t(H) * G, 1);
  u.bias = call_array<V1<T, Space>>(space, "softwave::deer::unit_biases", false,
                                    std::int64_t(H) * G);
  auto const weight = u.weight.view;
  auto const bias = u.bias.view;
  auto const from_weight = hidden.weight;
  auto const from_bias = hidden.bias;
  Kokkos::parallel_for(
      "softwave::deer::unit_weights", work_items(space, std::int64_t(H) * G),
      KOKKOS_LAMBDA(std::int64_t r) {
        std::int64_t const i = r / G, g = r % G;
        weight(r, 0) = from_weight(g * H + i, 0);
        bias(r) = from_bias(g * H + i);
      });
  // Views of the arrays without their owner: a step builds its unit's cell
  // from them, and copying an owning view counts references on a host.
  u.cell = DiagonalUnits<T, Space>{
      kind, V2<const T, Space>(weight.data(), weight.extent(0), 1),
      V1<const T, Space>(bias.data(), bias.extent(0)), H};
  if (hidden.peephole.size()) {
    // Unit i's (C_f, C_o) at 2i, 2i + 1.
    u.peephole = call_array<V1<T, Space>>(
        space, "softwave::deer::unit_peepholes", false, 2 * H);
    auto const peephole = u.peephole.view;
    auto const from = hidden.peephole;
    Kokkos::parallel_for(
        "softwave::deer::unit_peepholes", work_items(space, 2 * H),
        KOKKOS_LAMBDA(int r) { peephole(r) = from((r % 2) * H + r / 2); });
    u.cell.peephole = V1<const T, Space>(peephole.data(), 2 * H);
  }
  u.projections = project_inputs(space, w, inputs.x, H);
  u.inputs.x = u.projections.view;
  if (inputs.y0.extent(0)) {
    u.y0 = call_array<V2<T, Space>>(space, "softwave::deer::unit_y0", false,
                                    B * H, n_unit);
    transpose_units(space, one_step(inputs.y0), one_step(u.y0.view), H, true);
    u.inputs.y0 = u.y0.view;
  }
  if (inputs.lengths.extent(0)) {
    u.lengths = call_array<Kokkos::View<int*, typename Space::memory_space>>(
        space, "softwave::deer::unit_lengths", false, B * H);
    auto const from = inputs.lengths;
    auto const to = u.lengths.view;
    Kokkos::parallel_for(
        "softwave::deer::unit_lengths", work_items(space, B * H),
        KOKKOS_LAMBDA(std::int64_t q) { to(q) = from(q / H); });
    u.inputs.lengths = u.lengths.view;
  }
  return u;
}

// The solve of the units: the caller's Jacobian structure restricted to a
// unit, whose state is h (or an LSTM's (h, c)). A unit's Jacobian is full
// where the caller's keeps the (h_i, c_i) coupling (full Jacobians, or
// strided blocks of an even side), else its diagonal; for a unit of one
// value the two are the same.
inline Settings unit_settings(Settings s, RnnCell kind,
                              const DeerOptions& options, int n) {
  int const n_unit = state_of(kind, 1);
  bool const coupled =
      s.block == n || (s.strided && options.block_size % 2 == 0);
  s.block = coupled ? n_unit : 1;
  s.strided = false;
  s.jacobian = s.block == n_unit ? DeerJacobian::full : DeerJacobian::diagonal;
  return s;
}

// Each sequence's report from its units': the most iterations; the path
// "fallback" if a unit fell back, else "damped" if one was damped, else the
// first unit's ("deer", or "sequential" for all).
template <class Space, class T>
void report_of_units(const Space& space, DeerView1<int, Space> unit_iterations,
                     DeerView1<int, Space> unit_path,
                     const DeerResult<T, Space>& result, int H) {
  auto const iterations = result.iterations;
  auto const path = result.path;
  std::int64_t const B = result.y.extent(0);
  Kokkos::parallel_for(
      "softwave::deer::report_of_units", work_items(space, B),
      KOKKOS_LAMBDA(std::int64_t b) {
        int most = 0, first = unit_path(b * H);
        bool fallback = false, damped = false;
        for (std::int64_t i = b * H; i < (b + 1) * H; ++i) {
          most = unit_iterations(i) > most ? unit_iterations(i) : most;
          fallback = fallback || unit_path(i) == int(DeerPath::fallback);
          damped = damped || unit_path(i) == int(DeerPath::damped);
        }
        if (iterations.extent(0)) iterations(b) = most;
        if (path.extent(0))
          path(b) = fallback ? int(DeerPath::fallback)
                             : (damped ? int(DeerPath::damped) : first);
      });
}

// gradients with an adjoint array: the caller's where given, else one of
// the call's memory, kept by `keep` (an array the engine made would be
// freed outside the stream, which a CUDA graph cannot capture).
template <class Space, class T>
DeerGradients<T, Space> with_adjoint(const Space& space,
                                     DeerGradients<T, Space> gradients,
                                     std::int64_t B, std::int64_t steps, int n,
                                     CallArray<V3<T, Space>>& keep) {
  if (gradients.adjoint.size() == 0) {
    keep = call_array<V3<T, Space>>(space, "softwave::deer::adjoint", false, B,
                                    steps, n);
    gradients.adjoint = keep.view;
  }
  return gradients;
}

}  // namespace

}  // namespace softwave::impl::deer

namespace softwave {

template <class Space, class T>
void deer_rnn(const Space& space, const RnnWeights<T, Space>& weights,
              const DeerInputs<T, Space>& inputs,
              const DeerResult<T, Space>& result, const DeerOptions& options) {
  namespace d = impl::deer;
  std::size_t const B = inputs.x.extent(0), steps = inputs.x.extent(1);
  int const H = d::check_weights(space, weights, inputs.x.extent(2),
                                 options.check_values);
  int const n = d::state_of(weights.cell, H);
  d::Settings const settings =
      d::check_call(space, inputs, n, int(inputs.x.extent(2)), options, "y",
                    result.y.extent(0), result.y.extent(1), result.y.extent(2));
  d::check_report(result, B);
  if (B == 0) return;
  auto const hidden = d::hidden_weights(space, weights, H);
  if (weights.diagonal_hh && d::solve_by_units(B, H, space.concurrency())) {
    auto const units = d::units_of(space, weights, hidden.weights, inputs);
    int const n_unit = units.cell.state_size();
    std::int64_t const BH = std::int64_t(B) * H;
    auto const y = impl::call_array<DeerView3<T, Space>>(
        space, "softwave::deer::unit_states", false, BH, steps, n_unit);
    if (settings.warm_start)
      d::transpose_units(space, d::V3<const T, Space>(result.y), y.view, H,
                         true);
    auto const iterations = impl::call_array<DeerView1<int, Space>>(
        space, "softwave::deer::unit_iterations", false, BH);
    auto const path = impl::call_array<DeerView1<int, Space>>(
        space, "softwave::deer::unit_paths", false, BH);
    d::solve_forward(space, units.cell, units.inputs,
                     DeerResult<T, Space>{y.view, iterations.view, path.view},
                     d::unit_settings(settings, weights.cell, options, n));
    d::transpose_units(space, d::V3<const T, Space>(y.view), result.y, H,
                       false);
    d::report_of_units(space, iterations.view, path.view, result, H);
    return;
  }
  auto const projected = d::project_inputs(space, weights, inputs.x);
  DeerInputs<T, Space> const cell_inputs{projected.view, inputs.y0,
                                         inputs.lengths};
  d::solve_forward(space, d::TorchCell<T, Space>{weights.cell, hidden.weights},
                   cell_inputs, result, settings);
}

template <class Space, class T>
void deer_rnn_gradients(const Space& space, const RnnWeights<T, Space>& weights,
                        const DeerInputs<T, Space>& inputs,
                        DeerView3<const T, Space> y,
                        const DeerGradients<T, Space>& gradients,
                        const RnnWeightGradients<T, Space>& weight_gradients,
                        const DeerOptions& options) {
  namespace d = impl::deer;
  std::size_t const B = inputs.x.extent(0), steps = inputs.x.extent(1),
                    m = inputs.x.extent(2);
  int const H = d::check_weights(space, weights, m, options.check_values);
  int const n = d::state_of(weights.cell, H);
  std::size_t const rows = weights.weight_hh.extent(0);
  d::Settings settings = d::check_call(space, inputs, n, int(m), options, "y",
                                       y.extent(0), y.extent(1), y.extent(2));
  d::check_gradients(gradients, B, steps, n, m);
  auto const& wg = weight_gradients;
  bool const projected = weights.weight_ih.size() == 0;
  if (wg.weight_ih.size() && projected)
    impl::throw_invalid_argument(
        "grad weight_ih is asked for, but weight_ih is empty (x holds the "
        "input projections: their gradient is grad_x)");
  if (wg.weight_ih.size())
    impl::check_extent(wg.weight_ih, "grad weight_ih", {rows, m},
                       "(weight_ih's shape)");
  if (wg.weight_hh.size())
    impl::check_extent(wg.weight_hh, "grad weight_hh",
                       {rows, weights.diagonal_hh ? 1 : std::size_t(H)},
                       "(weight_hh's shape)");
  if (wg.bias_ih.size())
    impl::check_extent(wg.bias_ih, "grad bias_ih", {rows}, "(bias_ih's shape)");
  if (wg.bias_hh.size())
    impl::check_extent(wg.bias_hh, "grad bias_hh", {rows}, "(bias_hh's shape)");
  if (wg.peephole.size())
    impl::check_extent(wg.peephole, "grad peephole", {weights.peephole.size()},
                       "(peephole's shape)");
  if (B == 0) return;
  auto const hidden = d::hidden_weights(space, weights, H);
  auto gate_array = [&](const char* label) {
    return impl::call_array<DeerView3<T, Space>>(space, label, false, B, steps,
                                                 rows);
  };
  impl::CallArray<DeerView3<T, Space>> g_in, g_h;
  if (weights.diagonal_hh && d::solve_by_units(B, H, space.concurrency())) {
    // The units' adjoints and gate gradients, then the caller's layout. Each
    // unit-major array is released once used, so that both layouts of the
    // gate gradients are not held at once.
    std::int64_t const BH = std::int64_t(B) * H, G = rows / H;
    auto back = [&](DeerView3<T, Space> from, DeerView3<T, Space> to) {
      if (to.size())
        d::transpose_units(space, DeerView3<const T, Space>(from), to, H,
                           false);
    };
    impl::CallArray<DeerView3<T, Space>> g_in_units, g_h_units;
    {
      auto const units = d::units_of(space, weights, hidden.weights, inputs);
      int const n_unit = units.cell.state_size();
      auto unit_array = [&](const char* label, std::int64_t columns,
                            DeerView3<const T, Space> from) {
        auto out = impl::call_array<DeerView3<T, Space>>(space, label, false,
                                                         BH, steps, columns);
        if (from.size()) d::transpose_units(space, from, out.view, H, true);
        return out;
      };
      auto const y_units = unit_array("softwave::deer::unit_states", n_unit, y);
      auto grad_y_units =
          unit_array("softwave::deer::unit_grad_y", n_unit, gradients.grad_y);
      DeerGradients<T, Space> unit_gradients;
      unit_gradients.grad_y = grad_y_units.view;
      impl::CallArray<DeerView3<T, Space>> adjoint_units;
      auto const adjoint = d::solve_adjoint(
          space, units.cell, units.inputs,
          DeerView3<const T, Space>(y_units.view),
          d::with_adjoint(space, unit_gradients, BH, steps, n_unit,
                          adjoint_units),
          d::unit_settings(settings, weights.cell, options, n));
      grad_y_units = {};
      g_in_units =
          unit_array("softwave::deer::unit_input_gate_gradients", G, {});
      g_h_units =
          unit_array("softwave::deer::unit_hidden_gate_gradients", G, {});
      impl::CallArray<DeerView2<T, Space>> grad_y0_units;
      if (gradients.grad_y0.size())
        grad_y0_units = impl::call_array<DeerView2<T, Space>>(
            space, "softwave::deer::unit_grad_y0", false, BH, n_unit);
      d::gate_gradients(space, units.cell, units.inputs,
                        DeerView3<const T, Space>(y_units.view),
                        DeerView3<const T, Space>(adjoint), g_in_units.view,
                        g_h_units.view, grad_y0_units.view,
                        settings.check_every == 0);
      back(adjoint, gradients.adjoint);
      if (gradients.grad_y0.size())
        back(d::one_step(grad_y0_units.view), d::one_step(gradients.grad_y0));
    }
    g_in = gate_array("softwave::deer::input_gate_gradients");
    back(g_in_units.view, g_in.view);
    g_in_units = {};
    g_h = gate_array("softwave::deer::hidden_gate_gradients");
    back(g_h_units.view, g_h.view);
  } else {
    auto const projected = d::project_inputs(space, weights, inputs.x);
    DeerInputs<T, Space> const cell_inputs{projected.view, inputs.y0,
                                           inputs.lengths};
    d::TorchCell<T, Space> const cell{weights.cell, hidden.weights};
    impl::CallArray<DeerView3<T, Space>> adjoint_array;
    auto const adjoint = d::solve_adjoint(
        space, cell, cell_inputs, y,
        d::with_adjoint(space, gradients, B, steps, n, adjoint_array),
        settings);
    if (d::one_pass_gradients(space, cell, weights, inputs, projected.view, y,
                              DeerView3<const T, Space>(adjoint), gradients,
                              wg))
      return;
    g_in = gate_array("softwave::deer::input_gate_gradients");
    g_h = gate_array("softwave::deer::hidden_gate_gradients");
    if (!d::gate_gradients_by_teams(space, cell, cell_inputs, y,
                                    DeerView3<const T, Space>(adjoint),
                                    g_in.view, g_h.view, gradients.grad_y0))
      d::gate_gradients(space, cell, cell_inputs, y,
                        DeerView3<const T, Space>(adjoint), g_in.view, g_h.view,
                        gradients.grad_y0, settings.check_every == 0);
  }
  // dL/dx_t = W_ihᵀ g_in(t) (g_in(t) itself for projected inputs); the
  // weights' sums.
  if (gradients.grad_x.size() && projected) {
    Kokkos::deep_copy(space, gradients.grad_x, g_in.view);
  } else if (gradients.grad_x.size()) {
    d::step_products<Space, T>(
        space, "input_gradients", DeerView3<const T, Space>(g_in.view),
        weights.weight_ih, true, {}, gradients.grad_x, int(m));
  }
  // Without W_ih's gradient only the bias column is summed.
  d::sum_outer_products<Space, T>(space, g_in.view,
                                  d::InputRows<Space, T>{inputs.x},
                                  wg.weight_ih.size() ? std::int64_t(m) : 0,
                                  wg.weight_ih, wg.bias_ih, "weight_ih_sums");
  d::sum_outer_products<Space, T>(
      space, g_h.view,
      d::PreviousHidden<Space, T>{y, inputs.y0, weights.diagonal_hh ? H : 0},
      weights.diagonal_hh ? 1 : H, wg.weight_hh, wg.bias_hh, "weight_hh_sums");
  if (wg.peephole.size()) {
    // Row k of the sums is C_f,k's gradient, row H + k C_o,k's (the
    // candidate's rows, summed to zero, are left).
    auto sums = impl::call_array<DeerView2<T, Space>>(
        space, "softwave::deer::peephole_sums", false, rows, 1);
    d::sum_outer_products<Space, T>(space, g_in.view,
                                    d::PeepholeRows<Space, T>{y, inputs.y0, H},
                                    1, sums.view, {}, "peephole_sums");
    auto const from = sums.view;
    auto const to = wg.peephole;
    Kokkos::parallel_for(
        "softwave::deer::peephole_gradients", d::work_items(space, 2 * H),
        KOKKOS_LAMBDA(int k) { to(k) = from(k, 0); });
  }
}

#define SOFTWAVE_INSTANTIATE_DEER(SPACE, T)                                    \
  template void deer_rnn<SPACE, T>(                                            \
      const SPACE&, const RnnWeights<T, SPACE>&, const DeerInputs<T, SPACE>&,  \
      const DeerResult<T, SPACE>&, const DeerOptions&);                        \
  template void deer_rnn_gradients<SPACE, T>(                                  \
      const SPACE&, const RnnWeights<T, SPACE>&, const DeerInputs<T, SPACE>&,  \
      DeerView3<const T, SPACE>, const DeerGradients<T, SPACE>&,               \
      const RnnWeightGradients<T, SPACE>&, const DeerOptions&);                \
  template impl::deer::Settings impl::deer::check_call<SPACE, T>(              \
      const SPACE&, const DeerInputs<T, SPACE>&, int, int, const DeerOptions&, \
      const char*, std::size_t, std::size_t, std::size_t);

SOFTWAVE_INSTANTIATE_DEER(Kokkos::DefaultExecutionSpace, float)
SOFTWAVE_INSTANTIATE_DEER(Kokkos::DefaultExecutionSpace, double)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_DEER(Kokkos::DefaultHostExecutionSpace, float)
SOFTWAVE_INSTANTIATE_DEER(Kokkos::DefaultHostExecutionSpace, double)
#endif

}  // namespace softwave
