#pragma once
// Dispatch from the solver's passes to vendor-specialised kernels
// (backends/) where they exist for the execution space, type and cost form:
// the iterations' updates, the exact measurements of potentials and the
// plan's weighted row sums (gradients and plan products).
// SpecialisedPasses<Space, T, Form>::unavailable(form) says why they cannot
// run (empty when they can); an instance, made once per solve, holds what
// the updates keep between iterations and runs one half-iteration with
// update(); measure() needs no instance.
//
// The primary template below is the portable answer. A backend specialises
// it for its execution space in backends/<vendor>/sinkhorn/
// vendor_specialised_passes.hpp, whose folder is on the include path only
// in a build with that backend, so core names no vendor.

#include <softwave/errors.hpp>
#include <softwave/sinkhorn.hpp>
#include <string>
#include <type_traits>
#include <utility>

#include "passes.hpp"

namespace softwave::impl {

template <class Space, class T, class Form>
struct SpecialisedPasses {
  static std::string unavailable(const Form&) {
    return "the specialised passes take float point clouds and low-rank "
           "costs on Kokkos::Cuda only (a CUDA build)";
  }
  // Whether `automatic` takes them for this problem under these options.
  static bool pays_off(const Form&, const SinkhornOptions&) { return false; }
  // Made once per solve with its options (warm_start: the potentials
  // start from given values, not zeros).
  SpecialisedPasses(const Space&, const Form&, const SinkhornOptions&) {}
  // f ← the update of `own` against `columns` (rows_side: the form's rows;
  // else its transposed form's), as tiled_pass with an UpdateVisitor.
  void update(const Space&, bool /*rows_side*/, const ColumnSide<T, Space>&,
              const EpsilonAt<T, Space>&, const UpdateVisitor<T, Space>&) {}
  // The measurement of `own` against `columns` (rows_side as update()), as
  // tiled_pass with a MeasureVisitor.
  static void measure(const Space&, const Form&, bool /*rows_side*/,
                      const ColumnSide<T, Space>&, const EpsilonAt<T, Space>&,
                      const MeasureVisitor<T, Space>&) {}
  // Whether weighted_rows() runs for the form.
  static bool takes_weighted_rows(const Form&) { return false; }
  // sums(b, i, c) = Σ_j w_ij z(b, j, c) over the form's rows (the rows of
  // `own`), w_ij their rows of π normalised by their log-sum-exps, found in
  // the same pass and written to `lse` (as tiled_pass with a MeasureVisitor,
  // then with a WeightedVisitor).
  static void weighted_rows(const Space&, const Form&,
                            const RowSide<T, Space>& /*own*/,
                            const ColumnSide<T, Space>&,
                            const EpsilonAt<T, Space>&,
                            const OTView2<T, Space>& /*lse*/,
                            const OTView3<const T, Space>& /*z*/,
                            const OTView3<T, Space>& /*sums*/) {}
};

}  // namespace softwave::impl

#if __has_include(<sinkhorn/vendor_specialised_passes.hpp>)
#include <sinkhorn/vendor_specialised_passes.hpp>
#endif

namespace softwave::impl {

// Whether a public cost form (PointClouds, CostMatrix, LowRankCost) has an
// internal one, which is what backends specialise the passes for.
template <class Form, class = void>
struct HasInternalForm : std::false_type {};
template <class Form>
struct HasInternalForm<
    Form, std::void_t<decltype(internal_form(std::declval<const Form&>()))>>
    : std::true_type {};

// Why the specialised passes cannot run for `form` (an internal form, or a
// public one: asked of its internal form), whatever the options; empty
// where they can.
template <class Space, class T, class Form>
std::string specialised_unavailable(const Form& form) {
  if constexpr (HasInternalForm<Form>::value)
    return specialised_unavailable<Space, T>(internal_form(form));
  else
    return SpecialisedPasses<Space, T, Form>::unavailable(form);
}

// Whether the specialised passes run for `form` (as above); insisting on
// them where they cannot is an argument error naming `kernel`.
template <class Space, class T, class Form>
bool specialised_for(const Form& form, const SinkhornOptions& options) {
  if constexpr (HasInternalForm<Form>::value) {
    return specialised_for<Space, T>(internal_form(form), options);
  } else {
    using Specialised = SpecialisedPasses<Space, T, Form>;
    std::string const why_not = specialised_unavailable<Space, T>(form);
    if (options.kernel == Kernel::specialised && !why_not.empty())
      throw_invalid_argument("kernel = specialised: ", why_not);
    return why_not.empty() && (options.kernel == Kernel::specialised ||
                               (options.kernel == Kernel::automatic &&
                                Specialised::pays_off(form, options)));
  }
}

}  // namespace softwave::impl
