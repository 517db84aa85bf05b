# Provides Kokkos::kokkos, Kokkos_VERSION, Kokkos_ENABLE_<BACKEND> and
# SOFTWAVE_KOKKOS_ORIGIN (for the summary).
#
# An installed Kokkos (Kokkos_ROOT, CMAKE_PREFIX_PATH, Spack, modules) always
# wins. Without one, Kokkos is built at configure time from the copy Debian
# ships in its `trilinos` source package (Kokkos 3.4.1), with the project's
# patch for CUDA 13 / Hopper, and installed under
# ${SOFTWAVE_KOKKOS_CACHE_DIR}/kokkos/<backend>-<arch>-<buildtype> so that
# later configures (and other presets) reuse it.

set(SOFTWAVE_KOKKOS_BACKEND OPENMP CACHE STRING
    "Kokkos device backend to require: OPENMP, CUDA or HIP")
set_property(CACHE SOFTWAVE_KOKKOS_BACKEND PROPERTY STRINGS OPENMP CUDA HIP)
set(SOFTWAVE_CUDA_ARCH HOPPER90 CACHE STRING
    "Kokkos_ARCH_<name> of a bootstrapped CUDA Kokkos (HOPPER90, AMPERE80, ...)")
set(SOFTWAVE_HIP_ARCH VEGA90A CACHE STRING
    "Kokkos_ARCH_<name> of a bootstrapped HIP Kokkos (VEGA90A, VEGA908, ...)")
option(SOFTWAVE_KOKKOS_BOOTSTRAP
       "Skip the search for an installed Kokkos and use the bootstrapped one" OFF)
set(SOFTWAVE_KOKKOS_CACHE_DIR "${PROJECT_SOURCE_DIR}/.cache" CACHE PATH
    "Where the bootstrap keeps the Kokkos source and its installs")
set(SOFTWAVE_KOKKOS_SOURCE_DIR "${SOFTWAVE_KOKKOS_CACHE_DIR}/kokkos-src" CACHE PATH
    "Pristine Kokkos 3.4.1 source for the bootstrap; fetched with apt when absent")

string(TOUPPER "${SOFTWAVE_KOKKOS_BACKEND}" _softwave_backend)
if(NOT _softwave_backend MATCHES "^(OPENMP|CUDA|HIP)$")
  message(FATAL_ERROR
    "SOFTWAVE_KOKKOS_BACKEND is '${SOFTWAVE_KOKKOS_BACKEND}'; use OPENMP, CUDA or HIP.")
endif()

set(_softwave_patch "${CMAKE_CURRENT_LIST_DIR}/patches/kokkos-3.4.1-softwave.patch")
set(_softwave_cache "${SOFTWAVE_KOKKOS_CACHE_DIR}/kokkos")

# Echoes COMMAND, lets its output through, and stops configure with WHY if it
# fails.
function(_softwave_run why)
  execute_process(COMMAND ${ARGN} COMMAND_ECHO STDOUT RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "Kokkos bootstrap: ${why} (exit status ${rc}).")
  endif()
endfunction()

