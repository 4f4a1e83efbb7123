"""Pictures of results with matplotlib (optional): a step's timeline above its
memory curves, and a sweep's throughput and bubble."""

# One colour per op category (the trace's "cat").
CATEGORY_COLOURS = {
    "forward": "#4C72B0", "backward": "#55A868", "recompute": "#C44E52",
    "weight": "#8172B2", "optimizer": "#937860", "activation": "#CCB974",
    "gradient": "#64B5CD", "allreduce": "#5A7DB8", "tensor-allreduce": "#C25B9A",
    "expert-alltoall": "#B8860B", "context-exchange": "#6B8E23",
}


def _rows(table):
    """A DataFrame or a list of dicts, as a list of dicts."""
    return table.to_dict("records") if hasattr(table, "to_dict") else list(table)


def plot_step(result, ax=None):
    import matplotlib.pyplot as plt
    if ax is None:
        figure, (timeline_ax, memory_ax) = plt.subplots(
            2, 1, figsize=(12, 6), sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    else:
        timeline_ax, memory_ax = ax
        figure = timeline_ax.figure
    ops = _rows(result.timeline())
    # A device's rows as the desktop app orders them: its compute, then its
    # exchanges.
    order = {"compute": 0, "tensor": 1, "expert": 2, "context": 3, "send": 4, "recv": 5}
    lanes = sorted({(op["device"], order.get(op["lane"], 5), op["lane"], op["row"])
                    for op in ops})
    row_of = {(d, lane, row): i for i, (d, _, lane, row) in enumerate(lanes)}
    # One set of bars per lane and category: a step of thousands of ops draws
    # in a second, where a set per op took half a minute.
    bars = {}
    for op in ops:
        key = (row_of[(op["device"], op["lane"], op["row"])], op["category"])
        bars.setdefault(key, []).append((op["start_s"], op["end_s"] - op["start_s"]))
    for (row, category), spans in sorted(bars.items()):
        timeline_ax.broken_barh(spans, (row - 0.4, 0.8),
                                color=CATEGORY_COLOURS.get(category, "#999999"))
    timeline_ax.set_yticks(range(len(lanes)))
    timeline_ax.set_yticklabels(
        ["device %d%s%s" % (d, "" if lane == "compute" else " " + lane,
                            " %d" % (row + 1) if row else "") for d, _, lane, row in lanes])
    timeline_ax.invert_yaxis()
    timeline_ax.set_title("Step %.3f s, bubble %.1f %%" % (result.step_time_s,
                                                          100 * result.bubble_fraction))
    samples = _rows(result.memory())
    for device in sorted({s["device"] for s in samples}):
        points = [s for s in samples if s["device"] == device]
        memory_ax.step([p["time_s"] for p in points], [p["bytes"] / 2**30 for p in points],
                       where="post", label="device %d" % device)
    memory_ax.set_xlabel("time (s)")
    memory_ax.set_ylabel("memory (GiB)")
    memory_ax.legend(loc="upper right", fontsize="small")
    return figure


def plot_sweep(result):
    import matplotlib.pyplot as plt
    figure, (throughput_ax, bubble_ax) = plt.subplots(1, 2, figsize=(12, 4))
    # The points that ran (a DataFrame fills the others' error column, and
    # theirs with NaN).
    points = [p for p in result.to_dict() if "error" not in p]
    for k in sorted({p["K"] for p in points}):
        line = sorted((p for p in points if p["K"] == k), key=lambda p: p["M"])
        ms = [p["M"] for p in line]
        throughput_ax.plot(ms, [p["throughput_samples_per_s"] for p in line], marker="o",
                           label="K=%d" % k)
        bubble_ax.plot(ms, [100 * p["bubble_fraction"] for p in line], marker="o",
                       label="K=%d" % k)
    for ax, label in ((throughput_ax, "samples/s"), (bubble_ax, "bubble (%)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("micro-batches M")
        ax.set_ylabel(label)
        ax.legend(fontsize="small")
    return figure
