"""`ObjectStore`: the facade every caller uses. Hashes, compresses, verifies, streams.

It adds to a `Backend` exactly what makes the store trustworthy: ids computed from content,
the envelope codec, verification of every read (a mismatch is `CorruptObject` naming the oid,
never silently used), bounded memory for large blobs, a tree cache, and the format file.
It knows nothing of workspaces: `put_file` reads one file it is given, nothing more.
"""

from __future__ import annotations

import os
import stat as statmod
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, BinaryIO, Literal, Protocol

from ckpt.objstore import codec
from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.backend import Backend, BulkBackend, FsyncPolicy, LocatedBackend
from ckpt.objstore.errors import (
    ContentChanged,
    CorruptObject,
    StoreNotFound,
    StoreWriteError,
    UnsupportedFormat,
)
from ckpt.objstore.ids import ObjectId, StreamHasher, hash_bytes
from ckpt.objstore.local import LocalBackend
from ckpt.objstore.native import load_native
from ckpt.objstore.objects import Tree
from ckpt.objstore.pack import PACKS_DIR, PackedBackend

if TYPE_CHECKING:  # thread pools only where a batch put runs: off every command's start-up
    from concurrent.futures import Future, ThreadPoolExecutor

# Optional (objstore/native.py): without it put_files reads each file from Python.
_readfiles = load_native("ckpt.objstore._readfiles")
_native_read_files: Callable[..., Any] | None = (
    None if _readfiles is None else _readfiles.read_files)
_CHANGED: int = 0 if _readfiles is None else _readfiles.CHANGED
_NOT_REGULAR: int = 0 if _readfiles is None else _readfiles.NOT_REGULAR

FORMAT_VERSION = 1
FORMAT_FILE = "format"
_FORMAT_TAG = "ckpt-objstore"
_TREE_CACHE_SIZE = 8192
# copy_to reads an object whole (not streamed) up to these sizes, stored and content.
_WHOLE_READ = 256 << 10
_WHOLE_READ_CONTENT = 4 << 20


@dataclass(frozen=True, slots=True)
class StoreOptions:
    compression_level: int = 3  # zstd level; 0 stores everything raw
    fsync: FsyncPolicy = "batch"
    stream_threshold: int = 8 << 20  # larger files are read in chunks, never whole
    # For a new store (`init`): bulk writes go to pack files ("packed") or one file per object.
    # An existing store keeps its layout: `objects/packs/` exists exactly in packed stores.
    layout: Literal["loose", "packed"] = "packed"


class FileState(Protocol):
    """What a put tells of the file it read: an `os.stat_result`, or the native reader's
    smaller record of the same fields."""

    @property
    def st_mode(self) -> int: ...
    @property
    def st_size(self) -> int: ...
    @property
    def st_mtime_ns(self) -> int: ...
    @property
    def st_ctime_ns(self) -> int: ...
    @property
    def st_ino(self) -> int: ...


@dataclass(frozen=True, slots=True)
class PutResult:
    oid: ObjectId
    size: int  # content bytes
    is_new: bool
    stored_bytes: int  # envelope bytes written (0 when it was already present)
    stat: FileState  # of the file as read (fstat before reading, equal after)


def _same_file_state(before: os.stat_result, after: os.stat_result) -> bool:
    return (
        before.st_size == after.st_size
        and before.st_mtime_ns == after.st_mtime_ns
        and before.st_ctime_ns == after.st_ctime_ns
        and before.st_ino == after.st_ino
    )


