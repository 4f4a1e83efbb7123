"""What the tests share: the command line built beside the module (its --json
is what every function must return), and the source tree's scenarios."""

import glob
import json
import os
import subprocess

import pytest

SOURCE_DIR = os.environ.get("PIPESCOPE_SOURCE_DIR",
                            os.path.dirname(os.path.dirname(os.path.dirname(
                                os.path.abspath(__file__)))))
CLI = os.environ.get("PIPESCOPE_CLI", os.path.join(SOURCE_DIR, "build", "cli", "pipescope"))

# The shipped scenarios a command runs (the validation cases are validate's).
SCENARIOS = sorted(glob.glob(os.path.join(SOURCE_DIR, "scenarios", "*.json")) +
                   glob.glob(os.path.join(SOURCE_DIR, "scenarios", "gpipe", "*.json")))


def scenario_path(name):
    return os.path.join(SOURCE_DIR, "scenarios", name)


def cli(*args):
    """`pipescope ARGS...` as a process: (exit status, stdout, stderr)."""
    done = subprocess.run([CLI] + [str(a) for a in args], capture_output=True, text=True,
                          check=False)
    return done.returncode, done.stdout, done.stderr


def cli_json(*args):
    """The --json document `pipescope ARGS... --json` prints; fails the test if
    the command fails."""
    status, out, err = cli(*args, "--json")
    assert status == 0, err
    return json.loads(out)


@pytest.fixture
def demo():
    return scenario_path("demo.json")
