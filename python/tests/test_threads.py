"""The interpreter lock is released while a command runs."""

import os
import threading

import pipescope
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
