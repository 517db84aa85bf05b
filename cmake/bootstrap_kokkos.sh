#!/bin/sh
# Fetch the Kokkos source tree that Debian ships inside its `trilinos` source
# package and unpack it, pristine, into DEST (normally .cache/kokkos-src).
# Called by cmake/SoftwaveKokkos.cmake when no Kokkos is installed; patching,
# building and installing are done there.
#
#   usage: bootstrap_kokkos.sh DEST
#
# The system's apt configuration is never modified: a deb-src list is derived
# from the machine's own `deb` entries (so no archive host is hard-coded in the
# project) and apt is pointed at private list/cache directories.
set -eu

dest=${1:?usage: bootstrap_kokkos.sh DEST}

die() { echo "bootstrap_kokkos.sh: $*" >&2; exit 1; }

command -v apt-get >/dev/null 2>&1 ||
  die "apt-get not found: this fallback only works on Debian-like systems."
command -v tar >/dev/null 2>&1 || die "tar not found."

work=$(mktemp -d "${TMPDIR:-/tmp}/softwave-kokkos.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
mkdir -p "$work/parts" "$work/lists/partial" "$work/cache/archives/partial" \
         "$work/dl"

# deb822 files: turn every stanza whose Types include `deb` into a deb-src
# stanza (same URIs, suites, components and keyring). Files renamed to
# *.disabled* are switched off on purpose and stay off.
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  case $f in *.disabled*) continue ;; esac
  awk 'BEGIN { RS = ""; ORS = "\n\n" }
       /(^|\n)Types:[^\n]*[ \t]deb([ \t]|\n|$)/ {
         sub(/(^|\n)Types:[^\n]*/, "\nTypes: deb-src"); sub(/^\n/, ""); print
       }' "$f" >> "$work/parts/softwave-src.sources"
done
# One-line format: `deb [opts] uri suite comps` -> `deb-src ...`.
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] || continue
  case $f in *.disabled*) continue ;; esac
  sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$f" \
    >> "$work/parts/softwave-src.list"
done
[ -s "$work/parts/softwave-src.sources" ] || [ -s "$work/parts/softwave-src.list" ] ||
  die "no 'deb' entries found in /etc/apt/sources.list{,.d/} to derive deb-src from."

apt() {
  apt-get -q \
    -o Dir::Etc::SourceList=/dev/null \
    -o Dir::Etc::SourceParts="$work/parts" \
    -o Dir::State::Lists="$work/lists" \
    -o Dir::Cache="$work/cache" \
    -o APT::Sandbox::User="$(id -un)" \
    "$@"
}

echo "-- softwave: fetching Debian's trilinos source package (carries Kokkos)"
# A third-party repository without source indices makes `update` fail while
# the distribution's own indices are fine, so only `source` decides.
apt update || echo "bootstrap_kokkos.sh: apt-get update reported errors; trying anyway" >&2
(cd "$work/dl" && apt source --download-only trilinos) ||
  die "apt-get source trilinos failed (see above)."

set -- "$work"/dl/trilinos_*.orig.tar.*
[ -f "$1" ] || die "no trilinos_*.orig.tar.* was downloaded."
echo "-- softwave: extracting packages/kokkos from $(basename "$1")"
mkdir -p "$work/src"
# The tarball's top folder is <name>/ and Kokkos sits in <name>/packages/kokkos/.
tar -xf "$1" -C "$work/src" --strip-components=3 --wildcards '*/packages/kokkos/*'
rm -f "$1"
[ -f "$work/src/CMakeLists.txt" ] && [ -f "$work/src/core/src/Kokkos_Core.hpp" ] ||
  die "the trilinos source package has no packages/kokkos tree."

# Drop what a library-only build never reads, so the tree stays small enough
# to carry to another machine. example/CMakeLists.txt stays: Kokkos' build
# always adds that directory (its subfolders only with Kokkos_ENABLE_EXAMPLES).
# Test folders are only added with Kokkos_ENABLE_TESTS; tpls/ only holds gtest.
cd "$work/src"
find example -mindepth 1 ! -name CMakeLists.txt -prune -exec rm -rf {} +
rm -rf benchmarks doc scripts config tpls \
       core/unit_test core/perf_test \
       containers/unit_tests containers/performance_tests \
       algorithms/unit_tests
cd - >/dev/null

# Move into place last, so an interrupted run never leaves a half tree at DEST.
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$work/src" "$dest"
echo "-- softwave: Kokkos source ready in $dest ($(du -sh "$dest" | cut -f1))"
