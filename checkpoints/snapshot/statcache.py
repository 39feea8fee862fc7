"""The per-root stat cache: what each file looked like when its content was last hashed.

Per directory it keeps the rows of the last scan (`FileRow`: name, kind, size, mtime_ns,
ctime_ns, inode, mode, ref, racy) and the directory's tree id, so an unchanged file is never
read again and an unchanged directory is not even re-encoded; and the directory's whole listing
as the scan saw it (see dirlisting.py), with the stat of its ignore files and the names its
rules left out, so a directory whose listing is unchanged is recognised by one comparison, its
rows not even decoded (they stay packed until something asks for them). `FileRow.matches` is
the one decision that trusts a file without reading it. What a restore teaches the cache lives
beside it, in restore/statcache_update.py. No walking and no hashing here.

Glossary (the words scan.py and restore/statcache_update.py use):
- listing: one directory's entries as bytes, sorted, each a name and its lstat fields
  (dirlisting.py); equal listings mean no entry came, went or changed its stat.
- racy: a row (or listing) stamped too close to the scan that made it to be trusted later:
  a rewrite within the same clock tick would keep its stat (`is_racy`, as git's rule).
- recheck: a directory's listing kept aside with the names that were racy or that a restore
  wrote (`Recheck`); the next scan looks only at entries that differ from it and at those names.
- NOT_SETTLED: stands for a directory's ignore files when one of them was racy: its rules
  cannot be assumed unchanged, so no shortcut is taken there.
- fast: (scan) the walk found the directory's listing equal to the cached one; its rows are
  the cached record's without a look (`DirState.UNCHANGED`).
- clean: (scan) nothing in the directory was skipped or vanished, so its listing may be kept.
- all_hits: (scan) every entry matched a cached row and no name came or went, so the cached
  tree id still holds if the subdirectories' ids do.
- rules_clean: (scan) the ignore rules in force are those the cached record was made under:
  same settings and no ignore file changed here or above; then names are decided as cached.
- virtual: (scan, paths scope) an ancestor of tracked paths, holding only what leads to them;
  it has no record of its own.

The cache is only ever a performance aid: a missing, damaged or foreign cache loads as empty.
It is msgpack in one object envelope (codec.py, zstd), written atomically, ending in the
BLAKE3 of that envelope: a cache is trusted to name content by id, so damage that still parses
(a flipped bit in an id) must be caught too, or it would put a wrong id into a checkpoint; the
digest is checked before anything is decompressed. Rows are typed in memory (`FileRow`) and packed against the listing stored in
the same record on disk (statcache_rows.py: exact, so what is trusted cannot change by being
stored); rechecks are plain msgpack arrays, rebuilt as `Recheck` when a record is decoded.

Two files: the base (`statcache`, every record) and a delta beside it (`statcache.delta`): the
records that differ from the base and the keys it no longer has, tied to the base by its
digest. A save writes only the delta while it stays small next to the base (a turn in a large
tree changes a few dozen of thousands of records, and writing the whole base is the dearest
part of a small checkpoint there), else the whole base, which makes any delta stale. A delta
that is damaged or not of the base is ignored: the base alone is an older cache, and an older
cache is as safe as any (a record only ever stands for a stat it was made from).

Each record is stored as [listing, subdirectory names, tree, leaves, rest, size, files]: the
first two are what `dirlisting.walk_dirs` compares and follows, so the loaded table goes to the
native walk as it is; `rest` (packed rows, ignore state, recheck) is decoded only for the
directories a scan actually looks into (`DirTable`), and written back as it was read for all
the others.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import operator
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ckpt.checkpoints.snapshot.statcache_rows import (
    MAGIC,
    pack_rows,
    unpack_plain_rows,
    unpack_rows,
)
from ckpt.objstore import FileState
from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.codec import MAGIC as ENVELOPE_MAGIC
from ckpt.objstore.codec import decode_object, encode_object, pack_data, unpack_data
from ckpt.objstore.errors import CorruptObject
from ckpt.objstore.ids import OID_SIZE, hash_bytes
from ckpt.objstore.native import load_native

_fsops = load_native("ckpt.checkpoints._fsops")
_native_exchange = None if _fsops is None else _fsops.exchange

# A cache file is one object envelope (codec.py: a zstd frame, its size declared), then its
# BLAKE3: the rows' ids do not compress, but names and stat fields do.
COMPRESSION_LEVEL = 1
# Bumped whenever the layout of the file changes: a cache of another version is ignored, never
# misread. Version 6 differs only in how a record packs its rows (plain msgpack arrays, which
# statcache_rows.py still reads) and in not being compressed: it is read, and the next save writes it again as version 7.
CACHE_VERSION = 7
READABLE_VERSIONS = frozenset({6, CACHE_VERSION})
# Timestamps come from a coarse kernel clock (a jiffy, up to 10 ms at HZ=100): a file whose
# mtime is this close to the scan start could still change without its mtime moving.
RACY_WINDOW_NS = 20_000_000
# Some file systems keep whole seconds only (ext4 with 128-byte inodes, HFS+) or two (FAT's
# mtime): a timestamp of whole seconds gets a window of two seconds and the clock's lag. (One
# from a fine file system is a whole second once in 10^9: it is then trusted 2 s later.)
COARSE_RACY_WINDOW_NS = 2_000_000_000 + RACY_WINDOW_NS
_SECOND_NS = 1_000_000_000


def is_racy(timestamp_ns: int, scan_start_ns: int) -> bool:
    """Whether a file (or a listing) stamped `timestamp_ns` could still change without its
    stamp moving, as seen by a scan that started at `scan_start_ns` (time.time_ns())."""
    if timestamp_ns % _SECOND_NS:
        return timestamp_ns >= scan_start_ns - RACY_WINDOW_NS
    return timestamp_ns >= scan_start_ns - COARSE_RACY_WINDOW_NS

# The lstat fields a row keeps: os.stat_result, a listing entry (dirlisting.py), or what a
# put read (the native reader's FileStat).
StatLike = FileState


class FileRow(NamedTuple):
    """One entry of a directory as the scan that made it saw it. A tuple, so that decoding a
    record's rows is one C call per row and packing them needs no conversion (msgpack writes a
    tuple as the array it reads back); immutable, so a scan replaces a row, never edits it."""

    name: bytes
    kind: int  # an EntryKind value
    size: int  # file bytes; for a directory the file bytes below it
    mtime_ns: int
    ctime_ns: int
    ino: int
    mode: int  # 0 for directories and tombstones, whose rows carry no stat
    ref: bytes | None  # blob id, link target or tree id; None: not read (skipped or vanished)
    racy: bool  # stamped too close to the scan that made it: read again next time

    def matches(self, st: StatLike) -> bool:
        """Whether the file `st` describes may be trusted to hold this row's content without
        being read: the one trust decision of the cache. Every stat field the row keeps must be
        equal (the mode fixes the kind and the exec bit), and the row must not be racy."""
        return (
            self.mtime_ns == st.st_mtime_ns
            and self.size == st.st_size
            and self.ctime_ns == st.st_ctime_ns
            and self.ino == st.st_ino
            and self.mode == st.st_mode
            and not self.racy
        )

    def mismatch(self, st: StatLike) -> str | None:
        """Why `matches(st)` is False, in words for a debug log; None when it is True."""
        if self.size != st.st_size:
            return "size changed"
        if self.mtime_ns != st.st_mtime_ns:
            return "mtime changed"
        if self.ino != st.st_ino:
            return "inode changed"
        if self.ctime_ns != st.st_ctime_ns:
            return "ctime changed"
        if self.mode != st.st_mode:
            return "mode changed"
        if self.racy:
            return "racy"
        return None


def make_row(name: bytes, kind: int, st: StatLike, ref: bytes | None,
             scan_start_ns: int) -> FileRow:
    """The row of a file or link with stat `st`, racy if `st` is too new for `scan_start_ns`."""
    return FileRow(name, kind, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino,
                   st.st_mode, ref, is_racy(st.st_mtime_ns, scan_start_ns))


# A FileRow from the sequence of its nine fields, unchecked: one C call, where the class's own
# constructor is a Python function (the scan makes one per entry of every directory it reads).
row_of: Callable[[Iterable[Any]], FileRow] = functools.partial(tuple.__new__, FileRow)
_TREE_KIND = 4  # EntryKind.TREE


def tree_row(name: bytes, tree: bytes | None, size: int) -> FileRow:
    """The row of a subdirectory: its tree id and the file bytes below it, no stat."""
    return row_of((name, _TREE_KIND, size, 0, 0, 0, 0, tree, False))


def decode_rows(raw: object) -> list[FileRow]:
    """Rows stored as plain msgpack arrays -> `FileRow`s; CorruptObject if they are not rows."""
    return unpack_plain_rows(raw, row_of)


def unpack_record_rows(packed: bytes, listing: bytes) -> list[FileRow]:
    """A record's rows as stored (compact against `listing`, the one stored with them, or plain
    arrays) -> `FileRow`s; CorruptObject if they are not rows."""
    return unpack_rows(packed, listing, row_of)

# A row's name, as a sort key: a C callable, since sorting a directory's rows calls it per row.
row_name: Callable[[FileRow], bytes] = operator.itemgetter(0)


class Recheck(NamedTuple):
    """A directory's listing kept aside, with the names in it that are not to be trusted yet
    (racy, or written by a restore): the next scan looks at what differs from it and at those."""

    listing: bytes
    names: list[bytes]


class DirSummary(NamedTuple):
    """What a parent needs of a directory's record: its tree id and what lies below it."""

    tree: bytes  # b"": no tree id known
    size: int  # file bytes below it
    files: int  # files below it
    leaves: int  # files and symlinks below it; -1: not known


