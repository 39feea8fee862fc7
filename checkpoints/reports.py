"""The records the `Checkpoints` API returns: restore, prune, check and store reports.

Plain frozen data with their JSON shapes (docs/DESIGN.md "CLI contract"); nothing here does IO.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ckpt.checkpoints.diff import Change
from ckpt.checkpoints.model import CheckpointRecord, SkippedPath, format_time
from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.plan import RestorePlan
from ckpt.objstore import EntryKind, ObjectId

if TYPE_CHECKING:  # only named in annotations: fsck stays off the start-up path
    from ckpt.objstore.fsck import FsckReport


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: RelPath
    kind: EntryKind
    size: int
    oid: ObjectId | None
    target: bytes | None


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
class HeldBack:
    """Unreachable objects a gc kept because they are younger than the grace period (a
    racing writer may still be about to use them)."""

    objects: int
    bytes: int
    until: datetime  # when the youngest of them leaves the grace period (a gc then frees them)
    grace_seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"objects": self.objects, "bytes": self.bytes, "until": format_time(self.until),
                "grace_seconds": self.grace_seconds}


@dataclass(frozen=True, slots=True)
class GcReport:
    """What one gc did: objstore's counts, what it held back, and the disk space it found."""

    objects_removed: int
    bytes_freed: int
    objects_kept: int  # reachable
    objects_young: int  # unreachable but inside the grace period
    temporaries_removed: int
    dry_run: bool
    held_back: HeldBack | None = None  # None: nothing unreachable was kept
    # Why compaction stopped (out of space): what it removed is counted, the rest stays whole.
    compaction_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"objects_removed": self.objects_removed, "bytes_freed": self.bytes_freed,
                "objects_kept": self.objects_kept, "objects_young": self.objects_young,
                "temporaries_removed": self.temporaries_removed, "dry_run": self.dry_run,
                "held_back": self.held_back.to_json() if self.held_back else None,
                "compaction_error": self.compaction_error}


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


@dataclass(frozen=True, slots=True)
class PruneReport:
    """The checkpoints a prune removed (or would remove), and the gc that followed, if any."""

    removed: tuple[str, ...]
    objects_removed: int
    bytes_freed: int
    dry_run: bool = False
    gc: GcReport | None = None  # None: not collected (dry run, --no-gc, or nothing removed)

    def to_json(self) -> dict[str, Any]:
        return {"removed": list(self.removed), "objects_removed": self.objects_removed,
                "bytes_freed": self.bytes_freed, "dry_run": self.dry_run,
                "gc": self.gc.to_json() if self.gc else None}


@dataclass(frozen=True, slots=True)
class ForgetReport:
    """The checkpoints a `forget` removed (or, `dry_run`, would remove); gc frees their
    objects later, as after a prune."""

    removed: tuple[str, ...]
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"removed": list(self.removed), "dry_run": self.dry_run}


@dataclass(frozen=True, slots=True)
class PathChange:
    """One checkpoint where the entry at a path differs from the checkpoint before it
    (`Checkpoints.path_log`): `change` is A (appeared), M (content, mode or link target;
    a directory: anything below it), D (gone) or T (type: file, symlink, directory);
    `kind` and `size` are the entry's at `record` (None once it is gone)."""

    record: CheckpointRecord
    change: str
    kind: str | None
    size: int | None

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {"id": r.id, "created_at": format_time(r.created_at), "session": r.session,
                "change": self.change, "kind": self.kind, "size": self.size,
                "reason": r.reason, "turn_id": r.turn_id, "tool_call_id": r.tool_call_id}


@dataclass(frozen=True, slots=True)
class CheckReport:
    objects: FsckReport
    damaged_checkpoints: tuple[str, ...]
    damaged_files: tuple[tuple[str, str], ...] = ()  # (path, problem): restore journals
    # (path, problem): listed, yet no damage to the store: the next checkpoint rebuilds them
    damaged_caches: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        return self.objects.ok and not self.damaged_files


@dataclass(frozen=True, slots=True)
class StoreStats:
    objects: int
    stored_bytes: int  # on disk, compressed
    logical_bytes: int  # sum of every checkpoint's file bytes
    checkpoints: int  # of every root and session of the store
    sessions: dict[str, int]  # checkpoints per session, every root counted
    roots: dict[str, int] = field(default_factory=dict)  # checkpoints per root, every session
    saved_by_dedup: int = 0  # logical bytes less the distinct file contents
    saved_by_deltas: int = 0  # stored bytes deltas saved over storing those blobs plain

    @property
    def dedup_ratio(self) -> float:
        return self.logical_bytes / self.stored_bytes if self.stored_bytes else 0.0
