#!/usr/bin/env python3
"""The time of pipescope.plan(SCENARIO) from Python, beside the command
line's in-process time for the same command (build/bench/pipescope_command_bench,
BM_PlanCommand): docs/performance.md records the two.

Memos cleared: plan() in one interpreter, the planner's shared memos emptied
before each call (pipescope._core.clear_memos), as each BM_PlanCommand
iteration does; the figure to set beside BM_PlanCommand. First call: the
first plan() of a fresh interpreter (the module imported first, not timed),
which also pays for the first use of the process's code and memory. Warm:
calls whose memos the call before filled. Module alone: the module's own
call (pipescope._core.run) of the same command, memos cleared, without the
package's Python around it (arguments, scratch folder, the plan read back,
the document parsed); taken in turn with the memos-cleared plan() calls.
Medians over --runs samples.

  PYTHONPATH=build/python build/python-venv/bin/python bench/python_plan_bench.py
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ONE_CALL = """
import sys, time, pipescope
start = time.perf_counter()
pipescope.plan(sys.argv[1])
print(time.perf_counter() - start)
"""


def first_call(path, runs):
    times = [float(subprocess.run([sys.executable, "-c", ONE_CALL, path], check=True,
                                  capture_output=True, text=True).stdout)
             for _ in range(runs)]
    return statistics.median(times)


def package_and_module(path, runs):
    """Medians of plan() and of the module's call alone, taken in turn."""
    import tempfile
    import pipescope
    from pipescope import _core
    output = os.path.join(tempfile.mkdtemp(prefix="pipescope-bench-"), "best.plan.json")
    args = ["plan", path, "--output", output, "--json"]
    package, module = [], []
    for _ in range(runs):
        _core.clear_memos()
        start = time.perf_counter()
        pipescope.plan(path)
        package.append(time.perf_counter() - start)
        _core.clear_memos()
        start = time.perf_counter()
        _core.run(args)
        module.append(time.perf_counter() - start)
    os.remove(output)
    os.rmdir(os.path.dirname(output))
    return statistics.median(package), statistics.median(module)


def in_process(path, runs, clear):
    import pipescope
    pipescope.plan(path)
    times = []
    for _ in range(runs):
        if clear:
            pipescope._core.clear_memos()
        start = time.perf_counter()
        pipescope.plan(path)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="samples per figure (default 21)")
    args = parser.parse_args()
    for name in ("demo.json", "gpt3-175b-1024.json"):
        path = os.path.join(SOURCE_DIR, "scenarios", name)
        package, module = package_and_module(path, args.runs)
        figures = (package, module, first_call(path, args.runs),
                   in_process(path, args.runs, False))
        print("%-22s memos cleared %8.2f ms   module alone %8.2f ms   first call %8.2f ms"
              "   warm %8.2f ms" % ((name,) + tuple(1e3 * f for f in figures)))


if __name__ == "__main__":
    main()
