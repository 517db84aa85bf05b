#!/usr/bin/env bash
# Prints a digest of the sources that a build and its results depend on.
# perf/device/run.sh records it beside the commit, because the device's copy
# of the tree can carry stale git metadata (its `git rev-parse` can name an
# older commit than the sources it holds). Run it here on a checkout to match
# a device result to a commit.
set -euo pipefail
cd "$(dirname "$0")/../.."
find CMakeLists.txt CMakePresets.json cmake core backends bindings tests \
  -type f -not -path '*/__pycache__/*' -not -name '*.pyc' -print0 |
  LC_ALL=C sort -z | xargs -0 sha1sum | sha1sum | cut -c1-12
