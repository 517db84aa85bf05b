// The DEER benchmarks of softwave_bench (registered by its main in
// bench_softdtw.cpp, on the same grid flags): the GRU task, input
// size = hidden size n, B = 16 (and B = 1 at n = 1 on a GPU), inputs
// N(0, 1), PyTorch's initialisation (weights and biases U(−1/√n, 1/√n)),
// zero initial state, float32.
//
//   BM_DeerGru/<variant>/n/T/gradient/B
//   BM_DeerParaLstm/<variant>/n/T/gradient/B: ParaRNN's LSTM (cifg_lstm,
//     diagonal hidden weights, peepholes U(−1/√n, 1/√n)), hidden size n,
//     state 2n; variants deer (exact Newton: each unit's 2×2 block) and
//     sequential
//     variant   deer_full       Newton with full Jacobians
//               deer_diagonal   quasi-DEER (diagonal Jacobians)
//               sequential      the loop over t (on a GPU a team a
//                               sequence, DeerOptions::sequential_team_size;
//                               on CUDA, dense hidden weights up to H = 64,
//                               the backend's loop, a block a sequence)
//               sequential_portable (GPU only): the portable loop there
//               sequential_thread (GPU only, T <= 10k): the loop a thread
//                               a sequence
//               deer_full_thread (GPU only): deer_full with Newton's
//                               passes a thread a chunk (DeerOptions::
//                               chunk_team_size = 1), where deer_full takes
//                               a team a chunk
//               deer_full_portable, deer_diagonal_portable (GPU only):
//                               the same with Kernel::portable, beside the
//                               CUDA build's fused iteration that the
//                               first two take where it applies
//               deer_damped     damped (quasi-ELK) iterations from λ = 1
//               deer_damped_full  the same with full Jacobians (ELK)
//               deer_damped_full_thread (GPU only): deer_damped_full with
//                               ELK's passes a thread a chunk
//                               (DeerOptions::chunk_team_size = 1)
//               diagonal_hh_deer, diagonal_hh_sequential: the GRU with
//                               diagonal hidden weights (ParaRNN's cell
//                               structure, RnnWeights::diagonal_hh), by
//                               exact Newton on its diagonal Jacobians and
//                               by the loop
//               diagonal_hh_deer_check4, _check0: the same Newton reading
//                               convergence back after every 4th iteration,
//                               and never (DeerOptions::check_every; with
//                               max_iterations = 8)
//   (Full Jacobians by a thread a chunk, deer_full_thread and
//   deer_damped_full_thread; ELK's deer_damped_full, whose teams share a
//   step's O(n³) products and solves, not yet measured beyond; and
//   deer_full at n = 64, whose steps do not fit a team's fast memory: only
//   where n³·T <= 1e8, beyond which the thread-a-chunk kernels took
//   minutes.)
//     gradient  0: forward (deer_rnn); 1: forward and every gradient
//               (deer_rnn_gradients with dL/dy = 1: x, y0, the weights),
//               the adjoint solved the variant's way.
//
//   BM_DeerNeuralOde/<variant>/n/h/T/gradient/B: deer_neural_ode (the
//     built-in field W_out tanh(W_hidden [y; u] + b_hidden) + b_out, state
//     n, hidden width h, input size n, steps Δ = 0.05, inputs N(0, 1),
//     weights U(−1/√fan-in, 1/√fan-in) as torch.nn.Linear's); variants
//     deer_full, deer_diagonal, sequential and sequential_thread (as
//     BM_DeerGru's); gradient 1 adds
//     deer_neural_ode_gradients (dL/dy = 1: the steps and inputs, y0 and
//     every weight).
//
// Counters: ms; iterations (the largest over the batch); max_dy, the
// largest |y − y_sequential| (0 for the sequential variant itself);
// fallbacks (sequences the guard evaluated sequentially); floor_MB, one pass
// reading x and writing y (B·T·(n + state)·4 bytes: the memory floor of
// any method);
// peak_workspace_MB.
//
// SOFTWAVE_BENCH_DEER_START_WARM_UP replaces DeerOptions::start_warm_up (0:
// Newton from zeros), for comparing starts in one run.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <softwave/deer.hpp>
#include <softwave/deer_ode.hpp>
#include <softwave/kokkos_compat.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace softwave_bench {
namespace {

struct Variant {
  const char* name;
  softwave::DeerMethod method;
  softwave::DeerJacobian jacobian;
  softwave::Kernel kernel = softwave::Kernel::automatic;
  bool gpu_only = false;
  double damping = 0;        // > 0: damped (quasi-ELK) iterations from this λ
  bool diagonal_hh = false;  // RnnWeights::diagonal_hh
  softwave::RnnCell cell = softwave::RnnCell::gru;
  int block_size = 0;   // > 0: jacobian = block, strided blocks of this size
  int check_every = 1;  // DeerOptions::check_every
  int team_size = 0;    // DeerOptions::sequential_team_size
  int chunk_team_size = 0;  // DeerOptions::chunk_team_size
};
constexpr Variant kVariants[] = {
    {"deer_full", softwave::DeerMethod::deer, softwave::DeerJacobian::full},
    {"deer_diagonal", softwave::DeerMethod::deer,
     softwave::DeerJacobian::diagonal},
    {"sequential", softwave::DeerMethod::sequential,
     softwave::DeerJacobian::full},
    // The loop a thread a sequence, where `sequential` takes a team.
    {"sequential_thread", softwave::DeerMethod::sequential,
     softwave::DeerJacobian::full, softwave::Kernel::automatic, true, 0, false,
     softwave::RnnCell::gru, 0, 1, 1},
    // The portable loop (a team a sequence), where `sequential` takes the
    // CUDA build's (a block a sequence).
    {"sequential_portable", softwave::DeerMethod::sequential,
     softwave::DeerJacobian::full, softwave::Kernel::portable, true},
    // Newton's passes a thread a chunk, where `deer_full` takes a team.
    {"deer_full_thread", softwave::DeerMethod::deer,
     softwave::DeerJacobian::full, softwave::Kernel::automatic, true, 0, false,
     softwave::RnnCell::gru, 0, 1, 0, 1},
    {"deer_full_portable", softwave::DeerMethod::deer,
     softwave::DeerJacobian::full, softwave::Kernel::portable, true},
    {"deer_diagonal_portable", softwave::DeerMethod::deer,
     softwave::DeerJacobian::diagonal, softwave::Kernel::portable, true},
    {"deer_damped", softwave::DeerMethod::deer,
     softwave::DeerJacobian::diagonal, softwave::Kernel::automatic, false, 1.0},
    {"deer_damped_full", softwave::DeerMethod::deer,
     softwave::DeerJacobian::full, softwave::Kernel::automatic, false, 1.0},
    // ELK's passes a thread a chunk, where `deer_damped_full` takes a team.
    {"deer_damped_full_thread", softwave::DeerMethod::deer,
     softwave::DeerJacobian::full, softwave::Kernel::automatic, true, 1.0,
     false, softwave::RnnCell::gru, 0, 1, 0, 1},
    {"diagonal_hh_deer", softwave::DeerMethod::deer,
     softwave::DeerJacobian::diagonal, softwave::Kernel::automatic, false, 0,
     true},
    {"diagonal_hh_deer_check4", softwave::DeerMethod::deer,
     softwave::DeerJacobian::diagonal, softwave::Kernel::automatic, false, 0,
     true, softwave::RnnCell::gru, 0, 4},
    {"diagonal_hh_deer_check0", softwave::DeerMethod::deer,
     softwave::DeerJacobian::diagonal, softwave::Kernel::automatic, false, 0,
     true, softwave::RnnCell::gru, 0, 0},
    {"diagonal_hh_sequential", softwave::DeerMethod::sequential,
     softwave::DeerJacobian::diagonal, softwave::Kernel::automatic, false, 0,
     true},
    {"deer", softwave::DeerMethod::deer, softwave::DeerJacobian::block,
     softwave::Kernel::automatic, false, 0, true, softwave::RnnCell::cifg_lstm,
     2},
    {"sequential", softwave::DeerMethod::sequential,
     softwave::DeerJacobian::block, softwave::Kernel::automatic, false, 0, true,
     softwave::RnnCell::cifg_lstm, 2},
};

template <class T>
using V3 = softwave::DeerView3<T, Space>;
template <class T>
using V2 = softwave::DeerView2<T, Space>;
template <class T>
using V1 = softwave::DeerView1<T, Space>;

// U(−a, a) from N(0, 1) draws would not be PyTorch's; scale uniform ones.
template <class View>
void fill_uniform(const View& v, double a, std::uint64_t seed) {
  Kokkos::Random_XorShift64_Pool<Space> pool(seed);
  Kokkos::fill_random(v, pool, float(-a), float(a));
  Kokkos::fence();
}

// The counters of a DEER benchmark: its time, Newton iterations, fallbacks
// and agreement with the sequential loop's states `ys`.
void report(benchmark::State& state,
            const softwave::DeerResult<float, Space>& result, V3<float> ys,
            double total_s,
            const softwave_tools::AllocationTracker::Peaks& peaks,
            double floor_bytes) {
  Space space;
  int const batch = int(result.y.extent(0));
  double max_dy = 0;
  auto const y = result.y;
  Kokkos::parallel_reduce(
      "softwave_bench::max_dy",
      Kokkos::RangePolicy<Space>(space, 0, std::int64_t(y.size())),
      KOKKOS_LAMBDA(std::int64_t i, double& worst) {
        double const e =
            softwave::compat::fabs(double(y.data()[i]) - double(ys.data()[i]));
        if (!(e <= worst)) worst = e == e ? e : 1e300;
      },
      Kokkos::Max<double>(max_dy));
  auto const its = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(),
                                                       result.iterations);
  auto const path =
      Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), result.path);
  int most = 0, fallbacks = 0;
  for (int b = 0; b < batch; ++b) {
    most = std::max(most, its(b));
    fallbacks += path(b) == int(softwave::DeerPath::fallback);
  }
  using benchmark::Counter;
  state.counters["ms"] = Counter(
      state.iterations() ? 1e3 * total_s / double(state.iterations()) : 0);
  state.counters["iterations"] = Counter(most);
  state.counters["max_dy"] = Counter(max_dy);
  state.counters["fallbacks"] = Counter(fallbacks);
  state.counters["floor_MB"] = Counter(floor_bytes / 1e6);
  state.counters["peak_workspace_MB"] = Counter(double(peaks.workspace) / kMiB);
}

