"""`ckpt restore`'s report through the command line (issues 27.4, 27.5): a partial restore says
so and names each conflict (text and JSON); a file the scan could not capture is kept and
reported as such.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

CkptIn = Callable[..., Any]


def _partial_setup(ws: Path, ckpt_in: CkptIn) -> str:
    (ws / "app.log").write_text("captured\n")
    target = json.loads(ckpt_in("create", "--json").stdout)["id"]
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "app.log").write_text("the user's newer log\n")
    (ws / "a.txt").write_text("edited\n")
    return str(target)


def test_partial_restore_text_says_partially_and_lists_each_conflict(
        initialized: Path, ckpt_in: CkptIn) -> None:
    target = _partial_setup(initialized, ckpt_in)
    run = ckpt_in("restore", target)
    assert run.code == 3
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"partially restored {target}: ")
    assert lines[1:] == ["conflict: app.log (a file the current checkpoint did not capture "
                         "is in the way)"]
    assert "app.log" in run.stderr and run.stderr.startswith("ckpt: error: restore of")
    assert (initialized / "a.txt").read_text() == "alpha\n"


def test_partial_restore_json_lists_conflicts_with_reasons(initialized: Path,
                                                           ckpt_in: CkptIn) -> None:
    target = _partial_setup(initialized, ckpt_in)
    run = ckpt_in("restore", target, "--json")
    assert run.code == 3
    report = json.loads(run.stdout)
    assert report["conflicts"] == [
        {"path": "app.log",
         "reason": "a file the current checkpoint did not capture is in the way"}]


def test_complete_restore_text_has_no_conflict_lines(initialized: Path,
                                                     ckpt_in: CkptIn) -> None:
    target = json.loads(ckpt_in("create", "--json").stdout)["id"]
    (initialized / "a.txt").write_text("edited\n")
    run = ckpt_in("restore", target)
    assert run.code == 0
    assert len(run.stdout.splitlines()) == 1 and run.stdout.startswith(f"restored {target}: ")
    assert json.loads(ckpt_in("restore", target, "--json").stdout)["conflicts"] == []


def test_too_large_file_created_later_is_kept_and_reported(initialized: Path,
                                                           ckpt_in: CkptIn) -> None:
    assert ckpt_in("config", "set", "max_file_size", "1000").code == 0
    target = json.loads(ckpt_in("create", "--json").stdout)["id"]
    (initialized / "big.bin").write_bytes(b"x" * 2000)
    (initialized / "a.txt").write_text("edited\n")
    run = ckpt_in("restore", target)
    assert run.code == 0, run.stderr
    assert "ckpt: warning: not captured, kept: big.bin (too-large)" in run.stderr.splitlines()
    assert (initialized / "big.bin").read_bytes() == b"x" * 2000
    dry = ckpt_in("restore", target, "--dry-run", "--json")
    assert json.loads(dry.stdout)["not_captured"] == [{"path": "big.bin", "reason": "too-large"}]
    assert "not captured, kept: big.bin" in dry.stderr
