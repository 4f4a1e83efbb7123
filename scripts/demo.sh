#!/usr/bin/env bash
# Quick start, first command: installs what is missing, builds `pipescope`, and
# simulates the default scenario, printing the summary and writing a Chrome
# trace to out/demo.trace.json (open it in https://ui.perfetto.dev or
# chrome://tracing).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh build pipescope -- -DCMAKE_BUILD_TYPE=RelWithDebInfo
mkdir -p out
build/cli/pipescope simulate scenarios/demo.json --trace out/demo.trace.json
