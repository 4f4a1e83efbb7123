"""Each function returns what its command's --json prints, on every shipped
scenario, and takes the command's option names."""

import json
import os

import pytest

import pipescope
from conftest import SCENARIOS, SOURCE_DIR, cli, cli_json, scenario_path


def agrees_with_the_cli(call, *args):
    """`call()` returns what `pipescope ARGS... --json` prints, or raises
    pipescope.Error with its error line where the command refuses."""
    status, out, err = cli(*args, "--json")
    if status == 0:
        assert call().to_dict() == json.loads(out)
    else:
        with pytest.raises(pipescope.Error) as raised:
            call()
        assert str(raised.value) == err.strip().splitlines()[-1]
        assert raised.value.status == status


# Each scenario command with its options, as the CLI's arguments and as the
# function's keywords.
SCENARIO_COMMANDS = {
    "simulate": ((), {}),
    "plan": (("--top", 3), {"top": 3}),
    "sweep": ((), {}),
    "capacity": (("-K", 2), {"K": 2}),
}


@pytest.mark.parametrize("command", sorted(SCENARIO_COMMANDS))
@pytest.mark.parametrize("path", SCENARIOS, ids=os.path.basename)
def test_every_command_agrees_with_the_cli_on_every_shipped_scenario(command, path):
    cli_args, options = SCENARIO_COMMANDS[command]
    function = getattr(pipescope, command)
    agrees_with_the_cli(lambda: function(path, **options), command, path, *cli_args)


def test_a_refusal_agrees_too():
    # GPT-3 fits nowhere in the default sweep: the command's line, raised.
    path = scenario_path("gpt3-175b-1024.json")
    assert cli("sweep", path)[0] == 1
    agrees_with_the_cli(lambda: pipescope.sweep(path), "sweep", path)


def test_simulate_options_are_the_cli_options(demo):
    by_name = pipescope.simulate(demo, stages=2, micro_batches=4, schedule="1f1b")
    by_letter = pipescope.simulate(demo, K=2, M=4, schedule="1f1b")
    expected = cli_json("simulate", demo, "-K", 2, "-M", 4, "--schedule", "1f1b")
    assert by_name.to_dict() == expected
    assert by_letter.to_dict() == expected
    assert (by_name.K, by_name.M, by_name.schedule) == (2, 4, "1f1b")
    assert by_name.step_time_s == expected["step_time_s"]


def test_sweep_takes_lists(demo):
    result = pipescope.sweep(demo, K=[2, 4], M=[4, 8])
    assert result.to_dict() == cli_json("sweep", demo, "-K", "2,4", "-M", "4,8")
    assert [(p["K"], p["M"]) for p in result.to_dict()] == [(2, 4), (2, 8), (4, 4), (4, 8)]


def test_capacity(demo):
    result = pipescope.capacity(demo, K=4, remat="on")
    assert result.to_dict() == cli_json("capacity", demo, "-K", 4, "--remat", "on")
    assert result.param == "model.layers"
    assert result.max_value > 26  # the demo's 26 layers fit with room


def test_plan_best_is_the_plan_file_the_cli_writes(demo, tmp_path):
    result = pipescope.plan(demo)
    cli_file = tmp_path / "cli.plan.json"
    status, _, err = cli("plan", demo, "-o", cli_file)
    assert status == 0, err
    assert result.best.to_dict() == json.loads(cli_file.read_text())
    own = tmp_path / "own.plan.json"
    pipescope.plan(demo, output=own)
    assert json.loads(own.read_text()) == result.best.to_dict()


# A schedule each target runs.
EXPORTS = {"torchgpipe": "gpipe", "deepspeed": "1f1b", "megatron": "interleaved-1f1b",
           "torch-pipelining": "zb-v"}


def four_stage_plan(demo, folder, schedule):
    plan_file = folder / "best.plan.json"
    status, _, err = cli("plan", demo, "-K", 4, "--devices", 4, "--schedule", schedule, "-o",
                         plan_file)
    assert status == 0, err
    return plan_file


@pytest.mark.parametrize("target", sorted(EXPORTS))
def test_export_gives_the_cli_export(demo, tmp_path, target):
    plan_file = four_stage_plan(demo, tmp_path, EXPORTS[target])
    out = tmp_path / "cli.txt"
    status, _, err = cli("export", plan_file, "--to", target, "-o", out)
    assert status == 0, err
    expected = out.read_text()
    assert pipescope.export(plan_file, to=target) == expected
    plan = pipescope.Plan(json.loads(plan_file.read_text()))
    assert pipescope.export(plan, to=target) == expected
    written = tmp_path / "own.txt"
    assert pipescope.export(plan_file, to=target, output=written) == expected
    assert written.read_text() == expected


def test_export_with_the_scenario(demo, tmp_path):
    plan_file = four_stage_plan(demo, tmp_path, "interleaved-1f1b")
    out = tmp_path / "cli.txt"
    status, _, err = cli("export", plan_file, "--to", "megatron", "--scenario", demo, "-o", out)
    assert status == 0, err
    assert pipescope.export(plan_file, to="megatron", scenario=demo) == out.read_text()


def test_a_refused_export_raises_the_clis_line(demo, tmp_path):
    plan_file = four_stage_plan(demo, tmp_path, "zb-v")
    status, _, err = cli("export", plan_file, "--to", "torchgpipe")
    assert status == 1
    with pytest.raises(pipescope.Error) as raised:
        pipescope.export(plan_file, to="torchgpipe")
    assert str(raised.value) == err.strip()


def test_validate_agrees_with_the_cli():
    result = pipescope.validate()
    assert result.to_dict() == cli_json("validate")
    assert result.ok and result.failure == ""


def test_validate_outside_tolerance_is_a_result_not_an_error():
    # The held-out cases have no tolerances the suite was fitted to: the
    # command exits 1 after printing its figures, and the function says so.
    heldout = os.path.join(SOURCE_DIR, "scenarios", "heldout")
    status, out, err = cli("validate", "--gpu-scenarios", heldout, "--json")
    assert status == 1
    result = pipescope.validate(gpu_scenarios=heldout)
    assert result.to_dict() == json.loads(out)
    assert not result.ok
    assert result.failure == err.strip().splitlines()[-1]


def test_command_help_is_the_cli_help():
    status, out, _ = cli("simulate", "--help")
    assert status == 0
    own = pipescope.command_help("simulate")
    assert own[own.index("Options:"):].strip() == out[out.index("Options:"):].strip()
    assert "--micro-batches" in pipescope.command_help("simulate")
