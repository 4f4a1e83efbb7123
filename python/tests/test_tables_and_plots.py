"""The tables (pandas DataFrames) and pictures (matplotlib) of results."""

import json

import pytest

import pipescope
from conftest import cli, cli_json, scenario_path

pandas = pytest.importorskip("pandas", reason="pandas is not installed")
matplotlib = pytest.importorskip("matplotlib", reason="matplotlib is not installed")
matplotlib.use("Agg")


def test_stage_table(demo):
    result = pipescope.simulate(demo, K=4, M=8)
    table = result.stage_table()
    expected = cli_json("simulate", demo, "-K", 4, "-M", 8)
    assert list(table["first_layer"]) == [s["first_layer"] for s in expected["stages"]]
    assert list(table["fwd_s"]) == [s["fwd_s"] for s in expected["stages"]]
    assert list(table["device_peak_memory_bytes"]) == [
        expected["devices"][s["device"]]["peak_memory_bytes"] for s in expected["stages"]]


def test_timeline_and_memory_are_the_trace(demo, tmp_path):
    result = pipescope.simulate(demo, K=4, M=8)
    trace = tmp_path / "t.json"
    assert cli("simulate", demo, "-K", 4, "-M", 8, "--trace", trace)[0] == 0
    events = json.loads(trace.read_text())["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    timeline = result.timeline()
    assert len(timeline) == len(ops)
    assert set(timeline["lane"]) == {"compute", "send", "recv"}
    sends = timeline[timeline["category"] == "activation"]
    assert set(sends["lane"]) == {"send", "recv"} and sends["bytes"].min() > 0
    forward = timeline[timeline["category"] == "forward"]
    assert len(forward) == 4 * 8  # every stage's forward of every micro-batch
    assert timeline["end_s"].max() == pytest.approx(result.step_time_s, rel=1e-6)
    memory = result.memory()
    assert len(memory) == sum(1 for e in events if e["ph"] == "C")
    assert memory["bytes"].max() == max(d["peak_memory_bytes"] for d in result.devices)


def test_ranking(demo):
    result = pipescope.plan(demo, top=5)
    ranking = result.ranking()
    assert list(ranking["rank"]) == [1, 2, 3, 4, 5]
    assert list(ranking["step_time_s"]) == [p["step_time_s"] for p in result.plans]
    assert ranking["step_time_s"].is_monotonic_increasing


def test_sweep_grid(demo):
    grid = pipescope.sweep(demo, K=[2, 4], M=[4, 8]).grid()
    assert list(zip(grid["K"], grid["M"])) == [(2, 4), (2, 8), (4, 4), (4, 8)]


def test_expert_and_tensor_lanes_are_named():
    # The demo as a mixture of 8 experts, top 2, over E = 2 of D = 4 replicas:
    # its all-to-alls on the expert lane, no tensor lane without T.
    moe = pipescope.Scenario(scenario_path("demo.json")).set("model.experts", 8).set(
        "model.experts_per_token", 2).set("model.expert_d_ff", 2048)
    result = pipescope.simulate(moe, K=1, D=4, E=2)
    timeline = result.timeline()
    expert = timeline[timeline["lane"] == "expert"]
    assert len(expert) > 0
    assert set(expert["category"]) == {"expert-alltoall"}
    assert set(n[:3] for n in expert["name"]) == {"ep "}
    assert "tensor" not in set(timeline["lane"])
    labels = [t.get_text() for t in result.plot().axes[0].get_yticklabels()]
    assert "device 0 expert" in labels


def test_step_plot_draws_every_op(demo):
    result = pipescope.simulate(demo, K=4, M=8)
    figure = result.plot()
    timeline_ax, memory_ax = figure.axes
    bars = sum(len(c.get_paths()) for c in timeline_ax.collections)
    assert bars == len(result.timeline())  # a bar per op
    assert len(memory_ax.lines) == 4  # a memory curve per device
    assert "bubble" in timeline_ax.get_title()


def test_sweep_plot_leaves_out_the_points_that_did_not_run(demo):
    # K=32 cannot cut the demo's 26 layers: an error point among ones that ran.
    result = pipescope.sweep(demo, K=[2, 32], M=[4, 8])
    assert any("error" in p for p in result.to_dict())
    throughput_ax, _ = result.plot().axes
    assert len(throughput_ax.lines) == 1
    assert list(throughput_ax.lines[0].get_xdata()) == [4, 8]


def test_sweep_plot_draws_a_line_per_k(demo):
    result = pipescope.sweep(demo, K=[2, 4], M=[4, 8])
    throughput_ax, bubble_ax = result.plot().axes
    assert len(throughput_ax.lines) == 2
    k4 = [p for p in result.to_dict() if p["K"] == 4]
    assert list(throughput_ax.lines[1].get_ydata()) == [p["throughput_samples_per_s"] for p in k4]
    assert list(bubble_ax.lines[1].get_ydata()) == [100 * p["bubble_fraction"] for p in k4]
