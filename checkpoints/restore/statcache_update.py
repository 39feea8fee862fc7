"""What a restore teaches the stat cache, so the next snapshot neither reads what it wrote nor
looks again at the directories it went through.

`record_restore` is the one entry point (service.py calls it after a restore, while it still
holds the root's lock). In order:
1. `record_restored`: the rows of what the restore wrote ((path, kind, stat, ref) per file or
   link) replace the cached ones, the names it removed go; each directory whose rows changed
   loses its tree id (and so do its ancestors), and keeps its listing aside as a `Recheck`
   with the names the restore touched;
2. `_restored_listings`: where every change in a directory is known (only files and links came
   or went, no ignore file, no name the rules left out), the listing it has now is its cached
   one patched with those changes (`dirlisting.patch_listing`);
3. `adopt_restored_trees`: a directory whose rows now name exactly the target's entries (a
   file's permission bits included: a umask may have narrowed them) gets the target's tree
   id back, deepest first;
4. a directory that got its id back, with its listing known in full and nothing racy left in
   it, trusts that listing: the next walk finds it unchanged without Python, as after a scan.

It never touches the workspace, the store or the cache file: it edits a `StatCache` in memory.
Everything it records stays checkable: the next scan still compares every directory's listing.
"""

from __future__ import annotations

import bisect
import stat as statmod
from collections.abc import Callable, Iterable, Mapping, Sequence

from ckpt.checkpoints.snapshot.dirlisting import ListedEntry, listed_entry, patch_listing
from ckpt.checkpoints.snapshot.statcache import (
    IGNORE_FILES,
    NOT_SETTLED,
    DirRecord,
    FileRow,
    Recheck,
    StatCache,
    StatLike,
    bare_name,
    make_row,
    row_name,
    tree_row,
)
from ckpt.objstore import EntryKind, ObjectId, Tree
from ckpt.objstore.objects import entry_mode

_FILE = int(EntryKind.FILE)
_EXEC = int(EntryKind.EXECUTABLE)
_LINK = int(EntryKind.SYMLINK)
_TREE = int(EntryKind.TREE)
# (path, kind, stat after the rename, ref) of each file or link a restore wrote.
Written = tuple[bytes, int, StatLike, bytes]
_NO_NAMES: list[bytes] = []  # never changed: the names of a listing kept with none


def record_restore(cache: StatCache, load: Callable[[ObjectId], Tree], target: ObjectId,
                   written: Sequence[Written], removed: Sequence[bytes],
                   dir_stats: Mapping[bytes, StatLike], now_ns: int) -> None:
    """Teach `cache` what a restore to `target` did, so that the next scan neither reads what
    it wrote nor looks again at the directories it went through: the rows of what it wrote
    ((path, kind, stat, ref) per file or link) and removed (`record_restored`); the listing
    each directory now has, where every change in it is known (`_restored_listings`, from
    `dir_stats`: each directory the restore went through, as it left it); and the target's
    tree ids (`adopt_restored_trees`). A directory that gets its tree id back, with a listing
    known in full and nothing racy left in it, trusts that listing: the next walk finds it
    unchanged without Python, as after a snapshot."""
    listings = _restored_listings(cache, written, removed, dir_stats)
    cleared = record_restored(cache, written, removed, now_ns)
    aside = [key for key in listings if key in cleared]  # the others' records stand as they were
    for key in aside:
        cache.dirs[key].listing, cache.dirs[key].recheck = b"", listings[key]
    adopt_restored_trees(cache, load, target, cleared)
    for key in aside:
        record = cache.dirs[key]
        if record.tree and record.recheck is not None and not record.recheck.names:
            record.listing, record.recheck = record.recheck.listing, None  # adopted, nothing racy


def _restored_listings(cache: StatCache, written: Sequence[Written],
                       removed: Sequence[bytes], dir_stats: Mapping[bytes, StatLike],
                       ) -> dict[bytes, Recheck]:
    """Key -> (listing, racy names) of each cached directory whose listing after the restore is
    its cached one (trusted, or kept aside with its racy names) with the restore's changes
    applied: entries of what it wrote, with their stats after the rename; the names it removed,
    dropped; its subdirectories the restore went through, with their stats after it.

    Only files and links may have come or gone, and no ignore file, nor a name the rules left
    out: then the rows that `record_restored` makes describe that listing exactly. Files the
    restore wrote are not racy: they are dated before their staging, so any later write shows
    in their mtime (see restore/apply.py). A listing that is not what the directory really lists
    (something else changed it meanwhile) costs only speed: the next walk reports it."""
    changes: dict[bytes, dict[bytes, ListedEntry | None]] = {}
    for path in removed:
        parent, _, name = path.rpartition(b"/")
        changes.setdefault(parent, {})[name] = None
    for path, _kind, st, _ref in written:  # after removals: a name removed then written is there
        parent, _, name = path.rpartition(b"/")
        changes.setdefault(parent, {})[name] = listed_entry(name, st)
    for key, st in dir_stats.items():
        if key:
            parent, _, name = key.rpartition(b"/")
            changes.setdefault(parent, {})[name] = listed_entry(name, st)
    listings: dict[bytes, Recheck] = {}
    for key, here in changes.items():
        record = cache.dirs.get(key)
        if record is None or NOT_SETTLED in record.ignores:
            continue
        racy: list[bytes] = []
        if record.listing:
            base = record.listing
        elif record.recheck is not None:
            base, racy = record.recheck
        else:
            continue
        rows = record.rows
        left_out = {bare_name(name) for name in record.ignored}
        if any(name in IGNORE_FILES or name in left_out
               or (_kind_of(rows, name) == _TREE) != _is_dir(entry)
               for name, entry in here.items()):
            continue
        try:
            listings[key] = Recheck(patch_listing(base, here), [n for n in racy if n not in here])
        except ValueError:  # checksummed, so not expected: the scan reads it as it does now
            continue
    return listings