class ObjectStore:
    def __init__(self, backend: Backend, options: StoreOptions = StoreOptions()) -> None:
        self.backend = backend
        self.options = options
        self._trees: OrderedDict[ObjectId, Tree] = OrderedDict()
        # Stores objects `refresh` just found absent; backends without the shortcut `put`.
        self._bulk: BulkBackend | None = backend if isinstance(backend, BulkBackend) else None
        self._put_absent = backend.put if self._bulk is None else self._bulk.put_absent

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def init(cls, path: str, options: StoreOptions = StoreOptions()) -> ObjectStore:
        """Create the store at `path` if needed (idempotent) and open it."""
        os.makedirs(os.path.join(path, "objects"), exist_ok=True)
        format_path = os.path.join(path, FORMAT_FILE)
        if not os.path.exists(format_path):
            if options.layout == "packed":  # before the format file: a crash leaves no store
                os.makedirs(os.path.join(path, "objects", PACKS_DIR), exist_ok=True)
            # The name is not fsynced: a crash that loses it leaves no store, and init again
            # makes one.
            write_atomically(format_path, f"{_FORMAT_TAG} {FORMAT_VERSION}\n".encode("ascii"),
                             fsync_file=True, fsync_dir=False, mode=0o666)
        return cls.open(path, options)

    @classmethod
    def open(cls, path: str, options: StoreOptions = StoreOptions()) -> ObjectStore:
        check_format(path)
        objects = os.path.join(path, "objects")
        backend: Backend
        if os.path.isdir(os.path.join(objects, PACKS_DIR)):
            backend = PackedBackend(objects, fsync=options.fsync)
        else:
            backend = LocalBackend(objects, fsync=options.fsync)
        return cls(backend, options)

    def close(self) -> None:
        self.backend.close()

    def sync(self) -> None:
        self.backend.sync()

    # -- blobs -------------------------------------------------------------------------

    def has(self, oid: ObjectId) -> bool:
        return self.backend.has(oid)

    def put_bytes(self, data: bytes) -> ObjectId:
        oid = hash_bytes(data)
        if not self.backend.refresh(oid):
            self.backend.put(oid, codec.encode_object(data, self.options.compression_level))
        return oid

    def _put_new(self, oid: ObjectId, data: bytes | memoryview) -> tuple[bool, int]:
        if self.backend.refresh(oid):
            return False, 0
        stored = codec.encode_object(data, self.options.compression_level)
        # A concurrent writer may have stored it since the refresh: then nothing was written.
        is_new = self._put_absent(oid, stored)
        return is_new, len(stored) if is_new else 0

    def put_file(self, path: str | bytes) -> PutResult:
        """Store one regular file's content, never following a symlink.

        `ContentChanged` if the file changed while it was read: the caller decides whether to
        retry or report it; nothing torn is ever stored under the id.
        """
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever;
        # it changes nothing for the regular files we go on to read.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            before = os.fstat(fd)
            if not statmod.S_ISREG(before.st_mode):
                raise IsADirectoryError(f"not a regular file: {os.fsdecode(path)}")
            if before.st_size > self.options.stream_threshold:
                return self._put_large(fd, path, before)
            data = _read_small(fd, path, before)
        finally:
            os.close(fd)
        oid = hash_bytes(data)
        try:
            is_new, stored = self._put_new(oid, data)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        return PutResult(oid, len(data), is_new, stored, before)

    def put_files(
        self, paths: Iterable[str | bytes], *, threads: int = 0
    ) -> Iterator[PutResult | OSError | ContentChanged]:
        """`put_file` for many files: for each path, in order, its `PutResult` or the exception
        `put_file` would raise for it (`OSError`, `ContentChanged`); one file's failure never
        stops the others. A failure to write the store (disk full) raises.

        Built for a first snapshot of a large tree, where per-file work in a Python thread pool
        is dominated by GIL hand-offs: here the calling thread reads, hashes and stores, and
        new objects are compressed in batches by `threads` threads, this one included (0: one
        per CPU). The others are a pool, each batch on a native zstd call that runs without
        the GIL, overlapping the reading of the next batches; when the pool falls behind, this
        thread compresses a batch no pool thread has started instead of waiting. A result is
        yielded once its object is written; memory stays bounded by a few batches per thread.
        Files are read a batch at a time by the native reader when it is built (see
        objstore/_readfiles.c); files above `stream_threshold` stream through `put_file`'s
        path on a pool thread, in line with the batches (here, without a pool or when taken
        back), never whole in memory.
        """
        from concurrent.futures import ThreadPoolExecutor

        level = self.options.compression_level
        # A pool thread per CPU but one, which this thread keeps busy reading and hashing, and
        # this thread compresses when it is ahead. A pool of one per CPU put three busy threads
        # on two cores: the kernel's fair share preempted this thread, the critical path, for
        # 0.7 s of a Linux first snapshot (/proc schedstat), and a pool of one left it waiting
        # 1 s for the compressor; compressing here rather than waiting (4 alternating pairs):
        # wall 4.6-4.9 s -> 4.2-4.4 s.
        workers = (threads or os.cpu_count() or 1) - 1
        # Whole batches side by side, one thread each, rather than one batch split across the
        # threads: a split batch left its threads idle at its tail and while the next one was
        # read (py-spy: the compressing thread waited a third of a Linux first snapshot, the
        # reading thread waited too). Linux first snapshot, 2 cores, medians of 6 alternating
        # runs: 4.78 s -> 4.30-4.34 s, peak RSS 175 -> 176-180 MiB.
        # Started with the first full batch: a call whose files fit in one batch (a turn's)
        # compresses it here, as it would only wait for the thread (stdlib turn, 25 files:
        # hashing and storing 3.2 -> 2.6 ms without a pool's start and hand-offs).
        pool: ThreadPoolExecutor | None = None
        new_pool = partial(ThreadPoolExecutor, workers, thread_name_prefix="objstore-compress")
        in_flight = min(_BATCHES_IN_FLIGHT * workers + 2, _MAX_BATCHES_IN_FLIGHT)
        # The loop below is the whole first snapshot's per-file cost in the calling thread:
        # it is written flat on purpose (a function call per step costs ~5% of the total).
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        threshold = self.options.stream_threshold
        refresh = self.backend.refresh
        slots: deque[list[Any]] = deque()  # [result or None while its batch is out], in order
        inflight: deque[_Batch | _LargeFile] = deque()
        pending: set[ObjectId] = set()  # read here, not written yet: a second copy is not new
        batch = _Batch()
        reads: Iterable[tuple[str | bytes, Any]] = (
            ((path, None) for path in paths) if _native_read_files is None
            else _read_natively(paths, threshold))
        before: FileState
        try:
            for path, read in reads:
                result: PutResult | OSError | ContentChanged | None = None
                large: _LargeFile | None = None
                if read is None:  # to be read here (no native reader, or a large file)
                    try:
                        # O_NONBLOCK: as in `put_file`, never wait on a FIFO.
                        fd = os.open(path, flags)
                        try:
                            st = os.fstat(fd)
                            if not statmod.S_ISREG(st.st_mode):
                                raise IsADirectoryError(
                                    f"not a regular file: {os.fsdecode(path)}")
                            if st.st_size <= threshold:
                                data, before = _read_small(fd, path, st), st
                            elif level == 0 or workers == 0:
                                result = self._put_large(fd, path, st, parallel=False)
                            else:  # it now owns the descriptor
                                large = _LargeFile(
                                    partial(self._put_large, fd, path, st, parallel=False),
                                    fd, [None])
                                fd = -1
                        finally:
                            if fd >= 0:
                                os.close(fd)
                    except (OSError, ContentChanged) as exc:
                        result = exc
                elif type(read) is tuple:
                    data, before = read
                else:
                    result = read
                if large is not None:
                    # Streamed on the pool in line with the batches: compressing is most of
                    # its cost.
                    pool = pool or new_pool()
                    slots.append(large.slot)
                    large.submit(pool)
                    inflight.append(large)
                    self._write_compressed(inflight, in_flight, level, pending)
                elif result is None:
                    oid = hash_bytes(data, parallel=False)  # the cores are compressing
                    if oid in pending or refresh(oid):
                        result = PutResult(oid, len(data), False, 0, before)
                    else:
                        pending.add(oid)
                        slot: list[Any] = [None]
                        slots.append(slot)
                        batch.add(oid, data, before, slot, level > 0 and len(data) > 64)
                        if batch.size >= _BATCH_BYTES or len(batch.items) >= _BATCH_ITEMS:
                            if pool is None and level > 0 and workers > 0:
                                pool = new_pool()
                            if pool is None:
                                batch.compress(level)
                            else:
                                batch.submit(pool, level)
                            inflight.append(batch)
                            batch = _Batch()
                            self._write_compressed(inflight, in_flight, level, pending)
                if result is not None:
                    if not slots:
                        yield result
                        continue
                    slots.append([result])
                while slots and slots[0][0] is not None:
                    yield slots.popleft()[0]
            batch.compress(level)  # the last one: no thread could start it sooner than this
            inflight.append(batch)
            self._write_compressed(inflight, 0, level, pending)
            while slots:
                yield slots.popleft()[0]
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
                for item in inflight:
                    if isinstance(item, _LargeFile):
                        item.discard()

    def _write_compressed(self, inflight: deque[_Batch | _LargeFile], keep: int, level: int,
                          pending: set[ObjectId]) -> None:
        """Write the oldest batches in order as they are compressed, until at most `keep` are
        left. While the oldest is still compressing and more than `keep` are out, this thread
        compresses the oldest batch no pool thread has started rather than wait."""
        while inflight:
            if not inflight[0].done():
                if len(inflight) <= keep:
                    return
                if any(batch.take_back(level) for batch in inflight):
                    continue
            oldest = inflight.popleft()
            if isinstance(oldest, _LargeFile):
                oldest.settle()
            else:
                self._write_batch(oldest, pending)

    def _write_batch(self, batch: _Batch, pending: set[ObjectId]) -> None:
        frames = batch.frames()
        envelope = codec.envelope
        objects = [
            (oid, envelope(data, frames[index] if index >= 0 else None))
            for oid, data, _, _, index in batch.items
        ]
        if self._bulk is not None:
            written = self._bulk.put_absent_many(objects)
        else:
            put = self._put_absent
            written = [put(oid, stored) for oid, stored in objects]
        # A concurrent writer may have stored one since the refresh: then nothing was written.
        for (oid, data, before, slot, _), (_, stored), is_new in zip(batch.items, objects, written):
            slot[0] = PutResult(oid, len(data), is_new, len(stored) if is_new else 0, before)
            pending.discard(oid)

    def _put_large(self, fd: int, path: str | bytes, before: os.stat_result, *,
                   parallel: bool = True) -> PutResult:
        # Hash first (BLAKE3 is ~10x faster than zstd), so content already stored costs no
        # compression; the second pass re-hashes and refuses to store if the file changed.
        # `parallel`: see StreamHasher (put_files hashes on its thread alone).
        hasher = StreamHasher(parallel=parallel)
        for chunk in _iter_chunks(fd):
            hasher.update(chunk)
        oid = hasher.digest()
        if hasher.length != before.st_size:
            raise ContentChanged(os.fsdecode(path))
        if self.backend.refresh(oid):
            return PutResult(oid, hasher.length, False, 0, before)
        written = 0

        def checked_chunks() -> Iterator[bytes]:
            rehash = StreamHasher(parallel=parallel)
            try:
                os.lseek(fd, 0, os.SEEK_SET)
                for chunk in _iter_chunks(fd):
                    rehash.update(chunk)
                    if rehash.length > hasher.length:
                        # Grown since the first pass: stop before the encoder sees more bytes
                        # than the length it pledged (zstd would fail with its own error).
                        raise ContentChanged(os.fsdecode(path))
                    yield chunk
                after = os.fstat(fd)
            except OSError as exc:  # the file's, told apart from the store's below
                raise _Unreadable(exc) from exc
            if rehash.digest() != oid or not _same_file_state(before, after):
                raise ContentChanged(os.fsdecode(path))

        def counted(chunks: Iterator[bytes]) -> Iterator[bytes]:
            nonlocal written
            for chunk in chunks:
                written += len(chunk)
                yield chunk

        encoded = codec.iter_encode_object(
            checked_chunks(), hasher.length, self.options.compression_level
        )
        try:
            is_new = self.backend.put_stream(oid, counted(encoded))
        except _Unreadable as unreadable:
            raise unreadable.error from None
        except OSError as exc:
            raise self._write_failed(exc) from exc
        return PutResult(oid, hasher.length, is_new, written, before)

    def _write_failed(self, error: OSError) -> StoreWriteError:
        """`error` as the store's failure; one that names no path (a write to an open
        descriptor) is made to name the store's objects, so that its message says where."""
        if (error.filename is None and error.errno is not None
                and isinstance(self.backend, LocatedBackend)):
            error = OSError(error.errno, error.strerror, self.backend.path)
        return StoreWriteError(error)

    def get_bytes(self, oid: ObjectId) -> bytes:
        """The verified content of `oid` (in memory: for trees and ordinary files)."""
        return self._verified(oid, codec.decode_object(self.backend.get(oid), oid))

    @staticmethod
    def _verified(oid: ObjectId, data: bytes) -> bytes:
        if hash_bytes(data) != oid:
            raise CorruptObject(oid, "content does not match its id")
        return data

    def copy_to(self, oid: ObjectId, out: BinaryIO) -> int:
        """Stream the content of `oid` into `out`; verified only at the end.

        On `CorruptObject` part of the content may already be written, so `out` must be a
        temp file the caller discards.
        """
        if self.backend.stat(oid).size <= _WHOLE_READ:
            # Most files of a source tree: one read and one decompression into memory cost
            # half of a stream's descriptor, reader and decompression context.
            stored = self.backend.get(oid)
            if codec.read_header(stored, oid)[1] <= _WHOLE_READ_CONTENT:
                data = self._verified(oid, codec.decode_object(stored, oid))
                out.write(data)
                return len(data)
        hasher = StreamHasher()
        with self.backend.open(oid) as stream:
            for chunk in codec.iter_decode_object(stream, oid):
                hasher.update(chunk)
                out.write(chunk)
        if hasher.digest() != oid:
            raise CorruptObject(oid, "content does not match its id")
        return hasher.length

    def verify(self, oid: ObjectId) -> int:
        """Read and verify `oid` without keeping it; returns its content size."""
        hasher = StreamHasher()
        with self.backend.open(oid) as stream:
            for chunk in codec.iter_decode_object(stream, oid):
                hasher.update(chunk)
        if hasher.digest() != oid:
            raise CorruptObject(oid, "content does not match its id")
        return hasher.length

    # -- trees -------------------------------------------------------------------------

    def put_tree(self, tree: Tree) -> ObjectId:
        return self.store_tree(tree)[0]

    def store_tree(self, tree: Tree) -> tuple[ObjectId, int]:
        """Store `tree`; returns its id and the bytes written (0 if it was already stored)."""
        data = codec.encode_tree(tree)
        oid = hash_bytes(data)
        _, stored = self._put_new(oid, data)
        self._remember(oid, tree)
        return oid, stored

    def tree_id(self, tree: Tree) -> ObjectId:
        """The id `tree` would have, without storing it."""
        return hash_bytes(codec.encode_tree(tree))

    def get_tree(self, oid: ObjectId) -> Tree:
        tree = self._trees.get(oid)
        if tree is not None:
            self._trees.move_to_end(oid)
            return tree
        tree = codec.decode_tree(self.get_bytes(oid), oid)
        self._remember(oid, tree)
        return tree

    def cached_tree(self, oid: ObjectId) -> Tree | None:
        """`oid`'s tree if this store has it decoded in memory (stored or read lately), else
        None: never a read. For a caller that can reuse its entries but would not decode it."""
        return self._trees.get(oid)

    def _remember(self, oid: ObjectId, tree: Tree) -> None:
        self._trees[oid] = tree
        if len(self._trees) > _TREE_CACHE_SIZE:
            self._trees.popitem(last=False)

    def forget_cached(self) -> None:
        self._trees.clear()


