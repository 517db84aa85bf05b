#pragma once
// The CUDA specialisations of core's SpecialisedPath (core/src/softdtw/
// specialised.hpp, which includes this file in CUDA builds): when the fused
// kernels (fused.hpp) take a call, and how a call's arrays map onto them.

#include <softwave/kokkos_compat.hpp>
#include <string>
#include <type_traits>

#include "fused.hpp"

namespace softwave::impl {

namespace cuda_dispatch {

template <class View>
bool contiguous(const View& v) {
  return v.data() == nullptr || v.span_is_contiguous();
}

// The path reads float and the 16-bit types (accumulating in float).
template <class T>
constexpr bool takes_type_v = std::is_same_v<T, float> || is_half_v<T>;

template <class T>
constexpr cuda_fused::Storage storage_of() {
  if constexpr (std::is_same_v<T, bfloat16>)
    return cuda_fused::Storage::bfloat16;
  else if constexpr (std::is_same_v<T, float16>)
    return cuda_fused::Storage::float16;
  else
    return cuda_fused::Storage::float32;
}

template <class T>
std::string unavailable_for(const SoftDTWOptions& options) {
  if (!takes_type_v<T>) return "it takes float, bfloat16 and float16 data only";
  if (options.band) return "a band uses the portable path";
  return {};
}

template <class CostProvider>
cuda_fused::Problem problem_of(const CostProvider& cost,
                               const SoftDTWOptions& options,
                               std::int64_t pairs) {
  cuda_fused::Problem q;
  auto const& l = cost.lengths;
  q.n_max = l.n_max;
  q.m_max = l.m_max;
  q.lengths_x = l.x.extent(0) ? l.x.data() : nullptr;
  q.lengths_y = l.y.extent(0) ? l.y.data() : nullptr;
  q.map = l.pairs;
  q.pairs = pairs;
  q.gamma = options.gamma;
  q.storage = storage_of<typename CostProvider::value_type>();
  return q;
}

// A gradient array the kernels add to: its data (null when not asked for)
// and its size.
struct Gradients {
  float* data = nullptr;
  std::int64_t size = 0;
};

template <class View>
Gradients gradients_of(const View& v) {
  if (v.extent(0) == 0) return {};
  return {v.data(), std::int64_t(v.size())};
}

template <class T>
cuda_fused::Outputs outputs_of(const BackwardOutputs<T, Kokkos::Cuda>& b,
                               Gradients grad_x, Gradients grad_y) {
  cuda_fused::Outputs o;
  o.grad_x = grad_x.data;
  o.grad_y = grad_y.data;
  o.grad_x_size = grad_x.size;
  o.grad_y_size = grad_y.size;
  o.alignment = b.alignment.extent(0) ? b.alignment.data() : nullptr;
  o.alignment_is_gradient = b.alignment_is_gradient;
  o.grad_output = b.grad_output.extent(0) ? b.grad_output.data() : nullptr;
  o.scale = b.scale;
  o.zero_gradients = b.start_gradients_at_zero;
  return o;
}

template <class T>
void launch(const Kokkos::Cuda& space, const cuda_fused::Problem& q,
            acc_t* values, const BackwardOutputs<T, Kokkos::Cuda>* backward,
            Gradients grad_x, Gradients grad_y) {
  // Its kernels are not Kokkos launches: a region shows them to profilers.
  if (backward) {
    compat::ScopedRegion region("softwave::softdtw::cuda_forward_backward");
    cuda_fused::forward_backward(space, q, values,
                                 outputs_of(*backward, grad_x, grad_y));
  } else {
    compat::ScopedRegion region("softwave::softdtw::cuda_forward");
    cuda_fused::forward(space, q, values);
  }
}

}  // namespace cuda_dispatch

template <class T, Cost metric>
struct SpecialisedPath<Kokkos::Cuda, SeriesCost<T, Kokkos::Cuda, metric>> {
  using Provider = SeriesCost<T, Kokkos::Cuda, metric>;
  static std::string unavailable(const Provider& cost,
                                 const SoftDTWOptions& options) {
    if (metric != Cost::sqeuclidean)
      return "among the built-in costs it takes sqeuclidean only";
    if (cost.x.extent(2) > std::size_t(cuda_fused::max_features))
      return "it takes at most " + std::to_string(cuda_fused::max_features) +
             " features (got " + std::to_string(cost.x.extent(2)) + ")";
    if (!cuda_dispatch::contiguous(cost.x) ||
        !cuda_dispatch::contiguous(cost.y) ||
        !cuda_dispatch::contiguous(cost.grad_x) ||
        !cuda_dispatch::contiguous(cost.grad_y))
      return "it needs contiguous arrays";
    return cuda_dispatch::unavailable_for<T>(options);
  }
  static void run(const Kokkos::Cuda& space, const Provider& cost,
                  const SoftDTWOptions& options, std::int64_t pairs,
                  acc_t* values,
                  const BackwardOutputs<T, Kokkos::Cuda>* backward) {
    if constexpr (cuda_dispatch::takes_type_v<T>) {
      auto q = cuda_dispatch::problem_of(cost, options, pairs);
      q.x = cost.x.data();
      q.y = cost.y.data();
      q.d = int(cost.x.extent(2));
      cuda_dispatch::launch<T>(space, q, values, backward,
                               cuda_dispatch::gradients_of(cost.grad_x),
                               cuda_dispatch::gradients_of(cost.grad_y));
    }
  }
};

template <class T>
struct SpecialisedPath<Kokkos::Cuda, TensorCost<T, Kokkos::Cuda>> {
  using Provider = TensorCost<T, Kokkos::Cuda>;
  static std::string unavailable(const Provider& cost,
                                 const SoftDTWOptions& options) {
    if (!cuda_dispatch::contiguous(cost.c)) return "it needs contiguous arrays";
    return cuda_dispatch::unavailable_for<T>(options);
  }
  static void run(const Kokkos::Cuda& space, const Provider& cost,
                  const SoftDTWOptions& options, std::int64_t pairs,
                  acc_t* values,
                  const BackwardOutputs<T, Kokkos::Cuda>* backward) {
    if constexpr (cuda_dispatch::takes_type_v<T>) {
      auto q = cuda_dispatch::problem_of(cost, options, pairs);
      q.cost = cost.c.data();
      cuda_dispatch::launch<T>(space, q, values, backward, {}, {});
    }
  }
};

}  // namespace softwave::impl
