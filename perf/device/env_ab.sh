#!/usr/bin/env bash
# A/B of one build's settings: runs softwave_bench once per value of an
# environment variable (one of the SOFTWAVE_BENCH_* knobs the benchmark
# files document), alternately, so that every value meets the same clocks
# and neighbours. Run it after perf/device/run.sh has built build/cuda.
# Usage: perf/device/env_ab.sh VARIABLE "VALUE1 VALUE2 ..." [rounds] [filter]
#   e.g. perf/device/env_ab.sh SOFTWAVE_BENCH_DEER_START_WARM_UP "0 32" 3 \
#          'BM_DeerGru/deer_(full|diagonal)/1/1000000/'
# GRID=cpu and BENCH=build/openmp/bin/softwave_bench run it on the host.
# Writes $OUT/env-ab.json (every run's Google Benchmark output, by value)
# and prints each benchmark's times and counters side by side.
set -uo pipefail
cd "$(dirname "$0")/../.."
variable=$1 values=$2 rounds=${3:-3} filter=${4:-.}
OUT=${OUT:-/tmp/softwave-device}
mkdir -p "$OUT"
bench=${BENCH:-build/cuda/bin/softwave_bench}
deps=/tmp/softwave-deps
export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
runs=$(mktemp -d)
for k in $(seq 1 "$rounds"); do
  for value in $values; do
    env "$variable=$value" "$bench" --softwave_grid="${GRID:-gpu}" \
      --softwave_checks=off --benchmark_filter="$filter" \
      --benchmark_out="$runs/$value-$k.json" --benchmark_out_format=json \
      >/dev/null 2>&1 || echo "$variable=$value round $k failed"
  done
done
python3 - "$runs" "$variable" "$values" "$rounds" "$OUT/env-ab.json" <<'PY'
import json, sys
runs, variable, values, rounds, out = sys.argv[1:]
values, rounds = values.split(), int(rounds)
data = {v: [json.load(open(f"{runs}/{v}-{k}.json")) for k in range(1, rounds + 1)] for v in values}
json.dump({"variable": variable, "runs": data}, open(out, "w"))
names = [b["name"] for b in data[values[0]][0]["benchmarks"]]
for name in names:
    print(name.replace("/manual_time", ""))
    for v in values:
        found = [b for run in data[v] for b in run["benchmarks"] if b["name"] == name]
        times = " ".join(f"{b['real_time']:.3f}" for b in found)
        counters = {c: found[0][c] for c in ("iterations", "max_dy", "rho") if c in found[0]}
        print(f"  {variable}={v}: {times} {found[0]['time_unit']}  {counters}")
PY
