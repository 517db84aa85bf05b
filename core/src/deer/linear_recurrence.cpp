// softwave/linear_recurrence.hpp: argument checks, the portable chunked
// scan, and the choice of a backend's single-pass scan.

#include <softwave/errors.hpp>
#include <softwave/linear_recurrence.hpp>
#include <string>

#include "../common/call_memory.hpp"
#include "../common/data_checks.hpp"
#include "linear_recurrence_arrays.hpp"

// The CUDA backend's single-pass scan (its folder is on the include path in
// a CUDA build only).
#if __has_include(<deer/vendor_linear_recurrence.hpp>)
#include <deer/vendor_linear_recurrence.hpp>
#endif

namespace softwave::impl::scan {

// Position p of a row in the scan's order, as a memory offset in the row.
template <class T>
KOKKOS_INLINE_FUNCTION std::int64_t index_of(const ScanArrays<T>& s,
                                             std::int64_t p) {
  return s.reverse ? s.length - 1 - p : p;
}

// Step p's affine map of the scanned state, state ↦ a · state + e.
template <class T>
KOKKOS_INLINE_FUNCTION void step_map(const ScanArrays<T>& s, std::int64_t r,
                                     std::int64_t p, T& a, T& e) {
  std::int64_t const t = index_of(s, p);
  a = s.a[r * s.pitch_a + t];
  T const b = s.b[r * s.pitch_b + t];
  e = s.adjoint ? a * b : b;
}

// The state carried into row r's first step.
template <class T>
KOKKOS_INLINE_FUNCTION T initial_state(const ScanArrays<T>& s, std::int64_t r) {
  return !s.adjoint && s.y0 ? s.y0[r] : T(0);
}

// Steps [p0, p1) of row r from `state` (the state before p0), writing
// their outputs (ScanArrays says which).
template <class T>
KOKKOS_INLINE_FUNCTION void replay(const ScanArrays<T>& s, std::int64_t r,
                                   std::int64_t p0, std::int64_t p1, T state) {
  for (std::int64_t p = p0; p < p1; ++p) {
    std::int64_t const t = index_of(s, p);
    T const a = s.a[r * s.pitch_a + t];
    T const b = s.b[r * s.pitch_b + t];
    if (!s.adjoint) {
      state = a * state + b;
      s.out[r * s.pitch_out + t] = state;
      continue;
    }
    T const lambda = b + state;
    state = a * lambda;
    s.out[r * s.pitch_out + t] = lambda;
    if (s.grad_a) {
      T const before = p + 1 < s.length
                           ? s.y[r * s.pitch_y + index_of(s, p + 1)]
                       : s.y0 ? s.y0[r]
                              : T(0);
      s.grad_a[r * s.pitch_grad_a + t] = lambda * before;
    }
  }
  if (s.adjoint && s.grad_y0 && p1 == s.length) s.grad_y0[r] = state;
}

// Each row from its start, a thread a row.
template <class T>
struct ScanRows {
  ScanArrays<T> s;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t r) const {
    replay(s, r, 0, s.length, initial_state(s, r));
  }
};

// Chunk c of row r (item r·chunks + c) composed into one map.
template <class T, class Maps>
struct ComposeChunks {
  ScanArrays<T> s;
  Maps maps_a, maps_e;  // (rows, chunks)
  std::int64_t chunk, chunks;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item) const {
    std::int64_t const r = item / chunks, c = item % chunks;
    std::int64_t const p1 =
        (c + 1) * chunk < s.length ? (c + 1) * chunk : s.length;
    T A = 1, E = 0;
    for (std::int64_t p = c * chunk; p < p1; ++p) {
      T a, e;
      step_map(s, r, p, a, e);
      E = a * E + e;
      A = a * A;
    }
    maps_a(r, c) = A;
    maps_e(r, c) = E;
  }
};

// Chunk c of row r replayed from the state after chunk c − 1.
template <class T, class Maps>
struct ReplayChunks {
  ScanArrays<T> s;
  Maps after;  // (rows, chunks): the state after each chunk
  std::int64_t chunk, chunks;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t item) const {
    std::int64_t const r = item / chunks, c = item % chunks;
    std::int64_t const p1 =
        (c + 1) * chunk < s.length ? (c + 1) * chunk : s.length;
    replay(s, r, c * chunk, p1, c == 0 ? initial_state(s, r) : after(r, c - 1));
  }
};

