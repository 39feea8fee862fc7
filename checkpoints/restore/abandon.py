"""What abandoning a killed restore loses: `ckpt recover --abandon` (`abandon_restore`).

A restore killed part way leaves its journal, and the next write call of the root completes
it. One whose target the store cannot give (its tree was deleted or damaged) can never be
completed, and its journal fails every write call of the root. Abandoning clears the journal
without completing the restore, and first says what is lost:

    applied     = diff(pre-restore save, workspace now)    # what the restore had changed
    not_applied = what applying the plan would still do     # what it had not (None: unknown)

Both are limited to the restore's selection (its `--path` paths). This module computes that
description from what its caller gives (the fresh scan, the plan); the caller (restore/restorer.py)
clears the journal. It writes nothing and never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ckpt.checkpoints.diff.trees import Change, diff_trees
from ckpt.checkpoints.errors import CatalogCorrupt, UnknownCheckpoint
from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.restore.journal import RestoreIntent
from ckpt.checkpoints.restore.reports import AbandonedRestore
from ckpt.objstore import EntryKind, ObjectId
from ckpt.objstore.errors import CorruptObject, ObjectNotFound

if TYPE_CHECKING:
    from ckpt.checkpoints.restore.plan import RestorePlan
    from ckpt.checkpoints.workspace import Workspace


def describe_abandoned(ws: Workspace, intent: RestoreIntent, current: ObjectId,
                       plan: Callable[[], RestorePlan]) -> AbandonedRestore:
    """What abandoning `intent` loses, the workspace being `current` (a fresh scan of the
    restore's scope); `plan()` plans completing it (and raises if the target cannot be read)."""
    problem: str | None = None
    not_applied: tuple[Change, ...] | None = None
    try:
        if not ws.objects.has(intent.tree):
            problem = f"tree {intent.tree.hex()} is not in the store"
        else:
            not_applied = plan_changes(plan())
    except (ObjectNotFound, CorruptObject, CatalogCorrupt) as exc:
        problem = f"tree {intent.tree.hex()} cannot be read: {exc}"
    applied: tuple[Change, ...] | None = None
    if intent.pre_restore is not None:
        try:
            before = ws.catalog.resolve(intent.pre_restore).tree
            applied = _within(diff_trees(ws.objects.get_tree, before, current), intent.only)
        except (UnknownCheckpoint, ObjectNotFound, CorruptObject):
            applied = None
    return AbandonedRestore(intent.checkpoint, intent.tree, intent.pre_restore, problem,
                            applied, not_applied)


def plan_changes(plan: RestorePlan) -> tuple[Change, ...]:
    """The files applying `plan` would change, as a diff names them, in path order (`new`:
    what would be written; `old` is not known from a plan: None)."""
    found: dict[RelPath, Change] = {}
    for removal in (*plan.pre_removals, *plan.removals):
        if removal.kind is not EntryKind.TREE:
            found[removal.path] = Change(removal.path, "D", None, None)
    for write in plan.writes:
        if write.replaces is None or write.replaces is EntryKind.TREE:
            change = "A"
        elif (write.replaces is EntryKind.SYMLINK) != (write.entry.kind is EntryKind.SYMLINK):
            change = "T"
        else:
            change = "M"
        found[write.path] = Change(write.path, change, None, write.entry)
    for chmod in plan.chmods:
        found[chmod[0]] = Change(chmod[0], "M", None, None)
    return tuple(found[path] for path in sorted(found))


def _within(changes: Sequence[Change], only: Sequence[RelPath] | None) -> tuple[Change, ...]:
    if only is None:
        return tuple(changes)
    return tuple(c for c in changes
                 if any(c.path == p or c.path.startswith(p + b"/") for p in only))
