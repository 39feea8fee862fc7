"""Pure restore planning: from (current manifest, target manifest, scope) to a `RestorePlan`.

The plan is plain data; `restore.apply_plan` is the only code that acts on it, and a dry run is
this module alone. Rules (docs/DESIGN.md "Restore rules"):
- equal subtrees are skipped by id; an unchanged leaf is only counted;
- whole-tree scope deletes what the target lacks, but never a path the target recorded as
  skipped (ignored files never appear in either manifest, so they are never touched);
- tracked scope acts only on covered paths: their ancestors in the manifest are "partial"
  (descended into, siblings left alone); a tombstone deletes, and the ancestors that did not
  exist at checkpoint time are removed if they end up empty;
- `only` restricts the plan to some paths (and what lies under them). In whole-tree scope a
  requested path is the whole truth below it: what the target lacks there did not exist at
  checkpoint time and is removed (a file created since inside a directory that existed then,
  and the directories created since only for it, if they end up empty);
- a target naming a reserved path (the store, when it lies inside the root) or a `.git`
  entry at any depth (snapshots never hold one) is corrupt: restore never writes into a repo.
An equal subtree is never compared; its leaves are counted through `count_leaves`, which the
caller answers from what it already knows (the service: the fresh stat cache), so a no-op
restore of a big tree loads no subtree at all.
Order of application: pre-deletes (whatever stands where a different type must go), mkdirs
(parents first), writes, chmods, deletes, rmdirs (deepest first; only if empty).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from ckpt.checkpoints.paths import RelPath, join_rel
from ckpt.objstore import EntryKind, InvalidTree, ObjectId, Tree, TreeEntry

TreeLoader = Callable[[ObjectId], Tree]
_GIT = b".git"  # excluded from every snapshot (ignore.py), so never in a genuine target
LeafCounter = Callable[[ObjectId], int | None]  # None: unknown, load and count


@dataclass(frozen=True, slots=True)
class FileWrite:
    path: RelPath
    entry: TreeEntry  # FILE, EXECUTABLE or SYMLINK: what must stand at `path`
    replaces: EntryKind | None  # what stands there now (None: nothing)


class Chmod(NamedTuple):
    """A file whose content stays and whose permission bits become `entry`'s (`entry.perms`;
    an entry of default mode is narrowed by the umask, as a file restore/apply.py writes is)."""

    path: RelPath
    entry: TreeEntry  # FILE or EXECUTABLE

    @property
    def executable(self) -> bool:
        return self.entry.kind is EntryKind.EXECUTABLE


@dataclass(frozen=True, slots=True)
class Removal:
    path: RelPath
    kind: EntryKind  # TREE for a directory (removed only if empty), else a leaf


@dataclass(frozen=True, slots=True)
class RestorePlan:
    pre_removals: tuple[Removal, ...]  # deepest first: make room for a different type
    mkdirs: tuple[RelPath, ...]  # parents first
    writes: tuple[FileWrite, ...]
    chmods: tuple[Chmod, ...]
    removals: tuple[Removal, ...]  # leaves first, then directories deepest first
    unchanged: int

    @property
    def is_empty(self) -> bool:
        return not (self.pre_removals or self.mkdirs or self.writes or self.chmods or self.removals)

    @property
    def bytes_to_write(self) -> int:
        return sum(w.entry.size for w in self.writes)


@dataclass(slots=True)
class _Builder:
    load: TreeLoader
    keep: frozenset[RelPath]
    only: tuple[RelPath, ...] | None
    covered: frozenset[RelPath]
    count_leaves: LeafCounter
    reserved: frozenset[RelPath]
    tree_scope: bool
    pre_removals: list[Removal] = field(default_factory=list)
    mkdirs: list[RelPath] = field(default_factory=list)
    writes: list[FileWrite] = field(default_factory=list)
    chmods: list[Chmod] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)
    dir_removals: list[Removal] = field(default_factory=list)
    unchanged: int = 0

    # "full": the target is the whole truth below this point; "partial": only what the
    # target names is acted on (tracked-scope ancestors, and ancestors of `only` paths).
    def mode_for(self, path: RelPath, parent_mode: str) -> str | None:
        if self.only is None:
            return parent_mode
        for wanted in self.only:
            if path == wanted or path.startswith(wanted + b"/"):
                # Whole-tree scope: the target names everything at a requested path. Tracked
                # scope: only what the checkpoint covers, as without `only`.
                return "full" if self.tree_scope else parent_mode
        for wanted in self.only:
            if wanted.startswith(path + b"/"):
                return "partial"
        return None

    def inside_only(self, path: RelPath | None) -> bool:
        if self.only is None:
            return True
        return path is not None and any(path == w or path.startswith(w + b"/") for w in self.only)

    def keeps_below(self, path: RelPath) -> bool:
        prefix = path + b"/"
        return any(k == path or k.startswith(prefix) for k in self.keep)

    def compare_dirs(self, old: ObjectId | None, new: ObjectId | None, prefix: RelPath | None, mode: str) -> None:
        # Equal trees need nothing in any mode (partial mode acts only on the target's
        # entries, which are the current ones). Only an ancestor of `only` paths is entered,
        # so that just the subset is counted as unchanged.
        if old is not None and old == new and self.inside_only(prefix):
            known = self.count_leaves(old)
            self.unchanged += _count_leaves(self.load, old) if known is None else known
            return
        if old is None and new is not None and mode == "full" and self.only is None \
                and not self.keep:
            self.add_all(new, prefix)
            return
        old_entries = {e.name: e for e in self.load(old).entries} if old is not None else {}
        new_entries = {e.name: e for e in self.load(new).entries} if new is not None else {}
        # A partial directory is acted on only where the target names something, except on
        # the way to requested paths: one the target lacks is looked for in the current state.
        names = (old_entries.keys() | new_entries.keys() if mode == "full" or self.only is not None
                 else new_entries.keys())
        if mode == "full" and old_entries and new_entries and self.only is None and not self.keep:
            names = names - self._count_identical(old_entries, new_entries, prefix)
        for name in sorted(names):
            path = join_rel(prefix, name)
            if name in new_entries and (path in self.reserved or name == _GIT):
                assert new is not None
                what = "a .git directory" if name == _GIT else "the store"
                raise InvalidTree(new, f"entry {path.decode(errors='replace')} names {what}")
            child_mode = self.mode_for(path, mode)
            if child_mode is None:
                continue
            self.compare(old_entries.get(name), new_entries.get(name), path, child_mode)

    def add_all(self, new: ObjectId, prefix: RelPath | None) -> None:
        """`compare_dirs(None, new, prefix, "full")` where no rule applies below (no `only`,
        no `keep`): every entry of `new` is made, directories first. A restore into a new
        directory plans a whole tree this way, without `compare`'s call and checks per
        entry."""
        writes, mkdirs = self.writes, self.mkdirs
        tree, tombstone = EntryKind.TREE, EntryKind.TOMBSTONE
        for entry in self.load(new).entries:  # a Tree's entries are sorted by name
            name = entry.name
            path = RelPath(name if prefix is None else prefix + b"/" + name)
            if name == _GIT or path in self.reserved:
                what = "a .git directory" if name == _GIT else "the store"
                raise InvalidTree(new, f"entry {path.decode(errors='replace')} names {what}")
            kind = entry.kind
            if kind is tree:
                assert entry.oid is not None
                mkdirs.append(path)
                self.add_all(entry.oid, path)
            elif kind is not tombstone:
                writes.append(FileWrite(path, entry, None))

    def _count_identical(self, old_entries: dict[bytes, TreeEntry],
                         new_entries: dict[bytes, TreeEntry], prefix: RelPath | None) -> set[bytes]:
        """The names whose entry is the same on both sides, counted as `compare` would count
        them, without a path or a call each: a restore in a large tree compares big
        directories (~18k entries on the Linux source) of which only a few entries differ.
        (Only in full mode without `only` or `keep` paths, where no entry has a rule.)"""
        # Field by field inline: TreeEntry's own __eq__ is a Python call per entry, and big
        # directories make that the plan's main cost. Most are one object on both sides: a
        # scan reuses the unchanged entries of the tree it rebuilds.
        get = old_entries.get
        same = {name for name, entry in new_entries.items()
                if (old := get(name)) is entry or (
                    old is not None and old.oid == entry.oid and old.kind is entry.kind
                    and old.size == entry.size and old.target == entry.target
                    and old.mode == entry.mode)}
        same.discard(_GIT)  # left to `compare_dirs`, which refuses it
        for reserved in self.reserved:
            parent, _, name = reserved.rpartition(b"/")
            if (parent or None) == prefix:
                same.discard(name)
        for name in same:
            entry = new_entries[name]
            if entry.kind is EntryKind.TREE:
                assert entry.oid is not None
                known = self.count_leaves(entry.oid)
                self.unchanged += _count_leaves(self.load, entry.oid) if known is None else known
            elif entry.kind is not EntryKind.TOMBSTONE:
                self.unchanged += 1
        return same

    def compare(self, old: TreeEntry | None, new: TreeEntry | None, path: RelPath, mode: str) -> None:
        if path in self.keep:
            # Recorded as skipped (e.g. an unreadable directory): the checkpoint does not know
            # what is there, so nothing at or below it is touched.
            return
        if old is not None and old.kind is EntryKind.TOMBSTONE:
            old = None
        if new is None:
            if mode == "full" and old is not None:
                self.remove(old, path, self.removals)
            elif old is not None and old.kind is EntryKind.TREE and self.tree_scope:
                # On the way to a requested path the target lacks (mode_for gave "partial"):
                # the directory did not exist at checkpoint time; it goes if it ends up empty.
                self.compare_dirs(old.oid, None, path, "partial")
                self.dir_removals.append(Removal(path, EntryKind.TREE))
            return
        if new.kind is EntryKind.TOMBSTONE:
            if old is not None:
                self.remove(old, path, self.removals)
            return
        if new.kind is EntryKind.TREE:
            self.compare_to_dir(old, new, path, mode)
        else:
            self.compare_to_leaf(old, new, path)

    def compare_to_dir(self, old: TreeEntry | None, new: TreeEntry, path: RelPath,
                       mode: str) -> None:
        """The target has a directory at `path`."""
        if old is not None and old.kind is not EntryKind.TREE:
            self.pre_removals.append(Removal(path, old.kind))
            old = None
        # A tracked directory is named fully by the target; its ancestors are not, and
        # are created on demand only if something is written below them.
        child_mode = "full" if mode == "full" or path in self.covered else "partial"
        if old is None and child_mode == "full":
            self.mkdirs.append(path)
        self.compare_dirs(old.oid if old else None, new.oid, path, child_mode)

    def compare_to_leaf(self, old: TreeEntry | None, new: TreeEntry, path: RelPath) -> None:
        """The target has a file or a symlink at `path`."""
        if old is not None and old.kind is EntryKind.TREE:
            if self.keeps_below(path):
                return  # a recorded-skipped path lives below: never remove it
            self.remove(old, path, self.pre_removals)
            self.writes.append(FileWrite(path, new, None))
            return
        if old is None:
            self.writes.append(FileWrite(path, new, None))
        elif old.kind is new.kind and old.oid == new.oid and old.target == new.target \
                and old.mode == new.mode:
            self.unchanged += 1
        elif old.kind is not EntryKind.SYMLINK and new.kind is not EntryKind.SYMLINK and old.oid == new.oid:
            self.chmods.append(Chmod(path, new))  # same content, other permission bits
        else:
            self.writes.append(FileWrite(path, new, old.kind))

    def remove(self, old: TreeEntry, path: RelPath, into: list[Removal]) -> None:
        if path in self.keep:
            return
        if old.kind is not EntryKind.TREE:
            into.append(Removal(path, old.kind))
            return
        assert old.oid is not None
        leaves: list[Removal] = []
        dirs: list[Removal] = []
        _collect_removals(self.load, old.oid, path, leaves, dirs, self.keep)
        into.extend(leaves)
        if self.keeps_below(path):
            dirs = [d for d in dirs if not self.keeps_below(d.path)]
        target = into if into is self.pre_removals else self.dir_removals
        target.extend(dirs)
        if not self.keeps_below(path):
            target.append(Removal(path, EntryKind.TREE))


def _collect_removals(
    load: TreeLoader, oid: ObjectId, prefix: RelPath, leaves: list[Removal], dirs: list[Removal],
    keep: frozenset[RelPath],
) -> None:
    for entry in load(oid).entries:
        path = join_rel(prefix, entry.name)
        if path in keep or entry.kind is EntryKind.TOMBSTONE:
            continue
        if entry.kind is EntryKind.TREE:
            assert entry.oid is not None
            _collect_removals(load, entry.oid, path, leaves, dirs, keep)
            dirs.append(Removal(path, EntryKind.TREE))
        else:
            leaves.append(Removal(path, entry.kind))


def _count_leaves(load: TreeLoader, oid: ObjectId) -> int:
    count = 0
    for entry in load(oid).entries:
        if entry.kind is EntryKind.TREE:
            assert entry.oid is not None
            count += _count_leaves(load, entry.oid)
        elif entry.kind is not EntryKind.TOMBSTONE:
            count += 1
    return count


def _depth(removal: Removal) -> int:
    return removal.path.count(b"/")


def plan_restore(
    load: TreeLoader,
    current: ObjectId | None,
    target: ObjectId,
    *,
    scope: str = "tree",
    covered: Sequence[RelPath] = (),
    absent_parents: Sequence[RelPath] = (),
    keep: Sequence[RelPath] = (),
    only: Sequence[RelPath] | None = None,
    reserved: Sequence[RelPath] = (),
    count_leaves: LeafCounter | None = None,
) -> RestorePlan:
    """Plan turning the state `current` into `target`.

    `scope="paths"`: only `covered` paths are full, their ancestors partial; `keep`: paths the
    target recorded as skipped, never removed; `only`: restrict to these paths; `reserved`:
    paths no manifest may name (InvalidTree); `count_leaves(tree_id)`: the leaves of an equal
    subtree if known, for `unchanged` (None, the default: load and count them).
    """
    builder = _Builder(
        load, frozenset(keep), tuple(only) if only is not None else None, frozenset(covered),
        count_leaves or (lambda oid: None), frozenset(reserved), scope == "tree",
    )
    builder.compare_dirs(current, target, None, "full" if scope == "tree" else "partial")
    dir_removals = builder.dir_removals + [
        Removal(p, EntryKind.TREE) for p in absent_parents if builder.mode_for(p, "partial") is not None
    ]
    seen: set[RelPath] = set()
    ordered_dirs = []
    for removal in sorted(dir_removals, key=_depth, reverse=True):
        if removal.path not in seen:
            seen.add(removal.path)
            ordered_dirs.append(removal)
    pre_leaves = [r for r in builder.pre_removals if r.kind is not EntryKind.TREE]
    pre_dirs = sorted((r for r in builder.pre_removals if r.kind is EntryKind.TREE), key=_depth, reverse=True)
    return RestorePlan(
        pre_removals=tuple(pre_leaves + pre_dirs),
        mkdirs=tuple(builder.mkdirs),
        writes=tuple(builder.writes),
        chmods=tuple(builder.chmods),
        removals=tuple(builder.removals + ordered_dirs),
        unchanged=builder.unchanged,
    )
