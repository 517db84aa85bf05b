// Picks the execution space from where the arrays live and calls softwave on
// unmanaged views of them. CPU arrays run on Kokkos' default host space; CUDA
// arrays on a Kokkos::Cuda instance bound to the caller's stream, kept for
// the life of the process because building one allocates (and destroying one
// frees) device memory.
#include "dispatch.hpp"

#include <Kokkos_Core.hpp>
#include <map>
#include <mutex>
#include <softwave/barycenter.hpp>
#include <softwave/deer.hpp>
#include <softwave/deer_ode.hpp>
#include <softwave/errors.hpp>
#include <softwave/gw.hpp>
#include <softwave/kokkos_compat.hpp>
#include <softwave/linear_recurrence.hpp>
#include <softwave/sinkhorn.hpp>
#include <softwave/softdtw.hpp>
#include <sstream>
#include <stdexcept>
#include <type_traits>
#include <utility>

namespace softwave::python {
namespace {

using impl::throw_invalid_argument;

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::float32:
      return "float32";
    case DType::float64:
      return "float64";
    case DType::bfloat16:
      return "bfloat16";
    case DType::float16:
      return "float16";
    case DType::int32:
      return "int32";
    case DType::int64:
      return "int64";
    default:
      return "an unsupported dtype";
  }
}

std::string device_name(const Borrowed& a) {
  if (a.device == Device::cpu) return "cpu";
  if (a.device == Device::cuda) return "cuda:" + std::to_string(a.device_id);
  return "an unsupported device";
}

std::string shape_text(const Borrowed& a) {
  std::ostringstream text;
  text << "(";
  for (std::size_t i = 0; i < a.shape.size(); ++i)
    text << (i ? ", " : "") << a.shape[i];
  text << (a.shape.size() == 1 ? ",)" : ")");
  return text.str();
}

void check_rank(const Borrowed& a, std::size_t rank, const char* layout) {
  if (a.given() && a.shape.size() != rank)
    throw_invalid_argument(a.name, " must have ", rank, " dimensions ", layout,
                           " (got shape ", shape_text(a), ")");
}

void check_dtype(const Borrowed& a, DType dtype) {
  if (a.given() && a.dtype != dtype)
    throw_invalid_argument(a.name, " must be ", dtype_name(dtype), " (got ",
                           dtype_name(a.dtype), ")");
}

// Every array of one call lives on the device of `first`.
void check_same_device(const Borrowed& first,
                       std::initializer_list<const Borrowed*> others) {
  for (const Borrowed* a : others)
    if (a->given() &&
        (a->device != first.device ||
         (a->device == Device::cuda && a->device_id != first.device_id)))
      throw_invalid_argument(a->name, " is on ", device_name(*a), " but ",
                             first.name, " is on ", device_name(first),
                             "; all arrays of a call must share a device");
}

// The enum value named `value` among `choices`; an argument error naming
// `name` and the accepted spellings otherwise.
template <class Enum>
Enum choice(const char* name, const std::string& value,
            std::initializer_list<std::pair<const char*, Enum>> choices) {
  std::string accepted;
  for (const auto& [spelling, e] : choices) {
    if (value == spelling) return e;
    accepted += (accepted.empty() ? "'" : ", '") + std::string(spelling) + "'";
  }
  throw_invalid_argument(name, " must be one of ", accepted, " (got '", value,
                         "')");
}

Kernel kernel_of(const std::string& name) {
  return choice<Kernel>("kernel", name,
                        {{"automatic", Kernel::automatic},
                         {"portable", Kernel::portable},
                         {"specialised", Kernel::specialised},
                         {"pairs", Kernel::pairs}});
}

SoftDTWOptions options_of(const Settings& s) {
  SoftDTWOptions options;
  options.gamma = s.gamma;
  options.cost = choice<Cost>("dist", s.cost,
                              {{"sqeuclidean", Cost::sqeuclidean},
                               {"l1", Cost::l1},
                               {"cosine", Cost::cosine}});
  if (s.band >= 0) options.band = s.band;
  options.kernel = kernel_of(s.kernel);
  options.check_values = s.check_values;
  return options;
}

// Unmanaged views over the borrowed memory (nothing is copied).
template <class T, class Space>
ArrayView3<T, Space> view3(const Borrowed& a) {
  if (!a.given()) return {};
  return ArrayView3<T, Space>(static_cast<T*>(a.data), a.shape[0], a.shape[1],
                              a.shape[2]);
}
template <class T, class Space>
ArrayView2<T, Space> view2(const Borrowed& a) {
  if (!a.given()) return {};
  return ArrayView2<T, Space>(static_cast<T*>(a.data), a.shape[0], a.shape[1]);
}
template <class T, class Space>
ArrayView1<T, Space> view1(const Borrowed& a) {
  if (!a.given()) return {};
  return ArrayView1<T, Space>(static_cast<T*>(a.data), a.shape[0]);
}

template <class Space>
Lengths<Space> lengths_of(const Borrowed& x, const Borrowed& y) {
  check_rank(x, 1, "(B,)");
  check_rank(y, 1, "(B,)");
  check_dtype(x, DType::int32);
  check_dtype(y, DType::int32);
  return {view1<const int, Space>(x), view1<const int, Space>(y)};
}

#ifdef KOKKOS_ENABLE_CUDA
// One Kokkos::Cuda per stream the caller has used (leaked on purpose: they
// are released in finalize(), before Kokkos, never by static destruction
// after the CUDA runtime is gone).
std::mutex cuda_instances_mutex;
std::map<std::uintptr_t, Kokkos::Cuda>& cuda_instances() {
  static auto* instances = new std::map<std::uintptr_t, Kokkos::Cuda>;
  return *instances;
}

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("softwave: ") + what + ": " +
                             cudaGetErrorString(status));
}

// Building a Kokkos::Cuda synchronises the device, which CUDA forbids while
// a stream is being captured into a graph. A stream first seen during a
// capture (torch.cuda.graph captures on a stream of its own) therefore runs
// on this instance, built on softwave's own stream at the first call made
// outside a capture, and joined to the caller's stream by events: the
// capture follows the fork and the join, so the graph holds the work.
struct CaptureHelper {
  Kokkos::Cuda instance;
  cudaStream_t stream = nullptr;
  cudaEvent_t fork = nullptr, join = nullptr;
};
CaptureHelper* capture_helper = nullptr;  // guarded by cuda_instances_mutex

