#!/usr/bin/env bash
# Fuzzes every input format: builds the libFuzzer targets with clang (ASan +
# UBSan), replays each saved crash in fuzz/regressions/<target>/ once, then runs
# each target for FUZZ_SECONDS (default 30) on a working copy of its seed corpus
# (<build>/corpus/<target>, which keeps what earlier runs found). Crash, leak and
# timeout inputs land in <build>/artifacts/<target>/, logs in <build>/logs/.
# Two targets fuzz at once (FUZZ_JOBS), one a core.
# Exits non-zero when any target fails, naming it and its artifacts.
#
# The build folder is FUZZ_BUILD (default build-fuzz). One that is not configured
# yet is configured for the fuzz targets alone; one configured already must have
# been with PIPESCOPE_FUZZ=ON (scripts/test.sh fuzzes in its sanitized build).
#
#   FUZZ_SECONDS=120 scripts/fuzz.sh                 # longer runs
#   FUZZ_TARGETS="fuzz_plan fuzz_profile" scripts/fuzz.sh
#   FUZZ_JOBS=1 scripts/fuzz.sh                      # one target at a time
set -euo pipefail
cd "$(dirname "$0")/.."

FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
FUZZ_TARGETS="${FUZZ_TARGETS:-fuzz_scenario fuzz_plan fuzz_profile fuzz_schedule_csv fuzz_hf_config fuzz_trace fuzz_trace_gz}"
build="${FUZZ_BUILD:-build-fuzz}"

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "== configure $build (clang, libFuzzer, ASan + UBSan)"
  CC=clang CXX=clang++ cmake -G Ninja -S . -B "$build" -DPIPESCOPE_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
    -DPIPESCOPE_WITH_GUI=OFF -DPIPESCOPE_WITH_CUDA=OFF \
    -DPIPESCOPE_WITH_MPI=OFF -DPIPESCOPE_BUILD_TESTS=OFF -DPIPESCOPE_BUILD_BENCH=OFF >/dev/null
elif ! grep -q '^PIPESCOPE_FUZZ:BOOL=ON$' "$build/CMakeCache.txt"; then
  echo "error: $build is configured without PIPESCOPE_FUZZ=ON; use another FUZZ_BUILD" >&2
  exit 2
fi
echo "== build the fuzz targets in $build"
# shellcheck disable=SC2086  # the target list is split on purpose
cmake --build "$build" -j 2 --target $FUZZ_TARGETS
echo "built in ${SECONDS} s"

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# The dictionary of a target, if it has one.
dict_of() {
  case "$1" in
    fuzz_schedule_csv) echo fuzz/schedule_csv.dict ;;
    fuzz_trace_gz) echo fuzz/gzip.dict ;;
    *) echo fuzz/json.dict ;;
  esac
}

# Replays a target's saved crashes, then fuzzes it; prints what it found and
# returns non-zero on a failure. Its output goes to <build>/logs/<target>.out
# so that two targets can run side by side.
fuzz_one() {
  local target=$1
  local exe="$build/fuzz/$target"
  local log="$build/logs/$target.log"
  local artifacts="$build/artifacts/$target/"
  mkdir -p "$artifacts"

  local regressions=(fuzz/regressions/"$target"/*)
  if [[ -e "${regressions[0]}" ]]; then
    echo "== $target: replaying ${#regressions[@]} saved crash input(s)"
    if ! "$exe" -timeout=10 -rss_limit_mb=2048 "${regressions[@]}" >"$log.regressions" 2>&1; then
      tail -n 30 "$log.regressions"
      echo "FAILED: $target on a saved input of fuzz/regressions/$target/ (log: $log.regressions)"
      return 1
    fi
  fi

  echo "== $target: fuzzing for ${FUZZ_SECONDS} s"
  local corpus="$build/corpus/$target"
  mkdir -p "$corpus"
  cp fuzz/corpus/"$target"/* "$corpus"/
  rm -f "$artifacts"*
  local dict
  dict="$(dict_of "$target")"
  if "$exe" -max_total_time="$FUZZ_SECONDS" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
       -dict="$dict" -artifact_prefix="$artifacts" -print_final_stats=1 "$corpus" >"$log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^#[0-9]+ *DONE' "$log" | tr '\n' ' ' || true
    echo "(corpus: $(find "$corpus" -type f | wc -l) inputs)"
  else
    tail -n 40 "$log"
    local found
    found=$(find "$artifacts" -type f | tr '\n' ' ')
    echo "FAILED: $target; artifact(s): ${found:-none written} (log: $log)"
    echo "  reproduce: $exe <artifact>"
    return 1
  fi
}

# FUZZ_JOBS targets at a time (default 2, one a core); each one's report is
# printed whole when it ends, in the order of FUZZ_TARGETS.
mkdir -p "$build/logs"
# shellcheck disable=SC2206  # the target list is split on purpose
targets=($FUZZ_TARGETS)
pids=()
for i in "${!targets[@]}"; do
  while (($(jobs -rp | wc -l) >= ${FUZZ_JOBS:-2})); do wait -n || true; done
  fuzz_one "${targets[$i]}" >"$build/logs/${targets[$i]}.out" 2>&1 &
  pids[i]=$!
done
failed=()
for i in "${!targets[@]}"; do
  status=0
  wait "${pids[$i]}" || status=$?
  cat "$build/logs/${targets[$i]}.out"
  ((status == 0)) || failed+=("${targets[$i]}")
done

if ((${#failed[@]} > 0)); then
  echo "== fuzzing failed: ${failed[*]}"
  exit 1
fi
echo "== all fuzz targets ran clean (${SECONDS} s in all)"
