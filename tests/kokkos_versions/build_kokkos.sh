#!/usr/bin/env bash
# Builds and installs one Kokkos (Release; OpenMP + Serial unless other
# backend options follow --) from a source archive, optionally patched, with a
# given C++ compiler, unless an install made from the same inputs is there.
#
#   usage: build_kokkos.sh ARCHIVE PREFIX CXX [PATCH] [-- KOKKOS_CMAKE_ARGS...]
#
# The stamp holds the archive's and the patch's checksums, the compiler's
# version and the options, so a changed input rebuilds and an unchanged one
# costs nothing.
set -euo pipefail

usage="usage: build_kokkos.sh ARCHIVE PREFIX CXX [PATCH] [-- KOKKOS_CMAKE_ARGS...]"
archive=${1:?$usage}
prefix=${2:?$usage}
cxx=${3:?$usage}
shift 3
patch_file=
if [ $# -gt 0 ] && [ "$1" != -- ]; then
  patch_file=$(realpath "$1")
  shift
fi
[ $# -eq 0 ] || { [ "$1" = -- ] && shift; } || { echo "$usage" >&2; exit 2; }
backend=("$@")
[ ${#backend[@]} -gt 0 ] || backend=(-DKokkos_ENABLE_OPENMP=ON)

[ -f "$archive" ] || { echo "build_kokkos.sh: no archive $archive" >&2; exit 2; }
cxx=$(command -v "$cxx") || { echo "build_kokkos.sh: compiler $cxx not found" >&2; exit 2; }

stamp_text=$(
  sha256sum "$archive" | cut -d' ' -f1
  if [ -n "$patch_file" ]; then sha256sum "$patch_file" | cut -d' ' -f1; fi
  "$cxx" --version | head -n 1
  echo "${backend[@]}"
)
if [ -f "$prefix/.softwave-stamp" ] && [ "$(cat "$prefix/.softwave-stamp")" = "$stamp_text" ]; then
  echo "-- Kokkos in $prefix is up to date"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/softwave-kokkos.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -xzf "$archive" -C "$work"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
if [ -n "$patch_file" ]; then
  patch -d "$src" -p1 --forward --batch --input "$patch_file"
fi

rm -rf "$prefix"
start=$(date +%s)
cmake -S "$src" -B "$work/build" -G Ninja -Wno-dev \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_STANDARD=17 \
  -DCMAKE_CXX_EXTENSIONS=OFF \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
  -DCMAKE_INSTALL_PREFIX="$prefix" \
  -DCMAKE_INSTALL_MESSAGE=NEVER \
  -DKokkos_ENABLE_SERIAL=ON \
  "${backend[@]}" \
  -DKokkos_ENABLE_TESTS=OFF \
  -DKokkos_ENABLE_EXAMPLES=OFF >"$work/configure.log" ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" || { tail -n 60 "$work/build.log"; exit 1; }
cmake --install "$work/build" >/dev/null
printf '%s\n' "$stamp_text" >"$prefix/.softwave-stamp"
echo "-- Kokkos from $(basename "$archive") (${backend[*]}) built with $cxx${patch_file:+ (patched: $(basename "$patch_file"))} in $(($(date +%s) - start)) s"
