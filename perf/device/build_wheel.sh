#!/usr/bin/env bash
# Builds the CUDA wheel of the Python package (with softwave._torch_native)
# on a machine without a GPU, for the GPU machine's Python and torch, so that
# a device call installs it in seconds instead of building it: there the
# build takes longer than one call may run (more than 18 minutes, most of it
# nvcc on the core's largest sources).
#
#   perf/device/build_wheel.sh [out-dir]      (default: .whl/)
#
# Needs nvcc and network access to the package index: it makes a throwaway
# virtual environment on the GPU machine's Python version with the torch
# the GPU machine runs (for its headers and C++ ABI) and the build tools.
# PYTHON_VERSION and TORCH_VERSION override the defaults below. On the GPU
# machine, carry the wheel (.whl/ is ignored by git) and run
#   python3 -m pip install --no-deps --force-reinstall .whl/softwave-*.whl
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-.whl}
python_version=${PYTHON_VERSION:-3.12}
torch_version=${TORCH_VERSION:-2.11.0}

# The first of these that runs and is that version (a pyenv shim may exist
# and refuse to run).
python=
for candidate in "python$python_version" "$HOME"/.pyenv/versions/"$python_version".*/bin/python; do
  if "$candidate" -c "import sys; sys.exit(sys.version.startswith('$python_version.') is False)" 2>/dev/null; then
    python=$candidate
    break
  fi
done
[ -n "$python" ] || { echo "build_wheel.sh: no Python $python_version here" >&2; exit 1; }
venv=build/wheel-venv-$python_version
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check nanobind scikit-build-core numpy \
  "torch==$torch_version"

mkdir -p "$out"
CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ SOFTWAVE_KOKKOS_BACKEND=CUDA \
  "$venv/bin/python" -m pip wheel --no-build-isolation --no-deps --disable-pip-version-check -w "$out" \
  --config-settings=build-dir="build/python-cuda-$python_version" \
  --config-settings=cmake.define.SOFTWAVE_TORCH_PYTHON="$PWD/$venv/bin/python" .
ls -l "$out"/softwave-*.whl
