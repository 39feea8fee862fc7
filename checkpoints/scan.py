"""Snapshot scan: walk a workspace, hash what changed, and build its Merkle tree bottom-up.

Three phases, so hashing can use every core (BLAKE3 and zstd release the GIL):
1. walk: one `scandir` per directory, an `lstat` per file; each row is a stat-cache hit (id
   reused, file not read) or a job;
2. hash: jobs run in a thread pool through `ObjectStore.put_file` (never follows symlinks;
   a file that changes while read is retried, then skipped as "changed", never stored torn);
3. build: directories bottom-up; a directory whose rows and subtrees all match the cache keeps
   its cached tree id without being re-encoded, so an unchanged subtree costs one `scandir`.

The scan never modifies the workspace. It writes objects and returns the new stat cache; the
caller (the service) decides when the cache is saved and the record committed.
"""

from __future__ import annotations

import os
import stat as statmod
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from checkpoints.model import SkippedPath
from checkpoints.paths import RelPath, ancestors, parse_relpath
from checkpoints.statcache import (
    CTIME,
    INO,
    KIND,
    MODE,
    MTIME,
    NAME,
    RACY,
    RACY_WINDOW_NS,
    REF,
    SIZE,
    DirRecord,
    Row,
    StatCache,
    make_row,
    same_stat,
)
from objstore import ContentChanged, EntryKind, ObjectId, ObjectStore, Tree, TreeEntry

if TYPE_CHECKING:  # pathspec costs ~60 ms to import: only snapshots pay for it
    from checkpoints.ignore import DirRules, IgnoreRules

ProgressFn = Callable[[str, int, int], None]  # (stage, done, total)
_CHANGED_RETRIES = 3
_FILE = int(EntryKind.FILE)
_EXEC = int(EntryKind.EXECUTABLE)
_LINK = int(EntryKind.SYMLINK)
_TREE = int(EntryKind.TREE)
_TOMB = int(EntryKind.TOMBSTONE)
_COUNT_LOCK = threading.Lock()


@dataclass(frozen=True, slots=True)
class ScanOptions:
    max_file_size: int = 0  # 0 = no limit; larger files are skipped and recorded
    threads: int = 0  # 0 = one per core


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


