"""Restore orchestration and journal recovery: the order of a restore's durable steps.

    restore(target, options):                       # under a LockedRoot
        current = scan the workspace (and save it as a pre-restore checkpoint unless told not)
        plan = plan_restore(current, target)        # pure; a dry run stops here
        journal the intent (with the pre-restore record: one transaction), unless nothing to do
        stage the files to write, then apply the plan (restore/apply.py)
        defer: teach the stat cache what was written; free what the apply replaced
        drop later checkpoints if asked; close the journal (with the event: one transaction)
        raise RestoreIncomplete if some paths were left as they were

    complete_interrupted():                         # every write call, first thing
        remove staging directories no journal names
        if a journal is left: re-plan from a fresh scan against its target and apply again

Completing is idempotent: whatever a killed restore applied, the next call ends with exactly
its target. Applying a plan is `restore/apply.py`'s (the only module that mutates the working tree);
planning is `plan.py`'s; the journal's encoding is `journal.py`'s. This module imports the
restore side (plan, restore, reports) only where it is used, so a snapshot does not build it.
It never prints and changes no process-global state.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from ckpt.checkpoints.errors import (
    CatalogCorrupt,
    CheckpointError,
    NothingMatched,
    NothingToUndo,
    RestoreIncomplete,
    UnknownCheckpoint,
    naming,
)
from ckpt.checkpoints.history.refs import resolve_ref
from ckpt.checkpoints.identity import ForeignCheckpoint
from ckpt.checkpoints.model import CheckpointRecord, Event, SkippedPath
from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.restore.journal import (
    RestoreIntent,
    clear_intent,
    decode_intent,
    encode_intent,
    read_intent,
)
from ckpt.checkpoints.restore.reports import RestoreConflict, RestoreReport
from ckpt.checkpoints.restore.statcache_update import record_restore
from ckpt.checkpoints.snapshot.scan import ProgressFn
from ckpt.checkpoints.snapshot.statcache import StatCache, leaf_counts
from ckpt.checkpoints.snapshot.storemarks import is_store_dir
from ckpt.checkpoints.workspace import (
    STAGING_PREFIX,
    WORKSPACE_STAGING_PREFIX,
    Workspace,
    is_workspace_staging,
    ms,
)
from ckpt.checkpoints.writing import LockedRoot
from ckpt.objstore import EntryKind, ObjectId, ObjectStore, oid_hex
from ckpt.objstore.errors import CorruptObject, ObjectNotFound, ObjstoreError

if TYPE_CHECKING:
    from ckpt.checkpoints.restore.apply import ApplyReport
    from ckpt.checkpoints.restore.plan import RestorePlan
    from ckpt.checkpoints.restore.reports import AbandonedRestore
    from ckpt.checkpoints.restore.tracked_revert import RevertScope

logger = logging.getLogger("ckpt.checkpoints.restore")


@dataclass(frozen=True, slots=True, kw_only=True)
class RestoreOptions:
    """How `Checkpoints.restore` behaves; the default is a full, undoable, recorded restore.

    `paths` limits the restore to those paths (relative to the root, or absolute inside it);
    empty means the checkpoint's whole scope. A list is accepted and kept as a tuple.
    `target` materializes the checkpoint into that directory (absent or empty, outside every
    store) instead of the workspace, which is left untouched: nothing is saved first, no
    journal is written and the root's stat cache stays as it is (restore_into.py).
    `save_metadata` goes into the metadata of the pre-restore save (`undo` marks its save
    with `undo_of`).
    """

    save: bool = True  # save the current state first as a "pre-restore" checkpoint (the undo)
    record_event: bool = True  # record and emit a checkpoint:restore event
    discard_later: bool = False  # drop the session's checkpoints newer than the target (no redo)
    dry_run: bool = False  # plan only: the report says what would change; nothing is written
    paths: Sequence[str | bytes] = ()
    from_other_root: bool = False  # allow a checkpoint of another workspace root (identity.py)
    target: str | None = None  # another directory to materialize the checkpoint into
    save_metadata: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.paths, tuple):
            object.__setattr__(self, "paths", tuple(self.paths))


class Restorer:
    """Restores of one `Workspace`, and the completion of the one a kill interrupted."""

    def __init__(self, workspace: Workspace) -> None:
        self._ws = workspace

    # -- a restore -----------------------------------------------------------------------

    def resolve(self, ref: str, options: RestoreOptions) -> tuple[CheckpointRecord, tuple[RelPath, ...] | None]:
        """The target and the paths to restore (None: its whole scope), checked before any
        lock is taken: a path that names nothing in the target or the workspace is refused."""
        ws = self._ws
        target = resolve_ref(ws.catalog, ref, session=ws.session, root=ws.root)
        if target.root != ws.root and not options.from_other_root:  # identity: 28.11
            raise ForeignCheckpoint(target.id, ws.root, target.root)
        if not options.paths:
            return target, None
        only = tuple(ws.user_rel(p, None) for p in options.paths)
        if not any(ws.lookup(target.tree, p) is not None or os.path.lexists(ws.root_b + b"/" + p)
                   for p in only):
            shown = ", ".join(map(os.fsdecode, only))
            raise NothingMatched(f"--path {shown} matches nothing in {target.id} or the workspace")
        return target, only

    def undo_candidate(self) -> CheckpointRecord:
        """The pre-restore checkpoint `undo` restores: the newest of this root (any session)
        that no undo restored yet and that is no undo's own save (those name what they undid
        in `undo_of`, so repeated undos walk back). NothingToUndo when none is left."""
        ws = self._ws
        undone = ws.catalog.undone(ws.root)
        for record in reversed(ws.catalog.history(session=None, reason="pre-restore",
                                                  root=ws.root)):
            if record.id not in undone and "undo_of" not in record.metadata:
                return record
        raise NothingToUndo(ws.root)

    def restore(self, locked: LockedRoot, target: CheckpointRecord, only: tuple[RelPath, ...] | None,
                options: RestoreOptions, progress: ProgressFn | None, started: float,
                *, undid: str | None = None) -> RestoreReport:
        ws = self._ws
        # A tracked-scope target also covers the paths first tracked after it (their trees
        # are made durable by the scan's sync, before the journal names them).
        scope = self._revert_scope(target)
        tree, paths, absent = ((scope.tree, scope.covered, scope.absent_parents) if scope
                               else (target.tree, target.paths, target.absent_parents))
        covered = paths if target.scope == "paths" else None
        pre: CheckpointRecord | None = None
        if options.save and not options.dry_run:
            pre, pre_event = ws.scan_record(
                locked, covered, progress,
                label=f"before restore to {target.id}", reason="pre-restore", turn_id=None,
                message_id=None, tool_call_id=None, summary=None,
                metadata={**_paths_metadata(only), **(options.save_metadata or {})})
            current, skipped = pre.tree, pre.skipped
        else:
            seen = ws.scan(locked, covered, progress)
            current, skipped = seen.tree, seen.skipped
        intent = RestoreIntent(
            checkpoint=target.id, tree=tree, scope=target.scope,
            covered=paths, absent_parents=absent,
            keep=tuple(s.path for s in target.skipped), only=only,
            pre_restore=pre.id if pre else None, record_event=options.record_event,
            discard_later=options.discard_later, staging=self._staging_dir(),
        )
        plan = self._plan(locked, intent, current)
        found = _found(intent, target, skipped)
        if options.dry_run:
            return dry_run_report(target, plan, found, started, undid=undid)
        # Nothing to write needs no journal. The journal and the pre-restore save go in one
        # transaction (one fsync), before anything is staged or applied; the cap must not
        # evict the very checkpoint being restored to.
        journal = None if plan.is_empty else encode_intent(intent)
        if pre is not None:
            ws.catalog.add_checkpoint(pre, event=pre_event, journal=journal)
            try:
                ws.after_commit(pre_event, spare=(target.id,))
            except BaseException:  # a listener or the cap failed: the restore is not made
                if journal is not None:
                    ws.catalog.end_restore(ws.root_key)
                raise
        elif journal is not None:
            ws.catalog.journal_restore(ws.root_key, journal)
        if journal is not None:
            logger.debug("journal opened for %s (pre-restore %s)", target.id, intent.pre_restore)
        return self._execute(locked, intent, target, plan, found, started, progress, undid=undid)

    def _revert_scope(self, target: CheckpointRecord) -> RevertScope | None:
        """The paths first tracked after a tracked-scope `target` (tracked_revert.py)."""
        if target.scope != "paths":
            return None
        from ckpt.checkpoints.restore.tracked_revert import revert_scope  # noqa: PLC0415 (lazy: see the module)

        objects = self._ws.objects
        return revert_scope(objects.get_tree, objects.put_tree, target,
                            self._ws.catalog.later_than(target))

    def _plan(self, locked: LockedRoot, intent: RestoreIntent, current: ObjectId) -> RestorePlan:
        """Plan from `current`, the state the scan just saw (and wrote to the stat cache); the
        leaf counts of that scan's directories let an equal subtree count as unchanged without
        loading it."""
        from ckpt.checkpoints.restore.plan import plan_restore  # noqa: PLC0415 (lazy: see the module)

        ws = self._ws
        plan = plan_restore(ws.objects.get_tree, current, intent.tree, scope=intent.scope,
                            covered=intent.covered, absent_parents=intent.absent_parents,
                            keep=intent.keep, only=intent.only, reserved=ws.store_rel(),
                            count_leaves=leaf_counts(ws.current_cache(locked)).get)
        plan = leave_stores_alone(plan, ws.root_b)  # never writes into another ckpt store
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("plan to %s: %d writes (%d bytes), %d chmods, %d mkdirs, %d removals, "
                         "%d unchanged", intent.checkpoint, len(plan.writes), plan.bytes_to_write,
                         len(plan.chmods), len(plan.mkdirs),
                         len(plan.removals) + len(plan.pre_removals), plan.unchanged)
        return plan

    def _staging_dir(self) -> bytes:
        # Staged files are renamed (or swapped) into place, and what they replace or what is
        # removed is linked here: all on the root's filesystem.
        ws = self._ws
        token = os.urandom(6).hex()
        if not ws.stages_in_workspace():
            return os.fsencode(os.path.join(ws.root_dir, STAGING_PREFIX + token))
        return ws.root_b + b"/" + os.fsencode(WORKSPACE_STAGING_PREFIX + token)

    def _execute(self, locked: LockedRoot, intent: RestoreIntent, target: CheckpointRecord,
                 plan: RestorePlan, found: Found, started: float, progress: ProgressFn | None,
                 *, resuming: bool = False, undid: str | None = None) -> RestoreReport:
        from ckpt.checkpoints.restore.apply import ApplyReport, describe_conflicts  # noqa: PLC0415 (lazy: see the module)

        ws = self._ws
        if plan.is_empty and not resuming:
            applied = ApplyReport()  # nothing to write, so nothing to journal or stage
        else:
            applied = self._apply_journaled(locked, intent, plan, progress, resuming=resuming)
        discarded: tuple[str, ...] = ()
        if intent.discard_later:
            later = [r.id for r in ws.catalog.later_than(target)  # this root's timeline only
                     if r.id != intent.pre_restore and r.root == ws.root]
            if later:
                ws.drop(later, reason="discard-later")
            discarded = tuple(later)
        report = restore_report(target, plan, applied, intent.pre_restore, discarded, found,
                                started, undid=undid)
        event = restore_event(ws, report) if intent.record_event else None
        ws.catalog.end_restore(ws.root_key, event=event)
        logger.debug("journal closed, restore to %s done: %d written, %d deleted, %d conflicts, %d discarded",
                     target.id, report.written, report.deleted, len(report.conflicts),
                     len(discarded))
        if event is not None:
            ws.emit(event)
        if applied.conflicts:
            if logger.isEnabledFor(logging.DEBUG):
                for path, why in applied.conflicts:
                    logger.debug("conflict, left as it is: %s (%s)", os.fsdecode(path), why)
            error = RestoreIncomplete(target.id, describe_conflicts(applied.conflicts))
            error.report = report  # type: ignore[attr-defined]
            raise error
        return report

    def _apply_journaled(self, locked: LockedRoot, intent: RestoreIntent, plan: RestorePlan,
                         progress: ProgressFn | None, *, resuming: bool) -> ApplyReport:
        """Stage and apply `plan`; the caller has journaled `intent`."""
        from ckpt.checkpoints.restore.apply import (  # noqa: PLC0415 (lazy: see the module)
            apply_plan,
            remove_staging,
            remove_staging_soon,
        )
        from ckpt.checkpoints.restore.staging import stage_files  # noqa: PLC0415 (lazy: see restore)

        ws = self._ws
        try:
            with naming(intent.staging):
                staged = stage_files(plan, ws.objects, intent.staging)
        except BaseException as exc:
            self._abandon_staging_failure(exc, resuming=resuming)
            raise
        logger.debug("staged %d files in %s", len(plan.writes), os.fsdecode(intent.staging))
        try:
            applied = apply_plan(ws.root_b, plan, staged, staging=intent.staging,
                                 progress=progress)
        except BaseException:
            remove_staging(intent.staging)
            raise
        # The cache learns what was written while what the apply replaced is freed; a bulky
        # restore does both now, before its journal is closed, so a failure leaves the journal.
        locked.note_files(len(applied.written_files) + len(applied.removed_paths))
        locked.defer(partial(self._update_cache, applied, intent.tree, ws.current_cache(locked)),
                     remove_staging_soon(intent.staging))
        return applied

    def _update_cache(self, applied: ApplyReport, target: ObjectId, cache: StatCache) -> None:
        """Teach `cache` what was written, so the next snapshot does not read it, and which
        directories now hold `target`'s trees, so that it does not rebuild them; save it."""
        if not applied.written_files and not applied.removed_paths:
            return
        ws = self._ws
        record_restore(cache, ws.objects.get_tree, target,
                       [(w.path, int(w.kind), w.stat, w.ref) for w in applied.written_files],
                       applied.removed_paths, applied.dir_stats, time.time_ns())
        ws.save_cache(cache)

    def _abandon_staging_failure(self, exc: BaseException, *, resuming: bool) -> None:
        """Staging failed, so nothing of this attempt was applied. A new restore is forgotten
        (the tree is untouched). One being completed left the tree half restored: its journal
        stays through a full disk, an IO error or Ctrl-C, so the next command finishes it once
        the cause is gone; only a store that cannot give the content (retrying could never
        succeed) ends it, rather than jam every command."""
        if not resuming or isinstance(exc, (ObjstoreError, CheckpointError)):
            self._ws.catalog.end_restore(self._ws.root_key)
            logger.debug("staging failed (%s): journal closed", type(exc).__name__)
        else:
            logger.debug("staging failed (%s): journal kept for the next call", type(exc).__name__)

    # -- completing a killed restore -----------------------------------------------------

    def pending_intent(self) -> RestoreIntent | None:
        """The journal of a killed restore of this root, checked as completing it needs: its
        staging path (completing deletes that directory, so a damaged or crafted journal must
        not name anything else than what `_staging_dir` makes) and its target tree in the
        store (without it the restore can never complete, and every write call of the root
        would fail on it). CatalogCorrupt naming the journal; `recover --abandon` clears it."""
        intent, where = self.journaled()
        if intent is not None:
            check_journal_target(self._ws.objects, intent, where, self._ws.root_key)
        return intent

    def journaled(self) -> tuple[RestoreIntent | None, str]:
        """This root's journal (staging path checked, as `pending_intent`) and where it is."""
        ws = self._ws
        data = ws.catalog.restore_journal(ws.root_key)
        where = ws.catalog.path if data is not None else ws.journal_path
        intent = (decode_intent(data, where, ws.root_key) if data is not None
                  else read_intent(where))
        if intent is None:
            return None, where
        parent, _, name = intent.staging.rpartition(b"/")
        token = name.rpartition(b"-")[2]
        ours = (parent == os.fsencode(ws.root_dir)
                and name == os.fsencode(STAGING_PREFIX) + token) or (
            parent == ws.root_b and name == os.fsencode(WORKSPACE_STAGING_PREFIX) + token)
        if not (ours and len(token) == 12 and all(c in b"0123456789abcdef" for c in token)):
            raise CatalogCorrupt(where, f"restore journal of {ws.root} names a staging "
                                 f"directory ckpt does not make: {os.fsdecode(intent.staging)}")
        return intent, where

    def complete_interrupted(self, locked: LockedRoot) -> RestoreReport | None:
        """Finish a killed restore of this root, if any, its bookkeeping included: the call
        that follows reads the stat cache it saves."""
        intent = self.pending_intent()
        self._remove_leftover_staging()
        if intent is None:
            return None
        logger.debug("completing the interrupted restore to %s", intent.checkpoint)
        report = self._resume(locked, intent)
        locked.run_now()
        return report

    def abandon(self, locked: LockedRoot) -> AbandonedRestore | None:
        """Clear this root's journal without completing its restore, after saying what that
        loses (restore/abandon.py); None when there is no journal. The workspace is left as it is
        (only the restore's staging directory goes). A journal that cannot be read is cleared
        too: nothing can be said of it but why."""
        from ckpt.checkpoints.restore.abandon import describe_abandoned  # noqa: PLC0415 (lazy: see the module)
        from ckpt.checkpoints.restore.apply import remove_staging  # noqa: PLC0415 (lazy: see the module)
        from ckpt.checkpoints.restore.reports import AbandonedRestore  # noqa: PLC0415 (lazy: see the module)

        ws = self._ws
        try:
            intent, _where = self.journaled()
        except CatalogCorrupt as exc:
            intent, report = None, AbandonedRestore(None, None, None, exc.reason, None, None)
        else:
            if intent is None:
                self._remove_leftover_staging()
                return None
            covered = intent.covered if intent.scope == "paths" else None
            current = ws.scan(locked, covered, None).tree
            report = describe_abandoned(ws, intent, current,
                                        partial(self._plan, locked, intent, current))
        ws.catalog.end_restore(ws.root_key)
        clear_intent(ws.journal_path)
        if intent is not None:
            remove_staging(intent.staging)  # (in the workspace, for a store on another fs)
        self._remove_leftover_staging()
        logger.debug("journal of the restore to %s abandoned", report.checkpoint)
        return report

    def _remove_leftover_staging(self) -> None:
        """Remove staging directories that no journal names: a restore's journal is closed
        before what it replaced is freed (its bookkeeping), so a kill in between, or a disk
        error while freeing, leaves one. The root lock is held: no restore of this root is
        running. Where the store is on another file system, the staging directories are in
        the workspace root (`.ckpt-staging-<12 hex>`, real directories only: a symlink of
        that name is not followed), and those are removed too."""
        ws = self._ws
        try:
            paths = [os.fsencode(os.path.join(ws.root_dir, n)) for n in os.listdir(ws.root_dir)
                     if n.startswith(STAGING_PREFIX)]
        except OSError:
            paths = []
        try:
            if ws.stages_in_workspace():
                paths += [ws.root_b + b"/" + n for n in os.listdir(ws.root_b)
                          if is_workspace_staging(n)]
        except OSError:
            pass
        if paths:
            from ckpt.checkpoints.restore.apply import remove_staging  # noqa: PLC0415 (lazy: see the module)

            logger.debug("removing %d leftover staging directories", len(paths))
            for path in paths:
                remove_staging(path)

    def _resume(self, locked: LockedRoot, intent: RestoreIntent) -> RestoreReport | None:
        ws = self._ws
        if os.path.lexists(ws.journal_path):  # an older ckpt's journal file: carried over
            ws.catalog.journal_restore(ws.root_key, encode_intent(intent))
            clear_intent(ws.journal_path)
        from ckpt.checkpoints.restore.apply import remove_staging  # noqa: PLC0415 (lazy: see the module)

        remove_staging(intent.staging)  # (in the workspace, for a store on another file system)
        try:
            target = ws.catalog.resolve(intent.checkpoint)
        except UnknownCheckpoint:
            target = None
        covered = intent.covered if intent.scope == "paths" else None
        seen = ws.scan(locked, covered, None)
        try:
            plan = self._plan(locked, intent, seen.tree)
        except (ObjectNotFound, CorruptObject) as exc:  # the target's, never the fresh scan's
            raise CatalogCorrupt(ws.catalog.path, _cannot_complete(
                ws.root_key, intent.tree, f"which the store cannot give: {exc}")) from exc
        if target is None:  # pruned meanwhile: finish the tree, skip the bookkeeping
            self._apply_journaled(locked, intent, plan, None, resuming=True)
            ws.catalog.end_restore(ws.root_key)
            logger.debug("target %s was pruned: tree finished, journal closed", intent.checkpoint)
            return None
        return self._execute(locked, intent, target, plan, _found(intent, target, seen.skipped),
                             time.monotonic(), None, resuming=True)


