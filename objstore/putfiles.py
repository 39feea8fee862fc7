"""`PutPipeline`: the batch put behind `ObjectStore.put_files`, a first snapshot's hot path.

It lives here, not in store.py, because only `put_files` needs it (and its thread pool): the
store imports it when a batch put starts. It must not change what `put_file` would give for
any one file; it only changes where and when the work is done.

The algorithm, one call of `put_files`:

    for each path, in order:
        read    the native reader reads files a few at a time (objstore/_readfiles.c); without
                it, or for a file above the stream threshold, this thread opens it; a large file
                is queued to stream on the pool (compressing is most of its cost)
        dedupe  hash the content here; content stored already, or read earlier in this call,
                is a result now, not a write
        batch   new content joins the open batch; a full batch goes to a pool thread to be
                compressed (one native zstd call, without the GIL); new small content with no
                delta hint joins the open block instead, which joins the batch when full
                (objstore/blocks.py), and the last open block, if too small to be worth one,
                joins it object by object
        write   the oldest batches, once compressed, are written in order and fill their
                results; when more than a few batches are out and the oldest is not done, this
                thread compresses one that no pool thread has started instead of waiting
        yield   every result at the head of the line that is filled
    the last batch is compressed here and written; the rest of the results are yielded

One Python thread reads and hashes; per-file work in a thread pool would be dominated by GIL
hand-offs. Memory stays bounded by a few batches per compressing thread.
"""

from __future__ import annotations

import dataclasses
import os
import stat as statmod
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from itertools import repeat
from typing import Any

from ckpt.objstore import blocks as blockmod
from ckpt.objstore import codec
from ckpt.objstore.dictionary import SMALL_BOUND, PutDictionary
from ckpt.objstore.errors import ContentChanged
from ckpt.objstore.fileread import READ_FLAGS, not_regular, read_whole
from ckpt.objstore.ids import ObjectId, hash_bytes
from ckpt.objstore.native import load_native
from ckpt.objstore.store import FileState, PutResult

# Optional (objstore/native.py): without it each file is read from Python.
_readfiles = load_native("ckpt.objstore._readfiles")
_native_read_files: Callable[..., Any] | None = (
    None if _readfiles is None else _readfiles.read_files)
_CHANGED: int = 0 if _readfiles is None else _readfiles.CHANGED
_NOT_REGULAR: int = 0 if _readfiles is None else _readfiles.NOT_REGULAR

# New objects are compressed in batches of about this many bytes or objects, with up to this
# many batches per compressing thread (plus two, at most the maximum) compressing or compressed
# while the next is read (memory: a few batches per thread).
_BATCH_BYTES = 2 << 20
_BATCH_ITEMS = 512
_BATCHES_IN_FLIGHT = 2
_MAX_BATCHES_IN_FLIGHT = 16
# The native reader takes up to this many paths, or files of this many bytes, per call: the
# cost of a call is spread, and memory ahead of the hashing stays small.
_READ_AHEAD_FILES = 64
_READ_AHEAD_BYTES = 1 << 20
# Smaller contents are stored raw: a zstd frame would not be smaller.
_MIN_COMPRESSED = 64

Outcome = PutResult | OSError | ContentChanged
PutLarge = Callable[..., PutResult]  # ObjectStore._put_large(fd, path, stat, parallel=False)
PutAbsentMany = Callable[[Sequence[tuple[ObjectId, bytes]]], list[bool]]
# ObjectStore._deltas.encode(oid, content, hint, plain envelope) -> the envelope to store
EncodeDelta = Callable[[ObjectId, bytes, ObjectId | None, bytes], bytes]


