"""Shared fixtures for the snapshot-side tests: real workspaces in temp dirs, real stores.

`ws` is an empty workspace directory, `cp` a store initialized in it (`Checkpoints.init`),
`reopen` opens more `Checkpoints` objects on the same root (closed at teardown), `work` writes
into `ws` by root-relative bytes path. Helpers that tests call as functions are session-scoped
fixtures (tests/ is not a package, and hypothesis tests may only use session-scoped fixtures):
`worktree_at(root)` is `work` for any root; `manifest` reads a checkpoint back as a flat dict
including empty directories and tombstones; `fs_snapshot` computes the same dict straight from
the filesystem; `cold_scan` snapshots a copy with no stat cache; `count_calls` instruments a
method of a real object (never the filesystem).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import EntryKind, ObjectId, ObjectStore

# An mtime safely before any scan of a test: outside the stat cache's racy window.
PAST_NS = 1_600_000_000 * 10**9

# ("file" | "exec", content) | ("link", target) | ("dir", None) | ("tombstone", None)
Entry = tuple[str, Any]


class WorkTree:
    """Writes into a workspace by root-relative bytes path (parents created on demand)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = os.fsencode(os.fspath(root))

    def path(self, rel: bytes | str) -> bytes:
        return self.root + b"/" + os.fsencode(rel)

    def write(self, rel: bytes | str, data: bytes = b"x", *, mode: int = 0o644,
              mtime_ns: int | None = None) -> bytes:
        path = self.path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        os.chmod(path, mode)
        if mtime_ns is not None:
            os.utime(path, ns=(mtime_ns, mtime_ns))
        return path

    def symlink(self, rel: bytes | str, target: bytes | str) -> bytes:
        path = self.path(rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        os.symlink(os.fsencode(target), path)
        return path

    def mkdir(self, rel: bytes | str) -> bytes:
        path = self.path(rel)
        os.makedirs(path, exist_ok=True)
        return path

    def remove(self, rel: bytes | str) -> None:
        path = self.path(rel)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)

    def age(self, mtime_ns: int = PAST_NS) -> None:
        """Move every mtime under the root (links too, the store excepted) into the past, so
        no file is inside the racy window of the next scan."""
        for top, dirs, files in os.walk(self.root):
            dirs[:] = [d for d in dirs if not (top == self.root and d == b".ckpt")]
            for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
                os.utime(os.path.join(top, name), ns=(mtime_ns, mtime_ns), follow_symlinks=False)


def read_manifest(objects: ObjectStore, tree: ObjectId) -> dict[bytes, Entry]:
    """Every path of a checkpoint's tree: files with content, links, directories, tombstones."""
    out: dict[bytes, Entry] = {}

    def visit(oid: ObjectId, prefix: bytes) -> None:
        for entry in objects.get_tree(oid).entries:
            path = prefix + entry.name
            if entry.kind is EntryKind.TREE:
                assert entry.oid is not None
                out[path] = ("dir", None)
                visit(entry.oid, path + b"/")
            elif entry.kind is EntryKind.SYMLINK:
                out[path] = ("link", entry.target)
            elif entry.kind is EntryKind.TOMBSTONE:
                out[path] = ("tombstone", None)
            else:
                assert entry.oid is not None
                kind = "exec" if entry.kind is EntryKind.EXECUTABLE else "file"
                out[path] = (kind, objects.get_bytes(entry.oid))

    visit(tree, b"")
    return out


def fs_manifest(root: str | os.PathLike[str] | bytes) -> dict[bytes, Entry]:
    """The same shape, computed from the filesystem with lstat (never following links),
    leaving out `.ckpt` at the top and `.git` anywhere, as a whole-tree snapshot does."""
    base = os.fsencode(os.fspath(root))
    out: dict[bytes, Entry] = {}

    def visit(directory: bytes, prefix: bytes) -> None:
        for name in sorted(os.listdir(directory)):
            if name == b".git" or (not prefix and name == b".ckpt"):
                continue
            path = os.path.join(directory, name)
            rel = prefix + name
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", None)
                visit(path, rel + b"/")
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as stream:
                    data = stream.read()
                out[rel] = ("exec" if st.st_mode & 0o100 else "file", data)

    visit(base, b"")
    return out


