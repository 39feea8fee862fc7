"""Building remote packs (the local pack format of objstore/packfile.py) and planning the ranged
reads of a fetch. Pure: bytes in, bytes out; no network.

A pack is b"CKPACK\\x00\\x01" then, per object, oid | length u64 | crc32 u32 | stored envelope:
exactly the records `PackedBackend` writes, so its index is `packfile.encode_index` of the
same entries and every fetched record carries its own framing check.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ckpt.objstore import codec
from ckpt.objstore.errors import CorruptObject
from ckpt.objstore.ids import ObjectId, hash_bytes
from ckpt.objstore.native import load_native
from ckpt.objstore.packfile import PACK_MAGIC, RECORD, check_record_bytes, record_crc

_native = load_native("ckpt.objstore._records")
_native_scan = None if _native is None else _native.scan

# A fetch reads neighbouring records with one request when the gap between them is smaller
# than this (a request costs more than this many bytes on most links), up to MAX_RANGE.
COALESCE_GAP = 1 << 20
MAX_RANGE = 16 << 20

Entry = tuple[ObjectId, int, int]  # oid, offset of the stored bytes, length
# oid, stored envelope, record crc, the ids the envelope names (codec.envelope_refs)
Record = tuple[ObjectId, bytes, int, tuple[ObjectId, ...]]


@dataclass(slots=True)
class PackBuilder:
    """Records appended in memory; `finish` gives the pack's id, bytes and entries."""

    buffer: bytearray = field(default_factory=lambda: bytearray(PACK_MAGIC))
    entries: list[Entry] = field(default_factory=list)
    refs: dict[ObjectId, ObjectId] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def size(self) -> int:
        return len(self.buffer)

    def append(self, oid: ObjectId, stored: bytes, refs: tuple[ObjectId, ...]) -> None:
        self.buffer += RECORD.pack(oid, len(stored), record_crc(oid, stored))
        self.entries.append((oid, len(self.buffer), len(stored)))
        self.buffer += stored
        for ref in refs:
            self.refs[oid] = ref

    def finish(self) -> tuple[str, bytes]:
        """The pack's id and bytes. The builder lets go of its buffer: a pack in flight is
        held once (its bytes, by the upload), not twice (entries and refs stay)."""
        data = bytes(self.buffer)
        self.buffer = bytearray()
        return hash_bytes(data).hex(), data


@dataclass(frozen=True, slots=True)
class Span:
    """One ranged GET: `length` bytes at `start`, holding the records of `entries` (whole,
    header included)."""

    start: int
    length: int
    entries: tuple[Entry, ...]


def plan_spans(entries: Iterable[Entry], *, gap: int = COALESCE_GAP,
               max_range: int = MAX_RANGE) -> list[Span]:
    """Ranged reads covering each entry's record (header + stored bytes), neighbours merged."""
    spans: list[Span] = []
    start = end = -1
    group: list[Entry] = []
    for entry in sorted(entries, key=lambda e: e[1]):
        _, offset, length = entry
        begin, finish = offset - RECORD.size, offset + length
        if group and begin - end <= gap and max(end, finish) - start <= max_range:
            group.append(entry)
            end = max(end, finish)
            continue
        if group:
            spans.append(Span(start, end - start, tuple(group)))
        start, end, group = begin, finish, [entry]
    if group:
        spans.append(Span(start, end - start, tuple(group)))
    return spans


def record_problem(data: bytes, at: int, entry: Entry) -> str | None:
    """Why the record of `entry` found at `at` in `data` is not intact, or None."""
    oid, offset, length = entry
    record = data[at:at + RECORD.size + length]
    if len(record) != RECORD.size + length:
        return "ends before its record (truncated)"
    return check_record_bytes(record, oid, offset, length)


def iter_records(key: str, span: Span, data: bytes) -> Iterator[tuple[ObjectId, bytes, int]]:
    """(oid, stored bytes, record crc) of each record `span`'s GET returned in `data`, framing
    checked (the crc is the record's, found right: a store may keep it); CorruptObject naming
    the object (and the pack at `key`) if one is damaged."""
    header = RECORD.size
    unpack = RECORD.unpack_from
    for entry in span.entries:
        oid, offset, length = entry
        at = offset - span.start  # the stored bytes; the record's header is just before
        stored = data[at:at + length]
        if at >= header and len(stored) == length:
            found, found_length, crc = unpack(data, at - header)
            if found == oid and found_length == length and record_crc(oid, stored) == crc:
                yield oid, stored, crc
                continue
        problem = record_problem(data, at - header, entry) or "damaged record"
        raise CorruptObject(oid, f"remote pack {key}: {problem}")


def checked_records(key: str, span: Span, data: bytes | memoryview) -> list[Record]:
    """Each record `span`'s GET returned in `data`, with what its envelope names: its framing
    checked as `iter_records` checks it, and its envelope's header (`codec.read_header`, and
    `codec.envelope_refs`). CorruptObject naming the first damaged object (and the pack at
    `key` for damaged framing). The native scan (objstore/_records.c) checks a span in one
    call; at a record it finds damaged, or without it, this loop says what is wrong."""
    if _native_scan is not None:
        found: list[Record] | int = _native_scan(data, span.start, span.entries)
        if not isinstance(found, int):
            return found
    if not isinstance(data, bytes):
        data = bytes(data)  # each record's stored bytes are sliced from it: bytes each
    records: list[Record] = []
    for oid, stored, crc in iter_records(key, span, data):
        codec.read_header(stored, oid)  # magic, format and codec: CorruptObject
        records.append((oid, stored, crc, codec.envelope_refs(stored, oid)))
    return records
