// XLA FFI handlers: JAX calls softwave's entry points from inside a compiled
// program, on the buffers XLA owns (no copy, no host callback). On the GPU
// the work is queued on XLA's stream for the call; on the CPU it runs on the
// host execution space. Each target takes its arrays as the call's operands,
// its outputs as the call's results and its options as attributes; the
// Python side (softwave/jax.py) names them. Built when jaxlib's FFI headers
// are found (bindings/python/CMakeLists.txt).
#include "jax_ffi.hpp"

#include <cmath>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dispatch.hpp"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace softwave::python {
namespace {

// Where a call runs: the platform XLA called the handler for.
struct Place {
  Device device = Device::cpu;
  int ordinal = 0;
  std::uintptr_t stream = 0;
};

DType dtype_of(ffi::DataType type) {
  switch (type) {
    case ffi::DataType::F32:
      return DType::float32;
    case ffi::DataType::F64:
      return DType::float64;
    case ffi::DataType::BF16:
      return DType::bfloat16;
    case ffi::DataType::F16:
      return DType::float16;
    case ffi::DataType::S32:
      return DType::int32;
    default:
      return DType::other;
  }
}

// A buffer as a Borrowed array named `name`. XLA hands custom calls dense
// row-major buffers. A (0,) int32 operand is how the Python side says
// "not given" (full lengths).
Borrowed borrow(const char* name, const ffi::AnyBuffer& buffer,
                const Place& place, bool placeholder = false) {
  Borrowed b;
  b.name = name;
  auto const dims = buffer.dimensions();
  if (placeholder && dims.size() == 1 && dims[0] == 0) return b;
  b.dtype = dtype_of(buffer.element_type());
  b.device = place.device;
  b.device_id = place.ordinal;
  b.shape.assign(dims.begin(), dims.end());
  b.data = buffer.untyped_data();
  if (b.data == nullptr) b.data = &b;  // empty: "given", never dereferenced
  return b;
}

// The call's operands and results, by position, as Borrowed arrays.
class Arrays {
 public:
  Arrays(const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
         const Place& place)
      : args_(args), rets_(rets), place_(place) {}

  std::size_t results() const { return rets_.size(); }

  Borrowed operand(std::size_t i, const char* name,
                   bool placeholder = false) const {
    auto buffer = args_.get<ffi::AnyBuffer>(i);
    if (!buffer) throw std::runtime_error(buffer.error().message());
    return borrow(name, *buffer, place_, placeholder);
  }

  Borrowed result(std::size_t i, const char* name) const {
    if (i >= rets_.size()) return Borrowed{name};
    auto buffer = rets_.get<ffi::AnyBuffer>(i);
    if (!buffer) throw std::runtime_error(buffer.error().message());
    return borrow(name, **buffer, place_);
  }