// The portable scan: chunks of each row composed into maps, the maps
// scanned by the same scan (recursively, until a row's chunks are few
// enough for a thread), each chunk replayed. Enough chunks in all to give
// every thread of the space several.
template <class Space, class T>
void portable_scan(const Space& space, const ScanArrays<T>& s) {
  if (s.rows == 0 || s.length == 0) return;
  std::int64_t const items = 8 * std::int64_t(space.concurrency());
  std::int64_t const per_row = (items + s.rows - 1) / s.rows;
  std::int64_t chunk = (s.length + per_row - 1) / per_row;
  if (chunk < 32) chunk = 32;
  std::int64_t const chunks = (s.length + chunk - 1) / chunk;
  if (chunks == 1) {
    Kokkos::parallel_for("softwave::linear_recurrence::rows",
                         Kokkos::RangePolicy<Space>(space, 0, s.rows),
                         ScanRows<T>{s});
    return;
  }
  using Maps =
      Kokkos::View<T**, Kokkos::LayoutRight, typename Space::memory_space>;
  auto const maps_a = call_array<Maps>(
      space, "softwave::linear_recurrence::maps_a", false, s.rows, chunks);
  auto const maps_e = call_array<Maps>(
      space, "softwave::linear_recurrence::maps_e", false, s.rows, chunks);
  auto const after = call_array<Maps>(
      space, "softwave::linear_recurrence::after", false, s.rows, chunks);
  Kokkos::RangePolicy<Space> const every_chunk(space, 0, s.rows * chunks);
  Kokkos::parallel_for(
      "softwave::linear_recurrence::compose", every_chunk,
      ComposeChunks<T, Maps>{s, maps_a.view, maps_e.view, chunk, chunks});
  // The chunks' maps in the scan's order: state_c = A_c state_{c−1} + E_c
  // from the row's initial state.
  ScanArrays<T> upper;
  upper.a = maps_a.view.data();
  upper.b = maps_e.view.data();
  upper.y0 = s.adjoint ? nullptr : s.y0;
  upper.out = after.view.data();
  upper.rows = s.rows;
  upper.length = chunks;
  upper.pitch_a = upper.pitch_b = upper.pitch_out = chunks;
  portable_scan(space, upper);
  Kokkos::parallel_for("softwave::linear_recurrence::replay", every_chunk,
                       ReplayChunks<T, Maps>{s, after.view, chunk, chunks});
}

template <class Space, class T>
void run(const Space& space, const ScanArrays<T>& s, Kernel kernel) {
  if (kernel == Kernel::pairs)
    throw_invalid_argument(
        "kernel = pairs applies to Soft-DTW values only, not to "
        "linear_recurrence");
  std::string const why_not = VendorScan<Space, T>::unavailable(s);
  if (kernel == Kernel::specialised && !why_not.empty())
    throw_invalid_argument("kernel = specialised: ", why_not);
  if (kernel != Kernel::portable && why_not.empty())
    VendorScan<Space, T>::run(space, s);
  else
    portable_scan(space, s);
}

// (rows, T) of `reference` for a view named `name`.
template <class View, class Reference>
void check_rows(const View& v, const char* name, const Reference& reference,
                const char* meaning) {
  check_extent(v, name, {reference.extent(0), reference.extent(1)}, meaning);
}

template <class View1, class Reference>
void check_row_values(const View1& v, const char* name,
                      const Reference& reference, const char* meaning) {
  if (v.extent(0) == 0) return;
  check_extent(v, name, {reference.extent(0)}, meaning);
}

// The scan of rows a and b into out from y0 (empty: zeros), in `reverse`
// order; the adjoint's arrays are the caller's to add.
template <class T, class A, class B, class Y0, class Out>
ScanArrays<T> scan_arrays(const A& a, const B& b, const Y0& y0, const Out& out,
                          bool reverse) {
  ScanArrays<T> s;
  s.a = a.data();
  s.b = b.data();
  s.y0 = y0.extent(0) ? y0.data() : nullptr;
  s.out = out.data();
  s.rows = a.extent(0);
  s.length = a.extent(1);
  s.pitch_a = a.stride(0);
  s.pitch_b = b.stride(0);
  s.pitch_out = out.stride(0);
  s.reverse = reverse;
  return s;
}

}  // namespace softwave::impl::scan

