#!/usr/bin/env bash
# The library's test suite against the Kokkos versions HPC sites bring with
# find_package(Kokkos), beside the bootstrapped 3.4.1 of the presets:
#
#   4.6.01, g++           the current release (legacy View)
#   develop, clang++      the mdspan-based View that Kokkos 5 makes the default
#   develop + patch, g++  the same, with the upstream fix for g++ 12's
#                         miscompilation (cmake/patches/kokkos-develop-gcc12-tracker.patch):
#                         configure's empty-View check passes, and the library
#                         and CLI compile (at -O0) and link
#   develop, g++          unpatched: configure must refuse it, naming the cause
#
# Each Kokkos (OpenMP + Serial, Release) is built from the archives in
# ../shared/deps/ (or $SOFTWAVE_KOKKOS_ARCHIVES) and cached under
# .cache/kokkos-versions/; softwave's library, CLI and GoogleTest suite (not
# the CLI's tests, which run the binary the test command checks) are built
# against it in build/kokkos-<name>/ and run at one OpenMP thread (ctest -L
# threads1, two tests at a time).
#
# With `hip`, instead: Kokkos 4.6.01's HIP backend for gfx90a (hipcc), and
# softwave's library, CLI, benchmarks and tests compiled and linked against it,
# host code at -O0 and device code at -O1 (tests/hip/run.sh says why), each
# with gfx90a code (tests/hip/check_offload.sh); there is no AMD GPU to run
# them.
#
#   usage: tests/kokkos_versions/run.sh [openmp|hip]
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
mode=${1:-openmp}
deps=$(realpath "${SOFTWAVE_KOKKOS_ARCHIVES:-../shared/deps}")
here=tests/kokkos_versions
cache=$root/.cache/kokkos-versions
release=$deps/kokkos-4.6.01.tar.gz
develop=$deps/kokkos-develop-28848df.tar.gz
fix=$root/cmake/patches/kokkos-develop-gcc12-tracker.patch
for archive in "$release" "$develop"; do
  [ -f "$archive" ] || { echo "kokkos_versions: $archive is missing" >&2; exit 2; }
done

declare -A counts

# configure_softwave NAME CXX [ARGS...]: configures build/kokkos-NAME
# against the Kokkos in .cache/kokkos-versions/NAME.
configure_softwave() {
  cmake -S . -B "build/kokkos-$1" -G Ninja -Wno-dev \
    -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER="$2" \
    -DKokkos_ROOT="$cache/$1" \
    -DSOFTWAVE_ENABLE_BENCHMARKS=OFF \
    -DSOFTWAVE_TEST_THREADS=1 "${@:3}"
}

if [ "$mode" = hip ]; then
  # hipcc's target for the files that do not take Kokkos' flags (it would
  # otherwise probe for a GPU).
  export HCC_AMDGPU_TARGET=gfx90a
  echo "== Kokkos 4.6.01-hip (gfx90a)"
  # Debian's ROCm has no rocThrust, which only Kokkos::sort would use.
  "$here/build_kokkos.sh" "$release" "$cache/4.6.01-hip" hipcc -- \
    -DKokkos_ENABLE_HIP=ON -DKokkos_ARCH_AMD_GFX90A=ON -DKokkos_ENABLE_ROCTHRUST=OFF
  configure_softwave 4.6.01-hip hipcc -DSOFTWAVE_KOKKOS_BACKEND=HIP \
    -DSOFTWAVE_ENABLE_BENCHMARKS=ON \
    -DCMAKE_CXX_FLAGS_RELEASE="-O1 -Xarch_host -O0 -DNDEBUG" \
    -DSOFTWAVE_TEST_OPTIMIZATION= \
    >"$cache/4.6.01-hip.configure.log" || { cat "$cache/4.6.01-hip.configure.log"; exit 1; }
  grep -E "Kokkos  |empty-View check" "$cache/4.6.01-hip.configure.log" || true
  cmake --build build/kokkos-4.6.01-hip
  tests/hip/check_offload.sh build/kokkos-4.6.01-hip
  exit 0
