#!/usr/bin/env bash
# Quick start, second command: installs what is missing, checks the formatting,
# builds everything (CUDA, the desktop app, MPI and the Python module all on;
# the module's pinned build requirements come from PyPI into build/python-venv),
# runs the whole test suite (the Python package's pytest tests among it), then builds it again with clang under AddressSanitizer and
# UndefinedBehaviorSanitizer (with CUDA off) and runs it, fuzzes every input
# format in that build for a bounded time (FUZZ_SECONDS each, default 30; two
# formats at once), and
# runs the tests of threaded code under ThreadSanitizer (with the desktop app,
# MPI and CUDA off). The sanitizer builds double as the build matrix: each
# optional part is built switched off once, so that each stays optional. Exits
# non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh

SECONDS=0
phase() { echo "== [$((SECONDS / 60)) min $((SECONDS % 60)) s] $*"; }

phase "formatting (clang-format)"
scripts/check-format.sh

phase "Python environment (scripts/python-venv.sh: pyproject.toml's pinned build requirements)"
scripts/python-venv.sh build/python-venv

phase "build and test (RelWithDebInfo; CUDA, desktop app, MPI and the Python module on)"
# The optimisation of the quick start's build, with line tables only (-g1) as in
# the sanitizer builds below: full debug information took a fifth of the compile
# time, and a failure's backtrace still names files and lines.
scripts/build.sh build -- -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DPIPESCOPE_WITH_CUDA=ON -DPIPESCOPE_WITH_GUI=ON -DPIPESCOPE_WITH_MPI=ON -DCMAKE_UNITY_BUILD=ON \
  -DPIPESCOPE_WITH_PYTHON=ON -DPython_EXECUTABLE="$PWD/build/python-venv/bin/python"
ctest --test-dir build --output-on-failure -j2

phase "build and test under AddressSanitizer + UndefinedBehaviorSanitizer (clang; CUDA off)"
# One sanitized build serves the test suite and the fuzzers: clang (libFuzzer
# needs it, and it compiles this code a quarter faster than gcc under the
# sanitizers), with the fuzz targets built beside the rest. Debug keeps every
# assertion (Eigen's bounds checks too); -O1, as the sanitizers' documentation
# suggests, keeps Eigen's templates from running tens of times slower than they
# do optimized. The sanitizer builds keep line tables only (-g1): their reports
# name files and lines, and full debug information took a third of their
# compile time. The executor is built for the x86-64 baseline only here (the
# build above tests each copy the processor runs). Every build here compiles
# the libraries, the command and the desktop app as unity builds
# (CMAKE_UNITY_BUILD: a folder's files eight to a translation unit), which
# parses and instantiates their shared headers (nlohmann/json above all) once
# per eight files: a quarter to two fifths less compile time. The quick
# start's first command (scripts/demo.sh) keeps one translation unit a file,
# so each file still compiles on its own there; the test programs stay a file
# a unit in every build (tests/CMakeLists.txt).
CC=clang CXX=clang++ scripts/build.sh build-asan -- -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-g1 -O1" -DPIPESCOPE_SANITIZE=address,undefined -DPIPESCOPE_FUZZ=ON \
  -DPIPESCOPE_BUILD_BENCH=OFF -DPIPESCOPE_WITH_CUDA=OFF -DPIPESCOPE_EXEC_LEVELS= \
  -DPIPESCOPE_WITH_PYTHON=OFF -DCMAKE_UNITY_BUILD=ON
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j2

phase "fuzz every input format (libFuzzer, ASan + UBSan), ${FUZZ_SECONDS:-30} s a format"
FUZZ_BUILD=build-asan FUZZ_SECONDS="${FUZZ_SECONDS:-30}" scripts/fuzz.sh

phase "threaded code (executor runtime, planner, sweep) under ThreadSanitizer (desktop app, MPI off)"
# Qt is not built with ThreadSanitizer, so its own synchronisation would show up
# as races: the desktop app is left out of this run. (Its one worker hands each
# result back to the UI thread through a QFutureWatcher; it shares no state.)
# Nor is OpenMPI, whose TCP transport reports lock-order inversions inside
# MPI_Init: the MPI backend is not built here; the runtime it shares with the
# threaded backend is in the run.
# Only the programs whose tests run here are built (the command, for the CLI
# tests), and CUDA is off too: the GPU backend has no threads of its own here.
# clang, as for the sanitized build above.
CC=clang CXX=clang++ scripts/build.sh build-tsan pipescope pipescope_plan_tests pipescope_exec_tests pipescope_cli_tests \
  -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DPIPESCOPE_SANITIZE=thread -DPIPESCOPE_BUILD_BENCH=OFF -DPIPESCOPE_EXEC_LEVELS= \
  -DPIPESCOPE_WITH_GUI=OFF -DPIPESCOPE_WITH_MPI=OFF -DPIPESCOPE_WITH_CUDA=OFF -DPIPESCOPE_WITH_PYTHON=OFF \
  -DCMAKE_UNITY_BUILD=ON
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure -j2 \
  -R "Runtime|Consistency|TensorParallel|ContextParallel|RingAttention|RingExchange|ExpertParallel|ExpertLoad|GroupOpLists|AllToAll|AllReduce|Planner|Sweep|PlanCli|SweepCli|Capacity|Channel|Profiler|Compare|ProfileCli|CompareCli|RunCli|RunFaultCli"
phase "all green"
