#!/usr/bin/env bash
# One call on the GPU machine: configure and build the cuda preset, run the
# whole test suite on the CUDA backend, run the GPU benchmark grid, and leave
# logs, JUnit and JSON under $OUT. Prints a short table last.
#
# The GPU machine has nvcc, cmake and ninja but no package registry, so the
# call carries (as git-ignored paths):
#   .cache/kokkos-src    the Kokkos source the bootstrap fetched here
#   .cache/device-debs   Debian's libgtest-dev, libbenchmark-dev and
#                        libbenchmark1debian (apt-get download), unpacked below
# Usage: perf/device/run.sh [ctest args...]
#   SKIP_BENCH=1 skips the benchmarks, SKIP_TESTS=1 the tests;
#   BENCH_FILTER=<regex> passes --benchmark_filter (default: all);
#   BENCH_CHECKS=on|off the library's data checks (default off: the fence
#   they cost is not kernel time, and the torch front end skips it on CUDA);
#   SKIP_PYTHON=1 skips the Python package (build with the CUDA backend, or
#   install .whl/softwave-*.whl from perf/device/build_wheel.sh,
#   pytest with CUDA tensors, perf/bench_torch.py); PYTHON_BENCH=quick
#   benchmarks only N <= 512 there, SKIP_PYTHON_BENCH=1 skips it;
#   SKIP_CPP=1 skips the cmake build (and so the tests and benchmarks): the
#   Python package alone.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/softwave-device}
mkdir -p "$OUT"

nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm \
  --format=csv | tee "$OUT/gpu.csv"
# The copy's git metadata can be stale: the source digest is what identifies
# the tree (perf/device/source_digest.sh prints it for a checkout here).
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
echo "commit $commit (from this copy's git metadata)" | tee "$OUT/commit.txt"
echo "sources $(perf/device/source_digest.sh)" | tee -a "$OUT/commit.txt"

deps=/tmp/softwave-deps
if [ -d .cache/device-debs ]; then
  mkdir -p "$deps"
  for deb in .cache/device-debs/*.deb; do dpkg -x "$deb" "$deps"; done
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
fi

# The image's CXX (/opt/gcc/bin/g++) links libstdc++ statically. That is
# harmless in executables but not in a Python extension: a second libstdc++
# beside the one numpy and torch load crashes in Kokkos::initialize. Build
# everything (tests, Kokkos and the extension alike, so they share one Kokkos
# install) with the system g++, which python3's own extensions use.
if [ -x /usr/bin/g++ ]; then
  export CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
fi

step() { echo "== $1 ($(date +%T))"; }
if [ -n "${SKIP_CPP:-}" ]; then
  SKIP_TESTS=1 SKIP_BENCH=1
else
  step configure
  cmake --preset cuda -DSOFTWAVE_KOKKOS_SOURCE_DIR="$PWD/.cache/kokkos-src" \
    -DCMAKE_PREFIX_PATH="$deps/usr" \
    >"$OUT/configure.log" 2>&1 || { tail -40 "$OUT/configure.log"; exit 1; }
  step build
  cmake --build --preset cuda -j "$(nproc)" >"$OUT/build.log" 2>&1 ||
    { grep -m 20 -B2 -A6 "error" "$OUT/build.log"; exit 1; }
fi

test_rc=0
if [ -z "${SKIP_TESTS:-}" ]; then
  step test
  # The OpenMP thread-count labels mean nothing on CUDA: run each test once.
  ctest --preset cuda -LE threads2 -j 4 --output-junit "$OUT/ctest.xml" "$@" \
    >"$OUT/ctest.log" 2>&1
  test_rc=$?
  grep -E "tests passed|tests failed|\(Failed\)|\(Timeout\)" "$OUT/ctest.log" | tail -15
fi

bench_rc=0
if [ -z "${SKIP_BENCH:-}" ]; then
  step benchmark
  build/cuda/bin/softwave_bench --softwave_grid=gpu \
    --softwave_checks="${BENCH_CHECKS:-off}" \
    --benchmark_filter="${BENCH_FILTER:-.}" \
    --benchmark_out="$OUT/bench-cuda.json" --benchmark_out_format=json \
    >"$OUT/bench.log" 2>&1
  bench_rc=$?
  python3 perf/summarize.py "$OUT/bench-cuda.json" | tee "$OUT/summary.md"
fi
python_rc=0
if [ -z "${SKIP_PYTHON:-}" ]; then
  # The image's python3 holds torch, jax, numpy, pytest, nanobind and
  # scikit-build-core; nothing can be fetched there, so no build isolation.
  step "python package"
  # A wheel built beforehand by perf/device/build_wheel.sh (carried as .whl/)
  # installs in seconds; building here takes longer than a call may run.
  wheel=$(ls .whl/softwave-*-cp3*.whl 2>/dev/null | head -1)
  if [ -n "$wheel" ]; then
    python3 -m pip install --no-deps --force-reinstall "$wheel" >"$OUT/pip.log" 2>&1 ||
      { python_rc=1; tail -20 "$OUT/pip.log"; }
  else
    SOFTWAVE_KOKKOS_BACKEND=CUDA python3 -m pip install --no-build-isolation --no-deps \
      -Ccmake.define.SOFTWAVE_KOKKOS_SOURCE_DIR="$PWD/.cache/kokkos-src" . \
      >"$OUT/pip.log" 2>&1 || { python_rc=1; grep -m 20 -B2 -A6 -i "error" "$OUT/pip.log"; }
  fi
  if [ "$python_rc" = 0 ]; then
    step pytest
    SOFTWAVE_EXPECT_TORCH_NATIVE=1 python3 -m pytest -q -p no:cacheprovider tests/python \
      --junitxml="$OUT/pytest.xml" \
      >"$OUT/pytest.log" 2>&1
    python_rc=$?
    tail -5 "$OUT/pytest.log"
    if [ -z "${SKIP_PYTHON_BENCH:-}" ]; then
      step "torch benchmark"
      python3 perf/bench_torch.py --out "$OUT/bench-torch.json" \
        ${PYTHON_BENCH:+--quick} | tee "$OUT/bench-torch.md" || python_rc=1
    fi
  fi
fi

# At most 8 files come back from the device: the logs travel as one archive.
(cd "$OUT" && tar czf logs.tar.gz --remove-files ./*.log ./*.xml 2>/dev/null)
step done
echo "tests rc=$test_rc bench rc=$bench_rc python rc=$python_rc"
exit $((test_rc != 0 || bench_rc != 0 || python_rc != 0))
