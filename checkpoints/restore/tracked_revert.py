"""What a restore of a tracked-scope checkpoint covers beyond the checkpoint's own paths.

In the tracked-files model a harness tracks a path before the agent first writes it and takes
a checkpoint before every turn. A path first tracked at a later checkpoint K+j was untouched
until then, so its earliest recorded state (content, or "did not exist") is its state at K.
Reverting to K restores those paths to that state too, so one revert undoes every change the
agent made since K (docs/DESIGN.md "Snapshot scope").

    later  = the target's later checkpoints (same session and root) of tracked scope, less the
             pre-restore saves (they record the state a restore found, not an untouched one)
    new    = each path of `later` not at or below a path covered before it, with the first
             checkpoint that covers it
    tree   = graft, newest source first, each new path's entry (tombstones included) from its
             checkpoint, then the target's own covered paths: an older state always wins
    covered, absent_parents = the target's, plus the new paths and their absent ancestors

The grafted tree is written to the store (a restore journals it as its target); nothing else
is. This module plans no restore and touches no workspace.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ckpt.checkpoints.model import CheckpointRecord
from ckpt.checkpoints.paths import RelPath
from ckpt.objstore import EntryKind, ObjectId, Tree, TreeEntry

_PRE_RESTORE = "pre-restore"
_SIZED = (EntryKind.FILE, EntryKind.EXECUTABLE, EntryKind.TREE)


@dataclass(frozen=True, slots=True)
class RevertScope:
    tree: ObjectId  # the target's tree with the later-tracked paths grafted in
    covered: tuple[RelPath, ...]  # the target's paths and the later-tracked ones, sorted
    absent_parents: tuple[RelPath, ...]
    later_tracked: tuple[RelPath, ...]  # the paths first tracked after the target, sorted


def _under(path: RelPath, paths: Sequence[RelPath]) -> bool:
    return any(path == p or path.startswith(p + b"/") for p in paths)


def first_tracked_later(target: CheckpointRecord,
                        later: Sequence[CheckpointRecord]) -> list[tuple[RelPath, CheckpointRecord]]:
    """Each path first tracked after `target`, with the oldest of `later` (oldest first) that
    covers it."""
    known: list[RelPath] = list(target.paths)
    found: list[tuple[RelPath, CheckpointRecord]] = []
    for record in later:
        if record.scope != "paths" or record.reason == _PRE_RESTORE:
            continue
        for path in record.paths:
            if not _under(path, known):
                found.append((path, record))
                known.append(path)
    return found


def revert_scope(load: Callable[[ObjectId], Tree], put: Callable[[Tree], ObjectId],
                 target: CheckpointRecord,
                 later: Sequence[CheckpointRecord]) -> RevertScope | None:
    """The scope of a revert to `target` (see the module), None when no later checkpoint
    tracks a path `target` does not cover. `later`: the target's later checkpoints, oldest
    first; `put` stores a tree (the caller makes the store durable before journaling it)."""
    if target.scope != "paths":
        return None
    new = first_tracked_later(target, later)
    if not new:
        return None
    layers: list[tuple[CheckpointRecord, list[RelPath]]] = []
    for path, record in reversed(new):  # newest source first: older ones graft over it
        if layers and layers[-1][0] is record:
            layers[-1][1].append(path)
        else:
            layers.append((record, [path]))
    layers.append((target, list(target.paths)))
    tree: ObjectId | None = None
    for record, paths in layers:
        for path in sorted(paths):  # outer paths first: a nested one of the same layer wins
            entry = _entry_at(load, record.tree, path)
            if entry is not None:
                tree, _size = _graft(load, put, tree, path.split(b"/"), entry)
    absent = set(target.absent_parents)
    for path, record in new:
        absent.update(a for a in record.absent_parents if path.startswith(a + b"/"))
    assert tree is not None
    later_paths = sorted(p for p, _ in new)
    return RevertScope(tree, tuple(sorted({*target.paths, *later_paths})), tuple(sorted(absent)),
                       tuple(later_paths))


def _entry_at(load: Callable[[ObjectId], Tree], tree_id: ObjectId,
              path: RelPath) -> TreeEntry | None:
    """The entry at `path`, a tombstone included (None: the tree names nothing there)."""
    tree = load(tree_id)
    parts = path.split(b"/")
    for part in parts[:-1]:
        entry = tree.find(part)
        if entry is None or entry.kind is not EntryKind.TREE or entry.oid is None:
            return None
        tree = load(entry.oid)
    return tree.find(parts[-1])


def _graft(load: Callable[[ObjectId], Tree], put: Callable[[Tree], ObjectId],
           tree_id: ObjectId | None, parts: list[bytes], entry: TreeEntry) -> tuple[ObjectId, int]:
    """`tree_id` (None: empty) with `entry` at `parts`, the directories on the way made or
    replacing what is not one: (its id, its size)."""
    entries = {e.name: e for e in load(tree_id).entries} if tree_id is not None else {}
    name = parts[0]
    if len(parts) == 1:
        entries[name] = TreeEntry(name, entry.kind, entry.oid, entry.target, entry.size)
    else:
        child = entries.get(name)
        below = child.oid if child is not None and child.kind is EntryKind.TREE else None
        oid, size = _graft(load, put, below, parts[1:], entry)
        entries[name] = TreeEntry(name, EntryKind.TREE, oid, None, size)
    return put(Tree.build(entries.values())), sum(e.size for e in entries.values()
                                                  if e.kind in _SIZED)
