#!/usr/bin/env bash
# compute-sanitizer over the test suite's small shapes, on the CUDA build that
# perf/device/run.sh leaves in build/cuda (run it first, e.g. SKIP_BENCH=1).
#
# Every test runs under every tool as its own process (SANITIZE_JOBS of them
# at once on the one GPU), so a slow test costs only its own time. Left out
# by default: the accuracy grid (N = 1024), the long pairs (N = 5000 and up)
# and the memory-formula tests (large workspaces on purpose), i.e. the
# shapes that are not small; the CLI tests make the same library calls.
#
# Usage: perf/device/sanitize.sh [tool ...]   (default: racecheck memcheck)
#   SANITIZE_JOBS     processes at once (default 12)
#   SANITIZE_TIMEOUT  seconds per test (default 300); a test stopped there
#                     counts as such, with what the tool found until then
#   SANITIZE_FILTER   gtest filter (default: the small shapes, see above)
#   SANITIZE_DEADLINE seconds for the whole run (default: none): a test still
#                     running then is stopped (each run's limit is the lesser
#                     of SANITIZE_TIMEOUT and the time left), and tests that
#                     would start after it are reported as skipped. The
#                     sweeps start first, so a deadline shorter than a sweep
#                     shard under the tool stops them all and skips the rest
#   SANITIZE_SHARDS   processes per parameter sweep (default 4): each runs
#                     every n-th case (SOFTWAVE_TEST_SHARD, test_helpers.hpp)
# Writes $OUT/sanitize.md (the table, also printed), $OUT/sanitize-lines.txt
# (a line per run as it ends, so a call stopped early still returns what had
# finished) and $OUT/sanitize-logs.tar.gz; exits non-zero when a tool
# reports anything, a test fails or is stopped.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/softwave-device}
mkdir -p "$OUT"
tools=("$@")
[ ${#tools[@]} -eq 0 ] && tools=(racecheck memcheck)
jobs=${SANITIZE_JOBS:-12}
shards=${SANITIZE_SHARDS:-4}
limit=${SANITIZE_TIMEOUT:-300}
deadline=$(($(date +%s) + ${SANITIZE_DEADLINE:-1000000}))
filter=${SANITIZE_FILTER:--*LongPair*:*Accuracy*:Memory/*:Environment.*}
deps=/tmp/softwave-deps
[ -d "$deps" ] && export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
logs=$(mktemp -d)

# "binary test" for every selected test of every CUDA test executable. The
# typed tests run on the host space too (tests/execution_spaces.hpp; their
# suite line says "# TypeParam = ..."): only their Kokkos::Cuda copies touch
# the GPU, and only those are kept.
for bin in build/cuda/bin/test_*; do
  [ "$(basename "$bin")" = test_reference ] && continue  # host-only reference
  "$bin" --gtest_list_tests --gtest_filter="$filter" | awk -v bin="$bin" '
    /^[^ ]/ { suite = $1; host = /TypeParam = / && !/Kokkos::Cuda/ }
    /^  / && !host { print bin, suite $1 }'
done >"$logs/all.txt"
# The parameter sweeps take longest under a tool: they run as $shards
# processes each ("binary test i/n"; other tests "binary test -"), and start
# first, so the quick tests fill in around them.
slow='Sweep|FiniteDifferences|Specialised'
{
  grep -E "$slow" "$logs/all.txt" | while read -r bin test; do
    if [[ $test == *Sweep* ]]; then
      for ((i = 0; i < shards; ++i)); do echo "$bin $test $i/$shards"; done
    else
      echo "$bin $test -"
    fi
  done
  grep -vE "$slow" "$logs/all.txt" | sed 's/$/ -/'
} >"$logs/tests.txt"
[ -s "$logs/tests.txt" ] || { echo "sanitize.sh: no tests in build/cuda/bin"; exit 1; }

# One tool on one test (or one shard of a sweep): its log, then the line
# "tool binary test status errors hazards seconds".
sanitize_one() {
  local tool=$1 bin=$2 test=$3 shard=$4 start=$SECONDS
  local log="$logs/$tool-$(basename "$bin")-${test//\//_}${shard//\//of}.log"
  [ "$shard" != - ] && test="$test[$shard]"
  local left=$((deadline - $(date +%s)))
  if [ $left -le 0 ]; then
    echo "$tool $(basename "$bin") $test skipped 0 0 0"
    return
  fi
  SOFTWAVE_TEST_SHARD=${shard/#-/} timeout $((left < limit ? left : limit)) \
    compute-sanitizer --tool "$tool" --print-limit 0 \
    "$bin" --gtest_filter="${test%%\[*}" >"$log" 2>&1
  local rc=$? status=ok
  [ $rc -eq 124 ] && status=stopped
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && status="rc=$rc"
  local errors hazards
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  hazards=$(grep -cE '(Warning|Error): Race reported|Invalid __|Uninitialized' "$log")
  echo "$tool $(basename "$bin") $test $status ${errors:-0} $hazards $((SECONDS - start))"
}
export -f sanitize_one
export logs limit deadline

for tool in "${tools[@]}"; do sed "s/^/$tool /" "$logs/tests.txt"; done |
  xargs -P "$jobs" -L 1 bash -c 'sanitize_one "$0" "$1" "$2" "$3"' |
  tee "$OUT/sanitize-lines.txt" >"$logs/lines.txt"

{
  echo "compute-sanitizer $(compute-sanitizer --version | grep -oE '[0-9]{4}\.[0-9.]+' | head -1)," \
    "filter '$filter', ${limit} s per test"
  echo
  echo "| tool | executable | tests | ok | stopped | skipped | failed | errors | hazard reports | slowest s |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  sort "$logs/lines.txt" | awk '
    { k = $1 " | " $2; n[k]++; ok[k] += $4 == "ok"; st[k] += $4 == "stopped"
      sk[k] += $4 == "skipped"; fail[k] += $4 ~ /^rc=/; err[k] += $5; haz[k] += $6
      if ($7 > slow[k]) slow[k] = $7 }
    END { for (k in n) printf "| %s | %d | %d | %d | %d | %d | %d | %d | %d |\n",
            k, n[k], ok[k], st[k], sk[k], fail[k], err[k], haz[k], slow[k] }' | sort
  echo
  echo "Tests not ok or with reports:"
  awk '$4 != "ok" || $5 != 0 || $6 != 0' "$logs/lines.txt" | sort | head -60
  echo
  echo "Reports by kernel (softwave function in the kernel's name):"
  cat "$logs"/*.log | grep -E '(Warning|Error): Race reported|Invalid __' |
    while read -r line; do
      name=$(grep -oE 'softwave::[A-Za-z_:<>]+' <<<"$line" | head -1)
      echo "${name:-${line:0:120}}"
    done | sort | uniq -c | sort -rn | head -20
} | tee "$OUT/sanitize.md"
bad=$(awk '$4 != "ok" || $5 != 0 || $6 != 0' "$logs/lines.txt" | wc -l)
tar -czf "$OUT/sanitize-logs.tar.gz" -C "$logs" .
rm -rf "$logs"
echo "sanitize.sh: $bad runs found something, failed or were stopped"
[ "$bad" -eq 0 ]