void make_capture_helper() {
  if (capture_helper) return;
  auto* helper = new CaptureHelper;
  check_cuda(cudaStreamCreateWithFlags(&helper->stream, cudaStreamNonBlocking),
             "creating a stream");
  check_cuda(cudaEventCreateWithFlags(&helper->fork, cudaEventDisableTiming),
             "creating an event");
  check_cuda(cudaEventCreateWithFlags(&helper->join, cudaEventDisableTiming),
             "creating an event");
  helper->instance = Kokkos::Cuda(helper->stream);
  capture_helper = helper;
}

// Whether work on the caller's stream is being captured into a CUDA graph
// (stream 0, the legacy stream, never is).
bool capturing(std::uintptr_t stream) {
  if (stream == 0) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  check_cuda(
      cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &status),
      "querying the stream's capture status");
  return status != cudaStreamCaptureStatusNone;
}

// Calls run(instance) with the Kokkos::Cuda for the caller's stream.
template <class Run>
void on_cuda_stream(std::uintptr_t stream, Run&& run) {
  if (stream == 0) return run(Kokkos::Cuda());  // Kokkos' default: stream 0
  auto const caller = reinterpret_cast<cudaStream_t>(stream);
  std::unique_lock<std::mutex> lock(cuda_instances_mutex);
  auto& instances = cuda_instances();
  auto found = instances.find(stream);
  if (found != instances.end()) {
    Kokkos::Cuda const instance = found->second;
    lock.unlock();
    return run(instance);
  }
  if (!capturing(stream)) {
    make_capture_helper();
    Kokkos::Cuda const instance =
        instances.emplace(stream, Kokkos::Cuda(caller)).first->second;
    lock.unlock();
    return run(instance);
  }
  if (!capture_helper)
    throw std::runtime_error(
        "softwave: the process's first CUDA call on this device is inside a "
        "CUDA-graph capture; call softwave once before capturing (a warm-up "
        "run, as torch.cuda.graphs asks for)");
  // The helper's stream serves one capture at a time: the lock stays held.
  check_cuda(cudaEventRecord(capture_helper->fork, caller), "forking");
  check_cuda(cudaStreamWaitEvent(capture_helper->stream, capture_helper->fork),
             "forking");
  run(capture_helper->instance);
  check_cuda(cudaEventRecord(capture_helper->join, capture_helper->stream),
             "joining");
  check_cuda(cudaStreamWaitEvent(caller, capture_helper->join), "joining");
}
#endif

// Whether initialize() started Kokkos (and so finalize() may end it).
bool kokkos_started_here = false;

// Whether an entry point takes 16-bit inputs (the Soft-DTW ones do; the
// barycenter optimiser works in float32 or float64).
enum class Halves { accepted, refused };

// Calls run(space, T{}) with the execution space the arrays live on and
// their float type, after checking that `first` is a float array and the
// others share its device.
template <class Run>
void with_space(const Settings& settings, const Borrowed& first,
                std::initializer_list<const Borrowed*> others, Halves halves,
                Run&& run) {
  check_same_device(first, others);
  bool const half =
      first.dtype == DType::bfloat16 || first.dtype == DType::float16;
  if (first.dtype != DType::float32 && first.dtype != DType::float64 &&
      !(half && halves == Halves::accepted))
    throw_invalid_argument(first.name, " must be ",
                           halves == Halves::accepted
                               ? "float32, float64, bfloat16 or float16"
                               : "float32 or float64",
                           " (got ", dtype_name(first.dtype), ")");
  auto run_typed = [&](const auto& space) {
    switch (first.dtype) {
      case DType::float32:
        return run(space, float{});
      case DType::float64:
        return run(space, double{});
      case DType::bfloat16:
        return run(space, bfloat16{});
      default:
        return run(space, float16{});
    }
  };
  // Any thread may call (a Python thread, XLA's CPU threads for JAX).
  compat::HostThreadGuard const host_thread(first.device == Device::cpu);
  if (first.device == Device::cpu) {
    run_typed(Kokkos::DefaultHostExecutionSpace());
    return;
  }
  if (first.device == Device::cuda) {
#ifdef KOKKOS_ENABLE_CUDA
    if (first.device_id != cuda_device())
      throw_invalid_argument(
          first.name, " is on ", device_name(first),
          " but softwave's Kokkos runs on cuda:", cuda_device(),
          " (set CUDA_VISIBLE_DEVICES, or move the arrays)");
    on_cuda_stream(settings.stream, run_typed);
    return;
#else
    throw_invalid_argument(first.name, " is on ", device_name(first),
                           " but this softwave was built without CUDA (",
                           default_space(), "); move the arrays to the CPU");
#endif
  }
  throw_invalid_argument(first.name, " is on ", device_name(first),
                         "; softwave takes CPU and CUDA arrays");
}

// with_space for entry points that take float32 or float64 only: run is
// instantiated for those two types alone.
template <class Run>
void with_float_space(const Settings& settings, const Borrowed& first,
                      std::initializer_list<const Borrowed*> others,
                      Run&& run) {
  with_space(settings, first, others, Halves::refused,
             [&](const auto& space, auto zero) {
               if constexpr (!is_half_v<decltype(zero)>) run(space, zero);
             });
}

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::float32;
  if constexpr (std::is_same_v<T, double>) return DType::float64;
  if constexpr (std::is_same_v<T, bfloat16>) return DType::bfloat16;
  return DType::float16;
}

// `same` share first's float type T; `values` (values, grad_output,
// matrices) have type value_t<T>: float32 for 16-bit inputs, else T.
template <class T>
void check_float(const Borrowed& first,
                 std::initializer_list<const Borrowed*> same,
                 std::initializer_list<const Borrowed*> values = {}) {
  const DType dtype = dtype_of<T>(), value_dtype = dtype_of<value_t<T>>();
  for (const Borrowed* a : same)
    if (a->given() && a->dtype != dtype)
      throw_invalid_argument(a->name, " is ", dtype_name(a->dtype), " but ",
                             first.name, " is ", dtype_name(dtype),
                             "; the arrays of a call share one float type");
  for (const Borrowed* a : values)
    if (a->given() && a->dtype != value_dtype)
      throw_invalid_argument(a->name, " is ", dtype_name(a->dtype), " but ",
                             first.name, " is ", dtype_name(dtype), ", so ",
                             a->name, " must be ", dtype_name(value_dtype));
}

}  // namespace

