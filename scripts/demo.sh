#!/usr/bin/env bash
# Quick start, first command: installs what is missing, builds `pipescope`, and
# simulates the default scenario, printing the summary and writing a Chrome
# trace to out/demo.trace.json (open it in https://ui.perfetto.dev or
# chrome://tracing); then ranks the plans for the same model and cluster,
# which say that this model, small enough for one GPU, trains faster without
# a pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh build pipescope -- -DCMAKE_BUILD_TYPE=RelWithDebInfo
mkdir -p out
build/cli/pipescope simulate scenarios/demo.json --trace out/demo.trace.json
echo
echo "The demo's 1.3 B-parameter model fits on one A100 whole: the planner ranks four replicas"
echo "of it (K=1, D=4) above any pipeline, here the best on 4 stages. Pipelining pays where a"
echo "model does not fit on one device (try: build/cli/pipescope plan scenarios/gpt3-175b-1024.json)."
build/cli/pipescope plan scenarios/demo.json --top 1
build/cli/pipescope plan scenarios/demo.json -K 4 --top 1