@dataclass(slots=True)
class _Job:
    key: bytes
    row: Row
    fs_path: bytes


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
        self.new_cache = StatCache(gc_generation=cache.gc_generation)
        self.rebuilt_dirs = 0
        self._verified: dict[bytes, bool] = {}

    def _trusted(self, oid: bytes) -> bool:
        """After a GC, an id remembered by the cache may be gone: check before reuse."""
        if not self.cache.needs_verification:
            return True
        known = self._verified.get(oid)
        if known is None:
            known = self._verified[oid] = self.store.has(ObjectId(oid))
        return known

    def _skip(self, key: bytes, reason: str) -> None:
        self.skipped.append(SkippedPath(parse_relpath(key), reason))

    # -- phase 1 ---------------------------------------------------------------------

    def walk(self, top: _Dir, top_rules: DirRules) -> list[_Dir]:
        """Every directory under `top` (parents before children)."""
        order = []
        # (directory, rules, name): with a name, `rules` are the parent's, and the directory's
        # own are derived once its listing is known (no failing opens of absent ignore files).
        stack: list[tuple[_Dir, DirRules, bytes | None]] = [(top, top_rules, None)]
        while stack:
            node, rules, name = stack.pop()
            order.append(node)
            self._read_dir(node, rules, name, stack)
        return order

    def _read_dir(
        self, node: _Dir, rules: DirRules, name_in_parent: bytes | None,
        stack: list[tuple[_Dir, DirRules, bytes | None]],
    ) -> None:
        # The hot loop of every snapshot: one scandir, one lstat per leaf, and for an unchanged
        # file nothing but a dict lookup and a field-by-field comparison (inlined on purpose).
        cached = self.cache.dirs.get(node.key)
        cached_rows = {row[NAME]: row for row in cached.rows} if cached is not None else {}
        try:
            entries = list(os.scandir(node.fs_path))
        except OSError as exc:
            node.all_hits = False
            if node.key:
                self._skip(node.key, f"unreadable: {exc.strerror}")
            return
        if name_in_parent is not None:
            rules = rules.enter(name_in_parent, listing={entry.name for entry in entries})
        prefix = node.key + b"/" if node.key else b""
        rows = node.rows
        limit = self.options.max_file_size
        verify = self.cache.needs_verification
        hits = 0
        for entry in entries:
            name: bytes = entry.name
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
                if rules.is_ignored(name, is_dir=is_dir):
                    continue
                if is_dir:
                    child = _Dir(prefix + name, entry.path)
                    node.children[name] = child
                    rows.append([name, _TREE, 0, 0, 0, 0, 0, b"", False])
                    old = cached_rows.get(name)
                    if old is not None and old[KIND] == _TREE:
                        hits += 1
                    stack.append((child, rules, name))
                    continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # vanished during the walk: it is not part of this state
            except OSError as exc:
                node.all_hits = False
                self._skip(prefix + name, f"unreadable: {exc.strerror}")
                continue
            row = cached_rows.get(name)
            if (
                row is not None
                and row[MTIME] == st.st_mtime_ns
                and row[SIZE] == st.st_size
                and row[CTIME] == st.st_ctime_ns
                and row[INO] == st.st_ino
                and row[MODE] == st.st_mode  # the mode also fixes the kind and exec bit
                and not row[RACY]
                and (not limit or st.st_size <= limit)
                and (not verify or self._trusted_row(row))
            ):
                rows.append(row)
                hits += 1
                continue
            self._add_leaf(node, name, prefix + name, entry.path, st)
        # Same names as cached and every row a hit: the directory may keep its tree id.
        node.all_hits = (
            node.all_hits and cached is not None and hits == len(rows) == len(cached.rows)
        )

    def _add_leaf(
        self, node: _Dir, name: bytes, key: bytes, fs_path: bytes, st: os.stat_result,
        cached: Row | None = None,
    ) -> None:
        mode = st.st_mode
        if statmod.S_ISREG(mode):
            kind = _EXEC if mode & 0o100 else _FILE
            limit = self.options.max_file_size
            if limit and st.st_size > limit:
                node.all_hits = False
                self._skip(key, "too-large")
                return
        elif statmod.S_ISLNK(mode):
            kind = _LINK
        else:
            node.all_hits = False
            self._skip(key, "special")
            return
        if cached is not None and same_stat(cached, kind, st) and self._trusted_row(cached):
            node.rows.append(cached)
            return
        node.all_hits = False
        if kind == _LINK:
            try:
                target = os.readlink(fs_path)
            except OSError as exc:
                self._skip(key, f"unreadable: {exc.strerror}")
                return
            node.rows.append(make_row(name, kind, st, target, self.start_ns))
            return
        row = make_row(name, kind, st, b"", self.start_ns)
        node.rows.append(row)
        self.jobs.append(_Job(key, row, fs_path))

    def _trusted_row(self, row: Row) -> bool:
        return row[KIND] == _LINK or self._trusted(row[REF])

    # -- phase 2 ---------------------------------------------------------------------

    def hash_all(self) -> int:
        jobs = self.jobs
        if not jobs:
            return 0
        threads = self.options.threads or os.cpu_count() or 1
        done = 0
        total = len(jobs)
        if threads == 1 or total < 4:
            results = map(self._hash_one, jobs)
            for ok in results:
                done += 1
                self._report("hash", done, total)
        else:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                for ok in pool.map(self._hash_one, jobs, chunksize=16):
                    done += 1
                    self._report("hash", done, total)
        return total

    def _hash_one(self, job: _Job) -> bool:
        for _ in range(_CHANGED_RETRIES):
            try:
                result = self.store.put_file(job.fs_path)
            except ContentChanged:
                continue
            except FileNotFoundError:
                job.row[REF] = None  # vanished: not part of this state; dropped at build
                return False
            except OSError as exc:
                job.row[REF] = None
                self._skip(job.key, f"unreadable: {exc.strerror}")  # list.append: thread-safe
                return False
            st = result.stat
            # Remember the stat of the content actually stored, not the earlier lstat.
            job.row[2:7] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_mode]
            job.row[REF] = result.oid
            job.row[RACY] = st.st_mtime_ns >= self.start_ns - RACY_WINDOW_NS
            if result.is_new:
                self._count_new(result.stored_bytes)
            return True
        job.row[REF] = None
        self._skip(job.key, "changed")
        return False

    def _count_new(self, stored: int) -> None:
        # Called from worker threads; int += under the GIL is not atomic, so lock-free
        # counting would race. The counts are only statistics, but keep them exact.
        with _COUNT_LOCK:
            self.new_objects += 1
            self.new_bytes += stored

    def _report(self, stage: str, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(stage, done, total)

    # -- phase 3 ---------------------------------------------------------------------

    def build(self, order: Sequence[_Dir]) -> None:
        for node in reversed(order):  # children before parents
            self._build_dir(node)

    def _build_dir(self, node: _Dir) -> None:
        cached = None if node.virtual else self.cache.dirs.get(node.key)
        if node.all_hits and cached is not None and cached.tree and self._unchanged(node, cached):
            # The common case of a no-change snapshot: no entry objects, no encoding.
            node.tree, node.size, node.files = ObjectId(cached.tree), cached.size, cached.files
            self.new_cache.dirs[node.key] = cached
            return
        rows: list[Row] = []
        entries: list[TreeEntry] = []
        size = files = 0
        node.rows.sort(key=_row_name)
        for row in node.rows:
            name, kind = row[NAME], row[KIND]
            if kind == _TREE:
                child = node.children[name]
                assert child.tree is not None
                size += child.size
                files += child.files
                row = [name, _TREE, child.size, 0, 0, 0, 0, child.tree, False]
                entries.append(TreeEntry(name, EntryKind.TREE, child.tree, None, child.size))
            elif kind == _TOMB:
                entries.append(TreeEntry(name, EntryKind.TOMBSTONE))
            elif row[REF] is None:  # could not be read: skipped (and reported) by the job
                continue
            elif kind == _LINK:
                entries.append(TreeEntry(name, EntryKind.SYMLINK, None, row[REF], 0))
            else:
                files += 1
                size += row[SIZE]
                entries.append(TreeEntry(name, EntryKind(kind), row[REF], None, row[SIZE]))
            rows.append(row)
        self.rebuilt_dirs += 1
        tree_id, stored = self.store.store_tree(Tree(tuple(entries)))
        if stored:
            self.new_objects += 1
            self.new_bytes += stored
        node.tree, node.size, node.files = tree_id, size, files
        if not node.virtual:
            self.new_cache.dirs[node.key] = DirRecord(tree_id, size, files, rows)

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
        )

    def _unchanged(self, node: _Dir, cached: DirRecord) -> bool:
        """Every row matched the cache; do the subdirectories still have their cached ids?"""
        if node.children:
            cached_refs = {r[NAME]: r[REF] for r in cached.rows if r[KIND] == _TREE}
            for name, child in node.children.items():
                if cached_refs.get(name) != child.tree:
                    return False
        return self._trusted(cached.tree)