def leave_stores_alone(plan: RestorePlan, root: bytes) -> RestorePlan:
    """`plan` without what it would write, create or remove inside a ckpt store. A store is
    never in a scan's tree, so the plan makes each one it reaches a directory to create:
    only those are looked at (a failing lstat each, for a directory that does not exist)."""
    stores = [path for path in plan.mkdirs if is_store_dir(root + b"/" + path)]
    if not stores:
        return plan
    prefixes = tuple(path + b"/" for path in stores)

    def outside(path: bytes) -> bool:
        return path not in stores and not path.startswith(prefixes)

    return dataclasses.replace(
        plan,
        pre_removals=tuple(r for r in plan.pre_removals if outside(r.path)),
        mkdirs=tuple(p for p in plan.mkdirs if outside(p)),
        writes=tuple(w for w in plan.writes if outside(w.path)),
        chmods=tuple(c for c in plan.chmods if outside(c[0])),
        removals=tuple(r for r in plan.removals if outside(r.path)))


def read_journal(objects: ObjectStore, data: bytes, where: str, root: bytes) -> RestoreIntent:
    """Decode the journal of `root` and check its target tree as `pending_intent` does (fsck
    reads every root's journal through this)."""
    intent = decode_intent(data, where, root)
    check_journal_target(objects, intent, where, root)
    return intent


