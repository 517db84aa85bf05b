#!/usr/bin/env bash
# All-pairs on one GPU and across the GPUs of one host with MPI, on the GPU
# machine: builds the cuda preset with SOFTWAVE_ENABLE_MPI (mpicxx and
# mpirun from PATH, or MPI_CXX_COMPILER / MPIRUN), checks softwave::mpi on
# CUDA (test_mpi on 2 ranks; the CLI's hard-DTW matrix on 2 ranks against
# one process), then times softwave_bench_mpi (perf/bench_mpi_pairwise.cpp).
#
#   perf/device/mpi_scaling.sh <out-dir> [cmake args...]
#   MPI_RUNS="ranks:series:gamma ..."  the timed runs (default below)
#
# Writes <out-dir>/mpi_scaling.jsonl (one JSON object a run) and the logs.
set -euo pipefail
out="${1:?usage: $0 <out-dir> [cmake args...]}"
shift
mkdir -p "$out"
mpirun="${MPIRUN:-mpirun}"
mpi_cxx="${MPI_CXX_COMPILER:-$(command -v mpicxx || true)}"
gpus="$(nvidia-smi -L | wc -l)"
echo "mpi_scaling: $gpus GPU(s); $("$mpirun" --version | head -n 1)"

cmake --preset cuda -DSOFTWAVE_ENABLE_MPI=ON ${mpi_cxx:+-DMPI_CXX_COMPILER="$mpi_cxx"} \
  "$@" >"$out/configure.log" 2>&1 || { tail -n 30 "$out/configure.log"; exit 1; }
cmake --build build/cuda --target softwave_bench_mpi test_mpi softwave_cli \
  >"$out/build.log" 2>&1 || { grep -m 20 -E "error|Error" "$out/build.log"; exit 1; }

run_ranks() {  # ranks, then the program and its arguments
  local ranks="$1"
  shift
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    "$mpirun" -q --oversubscribe -n "$ranks" "$@"
}

echo "mpi_scaling: test_mpi on 2 ranks (CUDA)"
run_ranks 2 build/cuda/bin/test_mpi >"$out/test_mpi.log" 2>&1 ||
  { tail -n 30 "$out/test_mpi.log"; exit 1; }
tail -n 3 "$out/test_mpi.log"

echo "mpi_scaling: the CLI's matrix on 2 ranks against one process"
set_args=(pairwise --x data/ucr/Trace/Trace_TEST.tsv --y data/ucr/Trace/Trace_TRAIN.tsv --gamma 0)
build/cuda/bin/softwave "${set_args[@]}" -o "$out/one.npy"
run_ranks 2 build/cuda/bin/softwave "${set_args[@]}" -o "$out/two.npy"
cmp "$out/one.npy" "$out/two.npy" && echo "  identical"
rm -f "$out/one.npy" "$out/two.npy"

runs="${MPI_RUNS:-1:10000:0 1:10000:1 1:20000:1 2:20000:1}"
: >"$out/mpi_scaling.jsonl"
for run in $runs; do
  IFS=: read -r ranks series gamma <<<"$run"
  (( ranks <= gpus )) || { echo "  skipped $run: $gpus GPU(s)"; continue; }
  warmup=1
  (( series > 5000 )) && warmup=0
  run_ranks "$ranks" build/cuda/bin/softwave_bench_mpi --series "$series" \
    --length 128 --gamma "$gamma" --repeats 1 --warmup "$warmup" |
    tee -a "$out/mpi_scaling.jsonl"
done