// Times forward(result, options), then gradients() where asked for (after
// one such call that measures its peak memory), and reports it beside the
// states forward gives with the sequential method.
template <class Forward, class Gradients>
void time_and_report(benchmark::State& state, const Forward& forward,
                     const Gradients& gradients, bool gradient,
                     const softwave::DeerResult<float, Space>& result,
                     const softwave::DeerOptions& options, double floor_bytes) {
  Space space;
  auto const call = [&] {
    forward(result, options);
    if (gradient) gradients();
  };
  softwave_tools::AllocationTracker::Peaks peaks;
  try {
    peaks = measured_call(space, call);
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  double const total_s = timed_calls(state, space, call);
  softwave::DeerResult<float, Space> reference;
  reference.y = V3<float>("softwave_bench::y_sequential", result.y.extent(0),
                          result.y.extent(1), result.y.extent(2));
  softwave::DeerOptions loop = options;
  loop.method = softwave::DeerMethod::sequential;
  forward(reference, loop);
  report(state, result, reference.y, total_s, peaks, floor_bytes);
}

void run_deer(benchmark::State& state, Variant variant) {
  Space space;
  int const n = int(state.range(0));
  std::int64_t const steps = state.range(1);
  bool const gradient = state.range(2) != 0;
  int const batch = int(state.range(3));
  int const rows = 3 * n;  // GRU's and cifg_lstm's three gates
  bool const cifg = variant.cell == softwave::RnnCell::cifg_lstm;
  int const state_size = cifg ? 2 * n : n;
  double const a = 1 / std::sqrt(double(n));
  V3<float> x("softwave_bench::x", batch, steps, n);
  fill_normal(x, 1);
  int const hidden_columns = variant.diagonal_hh ? 1 : n;
  V2<float> w_ih("softwave_bench::w_ih", rows, n),
      w_hh("softwave_bench::w_hh", rows, hidden_columns);
  V1<float> b_ih("softwave_bench::b_ih", rows),
      b_hh("softwave_bench::b_hh", rows);
  fill_uniform(w_ih, a, 2);
  fill_uniform(w_hh, a, 3);
  fill_uniform(b_ih, a, 4);
  fill_uniform(b_hh, a, 5);
  V1<float> peephole("softwave_bench::peephole", cifg ? 2 * n : 0);
  fill_uniform(peephole, a, 6);
  softwave::RnnWeights<float, Space> weights{
      variant.cell, w_ih, w_hh, b_ih, b_hh, peephole, variant.diagonal_hh};
  softwave::DeerInputs<float, Space> inputs;
  inputs.x = x;
  softwave::DeerResult<float, Space> result;
  result.y = V3<float>("softwave_bench::y", batch, steps, state_size);
  result.iterations = V1<int>("softwave_bench::iterations", batch);
  result.path = V1<int>("softwave_bench::path", batch);
  softwave::DeerOptions options;
  options.method = variant.method;
  options.sequential_team_size = variant.team_size;
  options.chunk_team_size = variant.chunk_team_size;
  options.jacobian = variant.jacobian;
  options.kernel = variant.kernel;
  options.damping = variant.damping;
  if (variant.block_size > 0) {
    options.block_size = variant.block_size;
    options.block_layout = softwave::DeerBlockLayout::strided;
  }
  options.check_values = false;
  options.check_every = variant.check_every;
  if (char const* warm_up = std::getenv("SOFTWAVE_BENCH_DEER_START_WARM_UP"))
    options.start_warm_up = std::atoi(warm_up);
  // Never reading convergence back issues every iteration: a bound near
  // what exact Newton takes on these cells.
  if (variant.check_every == 0) options.max_iterations = 8;
  softwave::DeerGradients<float, Space> grads;
  softwave::RnnWeightGradients<float, Space> weight_grads;
  if (gradient) {
    V3<float> ones("softwave_bench::grad_y", batch, steps, state_size);
    softwave::compat::fill(space, ones, 1.0f);
    grads.grad_y = ones;
    grads.grad_x = V3<float>("softwave_bench::grad_x", batch, steps, n);
    grads.grad_y0 = V2<float>("softwave_bench::grad_y0", batch, state_size);
    weight_grads.weight_ih = V2<float>("softwave_bench::gw_ih", rows, n);
    weight_grads.weight_hh =
        V2<float>("softwave_bench::gw_hh", rows, hidden_columns);
    weight_grads.bias_ih = V1<float>("softwave_bench::gb_ih", rows);
    weight_grads.bias_hh = V1<float>("softwave_bench::gb_hh", rows);
    if (cifg)
      weight_grads.peephole = V1<float>("softwave_bench::g_peephole", 2 * n);
  }
  time_and_report(
      state,
      [&](const softwave::DeerResult<float, Space>& out,
          const softwave::DeerOptions& o) {
        softwave::deer_rnn(space, weights, inputs, out, o);
      },
      [&] {
        softwave::deer_rnn_gradients(space, weights, inputs,
                                     V3<const float>(result.y), grads,
                                     weight_grads, options);
      },
      gradient, result, options,
      double(batch) * double(steps) * (n + state_size) * 4);
}

void run_neural_ode(benchmark::State& state, Variant variant) {
  Space space;
  int const n = int(state.range(0)), h = int(state.range(1));
  std::int64_t const steps = state.range(2);
  bool const gradient = state.range(3) != 0;
  int const batch = int(state.range(4));
  int const m = n;
  V3<float> x("softwave_bench::x", batch, steps, 1 + m);
  fill_normal(x, 1);
  // Column 0 holds the steps.
  Kokkos::parallel_for(
      "softwave_bench::ode_steps",
      Kokkos::RangePolicy<Space>(space, 0, std::int64_t(batch) * steps),
      KOKKOS_LAMBDA(std::int64_t q) { x(q / steps, q % steps, 0) = 0.05f; });
  V2<float> w_hidden("softwave_bench::w_hidden", h, n + m),
      w_out("softwave_bench::w_out", n, h);
  V1<float> b_hidden("softwave_bench::b_hidden", h),
      b_out("softwave_bench::b_out", n);
  fill_uniform(w_hidden, 1 / std::sqrt(double(n + m)), 2);
  fill_uniform(b_hidden, 1 / std::sqrt(double(n + m)), 3);
  fill_uniform(w_out, 1 / std::sqrt(double(h)), 4);
  fill_uniform(b_out, 1 / std::sqrt(double(h)), 5);
  softwave::NeuralOdeWeights<float, Space> weights{w_hidden, b_hidden, w_out,
                                                   b_out};
  softwave::DeerInputs<float, Space> inputs;
  inputs.x = x;
  softwave::DeerResult<float, Space> result;
  result.y = V3<float>("softwave_bench::y", batch, steps, n);
  result.iterations = V1<int>("softwave_bench::iterations", batch);
  result.path = V1<int>("softwave_bench::path", batch);
  softwave::DeerOptions options;
  options.method = variant.method;
  options.sequential_team_size = variant.team_size;
  options.chunk_team_size = variant.chunk_team_size;
  options.jacobian = variant.jacobian;
  options.check_values = false;
  softwave::DeerGradients<float, Space> grads;
  softwave::NeuralOdeWeightGradients<float, Space> weight_grads;
  if (gradient) {
    V3<float> ones("softwave_bench::grad_y", batch, steps, n);
    softwave::compat::fill(space, ones, 1.0f);
    grads.grad_y = ones;
    grads.grad_x = V3<float>("softwave_bench::grad_x", batch, steps, 1 + m);
    grads.grad_y0 = V2<float>("softwave_bench::grad_y0", batch, n);
    weight_grads = {V2<float>("softwave_bench::gw_hidden", h, n + m),
                    V1<float>("softwave_bench::gb_hidden", h),
                    V2<float>("softwave_bench::gw_out", n, h),
                    V1<float>("softwave_bench::gb_out", n)};
  }
  time_and_report(
      state,
      [&](const softwave::DeerResult<float, Space>& out,
          const softwave::DeerOptions& o) {
        softwave::deer_neural_ode(space, weights, inputs, out, o);
      },
      [&] {
        softwave::deer_neural_ode_gradients(space, weights, inputs,
                                            V3<const float>(result.y), grads,
                                            weight_grads, options);
      },
      gradient, result, options,
      double(batch) * double(steps) * (1 + m + n) * 4);
}

}  // namespace