# Returns in OUT a copy of SOFTWAVE_KOKKOS_SOURCE_DIR with the project's patch
# applied. The pristine tree stays untouched so a changed patch or another
# source tree simply gets a new copy (its name carries both).
function(_softwave_kokkos_patched_source out)
  # Presets configured at the same time must not fetch or patch twice.
  file(MAKE_DIRECTORY "${_softwave_cache}")
  file(LOCK "${_softwave_cache}/source.lock" GUARD FUNCTION TIMEOUT 1800)
  set(src "${SOFTWAVE_KOKKOS_SOURCE_DIR}")
  if(NOT EXISTS "${src}/CMakeLists.txt")
    find_program(_softwave_sh sh REQUIRED)
    message(STATUS "Kokkos bootstrap: no Kokkos source in ${src}; fetching it")
    _softwave_run("could not fetch the Kokkos source. Either install Kokkos \
(and set Kokkos_ROOT), or point SOFTWAVE_KOKKOS_SOURCE_DIR at a Kokkos 3.4.1 \
tree (e.g. a .cache/kokkos-src carried from a machine with apt)"
      ${_softwave_sh} "${PROJECT_SOURCE_DIR}/cmake/bootstrap_kokkos.sh" "${src}")
  endif()

  file(SHA256 "${_softwave_patch}" patch_hash)
  string(SHA256 key "${patch_hash}|${src}")
  string(SUBSTRING "${key}" 0 12 key)
  set(dst "${_softwave_cache}/src-${key}")
  if(EXISTS "${dst}/.softwave-patched")
    set(${out} "${dst}" PARENT_SCOPE)
    return()
  endif()

  # `patch` is the natural tool but is missing from minimal Debian images;
  # `git apply` does the same job. GIT_CEILING_DIRECTORIES keeps git from
  # treating the enclosing softwave checkout as the repository to patch.
  find_program(_softwave_patch_exe patch)
  find_program(_softwave_git_exe git)
  if(_softwave_patch_exe)
    set(apply ${_softwave_patch_exe} -p1 --forward --batch --input)
    set(check ${_softwave_patch_exe} -p1 --forward --batch --dry-run --input)
    set(check_reverse ${_softwave_patch_exe} -p1 --reverse --batch --dry-run --input)
  elseif(_softwave_git_exe)
    set(git ${CMAKE_COMMAND} -E env GIT_CEILING_DIRECTORIES=${_softwave_cache}
            ${_softwave_git_exe} apply -p1)
    set(apply ${git})
    set(check ${git} --check)
    set(check_reverse ${git} --check --reverse)
  else()
    message(FATAL_ERROR "Kokkos bootstrap: neither `patch` nor `git` was found "
                        "to apply ${_softwave_patch} (apt-get install patch).")
  endif()

  set(tmp "${dst}.tmp")
  file(REMOVE_RECURSE "${tmp}")
  file(COPY "${src}/" DESTINATION "${tmp}")
  execute_process(COMMAND ${check} "${_softwave_patch}" WORKING_DIRECTORY "${tmp}"
                  RESULT_VARIABLE applies OUTPUT_QUIET ERROR_QUIET)
  execute_process(COMMAND ${check_reverse} "${_softwave_patch}" WORKING_DIRECTORY "${tmp}"
                  RESULT_VARIABLE applied OUTPUT_QUIET ERROR_QUIET)
  if(applies EQUAL 0)
    message(STATUS "Kokkos bootstrap: applying ${_softwave_patch}")
    execute_process(COMMAND ${apply} "${_softwave_patch}" WORKING_DIRECTORY "${tmp}"
                    RESULT_VARIABLE rc)
  elseif(applied EQUAL 0)
    set(rc 0) # the source tree given to us already carries the patch
  else()
    set(rc 1)
  endif()
  if(NOT rc EQUAL 0)
    file(REMOVE_RECURSE "${tmp}")
    message(FATAL_ERROR
      "Kokkos bootstrap: ${_softwave_patch} does not apply to ${src}. The bootstrap "
      "expects Kokkos 3.4.1 as shipped in Debian's trilinos 13.2 source. Remove "
      "that folder to fetch it again, or install a Kokkos and set Kokkos_ROOT.")
  endif()
  file(TOUCH "${tmp}/.softwave-patched")
  file(RENAME "${tmp}" "${dst}")
  set(${out} "${dst}" PARENT_SCOPE)
endfunction()

