"""The history of one path: the checkpoints where the entry at a path changed (`ckpt log`).

    for each checkpoint, oldest first:
        skip it if it does not know the path (a tracked scope not covering it, or the path
            or a parent not captured)
        entry = walk its tree one component at a time      # (tree id, depth) -> entry cached:
                                                           # an equal subtree is never loaded
        if (kind, id, link target, mode) differs from the last known one: a row A/M/D/T

A directory is compared by its subtree id, so any change below it is an `M`. A tombstone
(a tracked path recorded as absent) is absent. Read-only; loads trees through the caller's
loader and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ckpt.checkpoints.model import format_time
from ckpt.objstore import EntryKind, ObjectId, Tree, TreeEntry

if TYPE_CHECKING:
    from ckpt.checkpoints.model import CheckpointRecord
    from ckpt.checkpoints.paths import RelPath

TreeLoader = Callable[[ObjectId], Tree]
_KIND_NAMES = {EntryKind.FILE: "file", EntryKind.EXECUTABLE: "executable",
               EntryKind.SYMLINK: "symlink", EntryKind.TREE: "tree"}
# What a T (type change) compares: a mode change of a file is an M, as in git.
_TYPE = {EntryKind.FILE: "file", EntryKind.EXECUTABLE: "file", EntryKind.SYMLINK: "symlink",
         EntryKind.TREE: "tree"}
Key = tuple[EntryKind, ObjectId | None, bytes | None, int | None]


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


def _covers(record: CheckpointRecord, path: RelPath) -> bool:
    """Whether `record` knows the state of `path`: its scope covers it, and neither it nor
    a parent was left uncaptured."""
    def at_or_above(other: bytes) -> bool:
        return path == other or path.startswith(other + b"/")

    if record.scope == "paths" and not any(at_or_above(p) for p in record.paths):
        return False
    return not any(at_or_above(s.path) for s in record.skipped)


class _Finder:
    """The entry at one path in many trees, one component at a time, each (tree, depth)
    answered once."""

    def __init__(self, load: TreeLoader, path: RelPath) -> None:
        self._load = load
        self._parts = path.split(b"/")
        self._seen: dict[tuple[ObjectId, int], TreeEntry | None] = {}

    def find(self, tree: ObjectId, depth: int = 0) -> TreeEntry | None:
        key = (tree, depth)
        if key in self._seen:
            return self._seen[key]
        entry = self._load(tree).find(self._parts[depth])
        if entry is not None and entry.kind is EntryKind.TOMBSTONE:
            entry = None
        if entry is not None and depth + 1 < len(self._parts):
            entry = (self.find(entry.oid, depth + 1)
                     if entry.kind is EntryKind.TREE and entry.oid is not None else None)
        self._seen[key] = entry
        return entry


def path_changes(load: TreeLoader, records: Iterable[CheckpointRecord],
                 path: RelPath) -> list[PathChange]:
    """The rows of `ckpt log PATH` over `records` (oldest first), see the module."""
    finder = _Finder(load, path)
    rows: list[PathChange] = []
    last: TreeEntry | None = None
    for record in records:
        if not _covers(record, path):
            continue
        entry = finder.find(record.tree)
        change = _change(last, entry)
        if change is not None:
            rows.append(PathChange(record, change,
                                   None if entry is None else _KIND_NAMES[entry.kind],
                                   None if entry is None else entry.size))
        last = entry
    return rows


def _key(entry: TreeEntry) -> Key:
    return (entry.kind, entry.oid, entry.target, entry.mode)


def _change(old: TreeEntry | None, new: TreeEntry | None) -> str | None:
    if old is None:
        return None if new is None else "A"
    if new is None:
        return "D"
    if _TYPE[old.kind] != _TYPE[new.kind]:
        return "T"
    return None if _key(old) == _key(new) else "M"