fi
[ "$mode" = openmp ] || { echo "usage: tests/kokkos_versions/run.sh [openmp|hip]" >&2; exit 2; }

# suite NAME ARCHIVE CXX [PATCH]: builds Kokkos and softwave, runs the tests;
# with a patch, builds the library and CLI only.
suite() {
  local name=$1 archive=$2 cxx=$3 patch_file=${4:-}
  echo "== Kokkos $name"
  "$here/build_kokkos.sh" "$archive" "$cache/$name" "$cxx" $patch_file
  # develop must give the mdspan View, or this tests nothing new.
  if [[ $name == develop* ]] &&
      grep -q "define KOKKOS_ENABLE_IMPL_VIEW_LEGACY" "$cache/$name/include/KokkosCore_config.h"; then
    echo "kokkos_versions: Kokkos $name was configured with the legacy View" >&2
    exit 1
  fi
  # These builds check the Kokkos versions, not the optimiser (the test
  # command checks the library at -O3): at -O1, which makes a build and its
  # tests 9-21 % quicker than -O3 (g++ 12: 415 s against 455 s; clang++ 14:
  # 413 s against about 525 s), and the patched build, compiled and not
  # run, at -O0.
  local flags=(-DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG")
  [ -z "$patch_file" ] || flags=(-DCMAKE_CXX_FLAGS_RELEASE="-O0 -DNDEBUG")
  configure_softwave "$name" "$cxx" "${flags[@]}" >"$cache/$name.configure.log" ||
    { cat "$cache/$name.configure.log"; exit 1; }
  grep -E "Kokkos  |empty-View check" "$cache/$name.configure.log" || true
  if [ -n "$patch_file" ]; then
    cmake --build "build/kokkos-$name" --target softwave softwave_cli
    counts[$name]="empty-View check passed; library and CLI built"
    echo "   ${counts[$name]}"
    return
  fi
  cmake --build "build/kokkos-$name" --target softwave_cli softwave_unit_tests
  local log=$cache/$name.ctest.log
  if ! ctest --test-dir "build/kokkos-$name" -L threads1 -j 2 --output-on-failure \
      >"$log" 2>&1; then
    tail -n 80 "$log"
    echo "kokkos_versions: the test suite failed against Kokkos $name" >&2
    exit 1
  fi
  counts[$name]=$(grep -E "tests passed" "$log")
  echo "   ${counts[$name]}"
}

suite 4.6.01-g++ "$release" g++
suite develop-clang++ "$develop" clang++
suite develop-g++-patched "$develop" g++ "$fix"

echo "== Kokkos develop-g++ (unpatched): configure must refuse it"
if [ "$(g++ -dumpversion | cut -d. -f1)" != 12 ]; then
  echo "kokkos_versions: g++ is $(g++ -dumpversion), not 12: the refusal cannot be tested" >&2
  exit 1
fi
"$here/build_kokkos.sh" "$develop" "$cache/develop-g++" g++
if configure_softwave develop-g++ g++ >"$cache/develop-g++.configure.log" 2>&1; then
  echo "kokkos_versions: configure accepted unpatched Kokkos develop with g++ 12" >&2
  exit 1
fi
for phrase in "miscompiles an empty Kokkos::View" "kokkos/kokkos#8223" \
    "kokkos-develop-gcc12-tracker.patch" "Kokkos_ENABLE_IMPL_VIEW_LEGACY=ON"; do
  grep -qF "$phrase" "$cache/develop-g++.configure.log" || {
    cat "$cache/develop-g++.configure.log"
    echo "kokkos_versions: the refusal does not say \"$phrase\"" >&2
    exit 1
  }
done
echo "   refused with the expected message"

echo "== Kokkos versions: summary"
for name in 4.6.01-g++ develop-clang++ develop-g++-patched; do
  echo "   $name: ${counts[$name]}"
done
echo "   develop-g++ (unpatched): refused at configure"
