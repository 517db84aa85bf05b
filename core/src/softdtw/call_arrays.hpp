#pragma once
// A call's values and gradient arrays (accumulation, rounding of 16-bit
// outputs, all-pairs matrices) and the checks every entry point shares.
//
// One part of the Soft-DTW drivers (drivers.hpp, whose entry points use
// these; nothing else includes them): sweeper.hpp, then call_arrays.hpp.

#include "sweeper.hpp"
#include "validate.hpp"

namespace softwave::impl {
namespace {

// Calls f(SeriesCost<T, Space, metric>{...}) for the metric in `options`.
template <class T, class Space, class F>
void with_metric(const SoftDTWOptions& options, ConstSeriesView<T, Space> x,
                 ConstSeriesView<T, Space> y, const PairLengths<Space>& lengths,
                 const ArrayView3<value_t<T>, Space>& grad_x,
                 const ArrayView3<value_t<T>, Space>& grad_y, const F& f) {
  switch (options.cost) {
    case Cost::sqeuclidean:
      return f(SeriesCost<T, Space, Cost::sqeuclidean>{x, y, lengths, grad_x,
                                                       grad_y});
    case Cost::l1:
      return f(SeriesCost<T, Space, Cost::l1>{x, y, lengths, grad_x, grad_y});
    case Cost::cosine:
      return f(
          SeriesCost<T, Space, Cost::cosine>{x, y, lengths, grad_x, grad_y});
  }
  throw_invalid_argument("cost must be sqeuclidean, l1 or cosine (got ",
                         static_cast<int>(options.cost), ")");
}

template <class Space, class T>
void store_values(const Space& space, const AccValues<Space>& from,
                  const ArrayView1<T, Space>& to) {
  if (to.extent(0) == 0) return;
  Kokkos::parallel_for(
      "softwave::softdtw::store_values",
      Kokkos::RangePolicy<Space>(space, 0, to.extent(0)),
      KOKKOS_LAMBDA(std::int64_t b) { to(b) = T(from(b)); });
}

template <class Space, class T>
void add_into(const Space& space, const ArrayView3<T, Space>& to,
              const ArrayView3<T, Space>& from) {
  Kokkos::parallel_for(
      "softwave::softdtw::add_gradients",
      Kokkos::RangePolicy<Space>(space, 0, to.size()),
      KOKKOS_LAMBDA(std::int64_t q) { to.data()[q] += from.data()[q]; });
}

// Where a gradient the caller asked for is accumulated: the caller's array
// itself, or for 16-bit inputs a float array that round_into() rounds into
// the caller's array once the sweeps are done. Starts at zero where `zero`
// (else the sweep zeroes it: BackwardOutputs::start_gradients_at_zero);
// empty when the gradient was not asked for.
template <class T, class Space>
CallArray<ArrayView3<value_t<T>, Space>> gradient_accumulator(
    const Space& space, const ArrayView3<T, Space>& out, const char* label,
    bool zero = true) {
  CallArray<ArrayView3<value_t<T>, Space>> sum;
  if (out.extent(0) == 0 && out.data() == nullptr) return sum;
  if constexpr (std::is_same_v<value_t<T>, T>) {
    if (zero) compat::fill(space, out, T(0));
    sum.view = out;
  } else {
    sum = call_array<ArrayView3<value_t<T>, Space>>(
        space, label, zero, out.extent(0), out.extent(1), out.extent(2));
  }
  return sum;
}

template <class T, class Space>
void round_into(const Space& space,
                const CallArray<ArrayView3<value_t<T>, Space>>& sum,
                const ArrayView3<T, Space>& out) {
  if constexpr (!std::is_same_v<value_t<T>, T>) {
    if (sum.view.extent(0) == 0) return;
    auto const from = sum.view;
    Kokkos::parallel_for(
        "softwave::softdtw::round_gradients",
        Kokkos::RangePolicy<Space>(space, 0, out.size()),
        KOKKOS_LAMBDA(std::int64_t q) { out.data()[q] = T(from.data()[q]); });
  }
}

// matrix entries of pairs [begin, begin + count) (numbered by `pairs`; both
// halves of a triangle's); the divergence when the self terms are given.
template <class Space, class T>
void store_pairwise(const Space& space, const AccValues<Space>& values,
                    std::int64_t begin, std::int64_t count, PairMap pairs,
                    const AccValues<Space>& self_x,
                    const AccValues<Space>& self_y,
                    const ArrayView2<T, Space>& matrix) {
  bool const divergence = self_x.extent(0) > 0;
  pairs.begin = begin;
  Kokkos::parallel_for(
      "softwave::softdtw::store_pairwise",
      Kokkos::RangePolicy<Space>(space, 0, count),
      KOKKOS_LAMBDA(std::int64_t p) {
        acc_t value = values(p);
        std::int64_t const a = pairs.x(p), b = pairs.y(p);
        if (divergence) value -= (self_x(a) + self_y(b)) / 2;
        matrix(a, b) = T(value);
        if (pairs.triangle) matrix(b, a) = T(value);
      });
}

template <class Space>
PairLengths<Space> batch_lengths(
    Kokkos::View<const int*, typename Space::memory_space> x,
    Kokkos::View<const int*, typename Space::memory_space> y,
    std::int64_t n_max, std::int64_t m_max) {
  return PairLengths<Space>{x, y, n_max, m_max, PairMap{}};
}

// Checks shared by every entry point on two batches of series; returns the
// lengths the call uses (see DataChecks::lengths).
template <class Space, class T>
Lengths<Space> check_series_pair(DataChecks<Space>& checks,
                                 ConstSeriesView<T, Space> x,
                                 ConstSeriesView<T, Space> y,
                                 const Lengths<Space>& lengths,
                                 bool same_batch) {
  check_sequences(x, "x");
  check_sequences(y, "y");
  if (same_batch && x.extent(0) != y.extent(0))
    throw_invalid_argument("x and y have different batch sizes (x: ",
                           x.extent(0), ", y: ", y.extent(0), ")");
  if (x.extent(0) && y.extent(0) && x.extent(2) != y.extent(2))
    throw_invalid_argument("x and y have different feature counts (x: ",
                           x.extent(2), ", y: ", y.extent(2), ")");
  Lengths<Space> const used{
      checks.lengths(lengths.x, "lengths.x", x.extent(0), x.extent(1)),
      checks.lengths(lengths.y, "lengths.y", y.extent(0), y.extent(1))};
  checks.finite_series(x, used.x, "x");
  checks.finite_series(y, used.y, "y");
  return used;
}

template <class Space, class T>
void check_gradients(DataChecks<Space>& checks,
                     const SeriesGradients<T, Space>& g,
                     ConstSeriesView<T, Space> x, ConstSeriesView<T, Space> y) {
  std::size_t const B = x.extent(0);
  if (g.grad_x.extent(0) || g.grad_x.data())
    check_extent(g.grad_x, "grad_x", {B, x.extent(1), x.extent(2)},
                 "(the shape of x)");
  if (g.grad_y.extent(0) || g.grad_y.data())
    check_extent(g.grad_y, "grad_y", {B, y.extent(1), y.extent(2)},
                 "(the shape of y)");
  if (g.alignment.extent(0) || g.alignment.data())
    check_extent(g.alignment, "alignment", {B, x.extent(1), y.extent(1)},
                 "(batch, N, M)");
  if (g.grad_output.extent(0) || g.grad_output.data())
    check_extent(g.grad_output, "grad_output", {B}, "(one per pair)");
  checks.template finite_weights<value_t<T>>(g.grad_output);
}

template <class View>
bool given(const View& v) {
  return v.extent(0) > 0 || v.data() != nullptr;
}

}  // namespace
}  // namespace softwave::impl