void soft_dtw(const Settings& settings, const Borrowed& x, const Borrowed& y,
              const Borrowed& values, const Borrowed& grad_x,
              const Borrowed& grad_y, const Borrowed& alignment,
              const Borrowed& grad_output, const Borrowed& lengths_x,
              const Borrowed& lengths_y, bool divergence) {
  const SoftDTWOptions options = options_of(settings);
  check_rank(x, 3, "(B, N, d)");
  check_rank(y, 3, "(B, M, d)");
  check_rank(values, 1, "(B,)");
  check_rank(grad_x, 3, "(B, N, d)");
  check_rank(grad_y, 3, "(B, M, d)");
  check_rank(alignment, 3, "(B, N, M)");
  check_rank(grad_output, 1, "(B,)");
  with_space(settings, x,
             {&y, &values, &grad_x, &grad_y, &alignment, &grad_output,
              &lengths_x, &lengths_y},
             Halves::accepted, [&](const auto& space, auto zero) {
               using Space = std::decay_t<decltype(space)>;
               using T = decltype(zero);
               using V = value_t<T>;
               check_float<T>(x, {&y, &grad_x, &grad_y, &alignment},
                              {&values, &grad_output});
               const auto lengths = lengths_of<Space>(lengths_x, lengths_y);
               const auto xv = view3<const T, Space>(x);
               const auto yv = view3<const T, Space>(y);
               const auto out = view1<V, Space>(values);
               const bool backward =
                   grad_x.given() || grad_y.given() || alignment.given();
               SeriesGradients<T, Space> gradients{
                   view3<T, Space>(grad_x), view3<T, Space>(grad_y),
                   view3<T, Space>(alignment),
                   view1<const V, Space>(grad_output)};
               if (divergence)
                 impl::soft_dtw_divergence<Space, T>(
                     space, xv, yv, out, backward ? &gradients : nullptr,
                     options, lengths);
               else
                 impl::soft_dtw<Space, T>(space, xv, yv, out,
                                          backward ? &gradients : nullptr,
                                          options, lengths);
             });
}

void soft_dtw_cost(const Settings& settings, const Borrowed& cost,
                   const Borrowed& values, const Borrowed& grad_cost,
                   const Borrowed& grad_output, const Borrowed& lengths_x,
                   const Borrowed& lengths_y) {
  const SoftDTWOptions options = options_of(settings);
  check_rank(cost, 3, "(B, N, M)");
  check_rank(values, 1, "(B,)");
  check_rank(grad_cost, 3, "(B, N, M)");
  check_rank(grad_output, 1, "(B,)");
  with_space(settings, cost,
             {&values, &grad_cost, &grad_output, &lengths_x, &lengths_y},
             Halves::accepted, [&](const auto& space, auto zero) {
               using Space = std::decay_t<decltype(space)>;
               using T = decltype(zero);
               using V = value_t<T>;
               check_float<T>(cost, {&grad_cost}, {&values, &grad_output});
               CostGradients<T, Space> gradients{
                   view3<T, Space>(grad_cost),
                   view1<const V, Space>(grad_output)};
               impl::soft_dtw_cost<Space, T>(
                   space, view3<const T, Space>(cost), view1<V, Space>(values),
                   grad_cost.given() ? &gradients : nullptr, options,
                   lengths_of<Space>(lengths_x, lengths_y));
             });
}

void pairwise(const Settings& settings, const Borrowed& x, const Borrowed& y,
              const Borrowed& matrix, const Borrowed& lengths_x,
              const Borrowed& lengths_y, bool divergence) {
  const SoftDTWOptions options = options_of(settings);
  check_rank(x, 3, "(B1, N, d)");
  check_rank(y, 3, "(B2, M, d)");
  check_rank(matrix, 2, "(B1, B2)");
  with_space(
      settings, x, {&y, &matrix, &lengths_x, &lengths_y}, Halves::accepted,
      [&](const auto& space, auto zero) {
        using Space = std::decay_t<decltype(space)>;
        using T = decltype(zero);
        check_float<T>(x, {&y}, {&matrix});
        impl::pairwise<Space, T>(
            space, view3<const T, Space>(x), view3<const T, Space>(y),
            view2<value_t<T>, Space>(matrix),
            divergence ? PairwiseValue::divergence : PairwiseValue::soft_dtw,
            options, lengths_of<Space>(lengths_x, lengths_y));
      });
}

std::map<std::string, std::int64_t> nearest_neighbours(
    const Settings& settings, const Borrowed& queries,
    const Borrowed& references, const Borrowed& indices,
    const Borrowed& distances, const Borrowed& lengths_x,
    const Borrowed& lengths_y) {
  const SoftDTWOptions options = options_of(settings);
  check_rank(queries, 3, "(B1, N, d)");
  check_rank(references, 3, "(B2, M, d)");
  check_rank(indices, 2, "(B1, k)");
  check_rank(distances, 2, "(B1, k)");
  check_dtype(indices, DType::int64);
  SearchStatistics counts;
  with_float_space(settings, queries,
                   {&references, &indices, &distances, &lengths_x, &lengths_y},
                   [&](const auto& space, auto zero) {
                     using Space = std::decay_t<decltype(space)>;
                     using T = decltype(zero);
                     check_float<T>(queries, {&references}, {&distances});
                     impl::nearest_neighbours<Space, T>(
                         space, view3<const T, Space>(queries),
                         view3<const T, Space>(references),
                         view2<std::int64_t, Space>(indices),
                         view2<value_t<T>, Space>(distances), options,
                         lengths_of<Space>(lengths_x, lengths_y), &counts);
                   });
  return {{"pairs", counts.pairs},
          {"pruned", counts.pruned},
          {"pruned_reverse", counts.pruned_reverse},
          {"abandoned", counts.abandoned},
          {"completed", counts.completed}};
}

