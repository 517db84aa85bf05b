#pragma once
// The one place that knows about differences between Kokkos 3.4 and 5.x.
// Everything else in softwave calls softwave::compat::*.

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdio>
#include <limits>
#include <mutex>
#include <string>
#ifdef KOKKOS_ENABLE_OPENMP
#include <omp.h>
#endif

#if KOKKOS_VERSION >= 40000
#define SOFTWAVE_KOKKOS_MATH Kokkos
#else
#define SOFTWAVE_KOKKOS_MATH Kokkos::Experimental
#endif
// Kokkos 3's OpenMP backend marks the thread that initialised it with a
// thread-local pointer and dispatches only from a thread so marked.
#if KOKKOS_VERSION < 40000 && defined(KOKKOS_ENABLE_OPENMP)
#define SOFTWAVE_KOKKOS_HOST_THREAD_MARK 1
#endif
// SOFTWAVE_IF_ON_HOST((code)): code only in the host compilation of a
// function built for host and device (a host-only call there would be a
// host function called from device code). KOKKOS_IF_ON_HOST from Kokkos 3.6
// on; before it, the device compilers' own markers.
#define SOFTWAVE_IMPL_STRIP_PARENS(...) __VA_ARGS__
#if defined(KOKKOS_IF_ON_HOST)
#define SOFTWAVE_IF_ON_HOST(CODE) KOKKOS_IF_ON_HOST(CODE)
#elif defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || \
    defined(__SYCL_DEVICE_ONLY__)
#define SOFTWAVE_IF_ON_HOST(CODE) \
  {}
#else
#define SOFTWAVE_IF_ON_HOST(CODE) \
  { SOFTWAVE_IMPL_STRIP_PARENS CODE }
#endif

namespace softwave::compat {

// Math functions moved from Kokkos::Experimental (3.x) to Kokkos (4.x).
using SOFTWAVE_KOKKOS_MATH::cbrt;
using SOFTWAVE_KOKKOS_MATH::exp;
using SOFTWAVE_KOKKOS_MATH::exp2;
using SOFTWAVE_KOKKOS_MATH::expm1;
using SOFTWAVE_KOKKOS_MATH::fabs;
using SOFTWAVE_KOKKOS_MATH::floor;
using SOFTWAVE_KOKKOS_MATH::fmax;
using SOFTWAVE_KOKKOS_MATH::isfinite;
using SOFTWAVE_KOKKOS_MATH::log;
using SOFTWAVE_KOKKOS_MATH::log2;
using SOFTWAVE_KOKKOS_MATH::sqrt;
using SOFTWAVE_KOKKOS_MATH::tanh;

// Kokkos::Experimental::infinity is missing in 3.4, and
// std::numeric_limits is not device code without --expt-relaxed-constexpr:
// use the C macro, a constant expression on host and device.
template <class T>
KOKKOS_INLINE_FUNCTION constexpr T infinity() {
  return static_cast<T>(INFINITY);
}

// A policy whose kernels take their functor as a launch argument. Without
// the hint, Kokkos' CUDA backend passes functors over 512 bytes through
// constant memory, and each such launch first waits on the host for the
// previous one to finish: one host round trip per tile anti-diagonal.
template <class Policy>
auto light_weight(const Policy& policy) {
  return Kokkos::Experimental::require(
      policy, Kokkos::Experimental::WorkItemProperty::HintLightWeight);
}

// Calls from threads other than the one that initialised Kokkos: a Python
// thread, or XLA's CPU threads running JAX's calls once their inputs are
// ready. Kokkos 3 runs host work from the initialising thread alone (its
// OpenMP backend refuses any other: "in parallel or not initialized") and
// one call at a time; Kokkos 4 takes kernels from any thread and serialises
// them itself. Under Kokkos 3 a HostThreadGuard, held around a call, takes a
// process-wide lock (`serialise`: for calls whose work runs on the host) and
// lends a calling thread without the mark the initialising thread's for the
// call, so that host views can be made and host kernels run (unlocked, for
// a device call, only its host views' initialisation runs there). Under
// Kokkos 4 and 5 it does nothing. remember_host_thread() records the mark
// on the initialising thread: initialize() calls it, and a front end that
// finds Kokkos already started calls it there.
namespace detail {
#ifdef SOFTWAVE_KOKKOS_HOST_THREAD_MARK
inline Kokkos::Impl::OpenMPExec* host_thread_mark = nullptr;
#endif
#if KOKKOS_VERSION < 40000
inline std::mutex host_calls;
#endif
}  // namespace detail

inline void remember_host_thread() {
#ifdef SOFTWAVE_KOKKOS_HOST_THREAD_MARK
  if (Kokkos::Impl::t_openmp_instance)
    detail::host_thread_mark = Kokkos::Impl::t_openmp_instance;
#endif
}

class HostThreadGuard {
 public:
  explicit HostThreadGuard(bool serialise) {
#if KOKKOS_VERSION < 40000
    if (serialise) lock_ = std::unique_lock<std::mutex>(detail::host_calls);
#else
    (void)serialise;
#endif
#ifdef SOFTWAVE_KOKKOS_HOST_THREAD_MARK
    if (!Kokkos::Impl::t_openmp_instance && detail::host_thread_mark) {
      Kokkos::Impl::t_openmp_instance = detail::host_thread_mark;
      lent_ = true;
    }
#endif
  }
  ~HostThreadGuard() {
#ifdef SOFTWAVE_KOKKOS_HOST_THREAD_MARK
    if (lent_) Kokkos::Impl::t_openmp_instance = nullptr;
#endif
  }
  HostThreadGuard(const HostThreadGuard&) = delete;
  HostThreadGuard& operator=(const HostThreadGuard&) = delete;

