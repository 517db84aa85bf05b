#!/usr/bin/env bash
# GPU time by kernel of one command (perf/device/kernel_times.cpp), on the
# GPU machine, where Nsight Systems is not installed: builds the preload
# library against that machine's CUPTI, runs the command with it, and writes
# the table (kernels by total time, then the span and its idle time).
# Usage: perf/device/kernel_times.sh TABLE COMMAND [ARGS...]
set -euo pipefail
table=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
cuda=$(dirname "$(dirname "$(command -v nvcc)")")
include=$(dirname "$(find "$cuda"/ /usr/local/cuda*/ -name cupti_activity.h \
  2>/dev/null | head -1)")
library=$(dirname "$(find "$cuda"/ /usr/local/cuda*/ -name 'libcupti.so*' \
  2>/dev/null | head -1)")
# The newest version of each activity record this CUPTI declares.
newest() {
  grep -ho "} $1[0-9]*;" "$include"/cupti_activity.h | tr -d '}; ' |
    sort -V | tail -1
}
tool=$(mktemp -d)/kernel_times.so
g++ -std=c++17 -O2 -fPIC -shared -I"$include" -I"$cuda/include" \
  -DKERNEL_RECORD="$(newest CUpti_ActivityKernel)" \
  -DMEMCPY_RECORD="$(newest CUpti_ActivityMemcpy)" \
  -DMEMSET_RECORD="$(newest CUpti_ActivityMemset)" \
  "$here/kernel_times.cpp" -o "$tool" -L"$library" -lcupti \
  -Wl,-rpath,"$library"
KERNEL_TIMES_OUT=$table LD_PRELOAD=$tool "$@"
