"""The records the remote calls return: push, pull, and fsck and gc of a remote.

Plain frozen data with their JSON shapes (docs/DESIGN.md "CLI contract"); nothing here does IO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PushReport:
    """What a push sent: the records written to the remote (`pushed`, oldest first), those it
    already had (`present`), and the objects uploaded for them, as packs."""

    remote: str
    pushed: tuple[str, ...]
    present: tuple[str, ...]
    objects: int
    packs: int
    bytes_uploaded: int
    skipped_hollow: tuple[str, ...] = ()  # pulled checkpoints whose objects are not here

    def to_json(self) -> dict[str, Any]:
        return {"remote": self.remote, "pushed": list(self.pushed),
                "present": list(self.present), "objects": self.objects, "packs": self.packs,
                "bytes_uploaded": self.bytes_uploaded,
                "skipped_hollow": list(self.skipped_hollow)}


@dataclass(frozen=True, slots=True)
class PullReport:
    """The records a pull adopted into the catalog (`pulled`, oldest first; their objects
    stay on the remote until a restore needs them) and how many it already had."""

    remote: str
    pulled: tuple[str, ...]
    present: int

    def to_json(self) -> dict[str, Any]:
        return {"remote": self.remote, "pulled": list(self.pulled), "present": self.present}


@dataclass(frozen=True, slots=True)
class RemoteCheck:
    """`fsck --remote`: the remote's packs, objects and records checked, and the problems
    (each names the pack, index or record key)."""

    remote: str
    full: bool
    packs: int
    objects: int
    records: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        return {"remote": self.remote, "full": self.full, "packs": self.packs,
                "objects": self.objects, "records": self.records,
                "problems": list(self.problems), "ok": self.ok}


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

