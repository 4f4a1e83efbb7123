#!/usr/bin/env bash
# Makes the Python environment the package's module is built and tested in:
#   scripts/python-venv.sh FOLDER
# A virtual environment of Debian's python3 that sees Debian's packages
# (pytest, pandas, matplotlib: scripts/install-deps.sh), with the package's
# build requirements as pyproject.toml pins them (nanobind, scikit-build-core)
# from PyPI, the one dependency that does not come from Debian. Safe to run
# again: it installs nothing that is there.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=${1:?usage: scripts/python-venv.sh FOLDER}
python=/usr/bin/python3
if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv --system-site-packages "$venv"
fi
# The pins, read from pyproject.toml's [build-system] requires: one home.
mapfile -t pins < <("$venv/bin/python" -c '
import tomllib
with open("pyproject.toml", "rb") as f:
    print("\n".join(tomllib.load(f)["build-system"]["requires"]))')
if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${pins[@]}"; then
  echo "python-venv: cannot install ${pins[*]} from PyPI into $venv" >&2
  exit 1
fi
echo "python-venv: $venv has ${pins[*]}"
