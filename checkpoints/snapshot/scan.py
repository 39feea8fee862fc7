"""Snapshot scan: walk a workspace, hash what changed, and build its Merkle tree bottom-up.

Three phases, so the walk and compression can use every core without the GIL:
1. walk: `dirlisting.walk_dirs` (native, threaded, without the GIL) lists and lstats every
   directory; one whose listing equals the cached one — and whose ignore rules cannot have
   changed — is unchanged, and so is the whole walk below it unless a listing there differs:
   only the differing directories come back to Python (with a file watcher, `walk_dirs_watched`
   lists only the directories it names and takes the others as the cache has them). There, if the cached record describes
   an earlier listing (`listing_changes`), only the entries that differ from it and the names
   it kept aside as racy are looked at; else every entry. Each is a stat-cache hit (id reused,
   file not read) or a job. Ignore rules are only loaded for directories that need them;
2. hash: jobs go through `ObjectStore.put_files` (one Python thread reads and hashes; new
   objects are compressed in batches on native threads; never follows symlinks; a file that
   changes while read is retried, then skipped as "changed", never stored torn);
3. build: directories bottom-up; a directory whose rows and subtrees all match the cache keeps
   its cached tree id without being re-encoded, so an unchanged subtree costs one listing.

Each directory is a `_Dir` whose `DirState` says how the walk saw it (unchanged, read in part,
read whole, unreadable, or virtual in a paths scope); the build keeps its cached tree id
(`_reuse`) or builds it again (`_rebuild`). The words (listing, recheck, racy, fast, clean,
all_hits, rules_clean, virtual) are defined in statcache.py's glossary. With the
`ckpt.checkpoints.scan` logger at DEBUG, every decision is logged: a file read again and why
(`FileRow.mismatch`), a file trusted, a directory reused whole or looked into.

The scan never modifies the workspace. It writes objects and returns the new stat cache; the
caller (the service) decides when the cache is saved and the record committed. What a restore
teaches the cache is not here but in restore/statcache_update.py.
"""

from __future__ import annotations

import logging
import os
import stat as statmod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

