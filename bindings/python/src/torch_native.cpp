// softwave._torch_native: Soft-DTW as operators registered with torch in
// C++, with their autograd in C++.
//
//   softwave::soft_dtw_values(x, y, lengths_x, lengths_y, gamma, dist, band,
//       kernel, check, divergence) -> values (B,), differentiable in x, y;
//   softwave::soft_dtw_fused(..., grad_x, grad_y) -> (values, grad_x,
//       grad_y): the core's call, the gradients of Σ values ((0,) where not
//       asked for).
//
// softwave.torch calls soft_dtw_values for an eager call instead of a
// Python torch.autograd.Function: a training step then costs torch what
// its dispatcher and autograd engine cost, and not a Python Function's
// forward, context and backward (measured on an H200's host for the same
// no-op work, perf/device/torch_op_floor.py: 0.108 against 0.145 ms a step
// at B/N/d = 16/128/1).
//
// The module links torch, not the core (one Kokkos a process):
// softwave._core hands it the core's entry points (torch_bridge.hpp)
// through attach(), which the torch front end calls on import.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <nanobind/nanobind.h>
#include <torch/autograd.h>
#include <torch/library.h>
#ifdef SOFTWAVE_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <array>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "torch_bridge.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace softwave::python {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using OptionalTensor = c10::optional<at::Tensor>;
using Outputs = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

const torch_bridge::Table* core = nullptr;

// As softwave/_torch_ops.py's SECOND_ORDER.
constexpr const char* second_order =
    "softwave: second derivatives (double backward: differentiating a "
    "gradient taken with create_graph=True, as a gradient penalty or a "
    "Hessian does) are not supported: softwave's backward returns gradients "
    "computed in the forward, with no graph of their own. Use the gradient "
    "as a value (detach it, or create_graph=False), or compute the term that "
    "needs second derivatives with another implementation";

DType dtype_of(at::ScalarType type) {
  switch (type) {
    case at::kFloat:
      return DType::float32;
    case at::kDouble:
      return DType::float64;
    case at::kBFloat16:
      return DType::bfloat16;
    case at::kHalf:
      return DType::float16;
    case at::kInt:
      return DType::int32;
    case at::kLong:
      return DType::int64;
    default:
      return DType::other;
  }
}

// A contiguous tensor as the bridge's array (undefined: not given). Extents
// past the third are kept only as a count, for the core's rank check.
torch_bridge::Array array_of(const char* name, const at::Tensor& t) {
  torch_bridge::Array a;
  a.name = name;
  if (!t.defined()) return a;
  a.dtype = dtype_of(t.scalar_type());
  a.device = t.is_cpu()    ? Device::cpu
             : t.is_cuda() ? Device::cuda
                           : Device::other;
  a.device_id = t.is_cpu() ? 0 : t.get_device();
  a.rank = static_cast<int>(t.dim());
  for (int i = 0; i < a.rank && i < 3; ++i) a.shape[i] = t.size(i);
  // An empty tensor may have no data pointer: "given" all the same, and
  // never dereferenced (the core's extent checks report it by name).
  static char empty_tensor = 0;
  a.data = t.data_ptr() != nullptr ? t.data_ptr() : &empty_tensor;
  return a;
}

// The stream torch queues work on for t's device (0: a host tensor).
std::uintptr_t stream_of(const at::Tensor& t) {
#ifdef SOFTWAVE_TORCH_CUDA
  if (t.is_cuda())
    return reinterpret_cast<std::uintptr_t>(
        c10::cuda::getCurrentCUDAStream(t.get_device()).stream());
#endif
  (void)t;
  return 0;
}

void raise_on(torch_bridge::Status status, const char* message) {
  TORCH_CHECK_VALUE(status != torch_bridge::Status::value_error, message);
  TORCH_CHECK(status == torch_bridge::Status::ok, message);
}

// The values and the gradient buffers of a call: values in float32 for
// half-precision inputs, gradients in the inputs' dtypes.
Outputs outputs_of(const at::Tensor& x, const at::Tensor& y, bool grad_x,
                   bool grad_y) {
  const bool half =
      x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  const std::int64_t batch = x.dim() > 0 ? x.size(0) : 0;
  return {at::empty({batch},
                    x.options().dtype(half ? at::kFloat : x.scalar_type())),
          at::empty(grad_x ? x.sizes() : at::IntArrayRef{0}, x.options()),
          at::empty(grad_y ? y.sizes() : at::IntArrayRef{0}, y.options())};
}