def cold_tree(root: str | os.PathLike[str], scratch: str | os.PathLike[str]) -> ObjectId:
    """The tree id of `root`'s content (its store left out) scanned with no stat cache at all:
    a copy of it (links as links, modes kept) snapshotted into a fresh store."""
    source = os.fspath(root)
    copy = os.path.join(os.fspath(scratch), "cold-copy")
    shutil.copytree(source, copy, symlinks=True,
                    ignore=lambda where, names: [".ckpt"] if where == source else [])
    with Checkpoints.init(copy) as service:
        return service.create().tree


class CallCounter:
    """Replaces `owner.name` with a wrapper that records each call's first argument
    (thread-safe: the scanner hashes in a pool). `restore()` puts the original back."""

    def __init__(self, owner: object, name: str) -> None:
        self.owner = owner
        self.name = name
        self.calls: list[Any] = []
        self._lock = threading.Lock()
        original = getattr(owner, name)

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls.append(args[0] if args else None)
            return original(*args, **kwargs)

        setattr(owner, name, wrapper)
        self._batch = name == "put_file" and hasattr(owner, "put_files")
        if self._batch:
            # The scanner reads files in batches through `put_files`: each path it takes from
            # the iterable is one content read, as one `put_file` call was.
            batched = owner.put_files  # type: ignore[attr-defined]

            def batch_wrapper(paths: Any, *args: Any, **kwargs: Any) -> Any:
                def counted() -> Any:
                    for path in paths:
                        with self._lock:
                            self.calls.append(path)
                        yield path

                return batched(counted(), *args, **kwargs)

            owner.put_files = batch_wrapper  # type: ignore[attr-defined]

    @property
    def count(self) -> int:
        return len(self.calls)

    def reset(self) -> None:
        with self._lock:
            self.calls.clear()

    def restore(self) -> None:
        delattr(self.owner, self.name)  # the instance attribute shadowed the class's method
        if self._batch:
            delattr(self.owner, "put_files")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root


@pytest.fixture
def cp(ws: Path) -> Iterator[Checkpoints]:
    service = Checkpoints.init(ws)
    yield service
    service.close()


@pytest.fixture
def reopen(ws: Path) -> Iterator[Callable[..., Checkpoints]]:
    """`reopen(session="default")`: a fresh `Checkpoints.open` on the workspace."""
    opened: list[Checkpoints] = []

    def open_again(session: str = "default") -> Checkpoints:
        service = Checkpoints.open(ws, session=session)
        opened.append(service)
        return service

    yield open_again
    for service in opened:
        service.close()


@pytest.fixture
def work(ws: Path) -> WorkTree:
    return WorkTree(ws)


@pytest.fixture(scope="session")
def worktree_at() -> type[WorkTree]:
    return WorkTree


@pytest.fixture(scope="session")
def manifest() -> Callable[[Checkpoints, str], dict[bytes, Entry]]:
    def of(service: Checkpoints, ref: str) -> dict[bytes, Entry]:
        return read_manifest(service.objects, service.get(ref).tree)

    return of


@pytest.fixture(scope="session")
def fs_snapshot() -> Callable[[str | os.PathLike[str] | bytes], dict[bytes, Entry]]:
    return fs_manifest


@pytest.fixture(scope="session")
def cold_scan() -> Callable[..., ObjectId]:
    return cold_tree


@pytest.fixture(scope="session")
def count_calls() -> type[CallCounter]:
    return CallCounter


@pytest.fixture
def fast_tmp(tmp_path: Path) -> Iterator[Path]:
    """A temp dir on tmpfs when there is one (file creation on this CI's ext4 costs ~0.5 ms),
    else pytest's tmp_path. Still a real filesystem: nothing is mocked."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="ckpt-test-", dir=shm))
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path
