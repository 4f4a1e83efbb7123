#!/usr/bin/env bash
# `pipescope export` checked by the tools it writes for (docs/export-checks.md).
# Optional, not part of the tests: it installs PyTorch, DeepSpeed,
# megatron-core and torchgpipe from PyPI into a virtual environment (a few
# minutes and about 5 GB; the PyPI torch wheel brings CUDA libraries it does
# not use here), makes plans of scenarios/demo.json, exports each to
# torchgpipe, DeepSpeed, Megatron-LM and PyTorch pipelining (the schedule CSV
# and the device mesh beside it), and has each tool load its export on the
# CPU. One line per plan and tool: accepted, or rejected with the tool's own
# message; exits 1 if any export was rejected.
set -euo pipefail
cd "$(dirname "$0")/.."

# The versions checked; change them here.
TORCH_VERSION=2.15.0
DEEPSPEED_VERSION=0.19.8
MEGATRON_CORE_VERSION=0.16.1
TORCHGPIPE_VERSION=0.0.7

usage() {
  cat <<'EOF'
Usage: scripts/check-exports.sh [--keep DIR] [--help]

Makes plans of scenarios/demo.json (every schedule on K=4, remat on, off and
except-last, checkpoints layer by layer, two hand-made cuts, a one-stage plan, plans with data and
tensor parallelism and ZeRO on 4 and 8 devices, plans with context parallelism
(a ring, and all-gathered) on 8, and plans of a mixture of experts with expert parallelism on 8), exports each with `pipescope
export --to torchgpipe|deepspeed|megatron|torch-pipelining`, and loads every
export with the tool's own code on the CPU: torchgpipe's GPipe, DeepSpeed's
PipelineModule, ZeRO config and engine, megatron-core's TransformerConfig,
layout and optimizer configuration checks, PyTorch pipelining's schedule CSV
loader, and PyTorch's DeviceMesh, pipelining, tensor-parallel styles and
data-parallel wrappers on D x K x T x C gloo processes. Prints the versions, then
one line per plan and tool; exits 1 if a tool rejected an export.

Options:
  --keep DIR   write the plans and exports to DIR (one folder per plan) and
               keep them (default: a temporary folder, removed at the end)
  -h, --help   print this help

Environment:
  PIPESCOPE    the pipescope binary (default build/cli/pipescope; built with
               scripts/build.sh if it is missing there)
  VENV         a virtual environment to use and keep: reused if it exists,
               created there if not (default: a throw-away one in a
               temporary folder); the pinned versions are installed into it
               where it has others
  PYTHON       the Python that creates the environment (default python3)
  PIP_EXTRA_INDEX_URL  read by pip, e.g. PyTorch's CPU wheel index where it
               can be reached
  MEGATRON_LM  a Megatron-LM checkout at the tag core_v<megatron-core version>,
               whose argument parser and validate_args check the Megatron
               flags (default: cloned from GitHub at that tag; an empty
               MEGATRON_LM= skips them)
EOF
}

die() {
  echo "check-exports.sh: error: $*" >&2
  exit 1
}

