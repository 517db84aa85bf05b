#!/usr/bin/env bash
# Builds softwave_bench for the OpenMP backend, runs it and prints a summary.
#
#   perf/run_openmp.sh [benchmark flags...]
#     e.g. perf/run_openmp.sh --benchmark_filter='BM_Forward/16/' --benchmark_repetitions=3
#
# Build folder: build/openmp (the `openmp` CMake preset) unless
# SOFTWAVE_BUILD_DIR names another; a folder that is not configured yet is
# configured (the preset for build/openmp; otherwise Ninja + Release plus
# $SOFTWAVE_CMAKE_ARGS, e.g. "-DKokkos_ROOT=/opt/kokkos -DSOFTWAVE_ENABLE_TESTS=OFF").
# Output: perf/results/openmp-<date>.json (Google Benchmark JSON) and a
# markdown table on stdout (perf/summarize.py). OMP_NUM_THREADS defaults to
# nproc; OMP_PROC_BIND=false.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${SOFTWAVE_BUILD_DIR:-$repo/build/openmp}"

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  if [[ "$build" == "$repo/build/openmp" ]]; then
    (cd "$repo" && cmake --preset openmp)
  else
    # shellcheck disable=SC2086  # SOFTWAVE_CMAKE_ARGS is a list of arguments
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DSOFTWAVE_ENABLE_BENCHMARKS=ON ${SOFTWAVE_CMAKE_ARGS:-}
  fi
fi
cmake --build "$build" --target softwave_bench

mkdir -p "$repo/perf/results"
out="$repo/perf/results/openmp-$(date +%Y-%m-%d-%H%M%S).json"

export OMP_PROC_BIND=false
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
echo "softwave_bench: OMP_NUM_THREADS=$OMP_NUM_THREADS, writing $out" >&2

"$build/bin/softwave_bench" \
  --benchmark_out="$out" --benchmark_out_format=json "$@"

echo
python3 "$repo/perf/summarize.py" "$out"
