"""The records a restore returns: `RestoreReport` (what a restore did or would do), the
`RestoreConflict`s of a partial one, and `AbandonedRestore` (`ckpt recover --abandon`).

Plain frozen data with their JSON shapes (docs/DESIGN.md "CLI contract"); nothing here does IO.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ckpt.checkpoints.diff.trees import Change
from ckpt.checkpoints.model import SkippedPath
from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.restore.plan import RestorePlan
from ckpt.objstore import ObjectId


@dataclass(frozen=True, slots=True)
class RestoreConflict:
    """A path a restore left as it was, and why (docs/DESIGN.md "Restore rules", 4)."""

    path: RelPath
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"path": os.fsdecode(self.path), "reason": self.reason}


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What a restore did (or, `dry_run`, would do). `conflicts`: the paths it left as they
    were (a partial restore); `not_captured`: paths the scan before it did not capture (too
    large, unreadable, ...), kept as they are; `later_tracked`: paths first tracked after a
    tracked-scope target, restored to their earliest recorded state (docs/DESIGN.md);
    `undid`: the pre-restore checkpoint an `undo` restored; `target`: the directory a restore
    into another one wrote (None: the workspace)."""

    id: str
    written: int
    deleted: int
    dirs_created: int
    dirs_removed: int
    unchanged: int
    bytes_written: int
    pre_restore: str | None
    discarded: tuple[str, ...]
    dry_run: bool
    plan: RestorePlan
    conflicts: tuple[RestoreConflict, ...] = ()
    duration_ms: int = 0
    not_captured: tuple[SkippedPath, ...] = ()
    later_tracked: tuple[RelPath, ...] = ()
    undid: str | None = None
    target: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "written": self.written, "deleted": self.deleted,
            "dirs_created": self.dirs_created, "dirs_removed": self.dirs_removed,
            "unchanged": self.unchanged, "bytes_written": self.bytes_written,
            "pre_restore": self.pre_restore, "discarded": list(self.discarded),
            "conflicts": [c.to_json() for c in self.conflicts],
            "not_captured": [{"path": os.fsdecode(s.path), "reason": s.reason}
                             for s in self.not_captured],
            "later_tracked": [os.fsdecode(p) for p in self.later_tracked],
            "undid": self.undid, "target": self.target,
        }


@dataclass(frozen=True, slots=True)
class AbandonedRestore:
    """A killed restore whose journal `recover --abandon` cleared without completing it, and
    what is lost: `applied` is what the restore had changed (the pre-restore save against the
    workspace as found; None without one), `not_applied` what completing it would still have
    changed (None when `problem` says why the store cannot tell). The workspace is left as it
    is; restoring `pre_restore` undoes what was applied."""

    checkpoint: str | None  # the target's id (None: the journal could not be read)
    tree: ObjectId | None
    pre_restore: str | None
    problem: str | None  # why the restore could not be completed; None when it could have been
    applied: tuple[Change, ...] | None
    not_applied: tuple[Change, ...] | None

    def to_json(self) -> dict[str, Any]:
        def changes(found: tuple[Change, ...] | None) -> list[dict[str, str]] | None:
            if found is None:
                return None
            return [{"path": os.fsdecode(c.path), "change": c.change} for c in found]

        return {"checkpoint": self.checkpoint,
                "tree": self.tree.hex() if self.tree is not None else None,
                "pre_restore": self.pre_restore, "problem": self.problem,
                "applied": changes(self.applied), "not_applied": changes(self.not_applied)}
