"""What the functions return: typed results over the command's --json document.
to_dict() is that document, as `pipescope COMMAND --json` prints it; the
tables come as pandas DataFrames where pandas is installed, else as lists of
dicts."""

import copy
import json


def frame(rows):
    """`rows` (a list of dicts) as a pandas DataFrame, or as the list itself
    without pandas."""
    try:
        import pandas
    except ImportError:
        return rows
    return pandas.DataFrame(rows)


class Result:
    """A command's --json document; its top-level fields read as attributes."""

    def __init__(self, document, notes=""):
        self._document = document
        self.notes = notes  # what the command said beside its result

    def to_dict(self):
        return copy.deepcopy(self._document)

    def __getattr__(self, name):
        document = self.__dict__.get("_document")
        if isinstance(document, dict) and name in document:
            return document[name]
        raise AttributeError("%s has no field %r" % (type(self).__name__, name))

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, json.dumps(self._document)[:200])


class SimulateResult(Result):
    """One simulated step: step_time_s, throughput_samples_per_s,
    bubble_fraction, mfu, fits, stages, devices, ... (`simulate --json`)."""

    def __init__(self, document, notes, trace):
        super().__init__(document, notes)
        self._trace = trace  # reads the step's Chrome trace, run again with --trace

    def stage_table(self):
        """One row per stage: its layers, device, times and the device's memory."""
        devices = self._document["devices"]
        rows = []
        for stage in self._document["stages"]:
            row = dict(stage)
            device = devices[stage["device"]] if stage["device"] < len(devices) else {}
            row.update({"device_" + k: v for k, v in device.items()})
            rows.append(row)
        return frame(rows)

    def timeline(self):
        """Every op of the step: device, lane (compute, send, recv, tensor,
        expert or context), row (of that lane, from 0: overlapping slices take further
        rows), name, category, stage, micro_batch, start_s, end_s, bytes
        (None for compute) (the trace's complete events)."""
        events = self._trace()
        lanes = {}  # (pid, tid) -> (lane, row), from the trace's thread names
        for e in events:
            if e.get("ph") == "M" and e.get("name") == "thread_name":
                lane, _, row = e["args"]["name"].partition(" ")
                lanes[(e["pid"], e["tid"])] = (lane, int(row) - 1 if row else 0)
        rows = []
        for e in events:
            if e.get("ph") != "X":
                continue
            args = e.get("args", {})
            lane, row = lanes.get((e["pid"], e["tid"]), ("compute", 0))
            rows.append({"device": e["pid"], "lane": lane, "row": row, "name": e["name"],
                         "category": e.get("cat", ""), "stage": args.get("stage"),
                         "micro_batch": args.get("micro_batch"), "start_s": e["ts"] * 1e-6,
                         "end_s": (e["ts"] + e["dur"]) * 1e-6, "bytes": args.get("bytes")})
        return frame(rows)

    def memory(self):
        """Each device's memory over the step: device, time_s, bytes."""
        rows = [{"device": e["pid"], "time_s": e["ts"] * 1e-6, "bytes": e["args"]["bytes"]}
                for e in self._trace() if e.get("ph") == "C" and e.get("name") == "memory"]
        return frame(rows)

    def plot(self, ax=None):
        """The timeline above the memory curves, as the desktop app draws them
        (matplotlib); returns the figure."""
        from . import plots
        return plots.plot_step(self, ax)


class Plan(Result):
    """A plan as `pipescope plan -o` writes it: what export, run and compare take."""

    def save(self, path):
        with open(path, "w", encoding="utf-8") as out:
            json.dump(self._document, out, indent=2)
            out.write("\n")


class PlanResult(Result):
    """The planner's ranking (`plan --json`): plans, rejected, devices, ...;
    best is the first plan as a Plan."""

    def __init__(self, document, notes, best):
        super().__init__(document, notes)
        self.best = best

    def ranking(self):
        """One row per ranked plan: rank, T, K, D, E, C, M, schedule, chunks,
        remat_mode, zero, step_time_s, throughput, bubble, MFU, peak memory."""
        keys = ["rank", "T", "K", "D", "E", "C", "M", "schedule", "chunks", "remat_mode", "zero",
                "micro_batch_size", "step_time_s", "throughput_samples_per_s",
                "bubble_fraction", "mfu", "peak_memory_bytes"]
        return frame([{k: p.get(k) for k in keys} for p in self._document["plans"]])


class SweepResult(Result):
    """Every K x M point (`sweep --json`, a list)."""

    def grid(self):
        """One row per point: K, M and its figures (or its error)."""
        return frame([dict(p) for p in self._document])

    def plot(self):
        """Throughput and bubble against M, a line per K (matplotlib)."""
        from . import plots
        return plots.plot_sweep(self)


class CapacityResult(Result):
    """The largest value of a scenario field that still fits (`capacity --json`)."""


class ValidateResult(Result):
    """The published figures beside the simulation (`validate --json`); ok
    says whether every checked figure is within its tolerance or has its
    cause stated, failure is the command's line when not."""

    def __init__(self, document, notes, failure):
        super().__init__(document, notes)
        self.failure = failure
        self.ok = not failure


class RunResult(Result):
    """A plan trained on the executor (`run --json`)."""


class ProfileResult(Result):
    """A measured profile of this machine (`profile --json`)."""


class CompareResult(Result):
    """Prediction beside measurement (`compare --json`)."""
