#include "host_lse.hpp"

#include <cfloat>
#include <cmath>
#include <isa_clones.hpp>

#include "../common/host_exp.hpp"

namespace softwave::impl {
namespace {

// Lanes of one AVX-512 vector: each keeps its own largest value and sum, so
// the loops below are lane-wise (vectorised without reassociating a sum).
template <class T>
constexpr int kLanes = 64 / int(sizeof(T));

template <class T>
SOFTWAVE_HOST_ISA_INLINE void lse_tile(const T* values, int w, T& m, T& sum) {
  constexpr int L = kLanes<T>;
  constexpr T lowest = sizeof(T) == 4 ? T(-FLT_MAX) : T(-DBL_MAX);
  T most[L];
  for (int l = 0; l < L; ++l) most[l] = lowest;
  int const whole = w / L * L;
  for (int j = 0; j < whole; j += L)
    for (int l = 0; l < L; ++l)
      most[l] = values[j + l] > most[l] ? values[j + l] : most[l];
  T top = lowest;
  for (int l = 0; l < L; ++l) top = most[l] > top ? most[l] : top;
  for (int j = whole; j < w; ++j) top = values[j] > top ? values[j] : top;
  T part[L] = {};
  for (int j = 0; j < whole; j += L)
    for (int l = 0; l < L; ++l)
      part[l] += host_exp::exp_nonpositive(values[j + l] - top);
  T total = 0;
  for (int l = 0; l < L; ++l) total += part[l];
  for (int j = whole; j < w; ++j)
    total += host_exp::exp_nonpositive(values[j] - top);
  // A NaN value leaves the largest as it was and the sum NaN, as lse_add.
  if (top > m) {
    sum = sum * host_exp::exp_nonpositive(m - top) + total;
    m = top;
  } else {
    sum += total * host_exp::exp_nonpositive(top - m);
  }
}

}  // namespace

SOFTWAVE_HOST_ISA_CLONES
void host_lse_tile(const float* values, int w, float& m, float& sum) {
  lse_tile(values, w, m, sum);
}

SOFTWAVE_HOST_ISA_CLONES
void host_lse_tile(const double* values, int w, double& m, double& sum) {
  lse_tile(values, w, m, sum);
}

}  // namespace softwave::impl
