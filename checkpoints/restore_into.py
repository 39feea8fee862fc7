"""Restoring a checkpoint into another directory (`RestoreOptions.target`), leaving the
workspace as it is.

    restore_into(checkpoint, dest):
        dest must be absent or an empty directory, outside every ckpt store we know of
        hold the store's gc lock shared (no gc sweeps what is being read), not the root's lock
        plan = plan_restore(nothing, checkpoint's tree)    # pure; a dry run stops here
        make dest; stage and verify every file in dest/.ckpt-staging-<hex> (restore.py)
        apply the plan under dest (no symlink followed, modes as recorded); remove staging
        record a checkpoint:restore event naming dest

Nothing of the root is read or written: no scan, no pre-restore save, no journal (dest is
new: a killed run leaves a partial directory that a second run refuses as not empty), no
stat cache. The apply is restore.py's, as for any restore.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from ckpt.checkpoints.errors import RestoreIncomplete, TargetRefused
from ckpt.checkpoints.identity import MARKER
from ckpt.checkpoints.lock import RootLock
from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.workspace import WORKSPACE_STAGING_PREFIX, Workspace

if TYPE_CHECKING:
    from ckpt.checkpoints.model import CheckpointRecord
    from ckpt.checkpoints.reports import RestoreReport
    from ckpt.checkpoints.scan import ProgressFn


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


def restore_into(ws: Workspace, record: CheckpointRecord, only: tuple[RelPath, ...] | None,
                 dest_path: str, *, dry_run: bool, record_event: bool,
                 progress: ProgressFn | None, started: float) -> RestoreReport:
    """Write checkpoint `record` (or its paths `only`) into `dest_path` (see the module)."""
    from ckpt.checkpoints.plan import plan_restore  # noqa: PLC0415 (lazy: the restore side)
    from ckpt.checkpoints.restore import apply_plan, describe_conflicts, remove_staging, stage_files  # noqa: PLC0415
    from ckpt.checkpoints.restoring import (  # noqa: PLC0415
        Found,
        dry_run_report,
        restore_event,
        restore_report,
    )

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
        os.makedirs(dest, exist_ok=True)
        dest_b = os.fsencode(dest)
        staging = dest_b + b"/" + os.fsencode(WORKSPACE_STAGING_PREFIX + os.urandom(6).hex())
        try:
            staged = stage_files(plan, ws.objects, staging)
            applied = apply_plan(dest_b, plan, staged, staging=staging, progress=progress)
        finally:
            remove_staging(staging)
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
