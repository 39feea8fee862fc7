"""Pack and pack-index file formats, the one writer of packs, and bounded readers of records.

It owns bytes on disk only: which objects go into which pack, when a pack is sealed, and how
indexes are merged into a lookup table are `pack.py`'s business. Nothing here hashes content
or knows the object envelope: records are opaque stored bytes, as for every backend.

    pack:    b"CKPACK\\x00\\x01" | record*
    record:  oid (32) | length u64 | crc32 u32 of (stored bytes | oid | length) | stored bytes
    index:   b"CKPIDX\\x00\\x01" | count u64 | pack_size u64 | oid (32) x count, sorted
             | (offset u64, length u64) x count | BLAKE3 of everything before it (32)

Integers are little-endian; an index `offset` is where a record's stored bytes start. A pack is
self-describing, so its index can be rebuilt from it alone (`scan_pack`); the crc lets a scan
stop at a torn or zero-filled tail instead of indexing garbage under a real id.

A writer creates its pack under a temp name, takes an exclusive `flock` on it and only then
renames it to `pack-<random>.pack`: a named pack whose lock can be taken has no live writer.
The lock is dropped when the writer seals the pack (writes its index) or its process dies.
"""

from __future__ import annotations

import fcntl
import io
import os
import struct
import sys
import zlib
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import accumulate, repeat
from operator import add, itemgetter
from typing import BinaryIO, cast

from ckpt.objstore.atomicfile import sync_directory, write_atomically
from ckpt.objstore.backend import FsyncPolicy
from ckpt.objstore.ids import OID_SIZE, ObjectId, hash_bytes
from ckpt.objstore.native import load_native
from ckpt.objstore.safeopen import open_file

_native = load_native("ckpt.objstore._records")

PACK_MAGIC = b"CKPACK\x00\x01"
INDEX_MAGIC = b"CKPIDX\x00\x01"
RECORD = struct.Struct("<32sQI")
_LENGTH = struct.Struct("<Q")
_INDEX_HEADER = struct.Struct("<8sQQ")
_TRAILER = OID_SIZE
TEMP_PREFIX = ".tmp-"
_WRITE_BUFFER = 256 << 10
_COPY_CHUNK = 1 << 20

Entry = tuple[ObjectId, int, int]  # oid, offset of the stored bytes, length


class CorruptIndex(ValueError):
    """An index file that is truncated, foreign, or fails its checksum."""


def _record_crc(oid: bytes, stored: bytes | memoryview) -> int:
    # Content first, so a streamed record needs one pass (its length is known only at the end).
    return zlib.crc32(oid + _LENGTH.pack(len(stored)), zlib.crc32(stored))


# zlib's crc32 and the crc of a record; the native ones (objstore/_records.c) give the same
# results at several times the speed.
crc32: Callable[..., int] = zlib.crc32 if _native is None else _native.crc32
record_crc: Callable[[bytes, bytes | memoryview], int] = (
    _record_crc if _native is None else _native.record_crc)


def frame_records(objects: Sequence[tuple[ObjectId, bytes]], crcs: Sequence[int] | None,
                  buffer: bytearray) -> memoryview | bytes:
    """The records of `objects` one after another, as a pack holds them; `crcs`: each one's
    `record_crc`, or None to compute them. The native framing writes them into `buffer`
    (which it grows and never shrinks, so that its pages are written again, not fresh) and
    returns a view of them: release it before the next call."""
    if _native is not None:
        size: int = _native.frame(objects, crcs, buffer)
        return memoryview(buffer)[:size]
    if crcs is None:
        crcs = [record_crc(oid, stored) for oid, stored in objects]
    pack = RECORD.pack
    return b"".join([part for (oid, stored), crc in zip(objects, crcs)
                     for part in (pack(oid, len(stored), crc), stored)])


def list_packs(directory: str) -> tuple[set[str], set[str], set[str]]:
    """Pack names: (with a pack and an index, with only a pack, with only an index)."""
    try:
        files = os.listdir(directory)
    except FileNotFoundError:
        return set(), set(), set()
    packs = {f[:-5] for f in files if f.startswith("pack-") and f.endswith(".pack")}
    indexed = {f[:-4] for f in files if f.startswith("pack-") and f.endswith(".idx")}
    return packs & indexed, packs - indexed, indexed - packs


