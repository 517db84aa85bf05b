// Every kernel, allocation and profiling region of the library is labelled
// "softwave::...", as softdtw.hpp and barycenter.hpp promise, so that a
// profile of an application shows which work is softwave's. Kokkos Tools
// callbacks record what each public entry point launches and allocates
// while it runs (its inputs and outputs are made before the recording
// starts); what Kokkos itself launches or allocates on the library's behalf
// is accepted only by the explicit lists in kokkos_kernel() and
// kokkos_scratch().

#include <mutex>
#include <softwave/barycenter.hpp>
#include <softwave/deer.hpp>
#include <softwave/deer_ode.hpp>
#include <softwave/graph.hpp>
#include <softwave/gw.hpp>
#include <softwave/sinkhorn.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "test_helpers.hpp"

namespace {

using namespace swt;

struct Event {
  std::string kind;  // parallel_for, parallel_reduce, parallel_scan,
                     // allocation or region
  std::string label;
};

// The Kokkos Tools callbacks (plain function pointers, hence the static
// event list).
struct Recorder {
  static inline std::mutex mutex;
  static inline std::vector<Event> events;

  static void add(const char* kind, const char* label) {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back({kind, label ? label : "(null)"});
  }
  static void on_for(const char* label, std::uint32_t, std::uint64_t* id) {
    *id = 0;
    add("parallel_for", label);
  }
  static void on_reduce(const char* label, std::uint32_t, std::uint64_t* id) {
    *id = 0;
    add("parallel_reduce", label);
  }
  static void on_scan(const char* label, std::uint32_t, std::uint64_t* id) {
    *id = 0;
    add("parallel_scan", label);
  }
  static void on_allocate(Kokkos::Tools::SpaceHandle, const char* label,
                          const void*, std::uint64_t) {
    add("allocation", label);
  }
  static void on_region(const char* label) { add("region", label); }
};

// The events of `call` and of everything it queued (it is fenced before the
// recording stops). The callbacks are installed for the call only; the ones
// before (a tool loaded through KOKKOS_TOOLS_LIBS, or none) come back after
// it, also when it throws.
template <class F>
std::vector<Event> record(F&& call) {
  namespace tools = Kokkos::Tools::Experimental;
  Kokkos::fence();
  struct Restore {
    tools::EventSet saved = tools::get_callbacks();
    ~Restore() { tools::set_callbacks(saved); }
  } restore;
  Recorder::events.clear();
  tools::set_begin_parallel_for_callback(&Recorder::on_for);
  tools::set_begin_parallel_reduce_callback(&Recorder::on_reduce);
  tools::set_begin_parallel_scan_callback(&Recorder::on_scan);
  tools::set_allocate_data_callback(&Recorder::on_allocate);
  tools::set_push_region_callback(&Recorder::on_region);
  call();
  Kokkos::fence();
  std::lock_guard<std::mutex> lock(Recorder::mutex);
  return Recorder::events;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.compare(0, prefix.size(), prefix) == 0;
}

// Kernels Kokkos launches on the library's behalf under names of its own
// (Kokkos 3.4 to 5.x), which the library cannot choose:
//  - the kernels that initialise or destroy a View's allocation,
//    "Kokkos::View::initialization [<label>]" (4.x adds " via memset") and
//    "Kokkos::View::destruction [<label>]": accepted only when <label>, the
//    View's own label, is softwave's;
//  - the kernels of Kokkos::deep_copy, which fill a View with a value or
//    copy one View into another: "Kokkos::ViewFill-<rank>D",
//    "Kokkos::ViewCopy-<rank>D", and on the host
//    "Kokkos::Impl::host_space_deepcopy_<type>".
bool kokkos_kernel(const std::string& label) {
  for (const char* prefix :
       {"Kokkos::View::initialization [", "Kokkos::View::destruction ["}) {
    if (!starts_with(label, prefix)) continue;
    const std::size_t close = label.rfind(']');
    return close != std::string::npos &&
           starts_with(label.substr(0, close),
                       std::string(prefix) + "softwave::");
  }
  return starts_with(label, "Kokkos::ViewFill-") ||
         starts_with(label, "Kokkos::ViewCopy-") ||
         starts_with(label, "Kokkos::Impl::host_space_deepcopy");
}

// Scratch Kokkos allocates for itself the first time a kernel needs more of
// it, and keeps: the host backends' per-thread team scratch, unlabeled on
// OpenMP in 3.4 ("[unlabeled]", resize_thread_data in Kokkos_OpenMP_Exec.cpp)
// and "Kokkos::OpenMP::scratch_mem" in 4.x, "Kokkos::Serial::scratch_mem";
// the GPU backends' team scratch ("Kokkos::CudaSpace::TeamScratchMemory",
// "Kokkos::HIPSpace::TeamScratchMemory") and reduction and lock buffers
// ("Kokkos::InternalScratch..."). Accepted in a call's first run only (see
// labelled()).
bool kokkos_scratch(const std::string& label) {
  return label == "[unlabeled]" || label == "Kokkos::OpenMP::scratch_mem" ||
         label == "Kokkos::Serial::scratch_mem" ||
         label == "Kokkos::CudaSpace::TeamScratchMemory" ||
         label == "Kokkos::HIPSpace::TeamScratchMemory" ||
         starts_with(label, "Kokkos::InternalScratch");
}

// Every event labelled softwave::* or Kokkos' own (above), and at least one
// kernel of the library's among them (so that a recording that saw nothing
// cannot pass).
::testing::AssertionResult all_softwave(const std::vector<Event>& events,
                                        bool first_run) {
  std::ostringstream bad;
  int own_kernels = 0;
  // Where an offender came from: the event before it and the last region
  // entered (Kokkos names some kernels of its own after nothing of ours).
  std::string before = "(the start)", region = "(none)";
  for (const Event& e : events) {
    std::string const here = e.kind + " \"" + e.label + "\"";
    if (e.kind == "region") region = e.label;
    if (starts_with(e.label, "softwave::")) {
      if (e.kind != "allocation" && e.kind != "region") ++own_kernels;
      before = here;
      continue;
    }
    if (e.kind == "allocation" ? first_run && kokkos_scratch(e.label)
                               : e.kind != "region" && kokkos_kernel(e.label)) {
      before = here;
      continue;
    }
    bad << "\n  " << here << " after " << before << " in region \"" << region
        << "\"";
    before = here;
  }
  if (!bad.str().empty())
    return ::testing::AssertionFailure()
           << (first_run ? "first" : "second")
           << " run: labels outside softwave::*:" << bad.str();
  if (own_kernels == 0)
    return ::testing::AssertionFailure()
           << "no softwave::* kernel was recorded (" << events.size()
           << " events)";
  return ::testing::AssertionSuccess();
}

// Runs `call` twice and checks the labels of both runs. Only the first may
// grow Kokkos' own scratch (kokkos_scratch), which later calls reuse: an
// allocation the library makes on every call must be labelled in the
// second.
template <class F>
::testing::AssertionResult labelled(F&& call) {
  const ::testing::AssertionResult first = all_softwave(record(call), true);
  const ::testing::AssertionResult second = all_softwave(record(call), false);
  if (first && second) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << (first ? "" : first.message()) << (first || second ? "" : "\n")
         << (second ? "" : second.message());
}

template <class Space>
class Labels : public ::testing::Test {};
TYPED_TEST_SUITE(Labels, ExecutionSpaces);

// The check itself: it refuses a kernel or an allocation labelled otherwise
// beside softwave's own. (Kernels are launched from a free function: CUDA's
// extended lambdas may not sit in a test body, a private member function.)
template <class Space>
void launch(const Space& space, const char* label) {
  Kokkos::parallel_for(label, Kokkos::RangePolicy<Space>(space, 0, 1),
                       KOKKOS_LAMBDA(int){});
}

TYPED_TEST(Labels, CheckRefusesOtherLabels) {
  const TypeParam space;
  using View = Kokkos::View<double*, typename TypeParam::memory_space>;
  EXPECT_TRUE(labelled([&] {
    View own("softwave::own", 3);
    launch(space, "softwave::own");
  }));
  EXPECT_FALSE(labelled([&] {
    launch(space, "softwave::own");
    launch(space, "other");
  }));
  EXPECT_FALSE(labelled([&] {
    View other("other", 3);
    launch(space, "softwave::own");
  }));
  EXPECT_FALSE(labelled([] {}));  // nothing recorded
}

// Inputs for the calls below: B pairs, padded lengths N and M, D features,
// and per-pair lengths.
constexpr int B = 3, N = 20, M = 17, D = 3;

Config padded() {
  Config s;
  s.gamma = 0.1;
  s.len_x = {N, 11, 4};
  s.len_y = {M, 2, 16};
  return s;
}

template <class T, class Space>
void values_on(const Space& space, Config s) {
  SWT_SEEDED_RNG(rng);
  const auto x = to_device<T>(space, random_batch(rng, B, N, D));
  const auto y = to_device<T>(space, random_batch(rng, B, M, D));
  auto values = output1<softwave::value_t<T>>(space, "swt::values", B);
  const auto lengths = s.lengths(space);
  const auto options = s.options();
  EXPECT_TRUE(labelled(
      [&] { softwave::soft_dtw(space, x, y, values, options, lengths); }));
}

TYPED_TEST(Labels, SoftDTW) {
  const TypeParam space;
  Config s = padded();
  values_on<double>(space, s);
  values_on<float>(space, s);
  values_on<softwave::bfloat16>(space, s);
  s.band = 2;  // sizes its checkpoints from the data
  values_on<double>(space, s);
}

// check_values = false: lengths are clamped on the device, not checked.
TYPED_TEST(Labels, SoftDTWUnchecked) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const auto x = to_device<double>(space, random_batch(rng, B, N, D));
  const auto y = to_device<double>(space, random_batch(rng, B, M, D));
  auto values = output1<double>(space, "swt::values", B);
  Config s = padded();
  s.len_x = {0, N + 4, 3};
  const auto lengths = s.lengths(space);
  softwave::SoftDTWOptions options = s.options();
  options.check_values = false;
  EXPECT_TRUE(labelled(
      [&] { softwave::soft_dtw(space, x, y, values, options, lengths); }));
}

