"""`check` and `gc` of a remote (behind `RemoteRepo.check` / `RemoteRepo.gc`).

check: every index decodes and its pack is there with the size the index says; every
    dictionary/base a refs file names is indexed; full: each pack read whole, its bytes
    against its id, each record's crc, each envelope decoded and hashed (those with a
    dictionary or base of their own only for framing: no local store here to decode them).
    A pack with no index is not a problem: it is an interrupted upload's, gc's to remove.
gc (the caller holds the exclusive lock):
    live += the dictionaries and bases live objects need, transitively (refs files)
    a pack with no index (and no damaged one) -> delete, once older than the grace period
    an indexed pack with no live object      -> delete index, refs, then pack, once older
    an indexed pack more than half dead (by bytes) -> its live records into a new pack
        (PUT, HEAD, refs, index, as an upload does), then the old index, refs and pack
    an object in several packs lives in the one the index table places it in; its other
    copies count as dead
"""

from __future__ import annotations

from collections.abc import Callable

from ckpt.objstore import codec
from ckpt.objstore.errors import CorruptObject
from ckpt.objstore.ids import ObjectId, hash_bytes
from ckpt.objstore.packfile import PACK_MAGIC, RECORD
from ckpt.objstore.remote import layout
from ckpt.objstore.remote.envelopes import check_envelope
from ckpt.objstore.remote.errors import RemoteNotFound
from ckpt.objstore.remote.index import RemoteIndex
from ckpt.objstore.remote.packs import Entry, PackBuilder, iter_records, plan_spans, record_problem
from ckpt.objstore.remote.reports import RemoteCheckReport, RemoteGcReport
from ckpt.objstore.remote.transport import KeyInfo, S3Transport


def _listed_packs(transport: S3Transport) -> dict[str, KeyInfo]:
    return {packid: info for info in transport.list(layout.PACKS)
            if (packid := layout.packid_of(info.key, layout.PACKS)) is not None}


def check_remote(transport: S3Transport, index: RemoteIndex, *, full: bool) -> RemoteCheckReport:
    problems = [f"{key}: damaged ({reason})" for key, reason in sorted(index.damaged.items())]
    packs = _listed_packs(transport)
    for packid, size in sorted(index.pack_sizes.items()):
        key = layout.pack_key(packid)
        info = packs.get(packid)
        if info is None:
            problems.append(f"{key}: missing, though its index names "
                            f"{len(index.pack_entries[packid])} objects")
        elif info.size != size:
            problems.append(f"{key}: {info.size} bytes, its index says {size}")
        elif full:
            problems.extend(_check_pack_bytes(transport, key, packid, size,
                                              index.pack_entries[packid]))
    for oid, ref in sorted(index.refs.items()):
        if ref not in index.locations:
            problems.append(f"object {oid.hex()} needs {ref.hex()}, which no index names")
    records = sum(1 for _ in transport.list(layout.RECORDS))
    return RemoteCheckReport(len(index.pack_sizes), len(index.locations), records,
                             tuple(problems))


def _check_pack_bytes(transport: S3Transport, key: str, packid: str, size: int,
                      entries: list[Entry]) -> list[str]:
    try:
        data, _ = transport.get(key, size=size)
    except RemoteNotFound:
        return [f"{key}: missing, though its index names {len(entries)} objects"]
    problems: list[str] = []
    if hash_bytes(data).hex() != packid:
        problems.append(f"{key}: its bytes do not match its name")
    for entry in entries:
        oid, offset, length = entry
        problem = record_problem(data, offset - RECORD.size, entry)
        if problem is None:
            try:
                check_envelope(oid, data[offset:offset + length], None)
            except CorruptObject as exc:
                problem = exc.reason
        if problem is not None:
            problems.append(f"object {oid.hex()} in {key}: {problem}")
    return problems


def collect_remote(transport: S3Transport, index: RemoteIndex, live: set[ObjectId], *,
                   grace_seconds: float, now: float,
                   send_pack: Callable[[PackBuilder], int]) -> RemoteGcReport:
    needed = set(live)
    stack = list(live)
    while stack:
        ref = index.refs.get(stack.pop())
        if ref is not None and ref not in needed:
            needed.add(ref)
            stack.append(ref)
    packs = _listed_packs(transport)
    damaged = {key[len(layout.INDEX):] for key in index.damaged if key.startswith(layout.INDEX)}
    deleted = rewritten = freed = held = 0

    def old_enough(info: KeyInfo) -> bool:
        return now - info.modified >= grace_seconds

    for packid, orphan in sorted(packs.items()):
        if packid in index.pack_sizes or packid in damaged:
            continue
        if old_enough(orphan):  # an interrupted upload's: no index ever named it
            transport.delete(layout.refs_key(packid))
            transport.delete(orphan.key)
            deleted += 1
            freed += orphan.size
        else:
            held += 1
    for packid in sorted(index.pack_entries):
        info = packs.get(packid)
        if info is None:
            continue  # an index without its pack: damage for check to report, not gc's
        entries = index.pack_entries[packid]
        kept = [e for e in entries
                if e[0] in needed and index.locations[e[0]].packid == packid]
        kept_bytes = len(PACK_MAGIC) + sum(RECORD.size + length for _, _, length in kept)
        if kept and 2 * kept_bytes >= info.size:
            continue
        if not old_enough(info):
            held += 1
            continue
        size = info.size
        if kept:
            size -= _rewrite(transport, index, info.key, kept, send_pack)
            rewritten += 1
        else:
            deleted += 1
        transport.delete(layout.index_key(packid))
        transport.delete(layout.refs_key(packid))
        transport.delete(info.key)
        index.drop_pack(packid)
        freed += size
    return RemoteGcReport(deleted, rewritten, freed, held)


def _rewrite(transport: S3Transport, index: RemoteIndex, key: str, kept: list[Entry],
             send_pack: Callable[[PackBuilder], int]) -> int:
    """Upload a new pack of `kept` records of the pack at `key`; returns its size."""
    builder = PackBuilder()
    spans = plan_spans(kept)
    parts = transport.get_ranges(key, [(s.start, s.length) for s in spans])
    for span, part in zip(spans, parts):
        for oid, stored, _ in iter_records(key, span, part):
            builder.append(oid, stored, codec.envelope_refs(stored, oid))
    return send_pack(builder)
