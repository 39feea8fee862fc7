"""The records the store-wide calls of `Checkpoints` return: prune, forget, gc, fsck, stats,
and a checkpoint's file entries (restores', remotes' and a path log's are in their rooms:
`restore/reports.py`, `remote/reports.py`, `history/pathlog.py`).

Plain frozen data with their JSON shapes (docs/DESIGN.md "CLI contract"); nothing here does IO.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ckpt.checkpoints.model import format_time
from ckpt.checkpoints.paths import RelPath
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
class CheckReport:
    objects: FsckReport
    damaged_checkpoints: tuple[str, ...]
    damaged_files: tuple[tuple[str, str], ...] = ()  # (path, problem): restore journals
    # (path, problem): listed, yet no damage to the store: the next checkpoint rebuilds them
    damaged_caches: tuple[tuple[str, str], ...] = ()
    # pulled from a remote, objects not fetched: not checked here, and not damage
    remote_only: tuple[str, ...] = ()

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
    # Bytes dictionaries saved (estimated from counters kept at put time: objstore/dictionary.py)
    saved_by_dictionaries: int = 0

    @property
    def dedup_ratio(self) -> float:
        return self.logical_bytes / self.stored_bytes if self.stored_bytes else 0.0

@dataclass(frozen=True, slots=True)
class RemoteGc:
    """`gc --remote` (also after `prune --remote`): packs deleted or rewritten, bytes freed,
    and packs held back by the grace period."""

    remote: str
    packs_deleted: int
    packs_rewritten: int
    bytes_freed: int
    held_back: int
    removed: tuple[str, ...] = ()  # records deleted first (prune --remote)
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"remote": self.remote, "removed": list(self.removed),
                "packs_deleted": self.packs_deleted, "packs_rewritten": self.packs_rewritten,
                "bytes_freed": self.bytes_freed, "held_back": self.held_back,
                "dry_run": self.dry_run}
