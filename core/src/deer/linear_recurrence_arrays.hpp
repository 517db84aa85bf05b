#pragma once
// What a linear-recurrence scan reads and writes (softwave/
// linear_recurrence.hpp), shared by the portable kernels
// (linear_recurrence.cpp) and a backend's single-pass scan
// (backends/<vendor>/deer/vendor_linear_recurrence.hpp).

#include <cstdint>
#include <string>

namespace softwave::impl::scan {

// One scan over `rows` rows of `length` steps. Positions p = 0 … length−1
// run in the scan's order; step p of a row sits at memory index
// index(p) = reverse ? length−1−p : p, row r at r·pitch.
//
// Forward (adjoint false): state_p = a_p · state_{p−1} + b_p from state_{−1}
// = y0[r] (0 where y0 is null); out_p = state_p.
//
// Adjoint (adjoint true; b is grad_y, the scan runs against the forward's
// order): μ_p = a_p · (b_p + μ_{p−1}) from μ_{−1} = 0, and
//   out_p = λ_p = b_p + μ_{p−1}                        (dL/db),
//   grad_a_p = λ_p · (p + 1 < length ? y_{p+1} : y0)   (dL/da; where
//     grad_a is not null: y_{p+1} is the forward state before this step),
//   grad_y0[r] = μ_{length−1}                          (where not null).
// As maps of μ the steps are affine, μ ↦ a_p μ + a_p b_p: the same scan.
template <class T>
struct ScanArrays {
  const T* a = nullptr;
  const T* b = nullptr;
  const T* y0 = nullptr;  // (rows), or null for zeros
  const T* y = nullptr;   // adjoint with grad_a: the forward's states
  T* out = nullptr;
  T* grad_a = nullptr;   // adjoint, or null
  T* grad_y0 = nullptr;  // adjoint, or null
  std::int64_t rows = 0, length = 0;
  // Each array's row stride (elements).
  std::int64_t pitch_a = 0, pitch_b = 0, pitch_y = 0, pitch_out = 0,
               pitch_grad_a = 0;
  bool reverse = false;
  bool adjoint = false;
};

// A backend's single-pass scan for its execution space, where one exists:
// the primary template is the portable answer (none). unavailable() says why
// it cannot run `s` (empty where it can).
template <class Space, class T>
struct VendorScan {
  static std::string unavailable(const ScanArrays<T>&) {
    return "the single-pass scan runs on Kokkos::Cuda";
  }
  static void run(const Space&, const ScanArrays<T>&) {}
};

}  // namespace softwave::impl::scan
