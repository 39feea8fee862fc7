"""Staging a restore plan's files (step 1 of a restore, see restore/apply.py): every file's content
read from the store, verified by its hash, and written into a staging directory before
anything in the workspace changes. Two layouts: numbered names in one flat directory
(`stage_files`, for restores of a workspace, which restore/apply.py moves into place one by one)
and the plan's own paths below a new private directory (`stage_tree`, for a restore into a
new directory, whose top-level entries are then moved as wholes).

Decoding and writing overlap: the caller's thread decodes contents blob after blob
(`ObjectStore.get_many_slices`, whose blocks are decompressed ahead on threads of the store's;
a block's members are handed over as slices of its content, not copies) into batches, and
writer threads (`WRITERS`) verify each content by its hash, then create and fill its file,
while the next batch is decoded (the native `write_files` of `_fsops.c`, without the GIL), so that
decompression, hashing and the kernel's file creation run side by side. At most
`WRITING_BATCHES` are handed over and not yet written, and one is being filled, which bounds
the memory held. A content over `WHOLE_CONTENT` is streamed from the store instead, by a
writer thread in the place of a batch.
Without the native extension each file is written on the caller's thread as it is decoded.

A new tree's directories are the writer's first task (`_Writer.make_dirs`), made while the
caller asks for the first contents; what the caller writes itself (symlinks) waits for them.

A name with a slash (`stage_tree`) is opened relative to the staging directory's descriptor;
no component of it but the last could be a symlink unless its owner put one there.

What must not live here: anything that touches the workspace (restore/apply.py applies), plans
(plan.py), journals (restore/restorer.py).
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from typing import TYPE_CHECKING, BinaryIO, Self, cast

from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.restore.apply import (
    DIR_FLAGS,
    RESTORED_AGE_NS,
    current_umask,
    remove_staging,
    restored_mode,
)
from ckpt.checkpoints.restore.plan import FileWrite, RestorePlan
from ckpt.checkpoints.snapshot.scan import ProgressFn
from ckpt.objstore import CorruptObject, EntryKind, ObjectId, ObjectStore, Slice, hash_bytes
from ckpt.objstore.native import load_native

if TYPE_CHECKING:
    from ckpt.objstore.remote.repo import Arrived

# Fetches a hollow checkpoint's missing blobs, saying which are readable as they arrive, with
# the envelopes it stored; returns how many objects it fetched. The remote side makes one
# (`remote.Remote.hydrating`) and the service passes it in: a restore never imports remotes.
BlobFetch = Callable[[Callable[[list["Arrived"]], object] | None], int]

_fsops = load_native("ckpt.checkpoints._fsops")
_native_write_files = None if _fsops is None else _fsops.write_files

# What `write_files` says of a content that does not hash to its id (errno values are > 0).
_NOT_ITS_ID = -1
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
# Contents up to this size are decoded whole into memory and handed to the writer; a larger
# one is streamed, so that memory stays bounded by the batches whatever the file sizes.
WHOLE_CONTENT = 4 << 20
# A batch is handed to the writers when it holds this many files or bytes: large enough that
# the hand-over costs little per file, small enough that the writers start soon.
BATCH_FILES = 128
BATCH_BYTES = 4 << 20
# Batches handed to the writers and not yet written: a few, so that neither side waits for
# the other when one batch costs more than the next (large files, a slow fetch).
WRITING_BATCHES = 4
# Writer threads. The kernel's creation of small files is what a big restore waits for on a
# slow file system (ext4 with online discard, overlay and network file systems); two threads
# overlap it there, and cost nothing measurable where it is fast.
WRITERS = 2

# name, the buffer that holds the content, where in it the content starts and its length (a
# block member's is written from the block's content without a copy), mode, set the mode
# exactly, the id to verify the content against before it is written (None: verified already)
NewFile = tuple[bytes, bytes, int, int, int, bool, ObjectId | None]
# A blob to stage: its id, its envelope if the caller has it (a fetch's), and its files with
# the names they are staged as.
Blob = tuple[ObjectId, bytes | None, list[tuple[FileWrite, bytes]]]


def stage_files(plan: RestorePlan, store: ObjectStore, staging: bytes) -> dict[RelPath, bytes]:
    """Write and verify every file and symlink of `plan.writes` into the flat directory
    `staging` (made here) under numbered names; returns each path's staged name. On any
    failure (a missing or corrupt object, a full disk) the staging directory is removed and
    the error raised: the workspace is untouched.

    Symlinks are made there too, so that applying moves names only and a killed restore leaves
    no temporary name in the workspace (the journal's cleanup removes the staging directory).
    """
    os.makedirs(staging, exist_ok=True)
    names = [b"%d" % index for index in range(len(plan.writes))]
    try:
        with _Stager(store, staging, len(names), None) as stager:
            blobs, links = stager.by_blob(zip(plan.writes, names))
            stager.stage_blobs([(oid, None, files) for oid, files in blobs.items()])
            stager.stage_links(links)
    except BaseException:
        remove_staging(staging)
        raise
    return {write.path: staging + b"/" + name for write, name in zip(plan.writes, names)}


def stage_tree(plan: RestorePlan, store: ObjectStore, staging: bytes,
               progress: ProgressFn | None, fetch_blobs: BlobFetch | None = None) -> None:
    """Build what `plan` makes of an empty directory inside the new directory `staging`, each
    file at its own path: its directories (`plan.mkdirs`), then its files and symlinks,
    written and verified. For a restore into a new directory (restore_into.py), which then
    moves `staging`'s top-level entries into place. `staging` is made private (mode 0700), so
    no other user can put a symlink on the way of a path below it. On a failure the caller
    removes `staging`.

    `fetch_blobs` (a hollow checkpoint's, `Remote.hydrating`) brings the blobs the store
    lacks; each file is written as soon as its blob is readable, in the order they arrive."""
    os.mkdir(staging, 0o700)
    with _Stager(store, staging, len(plan.writes), progress) as stager:
        stager.writer.make_dirs(plan.mkdirs)
        waiting, links = stager.by_blob((write, write.path) for write in plan.writes)

        def ready(arrived: list[Arrived]) -> None:
            stager.stage_blobs([(oid, stored, waiting.pop(oid)) for oid, stored in arrived
                                if oid in waiting])

        if fetch_blobs is None:
            ready([(oid, None) for oid in waiting])
        else:
            fetch_blobs(ready)
        # None, unless the fetch skipped some.
        stager.stage_blobs([(oid, None, writes) for oid, writes in waiting.items()])
        stager.stage_links(links)


class _Stager:
    """Writes staged files, each verified by its hash, through a `_Writer`; says how far it
    got to `progress`. A context manager: leaving waits for the last batch (its failure
    raised) or, on an error, abandons it."""

    def __init__(self, store: ObjectStore, staging: bytes, total: int,
                 progress: ProgressFn | None) -> None:
        self.store = store
        self.staging = staging
        self.total = total
        self.progress = progress
        self.done = 0
        self.mask = current_umask()
        self.stamp = time.time_ns() - RESTORED_AGE_NS
        self.writer = _Writer(staging, self.stamp)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        try:
            if kind is None:
                self.writer.finish()
        finally:
            self.writer.abandon()
        if kind is None and self.progress is not None and self.total:
            self.progress("restore", self.total, self.total)

    def by_blob(self, files: Iterable[tuple[FileWrite, bytes]]
                ) -> tuple[dict[ObjectId, list[tuple[FileWrite, bytes]]],
                           list[tuple[FileWrite, bytes]]]:
        """The files of `files` (writes and the names to stage them as) grouped by blob, in
        the order of each blob's first file; and the symlinks."""
        blobs: dict[ObjectId, list[tuple[FileWrite, bytes]]] = {}
        links: list[tuple[FileWrite, bytes]] = []
        symlink = EntryKind.SYMLINK
        for file in files:
            entry = file[0].entry
            if entry.kind is symlink:
                links.append(file)
            else:
                oid = entry.oid
                assert oid is not None
                same = blobs.get(oid)
                if same is None:
                    blobs[oid] = [file]
                else:
                    same.append(file)
        return blobs, links

    def stage_links(self, links: list[tuple[FileWrite, bytes]]) -> None:
        """Make the symlinks of `links`, once the directories they are in exist."""
        if links:
            self.writer.dirs_made()
        for write, name in links:
            self.stage(write, name)

    def stage_blobs(self, blobs: list[Blob]) -> None:
        """Write the files of each blob of `blobs` (an envelope in hand is decoded without
        reading it from the store again). The blobs are decoded in order
        (`ObjectStore.get_many_slices`: their blocks read ahead); a content over WHOLE_CONTENT is
        streamed instead."""
        whole: list[Blob] = []
        for blob in blobs:
            files = blob[2]
            if files[0][0].entry.size <= WHOLE_CONTENT:
                whole.append(blob)
            else:
                for write, name in files:
                    self.stage(write, name)
        # The writer verifies each content before it writes it (the native one on its thread,
        # without the GIL), so it is not hashed here as well.
        # `stage` for these files, inline: a restore of a source tree makes this loop's body
        # once per file, tens of thousands of times.
        mask = self.mask
        add = self.writer.add
        name = b""
        with closing(self.store.get_many_slices((oid, stored) for oid, stored, _ in whole)
                     ) as contents:
            try:
                for (oid, _, files), (data, start, length) in zip(whole, contents, strict=True):
                    for write, name in files:
                        mode = restored_mode(write.entry, mask)
                        add((name, data, start, length, mode, bool(mode & mask), oid))
                    self._count(len(files))
            except OSError as exc:
                self._rename(exc, name)
                raise

    def stage(self, write: FileWrite, name: bytes, content: Slice | None = None,
              unverified: ObjectId | None = None) -> None:
        """Write `write`'s file or symlink as `name` (relative to the staging directory);
        `content`: the file's (a buffer, and where in it), if the caller has decoded it
        already; `unverified`: its id, if that content is not verified yet (the writer
        verifies it before it writes it)."""
        writer = self.writer
        try:
            entry = write.entry
            if entry.kind is EntryKind.SYMLINK:
                assert entry.target is not None
                os.symlink(entry.target, name, dir_fd=writer.dir_fd)
            else:
                assert entry.oid is not None
                mode = restored_mode(entry, self.mask)
                # Created with `mode` less the umask: never more than it may have, even for a
                # moment; then given `mode` exactly if the umask took bits away.
                exact = bool(mode & self.mask)
                if content is not None:
                    writer.add((name, *content, mode, exact, unverified))
                elif entry.size <= WHOLE_CONTENT:
                    data = self.store.get_bytes(entry.oid)
                    writer.add((name, data, 0, len(data), mode, exact, None))
                else:
                    writer.stream(self.store, entry.oid, name, mode, exact)
        except OSError as exc:
            self._rename(exc, name)
            raise
        self._count(1)

    def _rename(self, exc: OSError, name: bytes) -> None:
        """Raise `exc`, an error of the staged file `name`, as one that names the file by its
        place, not by its name relative to the staging directory; return if `exc` names
        another file."""
        if exc.filename in (None, name):
            where = os.fsdecode(self.staging + b"/" + name)
            raise OSError(exc.errno, exc.strerror, where) from exc

    def _count(self, files: int) -> None:
        """Count `files` more staged, telling `progress` every 256."""
        before = self.done
        self.done += files
        if self.progress is not None and self.done // 256 != before // 256:
            self.progress("restore", self.done, self.total)


def create_new(dir_fd: int, name: bytes, mode: int) -> int:
    """A descriptor of the new file `name` in `dir_fd`, created with `mode` less the umask."""
    return os.open(name, _NEW_FILE_FLAGS, mode, dir_fd=dir_fd)


def write_new(dir_fd: int, new: NewFile, stamp: int) -> None:
    """Create and fill one staged file on the caller's thread (as `write_files` does)."""
    name, data, start, length, mode, exact, oid = new
    view = memoryview(data)[start:start + length]
    if oid is not None and hash_bytes(view) != oid:
        raise CorruptObject(oid, "content does not match its id")
    fd = create_new(dir_fd, name, mode)
    try:
        while view:
            view = view[os.write(fd, view):]
        if exact:
            os.fchmod(fd, mode)
        os.utime(fd, ns=(stamp, stamp))
    finally:
        os.close(fd)


def _make_dirs(staging: bytes, dir_fd: int, paths: list[bytes]) -> tuple[int, int] | None:
    """Make `paths` in `dir_fd`; None (as from `write_files`: nothing failed) or OSError
    naming the directory."""
    for path in paths:
        try:
            os.mkdir(path, 0o777, dir_fd=dir_fd)
        except OSError as exc:
            raise OSError(exc.errno, exc.strerror, os.fsdecode(staging + b"/" + path)) from exc
    return None


def _stream(store: ObjectStore, oid: ObjectId, dir_fd: int, name: bytes, mode: int,
            exact: bool, stamp: int, stop: threading.Event | None = None) -> None:
    """Create `name` and stream `oid`'s content into it; `stop`, once set, ends the stream
    with ECANCELED at its next chunk."""
    fd = create_new(dir_fd, name, mode)
    with os.fdopen(fd, "wb") as out:
        store.copy_to(oid, out if stop is None else cast(BinaryIO, _Stoppable(out, stop)))
        out.flush()
        if exact:
            os.fchmod(fd, mode)
        os.utime(fd, ns=(stamp, stamp))


class _Stoppable:
    """The file a writer thread streams into: it takes no more once the writer is abandoned,
    so that an abandoned restore (an error, Ctrl-C) does not wait for the rest of a large
    file."""

    def __init__(self, out: BinaryIO, stop: threading.Event) -> None:
        self._out = out
        self._stop = stop

    def write(self, data: bytes) -> int:
        if self._stop.is_set():
            raise OSError(errno.ECANCELED, os.strerror(errno.ECANCELED))
        return self._out.write(data)


class _Writer:
    """Writes staged files in batches on `WRITERS` threads (see the module), each batch after
    the directories of `make_dirs`, or one by one on the caller's thread without the native
    extension. Owns the staging directory's descriptor and the threads: `finish` or
    `abandon` ends them all."""

    def __init__(self, staging: bytes, stamp: int) -> None:
        self.staging = staging
        self.stamp = stamp
        self.dir_fd = os.open(staging, DIR_FLAGS)
        self._batch: list[NewFile] = []
        self._bytes = 0
        self._pool = (None if _native_write_files is None
                      else ThreadPoolExecutor(WRITERS, thread_name_prefix="ckpt-staging"))
        self._writing: deque[tuple[list[NewFile], Future[tuple[int, int] | None]]] = deque()
        self._dirs: Future[tuple[int, int] | None] | None = None
        self._abandoned = threading.Event()  # set first thing by `abandon`: streams stop

    def make_dirs(self, paths: Iterable[bytes]) -> None:
        """Make the directories `paths` (relative to the staging directory, each after its
        parent) before any file handed over after this is written: on a writer thread, so
        that the directories of a big tree are made while the caller reads its first
        contents."""
        if self._pool is None:
            _make_dirs(self.staging, self.dir_fd, list(paths))
            return
        self._dirs = self._pool.submit(_make_dirs, self.staging, self.dir_fd, list(paths))
        self._writing.append(([], self._dirs))

    def dirs_made(self) -> None:
        """Wait until the directories of `make_dirs` are made (what failed raised)."""
        if self._dirs is not None:
            self._dirs.result()

    def add(self, new: NewFile) -> None:
        if self._pool is None:
            write_new(self.dir_fd, new, self.stamp)
            return
        self._batch.append(new)
        self._bytes += new[3]
        if len(self._batch) >= BATCH_FILES or self._bytes >= BATCH_BYTES:
            self._hand_over()

    def stream(self, store: ObjectStore, oid: ObjectId, name: bytes, mode: int, exact: bool
               ) -> None:
        """Stream `oid`'s content from `store` into the new file `name` (verified at its end):
        on a writer thread, in the place of a batch, so that its decompression, hashing and
        writing overlap the caller's next contents; on the caller's thread without the
        native extension."""
        if self._pool is None:
            _stream(store, oid, self.dir_fd, name, mode, exact, self.stamp)
            return
        while len(self._writing) >= WRITING_BATCHES:
            self._wait()
        self._writing.append(([], self._pool.submit(self._stream, store, oid, name, mode, exact)))

    def _stream(self, store: ObjectStore, oid: ObjectId, name: bytes, mode: int, exact: bool
                ) -> tuple[int, int] | None:
        """`stream` on a writer thread, once the directories are made; an OSError names the
        staged file by its place."""
        self.dirs_made()
        try:
            _stream(store, oid, self.dir_fd, name, mode, exact, self.stamp, self._abandoned)
        except OSError as exc:
            if exc.filename not in (None, name):
                raise
            path = os.fsdecode(self.staging + b"/" + name)
            raise OSError(exc.errno, exc.strerror, path) from exc
        return None  # as a batch that wrote every file

    def _hand_over(self) -> None:
        assert self._pool is not None and _native_write_files is not None
        while len(self._writing) >= WRITING_BATCHES:
            self._wait()
        batch, self._batch, self._bytes = self._batch, [], 0
        if batch:
            self._writing.append((batch, self._pool.submit(self._write, batch)))

    def _write(self, batch: list[NewFile]) -> tuple[int, int] | None:
        """Write `batch` on a writer thread, once the directories are made (their failure
        raised: it is the batch's too)."""
        assert _native_write_files is not None
        self.dirs_made()
        failed: tuple[int, int] | None = _native_write_files(self.dir_fd, batch, self.stamp)
        return failed

    def _wait(self) -> None:
        """Wait for the oldest batch (or stream) handed over; OSError naming the staged file
        that failed."""
        batch, done = self._writing.popleft()
        failed = done.result()
        if failed is not None:
            index, err = failed
            oid = batch[index][6]
            if err == _NOT_ITS_ID and oid is not None:
                raise CorruptObject(oid, "content does not match its id")
            path = self.staging + b"/" + batch[index][0]
            raise OSError(err, os.strerror(err), os.fsdecode(path))

    def finish(self) -> None:
        """Write what is left and wait for it; the first failure is raised."""
        try:
            if self._pool is not None:
                self._hand_over()
                while self._writing:
                    self._wait()
        finally:
            self.abandon()

    def abandon(self) -> None:
        """End the threads (after the batches they are writing; those not begun are dropped,
        a stream stops at its next chunk) and close the directory."""
        self._abandoned.set()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._writing.clear()
        if self.dir_fd >= 0:
            os.close(self.dir_fd)
            self.dir_fd = -1
