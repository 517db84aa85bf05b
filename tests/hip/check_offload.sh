#!/usr/bin/env bash
# After a HIP build (and the HIP wheel, where one is given): every executable
# and the Python extension must carry AMD GPU code objects for gfx90a, not
# just host code. There is no AMD GPU here to run them.
#
#   usage: tests/hip/check_offload.sh BUILD_DIR [WHEEL_DIR]
#   (BUILD_DIR "-": the wheel alone)
set -euo pipefail
build=${1:?usage: check_offload.sh BUILD_DIR [WHEEL_DIR]}
wheels=${2:-}
target=gfx90a

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if [ -n "$wheels" ]; then
  wheel=$(ls -t "$wheels"/softwave-*.whl | head -n 1)
  python3 -m zipfile -e "$wheel" "$scratch"
fi

# All but the four that use neither softwave nor Kokkos (the float64
# reference's test and the CLI's file, end-to-end and reliability tests,
# which run the binary) must carry it.
checked=()
for binary in "$build"/bin/* "$scratch"/softwave/_core*.so; do
  [ -e "$binary" ] || continue
  case $(basename "$binary") in
    test_reference | softwave_cli_io_tests | softwave_cli_end_to_end_tests | \
      softwave_cli_reliability_tests) continue ;;
  esac
  # readelf's whole output first: `readelf | grep -q` under pipefail fails
  # whenever grep stops reading before readelf has written everything.
  sections=$(readelf -S "$binary")
  if [[ $sections != *.hip_fatbin* ]] ||
      ! grep -qa "amdgcn-amd-amdhsa--$target" "$binary"; then
    echo "tests/hip: $binary has no $target code object" >&2
    exit 1
  fi
  checked+=("$(basename "$binary")")
done
required=(softwave test_softdtw_values)
[ "$build" = - ] && required=()
for needed in "${required[@]}"; do
  [[ " ${checked[*]} " == *" $needed "* ]] ||
    { echo "tests/hip: $build/bin/$needed was not built" >&2; exit 1; }
done
[[ -z "$wheels" || " ${checked[*]} " == *" _core"* ]] ||
  { echo "tests/hip: the wheel has no extension module" >&2; exit 1; }
echo "tests/hip: ${#checked[@]} binaries in $build${wheels:+ and the wheel} carry $target code: ${checked[*]}"