template <class T, class Space>
void gradients_on(const Space& space, const Config& s) {
  SWT_SEEDED_RNG(rng);
  const auto x = to_device<T>(space, random_batch(rng, B, N, D));
  const auto y = to_device<T>(space, random_batch(rng, B, M, D));
  auto values = output1<softwave::value_t<T>>(space, "swt::values", B);
  softwave::SeriesGradients<T, Space> g;
  g.grad_x = output3<T>(space, "swt::grad_x", B, N, D);
  g.grad_y = output3<T>(space, "swt::grad_y", B, M, D);
  g.alignment = output3<T>(space, "swt::alignment", B, N, M);
  g.grad_output = to_device<softwave::value_t<T>>(
      space, std::vector<double>{1.0, -0.5, 2.0}, "swt::grad_output");
  const auto lengths = s.lengths(space);
  const auto options = s.options();
  EXPECT_TRUE(labelled([&] {
    softwave::soft_dtw_value_and_grad(space, x, y, values, g, options, lengths);
  }));
  g.alignment = {};  // the divergence has none
  EXPECT_TRUE(labelled([&] {
    softwave::soft_dtw_divergence_value_and_grad(space, x, y, values, g,
                                                 options, lengths);
  }));
}

TYPED_TEST(Labels, GradientsAndDivergenceGradients) {
  const TypeParam space;
  Config s = padded();
  gradients_on<double>(space, s);
  gradients_on<float>(space, s);
  gradients_on<softwave::float16>(space, s);  // float accumulators
  s.band = 1;
  gradients_on<double>(space, s);
}