class DirRecord:
    """One directory as the last scan left it. `listing` is b"" unless it may be trusted for a
    shortcut (nothing skipped, nothing racy); `recheck` None, or the listing kept aside when it
    was clean but the files it names were too new to be trusted (racy) or were written by a
    restore since: a scan looks only at the entries that differ from that listing and at those
    names; `ignores` the listing entries of its ignore files (NOT_SETTLED when one was racy);
    `subdirs` [name, tree id] of the subdirectories captured; `ignored` the names its rules
    left out (a "/" appended for directories)."""

    __slots__ = ("_packed", "_packed_against", "_rows", "files", "ignored", "ignores", "leaves",
                 "listing", "recheck", "size", "subdirs", "tree")

    def __init__(self, tree: bytes, size: int, files: int, rows: list[FileRow] | None, *,
                 packed: bytes | None = None, listing: bytes = b"", ignores: list[Any] | None = None,
                 subdirs: list[list[bytes]] | None = None, ignored: list[bytes] | None = None,
                 leaves: int = -1, recheck: Recheck | None = None,
                 packed_against: bytes = b"") -> None:
        self.tree = tree  # the directory's tree oid; b"" once its rows no longer describe one
        self.size = size  # file bytes below it
        self.files = files  # files below it
        self.leaves = leaves  # files and symlinks below it (-1: not known)
        self._rows = rows  # sorted by name; None until `_packed` is decoded
        self._packed = packed
        # The listing `_packed` was packed against (statcache_rows.py): the one stored with it.
        self._packed_against = packed_against
        self.listing = listing
        self.recheck = recheck
        self.ignores = ignores if ignores is not None else NOT_SETTLED
        self.subdirs = subdirs if subdirs is not None else []
        self.ignored = ignored if ignored is not None else []

    @property
    def rows(self) -> list[FileRow]:
        if self._rows is None:
            self._rows = unpack_record_rows(self._packed or b"", self._packed_against)
        return self._rows

    @rows.setter
    def rows(self, rows: list[FileRow]) -> None:
        """New rows: the listing shortcut and the tree id no longer hold."""
        self._rows, self._packed = rows, None
        self.tree, self.listing, self.recheck = b"", b"", None

    def adopt(self, tree: bytes, size: int, files: int, leaves: int, rows: list[FileRow],
              subdirs: list[list[bytes]]) -> None:
        """A tree id found to match the rows (after a restore): the listing stays as it is."""
        self.tree, self.size, self.files, self.leaves = tree, size, files, leaves
        self._rows, self._packed, self.subdirs = rows, None, subdirs

    def summary(self) -> DirSummary:
        return DirSummary(self.tree, self.size, self.files, self.leaves)

    def reference_listing(self) -> bytes:
        """The listing stored with this record that its packed rows are made against: the
        trusted one, else the one kept aside, else none."""
        if self.listing:
            return self.listing
        return self.recheck.listing if self.recheck is not None else b""

    def packed_rows(self) -> bytes:
        """The rows packed against `reference_listing()`: as read while that is still the
        listing they were packed against (a restore may set the listing alone)."""
        against = self.reference_listing()
        packed = self._packed
        if packed is None or packed[:1] != MAGIC or against != self._packed_against:
            packed = self._packed = pack_rows(self.rows, against)
            self._packed_against = against
        return packed

    @classmethod
    def from_wire(cls, wire: Sequence[Any]) -> DirRecord:
        try:
            listing, _names, tree, leaves, rest, size, files = wire
            packed, ignores, subdirs, ignored, recheck = unpack_data(rest, what="stat cache")
        except (TypeError, ValueError) as exc:  # checksummed: a writer's bug, not damage
            raise CorruptObject(None, f"stat cache: bad record ({exc})") from None
        if not (isinstance(tree, bytes) and isinstance(packed, bytes)
                and isinstance(listing, bytes) and isinstance(subdirs, list)
                and (recheck is None or (isinstance(recheck, list) and len(recheck) == 2
                                         and isinstance(recheck[0], bytes)
                                         and isinstance(recheck[1], list)))):
            raise CorruptObject(None, "stat cache: bad record")
        return cls(tree, size, files, None, packed=packed, listing=listing, ignores=ignores,
                   subdirs=subdirs, ignored=ignored, leaves=leaves,
                   recheck=None if recheck is None else Recheck(*recheck),
                   packed_against=listing or (recheck[0] if recheck is not None else b""))

    def to_wire(self) -> list[Any]:
        names = b"\0".join(name for name, _tree in self.subdirs)
        rest = pack_data([self.packed_rows(), self.ignores, self.subdirs, self.ignored,
                          self.recheck])
        return [self.listing, names, self.tree, self.leaves, rest, self.size, self.files]


