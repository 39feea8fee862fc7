"""Blocks (codec 4): small new blobs of one `put_files` call stored together in one object.

What lives here: the rules of which objects go into a block (`BlockOptions`), the read of a
member (`read_member`: the prefix of its block up to the member's end, decompressed once and
kept in a small `BlockCache`), and the read ahead of many objects in a row (`read_ahead`:
the blocks of members decompressed whole, other envelopes decoded, on threads ahead of the
reader). What does not: the
envelope bytes (codec.py), the gathering of members in a put (putfiles.py), the ids gc and
fsck follow (delta.py's `envelope_closure` follows `codec.envelope_refs`, which names a
member's block).

A block is an ordinary blob: its content is its members' contents concatenated in the order
they were put (path order in a snapshot), its id the BLAKE3 of that, compressed as one zstd
frame at `block_level`. Each member is an object of its own id whose envelope names the block,
an offset and a length; a read of a member verifies the member's hash as any read does. zstd
finds the repeats between neighbouring small files that a frame per file cannot, so a block of
sources weighs about a fifth less than their frames one by one, for the same CPU at level 3.

A dead member keeps its block alive (gc follows the reference, as from a delta to its base):
the block's bytes are freed only when none of its members is kept.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass
from itertools import chain

from ckpt.objstore import codec
from ckpt.objstore.backend import Backend
from ckpt.objstore.errors import CorruptObject, ObjectNotFound
from ckpt.objstore.ids import ObjectId
from ckpt.objstore.threads import shared_pool

# Raw bytes of a block: zstd's window spans it whole; past this size a block saves little more
# (bench/storage.py) and a read of one member decompresses up to all of it.
DEFAULT_BLOCK_SIZE = 1 << 20
MAX_BLOCK_SIZE = 16 << 20  # a read of a member decompresses up to its whole block
# Larger contents are stored one by one as ever: zstd already has context enough in them.
SMALL_LIMIT = 256 << 10
# A put's leftover below both bounds is stored per object: a small turn (a few edited files)
# stores as without blocks, with the dictionary.
MIN_BLOCK_BYTES = 32 << 10
MIN_BLOCK_MEMBERS = 4  # at least 2 (see putfiles.py)
# Blocks compress at least at this level: on a block it costs about what level 1 with a
# dictionary costs per file, and saves more. (Level 5, zstd's greedy matcher, finds a tenth
# more in a block of sources for twice the CPU: `compression_level = 5` buys that.)
MIN_BLOCK_LEVEL = 3
# With blocks on, what a put compresses alone in its batches (larger files) is compressed at
# least at this level: on large files level 3 costs little more than level 1.
MIN_PLAIN_LEVEL = 3
# Decompressed blocks kept for reads (a whole-tree restore reads in path order, block order).
CACHE_BYTES = 8 << 20
# A read ahead (`read_ahead`) decompresses this many blocks beyond the one being read, on
# this many threads (zstd runs without the GIL: while the caller is busy with one block's
# members, or waits for its writer, the next blocks are being decompressed), and holds at
# most this many bytes of envelopes read ahead of its caller.
AHEAD = 6
AHEAD_THREADS = 2
AHEAD_BYTES = 16 << 20
# Envelopes that are not members (larger files, each its own zstd frame) decoded ahead of the
# caller on the same threads, when it asks for that.
AHEAD_DECODES = 4
# Blocks `read_ahead` keeps its load of for members that come back to them.
RECENT_BLOCKS = 8
# Envelopes of blocks a fetch has stored that a `BlockCache` holds for their first read (a
# fetch stores a block just before its members, which the restore reads next).
HELD_BYTES = 16 << 20


@dataclass(frozen=True, slots=True)
class BlockOptions:
    block_size: int = DEFAULT_BLOCK_SIZE  # 0: no blocks
    small_limit: int = SMALL_LIMIT

    @property
    def enabled(self) -> bool:
        return self.block_size > 0


def block_level(level: int) -> int:
    """The zstd level of a block in a store of compression level `level` (> 0)."""
    return max(MIN_BLOCK_LEVEL, level)


def plain_level(level: int) -> int:
    """The zstd level, with blocks on, of what a put compresses alone in a store of
    compression level `level` (> 0)."""
    return max(MIN_PLAIN_LEVEL, level)


def worth_a_block(members: int, size: int) -> bool:
    """Whether `members` contents of `size` bytes in all go into a block (else one by one)."""
    return members >= MIN_BLOCK_MEMBERS and size >= MIN_BLOCK_BYTES


class BlockCache:
    """Decompressed prefixes of blocks lately read, by id, at most `limit` bytes in all
    (least recently used dropped first); and the envelopes of blocks a fetch has just stored
    (`hold`), at most `held_limit` bytes, until a read takes them. Thread-safe: restores read
    on several threads."""

    __slots__ = ("_entries", "_held", "_held_limit", "_held_size", "_limit", "_lock", "_size")

    def __init__(self, limit: int = CACHE_BYTES, held_limit: int = HELD_BYTES) -> None:
        self._entries: OrderedDict[ObjectId, bytes] = OrderedDict()
        self._limit = limit
        self._size = 0
        self._held: OrderedDict[ObjectId, bytes] = OrderedDict()
        self._held_limit = held_limit
        self._held_size = 0
        self._lock = threading.Lock()

    def hold(self, objects: Iterable[tuple[ObjectId, bytes]]) -> None:
        """Keep these block envelopes, just stored, for the read that comes for each (the
        oldest dropped first past the limit): it need not read them back from the store."""
        with self._lock:
            for block, stored in objects:
                if len(stored) > self._held_limit or block in self._held:
                    continue
                self._held[block] = stored
                self._held_size += len(stored)
            while self._held_size > self._held_limit:
                _, dropped = self._held.popitem(last=False)
                self._held_size -= len(dropped)

    def take(self, block: ObjectId) -> bytes | None:
        """The envelope of `block` if it is held (no longer afterwards)."""
        with self._lock:
            stored = self._held.pop(block, None)
            if stored is not None:
                self._held_size -= len(stored)
            return stored

    def get(self, block: ObjectId) -> bytes | None:
        with self._lock:
            data = self._entries.get(block)
            if data is not None:
                self._entries.move_to_end(block)
            return data

    def put(self, block: ObjectId, data: bytes) -> None:
        if len(data) > self._limit:
            return
        with self._lock:
            old = self._entries.pop(block, None)
            if old is not None:
                self._size -= len(old)
            self._entries[block] = data
            self._size += len(data)
            while self._size > self._limit:
                _, dropped = self._entries.popitem(last=False)
                self._size -= len(dropped)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._size = 0
            self._held.clear()
            self._held_size = 0


def read_member(backend: Backend, cache: BlockCache, block: ObjectId, offset: int,
                length: int, oid: ObjectId | None) -> bytes:
    """Bytes [offset, offset + length) of `block`'s content, for the member `oid` (not
    verified: the caller hashes the member). Whatever keeps the block from serving is the
    member's damage, named for it: `CorruptObject(oid, ...)`.

    The first read of a block decompresses its prefix up to this member's end; a later read
    past that prefix decompresses the whole block, so a read in block order decompresses each
    block at most twice."""
    end = offset + length
    return block_content(backend, cache, block, end, oid)[offset:end]


def block_content(backend: Backend, cache: BlockCache, block: ObjectId, end: int,
                  oid: ObjectId | None) -> bytes:
    """`block`'s content up to `end` at least (the member `oid` ends there), from `cache` or
    decompressed into it (see `read_member`)."""
    known = cache.get(block)
    if known is not None and len(known) >= end:
        return known
    content = _content(backend, block, end, oid, whole=known is not None)
    cache.put(block, content)
    return content


def _content(backend: Backend, block: ObjectId, end: int, oid: ObjectId | None, *,
             whole: bool, stored: bytes | None = None) -> bytes:
    """`block`'s content, whole or up to `end` at least, from its envelope `stored` (None:
    read from `backend`); CorruptObject naming the member `oid` (None: the block itself) if
    the block cannot serve bytes up to `end`."""
    try:
        if stored is None:
            stored = backend.get(block)
        kind, size = codec.read_header(stored, block)
    except ObjectNotFound:
        raise CorruptObject(oid, f"its block {block.hex()} is missing") from None
    except CorruptObject as exc:
        raise CorruptObject(oid, f"its block {block.hex()} is damaged ({exc.reason})") from None
    if end > size:
        raise CorruptObject(oid, f"it lies outside its block {block.hex()}")
    if kind == codec.CODEC_RAW:
        content = bytes(memoryview(stored)[codec.HEADER_SIZE:])
    elif kind == codec.CODEC_ZSTD:
        content = _decompressed(stored, block, size if whole else end, oid)
    else:
        raise CorruptObject(oid, f"its block {block.hex()} is not a plain object")
    if len(content) < end:
        raise CorruptObject(oid, f"its block {block.hex()} is damaged (short content)")
    return content


# What `read_ahead` gives back for each item: its id, its envelope, and either its content as
# `decode` gave it and None, or, for a block member, its block's content (None where the
# threads could not load the block) and its place in it (block id, offset, length).
Ahead = tuple[ObjectId, bytes, bytes | None, tuple[ObjectId, int, int] | None]


def read_ahead(backend: Backend, cache: BlockCache, items: Iterable[tuple[ObjectId, bytes]],
               decode: Callable[[ObjectId, bytes], bytes]) -> Iterator[Ahead]:
    """`items` (ids and their envelopes) again, in order, for a caller that decodes them all
    (a restore), each as an `Ahead`. Meanwhile `AHEAD_THREADS` threads (a shared pool)
    decompress each block the members name, whole, up to `AHEAD` blocks before the first of
    those members is given back (and put in `cache` then, for the readers that come back to
    it); and run `decode` on each envelope that is not a member (a damaged member envelope
    too: its decode says why), up to `AHEAD_DECODES` of them ahead. zstd runs outside the
    GIL, so the caller's hashing and writing of one content overlap the decompression of the
    next ones. At most `AHEAD_BYTES` of envelopes and decoded contents are read ahead of the
    caller. A block the threads cannot read is left to the member's own read, which names
    the member and the damage; what `decode` raises is raised when its item's turn comes."""
    source = iter(items)
    pending: deque[tuple[ObjectId, bytes, tuple[ObjectId, int, int] | None,
                         Future[bytes | None], int]] = deque()
    # The blocks asked for lately: a member whose block was loaded a few blocks ago (members
    # pushed apart from their block arrive out of block order) uses that load again instead
    # of decompressing the block on the caller's thread once the cache has dropped it.
    recent: OrderedDict[ObjectId, Future[bytes | None]] = OrderedDict()
    unused: set[ObjectId] = set()  # blocks asked for that no member given back has used yet
    cached: ObjectId | None = None  # the block last put in the cache (its members come in a row)
    content: bytes | None = None  # its content
    held = decoding = 0
    exhausted = False
    pool = shared_pool("ckpt-blocks", AHEAD_THREADS)
    try:
        while True:
            while (not exhausted and len(unused) <= AHEAD and decoding < AHEAD_DECODES
                   and held < AHEAD_BYTES):
                item = next(source, None)
                if item is None:
                    exhausted = True
                    break
                oid, stored = item
                place = codec.member_place(stored)
                future: Future[bytes | None] | None
                size = len(stored)
                if place is not None:
                    block = place[0]
                    future = recent.get(block)
                    if future is None:
                        known = cache.get(block)  # loaded for an earlier run of members
                        if known is not None:
                            future = Future()
                            future.set_result(known)
                        else:
                            future = pool.submit(_whole_or_none, backend, cache, block)
                        recent[block] = future
                        unused.add(block)
                        if len(recent) > RECENT_BLOCKS:
                            recent.popitem(last=False)
                    else:
                        recent.move_to_end(block)
                else:
                    future = pool.submit(decode, oid, stored)
                    decoding += 1
                    size += _declared_size(stored)
                pending.append((oid, stored, place, future, size))
                held += size
            if not pending:
                return
            oid, stored, place, future, size = pending.popleft()
            held -= size
            if place is None:
                decoding -= 1
                yield oid, stored, future.result(), None
            else:
                block = place[0]
                unused.discard(block)
                if block != cached:
                    content = future.result()
                    cached = block
                    if content is not None:
                        # Again for each run of its members: the cache may have dropped it.
                        cache.put(block, content)
                yield oid, stored, content, place
    finally:  # on a raise or an early close: none of these loads outlives the caller's read
        futures.wait([future for future in chain(recent.values(), (p[3] for p in pending))
                      if not future.cancel()])


def _declared_size(stored: bytes) -> int:
    """The content size an envelope's header declares (0 for one too short to say: its
    decode says why)."""
    return int.from_bytes(stored[5:codec.HEADER_SIZE], "little")


def _whole_or_none(backend: Backend, cache: BlockCache, block: ObjectId) -> bytes | None:
    try:
        return _content(backend, block, 0, None, whole=True, stored=cache.take(block))
    except CorruptObject:
        return None


def _decompressed(stored: bytes, block: ObjectId, size: int, oid: ObjectId | None) -> bytes:
    frame = memoryview(stored)[codec.HEADER_SIZE:]
    try:
        return codec.decompress_prefix(frame, size, block, declared=int.from_bytes(
            stored[5:codec.HEADER_SIZE], "little"))
    except CorruptObject as exc:
        raise CorruptObject(oid, f"its block {block.hex()} is damaged ({exc.reason})") from None
