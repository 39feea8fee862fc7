"""Maintenance of a store: prune, gc (with the sweep of temporaries and staging), fsck, stats.

gc takes the store's gc lock exclusively (writers hold it shared), so it never sweeps what a
running snapshot or restore writes; the targets of killed restores not yet completed count as
live. Deciding what to prune is `retention.py`'s (pure); collecting unreachable objects is
`objstore.gc`'s and checking them `objstore.fsck`'s. This module never touches a workspace
and changes no process-global state.
"""

from __future__ import annotations

import glob
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING

from ckpt.checkpoints import reserve
from ckpt.checkpoints.errors import (
    CatalogCorrupt,
    CheckpointInUse,
    PruneIncomplete,
    display_text,
    naming,
)
from ckpt.checkpoints.history.reindex import REPAIR_HINT
from ckpt.checkpoints.history.retention import select_prunable
from ckpt.checkpoints.lock import RootLock
from ckpt.checkpoints.model import Event
from ckpt.checkpoints.remote.config import hollow_ids
from ckpt.checkpoints.restore.journal import RestoreIntent, decode_intent, read_intent
from ckpt.checkpoints.restore.restorer import read_journal
from ckpt.checkpoints.snapshot.statcache import check_stat_cache
from ckpt.checkpoints.workspace import STAGING_PREFIX, Workspace
from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.local import remove_if_older

if TYPE_CHECKING:
    from ckpt.checkpoints.model import CheckpointRecord
    from ckpt.checkpoints.reports import (
        CheckReport,
        ForgetReport,
        GcReport,
        HeldBack,
        PruneReport,
        StoreStats,
    )
    from ckpt.objstore import ObjectId, ObjectStore

# (where, what): a damaged file found by fsck
Finding = tuple[str, str]


