"""The remote's pack indexes as one lookup table, with a local cache of them.

`RemoteIndex.sync` lists `index/` (and `refs/`), fetches only the files the cache lacks (they
are immutable: a pack id is the hash of the pack), forgets cached ones gc removed, and builds
oid -> (pack id, offset, length). A damaged index is left out of the table and remembered in
`damaged` (its key and why), so an upload re-sends what only it named and a fetch can name it.
"""

from __future__ import annotations

import os
from array import array
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import repeat
from typing import NamedTuple, cast

from ckpt.objstore import codec
from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.ids import OID_SIZE, ObjectId
from ckpt.objstore.packfile import CorruptIndex, decode_index
from ckpt.objstore.remote import layout
from ckpt.objstore.remote.errors import RemoteNotFound
from ckpt.objstore.remote.transport import S3Transport

# Index and refs files read at once (small GETs: their time is the round trip's).
READ_THREADS = 8
# `names` questions answered by binary search before the tables are built instead.
_SEARCHES = 4096


def _in_sorted(oids: bytes, oid: bytes) -> bool:
    """Whether `oid` is one of the sorted ids concatenated in `oids`."""
    lo, hi = 0, len(oids) // OID_SIZE
    while lo < hi:
        mid = (lo + hi) // 2
        probe = oids[mid * OID_SIZE:(mid + 1) * OID_SIZE]
        if probe < oid:
            lo = mid + 1
        elif probe > oid:
            hi = mid
        else:
            return True
    return False


class Location(NamedTuple):  # a tuple: made per object of the remote at each sync
    packid: str
    offset: int  # of the stored bytes in the pack (the record header is just before)
    length: int