void dtw_path(const Settings& settings, const Borrowed& x, const Borrowed& y,
              const Borrowed& values, const Borrowed& path,
              const Borrowed& path_length, const Borrowed& lengths_x,
              const Borrowed& lengths_y) {
  const SoftDTWOptions options = options_of(settings);
  check_rank(x, 3, "(B, N, d)");
  check_rank(y, 3, "(B, M, d)");
  check_rank(values, 1, "(B,)");
  check_rank(path, 3, "(B, N + M - 1, 2)");
  check_rank(path_length, 1, "(B,)");
  check_dtype(path, DType::int32);
  check_dtype(path_length, DType::int32);
  with_space(settings, x,
             {&y, &values, &path, &path_length, &lengths_x, &lengths_y},
             Halves::accepted, [&](const auto& space, auto zero) {
               using Space = std::decay_t<decltype(space)>;
               using T = decltype(zero);
               check_float<T>(x, {&y}, {&values});
               impl::dtw_path<Space, T>(
                   space, view3<const T, Space>(x), view3<const T, Space>(y),
                   view1<value_t<T>, Space>(values), view3<int, Space>(path),
                   view1<int, Space>(path_length), options,
                   lengths_of<Space>(lengths_x, lengths_y));
             });
}

BarycenterResult barycenter(const Settings& settings,
                            const BarycenterSettings& optimiser,
                            const Borrowed& X, const Borrowed& z,
                            const Borrowed& weights, const Borrowed& lengths) {
  BarycenterOptions options;
  options.softdtw = options_of(settings);
  options.method = choice<BarycenterMethod>(
      "method", optimiser.method,
      {{"lbfgs", BarycenterMethod::lbfgs}, {"adam", BarycenterMethod::adam}});
  options.max_iter = optimiser.max_iter;
  options.tol = optimiser.tol;
  options.history = optimiser.history;
  options.learning_rate = optimiser.learning_rate;
  check_rank(X, 3, "(B, N, d)");
  check_rank(z, 2, "(L, d)");
  check_rank(weights, 1, "(B,)");
  check_rank(lengths, 1, "(B,)");
  check_dtype(lengths, DType::int32);
  BarycenterReport report;
  with_float_space(
      settings, X, {&z, &weights, &lengths}, [&](const auto& space, auto zero) {
        using Space = std::decay_t<decltype(space)>;
        using T = decltype(zero);
        check_float<T>(X, {&z, &weights});
        report = softwave::barycenter(
            space, view3<const T, Space>(X), view2<T, Space>(z), options,
            view1<const T, Space>(weights), view1<const int, Space>(lengths));
      });
  return {report.iterations, report.evaluations, report.objective,
          report.converged};
}

namespace {

SinkhornOptions sinkhorn_options_of(const OTSettings& s) {
  SinkhornOptions o;
  o.epsilon = s.epsilon;
  o.epsilon_relative = s.epsilon_relative;
  o.epsilon_scaling = s.epsilon_scaling;
  o.rho_a = s.rho_a;
  o.rho_b = s.rho_b;
  o.max_iterations = s.max_iterations;
  o.tolerance = s.tolerance;
  o.check_every = s.check_every;
  o.warm_start = s.warm_start;
  o.check_values = s.check_values;
  o.kernel = kernel_of(s.kernel);
  return o;
}

// The named array of a call, or an absent one.
const Borrowed& array(const OTArrays& arrays, const char* name) {
  static const Borrowed absent;
  auto const found = arrays.find(name);
  return found == arrays.end() ? absent : found->second;
}

// Runs run(form) with the call's cost form in Space's views of T.
template <class Space, class T, class Run>
void with_form(const OTArrays& arrays, const OTSettings& settings, Run&& run) {
  auto const& cost = array(arrays, "cost");
  auto const& p = array(arrays, "p");
  if (cost.given()) {
    check_rank(cost, 3, "(B, N, K)");
    return run(CostMatrix<T, Space>{view3<const T, Space>(cost)});
  }
  if (p.given()) {
    auto const &q = array(arrays, "q"), &u = array(arrays, "u"),
               &v = array(arrays, "v");
    check_rank(p, 3, "(B, N, r)");
    check_rank(q, 3, "(B, K, r)");
    check_rank(u, 2, "(B, N)");
    check_rank(v, 2, "(B, K)");
    if (!q.given()) throw_invalid_argument("q is required with p");
    return run(LowRankCost<T, Space>{
        view2<const T, Space>(u), view2<const T, Space>(v),
        view3<const T, Space>(p), view3<const T, Space>(q)});
  }
  auto const &x = array(arrays, "x"), &y = array(arrays, "y");
  check_rank(x, 3, "(B, N, d)");
  check_rank(y, 3, "(B, K, d)");
  if (!x.given() || !y.given())
    throw_invalid_argument(
        "give x and y (point clouds), cost (a cost matrix) or p and q (a "
        "low-rank cost)");
  return run(PointClouds<T, Space>{
      view3<const T, Space>(x), view3<const T, Space>(y),
      choice<PointCost>("cost", settings.cost,
                        {{"sqeuclidean", PointCost::sqeuclidean},
                         {"half_sqeuclidean", PointCost::half_sqeuclidean}})});
}

// One call of optimal_transport() on Space with float type T.
template <class Space, class T>
void run_optimal_transport(const Space& space, const std::string& operation,
                           const OTSettings& settings,
                           const SinkhornOptions& options,
                           const OTArrays& arrays) {
  auto const v1 = [&](const char* n) {
    return view1<T, Space>(array(arrays, n));
  };
  auto const v2 = [&](const char* n) {
    return view2<T, Space>(array(arrays, n));
  };
  auto const v3 = [&](const char* n) {
    return view3<T, Space>(array(arrays, n));
  };
  auto const i1 = [&](const char* n) {
    return view1<int, Space>(array(arrays, n));
  };
  Marginals<T, Space> const marginals{
      view2<const T, Space>(array(arrays, "a")),
      view2<const T, Space>(array(arrays, "b"))};
  auto const f = view2<const T, Space>(array(arrays, "f"));
  auto const g = view2<const T, Space>(array(arrays, "g"));
  SinkhornGradients<T, Space> const grads{
      v3("grad_x"),    v3("grad_y"),
      v3("grad_cost"), v2("grad_u"),
      v2("grad_v"),    v3("grad_p"),
      v3("grad_q"),    v2("grad_a"),
      v2("grad_b"),    view1<const T, Space>(array(arrays, "grad_output"))};
  if (operation == "divergence") {
    auto const& x = array(arrays, "x");
    if (!x.given())
      throw_invalid_argument("the Sinkhorn divergence takes point clouds x, y");
    with_form<Space, T>(arrays, settings, [&](const auto& form) {
      if constexpr (std::is_same_v<std::decay_t<decltype(form)>,
                                   PointClouds<T, Space>>) {
        bool const backward = grads.grad_x.size() || grads.grad_y.size() ||
                              grads.grad_a.size() || grads.grad_b.size();
        impl::sinkhorn_divergence<Space, T>(
            space, form, marginals, v1("values"), backward ? &grads : nullptr,
            options, i1("converged"));
      }
    });
    return;
  }
  with_form<Space, T>(arrays, settings, [&](const auto& form) {
    using Form = std::decay_t<decltype(form)>;
    if (operation == "solve") {
      SinkhornResult<T, Space> const result{v2("f"),
                                            v2("g"),
                                            v1("value"),
                                            v1("transport_cost"),
                                            v2("marginal_error"),
                                            i1("iterations"),
                                            i1("converged")};
      impl::sinkhorn<Space, T, Form>(space, form, marginals, result, options);
    } else if (operation == "gradients") {
      impl::sinkhorn_gradients<Space, T, Form>(space, form, marginals, f, g,
                                               grads, options);
    } else if (operation == "queries") {
      PlanQueries<T, Space> queries;
      queries.v = view3<const T, Space>(array(arrays, "v_apply"));
      queries.plan_v = v3("plan_v");
      queries.u = view3<const T, Space>(array(arrays, "u_apply"));
      queries.plan_t_u = v3("plan_t_u");
      queries.row_argmax = view2<int, Space>(array(arrays, "row_argmax"));
      queries.row_samples = view3<int, Space>(array(arrays, "row_samples"));
      queries.seed = settings.seed;
      queries.plan = v3("plan");
      impl::sinkhorn_plan_queries<Space, T, Form>(space, form, marginals, f, g,
                                                  queries, options);
    } else {
      throw_invalid_argument(
          "operation must be solve, gradients, queries "
          "or divergence (got '",
          operation, "')");
    }
  });
}

}  // namespace

