# Refuses a Kokkos whose empty Views are not empty with this compiler.
#
# g++ 12 with the mdspan-based View (Kokkos develop after 4.6; the default
# View of Kokkos 5) builds without a warning and then crashes on the first
# copy of an empty View (see cmake/checks/empty_view_tracker.cpp). That is
# a library that compiles and fails most of its tests, so the build stops
# instead, naming the cause and the ways out.
#
# The check compiles one small program against the Kokkos that was found,
# with the project's compiler, and runs it: at configure time where the
# compiler can build it alone (a pass is remembered for that Kokkos and
# compiler), and with CUDA (whose nvcc_wrapper launcher a try_run project
# does not get) as a build step that the library depends on. That step
# runs this file as a script:
#   cmake -DSOFTWAVE_VIEW_CHECK=<program> -DSOFTWAVE_VIEW_CHECK_WHAT=<text> -P SoftwaveKokkosCheck.cmake

function(_softwave_view_check_failed what result output)
  string(STRIP "${output}" output)
  message(FATAL_ERROR
    "softwave: ${what} miscompiles an empty Kokkos::View (check exit status "
    "${result}):\n${output}\n"
    "A default-constructed View carries an allocation record at address 0 "
    "instead of the \"do not dereference\" flag, so a library built here would "
    "crash the first time it copies or destroys an empty View. This is g++ 12's "
    "miscompilation of the mdspan-based View (Kokkos develop after 4.6, and "
    "Kokkos 5): kokkos/kokkos#7464 and #8187, fixed upstream by kokkos/kokkos#8223.\n"
    "Any one of these fixes it:\n"
    "  - a Kokkos that contains that fix, or your Kokkos source with "
    "cmake/patches/kokkos-develop-gcc12-tracker.patch applied (patch -p1);\n"
    "  - another compiler for Kokkos and softwave (clang++ is tested);\n"
    "  - a Kokkos configured with -DKokkos_ENABLE_IMPL_VIEW_LEGACY=ON (the legacy View).")
endfunction()

if(CMAKE_SCRIPT_MODE_FILE)
  execute_process(COMMAND "${SOFTWAVE_VIEW_CHECK}" RESULT_VARIABLE result
                  OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result STREQUAL "0")
    _softwave_view_check_failed("${SOFTWAVE_VIEW_CHECK_WHAT}" "${result}" "${output}")
  endif()
  return()
endif()

# Configure time: returns in OUT whether the library must wait for the
# build-time check instead (the program did not compile here).
function(_softwave_check_kokkos_views out)
  set(${out} OFF PARENT_SCOPE)
  set(key "${Kokkos_DIR}|${Kokkos_VERSION}|${CMAKE_CXX_COMPILER}|${CMAKE_CXX_COMPILER_VERSION}")
  if(SOFTWAVE_KOKKOS_VIEW_CHECK_PASSED STREQUAL key)
    return()
  endif()
  set(what "Kokkos ${Kokkos_VERSION} at ${Kokkos_DIR} with ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
  set(SOFTWAVE_KOKKOS_VIEW_CHECK_WHAT "${what}" PARENT_SCOPE)
  if(CMAKE_CROSSCOMPILING)
    message(STATUS "softwave: empty-View check of ${what} skipped (cross-compiling)")
    return()
  endif()

  set(bindir "${CMAKE_BINARY_DIR}/CMakeFiles/softwave-kokkos-view-check")
  try_run(run_result compiled "${bindir}" "${SOFTWAVE_KOKKOS_VIEW_CHECK_SOURCE}"
    CXX_STANDARD 17
    CXX_STANDARD_REQUIRED ON
    LINK_LIBRARIES Kokkos::kokkos
    COMPILE_OUTPUT_VARIABLE compile_output
    RUN_OUTPUT_VARIABLE run_output)
  if(NOT compiled)
    file(WRITE "${bindir}/compile.log" "${compile_output}")
    if(Kokkos_ENABLE_CUDA)
      message(STATUS "softwave: empty-View check of ${what}: at build time (with CUDA "
                     "it needs Kokkos' compiler launcher)")
      set(${out} ON PARENT_SCOPE)
    else()
      message(WARNING "softwave: the empty-View check of ${what} did not compile "
                      "(${bindir}/compile.log), so it was not run.")
    endif()
    return()
  endif()
  if(NOT run_result STREQUAL "0")
    _softwave_view_check_failed("${what}" "${run_result}" "${run_output}")
  endif()
  set(SOFTWAVE_KOKKOS_VIEW_CHECK_PASSED "${key}" CACHE INTERNAL
      "Kokkos and compiler whose empty Views passed the configure-time check")
  message(STATUS "softwave: empty-View check of ${what}: passed")
endfunction()

set(SOFTWAVE_KOKKOS_VIEW_CHECK_SOURCE "${CMAKE_CURRENT_LIST_DIR}/checks/empty_view_tracker.cpp")
_softwave_check_kokkos_views(SOFTWAVE_KOKKOS_VIEW_CHECK_AT_BUILD)

# The build-time form, for the library to depend on (core/CMakeLists.txt).
function(softwave_add_kokkos_view_check_to target)
  if(NOT SOFTWAVE_KOKKOS_VIEW_CHECK_AT_BUILD)
    return()
  endif()
  add_executable(softwave_kokkos_view_check "${SOFTWAVE_KOKKOS_VIEW_CHECK_SOURCE}")
  target_link_libraries(softwave_kokkos_view_check PRIVATE Kokkos::kokkos)
  set_target_properties(softwave_kokkos_view_check PROPERTIES
    RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/CMakeFiles/softwave-kokkos-view-check")
  set(stamp "${CMAKE_BINARY_DIR}/CMakeFiles/softwave-kokkos-view-check/passed")
  add_custom_command(OUTPUT "${stamp}"
    COMMAND ${CMAKE_COMMAND} -DSOFTWAVE_VIEW_CHECK=$<TARGET_FILE:softwave_kokkos_view_check>
            "-DSOFTWAVE_VIEW_CHECK_WHAT=${SOFTWAVE_KOKKOS_VIEW_CHECK_WHAT}"
            -P "${CMAKE_CURRENT_FUNCTION_LIST_FILE}"
    COMMAND ${CMAKE_COMMAND} -E touch "${stamp}"
    DEPENDS softwave_kokkos_view_check
    COMMENT "softwave: checking that empty Kokkos Views are empty"
    VERBATIM)
  add_custom_target(softwave_kokkos_view_checked DEPENDS "${stamp}")
  add_dependencies(${target} softwave_kokkos_view_checked)
endfunction()
