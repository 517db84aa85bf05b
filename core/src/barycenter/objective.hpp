#pragma once
// f(z) = Σ_b w_b · sdtw(z, X_b) and its gradient, for a z held as a flat
// double vector (the optimisers' iterate). z is broadcast to every pair as
// the x side of one batched soft_dtw_value_and_grad call with grad_output =
// weights, so the per-pair gradients arrive already weighted; summing them
// over the batch gives ∇f.

#include <cstdint>
#include <softwave/barycenter.hpp>
#include <string>

#include "device_vectors.hpp"

namespace softwave::impl {

template <class Space, class T>
class Objective {
 public:
  // Arguments already checked; weights given (not empty).
  Objective(const Space& space, ConstSeriesView<T, Space> X, std::int64_t L,
            const SoftDTWOptions& options, WeightsView<T, Space> weights,
            LengthsView<Space> lengths)
      : space_(space),
        X_(X),
        options_(options),
        weights_(weights),
        lengths_(lengths),
        batch_(X.extent(0)),
        length_(L),
        features_(X.extent(2)),
        broadcast_(allocate("broadcast")),
        pair_gradients_(allocate("pair_gradients")),
        values_(Kokkos::view_alloc(space, Kokkos::WithoutInitializing,
                                   std::string("softwave::barycenter::values")),
                batch_) {
    // X and the weights were checked once; the iterate is the optimiser's,
    // whose line search treats a non-finite trial value as too long a step,
    // and barycenter() refuses a non-finite final objective. So no call
    // fences to check data or results again.
    options_.check_values = false;
  }

  // f(z); ∇f(z) into `gradient`. Both vectors hold L·d entries, row-major.
  double operator()(const Vector<Space>& z, const Vector<Space>& gradient) {
    std::int64_t const point = length_ * features_;
    auto const broadcast = broadcast_;
    Kokkos::parallel_for(
        "softwave::barycenter::broadcast",
        Kokkos::RangePolicy<Space>(space_, 0, batch_ * point),
        KOKKOS_LAMBDA(std::int64_t q) {
          broadcast.data()[q] = T(z(q % point));
        });

    SeriesGradients<T, Space> pairs;
    pairs.grad_x = pair_gradients_;
    pairs.grad_output = weights_;
    soft_dtw_value_and_grad(space_, broadcast_, X_, values_, pairs, options_,
                            Lengths<Space>{{}, lengths_});

    // Summed per entry in a fixed order: no atomics, the same result on
    // every run.
    auto const per_pair = pair_gradients_;
    std::int64_t const batch = batch_;
    Kokkos::parallel_for(
        "softwave::barycenter::sum_gradients",
        Kokkos::RangePolicy<Space>(space_, 0, point),
        KOKKOS_LAMBDA(std::int64_t q) {
          double sum = 0;
          for (std::int64_t b = 0; b < batch; ++b)
            sum += double(per_pair.data()[b * point + q]);
          gradient(q) = sum;
        });

    auto const weights = weights_;
    auto const values = values_;
    double f = 0;
    Kokkos::parallel_reduce(
        "softwave::barycenter::objective",
        Kokkos::RangePolicy<Space>(space_, 0, batch_),
        KOKKOS_LAMBDA(std::int64_t b, double& sum) {
          sum += double(weights(b)) * double(values(b));
        },
        f);
    return f;
  }

 private:
  ArrayView3<T, Space> allocate(const char* what) const {
    return ArrayView3<T, Space>(
        Kokkos::view_alloc(space_, Kokkos::WithoutInitializing,
                           std::string("softwave::barycenter::") + what),
        batch_, length_, features_);
  }

  Space space_;
  ConstSeriesView<T, Space> X_;
  SoftDTWOptions options_;
  WeightsView<T, Space> weights_;
  LengthsView<Space> lengths_;
  std::int64_t batch_, length_, features_;
  ArrayView3<T, Space> broadcast_, pair_gradients_;
  ArrayView1<T, Space> values_;
};

}  // namespace softwave::impl
