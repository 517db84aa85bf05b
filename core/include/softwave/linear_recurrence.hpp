#pragma once
// Diagonal linear recurrences by a parallel scan: for every row r of a
// batch and t = 0 … T−1,
//   y[r, t] = a[r, t] · y[r, t−1] + b[r, t],   y[r, −1] = y0[r] (or 0),
// or, with reverse, from the end: y[r, t] = a[r, t] · y[r, t+1] + b[r, t],
// y[r, T] = y0[r]. This is the linear step of DEER with diagonal
// Jacobians, and the recurrence of diagonal linear RNNs and state-space
// layers (one row per batch entry and channel: a (B, D, T) tensor is
// (B·D, T) rows).
//
// The scan composes affine maps δ ↦ a δ + b over chunks of each row, scans
// the chunks' maps, and replays each chunk from the value carried into it:
// every row is split across the device whatever the batch, so one long
// row runs as fast per step as many short ones. On Kokkos::Cuda it is one
// kernel that reads a and b once and writes y once (a chained scan with
// decoupled look-back over tiles of each row), the floor of the
// recurrence's memory traffic; elsewhere three passes of portable Kokkos
// kernels.
//
// Gradients (linear_recurrence_gradients): with λ = dL/dy accumulated back
// through the recurrence,
//   λ[r, t] = grad_y[r, t] + a[r, t+1] · λ[r, t+1]   (λ[r, T] = 0),
//   dL/db[r, t] = λ[r, t],  dL/da[r, t] = λ[r, t] · y[r, t−1],
//   dL/dy0[r] = a[r, 0] · λ[r, 0]
// (indices mirrored with reverse): the same scan in the other direction, in
// one pass over a, grad_y and y on Kokkos::Cuda.

#include <Kokkos_Core.hpp>
#include <softwave/kernel_choice.hpp>

namespace softwave {

// Rows × steps, each row's steps contiguous.
template <class T, class Space>
using RecurrenceRows =
    Kokkos::View<T**, Kokkos::LayoutRight, typename Space::memory_space>;
template <class T, class Space>
using RecurrenceRow = Kokkos::View<T*, typename Space::memory_space>;

struct LinearRecurrenceOptions {
  // Run each row from its last step to its first.
  bool reverse = false;
  // Data checks: every value of a, b and y0 (of a, grad_y, y and y0 for the
  // gradients) finite, read back with one fence. Off, nothing waits for the
  // device, and a non-finite input gives non-finite outputs.
  bool check_values = true;
  // automatic: the CUDA single-pass scan on Kokkos::Cuda, the portable
  // kernels elsewhere; portable: always those; specialised: the CUDA scan
  // or an argument error naming `kernel`.
  Kernel kernel = Kernel::automatic;
};

// y ← the recurrence of a and b (each (rows, T)) from y0 ((rows), or empty
// for zeros). y may be the same view as a or b (in place). float or double.
template <class Space, class T>
void linear_recurrence(const Space& space, RecurrenceRows<const T, Space> a,
                       RecurrenceRows<const T, Space> b,
                       RecurrenceRow<const T, Space> y0,
                       RecurrenceRows<T, Space> y,
                       const LinearRecurrenceOptions& options = {});

// Gradients at the y that linear_recurrence returned for a and y0, given
// grad_y = dL/dy. grad_b (rows, T) is required (it is λ); grad_a (rows, T)
// and grad_y0 (rows) are optional (empty: not computed). grad_b may be the
// same view as grad_y (in place). options.reverse as in the forward call.
template <class Space, class T>
void linear_recurrence_gradients(
    const Space& space, RecurrenceRows<const T, Space> a,
    RecurrenceRow<const T, Space> y0, RecurrenceRows<const T, Space> y,
    RecurrenceRows<const T, Space> grad_y, RecurrenceRows<T, Space> grad_a,
    RecurrenceRows<T, Space> grad_b, RecurrenceRow<T, Space> grad_y0,
    const LinearRecurrenceOptions& options = {});

}  // namespace softwave