def check_format(path: str) -> None:
    """Refuse a missing store or one written by a newer (or unknown) format."""
    format_path = os.path.join(path, FORMAT_FILE)
    try:
        with open(format_path, "rb") as stream:
            text = stream.read(256).decode("ascii", "replace").strip()
    except (FileNotFoundError, NotADirectoryError):
        raise StoreNotFound(path) from None
    tag, _, version = text.partition(" ")
    if tag != _FORMAT_TAG or not version.isdigit():
        raise UnsupportedFormat(path, repr(text[:40]), FORMAT_VERSION)
    if int(version) != FORMAT_VERSION:
        raise UnsupportedFormat(path, version, FORMAT_VERSION)


# put_files: new objects are compressed in batches of about this many bytes or objects, with
# up to this many batches per compressing thread (plus two, at most the maximum) compressing
# or compressed while the next is read (memory: a few batches per thread).
_BATCH_BYTES = 2 << 20
_BATCH_ITEMS = 512
_BATCHES_IN_FLIGHT = 2
_MAX_BATCHES_IN_FLIGHT = 16
# The native reader takes up to this many paths, or files of this many bytes, per call: the
# cost of a call is spread, and memory ahead of the hashing stays small.
_READ_AHEAD_FILES = 64
_READ_AHEAD_BYTES = 1 << 20