TYPED_TEST(Labels, CostTensor) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const Config s = padded();
  const auto cost = to_device<float>(space, random_batch(rng, B, N, M));
  auto values = output1<float>(space, "swt::values", B);
  softwave::CostGradients<float, TypeParam> g;
  g.grad_cost = output3<float>(space, "swt::grad_cost", B, N, M);
  const auto lengths = s.lengths(space);
  const auto options = s.options();
  EXPECT_TRUE(labelled(
      [&] { softwave::soft_dtw_cost(space, cost, values, options, lengths); }));
  EXPECT_TRUE(labelled([&] {
    softwave::soft_dtw_cost_value_and_grad(space, cost, values, g, options,
                                           lengths);
  }));
}

TYPED_TEST(Labels, DivergencePairwiseAndPath) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  const Config s = padded();
  const auto x = to_device<double>(space, random_batch(rng, B, N, D));
  const auto y = to_device<double>(space, random_batch(rng, B, M, D));
  auto values = output1<double>(space, "swt::values", B);
  const auto lengths = s.lengths(space);
  const auto options = s.options();
  EXPECT_TRUE(labelled([&] {
    softwave::soft_dtw_divergence(space, x, y, values, options, lengths);
  }));
  Dev2<double, TypeParam> matrix("swt::matrix", B, B);
  for (auto what : {softwave::PairwiseValue::soft_dtw,
                    softwave::PairwiseValue::divergence}) {
    EXPECT_TRUE(labelled([&] {
      softwave::pairwise(space, x, y, matrix, options, what, lengths);
    }));
  }
  Dev3<int, TypeParam> path("swt::path", B, N + M - 1, 2);
  Dev1<int, TypeParam> path_length("swt::path_length", B);
  EXPECT_TRUE(labelled([&] {
    softwave::dtw_path(space, x, y, values, path, path_length, options,
                       lengths);
  }));
}

