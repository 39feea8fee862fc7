"""Snapshot scan: walk a workspace, hash what changed, and build its Merkle tree bottom-up.

Three phases, so the walk and compression can use every core without the GIL:
1. walk: `dirlisting.walk_dirs` (native, threaded, without the GIL) lists and lstats every
   directory; one whose listing equals the cached one — and whose ignore rules cannot have
   changed — is unchanged, and so is the whole walk below it unless a listing there differs:
   only the differing directories come back to Python. There, if the cached record describes
   an earlier listing (`listing_changes`), only the entries that differ from it and the names
   it kept aside as racy are looked at; else every entry. Each is a stat-cache hit (id reused,
   file not read) or a job. Ignore rules are only loaded for directories that need them;
2. hash: jobs go through `ObjectStore.put_files` (one Python thread reads and hashes; new
   objects are compressed in batches on native threads; never follows symlinks; a file that
   changes while read is retried, then skipped as "changed", never stored torn);
3. build: directories bottom-up; a directory whose rows and subtrees all match the cache keeps
   its cached tree id without being re-encoded, so an unchanged subtree costs one listing.

The scan never modifies the workspace. It writes objects and returns the new stat cache; the
caller (the service) decides when the cache is saved and the record committed.
"""

from __future__ import annotations

import bisect
import os
import stat as statmod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ckpt.checkpoints.dirlisting import (
    Known,
    ListedEntry,
    MaybeNames,
    iter_listing,
    listing_changes,
    patch_listing,
    walk_dirs,
)
from ckpt.checkpoints.model import SkippedPath
from ckpt.checkpoints.paths import RelPath, ancestors, parse_relpath
from ckpt.checkpoints.statcache import (
    CTIME,
    INO,
    KIND,
    MODE,
    MTIME,
    NAME,
    NOT_SETTLED,
    RACY,
    REF,
    SIZE,
    DirRecord,
    Row,
    StatCache,
    StatLike,
    is_racy,
    make_row,
    record_restored,
    row_name,
    same_stat,
)
from ckpt.objstore import (
    ContentChanged,
    EntryKind,
    ObjectId,
    ObjectStore,
    PutResult,
    Tree,
    TreeEntry,
    make_entry,
)

if TYPE_CHECKING:  # pathspec costs ~60 ms to import: only snapshots pay for it
    from ckpt.checkpoints.ignore import DirRules, IgnoreRules

ProgressFn = Callable[[str, int, int], None]  # (stage, done, total)
_CHANGED_RETRIES = 3
_FILE = int(EntryKind.FILE)
_EXEC = int(EntryKind.EXECUTABLE)
_LINK = int(EntryKind.SYMLINK)
_TREE = int(EntryKind.TREE)
_TOMB = int(EntryKind.TOMBSTONE)
_KIND_OF = {int(kind): kind for kind in EntryKind}  # EntryKind(n) costs an enum call per entry
_TREE_KIND = EntryKind.TREE
_IGNORE_FILES = (b".gitignore", b".ckptignore")  # as ignore.py reads them
RulesFactory = Callable[[], "IgnoreRules"]


@dataclass(frozen=True, slots=True)
class ScanOptions:
    max_file_size: int = 0  # 0 = no limit; larger files are skipped and recorded
    threads: int = 0  # 0 = one per core
    # Whatever else decides what is captured (ignore settings): a cache made under other
    # settings is still used entry by entry, but never for whole-directory shortcuts.
    ignore_settings: str = ""

    @property
    def settings(self) -> str:
        return repr((self.max_file_size, self.ignore_settings))


@dataclass(frozen=True, slots=True)
class ScanResult:
    tree: ObjectId
    files: int
    bytes: int
    new_objects: int
    new_bytes: int
    hashed: int  # files whose content was read this time
    skipped: tuple[SkippedPath, ...]
    absent_parents: tuple[RelPath, ...] = ()  # paths scope: missing parents of tombstones
    dirs_unchanged: int = 0  # directories whose listing matched the cache: entries not looked at


@dataclass(slots=True)
class _Dir:
    key: bytes  # b"" for the root, else the relative path
    fs_path: bytes
    rows: list[Row] = field(default_factory=list)
    children: dict[bytes, _Dir] = field(default_factory=dict)  # subdirectory name -> node
    all_hits: bool = True
    virtual: bool = False  # paths scope: an ancestor of tracked paths, holding only those
    tree: ObjectId | None = None
    size: int = 0
    files: int = 0
    leaves: int = 0  # files and symlinks below; -1: unknown
    parent: _Dir | None = None
    rules: DirRules | None = None  # computed on demand (see _Scanner._rules_of)
    # The rules in force here are the ones the cached record was made under: unchanged
    # settings, and no ignore file changed in this directory's ancestors.
    rules_clean: bool = False
    listing: bytes | None = None
    newest: int = 0  # newest mtime/ctime in the listing
    fast: bool = False  # the listing equals the cached one: rows are the cached record's
    clean: bool = True  # nothing skipped or vanished here: its listing may be remembered
    ignores: list[object] = field(default_factory=list)  # listing entries of its ignore files
    ignored: list[bytes] = field(default_factory=list)  # names the rules left out ("/": dirs)
    # Read in part (_read_changes) with the cached names: (cached row, row read again) of each
    # entry looked at; at build they decide if the tree id still holds.
    recheck: list[tuple[Row, Row]] | None = None