 private:
  std::unique_lock<std::mutex> lock_;
  bool lent_ = false;
};

// Initialisation settings: InitArguments (3.x) became InitializationSettings
// (3.7+, the only form in 4.x). num_threads <= 0 keeps Kokkos' default.
// quiet silences Kokkos' start-up warnings, which 3.x prints to stdout, where
// a tool's JSON or CSV output goes.
//
// Kokkos' OpenMP backend keeps a fixed table of max_openmp_threads thread
// slots (MAX_THREAD_COUNT, 3.4 through 5.x) and crashes in initialize when
// given more, whether asked for here or by OMP_NUM_THREADS (or by the core
// count, its default). A larger request is lowered to the limit with a line
// on stderr; front ends refuse an explicit larger request before this.
inline constexpr int max_openmp_threads = 512;

// node_rank >= 0 (an MPI rank's place among those on its node) picks the
// GPU node_rank % (visible GPUs), so that the ranks of a node share its GPUs
// out (Kokkos::num_devices from 4.1, the backend's device count before).
inline void initialize(int num_threads, bool quiet = false,
                       int node_rank = -1) {
#ifdef KOKKOS_ENABLE_OPENMP
  int const asked = num_threads > 0 ? num_threads : omp_get_max_threads();
  if (asked > max_openmp_threads) {
    std::fprintf(
        stderr,
        "softwave: %d OpenMP threads asked for (%s); Kokkos' OpenMP "
        "backend runs at most %d: using %d\n",
        asked,
        num_threads > 0 ? "thread count" : "OMP_NUM_THREADS or the core count",
        max_openmp_threads, max_openmp_threads);
    num_threads = max_openmp_threads;
  }
#endif
#if KOKKOS_VERSION >= 30700
  Kokkos::InitializationSettings settings;
  if (num_threads > 0) settings.set_num_threads(num_threads);
  if (quiet) settings.set_disable_warnings(true);
#if KOKKOS_VERSION >= 40100
  if (node_rank >= 0 && Kokkos::num_devices() > 0)
    settings.set_device_id(node_rank % Kokkos::num_devices());
#endif
  Kokkos::initialize(settings);
#else
  Kokkos::InitArguments arguments;
  arguments.num_threads = num_threads > 0 ? num_threads : -1;
  arguments.disable_warnings = quiet;
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP)
#if defined(KOKKOS_ENABLE_CUDA)
  int const devices = int(Kokkos::Cuda::detect_device_count());
#else
  int const devices = int(Kokkos::Experimental::HIP::detect_device_count());
#endif
  if (node_rank >= 0 && devices > 0) arguments.device_id = node_rank % devices;
#else
  (void)node_rank;
#endif
  Kokkos::initialize(arguments);
#endif
  remember_host_thread();
}