class _Batch:
    """New objects read by `put_files`, compressed together, then written in order."""

    __slots__ = ("_frames", "_future", "inputs", "items", "size")

    def __init__(self) -> None:
        # oid, content, stat before reading, result slot, index in `inputs` (-1: stored raw)
        self.items: list[tuple[ObjectId, bytes, FileState, list[Any], int]] = []
        self.inputs: list[bytes] = []  # the contents to compress
        self.size = 0
        self._future: Future[Sequence[Any]] | None = None
        self._frames: Sequence[Any] = ()  # compressed by `compress`, in the calling thread

    def add(self, oid: ObjectId, data: bytes, before: FileState, slot: list[Any],
            compress: bool) -> None:
        index = -1
        if compress:
            index = len(self.inputs)
            self.inputs.append(data)
        self.items.append((oid, data, before, slot, index))
        self.size += len(data)

    def submit(self, pool: ThreadPoolExecutor | None, level: int) -> None:
        """Compress on one of `pool`'s threads, one native zstd thread (batches run side by
        side, see put_files)."""
        if self.inputs and pool is not None:
            self._future = pool.submit(codec.compress_batch, self.inputs, level, 1)

    def compress(self, level: int) -> None:
        """Compress here, in the calling thread."""
        if self.inputs and level > 0:
            self._frames = codec.compress_batch(self.inputs, level, 1)

    def take_back(self, level: int) -> bool:
        """Compress here if no pool thread has started on this batch: whether it did."""
        if self._future is None or not self._future.cancel():
            return False
        self._future = None
        self.compress(level)
        return True

    def done(self) -> bool:
        return self._future is None or self._future.done()

    def frames(self) -> Sequence[Any]:
        return self._future.result() if self._future is not None else self._frames