def pack_path(directory: str, name: str) -> str:
    return f"{directory}/{name}.pack"


def index_path(directory: str, name: str) -> str:
    return f"{directory}/{name}.idx"


# -- index files -----------------------------------------------------------------------------


_by_oid = itemgetter(0)


def encode_index(entries: Iterable[Entry], pack_size: int) -> bytes:
    rows = sorted(entries, key=_by_oid)  # ids are unique: no need to compare whole tuples
    locations = array("Q", [value for _, offset, length in rows for value in (offset, length)])
    if sys.byteorder != "little":
        locations.byteswap()
    body = b"".join(
        (
            _INDEX_HEADER.pack(INDEX_MAGIC, len(rows), pack_size),
            b"".join(oid for oid, _, _ in rows),
            locations.tobytes(),
        )
    )
    return body + hash_bytes(body)


def decode_index(data: bytes) -> tuple[bytes, array[int], int]:
    """(sorted oids, [offset, length, offset, length, ...], pack size) or `CorruptIndex`."""
    if len(data) < _INDEX_HEADER.size + _TRAILER:
        raise CorruptIndex("truncated")
    magic, count, pack_size = _INDEX_HEADER.unpack_from(data)
    if magic != INDEX_MAGIC:
        raise CorruptIndex("bad magic")
    body_end = _INDEX_HEADER.size + count * (OID_SIZE + 16)
    if len(data) != body_end + _TRAILER or hash_bytes(memoryview(data)[:body_end]) != data[body_end:]:
        raise CorruptIndex("size or checksum mismatch")
    oids_end = _INDEX_HEADER.size + count * OID_SIZE
    locations = array("Q")
    locations.frombytes(memoryview(data)[oids_end:body_end])
    if sys.byteorder != "little":
        locations.byteswap()
    return data[_INDEX_HEADER.size : oids_end], locations, pack_size


def read_index(directory: str, name: str) -> tuple[bytes, array[int], int]:
    """`FileNotFoundError` if absent, `CorruptIndex` if damaged."""
    fd = open_file(index_path(directory, name), os.O_RDONLY)
    with open(fd, "rb") as stream:
        return decode_index(stream.read())


def open_pack(path: str) -> int:
    """A read-only descriptor of a pack (never through a symlink)."""
    return open_file(path, os.O_RDONLY)


def index_entries(directory: str, name: str) -> list[Entry]:
    oids, locations, _ = read_index(directory, name)
    return [
        (ObjectId(oid), locations[2 * n], locations[2 * n + 1])
        for n, (oid,) in enumerate(struct.iter_unpack("32s", oids))
    ]


def write_index(directory: str, name: str, entries: Iterable[Entry], pack_size: int,
                fsync: FsyncPolicy) -> None:
    """Publish an index atomically (temp + rename), its name durable unless the policy is
    `none`. Its bytes are fsynced only under `full`: an index is derived from its pack, which
    the caller has made durable, and one that a crash leaves torn or empty is rebuilt from the
    pack when the store is next opened (`PackedBackend`), so waiting for it would buy nothing
    (one fsync per checkpoint)."""
    write_atomically(index_path(directory, name), encode_index(entries, pack_size),
                     fsync_file=fsync == "full", fsync_dir=fsync != "none", mode=0o444,
                     temp_prefix=f"{TEMP_PREFIX}{name}-")


# -- reading records ---------------------------------------------------------------------------


def read_exactly(fd: int, offset: int, length: int) -> bytes:
    parts = []
    while length > 0:
        part = os.pread(fd, min(length, 1 << 30), offset)
        if not part:
            raise EOFError(f"pack ends {length} bytes early")
        parts.append(part)
        offset += len(part)
        length -= len(part)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def iter_slice(fd: int, offset: int, length: int) -> Iterator[bytes]:
    end = offset + length
    while offset < end:
        part = read_exactly(fd, offset, min(_COPY_CHUNK, end - offset))
        offset += len(part)
        yield part


