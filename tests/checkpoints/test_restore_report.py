"""What a restore's report says beyond its counts (issues 27.4 and 27.5): every path a partial
restore left as it was and why (a typed list, in the JSON too), and every path the scan before
the restore could not capture, which the restore keeps as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckpt.checkpoints import RestoreConflict, RestoreIncomplete, SkippedPath
from ckpt.checkpoints.config import set_config_value
from ckpt.checkpoints.restore.restorer import RestoreOptions
from ckpt.checkpoints.service import Checkpoints


def _ignored_files_in_the_way(cp: Checkpoints, work: Any) -> str:
    """A checkpoint with two files, then an ignore rule that makes both uncaptured files
    that the restore must not overwrite (two conflicts)."""
    work.write("app.log", b"captured")
    work.write("logs/b.log", b"captured too")
    work.write("a.txt", b"a")
    record = cp.create()
    work.write(".gitignore", b"*.log\n")
    work.write("app.log", b"the user's newer log")
    work.write("logs/b.log", b"newer too")
    work.write("a.txt", b"edited")
    return record.id


def test_a_partial_restore_names_every_conflict_and_why(cp: Checkpoints, ws: Path,
                                                        work: Any) -> None:
    target = _ignored_files_in_the_way(cp, work)
    with pytest.raises(RestoreIncomplete) as caught:
        cp.restore(target)
    report = caught.value.report  # type: ignore[attr-defined]
    assert [c.path for c in report.conflicts] == [b"app.log", b"logs/b.log"]
    assert all(isinstance(c, RestoreConflict) and c.reason for c in report.conflicts)
    assert report.to_json()["conflicts"] == [
        {"path": "app.log", "reason": report.conflicts[0].reason},
        {"path": "logs/b.log", "reason": report.conflicts[1].reason}]
    assert (ws / "a.txt").read_bytes() == b"a"  # the rest was applied
    assert (ws / "app.log").read_bytes() == b"the user's newer log"


def test_a_complete_restore_reports_no_conflicts(cp: Checkpoints, work: Any) -> None:
    work.write("a.txt", b"a")
    record = cp.create()
    work.write("a.txt", b"b")
    report = cp.restore(record.id)
    assert report.conflicts == ()
    assert report.to_json()["conflicts"] == []


def test_a_too_large_file_created_after_the_checkpoint_is_kept_and_reported(
        cp: Checkpoints, ws: Path, work: Any, reopen: Callable[..., Checkpoints]) -> None:
    set_config_value(cp.store_dir, "max_file_size", "1000")
    cp = reopen()
    work.write("a.txt", b"a")
    record = cp.create()
    work.write("data/big.bin", b"x" * 2000)
    work.write("a.txt", b"edited")
    for options in (RestoreOptions(dry_run=True), RestoreOptions(save=False), RestoreOptions()):
        report = cp.restore(record.id, options)
        assert report.not_captured == (SkippedPath(b"data/big.bin", "too-large"),), options
        assert report.to_json()["not_captured"] == [
            {"path": "data/big.bin", "reason": "too-large"}]
    assert (ws / "data/big.bin").read_bytes() == b"x" * 2000
    assert (ws / "a.txt").read_bytes() == b"a"


def test_not_captured_paths_are_limited_to_the_restored_selection(
        cp: Checkpoints, ws: Path, work: Any, reopen: Callable[..., Checkpoints]) -> None:
    set_config_value(cp.store_dir, "max_file_size", "1000")
    cp = reopen()
    work.write("src/a.txt", b"a")
    work.write("docs/d.txt", b"d")
    record = cp.create()
    work.write("src/big.bin", b"x" * 2000)
    work.write("docs/big.bin", b"y" * 2000)
    report = cp.restore(record.id, RestoreOptions(paths=(str(ws / "src"),)))
    assert [s.path for s in report.not_captured] == [b"src/big.bin"]
    assert (ws / "src/big.bin").exists() and (ws / "docs/big.bin").exists()
