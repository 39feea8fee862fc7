"""`RemoteRepo`: a ckpt repository in an S3 bucket (layout in layout.py), object-level only.

It moves stored envelopes between a local `ObjectStore` and the remote as packs, and keeps
opaque named bytes (records, heads). It knows nothing of checkpoints, sessions or catalogs:
which objects a checkpoint needs, and what a record or head says, is the caller's business.

Upload, resumable by construction:
    sync the remote index (list index/, fetch what the cache lacks)
    for each wanted id and, transitively and before it, each dictionary/base/block its
        envelope names: skip it if an index names it; else read its envelope as stored,
        check it, append to the open pack; at the pack's size (doubling from
        FIRST_PACK_SIZE up to pack_size): on one of SENDS_AT_ONCE threads, PUT pack, HEAD
        its size, PUT refs, PUT index
    a kill leaves whole packs indexed and at most one pack with no index (garbage for gc):
    a rerun re-sends only what no index names
Fetch:
    for each wanted id the store lacks (one listing of the store's ids for many): locate it
    by the index, group by pack (by runs: ids asked for in a walk's order come in the
    push's), coalesce neighbouring records into ranged GETs, a part of a pack (FETCH_PART;
    the first FIRST_PART) at a time (the next parts' GETs run while this one's records are
    stored, in batches of STORE_BATCH; a GET that continues the last one of its pack reads
    READ_AHEAD at least, kept for the next); check each record's framing (crc) and envelope
    header, then store the envelope as it came: every read of the store decodes
    and hashes it anyway, so it is not decoded twice. The dictionaries/bases/blocks the refs
    files say the wanted ids need, at every depth, are read in the same pass when they come
    first there (earlier in their pack, or in a pack ranked before: a block precedes its
    members as a push lays them out), the rest in a first round of their own; one an
    envelope names that is not stored yet is fetched in the next round; either way an
    envelope is stored after what it names (in the same batch or a later one), so a kill
    never leaves a stored object whose reference is missing
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from bisect import bisect_left
from collections import defaultdict, deque
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from itertools import accumulate, groupby
from operator import itemgetter
from typing import Literal, cast

from ckpt.objstore import codec
from ckpt.objstore.backend import BulkBackend
from ckpt.objstore.errors import CorruptObject
from ckpt.objstore.ids import ObjectId
from ckpt.objstore.packfile import encode_index
from ckpt.objstore.remote import layout
from ckpt.objstore.remote.envelopes import check_envelope
from ckpt.objstore.remote.errors import (
    RemoteConflict,
    RemoteCorrupt,
    RemoteError,
    RemoteFormatError,
    RemoteNotFound,
)
from ckpt.objstore.remote.index import Location, RemoteIndex
from ckpt.objstore.remote.locks import HeldLock, LockKind
from ckpt.objstore.remote.packs import Entry, PackBuilder, Span, checked_records, plan_spans
from ckpt.objstore.remote.reports import (
    FetchReport,
    RemoteCheckReport,
    RemoteGcReport,
    UploadReport,
)
from ckpt.objstore.remote.transport import PreconditionFailed, S3Transport
from ckpt.objstore.remote.url import RemoteSpec
from ckpt.objstore.store import ObjectStore
from ckpt.objstore.threads import shared_pool

# A ranged GET's bytes, as the client received them (`S3Transport.get_range_views`).
Part = bytes | memoryview
# An object a fetch says is readable (`RemoteRepo.fetch`'s `ready`): its id, and the envelope
# it stored (None for one the store had already).
Arrived = tuple[ObjectId, bytes | None]

# A fetch's round: ids, where each is (None: looked up when the round is read), and the order
# to read their packs in (pack id -> rank; unranked packs after, in the order the ids meet
# them).
Round = tuple[list[ObjectId], list[Location | None] | None, dict[str, int]]
# A fetched record (packs.Record), and the bytes of the GET that brought it (see `_records`).
_Fetched = tuple[ObjectId, bytes, int, tuple[ObjectId, ...], int]

PACK_SIZE = 64 << 20
# The first pack of an upload closes at this size, each next one at twice the last, up to the
# pack size: the first PUT starts after little reading and checking, and big uploads still
# make few packs.
FIRST_PACK_SIZE = 8 << 20
# Packs being sent at once (each PUT, HEAD, refs and index on a thread of its own), while the
# next is read and checked here: one send waiting on the server does not hold up the other.
SENDS_AT_ONCE = 2
# A fetch of at least this many ids lists the store's ids once instead of asking for each.
_LIST_FROM = 256
# A fetch stores (and says ready) what it got in batches of about this many bytes, not a
# pack's worth at once: the caller starts on them sooner and fewer copies are held.
STORE_BATCH = 4 << 20
# A fetch reads a pack's ranges in parts of about this many bytes, the next part while the
# caller stores this one: what it holds does not grow with the pack size.
FETCH_PART = 8 << 20
PARTS_AHEAD = 4
# The first part is smaller: its records are stored and staged while the next arrive.
FIRST_PART = 1 << 20
# What the last small GETs brought stays in memory up to this size (`_Recent`); a GET that
# continues the last one of its pack reads at least this much (a tree walk's next levels).
RECENT_BYTES = 16 << 20
READ_AHEAD = 4 << 20
CONNECT_TIMEOUT = 10.0
HEAD_ATTEMPTS = 16  # If-Match rounds of update_head before it gives up
_CACHE_ID = "remote-id"
# the fields of a `Location` (and the place and length of an `Entry`), at C speed over many
_PACKID, _OFFSET, _LENGTH = itemgetter(0), itemgetter(1), itemgetter(2)

__all__ = ["FetchReport", "RemoteCheckReport", "RemoteGcReport", "RemoteRepo", "UploadReport"]


class RemoteRepo:
    """One connected remote. Not thread-safe; `close` when done."""

    def __init__(self, spec: RemoteSpec, transport: S3Transport, repo_id: str,
                 cache_dir: str | None, *, pack_size: int, clock: Callable[[], float]) -> None:
        self.spec = spec
        self.id = repo_id
        self.pack_size = pack_size
        self._transport = transport
        self._index = RemoteIndex(cache_dir)
        self._recent = _Recent()
        self._clock = clock
        self._held: list[LockKind] = []
        # Whether the index table is the remote's as of this lock hold: while a lock is held
        # no gc removes a pack, so it is listed once per hold (and again when a fetch asks
        # for an object it does not name: another pusher's, indexed since).
        self._synced = False

    @property
    def url(self) -> str:
        return self.spec.url

    @classmethod
    def connect(cls, spec: RemoteSpec, cache_dir: str | None, *, create: bool = False,
                timeout: float = CONNECT_TIMEOUT, pack_size: int = PACK_SIZE,
                clock: Callable[[], float] = time.time) -> RemoteRepo:
        """Open the remote at `spec` (reads `config`; `create`: write one if there is none,
        a concurrent creator's winning). `cache_dir` keeps its indexes between runs (None:
        memory only). RemoteFormatError if there is no ckpt remote and not `create`."""
        transport = S3Transport(spec, timeout=timeout)
        try:
            data, _ = transport.get(layout.CONFIG_KEY)
        except RemoteNotFound:
            if not create:
                raise RemoteFormatError(spec.url, "no ckpt remote here (a push creates one)"
                                        ) from None
            data = layout.encode_config(os.urandom(8).hex(), int(clock() * 1e9))
            try:
                transport.put(layout.CONFIG_KEY, data, mode="create")
            except PreconditionFailed:  # another first push won: use its config
                data, _ = transport.get(layout.CONFIG_KEY)
        decoded = layout.decode_config(data)
        if decoded is None:
            raise RemoteFormatError(spec.url, "its config is not a ckpt remote's this version "
                                              "reads")
        repo_id = decoded[0]
        if cache_dir is not None:
            _claim_cache(cache_dir, repo_id)
        return cls(spec, transport, repo_id, cache_dir, pack_size=pack_size, clock=clock)

    def close(self) -> None:
        self._held.clear()

    # -- locks ---------------------------------------------------------------------------

    @contextmanager
    def lock(self, kind: Literal["shared", "exclusive"]) -> Iterator[None]:
        """Hold a remote lock (locks.py has the rules); RemoteLocked if another holder's
        lock forbids it."""
        held = HeldLock(self._transport, kind, self._clock)
        held.acquire()
        try:
            self._held.append(kind)
            self._synced = False  # a gc may have run since the last hold
            yield
        finally:
            if kind in self._held:
                self._held.remove(kind)
            if not self._held:
                self._recent.clear()
            try:
                held.release()
            except RemoteError:
                pass  # the lock goes stale by itself; the operation's own outcome stands

    def _sync(self, *, again: bool = False) -> None:
        """List and load the remote's indexes, unless done already in this lock hold."""
        if again or not self._synced:
            self._index.sync(self._transport)
            self._synced = True

    def _require_exclusive(self, what: str) -> None:
        if "exclusive" not in self._held:
            raise RuntimeError(f"{what} needs the remote's exclusive lock")

    # -- objects -------------------------------------------------------------------------

    def missing(self, oids: Iterable[ObjectId]) -> set[ObjectId]:
        """The ids of `oids` no index of the remote names."""
        self._sync()
        names = self._index.names
        return {oid for oid in oids if not names(oid)}

    def upload(self, store: ObjectStore, oids: Iterable[ObjectId],
               progress: Callable[[int, int], None] | None = None) -> UploadReport:
        """Send the objects of `oids` (and the dictionaries and bases their envelopes name)
        that no remote index names, as packs. `progress(done, known)` after each pack is
        indexed: objects uploaded so far, objects found to upload so far. ObjectNotFound if
        the store lacks one."""
        self._sync()
        known = self._index.names
        queue = deque(dict.fromkeys(oids))
        queued = set(queue)
        blocks: set[ObjectId] = set()  # named by a member envelope
        skipped = uploaded = packs = sent_bytes = 0
        total = sum(1 for oid in queue if not known(oid))
        builder = PackBuilder()
        # Packs in flight on threads while the next is read and checked here, oldest first.
        in_flight: deque[tuple[Future[tuple[str, int]], PackBuilder]] = deque()

        def landed() -> None:
            nonlocal uploaded, packs, sent_bytes
            future, sent = in_flight.popleft()
            packid, size = future.result()
            self._index.add_pack(packid, sent.entries, size, sent.refs)
            sent_bytes += size
            uploaded += len(sent)
            packs += 1
            if progress is not None:
                progress(uploaded, total)

        def send(sent: PackBuilder) -> None:
            while len(in_flight) >= SENDS_AT_ONCE:
                landed()
            in_flight.append((pool.submit(self._put_pack, sent), sent))

        with ThreadPoolExecutor(SENDS_AT_ONCE, thread_name_prefix="ckpt-remote-put") as pool:
            while queue:
                oid = queue.popleft()
                if known(oid):
                    skipped += 1
                    continue
                stored = store.backend.get(oid)
                refs = codec.envelope_refs(stored, oid)
                fresh = [r for r in refs if r not in queued]
                if fresh:
                    # What it names goes first: checked before it, and a block's content is
                    # then decompressed once for the checks of all its members.
                    queued.update(fresh)
                    if codec.read_header(stored, oid)[0] == codec.CODEC_BLOCK:
                        blocks.update(fresh)
                    queue.appendleft(oid)
                    queue.extendleft(reversed(fresh))
                    total += sum(not known(r) for r in fresh)
                    continue
                check_envelope(oid, stored, store, keep_block=oid in blocks)
                builder.append(oid, stored, refs)
                # The first packs are small, so that the first PUT starts soon.
                if builder.size >= min(self.pack_size, FIRST_PACK_SIZE << (packs + len(in_flight))):
                    send(builder)
                    builder = PackBuilder()
            if len(builder):
                send(builder)
            while in_flight:
                landed()
        return UploadReport(uploaded, packs, sent_bytes, skipped)

    def _send_pack(self, builder: PackBuilder) -> int:
        """`_put_pack`, then the pack in this process's index. Returns the pack's size."""
        packid, size = self._put_pack(builder)
        self._index.add_pack(packid, builder.entries, size, builder.refs)
        return size

    def _put_pack(self, builder: PackBuilder) -> tuple[str, int]:
        """PUT the pack, check its size, then its refs and its index: an index names only a
        complete pack. Returns the pack's id and size. Runs on a thread of its own: the
        index of this process is the caller's to update."""
        packid, data = builder.finish()
        key = layout.pack_key(packid)
        self._transport.put(key, data)
        found = self._transport.head(key).size
        if found != len(data):
            raise RemoteCorrupt(self.url, key, f"{found} bytes after upload of {len(data)}")
        if builder.refs:
            refs = codec.pack_data([[a, b] for a, b in builder.refs.items()])
            self._transport.put(layout.refs_key(packid), refs)
            self._index.remember("refs", packid, refs)
        index = encode_index(builder.entries, len(data))
        self._transport.put(layout.index_key(packid), index)
        self._index.remember("index", packid, index)
        return packid, len(data)

    def fetch(self, store: ObjectStore, oids: Iterable[ObjectId], *, sync: bool = True,
              ready: Callable[[list[Arrived]], object] | None = None) -> FetchReport:
        """Put into `store` the objects of `oids` it lacks (and the dictionaries and bases
        their envelopes need, each stored before what needs it). A record's framing (crc32 of
        id and envelope) and its envelope's header are checked before the store gets it; its
        content is not decoded here: every read of the store verifies it by its hash.
        CorruptObject naming the object, RemoteCorrupt naming a pack or index, RemoteNotFound
        for an object no index names. The remote's indexes are listed once per lock hold,
        and again when one of `oids` is in none of them. `sync`: publish the store's packs at
        the end (a caller fetching in several calls may do it once after the last).

        `ready` is called with each id of `oids` once, as soon as the store can read it:
        those it had first, then each batch as it is stored (readable, not yet synced), so
        that a caller can use the objects while the rest are still arriving; a fetched one
        comes with its envelope as stored (`Arrived`), which the caller may decode without
        reading it back (`ObjectStore.get_bytes_from`). What it raises ends the fetch."""
        asked_for = list(dict.fromkeys(oids))
        wanted = lacking(store, asked_for)
        if ready is not None and len(wanted) < len(asked_for):
            missing = set(wanted)
            ready([(oid, None) for oid in asked_for if oid not in missing])
        if not wanted:
            return FetchReport(0, 0, 0)
        self._sync()
        where = self._located(wanted)
        store_many = _putter(store)
        requested = set(wanted)
        stored_ids: set[ObjectId] = set()  # put by this fetch

        def put_many(objects: list[tuple[ObjectId, bytes]], crcs: list[int] | None = None
                     ) -> int:
            if not objects:
                return 0
            count = store_many(objects, crcs)
            stored_ids.update(oid for oid, _ in objects)
            if ready is not None:
                # What the caller did not ask for is a block, dictionary or base that what it
                # asked for needs: a plain one may be a block, read back right after.
                store.hold_blocks([(oid, stored) for oid, stored in objects
                                   if oid not in requested and stored[4] <= codec.CODEC_ZSTD])
                ready([(oid, stored) for oid, stored in objects if oid in requested])
            return count

        present: dict[ObjectId, bool] = {}  # references looked up in the store

        def have(ref: ObjectId) -> bool:
            if ref in stored_ids:
                return True
            found = present.get(ref)
            if found is None:
                found = present[ref] = store.has(ref)
            return found

        waiting: dict[ObjectId, tuple[bytes, tuple[ObjectId, ...]]] = {}  # refs not yet stored

        def settle() -> int:
            """Store the waiting envelopes whose references are stored by now (and those
            that these complete, in turn)."""
            count = 0
            while ready_ids := [oid for oid, (_, refs) in waiting.items() if all(map(have, refs))]:
                count += put_many([(oid, waiting.pop(oid)[0]) for oid in ready_ids])
            return count

        rounds = self._rounds(store, wanted, where)
        asked: set[ObjectId] = set().union(*(batch for batch, _, _ in rounds))
        put = requests = fetched_bytes = 0
        raised = False
        found: tuple[ObjectId, ...] = ()  # the references last found batched or stored
        while rounds:
            later: list[ObjectId] = []
            packs = self._read_packs(self._by_pack(*rounds.popleft()))
            try:
                for records in packs:
                    storable: list[tuple[ObjectId, bytes]] = []
                    crcs: list[int] = []  # storable's record crcs, checked by `_records`
                    batched: set[ObjectId] = set()  # storable's ids: stored before what follows
                    held = 0
                    for oid, stored, crc, refs, span_bytes in records:
                        requests += span_bytes > 0
                        fetched_bytes += span_bytes
                        if refs and refs != found:
                            if not raised:
                                store.ensure_format(2)
                                raised = True
                            fresh = [r for r in refs if r not in asked]
                            asked.update(fresh)
                            later += lacking(store, fresh)
                            if not all(r in batched or have(r) for r in refs):
                                waiting[oid] = (stored, refs)
                                continue
                            # Asked for, and batched or stored: the rest of a block's members
                            # (which come in a row) need not look again.
                            found = refs
                        storable.append((oid, stored))
                        crcs.append(crc)
                        batched.add(oid)
                        held += len(stored)
                        if held >= STORE_BATCH:
                            put += put_many(storable, crcs)
                            storable, crcs, held = [], [], 0
                            batched.clear()
                    put += put_many(storable, crcs)
                    if waiting:
                        put += settle()
            finally:  # on a raise too: the GETs still running are waited for
                packs.close()
            if later:
                rounds.append((later, None, {}))
        if waiting:  # every reference is stored by now, unless the remote holds a cycle
            oid = next(iter(waiting))
            raise CorruptObject(oid, "its dictionary or delta base never arrives "
                                     "(a reference cycle on the remote)")
        if sync:
            store.sync()
        return FetchReport(put, fetched_bytes, requests)

    def _located(self, oids: list[ObjectId]) -> list[Location | None]:
        """Where each of `oids` is, by the remote's indexes; listed again first if one is in
        none of them (another machine may have pushed since the listing)."""
        where = list(map(self._index.locations.get, oids))
        if None in where:
            self._sync(again=True)
            where = list(map(self._index.locations.get, oids))
        return where

    def _rounds(self, store: ObjectStore, wanted: list[ObjectId],
                where: list[Location | None]) -> deque[Round]:
        """`wanted` (found at `where`) as rounds of a fetch, each ids and the order their
        packs are to be read in. What the envelopes need (blocks, dictionaries, bases, at every
        depth, as the remote's refs files say) and the store lacks is read in the same pass as
        what needs it when it comes first there: earlier in the same pack, or in a pack read
        before (`_pack_order`), as a block and its members are pushed. The rest, read in a
        first round of their own, is stored before the envelopes that need it arrive, instead
        of those waiting for it in memory. Within that round a base that arrives before its
        own base waits until the end of that one's part; the depths share one round so that
        the fetch makes one pass over the packs for all of them. (An envelope naming one the
        refs files do not is still held back.)"""
        refs = self._index.refs
        locations = self._index.locations
        seen = set(wanted)
        main = seen.copy()  # what the pass reads (copied: cheaper than hashing them again)
        # what the store lacks -> what needs it, and where each of those is
        needs: dict[ObjectId, tuple[list[ObjectId], list[Location | None]]] = {}
        level, level_where = wanted, where
        while True:
            named: dict[ObjectId, tuple[list[ObjectId], list[Location | None]]] = {}
            start = 0
            # By runs of the same reference: asked for in the order a walk meets them, as a
            # push laid them out, a block's members come in a row.
            for ref, run in groupby(map(refs.get, level)):
                end = start + len(list(run))
                if ref is not None and ref not in seen:
                    group = named.get(ref)
                    if group is None:
                        named[ref] = (level[start:end], level_where[start:end])
                    else:
                        group[0].extend(level[start:end])
                        group[1].extend(level_where[start:end])
                start = end
            level = lacking(store, list(named))
            if not level:
                break
            seen.update(level)
            needs.update((ref, named[ref]) for ref in level)
            level_where = list(map(locations.get, level))
        if not needs:
            return deque([(wanted, where, {})])
        after: dict[str, set[str]] = defaultdict(set)  # pack -> packs holding what it needs
        # ref -> where it is, the first offset of what needs it in its own pack (None: all in
        # others), the other packs that hold what needs it; nothing for one not located
        places: dict[ObjectId, tuple[Location, int | None, set[str]]] = {}
        for ref, (_, dependents_at) in needs.items():
            at_ref = locations.get(ref)
            if at_ref is None or None in dependents_at:
                continue
            located = cast(list[Location], dependents_at)
            pack = at_ref.packid
            others = set(map(_PACKID, located))
            nearest = (min(map(_OFFSET, located)) if others == {pack}
                       else min([at.offset for at in located if at.packid == pack])
                       if pack in others else None)
            others.discard(pack)
            for packid in others:
                after[packid].add(pack)
            places[ref] = (at_ref, nearest, others)
        order = _pack_order(after)
        alongside: list[ObjectId] = []
        first: list[ObjectId] = []
        for ref, (dependents, _) in needs.items():  # by depth: a dependent is placed already
            place = places.get(ref)
            if place is not None and main.issuperset(dependents) and _comes_first(*place, order):
                main.add(ref)
                alongside.append(ref)
            else:
                first.append(ref)
        rounds: deque[Round] = deque([(first, None, {})] if first else [])
        rounds.append((wanted + alongside, where + [places[ref][0] for ref in alongside], order))
        return rounds

    def _read_packs(self, groups: dict[str, list[Entry]]
                    ) -> Generator[Iterator[_Fetched], None, None]:
        """The records of each pack of `groups` (as `_records` gives them), a part of about
        FETCH_PART bytes at a time (the first one FIRST_PART). The next parts' ranges are
        being fetched on threads while the caller stores this one's: up to FETCH_PART bytes
        of them and PARTS_AHEAD parts, so that two big parts are held, not two packs, and
        small scattered ones (a round of delta bases) do not wait for each other's round
        trips."""
        keys = [(layout.pack_key(packid), part)
                for number, (packid, entries) in enumerate(groups.items())
                for part in _parts(entries, FETCH_PART if number else min(FIRST_PART, FETCH_PART))]
        if not keys:
            return
        pool = shared_pool("ckpt-remote-fetch", PARTS_AHEAD)
        ahead: deque[tuple[str, int, Future[tuple[list[Span], list[Part], list[int]]]]] = deque()
        queued = held = 0

        def top_up() -> None:
            nonlocal queued, held
            while queued < len(keys) and (not ahead or (len(ahead) < PARTS_AHEAD
                                          and held < FETCH_PART)):
                key, entries = keys[queued]
                size = sum(length for _, _, length in entries)
                ahead.append((key, size, pool.submit(self._get_spans, key, entries)))
                queued += 1
                held += size

        try:
            top_up()
            while ahead:
                key, size, fetching = ahead.popleft()
                held -= size
                spans, parts, sizes = fetching.result()
                top_up()
                yield _records(key, spans, parts, sizes)
        finally:  # on a raise or an early close: none of these GETs outlives the fetch
            futures.wait([fetching for _, _, fetching in ahead if not fetching.cancel()])

    def _by_pack(self, oids: list[ObjectId], where: list[Location | None] | None,
                 order: dict[str, int]) -> dict[str, list[Entry]]:
        """The entries of `oids` (found at `where`; None: looked up here) by pack, the packs
        numbered in `order` first (by it), the others in the order `oids` first meets them."""
        groups: dict[str, list[Entry]] = defaultdict(list)
        if where is None:
            where = list(map(self._index.locations.get, oids))
        if None in where:
            oid = oids[where.index(None)]
            for key, reason in self._index.damaged.items():
                raise RemoteCorrupt(self.url, key, reason)
            raise RemoteNotFound(self.url, f"object {oid.hex()}", oid)
        located = cast(list[Location], where)
        start = 0
        for packid, run in groupby(map(_PACKID, located)):  # by runs, as for `_rounds`
            end = start + len(list(run))
            at = located[start:end]
            groups[packid].extend(zip(oids[start:end], map(_OFFSET, at), map(_LENGTH, at)))
            start = end
        if not order:
            return groups
        last = len(order)
        return dict(sorted(groups.items(), key=lambda group: order.get(group[0], last)))

    def _get_spans(self, key: str, entries: list[Entry]
                   ) -> tuple[list[Span], list[Part], list[int]]:
        """The ranged GETs that cover `entries` of the pack at `key`, their bytes, and how
        many bytes each GET brought: a span that what a GET brought lately covers
        (`_Recent`) is served from that, and brought 0."""
        spans = plan_spans(entries)
        parts = [self._recent.get(key, s.start, s.length) for s in spans]
        sizes = [0] * len(spans)
        todo = [i for i, part in enumerate(parts) if part is None]
        if todo:
            ranges = [(spans[i].start, spans[i].length) for i in todo]
            if len(ranges) == 1:  # a lone GET may read ahead (several would overlap)
                start, length = ranges[0]
                size = self._index.pack_sizes.get(layout.packid_of(key, layout.PACKS) or "", 0)
                ranges = [(start, self._recent.ahead(key, start, length, size))]
            try:
                got = self._transport.get_range_views(key, ranges)
            except RemoteNotFound:
                raise RemoteCorrupt(self.url, key, "missing, though an index names it") from None
            for i, data in zip(todo, got):
                parts[i] = data[:spans[i].length]  # a read ahead brought more
                sizes[i] = len(data)
                self._recent.keep(key, spans[i].start, data)
        return spans, cast(list[Part], parts), sizes

    # -- records and heads ---------------------------------------------------------------

    def put_record(self, name: str, data: bytes) -> bool:
        """Write `records/<name>` if absent (If-None-Match: *). False if the same bytes are
        already there; RemoteConflict if other bytes are."""
        key = layout.RECORDS + layout.check_name(name, "record")
        try:
            self._transport.put(key, data, mode="create")
            return True
        except PreconditionFailed:
            existing, _ = self._transport.get(key)
            if existing == data:
                return False
            raise RemoteConflict(self.url, f"record {name} exists with other bytes") from None

    def list_records(self) -> list[str]:
        return sorted(info.key[len(layout.RECORDS):]
                      for info in self._transport.list(layout.RECORDS)
                      if "/" not in info.key[len(layout.RECORDS):])

    def get_record(self, name: str) -> bytes:
        """RemoteNotFound if there is no such record."""
        key = layout.RECORDS + layout.check_name(name, "record")
        return self._transport.get(key)[0]

    def delete_record(self, name: str) -> None:
        """Remove a record; only under this repo's exclusive lock."""
        self._require_exclusive("delete_record")
        self._transport.delete(layout.RECORDS + layout.check_name(name, "record"))

    def update_head(self, session: str, update: Callable[[bytes | None], bytes]) -> None:
        """Read-modify-write `heads/<session>`: `update(current or None)` gives the new bytes,
        written only if nobody wrote the head since it was read (If-Match on its ETag, or
        If-None-Match when absent), else read again and retried; RemoteConflict after
        HEAD_ATTEMPTS lost rounds. `update` may be called several times."""
        key = layout.HEADS + head_name(session)
        for _ in range(HEAD_ATTEMPTS):
            try:
                current, etag = self._transport.get(key)
            except RemoteNotFound:
                current, etag = None, None
            data = update(current)
            try:
                self._transport.put(key, data, mode="create" if etag is None else etag)
                return
            except PreconditionFailed:
                continue
        raise RemoteConflict(self.url, f"head of {session!r} keeps changing under this write")

    def get_head(self, session: str) -> bytes | None:
        try:
            return self._transport.get(layout.HEADS + head_name(session))[0]
        except RemoteNotFound:
            return None

    # -- maintenance ---------------------------------------------------------------------

    def check(self, *, full: bool) -> RemoteCheckReport:
        """Every index against its pack's presence and size; `full`: every pack's bytes
        against its id, every record's crc, every envelope's hash (one without a dictionary
        or base of its own; those are checked for framing and that the remote has their
        reference)."""
        from ckpt.objstore.remote.maintenance import check_remote  # noqa: PLC0415

        self._sync(again=True)
        return check_remote(self._transport, self._index, full=full)

    def gc(self, live: set[ObjectId], *, grace_seconds: float) -> RemoteGcReport:
        """Remove what `live` (closed here under dictionaries and bases) does not need:
        packs with no live object and packs with no index, once older than `grace_seconds`;
        a pack more than half dead is rewritten (new pack and index first, then the old
        index and pack). Only under this repo's exclusive lock."""
        from ckpt.objstore.remote.maintenance import collect_remote  # noqa: PLC0415

        self._require_exclusive("gc")
        self._sync(again=True)
        return collect_remote(self._transport, self._index, live, grace_seconds=grace_seconds,
                              now=self._clock(), send_pack=self._send_pack)