void optimal_transport(const std::string& operation, const OTSettings& settings,
                       const OTArrays& arrays) {
  const SinkhornOptions options = sinkhorn_options_of(settings);
  // The first data array sets the space and the float type.
  const Borrowed* first = nullptr;
  for (const char* name : {"x", "cost", "p"})
    if (array(arrays, name).given()) {
      first = &array(arrays, name);
      break;
    }
  if (!first)
    throw_invalid_argument(
        "give x and y (point clouds), cost (a cost matrix) or p and q (a "
        "low-rank cost)");
  std::vector<const Borrowed*> others, floats, ints;
  for (const auto& [name, a] : arrays) {
    if (&a == first || !a.given()) continue;
    others.push_back(&a);
    bool const integer = name == "iterations" || name == "converged" ||
                         name == "row_argmax" || name == "row_samples";
    (integer ? ints : floats).push_back(&a);
  }
  for (const Borrowed* a : ints) check_dtype(*a, DType::int32);
  Settings space_settings;
  space_settings.stream = settings.stream;
  for (const Borrowed* a : others) check_same_device(*first, {a});
  with_float_space(space_settings, *first, {},
                   [&](const auto& space, auto zero) {
                     using Space = std::decay_t<decltype(space)>;
                     using T = decltype(zero);
                     for (const Borrowed* a : floats)
                       check_float<T>(*first, {a});
                     run_optimal_transport<Space, T>(space, operation, settings,
                                                     options, arrays);
                   });
}