@dataclass(slots=True)
class _Job:
    key: bytes
    row: Row
    fs_path: bytes
    node: _Dir


class _Scanner:
    def __init__(
        self,
        root: bytes,
        store: ObjectStore,
        cache: StatCache,
        options: ScanOptions,
        scan_start_ns: int,
        progress: ProgressFn | None,
    ) -> None:
        self.root = root
        self.store = store
        self.cache = cache
        self.options = options
        self.start_ns = scan_start_ns
        self.progress = progress
        self.jobs: list[_Job] = []
        self.skipped: list[SkippedPath] = []
        self.new_objects = 0
        self.new_bytes = 0
        self.new_cache = StatCache(gc_generation=cache.gc_generation, base=cache.base)
        self.new_cache.settings = options.settings
        self.rebuilt_dirs = 0
        self.settled_listings = 0
        self.settled_rows = 0  # files read that the next scan may trust without reading
        self.dirs_unchanged = 0
        self._verified: dict[bytes, bool] = {}
        self.root_rules: RulesFactory = _no_rules
        # Whole-directory shortcuts need ids that surely exist and rows made under these rules.
        self.shortcuts = not cache.needs_verification and cache.settings == options.settings
        self._nodes: dict[bytes, _Dir] = {}
        self._known: Known = {}  # what the walk compared listings against (see walk)

    def _trusted(self, oid: bytes) -> bool:
        """After a GC, an id remembered by the cache may be gone: check before reuse."""
        if not self.cache.needs_verification:
            return True
        known = self._verified.get(oid)
        if known is None:
            known = self._verified[oid] = self.store.has(ObjectId(oid))
        return known

    def _skip(self, key: bytes, reason: str, node: _Dir | None = None) -> None:
        self.skipped.append(SkippedPath(parse_relpath(key), reason))
        if node is not None:
            node.clean = False

    # -- phase 1 ---------------------------------------------------------------------

    def walk(self, top: _Dir) -> list[_Dir]:
        """The directories under `top` that Python has to look at, shallowest first: those
        whose listing changed, their ancestors and their subdirectories. Whole unchanged
        subtrees are walked by `walk_dirs` alone; their records go to the new cache as they are."""
        threads = self.options.threads or os.cpu_count() or 1
        known = self._known = self.cache.dirs.known() if self.shortcuts else {}
        nodes = self._nodes = {top.key: top}
        pending = [top]
        while pending:
            reports, unchanged = walk_dirs(
                [(n.key, n.fs_path, n.rules_clean) for n in pending], known or None, threads)
            self._take_unchanged(unchanged)
            following: list[_Dir] = []
            for key, outcome in reports:
                node = nodes.get(key) or self._reached(key)
                if isinstance(outcome, int):
                    node.all_hits = False
                    if node.key:
                        self._skip(node.key, f"unreadable: {os.strerror(outcome)}", node)
                    else:
                        raise OSError(outcome, os.strerror(outcome), os.fsdecode(node.fs_path))
                    continue
                node.listing, node.newest = outcome
                cached = self.cache.dirs.get(node.key)
                if cached is None or not self._read_changes(node, cached, following):
                    self._read_dir(node, cached, following)
            for child in following:
                nodes[child.key] = child
            pending = following
        return sorted(nodes.values(), key=_depth)

    def _take_unchanged(self, keys: list[bytes]) -> None:
        """Directories whose listing is the cached one (same entries, same stats, same rules):
        every directory of a no-change snapshot."""
        self.dirs_unchanged += len(keys)
        self.new_cache.dirs.take(self.cache.dirs, keys)
        for key in keys:
            node = self._nodes.get(key)
            if node is not None:  # a start: its cached record stands for it
                self._mark_unchanged(node)

    def _reached(self, key: bytes, *, unchanged: bool = False) -> _Dir:
        """The node of a directory the walk reached through unchanged ones, with the nodes of
        those ancestors: they are rebuilt from their cached rows around what changed."""
        parent_key, _, name = key.rpartition(b"/")
        parent = self._nodes.get(parent_key) or self._reached(parent_key, unchanged=True)
        node = _Dir(key, parent.fs_path + b"/" + name, parent=parent, rules_clean=True)
        if unchanged:
            self._mark_unchanged(node)
        parent.children[name] = node
        self._nodes[key] = node
        return node

    def _mark_unchanged(self, node: _Dir) -> None:
        """The walk found `node`'s listing equal to the cached one: its rows are the cached
        record's, and so is its listing, which stays true if a change below makes the build
        rebuild it (without it the new record would lose the listing, the next scan the
        shortcut). Taken from the walk's table, so that the record is not decoded for it."""
        node.fast, node.listing = True, self._known[node.key][0]

    def _rules_of(self, node: _Dir) -> DirRules:
        rules = node.rules
        if rules is None:
            if node.parent is None:
                rules = self.root_rules().root_context()
            else:
                name = node.key.rpartition(b"/")[2]
                # The rules only ask whether an ignore file is there: a false "yes" costs one
                # failing open.
                names = None if node.listing is None else MaybeNames(node.listing)
                rules = self._rules_of(node.parent).enter(name, listing=names)
            node.rules = rules
        return rules

    def _read_changes(self, node: _Dir, cached: DirRecord, following: list[_Dir]) -> bool:
        """Look only at what differs from a listing the cached record describes (its whole
        listing, or the one kept aside with the names of files too new to be trusted): the
        entries that changed, and those names. Every other entry keeps its cached row, so a
        turn's edits cost a look at the edited entries, not at every entry of the directories
        they touched. False, with nothing done, where this does not hold: no such listing, the
        rules here may have changed (an ignore file is among the changes, here or above), or a
        name to look at vanished since the walk."""
        if cached.listing:
            base_listing, racy = cached.listing, []
        elif cached.recheck is not None:
            base_listing, racy = cached.recheck
        else:
            return False
        if not (self.shortcuts and node.rules_clean) or NOT_SETTLED in cached.ignores:
            return False
        assert node.listing is not None
        try:
            changed, gone = listing_changes(base_listing, node.listing)
        except ValueError:  # checksummed, so not expected: decide every entry again
            return False
        look = {fields[0]: ListedEntry(*fields) for fields in changed}
        gone_names = set(gone)
        base = node.fs_path + b"/"
        for name in racy:
            if name not in look and name not in gone_names:
                try:
                    look[name] = _listed(name, os.lstat(base + name))
                except OSError:
                    return False
        if any(name in look or name in gone_names for name in _IGNORE_FILES):
            return False
        prefix = node.key + b"/" if node.key else b""
        rows = node.rows
        old_rows: dict[bytes, Row] = {}
        dropped = 0
        for row in cached.rows:
            name = row[NAME]
            if name in look:
                old_rows[name] = row
            elif name in gone_names:
                dropped += 1
            else:
                rows.append(row)
                if row[KIND] == _TREE:
                    child = _Dir(prefix + name, base + name, parent=node)
                    node.children[name] = child
                    following.append(child)
        node.ignores = cached.ignores
        node.ignored = [name for name in cached.ignored
                        if _bare(name) not in look and _bare(name) not in gone_names]
        first_new = len(rows)
        entries = [look[name] for name in sorted(look)]
        self._read_entries(node, entries, old_rows, set(cached.ignored), following)
        for child in node.children.values():  # no ignore file changed here or above
            child.rules_clean = True
        pairs = [(old_rows.get(row[NAME]), row) for row in rows[first_new:]]
        if dropped or len(pairs) != len(old_rows) or any(old is None for old, _row in pairs):
            node.all_hits = False  # other names than the cached ones: the tree is built again
        else:
            node.recheck = [(old, row) for old, row in pairs if old is not None]
        rows.sort(key=row_name)
        node.ignored.sort(key=_bare)
        return True

    def _read_dir(self, node: _Dir, cached: DirRecord | None, following: list[_Dir]) -> None:
        assert node.listing is not None
        cached_rows = {row[NAME]: row for row in cached.rows} if cached is not None else {}
        entries = list(iter_listing(node.listing))
        start = self.start_ns
        ignores: list[object] = [
            NOT_SETTLED if is_racy(max(entry.st_mtime_ns, entry.st_ctime_ns), start)
            else list(entry)
            for entry in entries if entry.name in _IGNORE_FILES
        ]
        node.ignores = ignores
        # The rules in force here are the cached scan's if no ignore file changed here or above.
        same_rules = (node.rules_clean and cached is not None and ignores == cached.ignores
                      and NOT_SETTLED not in ignores)
        # Then a name the cache kept (or left out) is decided as it was, without the rules.
        known_out = set(cached.ignored) if same_rules and cached is not None else None
        hits = self._read_entries(node, entries, cached_rows, known_out, following)
        if same_rules:
            for child in node.children.values():
                child.rules_clean = True
        # Same names as cached and every row a hit: the directory may keep its tree id.
        node.all_hits = (
            node.all_hits and cached is not None and hits == len(node.rows) == len(cached.rows)
        )

    def _read_entries(self, node: _Dir, entries: Sequence[ListedEntry],
                      cached_rows: dict[bytes, Row], known_out: set[bytes] | None,
                      following: list[_Dir]) -> int:
        """Add `entries` to `node`: rows (a cached one where the stat matches), subdirectories
        to walk, files to hash, names left out. Returns how many matched a cached row."""
        # The hot loop of a snapshot of changed directories: for an unchanged file nothing but
        # a dict lookup and a field-by-field comparison (inlined on purpose).
        prefix = node.key + b"/" if node.key else b""
        base = node.fs_path + b"/"
        rows = node.rows
        limit = self.options.max_file_size
        verify = self.cache.needs_verification
        hits = 0
        for entry in entries:
            name = entry.name
            mode = entry.st_mode
            if not mode:  # its lstat failed; the size holds the errno
                node.all_hits = False
                self._skip(prefix + name, f"unreadable: {os.strerror(entry.st_size)}", node)
                continue
            is_dir = statmod.S_ISDIR(mode)
            row = cached_rows.get(name)
            if known_out is not None and row is not None and (row[KIND] == _TREE) == is_dir:
                pass  # kept last time under the same rules
            elif known_out is not None and (name + b"/" if is_dir else name) in known_out:
                node.ignored.append(name + b"/" if is_dir else name)
                continue
            elif self._rules_of(node).is_ignored(name, is_dir=is_dir):
                node.ignored.append(name + b"/" if is_dir else name)
                continue
            if is_dir:
                child = _Dir(prefix + name, base + name, parent=node)
                node.children[name] = child
                rows.append([name, _TREE, 0, 0, 0, 0, 0, b"", False])
                if row is not None and row[KIND] == _TREE:
                    hits += 1
                following.append(child)
                continue
            if (
                row is not None
                and row[MTIME] == entry.st_mtime_ns
                and row[SIZE] == entry.st_size
                and row[CTIME] == entry.st_ctime_ns
                and row[INO] == entry.st_ino
                and row[MODE] == mode  # the mode also fixes the kind and exec bit
                and not row[RACY]
                and (not limit or entry.st_size <= limit)
                and (not verify or self._trusted_row(row))
            ):
                rows.append(row)
                hits += 1
                continue
            self._add_leaf(node, name, prefix + name, base + name, entry)
        return hits

    def _add_leaf(
        self, node: _Dir, name: bytes, key: bytes, fs_path: bytes,
        st: StatLike, cached: Row | None = None,
    ) -> None:
        mode = st.st_mode
        if statmod.S_ISREG(mode):
            kind = _EXEC if mode & 0o100 else _FILE
            limit = self.options.max_file_size
            if limit and st.st_size > limit:
                node.all_hits = False
                self._skip(key, "too-large", node)
                return
        elif statmod.S_ISLNK(mode):
            kind = _LINK
        else:
            node.all_hits = False
            self._skip(key, "special", node)
            return
        if cached is not None and same_stat(cached, kind, st) and self._trusted_row(cached):
            node.rows.append(cached)
            return
        node.all_hits = False
        if kind == _LINK:
            try:
                target = os.readlink(fs_path)
            except OSError as exc:
                self._skip(key, f"unreadable: {exc.strerror}", node)
                return
            node.rows.append(make_row(name, kind, st, target, self.start_ns))
            return
        row = make_row(name, kind, st, b"", self.start_ns)
        node.rows.append(row)
        self.jobs.append(_Job(key, row, fs_path, node))

    def _trusted_row(self, row: Row) -> bool:
        return row[KIND] == _LINK or self._trusted(row[REF])

    # -- phase 2 ---------------------------------------------------------------------

    def hash_all(self) -> int:
        jobs = self.jobs
        if not jobs:
            return 0
        total = len(jobs)
        # One Python thread reads, hashes and stores; the store compresses batches of new
        # objects on native threads that never take the GIL (`threads`, or by default one per
        # core but the one this thread keeps busy). A Python thread pool calling put_file per
        # file paid a GIL hand-off per syscall (kernel tree: 16 s CPU instead of 9) and held a
        # Future per job (~100 MB of RSS for 78k files).
        paths = (job.fs_path for job in jobs)
        results = self.store.put_files(paths, threads=self.options.threads)
        progress = self.progress
        for done, (job, result) in enumerate(zip(jobs, results), 1):
            if isinstance(result, ContentChanged):
                self._hash_one(job)  # changed while read: retried alone
            else:
                self._settle(job, result)
            if progress is not None:
                progress("hash", done, total)
        return total

    def _hash_one(self, job: _Job) -> None:
        for _ in range(_CHANGED_RETRIES):
            try:
                result: PutResult | OSError = self.store.put_file(job.fs_path)
            except ContentChanged:
                continue
            except OSError as exc:
                result = exc
            self._settle(job, result)
            return
        job.row[REF] = None
        self._skip(job.key, "changed", job.node)

    def _settle(self, job: _Job, result: PutResult | OSError) -> None:
        """Record what storing a job's file gave: its id and stat, or why it is left out."""
        row = job.row
        if isinstance(result, FileNotFoundError):
            row[REF] = None  # vanished: not part of this state; dropped at build
            job.node.clean = False
        elif isinstance(result, OSError):
            row[REF] = None
            self._skip(job.key, f"unreadable: {result.strerror}", job.node)
        else:
            st = result.stat
            # Remember the stat of the content actually stored, not the earlier lstat.
            row[2:7] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode]
            row[REF] = result.oid
            row[RACY] = is_racy(st.st_mtime_ns, self.start_ns)
            self.settled_rows += not row[RACY]
            if result.is_new:
                self.new_objects += 1
                self.new_bytes += result.stored_bytes

    # -- phase 3 ---------------------------------------------------------------------

    def build(self, order: Sequence[_Dir]) -> None:
        for node in reversed(order):  # children before parents
            self._build_dir(node)

    def _build_dir(self, node: _Dir) -> None:
        if node.fast and not node.children and not node.virtual and self._taken_whole(node):
            return
        cached = None if node.virtual else self.cache.dirs.get(node.key)
        if node.recheck is not None:  # read in part: unchanged if what was read is as before
            node.all_hits = node.clean and all(
                old[KIND] == row[KIND] and (row[KIND] == _TREE or old[REF] == row[REF])
                for old, row in node.recheck)
        if (node.fast or node.all_hits) and cached is not None and cached.tree \
                and self._unchanged(node, cached):
            # The common case of a no-change snapshot: no entry objects, no encoding.
            node.tree, node.size, node.files = ObjectId(cached.tree), cached.size, cached.files
            node.leaves = cached.leaves
            if not node.fast:
                kept = cached.rows if node.recheck is None else self._kept_rows(node)
                listing, recheck = self._listing_state(node, kept)
                if listing != cached.listing or recheck != cached.recheck \
                        or node.ignored != cached.ignored or node.ignores != cached.ignores \
                        or node.recheck:
                    # Kept in memory; a changed listing is not worth a cache write of its own
                    # (the root's changes whenever the store inside it does), but one that has
                    # just settled (after a restore or a turn) is: every later scan gets the
                    # shortcut.
                    self.settled_listings += bool(listing and not cached.listing)
                    self.new_cache.dirs[node.key] = DirRecord(
                        cached.tree, cached.size, cached.files, kept, listing=listing,
                        ignores=node.ignores, subdirs=cached.subdirs, ignored=node.ignored,
                        leaves=cached.leaves, recheck=recheck)
                    return
            # As read, so it is saved as read: no re-encoding (~0.1 ms per directory).
            self.new_cache.dirs.take(self.cache.dirs, (node.key,))
            return
        if node.fast:
            assert cached is not None  # a subdirectory changed: rebuild from the cached rows
            node.rows = list(cached.rows)
            node.ignores, node.ignored = cached.ignores, cached.ignored
        rows: list[Row] = []
        entries: list[TreeEntry] = []
        size = files = leaves = 0
        # The entries of the tree this directory had, if the store holds it decoded (a
        # long-lived service: it built or read it): a turn changes one entry or two of a
        # directory it rebuilds, and an equal entry reused costs a fifth of a new one.
        previous_tree = self.store.cached_tree(ObjectId(cached.tree)) \
            if cached is not None and cached.tree else None
        previous = {e.name: e for e in previous_tree.entries} if previous_tree else {}
        node.rows.sort(key=row_name)
        for row in node.rows:
            name, kind = row[NAME], row[KIND]
            if kind == _TREE:
                child = node.children.get(name) or self._unchanged_child(node, name)
                assert child.tree is not None
                size += child.size
                files += child.files
                leaves = -1 if leaves < 0 or child.leaves < 0 else leaves + child.leaves
                row = [name, _TREE, child.size, 0, 0, 0, 0, child.tree, False]
                entry = _entry(previous, name, _TREE_KIND, child.tree, child.size)
            elif kind == _TOMB:
                entry = TreeEntry(name, EntryKind.TOMBSTONE)
            elif row[REF] is None:  # could not be read: skipped (and reported) by the job
                continue
            elif kind == _LINK:
                leaves += leaves >= 0
                entry = TreeEntry(name, EntryKind.SYMLINK, None, row[REF], 0)
            else:
                leaves += leaves >= 0
                files += 1
                size += row[SIZE]
                entry = _entry(previous, name, _KIND_OF[kind], row[REF], row[SIZE])
            entries.append(entry)
            rows.append(row)
        self.rebuilt_dirs += 1
        tree_id, stored = self.store.store_tree(Tree(tuple(entries)))
        if stored:
            self.new_objects += 1
            self.new_bytes += stored
        node.tree, node.size, node.files, node.leaves = tree_id, size, files, leaves
        if not node.virtual:
            subdirs = [[row[NAME], row[REF]] for row in rows if row[KIND] == _TREE]
            listing, recheck = self._listing_state(node, rows)
            self.new_cache.dirs[node.key] = DirRecord(
                tree_id, size, files, rows, listing=listing, ignores=node.ignores,
                subdirs=subdirs, ignored=node.ignored, leaves=leaves, recheck=recheck)

    def _taken_whole(self, node: _Dir) -> bool:
        """A directory the walk found unchanged, with nothing below it to rebuild: its cached
        record stands, read without decoding it (most of the directories a turn's build
        visits: the subdirectories of the ones it changed)."""
        summary = self.cache.dirs.summary(node.key)
        if summary is None or not summary[0] or not self._trusted(summary[0]):
            return False
        tree, node.size, node.files, node.leaves = summary
        node.tree = ObjectId(tree)
        self.new_cache.dirs.take(self.cache.dirs, (node.key,))
        return True

    @staticmethod
    def _kept_rows(node: _Dir) -> list[Row]:
        """The rows of a directory read in part that keeps its tree id: as read (a file read
        again carries its new stat, maybe settled by now), but a subdirectory's the cached one
        (what was read holds no tree id; the cached one was checked to be unchanged)."""
        subdirs = {id(row): old for old, row in node.recheck or () if row[KIND] == _TREE}
        return [subdirs.get(id(row), row) for row in node.rows]

    def _listing_state(self, node: _Dir, rows: list[Row]) -> tuple[bytes, list[Any] | None]:
        """(listing, recheck) for the directory's new record. The listing the next walk may
        compare against describes the rows fully: nothing skipped or vanished, nothing too new
        to be trusted. Where only racy files (or a recent ctime) keep it from that, it is kept
        aside with their names: the next scan looks at those and at what differs from it."""
        if node.listing is None or not node.clean or NOT_SETTLED in node.ignores:
            return b"", None
        racy = [row[NAME] for row in rows if row[RACY]]
        if not racy and not is_racy(node.newest, self.start_ns):
            return node.listing, None
        return b"", [node.listing, racy]

    def result(self, top: _Dir, hashed: int, absent_parents: tuple[RelPath, ...]) -> ScanResult:
        assert top.tree is not None
        return ScanResult(
            tree=top.tree,
            files=top.files,
            bytes=top.size,
            new_objects=self.new_objects,
            new_bytes=self.new_bytes,
            hashed=hashed,
            skipped=tuple(sorted(self.skipped, key=lambda s: s.path)),
            absent_parents=absent_parents,
            dirs_unchanged=self.dirs_unchanged,
        )

    def _unchanged_child(self, node: _Dir, name: bytes) -> _Dir:
        """A subdirectory of a rebuilt directory that the walk found unchanged throughout."""
        key = node.key + b"/" + name if node.key else name
        cached = self.cache.dirs.get(key)
        assert node.fast and cached is not None and cached.tree  # walked through: known
        child = _Dir(key, node.fs_path + b"/" + name, parent=node, tree=ObjectId(cached.tree),
                     size=cached.size, files=cached.files, leaves=cached.leaves)
        node.children[name] = child
        return child

    def _unchanged(self, node: _Dir, cached: DirRecord) -> bool:
        """Every row matched the cache; do the subdirectories still have their cached ids?
        (A subdirectory without a node was walked through unchanged: it has.)"""
        if node.children:
            trees = dict(cached.subdirs)
            for name, child in node.children.items():
                if trees.get(name) != child.tree:
                    return False
        return self._trusted(cached.tree)


