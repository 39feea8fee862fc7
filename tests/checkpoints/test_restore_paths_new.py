"""`restore --path P` for a P the checkpoint does not hold (issue 27.1): P did not exist at the
checkpoint, so restoring it removes it, whether it is a file created since inside a directory
that existed then, a file below new directories, or a whole directory under a requested path.
Paths are given absolute: the API's relative paths are another item's concern.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckpt.checkpoints.errors import NothingMatched
from ckpt.checkpoints.restore.restorer import RestoreOptions
from ckpt.checkpoints.service import Checkpoints


def _only(ws: Path, *paths: str, **options: Any) -> RestoreOptions:
    return RestoreOptions(paths=tuple(str(ws / p) for p in paths), **options)


def test_new_file_in_an_existing_directory_is_removed(cp: Checkpoints, ws: Path,
                                                      work: Any) -> None:
    work.write("src/a.py", b"a\n")
    first = cp.create()
    work.write("src/new.py", b"b\n")
    work.write("src/other.py", b"kept\n")
    report = cp.restore(first.id, _only(ws, "src/new.py"))
    assert (report.deleted, report.written) == (1, 0)
    assert not (ws / "src/new.py").exists()
    assert (ws / "src/other.py").read_bytes() == b"kept\n"  # not asked for: left alone
    assert (ws / "src/a.py").read_bytes() == b"a\n"
    # The undo brings it back.
    assert report.pre_restore is not None
    cp.restore(report.pre_restore, _only(ws, "src/new.py"))
    assert (ws / "src/new.py").read_bytes() == b"b\n"


def test_new_files_and_directories_under_a_requested_directory_are_removed(
        cp: Checkpoints, ws: Path, work: Any, fs_snapshot: Callable[..., Any]) -> None:
    work.write("src/a.py", b"a\n")
    work.write("src/pkg/m.py", b"m\n")
    work.write("docs/x.md", b"x\n")
    first = cp.create()
    expected = fs_snapshot(ws)
    work.write("src/pkg/new.py", b"n\n")
    work.write("src/pkg/deep/er/f.txt", b"f\n")
    work.write("src/pkg/m.py", b"changed\n")
    work.write("docs/new.md", b"outside the selection\n")
    report = cp.restore(first.id, _only(ws, "src/pkg"))
    assert report.deleted == 2 and report.dirs_removed == 2
    got = fs_snapshot(ws)
    assert got.pop(b"docs/new.md") == ("file", b"outside the selection\n")
    assert got == expected


def test_a_file_below_directories_created_since_is_removed_with_them(
        cp: Checkpoints, ws: Path, work: Any) -> None:
    work.write("src/a.py", b"a\n")
    first = cp.create()
    work.write("src/gen/out/x.bin", b"x")
    report = cp.restore(first.id, _only(ws, "src/gen/out/x.bin"))
    assert report.deleted == 1
    assert not (ws / "src/gen").exists()  # the directories existed only for it
    assert (ws / "src/a.py").exists()


def test_directories_created_since_that_hold_other_files_stay(
        cp: Checkpoints, ws: Path, work: Any) -> None:
    work.write("src/a.py", b"a\n")
    first = cp.create()
    work.write("src/gen/x.bin", b"x")
    work.write("src/gen/y.bin", b"y")
    cp.restore(first.id, _only(ws, "src/gen/x.bin"))
    assert not (ws / "src/gen/x.bin").exists()
    assert (ws / "src/gen/y.bin").read_bytes() == b"y"


def test_dry_run_names_the_new_path_and_changes_nothing(cp: Checkpoints, ws: Path,
                                                        work: Any) -> None:
    work.write("src/a.py", b"a\n")
    first = cp.create()
    work.write("src/new.py", b"b\n")
    report = cp.restore(first.id, _only(ws, "src/new.py", dry_run=True))
    assert [r.path for r in report.plan.removals] == [b"src/new.py"]
    assert (ws / "src/new.py").exists()


def test_a_path_in_neither_the_checkpoint_nor_the_workspace_still_matches_nothing(
        cp: Checkpoints, ws: Path, work: Any) -> None:
    work.write("src/a.py", b"a\n")
    first = cp.create()
    with pytest.raises(NothingMatched):
        cp.restore(first.id, _only(ws, "src/ghost.py"))


def test_tracked_scope_leaves_an_untracked_new_file_alone(cp: Checkpoints, ws: Path,
                                                          work: Any) -> None:
    """A checkpoint of tracked paths says nothing about other paths: asking for one that it
    does not cover changes nothing."""
    work.write("src/a.py", b"a\n")
    cp.track(str(ws / "src/a.py"))
    first = cp.create()
    work.write("src/new.py", b"b\n")
    report = cp.restore(first.id, _only(ws, "src/new.py"))
    assert (report.deleted, report.written) == (0, 0)
    assert (ws / "src/new.py").exists()


def test_cli_restore_path_of_a_new_file_removes_it(cp: Checkpoints, ws: Path, work: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's reproduction, through the command line."""
    from click.testing import CliRunner

    from ckpt.cli.main import cli

    work.write("src/a.py", b"a\n")
    monkeypatch.chdir(ws)
    runner = CliRunner()
    created = runner.invoke(cli, ["create"])
    assert created.exit_code == 0, created.stderr
    work.write("src/new.py", b"b\n")
    run = runner.invoke(cli, ["restore", created.stdout.strip(), "--path", "src/new.py"])
    assert run.exit_code == 0, run.stderr
    assert "1 deleted" in run.stdout
    assert not (ws / "src/new.py").exists()