def check_journal_target(objects: ObjectStore, intent: RestoreIntent, where: str,
                         root: bytes) -> None:
    """CatalogCorrupt naming the journal at `where` when its target tree is not in the store
    (`pending_intent` and `read_journal` check this)."""
    if not objects.has(intent.tree):
        raise CatalogCorrupt(where, _cannot_complete(root, intent.tree,
                                                     "which is not in the store"))


def _cannot_complete(root: bytes, tree: ObjectId, why: str) -> str:
    return (f"restore journal of {os.fsdecode(root)} names tree {oid_hex(tree)}, {why}: the "
            "restore cannot be completed ('ckpt recover --abandon' clears the journal, "
            "leaving the workspace as it is)")


def restore_event(ws: Workspace, report: RestoreReport) -> Event:
    """The `checkpoint:restore` event of `report` (`target`: the directory of a restore into
    another one; `undid`: the pre-restore checkpoint an undo restored)."""
    return Event("checkpoint:restore", ws.clock(), ws.session, {
        "id": report.id, "written": report.written, "deleted": report.deleted,
        "dirs_created": report.dirs_created, "dirs_removed": report.dirs_removed,
        "unchanged": report.unchanged, "bytes_written": report.bytes_written,
        "pre_restore": report.pre_restore, "discarded": list(report.discarded),
        "duration_ms": report.duration_ms, "conflicts": len(report.conflicts),
        "target": report.target, "undid": report.undid,
    })


