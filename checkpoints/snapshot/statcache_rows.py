"""How the stat cache stores one directory's rows on disk: compact, and relative to the listing
stored beside them in the same record.

A row (statcache.FileRow: name, kind, size, mtime_ns, ctime_ns, ino, mode, ref, racy) of a
clean directory repeats an entry of the directory's listing (dirlisting.py): the same name and
the same five stat fields. `pack_rows(rows, listing)` stores such a row as the index of that
entry, one byte (its kind and racy flag) and its ref; any other row (a subdirectory's, whose
stat fields are zeros and whose size is the bytes below it; a row of a directory with no
listing kept) is stored whole, with its position. A row is taken from the listing only where
its name and stat fields equal an entry's, so `unpack_rows(packed, listing)` gives back exactly
the rows that were packed, with the same values: which rows are trusted (`FileRow.matches`)
cannot change by being stored.

The packed form is MAGIC then one msgpack array of columns: [entry index per listed row, kind
| racy << 3 per listed row (bytes), ref or nil per listed row, position per other row, other
rows as plain arrays]. Columns, so that both directions run in C calls (map, zip, translate),
not a Python step per row: a turn packs and unpacks the rows of every directory it touches.
Rows that do not fit (a kind outside 0-7, a racy flag that is not a bool) are packed as plain
msgpack arrays instead, the form older caches (version 6) hold: both forms are read.

No trust decision, no file I/O, no cache file layout here (statcache.py).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from itertools import compress, count, repeat
from typing import Any, TypeVar

from ckpt.checkpoints.snapshot.dirlisting import listing_changes
from ckpt.objstore.codec import pack_data, unpack_data
from ckpt.objstore.errors import CorruptObject

# Never the first byte of msgpack data: tells compact rows from plain msgpack arrays.
MAGIC = b"\xc1"
_RACY_SHIFT = 3
_KIND_TABLE = bytes(b & 0x07 for b in range(256))
_RACY_TABLE = bytes(b >> _RACY_SHIFT & 1 for b in range(256))
_KR_MAX = 0x0F  # kind (0-7) | racy << 3
_ROW_FIELDS = 9
# A row's fields in a listing entry's order (dirlisting.EntryFields): name, mode, size,
# mtime_ns, ctime_ns, ino.
_as_entry = operator.itemgetter(0, 6, 2, 3, 4, 5)
_kind_of = operator.itemgetter(1)
_ref_of = operator.itemgetter(7)
_racy_of = operator.itemgetter(8)
_NoneType = type(None)

R = TypeVar("R", bound=tuple[Any, ...])


def _entries(listing: bytes) -> list[tuple[Any, ...]]:
    """The entries of `listing` as (name, mode, size, mtime_ns, ctime_ns, ino), in order;
    ValueError if it is malformed."""
    return listing_changes(b"", listing)[0] if listing else []


def pack_rows(rows: Sequence[Sequence[Any]], listing: bytes) -> bytes:
    """`rows` in their compact form against `listing` (b"": none); plain msgpack arrays where
    a row taken from the listing does not fit (a kind outside 0-7, a racy flag not a bool)."""
    try:
        entries = _entries(listing)
    except ValueError:  # not a listing: nothing to take from it
        return pack_data(rows)
    try:
        index = list(map(dict(zip(entries, range(len(entries)))).get, map(_as_entry, rows)))
    except TypeError:  # an unhashable field: not a row ckpt makes
        return pack_data(rows)
    listed = list(map(operator.is_not, index, repeat(None)))
    chosen = list(compress(rows, listed))
    kinds = list(map(_kind_of, chosen))
    racy = list(map(_racy_of, chosen))
    if not (set(map(type, kinds)) <= {int} and set(map(type, racy)) <= {bool}
            and min(kinds, default=0) >= 0 and max(kinds, default=0) <= _KIND_TABLE[-1]):
        return pack_data(rows)
    others = list(compress(count(), map(operator.not_, listed)))
    return MAGIC + pack_data([
        list(compress(index, listed)),
        bytes(map(operator.or_, kinds, map(operator.lshift, racy, repeat(_RACY_SHIFT)))),
        list(map(_ref_of, chosen)),
        others,
        [rows[position] for position in others],
    ])


def unpack_rows(packed: bytes, listing: bytes, make: Callable[[Iterable[Any]], R]) -> list[R]:
    """The rows `pack_rows(rows, listing)` packed, each made by `make` from its nine fields;
    CorruptObject where `packed` is not rows of that listing."""
    if packed[:1] != MAGIC:
        return unpack_plain_rows(unpack_data(packed, what="stat cache"), make)
    columns = unpack_data(packed[1:], what="stat cache")
    try:
        index, kr, refs, positions, others = columns
        if not (isinstance(index, list) and type(kr) is bytes and isinstance(refs, list)
                and isinstance(positions, list) and len(index) == len(kr) == len(refs)
                and set(map(type, index)) <= {int} and min(index, default=0) >= 0
                and max(kr, default=0) <= _KR_MAX
                and set(map(type, refs)) <= {bytes, _NoneType}
                and set(map(type, positions)) <= {int}):
            raise ValueError("bad columns")
        entries = _entries(listing)
        chosen = list(map(entries.__getitem__, index))
        columns_of = list(zip(*chosen)) or [()] * 6
        names, modes, sizes, mtimes, ctimes, inos = columns_of
        rows = list(map(make, zip(names, kr.translate(_KIND_TABLE), sizes, mtimes, ctimes, inos,
                                  modes, refs, map(bool, kr.translate(_RACY_TABLE)))))
        total = len(rows) + len(positions)
        if positions != sorted(set(positions)) or (positions and not
                                                    0 <= positions[0] <= positions[-1] < total):
            raise ValueError("bad positions")
        for position, row in zip(positions, unpack_plain_rows(others, make), strict=True):
            rows.insert(position, row)
    except (TypeError, ValueError, IndexError):
        raise CorruptObject(None, "stat cache: bad rows") from None
    return rows


def unpack_plain_rows(raw: object, make: Callable[[Iterable[Any]], R]) -> list[R]:
    """Rows stored as plain msgpack arrays; CorruptObject if they are not rows."""
    if not isinstance(raw, list):
        raise CorruptObject(None, "stat cache: bad rows")  # checksummed: not expected
    try:
        rows = list(map(make, raw))
    except TypeError:
        rows = []
    if len(rows) != len(raw) or any(len(row) != _ROW_FIELDS for row in rows):
        raise CorruptObject(None, "stat cache: bad row")
    return rows
