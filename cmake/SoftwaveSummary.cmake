# One short block at the end of configure: what was found and enabled.
set(_softwave_backends "")
foreach(_backend SERIAL OPENMP THREADS CUDA HIP SYCL)
  if(Kokkos_ENABLE_${_backend})
    list(APPEND _softwave_backends ${_backend})
  endif()
endforeach()
# Specialised (vendor) paths live in backends/<vendor>; none is built yet, so
# every backend runs the portable Kokkos kernels.
set(_softwave_specialised "none (portable Kokkos kernels on every backend)")
message(STATUS "")
message(STATUS "softwave ${PROJECT_VERSION} configuration")
message(STATUS "  Kokkos            ${Kokkos_VERSION} (${SOFTWAVE_KOKKOS_ORIGIN})")
message(STATUS "  Kokkos backends   ${_softwave_backends}")
message(STATUS "  specialised paths ${_softwave_specialised}")
message(STATUS "  build type        ${CMAKE_BUILD_TYPE}")
message(STATUS "  CLI / tests / benchmarks  ${SOFTWAVE_ENABLE_CLI} / ${SOFTWAVE_ENABLE_TESTS} / ${SOFTWAVE_ENABLE_BENCHMARKS}")
message(STATUS "")
