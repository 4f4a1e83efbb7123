"""PipeScope from Python: plan, simulate and check pipeline-parallel training.

The functions are the command line's subcommands with its names, options and
defaults (docs/commands.md): simulate(scenario, stages=4, micro_batches=8)
runs `pipescope simulate SCENARIO --stages 4 --micro-batches 8`, in this
process, and returns what `--json` prints as a typed result (to_dict() is that
document). An option's one-letter name works too (K=4 is -K 4); a list is a
comma-separated value; True is a flag. Bad input raises pipescope.Error with
the command's one error line. The interpreter lock is released while a
command runs; commands from several threads run one at a time.
See docs/python.md.
"""

import json
import os
import tempfile

from . import _core
from ._command import Error, ScratchFolder, option_args, run as _run
from .results import (CapacityResult, CompareResult, Plan, PlanResult, ProfileResult, Result,
                      RunResult, SimulateResult, SweepResult, ValidateResult)
from .scenario import Scenario, as_scenario

__all__ = ["Error", "Scenario", "Plan", "Result", "SimulateResult", "PlanResult", "SweepResult",
           "CapacityResult", "ValidateResult", "ProfileResult", "RunResult", "CompareResult",
           "simulate", "plan", "sweep", "capacity", "export", "validate", "profile", "run",
           "compare", "command_help"]

__version__ = "0.1.0"


def command_help(command):
    """The command line's --help text of `command` (its options and defaults)."""
    return _core.help(command)


def _plan_file(plan, folder):
    """A path to the plan: `plan` itself if it is one, else the Plan written
    into `folder`."""
    if isinstance(plan, Plan):
        path = os.path.join(folder, "plan.json")
        plan.save(path)
        return path
    return os.fspath(plan)


def simulate(scenario, **options):
    """One training step (`pipescope simulate`): a SimulateResult. Options:
    stages/K, micro_batches/M, schedule, chunks, data_parallel/D,
    tensor_parallel/T, expert_parallel/E, expert_tensor_parallel,
    context_parallel/C, remat, checkpoint, partition, balance, plan, schedule_file, cost_model, trace (a
    file to write)."""
    scenario = as_scenario(scenario)
    options = dict(options)
    # A Plan object is read from a file that lives as long as the result
    # (its timeline simulates the step again).
    plan_folder = None
    if isinstance(options.get("plan"), Plan):
        plan_folder = tempfile.TemporaryDirectory(prefix="pipescope-")
        options["plan"] = _plan_file(options["plan"], plan_folder.name)
    outcome = _run(["simulate"] + option_args(options) + ["--json"], scenario)
    cache = {"plan_folder": plan_folder}  # kept with the result

    def trace():
        # The same step again with --trace: the simulation is deterministic.
        if "events" not in cache:
            with ScratchFolder() as folder:
                path = os.path.join(folder, "step.trace.json")
                _run(["simulate"] + option_args(dict(options, trace=path)) + ["--json"], scenario)
                with open(path, encoding="utf-8") as f:
                    cache["events"] = json.load(f)["traceEvents"]
        return cache["events"]

    return SimulateResult(outcome.document, outcome.notes, trace)


def plan(scenario, **options):
    """The planner (`pipescope plan`): a PlanResult, whose best is a Plan.
    Options: devices, stages/K, micro_batches/M, remat, checkpoint, chunks,
    tensor_parallel/T, expert_parallel/E, expert_tensor_parallel,
    context_parallel/C, schedule, schedule_file, max_micro_batches, top, output (a file for the best plan),
    cost_model."""
    scenario = as_scenario(scenario)
    with ScratchFolder() as folder:
        output = (options.pop("output", None) or options.pop("o", None) or
                  os.path.join(folder, "best.plan.json"))
        outcome = _run(["plan"] + option_args(dict(options, output=output)) + ["--json"],
                       scenario)
        with open(output, encoding="utf-8") as f:
            best = Plan(json.load(f))
    return PlanResult(outcome.document, outcome.notes, best)


def sweep(scenario, **options):
    """Every K x M pair (`pipescope sweep`): a SweepResult. Options: stages/K
    and micro_batches/M (lists), remat, checkpoint, tensor_parallel/T,
    expert_parallel/E, expert_tensor_parallel, context_parallel/C, schedule,
    chunks, data_parallel/D, partition, balance, csv, cost_model."""
    outcome = _run(["sweep"] + option_args(options) + ["--json"], as_scenario(scenario))
    return SweepResult(outcome.document, outcome.notes)


def capacity(scenario, **options):
    """The largest model that fits (`pipescope capacity`): a CapacityResult.
    Options: stages/K (required), micro_batches/M, remat, param, cost_model."""
    outcome = _run(["capacity"] + option_args(options) + ["--json"],
                           as_scenario(scenario))
    return CapacityResult(outcome.document, outcome.notes)


def export(plan, to, scenario=None, output=None):
    """A plan in another tool's form (`pipescope export`): torchgpipe,
    deepspeed, megatron or torch-pipelining. Writes `output` when given and
    returns the exported text either way."""
    with ScratchFolder() as folder:
        target = os.fspath(output) if output is not None else os.path.join(folder, "export.txt")
        args = ["export", _plan_file(plan, folder), "--to", to, "--output", target]
        if scenario is None:
            _run(args)
        else:
            scenario = as_scenario(scenario)
            _run(scenario.args(args[:1], positional=False) + args[1:], scenario,
                 positional=False)
        with open(target, encoding="utf-8") as f:
            return f.read()


def validate(**options):
    """The published figures beside the simulation (`pipescope validate`):
    a ValidateResult, whose ok is False (and failure the command's line)
    when figures fall outside their tolerance without a stated cause, where
    the command exits 1. Options: scenarios, gpu_scenarios, leave_one_out."""
    outcome = _run(["validate"] + option_args(options) + ["--json"], judged=True)
    return ValidateResult(outcome.document, outcome.notes, outcome.failure)


def profile(scenario, **options):
    """Measures this machine for the simulator (`pipescope profile`, the CPU
    executor): a ProfileResult; the profile is written to output. Options:
    output, repeats, and the rest of `pipescope profile --help`."""
    outcome = _run(["profile"] + option_args(options) + ["--json"],
                           as_scenario(scenario))
    return ProfileResult(outcome.document, outcome.notes)


def run(plan, **options):
    """Trains a plan's model on the executor (`pipescope run`): a RunResult.
    Options: steps, lr, tensor_parallel/T, trace, and the rest of
    `pipescope run --help`."""
    with ScratchFolder() as folder:
        outcome = _run(["run", _plan_file(plan, folder)] + option_args(options) +
                               ["--json"])
    return RunResult(outcome.document, outcome.notes)


def compare(plan, **options):
    """Runs a plan and sets the measurement beside the prediction
    (`pipescope compare`): a CompareResult. Options: profile, steps, warmup,
    rounds, lr, tensor_parallel/T, and the rest of `pipescope compare --help`."""
    with ScratchFolder() as folder:
        outcome = _run(["compare", _plan_file(plan, folder)] + option_args(options) +
                               ["--json"])
    return CompareResult(outcome.document, outcome.notes)