# Builds and installs Kokkos for the requested backend unless an install made
# with the same inputs is already there; returns its prefix in OUT.
function(_softwave_bootstrap_kokkos out)
  _softwave_kokkos_patched_source(src)

  # Only the Debug preset needs a different Kokkos: bounds checks and Kokkos'
  # own debug checks then run inside softwave's kernels too.
  if(CMAKE_BUILD_TYPE STREQUAL "Debug")
    set(build_type Debug)
    set(args -DKokkos_ENABLE_DEBUG=ON -DKokkos_ENABLE_DEBUG_BOUNDS_CHECK=ON)
  else()
    set(build_type Release)
    set(args)
  endif()
  set(env) # prefix for the Kokkos configure and build commands
  # The compiler by its resolved path: /usr/bin/c++ (the presets) and
  # /usr/bin/x86_64-linux-gnu-g++ (pip's build) are one g++, and the stamp
  # below must not see two, or each build would rebuild the shared install.
  get_filename_component(cxx "${CMAKE_CXX_COMPILER}" REALPATH)
  list(APPEND args
    -DCMAKE_BUILD_TYPE=${build_type}
    -DCMAKE_CXX_STANDARD=17
    -DCMAKE_CXX_EXTENSIONS=OFF
    # Static, but linkable into the Python extension module.
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON
    -DKokkos_ENABLE_SERIAL=ON
    -DKokkos_ENABLE_TESTS=OFF
    -DKokkos_ENABLE_EXAMPLES=OFF
    -DCMAKE_INSTALL_MESSAGE=NEVER) # a thousand header names say nothing

  if(_softwave_backend STREQUAL "OPENMP")
    set(arch host)
    list(APPEND args -DCMAKE_CXX_COMPILER=${cxx} -DKokkos_ENABLE_OPENMP=ON)
  elseif(_softwave_backend STREQUAL "CUDA")
    # nvcc_wrapper calls plain `nvcc` (or $CUDA_ROOT/bin/nvcc), at Kokkos'
    # build and at every later compile, so a hint here would not help.
    find_program(_softwave_nvcc nvcc PATHS ENV PATH NO_DEFAULT_PATH NO_CACHE)
    if(NOT _softwave_nvcc AND NOT EXISTS "$ENV{CUDA_ROOT}/bin/nvcc")
      message(FATAL_ERROR "Kokkos bootstrap: SOFTWAVE_KOKKOS_BACKEND=CUDA but nvcc "
                          "is not on PATH (add the CUDA toolkit's bin/ to PATH).")
    endif()
    set(arch ${SOFTWAVE_CUDA_ARCH})
    # nvcc_wrapper would use whichever g++ is first on PATH as host compiler;
    # make it the project's, as Kokkos' launcher does for softwave's sources.
    set(env ${CMAKE_COMMAND} -E env NVCC_WRAPPER_DEFAULT_COMPILER=${cxx})
    list(APPEND args
      -DCMAKE_CXX_COMPILER=${src}/bin/nvcc_wrapper
      -DKokkos_ENABLE_CUDA=ON
      -DKokkos_ENABLE_CUDA_LAMBDA=ON
      -DKokkos_ARCH_${arch}=ON)
  else()
    if(NOT CMAKE_CXX_COMPILER MATCHES "hipcc")
      message(FATAL_ERROR "Kokkos bootstrap: SOFTWAVE_KOKKOS_BACKEND=HIP needs "
                          "CMAKE_CXX_COMPILER=hipcc (ROCm), not ${CMAKE_CXX_COMPILER}.")
    endif()
    set(arch ${SOFTWAVE_HIP_ARCH})
    list(APPEND args
      -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
      -DKokkos_ENABLE_HIP=ON
      -DKokkos_ARCH_${arch}=ON)
  endif()

  find_program(_softwave_ninja NAMES ninja ninja-build)
  if(_softwave_ninja)
    list(APPEND args -G Ninja -DCMAKE_MAKE_PROGRAM=${_softwave_ninja})
  endif()

  string(TOLOWER "${_softwave_backend}-${arch}-${build_type}" name)
  set(prefix "${_softwave_cache}/${name}")
  set(stamp "${prefix}/.softwave-stamp")
  # Only a configure that needs this very install waits for its build.
  file(LOCK "${prefix}.lock" GUARD FUNCTION TIMEOUT 7200)
  # Anything that changes the install belongs in the stamp.
  string(REPLACE ";" "\n" stamp_text "${src};${env};${args}")
  if(EXISTS "${stamp}")
    file(READ "${stamp}" old_stamp)
    if(old_stamp STREQUAL stamp_text)
      set(${out} "${prefix}" PARENT_SCOPE)
      return()
    endif()
  endif()

  set(build "${_softwave_cache}/build-${name}")
  file(REMOVE_RECURSE "${build}" "${prefix}")
  cmake_host_system_information(RESULT jobs QUERY NUMBER_OF_LOGICAL_CORES)
  message(STATUS "Kokkos bootstrap: building Kokkos (${name}) into ${prefix}")
  string(TIMESTAMP t0 "%s")
  _softwave_run("configuring Kokkos failed; see the output above"
    ${env} ${CMAKE_COMMAND} -S ${src} -B ${build} -DCMAKE_INSTALL_PREFIX=${prefix} ${args})
  _softwave_run("building Kokkos failed; see the output above"
    ${env} ${CMAKE_COMMAND} --build ${build} --parallel ${jobs})
  _softwave_run("installing Kokkos failed; see the output above"
    ${CMAKE_COMMAND} --install ${build})
  string(TIMESTAMP t1 "%s")
  math(EXPR seconds "${t1} - ${t0}")
  message(STATUS "Kokkos bootstrap: ${name} built and installed in ${seconds} s")
  file(REMOVE_RECURSE "${build}")
  file(WRITE "${stamp}" "${stamp_text}")
  set(${out} "${prefix}" PARENT_SCOPE)