@dataclass(slots=True)
class RemoteIndex:
    cache_dir: str | None
    pack_sizes: dict[str, int] = field(default_factory=dict)
    # The tables (`locations`, `pack_entries`) are built on first use: a turn's upload asks
    # `names` about a few ids, answered by a binary search of each synced index's sorted ids.
    _locations: dict[ObjectId, Location] = field(default_factory=dict)
    _entries: dict[str, list[tuple[ObjectId, int, int]]] = field(default_factory=dict)
    _unbuilt: list[tuple[str, bytes, array[int]]] = field(default_factory=list)  # by name
    _searches: int = 0
    # Loaded on first use (`refs`, `damaged`): only a fetch and maintenance need the refs
    # files, and decoding them costs an upload more than the rest of the index.
    _refs: dict[ObjectId, ObjectId] = field(default_factory=dict)
    _damaged: dict[str, str] = field(default_factory=dict)  # key -> reason
    _refs_to_load: list[str] = field(default_factory=list)  # pack ids
    _transport: S3Transport | None = None

    @property
    def locations(self) -> dict[ObjectId, Location]:
        """oid -> where it is (in the first pack by name that holds it)."""
        self._build()
        return self._locations

    @property
    def pack_entries(self) -> dict[str, list[tuple[ObjectId, int, int]]]:
        self._build()
        return self._entries

    def names(self, oid: ObjectId) -> bool:
        """Whether an index names `oid` (without building the tables for a few questions)."""
        if oid in self._locations:
            return True
        if not self._unbuilt:
            return False
        self._searches += 1
        if self._searches > _SEARCHES:
            self._build()
            return oid in self._locations
        return any(_in_sorted(oids, oid) for _, oids, _ in self._unbuilt)

    def _build(self) -> None:
        """Put the synced indexes into the tables. Last to first, each pack's table over what
        is there, so an object in several packs is found in the first by name, at C speed;
        then what `add_pack` added meanwhile, where no synced index names it."""
        if not self._unbuilt:
            return
        unbuilt, self._unbuilt = self._unbuilt, []
        added = dict(self._locations)
        self._locations.clear()
        for packid, oids, locations in reversed(unbuilt):
            ids = cast(list[ObjectId], [oids[i:i + OID_SIZE]
                                        for i in range(0, len(oids), OID_SIZE)])
            offsets, lengths = locations[0::2], locations[1::2]
            self._entries[packid] = list(zip(ids, offsets, lengths))
            self._locations.update(zip(ids, map(Location, repeat(packid), offsets, lengths)))
        for oid, where in added.items():
            self._locations.setdefault(oid, where)

    @property
    def refs(self) -> dict[ObjectId, ObjectId]:
        """oid -> the dictionary or base its envelope names, for every pack with a refs file."""
        self._load_pending_refs()
        return self._refs

    @property
    def damaged(self) -> dict[str, str]:
        """The damaged index and refs files: key -> why."""
        self._load_pending_refs()
        return self._damaged

    def _load_pending_refs(self) -> None:
        pending, self._refs_to_load = self._refs_to_load, []
        if pending and self._transport is not None:
            read = self._read_many(self._transport, "refs", [
                (packid, layout.refs_key(packid), None) for packid in pending])
            for packid in pending:
                self._load_refs(packid, read[packid])

    def sync(self, transport: S3Transport) -> None:
        listed = {packid: info.size for info in transport.list(layout.INDEX)
                  if (packid := layout.packid_of(info.key, layout.INDEX)) is not None}
        with_refs = {packid for info in transport.list(layout.REFS)
                     if (packid := layout.packid_of(info.key, layout.REFS)) is not None}
        self._locations.clear()
        self.pack_sizes.clear()
        self._entries.clear()
        self._unbuilt.clear()
        self._searches = 0
        self._refs.clear()
        self._damaged.clear()
        self._refs_to_load.clear()
        self._transport = transport
        self._forget_unlisted("index", set(listed))
        self._forget_unlisted("refs", with_refs)
        read = self._read_many(transport, "index", [(packid, layout.index_key(packid), size)
                                                    for packid, size in listed.items()])
        for packid in sorted(listed):
            key = layout.index_key(packid)
            decoded = self._decoded_index(transport, packid, key, listed[packid], read[packid])
            if decoded is None:
                continue
            oids, locations, pack_size = decoded
            self.pack_sizes[packid] = pack_size
            self._unbuilt.append((packid, oids, locations))
            if packid in with_refs:
                self._refs_to_load.append(packid)

    def _decoded_index(self, transport: S3Transport, packid: str, key: str, size: int,
                       data: bytes | None) -> tuple[bytes, array[int], int] | None:
        """The decoded index of `packid` from `data` (as `_read` gave it); None if it is gone
        (gc) or damaged (noted). A cached copy that fails to decode is fetched again before
        the remote's is called damaged."""
        for attempt in range(2):
            if attempt:
                data = self._read(transport, "index", packid, key, size)
            if data is None:
                return None  # removed since the listing (gc)
            try:
                return decode_index(data)
            except CorruptIndex as exc:
                self._damaged[key] = str(exc)
                self._drop_cached("index", packid)
        return None

    def _load_refs(self, packid: str, data: bytes | None) -> None:
        if data is None:
            return
        key = layout.refs_key(packid)
        try:
            pairs: dict[ObjectId, ObjectId] = dict(codec.unpack_data(data, what=key))
            # Checked at C speed over all ids at once: a fresh machine loads one per object.
            ids = (*pairs, *pairs.values())
            if set(map(type, ids)) - {bytes} or set(map(len, ids)) - {OID_SIZE}:
                raise ValueError("an id that is not 32 bytes")
        except (ValueError, TypeError) as exc:  # CorruptObject (not msgpack) is a ValueError
            self._damaged[key] = str(exc)
            self._drop_cached("refs", packid)
            return
        self._refs.update(pairs)

    # -- the cache -----------------------------------------------------------------------

    def _path(self, kind: str, packid: str) -> str | None:
        return None if self.cache_dir is None else os.path.join(self.cache_dir, kind, packid)

    def _read_many(self, transport: S3Transport, kind: str,
                   files: list[tuple[str, str, int | None]]) -> dict[str, bytes | None]:
        """`_read` of each (pack id, key, size) of `files`, by pack id; what the cache lacks
        is fetched READ_THREADS at a time (a fresh machine would otherwise wait for one GET
        per pack in turn)."""
        if len(files) <= 1:
            return {packid: self._read(transport, kind, packid, key, size)
                    for packid, key, size in files}
        with ThreadPoolExecutor(min(READ_THREADS, len(files)),
                                thread_name_prefix="ckpt-remote-index") as pool:
            data = pool.map(lambda f: self._read(transport, kind, *f), files)
            return dict(zip((packid for packid, _, _ in files), data))

    def _read(self, transport: S3Transport, kind: str, packid: str, key: str,
              size: int | None = None) -> bytes | None:
        path = self._path(kind, packid)
        if path is not None:
            try:
                with open(path, "rb") as f:
                    return f.read()
            except FileNotFoundError:
                pass
        try:
            data, _ = transport.get(key, size=size)
        except RemoteNotFound:
            return None
        self.remember(kind, packid, data)
        return data

    def remember(self, kind: str, packid: str, data: bytes) -> None:
        """Cache an index or refs file this process wrote or read (best effort)."""
        path = self._path(kind, packid)
        if path is None:
            return
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            write_atomically(path, data, fsync_file=False, fsync_dir=False, mode=0o644,
                             temp_prefix=".tmp-")
        except OSError:
            pass  # a cache: the remote stays the truth

    def _drop_cached(self, kind: str, packid: str) -> None:
        path = self._path(kind, packid)
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass

    def _forget_unlisted(self, kind: str, listed: set[str]) -> None:
        if self.cache_dir is None:
            return
        try:
            cached = os.listdir(os.path.join(self.cache_dir, kind))
        except FileNotFoundError:
            return
        for name in cached:
            if name not in listed:
                self._drop_cached(kind, name)

    def add_pack(self, packid: str, entries: list[tuple[ObjectId, int, int]], size: int,
                 refs: dict[ObjectId, ObjectId]) -> None:
        """Record a pack this process has just uploaded and indexed."""
        self.pack_sizes[packid] = size
        self._entries[packid] = entries
        for oid, offset, length in entries:
            self._locations.setdefault(oid, Location(packid, offset, length))
        self._refs.update(refs)

    def drop_pack(self, packid: str) -> None:
        """Forget a pack gc removed (its objects stay known where another pack has them)."""
        self._build()
        entries = self.pack_entries.pop(packid, [])
        self.pack_sizes.pop(packid, None)
        for oid, _, _ in entries:
            if self.locations.get(oid, None) is not None and self.locations[oid].packid == packid:
                del self.locations[oid]
        for other, rows in self.pack_entries.items():
            for oid, offset, length in rows:
                if oid not in self.locations:
                    self.locations[oid] = Location(other, offset, length)
        self._drop_cached("index", packid)
        if packid in self._refs_to_load:
            self._refs_to_load.remove(packid)
        self._drop_cached("refs", packid)
