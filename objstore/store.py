"""`ObjectStore`: the facade every caller uses. Hashes, compresses, verifies, streams.

It adds to a `Backend` exactly what makes the store trustworthy: ids computed from content,
the envelope codec, verification of every read (a mismatch is `CorruptObject` naming the oid,
never silently used), bounded memory for large blobs, a tree cache, and the format file.
It knows nothing of workspaces: `put_file` reads one file it is given, nothing more.
Reading a file for a put lives in fileread.py, the batch pipeline of `put_files` in putfiles.py.
"""

from __future__ import annotations

import os
import stat as statmod
from collections import OrderedDict
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Literal, Protocol

from ckpt.objstore import blocks, codec, delta
from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.backend import Backend, BulkBackend, FsyncPolicy, LocatedBackend, Repairable
from ckpt.objstore.dictionary import SMALL_BOUND, Dictionaries, PutDictionary, Trained, train
from ckpt.objstore.errors import (
    ContentChanged,
    CorruptObject,
    ObjectNotFound,
    StoreNotFound,
    StoreWriteError,
    UnsupportedFormat,
)
from ckpt.objstore.fileread import (
    READ_FLAGS,
    iter_chunks,
    not_regular,
    read_whole,
    same_file_state,
)
from ckpt.objstore.ids import ObjectId, StreamHasher, hash_bytes
from ckpt.objstore.local import LocalBackend
from ckpt.objstore.objects import Tree
from ckpt.objstore.pack import PACKS_DIR, PackedBackend
from ckpt.objstore.safeopen import check_directories, open_file

# A content as a buffer that holds it, where in the buffer it starts, and its length.
Slice = tuple[bytes, int, int]

FORMAT_VERSION = 3
# Format 1 never holds a dictionary or delta object (codec 2 or 3), format 2 never a block
# member (codec 4); such a store is read as it is and raised by the first write of one
# (`ensure_format`: 2, or 3 for members), so an older ckpt refuses it with UnsupportedFormat
# instead of reporting objects it cannot decode as corrupt.
BLOCKS_FORMAT = 3
READABLE_FORMATS = (1, 2, 3)
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
    # Small objects are compressed with a zstd dictionary trained from the store's content.
    dictionaries: bool = True
    # A changed file given its previous version (a hint) may be stored as a delta on it,
    # in chains at most `delta_chain` deep (objstore/delta.py).
    deltas: bool = True
    delta_chain: int = delta.DEFAULT_DELTA_CHAIN
    # `put_files` stores its new small blobs (no delta hint) in blocks of about this many raw
    # bytes (objstore/blocks.py); 0: one object each.
    block_size: int = blocks.DEFAULT_BLOCK_SIZE


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


