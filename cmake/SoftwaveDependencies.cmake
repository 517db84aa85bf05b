# GoogleTest and Google Benchmark come from Debian's packages. On a fresh
# machine where they are missing, configure installs them with apt-get (the
# set-up runs as root there); elsewhere it says what to install.
option(SOFTWAVE_INSTALL_MISSING "Install missing Debian packages with apt-get at configure time" ON)

function(softwave_require_package package debian_package)
  find_package(${package} QUIET)
  if(${package}_FOUND)
    return()
  endif()
  find_program(SOFTWAVE_APT_GET apt-get)
  execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(SOFTWAVE_INSTALL_MISSING AND SOFTWAVE_APT_GET AND _uid STREQUAL "0")
    message(STATUS "softwave: ${package} missing, installing Debian package ${debian_package}")
    execute_process(COMMAND ${SOFTWAVE_APT_GET} update -qq)
    execute_process(COMMAND ${SOFTWAVE_APT_GET} install -y -qq --no-install-recommends ${debian_package}
                    RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      message(FATAL_ERROR "softwave: apt-get install ${debian_package} failed (${_rc})")
    endif()
  endif()
  find_package(${package} REQUIRED)
endfunction()

if(SOFTWAVE_ENABLE_TESTS)
  softwave_require_package(GTest libgtest-dev)
endif()
if(SOFTWAVE_ENABLE_BENCHMARKS)
  softwave_require_package(benchmark libbenchmark-dev)
endif()
