// Calls of the public entry points with wrong views, which must not compile:
// each must fail in the entry point's static_assert, whose message names the
// argument (softdtw.hpp, barycenter.hpp). Each call is followed by the
// message it must produce ("// expect: ..."); check.cmake compiles this file
// and looks for every one of them in the compiler's output.

#include <softwave/barycenter.hpp>
#include <softwave/softdtw.hpp>

using Space = Kokkos::DefaultExecutionSpace;
using Mem = Space::memory_space;
template <class T>
using View3 = Kokkos::View<T***, Kokkos::LayoutRight, Mem>;
template <class T>
using View2 = Kokkos::View<T**, Kokkos::LayoutRight, Mem>;
template <class T>
using View1 = Kokkos::View<T*, Mem>;
// A memory space no execution space's memory space is, on every backend.
using Elsewhere =
    Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::AnonymousSpace>;

void wrong_arguments() {
  const Space space;
  const View3<double> x, y;
  const View1<double> values;

  softwave::soft_dtw(space, View2<double>(), y, values);
  // expect: softwave::soft_dtw: x must be a rank-3 Kokkos::View

  softwave::soft_dtw_divergence(
      space, x, Kokkos::View<double***, Kokkos::LayoutLeft, Mem>(), values);
  // expect: softwave::soft_dtw_divergence: y must be a rank-3 Kokkos::View

  softwave::soft_dtw_cost(space, x, View1<float>());
  // expect: softwave::soft_dtw_cost: values must be a rank-1 Kokkos::View

  softwave::pairwise(space, x, y, values);
  // expect: softwave::pairwise: matrix must be a rank-2 Kokkos::View

  softwave::dtw_path(space, View3<int>(), View3<int>(), View1<int>(),
                     View3<int>(), View1<int>());
  // expect: softwave::dtw_path: x must be a rank-3 Kokkos::View

  softwave::SeriesGradients<double, Space> gradients;
  softwave::soft_dtw_value_and_grad(space, x, Elsewhere(), values, gradients);
  // expect: softwave::soft_dtw_value_and_grad: y must be a rank-3 Kokkos::View

  softwave::CostGradients<double, Space> cost_gradients;
  softwave::soft_dtw_cost_value_and_grad(space, View3<float>(), values,
                                         cost_gradients);
  // expect: softwave::soft_dtw_cost_value_and_grad: cost must be a rank-3

  softwave::barycenter(space, x, View3<double>());
  // expect: softwave::barycenter: z must be a rank-2 Kokkos::View

  softwave::barycenter_objective(space, View3<float>(), View2<double>());
  // expect: softwave::barycenter_objective: X must be a rank-3 Kokkos::View
}
