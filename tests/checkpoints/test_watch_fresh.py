"""Directories a scan finds unwatched are watched after it listed them (watch.py, `fresh`):
`Watcher.settle` compares them once more, so the second snapshot of a new store lists only
what changed, and a change made between the listing and the watch is still captured.

Real inotify and a real file system; the only things patched are counters around the
listing functions and a write slipped in at a point of the real code path.
"""

from __future__ import annotations

import glob
import os
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ckpt.checkpoints import Checkpoints, WatchState
from ckpt.checkpoints.snapshot import dirlisting
from ckpt.checkpoints.snapshot.statcache import RACY_WINDOW_NS
from ckpt.checkpoints.snapshot.watch import Watcher, WatchHandle

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux only")

FILES = {"a/one.txt": b"1", "a/b/two.txt": b"2", "a/b/c/deep.txt": b"d", "c/three.txt": b"3",
         "d/e/f/g.txt": b"g", "top.txt": b"t"}


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    for rel, data in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    Checkpoints.init(root).close()
    time.sleep(2 * RACY_WINDOW_NS / 1e9)  # every listing settled: `settle` may trust it
    return root


def full_walk_tree(root: Path, store: Path) -> bytes:
    """The tree of a snapshot by a store of its own with no stat cache and no watcher."""
    with Checkpoints.init(root, store=store) as ref:
        for path in glob.glob(str(store / "roots" / "*" / "statcache*")):
            os.unlink(path)
        return bytes(ref.create().tree)


def handle(cp: Checkpoints) -> WatchHandle:
    found = cp._ws.watch
    assert found is not None
    return found


def state(cp: Checkpoints) -> WatchState:
    found = cp.watch_state()
    assert found is not None and found.active
    return found


class Listed:
    """Which directories the scans list: every listing goes through `scan_dirs` (a watched
    scan) or `walk_dirs` (a walk of a subtree or of everything)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.dirs: list[bytes] = []
        self.walks = 0
        scan_dirs, walk_dirs = dirlisting.scan_dirs, dirlisting.walk_dirs

        def counted_scan(paths: Sequence[bytes], threads: int = 1) -> Any:
            self.dirs += paths
            return scan_dirs(paths, threads)

        def counted_walk(starts: Sequence[Any], known: Any, threads: int = 1) -> Any:
            self.walks += 1
            return walk_dirs(starts, known, threads)

        monkeypatch.setattr(dirlisting, "scan_dirs", counted_scan)
        monkeypatch.setattr(dirlisting, "walk_dirs", counted_walk)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return make_root(tmp_path)


def test_second_snapshot_of_a_new_store_lists_nothing(root: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with Checkpoints.open(root, watch=True) as cp:
        first = cp.create()
        client = handle(cp).client
        assert client.fresh == set()
        assert client.fresh_settled >= 7 and client.fresh_listed == 0  # a, a/b, a/b/c, c, d...
        assert client.dirty == set()
        listed = Listed(monkeypatch)
        second = cp.create()
        # The root alone: its listing holds the store's directory, written by every snapshot,
        # so it is never settled.
        assert (listed.dirs, listed.walks) == ([os.fsencode(root)], 0)
        assert second.tree == first.tree
        assert state(cp).full_walks == 1
        (root / "a" / "b" / "two.txt").write_bytes(b"two, edited")
        third = cp.create()
        assert sorted(listed.dirs[1:]) == [os.fsencode(root), os.fsencode(root / "a" / "b")]
        assert listed.walks == 0
        assert bytes(third.tree) == full_walk_tree(root, tmp_path / "ref-store")
        assert cp.verify_watch() == ()


@pytest.fixture(params=["before_end", "before_settle"])
def slipped_in(request: pytest.FixtureRequest, root: Path,
               monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A write into a directory of the first scan after the scan listed it: before `end` adds
    its watch, or after (before `settle` lists it again). The names written."""
    done: list[str] = []

    def write() -> None:
        if done:
            return
        (root / "a" / "b" / "two.txt").write_bytes(b"two, rewritten meanwhile")
        (root / "d" / "e" / "new.txt").write_bytes(b"new meanwhile")
        done.extend(["a/b/two.txt", "d/e/new.txt"])

    point = request.param.removeprefix("before_")
    original = getattr(Watcher, point)

    def hooked(self: Watcher, *args: Any, **kwargs: Any) -> Any:
        write()
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Watcher, point, hooked)
    yield done


def test_change_between_listing_and_watch_is_captured(root: Path, tmp_path: Path,
                                                      slipped_in: list[str]) -> None:
    with Checkpoints.open(root, watch=True) as cp:
        first = cp.create()
        assert slipped_in  # the write happened inside the first scan
        assert cp.read_file(first.id, "a/b/two.txt") == b"2"  # listed before the write
        client = handle(cp).client
        assert client.fresh == set()
        assert {b"a/b", b"d/e"} <= client.dirty
        second = cp.create()
        assert cp.read_file(second.id, "a/b/two.txt") == b"two, rewritten meanwhile"
        assert cp.read_file(second.id, "d/e/new.txt") == b"new meanwhile"
        assert bytes(second.tree) == full_walk_tree(root, tmp_path / "ref-store")
        assert state(cp).full_walks == 1
        assert cp.verify_watch() == ()
