#!/usr/bin/env bash
# Where a kernel's instructions go, per SASS instruction: Nsight Compute's
# source counters (executed warp instructions and sampled stall reasons of
# every instruction) for one launch of the kernels whose names match
# KERNEL_REGEX in one benchmark, as CSV under $OUT, beside the kernel's
# launch statistics. Run it after perf/device/run.sh, which builds
# build/cuda/bin/softwave_bench.
#
# Usage: perf/device/sass_profile.sh KERNEL_REGEX BENCHMARK_FILTER NAME
#   writes $OUT/NAME.txt (ncu's summary sections), $OUT/NAME.csv.gz (the
#   source page: one row per SASS instruction) and $OUT/NAME.log (the
#   profiled run's output).
#   KERNEL_NAME_BASE=demangled matches KERNEL_REGEX against the whole
#   demangled name (a Kokkos kernel's function is its launch wrapper; its
#   functor's type, in the template arguments, names it).
set -uo pipefail
cd "$(dirname "$0")/../.."
kernel=$1 filter=$2 name=$3
OUT=${OUT:-/tmp/softwave-device}
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/tmp/softwave-deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu \
  /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { echo "no ncu here"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
report=$work/$name
# --launch-skip 1: the first launch also pays for module loading.
"$ncu" --kernel-name-base "${KERNEL_NAME_BASE:-function}" -k "regex:$kernel" --launch-skip 1 --launch-count 1 \
  --section LaunchStats --section Occupancy --section SchedulerStats \
  --section WarpStateStats --section SourceCounters -o "$report" \
  build/cuda/bin/softwave_bench --softwave_grid=gpu --softwave_checks=off \
  --benchmark_min_time=0.02 --benchmark_filter="$filter" \
  >"$OUT/$name.log" 2>&1 || { tail -20 "$OUT/$name.log"; exit 1; }
"$ncu" -i "$report.ncu-rep" >"$OUT/$name.txt" 2>&1
"$ncu" -i "$report.ncu-rep" --page source --print-source sass --csv \
  2>&1 | gzip >"$OUT/$name.csv.gz"