def scan_workspace(
    root: bytes,
    store: ObjectStore,
    rules: IgnoreRules | RulesFactory,
    cache: StatCache,
    *,
    options: ScanOptions,
    scan_start_ns: int,
    progress: ProgressFn | None = None,
) -> tuple[ScanResult, StatCache]:
    """Snapshot the whole tree under `root` (minus ignored paths) into `store`. `rules` may be
    a function that loads them: a scan whose directories all match the cache never calls it."""
    scanner = _Scanner(root, store, cache, options, scan_start_ns, progress)
    scanner.root_rules = _as_factory(rules)
    top = _Dir(b"", root, rules_clean=scanner.shortcuts)
    order = scanner.walk(top)
    hashed = scanner.hash_all()
    scanner.build(order)
    # A file read again that keeps its directory's tree id (touched, or saved with the same
    # bytes) is worth a save too: otherwise every later scan reads it again.
    scanner.new_cache.dirty = bool(
        scanner.rebuilt_dirs or scanner.settled_listings or scanner.settled_rows
        or cache.needs_verification
        or len(cache.dirs) != len(scanner.new_cache.dirs) or cache.settings != options.settings
    )
    return scanner.result(top, hashed, ()), scanner.new_cache


def _entry(previous: dict[bytes, TreeEntry], name: bytes, kind: EntryKind, oid: ObjectId,
           size: int) -> TreeEntry:
    """`make_entry(name, kind, oid, None, size)`, or the equal entry of `previous` (the tree a
    rebuilt directory had) as it is."""
    entry = previous.get(name)
    if entry is None or entry.oid != oid or entry.size != size or entry.kind is not kind:
        return make_entry(name, kind, oid, None, size)
    return entry


