# GoogleTest and Google Benchmark come from Debian's packages, which
# tools/setup.sh installs (the README's commands run it first); without them
# configure says what to install or which option to turn off.

function(softwave_require_package package debian_package option)
  find_package(${package} QUIET)
  if(NOT ${package}_FOUND)
    message(FATAL_ERROR
      "softwave: ${option} is ON but ${package} was not found. Install it with "
      "tools/setup.sh (as root; or apt-get install ${debian_package}), or configure "
      "with -D${option}=OFF.")
  endif()
endfunction()

if(SOFTWAVE_ENABLE_TESTS)
  softwave_require_package(GTest libgtest-dev SOFTWAVE_ENABLE_TESTS)
endif()
if(SOFTWAVE_ENABLE_BENCHMARKS)
  softwave_require_package(benchmark libbenchmark-dev SOFTWAVE_ENABLE_BENCHMARKS)
endif()
