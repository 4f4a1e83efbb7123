"""docs/python.md's walkthrough runs as written: its Python blocks, in order,
in one namespace, from a folder that sees the checkout's scenarios."""

import os
import re

import pytest

from conftest import SOURCE_DIR

pytest.importorskip("pandas", reason="the walkthrough's tables are DataFrames")
matplotlib = pytest.importorskip("matplotlib", reason="the walkthrough draws")
matplotlib.use("Agg")


def python_blocks(path):
    with open(path, encoding="utf-8") as f:
        return re.findall(r"```python\n(.*?)```", f.read(), re.S)


def test_the_walkthrough_runs(tmp_path, monkeypatch, capsys):
    blocks = python_blocks(os.path.join(SOURCE_DIR, "docs", "python.md"))
    assert len(blocks) == 3
    os.symlink(os.path.join(SOURCE_DIR, "scenarios"), tmp_path / "scenarios")
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for block in blocks:
        exec(compile(block, "docs/python.md", "exec"), namespace)
    printed = capsys.readouterr().out
    best = namespace["best"]
    assert "best: %d x %d x %d" % (best.T, best.K, best.D) in printed
    assert best.T * best.K * best.D == 1024
    assert (tmp_path / "out" / "gpt3-best.png").stat().st_size > 10000
    assert (tmp_path / "out" / "demo-sweep.png").stat().st_size > 10000
    longer = namespace["longer"]
    assert "at 4096 tokens: %d x %d x %d" % (longer.T, longer.K, longer.D) in printed
    assert longer.T * longer.K * longer.D == 1024