# [listing, NUL-joined subdirectory names, tree, leaves, packed rest, size, files]
Wire = list[Any]


class DirTable:
    """The records of a cache by directory key (b"" is the root). Records stay in their stored
    form until `get` decodes one; a decoded or newly set record wins over the stored form."""

    __slots__ = ("_records", "_wire")

    def __init__(self, wire: dict[bytes, Wire] | None = None, *,
                 records: dict[bytes, DirRecord] | None = None) -> None:
        self._wire = wire if wire is not None else {}
        self._records = records if records is not None else {}

    def get(self, key: bytes, default: DirRecord | None = None) -> DirRecord | None:
        record = self._records.get(key)
        if record is None:
            wire = self._wire.get(key)
            if wire is None:
                return default
            record = self._records[key] = DirRecord.from_wire(wire)
        return record

    def __getitem__(self, key: bytes) -> DirRecord:
        record = self.get(key)
        if record is None:
            raise KeyError(key)
        return record

    def __setitem__(self, key: bytes, record: DirRecord) -> None:
        self._records[key] = record
        self._wire.pop(key, None)  # stale now: `take` copies a stored form where it finds one

    def __contains__(self, key: object) -> bool:
        return key in self._records or key in self._wire

    def __len__(self) -> int:
        wire = self._wire
        return len(wire) + sum(1 for key in self._records if key not in wire)

    def keys(self) -> set[bytes]:
        return self._wire.keys() | self._records.keys()

    def items(self) -> Iterator[tuple[bytes, DirRecord]]:
        for key in self.keys():
            yield key, self[key]

    def values(self) -> Iterator[DirRecord]:
        for key in self.keys():
            yield self[key]

    def update(self, other: DirTable) -> None:
        for key, wire in other._wire.items():
            self._wire[key] = wire
            self._records.pop(key, None)
        self._records.update(other._records)

    def take(self, other: DirTable, keys: Iterable[bytes]) -> None:
        """Copy the records of `keys` from `other`, in their stored form when they have one,
        so that saving this table does not encode them again: for records the caller has
        not changed (a scan never changes a record in place), decoded or not."""
        records, wires = other._records, other._wire
        for key in keys:
            wire = wires.get(key)
            if wire is not None:
                self._wire[key] = wire
                self._records.pop(key, None)
            else:
                self._records[key] = records[key]

    def summary(self, key: bytes) -> DirSummary | None:
        """A record's summary, read without decoding a stored one."""
        record = self._records.get(key)
        if record is not None:
            return record.summary()
        wire = self._wire.get(key)
        if wire is None:
            return None
        tree, leaves, size, files = wire[2], wire[3], wire[5], wire[6]
        if not (isinstance(tree, bytes) and type(leaves) is type(size) is type(files) is int):
            raise CorruptObject(None, "stat cache: bad record")  # checksummed: not expected
        return DirSummary(tree, size, files, leaves)

    def known(self) -> dict[bytes, Wire]:
        """Listing and subdirectory names per key, for `dirlisting.walk_dirs`."""
        if not self._records:
            return self._wire
        merged = dict(self._wire)
        for key, record in self._records.items():
            merged[key] = [record.listing, b"\0".join(name for name, _ in record.subdirs)]
        return merged

    def leaf_counts(self) -> dict[bytes, int]:
        counts = {wire[2]: wire[3] for key, wire in self._wire.items()
                  if key not in self._records and wire[2] and wire[3] >= 0}
        counts.update((record.tree, record.leaves) for record in self._records.values()
                      if record.tree and record.leaves >= 0)
        return counts

    def to_wire(self) -> dict[bytes, Wire]:
        wire = dict(self._wire)
        for key, record in self._records.items():
            wire[key] = record.to_wire()
        return wire


