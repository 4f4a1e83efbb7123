"""The interpreter lock is released while a command runs; Ctrl-C stops one."""

import os
import signal
import threading
import time

import pytest

import pipescope
from pipescope import _core
from conftest import scenario_path


def test_a_command_waiting_on_input_lets_python_run(tmp_path):
    # The command reads its scenario from a pipe that only this thread
    # writes: were the lock held while it waits in open(), this thread could
    # never write, and the test would hang (ctest's timeout fails it).
    pipe = tmp_path / "scenario.fifo"
    os.mkfifo(pipe)
    results = {}

    def simulate():
        results["step"] = pipescope.simulate(str(pipe))

    worker = threading.Thread(target=simulate)
    worker.start()
    with open(scenario_path("demo.json"), "rb") as source, open(pipe, "wb") as sink:
        sink.write(source.read())
    worker.join()
    assert results["step"].to_dict() == pipescope.simulate(scenario_path("demo.json")).to_dict()


def test_commands_from_several_threads_each_get_their_own_result():
    demo = scenario_path("demo.json")
    expected = {k: pipescope.simulate(demo, K=k).step_time_s for k in (1, 2, 4)}
    got = {}

    def simulate(k):
        got[k] = pipescope.simulate(demo, K=k).step_time_s

    threads = [threading.Thread(target=simulate, args=(k,)) for k in (1, 2, 4) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == expected


def test_ctrl_c_stops_a_command_and_raises_keyboard_interrupt(tmp_path):
    # The command (on this, the main thread) waits for its scenario on a
    # pipe; a helper sends SIGINT while it waits, and writes the scenario
    # once the command has taken the stop: the planner then stops at once.
    pipe = tmp_path / "scenario.fifo"
    os.mkfifo(pipe)

    def interrupt_then_write():
        with open(scenario_path("demo.json"), "rb") as source, open(pipe, "wb") as sink:
            os.kill(os.getpid(), signal.SIGINT)
            # Bounded, so that a command deaf to Ctrl-C fails the test below
            # instead of hanging it.
            deadline = time.monotonic() + 30
            while not _core.cancel_requested() and time.monotonic() < deadline:
                time.sleep(0.001)
            sink.write(source.read())

    helper = threading.Thread(target=interrupt_then_write)
    helper.start()
    with pytest.raises(KeyboardInterrupt, match="pipescope: interrupted"):
        pipescope.plan(str(pipe))
    helper.join()
    # The next command runs whole, and Python's handler is back: a Ctrl-C now
    # interrupts Python (were the module's handler left in place, it would
    # only set the stop flag and the sleep would end without one).
    assert pipescope.simulate(scenario_path("demo.json")).step_time_s > 0
    assert not _core.cancel_requested()
    with pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
