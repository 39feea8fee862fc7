"""`PackTable`: the in-memory lookup from object id to (pack, offset, length) over many packs.

Built from pack index files (`packfile.read_index`) and from a writer's own unpublished
records; `PackedBackend` owns when it is built, extended or replaced. It does no IO itself.

A large published index is first searched in place (binary search over its sorted ids, narrowed
by the first byte), so a process that looks up a few dozen ids (an agent turn's snapshot) never
pays for a dict of every object. A small one (an agent turn's pack) goes straight into the dict:
a lookup, which is most often a miss, then costs one search per large pack however many turns
the store holds. After `_MERGE_AFTER` lookups, or on the first operation that
needs every id (listing, deleting), all indexes are merged into one dict: tens of
milliseconds for 80k objects (keys from one `struct.iter_unpack`, values from a `range`,
locations in compact arrays).
"""

from __future__ import annotations

import struct
import threading
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ckpt.objstore.ids import OID_SIZE

# Lookups before the indexes are merged: a lookup over unmerged packs costs a little more each
# time, a merge costs much more once, so merge only for a table that is looked up a lot.
_MERGE_AFTER = 2000
_MERGE_AT_ONCE = 4096  # ids: an index this small costs less to merge than to search in place
Location = tuple[int, int, int]  # slot, offset, length


@dataclass(frozen=True, slots=True)
class _Source:
    """One published index, not merged yet."""

    slot: int
    oids: bytes  # sorted, OID_SIZE each
    firsts: bytes  # the first byte of each id, for narrowing
    locations: array[int]  # offset, length, offset, length, ...

    def search(self, oid: bytes) -> Location | None:
        lo = bisect_left(self.firsts, oid[0])
        hi = bisect_right(self.firsts, oid[0], lo)
        oids = self.oids
        while lo < hi:
            mid = (lo + hi) >> 1
            key = oids[mid * OID_SIZE : mid * OID_SIZE + OID_SIZE]
            if key < oid:
                lo = mid + 1
            elif key == oid:
                return self.slot, self.locations[2 * mid], self.locations[2 * mid + 1]
            else:
                hi = mid
        return None


class PackTable:
    """Every published (and one writer's unpublished) record, by id.

    Merged entries are append-only rows of three parallel arrays, so a reader holding an entry
    number sees a consistent location while another thread appends. A table is replaced,
    never shrunk in place, when packs disappear (compaction by another process). An id found
    in several packs (two writers stored it) keeps its other copies in `dupes`, so a delete can
    drop them all. Lookups are safe from many threads; changes are serialized by the caller.
    """

    def __init__(self) -> None:
        self.packs: list[str] = []  # slot -> pack name
        self._index: dict[bytes, int] = {}
        self._slot = array("I")
        self._offset = array("Q")
        self._length = array("Q")
        self._dupes: dict[bytes, list[int]] = {}
        self._sources: list[_Source] = []
        self._lookups = 0
        self._merging = threading.Lock()

    def new_slot(self, name: str) -> int:
        self.packs.append(name)
        return len(self.packs) - 1

    def add_index(self, name: str, oids: bytes, locations: array[int]) -> None:
        """A published index (`oids` sorted): a small one is merged at once, a large one is
        searched in place until the table merges."""
        slot = self.new_slot(name)
        with self._merging:  # not into a list that a concurrent merge has already taken
            source = _Source(slot, oids, oids[::OID_SIZE], locations)
            if len(oids) <= _MERGE_AT_ONCE * OID_SIZE:
                self._merge_source(source)
                return
            self._sources.append(source)
        if self._lookups > _MERGE_AFTER:
            self.merge()

    def add_one(self, slot: int, oid: bytes, offset: int, length: int) -> None:
        """A record of this process's open pack (whose id is not in the table yet)."""
        self._offset.append(offset)
        self._length.append(length)
        self._slot.append(slot)
        self._index[oid] = len(self._offset) - 1

    def add_many(self, slot: int, oids: Sequence[bytes], offsets: list[int], lengths: list[int]
                 ) -> None:
        """Records of this process's open pack (none of whose ids is in the table yet)."""
        self._add_rows(slot, oids, offsets, lengths)

    def absent(self, oids: list[bytes]) -> bool:
        """Whether none of `oids` is in the table: for many ids, one merge and one set
        operation instead of a lookup each."""
        if self._sources and len(oids) > _MERGE_AT_ONCE:
            self.merge()
        if self._sources:
            return all(self.find(oid) is None for oid in oids)
        return self._index.keys().isdisjoint(oids)

    def find(self, oid: bytes) -> Location | None:
        number = self._index.get(oid)
        if number is not None:
            return self._slot[number], self._offset[number], self._length[number]
        sources = self._sources
        if not sources:
            return None
        self._lookups += 1
        if self._lookups > _MERGE_AFTER:
            self.merge()
            return self.find(oid)
        for source in sources:
            found = source.search(oid)
            if found is not None:
                return found
        return None

    def __contains__(self, oid: object) -> bool:
        return isinstance(oid, bytes) and self.find(oid) is not None

    def merge(self) -> None:
        """Move every published index into the dict."""
        with self._merging:
            sources, self._sources = self._sources, []
            for source in sources:
                self._merge_source(source)

    def _merge_source(self, source: _Source) -> None:
        keys = [k for (k,) in struct.iter_unpack("32s", source.oids)]
        self._add_rows(source.slot, keys, source.locations[0::2], source.locations[1::2])

    def _add_rows(self, slot: int, keys: Sequence[bytes], offsets: Iterable[int],
                  lengths: Iterable[int]) -> None:
        base = len(self._offset)
        self._offset.extend(offsets)
        self._length.extend(lengths)
        self._slot.extend(array("I", [slot]) * len(keys))
        if self._index.keys().isdisjoint(keys):
            self._index.update(zip(keys, range(base, base + len(keys))))
            return
        for number, key in enumerate(keys, base):
            if key in self._index:
                self._dupes.setdefault(key, []).append(number)
            else:
                self._index[key] = number

    def ids(self) -> list[bytes]:
        self.merge()
        return list(self._index)

    def pop(self, oid: bytes) -> list[Location]:
        """Remove `oid`; every location it had (several if packs hold duplicates)."""
        self.merge()
        first = self._index.pop(oid, None)
        if first is None:
            return []
        numbers = [first, *self._dupes.pop(oid, ())]
        return [(self._slot[n], self._offset[n], self._length[n]) for n in numbers]