def _paths_metadata(only: tuple[RelPath, ...] | None) -> dict[str, Any]:
    """What the pre-restore save of a restore of some paths records of them, so that `undo`
    puts back those paths only: `restore_paths` (text), or `restore_paths_hex` where one
    is not UTF-8 (metadata is JSON text)."""
    if not only:
        return {}
    try:
        return {"restore_paths": [p.decode("utf-8") for p in only]}
    except UnicodeDecodeError:
        return {"restore_paths_hex": [p.hex() for p in only]}


def restored_paths(record: CheckpointRecord) -> tuple[bytes, ...]:
    """The paths a pre-restore save's restore was limited to (none: its whole scope)."""
    text = record.metadata.get("restore_paths")
    if isinstance(text, (list, tuple)):
        return tuple(str(p).encode("utf-8") for p in text)
    hexed = record.metadata.get("restore_paths_hex")
    if isinstance(hexed, (list, tuple)):
        return tuple(bytes.fromhex(str(p)) for p in hexed)
    return ()


@dataclass(frozen=True, slots=True)
class Found:
    """What a restore reports beside its counts, known before it applies anything."""

    not_captured: tuple[SkippedPath, ...]  # by the scan before it: kept as they are
    later_tracked: tuple[RelPath, ...]  # first tracked after a tracked-scope target


