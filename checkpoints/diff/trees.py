"""Pure manifest diff: what changed between two trees, skipping equal subtrees by id.

Reports leaves only (files, executables, symlinks); a tombstone counts as absent. Changes are
`A` added, `D` deleted, `M` content or mode changed, `T` type changed (file <-> symlink).
A directory replaced by a file (or back) shows as the leaf's D/A plus the directory's leaves.
`with_not_captured` adds `S`: a path the newer state could not capture (too large, special,
unreadable, changed while read; `Change.reason` says which) that the older one did not skip.
Trees come from a loader function, so this module does no IO of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckpt.checkpoints.paths import RelPath, join_rel
from ckpt.objstore import EntryKind, ObjectId, Tree, TreeEntry

if TYPE_CHECKING:
    from ckpt.checkpoints.model import SkippedPath

TreeLoader = Callable[[ObjectId], Tree]


@dataclass(frozen=True, slots=True)
class Change:
    path: RelPath
    change: str  # "A" | "D" | "M" | "T" | "S" (not captured)
    old: TreeEntry | None
    new: TreeEntry | None
    reason: str | None = None  # "S" only: why it was not captured (SkippedPath.reason)


def _present(entry: TreeEntry | None) -> TreeEntry | None:
    return None if entry is None or entry.kind is EntryKind.TOMBSTONE else entry


def iter_leaves(load: TreeLoader, oid: ObjectId, prefix: RelPath | None) -> Iterator[tuple[RelPath, TreeEntry]]:
    """Every leaf below tree `oid`, in path order."""
    for entry in load(oid).entries:
        path = join_rel(prefix, entry.name)
        if entry.kind is EntryKind.TREE:
            assert entry.oid is not None
            yield from iter_leaves(load, entry.oid, path)
        elif entry.kind is not EntryKind.TOMBSTONE:
            yield path, entry


def diff_trees(load: TreeLoader, old: ObjectId | None, new: ObjectId | None) -> list[Change]:
    changes: list[Change] = []
    _diff_dir(load, old, new, None, changes)
    return changes


def _diff_dir(
    load: TreeLoader, old: ObjectId | None, new: ObjectId | None, prefix: RelPath | None, out: list[Change]
) -> None:
    if old == new:
        return
    old_entries = {e.name: e for e in load(old).entries} if old is not None else {}
    new_entries = {e.name: e for e in load(new).entries} if new is not None else {}
    for name in sorted(old_entries.keys() | new_entries.keys()):
        _diff_entry(load, _present(old_entries.get(name)), _present(new_entries.get(name)),
                    join_rel(prefix, name), out)


def _diff_entry(
    load: TreeLoader, old: TreeEntry | None, new: TreeEntry | None, path: RelPath, out: list[Change]
) -> None:
    old_tree = old is not None and old.kind is EntryKind.TREE
    new_tree = new is not None and new.kind is EntryKind.TREE
    if old_tree or new_tree:
        if old is not None and not old_tree:
            out.append(Change(path, "D", old, None))
        _diff_dir(load, old.oid if old_tree else None, new.oid if new_tree else None, path, out)  # type: ignore[union-attr]
        if new is not None and not new_tree:
            out.append(Change(path, "A", None, new))
        return
    if old is None and new is None:
        return
    if old is None:
        out.append(Change(path, "A", None, new))
    elif new is None:
        out.append(Change(path, "D", old, None))
    elif (old.kind is EntryKind.SYMLINK) != (new.kind is EntryKind.SYMLINK):
        out.append(Change(path, "T", old, new))
    elif old.kind != new.kind or old.oid != new.oid or old.target != new.target \
            or old.mode != new.mode:
        out.append(Change(path, "M", old, new))


def with_not_captured(changes: Sequence[Change], old_skipped: Sequence[SkippedPath],
                      new_skipped: Sequence[SkippedPath]) -> list[Change]:
    """`changes` plus an `S` change for each path the newer state skipped that the older one
    did not (a file grown over max_file_size, or one created so). Such a path is there, only
    not captured: a `D` the tree diff reports for it (the older state held it) is replaced.
    In the tree diff's order (path components compared in turn)."""
    before = {s.path for s in old_skipped}
    added = {s.path: s.reason for s in new_skipped if s.path not in before}
    if not added:
        return list(changes)
    merged = [c for c in changes if not (c.change == "D" and c.path in added)]
    merged += (Change(path, "S", None, None, reason) for path, reason in added.items())
    merged.sort(key=lambda c: c.path.split(b"/"))
    return merged