NOT_SETTLED: list[Any] = [b"not settled"]  # ignore files changed too recently to be trusted
# The ignore files whose listing entries a record keeps (`ignores`), as ignore.py reads them.
IGNORE_FILES = (b".gitignore", b".ckptignore")


def bare_name(name: bytes) -> bytes:
    """A name of `DirRecord.ignored` without the "/" that marks a directory."""
    return name[:-1] if name.endswith(b"/") else name


@dataclass(slots=True)
class StatCache:
    dirs: DirTable = field(default_factory=DirTable)
    gc_generation: int = 0
    # What else decided the rows (ignore settings, size limit): listings count only if equal.
    settings: str = ""
    # Set when the store was garbage-collected since this cache was written: every reused id
    # must then be checked for presence before it is trusted.
    needs_verification: bool = False
    # False when a scan reused every record as it was: saving it again would change nothing.
    dirty: bool = True
    # (translator identity, pattern line -> translation) for ignore.py: kept here because this
    # file is already read by every scan, and a lost table costs only an import.
    ignore_translations: tuple[str, dict[str, Any]] | None = None
    # The base file this cache was read from (or last saved as): what a delta is made against.
    base: CacheBase | None = None


@dataclass(frozen=True, slots=True)
class CacheBase:
    digest: bytes  # the base file's trailing BLAKE3
    wire: dict[bytes, Wire]  # its records as read: a record still this object is in it as is
    size: int  # its payload's bytes, uncompressed
    version: int = CACHE_VERSION  # an older one is saved again whole, every record repacked