def _found(intent: RestoreIntent, target: CheckpointRecord,
           skipped: Sequence[SkippedPath]) -> Found:
    """The paths of the restore's selection (`intent.only`, if any) the scan did not capture,
    and the covered paths the target itself does not (tracked_revert.py)."""

    def selected(path: RelPath) -> bool:
        return intent.only is None or any(
            path == p or path.startswith(p + b"/") or p.startswith(path + b"/")
            for p in intent.only)

    own = set(target.paths)
    later = (tuple(p for p in intent.covered if p not in own and selected(p))
             if intent.scope == "paths" else ())
    return Found(tuple(s for s in skipped if selected(s.path)), later)


def dry_run_report(target: CheckpointRecord, plan: RestorePlan, found: Found,
                    started: float, *, undid: str | None = None,
                    into: str | None = None) -> RestoreReport:
    """What the plan would do, counted as a restore that applied it would report."""
    removals = plan.removals + plan.pre_removals
    dirs_removed = sum(1 for r in removals if r.kind is EntryKind.TREE)
    return RestoreReport(target.id, len(plan.writes) + len(plan.chmods),
                         len(removals) - dirs_removed, len(plan.mkdirs), dirs_removed,
                         plan.unchanged, plan.bytes_to_write, None, (), True, plan,
                         duration_ms=ms(time.monotonic() - started),
                         not_captured=found.not_captured, later_tracked=found.later_tracked,
                         undid=undid, target=into)


def restore_report(target: CheckpointRecord, plan: RestorePlan, applied: ApplyReport,
                   pre: str | None, discarded: tuple[str, ...], found: Found, started: float, *,
                   undid: str | None = None, into: str | None = None) -> RestoreReport:
    return RestoreReport(target.id, applied.written + applied.chmods, applied.deleted,
                         applied.dirs_created, applied.dirs_removed, plan.unchanged,
                         applied.bytes_written, pre, discarded, False, plan,
                         tuple(RestoreConflict(path, why) for path, why in applied.conflicts),
                         ms(time.monotonic() - started), found.not_captured, found.later_tracked,
                         undid=undid, target=into)