class PutPipeline:
    """The state of one `put_files` call: the results waiting in line, the batch being filled,
    the batches and large files out on the pool, and the ids read but not yet written.

    Built by `ObjectStore.put_files`, which passes the store's own steps: `refresh` (is it
    stored? keep it), `put_absent_many` (write a batch of new objects) and `put_large`
    (stream one large file).
    """

    __slots__ = ("_batch", "_block_size", "_blocks", "_dictionary", "_encode_delta",
                 "_inflight", "_keep", "_large_new", "_level", "_members", "_members_size",
                 "_pending", "_pool", "_put_absent_many", "_put_large", "_raise_format",
                 "_refresh", "_slots", "_threshold", "_workers")

    def __init__(self, *, refresh: Callable[[ObjectId], bool], put_absent_many: PutAbsentMany,
                 put_large: PutLarge, compression_level: int, stream_threshold: int,
                 threads: int, dictionary: PutDictionary | None = None,
                 encode_delta: EncodeDelta | None = None,
                 blocks: blockmod.BlockOptions | None = None,
                 raise_format: Callable[[], None] | None = None) -> None:
        self._refresh = refresh
        self._encode_delta = encode_delta
        self._put_absent_many = put_absent_many
        self._put_large = put_large
        self._level = compression_level
        self._threshold = stream_threshold
        # A pool thread per CPU but one: this thread, the critical path, reads and hashes and
        # compresses when it is ahead; one more busy thread than cores gets it preempted.
        self._workers = (threads or os.cpu_count() or 1) - 1
        self._keep = min(_BATCHES_IN_FLIGHT * self._workers + 2, _MAX_BATCHES_IN_FLIGHT)
        # Started with the first full batch: a call whose files fit in one batch (a turn's)
        # compresses it here rather than pay for a pool's start and hand-offs.
        self._pool: ThreadPoolExecutor | None = None
        self._slots: deque[list[Any]] = deque()  # [result, or None while it is out], in order
        self._inflight: deque[_Batch | _LargeFile] = deque()
        self._large_new: set[ObjectId] = set()  # large contents this call reported new
        self._pending: set[ObjectId] = set()  # read here, not written yet: a copy is not new
        self._dictionary = dictionary  # None: dictionaries are off (or nothing compresses)
        # None: blocks are off (or nothing compresses).
        self._blocks = blocks if blocks is not None and blocks.enabled and self._level else None
        self._batch = self._new_batch()
        self._block_size = 0 if self._blocks is None else self._blocks.block_size
        # Small new contents gathered for the next block: id, content, stat, result slot;
        # and their size in all.
        self._members: list[tuple[ObjectId, bytes, FileState, list[Any]]] = []
        self._members_size = 0
        self._raise_format = raise_format

    def run(self, paths: Iterable[str | bytes],
            bases: Iterable[ObjectId | None] | None = None) -> Iterator[Outcome]:
        """Each path's outcome, in order, as soon as it and those before it are known.
        `bases`: a delta hint per path (see `ObjectStore.put_files`)."""
        # The per-file cost of a first snapshot is this loop: it makes one or two calls per
        # file and allocates nothing per file beyond the result and its slot.
        slots = self._slots
        hints = repeat(None) if bases is None else iter(bases)
        try:
            for (path, read), hint in zip(self._read_ahead(paths), hints):
                if read is None:
                    read = self._read_here(path)
                    if type(read) is _LargeFile:
                        self._stream_on_pool(read)
                        read = None
                result = self._dedupe(read[0], read[1], hint) if type(read) is tuple else read
                if result is not None:
                    if not slots:
                        yield result
                        continue
                    slots.append([result])
                while slots and slots[0][0] is not None:
                    yield slots.popleft()[0]
            self._write_last_batch()
            while slots:
                yield slots.popleft()[0]
        finally:
            self._shut_down()

    # -- read ------------------------------------------------------------------------------

    def _read_ahead(self, paths: Iterable[str | bytes]) -> Iterable[tuple[str | bytes, Any]]:
        """Each path with what the native reader made of it (see `_read_natively`), or with
        None for every path when it is not built: this thread reads them."""
        if _native_read_files is None:
            return ((path, None) for path in paths)
        return _read_natively(paths, self._threshold)

    def _read_here(self, path: str | bytes) -> tuple[bytes, FileState] | Outcome | _LargeFile:
        """Read one file in this thread: `(content, stat)`; a large file's outcome (streamed
        here when nothing compresses on a pool) or its `_LargeFile` to stream on the pool; or
        the error `put_file` would raise for it."""
        try:
            fd = os.open(path, READ_FLAGS)
            try:
                st = os.fstat(fd)
                if not statmod.S_ISREG(st.st_mode):
                    raise not_regular(path)
                if st.st_size <= self._threshold:
                    return read_whole(fd, path, st), st
                if self._level == 0 or self._workers == 0:
                    return self._put_large(fd, path, st, parallel=False)
                large = _LargeFile(partial(self._put_large, fd, path, st, parallel=False), fd)
                fd = -1  # the _LargeFile owns it now
                return large
            finally:
                if fd >= 0:
                    os.close(fd)
        except (OSError, ContentChanged) as exc:
            return exc

    # -- dedupe ----------------------------------------------------------------------------

    def _dedupe(self, data: bytes, before: FileState, hint: ObjectId | None) -> PutResult | None:
        """The result of content already stored (or read earlier in this call); else None,
        and the content joins the batch."""
        oid = hash_bytes(data, parallel=False)  # the other cores are compressing
        if oid in self._pending or self._refresh(oid):
            return PutResult(oid, len(data), False, 0, before)
        self._add_to_batch(oid, data, before, hint)
        return None

    # -- batch -----------------------------------------------------------------------------

    def _add_to_batch(self, oid: ObjectId, data: bytes, before: FileState,
                      hint: ObjectId | None) -> None:
        self._pending.add(oid)
        slot: list[Any] = [None]
        self._slots.append(slot)
        if self._dictionary is not None and len(data) <= SMALL_BOUND:
            self._dictionary.offer(data)
        blocks = self._blocks
        # Contents too short to compress stay raw objects (a member's envelope would weigh
        # more); so a block of two members or more is longer than any of them, never one of
        # them under another name.
        if (blocks is not None and hint is None
                and _MIN_COMPRESSED < len(data) <= blocks.small_limit):
            members = self._members
            members.append((oid, data, before, slot))
            self._members_size += len(data)
            if self._members_size >= self._block_size and len(members) > 1:
                self._seal_block()
            return
        self._add_object(oid, data, before, slot, hint)

    def _add_object(self, oid: ObjectId, data: bytes, before: FileState, slot: list[Any],
                    hint: ObjectId | None) -> None:
        """Content to store as an object of its own, in the open batch."""
        batch = self._batch
        batch.add(oid, data, before, slot, self._level > 0 and len(data) > _MIN_COMPRESSED)
        if hint is not None and self._encode_delta is not None:
            batch.hints[oid] = hint
        self._send_if_full()

    def _send_if_full(self) -> None:
        batch = self._batch
        if batch.size >= _BATCH_BYTES or len(batch.items) >= _BATCH_ITEMS:
            self._send_batch()

    def _seal_block(self) -> None:
        """The gathered contents as one block of the open batch."""
        members, self._members, self._members_size = self._members, [], 0
        content = b"".join([member[1] for member in members])
        oid = hash_bytes(content, parallel=False)
        # A block of the same content stored already (the same files put again): only the
        # members are new.
        present = oid in self._pending or self._refresh(oid)
        if not present:
            self._pending.add(oid)
        at = 0
        placed = []
        for member, data, before, slot in members:
            placed.append((member, len(data), before, slot, at))
            at += len(data)
        self._batch.add_block(_Block(oid, content, placed, present=present))
        self._send_if_full()

    def _flush_members(self) -> None:
        """The last gathered contents: a block if worth one, else objects one by one."""
        if not self._members:
            return
        if blockmod.worth_a_block(len(self._members), self._members_size):
            self._seal_block()
            return
        members, self._members, self._members_size = self._members, [], 0
        for oid, data, before, slot in members:
            self._add_object(oid, data, before, slot, None)

    def _send_batch(self) -> None:
        """The full batch to a pool thread (here, when nothing compresses on a pool)."""
        batch, self._batch = self._batch, self._new_batch()
        if self._pool is None and self._level > 0 and self._workers > 0:
            self._pool = self._new_pool()
        if self._pool is None:
            batch.compress(self._level)
        else:
            batch.submit(self._pool, self._level)
        self._inflight.append(batch)
        self._write_compressed(self._keep)

    def _stream_on_pool(self, large: _LargeFile) -> None:
        """A large file streams on the pool, in line with the batches."""
        self._pool = self._pool or self._new_pool()
        self._slots.append(large.slot)
        large.submit(self._pool)
        self._inflight.append(large)
        self._write_compressed(self._keep)

    def _report_new_once(self, slot: list[Any]) -> None:
        """Two copies of one large file stream side by side and may both find the object
        absent: in order, only the first one that says new stays new, as put_file would say."""
        result = slot[0]
        if type(result) is PutResult and result.is_new:
            if result.oid in self._large_new:
                slot[0] = dataclasses.replace(result, is_new=False, stored_bytes=0)
            else:
                self._large_new.add(result.oid)

    def _new_batch(self) -> _Batch:
        # With blocks, what is compressed alone (files above the small limit, mostly) is
        # compressed at a level above 1 too (objstore/blocks.py).
        level = self._level if self._blocks is None else blockmod.plain_level(self._level)
        return _Batch(None if self._dictionary is None else self._dictionary.active, level)

    def _new_pool(self) -> ThreadPoolExecutor:
        # Whole batches side by side, one thread each: a batch split across the threads leaves
        # them idle at its tail and while the next one is read.
        return ThreadPoolExecutor(self._workers, thread_name_prefix="objstore-compress")

    # -- write -----------------------------------------------------------------------------

    def _write_compressed(self, keep: int) -> None:
        """Write the oldest batches in order as they are compressed, until at most `keep` are
        left. While the oldest is still compressing and more than `keep` are out, this thread
        compresses the oldest batch no pool thread has started rather than wait."""
        inflight = self._inflight
        while inflight:
            if not inflight[0].done():
                if len(inflight) <= keep:
                    return
                if any(batch.take_back(self._level) for batch in inflight):
                    continue
            oldest = inflight.popleft()
            if isinstance(oldest, _LargeFile):
                oldest.settle()
                self._report_new_once(oldest.slot)
            else:
                self._write_batch(oldest)

    def _write_batch(self, batch: _Batch) -> None:
        plain, small, block_frames = batch.frames()
        if batch.dictionary is not None:
            objects = self._envelopes_with_dictionary(batch, plain, small)
        else:
            envelope = codec.envelope
            objects = [
                (oid, envelope(data, plain[index] if index >= 0 else None))
                for oid, data, _, _, index in batch.items
            ]
        if batch.hints:
            self._choose_deltas(batch, objects)
        count = len(objects)
        if batch.blocks:
            self._add_blocks(batch, block_frames, objects)
        written = self._put_absent_many(objects)
        # A concurrent writer may have stored one since the refresh: then nothing was written.
        pending = self._pending
        for (oid, data, before, slot, _), (_, stored), is_new in zip(
                batch.items, objects, written):
            slot[0] = PutResult(oid, len(data), is_new, len(stored) if is_new else 0, before)
            pending.discard(oid)
        if batch.blocks:
            self._fill_members(batch, objects[count:], written[count:])

    def _add_blocks(self, batch: _Batch, frames: Sequence[Any],
                    objects: list[tuple[ObjectId, bytes]]) -> None:
        """Each block of `batch` (unless stored already), then its members, onto `objects`."""
        if self._raise_format is not None:
            self._raise_format()  # before the first member: an older ckpt refuses the store
        member_envelope = codec.member_envelope
        compressed = iter(frames)  # one frame per block not stored already, in order
        for block in batch.blocks:
            if not block.present:
                objects.append((block.oid, codec.envelope(block.content, next(compressed))))
            objects.extend((oid, member_envelope(size, block.oid, offset))
                           for oid, size, _, _, offset in block.members)

    def _fill_members(self, batch: _Batch, objects: Sequence[tuple[ObjectId, bytes]],
                      written: Sequence[bool]) -> None:
        """The results of the blocks' members: each is charged its envelope and its share of
        its block's stored bytes, so that the results add up to what was written."""
        pending = self._pending
        at = 0
        for block in batch.blocks:
            block_stored = 0
            if not block.present:
                block_stored = len(objects[at][1]) if written[at] else 0
                pending.discard(block.oid)
                at += 1
            share = block_stored / max(1, len(block.content))
            for oid, size, before, slot, _ in block.members:
                is_new = written[at]
                stored = len(objects[at][1]) + round(size * share) if is_new else 0
                slot[0] = PutResult(oid, size, is_new, stored, before)
                pending.discard(oid)
                at += 1

    def _envelopes_with_dictionary(self, batch: _Batch, plain: Sequence[Any],
                                   small: Sequence[Any]) -> list[tuple[ObjectId, bytes]]:
        """`_write_batch`'s envelopes of a batch made with a dictionary: the others' frames
        and the small objects' (see `_Batch.add`)."""
        assert batch.dictionary is not None and self._dictionary is not None
        dictionary_id = batch.dictionary[0]
        objects = []
        for oid, data, _, _, index in batch.items:
            if index <= _SMALL:
                stored = codec.dictionary_envelope(data, small[_SMALL - index], dictionary_id)
                if stored[4] == codec.CODEC_DICT:
                    self._dictionary.written(data, stored)
            else:
                stored = codec.envelope(data, plain[index] if index >= 0 else None)
            objects.append((oid, stored))
        return objects

    def _choose_deltas(self, batch: _Batch, objects: list[tuple[ObjectId, bytes]]) -> None:
        """Each object of `batch` with a hint as a delta where it pays (objstore/delta.py);
        here, in this thread: a turn's few changed files, each against its chain."""
        encode = self._encode_delta
        assert encode is not None  # hints are only kept with it
        hints = batch.hints
        for at, (oid, data, _, _, _) in enumerate(batch.items):
            hint = hints.get(oid)
            if hint is not None:
                objects[at] = (oid, encode(oid, data, hint, objects[at][1]))

    def _write_last_batch(self) -> None:
        self._flush_members()
        self._batch.compress(self._level)  # no pool thread could start it sooner than this one
        self._inflight.append(self._batch)
        self._write_compressed(0)

    def _shut_down(self) -> None:
        """Wait for the pool (cancelling what has not started) and close the descriptors of
        large files it never streamed."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            for item in self._inflight:
                if isinstance(item, _LargeFile):
                    item.discard()


class _Batch:
    """New objects read by `put_files`, compressed together, then written in order."""

    __slots__ = ("_frames", "_future", "blocks", "dictionary", "hints", "inputs", "items",
                 "plain_level", "size", "small")

    def __init__(self, dictionary: codec.Dictionary | None = None,
                 plain_level: int = 0) -> None:
        self.plain_level = plain_level  # of `inputs` (the batch's level when 0)
        # oid, content, stat before reading, result slot, index in `inputs` (-1: stored raw;
        # with a dictionary, `_SMALL - i` for `small[i]`)
        self.items: list[tuple[ObjectId, bytes, FileState, list[Any], int]] = []
        self.inputs: list[bytes] = []  # the contents to compress
        self.dictionary = dictionary  # small contents are compressed with it
        self.small: list[bytes] = []  # the contents to compress with `dictionary`
        self.hints: dict[ObjectId, ObjectId] = {}  # id -> its delta hint, where one was given
        self.blocks: list[_Block] = []  # written after the objects above, each before its members
        self.size = 0
        self._future: Future[Any] | None = None
        self._frames: Any = ((), (), ())  # compressed by `compress`, in the calling thread

    def add(self, oid: ObjectId, data: bytes, before: FileState, slot: list[Any],
            compress: bool) -> None:
        index = -1
        if compress and self.dictionary is not None and len(data) <= SMALL_BOUND:
            index = _SMALL - len(self.small)
            self.small.append(data)
        elif compress:
            index = len(self.inputs)
            self.inputs.append(data)
        self.items.append((oid, data, before, slot, index))
        self.size += len(data)

    def add_block(self, block: _Block) -> None:
        self.blocks.append(block)
        self.size += len(block.content)

    def _work(self) -> tuple[list[bytes], list[bytes], list[bytes]]:
        """What to compress: (plain contents, small ones for the dictionary, blocks)."""
        return self.inputs, self.small, [b.content for b in self.blocks if not b.present]

    def _idle(self) -> bool:
        return not (self.inputs or self.small or any(not b.present for b in self.blocks))

    def submit(self, pool: ThreadPoolExecutor | None, level: int) -> None:
        """Compress on one of `pool`'s threads, one native zstd thread (batches run side by
        side, see `PutPipeline._new_pool`)."""
        if pool is not None and level > 0 and not self._idle():
            self._future = pool.submit(_compress_all, *self._work(), level, self.dictionary,
                                       self.plain_level or level)

    def compress(self, level: int) -> None:
        """Compress here, in the calling thread."""
        if level > 0 and not self._idle():
            self._frames = _compress_all(*self._work(), level, self.dictionary,
                                         self.plain_level or level)

    def take_back(self, level: int) -> bool:
        """Compress here if no pool thread has started on this batch: whether it did."""
        if self._future is None or not self._future.cancel():
            return False
        self._future = None
        self.compress(level)
        return True

    def done(self) -> bool:
        return self._future is None or self._future.done()

    def frames(self) -> tuple[Sequence[Any], Sequence[Any], Sequence[Any]]:
        """The frames of `_compress_all`: (plain, small with the dictionary, blocks)."""
        frames: tuple[Sequence[Any], Sequence[Any], Sequence[Any]] = (
            self._future.result() if self._future is not None else self._frames)
        return frames


_SMALL = -2  # `_Batch.items` index of its first small content (then -3, -4, ...)


class _Block:
    """A block of a batch: its id and content, and its members as (id, size, stat, result
    slot, offset); `present`: stored already (only its members are written)."""

    __slots__ = ("content", "members", "oid", "present")

    def __init__(self, oid: ObjectId, content: bytes,
                 members: list[tuple[ObjectId, int, FileState, list[Any], int]], *,
                 present: bool) -> None:
        self.oid = oid
        self.content = content
        self.members = members
        self.present = present


def _compress_all(inputs: list[bytes], small: list[bytes], blocks: list[bytes], level: int,
                  dictionary: codec.Dictionary | None, plain_level: int
                  ) -> tuple[Sequence[Any], Sequence[Any], Sequence[Any]]:
    """A batch's frames: `inputs`' plain at `plain_level`, `small`'s with `dictionary` at
    `level`, `blocks`' at the block level (objstore/blocks.py)."""
    plain: Sequence[Any] = codec.compress_batch(inputs, plain_level, 1) if inputs else ()
    frames: Sequence[Any] = (codec.compress_batch_with_dictionary(small, level, dictionary)
                             if small and dictionary is not None else ())
    packed: Sequence[Any] = (codec.compress_batch(blocks, blockmod.block_level(level), 1)
                             if blocks else ())
    return plain, frames, packed


class _LargeFile:
    """A file above the stream threshold that `put_files` streams on a pool thread, in the
    line of its batches: `put` on its open descriptor, closed when the call is over (or by
    `discard`, if the call was cancelled and never ran)."""

    __slots__ = ("_fd", "_future", "_outcome", "_put", "slot")

    def __init__(self, put: Callable[[], PutResult], fd: int,
                 slot: list[Any] | None = None) -> None:
        self._put = put
        self._fd = fd
        self.slot: list[Any] = [None] if slot is None else slot
        self._future: Future[Outcome] | None = None
        self._outcome: Outcome | None = None

    def _run(self) -> Outcome:
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
                yield path, not_regular(path)
            else:
                yield path, OSError(outcome, os.strerror(outcome), path)
        start += len(outcomes)