class _Recent:
    """The bytes of the last small ranged GETs (RECENT_BYTES at most, none bigger than half
    of it), to serve a later fetch's span they cover: a tree walk's levels lie in one
    stretch of a pack, one after another, so a GET that continues the last one of its pack
    reads READ_AHEAD at least (`ahead`), and the next levels are served from it. A pack's
    bytes never change (its id is their hash). Shared by a fetch's GET threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: dict[str, list[tuple[int, Part]]] = {}
        self._size = 0
        self._ends: dict[str, int] = {}  # pack key -> where the last GET of it ended

    def ahead(self, key: str, start: int, length: int, pack_size: int) -> int:
        """How much to GET for a span of `length` at `start` of the pack at `key` (of
        `pack_size` bytes; 0: not known): READ_AHEAD at least, up to the pack's end, if the
        span starts in the stretch the last GET of the pack ended, else just the span."""
        with self._lock:
            end = self._ends.get(key)
        if end is None or not end - READ_AHEAD <= start <= end or pack_size <= start:
            return length
        return max(length, min(READ_AHEAD, pack_size - start))

    def get(self, key: str, start: int, length: int) -> Part | None:
        with self._lock:
            for at, data in self._kept.get(key, ()):
                if at <= start and start + length <= at + len(data):
                    return data[start - at:start - at + length]
        return None

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._size = 0
            self._ends.clear()

    def keep(self, key: str, start: int, data: Part) -> None:
        with self._lock:
            self._ends[key] = start + len(data)
            if len(data) > RECENT_BYTES // 2:
                return
            if self._size + len(data) > RECENT_BYTES:
                self._kept.clear()  # all at once: a walk's stretch is read again at worst
                self._size = 0
            self._kept.setdefault(key, []).append((start, data))
            self._size += len(data)


def _records(key: str, spans: list[Span], parts: list[Part], sizes: list[int]
             ) -> Iterator[_Fetched]:
    """(oid, stored bytes, record crc, what the envelope names, bytes the GET that brought it
    fetched, once per GET: 0 for a span served from memory) per record of `spans`, its
    framing and envelope header checked (`checked_records`); CorruptObject naming the
    object if it is damaged."""
    for span, part, got in zip(spans, parts, sizes):
        for oid, stored, crc, refs in checked_records(key, span, part):
            yield oid, stored, crc, refs, got
            got = 0


def _pack_order(after: dict[str, set[str]]) -> dict[str, int]:
    """The packs `after` names (pack -> the packs holding what its objects need), numbered
    so that each comes after those it needs where that is possible (a cycle is broken at
    the pack met first)."""
    packs = dict.fromkeys([*after, *(p for needed in after.values() for p in needed)])
    order: dict[str, int] = {}
    while len(order) < len(packs):
        free = [p for p in packs if p not in order and after.get(p, set()).issubset(order)]
        for packid in free or [next(p for p in packs if p not in order)]:
            order[packid] = len(order)
    return order


def _comes_first(where: Location, nearest: int | None, others: set[str],
                 order: dict[str, int]) -> bool:
    """Whether a fetch that reads packs by `order` (others last) reads `where` before what
    needs it: before offset `nearest` of its own pack, and before the packs `others`."""
    if nearest is not None and nearest < where.offset:
        return False
    last = len(order)
    rank = order.get(where.packid, last)
    return all(rank < order.get(packid, last) for packid in others)


def _parts(entries: list[Entry], first: int) -> list[list[Entry]]:
    """`entries` of one pack in their order in it, cut into parts of about FETCH_PART bytes,
    the first of about `first`: each ends with the entry that takes it to that size."""
    ordered = sorted(entries, key=_OFFSET)
    ends = list(accumulate(map(_LENGTH, ordered)))  # each entry's end within them all
    parts: list[list[Entry]] = []
    start = base = 0
    size = first
    while start < len(ordered):
        cut = min(bisect_left(ends, base + size, start) + 1, len(ordered))
        parts.append(ordered[start:cut])
        start, base, size = cut, ends[cut - 1], FETCH_PART
    return parts


def lacking(store: ObjectStore, oids: list[ObjectId]) -> list[ObjectId]:
    """The ids of `oids` that `store` does not have, in order. Many are looked up in one
    listing of the store's ids: a miss of `has` re-reads the pack directory (another
    process may have published since), which a fetch into an empty store would pay per id."""
    if len(oids) < _LIST_FROM:
        return [oid for oid in oids if not store.has(oid)]
    present = set(store.backend.iter_ids())
    return [oid for oid in oids if oid not in present]


def _putter(store: ObjectStore
            ) -> Callable[[list[tuple[ObjectId, bytes]], list[int] | None], int]:
    """Stores envelopes as they are (the store lacked them when the fetch began) and says
    how many were new; a bulk backend takes each batch in one lock round, with the records'
    crcs when the caller has them checked."""
    backend = store.backend
    if isinstance(backend, BulkBackend):  # checked once: a Protocol's isinstance is slow
        bulk = backend
        return lambda objects, crcs: sum(bulk.put_absent_many(objects, crcs))
    return lambda objects, _: sum(backend.put(oid, stored) for oid, stored in objects)


def head_name(session: str) -> str:
    """A session name as one key component: letters, digits, "-" and "_" kept, every other
    byte as "~HH" (reversible: "~" itself is encoded)."""
    if not session:
        raise ValueError("a session name must not be empty")
    encoded = "".join(
        ch if ch.isascii() and (ch.isalnum() or ch in "-_")
        else "".join(f"~{b:02X}" for b in ch.encode("utf-8", "surrogateescape"))
        for ch in session)
    return layout.check_name(encoded, "session")


def _claim_cache(cache_dir: str, repo_id: str) -> None:
    """Empty the cache if it belongs to another remote (recreated at the same URL)."""
    marker = os.path.join(cache_dir, _CACHE_ID)
    try:
        with open(marker, encoding="ascii") as f:
            if f.read().strip() == repo_id:
                return
    except (OSError, UnicodeDecodeError):
        pass
    for kind in ("index", "refs"):
        shutil.rmtree(os.path.join(cache_dir, kind), ignore_errors=True)
    try:
        os.makedirs(cache_dir, exist_ok=True)
        with open(marker, "w", encoding="ascii") as f:
            f.write(repo_id + "\n")
    except OSError:
        pass  # a cache: without it, indexes come from the remote each time
