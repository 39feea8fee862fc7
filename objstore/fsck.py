"""Integrity checks returning a report: structural (everything referenced is present) and full
(every object's bytes hash to its id, including objects nothing references, and every stored
copy's own framing checks, e.g. each pack record's header and crc against its index).

An unreachable object whose envelope names an object that is gone (a delta whose base a gc
removed before it was stopped, between the packs it rewrites) is stranded garbage, not damage:
no checkpoint needs it and the next gc removes it, so it is listed apart."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

from ckpt.objstore import codec
from ckpt.objstore.backend import RecordChecking
from ckpt.objstore.delta import HeadReader, envelope_closure, head_reader, missing_ref
from ckpt.objstore.errors import CorruptObject, ObjectNotFound
from ckpt.objstore.ids import ObjectId
from ckpt.objstore.store import ObjectStore
from ckpt.objstore.walk import Damage, walk_reachable


@dataclass(frozen=True, slots=True)
class FsckReport:
    full: bool
    trees_checked: int
    blobs_checked: int
    objects_verified: int  # full mode: every object in the store, referenced or not
    problems: tuple[Damage, ...]
    damaged_roots: frozenset[ObjectId]
    stranded: tuple[ObjectId, ...] = ()  # full mode: unreachable, what they name is gone

    @property
    def ok(self) -> bool:
        return not self.problems


def _damaged_dictionaries(store: ObjectStore, verify: Callable[[ObjectId], str | None]
                          ) -> list[Damage]:
    """Every listed dictionary is read and verified (in both modes: a damaged one makes every
    object compressed with it unreadable, which a full check reports object by object)."""
    damaged = []
    for oid in store.dictionary_ids():
        reason = verify(oid)
        if reason is not None:
            problem = "missing" if reason == "missing" else "corrupt"
            damaged.append(Damage(oid, problem, f"dictionary: {reason}", None, None))
    return damaged


def _names_a_gone_object(store: ObjectStore, oid: ObjectId, read: HeadReader) -> bool:
    """Whether `oid`'s envelope, or one down its chain, names an object the store lacks."""
    here = oid
    for _ in range(codec.MAX_DELTA_DEPTH + 1):
        try:
            refs = codec.envelope_refs(read(here), here)
        except (ObjectNotFound, CorruptObject):
            return False
        if not refs:
            return False
        if not all(store.has(ref) for ref in refs):
            return True
        here = refs[0]
    return False


def _block_of(oid: ObjectId, *, read: HeadReader) -> bytes:
    """The block `oid` is a member of (b"" for any other object): the full check reads
    members grouped by block, so each block is decompressed about once, not once per member."""
    try:
        head = read(oid)
        if len(head) > 4 and head[4] == codec.CODEC_BLOCK:
            return codec.envelope_refs(head, oid)[0]
    except (ObjectNotFound, CorruptObject):
        pass  # the check itself reports it
    return b""


def check_store(store: ObjectStore, roots: Iterable[ObjectId], *, full: bool = False) -> FsckReport:
    verdicts: dict[ObjectId, str | None] = {}

    def verify(oid: ObjectId) -> str | None:
        if oid in verdicts:
            return verdicts[oid]
        try:
            store.verify(oid)
            verdict = None
        except ObjectNotFound:
            verdict = "missing"
        except CorruptObject as exc:
            verdict = exc.reason
        verdicts[oid] = verdict
        return verdict

    read_head = head_reader(store.backend)

    def present(oid: ObjectId) -> str | None:
        if not store.has(oid):
            return "missing"
        return missing_ref(store.backend, oid, read_head)  # a delta's base, a dictionary

    # The tree cache holds trees as they were written or last read, not as they are on disk
    # now: drop it so every tree the walk visits is read back and verified.
    store.forget_cached()
    reach = walk_reachable(store, roots, check_blob=verify if full else present)
    problems = list(reach.damage) + _damaged_dictionaries(store, verify)
    verified = 0
    stranded: list[ObjectId] = []
    if full:
        reported = {damage.oid for damage in problems}
        for oid in sorted(store.backend.iter_ids(), key=partial(_block_of, read=read_head)):
            verified += 1
            if oid in reach.trees:
                continue  # decoded and hash-checked by the walk
            reason = verify(oid)
            if reason is None or oid in reported:
                continue
            if oid not in reach.all and _names_a_gone_object(store, oid, read_head):
                stranded.append(oid)
            else:
                problems.append(Damage(oid, "corrupt", reason, None, None))
                reported.add(oid)
        if stranded:
            # A base down a live object's chain is needed, however unreachable by trees.
            try:
                needed = envelope_closure(store.backend, reach.all)
            except CorruptObject:  # a damaged head (reported above): claim nothing stranded
                needed = set(stranded)
            problems.extend(Damage(oid, "corrupt", verdicts[oid] or "", None, None)
                            for oid in stranded if oid in needed)
            reported.update(oid for oid in stranded if oid in needed)
            stranded = [oid for oid in stranded if oid not in needed]
        if isinstance(store.backend, RecordChecking):
            # A record whose header alone is damaged still reads (through its index): latent
            # until the index is rebuilt from the pack, so it is reported now.
            for oid, where, problem in store.backend.check_records():
                if oid not in reported:
                    problems.append(Damage(oid, "corrupt", f"{problem} in {where}", None, None))
                    reported.add(oid)
    return FsckReport(
        full=full,
        trees_checked=len(reach.trees),
        blobs_checked=len(reach.blobs),
        objects_verified=verified,
        problems=tuple(problems),
        damaged_roots=frozenset(reach.damaged_roots),
        stranded=tuple(stranded),
    )
