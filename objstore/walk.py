"""Reachability over trees: which objects a set of root trees needs, each visited once.

Shared by GC (mark) and fsck (structural check). A damaged tree stops the walk below it and is
reported, never skipped silently: GC must not sweep what a damaged tree may still reference.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ckpt.objstore.errors import CorruptObject, ObjectNotFound
from ckpt.objstore.ids import ObjectId
from ckpt.objstore.objects import EntryKind
from ckpt.objstore.store import ObjectStore


@dataclass(frozen=True, slots=True)
class Damage:
    oid: ObjectId
    problem: str  # "missing" or "corrupt"
    reason: str
    parent: ObjectId | None  # the tree that references it (None for a root)
    name: bytes | None  # its name in that tree


@dataclass(slots=True)
class Reachability:
    trees: set[ObjectId] = field(default_factory=set)
    blobs: set[ObjectId] = field(default_factory=set)
    damage: list[Damage] = field(default_factory=list)
    damaged_roots: set[ObjectId] = field(default_factory=set)

    @property
    def all(self) -> set[ObjectId]:
        return self.trees | self.blobs


BlobCheck = Callable[[ObjectId], str | None]  # returns a problem reason, or None when fine


def walk_reachable(
    store: ObjectStore, roots: Iterable[ObjectId], *, check_blob: BlobCheck | None = None
) -> Reachability:
    """Visit every tree and blob reachable from `roots`.

    `check_blob`, when given, is called once per distinct blob (fsck passes a presence or a
    full verification check). A root is damaged when anything below it is.
    """
    result = Reachability()
    healthy: dict[ObjectId, bool] = {}

    def blob_ok(oid: ObjectId, parent: ObjectId, name: bytes) -> bool:
        known = healthy.get(oid)
        if known is not None:
            return known
        result.blobs.add(oid)
        reason = check_blob(oid) if check_blob is not None else None
        ok = reason is None
        if not ok:
            problem = "missing" if reason == "missing" else "corrupt"
            result.damage.append(Damage(oid, problem, reason or "", parent, name))
        healthy[oid] = ok
        return ok

    def tree_ok(root: ObjectId) -> bool:
        # Iterative post-order: a tree is healthy when it decodes and all it references is.
        stack: list[tuple[ObjectId, ObjectId | None, bytes | None, bool]] = [
            (root, None, None, False)
        ]
        while stack:
            oid, parent, name, expanded = stack.pop()
            if oid in healthy and not expanded:
                continue
            try:
                tree = store.get_tree(oid)
            except ObjectNotFound as exc:
                result.damage.append(Damage(oid, "missing", str(exc), parent, name))
                healthy[oid] = False
                continue
            except CorruptObject as exc:
                result.damage.append(Damage(oid, "corrupt", exc.reason, parent, name))
                healthy[oid] = False
                continue
            if not expanded:
                result.trees.add(oid)
                stack.append((oid, parent, name, True))
                for entry in tree.entries:
                    if entry.kind is EntryKind.TREE and entry.oid not in healthy:
                        assert entry.oid is not None
                        stack.append((entry.oid, oid, entry.name, False))
                continue
            ok = True
            for entry in tree.entries:
                if entry.oid is None:
                    continue
                if entry.kind is EntryKind.TREE:
                    ok = healthy.get(entry.oid, False) and ok
                else:
                    ok = blob_ok(entry.oid, oid, entry.name) and ok
            healthy[oid] = ok
        return healthy.get(root, False)

    for root in roots:
        if not tree_ok(root):
            result.damaged_roots.add(root)
    return result