TYPED_TEST(Labels, NearestNeighbours) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  Config s = padded();
  s.gamma = 0;
  const auto x = to_device<float>(space, random_batch(rng, B, N, D));
  const auto y = to_device<float>(space, random_batch(rng, B, M, D));
  Dev2<std::int64_t, TypeParam> indices("swt::indices", B, 2);
  Dev2<float, TypeParam> distances("swt::distances", B, 2);
  const auto lengths = s.lengths(space);
  for (const std::optional<std::int64_t> band :
       {std::optional<std::int64_t>{}, std::optional<std::int64_t>{3}}) {
    s.band = band;
    const auto options = s.options();
    softwave::SearchStatistics statistics;
    EXPECT_TRUE(labelled([&] {
      softwave::nearest_neighbours(space, x, y, indices, distances, options,
                                   lengths, &statistics);
    }));
  }
}

// A call refused by its data checks runs (and labels) them before it throws.
TYPED_TEST(Labels, RefusedCall) {
  const TypeParam space;
  SWT_SEEDED_RNG(rng);
  Config s = padded();
  s.len_y = {M, M + 1, 1};
  const auto x = to_device<double>(space, random_batch(rng, B, N, D));
  const auto y = to_device<double>(space, random_batch(rng, B, M, D));
  auto values = output1<double>(space, "swt::values", B);
  const auto lengths = s.lengths(space);
  const auto options = s.options();
  EXPECT_TRUE(labelled([&] {
    EXPECT_TRUE(throws_naming("lengths.y", [&] {
      softwave::soft_dtw(space, x, y, values, options, lengths);
    }));
  }));
}

template <class T, class Space>
void barycenter_on(const Space& space, softwave::BarycenterMethod method) {
  SWT_SEEDED_RNG(rng);
  const auto X = to_device<T>(space, random_batch(rng, B, N, D));
  Dev2<T, Space> z("swt::z", 12, D);
  Kokkos::deep_copy(z, T(0.5));
  const auto weights =
      to_device<T>(space, std::vector<double>{0.2, 0.3, 0.5}, "swt::weights");
  const auto lengths = to_device_int(space, {N, 9, 14}, "swt::lengths");
  softwave::BarycenterOptions options;
  options.method = method;
  options.max_iter = 3;
  EXPECT_TRUE(labelled(
      [&] { softwave::barycenter(space, X, z, options, weights, lengths); }));
  Dev2<T, Space> gradient("swt::gradient", 12, D);
  EXPECT_TRUE(labelled([&] {
    softwave::barycenter_objective(space, X, z, gradient, options.softdtw,
                                   weights, lengths);
  }));
}

TYPED_TEST(Labels, Barycenter) {
  const TypeParam space;
  barycenter_on<double>(space, softwave::BarycenterMethod::lbfgs);
  barycenter_on<float>(space, softwave::BarycenterMethod::adam);
}

