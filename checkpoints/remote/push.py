"""What a push uploads: the objects of the checkpoints it sends that the remote cannot have yet,
found by diffing each one's tree against the tree of a checkpoint the remote already has.

A checkpoint whose record is on the remote has every object it needs there too (a push puts
records last, and remote gc keeps whatever a kept record needs), so below a subtree whose id is
the same in that checkpoint there is nothing to send. The walk descends only where ids differ,
and its cost follows the size of the change, not of the tree. A subtree with no counterpart
(new, moved, or no base at all) is walked whole; the object layer still skips any of its ids a
remote index names. Checkpoints sent earlier in the same push serve as bases for later ones.

Reads trees from the local store only; must not import the remote code nor write anything.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ckpt.checkpoints.model import CheckpointRecord
from ckpt.objstore import EntryKind, ObjectId, ObjectStore
from ckpt.objstore.errors import CorruptObject, ObjectNotFound
from ckpt.objstore.objects import TreeEntry


@dataclass(frozen=True, slots=True)
class PushPlan:
    """The ids a push hands to the upload (trees and blobs, each once; every tree before the
    blobs, so that the packs hold a push's trees side by side and a fresh machine's walk of
    them reads a few ranges, not a range per tree) and how many trees the diff read."""

    oids: tuple[ObjectId, ...]
    trees_read: int


def plan_push(store: ObjectStore, todo: Sequence[CheckpointRecord],
              bases: Iterable[CheckpointRecord]) -> PushPlan:
    """The objects of `todo` (oldest first) that are not below the tree of a base: a checkpoint
    of `bases` (on the remote, every object here) or an earlier one of `todo`."""
    on_remote = sorted(bases, key=_order)
    trees: dict[ObjectId, None] = {}
    blobs: dict[ObjectId, None] = {}
    walked: set[ObjectId] = set()  # trees whose content is in `trees` or on the remote
    reads = 0
    sent: list[CheckpointRecord] = []
    for record in todo:
        base = _base_for(record, sent, on_remote)
        reads += _diff(store, record.tree, None if base is None else base.tree, trees, blobs,
                       walked)
        sent.append(record)
    return PushPlan((*trees, *blobs), reads)


def _order(record: CheckpointRecord) -> tuple[object, str]:
    return record.created_at, record.id


def _base_for(record: CheckpointRecord, sent: Sequence[CheckpointRecord],
              on_remote: Sequence[CheckpointRecord]) -> CheckpointRecord | None:
    """The checkpoint most like `record`: the latest of its session and root (on the remote or
    sent before it in this push), else of its session, else the latest of any."""
    candidates = [*on_remote, *sent]
    if not candidates:
        return None
    for close in ([r for r in candidates
                   if r.session == record.session and r.root == record.root],
                  [r for r in candidates if r.session == record.session], candidates):
        if close:
            return max(close, key=_order)
    return None


def _diff(store: ObjectStore, new: ObjectId, old: ObjectId | None, trees: dict[ObjectId, None],
          blobs: dict[ObjectId, None], walked: set[ObjectId]) -> int:
    """Add to `trees` and `blobs` every object below `new` not below `old`; returns the trees
    read. A damaged or missing tree of `new` raises (the push must not send half of it); one
    of `old` counts as absent (its subtree is walked whole)."""
    reads = 0
    # Level by level, as a snapshot puts a tree's files (scan.py): the blobs then go out in
    # the order their blocks were made, so a block's members lie together in the packs and a
    # fresh machine's restore, which reads the packs in order, meets each block once.
    queue: deque[tuple[ObjectId, ObjectId | None]] = deque([(new, old)])
    while queue:
        tree_id, base_id = queue.popleft()
        if tree_id == base_id or tree_id in walked:
            continue
        walked.add(tree_id)
        trees[tree_id] = None
        tree = store.get_tree(tree_id)
        reads += 1
        before: dict[bytes, TreeEntry] = {}
        if base_id is not None:
            try:
                before = {e.name: e for e in store.get_tree(base_id).entries}
                reads += 1
            except (ObjectNotFound, CorruptObject):
                before = {}
        for entry in tree.entries:
            if entry.oid is None:
                continue
            was = before.get(entry.name)
            if was is not None and was.oid == entry.oid:
                continue
            if entry.kind is EntryKind.TREE:
                queue.append((entry.oid, was.oid if was is not None
                              and was.kind is EntryKind.TREE else None))
            else:
                blobs[entry.oid] = None
    return reads