// A Kokkos Tools region for a scope, which profilers show around the
// kernels launched in it (Kokkos::Profiling::ScopedRegion arrived in 4.x;
// pushRegion and popRegion are in 3.4 too).
class ScopedRegion {
 public:
  explicit ScopedRegion(const std::string& name) {
    Kokkos::Profiling::pushRegion(name);
  }
  ~ScopedRegion() { Kokkos::Profiling::popRegion(); }
  ScopedRegion(const ScopedRegion&) = delete;
  ScopedRegion& operator=(const ScopedRegion&) = delete;
};

// Every entry of a contiguous view set to `value`, on `space`. Kokkos 3.4's
// deep_copy of a value into a view of rank 2 or more runs an MDRange
// kernel that, on CUDA, leaves entries unwritten once an extent other than
// the first needs more than 65,535 blocks (a 16 × 1,000,000 × 1 view was
// left holding its old contents): fill the span as one rank-1 range
// instead (a strided view keeps deep_copy).
template <class Space, class View>
void fill(const Space& space, const View& view,
          typename View::const_value_type& value) {
  if (!view.span_is_contiguous()) return Kokkos::deep_copy(space, view, value);
  Kokkos::View<typename View::non_const_value_type*,
               typename View::memory_space, Kokkos::MemoryUnmanaged>
      span(view.data(), view.span());
  Kokkos::deep_copy(space, span, value);
}

// A new array of View on `space` that need not start from zeros: not
// initialised, except an array of structs, which is constructed. Kokkos 3.4
// runs a destruction kernel for every array of structs and names it after
// the label only where it constructed the array (else
// "Kokkos::View::destruction []"); for an array of no element (`size` 0) it
// constructs nothing and still runs that kernel, unnamed, so such an array
// gets no memory at all (its shape on a null pointer). `shape`: the
// extents, or a layout.
template <class View, class Space, class... Shape>
View uninitialised_array(const Space& space, const std::string& label,
                         std::size_t size, const Shape&... shape) {
  if constexpr (std::is_scalar_v<typename View::value_type>)
    return View(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, label),
                shape...);
  else if (size == 0)
    return View(typename View::pointer_type(nullptr), shape...);
  else
    return View(Kokkos::view_alloc(space, label), shape...);
}

// A host array for reading `view` back: `view` itself where the host can
// read its memory, else a new host View of its layout (uninitialised_array),
// labelled `label`. Kokkos::create_mirror_view names a new array after
// `view` ("<its label>_mirror", so "_mirror" for an empty view or for the
// unlabelled call arrays of stream-ordered memory) and initialises it, and
// create_mirror_view_and_copy leaves its array unlabelled in Kokkos 4.
template <class View>
typename View::HostMirror host_mirror(const std::string& label,
                                      const View& view) {
  using Mirror = typename View::HostMirror;
  if constexpr (Kokkos::SpaceAccessibility<
                    Kokkos::HostSpace, typename View::memory_space>::accessible)
    return Kokkos::create_mirror_view(view);
  else
    return uninitialised_array<Mirror>(Kokkos::DefaultHostExecutionSpace(),
                                       label, view.size(), view.layout());
}

// Kokkos 3.x has no Kokkos::printf; kernels here never print, so nothing to
// wrap. Scan/reduce join operators with `volatile` arguments (3.x) are avoided
// by using only built-in reducers (Kokkos::Sum, Kokkos::Max, ...).

}  // namespace softwave::compat

#undef SOFTWAVE_KOKKOS_MATH