 private:
  const ffi::RemainingArgs& args_;
  const ffi::RemainingRets& rets_;
  Place place_;
};

template <class T>
T attribute(const ffi::Dictionary& attrs, std::string_view name) {
  auto value = attrs.get<T>(name);
  if (!value)
    throw std::runtime_error("softwave: attribute " + std::string(name) + ": " +
                             value.error().message());
  return *value;
}

// The Soft-DTW settings in the attributes. Data checks wait for the stream
// on the GPU, so they run on the CPU only (as in the torch front end).
Settings settings_of(const ffi::Dictionary& attrs, const Place& place,
                     double gamma) {
  Settings s;
  s.gamma = gamma;
  s.cost = std::string(attribute<std::string_view>(attrs, "dist"));
  s.band = attribute<std::int64_t>(attrs, "band");
  s.kernel = std::string(attribute<std::string_view>(attrs, "kernel"));
  s.check_values = place.device == Device::cpu;
  s.stream = place.stream;
  return s;
}

// Operands x, y, lengths_x, lengths_y; results values and either nothing,
// the alignment (2 results) or grad_x and grad_y (3 results).
void soft_dtw_target(const Place& place, const Arrays& a,
                     const ffi::Dictionary& attrs) {
  bool const alignment = a.results() == 2, gradients = a.results() == 3;
  soft_dtw(settings_of(attrs, place, attribute<double>(attrs, "gamma")),
           a.operand(0, "x"), a.operand(1, "y"), a.result(0, "values"),
           gradients ? a.result(1, "grad_x") : Borrowed{"grad_x"},
           gradients ? a.result(2, "grad_y") : Borrowed{"grad_y"},
           alignment ? a.result(1, "alignment") : Borrowed{"alignment"},
           Borrowed{"grad_output"}, a.operand(2, "lengths_x", true),
           a.operand(3, "lengths_y", true),
           attribute<bool>(attrs, "divergence"));
}

// Operands cost, lengths_x, lengths_y; results values and, with 2, grad_cost.
void soft_dtw_cost_target(const Place& place, const Arrays& a,
                          const ffi::Dictionary& attrs) {
  soft_dtw_cost(settings_of(attrs, place, attribute<double>(attrs, "gamma")),
                a.operand(0, "cost"), a.result(0, "values"),
                a.result(1, "grad_cost"), Borrowed{"grad_output"},
                a.operand(1, "lengths_x", true),
                a.operand(2, "lengths_y", true));
}

// Operands x, y, lengths_x, lengths_y; result the (B1, B2) matrix.
void pairwise_target(const Place& place, const Arrays& a,
                     const ffi::Dictionary& attrs) {
  pairwise(settings_of(attrs, place, attribute<double>(attrs, "gamma")),
           a.operand(0, "x"), a.operand(1, "y"), a.result(0, "matrix"),
           a.operand(2, "lengths_x", true), a.operand(3, "lengths_y", true),
           attribute<bool>(attrs, "divergence"));
}

// Operands x, y, lengths_x, lengths_y; results values, path, path_length.
void dtw_path_target(const Place& place, const Arrays& a,
                     const ffi::Dictionary& attrs) {
  dtw_path(settings_of(attrs, place, 0.0), a.operand(0, "x"), a.operand(1, "y"),
           a.result(0, "values"), a.result(1, "path"),
           a.result(2, "path_length"), a.operand(2, "lengths_x", true),
           a.operand(3, "lengths_y", true));
}

// The names in a comma-separated list ("x,y,a"; "" is none).
std::vector<std::string> split_names(std::string_view list) {
  std::vector<std::string> names;
  while (!list.empty()) {
    auto const comma = list.find(',');
    names.emplace_back(list.substr(0, comma));
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return names;
}

// The named operands and results of a call (attributes "operands" and
// "results", comma-separated, in order) as the core's array map. `names`
// keeps the strings the Borrowed arrays point to.
OTArrays named_arrays(const Arrays& a, const ffi::Dictionary& attrs,
                      std::vector<std::string>& names) {
  names = split_names(attribute<std::string_view>(attrs, "operands"));
  std::size_t const operands = names.size();
  auto const results =
      split_names(attribute<std::string_view>(attrs, "results"));
  if (results.size() != a.results())
    throw std::runtime_error("softwave: the call has " +
                             std::to_string(a.results()) + " results for " +
                             std::to_string(results.size()) + " names");
  names.insert(names.end(), results.begin(), results.end());
  OTArrays arrays;
  for (std::size_t i = 0; i < names.size(); ++i)
    arrays[names[i]] = i < operands ? a.operand(i, names[i].c_str())
                                    : a.result(i - operands, names[i].c_str());
  return arrays;
}

// Entropic OT (softwave/sinkhorn.hpp) through optimal_transport(): the
// attributes name the operation ("solve", "gradients" or "divergence"),
// the operands and the results by the core's array names, in order, and
// carry the options of OTSettings.
void optimal_transport_target(const Place& place, const Arrays& a,
                              const ffi::Dictionary& attrs) {
  std::vector<std::string> names;
  OTArrays const arrays = named_arrays(a, attrs, names);
  OTSettings s;
  s.epsilon = attribute<double>(attrs, "epsilon");
  s.epsilon_relative = attribute<bool>(attrs, "epsilon_relative");
  s.epsilon_scaling = attribute<double>(attrs, "epsilon_scaling");
  s.rho_a = attribute<double>(attrs, "rho_a");
  s.rho_b = attribute<double>(attrs, "rho_b");
  s.max_iterations = int(attribute<std::int64_t>(attrs, "max_iterations"));
  s.tolerance = attribute<double>(attrs, "tolerance");
  s.check_every = int(attribute<std::int64_t>(attrs, "check_every"));
  s.cost = std::string(attribute<std::string_view>(attrs, "cost"));
  s.kernel = std::string(attribute<std::string_view>(attrs, "kernel"));
  // As for Soft-DTW: a data check would wait for the stream on the GPU.
  s.check_values = place.device == Device::cpu;
  s.stream = place.stream;
  optimal_transport(
      std::string(attribute<std::string_view>(attrs, "operation")), s, arrays);
}

// DEER for PyTorch's cells (softwave/deer.hpp) through deer_rnn(): the
// attributes name the operation ("forward" or "gradients"), the operands
// and results by the core's array names, and carry DeerSettings; atol and
// rtol NaN mean the type's defaults.
void deer_target(const Place& place, const Arrays& a,
                 const ffi::Dictionary& attrs) {
  std::vector<std::string> names;
  OTArrays const arrays = named_arrays(a, attrs, names);
  DeerSettings s;
  s.cell = std::string(attribute<std::string_view>(attrs, "cell"));
  s.method = std::string(attribute<std::string_view>(attrs, "method"));
  s.jacobian = std::string(attribute<std::string_view>(attrs, "jacobian"));
  s.kernel = std::string(attribute<std::string_view>(attrs, "kernel"));
  s.atol = attribute<double>(attrs, "atol");
  s.rtol = attribute<double>(attrs, "rtol");
  s.atol_given = !std::isnan(s.atol);
  s.rtol_given = !std::isnan(s.rtol);
  s.max_iterations = int(attribute<std::int64_t>(attrs, "max_iterations"));
  s.chunk = int(attribute<std::int64_t>(attrs, "chunk"));
  s.start_warm_up = int(attribute<std::int64_t>(attrs, "start_warm_up"));
  s.damping = attribute<double>(attrs, "damping");
  s.block_size = int(attribute<std::int64_t>(attrs, "block_size"));
  s.block_layout =
      std::string(attribute<std::string_view>(attrs, "block_layout"));
  s.diagonal = attribute<bool>(attrs, "diagonal");
  s.check_values = place.device == Device::cpu;
  s.stream = place.stream;
  deer_rnn(std::string(attribute<std::string_view>(attrs, "operation")), s,
           arrays);
}

// The (a, b) scan (softwave/linear_recurrence.hpp) through
// linear_recurrence(): the attributes name the operation ("forward" or
// "gradients"), the operands and results by the core's array names, and
// carry ScanSettings.
void linear_recurrence_target(const Place& place, const Arrays& a,
                              const ffi::Dictionary& attrs) {
  std::vector<std::string> names;
  OTArrays const arrays = named_arrays(a, attrs, names);
  ScanSettings s;
  s.reverse = attribute<bool>(attrs, "reverse");
  s.kernel = std::string(attribute<std::string_view>(attrs, "kernel"));
  s.check_values = place.device == Device::cpu;
  s.stream = place.stream;
  linear_recurrence(
      std::string(attribute<std::string_view>(attrs, "operation")), s, arrays);
}

using Target = void (*)(const Place&, const Arrays&, const ffi::Dictionary&);

// softwave's argument errors are the caller's (InvalidArgument, with the
// message the other front ends give); anything else is internal.
ffi::Error run(Target target, const Place& place,
               const ffi::RemainingArgs& args, const ffi::RemainingRets& rets,
               const ffi::Dictionary& attrs) {
  try {
    target(place, Arrays(args, rets, place), attrs);
    return ffi::Error::Success();
  } catch (const std::invalid_argument& e) {
    return ffi::Error::InvalidArgument(e.what());
  } catch (const std::exception& e) {
    return ffi::Error::Internal(e.what());
  }
}

template <Target target>
ffi::Error on_cpu(ffi::RemainingArgs args, ffi::RemainingRets rets,
                  ffi::Dictionary attrs) {
  return run(target, Place{}, args, rets, attrs);
}

template <Target target>
ffi::Error on_cuda(void* stream, std::int32_t ordinal, ffi::RemainingArgs args,
                   ffi::RemainingRets rets, ffi::Dictionary attrs) {
  Place const place{Device::cuda, ordinal,
                    reinterpret_cast<std::uintptr_t>(stream)};
  return run(target, place, args, rets, attrs);
}

}  // namespace

#define SOFTWAVE_FFI_TARGET(target)                                        \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(softwave_##target##_cpu, on_cpu<target>,   \
                                ffi::Ffi::Bind()                           \
                                    .RemainingArgs()                       \
                                    .RemainingRets()                       \
                                    .Attrs<ffi::Dictionary>());            \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(softwave_##target##_cuda, on_cuda<target>, \
                                ffi::Ffi::Bind()                           \
                                    .Ctx<ffi::PlatformStream<void*>>()     \
                                    .Ctx<ffi::DeviceOrdinal>()             \
                                    .RemainingArgs()                       \
                                    .RemainingRets()                       \
                                    .Attrs<ffi::Dictionary>());