class _OtherVersion(Exception):
    """A cache written by another version of ckpt: not damage, just not usable."""


def _checked_body(data: bytes) -> bytes | memoryview | None:
    """What precedes the trailing BLAKE3 of a cache file, taken out of its envelope (else, as
    version 6 wrote it, a view: a large cache is not copied), or None if the digest does not
    match it (damaged or truncated). ValueError if the envelope is not one `_framed` writes."""
    body = memoryview(data)[:-OID_SIZE]
    if len(data) <= OID_SIZE or hash_bytes(body) != data[-OID_SIZE:]:
        return None
    if body[:len(ENVELOPE_MAGIC)] != ENVELOPE_MAGIC:
        return body  # written plain (version 6): a msgpack array never starts so
    try:
        return decode_object(data[:-OID_SIZE])
    except CorruptObject as exc:  # checksummed: a writer's bug, not damage
        raise ValueError(f"stat cache: bad envelope ({exc})") from None


def _framed(payload: bytes) -> bytes:
    """A cache file's bytes: `payload` in an object envelope (compressed), then the BLAKE3 of
    that envelope."""
    envelope = encode_object(payload, COMPRESSION_LEVEL)
    return envelope + hash_bytes(envelope)


class _Decoded(NamedTuple):
    version: int
    gc_generation: int
    settings: str
    dirs: DirTable
    translations: tuple[str, dict[str, Any]] | None
    size: int  # the payload's bytes, uncompressed


