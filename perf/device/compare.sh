#!/usr/bin/env bash
# A/B on the GPU machine: runs the softwave_bench of this tree and that of a
# baseline tree alternately, in one process's turn each, so that both meet
# the same clocks and the same neighbours. Run it after perf/device/run.sh
# (which builds build/cuda/bin/softwave_bench here).
#
# The baseline travels as an ignored path, for example
#   git archive <commit> CMakeLists.txt CMakePresets.json cmake core backends \
#     bindings perf tests | (mkdir -p .cache/ab-base && tar x -C .cache/ab-base)
# and is built here with the same compiler and flags against this tree's
# Kokkos install (one Kokkos build for both; its cache directory is locked).
# Usage: perf/device/compare.sh BASE_DIR [rounds] [benchmark filter]
# Writes $OUT/ab.json (every round's Google Benchmark output of both) and
# prints each round's times side by side. Rounds 0 only builds the baseline.
set -uo pipefail
cd "$(dirname "$0")/../.."
base=$1 rounds=${2:-3} filter=${3:-BM_ForwardBackward/}
OUT=${OUT:-/tmp/softwave-device}
deps=/tmp/softwave-deps
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
if [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++; fi

if [ ! -x "$base/build/cuda/bin/softwave_bench" ]; then
  (cd "$base" && cmake --preset cuda \
    -DSOFTWAVE_KOKKOS_SOURCE_DIR="$OLDPWD/.cache/kokkos-src" \
    -DSOFTWAVE_KOKKOS_CACHE_DIR="$OLDPWD/.cache" \
    -DCMAKE_PREFIX_PATH="$deps/usr" \
    >"$OUT/ab-configure.log" 2>&1 &&
    cmake --build --preset cuda -j "$(nproc)" --target softwave_bench \
      >"$OUT/ab-build.log" 2>&1) ||
    { tail -30 "$OUT/ab-build.log" "$OUT/ab-configure.log"; exit 1; }
fi

[ "$rounds" -gt 0 ] || exit 0

rounds_dir=$(mktemp -d)
run() {  # run NAME BINARY ROUND
  "$2" --softwave_grid=gpu --softwave_checks=off --benchmark_min_time=0.2 \
    --benchmark_filter="$filter" --benchmark_out="$rounds_dir/$1-$3.json" \
    --benchmark_out_format=json >/dev/null 2>&1 || echo "$1 round $3 failed"
}
for k in $(seq 1 "$rounds"); do
  run base "$base/build/cuda/bin/softwave_bench" "$k"
  run new build/cuda/bin/softwave_bench "$k"
done
python3 - "$rounds_dir" "$rounds" "$OUT/ab.json" <<'EOF'
import json, sys
rounds_dir, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
runs = {name: [json.load(open(f"{rounds_dir}/{name}-{k}.json"))
               for k in range(1, rounds + 1)] for name in ("base", "new")}
json.dump(runs, open(out, "w"))
def times(run):
    return {b["name"].replace("/manual_time", ""): b["real_time"]
            for b in run["benchmarks"]}
base = [times(run) for run in runs["base"]]
new = [times(run) for run in runs["new"]]
print("| benchmark | base ms (rounds) | new ms (rounds) | new/base (fastest) |")
print("|---|---|---|---|")
for name in base[0]:
    b = [t[name] for t in base]; n = [t[name] for t in new]
    fmt = lambda v: " ".join(f"{x:.3f}" for x in v)
    print(f"| {name} | {fmt(b)} | {fmt(n)} | {min(n) / min(b):.3f} |")
EOF
