"""profile, run and compare on the CPU executor, beside the command line's."""

import json

import pytest

import pipescope
from conftest import cli, cli_json, scenario_path

SMALL = scenario_path("cpu-small.json")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A quick profile of cpu-small (Python's) and a 2-stage plan from it."""
    folder = tmp_path_factory.mktemp("executor")
    profile_file = folder / "profile.json"
    result = pipescope.profile(SMALL, output=profile_file, batch_sizes=[2, 4], repeats=1)
    plan_file = folder / "plan.json"
    status, _, err = cli("plan", SMALL, "--cost-model", profile_file, "-K", 2, "-o", plan_file)
    assert status == 0, err
    return result, profile_file, plan_file


def test_profile_writes_the_profile_it_returns(measured):
    result, profile_file, _ = measured
    written = json.loads(profile_file.read_text())
    document = result.to_dict()
    assert document["output"] == str(profile_file)
    assert [l["batch_sizes"] for l in written["layers"]] == [
        l["batch_sizes"] for l in document["layers"]]
    assert all(l["batch_sizes"] == [2, 4] for l in document["layers"])
    assert document["gemm"] == written["gemm"]


def test_run_trains_as_the_cli_does(measured):
    _, _, plan_file = measured
    result = pipescope.run(plan_file, steps=3)
    expected = cli_json("run", plan_file, "--steps", 3)
    # The losses are the computation's, the same every run; times are not.
    assert result.losses == expected["losses"]
    assert len(result.losses) == 3
    assert result.kernels == expected["kernels"]


def test_run_takes_a_plan_object(measured):
    _, _, plan_file = measured
    plan = pipescope.Plan(json.loads(plan_file.read_text()))
    assert pipescope.run(plan, steps=2).losses == cli_json("run", plan_file, "--steps", 2)["losses"]


def test_compare_predicts_as_the_cli_does(measured):
    _, profile_file, plan_file = measured
    result = pipescope.compare(plan_file, profile=profile_file, steps=3)
    expected = cli_json("compare", plan_file, "--profile", profile_file, "--steps", 3)
    # The prediction comes from the profile alone; the measurement is the run's.
    assert result.predicted_step_time_s == expected["predicted_step_time_s"]
    assert (result.K, result.M) == (expected["K"], expected["M"])
    assert [op["kind"] for op in result.ops] == [op["kind"] for op in expected["ops"]]
    assert result.measured_step_time_s > 0


def test_the_gpu_and_mpi_backends_are_the_command_lines(measured):
    _, _, plan_file = measured
    for options in ({"backend": "mpi"}, {"backend": "cuda"}, {"device": "cuda"}):
        with pytest.raises(pipescope.Error, match="runs the CPU executor only") as raised:
            pipescope.run(plan_file, **options)
        assert raised.value.status == 2


def test_a_bad_plan_raises_the_clis_line(tmp_path):
    bad = tmp_path / "bad.plan.json"
    bad.write_text("{}")
    status, _, err = cli("run", bad)
    assert status == 1
    with pytest.raises(pipescope.Error) as raised:
        pipescope.run(bad)
    assert str(raised.value) == err.strip()