Outputs soft_dtw_fused(const at::Tensor& x_in, const at::Tensor& y_in,
                       const OptionalTensor& lengths_x_in,
                       const OptionalTensor& lengths_y_in, double gamma,
                       c10::string_view dist, std::int64_t band,
                       c10::string_view kernel, bool check, bool divergence,
                       bool grad_x, bool grad_y) {
  TORCH_CHECK(core != nullptr,
              "softwave: the torch operators are not attached to the core "
              "(import softwave.torch first)");
  const at::Tensor x = x_in.contiguous(), y = y_in.contiguous();
  const auto given = [](const OptionalTensor& t) {
    return t.has_value() && t->defined() ? t->contiguous() : at::Tensor();
  };
  const at::Tensor lengths_x = given(lengths_x_in),
                   lengths_y = given(lengths_y_in);
  auto outputs = outputs_of(x, y, grad_x, grad_y);
  auto& [values, gx, gy] = outputs;
  // An empty batch: empty results, nothing to compute.
  if (x.dim() == 3 && y.dim() == 3 && x.size(0) == 0 && y.size(0) == 0)
    return outputs;

  const std::string dist_name(dist.data(), dist.size());
  const std::string kernel_name(kernel.data(), kernel.size());
  torch_bridge::SoftDtwCall call;
  call.gamma = gamma;
  call.cost = dist_name.c_str();
  call.band = band;
  call.kernel = kernel_name.c_str();
  call.check_values = check;
  call.divergence = divergence;
  call.stream = stream_of(x);
  call.x = array_of("x", x);
  call.y = array_of("y", y);
  call.values = array_of("values", values);
  call.grad_x = array_of("grad_x", grad_x ? gx : at::Tensor());
  call.grad_y = array_of("grad_y", grad_y ? gy : at::Tensor());
  call.lengths_x = array_of("lengths_x", lengths_x);
  call.lengths_y = array_of("lengths_y", lengths_y);
  std::array<char, 2048> message{};
  raise_on(core->soft_dtw(&call, message.data(), message.size()),
           message.data());
  return outputs;
}

// The shapes alone (fake and meta tensors: torch.compile, opcheck).
Outputs soft_dtw_fused_meta(const at::Tensor& x, const at::Tensor& y,
                            const OptionalTensor&, const OptionalTensor&,
                            double, c10::string_view, std::int64_t,
                            c10::string_view, bool, bool, bool grad_x,
                            bool grad_y) {
  return outputs_of(x, y, grad_x, grad_y);
}

using FusedSignature = Outputs(const at::Tensor&, const at::Tensor&,
                               const OptionalTensor&, const OptionalTensor&,
                               double, c10::string_view, std::int64_t,
                               c10::string_view, bool, bool, bool, bool);

Outputs call_fused(const at::Tensor& x, const at::Tensor& y,
                   const OptionalTensor& lengths_x,
                   const OptionalTensor& lengths_y, double gamma,
                   c10::string_view dist, std::int64_t band,
                   c10::string_view kernel, bool check, bool divergence,
                   bool grad_x, bool grad_y) {
  static const auto fused =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("softwave::soft_dtw_fused", "")
          .typed<FusedSignature>();
  return fused.call(x, y, lengths_x, lengths_y, gamma, dist, band, kernel,
                    check, divergence, grad_x, grad_y);
}

// Passes a first-order gradient through unchanged, with a grad_fn whose own
// backward raises: differentiating the gradient is an error, never a silent
// zero (as _SecondOrderError in softwave/_torch_ops.py).
struct SecondOrderError : torch::autograd::Function<SecondOrderError> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& gradient,
                            at::TensorList /*anchors*/) {
    return gradient.view_as(gradient);
  }
  static variable_list backward(AutogradContext*, variable_list) {
    TORCH_CHECK(false, second_order);
    return {};
  }
};

// values = sdtw(x, y) (or the divergence), its gradients computed in the
// forward's one pass where an input needs them; backward scales them by
// the incoming gradient.
struct SoftDtwValues : torch::autograd::Function<SoftDtwValues> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& y,
                            const OptionalTensor& lengths_x,
                            const OptionalTensor& lengths_y, double gamma,
                            c10::string_view dist, std::int64_t band,
                            c10::string_view kernel, bool check,
                            bool divergence, bool want_x, bool want_y) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto [values, gx, gy] =
        call_fused(x, y, lengths_x, lengths_y, gamma, dist, band, kernel, check,
                   divergence, want_x, want_y);
    ctx->save_for_backward({gx, gy});
    // The inputs a gradient is taken for, kept (not saved: their values are
    // never read, so in-place changes after the forward stay allowed) to
    // tie a create_graph=True gradient to them.
    std::vector<at::Tensor> anchors;
    if (want_x) anchors.push_back(x);
    if (want_y) anchors.push_back(y);
    ctx->saved_data["anchors"] = anchors;
    return values;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& grad_values = grads[0];
    const bool create_graph = torch::autograd::GradMode::is_enabled();
    std::array<at::Tensor, 2> gradients;
    {
      at::NoGradGuard no_grad;
      for (std::size_t i = 0; i < 2; ++i)
        if (ctx->needs_input_grad(i))
          gradients[i] =
              saved[i] *
              grad_values.reshape({-1, 1, 1}).to(saved[i].scalar_type());
    }
    if (create_graph) {
      auto tied = ctx->saved_data["anchors"].toTensorVector();
      if (grad_values.requires_grad()) tied.push_back(grad_values);
      for (auto& g : gradients)
        if (g.defined() && !tied.empty())
          g = SecondOrderError::apply(g, at::TensorList(tied));
    }
    variable_list result(12);
    result[0] = gradients[0];
    result[1] = gradients[1];
    return result;
  }
};