def _decode(data: bytes) -> _Decoded:
    """A cache file decoded; ValueError (or CorruptObject) if damaged, _OtherVersion if not of a
    readable version."""
    body = _checked_body(data)
    if body is None:
        try:
            old = unpack_data(data, what="stat cache")
        except CorruptObject:
            old = None
        if isinstance(old, list) and old and type(old[0]) is int and old[0] < min(READABLE_VERSIONS):
            raise _OtherVersion
        raise ValueError("checksum mismatch (damaged or truncated)")
    payload = unpack_data(body, what="stat cache")
    if not isinstance(payload, list) or len(payload) not in (4, 5):  # 4: no translations yet
        if isinstance(payload, list) and payload and payload[0] not in READABLE_VERSIONS:
            raise _OtherVersion
        raise TypeError("not a stat cache")
    version = payload[0]
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise _OtherVersion
    _, cached_generation, settings, wire, *extra = payload
    if not isinstance(settings, str) or not isinstance(wire, dict):
        raise TypeError("bad settings")
    # Records are checked when decoded (DirRecord.from_wire); the native walk skips any entry
    # that is not [bytes, bytes, ...].
    return _Decoded(version, cached_generation, settings, DirTable(wire),
                    _translations(extra[0] if extra else None), len(body))


def _translations(value: Any) -> tuple[str, dict[str, Any]] | None:
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str) \
            and isinstance(value[1], dict):
        return (value[0], value[1])  # entries are checked by ignore.py
    return None


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as stream:
            return stream.read()
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None


def _delta_path(path: str) -> str:
    return path + ".delta"


def _decode_delta(data: bytes, base_digest: bytes
                  ) -> tuple[int, str, dict[bytes, Wire], list[bytes], Any] | None:
    """(gc generation, settings, changed records, removed keys, translations) of a delta made
    against the base of `base_digest`; None if it was made against another base; ValueError
    (or CorruptObject) if damaged."""
    body = _checked_body(data)
    if body is None:
        raise ValueError("checksum mismatch (damaged or truncated)")
    payload = unpack_data(body, what="stat cache delta")
    if not (isinstance(payload, list) and len(payload) == 7 and type(payload[0]) is int
            and payload[0] in READABLE_VERSIONS):
        raise TypeError("not a stat cache delta")
    _, base, generation, settings, changed, removed, translations = payload
    if not (isinstance(base, bytes) and isinstance(settings, str) and isinstance(changed, dict)
            and isinstance(removed, list)):
        raise TypeError("bad delta")
    if base != base_digest:
        return None
    return generation, settings, changed, removed, translations


def read_stat_cache(path: str, *, gc_generation: int) -> StatCache:
    data = _read(path)
    if data is None:
        return StatCache(gc_generation=gc_generation)
    try:
        version, cached_generation, settings, dirs, translations, size = _decode(data)
    except (_OtherVersion, CorruptObject, ValueError, TypeError, KeyError, IndexError):
        # A damaged cache costs only speed: everything is hashed again.
        return StatCache(gc_generation=gc_generation)
    base_wire = dirs._wire
    # Its own dict: the table's may change in place; the records (lists) are shared, which is
    # how a save tells the ones still as read (`is`).
    base = CacheBase(data[-OID_SIZE:], dict(base_wire), size, version)
    delta_data = _read(_delta_path(path))
    delta = None
    if delta_data is not None:
        with contextlib.suppress(CorruptObject, ValueError, TypeError):
            delta = _decode_delta(delta_data, base.digest)  # else the base alone: older, safe
    if delta is not None:
        cached_generation, settings, changed, removed, extra = delta
        wire = dict(base_wire)
        for key in removed:
            wire.pop(key, None)
        wire.update(changed)
        dirs = DirTable(wire)
        translations = _translations(extra)
    return StatCache(dirs, gc_generation, settings,
                     needs_verification=cached_generation != gc_generation,
                     ignore_translations=translations, base=base)


def leaf_counts(cache: StatCache) -> dict[bytes, int]:
    """Tree id -> files and symlinks below it, for every directory the cache knows an id of."""
    return cache.dirs.leaf_counts()


