"""What a call leaves to do after it returns: the stat cache's update and save, freeing what a
restore replaced (`writing.LockedRoot`). Its contracts: the locks are held until it is done,
the next call and `close` wait for it, a failure in it is raised once by whichever waits, an
interpreter that exits without `close` still finishes it, and a staging directory that it
could not remove is removed by the next call.

Real temp directories and real locks throughout; the only injected faults are a cache save
that raises or blocks (a patched `write_stat_cache`), standing for a full disk or a slow one.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import restore_helpers as h  # tests/ dirs are on pytest's `pythonpath`

from ckpt.checkpoints import workspace as workspace_module
from ckpt.checkpoints import writing as writing_module
from ckpt.checkpoints.errors import StoreBusy
from ckpt.checkpoints.service import Checkpoints
from ckpt.checkpoints.snapshot.statcache import RACY_WINDOW_NS, read_stat_cache, write_stat_cache


@pytest.fixture
def root(tmp_path: Path) -> str:
    root = os.path.realpath(tmp_path / "ws")
    for index in range(6):
        h.write_file(root, f"pkg{index % 2}/mod{index}.py", b"original %d\n" % index * 40)
    time.sleep(2 * RACY_WINDOW_NS / 1e9)  # settled: what a snapshot sees is not racy
    return root


@pytest.fixture
def cp(root: str) -> Iterator[Checkpoints]:
    with Checkpoints.init(root) as service:
        yield service


def _turn(root: str) -> None:
    h.write_file(root, "pkg0/mod0.py", b"edited by the turn\n")
    h.write_file(root, "pkg1/new.py", b"added by the turn\n")
    os.unlink(os.path.join(root, "pkg1", "mod1.py"))


def test_after_settle_the_cache_knows_what_the_restore_wrote_and_staging_is_gone(
        cp: Checkpoints, root: str) -> None:
    first = cp.create()
    model = h.tree_state(root)
    _turn(root)
    cp.create()
    cp.restore(first.id)
    assert h.tree_state(root) == model  # the workspace is done when restore returns
    cp.settle()
    assert h.staging_left(cp.store_dir, root) == []
    cache = read_stat_cache(cp._ws.cache_path, gc_generation=cp._ws.gc_generation())
    assert cache.dirs[b""].tree == first.tree  # the restore's tree ids were adopted and saved
    assert cp.create().stats.hashed == 0


def test_the_locks_are_held_until_the_bookkeeping_is_done(
        cp: Checkpoints, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cp.create()
    cp.settle()  # (so that only the next call's save meets the patched writer)
    changed = h.write_file(root, "pkg0/mod0.py", b"changed\n")
    os.utime(changed, ns=(time.time_ns() - 10**9,) * 2)  # not racy: the next scan trusts it
    release, saving = threading.Event(), threading.Event()

    def slow_save(path: str, cache: object) -> None:
        saving.set()
        assert release.wait(30)
        write_stat_cache(path, cache)  # type: ignore[arg-type]

    monkeypatch.setattr(workspace_module, "write_stat_cache", slow_save)
    cp.create()  # returns with its cache's save still to do
    assert saving.wait(30)
    with Checkpoints.open(root) as other:
        other.config = dataclasses.replace(other.config, lock_timeout=0.2)
        with pytest.raises(StoreBusy):
            other.create()
        release.set()
        cp.settle()
        assert other.create().stats.hashed == 0  # the lock is free, and the cache was saved


def test_a_failed_save_is_raised_once_by_the_next_call_and_costs_nothing_else(
        cp: Checkpoints, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    first = cp.create()
    model = h.tree_state(root)
    _turn(root)
    turn = cp.create()
    cp.settle()

    def full_disk(path: str, cache: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(workspace_module, "write_stat_cache", full_disk)
    report = cp.restore(first.id)
    assert h.tree_state(root) == model and report.written + report.deleted > 0
    assert cp.catalog.restore_journals() == []  # the restore itself was complete and closed
    assert [r.id for r in cp.history()][-3:-1] == [first.id, turn.id]  # queries wait for nothing
    with pytest.raises(OSError) as caught:
        cp.create()  # waits for the restore's save (which may not have run yet) and raises
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == cp._ws.cache_path
    monkeypatch.undo()
    again = cp.create()  # raised once: the next call works, from the cache saved before
    assert again.tree == first.tree


def test_close_raises_what_failed_behind(root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    cp = Checkpoints.init(root)
    cp.create()
    cp.settle()
    h.write_file(root, "pkg0/mod0.py", b"changed\n")

    def broken(path: str, cache: object) -> None:
        raise OSError(errno.EIO, "Input/output error", path)

    monkeypatch.setattr(workspace_module, "write_stat_cache", broken)
    cp.create()
    with pytest.raises(OSError) as caught:
        cp.close()
    assert caught.value.errno == errno.EIO
    monkeypatch.undo()
    with Checkpoints.open(root) as again:  # closed all the same: the store opens and works
        assert again.create().stats.hashed == 1


def test_an_interpreter_that_exits_without_close_still_saves_the_cache(root: str) -> None:
    Checkpoints.init(root).close()
    script = ("import sys\nfrom ckpt.checkpoints.service import Checkpoints\n"
              "cp = Checkpoints.open(sys.argv[1])\ncp.create()\n")  # no close, no settle
    done = subprocess.run([sys.executable, "-c", script, root], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    with Checkpoints.open(root) as cp:
        assert cp.create().stats.hashed == 0


def test_a_staging_directory_no_journal_names_is_removed_by_the_next_call(
        cp: Checkpoints, root: str) -> None:
    cp.create()
    leftover = os.path.join(cp._ws.root_dir, "staging-00112233aabb")
    os.mkdir(leftover)
    for name in ("0", "1", "removed-1"):
        with open(os.path.join(leftover, name), "wb") as out:
            out.write(b"what a killed restore replaced\n")
    cp.create()
    assert h.staging_left(cp.store_dir, root) == []


def test_a_bulky_call_does_its_bookkeeping_before_its_commit(
        cp: Checkpoints, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past BEHIND_MAX_FILES files hashed, a snapshot saves its (big) cache before its commit,
    as it always did: a failure to save is the call's own, and no checkpoint is recorded."""
    monkeypatch.setattr(writing_module, "BEHIND_MAX_FILES", 3)
    first = cp.create()  # 6 files hashed: bulky
    assert read_stat_cache(cp._ws.cache_path, gc_generation=0).dirs[b""].tree == first.tree
    _turn(root)  # 2 files hashed: not bulky, saved behind
    cp.create()
    assert cp._last_write is not None and cp._last_write.running
    cp.settle()

    def full_disk(path: str, cache: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", path)

    for index in range(6):
        h.write_file(root, f"pkg0/more{index}.py", b"more %d\n" % index)
    count = len(cp.history())
    monkeypatch.setattr(workspace_module, "write_stat_cache", full_disk)
    with pytest.raises(OSError) as caught:
        cp.create()
    assert caught.value.errno == errno.ENOSPC and len(cp.history()) == count
    monkeypatch.undo()
    cp.settle()  # nothing left to raise
    assert cp.create().stats.files == 12 and len(cp.history()) == count + 1


def test_a_bulky_restore_does_its_bookkeeping_before_closing_its_journal(
        cp: Checkpoints, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writing_module, "BEHIND_MAX_FILES", 3)
    first = cp.create()
    model = h.tree_state(root)
    for index in range(6):
        h.write_file(root, f"pkg1/gen{index}.py", b"generated\n")
    cp.create()

    def full_disk(path: str, cache: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(workspace_module, "write_stat_cache", full_disk)
    with pytest.raises(OSError):
        cp.restore(first.id)  # 6 removals: bulky
    assert h.tree_state(root) == model  # applied, then the save failed
    assert cp.catalog.restore_journals() != []  # left for the next call, which ends it
    monkeypatch.undo()
    assert cp.recover() is not None
    assert cp.catalog.restore_journals() == [] and h.staging_left(cp.store_dir, root) == []
    assert h.tree_state(root) == model


def test_a_restore_whose_scan_was_bulky_saves_its_cache_once_before_it_returns(
        cp: Checkpoints, root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pre-restore scan that hashed past BEHIND_MAX_FILES makes the restore bulky: its big
    cache is saved once, by the update before the journal is closed, and not on the thread
    (nor first by the scan and then again by the update)."""
    monkeypatch.setattr(writing_module, "BEHIND_MAX_FILES", 3)
    first = cp.create()
    for index in range(6):
        h.write_file(root, f"pkg1/gen{index}.py", b"generated %d\n" % index)
    cp.settle()
    saves: list[str] = []

    def counted(path: str, cache: object) -> None:
        saves.append(path)
        write_stat_cache(path, cache)  # type: ignore[arg-type]

    monkeypatch.setattr(workspace_module, "write_stat_cache", counted)
    report = cp.restore(first.id)  # the pre-restore scan hashes the 6 new files
    assert report.deleted == 6
    assert not (cp._last_write is not None and cp._last_write.running) and saves == [cp._ws.cache_path]
