"""Each fallback of the file watcher (watch.py), with real inotify: it walks what it cannot
vouch for, says so in `watch_state()`, and the snapshot still equals a full walk.

Tests that change a kernel limit or mount a file system need root and skip cleanly without;
a limit is lowered only for the moment a watch is added, then put back.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import mmap
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.checkpoints import Checkpoints, WatchState
from ckpt.checkpoints.snapshot.watch import WatchView, read_mounts
from ckpt.objstore import EntryKind

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux only")

MAX_WATCHES = "/proc/sys/fs/inotify/max_user_watches"


def make_tree(root: Path) -> None:
    for rel, data in {"a/one.txt": b"1", "a/b/two.txt": b"2", "c/three.txt": b"3",
                      "top.txt": b"t"}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def inside_store_root(tmp_path: Path) -> Path:
    """A workspace with its store inside it (`.ckpt`)."""
    root = tmp_path / "ws"
    root.mkdir()
    make_tree(root)
    Checkpoints.init(root).close()
    return root


def outside_store_root(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace with its store outside it (the root holds only a marker directory)."""
    root = tmp_path / "ws"
    root.mkdir()
    make_tree(root)
    store = tmp_path / "store"
    Checkpoints.init(root, store=store).close()
    return root, store


def full_walk_tree(root: Path, store: Path) -> bytes:
    """The tree of a snapshot by a store of its own with no stat cache and no watcher."""
    with Checkpoints.init(root, store=store) as ref:
        for path in glob.glob(str(store / "roots" / "*" / "statcache*")):
            os.unlink(path)
        return bytes(ref.create().tree)


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[tuple[Path, Checkpoints]]:
    root = inside_store_root(tmp_path)
    cp = Checkpoints.open(root, watch=True)
    try:
        yield root, cp
    finally:
        cp.close()


def equal_to_walk(cp: Checkpoints, root: Path, tmp_path: Path) -> bytes:
    tree = bytes(cp.create().tree)
    cp.settle()
    assert tree == full_walk_tree(root, tmp_path / "ref-store")
    return tree


def state(cp: Checkpoints) -> WatchState:
    found = cp.watch_state()
    assert found is not None
    return found


def test_watch_state_is_none_without_watch(tmp_path: Path) -> None:
    with Checkpoints.init(tmp_path) as cp:
        assert cp.watch_state() is None
        assert cp.verify_watch() == ()


def test_second_snapshot_lists_only_what_changed(watched: tuple[Path, Checkpoints],
                                                 tmp_path: Path) -> None:
    root, cp = watched
    equal_to_walk(cp, root, tmp_path)
    first = state(cp)
    assert first.active and first.full_walks == 1 and first.watched_dirs == 4
    (root / "a" / "b" / "two.txt").write_bytes(b"two, edited")
    (root / "new").mkdir()
    (root / "new" / "f").write_bytes(b"f")
    equal_to_walk(cp, root, tmp_path)
    assert state(cp).full_walks == 1  # the watched path, not a walk
    assert cp.verify_watch() == ()
    assert state(cp).verify_runs == 1 and state(cp).verify_mismatches == 0