void register_deer(bool gpu) {
  // (n, T, B): where the sequential loop of one thread per sequence would
  // take minutes, the larger T are left out.
  struct Shape {
    int n;
    std::int64_t steps;
    int batch;
  };
  std::vector<Shape> shapes;
  if (gpu)
    shapes = {
        {1, 1000, 16},   {1, 10000, 16},  {1, 100000, 16},  {1, 1000000, 16},
        {4, 1000, 16},   {4, 100000, 16}, {4, 1000000, 16}, {4, 10000, 16},
        {16, 1000, 16},  {16, 10000, 16}, {16, 100000, 16}, {32, 1000, 16},
        {32, 10000, 16}, {64, 1000, 16},  {64, 10000, 16},  {2, 1000, 16},
        {1, 100000, 1},  {1, 1000000, 1}, {1, 1000, 1},     {16, 1000, 1}};
  else
    shapes = {{1, 1000, 16}, {1, 100000, 16}, {16, 1000, 16}, {16, 10000, 16}};
  for (Variant const& v : kVariants)
    for (int gradient : {0, 1}) {
      if (v.gpu_only && !gpu) continue;
      for (auto const& s : shapes) {
        // Full Jacobians cost n³ a step on a thread of the portable
        // kernels: minutes from n = 16, T = 100k on. A team a chunk shares
        // them on a GPU up to n = 32 of this grid.
        bool const full = v.jacobian == softwave::DeerJacobian::full &&
                          v.method == softwave::DeerMethod::deer;
        bool const team_chunks =
            gpu && v.chunk_team_size != 1 && v.damping == 0 && s.n <= 32;
        if (full && !team_chunks &&
            double(s.n) * s.n * s.n * double(s.steps) > 1e8)
          continue;
        // The loop a thread a sequence took up to 25 µs a step at n = 1 and
        // 478 µs at n = 64: up to T = 10k only.
        if (v.team_size == 1 && s.steps > 10000) continue;
        benchmark::RegisterBenchmark(
            (std::string(v.cell == softwave::RnnCell::cifg_lstm
                             ? "BM_DeerParaLstm/"
                             : "BM_DeerGru/") +
             v.name)
                .c_str(),
            [v](benchmark::State& state) { run_deer(state, v); })
            ->Args({s.n, s.steps, gradient, s.batch})
            ->UseManualTime()
            ->Iterations(s.steps >= 1000000 ? 2 : 5)
            ->Unit(benchmark::kMillisecond);
      }
    }
  // The neural ODE: (n, h, T, B).
  struct OdeShape {
    int n, h;
    std::int64_t steps;
    int batch;
  };
  std::vector<OdeShape> ode_shapes;
  if (gpu)
    ode_shapes = {{2, 16, 1000, 16},  {2, 16, 100000, 16}, {2, 16, 1000000, 16},
                  {8, 32, 1000, 16},  {8, 32, 10000, 16},  {8, 32, 100000, 16},
                  {16, 64, 1000, 16}, {16, 64, 10000, 16}, {8, 32, 10000, 1}};
  else
    ode_shapes = {{2, 16, 1000, 16}, {8, 32, 1000, 16}, {8, 32, 10000, 16}};
  for (Variant const& v : kVariants)
    for (int gradient : {0, 1}) {
      if (v.cell != softwave::RnnCell::gru || v.diagonal_hh || v.damping > 0 ||
          v.kernel != softwave::Kernel::automatic)
        continue;
      for (auto const& s : ode_shapes) {
        if ((v.team_size == 1 || v.chunk_team_size == 1) && s.steps > 10000)
          continue;
        benchmark::RegisterBenchmark(
            (std::string("BM_DeerNeuralOde/") + v.name).c_str(),
            [v](benchmark::State& state) { run_neural_ode(state, v); })
            ->Args({s.n, s.h, s.steps, gradient, s.batch})
            ->UseManualTime()
            ->Iterations(s.steps >= 1000000 ? 2 : 5)
            ->Unit(benchmark::kMillisecond);
      }
    }
}

}  // namespace softwave_bench