class ObjectStore:
    def __init__(self, backend: Backend, options: StoreOptions = StoreOptions()) -> None:
        self.backend = backend
        self.options = options
        self._trees: OrderedDict[ObjectId, Tree] = OrderedDict()
        # Stores objects `refresh` just found absent; backends without the shortcut `put`.
        self._bulk: BulkBackend | None = backend if isinstance(backend, BulkBackend) else None
        self._put_absent = backend.put if self._bulk is None else self._bulk.put_absent
        self._repair: Repairable | None = backend if isinstance(backend, Repairable) else None
        self._checked: set[ObjectId] = set()  # present ids whose stored copy was checked
        self.format_version = FORMAT_VERSION  # an in-memory store: whatever this version writes
        self._format_path: str | None = None
        self._dictionaries = Dictionaries(None, enabled=options.dictionaries)
        self._deltas = self._delta_encoder(None)
        self._blocks = blocks.BlockCache()

    # -- opening -----------------------------------------------------------------------

    @classmethod
    def init(cls, path: str, options: StoreOptions = StoreOptions()) -> ObjectStore:
        """Create the store at `path` if needed (idempotent) and open it."""
        check_directories(_own_directories(path))
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
        """Open the store at `path`: `StoreNotFound` if there is none, `UnsupportedFormat` if
        it is newer, `UnsafeStore` if its format file or one of its directories is a
        symlink."""
        version = check_format(path)
        check_directories(_own_directories(path))
        objects = os.path.join(path, "objects")
        backend: Backend
        if os.path.isdir(os.path.join(objects, PACKS_DIR)):
            backend = PackedBackend(objects, fsync=options.fsync)
        else:
            backend = LocalBackend(objects, fsync=options.fsync)
        store = cls(backend, options)
        store.format_version = version
        store._format_path = os.path.join(path, FORMAT_FILE)
        store._dictionaries = Dictionaries(path, enabled=options.dictionaries)
        store._deltas = store._delta_encoder(os.path.join(path, delta.LEDGER_FILE))
        return store

    def ensure_format(self, version: int) -> None:
        """Raise the store's format file to `version` (never lowers it) before the first
        object that needs it is written."""
        if self.format_version >= version:
            return
        if self._format_path is not None:
            write_atomically(self._format_path, f"{_FORMAT_TAG} {version}\n".encode("ascii"),
                             fsync_file=True, fsync_dir=True, mode=0o666)
        self.format_version = version

    def close(self) -> None:
        self.backend.close()

    def sync(self) -> None:
        self.backend.sync()
        self._dictionaries.flush()

    # -- blobs -------------------------------------------------------------------------

    def has(self, oid: ObjectId) -> bool:
        return self.backend.has(oid)

    def put_bytes(self, data: bytes, *, base: ObjectId | None = None) -> ObjectId:
        """Store `data`; `base`: the id of its previous version, which it may be stored as a
        delta against (objstore/delta.py decides)."""
        oid = hash_bytes(data)
        if not self._present(oid):
            self.backend.put(oid, self._encode(oid, data, base))
        return oid

    def _present(self, oid: ObjectId) -> bool:
        """`refresh` for a put that holds the content of `oid`: True if a stored copy can be
        trusted. The first time an id is found present in this store object, its stored copy
        is checked (a pack record's header and crc: one read; a loose object's content: a
        verify); a damaged copy is dropped and False returned, so the caller stores the good
        bytes it holds instead of referencing the damage. A copy found intact is not checked
        again by this store object."""
        if not self.backend.refresh(oid):
            return False
        if oid in self._checked:
            return True
        repair = self._repair
        intact = repair.check_stored(oid) if repair is not None else None
        if intact is None:
            try:
                self.verify(oid)
                intact = True
            except CorruptObject:
                intact = False
            except ObjectNotFound:
                return False  # removed since the refresh: store it
        if intact:
            self._checked.add(oid)
            return True
        if repair is None:
            raise CorruptObject(oid, "the stored copy is damaged and this backend cannot "
                                     "replace it")
        repair.forget_damaged(oid)
        self._trees.pop(oid, None)
        return False

    def _put_new(self, oid: ObjectId, data: bytes | memoryview,
                 base: ObjectId | None = None) -> tuple[bool, int]:
        if self._present(oid):
            return False, 0
        stored = self._encode(oid, data, base)
        # A concurrent writer may have stored it since the refresh: then nothing was written.
        is_new = self._put_absent(oid, stored)
        return is_new, len(stored) if is_new else 0

    def put_file(self, path: str | bytes, *, base: ObjectId | None = None) -> PutResult:
        """Store one regular file's content, never following a symlink; `base` as for
        `put_bytes` (a file above `stream_threshold` is never a delta).

        `ContentChanged` if the file changed while it was read: the caller decides whether to
        retry or report it; nothing torn is ever stored under the id.
        """
        fd = os.open(path, READ_FLAGS)
        try:
            before = os.fstat(fd)
            if not statmod.S_ISREG(before.st_mode):
                raise not_regular(path)
            if before.st_size > self.options.stream_threshold:
                return self._put_large(fd, path, before)
            data = read_whole(fd, path, before)
        finally:
            os.close(fd)
        oid = hash_bytes(data)
        try:
            is_new, stored = self._put_new(oid, data, base)
        except OSError as exc:
            raise self._write_failed(exc) from exc
        return PutResult(oid, len(data), is_new, stored, before)

    def put_files(
        self, paths: Iterable[str | bytes], *, threads: int = 0,
        bases: Iterable[ObjectId | None] | None = None,
    ) -> Iterator[PutResult | OSError | ContentChanged]:
        """`put_file` for many files: for each path, in order, its `PutResult` or the exception
        `put_file` would raise for it (`OSError`, `ContentChanged`); one file's failure never
        stops the others. A failure to write the store (disk full) raises. `bases`: one hint
        per path (`put_file`'s `base`), or None for none at all.

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
        back), never whole in memory. The pipeline and its steps: objstore/putfiles.py.
        """
        # Imported here: its thread pool stays off every command's start-up.
        from ckpt.objstore.putfiles import PutPipeline  # noqa: PLC0415

        pipeline = PutPipeline(
            refresh=self._present, put_absent_many=self._put_absent_many,
            put_large=self._put_large, compression_level=self.options.compression_level,
            stream_threshold=self.options.stream_threshold, threads=threads,
            dictionary=self._put_dictionary(),
            encode_delta=None if bases is None else self._deltas.encode,
            blocks=blocks.BlockOptions(self.options.block_size),
            raise_format=lambda: self.ensure_format(BLOCKS_FORMAT))
        return pipeline.run(paths, bases)

    def _put_absent_many(self, objects: Sequence[tuple[ObjectId, bytes]]) -> list[bool]:
        """Store objects `refresh` has just found absent, in order; whether each was new."""
        if self._bulk is not None:
            return self._bulk.put_absent_many(objects)
        put = self._put_absent
        return [put(oid, stored) for oid, stored in objects]

    def _put_large(self, fd: int, path: str | bytes, before: os.stat_result, *,
                   parallel: bool = True) -> PutResult:
        # Hash first (BLAKE3 is much faster than zstd), so content already stored costs no
        # compression; the second pass re-hashes and refuses to store if the file changed.
        # `parallel`: see StreamHasher (put_files hashes on its thread alone).
        hasher = StreamHasher(parallel=parallel)
        for chunk in iter_chunks(fd):
            hasher.update(chunk)
        oid = hasher.digest()
        if hasher.length != before.st_size:
            raise ContentChanged(os.fsdecode(path))
        if self._present(oid):
            return PutResult(oid, hasher.length, False, 0, before)
        written = 0

        def checked_chunks() -> Iterator[bytes]:
            rehash = StreamHasher(parallel=parallel)
            try:
                os.lseek(fd, 0, os.SEEK_SET)
                for chunk in iter_chunks(fd):
                    rehash.update(chunk)
                    if rehash.length > hasher.length:
                        # Grown since the first pass: stop before the encoder sees more bytes
                        # than the length it pledged (zstd would fail with its own error).
                        raise ContentChanged(os.fsdecode(path))
                    yield chunk
                after = os.fstat(fd)
            except OSError as exc:  # the file's, told apart from the store's below
                raise _Unreadable(exc) from exc
            if rehash.digest() != oid or not same_file_state(before, after):
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
        return self.get_bytes_from(oid, self.backend.get(oid))

    def get_many(self, items: Iterable[tuple[ObjectId, bytes | None]], *, verify: bool = True
                 ) -> Generator[bytes, None, None]:
        """`get_bytes` of each object of `items` in order: an id and its envelope if the caller
        has it (a fetch's), else None (read from the store). For a caller that reads many
        objects in a row (a restore): the blocks their members name are decompressed, and the
        other envelopes decoded, ahead on threads (`blocks.read_ahead`). Each content is
        verified by its hash, unless `verify` is False: then the caller hashes each before it
        uses it."""
        for oid, data, start, length in self._slices(items):
            if start or length != len(data):
                data = data[start:start + length]
            yield self._verified(oid, data) if verify else data

    def hold_blocks(self, objects: Iterable[tuple[ObjectId, bytes]]) -> None:
        """Envelopes just stored (by a fetch) that may be blocks whose members are read next:
        held in memory for their first read (`get_many_slices`), at most
        `blocks.HELD_BYTES` of them, so that it does not read them back from the store."""
        self._blocks.hold(objects)

    def get_many_slices(self, items: Iterable[tuple[ObjectId, bytes | None]]
                        ) -> Generator[Slice, None, None]:
        """`get_many(items, verify=False)` with each content as a `Slice`: a block member's
        is its block's content (shared by its members, not copied) and the member's place in
        it. Not verified: the caller hashes each content before it uses it (a restore's
        staging does, on its writer thread, before it writes the file)."""
        for _, data, start, length in self._slices(items):
            yield data, start, length

    def _slices(self, items: Iterable[tuple[ObjectId, bytes | None]]
                ) -> Iterator[tuple[ObjectId, bytes, int, int]]:
        backend = self.backend
        cache = self._blocks
        envelopes = ((oid, backend.get(oid) if stored is None else stored)
                     for oid, stored in items)
        for oid, _, data, place in blocks.read_ahead(backend, cache, envelopes, self._decode):
            if place is None:  # decoded ahead
                assert data is not None
                yield oid, data, 0, len(data)
                continue
            # A member: a slice of its block's content, loaded ahead unless that failed (then
            # the read here names the damage).
            block, offset, length = place
            if data is None or len(data) < offset + length:
                data = blocks.block_content(backend, cache, block, offset + length, oid)
            yield oid, data, offset, length

    def _decode(self, oid: ObjectId, stored: bytes) -> bytes:
        """The content of `oid`'s envelope `stored`, not verified (on any thread)."""
        return codec.decode_object(stored, oid, refs=self)

    def get_bytes_from(self, oid: ObjectId, stored: bytes) -> bytes:
        """`get_bytes` of `oid` from its envelope `stored`, which the caller has read or
        fetched already (what it names, a block or base, is read from the store); verified
        by its hash all the same."""
        return self._verified(oid, codec.decode_object(stored, oid, refs=self))

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
                data = self._verified(oid, codec.decode_object(stored, oid, refs=self))
                out.write(data)
                return len(data)
        hasher = StreamHasher()
        with self.backend.open(oid) as stream:
            for chunk in codec.iter_decode_object(stream, oid, refs=self):
                hasher.update(chunk)
                out.write(chunk)
        if hasher.digest() != oid:
            raise CorruptObject(oid, "content does not match its id")
        return hasher.length

    def verify(self, oid: ObjectId) -> int:
        """Read and verify `oid` without keeping it; returns its content size."""
        hasher = StreamHasher()
        with self.backend.open(oid) as stream:
            for chunk in codec.iter_decode_object(stream, oid, refs=self):
                hasher.update(chunk)
        if hasher.digest() != oid:
            raise CorruptObject(oid, "content does not match its id")
        return hasher.length

    # -- deltas (objstore/delta.py) ----------------------------------------------------

    def _delta_encoder(self, ledger_path: str | None) -> delta.DeltaEncoder:
        options = delta.DeltaOptions(self.options.deltas, self.options.delta_chain,
                                     self.options.stream_threshold)
        return delta.DeltaEncoder(self.backend, self, options, self.options.compression_level,
                                  delta.DeltaLedger(ledger_path),
                                  lambda: self.ensure_format(2))

    def _encode(self, oid: ObjectId, data: bytes | memoryview, base: ObjectId | None) -> bytes:
        """The envelope to store for new content: plain (with the current dictionary when it
        is small), or a delta on `base`'s version."""
        plain = self._encode_plain(data)
        return plain if base is None else self._deltas.encode(oid, data, base, plain)

    def base(self, oid: ObjectId) -> bytes:
        """`codec.RefResolver`: the verified content of a delta's base."""
        return delta.read_base(self.backend, oid, self)

    def keep_block(self, block: ObjectId, content: bytes) -> None:
        """Keep `block`'s content, verified by the caller, for the reads of its members that
        follow (a push checks a block, then its members)."""
        self._blocks.put(block, content)

    def member(self, block: ObjectId, offset: int, length: int, oid: ObjectId | None
               ) -> bytes:
        """`codec.RefResolver`: a block member's content, not yet verified (objstore/blocks.py)."""
        return blocks.read_member(self.backend, self._blocks, block, offset, length, oid)

    def delta_savings(self) -> int:
        """Bytes the deltas in the store saved over storing their contents plain."""
        return self._deltas.ledger.saved(self.backend)

    def forget_gone_deltas(self) -> None:
        """Drop what the ledger says of deltas no longer stored (after a gc)."""
        self._deltas.ledger.prune(self.backend)

    # -- trees -------------------------------------------------------------------------

    def put_tree(self, tree: Tree, *, base: ObjectId | None = None) -> ObjectId:
        return self.store_tree(tree, base=base)[0]

    def store_tree(self, tree: Tree, *, base: ObjectId | None = None) -> tuple[ObjectId, int]:
        """Store `tree`; returns its id and the bytes written (0 if it was already stored).
        `base`: the id of the directory's previous tree, which it may be stored as a delta
        against, as a blob against its previous version (objstore/delta.py decides): a big
        directory's tree is ids zstd cannot shrink, and a turn changes one entry or two."""
        data = codec.encode_tree(tree)
        oid = hash_bytes(data)
        _, stored = self._put_new(oid, data, base)
        self._remember(oid, tree)
        return oid, stored

    def tree_id(self, tree: Tree) -> ObjectId:
        """The id `tree` would have, without storing it."""
        return hash_bytes(codec.encode_tree(tree))

    def get_tree(self, oid: ObjectId, stored: bytes | None = None) -> Tree:
        """The tree `oid`, verified by its hash; `stored`: its envelope, if the caller has it
        in hand (a fetch's), so that it is not read back from the store."""
        tree = self._trees.get(oid)
        if tree is not None:
            self._trees.move_to_end(oid)
            return tree
        data = self.get_bytes(oid) if stored is None else self.get_bytes_from(oid, stored)
        tree = codec.decode_tree(data, oid)
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
        self._blocks.clear()
        self._dictionaries.forget_loaded()  # read and verified again on next use

    # -- dictionaries (objstore/dictionary.py) -------------------------------------------

    @property
    def current_dictionary(self) -> ObjectId | None:
        """The dictionary new small objects are compressed with (None: none yet, or off)."""
        current = self._dictionaries.book.current
        return None if current is None or not self.options.dictionaries else current.oid

    def dictionary(self, oid: ObjectId) -> codec.DictionaryData:
        """Dictionary `oid` (`codec.RefResolver`), verified by its first read, then cached."""
        return self._dictionaries.get(oid, self._dictionary_content)

    def _dictionary_content(self, oid: ObjectId) -> bytes:
        # Decoded without `refs`: a dictionary that names a dictionary (itself, a cycle) is
        # corrupt, never a recursion.
        return self._verified(oid, codec.decode_object(self.backend.get(oid), oid))

    def dictionary_ids(self) -> tuple[ObjectId, ...]:
        """Every dictionary the store lists: gc keeps them all."""
        return self._dictionaries.ids()

    def dictionary_savings(self) -> int:
        """Estimated bytes dictionaries saved over every put of this store (see
        objstore/dictionary.py: from counters, not a read of the objects)."""
        return self._dictionaries.counters().saved

    def train_dictionary(self, samples: Sequence[bytes]) -> ObjectId:
        """Train a dictionary on `samples`, store it and make it the one new small objects
        use (put_files trains on its own: see objstore/dictionary.py)."""
        return self._store_dictionary(train(samples, self.options.compression_level or 1))

    def _store_dictionary(self, trained: Trained) -> ObjectId:
        """Store a trained dictionary (plain) and list it as current; the store is raised to
        format 2 first."""
        self.ensure_format(2)
        oid = hash_bytes(trained.data)
        if not self._present(oid):
            self._put_absent(oid, codec.encode_object(trained.data,
                                                      self.options.compression_level))
        self.backend.sync()  # the dictionary is durable before any object that names it
        self._dictionaries.add(oid, trained.gain)
        return oid

    def _encode_plain(self, data: bytes | memoryview) -> bytes:
        """`data`'s envelope, with the current dictionary when it is small."""
        level = self.options.compression_level
        if level and len(data) <= SMALL_BOUND:
            dictionary = self._dictionaries.current(self._dictionary_content)
            if dictionary is not None:
                stored = codec.encode_with_dictionary(data, level, dictionary)
                if stored[4] == codec.CODEC_DICT:
                    self._dictionaries.note(len(stored))
                return stored
        return codec.encode_object(data, level)

    def _put_dictionary(self) -> PutDictionary | None:
        if not self.options.dictionaries or not self.options.compression_level:
            return None
        return PutDictionary(self._dictionaries, level=self.options.compression_level,
                             load=self._dictionary_content, store=self._store_dictionary)


def _own_directories(path: str) -> tuple[str, ...]:
    return os.path.join(path, "objects"), os.path.join(path, "objects", PACKS_DIR)


def check_format(path: str) -> int:
    """The format version of the store at `path`; refuse a missing store or one written by a
    newer (or unknown) format."""
    format_path = os.path.join(path, FORMAT_FILE)
    try:
        with open(open_file(format_path, os.O_RDONLY), "rb") as stream:
            text = stream.read(256).decode("ascii", "replace").strip()
    except (FileNotFoundError, NotADirectoryError):
        raise StoreNotFound(path) from None
    tag, _, version = text.partition(" ")
    if tag != _FORMAT_TAG or not version.isdigit():
        raise UnsupportedFormat(path, repr(text[:40]), FORMAT_VERSION)
    if int(version) not in READABLE_FORMATS:
        raise UnsupportedFormat(path, version, FORMAT_VERSION)
    return int(version)


class _Unreadable(Exception):  # never escapes _put_large
    """A read of the file being streamed failed (`.error`): carried through the store's
    stream writer, which could fail with an OSError of its own."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error