def check_stat_cache(path: str) -> str | None:
    """What is wrong with the cache at `path` (for fsck), its delta included; None if it is
    fine or absent. A delta of another base is stale, not damaged: it is never applied."""
    data = _read(path)
    if data is None:
        return None
    try:
        for _record in _decode(data).dirs.values():  # decoding each record checks its shape
            pass
        delta = _read(_delta_path(path))
        if delta is not None:
            decoded = _decode_delta(delta, data[-OID_SIZE:])
            for wire in decoded[2].values() if decoded is not None else ():
                DirRecord.from_wire(wire)
    except _OtherVersion:
        return None
    except (CorruptObject, ValueError, TypeError, KeyError, IndexError) as exc:
        return str(exc) or type(exc).__name__
    return None


# A delta is written while it stays within this share of the base (and under DELTA_MIN_BYTES
# whatever the base): past it, the next save writes the base again (reads stay cheap too).
DELTA_SHARE = 8
DELTA_MIN_BYTES = 64 << 10


def write_stat_cache(path: str, cache: StatCache) -> None:
    """Save `cache`: as a delta against the base it was read from when that stays small, else
    as a new base (which any delta then no longer matches, and which is removed)."""
    translations = list(cache.ignore_translations) if cache.ignore_translations else None
    wire = cache.dirs.to_wire()
    base = cache.base
    if base is not None and base.version != CACHE_VERSION:
        # Read from an older version: every record is repacked, then saved as a new base.
        wire = {key: DirRecord.from_wire(value).to_wire() for key, value in wire.items()}
    elif base is not None:
        limit = max(DELTA_MIN_BYTES, base.size // DELTA_SHARE)
        changed = {key: value for key, value in wire.items() if base.wire.get(key) is not value}
        # The records' bytes, known before packing: a delta sure to be too big is not packed.
        if sum(_wire_size(value) for value in changed.values()) <= limit:
            removed = [key for key in base.wire if key not in wire]
            delta = pack_data((CACHE_VERSION, base.digest, cache.gc_generation, cache.settings,
                               changed, removed, translations))
            if len(delta) <= limit:
                _replace(_delta_path(path), _framed(delta))
                return
    data = pack_data((CACHE_VERSION, cache.gc_generation, cache.settings, wire, translations))
    size = len(data)
    data = _framed(data)
    _replace(path, data)
    with contextlib.suppress(FileNotFoundError):  # stale now whatever happens: its base is gone
        os.unlink(_delta_path(path))
    cache.base = CacheBase(data[-OID_SIZE:], wire, size)


def _wire_size(wire: Wire) -> int:
    """About the bytes a record takes packed: its listing and packed rest."""
    try:
        return len(wire[0]) + len(wire[4])
    except (TypeError, IndexError):  # checksummed, so not expected: too big to guess
        return 1 << 62


def _replace(path: str, data: bytes) -> None:
    # Not fsynced: a cache lost in a crash is rebuilt by reading the files again.
    write_atomically(path, data, fsync_file=False, fsync_dir=False,
                     temp_prefix=f"{os.path.basename(path)}.tmp-", replace=_exchange_or_replace)


def _exchange_or_replace(temp: str, path: str) -> None:
    if not _exchanged(temp, path):
        os.replace(temp, path)


# Where renameat2 cannot exchange (no such file yet; an old kernel or a file system without
# RENAME_EXCHANGE): the temp is renamed over instead.
_NOT_EXCHANGED = frozenset({errno.ENOENT, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP,
                            errno.ENOTSUP})


def _exchanged(temp: str, path: str) -> bool:
    """Swap `temp` into `path` atomically and delete what `path` held; False if the names could
    not be exchanged (nothing changed). Why not a rename over: ext4 writes a file renamed over
    another back at once (auto_da_alloc), so the save would wait for the disk; an exchange
    does not. A kill before the unlink leaves the old copy under the temp's name, which gc
    sweeps like any other temp (`Maintenance._sweep_temporaries`)."""
    if _native_exchange is None:
        return False
    try:  # an absolute destination: renameat2 ignores the directory descriptor
        _native_exchange(os.fsencode(temp), -1, os.fsencode(os.path.abspath(path)))
    except OSError as exc:
        if exc.errno in _NOT_EXCHANGED:
            return False
        raise
    with contextlib.suppress(OSError):
        os.unlink(temp)
    return True
