#pragma once
// A user cell for softwave::deer (tests/test_deer.cpp), in a header of its
// own: deer_second_unit.cpp compiles deer() of the same cell in a second
// translation unit, as a program that calls it from two files does.

#include <softwave/deer.hpp>

namespace swt {

// A user cell: the logistic map (chaotic at r = 3.8) driven by x and coupled
// through A,
//   y_t = r y_{t−1} (1 − y_{t−1}) + 0.01 + s (1 + x_t)/2 + c tanh(A y_{t−1}),
// which stays in [0, 1] for y_0 in [0, 1] and x in [−1, 1].
struct LogisticMap {
  using value_type = double;
  double r = 3.8, s = 0.01, c = 0.01;
  int n = 2;
  KOKKOS_INLINE_FUNCTION int state_size() const { return n; }
  KOKKOS_INLINE_FUNCTION int input_size() const { return n; }
  KOKKOS_INLINE_FUNCTION int work_size() const { return n; }
  KOKKOS_INLINE_FUNCTION double coupling(int i, int j) const {
    return i == j ? 0.0 : (i < j ? 1.0 : -1.0);
  }
  KOKKOS_INLINE_FUNCTION void step(const double* y, const double* x,
                                   double* out, double* jacobian,
                                   softwave::DeerJacobian kind,
                                   double* work) const {
    for (int i = 0; i < n; ++i) {
      double a = 0;
      for (int j = 0; j < n; ++j) a += coupling(i, j) * y[j];
      work[i] = softwave::compat::tanh(a);
      out[i] = r * y[i] * (1 - y[i]) + 0.01 + s * (1 + x[i]) / 2 + c * work[i];
    }
    if (!jacobian) return;
    for (int i = 0; i < n; ++i) {
      double const sech2 = 1 - work[i] * work[i];
      for (int j = 0; j < n; ++j) {
        double const e =
            (i == j ? r * (1 - 2 * y[i]) : 0.0) + c * sech2 * coupling(i, j);
        if (kind == softwave::DeerJacobian::full)
          jacobian[i * n + j] = e;
        else if (i == j)
          jacobian[i] = e;
      }
    }
  }
  KOKKOS_INLINE_FUNCTION void vector_jacobian(const double* y, const double*,
                                              const double* lambda,
                                              double* grad_y, double* grad_x,
                                              double* work) const {
    for (int i = 0; i < n; ++i) {
      double a = 0;
      for (int j = 0; j < n; ++j) a += coupling(i, j) * y[j];
      work[i] = 1 - softwave::compat::tanh(a) * softwave::compat::tanh(a);
    }
    if (grad_x)
      for (int i = 0; i < n; ++i) grad_x[i] = s / 2 * lambda[i];
    if (grad_y)
      for (int j = 0; j < n; ++j) {
        double sum = r * (1 - 2 * y[j]) * lambda[j];
        for (int i = 0; i < n; ++i)
          sum += lambda[i] * c * work[i] * coupling(i, j);
        grad_y[j] = sum;
      }
  }
};

// deer() and deer_gradients() of LogisticMap as compiled in
// deer_second_unit.cpp (for every space of swt::ExecutionSpaces).
template <class Space>
void logistic_deer_in_second_unit(
    const Space& space, const LogisticMap& cell,
    const softwave::DeerInputs<double, Space>& inputs,
    const softwave::DeerResult<double, Space>& result,
    const softwave::DeerOptions& options);
template <class Space>
void logistic_gradients_in_second_unit(
    const Space& space, const LogisticMap& cell,
    const softwave::DeerInputs<double, Space>& inputs,
    softwave::DeerView3<const double, Space> y,
    const softwave::DeerGradients<double, Space>& gradients,
    const softwave::DeerOptions& options);

}  // namespace swt
