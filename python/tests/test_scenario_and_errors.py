"""Scenarios from files, dicts and Hugging Face configs, with overrides; bad
input raises pipescope.Error with the command's one line."""

import json
import os

import pytest

import pipescope
from conftest import SOURCE_DIR, cli, cli_json, scenario_path


def test_a_dict_is_the_file_it_came_from(demo):
    with open(demo, encoding="utf-8") as f:
        document = json.load(f)
    assert pipescope.simulate(document).to_dict() == cli_json("simulate", demo)
    # The dict is copied: changing it afterwards changes nothing.
    scenario = pipescope.Scenario(document)
    document["training"]["micro_batches"] = 2
    assert pipescope.simulate(scenario).M == cli_json("simulate", demo)["M"]


def test_set_is_the_clis_set(demo):
    base = pipescope.Scenario(demo)
    changed = base.set("training.micro_batches", 16).set("model.layers", 24)
    expected = cli_json("simulate", demo, "--set", "training.micro_batches=16", "--set",
                        "model.layers=24")
    assert pipescope.simulate(changed).to_dict() == expected
    assert expected["M"] == 16
    # set() returns a copy: the base is as it was.
    assert pipescope.simulate(base).M == cli_json("simulate", demo)["M"]


def test_a_string_stays_a_string(demo):
    # "175" set as a string is the JSON string, which the name field takes;
    # as the CLI's raw --set it would be the number 175, which it refuses.
    named = pipescope.simulate(pipescope.Scenario(demo).set("name", "175"))
    assert named.to_dict() == cli_json("simulate", demo, "--set", 'name="175"')
    assert cli("simulate", demo, "--set", "name=175")[0] == 1
    with pytest.raises(pipescope.Error, match="training.schedule"):
        pipescope.simulate(pipescope.Scenario(demo).set("training.schedule", 7))


def test_scenario_of_a_scenario_takes_its_keywords(demo):
    base = pipescope.Scenario(demo).set("training.micro_batches", 16)
    derived = pipescope.Scenario(base, framework="deepspeed")
    assert derived.framework == "deepspeed" and derived.overrides == base.overrides
    assert (pipescope.simulate(derived).to_dict() ==
            cli_json("simulate", demo, "--set", "training.micro_batches=16", "--framework",
                     "deepspeed"))


def test_framework_is_the_clis(demo):
    scenario = pipescope.Scenario(demo, framework="deepspeed")
    assert (pipescope.simulate(scenario).to_dict() ==
            cli_json("simulate", demo, "--framework", "deepspeed"))


def test_hf_config(demo):
    config = os.path.join(SOURCE_DIR, "tests", "data", "hf", "llama-2-7b", "config.json")
    scenario = pipescope.Scenario.from_hf_config(demo, config, seq_len=1024)
    expected = cli_json("simulate", demo, "--hf-config", config, "--seq-len", 1024)
    result = pipescope.simulate(scenario)
    assert result.to_dict() == expected
    assert result.to_dict() != cli_json("simulate", demo)  # the model did change


def error_line(*args):
    status, out, err = cli(*args)
    assert status != 0
    return err.strip().splitlines()[0]


def test_a_bad_field_raises_the_clis_line(demo):
    with pytest.raises(pipescope.Error) as raised:
        pipescope.simulate(pipescope.Scenario(demo).set("training.micro_batches", -1))
    assert str(raised.value) == error_line("simulate", demo, "--set", "training.micro_batches=-1")
    assert raised.value.status == 1


def test_a_bad_option_value_raises_the_clis_line(demo):
    with pytest.raises(pipescope.Error) as raised:
        pipescope.simulate(demo, K=0)
    assert str(raised.value) == error_line("simulate", demo, "-K", 0)
    assert raised.value.status == 2


def test_an_unknown_option_is_refused(demo):
    with pytest.raises(pipescope.Error, match="--no-such-option"):
        pipescope.simulate(demo, no_such_option=3)


def test_a_missing_file_names_it():
    with pytest.raises(pipescope.Error) as raised:
        pipescope.simulate("no/such/scenario.json")
    assert str(raised.value) == "pipescope: error: no/such/scenario.json: cannot open file"


def test_a_dicts_error_names_the_dict(demo):
    with open(demo, encoding="utf-8") as f:
        document = json.load(f)
    document["training"]["no_such_field"] = 1
    with pytest.raises(pipescope.Error, match=r"^pipescope: error: <dict>: training.no_such_field"):
        pipescope.simulate(document)


def test_a_validation_case_is_refused_as_by_the_cli():
    case = os.path.join(SOURCE_DIR, "scenarios", "heldout", "mb-10.json")
    with pytest.raises(pipescope.Error) as raised:
        pipescope.simulate(case)
    assert str(raised.value) == error_line("simulate", case)


def test_no_plan_fits_raises_the_clis_line():
    gpt3 = scenario_path("gpt3-175b-1024.json")
    status, _, err = cli("plan", gpt3, "--devices", 8)
    assert status == 1 and "no plan fits" in err
    with pytest.raises(pipescope.Error) as raised:
        pipescope.plan(gpt3, devices=8)
    assert str(raised.value) == err.strip()


def test_an_output_over_the_scenario_is_refused(demo, tmp_path):
    copy = tmp_path / "demo.json"
    copy.write_text(open(demo, encoding="utf-8").read())
    before = copy.read_text()
    status, _, err = cli("plan", copy, "-o", copy)
    assert status == 1
    with pytest.raises(pipescope.Error) as raised:
        pipescope.plan(str(copy), output=str(copy))
    assert str(raised.value) == err.strip()
    assert copy.read_text() == before


def test_standard_output_is_the_command_lines(demo):
    with pytest.raises(pipescope.Error, match="standard output") as raised:
        pipescope.simulate(demo, trace="-")
    assert raised.value.status == 2
    with pytest.raises(pipescope.Error, match="standard output"):
        pipescope.sweep(demo, csv="/dev/stdout")


def test_a_document_that_is_not_json_is_an_error(demo):
    with open(demo, encoding="utf-8") as f:
        document = json.load(f)
    document["training"]["global_batch"] = float("nan")
    with pytest.raises(pipescope.Error, match="<dict>: not a JSON document"):
        pipescope.simulate(document)


def test_not_a_scenario_is_a_type_error():
    with pytest.raises(TypeError, match="Scenario takes"):
        pipescope.Scenario(42)