def _as_factory(rules: IgnoreRules | RulesFactory) -> RulesFactory:
    if callable(rules):
        return rules
    return lambda: rules


def _no_rules() -> IgnoreRules:
    raise AssertionError("the scan was given no ignore rules")


def _outermost(paths: Sequence[RelPath]) -> list[RelPath]:
    """Drop paths that lie under another given path: the outer one covers them."""
    kept: list[RelPath] = []
    for path in sorted(set(paths)):
        if not any(path.startswith(outer + b"/") for outer in kept):
            kept.append(path)
    return kept


def scan_paths(
    root: bytes,
    paths: Sequence[RelPath],
    store: ObjectStore,
    rules: IgnoreRules | RulesFactory,
    cache: StatCache,
    *,
    options: ScanOptions,
    scan_start_ns: int,
    progress: ProgressFn | None = None,
) -> tuple[ScanResult, StatCache]:
    """Snapshot only `paths` (tracked scope). A missing path becomes a tombstone.

    Ancestors of the paths appear as trees holding only what leads to a tracked path; the
    result names the ancestors that did not exist, so a restore can remove them again.
    Symlinked ancestors are never followed: a path behind one counts as missing.
    """
    scanner = _Scanner(root, store, cache, options, scan_start_ns, progress)
    scanner.root_rules = _as_factory(rules)
    rules = scanner.root_rules()
    scanner.new_cache.dirs.update(cache.dirs)  # other paths' records stay valid
    top = _Dir(b"", root, virtual=True, all_hits=False)
    virtual_nodes = [top]
    walked: list[_Dir] = []
    absent: list[RelPath] = []
    leaves: list[tuple[bytes, Row]] = []  # tracked files and links: (parent key, row)
    for path in _outermost(paths):
        node = top
        dir_rules = rules.root_context()
        missing_from: RelPath | None = None
        for ancestor in ancestors(path):
            name = ancestor.rsplit(b"/", 1)[-1]
            child = node.children.get(name)
            if child is None:
                child = _Dir(ancestor, root + b"/" + ancestor, virtual=True, all_hits=False)
                node.children[name] = child
                node.rows.append([name, _TREE, 0, 0, 0, 0, 0, b"", False])
                virtual_nodes.append(child)
            node = child
            if missing_from is None and not _is_real_dir(node.fs_path):
                missing_from = ancestor
            if missing_from is not None:
                absent.append(ancestor)
            else:
                dir_rules = dir_rules.enter(name)
        name = path.rsplit(b"/", 1)[-1]
        fs_path = root + b"/" + path
        try:
            st = None if missing_from is not None else os.lstat(fs_path)
        except (FileNotFoundError, NotADirectoryError):
            st = None
        if st is None:
            node.rows.append([name, _TOMB, 0, 0, 0, 0, 0, b"", False])
        elif statmod.S_ISDIR(st.st_mode):
            child = _Dir(path, fs_path, rules=dir_rules.enter(name))
            node.children[name] = child
            node.rows.append([name, _TREE, 0, 0, 0, 0, 0, b"", False])
            walked.extend(scanner.walk(child))
        else:
            cached_dir = cache.dirs.get(node.key)
            cached_row = None
            if cached_dir is not None:
                cached_row = next((r for r in cached_dir.rows if r[NAME] == name), None)
            added = len(node.rows)
            scanner._add_leaf(node, name, path, fs_path, st, cached_row)
            if len(node.rows) > added:
                leaves.append((node.key, node.rows[-1]))
    for node in virtual_nodes:
        node.rows.sort(key=row_name)
    hashed = scanner.hash_all()
    _remember_leaves(scanner.new_cache, leaves)
    scanner.build(walked)
    # Virtual ancestors: deepest first, so each sees its children's ids.
    scanner.build(sorted(virtual_nodes, key=_depth))
    return scanner.result(top, hashed, tuple(sorted(set(absent)))), scanner.new_cache


