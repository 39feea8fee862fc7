"""Garbage collection: mark from the given root trees, sweep the rest past a grace period.

The grace period is what makes GC safe beside writers that need no lock: an object written or
refreshed (re-put) within it is kept, so a snapshot in progress never loses what it just wrote.
Which roots are live is the caller's business (the catalog's records); this module only marks
and sweeps. A damaged tree aborts the sweep: unknown references must not be collected.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ckpt.objstore.backend import Compactable
from ckpt.objstore.errors import CorruptObject, ObjectNotFound
from ckpt.objstore.ids import ObjectId
from ckpt.objstore.store import ObjectStore
from ckpt.objstore.walk import walk_reachable


@dataclass(frozen=True, slots=True)
class GcReport:
    objects_removed: int
    bytes_freed: int
    objects_kept: int  # reachable
    objects_young: int  # unreachable but inside the grace period
    temporaries_removed: int
    dry_run: bool


def find_reachable(store: ObjectStore, roots: Iterable[ObjectId]) -> set[ObjectId]:
    """Every object the roots need; raises on the first damaged tree (see module doc)."""
    reach = walk_reachable(store, roots)
    for damage in reach.damage:
        if damage.problem == "missing":
            raise ObjectNotFound(damage.oid)
        raise CorruptObject(damage.oid, damage.reason)
    return reach.all


def collect_garbage(
    store: ObjectStore,
    roots: Iterable[ObjectId],
    *,
    grace_seconds: float,
    now: float,
    dry_run: bool = False,
) -> GcReport:
    live = find_reachable(store, roots)
    backend = store.backend
    cutoff = now - grace_seconds
    removed = freed = young = 0
    for oid in backend.iter_ids():
        if oid in live:
            continue
        try:
            info = backend.stat(oid)
        except ObjectNotFound:
            continue  # removed concurrently
        if info.mtime >= cutoff:
            young += 1
            continue
        removed += 1
        freed += info.size if dry_run else backend.delete(oid)
    temporaries = 0 if dry_run else backend.sweep_temporaries(cutoff)
    if not dry_run and isinstance(backend, Compactable):
        backend.compact()  # packed deletions take effect here; loose objects get packed
    if removed and not dry_run:
        store.forget_cached()
    return GcReport(removed, freed, len(live), young, temporaries, dry_run)
