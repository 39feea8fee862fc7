"""`ObjectStore`: the facade every caller uses. Hashes, compresses, verifies, streams.

It adds to a `Backend` exactly what makes the store trustworthy: ids computed from content,
the envelope codec, verification of every read (a mismatch is `CorruptObject` naming the oid,
never silently used), bounded memory for large blobs, a tree cache, and the format file.
It knows nothing of workspaces: `put_file` reads one file it is given, nothing more.
"""

from __future__ import annotations

import os
import stat as statmod
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Literal

from objstore import codec
from objstore.backend import Backend, FsyncPolicy
from objstore.errors import ContentChanged, CorruptObject, StoreNotFound, UnsupportedFormat
from objstore.ids import ObjectId, StreamHasher, hash_bytes
from objstore.local import LocalBackend
from objstore.objects import Tree
from objstore.pack import PACKS_DIR, PackedBackend

FORMAT_VERSION = 1
FORMAT_FILE = "format"
_FORMAT_TAG = "ckpt-objstore"
_TREE_CACHE_SIZE = 8192


@dataclass(frozen=True, slots=True)
class StoreOptions:
    compression_level: int = 3  # zstd level; 0 stores everything raw
    fsync: FsyncPolicy = "batch"
    stream_threshold: int = 8 << 20  # larger files are read in chunks, never whole
    # For a new store (`init`): bulk writes go to pack files ("packed") or one file per object.
    # An existing store keeps its layout: `objects/packs/` exists exactly in packed stores.
    layout: Literal["loose", "packed"] = "packed"


@dataclass(frozen=True, slots=True)
class PutResult:
    oid: ObjectId
    size: int  # content bytes
    is_new: bool
    stored_bytes: int  # envelope bytes written (0 when it was already present)
    stat: os.stat_result  # of the file as read (fstat before reading, equal after)


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

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def init(cls, path: str, options: StoreOptions = StoreOptions()) -> ObjectStore:
        """Create the store at `path` if needed (idempotent) and open it."""
        os.makedirs(os.path.join(path, "objects"), exist_ok=True)
        format_path = os.path.join(path, FORMAT_FILE)
        if not os.path.exists(format_path):
            if options.layout == "packed":  # before the format file: a crash leaves no store
                os.makedirs(os.path.join(path, "objects", PACKS_DIR), exist_ok=True)
            temp = f"{format_path}.tmp-{os.getpid()}"
            with open(temp, "w", encoding="ascii") as out:
                out.write(f"{_FORMAT_TAG} {FORMAT_VERSION}\n")
                out.flush()
                os.fsync(out.fileno())
            os.replace(temp, format_path)
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
        is_new = self.backend.put(oid, stored)
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
            data = _read_all(fd, before.st_size)
            after = os.fstat(fd)
            if len(data) != before.st_size or not _same_file_state(before, after):
                raise ContentChanged(os.fsdecode(path))
            oid = hash_bytes(data)
            is_new, stored = self._put_new(oid, data)
            return PutResult(oid, len(data), is_new, stored, before)
        finally:
            os.close(fd)

    def _put_large(self, fd: int, path: str | bytes, before: os.stat_result) -> PutResult:
        # Hash first (BLAKE3 is ~10x faster than zstd), so content already stored costs no
        # compression; the second pass re-hashes and refuses to store if the file changed.
        hasher = StreamHasher()
        for chunk in _iter_chunks(fd):
            hasher.update(chunk)
        oid = hasher.digest()
        if hasher.length != before.st_size:
            raise ContentChanged(os.fsdecode(path))
        if self.backend.refresh(oid):
            return PutResult(oid, hasher.length, False, 0, before)
        written = 0

        def checked_chunks() -> Iterator[bytes]:
            rehash = StreamHasher()
            os.lseek(fd, 0, os.SEEK_SET)
            for chunk in _iter_chunks(fd):
                rehash.update(chunk)
                if rehash.length > hasher.length:
                    # Grown since the first pass: stop before the encoder sees more bytes
                    # than the length it pledged (zstd would fail with its own error).
                    raise ContentChanged(os.fsdecode(path))
                yield chunk
            if rehash.digest() != oid or not _same_file_state(before, os.fstat(fd)):
                raise ContentChanged(os.fsdecode(path))

        def counted(chunks: Iterator[bytes]) -> Iterator[bytes]:
            nonlocal written
            for chunk in chunks:
                written += len(chunk)
                yield chunk

        encoded = codec.iter_encode_object(
            checked_chunks(), hasher.length, self.options.compression_level
        )
        is_new = self.backend.put_stream(oid, counted(encoded))
        return PutResult(oid, hasher.length, is_new, written, before)

    def get_bytes(self, oid: ObjectId) -> bytes:
        """The verified content of `oid` (in memory: for trees and ordinary files)."""
        data = codec.decode_object(self.backend.get(oid), oid)
        if hash_bytes(data) != oid:
            raise CorruptObject(oid, "content does not match its id")
        return data

    def copy_to(self, oid: ObjectId, out: BinaryIO) -> int:
        """Stream the content of `oid` into `out`; verified only at the end.

        On `CorruptObject` part of the content may already be written, so `out` must be a
        temp file the caller discards.
        """
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


def _read_all(fd: int, expected: int) -> bytes:
    # One extra byte detects a file that grew since fstat.
    parts = []
    remaining = expected + 1
    while remaining > 0:
        chunk = os.read(fd, remaining)
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _iter_chunks(fd: int) -> Iterator[bytes]:
    while chunk := os.read(fd, codec.CHUNK_SIZE):
        yield chunk
