"""A watched snapshot equals a full walk, tree id for tree id, after every kind of edit.

A hypothesis state machine edits a real workspace (write, append, truncate, delete, rename a
file and a whole directory across the tree, `rm -rf`, a directory replaced by a file and by a
symlink, chmod, an edit inside the racy window with its mtime put back, a write through a hard
link from outside the root, a real event-queue overflow); after every step a snapshot of the
`Checkpoints` opened with `watch=True` (real inotify, one long-lived watcher) must have the
tree of a full walk: another store's `Checkpoints` with `watch=False` and no stat cache.
Another `Checkpoints` without a watcher snapshots into the same store in between. Bounded by default; `CKPT_SOAK=1` runs a long soak.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule
from soak import scale

from ckpt.checkpoints.service import Checkpoints

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify: Linux only")

NAMES = ("a", "b", "c", "d")
rel_paths = st.lists(st.sampled_from(NAMES), min_size=1, max_size=3).map("/".join)
contents = st.sampled_from([b"", b"x", b"y", b"hello\n", b"\x00\xff binary", b"z" * 300])
picks = st.integers(min_value=0, max_value=1000)  # an index into what exists now
MAX_QUEUED = "/proc/sys/fs/inotify/max_queued_events"
SMALL_QUEUE = 512


@contextlib.contextmanager
def small_event_queue() -> Iterator[None]:
    """A small max_queued_events while a watcher is made (it is read at inotify_init), put
    back at once; nothing where it is not writable (then a flood must fill the default)."""
    try:
        with open(MAX_QUEUED) as stream:
            old = stream.read().strip()
        with open(MAX_QUEUED, "w") as stream:
            stream.write(str(SMALL_QUEUE))
    except OSError:
        yield
        return
    try:
        yield
    finally:
        with open(MAX_QUEUED, "w") as stream:
            stream.write(old)


def flood(directory: str, events: int) -> None:
    """More than `events` distinct events (a create and a delete per name: never merged)."""
    for index in range(events // 2 + 64):
        path = os.path.join(directory, f"flood-{index}")
        with open(path, "wb"):
            pass
        os.unlink(path)


def drop_stat_cache(store: str) -> None:
    for path in glob.glob(os.path.join(store, "roots", "*", "statcache*")):
        os.unlink(path)


class WatchedEqualsWalked(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.base = tempfile.mkdtemp(prefix="ckpt-watch-")
        self.root = os.path.realpath(os.path.join(self.base, "ws"))
        self.outside = os.path.join(self.base, "outside")
        os.mkdir(self.root)
        os.mkdir(self.outside)
        self.ref_store = os.path.join(self.base, "ref-store")
        self.overflowed = False
        self.links: list[str] = []

    @initialize(files=st.lists(st.tuples(rel_paths, contents), min_size=1, max_size=8))
    def start(self, files: list[tuple[str, bytes]]) -> None:
        for rel, data in files:
            self._write(rel, data)
        Checkpoints.init(self.root).close()
        before = _read_queue()
        with small_event_queue():
            self.cp = Checkpoints.open(self.root, watch=True)
        self.queue = SMALL_QUEUE if before is not None and _writable() else (before or 16384)
        self.ref = Checkpoints.init(self.root, store=self.ref_store)
        self.check()

    def teardown(self) -> None:
        for cp in ("cp", "ref"):
            if hasattr(self, cp):
                getattr(self, cp).close()
        shutil.rmtree(self.base, ignore_errors=True)

    # -- what exists ---------------------------------------------------------------------

    def _entries(self, *, dirs: bool, files: bool) -> list[str]:
        found = []
        for top, subdirs, names in os.walk(self.root):
            subdirs[:] = sorted(d for d in subdirs if d != ".ckpt")
            rel = os.path.relpath(top, self.root)
            if dirs and rel != ".":
                found.append(rel)
            if files:
                found += [os.path.normpath(os.path.join(rel, n)) for n in sorted(names)
                          if not os.path.islink(os.path.join(top, n))]
        return found

    def _pick(self, index: int, *, dirs: bool = False, files: bool = True) -> str | None:
        found = self._entries(dirs=dirs, files=files)
        return found[index % len(found)] if found else None

    def _abs(self, rel: str) -> str:
        return os.path.join(self.root, rel)

    def _clear_way(self, rel: str) -> None:
        """Make `rel`'s parents directories (whatever was in the way goes)."""
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            path = self._abs("/".join(parts[:depth]))
            if os.path.islink(path) or (os.path.exists(path) and not os.path.isdir(path)):
                os.unlink(path)
            os.makedirs(path, exist_ok=True)

    def _write(self, rel: str, data: bytes) -> None:
        self._clear_way(rel)
        path = self._abs(rel)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.islink(path):
            os.unlink(path)
        with open(path, "wb") as stream:
            stream.write(data)

    # -- edits ---------------------------------------------------------------------------

    @rule(rel=rel_paths, data=contents)
    def write(self, rel: str, data: bytes) -> None:
        self._write(rel, data)

    @rule(index=picks, data=contents)
    def append(self, index: int, data: bytes) -> None:
        rel = self._pick(index)
        if rel is not None:
            with open(self._abs(rel), "ab") as stream:
                stream.write(data or b"+")

    @rule(index=picks)
    def truncate(self, index: int) -> None:
        rel = self._pick(index)
        if rel is not None:
            os.truncate(self._abs(rel), 0)

    @rule(index=picks)
    def delete(self, index: int) -> None:
        rel = self._pick(index)
        if rel is not None:
            os.unlink(self._abs(rel))

    @rule(index=picks, to=rel_paths)
    def rename_file(self, index: int, to: str) -> None:
        rel = self._pick(index)
        if rel is None or to == rel or to.startswith(rel + "/"):
            return
        self._clear_way(to)
        if os.path.isdir(self._abs(to)) and not os.path.islink(self._abs(to)):
            shutil.rmtree(self._abs(to))
        if os.path.exists(self._abs(rel)):
            os.rename(self._abs(rel), self._abs(to))

    @rule(index=picks, to=rel_paths)
    def rename_dir(self, index: int, to: str) -> None:
        rel = self._pick(index, dirs=True, files=False)
        if rel is None or to == rel or to.startswith(rel + "/") or rel.startswith(to + "/"):
            return
        self._clear_way(to)
        target = self._abs(to)
        if os.path.islink(target) or os.path.isfile(target):
            os.unlink(target)
        elif os.path.isdir(target):
            shutil.rmtree(target)
        if os.path.isdir(self._abs(rel)):
            os.rename(self._abs(rel), target)

    @rule(index=picks)
    def remove_tree(self, index: int) -> None:
        rel = self._pick(index, dirs=True, files=False)
        if rel is not None:
            shutil.rmtree(self._abs(rel))

    @rule(index=picks, data=contents)
    def dir_to_file(self, index: int, data: bytes) -> None:
        rel = self._pick(index, dirs=True, files=False)
        if rel is not None:
            shutil.rmtree(self._abs(rel))
            with open(self._abs(rel), "wb") as stream:
                stream.write(data)

    @rule(index=picks, link=st.sampled_from(["a", "../b", "missing", "/etc"]))
    def dir_to_symlink(self, index: int, link: str) -> None:
        rel = self._pick(index, dirs=True, files=False)
        if rel is not None:
            shutil.rmtree(self._abs(rel))
            os.symlink(link, self._abs(rel))

    @rule(index=picks, mode=st.sampled_from([0o600, 0o644, 0o755, 0o700]))
    def chmod(self, index: int, mode: int) -> None:
        rel = self._pick(index)
        if rel is not None:
            os.chmod(self._abs(rel), mode)

    @rule(index=picks)
    def racy_edit(self, index: int) -> None:
        """The same size, other bytes, mtime put back: only the ctime tells, and only the
        event says the directory changed."""
        rel = self._pick(index)
        if rel is None:
            return
        path = self._abs(rel)
        st_before = os.stat(path)
        with open(path, "rb") as stream:
            data = stream.read()
        with open(path, "r+b") as stream:
            stream.write(bytes(b ^ 0x5A for b in data) or b"")
        os.utime(path, ns=(st_before.st_atime_ns, st_before.st_mtime_ns))

    @rule(index=picks)
    def link_from_outside(self, index: int) -> None:
        rel = self._pick(index)
        if rel is None:
            return
        link = os.path.join(self.outside, f"link-{len(self.links)}")
        os.link(self._abs(rel), link)
        self.links.append(link)

    @rule(index=picks, data=contents)
    def write_through_outside_link(self, index: int, data: bytes) -> None:
        """No event reaches the root's watches: the link count must have made its directory
        one that is listed at every snapshot."""
        if self.links:
            with open(self.links[index % len(self.links)], "r+b") as stream:
                stream.write(data + b"!")

    @rule()
    def snapshot_by_another_process(self) -> None:
        """A `Checkpoints` without a watcher on the same store snapshots (and saves the stat
        cache the watched one then reads back from its files)."""
        with Checkpoints.open(self.root) as other:
            other.create()

    @rule()
    def overflow(self) -> None:
        watcher = self.cp._ws.watch.watcher  # type: ignore[union-attr]
        gate = watcher.pause_reader()
        try:
            flood(self.root, self.queue + 16)
        finally:
            gate.release()
        self.overflowed = True

    # -- the property --------------------------------------------------------------------

    @invariant()
    def check(self) -> None:
        if not hasattr(self, "cp"):
            return
        watched = self.cp.create().tree
        self.cp.settle()
        self.ref.settle()  # its last cache save done before the cache goes
        drop_stat_cache(self.ref_store)
        walked = self.ref.create().tree
        assert watched == walked, self.cp.diff(self.cp.latest().id)  # type: ignore[union-attr]
        state = self.cp.watch_state()
        assert state is not None and state.active
        if self.overflowed:
            assert state.overflows >= 1 and state.last_fallback is not None
            self.overflowed = False


def _read_queue() -> int | None:
    try:
        with open(MAX_QUEUED) as stream:
            return int(stream.read())
    except (OSError, ValueError):
        return None


def _writable() -> bool:
    return os.access(MAX_QUEUED, os.W_OK)


WatchedEqualsWalked.TestCase.settings = settings(
    max_examples=scale(12, 300), stateful_step_count=scale(20, 60), deadline=None,
    derandomize=True, suppress_health_check=[HealthCheck.too_slow])
test_watched_snapshot_equals_full_walk = WatchedEqualsWalked.TestCase