class Maintenance:
    """prune, gc, fsck and stats of the store a `Workspace` is in. `pending_intent` reads
    this root's restore journal with the checks that completing it would make."""

    def __init__(self, workspace: Workspace, pending_intent: Callable[[], RestoreIntent | None]) -> None:
        self._ws = workspace
        self._pending_intent = pending_intent

    def prune(self, *, reason: str | None, turn_id: str | None, keep_latest: int | None,
              older_than: timedelta | None, dry_run: bool,
              collect: Callable[[], GcReport] | None) -> PruneReport:
        """Drop the checkpoints the criteria select, then, if any went, run `collect` (the
        facade's gc, which waits for the last call's bookkeeping first), if given.

        On a nearly full disk the store's space reserve is given back first, so the catalog
        write has room. Once the records are deleted they stay deleted: a gc that fails after
        that raises `PruneIncomplete`, which says what was removed."""
        from ckpt.checkpoints.reports import PruneReport  # noqa: PLC0415 (lazy: see the module)

        ws = self._ws
        victims = select_prunable(ws.history(), now=ws.clock(), reason=reason,
                                  turn_id=turn_id, keep_latest=keep_latest, older_than=older_than)
        ids = tuple(r.id for r in victims)
        if dry_run:
            return PruneReport(ids, 0, 0, True)
        if ids:
            reserve.release(ws.store_dir)
            event = Event("checkpoint:prune", ws.clock(), ws.session, {
                "removed": list(ids), "reason": reason, "cause": "prune", "turn_id": turn_id,
                "keep_latest": keep_latest,
                "older_than_s": None if older_than is None else older_than.total_seconds()})
            ws.catalog.delete_checkpoints(ids, event=event)
            ws.emit(event)
        if not ids or collect is None:
            reserve.replenish(ws.store_dir)  # given back by make_room, perhaps
            return PruneReport(ids, 0, 0)
        try:
            report = collect()
        except Exception as exc:  # the records are gone: say so, never just "failed"
            raise PruneIncomplete(PruneReport(ids, 0, 0), exc) from exc
        return PruneReport(ids, report.objects_removed, report.bytes_freed, gc=report)

    def forget(self, records: Sequence[CheckpointRecord], *, dry_run: bool) -> ForgetReport:
        """Drop these checkpoints (resolved by the caller, so an unknown one removed none)
        as a prune does, with one `checkpoint:prune` event of cause `forget`; no gc. Refused
        (CheckpointInUse, nothing removed) for one that the journal of a killed restore of
        any root names, as its target or its pre-restore save."""
        from ckpt.checkpoints.reports import ForgetReport  # noqa: PLC0415 (lazy: see the module)

        ws = self._ws
        ids = tuple(dict.fromkeys(r.id for r in records))
        needed = self._journal_needs()
        for checkpoint_id in ids:
            if checkpoint_id in needed:
                raise CheckpointInUse(checkpoint_id, needed[checkpoint_id])
        if dry_run or not ids:
            return ForgetReport(ids, dry_run)
        reserve.release(ws.store_dir)  # room for the catalog write on a nearly full disk
        try:
            ws.drop(ids, reason="forget")
        finally:
            reserve.replenish(ws.store_dir)
        return ForgetReport(ids)

    def _journal_needs(self) -> dict[str, str]:
        """checkpoint id -> the root whose restore journal names it (target or pre-restore).
        A journal that cannot be decoded raises: forgetting must not guess."""
        ws = self._ws
        needs: dict[str, str] = {}
        for root, data in ws.catalog.restore_journals():
            intent = decode_intent(data, ws.catalog.path, root)
            for checkpoint_id in (intent.checkpoint, intent.pre_restore):
                if checkpoint_id is not None:
                    needs[checkpoint_id] = os.fsdecode(root)
        old = read_intent(ws.journal_path)  # an older ckpt's journal file of this root
        if old is not None:
            for checkpoint_id in (old.checkpoint, old.pre_restore):
                if checkpoint_id is not None:
                    needs[checkpoint_id] = ws.root
        return needs

    def gc(self, *, dry_run: bool, grace_seconds: float | None) -> GcReport:
        """Collect what no checkpoint needs, past the grace period. What frees space without
        needing any runs first (the space reserve on a nearly full disk, a kill's temporaries
        and orphan staging), then the collection, then the small writes (gc generation)."""
        ws = self._ws
        if not dry_run:
            reserve.release(ws.store_dir)
        with RootLock(os.path.join(ws.store_dir, "gc.lock"),
                      timeout=max(ws.config.lock_timeout, 60.0), purpose="gc"):
            self._refuse_unindexed_records()
            grace = ws.config.gc_grace_seconds if grace_seconds is None else grace_seconds
            # Targets of killed restores not yet completed are live, even if their record was
            # pruned meanwhile, or completing them would fail for good.
            journaled = self._journaled_intents()
            roots = self._gc_roots() + [intent.tree for intent in journaled]
            swept = 0
            if not dry_run:
                swept = self._sweep_temporaries(time.time() - grace,
                                                {intent.staging for intent in journaled})
            from ckpt.objstore.gc import collect_garbage  # noqa: PLC0415 (lazy: see the module)

            with naming(os.path.join(ws.store_dir, "objects")):  # a compaction's ENOSPC
                found = collect_garbage(ws.objects, roots, grace_seconds=grace,
                                        now=time.time(), dry_run=dry_run)
            if found.objects_removed and not dry_run:
                self._bump_gc_generation()
            held = self._held_back(roots, grace) if found.objects_young else None
        if not dry_run:
            reserve.replenish(ws.store_dir)
        from ckpt.checkpoints.reports import GcReport  # noqa: PLC0415 (lazy: see the module)

        stopped = found.compaction_error
        return GcReport(found.objects_removed, found.bytes_freed, found.objects_kept,
                        found.objects_young, found.temporaries_removed + swept, dry_run, held,
                        None if stopped is None else display_text(str(stopped)))

    def _gc_roots(self) -> list[ObjectId]:
        """Every checkpoint's tree but those of hollow ones (pulled from a remote, objects
        not fetched): the remote keeps theirs, and what of them is here is a cache."""
        hollow = hollow_ids(self._ws.store_dir)
        if not hollow:
            return self._ws.catalog.tree_roots()
        return sorted({r.tree for r in self._ws.catalog.history(session=None)
                       if r.id not in hollow})

    def _held_back(self, roots: Sequence[ObjectId], grace: float) -> HeldBack | None:
        """The unreachable objects inside the grace period, as the store holds them now, and
        when the youngest of them leaves it. A second walk of the live set, made only when
        the collection kept something back."""
        from ckpt.checkpoints.reports import HeldBack  # noqa: PLC0415 (lazy: see the module)
        from ckpt.objstore.errors import ObjectNotFound  # noqa: PLC0415 (lazy: see the module)
        from ckpt.objstore.gc import find_reachable  # noqa: PLC0415 (lazy: see the module)

        backend = self._ws.objects.backend
        live = find_reachable(self._ws.objects, roots)
        cutoff = time.time() - grace
        count = size = 0
        newest = cutoff
        for oid in backend.iter_ids():
            if oid in live:
                continue
            try:
                info = backend.stat(oid)
            except ObjectNotFound:
                continue
            if info.mtime >= cutoff:
                count += 1
                size += info.size
                newest = max(newest, info.mtime)
        if not count:
            return None
        return HeldBack(count, size, datetime.fromtimestamp(newest + grace, UTC), grace)

    def _refuse_unindexed_records(self) -> None:
        """gc marks from the catalog's rows: a record file the catalog lacks (a catalog lost
        or replaced since this process opened it) would have its objects swept. Writers hold
        the gc lock shared, so under gc's exclusive lock no create is between its file and
        its row."""
        catalog = self._ws.catalog
        lacking = len(catalog.unindexed_records())
        if lacking:
            raise CatalogCorrupt(catalog.path, f"{lacking} checkpoint record(s) in "
                                 f"{catalog.records.path} are not in the catalog; gc refuses "
                                 f"to run; {REPAIR_HINT}")

    def _sweep_temporaries(self, older_than: float, journaled: set[bytes]) -> int:
        """Remove what a kill between writing and renaming left of the store's own small files
        (stat caches, journals, the gc generation), and the staging directories that no
        journal names (not in `journaled`: a kill after a restore closed its journal, on a
        root that no call has used since: the next write call on a root removes its own).
        Nobody writes them while gc holds its exclusive lock, so the age limit is only a
        second guard."""
        from ckpt.checkpoints.restore.apply import remove_staging  # noqa: PLC0415 (lazy: see the module)

        store = glob.escape(self._ws.store_dir)
        swept = sum(remove_if_older(path, older_than)
                    for path in (glob.glob(os.path.join(store, "roots", "*", "*.tmp-*"))
                                 + glob.glob(os.path.join(store, "gc-generation.tmp-*"))))
        for path in glob.glob(os.path.join(store, "roots", "*", STAGING_PREFIX + "*")):
            staging = os.fsencode(path)
            try:
                if staging in journaled or os.stat(staging).st_mtime >= older_than:
                    continue
            except FileNotFoundError:
                continue
            remove_staging(staging)
            swept += 1
        return swept

    def _journaled_intents(self) -> list[RestoreIntent]:
        """The journals of killed restores (any root of this store) not yet completed. A
        damaged journal raises: gc must not guess what is still needed."""
        ws = self._ws
        intents = [decode_intent(data, ws.catalog.path, root)
                   for root, data in ws.catalog.restore_journals()]
        for path in glob.glob(os.path.join(glob.escape(ws.store_dir), "roots", "*", "journal")):
            intent = read_intent(path)
            if intent is not None:
                intents.append(intent)
        return intents

    def _bump_gc_generation(self) -> None:
        path = os.path.join(self._ws.store_dir, "gc-generation")
        # Durable: a generation lost in a crash would let stat caches trust ids this gc removed.
        write_atomically(path, f"{self._ws.gc_generation() + 1}\n".encode("ascii"),
                         fsync_file=True, fsync_dir=True, temp_prefix="gc-generation.tmp-")

    def fsck(self, *, full: bool) -> CheckReport:
        """Objects, then the catalog against the record files (a row damaged or differing, a
        record file missing, damaged or not in the catalog), restore journals, stat caches."""
        ws = self._ws
        records, catalog_problems = ws.catalog.audit()
        from ckpt.checkpoints.reports import CheckReport  # noqa: PLC0415 (lazy: see the module)
        from ckpt.objstore.fsck import check_store  # noqa: PLC0415 (lazy: see the module)

        hollow = hollow_ids(ws.store_dir)
        report = check_store(ws.objects, [r.tree for r in records if r.id not in hollow],
                             full=full)
        damaged = tuple(r.id for r in records
                        if r.tree in report.damaged_roots and r.id not in hollow)
        journals, caches = self._check_root_files()
        remote_only = tuple(r.id for r in records if r.id in hollow)
        return CheckReport(report, damaged, tuple(catalog_problems) + journals, caches,
                           remote_only)

    def _check_root_files(self) -> tuple[tuple[Finding, ...], tuple[Finding, ...]]:
        """Damaged restore journals (in the catalog, or an older ckpt's files) and stat caches
        of every root of the store: (journals, caches). A stat cache is written without fsync
        (a crash may tear it): damage there is a note."""
        ws = self._ws
        found: list[Finding] = []
        caches: list[Finding] = []
        row_hint = file_hint = "'ckpt recover --abandon' on that root abandons the restore"

        def check(where: str, hint: str, read: Callable[[], object]) -> None:
            try:
                read()
            except CatalogCorrupt as exc:
                found.append((where, f"{exc.reason} ({hint})"))

        rows = dict(ws.catalog.restore_journals())
        # This root's journal (the catalog's, else its file) also gets the staging check that
        # completing it would make.
        if ws.root_key in rows:
            check(ws.catalog.path, row_hint, self._pending_intent)
        else:
            check(ws.journal_path, file_hint, self._pending_intent)
        for root, data in rows.items():
            if root != ws.root_key:
                check(ws.catalog.path, row_hint,
                      partial(read_journal, ws.objects, data, ws.catalog.path, root))
        for root_dir in sorted(glob.glob(os.path.join(glob.escape(ws.store_dir), "roots", "*"))):
            journal = os.path.join(root_dir, "journal")
            if root_dir != ws.root_dir:
                check(journal, file_hint, partial(read_intent, journal))
            cache = os.path.join(root_dir, "statcache")
            problem = check_stat_cache(cache)
            if problem is not None:
                caches.append((cache, f"{problem} (only a cache: the next checkpoint rebuilds it)"))
        return tuple(found), tuple(caches)

    def stats(self) -> StoreStats:
        from ckpt.checkpoints.reports import StoreStats  # noqa: PLC0415 (lazy: see the module)

        ws = self._ws
        backend = ws.objects.backend
        count = stored = 0
        for oid in backend.iter_ids():
            count += 1
            stored += backend.stat(oid).size
        records = ws.catalog.history(session=None)
        roots: dict[str, int] = {}
        for record in records:
            roots[record.root] = roots.get(record.root, 0) + 1
        logical = sum(r.stats.bytes for r in records)
        distinct = _distinct_file_bytes(ws.objects, {r.tree for r in records})
        return StoreStats(count, stored, logical, len(records),
                          ws.catalog.session_counts(), dict(sorted(roots.items())),
                          saved_by_dedup=max(0, logical - distinct),
                          saved_by_dictionaries=ws.objects.dictionary_savings(),
                          saved_by_deltas=ws.objects.delta_savings())


def _distinct_file_bytes(objects: ObjectStore, roots: set[ObjectId]) -> int:
    """What the distinct file contents of these trees weigh (each blob once): logical bytes
    less this is what dedup saved. Each distinct tree is read once; one that cannot be read
    counts for nothing (fsck reports it)."""
    from ckpt.objstore import EntryKind, ObjstoreError  # noqa: PLC0415 (stats only)

    sizes: dict[ObjectId, int] = {}
    seen: set[ObjectId] = set()
    stack = list(roots)
    while stack:
        oid = stack.pop()
        if oid in seen:
            continue
        seen.add(oid)
        try:
            tree = objects.get_tree(oid)
        except ObjstoreError:
            continue
        for entry in tree.entries:
            if entry.oid is None:
                continue
            if entry.kind is EntryKind.TREE:
                stack.append(entry.oid)
            else:
                sizes[entry.oid] = entry.size
    return sum(sizes.values())