def _kind_of(rows: list[FileRow], name: bytes) -> int | None:
    """The kind of the row named `name` in `rows` (sorted by name), None if there is none."""
    at = bisect.bisect_left(rows, name, key=row_name)
    return rows[at].kind if at < len(rows) and rows[at].name == name else None


def _is_dir(entry: ListedEntry | None) -> bool:
    return entry is not None and statmod.S_ISDIR(entry.st_mode)


def adopt_restored_trees(cache: StatCache, load: Callable[[ObjectId], Tree], target: ObjectId,
                         cleared: Iterable[bytes]) -> None:
    """After a restore to `target`: give each directory whose tree id `record_restored` took
    away (the keys it returned, `cleared`) the target's tree id there when its rows now name
    exactly the target's entries, so that the next scan keeps that id instead of building the
    tree again. Deepest first, so that a directory's subdirectories have their ids when it is
    compared. Rows are only trusted as the scan trusts them: the next scan still compares
    every directory with its listing."""
    for key in sorted(cleared, key=_key_depth, reverse=True):
        record = cache.dirs.get(key)
        tree_id = _subtree_id(load, target, key)
        if record is None or record.tree or tree_id is None:
            continue
        entries = load(tree_id).entries
        rows = record.rows
        if len(rows) != len(entries):
            continue
        prefix = key + b"/" if key else b""
        kept: list[FileRow] = []
        subdirs: list[list[bytes]] = []
        size = files = leaves = 0
        for row, entry in zip(rows, entries):
            name, kind = row.name, row.kind
            if name != entry.name or kind != entry.kind:
                break
            if kind == _TREE:
                child = cache.dirs.summary(prefix + name)  # most were not touched: not decoded
                if child is None or child[0] != entry.oid:
                    break
                child_tree, child_size, child_files, child_leaves = child
                row = tree_row(name, child_tree, child_size)
                subdirs.append([name, child_tree])
                size += child_size
                files += child_files
                leaves = -1 if leaves < 0 or child_leaves < 0 else leaves + child_leaves
            elif kind == _LINK:
                if row.ref != entry.target:
                    break
                leaves += leaves >= 0
            elif kind in (_FILE, _EXEC) and row.ref == entry.oid and row.size == entry.size \
                    and entry_mode(kind, row.mode) == entry.mode:
                size += row.size
                files += 1
                leaves += leaves >= 0
            else:
                break
            kept.append(row)
        else:
            record.adopt(tree_id, size, files, leaves, kept, subdirs)


def _subtree_id(load: Callable[[ObjectId], Tree], tree: ObjectId, key: bytes) -> ObjectId | None:
    """The id of the tree at `key` below `tree`; None if there is none."""
    for name in key.split(b"/") if key else ():
        entry = load(tree).find(name)
        if entry is None or entry.kind is not EntryKind.TREE or entry.oid is None:
            return None
        tree = entry.oid
    return tree




def record_restored(cache: StatCache, written: Iterable[Written],
                    removed: Iterable[bytes], now_ns: int) -> set[bytes]:
    """Teach `cache` what a restore wrote ((path, kind, stat, ref) per file or link) and
    removed, so the next snapshot does not read it again. A directory whose rows change loses
    its tree id, and so do its ancestors'; its listing is kept aside with the names the
    restore touched, so the next scan looks at the entries that differ from it and at those
    names, not at the whole directory. Returns the keys of the directories whose tree id it
    took away."""
    new_rows: dict[bytes, dict[bytes, FileRow]] = {}
    for path, kind, st, ref in written:
        parent, _, name = path.rpartition(b"/")
        new_rows.setdefault(parent, {})[name] = make_row(name, kind, st, ref, now_ns)
    gone: dict[bytes, set[bytes]] = {}
    for path in removed:
        parent, _, name = path.rpartition(b"/")
        gone.setdefault(parent, set()).add(name)
    for parent in new_rows.keys() | gone.keys():
        record = cache.dirs.get(parent)
        if record is None:
            if parent not in new_rows:
                continue
            record = cache.dirs[parent] = DirRecord(b"", 0, 0, [])
        written_here, removed_here = new_rows.get(parent, {}), gone.get(parent, set())
        rows = [r for r in record.rows
                if r.name not in written_here and r.name not in removed_here]
        rows.extend(written_here.values())
        rows.sort(key=row_name)
        listing, racy = record.listing, _NO_NAMES
        if record.recheck is not None:
            listing, racy = record.recheck
        record.rows = rows
        if listing:
            record.recheck = Recheck(listing, sorted({*racy, *written_here, *removed_here}))
    cleared: set[bytes] = set()
    for key in new_rows.keys() | gone.keys():
        while key not in cleared:  # an ancestor met before had its own ancestors cleared
            cleared.add(key)
            record = cache.dirs.get(key)
            if record is not None:
                record.tree = b""
            if not key:
                break
            key = key.rpartition(b"/")[0]
    return cleared


def _key_depth(key: bytes) -> int:
    return key.count(b"/") + bool(key)
