"""Restore into another directory (`RestoreOptions(target=)`): an absent or empty directory
gets the checkpoint's files, symlinks and modes; the workspace, its stat cache, its history
and its journal are left exactly as they were; a non-empty directory or one in the store
is refused."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from ckpt.checkpoints import Checkpoints, RestoreOptions, TargetRefused


def _fs_state(root: Path) -> dict[str, tuple[Any, ...]]:
    """Every path below `root` (the store included) with its type, mode, content and mtime."""
    out: dict[str, tuple[Any, ...]] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as stream:
                    content = hashlib.sha256(stream.read()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            else:
                content = None
            out[os.path.relpath(path, root)] = (st.st_mode, content, st.st_mtime_ns)
    return out


def _workspace(cp: Checkpoints, ws: Path) -> str:
    (ws / "src").mkdir()
    (ws / "src" / "a.py").write_text("print('a')\n")
    (ws / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(ws / "run.sh", 0o755)
    (ws / "private").write_text("secret")
    os.chmod(ws / "private", 0o600)
    (ws / "link").symlink_to("src/a.py")
    (ws / "dangling").symlink_to("/nowhere/at/all")
    record = cp.create().id
    (ws / "src" / "a.py").write_text("changed since\n")
    (ws / "new").write_text("not in the checkpoint")
    cp.create()
    cp.settle()
    return record


@pytest.mark.parametrize("exists", [False, True])
def test_target_gets_the_checkpoint_and_the_workspace_is_untouched(
        cp: Checkpoints, ws: Path, tmp_path: Path, exists: bool) -> None:
    ref = _workspace(cp, ws)
    dest = tmp_path / "out" / "copy"
    if exists:
        dest.mkdir(parents=True)
    before = _fs_state(ws)  # the workspace and its store: stat cache, catalog, records
    history = cp.list()
    report = cp.restore(ref, RestoreOptions(target=str(dest)))
    assert report.target == str(dest) and report.pre_restore is None
    assert report.written == 5
    after = _fs_state(ws)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    # Only the catalog records the restore's event; nothing else of the root moves.
    assert changed <= {".ckpt/catalog.db", ".ckpt/catalog.db-wal", ".ckpt/catalog.db-shm"}
    assert cp.list() == history
    assert cp.restore_pending() is None
    assert (dest / "src" / "a.py").read_text() == "print('a')\n"
    assert not (dest / "new").exists()
    assert stat.S_IMODE(os.stat(dest / "run.sh").st_mode) & 0o111
    assert stat.S_IMODE(os.stat(dest / "private").st_mode) == 0o600
    assert os.readlink(dest / "link") == "src/a.py"
    assert os.readlink(dest / "dangling") == "/nowhere/at/all"
    assert sorted(os.listdir(dest)) == ["dangling", "link", "private", "run.sh", "src"]
    event = cp.events(type="checkpoint:restore")[-1]
    assert event.data["target"] == str(dest) and event.data["pre_restore"] is None


def test_the_next_snapshot_reads_no_file_again(cp: Checkpoints, ws: Path, work: Any,
                                               tmp_path: Path) -> None:
    ref = _workspace(cp, ws)
    work.age()
    cp.create()  # the stat cache now trusts every file
    cp.restore(ref, RestoreOptions(target=str(tmp_path / "copy")))
    assert cp.create().stats.hashed == 0  # the stat cache still knows every file


def test_a_non_empty_target_is_refused_and_left_alone(cp: Checkpoints, ws: Path,
                                                      tmp_path: Path) -> None:
    ref = _workspace(cp, ws)
    dest = tmp_path / "full"
    dest.mkdir()
    (dest / "mine").write_text("keep")
    with pytest.raises(TargetRefused, match="not empty"):
        cp.restore(ref, RestoreOptions(target=str(dest)))
    assert os.listdir(dest) == ["mine"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(TargetRefused, match="not a directory"):
        cp.restore(ref, RestoreOptions(target=str(tmp_path / "file")))


@pytest.mark.parametrize("where", [".ckpt", ".ckpt/objects/new", "link-to-store/x"])
def test_a_target_inside_the_store_is_refused(cp: Checkpoints, ws: Path, where: str) -> None:
    ref = _workspace(cp, ws)
    (ws / "link-to-store").symlink_to(ws / ".ckpt")
    with pytest.raises(TargetRefused, match="inside the ckpt store"):
        cp.restore(ref, RestoreOptions(target=str(ws / where)))
    assert not (ws / ".ckpt" / "objects" / "new").exists()


def test_a_relative_target_is_relative_to_cwd(cp: Checkpoints, ws: Path,
                                              tmp_path: Path) -> None:
    ref = _workspace(cp, ws)
    report = cp.restore(ref, RestoreOptions(target="rel"), cwd=str(tmp_path))
    assert report.target == str(tmp_path / "rel")
    assert (tmp_path / "rel" / "private").read_text() == "secret"


def test_dry_run_and_paths(cp: Checkpoints, ws: Path, tmp_path: Path) -> None:
    ref = _workspace(cp, ws)
    dest = tmp_path / "copy"
    dry = cp.restore(ref, RestoreOptions(target=str(dest), dry_run=True))
    assert dry.dry_run and dry.written == 5 and not dest.exists()
    some = cp.restore(ref, RestoreOptions(target=str(dest), paths=["src"]))
    assert some.written == 1
    assert sorted(os.listdir(dest)) == ["src"]


def test_a_tracked_scope_checkpoint_writes_no_tombstone(cp: Checkpoints, ws: Path,
                                                        tmp_path: Path) -> None:
    (ws / "kept").write_text("k")
    cp.create()
    cp.track("kept", "missing/deep")
    tracked = cp.create()
    assert tracked.scope == "paths"
    cp.restore(tracked.id, RestoreOptions(target=str(tmp_path / "copy")))
    assert sorted(os.listdir(tmp_path / "copy")) == ["kept"]