class _Unreadable(Exception):  # never escapes _put_large
    """A read of the file being streamed failed (`.error`): carried through the store's
    stream writer, which could fail with an OSError of its own."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class _LargeFile:
    """A file above the stream threshold that `put_files` streams on a pool thread, in the
    line of its batches: `_put_large` on its open descriptor, closed when the call is over
    (or by `discard`, if the call was cancelled and never ran)."""

    __slots__ = ("_fd", "_future", "_outcome", "_put", "slot")

    def __init__(self, put: Callable[[], PutResult], fd: int, slot: list[Any]) -> None:
        self._put = put
        self._fd = fd
        self.slot = slot
        self._future: Future[PutResult | OSError | ContentChanged] | None = None
        self._outcome: PutResult | OSError | ContentChanged | None = None

    def _run(self) -> PutResult | OSError | ContentChanged:
        try:
            return self._put()
        except (OSError, ContentChanged) as exc:
            return exc
        finally:
            os.close(self._fd)

    def submit(self, pool: ThreadPoolExecutor) -> None:
        self._future = pool.submit(self._run)

    def done(self) -> bool:
        return self._future is None or self._future.done()

    def take_back(self, level: int) -> bool:
        """Stream here if no pool thread has started on it: whether it did."""
        if self._future is None or not self._future.cancel():
            return False
        self._future = None
        self._outcome = self._run()
        return True

    def settle(self) -> None:
        """Its result into its slot (an error of the store itself raises here)."""
        self.slot[0] = self._future.result() if self._future is not None else self._outcome

    def discard(self) -> None:
        if self._future is not None and self._future.cancelled():
            os.close(self._fd)


def _read_natively(paths: Iterable[str | bytes], limit: int
                   ) -> Iterator[tuple[str | bytes, Any]]:
    """Each path with what the native reader made of it: `(content, stat)`, the exception
    that reading it would raise in `put_file` (`OSError`, `ContentChanged`), or None for a
    file larger than `limit`, to be streamed by the caller."""
    assert _native_read_files is not None
    chunk: list[str | bytes] = []
    for path in paths:
        chunk.append(path)
        if len(chunk) == _READ_AHEAD_FILES:
            yield from _read_chunk(chunk, limit)
            chunk = []
    yield from _read_chunk(chunk, limit)


def _read_chunk(chunk: list[str | bytes], limit: int) -> Iterator[tuple[str | bytes, Any]]:
    assert _native_read_files is not None  # callers check first
    encoded = [os.fsencode(path) for path in chunk]
    start = 0
    while start < len(chunk):
        outcomes = _native_read_files(encoded[start:], limit, _READ_AHEAD_BYTES)
        for path, outcome in zip(chunk[start:], outcomes):
            if type(outcome) is tuple:
                yield path, None if outcome[0] is None else outcome
            elif outcome == _CHANGED:
                yield path, ContentChanged(os.fsdecode(path))
            elif outcome == _NOT_REGULAR:
                yield path, IsADirectoryError(f"not a regular file: {os.fsdecode(path)}")
            else:
                yield path, OSError(outcome, os.strerror(outcome), path)
        start += len(outcomes)


def _read_small(fd: int, path: str | bytes, before: os.stat_result) -> bytes:
    """The whole content of an open regular file, refused if it changed while read."""
    data = _read_all(fd, before.st_size)
    if len(data) != before.st_size or not _same_file_state(before, os.fstat(fd)):
        raise ContentChanged(os.fsdecode(path))
    return data


def _read_all(fd: int, expected: int) -> bytes:
    # One extra byte detects a file that grew since fstat. A regular file normally returns
    # everything at once; the caller's fstat after reading catches growth after this read, so
    # no second read is spent to see EOF once `expected` bytes have arrived.
    data = os.read(fd, expected + 1)
    if len(data) >= expected or not data:
        return data
    parts = [data]
    got = len(data)
    while got <= expected:
        chunk = os.read(fd, expected + 1 - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _iter_chunks(fd: int) -> Iterator[bytes]:
    while chunk := os.read(fd, codec.CHUNK_SIZE):
        yield chunk
