// deer() and deer_gradients() of the test's user cell compiled in a second
// translation unit: the solver's kernels for one cell then exist in two
// objects of test_deer, which CUDA's extended lambdas do not survive
// (static_checks.NoLambdaInTwoTranslationUnits reads these objects).

#include "deer_logistic_map.hpp"
#include "execution_spaces.hpp"

namespace swt {

template <class Space>
void logistic_deer_in_second_unit(
    const Space& space, const LogisticMap& cell,
    const softwave::DeerInputs<double, Space>& inputs,
    const softwave::DeerResult<double, Space>& result,
    const softwave::DeerOptions& options) {
  softwave::deer(space, cell, inputs, result, options);
}

template <class Space>
void logistic_gradients_in_second_unit(
    const Space& space, const LogisticMap& cell,
    const softwave::DeerInputs<double, Space>& inputs,
    softwave::DeerView3<const double, Space> y,
    const softwave::DeerGradients<double, Space>& gradients,
    const softwave::DeerOptions& options) {
  softwave::deer_gradients(space, cell, inputs, y, gradients, options);
}

#define SWT_SECOND_UNIT(SPACE)                            \
  template void logistic_deer_in_second_unit<SPACE>(      \
      const SPACE&, const LogisticMap&,                   \
      const softwave::DeerInputs<double, SPACE>&,         \
      const softwave::DeerResult<double, SPACE>&,         \
      const softwave::DeerOptions&);                      \
  template void logistic_gradients_in_second_unit<SPACE>( \
      const SPACE&, const LogisticMap&,                   \
      const softwave::DeerInputs<double, SPACE>&,         \
      softwave::DeerView3<const double, SPACE>,           \
      const softwave::DeerGradients<double, SPACE>&,      \
      const softwave::DeerOptions&);

SWT_SECOND_UNIT(Kokkos::DefaultExecutionSpace)
#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
SWT_SECOND_UNIT(Kokkos::DefaultHostExecutionSpace)
#endif

}  // namespace swt