class _SliceReader(io.RawIOBase):
    """A file object over `length` bytes at `offset` of a file it owns (never past the slice)."""

    def __init__(self, fd: int, offset: int, length: int) -> None:
        self._fd = fd
        self._pos = offset
        self._end = offset + length

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        wanted = min(len(buffer), self._end - self._pos)
        if wanted <= 0:
            return 0
        part = os.pread(self._fd, wanted, self._pos)  # short only if the pack was truncated
        buffer[: len(part)] = part
        self._pos += len(part)
        return len(part)

    def close(self) -> None:
        if not self.closed:
            os.close(self._fd)
        super().close()


def open_slice(path: str, offset: int, length: int) -> BinaryIO:
    """A buffered reader of one record's stored bytes; `FileNotFoundError` if the pack is gone."""
    fd = open_pack(path)
    buffer = max(1, min(length, 64 << 10))  # large reads bypass it; small objects stay small
    return cast(BinaryIO, io.BufferedReader(_SliceReader(fd, offset, length), buffer))


def check_record(fd: int, oid: bytes, offset: int, length: int) -> str | None:
    """Why the record an index places at `offset` (its stored bytes) is not intact, or None:
    its header must name `oid` and `length` and its crc must match. One read of the record."""
    if offset < len(PACK_MAGIC) + RECORD.size:
        return f"the index places a record at offset {offset}, inside the pack header"
    try:
        record = read_exactly(fd, offset - RECORD.size, RECORD.size + length)
    except EOFError as exc:
        return str(exc)
    return check_record_bytes(record, oid, offset, length)


def check_record_bytes(record: bytes, oid: bytes, offset: int, length: int) -> str | None:
    """`check_record` of a record already read (header and stored bytes)."""
    found, found_length, crc = RECORD.unpack_from(record)
    at = offset - RECORD.size
    if found != oid:
        return f"record header at offset {at} names {found.hex()}"
    if found_length != length:
        return f"record header at offset {at} says {found_length} bytes, the index {length}"
    if record_crc(oid, memoryview(record)[RECORD.size:]) != crc:
        return f"record at offset {at} fails its crc"
    return None


def without_ids(oids: bytes, locations: array[int], dropped: set[bytes]
                ) -> tuple[bytes, array[int]]:
    """An index's (oids, locations) without the entries of `dropped`."""
    keep_oids: list[bytes] = []
    keep_locations = array("Q")
    for n, (oid,) in enumerate(struct.iter_unpack("32s", oids)):
        if oid not in dropped:
            keep_oids.append(oid)
            keep_locations.extend(locations[2 * n : 2 * n + 2])
    return b"".join(keep_oids), keep_locations


def drop_from_index(directory: str, name: str, dropped: set[bytes], fsync: FsyncPolicy) -> bool:
    """Rewrite a published pack's index without the entries of `dropped` (damaged records
    superseded by fresh copies elsewhere), under the pack's lock; False if another process
    holds the lock (a compactor) or the pack is gone. The pack's bytes stay as they are."""
    try:
        fd = open_pack(pack_path(directory, name))
    except FileNotFoundError:
        return False
    try:
        if not try_lock(fd):
            return False
        oids, locations, size = read_index(directory, name)
        entries = [
            (ObjectId(oid), locations[2 * n], locations[2 * n + 1])
            for n, (oid,) in enumerate(struct.iter_unpack("32s", oids)) if oid not in dropped
        ]
        write_index(directory, name, entries, size, fsync)
        return True
    except (FileNotFoundError, CorruptIndex):
        return False
    finally:
        os.close(fd)


def scan_pack(fd: int) -> tuple[list[Entry], int]:
    """Every intact record, and where the last intact record ends.

    A record is intact when it fits in the pack and its crc (over id, length and stored bytes)
    checks. Past a record that is torn or damaged the scan resynchronises: it looks forward
    for the next offset where an intact record starts, so one damaged record loses only
    itself. Candidates are offsets whose length field is below 2**40 (its top three bytes are
    zero: found by `bytes.find`, not a byte-by-byte loop) and whose record fits in the pack.
    """
    size = os.fstat(fd).st_size
    if size < len(PACK_MAGIC) or os.pread(fd, len(PACK_MAGIC), 0) != PACK_MAGIC:
        return [], 0
    entries: list[Entry] = []
    position = end = len(PACK_MAGIC)
    while position + RECORD.size <= size:
        length = _intact_length(fd, position, size)
        if length is None:
            found = _next_intact(fd, position + 1, size)
            if found is None:
                break
            position = found
            continue
        oid = os.pread(fd, OID_SIZE, position)
        entries.append((ObjectId(oid), position + RECORD.size, length))
        position = end = position + RECORD.size + length
    return entries, end