from ckpt.checkpoints.model import SkippedPath
from ckpt.checkpoints.paths import RelPath, ancestors, parse_relpath
from ckpt.checkpoints.snapshot.dirlisting import (
    Known,
    ListedEntry,
    MaybeNames,
    WatchedView,
    iter_listing,
    listed_entry,
    listing_changes,
    walk_dirs,
    walk_dirs_watched,
)
from ckpt.checkpoints.snapshot.statcache import (
    IGNORE_FILES,
    NOT_SETTLED,
    DirRecord,
    DirSummary,
    FileRow,
    Recheck,
    StatCache,
    StatLike,
    bare_name,
    is_racy,
    make_row,
    row_name,
    tree_row,
)
from ckpt.checkpoints.snapshot.storemarks import (
    is_store_dir,
    listing_holds_store,
    listing_may_hold_store,
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
from ckpt.objstore.objects import DEFAULT_MODES, MODE_BITS

if TYPE_CHECKING:  # pathspec is dear to import: only snapshots that decide a name pay for it
    from ckpt.checkpoints.snapshot.ignore import DirRules, IgnoreRules

# Explains the cache's decisions (why a file is read again or trusted, why a directory is taken
# whole or looked into) at DEBUG. A scan asks once whether it is on (`_Scanner.log`).
logger = logging.getLogger("ckpt.checkpoints.scan")

ProgressFn = Callable[[str, int, int], None]  # (stage, done, total)
_CHANGED_RETRIES = 3
_FILE = int(EntryKind.FILE)
_EXEC = int(EntryKind.EXECUTABLE)
_LINK = int(EntryKind.SYMLINK)
_TREE = int(EntryKind.TREE)
_TOMB = int(EntryKind.TOMBSTONE)
_FILE_MODE, _EXEC_MODE = DEFAULT_MODES[_FILE], DEFAULT_MODES[_EXEC]
_KIND_OF = {int(kind): kind for kind in EntryKind}  # EntryKind(n) costs an enum call per entry
_TREE_KIND = EntryKind.TREE
RulesFactory = Callable[[], "IgnoreRules"]
_NO_NAMES: list[bytes] = []  # never changed: the names of a listing kept with none
# Names what every scan leaves out whatever the settings (ignore.py's `.git`, staging
# directories; other stores by their markers): a cache made under others is not trusted whole.
_BUILTIN_EXCLUSIONS = "git,store,staging,stores-by-marker"


@dataclass(frozen=True, slots=True)
class ScanOptions:
    max_file_size: int = 0  # 0 = no limit; larger files are skipped and recorded
    threads: int = 0  # 0 = one per core
    # Whatever else decides what is captured (ignore settings): a cache made under other
    # settings is still used entry by entry, but never for whole-directory shortcuts.
    ignore_settings: str = ""
    # A file watcher's view (watch.py): only the directories it names are listed, the others
    # are as the cache has them. None: every directory is listed.
    watch: WatchedView | None = None
    # A changed file's previous blob goes to the store as its delta hint (config `deltas`).
    deltas: bool = True

    @property
    def settings(self) -> str:
        # "modes": trees record permission bits; a cache whose tree ids were made before they
        # did is used row by row, and its trees are built again (see `_Scanner.reuse_trees`).
        return repr((self.max_file_size, self.ignore_settings, _BUILTIN_EXCLUSIONS, "modes"))


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


class DirState(Enum):
    """How the walk saw a directory, which decides how the build treats it."""

    PENDING = "pending"  # not listed yet
    UNCHANGED = "unchanged"  # listing equal to the cached one ("fast"): rows are the record's
    READ_IN_PART = "read in part"  # only what differs from a listing its record describes
    READ_WHOLE = "read whole"  # every entry looked at
    UNREADABLE = "unreadable"  # could not be listed: skipped, built empty
    VIRTUAL = "virtual"  # paths scope: an ancestor of tracked paths, holding only those
    STORE = "a ckpt store"  # holds a store's marker files: left out like .git, never read


@dataclass(slots=True)
class _Dir:
    """One directory of a scan, from the walk to the build. `all_hits` and `clean` only ever
    go from True to False while it is read; `built` is set once by the build."""

    key: bytes  # b"" for the root, else the relative path
    fs_path: bytes
    parent: _Dir | None = None
    state: DirState = DirState.PENDING
    rows: list[FileRow] = field(default_factory=list)
    children: dict[bytes, _Dir] = field(default_factory=dict)  # subdirectory name -> node
    # Every entry matched a cached row and no name came or went (see statcache's glossary).
    all_hits: bool = True
    clean: bool = True  # nothing skipped or vanished here: its listing may be remembered
    rules: DirRules | None = None  # computed on demand (see _Scanner._rules_of)
    # The rules in force here are the ones the cached record was made under: unchanged
    # settings, and no ignore file changed in this directory's ancestors.
    rules_clean: bool = False
    listing: bytes | None = None
    newest: int = 0  # newest mtime/ctime in the listing
    ignores: list[object] = field(default_factory=list)  # listing entries of its ignore files
    ignored: list[bytes] = field(default_factory=list)  # names the rules left out ("/": dirs)
    # Read in part: (cached row, index in `rows` of the row read again) of each entry looked
    # at; at build they decide if the tree id still holds.
    reread: list[tuple[FileRow, int]] | None = None
    built: DirSummary | None = None  # its tree id and what lies below, once built

    @property
    def tree(self) -> ObjectId:
        assert self.built is not None  # children are built before their parents
        return ObjectId(self.built.tree)


@dataclass(slots=True)
class _Job:
    """A file to hash: its row is `node.rows[index]` until the result replaces it."""

    key: bytes
    fs_path: bytes
    node: _Dir
    index: int
    hint: ObjectId | None = None  # the file's previous blob: what it may be a delta against


def _hint(row: FileRow | None) -> ObjectId | None:
    """The blob a file had when `row` was made (its delta hint), if it was a file then."""
    if row is None or row.ref is None or (row.kind != _FILE and row.kind != _EXEC):
        return None
    return ObjectId(row.ref)


def _show(key: bytes) -> str:
    """A key as a debug log shows it (the root as ".")."""
    return os.fsdecode(key) if key else "."


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
        # Asked once per scan, so that a scan with debug logs off pays one test per decision.
        self.log = logger if logger.isEnabledFor(logging.DEBUG) else None
        self.jobs: list[_Job] = []
        self.hinted = False  # a job has a hint (never on a first snapshot: no cache)
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
        # A cached tree id describes its rows only as the settings it was made under saw them.
        self.reuse_trees = cache.settings == options.settings
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
        view = self.options.watch
        while pending:
            starts = [(n.key, n.fs_path, n.rules_clean) for n in pending]
            if view is not None:
                reports, unchanged = walk_dirs_watched(starts, known or None, view, threads)
            else:
                reports, unchanged = walk_dirs(starts, known or None, threads)
            self._take_unchanged(unchanged)
            following: list[_Dir] = []
            for key, outcome in reports:
                node = nodes.get(key) or self._reached(key)
                if isinstance(outcome, int):
                    self._unreadable(node, outcome)
                    continue
                node.listing, node.newest = outcome
                if node.key and listing_may_hold_store(node.listing) \
                        and listing_holds_store(node.listing, node.fs_path):
                    self._exclude_store(node)
                    continue
                cached = self.cache.dirs.get(node.key)
                if cached is None or not self._read_changes(node, cached, following):
                    self._read_dir(node, cached, following)
            for child in following:
                nodes[child.key] = child
            pending = following
        return sorted(nodes.values(), key=_depth)

    def _exclude_store(self, node: _Dir) -> None:
        """Leave out a directory that is a ckpt store (storemarks.py): its parent builds its
        tree without it and records no row for it, so the next walk does not list it while
        the parent's listing is unchanged, and looks at it again when that listing changes."""
        node.state, node.listing = DirState.STORE, None
        if node.parent is not None:
            node.parent.all_hits = False
        if self.log is not None:
            self.log.debug("left out %s/: a ckpt store", _show(node.key))

    def _unreadable(self, node: _Dir, errno: int) -> None:
        node.state, node.all_hits = DirState.UNREADABLE, False
        if not node.key:
            raise OSError(errno, os.strerror(errno), os.fsdecode(node.fs_path))
        self._skip(node.key, f"unreadable: {os.strerror(errno)}", node)

    def _take_unchanged(self, keys: list[bytes]) -> None:
        """Directories whose listing is the cached one (same entries, same stats, same rules):
        every directory of a no-change snapshot."""
        self.dirs_unchanged += len(keys)
        self.new_cache.dirs.take(self.cache.dirs, keys)
        if self.log is not None:
            for key in keys:
                self.log.debug("reused %s/ whole: listing unchanged", _show(key))
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
        node.state, node.listing = DirState.UNCHANGED, self._known[node.key][0]

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

    def _changes_to_read(self, node: _Dir, cached: DirRecord
                         ) -> tuple[dict[bytes, ListedEntry], set[bytes]] | None:
        """(entries to look at by name, names gone) of a directory whose cached record
        describes an earlier listing (its whole listing, or the one kept aside with the names
        too new to be trusted): the entries that differ from it, and those names. None where
        that does not hold: no such listing, the rules here may have changed (an ignore file
        is among the changes, here or above), or a name to look at vanished since the walk."""
        if cached.listing:
            base_listing, racy = cached.listing, _NO_NAMES
        elif cached.recheck is not None:
            base_listing, racy = cached.recheck
        else:
            return None
        if not (self.shortcuts and node.rules_clean) or NOT_SETTLED in cached.ignores:
            return None
        assert node.listing is not None
        try:
            changed, gone = listing_changes(base_listing, node.listing)
        except ValueError:  # checksummed, so not expected: decide every entry again
            return None
        look = {fields[0]: ListedEntry(*fields) for fields in changed}
        gone_names = set(gone)
        base = node.fs_path + b"/"
        for name in racy:
            if name not in look and name not in gone_names:
                try:
                    look[name] = listed_entry(name, os.lstat(base + name))
                except OSError:
                    return None
        if any(name in look or name in gone_names for name in IGNORE_FILES):
            return None
        return look, gone_names

    def _read_changes(self, node: _Dir, cached: DirRecord, following: list[_Dir]) -> bool:
        """Look only at what differs from a listing the cached record describes (see
        `_changes_to_read`). Every other entry keeps its cached row, so a turn's edits cost a
        look at the edited entries, not at every entry of the directories they touched. False,
        with nothing done, where this does not hold."""
        changes = self._changes_to_read(node, cached)
        if changes is None:
            return False
        look, gone_names = changes
        node.state = DirState.READ_IN_PART
        prefix = node.key + b"/" if node.key else b""
        base = node.fs_path + b"/"
        rows = node.rows
        old_rows: dict[bytes, FileRow] = {}
        dropped = 0
        for row in cached.rows:
            name = row.name
            if name in look:
                old_rows[name] = row
            elif name in gone_names:
                dropped += 1
            else:
                rows.append(row)
                if row.kind == _TREE:
                    child = _Dir(prefix + name, base + name, parent=node)
                    node.children[name] = child
                    following.append(child)
        if self.log is not None:
            self.log.debug("looked into %s/: listing changed, %d entries differ, %d gone",
                           _show(node.key), len(look), dropped)
        node.ignores = cached.ignores
        node.ignored = [name for name in cached.ignored
                        if bare_name(name) not in look and bare_name(name) not in gone_names]
        first_new = len(rows)
        entries = [look[name] for name in sorted(look)]
        self._read_entries(node, entries, old_rows, set(cached.ignored), following)
        for child in node.children.values():  # no ignore file changed here or above
            child.rules_clean = True
        # Rows stay in this order until the hash is done (jobs know their rows by index).
        pairs = [(old_rows.get(rows[index].name), index) for index in range(first_new, len(rows))]
        if dropped or len(pairs) != len(old_rows) or any(old is None for old, _at in pairs):
            node.all_hits = False  # other names than the cached ones: the tree is built again
        else:
            node.reread = [(old, index) for old, index in pairs if old is not None]
        node.ignored.sort(key=bare_name)
        return True

    def _read_dir(self, node: _Dir, cached: DirRecord | None, following: list[_Dir]) -> None:
        assert node.listing is not None
        node.state = DirState.READ_WHOLE
        cached_rows = {row.name: row for row in cached.rows} if cached is not None else {}
        entries = list(iter_listing(node.listing))
        start = self.start_ns
        ignores: list[object] = [
            NOT_SETTLED if is_racy(max(entry.st_mtime_ns, entry.st_ctime_ns), start)
            else list(entry)
            for entry in entries if entry.name in IGNORE_FILES
        ]
        node.ignores = ignores
        # The rules in force here are the cached scan's if no ignore file changed here or above.
        same_rules = (node.rules_clean and cached is not None and ignores == cached.ignores
                      and NOT_SETTLED not in ignores)
        if self.log is not None:
            self.log.debug("read %s/ whole: %s", _show(node.key),
                           "not in the cache" if cached is None else "no usable cached listing")
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
                      cached_rows: dict[bytes, FileRow], known_out: set[bytes] | None,
                      following: list[_Dir]) -> int:
        """Add `entries` to `node`: rows (a cached one where the stat matches), subdirectories
        to walk, files to hash, names left out. Returns how many matched a cached row."""
        # The hot loop of a snapshot of changed directories: for an unchanged file nothing but
        # a dict lookup and `FileRow.matches`.
        prefix = node.key + b"/" if node.key else b""
        base = node.fs_path + b"/"
        rows = node.rows
        limit = self.options.max_file_size
        verify = self.cache.needs_verification
        log = self.log
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
            if known_out is not None and row is not None and (row.kind == _TREE) == is_dir:
                pass  # kept last time under the same rules
            elif (known_out is not None and (name + b"/" if is_dir else name) in known_out) \
                    or self._rules_of(node).is_ignored(name, is_dir=is_dir):
                node.ignored.append(name + b"/" if is_dir else name)  # as cached, or by the rules
                continue
            if is_dir:
                child = _Dir(prefix + name, base + name, parent=node)
                node.children[name] = child
                rows.append(tree_row(name, b"", 0))
                if row is not None and row.kind == _TREE:
                    hits += 1
                following.append(child)
                continue
            if (
                row is not None
                and row.matches(entry)
                and (not limit or entry.st_size <= limit)
                and (not verify or self._trusted_row(row))
            ):
                rows.append(row)
                hits += 1
                if log is not None:
                    log.debug("trusted %s: stat unchanged", _show(prefix + name))
                continue
            if log is not None:
                _explain_miss(log, prefix + name, row, entry)
            self._add_leaf(node, name, prefix + name, base + name, entry,
                           hint=None if row is None else _hint(row))
        return hits

    def _add_leaf(
        self, node: _Dir, name: bytes, key: bytes, fs_path: bytes,
        st: StatLike, cached: FileRow | None = None, hint: ObjectId | None = None,
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
        if cached is not None and cached.matches(st) and self._trusted_row(cached):
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
        self.jobs.append(_Job(key, fs_path, node, len(node.rows), hint))
        if hint is not None:
            self.hinted = True
        node.rows.append(make_row(name, kind, st, b"", self.start_ns))

    def _trusted_row(self, row: FileRow) -> bool:
        return row.kind == _LINK or self._trusted(row.ref or b"")

    # -- phase 2 ---------------------------------------------------------------------

    def hash_all(self) -> int:
        jobs = self.jobs
        if not jobs:
            return 0
        total = len(jobs)
        # One Python thread reads, hashes and stores; the store compresses batches of new
        # objects on native threads that never take the GIL (`threads`, or by default one per
        # core but the one this thread keeps busy): a Python thread per file would pay a GIL
        # hand-off per syscall and hold a Future per job.
        paths = (job.fs_path for job in jobs)
        # A changed file's previous blob is its delta hint (objstore/delta.py decides).
        bases = (job.hint for job in jobs) if self.hinted and self.options.deltas else None
        results = self.store.put_files(paths, threads=self.options.threads, bases=bases)
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
                result: PutResult | OSError = self.store.put_file(
                    job.fs_path, base=job.hint if self.options.deltas else None)
            except ContentChanged:
                continue
            except OSError as exc:
                result = exc
            self._settle(job, result)
            return
        self._unread(job)
        self._skip(job.key, "changed", job.node)

    @staticmethod
    def _unread(job: _Job) -> None:
        """The job's file is not part of this state: its row is dropped at build."""
        rows = job.node.rows
        rows[job.index] = rows[job.index]._replace(ref=None)

    def _settle(self, job: _Job, result: PutResult | OSError) -> None:
        """Record what storing a job's file gave: its id and stat, or why it is left out."""
        if isinstance(result, FileNotFoundError):
            self._unread(job)  # vanished
            job.node.clean = False
        elif isinstance(result, OSError):
            self._unread(job)
            self._skip(job.key, f"unreadable: {result.strerror}", job.node)
        else:
            rows = job.node.rows
            # Remember the stat of the content actually stored, not the earlier lstat.
            row = rows[job.index] = make_row(rows[job.index].name, rows[job.index].kind,
                                             result.stat, result.oid, self.start_ns)
            self.settled_rows += not row.racy
            if result.is_new:
                self.new_objects += 1
                self.new_bytes += result.stored_bytes

    # -- phase 3 ---------------------------------------------------------------------

    def build(self, order: Sequence[_Dir]) -> None:
        for node in reversed(order):  # children before parents
            self._build_dir(node)

    def _build_dir(self, node: _Dir) -> None:
        """Give `node` its tree id: the cached one where nothing in it changed (`_reuse`),
        else a tree built from its rows (`_rebuild`)."""
        state = node.state
        if state is DirState.STORE:
            return  # not part of the tree: its parent leaves it out
        if state is DirState.UNCHANGED and not node.children and self._taken_whole(node):
            return
        cached = None if state is DirState.VIRTUAL else self.cache.dirs.get(node.key)
        if node.reread is not None:  # read in part: unchanged if what was read is as before
            rows = node.rows
            node.all_hits = node.clean and all(
                old.kind == rows[at].kind and (old.kind == _TREE or (
                    old.ref == rows[at].ref and not (old.mode ^ rows[at].mode) & MODE_BITS))
                for old, at in node.reread)
        if (state is DirState.UNCHANGED or node.all_hits) and cached is not None \
                and cached.tree and self.reuse_trees and self._unchanged(node, cached):
            self._reuse(node, cached)
        else:
            self._rebuild(node, cached)

    def _reuse(self, node: _Dir, cached: DirRecord) -> None:
        """Keep the cached tree id of a directory whose rows and subtrees all match the cache:
        the common case of a no-change snapshot, with no entry objects and no encoding."""
        node.built = cached.summary()
        if self.log is not None:
            self.log.debug("kept tree id of %s/ (%s)", _show(node.key), node.state.value)
        if node.state is not DirState.UNCHANGED:
            kept = cached.rows if node.reread is None else self._kept_rows(node)
            listing, recheck = self._listing_state(node, kept)
            if listing != cached.listing or recheck != cached.recheck \
                    or node.ignored != cached.ignored or node.ignores != cached.ignores \
                    or node.reread:
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
        # As read, so it is saved as read: no re-encoding.
        self.new_cache.dirs.take(self.cache.dirs, (node.key,))

    def _rebuild(self, node: _Dir, cached: DirRecord | None) -> None:
        """Build the tree of a directory from its rows (the cached ones where the walk found it
        unchanged but a subdirectory changed) and store it, with its new record."""
        if node.state is DirState.UNCHANGED:
            assert cached is not None  # a subdirectory changed: rebuild from the cached rows
            node.rows = list(cached.rows)
            node.ignores, node.ignored = cached.ignores, cached.ignored
        if self.log is not None:
            self.log.debug("built tree of %s/ (%s)", _show(node.key), node.state.value)
        # The entries of the tree this directory had, if the store holds it decoded (a
        # long-lived service: it built or read it): a turn changes one entry or two of a
        # directory it rebuilds, and an equal entry reused is cheaper than a new one.
        previous_tree = self.store.cached_tree(ObjectId(cached.tree)) \
            if cached is not None and cached.tree else None
        previous = {e.name: e for e in previous_tree.entries} if previous_tree else {}
        node.rows.sort(key=row_name)
        rows, entries, summary = self._tree_entries(node, previous)
        self.rebuilt_dirs += 1
        # The directory's previous tree is the new one's delta hint (objstore/delta.py
        # decides whether a delta pays: only a big directory's tree is large enough).
        base = ObjectId(cached.tree) \
            if cached is not None and cached.tree and self.options.deltas else None
        tree_id, stored = self.store.store_tree(Tree(tuple(entries)), base=base)
        if stored:
            self.new_objects += 1
            self.new_bytes += stored
        node.built = summary._replace(tree=tree_id)
        if node.state is not DirState.VIRTUAL:
            subdirs = [[row.name, row.ref or b""] for row in rows if row.kind == _TREE]
            listing, recheck = self._listing_state(node, rows)
            self.new_cache.dirs[node.key] = DirRecord(
                tree_id, summary.size, summary.files, rows, listing=listing,
                ignores=node.ignores, subdirs=subdirs, ignored=node.ignored,
                leaves=summary.leaves, recheck=recheck)

    def _tree_entries(self, node: _Dir, previous: dict[bytes, TreeEntry]
                      ) -> tuple[list[FileRow], list[TreeEntry], DirSummary]:
        """The rows a rebuilt directory keeps (a subdirectory's with its new id; none for a
        file that could not be read), their tree entries, and the summary of the whole (its
        tree id left empty)."""
        rows: list[FileRow] = []
        entries: list[TreeEntry] = []
        size = files = leaves = 0
        for row in node.rows:
            name, kind = row.name, row.kind
            if kind == _TREE:
                child = node.children.get(name) or self._unchanged_child(node, name)
                if child.state is DirState.STORE:
                    continue
                below = child.built
                assert below is not None
                size += below.size
                files += below.files
                leaves = -1 if leaves < 0 or below.leaves < 0 else leaves + below.leaves
                row = tree_row(name, below.tree, below.size)
                entry = _entry(previous, name, _TREE_KIND, ObjectId(below.tree), below.size, None)
            elif kind == _TOMB:
                entry = TreeEntry(name, EntryKind.TOMBSTONE)
            elif row.ref is None:  # could not be read: skipped (and reported) by the job
                continue
            elif kind == _LINK:
                leaves += leaves >= 0
                entry = TreeEntry(name, EntryKind.SYMLINK, None, row.ref, 0)
            else:
                leaves += leaves >= 0
                files += 1
                size += row.size
                bits = row.mode & MODE_BITS  # entry_mode(kind, row.mode), without a call
                entry = _entry(previous, name, _KIND_OF[kind], ObjectId(row.ref), row.size,
                               None if bits == (_EXEC_MODE if kind == _EXEC else _FILE_MODE)
                               else bits)
            entries.append(entry)
            rows.append(row)
        return rows, entries, DirSummary(b"", size, files, leaves)

    def _taken_whole(self, node: _Dir) -> bool:
        """A directory the walk found unchanged, with nothing below it to rebuild: its cached
        record stands, read without decoding it (most of the directories a turn's build
        visits: the subdirectories of the ones it changed)."""
        summary = self.cache.dirs.summary(node.key)
        if summary is None or not summary.tree or not self._trusted(summary.tree):
            return False
        node.built = summary
        self.new_cache.dirs.take(self.cache.dirs, (node.key,))
        return True

    @staticmethod
    def _kept_rows(node: _Dir) -> list[FileRow]:
        """The rows of a directory read in part that keeps its tree id: as read (a file read
        again carries its new stat, maybe settled by now), but a subdirectory's the cached one
        (what was read holds no tree id; the cached one was checked to be unchanged)."""
        rows = list(node.rows)
        for old, at in node.reread or ():
            if rows[at].kind == _TREE:
                rows[at] = old
        rows.sort(key=row_name)
        return rows

    def _listing_state(self, node: _Dir, rows: list[FileRow]) -> tuple[bytes, Recheck | None]:
        """(listing, recheck) for the directory's new record. The listing the next walk may
        compare against describes the rows fully: nothing skipped or vanished, nothing too new
        to be trusted. Where only racy files (or a recent ctime) keep it from that, it is kept
        aside with their names: the next scan looks at those and at what differs from it."""
        if node.listing is None or not node.clean or NOT_SETTLED in node.ignores:
            return b"", None
        racy = [row.name for row in rows if row.racy]
        if not racy and not is_racy(node.newest, self.start_ns):
            return node.listing, None
        return b"", Recheck(node.listing, racy)

    def result(self, top: _Dir, hashed: int, absent_parents: tuple[RelPath, ...]) -> ScanResult:
        assert top.built is not None
        return ScanResult(
            tree=top.tree,
            files=top.built.files,
            bytes=top.built.size,
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
        summary = self.cache.dirs.summary(key)
        assert node.state is DirState.UNCHANGED and summary is not None and summary.tree
        child = _Dir(key, node.fs_path + b"/" + name, parent=node, state=DirState.UNCHANGED,
                     built=summary)
        node.children[name] = child
        return child

    def _unchanged(self, node: _Dir, cached: DirRecord) -> bool:
        """Every row matched the cache; do the subdirectories still have their cached ids?
        (A subdirectory without a node was walked through unchanged: it has.)"""
        if node.children:
            trees = dict(cached.subdirs)
            for name, child in node.children.items():
                if child.state is DirState.STORE or trees.get(name) != child.tree:
                    return False
        return self._trusted(cached.tree)


def _explain_miss(log: logging.Logger, key: bytes, row: FileRow | None,
                  entry: ListedEntry) -> None:
    """Log why a file is read again (only called with debug logs on)."""
    if row is None:
        log.debug("read %s: not in the cache", _show(key))
    else:
        log.debug("re-read %s: %s", _show(key),
                  row.mismatch(entry) or "size limit, or its id is not in the store")


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
           size: int, mode: int | None) -> TreeEntry:
    """`make_entry(name, kind, oid, None, size, mode)`, or the equal entry of `previous` (the
    tree a rebuilt directory had) as it is."""
    entry = previous.get(name)
    if entry is None or entry.oid != oid or entry.size != size or entry.kind is not kind \
            or entry.mode != mode:
        return make_entry(name, kind, oid, None, size, mode)
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
    if not scanner.reuse_trees:  # their rows do; their tree ids were made under other settings
        for key, record in cache.dirs.items():
            scanner.new_cache.dirs[key] = DirRecord(b"", record.size, record.files, record.rows)
    top = _Dir(b"", root, state=DirState.VIRTUAL, all_hits=False)
    virtual_nodes = [top]
    walked: list[_Dir] = []
    absent: list[RelPath] = []
    leaves: list[tuple[_Dir, int]] = []  # tracked files and links: (parent, row index)
    stores: dict[bytes, bool] = {}
    for path in _outermost(paths):
        if _under_store(root, path, stores):
            continue  # left out like .git, even when tracked
        node = top
        dir_rules = rules.root_context()
        missing_from: RelPath | None = None
        for ancestor in ancestors(path):
            name = ancestor.rsplit(b"/", 1)[-1]
            child = node.children.get(name)
            if child is None:
                child = _Dir(ancestor, root + b"/" + ancestor, state=DirState.VIRTUAL,
                             all_hits=False)
                node.children[name] = child
                node.rows.append(tree_row(name, b"", 0))
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
            node.rows.append(FileRow(name, _TOMB, 0, 0, 0, 0, 0, b"", False))
        elif statmod.S_ISDIR(st.st_mode):
            child = _Dir(path, fs_path, rules=dir_rules.enter(name))
            node.children[name] = child
            node.rows.append(tree_row(name, b"", 0))
            walked.extend(scanner.walk(child))
        else:
            cached_dir = cache.dirs.get(node.key)
            cached_row = None
            if cached_dir is not None:
                cached_row = next((r for r in cached_dir.rows if r.name == name), None)
            added = len(node.rows)
            scanner._add_leaf(node, name, path, fs_path, st, cached_row, _hint(cached_row))
            if len(node.rows) > added:
                leaves.append((node, added))
    hashed = scanner.hash_all()  # before any sort: a job knows its row by index
    _remember_leaves(scanner.new_cache, [(node.key, node.rows[at]) for node, at in leaves])
    scanner.build(walked)
    # Virtual ancestors: deepest first, so each sees its children's ids.
    scanner.build(sorted(virtual_nodes, key=_depth))
    return scanner.result(top, hashed, tuple(sorted(set(absent)))), scanner.new_cache


def _remember_leaves(cache: StatCache, leaves: Sequence[tuple[bytes, FileRow]]) -> None:
    """Keep the rows of tracked files (their parents are virtual, so no record of them is
    built), or every tracked checkpoint would read them again.

    A parent's record may come from a whole-tree scan: a record whose rows change no longer
    describes its cached tree id, so it loses that id, and so do its ancestors' records.
    """
    for parent, row in leaves:
        if row.ref is None:
            continue  # vanished or unreadable: nothing to remember
        record = cache.dirs.get(parent)
        rows = [] if record is None else record.rows
        if row in rows:
            continue  # a cache hit: the record is still exact
        rows = sorted([r for r in rows if r.name != row.name] + [row], key=row_name)
        cache.dirs[parent] = DirRecord(b"", 0, 0, rows)
        key = parent
        while key:
            key = key.rpartition(b"/")[0]
            above = cache.dirs.get(key)
            if above is not None and above.tree:
                cache.dirs[key] = DirRecord(b"", above.size, above.files, above.rows)


def _under_store(root: bytes, path: RelPath, seen: dict[bytes, bool]) -> bool:
    """Whether an ancestor of tracked `path` is a ckpt store (each ancestor checked once)."""
    for ancestor in ancestors(path):
        found = seen.get(ancestor)
        if found is None:
            found = seen[ancestor] = is_store_dir(root + b"/" + ancestor)
        if found:
            return True
    return False


def _is_real_dir(fs_path: bytes) -> bool:
    try:
        return statmod.S_ISDIR(os.lstat(fs_path).st_mode)
    except OSError:
        return False


def _depth(node: _Dir) -> int:
    return _key_depth(node.key)


def _key_depth(key: bytes) -> int:
    return key.count(b"/") + bool(key)
