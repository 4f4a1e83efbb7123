#!/usr/bin/env bash
# PipeScope's CPU executor against PyTorch's torch.distributed.pipelining on
# the same model, plans and threads (docs/pytorch-comparison.md). Optional,
# not part of the tests: it installs PyTorch from PyPI into a virtual
# environment (about 2 minutes and 5 GB; the PyPI wheel brings CUDA libraries
# it does not use here), then trains scenarios/cpu-small.json on K = 2 stages
# with the plan `pipescope plan` picks and with gpipe and 1f1b, in both, and
# prints throughput and loss side by side.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
Usage: scripts/compare-pytorch.sh [--steps N] [--repeat R] [--json] [--help]

Trains scenarios/cpu-small.json with `pipescope run` and with PyTorch's
torch.distributed.pipelining (one process of one thread per stage, gloo on
127.0.0.1), on three plans for K=2: the one `pipescope plan` picks, and the
best gpipe and 1f1b plans. Prints python, torch, the pipescope commit and the
CPU, then a Markdown table of throughput (the one in
docs/pytorch-comparison.md) and the two loss curves.

Options:
  --steps N    training steps per run (default 40); the step time is the
               median of steps 2..N, as `pipescope run` reports it
  --repeat R   runs of each side per plan; the median is shown (default 3)
  --json       print the results as JSON instead of tables
  -h, --help   print this help

Environment:
  PIPESCOPE    the pipescope binary (default build/cli/pipescope; built with
               scripts/build.sh if it is missing there)
  VENV         a virtual environment to use and keep: reused if it exists,
               created there if not (default: a throw-away one in a
               temporary folder)
  PYTHON       the Python that creates the environment (default python3)
EOF
}

die() {
  echo "compare-pytorch.sh: error: $*" >&2
  exit 1
}

steps=40
repeat=3
json=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps)
      [ $# -ge 2 ] || die "--steps needs a value"
      steps=$2
      shift 2
      ;;
    --repeat)
      [ $# -ge 2 ] || die "--repeat needs a value"
      repeat=$2
      shift 2
      ;;
    --json)
      json=(--json)
      shift
      ;;
    -h | --help)
      usage
      exit 0
      ;;
    *)
      usage >&2
      die "unknown argument '$1'"
      ;;
  esac
done
if ! [[ $steps =~ ^[0-9]+$ ]] || [ "$steps" -lt 3 ]; then
  die "--steps must be a number of at least 3"
fi
if ! [[ $repeat =~ ^[0-9]+$ ]] || [ "$repeat" -lt 1 ]; then
  die "--repeat must be a positive number"
fi

scenario=scenarios/cpu-small.json
python=${PYTHON:-python3}
command -v "$python" >/dev/null || die "$python not found (set PYTHON)"

. scripts/python-env.sh
find_pipescope

work=$(mktemp -d "${TMPDIR:-/tmp}/compare-pytorch.XXXXXX")
trap 'rm -rf "$work"' EXIT

# The virtual environment with PyTorch from PyPI.
make_venv "$work"
if ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
  echo "Installing torch from PyPI into $venv (a few minutes)" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check torch >&2 ||
    die "pip install torch failed"
fi

# The commit of the checkout the binary is in (else of this one), marked when
# that checkout has uncommitted changes, which the binary may include.
commit=unknown
for dir in "$(dirname "$pipescope")" .; do
  if head=$(git -C "$dir" rev-parse --short HEAD 2>/dev/null); then
    commit=$head
    if [ -n "$(git -C "$dir" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
      commit="$commit+uncommitted"
    fi
    break
  fi
done

# The plans: the one `pipescope plan` picks for K=2, and the best gpipe and
# 1f1b ones. A schedule PyTorch has no class for runs there from the CSV that
# `pipescope export --to torch-pipelining` writes.
plan_args=()
for schedule in best gpipe 1f1b; do
  plan=$work/plan-$schedule.json
  flags=(-K 2)
  [ "$schedule" = best ] || flags+=(--schedule "$schedule")
  "$pipescope" plan "$scenario" "${flags[@]}" -o "$plan" >/dev/null ||
    die "pipescope plan $scenario ${flags[*]} failed"
  picked=$("$venv/bin/python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["schedule"])' \
    "$plan")
  if [ "$schedule" = best ] && { [ "$picked" = gpipe ] || [ "$picked" = 1f1b ]; }; then
    continue  # the gpipe or 1f1b plan below covers it
  fi
  if [ "$picked" = gpipe ] || [ "$picked" = 1f1b ]; then
    plan_args+=(--plan "$plan")
  else
    "$pipescope" export "$plan" --to torch-pipelining -o "$work/$schedule.csv" >/dev/null ||
      die "pipescope export $plan --to torch-pipelining failed"
    plan_args+=(--plan "$plan:$work/$schedule.csv")
  fi
done

TMPDIR=$work "$venv/bin/python" -W ignore scripts/compare_pytorch.py \
  --pipescope "$pipescope" "${plan_args[@]}" --steps "$steps" --repeat "$repeat" \
  --commit "$commit" "${json[@]}"