def test_overflow_walks_everything_once(watched: tuple[Path, Checkpoints], tmp_path: Path) -> None:
    root, cp = watched
    cp.create()
    watcher = cp._ws.watch.watcher  # type: ignore[union-attr]
    queue = watcher._queue or 16384
    gate = watcher.pause_reader()
    try:
        for index in range(queue // 2 + 64):  # a create and a delete each: never merged
            path = root / f"flood-{index}"
            path.write_bytes(b"")
            path.unlink()
        (root / "c" / "three.txt").write_bytes(b"lost in the overflow")
    finally:
        gate.release()
    equal_to_walk(cp, root, tmp_path)
    after = state(cp)
    assert after.overflows >= 1 and after.full_walks == 2
    assert after.last_fallback is not None and "overflow" in after.last_fallback
    (root / "top.txt").write_bytes(b"watched again")
    equal_to_walk(cp, root, tmp_path)
    assert state(cp).full_walks == 2


@contextlib.contextmanager
def lowered(path: str, value: int) -> Iterator[None]:
    try:
        with open(path) as stream:
            old = stream.read().strip()
        if old == str(value):  # another run is inside its own window: it puts it back
            pytest.skip(f"{path} is lowered by another run")
        with open(path, "w") as stream:
            stream.write(str(value))
    except OSError:
        pytest.skip(f"{path} is not writable here")
    try:
        yield
    finally:
        with open(path, "w") as stream:
            stream.write(old)


def test_watch_limit_leaves_dirs_listed(tmp_path: Path) -> None:
    root = inside_store_root(tmp_path)
    with Checkpoints.open(root, watch=True) as cp:  # the root is watched
        with lowered(MAX_WATCHES, 1):  # the first snapshot cannot watch what it finds
            cp.create()
        found = state(cp)
        assert found.unwatched_dirs == 3 and found.watched_dirs == 1
        assert found.last_fallback is not None and "max_user_watches=1" in found.last_fallback
        (root / "a" / "b" / "two.txt").write_bytes(b"seen: listed at every snapshot")
        (root / "c" / "three.txt").unlink()
        equal_to_walk(cp, root, tmp_path)


def test_renamed_root_is_watched_again(tmp_path: Path) -> None:
    root, store = outside_store_root(tmp_path)
    with Checkpoints.open(root, store, watch=True) as cp:
        cp.create()
        cp.create()
        os.rename(root, tmp_path / "ws-old")
        shutil.copytree(tmp_path / "ws-old", root, symlinks=True)
        (root / "a" / "b" / "two.txt").write_bytes(b"a new root, the same size!")
        tree = bytes(cp.create().tree)
        cp.settle()
        found = state(cp)
        assert found.full_walks == 2 and found.last_fallback is not None
        assert "root" in found.last_fallback
        assert cp.read_file(cp.latest().id, "a/b/two.txt") == b"a new root, the same size!"  # type: ignore[union-attr]
        (root / "top.txt").write_bytes(b"watched in the new root")
        assert bytes(cp.create().tree) != tree
        assert cp.read_file(cp.latest().id, "top.txt") == b"watched in the new root"  # type: ignore[union-attr]
        assert state(cp).full_walks == 2


def test_mount_below_root_is_walked(watched: tuple[Path, Checkpoints], tmp_path: Path) -> None:
    root, cp = watched
    cp.create()
    mount = root / "a" / "mnt"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                          capture_output=True, check=False)
    if done.returncode:
        pytest.skip("cannot mount here")
    try:
        (mount / "inside.txt").write_bytes(b"on tmpfs")
        equal_to_walk(cp, root, tmp_path)
        found = state(cp)
        assert found.unwatched_dirs >= 1 and "mount point" in (found.last_fallback or "")
        (mount / "inside.txt").write_bytes(b"changed on tmpfs")
        equal_to_walk(cp, root, tmp_path)
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def test_write_through_outside_hard_link_is_seen(watched: tuple[Path, Checkpoints],
                                                 tmp_path: Path) -> None:
    """A file of several links found when its directory is listed: a write through a link
    outside the root sends no event to the root's watches, so that directory is listed at
    every snapshot."""
    root, cp = watched
    outside = tmp_path / "outside-link"
    os.link(root / "c" / "three.txt", outside)
    os.link(root / "top.txt", tmp_path / "outside-top")
    cp.create()
    (root / "a" / "one.txt").write_bytes(b"a listing of a/ for the next snapshot")
    os.link(root / "a" / "one.txt", tmp_path / "outside-one")  # no event: made outside
    equal_to_walk(cp, root, tmp_path)
    for link in (outside, tmp_path / "outside-top", tmp_path / "outside-one"):
        with open(link, "r+b") as stream:
            stream.write(b"written elsewhere")  # no event on the root's watches
    equal_to_walk(cp, root, tmp_path)
    assert "link" in (state(cp).last_fallback or "")
    assert state(cp).unwatched_dirs == 3