keep=
while [ $# -gt 0 ]; do
  case "$1" in
    --keep)
      [ $# -ge 2 ] || die "--keep needs a folder"
      keep=$2
      shift 2
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

scenario=scenarios/demo.json
python=${PYTHON:-python3}
command -v "$python" >/dev/null || die "$python not found (set PYTHON)"

. scripts/python-env.sh
find_pipescope

work=$(mktemp -d "${TMPDIR:-/tmp}/check-exports.XXXXXX")
trap 'rm -rf "$work"' EXIT
if [ -n "$keep" ]; then
  mkdir -p "$keep" || die "cannot create $keep"
  out=$(cd "$keep" && pwd)
else
  out=$work/plans
fi

# The virtual environment with the tools from PyPI, at the pinned versions.
# DeepSpeed builds no ops ahead of time and runs on its CPU accelerator.
export DS_BUILD_OPS=0 DS_ACCELERATOR=cpu
make_venv "$work"
pins=("torch==$TORCH_VERSION" "deepspeed==$DEEPSPEED_VERSION"
  "megatron-core==$MEGATRON_CORE_VERSION" "torchgpipe==$TORCHGPIPE_VERSION")
if ! "$venv/bin/python" - "${pins[@]}" <<'EOF'; then
import importlib.metadata, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    try:
        assert importlib.metadata.version(name) == version
    except Exception:
        sys.exit(1)
EOF
  echo "Installing ${pins[*]} from PyPI into $venv (a few minutes)" >&2
  pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
  "${pip[@]}" "${pins[0]}" >&2 || die "pip install ${pins[0]} failed"
  # DeepSpeed's setup imports torch: build it against the one just installed.
  "${pip[@]}" setuptools wheel >&2 || die "pip install setuptools wheel failed"
  "${pip[@]}" --no-build-isolation "${pins[@]}" >&2 || die "pip install ${pins[*]} failed"
fi

# Megatron-LM's training package (its argument parser and validate_args),
# which the megatron-core package leaves out: a checkout at the matching tag.
if [ -z "${MEGATRON_LM+set}" ]; then
  MEGATRON_LM=$work/Megatron-LM
  echo "Cloning Megatron-LM at core_v$MEGATRON_CORE_VERSION into $MEGATRON_LM" >&2
  git clone --quiet --depth 1 --branch "core_v$MEGATRON_CORE_VERSION" \
    https://github.com/NVIDIA/Megatron-LM "$MEGATRON_LM" >&2 ||
    die "cannot clone Megatron-LM (set MEGATRON_LM to a checkout, or empty to skip it)"
fi
export MEGATRON_LM

# The plans: scenarios/demo.json (26 layers: embed, 24 blocks, head) on K=4
# with M=8, one per schedule and remat mode, two cuts the planner would not
# choose (written with check_exports.py --recut: an uneven middle stage, which
# Megatron-LM takes only as a layout, and even interleaved stages, which it
# takes as --num-virtual-stages-per-pipeline-rank), and one stage on one device.
plan() {
  local name=$1
  shift
  mkdir -p "$out/$name"
  "$pipescope" plan "$scenario" "$@" -o "$out/$name/plan.json" >/dev/null ||
    die "pipescope plan $scenario $* failed"
}
recut() {
  mkdir -p "$out/$2"
  "$venv/bin/python" scripts/check_exports.py --recut "$out/$1/plan.json" \
    "$out/$2/plan.json" "$3" || die "cannot cut $1 into $3"
}
K4=(-K 4 -M 8)
plan gpipe-remat-on "${K4[@]}" --schedule gpipe --remat on
plan 1f1b-remat-off "${K4[@]}" --schedule 1f1b --remat off
plan zb-h1-except-last "${K4[@]}" --schedule zb-h1 --remat except-last
plan 1f1b-layer-checkpoints "${K4[@]}" --schedule 1f1b --remat on --set training.checkpoint=layer
plan interleaved-2-remat-on "${K4[@]}" --schedule interleaved-1f1b --chunks 2 --remat on
plan interleaved-2-remat-off "${K4[@]}" --schedule interleaved-1f1b --chunks 2 --remat off
plan interleaved-2-blocking "${K4[@]}" --schedule interleaved-1f1b --chunks 2 --remat off \
  --set cluster.p2p=blocking
plan looped-bfs-2-remat-on "${K4[@]}" --schedule looped-bfs --chunks 2 --remat on
plan zb-v-remat-off "${K4[@]}" --schedule zb-v --remat off
plan interleaved-zb-2-remat-off "${K4[@]}" --schedule interleaved-zb --chunks 2 --remat off
plan dualpipe-v-remat-off "${K4[@]}" --schedule dualpipe-v --remat off
# Interleaving on K=2 with blocking sends (which Megatron-LM takes only on
# more stages), and with M=6 that K=4 does not divide (one round of 6).
plan interleaved-2-k2-blocking -K 2 -M 8 --schedule interleaved-1f1b --chunks 2 --remat off \
  --set cluster.p2p=blocking
plan interleaved-2-m6 -K 4 -M 6 --schedule interleaved-1f1b --chunks 2 --remat off \
  --set training.global_batch=24
recut gpipe-remat-on uneven-5-8-6-7 5,8,6,7
recut interleaved-2-remat-off interleaved-2-even 4,3,3,3,3,3,3,4
plan one-stage --devices 1 -K 1 -M 8 --schedule gpipe --remat on --set model.layers=6
# Data and tensor parallelism: D = devices / (K x T) replicas.
plan pp2-dp2 -K 2 -M 8 --schedule 1f1b --remat off
plan pp2-dp2-tp-dp-pp -K 2 -M 8 --schedule 1f1b --remat off --set cluster.rank_order=tp-dp-pp
plan pp2-dp2-zero1 -K 2 -M 8 --schedule 1f1b --remat on --set training.zero=1
plan pp2-dp2-zero2 -K 2 -M 8 --schedule 1f1b --remat off --set training.zero=2
plan dp4-zero2 -K 1 -M 8 --schedule gpipe --remat on --set training.zero=2
plan tp2-pp2-dp2 --set cluster.devices=8 -T 2 -K 2 -M 8 --schedule gpipe --remat off
plan tp2-pp2-dp2-tp-dp-pp --set cluster.devices=8 --set cluster.rank_order=tp-dp-pp -T 2 -K 2 -M 8 \
  --schedule 1f1b --remat off
plan tp2-pp2-dp2-sp-zero1 --set cluster.devices=8 -T 2 -K 2 -M 8 --schedule 1f1b --remat on \
  --set training.sequence_parallel=true --set training.zero=1
# Context parallelism: each sequence over C = 2 ranks, with D = 2 replicas
# (DistributedDataParallel, then ZeRO 1 with the pipelines outermost) and with
# T = 2 in one replica (its gradients still reduced over the C ranks).
plan cp2-pp2-dp2 --set cluster.devices=8 -C 2 -K 2 -M 8 --schedule 1f1b --remat off \
  --set training.zero=0
plan cp2-pp2-dp2-tp-pp-dp-zero1 --set cluster.devices=8 --set cluster.rank_order=tp-pp-dp -C 2 \
  -K 2 -M 8 --schedule 1f1b --remat off --set training.zero=1
plan tp2-cp2-pp2-zero1 --set cluster.devices=8 -T 2 -C 2 -K 2 -M 8 --schedule 1f1b --remat off \
  --set training.zero=1
# The keys and values all-gathered (megatron-core's --cp-comm-type all_gather).
plan cp2-allgather-pp2-dp2 --set cluster.devices=8 -C 2 -K 2 -M 8 --schedule 1f1b --remat off \
  --set training.cp_comm_type=all_gather
# Sequence traded for heads by all-to-alls (megatron-core's --cp-comm-type a2a).
plan cp2-a2a-pp2-dp2 --set cluster.devices=8 -C 2 -K 2 -M 8 --schedule 1f1b --remat off \
  --set training.cp_comm_type=a2a
# A mixture of 8 experts, top 2, spread over E replicas.
MOE=(--set model.experts=8 --set model.experts_per_token=2)
plan moe-pp2-dp4-ep2 --set cluster.devices=8 "${MOE[@]}" -K 2 -E 2 -M 8 --schedule 1f1b --remat off
plan moe-pp2-dp4-ep4-tp-pp-dp --set cluster.devices=8 --set cluster.rank_order=tp-pp-dp "${MOE[@]}" \
  -K 2 -E 4 -M 8 --schedule 1f1b --remat off
plan moe-tp2-pp2-dp2-ep2 --set cluster.devices=8 "${MOE[@]}" -T 2 -K 2 -E 2 -M 8 \
  --schedule interleaved-1f1b --chunks 2 --remat off --set training.zero=1
# The experts over E of the D x C devices: E = 4 of D = 2 replicas' C = 2 shares.
plan moe-cp2-pp2-dp2-ep4 --set cluster.devices=8 "${MOE[@]}" -C 2 -K 2 -E 4 -M 8 \
  --schedule 1f1b --remat off
# Under tp-pp-dp beside a pipeline megatron-core takes E = C alone.
plan moe-cp2-pp2-dp2-ep2-tp-pp-dp --set cluster.devices=8 --set cluster.rank_order=tp-pp-dp \
  "${MOE[@]}" -C 2 -K 2 -E 2 -M 8 --schedule 1f1b --remat off

# The exports (torch-pipelining's -o FILE.csv also writes FILE.mesh.py, the
# device mesh). One pipescope refuses (exit status 1, "cannot export": an
# interleaved plan to a tool that runs one stage per device) is kept as
# FILE.refused with its message; any other failure stops the script.
cases=()
for dir in "$out"/*/; do
  dir=${dir%/}
  name=$(basename "$dir")
  for to in torchgpipe:torchgpipe.py deepspeed:deepspeed.py megatron:megatron.txt \
    torch-pipelining:torch-pipelining.csv; do
    file=$dir/${to#*:}
    rm -f "$file" "$file.refused" "${file%.csv}.mesh.py"
    status=0
    "$pipescope" export "$dir/plan.json" --to "${to%%:*}" -o "$file" >/dev/null \
      2>"$work/export.err" || status=$?
    if [ "$status" = 1 ] && grep -q "cannot export" "$work/export.err"; then
      mv "$work/export.err" "$file.refused"
    elif [ "$status" != 0 ]; then
      die "pipescope export $dir/plan.json --to ${to%%:*} failed (exit status $status):" \
        "$(cat "$work/export.err")"
    fi
  done
  cases+=(--case "$name=$dir")
done

TMPDIR=$work "$venv/bin/python" -W ignore scripts/check_exports.py "${cases[@]}"
