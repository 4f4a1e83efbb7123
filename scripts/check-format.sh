#!/usr/bin/env bash
# Checks that every C++ and CUDA file git tracks is formatted as .clang-format
# says (Debian 12's clang-format 14). Lists the files that are not and exits 1;
# `clang-format -i FILE` formats one.
set -euo pipefail
cd "$(dirname "$0")/.."

mapfile -t files < <(git ls-files '*.cpp' '*.h' '*.cu' '*.cuh')
unformatted=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
    unformatted+=("$f")
  fi
done
if [ ${#unformatted[@]} -gt 0 ]; then
  echo "check-format: ${#unformatted[@]} of ${#files[@]} files are not clang-format clean:" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  echo "format them with: clang-format -i FILE..." >&2
  exit 1
fi
echo "check-format: all ${#files[@]} files are clang-format clean"
