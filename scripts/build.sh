#!/usr/bin/env bash
# Configures and builds into a build folder. Usage:
#   scripts/build.sh BUILD_DIR [TARGET...] [-- extra cmake arguments]
# Two parallel jobs: the machines that build PipeScope have two cores.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=$1
shift
target=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  target+=("$1")
  shift
done
[ ${#target[@]} -gt 0 ] && target=(--target "${target[@]}")
[ "${1:-}" = "--" ] && shift

generator=()
if [ ! -f "$build_dir/CMakeCache.txt" ] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi
cmake -S . -B "$build_dir" "${generator[@]}" "$@"
cmake --build "$build_dir" -j2 "${target[@]}"
