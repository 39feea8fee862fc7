"""Restoring a checkpoint into another directory (`RestoreOptions.target`), leaving the
workspace as it is.

    restore_into(checkpoint, dest):
        dest must be absent or an empty directory, outside every ckpt store we know of
        hold the store's gc lock shared (no gc sweeps what is being read), not the root's lock
        plan = plan_restore(nothing, checkpoint's tree)    # pure; a dry run stops here
        make dest; build the plan's tree, every file verified, in dest/.ckpt-staging-<hex>
            (private; staging.py's `stage_tree`: each file written at its own path)
        move the staging directory's top-level entries into dest (`move_into`); remove it
        record a checkpoint:restore event naming dest

Nothing of the root is read or written: no scan, no pre-restore save, no journal (dest is
new: a killed run leaves a partial directory that a second run refuses as not empty), no
stat cache. A missing or corrupt object leaves dest as it was (absent or empty). Building the
tree in place of staging numbered files and renaming each (restore/apply.py, for a workspace) saves
a rename, two stats and a directory lookup per file, and spreads the creations over the
tree's directories. A hollow checkpoint's blobs are fetched while the tree is built: each
file is written as soon as its blob is stored (`fetch_blobs`, from `Remote.hydrating`), so
that the download and the writing overlap.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from typing import TYPE_CHECKING

from ckpt.checkpoints.errors import RestoreIncomplete, TargetRefused
from ckpt.checkpoints.identity import MARKER
from ckpt.checkpoints.lock import RootLock
from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.restore.apply import DIR_FLAGS, ApplyReport
from ckpt.checkpoints.workspace import WORKSPACE_STAGING_PREFIX, Workspace
from ckpt.objstore import EntryKind

if TYPE_CHECKING:
    from ckpt.checkpoints.model import CheckpointRecord
    from ckpt.checkpoints.restore.plan import RestorePlan
    from ckpt.checkpoints.restore.reports import RestoreReport
    from ckpt.checkpoints.restore.staging import BlobFetch
    from ckpt.checkpoints.snapshot.scan import ProgressFn


def check_target(ws: Workspace, path: str) -> str:
    """`path` as a real path, if a restore may write into it: absent (its parent is made as
    needed) or an empty directory, and neither in the store nor in the root's `.ckpt`.
    TargetRefused otherwise."""
    dest = os.path.realpath(path)
    for inside in (ws.store_dir, os.path.join(ws.root, MARKER)):
        store = os.path.realpath(inside)
        if dest == store or dest.startswith(store.rstrip("/") + "/"):
            raise TargetRefused(path, "it lies inside the ckpt store")
    if os.path.lexists(dest):
        if not os.path.isdir(dest):
            raise TargetRefused(path, "it exists and is not a directory")
        if os.listdir(dest):
            raise TargetRefused(path, "it is not empty")
    return dest


def move_into(dest: bytes, staging: bytes, plan: RestorePlan) -> ApplyReport:
    """Finish what `stage_tree` built in `staging` for `plan`: remove the directories the plan
    removes (empty ones only: the parents a tracked scope's tombstones imply), then rename
    each top-level entry into `dest`, none over something that appeared there since `dest`
    was found empty (a conflict naming it; it stays in `staging`, to be removed)."""
    report = ApplyReport()
    for removal in plan.removals:
        with contextlib.suppress(OSError):
            if removal.kind is EntryKind.TREE:
                os.rmdir(staging + b"/" + removal.path)
            else:
                os.unlink(staging + b"/" + removal.path)
            report.dirs_removed += removal.kind is EntryKind.TREE
            report.deleted += removal.kind is not EntryKind.TREE
    moved: set[bytes] = set()
    dest_fd = os.open(dest, DIR_FLAGS)
    try:
        staging_fd = os.open(staging, DIR_FLAGS)
        try:
            for name in sorted(map(os.fsencode, os.listdir(staging_fd))):
                try:
                    os.lstat(name, dir_fd=dest_fd)
                except FileNotFoundError:
                    os.rename(name, name, src_dir_fd=staging_fd, dst_dir_fd=dest_fd)
                    moved.add(name)
                else:
                    report.conflicts.append((RelPath(name), "it appeared in the target meanwhile"))
        finally:
            os.close(staging_fd)
    finally:
        os.close(dest_fd)
    for write in plan.writes:
        if write.path.split(b"/", 1)[0] in moved:
            report.written += 1
            if write.entry.kind is not EntryKind.SYMLINK:
                report.bytes_written += write.entry.size
    report.dirs_created = sum(path.split(b"/", 1)[0] in moved for path in plan.mkdirs)
    return report


def restore_into(ws: Workspace, record: CheckpointRecord, only: tuple[RelPath, ...] | None,
                 dest_path: str, *, dry_run: bool, record_event: bool,
                 progress: ProgressFn | None, started: float,
                 fetch_blobs: BlobFetch | None = None) -> RestoreReport:
    """Write checkpoint `record` (or its paths `only`) into `dest_path` (see the module).
    `fetch_blobs`: for a hollow checkpoint, what brings its blobs from the remote
    (`Remote.hydrating`); each file is written as soon as its blob is here."""
    from ckpt.checkpoints.restore.apply import describe_conflicts  # noqa: PLC0415
    from ckpt.checkpoints.restore.plan import plan_restore  # noqa: PLC0415 (lazy: the restore side)
    from ckpt.checkpoints.restore.restorer import (  # noqa: PLC0415
        Found,
        dry_run_report,
        restore_event,
        restore_report,
    )
    from ckpt.checkpoints.restore.staging import stage_tree  # noqa: PLC0415

    dest = check_target(ws, dest_path)
    found = Found((), ())
    with RootLock(os.path.join(ws.store_dir, "gc.lock"), timeout=ws.config.lock_timeout,
                  shared=True, purpose="restore --target"):
        # The parents a tracked scope's tombstones imply are made, then removed again.
        plan = plan_restore(ws.objects.get_tree, None, record.tree, scope="tree", only=only,
                            absent_parents=record.absent_parents, reserved=ws.store_rel())
        if dry_run:
            return dry_run_report(record, plan, found, started, into=dest)
        check_target(ws, dest)  # still empty now that the lock is held
        made = not os.path.lexists(dest)
        os.makedirs(dest, exist_ok=True)
        dest_b = os.fsencode(dest)
        staging = dest_b + b"/" + os.fsencode(WORKSPACE_STAGING_PREFIX + os.urandom(6).hex())
        try:
            try:
                stage_tree(plan, ws.objects, staging, progress, fetch_blobs)
                applied = move_into(dest_b, staging, plan)
            finally:
                shutil.rmtree(staging, ignore_errors=True)  # what a failure or a conflict left
        except BaseException:
            if made:  # as it was: absent (unless something appeared in it meanwhile)
                with contextlib.suppress(OSError):
                    os.rmdir(dest_b)
            raise
    report = restore_report(record, plan, applied, None, (), found, started, into=dest)
    if record_event:
        event = restore_event(ws, report)
        ws.catalog.add_event(event)
        ws.emit(event)
    if applied.conflicts:
        error = RestoreIncomplete(record.id, describe_conflicts(applied.conflicts))
        error.report = report  # type: ignore[attr-defined]
        raise error
    return report
