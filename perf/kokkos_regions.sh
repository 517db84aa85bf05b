#!/usr/bin/env bash
# Time by Kokkos label (regions, kernels, fences, deep copies) of one command,
# on any backend (perf/kokkos_regions.cpp): builds the Kokkos Tools library
# and runs the command with it; the table goes to TABLE.
# Usage: perf/kokkos_regions.sh TABLE COMMAND [ARGS...]
set -euo pipefail
table=$1
shift
here=$(cd "$(dirname "$0")" && pwd)
tool=$(mktemp -d)/kokkos_regions.so
g++ -std=c++17 -O2 -fPIC -shared "$here/kokkos_regions.cpp" -o "$tool"
# Kokkos 4 reads KOKKOS_TOOLS_LIBS, older builds KOKKOS_PROFILE_LIBRARY.
KOKKOS_REGIONS_OUT=$table KOKKOS_TOOLS_LIBS=$tool KOKKOS_PROFILE_LIBRARY=$tool "$@"