namespace {

GwOptions gw_options_of(const GwSettings& s) {
  GwOptions o;
  o.anchors = s.anchors;
  o.shortest_paths =
      choice<ShortestPaths>("shortest_paths", s.shortest_paths,
                            {{"automatic", ShortestPaths::automatic},
                             {"host", ShortestPaths::host_dijkstra},
                             {"device", ShortestPaths::device}});
  o.alpha = s.alpha;
  o.max_iterations = s.max_iterations;
  o.min_iterations = s.min_iterations;
  o.tolerance = s.tolerance;
  o.check_every = s.check_every;
  o.check_rows = s.check_rows;
  o.epsilon = s.epsilon;
  o.rho_a = s.rho_a;
  o.rho_b = s.rho_b;
  o.sinkhorn_iterations = s.sinkhorn_iterations;
  o.sinkhorn_tolerance = s.sinkhorn_tolerance;
  o.early_sinkhorn_iterations = s.early_sinkhorn_iterations;
  o.mixed_precision = s.mixed_precision;
  o.seed = s.seed;
  o.restarts = s.restarts;
  o.restart_iterations = s.restart_iterations;
  o.fused_alpha = s.fused_alpha;
  o.cost_ema_beta = s.cost_ema_beta;
  o.exact_iterations = s.exact_iterations;
  o.polish_anchors = s.polish_anchors;
  o.coupling_rank = s.coupling_rank;
  o.coupling_step = s.coupling_step;
  o.coupling_iterations = s.coupling_iterations;
  o.dykstra_iterations = s.dykstra_iterations;
  o.dykstra_tolerance = s.dykstra_tolerance;
  o.exact_objective_entries = s.exact_objective_entries;
  o.dense_cost_entries = s.dense_cost_entries;
  o.objective_samples = s.objective_samples;
  o.warm_start = s.warm_start;
  o.check_values = s.check_values;
  o.kernel = kernel_of(s.kernel);
  return o;
}

// A call's named arrays on first's device: the int32 ones by name, every
// other one of first's float type; then run(space, T()) on the space of
// first's device and type, on `stream`.
template <class Run>
void with_named_arrays(const Borrowed& first, const OTArrays& arrays,
                       std::initializer_list<const char*> int32_names,
                       std::uintptr_t stream, const Run& run) {
  Settings space_settings;
  space_settings.stream = stream;
  std::vector<const Borrowed*> floats;
  for (const auto& [name, a] : arrays) {
    if (&a == &first || !a.given()) continue;
    check_same_device(first, {&a});
    bool integer = false;
    for (const char* n : int32_names) integer = integer || name == n;
    if (integer)
      check_dtype(a, DType::int32);
    else
      floats.push_back(&a);
  }
  with_float_space(space_settings, first, {},
                   [&](const auto& space, auto zero) {
                     for (const Borrowed* a : floats)
                       check_float<decltype(zero)>(first, {a});
                     run(space, zero);
                   });
}

template <class Space, class T>
GwReport run_gw(const Space& space, const GwSettings& s,
                const OTArrays& arrays) {
  using Mode = GwDistanceMode;
  Mode const mode = choice<Mode>("distance_mode", s.distance_mode,
                                 {{"precomputed", Mode::precomputed},
                                  {"euclidean", Mode::euclidean},
                                  {"landmark", Mode::landmark},
                                  {"dijkstra", Mode::dijkstra},
                                  {"geodesic", Mode::geodesic},
                                  {"sqeuclidean", Mode::sqeuclidean},
                                  {"cosine", Mode::cosine}});
  auto const &source = array(arrays, "source"),
             &target = array(arrays, "target");
  char const* shape = mode == Mode::precomputed ? "(N, N)" : "(N, d)";
  check_rank(source, 2, shape);
  check_rank(target, 2, shape);
  check_rank(array(arrays, "a"), 1, "(N,)");
  check_rank(array(arrays, "b"), 1, "(K,)");
  check_rank(array(arrays, "linear"), 2, "(N, K)");
  check_rank(array(arrays, "source_features"), 2, "(N, e)");
  check_rank(array(arrays, "target_features"), 2, "(K, e)");
  check_rank(array(arrays, "plan"), 2, "(N, K)");
  check_rank(array(arrays, "last_plan"), 2, "(N, K)");
  check_rank(array(arrays, "matching"), 1, "(N,)");
  check_rank(array(arrays, "source_points"), 2, "(N, d)");
  check_rank(array(arrays, "target_points"), 2, "(K, d)");
  if (!source.given() || !target.given())
    throw_invalid_argument("give both the source and the target");
  GwOptions options = gw_options_of(s);
  GwSide<T, Space> const x(space, view2<const T, Space>(source), mode, s.k,
                           s.n_landmarks, options.shortest_paths),
      y(space, view2<const T, Space>(target), mode, s.k, s.n_landmarks,
        options.shortest_paths);
  GwMarginals<T, Space> const marginals{
      view1<const T, Space>(array(arrays, "a")),
      view1<const T, Space>(array(arrays, "b"))};
  GwLinearCost<T, Space> const linear{
      view2<const T, Space>(array(arrays, "linear")),
      view2<const T, Space>(array(arrays, "source_features")),
      view2<const T, Space>(array(arrays, "target_features"))};
  GwResult<T, Space> result;
  result.plan = view2<T, Space>(array(arrays, "plan"));
  result.matching = view1<int, Space>(array(arrays, "matching"));
  result.last_plan = view2<T, Space>(array(arrays, "last_plan"));
  result.compute_objective = s.compute_objective;
  if (s.multiscale_points != 0) {
    if (result.plan.size() == 0)  // the warm start needs a plan to read
      result.plan = OTView2<T, Space>(
          Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                             std::string("softwave::python::gw_start")),
          source.shape[0], target.shape[0]);
    softwave::multiscale_start(
        space, view2<const T, Space>(source), view2<const T, Space>(target),
        mode, s.k, s.n_landmarks, linear, marginals, options,
        s.multiscale_points > 0
            ? s.multiscale_points
            : default_coarse_points(source.shape[0], target.shape[0]),
        result.plan, view2<const T, Space>(array(arrays, "source_points")),
        view2<const T, Space>(array(arrays, "target_points")));
    options.warm_start = true;
  }
  softwave::sampled_gw(space, x.distances(), y.distances(), linear, marginals,
                       result, options);
  GwReport r;
  r.iterations = result.iterations;
  r.converged = result.converged;
  r.seed = result.seed;
  r.objective = result.objective;
  r.objective_error = result.objective_error;
  r.linear_objective = result.linear_objective;
  r.linear_objective_error = result.linear_objective_error;
  r.last_change = result.last_change;
  r.source_scale = result.source_scale;
  r.target_scale = result.target_scale;
  r.final_epsilon = result.final_epsilon;
  r.dense_solves = result.dense_solves;
  r.polish_anchors = result.polish_anchors;
  r.last_plan_weight = result.last_plan_weight;
  r.changes = result.changes;
  r.restart_objectives = result.restart_objectives;
  r.source_anchors = result.source_anchors;
  r.target_anchors = result.target_anchors;
  r.joined_components = x.joined_components() + y.joined_components();
  return r;
}

}  // namespace

GwReport gromov_wasserstein(const GwSettings& settings,
                            const OTArrays& arrays) {
  auto const& first = array(arrays, "source");
  if (!first.given())
    throw_invalid_argument("give both the source and the target");
  GwReport report;
  with_named_arrays(first, arrays, {"matching"}, settings.stream,
                    [&](const auto& space, auto zero) {
                      using Space = std::decay_t<decltype(space)>;
                      report = run_gw<Space, decltype(zero)>(space, settings,
                                                             arrays);
                    });
  return report;
}

PlanVjpReport plan_vjp(const OTSettings& settings, const std::string& mode,
                       int iterations, double tolerance,
                       const OTArrays& arrays) {
  auto const& plan = array(arrays, "plan");
  if (!plan.given()) throw_invalid_argument("give the plan");
  PlanVjpOptions vjp;
  vjp.mode = choice<PlanDerivative>("grad_mode", mode,
                                    {{"implicit", PlanDerivative::implicit},
                                     {"unrolled", PlanDerivative::unrolled}});
  vjp.iterations = iterations;
  vjp.tolerance = tolerance;
  vjp.check_values = settings.check_values;
  SinkhornOptions const options = sinkhorn_options_of(settings);
  PlanVjpReport report;
  for (const char* name : {"plan", "grad_plan", "grad_cost"})
    check_rank(array(arrays, name), 3, "(B, N, K)");
  with_named_arrays(
      plan, arrays, {}, settings.stream, [&](const auto& space, auto zero) {
        using Space = std::decay_t<decltype(space)>;
        using T = decltype(zero);
        auto const r = softwave::sinkhorn_plan_vjp(
            space, view3<const T, Space>(plan),
            view3<const T, Space>(array(arrays, "grad_plan")),
            view3<T, Space>(array(arrays, "grad_cost")), options, vjp);
        report.iterations = r.iterations;
        report.residual = r.residual;
        report.converged = r.converged;
      });
  return report;
}

