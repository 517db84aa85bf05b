#!/usr/bin/env bash
# The Python tests, as CI runs them: a virtual environment on the system
# python3 that sees Debian's numpy, torch (CPU), pytest and matplotlib
# (python3-numpy python3-torch libtorch-dev python3-pytest python3-matplotlib
# python3-venv python3-dev), `pip install .` into it (the OpenMP build of the core,
# against the same bootstrapped Kokkos as the CMake presets), JAX where it
# installs, then pytest on tests/python.
set -euo pipefail
cd "$(dirname "$0")/../.."

python=${PYTHON:-/usr/bin/python3}
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv"
fi
# JAX is optional: its wheels need a NumPy as new as Debian's 1.x allows;
# numpy<2 keeps Debian's torch (built against NumPy 1.x) importable.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "jax[cpu]" "numpy<2" ||
  echo "softwave: JAX did not install here; its tests are skipped"
# GeomLoss (pure Python on the venv's torch) for the SamplesLoss comparison
# in test_ot.py; optional too.
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check geomloss ||
  echo "softwave: GeomLoss did not install here; its comparison is skipped"
# pip builds in an isolated environment without JAX or torch: hand it
# jaxlib's FFI headers, so that softwave.jax calls the core as an XLA FFI
# target, and the environment's Python, whose torch (Debian's, with the
# headers of libtorch-dev) softwave._torch_native's operators are built
# against.
ffi=$("$venv/bin/python" -c "import jax.ffi; print(jax.ffi.include_dir())" 2>/dev/null || true)
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  ${ffi:+--config-settings=cmake.define.SOFTWAVE_XLA_FFI_INCLUDE_DIR="$ffi"} \
  --config-settings=cmake.define.SOFTWAVE_TORCH_PYTHON="$PWD/$venv/bin/python" .

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} OMP_PROC_BIND=false OMP_WAIT_POLICY=passive
# Built above against Debian's torch: its tests fail rather than skip.
export SOFTWAVE_EXPECT_TORCH_NATIVE=1
exec "$venv/bin/python" -m pytest -p no:cacheprovider tests/python -q "$@"