def test_verify_reports_what_the_events_missed(watched: tuple[Path, Checkpoints],
                                               tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    root, cp = watched
    time.sleep(0.05)  # past the racy window: a/'s listing is trusted, not kept aside
    cp.create()
    with open(root / "a" / "one.txt", "r+b") as stream:
        mapped = mmap.mmap(stream.fileno(), 1)
    cp.create()
    mapped[0:1] = b"9"  # a write through a mapping sends no inotify event
    mapped.flush()
    with caplog.at_level(logging.ERROR, logger="ckpt"):
        assert cp.verify_watch() == ("a/one.txt",)
    mapped.close()  # the mapping's own descriptor: its close is an event
    assert "missed" in caplog.text
    found = state(cp)
    assert found.verify_runs == 1 and found.verify_mismatches == 1
    equal_to_walk(cp, root, tmp_path)  # the next snapshot walks everything
    assert state(cp).full_walks == 2


def test_cookies_never_in_a_checkpoint(tmp_path: Path) -> None:
    root, store = outside_store_root(tmp_path)
    with Checkpoints.open(root, store, watch=True) as cp:
        cp.create()
        shutil.rmtree(root / ".ckpt")  # no marker directory: the cookies go in the root
        for index in range(5):
            (root / "top.txt").write_bytes(b"%d" % index)
            cp.create()
        names = {os.fsdecode(entry.path) for ref in cp.history() for entry in cp.files(ref.id)}
        assert not any("cookie" in name for name in names)
        assert not any(name.startswith(".ckpt-cookie-") for name in os.listdir(root))
        assert state(cp).full_walks == 1


def test_one_watcher_per_root_shared_and_closed_with_the_last(tmp_path: Path) -> None:
    from ckpt.checkpoints.snapshot import watch

    root = inside_store_root(tmp_path)
    first = Checkpoints.open(root, watch=True)
    second = Checkpoints.open(root, session="other", watch=True)
    assert first._ws.watch.watcher is second._ws.watch.watcher  # type: ignore[union-attr]
    first.create()
    first.close()
    assert os.fsencode(str(root)) in watch._registry
    (root / "top.txt").write_bytes(b"seen by the second")
    second.create()
    assert second.read_file(second.latest().id, "top.txt") == b"seen by the second"  # type: ignore[union-attr]
    second.close()
    assert os.fsencode(str(root)) not in watch._registry


def test_read_mounts_finds_mounts_below_and_the_root_fs() -> None:
    info = (b"22 1 0:21 / / rw - ext4 /dev/vda rw\n"
            b"30 22 0:30 / /w/ws/sub\\040dir rw - tmpfs tmpfs rw\n"
            b"31 22 0:31 / /w/wsx rw - nfs srv:/x rw\n")
    assert read_mounts(b"/w/ws", info) == ({b"sub dir"}, "ext4")
    assert read_mounts(b"/w/wsx", info) == (set(), "nfs")


def test_view_walks_whole_subtrees_below_a_tree_root() -> None:
    view = WatchView(frozenset({b"a"}), frozenset({b"x/y"}))
    assert view.listed(b"a") and not view.listed(b"b")
    assert view.within_walked(b"x/y/z") and view.within_walked(b"x/y")
    assert not view.within_walked(b"x") and not view.within_walked(b"")


def test_symlink_entries_are_captured_not_followed(watched: tuple[Path, Checkpoints],
                                                   tmp_path: Path) -> None:
    root, cp = watched
    cp.create()
    shutil.rmtree(root / "a")
    os.symlink("c", root / "a")
    equal_to_walk(cp, root, tmp_path)
    entry = next(e for e in cp.files(cp.latest().id) if e.path == b"a")  # type: ignore[union-attr]
    assert entry.kind is EntryKind.SYMLINK


def test_cache_kept_in_memory_stays_consistent_over_turns(tmp_path: Path) -> None:
    """A cache read from its files (another process saved it), then edits deep in one
    branch, then twice in another: each snapshot's tree is a full walk's. (A record rebuilt
    in a scan whose stored form that scan had copied came back stale from the cache kept in
    memory, and two snapshots later the tree was wrong.)"""
    root = tmp_path / "ws"
    for rel in ("a/b/c/one", "a/b/two", "a/x/y/three", "d/four"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(rel.encode())
    Checkpoints.init(root).close()
    with Checkpoints.open(root, watch=True) as cp, Checkpoints.open(root) as other:
        cp.create()
        for rel, by in (("a/b/two", other), ("a/b/c/one", cp), ("d/four", cp), ("d/four", cp),
                        (None, cp), ("a/x/y/three", cp), ("d/four", cp), (None, cp)):
            if rel is not None:
                with open(root / rel, "ab") as stream:
                    stream.write(b" edited")
            time.sleep(0.03)  # past the racy window: listings are kept
            if by is other:
                other.create()
                other.settle()
            else:
                equal_to_walk(cp, root, tmp_path)
        assert state(cp).full_walks == 1
