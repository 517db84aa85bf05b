#pragma once
// The execution spaces every test of the library runs on, as a GoogleTest
// type list: each test is a typed test over swt::ExecutionSpaces, so one
// source tests the device and the host of a device build alike.
//
// The list is the spaces the library is compiled for. core/src instantiates
// its entry points for Kokkos::DefaultExecutionSpace and, when a device
// backend (CUDA, HIP, SYCL) is enabled, for Kokkos::DefaultHostExecutionSpace
// too, under the same condition as below:
//   OpenMP build:  OpenMP (it is both the default and the default host space)
//   CUDA build:    Cuda, then the host space (Serial with the bootstrapped
//                  Kokkos)
//   HIP build:     HIP, then the host space
// Kokkos::Serial is enabled beside OpenMP in the bootstrapped Kokkos, but the
// library has no instantiation for it on that build (a call would not link),
// and its host kernels are the ones OpenMP runs, which ctest already runs at
// one thread (OMP_NUM_THREADS=1).
//
// ctest names a test by its space: SoftDTWValues.SweepMatchesReferenceDouble
// <Kokkos::Cuda> (GoogleTest itself says SoftDTWValues/0, /1 in list order).

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <type_traits>

namespace swt {

// A space and a value type, for tests typed on both (test_barycenter.cpp).
template <class Space, class T>
struct SpaceAndValue {
  using space = Space;
  using value = T;
};

#if defined(KOKKOS_ENABLE_CUDA) || defined(KOKKOS_ENABLE_HIP) || \
    defined(KOKKOS_ENABLE_SYCL)
static_assert(!std::is_same_v<Kokkos::DefaultExecutionSpace,
                              Kokkos::DefaultHostExecutionSpace>,
              "a device build's default space is the device");
using ExecutionSpaces = ::testing::Types<Kokkos::DefaultExecutionSpace,
                                         Kokkos::DefaultHostExecutionSpace>;
// Every space with float64, then float32.
using ExecutionSpacesDoubleFloat =
    ::testing::Types<SpaceAndValue<Kokkos::DefaultExecutionSpace, double>,
                     SpaceAndValue<Kokkos::DefaultExecutionSpace, float>,
                     SpaceAndValue<Kokkos::DefaultHostExecutionSpace, double>,
                     SpaceAndValue<Kokkos::DefaultHostExecutionSpace, float>>;
#else
using ExecutionSpaces = ::testing::Types<Kokkos::DefaultExecutionSpace>;
using ExecutionSpacesDoubleFloat =
    ::testing::Types<SpaceAndValue<Kokkos::DefaultExecutionSpace, double>,
                     SpaceAndValue<Kokkos::DefaultExecutionSpace, float>>;
#endif

// Whether Space's memory is the host's (views there need no copy to read).
template <class Space>
constexpr bool on_host =
    Kokkos::SpaceAccessibility<Kokkos::HostSpace,
                               typename Space::memory_space>::accessible;

}  // namespace swt