at::Tensor soft_dtw_values_autograd(const at::Tensor& x, const at::Tensor& y,
                                    const OptionalTensor& lengths_x,
                                    const OptionalTensor& lengths_y,
                                    double gamma, c10::string_view dist,
                                    std::int64_t band, c10::string_view kernel,
                                    bool check, bool divergence) {
  // Whether a graph is recorded, decided here: the forward runs with
  // gradients off and, without a graph, with no edges to ask.
  const bool record = torch::autograd::GradMode::is_enabled();
  return SoftDtwValues::apply(
      x, y, lengths_x, lengths_y, gamma, dist, band, kernel, check, divergence,
      record && x.requires_grad(), record && y.requires_grad());
}

// Below autograd (inference mode, meta and fake tensors): the values alone.
at::Tensor soft_dtw_values_plain(const at::Tensor& x, const at::Tensor& y,
                                 const OptionalTensor& lengths_x,
                                 const OptionalTensor& lengths_y, double gamma,
                                 c10::string_view dist, std::int64_t band,
                                 c10::string_view kernel, bool check,
                                 bool divergence) {
  return std::get<0>(call_fused(x, y, lengths_x, lengths_y, gamma, dist, band,
                                kernel, check, divergence, false, false));
}

}  // namespace
}  // namespace softwave::python

TORCH_LIBRARY_FRAGMENT(softwave, m) {
  m.def(
      "soft_dtw_fused(Tensor x, Tensor y, Tensor? lengths_x, "
      "Tensor? lengths_y, float gamma, str dist, int band, str kernel, "
      "bool check, bool divergence, bool grad_x, bool grad_y) "
      "-> (Tensor, Tensor, Tensor)");
  m.def(
      "soft_dtw_values(Tensor x, Tensor y, Tensor? lengths_x, "
      "Tensor? lengths_y, float gamma, str dist, int band, str kernel, "
      "bool check, bool divergence) -> Tensor");
}

TORCH_LIBRARY_IMPL(softwave, CPU, m) {
  m.impl("soft_dtw_fused", &softwave::python::soft_dtw_fused);
}
#ifdef SOFTWAVE_TORCH_CUDA
TORCH_LIBRARY_IMPL(softwave, CUDA, m) {
  m.impl("soft_dtw_fused", &softwave::python::soft_dtw_fused);
}
#endif
TORCH_LIBRARY_IMPL(softwave, Meta, m) {
  m.impl("soft_dtw_fused", &softwave::python::soft_dtw_fused_meta);
}
TORCH_LIBRARY_IMPL(softwave, Autograd, m) {
  m.impl("soft_dtw_values", &softwave::python::soft_dtw_values_autograd);
}
TORCH_LIBRARY_IMPL(softwave, CompositeExplicitAutograd, m) {
  m.impl("soft_dtw_values", &softwave::python::soft_dtw_values_plain);
}

NB_MODULE(_torch_native, m) {
  using namespace softwave::python;
  m.doc() =
      "softwave's Soft-DTW as torch operators registered in C++ "
      "(torch.ops.softwave.soft_dtw_values, soft_dtw_fused); softwave.torch "
      "attaches them to the core and calls them.";
  m.def(
      "attach",
      [](nb::capsule table) {
        if (table.name() == nullptr ||
            std::strcmp(table.name(), torch_bridge::capsule_name) != 0)
          throw std::invalid_argument(
              "softwave: attach() takes softwave._core.torch_bridge()");
        const auto* t = static_cast<const torch_bridge::Table*>(table.data());
        if (t->version != torch_bridge::version)
          throw std::invalid_argument(
              "softwave: softwave._core and softwave._torch_native come from "
              "different builds (reinstall softwave)");
        core = t;
      },
      "table"_a);
  m.def("attached", []() { return core != nullptr; });
#ifdef SOFTWAVE_TORCH_CUDA
  m.attr("cuda") = true;  // CUDA tensors have a kernel
#else
  m.attr("cuda") = false;
#endif
}
