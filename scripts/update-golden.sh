#!/usr/bin/env bash
# Rewrites the expected part of every golden command test (tests/golden/*.tesh)
# from what the built pipescope prints now, after an intended change of its
# output; review `git diff tests/golden` before committing. Usage:
#   scripts/update-golden.sh [BUILD_DIR]      (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
cmake --build "$build" -j2 --target pipescope pipescope_golden_tests
PIPESCOPE_UPDATE_GOLDEN=1 "$build/tests/pipescope_golden_tests" >/dev/null
git --no-pager diff --stat -- tests/golden