KnnGraphReport knn_graph(const OTArrays& arrays, int k, std::uintptr_t stream) {
  auto const& points = array(arrays, "points");
  if (!points.given()) throw_invalid_argument("give the points");
  check_rank(points, 2, "(N, d)");
  KnnGraphReport report;
  with_named_arrays(
      points, arrays, {}, stream, [&](const auto& space, auto zero) {
        using Space = std::decay_t<decltype(space)>;
        using T = decltype(zero);
        Graph graph =
            softwave::knn_graph(space, view2<const T, Space>(points), k);
        report.offsets = std::move(graph.offsets);
        report.targets = std::move(graph.targets);
        report.lengths = std::move(graph.lengths);
        report.joined_components = graph.joined_components;
      });
  return report;
}

namespace {

DeerOptions deer_options(const DeerSettings& s) {
  DeerOptions options;
  options.method = choice<DeerMethod>("method", s.method,
                                      {{"auto", DeerMethod::automatic},
                                       {"deer", DeerMethod::deer},
                                       {"sequential", DeerMethod::sequential}});
  options.jacobian = choice<DeerJacobian>("jacobian", s.jacobian,
                                          {{"full", DeerJacobian::full},
                                           {"diagonal", DeerJacobian::diagonal},
                                           {"block", DeerJacobian::block}});
  if (s.atol_given) options.atol = s.atol;
  if (s.rtol_given) options.rtol = s.rtol;
  options.kernel = kernel_of(s.kernel);
  options.max_iterations = s.max_iterations;
  options.chunk = s.chunk;
  if (s.start_warm_up >= 0) options.start_warm_up = s.start_warm_up;
  options.damping = s.damping;
  options.block_size = s.block_size;
  options.block_layout =
      choice<DeerBlockLayout>("block_layout", s.block_layout,
                              {{"contiguous", DeerBlockLayout::contiguous},
                               {"strided", DeerBlockLayout::strided}});
  options.warm_start = s.warm_start;
  options.check_values = s.check_values;
  options.check_every = s.check_every;
  return options;
}

// The neural ODE's weights (softwave/deer_ode.hpp), or their gradients'
// arrays with prefix "grad_".
template <class Weights, class T, class Space>
Weights neural_ode_arrays(const OTArrays& arrays, const std::string& prefix) {
  Weights w;
  w.weight_hidden =
      view2<T, Space>(array(arrays, (prefix + "weight_hidden").c_str()));
  w.bias_hidden =
      view1<T, Space>(array(arrays, (prefix + "bias_hidden").c_str()));
  w.weight_out =
      view2<T, Space>(array(arrays, (prefix + "weight_out").c_str()));
  w.bias_out = view1<T, Space>(array(arrays, (prefix + "bias_out").c_str()));
  return w;
}

template <class Space, class T>
void run_neural_ode(const Space& space, const std::string& operation,
                    const DeerOptions& options, const OTArrays& arrays,
                    const DeerInputs<T, Space>& inputs) {
  check_rank(array(arrays, "weight_hidden"), 2,
             "(hidden size, state size + input size)");
  check_rank(array(arrays, "weight_out"), 2, "(state size, hidden size)");
  auto const weights =
      neural_ode_arrays<NeuralOdeWeights<T, Space>, const T, Space>(arrays, "");
  if (operation == "forward") {
    DeerResult<T, Space> result;
    result.y = view3<T, Space>(array(arrays, "y"));
    result.iterations = view1<int, Space>(array(arrays, "iterations"));
    result.path = view1<int, Space>(array(arrays, "path"));
    softwave::deer_neural_ode(space, weights, inputs, result, options);
    return;
  }
  DeerGradients<T, Space> g;
  g.grad_y = view3<const T, Space>(array(arrays, "grad_y"));
  g.grad_x = view3<T, Space>(array(arrays, "grad_x"));
  g.grad_y0 = view2<T, Space>(array(arrays, "grad_y0"));
  softwave::deer_neural_ode_gradients(
      space, weights, inputs, view3<const T, Space>(array(arrays, "y")), g,
      neural_ode_arrays<NeuralOdeWeightGradients<T, Space>, T, Space>(arrays,
                                                                      "grad_"),
      options);
}

template <class Space, class T>
void run_deer(const Space& space, const std::string& operation,
              const DeerSettings& s, const OTArrays& arrays) {
  auto const& x = array(arrays, "x");
  check_rank(x, 3, "(B, T, m)");
  check_rank(array(arrays, "y0"), 2, "(B, n)");
  check_rank(array(arrays, "y"), 3, "(B, T, n)");
  if (operation != "forward" && operation != "gradients")
    throw_invalid_argument("unknown DEER operation '", operation, "'");
  DeerInputs<T, Space> inputs;
  inputs.x = view3<const T, Space>(x);
  inputs.y0 = view2<const T, Space>(array(arrays, "y0"));
  inputs.lengths = view1<const int, Space>(array(arrays, "lengths"));
  DeerOptions const options = deer_options(s);
  if (s.cell == "neural_ode") {
    run_neural_ode(space, operation, options, arrays, inputs);
    return;
  }
  check_rank(array(arrays, "weight_ih"), 2, "(G*H, m)");
  check_rank(array(arrays, "weight_hh"), 2,
             s.diagonal ? "(G*H, 1)" : "(G*H, H)");
  RnnWeights<T, Space> weights;
  weights.cell = choice<RnnCell>("cell", s.cell,
                                 {{"elman", RnnCell::elman},
                                  {"gru", RnnCell::gru},
                                  {"lstm", RnnCell::lstm},
                                  {"cifg_lstm", RnnCell::cifg_lstm}});
  weights.weight_ih = view2<const T, Space>(array(arrays, "weight_ih"));
  weights.weight_hh = view2<const T, Space>(array(arrays, "weight_hh"));
  weights.bias_ih = view1<const T, Space>(array(arrays, "bias_ih"));
  weights.bias_hh = view1<const T, Space>(array(arrays, "bias_hh"));
  weights.peephole = view1<const T, Space>(array(arrays, "peephole"));
  weights.diagonal_hh = s.diagonal;
  if (operation == "forward") {
    DeerResult<T, Space> result;
    result.y = view3<T, Space>(array(arrays, "y"));
    result.iterations = view1<int, Space>(array(arrays, "iterations"));
    result.path = view1<int, Space>(array(arrays, "path"));
    softwave::deer_rnn(space, weights, inputs, result, options);
    return;
  }
  DeerGradients<T, Space> g;
  g.grad_y = view3<const T, Space>(array(arrays, "grad_y"));
  g.grad_x = view3<T, Space>(array(arrays, "grad_x"));
  g.grad_y0 = view2<T, Space>(array(arrays, "grad_y0"));
  RnnWeightGradients<T, Space> wg;
  wg.weight_ih = view2<T, Space>(array(arrays, "grad_weight_ih"));
  wg.weight_hh = view2<T, Space>(array(arrays, "grad_weight_hh"));
  wg.bias_ih = view1<T, Space>(array(arrays, "grad_bias_ih"));
  wg.bias_hh = view1<T, Space>(array(arrays, "grad_bias_hh"));
  wg.peephole = view1<T, Space>(array(arrays, "grad_peephole"));
  softwave::deer_rnn_gradients(space, weights, inputs,
                               view3<const T, Space>(array(arrays, "y")), g, wg,
                               options);
}

}  // namespace

