#!/usr/bin/env bash
# Installs a built softwave and uses it the way an application would:
#
#   tests/install/run.sh <softwave-build-dir> <scratch-dir>
#
# 1. cmake --install <build> --prefix <scratch>/prefix
# 2. checks that the headers, the library, bin/softwave, softwaveConfig.cmake
#    and softwaveConfigVersion.cmake are there
# 3. configures tests/install (find_package(softwave), softwave::softwave)
#    with only CMAKE_PREFIX_PATH=<prefix>: Kokkos must come through
#    softwave's config, so Kokkos_ROOT / Kokkos_DIR / CMAKE_PREFIX_PATH are
#    cleared from the environment
# 4. builds and runs it (Soft-DTW against a float64 reference), and, where
#    softwave was built with MPI, softwave::mpi under mpirun with 2 ranks
# 5. runs the installed <prefix>/bin/softwave --help
#
# Prints what failed and exits non-zero on any problem. <scratch-dir> is
# created if needed; its prefix/ and consumer-build/ are replaced.

set -euo pipefail

fail() {
  echo "tests/install: FAILED: $*" >&2
  exit 1
}
step() { echo "tests/install: $*"; }

[[ $# -eq 2 ]] || fail "usage: $0 <softwave-build-dir> <scratch-dir>"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source_dir="$(cd "$here/../.." && pwd)"
[[ -f "$1/CMakeCache.txt" ]] || fail "$1 is not a configured CMake build folder"
build="$(cd "$1" && pwd)"
mkdir -p "$2" || fail "cannot create $2"
scratch="$(cd "$2" && pwd)"
prefix="$scratch/prefix"
consumer="$scratch/consumer-build"
rm -rf "$prefix" "$consumer"
start=$SECONDS

# The application must be compiled by the compiler softwave was built with
# (hipcc for HIP; the same C++ library otherwise), so it is taken from the
# build. This says nothing about where Kokkos is.
cache_value() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
cxx="$(cache_value CMAKE_CXX_COMPILER)"
[[ -n "$cxx" ]] || fail "no CMAKE_CXX_COMPILER in $build/CMakeCache.txt"

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$scratch/install.log" 2>&1 ||
  { cat "$scratch/install.log" >&2; fail "cmake --install $build (was it built?)"; }

step "checking the install tree"
with_mpi="$(cache_value SOFTWAVE_ENABLE_MPI)"
for header in "$source_dir"/core/include/softwave/*.hpp; do
  name="include/softwave/$(basename "$header")"
  [[ "$name" == */mpi.hpp && "$with_mpi" != ON ]] && continue
  [[ -f "$prefix/$name" ]] || fail "$name was not installed"
done
libs="$(find "$prefix" -name 'libsoftwave.a' -o -name 'libsoftwave.so*')"
[[ -n "$libs" ]] || fail "no libsoftwave.a or libsoftwave.so under $prefix"
config="$(find "$prefix" -path '*/cmake/softwave/softwaveConfig.cmake')"
[[ -n "$config" ]] || fail "no lib*/cmake/softwave/softwaveConfig.cmake under $prefix"
config_dir="$(dirname "$config")"
for file in softwaveConfigVersion.cmake softwaveTargets.cmake; do
  [[ -f "$config_dir/$file" ]] || fail "$config_dir/$file was not installed"
done
[[ -f "$prefix/share/doc/softwave/LICENSE" ]] || fail "the LICENSE was not installed"
[[ -x "$prefix/bin/softwave" ]] ||
  fail "$prefix/bin/softwave was not installed (is SOFTWAVE_ENABLE_CLI ON in $build?)"
(cd "$prefix" && find . -type f | sort | sed 's|^\./|  |')

step "configuring tests/install against $prefix"
env -u Kokkos_ROOT -u Kokkos_DIR -u CMAKE_PREFIX_PATH \
  cmake -S "$here" -B "$consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_CXX_COMPILER="$cxx" >"$scratch/configure.log" 2>&1 ||
  { cat "$scratch/configure.log" >&2; fail "configuring the consumer project"; }
grep -E '^-- (softwave|Kokkos) ' "$scratch/configure.log" || true

step "building the consumer project"
cmake --build "$consumer" --parallel >"$scratch/build.log" 2>&1 ||
  { cat "$scratch/build.log" >&2; fail "building the consumer project"; }

step "running it"
# Two threads without pinning: the check is tiny, and other jobs share the
# machine.
OMP_NUM_THREADS=2 OMP_PROC_BIND=false "$consumer/softwave_install_test" ||
  fail "the consumer program (softwave::soft_dtw against the reference)"
if [[ "$with_mpi" == ON ]]; then
  [[ -x "$consumer/softwave_install_mpi_test" ]] ||
    fail "softwave::mpi: no consumer program (softwave_HAS_MPI not set?)"
  OMP_NUM_THREADS=1 OMP_PROC_BIND=false OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun -q --oversubscribe -n 2 "$consumer/softwave_install_mpi_test" ||
    fail "the consumer program of softwave::mpi under mpirun -n 2"
fi

step "$prefix/bin/softwave --help"
help="$("$prefix/bin/softwave" --help 2>&1)" ||
  { echo "$help" >&2; fail "$prefix/bin/softwave --help"; }
[[ -n "$help" ]] || fail "$prefix/bin/softwave --help printed nothing"
echo "$help" | head -n 3

step "passed in $((SECONDS - start)) s"
