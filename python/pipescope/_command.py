"""How the package runs PipeScope's commands: the command line's own parser and
subcommands (cli/command_line.h), in this process, through pipescope._core."""

import itertools
import json
import os
import tempfile
import threading

from . import _core


# The command's exit status when Ctrl-C stopped it (128 + SIGINT).
INTERRUPTED = 130


class Error(Exception):
    """Bad input or a configuration PipeScope refuses: the command line's one
    error line, e.g. "pipescope: error: demo.json: training.micro_batches: ..."."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


def option_args(options):
    """The command-line arguments for keyword options, by the CLI's own names:
    stages=4 is --stages 4, K=4 is -K 4, micro_batches=[4, 8] is
    --micro-batches 4,8, json=True is --json; None and False leave one out."""
    args = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "-" + key if len(key) == 1 else "--" + key.replace("_", "-")
        if value is True:
            args.append(flag)
        elif isinstance(value, (list, tuple)):
            args += [flag, ",".join(str(v) for v in value)]
        else:
            args += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return args


class Outcome:
    """What a command gave: its --json document (None if it printed none),
    the notes it wrote beside it, and the failure it judged (validate's
    figures outside their tolerance), "" if none."""

    def __init__(self, document, notes, failure):
        self.document, self.notes, self.failure = document, notes, failure


def run(args, scenario=None, positional=True, judged=False):
    """Runs `pipescope ARGS...`, the scenario (a Scenario) given where the
    command takes one (as its positional argument, else already in `args`).
    Returns an Outcome; raises Error with the command's error line, except
    where the command is `judged` and printed its document before failing,
    and KeyboardInterrupt where Ctrl-C stopped it (from the main thread)."""
    scenario_json, name = None, ""
    if scenario is not None:
        args = scenario.args(args) if positional else args
        if scenario.document is not None:
            try:
                scenario_json = json.dumps(scenario.document, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise Error("pipescope: error: %s: not a JSON document: %s"
                            % (scenario.name, e)) from None
            name = scenario.name
    main = threading.current_thread() is threading.main_thread()
    outcome = _core.run([str(a) for a in args], scenario_json, name, main)
    if outcome.status == INTERRUPTED:
        raise KeyboardInterrupt(outcome.error)
    if outcome.status != 0 and not (judged and outcome.json):
        raise Error(outcome.error or "pipescope: exit status %d" % outcome.status,
                    outcome.status)
    document = json.loads(outcome.json) if outcome.json else None
    return Outcome(document, outcome.notes, outcome.error if outcome.status != 0 else "")


class ScratchFolder:
    """An empty folder for the files one command writes (a trace, a plan),
    emptied again on leaving. The folders live in one temporary folder of the
    process (removed at exit) and are used again: making and removing a
    folder for each command cost a small plan several per cent."""

    _root = None
    _free = []
    _lock = threading.Lock()
    _count = itertools.count()

    def __enter__(self):
        with ScratchFolder._lock:
            if ScratchFolder._root is None:
                ScratchFolder._root = tempfile.TemporaryDirectory(prefix="pipescope-")
            self._path = ScratchFolder._free.pop() if ScratchFolder._free else None
        if self._path is None:
            self._path = os.path.join(ScratchFolder._root.name, str(next(ScratchFolder._count)))
            os.mkdir(self._path)
        return self._path

    def __exit__(self, *exc):
        for entry in os.scandir(self._path):
            os.unlink(entry.path)
        with ScratchFolder._lock:
            ScratchFolder._free.append(self._path)
        return False