endfunction()

# A Kokkos_DIR left in the cache by an earlier bootstrap is not an
# "installed" Kokkos: go through the bootstrap again, which checks its stamp.
string(FIND "${Kokkos_DIR}" "${_softwave_cache}/" _softwave_pos)
if(NOT SOFTWAVE_KOKKOS_BOOTSTRAP AND NOT _softwave_pos EQUAL 0)
  find_package(Kokkos CONFIG QUIET)
endif()

if(Kokkos_FOUND)
  if(NOT Kokkos_ENABLE_${_softwave_backend})
    message(FATAL_ERROR
      "The Kokkos found at ${Kokkos_DIR} has no ${_softwave_backend} backend "
      "(it has: ${Kokkos_DEVICES}). Point Kokkos_ROOT at a Kokkos built with "
      "Kokkos_ENABLE_${_softwave_backend}=ON, or configure with "
      "-DSOFTWAVE_KOKKOS_BOOTSTRAP=ON to build one from source.")
  endif()
  set(SOFTWAVE_KOKKOS_ORIGIN "installed at ${Kokkos_DIR}")
else()
  _softwave_bootstrap_kokkos(_softwave_kokkos_prefix)
  unset(Kokkos_DIR CACHE)
  find_package(Kokkos REQUIRED CONFIG PATHS "${_softwave_kokkos_prefix}" NO_DEFAULT_PATH)
  set(SOFTWAVE_KOKKOS_ORIGIN
      "bootstrapped from Debian trilinos source, ${_softwave_kokkos_prefix}")
endif()

include(SoftwaveKokkosCheck)

# The enabled Kokkos backends, in one order: the summary prints them, and the
# installed package config requires an application's Kokkos to have the same.
set(SOFTWAVE_KOKKOS_BACKENDS "")
foreach(_softwave_backend_name SERIAL OPENMP THREADS CUDA HIP SYCL)
  if(Kokkos_ENABLE_${_softwave_backend_name})
    list(APPEND SOFTWAVE_KOKKOS_BACKENDS ${_softwave_backend_name})
  endif()
endforeach()

# Files that use Kokkos must be compiled by nvcc_wrapper under CUDA. Kokkos'
# config (3.4 through 4.x) arranges this itself by setting a global
# RULE_LAUNCH_COMPILE that redirects every compile carrying Kokkos' flags;
# do it here only if that did not happen and the compiler cannot do CUDA.
if(Kokkos_ENABLE_CUDA)
  get_property(_softwave_launch GLOBAL PROPERTY RULE_LAUNCH_COMPILE)
  if(NOT _softwave_launch AND NOT CMAKE_CXX_COMPILER MATCHES "nvcc"
     AND NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    if(COMMAND kokkos_compilation)
      kokkos_compilation(PROJECT)
    else()
      message(FATAL_ERROR "Kokkos has CUDA but ${CMAKE_CXX_COMPILER} cannot compile "
                          "it: configure with CMAKE_CXX_COMPILER=<kokkos>/bin/nvcc_wrapper.")
    endif()
  endif()
endif()
