#!/usr/bin/env bash
# Prediction against measurement over a grid of K and M on this machine: profiles
# scenarios/cpu-small.json once, then for each K and M plans it with the profile
# (`plan --cost-model`) and compares the plan (`compare`, which profiles the
# plan's own ops before each round's steps, then runs them). Prints one row per
# configuration (`kept`: the rounds whose run other work left alone, of which
# compare reports the median one) and the median and worst |error|. Usage:
#   scripts/compare-grid.sh [BUILD_DIR] [STEPS] [ROUNDS]
# (default build/, 20 steps of which compare leaves out 2 for warm-up, and 3
# rounds). Takes a minute or a few; an otherwise idle machine measures the plan
# rather than the other processes (the `steal` column says how much they took).
# GRID_SET adds scenario fields to every command (e.g. the context shares of
# a C plan: "training.context_parallel=2 model.attention=fused"; expert ranks:
# "training.expert_parallel=2 model.experts=4 ..."), and GRID_WAYS devices
# stand for each stage (C or E, the threads each stage runs as; default 1),
# GRID_REPLICAS of them data-parallel replicas (E's; default 1).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${1:-build}
steps=${2:-20}
rounds=${3:-3}
ps="$build_dir/cli/pipescope"
ways=${GRID_WAYS:-1}
replicas=${GRID_REPLICAS:-1}
extra=()
for field in ${GRID_SET:-}; do extra+=(--set "$field"); done
[ -x "$ps" ] || scripts/build.sh "$build_dir" pipescope
scenario=scenarios/cpu-small.json
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A model of at least 50 ms a step on one core, so that timer noise and the
# runtime's fixed costs stay small beside the ops (docs/executor.md, "How close
# is the prediction on this machine?"): cpu-small with GRID_LAYERS blocks, by
# default 10 (about 60 ms on the 2026-11-24 machine), or as many more as this
# machine needs for 50 ms (predicted from a profile of the 10).
profile_blocks() {
  "$ps" profile "$scenario" "${extra[@]}" --set "model.layers=$1" -o "$work/profile.json" \
    --repeats 9 >/dev/null
}
if [ -n "${GRID_LAYERS:-}" ]; then
  layers=$GRID_LAYERS
  profile_blocks "$layers"
else
  profile_blocks 10
  layers=$("$ps" simulate "$scenario" "${extra[@]}" --set model.layers=10 \
    --set cluster.devices="$ways" -K 1 -D "$replicas" -M 1 \
    --cost-model "$work/profile.json" --json | python3 -c '
import json, math, sys
step = json.load(sys.stdin)["step_time_s"]
print(max(10, math.ceil(10 * 0.050 / step)))')
  [ "$layers" -eq 10 ] || profile_blocks "$layers"
fi
echo "cpu-small with $layers blocks${GRID_SET:+ and ${GRID_SET}}"
set_model=(--set "model.layers=$layers")
printf '%2s %3s %6s %12s %12s %8s %12s %8s %7s %9s %5s\n' K M remat "predicted" "measured" error \
  "cpu-replay" error steal overhead kept
for K in 1 2; do
  for M in 1 2 4 8 16; do
    if ! "$ps" plan "$scenario" "${extra[@]}" "${set_model[@]}" --set cluster.devices=$((K * ways)) \
      -K $K -M $M --cost-model "$work/profile.json" -o "$work/plan.json" >/dev/null 2>&1; then
      printf '%2d %3d  (no plan: M does not divide the batch of each replica)\n' "$K" "$M"
      continue
    fi
    "$ps" compare "$work/plan.json" --steps "$steps" --rounds "$rounds" --json \
      >"$work/c-$K-$M.json"
    python3 - "$work/c-$K-$M.json" "$work/plan.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); p = json.load(open(sys.argv[2]))
print("%2d %3d %6s %10.1f ms %10.1f ms %+7.1f%% %10.1f ms %+7.1f%% %6.1f%% %+8.1f%% %5s" % (
    c["K"], c["M"], "on" if p["remat"] else "off", c["predicted_step_time_s"] * 1e3,
    c["measured_step_time_s"] * 1e3, c["relative_error"] * 100, c["cpu_replayed_step_time_s"] * 1e3,
    c["cpu_relative_error"] * 100, c["steal_fraction"] * 100, c["runtime_overhead"] * 100,
    "%d/%d" % (len(c.get("rounds_kept", c["round_relative_errors"])), len(c["round_relative_errors"]))))
PY
  done
done
python3 - "$work" <<'PY'
import glob, json, statistics, sys
runs = [json.load(open(f)) for f in sorted(glob.glob(sys.argv[1] + "/c-*.json"))]
for key, what in (("relative_error", "measured"), ("cpu_relative_error", "CPU-time replay")):
    errs = [abs(r[key]) for r in runs]
    print("against the %s step: median |error| %.1f%%, worst %.1f%%" % (
        what, statistics.median(errs) * 100, max(errs) * 100))
over = [abs(r["runtime_overhead"]) for r in runs]
print("runtime overhead (measured vs replay of its own ops): median %.1f%%, worst %.1f%%" % (
    statistics.median(over) * 100, max(over) * 100))
PY
