"""Garbage collection: mark from the given root trees, sweep the rest past a grace period.

What an object kept needs to be read (a delta's base chain, named in its envelope) is kept
with it: marked from the live objects, and from the young ones too (a snapshot in progress may
have just written a delta on an old, unreachable base; it refreshes that chain, and this keeps
it whatever the timing).

The grace period is what makes GC safe beside writers that need no lock: an object written or
refreshed (re-put) within it is kept, so a snapshot in progress never loses what it just wrote.
Which roots are live is the caller's business (the catalog's records); this module only marks
and sweeps. A damaged tree aborts the sweep: unknown references must not be collected.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from dataclasses import dataclass

from ckpt.objstore.backend import Compactable
from ckpt.objstore.delta import envelope_closure
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
    # The compaction's error when the disk had no room for it (ENOSPC, EDQUOT; it names the
    # pack being written). What needed no room (loose objects, packs of garbage only) and
    # every pack rewritten before it ran out was freed and is counted above; the rest is
    # intact and stays garbage for the next gc.
    compaction_error: OSError | None = None


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
    live |= envelope_closure(backend, live)
    cutoff = now - grace_seconds
    removed = freed = young = 0
    swept: list[tuple[ObjectId, int]] = []
    old: list[tuple[ObjectId, int]] = []
    young_ids: list[ObjectId] = []
    for oid in backend.iter_ids():
        if oid in live:
            continue
        try:
            info = backend.stat(oid)
        except ObjectNotFound:
            continue  # removed concurrently
        if info.mtime >= cutoff:
            young += 1
            young_ids.append(oid)
            continue
        old.append((oid, info.size))
    needed = envelope_closure(backend, young_ids)  # what a young delta's chain needs stays
    for oid, stored_size in old:
        if oid in needed:
            young += 1
            continue
        size = stored_size if dry_run else backend.delete(oid)
        swept.append((oid, size))
        removed += 1
        freed += size
    temporaries = 0 if dry_run else backend.sweep_temporaries(cutoff)
    error: OSError | None = None
    if not dry_run and isinstance(backend, Compactable):
        try:
            backend.compact()  # packed deletions take effect here; loose objects get packed
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            error = exc
            kept = [(oid, size) for oid, size in swept if backend.has(oid)]
            removed -= len(kept)
            freed -= sum(size for _, size in kept)
    if removed and not dry_run:
        store.forget_cached()
        store.forget_gone_deltas()
    return GcReport(removed, freed, len(live), young, temporaries, dry_run, error)