def scan_workspace(
    root: bytes,
    store: ObjectStore,
    rules: IgnoreRules,
    cache: StatCache,
    *,
    options: ScanOptions,
    scan_start_ns: int,
    progress: ProgressFn | None = None,
) -> tuple[ScanResult, StatCache]:
    """Snapshot the whole tree under `root` (minus ignored paths) into `store`."""
    scanner = _Scanner(root, store, cache, options, scan_start_ns, progress)
    top = _Dir(b"", root)
    order = scanner.walk(top, rules.root_context())
    hashed = scanner.hash_all()
    scanner.build(order)
    scanner.new_cache.dirty = bool(
        scanner.rebuilt_dirs or cache.needs_verification or len(cache.dirs) != len(order)
    )
    return scanner.result(top, hashed, ()), scanner.new_cache


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
    rules: IgnoreRules,
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
            child = _Dir(path, fs_path)
            node.children[name] = child
            node.rows.append([name, _TREE, 0, 0, 0, 0, 0, b"", False])
            walked.extend(scanner.walk(child, dir_rules.enter(name)))
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
        node.rows.sort(key=_row_name)
    hashed = scanner.hash_all()
    _remember_leaves(scanner.new_cache, leaves)
    scanner.build(walked)
    # Virtual ancestors: deepest first, so each sees its children's ids.
    scanner.build(sorted(virtual_nodes, key=lambda n: n.key.count(b"/") + bool(n.key)))
    return scanner.result(top, hashed, tuple(sorted(set(absent)))), scanner.new_cache


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
        rows = sorted([r for r in rows if r[NAME] != row[NAME]] + [row], key=_row_name)
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


def _row_name(row: Row) -> bytes:
    return row[NAME]  # type: ignore[no-any-return]
