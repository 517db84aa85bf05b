#!/usr/bin/env bash
# HIP for gfx90a, compiled and linked on a machine without an AMD GPU:
#
#   1. the `hip` preset's bootstrapped Kokkos 3.4.1, with the Python extension
#      built as a wheel against it (scikit-build-core, as `pip install .`);
#   2. Kokkos 4.6.01's HIP backend, with the library, CLI, benchmarks and
#      whole test suite (tests/kokkos_versions/run.sh hip);
#
# and every binary and the extension must carry gfx90a code objects
# (tests/hip/check_offload.sh).
#
# Both are compiled unoptimised where hipcc allows it: nothing here can run
# them, so the check is that every source compiles for HIP and links with
# device code, and the optimiser would only double or treble the time
# (the Soft-DTW drivers, then one source, took hipcc 87 s of host and 87 s of device
# compilation at -O3; 12 s and 24 s at -O0). The wheel is built at -O0; with
# 4.6.01 the device code is compiled at -O1 (hipcc -O1 -Xarch_host -O0), as
# ROCm 5.2's warp functions that Kokkos 4.6 calls leave a gfx10 intrinsic
# behind at -O0 that gfx90a cannot select. A build for an AMD GPU uses the
# preset as it is (Release, -O3).
#
#   usage: tests/hip/run.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

export HCC_AMDGPU_TARGET=gfx90a
unoptimised="-O0 -DNDEBUG"

echo "== Kokkos 3.4.1-hip (the hip preset's bootstrap): the Python extension as a wheel"
cmake --preset hip
CXX=hipcc SOFTWAVE_KOKKOS_BACKEND=HIP /usr/bin/python3 -m pip wheel --no-deps \
  --config-settings=build-dir=build/python-hip \
  --config-settings=cmake.define.CMAKE_CXX_FLAGS_RELEASE="$unoptimised" \
  -w build/hip/dist .
tests/hip/check_offload.sh - build/hip/dist

tests/kokkos_versions/run.sh hip