SOFTWAVE_FFI_TARGET(soft_dtw_target)
SOFTWAVE_FFI_TARGET(soft_dtw_cost_target)
SOFTWAVE_FFI_TARGET(pairwise_target)
SOFTWAVE_FFI_TARGET(dtw_path_target)
SOFTWAVE_FFI_TARGET(optimal_transport_target)
SOFTWAVE_FFI_TARGET(deer_target)
SOFTWAVE_FFI_TARGET(linear_recurrence_target)

#undef SOFTWAVE_FFI_TARGET

std::vector<FfiTarget> ffi_targets() {
  struct Handlers {
    const char* name;
    void* cpu;
    void* cuda;
  };
  auto handler = [](XLA_FFI_Error* (*fn)(XLA_FFI_CallFrame*)) {
    return reinterpret_cast<void*>(fn);
  };
  Handlers const all[] = {
      {"softwave_soft_dtw", handler(softwave_soft_dtw_target_cpu),
       handler(softwave_soft_dtw_target_cuda)},
      {"softwave_soft_dtw_cost", handler(softwave_soft_dtw_cost_target_cpu),
       handler(softwave_soft_dtw_cost_target_cuda)},
      {"softwave_pairwise", handler(softwave_pairwise_target_cpu),
       handler(softwave_pairwise_target_cuda)},
      {"softwave_dtw_path", handler(softwave_dtw_path_target_cpu),
       handler(softwave_dtw_path_target_cuda)},
      {"softwave_optimal_transport",
       handler(softwave_optimal_transport_target_cpu),
       handler(softwave_optimal_transport_target_cuda)},
      {"softwave_deer_rnn", handler(softwave_deer_target_cpu),
       handler(softwave_deer_target_cuda)},
      {"softwave_linear_recurrence",
       handler(softwave_linear_recurrence_target_cpu),
       handler(softwave_linear_recurrence_target_cuda)},
  };
  std::vector<FfiTarget> targets;
  for (const Handlers& h : all) {
    targets.push_back({h.name, "cpu", h.cpu});
    if (has_cuda()) targets.push_back({h.name, "CUDA", h.cuda});
  }
  return targets;
}

}  // namespace softwave::python