// DEER: a GRU forward (every path: Newton with both Jacobian modes, the
// sequential loop, and the guard's fallback) and its gradients.
template <class Space>
void deer_on(const Space& space, softwave::DeerMethod method,
             softwave::DeerJacobian jacobian, int max_iterations) {
  using T = float;
  int const B = 2, steps = 300, H = 3, rows = 3 * H;
  Rng rng;
  std::vector<double> w(rows * H), x(B * steps * H);
  for (double& e : w) e = rng.uniform(-0.5, 0.5);
  for (double& e : x) e = rng.uniform(-1, 1);
  softwave::RnnWeights<T, Space> weights;
  weights.cell = softwave::RnnCell::gru;
  weights.weight_ih = to_device2<T, Space>(w, rows, H);
  weights.weight_hh = to_device2<T, Space>(w, rows, H);
  Batch xb(B, steps, H);
  xb.v = x;
  softwave::DeerInputs<T, Space> inputs;
  inputs.x = to_device<T>(space, xb);
  softwave::DeerResult<T, Space> result;
  result.y = Dev3<T, Space>("swt::y", B, steps, H);
  result.path = Dev1<int, Space>("swt::path", B);
  softwave::DeerOptions options;
  options.method = method;
  options.jacobian = jacobian;
  options.max_iterations = max_iterations;
  options.chunk = 4;
  softwave::DeerGradients<T, Space> grads;
  grads.grad_y = to_device<T>(space, xb);
  grads.grad_x = Dev3<T, Space>("swt::grad_x", B, steps, H);
  grads.grad_y0 = Dev2<T, Space>("swt::grad_y0", B, H);
  softwave::RnnWeightGradients<T, Space> wg;
  wg.weight_hh = Dev2<T, Space>("swt::gw_hh", rows, H);
  wg.bias_ih = Dev1<T, Space>("swt::gb_ih", rows);
  EXPECT_TRUE(labelled([&] {
    softwave::deer_rnn(space, weights, inputs, result, options);
    softwave::deer_rnn_gradients(space, weights, inputs,
                                 Dev3<const T, Space>(result.y), grads, wg,
                                 options);
  }));
}

TYPED_TEST(Labels, Deer) {
  const TypeParam space;
  using softwave::DeerJacobian;
  using softwave::DeerMethod;
  deer_on(space, DeerMethod::deer, DeerJacobian::full, 100);
  deer_on(space, DeerMethod::deer, DeerJacobian::diagonal, 100);
  deer_on(space, DeerMethod::deer, DeerJacobian::full, 1);  // the fallback
  deer_on(space, DeerMethod::sequential, DeerJacobian::full, 100);
}

// The built-in neural ODE: its forward by Newton and by the integrator, and
// every gradient (the weights' sums).
template <class Space>
void neural_ode_on(const Space& space, softwave::DeerMethod method) {
  using T = float;
  int const B = 2, steps = 200, n = 3, m = 1, h = 5;
  Rng rng;
  std::vector<double> w(h * (n + m)), x(B * steps * (1 + m));
  for (double& e : w) e = rng.uniform(-0.5, 0.5);
  for (std::size_t q = 0; q < x.size(); ++q)
    x[q] = q % (1 + m) == 0 ? 0.05 : rng.uniform(-1, 1);
  softwave::NeuralOdeWeights<T, Space> weights;
  weights.weight_hidden = to_device2<T, Space>(w, h, n + m);
  weights.weight_out = to_device2<T, Space>(w, n, h);
  Batch xb(B, steps, 1 + m);
  xb.v = x;
  softwave::DeerInputs<T, Space> inputs;
  inputs.x = to_device<T>(space, xb);
  softwave::DeerResult<T, Space> result;
  result.y = Dev3<T, Space>("swt::y", B, steps, n);
  softwave::DeerOptions options;
  options.method = method;
  softwave::DeerGradients<T, Space> grads;
  grads.grad_y = Dev3<T, Space>("swt::grad_y", B, steps, n);
  grads.grad_x = Dev3<T, Space>("swt::grad_x", B, steps, 1 + m);
  softwave::NeuralOdeWeightGradients<T, Space> wg;
  wg.weight_hidden = Dev2<T, Space>("swt::gw_hidden", h, n + m);
  wg.bias_out = Dev1<T, Space>("swt::gb_out", n);
  EXPECT_TRUE(labelled([&] {
    softwave::deer_neural_ode(space, weights, inputs, result, options);
    softwave::deer_neural_ode_gradients(space, weights, inputs,
                                        Dev3<const T, Space>(result.y), grads,
                                        wg, options);
  }));
}

TYPED_TEST(Labels, NeuralOde) {
  const TypeParam space;
  neural_ode_on(space, softwave::DeerMethod::deer);
  neural_ode_on(space, softwave::DeerMethod::sequential);
}

