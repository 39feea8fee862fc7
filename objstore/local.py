"""`LocalBackend`: loose object files in a 256-way fan-out (`ab/cdef…`), written atomically.

Each put writes a temp file in the object's own directory and renames it into place, so a
reader never sees a partial object and a crash leaves at most a `.tmp-*` file that
`sweep_temporaries` removes. fsync policy: `none`; `batch` (at `sync()`, i.e. once per
checkpoint, an fsync of every object file written since and of the directories that name them,
issued from a few threads at once so that the filesystem commits them together); `full` (file
and directory on every put).

Not `syncfs`: it would also wait for every other dirty file of the filesystem (a build running
beside the agent, a tree just copied: seconds) to make a hundred small files durable.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.backend import FsyncPolicy, ObjectStat
from ckpt.objstore.errors import ObjectNotFound
from ckpt.objstore.ids import HEX_SIZE, ObjectId
from ckpt.objstore.safeopen import check_directories, open_file

_TEMP_PREFIX = ".tmp-"
_HEX_CHARS = frozenset("0123456789abcdef")


def remove_if_older(path: str, older_than: float) -> bool:
    """Unlink `path` if its mtime is before `older_than` (a sweep's age guard); False if it
    is younger or already gone."""
    try:
        if os.stat(path).st_mtime < older_than:
            os.unlink(path)
            return True
    except FileNotFoundError:
        pass
    return False


def _fsync_all(paths: list[str]) -> None:
    """fsync each path (a file or directory); concurrently when there are several, so that the
    filesystem can commit them in one journal transaction instead of one each. A path removed
    since (a gc) needs nothing; any other failure is raised."""
    if len(paths) <= 2:
        for path in paths:
            _fsync_path(path)
        return
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415  (only syncs need it)

    with ThreadPoolExecutor(min(8, len(paths)), thread_name_prefix="objstore-fsync") as pool:
        for _ in pool.map(_fsync_path, paths):
            pass


def _fsync_path(path: str) -> None:
    try:
        fd = open_file(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class LocalBackend:
    def __init__(self, path: str, *, fsync: FsyncPolicy = "batch") -> None:
        self.path = path
        self.fsync = fsync
        self._made_dirs: set[str] = set()
        # batch: what sync() must make durable (object files, then the directories naming them)
        self._unsynced: list[str] = []
        self._unsynced_dirs: set[str] = set()

    def _object_path(self, oid: ObjectId) -> str:
        text = oid.hex()
        return f"{self.path}/{text[:2]}/{text[2:]}"

    def has(self, oid: ObjectId) -> bool:
        return os.path.exists(self._object_path(oid))

    def refresh(self, oid: ObjectId) -> bool:
        try:
            os.utime(self._object_path(oid))
        except FileNotFoundError:
            return False
        return True

    def get(self, oid: ObjectId) -> bytes:
        with self.open(oid) as stream:
            return stream.read()

    def open(self, oid: ObjectId) -> BinaryIO:
        try:
            fd = open_file(self._object_path(oid), os.O_RDONLY)
        except FileNotFoundError:
            raise ObjectNotFound(oid) from None
        return open(fd, "rb")

    def check_stored(self, oid: ObjectId) -> bool | None:
        """`Repairable.check_stored`: a loose object has no framing of its own to check."""
        return None

    def forget_damaged(self, oid: ObjectId) -> None:
        """`Repairable.forget_damaged`: the damaged file goes; the next put writes it anew."""
        self.delete(oid)

    def put(self, oid: ObjectId, stored: bytes) -> bool:
        return self.put_stream(oid, (stored,))

    def put_stream(self, oid: ObjectId, chunks: Iterable[bytes]) -> bool:
        final = self._object_path(oid)
        if self.refresh(oid):
            return False
        directory = final[: final.rfind("/")]
        if directory not in self._made_dirs:
            check_directories((directory,))  # a planted symlink would take the write elsewhere
            if not os.path.isdir(directory):
                os.makedirs(directory, exist_ok=True)
                self._unsynced_dirs.add(self.path)  # now names a new fan-out directory
            self._made_dirs.add(directory)
        full = self.fsync == "full"  # batch: made durable together at sync()
        write_atomically(final, chunks, fsync_file=full, fsync_dir=full, mode=0o444,
                         temp_prefix=_TEMP_PREFIX)
        if self.fsync == "batch":
            self._unsynced.append(final)
            self._unsynced_dirs.add(directory)
        return True

    def delete(self, oid: ObjectId) -> int:
        path = self._object_path(oid)
        try:
            size = os.stat(path).st_size
            os.unlink(path)
        except FileNotFoundError:
            return 0
        return size

    def iter_ids(self) -> Iterator[ObjectId]:
        try:
            fanout = sorted(os.listdir(self.path))
        except FileNotFoundError:
            return
        for prefix in fanout:
            if len(prefix) != 2 or not _HEX_CHARS.issuperset(prefix):
                continue
            try:
                names = sorted(os.listdir(f"{self.path}/{prefix}"))
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                text = prefix + name
                if len(text) == HEX_SIZE and _HEX_CHARS.issuperset(name):
                    yield ObjectId(bytes.fromhex(text))

    def stat(self, oid: ObjectId) -> ObjectStat:
        try:
            st = os.stat(self._object_path(oid))
        except FileNotFoundError:
            raise ObjectNotFound(oid) from None
        return ObjectStat(st.st_size, st.st_mtime)

    def sync(self) -> None:
        if not self._unsynced and not self._unsynced_dirs:
            return
        files, dirs = self._unsynced, sorted(self._unsynced_dirs)
        # Files before the directories that name them: a directory entry must never be durable
        # before the content it points to.
        _fsync_all(files)
        _fsync_all(dirs)
        self._unsynced, self._unsynced_dirs = [], set()

    def sweep_temporaries(self, older_than: float) -> int:
        removed = 0
        try:
            fanout = os.listdir(self.path)
        except FileNotFoundError:
            return 0
        for prefix in fanout:
            directory = f"{self.path}/{prefix}"
            try:
                names = os.listdir(directory)
            except (FileNotFoundError, NotADirectoryError):
                continue
            for name in names:
                if not name.startswith(_TEMP_PREFIX):
                    continue
                removed += remove_if_older(f"{directory}/{name}", older_than)
        return removed

    def close(self) -> None:
        self.sync()
