#!/usr/bin/env bash
# Installs the Debian packages a task needs, when any is missing; does nothing
# (and needs no network) when all are there. Run as root on a fresh machine;
# elsewhere it prints the apt-get line to run.
#
#   usage: tools/setup.sh [build] [test] [hip] [kokkos-versions]   (default: build)
#
#   build            the presets: compilers, CMake, Ninja, GoogleTest, Google
#                    Benchmark, Open MPI (the openmp preset's MPI path;
#                    Kokkos itself is bootstrapped by configure)
#   test             build + what tests/python/run.sh needs: Debian's python3
#                    with venv, headers, NumPy, PyTorch (a CPU build, with
#                    libtorch's headers for the C++ operators), pytest,
#                    Matplotlib and scikit-learn (pip then brings the
#                    extension's build tools)
#   hip              build + ROCm's hipcc and HIP runtime for the `hip` preset,
#                    and pip with python3's headers for its Python extension
#   kokkos-versions  test + clang++ with its OpenMP runtime, for
#                    tests/kokkos_versions/run.sh
set -euo pipefail

build=(cmake ninja-build g++ patch xz-utils libgtest-dev libbenchmark-dev
       libopenmpi-dev openmpi-bin)
python=(python3-dev python3-venv python3-pip python3-numpy python3-torch
        libtorch-dev python3-pytest python3-matplotlib python3-sklearn)
hip=(hipcc libamdhip64-dev rocm-device-libs)
clang=(clang libomp-dev)

wanted=()
[ $# -gt 0 ] || set -- build
for task in "$@"; do
  case $task in
    build) wanted+=("${build[@]}") ;;
    test) wanted+=("${build[@]}" "${python[@]}") ;;
    hip) wanted+=("${build[@]}" "${hip[@]}" python3-dev python3-pip) ;;
    kokkos-versions) wanted+=("${build[@]}" "${python[@]}" "${clang[@]}") ;;
    *) echo "setup.sh: unknown task '$task' (build, test, hip, kokkos-versions)" >&2; exit 2 ;;
  esac
done

missing=()
for package in $(printf '%s\n' "${wanted[@]}" | sort -u); do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: missing Debian packages; as root run:" >&2
  echo "  apt-get install --no-install-recommends ${missing[*]}" >&2
  exit 1
fi
echo "setup.sh: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
