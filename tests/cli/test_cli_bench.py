"""`ckpt bench`: a settings grid measured on a scratch copy; the user's tree is untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _state(root: Path) -> dict[str, tuple[int, int, bytes]]:
    found = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            found[path] = (st.st_mtime_ns, st.st_mode, Path(path).read_bytes())
    return found


def test_bench_json_reports_every_setting_and_leaves_the_tree_alone(ws: Path, ckpt_in: Any) -> None:
    before = _state(ws)
    run = ckpt_in("bench", "--levels", "1,3", "--threads", "1", "--json")
    assert run.code == 0, run.stderr
    result = json.loads(run.stdout)
    rows = result["rows"]
    assert [(r["compression_level"], r["threads"]) for r in rows[:2]] == [(1, 1), (3, 1)]
    assert all(r["snapshot_s"] is not None and r["restore_s"] is not None for r in rows)
    assert result["recommendation"]["commands"]
    assert _state(ws) == before
    assert not (ws / ".ckpt").exists()


def test_bench_rejects_a_malformed_level_list_as_usage_error(ckpt_in: Any) -> None:
    run = ckpt_in("bench", "--levels", "one")
    assert run.code == 2
    assert "comma-separated" in run.stderr


def test_bench_storage_settings_each_get_a_row(ws: Path, ckpt_in: Any) -> None:
    run = ckpt_in("bench", "--levels", "1", "--threads", "1", "--deltas", "on,off",
                  "--dictionaries", "on", "--delta-chains", "2", "--block-sizes", "1048576",
                  "--json")
    assert run.code == 0, run.stderr
    rows = json.loads(run.stdout)["rows"]
    keys = [k for k in ("deltas", "delta_chain") if rows[0][k] is not None]
    if keys == ["deltas", "delta_chain"]:
        assert [(r["deltas"], r["delta_chain"]) for r in rows] == [
            (True, rows[0]["delta_chain"]), (False, rows[0]["delta_chain"]), (True, 2)]


def test_bench_rejects_a_malformed_switch_list_as_usage_error(ckpt_in: Any) -> None:
    run = ckpt_in("bench", "--deltas", "maybe")
    assert run.code == 2
    assert "on/off" in run.stderr
