"""Integrity checks returning a report: structural (everything referenced is present) and full
(every object's bytes hash to its id, including objects nothing references, and every stored
copy's own framing checks, e.g. each pack record's header and crc against its index)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ckpt.objstore.backend import RecordChecking
from ckpt.objstore.delta import missing_ref
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

    @property
    def ok(self) -> bool:
        return not self.problems


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

    def present(oid: ObjectId) -> str | None:
        if not store.has(oid):
            return "missing"
        return missing_ref(store.backend, oid)  # a delta's base (chain), a dictionary

    # The tree cache holds trees as they were written or last read, not as they are on disk
    # now: drop it so every tree the walk visits is read back and verified.
    store.forget_cached()
    reach = walk_reachable(store, roots, check_blob=verify if full else present)
    problems = list(reach.damage)
    verified = 0
    if full:
        reported = {damage.oid for damage in problems}
        for oid in store.backend.iter_ids():
            verified += 1
            if oid in reach.trees:
                continue  # decoded and hash-checked by the walk
            reason = verify(oid)
            if reason is not None and oid not in reported:
                problems.append(Damage(oid, "corrupt", reason, None, None))
                reported.add(oid)
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
    )