// Sinkhorn: the solve with every output (with ε-scaling, whose schedule the
// host reads), its gradients, a plan query and the divergence.
template <class Space>
void sinkhorn_on(const Space& space, bool annealing) {
  using T = float;
  int const pairs = 2, n = 40, k = 30, d = 3;
  SWT_SEEDED_RNG(rng);
  softwave::PointClouds<T, Space> form;
  form.x = to_device<T>(space, random_batch(rng, pairs, n, d));
  form.y = to_device<T>(space, random_batch(rng, pairs, k, d));
  softwave::SinkhornResult<T, Space> result;
  result.f = Dev2<T, Space>("swt::f", pairs, n);
  result.g = Dev2<T, Space>("swt::g", pairs, k);
  result.value = Dev1<T, Space>("swt::value", pairs);
  result.transport_cost = Dev1<T, Space>("swt::cost", pairs);
  result.marginal_error = Dev2<T, Space>("swt::error", pairs, 2);
  result.iterations = Dev1<int, Space>("swt::iterations", pairs);
  result.converged = Dev1<int, Space>("swt::converged", pairs);
  softwave::SinkhornOptions options;
  options.epsilon = 0.05;
  options.epsilon_relative = annealing;
  options.epsilon_scaling = annealing ? 0.5 : 0.0;
  softwave::SinkhornGradients<T, Space> grads;
  grads.grad_x = Dev3<T, Space>("swt::grad_x", pairs, n, d);
  grads.grad_a = Dev2<T, Space>("swt::grad_a", pairs, n);
  softwave::PlanQueries<T, Space> queries;
  queries.v = to_device<T>(space, random_batch(rng, pairs, k, 2));
  queries.plan_v = Dev3<T, Space>("swt::plan_v", pairs, n, 2);
  Dev1<T, Space> divergence("swt::divergence", pairs);
  EXPECT_TRUE(labelled([&] {
    softwave::sinkhorn(space, form, {}, result, options);
    Dev2<const T, Space> const f(result.f), g(result.g);
    softwave::sinkhorn_gradients(space, form, {}, f, g, grads, options);
    softwave::sinkhorn_plan_queries(space, form, {}, f, g, queries, options);
    softwave::sinkhorn_divergence(space, form, {}, divergence, &grads, options);
  }));
}

TYPED_TEST(Labels, Sinkhorn) {
  const TypeParam space;
  sinkhorn_on(space, false);
  sinkhorn_on(space, true);
}

// Sampled GW from point clouds through a kNN graph's landmark embedding,
// with the dense plan, the matching and the objective (exact, then
// estimated), and from the graph itself (its shortest paths per anchor).
TYPED_TEST(Labels, SampledGw) {
  using Space = TypeParam;
  using T = float;
  const Space space;
  int const n = 60, k = 50, landmarks = 6;
  SWT_SEEDED_RNG(rng);
  auto const x = to_device2<T, Space>(random_batch(rng, 1, n, 2).v, n, 2,
                                      "swt::source_points");
  auto const y = to_device2<T, Space>(random_batch(rng, 1, k, 3).v, k, 3,
                                      "swt::target_points");
  Dev2<T, Space> zx("swt::zx", n, landmarks), zy("swt::zy", k, landmarks);
  softwave::GwResult<T, Space> result;
  result.plan = Dev2<T, Space>("swt::plan", n, k);
  result.matching = Dev1<int, Space>("swt::matching", n);
  softwave::GwOptions options;
  options.anchors = 8;
  options.max_iterations = 5;
  for (bool exact : {true, false}) {
    options.exact_objective_entries = exact ? std::int64_t(1) << 20 : 0;
    EXPECT_TRUE(labelled([&] {
      auto const gx =
          softwave::knn_graph(space, softwave::OTView2<const T, Space>(x), 5);
      auto const gy =
          softwave::knn_graph(space, softwave::OTView2<const T, Space>(y), 5);
      softwave::landmark_embedding(space, gx, zx);
      softwave::landmark_embedding(space, gy, zy);
      softwave::sampled_gw(space, softwave::GwDistances<T, Space>{{}, zx},
                           softwave::GwDistances<T, Space>{{}, zy}, {}, result,
                           options);
      softwave::GwDistances<T, Space> source, target;
      source.graph = &gx;
      target.graph = &gy;
      softwave::sampled_gw(space, source, target, {}, result, options);
    })) << (exact ? "exact objective" : "estimated objective");
  }
}

}  // namespace