void deer_rnn(const std::string& operation, const DeerSettings& settings,
              const OTArrays& arrays) {
  auto const& first = array(arrays, "x");
  if (!first.given()) throw_invalid_argument("x is required");
  DeerSettings s = settings;
#ifdef KOKKOS_ENABLE_CUDA
  // Captured into a CUDA graph, nothing may wait for the device: the Newton
  // iterations are all issued without reading their convergence back.
  if (first.device == Device::cuda && capturing(settings.stream)) {
    if (s.check_values)
      throw_invalid_argument(
          "check_inputs: the data checks read their findings back to the "
          "host, which a CUDA-graph capture cannot hold; pass "
          "check_inputs=False when capturing");
    s.check_every = 0;
  }
#endif
  with_named_arrays(first, arrays, {"lengths", "iterations", "path"}, s.stream,
                    [&](const auto& space, auto zero) {
                      using Space = std::decay_t<decltype(space)>;
                      run_deer<Space, decltype(zero)>(space, operation, s,
                                                      arrays);
                    });
}

template <class Space, class T>
void run_linear_recurrence(const Space& space, const std::string& operation,
                           const ScanSettings& s, const OTArrays& arrays) {
  for (const char* name : {"a", "b", "y", "grad_y", "grad_a", "grad_b"})
    check_rank(array(arrays, name), 2, "(rows, T)");
  for (const char* name : {"y0", "grad_y0"})
    check_rank(array(arrays, name), 1, "(rows,)");
  LinearRecurrenceOptions options;
  options.reverse = s.reverse;
  options.kernel = kernel_of(s.kernel);
  options.check_values = s.check_values;
  auto const a = view2<const T, Space>(array(arrays, "a"));
  auto const y0 = view1<const T, Space>(array(arrays, "y0"));
  if (operation == "forward") {
    softwave::linear_recurrence<Space, T>(
        space, a, view2<const T, Space>(array(arrays, "b")), y0,
        view2<T, Space>(array(arrays, "y")), options);
  } else if (operation == "gradients") {
    softwave::linear_recurrence_gradients<Space, T>(
        space, a, y0, view2<const T, Space>(array(arrays, "y")),
        view2<const T, Space>(array(arrays, "grad_y")),
        view2<T, Space>(array(arrays, "grad_a")),
        view2<T, Space>(array(arrays, "grad_b")),
        view1<T, Space>(array(arrays, "grad_y0")), options);
  } else {
    throw_invalid_argument("unknown linear_recurrence operation '", operation,
                           "'");
  }
}

void linear_recurrence(const std::string& operation,
                       const ScanSettings& settings, const OTArrays& arrays) {
  auto const& first = array(arrays, "a");
  if (!first.given()) throw_invalid_argument("a is required");
  with_named_arrays(first, arrays, {}, settings.stream,
                    [&](const auto& space, auto zero) {
                      using Space = std::decay_t<decltype(space)>;
                      run_linear_recurrence<Space, decltype(zero)>(
                          space, operation, settings, arrays);
                    });
}

void initialize() {
  if (Kokkos::is_initialized()) {
    compat::remember_host_thread();  // started by another library here
    return;
  }
  kokkos_started_here = true;
  // Kokkos 3.x prints its start-up warnings (e.g. OMP_PROC_BIND unset) to
  // stdout, which belongs to the user's program.
  compat::initialize(-1, /*quiet=*/true);
}

void finalize() {
#ifdef KOKKOS_ENABLE_CUDA
  {
    std::lock_guard<std::mutex> lock(cuda_instances_mutex);
    cuda_instances().clear();
    if (capture_helper) {
      capture_helper->instance = Kokkos::Cuda();  // releases the instance
      cudaEventDestroy(capture_helper->fork);
      cudaEventDestroy(capture_helper->join);
      cudaStreamDestroy(capture_helper->stream);
      delete capture_helper;
      capture_helper = nullptr;
    }
  }
#endif
  if (kokkos_started_here && Kokkos::is_initialized()) Kokkos::finalize();
  kokkos_started_here = false;
}

std::string default_space() { return Kokkos::DefaultExecutionSpace::name(); }
std::string host_space() { return Kokkos::DefaultHostExecutionSpace::name(); }

bool has_cuda() {
#ifdef KOKKOS_ENABLE_CUDA
  return true;
#else
  return false;
#endif
}

int cuda_device() {
#ifdef KOKKOS_ENABLE_CUDA
  return Kokkos::Cuda().cuda_device();
#else
  return -1;
#endif
}

void synchronize(std::uintptr_t stream) {
#ifdef KOKKOS_ENABLE_CUDA
  if (stream == 0)
    Kokkos::Cuda().fence();
  else
    check_cuda(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream)),
               "synchronizing the stream");
#else
  (void)stream;
#endif
}

}  // namespace softwave::python
