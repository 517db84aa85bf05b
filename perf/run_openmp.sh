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
# Output, in the build tree (never in git):
#   <build>/perf-results/softdtw-openmp-<threads>threads-<date>-<commit>.json
# (Google Benchmark JSON) and a markdown table on stdout (perf/summarize.py).
# perf/RESULTS.md says which results are kept in perf/results/ and how they
# are named. OMP_NUM_THREADS defaults to nproc; OMP_PROC_BIND=false.
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

export OMP_PROC_BIND=false
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"

commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
mkdir -p "$build/perf-results"
out="$build/perf-results/softdtw-openmp-${OMP_NUM_THREADS}threads-$(date +%Y-%m-%d-%H%M%S)-$commit.json"
echo "softwave_bench: OMP_NUM_THREADS=$OMP_NUM_THREADS, writing $out" >&2

"$build/bin/softwave_bench" \
  --benchmark_out="$out" --benchmark_out_format=json "$@"

echo
python3 "$repo/perf/summarize.py" "$out"