def record_restore(cache: StatCache, load: Callable[[ObjectId], Tree], target: ObjectId,
                   written: Sequence[tuple[bytes, int, StatLike, bytes]], removed: Sequence[bytes],
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
        cache.dirs[key].listing, cache.dirs[key].recheck = b"", list(listings[key])
    adopt_restored_trees(cache, load, target, cleared)
    for key in aside:
        record = cache.dirs[key]
        if record.tree and record.recheck is not None and not record.recheck[1]:
            record.listing, record.recheck = record.recheck[0], None  # adopted, nothing racy


def _restored_listings(cache: StatCache, written: Sequence[tuple[bytes, int, StatLike, bytes]],
                       removed: Sequence[bytes], dir_stats: Mapping[bytes, StatLike],
                       ) -> dict[bytes, tuple[bytes, list[bytes]]]:
    """Key -> (listing, racy names) of each cached directory whose listing after the restore is
    its cached one (trusted, or kept aside with its racy names) with the restore's changes
    applied: entries of what it wrote, with their stats after the rename; the names it removed,
    dropped; its subdirectories the restore went through, with their stats after it.

    Only files and links may have come or gone, and no ignore file, nor a name the rules left
    out: then the rows that `record_restored` makes describe that listing exactly. Files the
    restore wrote are not racy: they are dated before their staging, so any later write shows
    in their mtime (see restore.py). A listing that is not what the directory really lists
    (something else changed it meanwhile) costs only speed: the next walk reports it."""
    changes: dict[bytes, dict[bytes, ListedEntry | None]] = {}
    for path in removed:
        parent, _, name = path.rpartition(b"/")
        changes.setdefault(parent, {})[name] = None
    for path, _kind, st, _ref in written:  # after removals: a name removed then written is there
        parent, _, name = path.rpartition(b"/")
        changes.setdefault(parent, {})[name] = _listed(name, st)
    for key, st in dir_stats.items():
        if key:
            parent, _, name = key.rpartition(b"/")
            changes.setdefault(parent, {})[name] = _listed(name, st)
    listings: dict[bytes, tuple[bytes, list[bytes]]] = {}
    for key, here in changes.items():
        record = cache.dirs.get(key)
        if record is None or NOT_SETTLED in record.ignores:
            continue
        if record.listing:
            base, racy = record.listing, []
        elif record.recheck is not None:
            base, racy = record.recheck
        else:
            continue
        rows = record.rows
        left_out = {_bare(name) for name in record.ignored}
        if any(name in _IGNORE_FILES or name in left_out
               or (_kind_of(rows, name) == _TREE) != _is_dir(entry)
               for name, entry in here.items()):
            continue
        try:
            listings[key] = (patch_listing(base, here), [n for n in racy if n not in here])
        except ValueError:  # checksummed, so not expected: the scan reads it as it does now
            continue
    return listings


def _kind_of(rows: list[Row], name: bytes) -> int | None:
    """The kind of the row named `name` in `rows` (sorted by name), None if there is none."""
    at = bisect.bisect_left(rows, name, key=row_name)
    return rows[at][KIND] if at < len(rows) and rows[at][NAME] == name else None


def _is_dir(entry: ListedEntry | None) -> bool:
    return entry is not None and statmod.S_ISDIR(entry.st_mode)


def _listed(name: bytes, st: StatLike) -> ListedEntry:
    return ListedEntry(name, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


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
        kept: list[Row] = []
        subdirs: list[list[bytes]] = []
        size = files = leaves = 0
        for row, entry in zip(rows, entries):
            name, kind = row[NAME], row[KIND]
            if name != entry.name or kind != entry.kind:
                break
            if kind == _TREE:
                child = cache.dirs.summary(prefix + name)  # most were not touched: not decoded
                if child is None or child[0] != entry.oid:
                    break
                child_tree, child_size, child_files, child_leaves = child
                row = [name, _TREE, child_size, 0, 0, 0, 0, child_tree, False]
                subdirs.append([name, child_tree])
                size += child_size
                files += child_files
                leaves = -1 if leaves < 0 or child_leaves < 0 else leaves + child_leaves
            elif kind == _LINK:
                if row[REF] != entry.target:
                    break
                leaves += leaves >= 0
            elif kind in (_FILE, _EXEC) and row[REF] == entry.oid and row[SIZE] == entry.size:
                size += row[SIZE]
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


def _remember_leaves(cache: StatCache, leaves: Sequence[tuple[bytes, Row]]) -> None:
    """Keep the rows of tracked files (their parents are virtual, so no record of them is
    built), or every tracked checkpoint would read them again.

    A parent's record may come from a whole-tree scan: a record whose rows change no longer
    describes its cached tree id, so it loses that id, and so do its ancestors' records.
    """
    for parent, row in leaves:
        if row[REF] is None:
            continue  # vanished or unreadable: nothing to remember
        record = cache.dirs.get(parent)
        rows = [] if record is None else record.rows
        if row in rows:
            continue  # a cache hit: the record is still exact
        rows = sorted([r for r in rows if r[NAME] != row[NAME]] + [row], key=row_name)
        cache.dirs[parent] = DirRecord(b"", 0, 0, rows)
        key = parent
        while key:
            key = key.rpartition(b"/")[0]
            above = cache.dirs.get(key)
            if above is not None and above.tree:
                cache.dirs[key] = DirRecord(b"", above.size, above.files, above.rows)


def _is_real_dir(fs_path: bytes) -> bool:
    try:
        return statmod.S_ISDIR(os.lstat(fs_path).st_mode)
    except OSError:
        return False


def _bare(name: bytes) -> bytes:
    """A name of `DirRecord.ignored` without the "/" that marks a directory."""
    return name[:-1] if name.endswith(b"/") else name


def _depth(node: _Dir) -> int:
    return _key_depth(node.key)


def _key_depth(key: bytes) -> int:
    return key.count(b"/") + bool(key)