namespace softwave {

template <class Space, class T>
void linear_recurrence(const Space& space, RecurrenceRows<const T, Space> a,
                       RecurrenceRows<const T, Space> b,
                       RecurrenceRow<const T, Space> y0,
                       RecurrenceRows<T, Space> y,
                       const LinearRecurrenceOptions& options) {
  using namespace impl;
  using namespace impl::scan;
  check_rows(b, "b", a, "(a's shape: rows, steps)");
  check_rows(y, "y", a, "(a's shape: rows, steps)");
  check_row_values(y0, "y0", a, "(one value a row of a, or empty)");
  DataChecks<Space> checks(space, options.check_values, "linear_recurrence");
  checks.finite_values(a, "a");
  checks.finite_values(b, "b");
  checks.finite_values(y0, "y0");
  checks.finish();
  run(space, scan_arrays<T>(a, b, y0, y, options.reverse), options.kernel);
}

template <class Space, class T>
void linear_recurrence_gradients(
    const Space& space, RecurrenceRows<const T, Space> a,
    RecurrenceRow<const T, Space> y0, RecurrenceRows<const T, Space> y,
    RecurrenceRows<const T, Space> grad_y, RecurrenceRows<T, Space> grad_a,
    RecurrenceRows<T, Space> grad_b, RecurrenceRow<T, Space> grad_y0,
    const LinearRecurrenceOptions& options) {
  using namespace impl;
  using namespace impl::scan;
  char const* shape = "(a's shape: rows, steps)";
  check_rows(y, "y", a, shape);
  check_rows(grad_y, "grad_y", a, shape);
  check_rows(grad_b, "grad_b", a, "(a's shape: rows, steps; required)");
  if (grad_a.size() || grad_a.extent(0))
    check_rows(grad_a, "grad_a", a, "(a's shape, or empty)");
  check_row_values(y0, "y0", a, "(one value a row of a, or empty)");
  check_row_values(grad_y0, "grad_y0", a, "(one value a row of a, or empty)");
  // Each thread reads y one step past its own: an output there would be
  // overwritten before another thread reads it.
  if (a.size() && grad_b.data() == y.data())
    throw_invalid_argument("grad_b must not be the same memory as y");
  if (a.size() && grad_a.data() == y.data())
    throw_invalid_argument("grad_a must not be the same memory as y");
  if (a.size() && grad_a.data() == grad_b.data())
    throw_invalid_argument("grad_a must not be the same memory as grad_b");
  DataChecks<Space> checks(space, options.check_values, "linear_recurrence");
  checks.finite_values(a, "a");
  checks.finite_values(y0, "y0");
  checks.finite_values(y, "y");
  checks.finite_values(grad_y, "grad_y");
  checks.finish();
  // Back through the forward's order, grad_y in b's place.
  ScanArrays<T> s = scan_arrays<T>(a, grad_y, y0, grad_b, !options.reverse);
  s.adjoint = true;
  s.y = y.data();
  s.pitch_y = y.stride(0);
  s.grad_a = grad_a.extent(0) ? grad_a.data() : nullptr;
  s.pitch_grad_a = s.grad_a ? grad_a.stride(0) : 0;
  s.grad_y0 = grad_y0.extent(0) ? grad_y0.data() : nullptr;
  run(space, s, options.kernel);
  if (s.grad_y0 && s.length == 0) compat::fill(space, grad_y0, T(0));
}

#define SOFTWAVE_INSTANTIATE_LINEAR_RECURRENCE(SPACE, T)             \
  template void linear_recurrence<SPACE, T>(                         \
      const SPACE&, RecurrenceRows<const T, SPACE>,                  \
      RecurrenceRows<const T, SPACE>, RecurrenceRow<const T, SPACE>, \
      RecurrenceRows<T, SPACE>, const LinearRecurrenceOptions&);     \
  template void linear_recurrence_gradients<SPACE, T>(               \
      const SPACE&, RecurrenceRows<const T, SPACE>,                  \
      RecurrenceRow<const T, SPACE>, RecurrenceRows<const T, SPACE>, \
      RecurrenceRows<const T, SPACE>, RecurrenceRows<T, SPACE>,      \
      RecurrenceRows<T, SPACE>, RecurrenceRow<T, SPACE>,             \
      const LinearRecurrenceOptions&);

SOFTWAVE_INSTANTIATE_LINEAR_RECURRENCE(Kokkos::DefaultExecutionSpace, float)
SOFTWAVE_INSTANTIATE_LINEAR_RECURRENCE(Kokkos::DefaultExecutionSpace, double)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SOFTWAVE_INSTANTIATE_LINEAR_RECURRENCE(Kokkos::DefaultHostExecutionSpace, float)
SOFTWAVE_INSTANTIATE_LINEAR_RECURRENCE(Kokkos::DefaultHostExecutionSpace,
                                       double)
#endif

}  // namespace softwave
