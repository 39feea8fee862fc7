"""`PackedBackend`: puts append to pack files; only objects larger than `large_object` are loose.

The loose-file backend costs one file creation per object, which dominates a first snapshot of
a large tree and even an agent turn's snapshot (tens to hundreds of new objects). This
backend keeps that cost for objects larger than `large_object` (they stream to a loose file,
so a big put never holds the pack lock while it compresses) and, if asked, for the first
`loose_puts` new objects between two `sync()`s. Everything else is appended to this instance's own
pack (`<path>/packs/pack-<random>.pack`, never shared between processes or instances), which is
sealed at ~`pack_size`, at `sync()` and at `close()`: sealing fsyncs the pack (per policy) and
then publishes its `.idx`. A pack's objects become visible to other processes when its `.idx`
exists; records are written only after `sync()`, so nothing committed depends on an
unpublished pack. A pack filled up by puts is sealed on a background thread (its fsync waits on
the disk while the next pack fills, off the put path); `sync()` waits for
those seals and raises what one of them failed with.

Packs and indexes are immutable once published. Deleting packed objects marks them; the marks
are applied at `sync()`/`close()`/`compact()` by rewriting each affected pack without them
(new pack + index published first, then the old pack, then its index unlinked: a crash leaves
duplicates, never a loss). `compact()` also folds loose objects and small packs into packs.
An agent session writes one small pack per checkpoint: once there are more than
`fold_after` packs below `pack_size / 4`, `sync()` folds the lightest of them together
(`repack.packs_to_fold`), so a store opened late in a long session reads a few indexes.

A pack left without an index by a dead writer (its `flock` is free) is indexed by scanning it
when the store is opened: every intact record before a torn tail is kept, so a killed first
snapshot is not redone from scratch. On-disk formats and the pack writer live in
`packfile.py`, the in-memory id lookup in `packtable.py`, pack rewriting in `repack.py`; loose
objects are `LocalBackend`'s. This module must not hash, compress or verify content.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import accumulate, chain, repeat
from operator import add, itemgetter
from typing import BinaryIO, TypeVar

from ckpt.objstore import packfile
from ckpt.objstore.backend import FsyncPolicy, ObjectStat
from ckpt.objstore.errors import CorruptObject, ObjectNotFound
from ckpt.objstore.ids import ObjectId
from ckpt.objstore.local import LocalBackend, remove_if_older
from ckpt.objstore.packfile import PackWriter, pack_path
from ckpt.objstore.packtable import PackTable
from ckpt.objstore.repack import Deletion, compact_packs, fold_packs, packs_to_fold

PACKS_DIR = "packs"
_T = TypeVar("_T")


class PackedBackend:
    """The `Backend` contract over loose files plus packs under `path` (see the module doc).

    Safe for puts and reads from many threads of one process; several processes may write the
    same store at once (each to its own packs). Call `sync()` (or `close()`) to publish.
    """

    def __init__(self, path: str, *, fsync: FsyncPolicy = "batch", loose_puts: int = 0,
                 large_object: int = 8 << 20, pack_size: int = 64 << 20,
                 fold_after: int = 8) -> None:
        self.path = path
        self.fsync = fsync
        self.packs_dir = f"{path}/{PACKS_DIR}"
        self.loose_puts = loose_puts
        self.large_object = large_object
        self.pack_size = pack_size
        self.fold_after = fold_after
        self._loose = LocalBackend(path, fsync=fsync)
        self._lock = threading.RLock()
        self._table: PackTable | None = None
        self._listed: frozenset[str] = frozenset()  # pack names whose index is loaded
        self._writer: PackWriter | None = None
        self._writer_slot = -1
        self._loose_left = loose_puts
        # Loose names per fan-out dir, listed once: lets the put path skip a failing utime per
        # new object. May miss objects other processes write later (then we store a duplicate).
        self._loose_names: dict[str, set[str]] = {}
        self._fds: dict[str, int] = {}
        # Reads in flight per descriptor: the descriptor of a pack gone from the table
        # (compacted or folded) is closed when its last read ends, not under that read.
        self._reading: dict[int, int] = {}
        self._retired: set[int] = set()
        self._deleted: dict[str, Deletion] = {}  # by pack name, applied at sync/compact
        # Full packs being sealed in the background (or whose seal failed), by name. Their
        # records stay in the table and are read through the pack file.
        self._sealing: dict[str, _Sealing] = {}
        # Damaged records found by a put (by pack name): never loaded into the table again,
        # whatever their pack's index on disk still says (see `forget_damaged`).
        self._superseded: dict[str, set[bytes]] = {}

    # -- the index -------------------------------------------------------------------------

    def _loaded(self) -> PackTable:
        table = self._table
        if table is None:
            with self._lock:
                if self._table is None:
                    self._rebuild(recover=True)
                table = self._table
                assert table is not None
        return table

    def _rebuild(self, *, recover: bool = False) -> None:
        """Load every index from disk into a new table (caller holds the lock)."""
        indexed, bare, _ = packfile.list_packs(self.packs_dir)
        table = PackTable()
        if self._writer is not None:
            bare.discard(self._writer.name)
            self._writer_slot = table.new_slot(self._writer.name)
            for oid, offset, length in self._writer.entries:
                table.add_one(self._writer_slot, oid, offset, length)
        for name, sealing in self._sealing.items():
            bare.discard(name)
            if name in indexed:  # published since: loaded from its index below
                continue
            slot = table.new_slot(name)
            for oid, offset, length in sealing.writer.entries:
                table.add_one(slot, oid, offset, length)
        for name in sorted(indexed):
            if not self._load_index(table, name):
                bare.add(name)
        if recover:
            for name in sorted(bare):
                if _try_recover(self.packs_dir, name, self.fsync):
                    self._load_index(table, name)
        for deletion in self._deleted.values():
            for doomed in deletion.oids:
                table.pop(doomed)
        self._listed = frozenset(table.packs)
        self._table = table
        for name in [name for name in self._fds if name not in self._listed]:
            fd = self._fds.pop(name)
            if fd in self._reading:
                self._retired.add(fd)
            else:
                os.close(fd)

    def _load_index(self, table: PackTable, name: str) -> bool:
        try:
            oids, locations, _ = packfile.read_index(self.packs_dir, name)
        except (FileNotFoundError, packfile.CorruptIndex):
            return False
        dropped = self._superseded.get(name)
        if dropped:
            oids, locations = packfile.without_ids(oids, locations, dropped)
        table.add_index(name, oids, locations)
        return True

    def _catch_up(self) -> bool:
        """Load indexes published by other processes since; True if anything changed."""
        with self._lock:
            if self._table is None:
                self._loaded()
                return True
            indexed, _, _ = packfile.list_packs(self.packs_dir)
            if self._writer is not None:
                indexed.add(self._writer.name)
            indexed.update(self._sealing)
            if indexed == self._listed:
                return False
            if not self._listed <= indexed:
                self._rebuild()
                return True
            for name in sorted(indexed - self._listed):
                self._load_index(self._table, name)
            self._listed = frozenset(indexed)
            return True

    def _find(self, oid: ObjectId) -> tuple[str, int, int, int] | None:
        """(pack name, slot, offset, length) of a packed copy, per this instance's table."""
        table = self._loaded()
        found = table.find(oid)
        if found is None:
            return None
        return table.packs[found[0]], *found

    def find_location(self, oid: ObjectId) -> str | None:
        """The file that holds `oid` (its pack, or its loose file), or None."""
        found = self._find(oid)
        if found is not None:
            return pack_path(self.packs_dir, found[0])
        text = oid.hex()
        loose = f"{self.path}/{text[:2]}/{text[2:]}"
        return loose if os.path.exists(loose) else None

    def _on_disk(self, oid: ObjectId, *, touch: bool) -> tuple[int, float] | None:
        """(stored length, pack mtime) of a packed copy whose pack still exists; `touch` first
        marks the pack as just written (GC's grace period covers all of its objects)."""
        for _attempt in range(2):
            found = self._find(oid)
            if found is None:
                return None
            path = pack_path(self.packs_dir, found[0])
            try:
                if touch:
                    os.utime(path)
                return found[3], os.stat(path).st_mtime
            except FileNotFoundError:  # compacted by another process: reread the indexes
                with self._lock:
                    self._rebuild()
        return None

    # -- reads ---------------------------------------------------------------------------

    def has(self, oid: ObjectId) -> bool:
        if self._on_disk(oid, touch=False) is not None or self._loose.has(oid):
            return True
        return self._catch_up() and self._on_disk(oid, touch=False) is not None

    def refresh(self, oid: ObjectId) -> bool:
        # No catch-up on a miss: this is the put path, and a miss only costs a duplicate.
        table = self._table
        if table is not None and table.find(oid) is None:  # the usual miss, without the detour
            return self._maybe_loose(oid) and self._loose.refresh(oid)
        if self._on_disk(oid, touch=True) is not None:
            return True
        return self._maybe_loose(oid) and self._loose.refresh(oid)

    def _maybe_loose(self, oid: ObjectId) -> bool:
        text = oid.hex()
        names = self._loose_names.get(text[:2])
        if names is None:
            try:
                names = set(os.listdir(f"{self.path}/{text[:2]}"))
            except (FileNotFoundError, NotADirectoryError):
                names = set()
            self._loose_names[text[:2]] = names
        return text[2:] in names

    def _note_loose(self, oid: ObjectId, *, present: bool) -> None:
        self._maybe_loose(oid)
        text = oid.hex()
        if present:
            self._loose_names[text[:2]].add(text[2:])
        else:
            self._loose_names[text[:2]].discard(text[2:])

    def _read(self, name: str, slot: int, offset: int, length: int) -> bytes:
        with self._lock:
            writer = self._writer
            if writer is not None and slot == self._writer_slot:
                # Under the lock: a concurrent seal closes the writer's descriptor.
                if offset + length > writer.flushed:
                    writer.flush()
                return packfile.read_exactly(writer.fd, offset, length)
            fd = self._fds.get(name)
            if fd is None:  # kept open until the pack leaves the table, or close()
                fd = self._fds[name] = packfile.open_pack(pack_path(self.packs_dir, name))
            self._reading[fd] = self._reading.get(fd, 0) + 1
        try:
            return packfile.read_exactly(fd, offset, length)
        finally:
            with self._lock:
                left = self._reading.pop(fd) - 1
                if left:
                    self._reading[fd] = left
                elif fd in self._retired:
                    self._retired.discard(fd)
                    os.close(fd)

    def _open_slice(self, name: str, slot: int, offset: int, length: int) -> BinaryIO:
        with self._lock:
            if self._writer is not None and slot == self._writer_slot:
                self._writer.flush()
        return packfile.open_slice(pack_path(self.packs_dir, name), offset, length)

    def _fetch(self, oid: ObjectId, packed: Callable[[str, int, int, int], _T],
               loose: Callable[[ObjectId], _T]) -> _T:
        for attempt in range(2):
            found = self._find(oid)
            try:
                return packed(*found) if found is not None else loose(oid)
            except EOFError as exc:  # the index promises more than the pack holds
                raise CorruptObject(oid, f"{exc} ({found[0] if found else 'loose'})") from exc
            except (FileNotFoundError, ObjectNotFound):
                if attempt == 0:
                    self._catch_up()  # published or compacted by another process since
        raise ObjectNotFound(oid)

    def get(self, oid: ObjectId) -> bytes:
        return self._fetch(oid, self._read, self._loose.get)

    def open(self, oid: ObjectId) -> BinaryIO:
        return self._fetch(oid, self._open_slice, self._loose.open)

    def get_head(self, oid: ObjectId, size: int) -> bytes:
        """`HeadReading`: one short read of a packed copy."""
        def packed(name: str, slot: int, offset: int, length: int) -> bytes:
            return self._read(name, slot, offset, min(size, length))

        def loose(oid: ObjectId) -> bytes:
            with self._loose.open(oid) as stream:
                return stream.read(size)

        return self._fetch(oid, packed, loose)

    def stat(self, oid: ObjectId) -> ObjectStat:
        for attempt in range(2):
            found = self._on_disk(oid, touch=False)
            if found is not None:
                return ObjectStat(*found)
            try:
                return self._loose.stat(oid)
            except ObjectNotFound:
                if attempt == 1 or not self._catch_up():
                    raise
        raise ObjectNotFound(oid)

    def iter_ids(self) -> Iterator[ObjectId]:
        self._catch_up()
        table = self._loaded()
        for oid in table.ids():  # a snapshot: deleting while iterating is fine
            yield ObjectId(oid)
        for oid in self._loose.iter_ids():
            if oid not in table:
                yield oid

    # -- integrity -----------------------------------------------------------------------

    def check_stored(self, oid: ObjectId) -> bool | None:
        """`Repairable.check_stored`: a packed copy's record header and crc (a record this
        instance wrote is trusted); None for a loose copy (the store verifies its content)."""
        found = self._find(oid)
        if found is None:
            return None
        name, slot, offset, length = found
        if slot == self._writer_slot or name in self._sealing:
            return True
        try:
            record = self._read(name, slot, offset - packfile.RECORD.size,
                                packfile.RECORD.size + length)
        except EOFError:
            return False
        except FileNotFoundError:  # compacted by another process: the store reads it anew
            return None
        return packfile.check_record_bytes(record, oid, offset, length) is None

    def forget_damaged(self, oid: ObjectId) -> None:
        """`Repairable.forget_damaged`: a damaged loose copy is removed; a damaged packed copy
        leaves this instance's table and, if its pack's lock can be taken, its pack's index
        (rewritten without it), so other processes stop reading it too. The next put of `oid`
        writes a fresh copy."""
        with self._lock:
            found = self._find(oid)
            if found is None:
                if self._loose.delete(oid):
                    self._note_loose(oid, present=False)
                return
            name = found[0]
            self._superseded.setdefault(name, set()).add(oid)
            self._loaded().pop(oid)
            try:
                packfile.drop_from_index(self.packs_dir, name, {oid}, self.fsync)
            except OSError:
                pass  # best effort: this instance no longer reads it; fsck reports the record

    def check_records(self) -> Iterator[tuple[ObjectId, str, str]]:
        """`RecordChecking.check_records`: every record each published index names, against
        its header and crc."""
        self._catch_up()
        indexed, _, _ = packfile.list_packs(self.packs_dir)
        for name in sorted(indexed):
            path = pack_path(self.packs_dir, name)
            try:
                entries = packfile.index_entries(self.packs_dir, name)
                fd = packfile.open_pack(path)
            except (FileNotFoundError, packfile.CorruptIndex):
                continue  # compacted meanwhile, or an index that the next open rebuilds
            try:
                for oid, offset, length in entries:
                    problem = packfile.check_record(fd, oid, offset, length)
                    if problem is not None:
                        yield oid, path, problem
            finally:
                os.close(fd)

    # -- writes --------------------------------------------------------------------------

    def put(self, oid: ObjectId, stored: bytes) -> bool:
        if self.refresh(oid):
            return False
        return self._put_new(oid, stored)

    def put_absent(self, oid: ObjectId, stored: bytes) -> bool:
        """`put` of an object that `refresh` has just reported absent (the store's put path):
        skips repeating that lookup. False if another thread of this process stored it since;
        another process storing it at the same time only costs a duplicate, as with `put`."""
        return self._put_new(oid, stored)

    def _put_new(self, oid: ObjectId, stored: bytes) -> bool:
        if self._loose_left > 0 or len(stored) > self.large_object:  # decided under the lock
            with self._lock:
                go_loose = self._loose_left > 0 or len(stored) > self.large_object
                if go_loose:
                    self._loose_left -= 1
            if go_loose:
                self._note_loose(oid, present=True)
                return self._loose.put(oid, stored)
        crc = packfile.record_crc(oid, stored)
        with self._lock:
            return self._append(self._loaded(), oid, stored, crc)

    def put_absent_many(self, objects: Sequence[tuple[ObjectId, bytes]],
                        crcs: Sequence[int] | None = None) -> list[bool]:
        """`put_absent` of each object, in order, with one lock round for the batch (a first
        snapshot writes tens of thousands of small objects: the per-call overhead counts)."""
        if not objects:
            return []
        if self._loose_left > 0 or max(map(len, map(itemgetter(1), objects))) > self.large_object:
            return [self._put_new(oid, stored) for oid, stored in objects]
        oids = list(map(itemgetter(0), objects))
        with self._lock:
            table = self._loaded()
            if len(set(oids)) == len(oids) and table.absent(oids):
                self._append_many(table, objects, oids, crcs)
                return [True] * len(objects)
            if crcs is None:
                record_crc = packfile.record_crc
                crcs = [record_crc(oid, stored) for oid, stored in objects]
            append = self._append
            return [append(table, oid, stored, crc) for (oid, stored), crc in zip(objects, crcs)]

    def _append_many(self, table: PackTable, objects: Sequence[tuple[ObjectId, bytes]],
                     oids: list[ObjectId], crcs: Sequence[int] | None) -> None:
        """`_append` of each of `objects`, none of them in `table`, a pack's worth at a time
        (caller holds the lock)."""
        lengths = list(map(len, map(itemgetter(1), objects)))
        # each record's end within the batch, its header counted
        ends = list(accumulate(map(add, lengths, repeat(packfile.RECORD.size))))
        done = 0
        while done < len(objects):
            writer = self._open_writer(table)
            # A pack takes at least one record, and ends with the one that fills it.
            base = ends[done - 1] if done else 0
            end = min(bisect_left(ends, base + self.pack_size - writer.size, done) + 1,
                      len(objects))
            try:
                offsets = writer.append_many(objects[done:end],
                                             None if crcs is None else crcs[done:end])
            except OSError:
                self._drop_failed(writer)
                raise
            table.add_many(self._writer_slot, oids[done:end], offsets, lengths[done:end])
            if writer.size >= self.pack_size:
                self._seal_in_background()
            done = end

    def _append(self, table: PackTable, oid: ObjectId, stored: bytes, crc: int) -> bool:
        """Append one record to this instance's open pack (caller holds the lock)."""
        if table.find(oid) is not None:  # another thread got there first
            return False
        writer = self._open_writer(table)
        try:
            offset = writer.append(oid, stored, crc)
        except OSError:
            self._drop_failed(writer)
            raise
        table.add_one(self._writer_slot, oid, offset, len(stored))
        if writer.size >= self.pack_size:
            self._seal_in_background()
        return True

    def _open_writer(self, table: PackTable) -> PackWriter:
        """This instance's open pack, a new one if it has none (caller holds the lock)."""
        writer = self._writer
        if writer is None:
            os.makedirs(self.packs_dir, exist_ok=True)
            writer = self._writer = PackWriter(self.packs_dir, self.fsync)
            self._writer_slot = table.new_slot(writer.name)
            self._listed = self._listed | {writer.name}
        return writer

    def put_stream(self, oid: ObjectId, chunks: Iterable[bytes]) -> bool:
        if self.refresh(oid):
            return False
        parts: list[bytes] = []
        total = 0
        source = iter(chunks)
        for chunk in source:  # if chunks raises, nothing was stored
            parts.append(chunk)
            total += len(chunk)
            if total > self.large_object:
                self._note_loose(oid, present=True)
                return self._loose.put_stream(oid, chain(parts, source))
        return self._put_new(oid, b"".join(parts))

    def _seal(self) -> None:
        """Publish every pack of this instance: wait for the background seals, then seal the
        open pack. A pack whose seal fails is removed with its objects (see `_drop_failed`)
        and the first failure raised once all are done. Caller holds the lock."""
        failure: OSError | None = None
        for name, sealing in list(self._sealing.items()):
            try:
                sealing.finish()
            except OSError as exc:
                sealing.writer.abandon()
                failure = failure or exc
            del self._sealing[name]
        writer = self._writer
        if writer is not None:
            try:
                writer.seal()
            except OSError as exc:
                writer.abandon()
                failure = failure or exc
            self._writer = None
            self._writer_slot = -1
        if failure is not None:
            self._table = None  # reloaded without the removed packs at the next use
            raise failure

    def _drop_failed(self, writer: PackWriter) -> None:
        """A write to the open pack failed (a full disk): remove the pack and forget its
        objects, so that a failed write keeps none of its bytes. Nothing references them:
        records are written only after a `sync()` succeeds, and a put or sync that raises
        means everything put since the last successful `sync()` must be put again."""
        self._writer = None
        self._writer_slot = -1
        writer.abandon()
        self._table = None  # reloaded at the next use: no IO on a failing disk now

    def _seal_in_background(self) -> None:
        """Hand the full open pack to a sealing thread; the next put opens a new one."""
        writer = self._writer
        assert writer is not None
        if self.fsync == "none":  # nothing to wait for: no thread
            self._seal()
            return
        writer.flush()  # from now on its records are read through the pack file
        self._sealing[writer.name] = _Sealing(writer)
        self._writer = None
        self._writer_slot = -1

    def delete(self, oid: ObjectId) -> int:
        freed = self._loose.delete(oid)
        if freed:
            self._note_loose(oid, present=False)
        with self._lock:
            table = self._loaded()
            for slot, _offset, length in table.pop(oid):
                name = table.packs[slot]
                freed += length
                deletion = self._deleted.get(name)
                if deletion is None:
                    mtime: int | None = None
                    if self._writer is None or name != self._writer.name:
                        try:
                            mtime = os.stat(pack_path(self.packs_dir, name)).st_mtime_ns
                        except FileNotFoundError:
                            continue  # gone with its objects
                    deletion = self._deleted[name] = Deletion(mtime, set())
                deletion.oids.add(oid)
        return freed

    def sync(self) -> None:
        """Seal the open pack (publishing it), sync loose objects, apply deletions, fold small
        packs once there are too many."""
        with self._lock:
            sealed = self._writer is not None
            self._seal()
            self._loose.sync()
            self._loose_left = self.loose_puts
            if self._deleted:
                self._compact(repack=False)
            if sealed:  # only a new pack can tip the count
                self._fold_small_packs()

    def _fold_small_packs(self) -> None:
        """Maintenance, not durability: the objects are published already, so a fold that
        fails (a full disk) changes nothing and the next sync tries again."""
        indexed, _, _ = packfile.list_packs(self.packs_dir)
        if len(indexed) <= self.fold_after:
            return
        sizes = {}
        for name in indexed:
            try:
                size = os.stat(pack_path(self.packs_dir, name)).st_size
            except FileNotFoundError:  # compacted by another process meanwhile
                continue
            if size < self.pack_size // 4:
                sizes[name] = size
        doomed = packs_to_fold(sizes, keep_at_most=self.fold_after)
        if not doomed:
            return
        try:
            fold_packs(self.packs_dir, doomed, fsync=self.fsync, pack_size=self.pack_size,
                       loose=self._loose)
        except OSError:
            pass  # its new pack was abandoned, its sources kept: nothing changed
        finally:
            self._rebuild()

    def compact(self) -> int:
        """Apply deletions, then fold loose objects and small packs into packs (GC calls it).

        Returns the bytes the rewrite reclaimed (pack bytes before minus after).
        """
        with self._lock:
            self._seal()
            return self._compact(repack=True)

    def _compact(self, *, repack: bool) -> int:
        deleted, self._deleted = self._deleted, {}
        try:
            return compact_packs(self.packs_dir, self._loose, deleted, fsync=self.fsync,
                                 pack_size=self.pack_size, repack=repack,
                                 packed=self._loaded())
        finally:
            self._loose_names.clear()
            self._rebuild()

    def sweep_temporaries(self, older_than: float) -> int:
        """Old temp files (loose and pack) and stray indexes; dead writers' packs get indexed."""
        removed = self._loose.sweep_temporaries(older_than)  # also covers packs/.tmp-*
        with self._lock:
            _, bare, orphans = packfile.list_packs(self.packs_dir)
            if self._writer is not None:
                bare.discard(self._writer.name)
            bare.difference_update(self._sealing)
            for name in sorted(bare):
                _try_recover(self.packs_dir, name, self.fsync)
            for name in orphans:  # a compaction died between its two unlinks
                removed += remove_if_older(packfile.index_path(self.packs_dir, name), older_than)
            self._rebuild()
        return removed

    def close(self) -> None:
        self.sync()
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            for fd in self._retired:  # only if a read is still going: it fails, as it would
                os.close(fd)           # after close() anyway
            self._retired.clear()


class _Sealing:
    """One full pack being sealed (fsync, then its index published) on its own thread."""

    __slots__ = ("error", "thread", "writer")

    def __init__(self, writer: PackWriter) -> None:
        self.writer = writer
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = threading.Thread(
            target=self._run, name=f"objstore-seal-{writer.name}")
        self.thread.start()

    def _run(self) -> None:
        try:
            self.writer.seal()
        except BaseException as exc:  # noqa: BLE001  (handed to the thread that syncs)
            self.error = exc

    def finish(self) -> None:
        """Wait for the seal and raise what it failed with."""
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def _try_recover(directory: str, name: str, fsync: FsyncPolicy) -> bool:
    """`recover_pack`, except that failing to write the index (a full or read-only disk) is
    not an error: no record references an unpublished pack, so recovering it only saves
    rewriting its objects, and opening a store must not need a byte of free space."""
    try:
        return packfile.recover_pack(directory, name, fsync)
    except OSError:
        return False


__all__ = ["PACKS_DIR", "PackedBackend"]