def _intact_length(fd: int, position: int, size: int) -> int | None:
    """The length of the intact record at `position`, or None if there is none there."""
    oid, length, crc = RECORD.unpack(os.pread(fd, RECORD.size, position))
    start = position + RECORD.size
    if start + length > size:
        return None
    check = 0
    for part in iter_slice(fd, start, length):
        check = crc32(part, check)
    return length if crc32(oid + _LENGTH.pack(length), check) == crc else None


_RESYNC_WINDOW = 1 << 20
_LENGTH_TOP = bytes(3)  # the top bytes of a record's u64 length (below 1 TiB)
_TOP_AT = OID_SIZE + 5  # where they sit in a record header


def _next_intact(fd: int, start: int, size: int) -> int | None:
    """The first offset at or after `start` where an intact record begins, or None."""
    window_at = -1
    window = b""
    candidate = start
    while candidate + RECORD.size <= size:
        if not window_at <= candidate + _TOP_AT < window_at + len(window) - 2:
            window_at = candidate + _TOP_AT
            window = os.pread(fd, _RESYNC_WINDOW, window_at)
        hit = window.find(_LENGTH_TOP, candidate + _TOP_AT - window_at)
        if hit < 0:
            candidate = window_at + max(len(window) - 2, 1) - _TOP_AT
            if len(window) < 3:
                return None
            continue
        candidate = window_at + hit - _TOP_AT
        if candidate + RECORD.size > size:
            return None
        header = os.pread(fd, RECORD.size, candidate)
        if not any(header):  # zero fill: skip to the first header that reaches past it
            nonzero = len(window) - len(window[hit:].lstrip(b"\x00"))
            candidate = max(candidate + 1, window_at + nonzero - RECORD.size + 1)
            continue
        if _intact_length(fd, candidate, size) is not None:
            return candidate
        candidate += 1
    return None


