// softwave::linear_recurrence (and its gradients) beside a device copy of
// the same bytes, the bandwidth the scan is measured against.
//
//   BM_LinearRecurrence/<kernel>/rows/T/gradient/double
//     kernel: automatic (the CUDA single-pass scan on a GPU), portable,
//     or (CUDA) runs2, the single pass with 2 runs a thread instead of 4;
//     a, b uniform in [−1, 1) and [−0.99, 0.99); data checks off. gradient 1
//     times linear_recurrence_gradients (grad_a, grad_b and grad_y0).
//   BM_DeviceCopy/rows/T/arrays/double: Kokkos::deep_copy of `arrays`
//     (rows, T) arrays into as many others, contiguous device memory.
//
// Counters: ms; floor_MB, the bytes the call must move (the forward reads
// a and b and writes y; the gradients read a, grad_y and y and write grad_b
// and grad_a; the copy reads and writes each array once); GBps, floor_MB
// over the time.

#include <benchmark/benchmark.h>

#include <Kokkos_Random.hpp>
#include <softwave/linear_recurrence.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"
#if defined(KOKKOS_ENABLE_CUDA)
#include "deer/vendor_linear_recurrence.hpp"  // runs_override (runs2)
#endif

namespace softwave_bench {
namespace {

template <class T>
using Rows = softwave::RecurrenceRows<T, Space>;
template <class T>
using Row = softwave::RecurrenceRow<T, Space>;

template <class View>
void fill_uniform(const View& v, double lo, double hi, std::uint64_t seed) {
  Kokkos::Random_XorShift64_Pool<Space> pool(seed);
  Kokkos::fill_random(v, pool, lo, hi);
  Kokkos::fence();
}

void report(benchmark::State& state, double total_s, double bytes) {
  using benchmark::Counter;
  double const per_call =
      state.iterations() ? total_s / double(state.iterations()) : 0;
  state.counters["ms"] = Counter(1e3 * per_call);
  state.counters["floor_MB"] = Counter(bytes / 1e6);
  state.counters["GBps"] = Counter(per_call > 0 ? bytes / per_call / 1e9 : 0);
}

// Sets the CUDA scan's runs a thread for the scope (0: the library's).
struct Runs {
  explicit Runs(int runs) {
#if defined(KOKKOS_ENABLE_CUDA)
    softwave::impl::scan::cuda_scan::runs_override() = runs;
#else
    (void)runs;
#endif
  }
  ~Runs() {
#if defined(KOKKOS_ENABLE_CUDA)
    softwave::impl::scan::cuda_scan::runs_override() = 0;
#endif
  }
};

template <class T>
void run_scan(benchmark::State& state, softwave::Kernel kernel, int runs) {
  Runs const chosen(runs);
  Space space;
  std::int64_t const rows = state.range(0), steps = state.range(1);
  bool const gradient = state.range(2) != 0;
  Rows<T> a("softwave_bench::a", rows, steps),
      b("softwave_bench::b", rows, steps), y("softwave_bench::y", rows, steps);
  Row<T> y0("softwave_bench::y0", rows);
  fill_uniform(a, -0.99, 0.99, 1);
  fill_uniform(b, -1.0, 1.0, 2);
  fill_uniform(y0, -1.0, 1.0, 3);
  softwave::LinearRecurrenceOptions options;
  options.check_values = false;
  options.kernel = kernel;
  softwave::linear_recurrence<Space, T>(space, a, b, y0, y, options);
  Rows<T> grad_a, grad_b;
  Row<T> grad_y0;
  if (gradient) {
    grad_a = Rows<T>("softwave_bench::grad_a", rows, steps);
    grad_b = Rows<T>("softwave_bench::grad_b", rows, steps);
    grad_y0 = Row<T>("softwave_bench::grad_y0", rows);
  }
  auto const call = [&] {
    if (gradient)
      softwave::linear_recurrence_gradients<Space, T>(
          space, a, y0, y, b, grad_a, grad_b, grad_y0, options);
    else
      softwave::linear_recurrence<Space, T>(space, a, b, y0, y, options);
  };
  call();  // warm-up
  double const total_s = timed_calls(state, space, call);
  double const arrays = gradient ? 5 : 3;
  report(state, total_s, arrays * double(rows) * double(steps) * sizeof(T));
}

template <class T>
void run_copy(benchmark::State& state) {
  Space space;
  std::int64_t const rows = state.range(0), steps = state.range(1);
  int const arrays = int(state.range(2));
  std::vector<Rows<T>> from, to;
  for (int i = 0; i < arrays; ++i) {
    from.emplace_back("softwave_bench::from", rows, steps);
    to.emplace_back("softwave_bench::to", rows, steps);
    fill_uniform(from.back(), -1.0, 1.0, 10 + i);
  }
  auto const call = [&] {
    for (int i = 0; i < arrays; ++i) Kokkos::deep_copy(space, to[i], from[i]);
  };
  call();
  double const total_s = timed_calls(state, space, call);
  report(state, total_s,
         2.0 * arrays * double(rows) * double(steps) * sizeof(T));
}

}  // namespace

void register_linear_recurrence(bool gpu) {
  struct Shape {
    std::int64_t rows, steps;
  };
  std::vector<Shape> shapes;
  if (gpu)
    shapes = {{16, 1000000}, {1, 16000000}, {4096, 4096}, {16, 100000},
              {16, 10000},   {1, 1000000},  {1, 1000}};
  else
    shapes = {{16, 100000}, {1, 1000000}, {1024, 1024}};
  for (bool dbl : {false, true})
    for (auto const& s : shapes) {
      std::string const type = dbl ? "/1" : "/0";
      for (int variant = 0; variant < (gpu ? 3 : 2); ++variant)
        for (int gradient : {0, 1}) {
          auto const kernel = variant == 1 ? softwave::Kernel::portable
                                           : softwave::Kernel::automatic;
          int const runs = variant == 2 ? 2 : 0;
          char const* const names[] = {"automatic", "portable", "runs2"};
          std::string const name =
              std::string("BM_LinearRecurrence/") + names[variant];
          benchmark::RegisterBenchmark(
              name.c_str(),
              [kernel, runs, dbl](benchmark::State& state) {
                if (dbl)
                  run_scan<double>(state, kernel, runs);
                else
                  run_scan<float>(state, kernel, runs);
              })
              ->Args({s.rows, s.steps, gradient, dbl})
              ->UseManualTime()
              ->Iterations(10)
              ->Unit(benchmark::kMillisecond);
        }
      for (int arrays : {1, 3})
        benchmark::RegisterBenchmark("BM_DeviceCopy",
                                     [dbl](benchmark::State& state) {
                                       if (dbl)
                                         run_copy<double>(state);
                                       else
                                         run_copy<float>(state);
                                     })
            ->Args({s.rows, s.steps, arrays, dbl})
            ->UseManualTime()
            ->Iterations(10)
            ->Unit(benchmark::kMillisecond);
    }
}

}  // namespace softwave_bench