def try_lock(fd: int) -> bool:
    """Take the writer lock of a pack without waiting; False if a live process holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def recover_pack(directory: str, name: str, fsync: FsyncPolicy) -> bool:
    """Index a pack that has none, if its writer is dead; True if it now has an index.

    Intact records before a torn or damaged tail are indexed; the tail is left in place (the
    index covers the intact prefix). A pack with no intact record is removed.
    """
    path = pack_path(directory, name)
    try:
        fd = open_pack(path)
    except FileNotFoundError:
        return False
    try:
        if not try_lock(fd):
            return False  # a live writer: it will publish the index itself
        if os.path.exists(index_path(directory, name)):
            try:
                read_index(directory, name)
                return True  # published while we looked
            except (FileNotFoundError, CorruptIndex):
                pass
        entries, end = scan_pack(fd)
        if not entries:
            os.unlink(path)
            return False
        if fsync != "none":
            os.fsync(fd)
        write_index(directory, name, entries, end, fsync)
        return True
    finally:
        os.close(fd)


# -- writing -------------------------------------------------------------------------------


class PackWriter:
    """Appends records to one new pack that no other writer touches; `seal` publishes it.

    Not thread-safe (the caller serializes). Records are buffered up to 256 KiB; `flush` makes
    them readable through other file descriptors. Under the `full` policy every append is
    fsynced. The pack stays locked until `seal` or `abandon`.
    """

    def __init__(self, directory: str, fsync: FsyncPolicy) -> None:
        self.directory = directory
        self.fsync = fsync
        self.name = f"pack-{os.urandom(10).hex()}"
        self.path = pack_path(directory, self.name)
        # Not `write_atomically`: a pack is named at birth and appended in place by the writer
        # that holds its lock; the rename only hides a pack with no magic yet. A pack becomes
        # visible when its index is published (`seal`), and that write is atomic.
        temp = f"{directory}/{TEMP_PREFIX}{self.name}.pack"
        self.fd = open_file(temp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            os.write(self.fd, PACK_MAGIC)
            os.rename(temp, self.path)
        except BaseException:
            os.close(self.fd)
            _unlink_quietly(temp)
            raise
        if fsync == "full":
            sync_directory(directory)
        self.entries: list[Entry] = []
        self.flushed = self.size = len(PACK_MAGIC)
        self._buffer = bytearray()
        self._framing = bytearray()  # `append_many`'s, kept from batch to batch

    def append(self, oid: ObjectId, stored: bytes | memoryview, crc: int) -> int:
        """Add a record (crc from `record_crc`); returns the offset of its stored bytes."""
        self._buffer += RECORD.pack(oid, len(stored), crc)
        self._buffer += stored
        offset = self.size + RECORD.size
        self.size += RECORD.size + len(stored)
        self.entries.append((oid, offset, len(stored)))
        if len(self._buffer) >= _WRITE_BUFFER or self.fsync == "full":
            self.flush()
        return offset

    def append_many(self, objects: Sequence[tuple[ObjectId, bytes]], crcs: Sequence[int] | None
                    ) -> list[int]:
        """`append` of each of `objects` (crcs as `frame_records` takes them), framed in one
        piece and written in one call; returns the offsets of their stored bytes."""
        self.flush()
        lengths = list(map(len, map(itemgetter(1), objects)))
        # each record's stored bytes start a header after the end of the one before
        offsets = list(accumulate(map(add, lengths, repeat(RECORD.size)),
                                  initial=self.size + RECORD.size))
        offsets.pop()
        framed = frame_records(objects, crcs, self._framing)
        try:
            with naming(self.path):
                _write_all(self.fd, framed, self.flushed)
                self.flushed = self.size = self.size + len(framed)
                if self.fsync == "full":
                    os.fsync(self.fd)
        finally:
            if isinstance(framed, memoryview):
                framed.release()
        self.entries.extend(zip(map(itemgetter(0), objects), offsets, lengths))
        return offsets

    def append_stream(self, oid: ObjectId, chunks: Iterable[bytes]) -> int:
        """Add a record from chunks with bounded memory; if `chunks` raises, nothing is added."""
        self.flush()
        start = self.size
        length = 0
        crc = 0
        try:
            with naming(self.path):
                os.pwrite(self.fd, bytes(RECORD.size), start)
            for chunk in chunks:
                with naming(self.path):
                    _write_all(self.fd, chunk, start + RECORD.size + length)
                crc = crc32(chunk, crc)
                length += len(chunk)
        except BaseException:
            os.ftruncate(self.fd, start)  # frees the blocks the record took
            raise
        crc = crc32(oid + _LENGTH.pack(length), crc)
        with naming(self.path):
            os.pwrite(self.fd, RECORD.pack(oid, length, crc), start)
            self.flushed = self.size = start + RECORD.size + length
            self.entries.append((oid, start + RECORD.size, length))
            if self.fsync == "full":
                os.fsync(self.fd)
        return start + RECORD.size

    def flush(self) -> None:
        if self._buffer:
            with naming(self.path):
                _write_all(self.fd, self._buffer, self.flushed)
                self.flushed += len(self._buffer)
                self._buffer.clear()
                if self.fsync == "full":
                    os.fsync(self.fd)

    def seal(self) -> None:
        """Make the pack durable (per policy), publish its index, and drop the lock. If it
        fails, the pack is still this writer's: `abandon` it."""
        self.flush()
        if self.fsync != "none":
            with naming(self.path):
                os.fsync(self.fd)
        write_index(self.directory, self.name, self.entries, self.size, self.fsync)
        os.close(self.fd)
        self.fd = -1

    def abandon(self) -> None:
        """Drop the pack and its records (nothing of it was published): a failed write leaves
        none of its bytes on a full disk."""
        fd, self.fd = self.fd, -1
        try:
            if fd >= 0:
                os.close(fd)
            os.unlink(self.path)
        except OSError:
            pass  # a failing disk: the write's own error is the one to tell; a dead writer's
            # pack is indexed or swept later


@contextmanager
def naming(path: str) -> Iterator[None]:
    """An OSError of a call on a descriptor names no file (ENOSPC, EIO): name `path`."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise


def _write_all(fd: int, data: bytes | bytearray | memoryview, offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
