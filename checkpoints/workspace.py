"""`Workspace`: one root in one store for one session, and the steps every write call shares.

It holds what the facade (`service.Checkpoints`), restoring and maintenance all use: the object
store, the catalog, the configuration, the clock and randomness, the event listeners, where
this root's files live in the store (`roots/<key>/`: stat cache, lock, staging directories),
and the snapshot steps (scan under a `LockedRoot`, make the record, commit it and apply the
retention cap). It takes no lock itself: its callers hold a `LockedRoot` where one is needed.
It never prints, never exits and changes no process-global state.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ckpt.checkpoints.config import CONFIG_FILE, StoreConfig, read_config
from ckpt.checkpoints.diff.trees import diff_trees
from ckpt.checkpoints.errors import UnsafePath, naming
from ckpt.checkpoints.history.catalog import Catalog
from ckpt.checkpoints.history.retention import select_over_cap
from ckpt.checkpoints.identity import MARKER, legacy_key, read_marker
from ckpt.checkpoints.model import CheckpointRecord, CheckpointStats, Event, new_checkpoint_id
from ckpt.checkpoints.paths import RelPath, parse_relpath, user_path_to_rel
from ckpt.checkpoints.snapshot.gitexclude import NO_EXCLUDES, GitExcludes, read_git_excludes
from ckpt.checkpoints.snapshot.scan import (
    ProgressFn,
    ScanOptions,
    ScanResult,
    scan_paths,
    scan_workspace,
)
from ckpt.checkpoints.snapshot.statcache import (
    DirTable,
    StatCache,
    read_stat_cache,
    write_stat_cache,
)
from ckpt.checkpoints.writing import LockedRoot
from ckpt.objstore import EntryKind, ObjectId, ObjectStore, TreeEntry

if TYPE_CHECKING:
    from ckpt.checkpoints.snapshot.ignore import IgnoreRules
    from ckpt.checkpoints.snapshot.watch import WatchHandle

logger = logging.getLogger("ckpt")
CacheFileKey = tuple[int, tuple[int, ...] | None, tuple[int, ...] | None]

Clock = Callable[[], datetime]
Listener = Callable[[Event], None]
# roots/<key>/staging-<12 hex digits>: a restore's staging directory on the store's side.
STAGING_PREFIX = "staging-"
# <root>/.ckpt-staging-<12 hex digits>: a restore's staging directory where the store is on
# another file system than the root (staged files are renamed into place).
WORKSPACE_STAGING_PREFIX = ".ckpt-staging-"


def is_workspace_staging(name: bytes) -> bool:
    """Whether `name`, an entry of a workspace root, is a name a restore stages under."""
    token = name[len(WORKSPACE_STAGING_PREFIX):]
    return (name.startswith(b".ckpt-staging-") and len(token) == 12
            and all(c in b"0123456789abcdef" for c in token))


def ms(seconds: float) -> int:
    return round(seconds * 1000)


class Workspace:
    """The state a `Checkpoints` composes, and the snapshot steps (see the module)."""

    def __init__(self, root: str, store_dir: str, session: str, config: StoreConfig,
                 objects: ObjectStore, catalog: Catalog, *, clock: Clock,
                 rng: random.Random, key: str | None = None) -> None:
        self.root = root
        self.store_dir = store_dir
        self.session = session
        self.config = config
        # False until the first refresh: the file may have changed since `config` was read.
        self._config_key: tuple[int, ...] | bool | None = False
        self.objects = objects
        self.catalog = catalog
        self.clock = clock
        self.rng = rng
        self.listeners: dict[str, list[Listener]] = {}
        self.root_b = os.fsencode(root)
        # roots/<key>: the workspace's identity (identity.py), so its stat cache, lock and
        # staging follow it when it moves; the path's hash where it has none.
        self.root_dir = os.path.join(store_dir, "roots", key or legacy_key(root))
        os.makedirs(self.root_dir, exist_ok=True)
        self._reserved = self._find_reserved()
        # A file watcher (watch.py) when opened with watch=True; then the stat cache is kept in
        # memory between scans while its files are the ones it was read from or saved as.
        self.watch: WatchHandle | None = None
        self._cache_memo: tuple[CacheFileKey, StatCache] | None = None

    # -- where things are ----------------------------------------------------------------

    @property
    def cache_path(self) -> str:
        return os.path.join(self.root_dir, "statcache")

    @property
    def journal_path(self) -> str:
        """Where ckpt before catalog schema 2 journaled this root's restores (journal.py)."""
        return os.path.join(self.root_dir, "journal")

    @property
    def root_key(self) -> bytes:
        """This root in the catalog's restore journals (as in its records)."""
        return self.root_b

    def refresh_config(self) -> None:
        """Read the configuration again if its file changed since it was read: a long-lived
        `Checkpoints` (the server's pool, a harness's) follows `ckpt config set` made by
        another process. The object store keeps what it was opened with (compression level,
        fsync)."""
        key = _file_key(os.path.join(self.store_dir, CONFIG_FILE))
        if key != self._config_key:
            self.config = read_config(self.store_dir)
            self._config_key = key

    def adopt_config(self, config: StoreConfig) -> None:
        """Use `config` (set by the caller, not read from the file) until the file changes."""
        self.config = config
        self._config_key = _file_key(os.path.join(self.store_dir, CONFIG_FILE))

    def lock_root(self, purpose: str) -> LockedRoot:
        """The locks of a write call on this root (taken by entering the result)."""
        self.refresh_config()
        return LockedRoot(os.path.join(self.store_dir, "gc.lock"),
                          os.path.join(self.root_dir, "lock"),
                          timeout=self.config.lock_timeout, purpose=purpose,
                          save_cache=self.save_cache)

    def restore_left_over(self) -> bool:
        """Whether a killed restore of this root left a journal or a staging directory: the
        cheap test every write call makes before it asks restore/restorer.py to complete one."""
        if (self.catalog.restore_journal(self.root_key) is not None
                or os.path.lexists(self.journal_path)):
            return True
        try:
            if any(name.startswith(STAGING_PREFIX) for name in os.listdir(self.root_dir)):
                return True
            return self.stages_in_workspace() and any(
                is_workspace_staging(name) for name in os.listdir(self.root_b))
        except OSError:
            return False

    def stages_in_workspace(self) -> bool:
        """Whether a restore of this root stages in the workspace: the store is on another
        file system (a staged file must be renamed into place)."""
        return os.stat(self.root_dir).st_dev != os.stat(self.root_b).st_dev

    def gc_generation(self) -> int:
        try:
            with open(os.path.join(self.store_dir, "gc-generation"), "rb") as stream:
                return int(stream.read().strip() or b"0")
        except (FileNotFoundError, ValueError):
            return 0

    def _find_reserved(self) -> list[RelPath]:
        """The store, where it lies inside the root (by the path it was named by, a symlink in
        the root that leads to it, and by its real path), and the root's marker `.ckpt` (the
        store, a link to it, or a symlink to either): never captured, never restored over."""
        reserved: set[RelPath] = set()
        for path in dict.fromkeys((self.store_dir, os.path.realpath(self.store_dir))):
            rel = os.path.relpath(path, self.root)
            if rel not in (".", "..") and not rel.startswith("../"):
                reserved.add(parse_relpath(rel))
        if read_marker(self.root) is not None:
            reserved.add(parse_relpath(MARKER))
        return sorted(reserved)

    def store_rel(self) -> list[RelPath]:
        return list(self._reserved)

    def rel(self, path: str | bytes) -> RelPath:
        text = os.fsdecode(path)
        if os.path.isabs(text):
            return user_path_to_rel(self.root, text)
        return parse_relpath(os.path.normpath(text)) if text not in (".", "") else parse_relpath(text)

    def user_rel(self, path: str | bytes, cwd: str | None) -> RelPath:
        rel = user_path_to_rel(self.root, os.fsdecode(path), cwd)
        if rel in self.store_rel() or any(rel.startswith(s + b"/") for s in self.store_rel()):
            raise UnsafePath(rel, "names the store")
        if b".git" in rel.split(b"/"):  # excluded from every snapshot, so never tracked either
            raise UnsafePath(rel, "lies in a .git directory")
        return rel

    def lookup(self, tree_id: ObjectId, rel: RelPath) -> TreeEntry | None:
        """The entry at `rel` in a checkpoint's tree (tombstones count as absent)."""
        tree = self.objects.get_tree(tree_id)
        parts = rel.split(b"/")
        for index, part in enumerate(parts):
            entry = tree.find(part)
            if entry is None or entry.kind is EntryKind.TOMBSTONE:
                return None
            if index == len(parts) - 1:
                return entry
            if entry.kind is not EntryKind.TREE or entry.oid is None:
                return None
            tree = self.objects.get_tree(entry.oid)
        return None

    # -- events and the timeline ---------------------------------------------------------

    def emit(self, event: Event) -> None:
        for callback in [*self.listeners.get(event.type, []), *self.listeners.get("*", [])]:
            callback(event)

    def history(self) -> list[CheckpointRecord]:
        """This session's timeline on this root (a store may be shared by several roots)."""
        return self.catalog.history(session=self.session, root=self.root)

    def drop(self, ids: Sequence[str], *, reason: str, **details: Any) -> None:
        """Delete these checkpoints with one `checkpoint:prune` event that names them and
        says why (`reason`, also as `cause`: ckpt dropped them itself) and with `details`."""
        event = Event("checkpoint:prune", self.clock(), self.session,
                      {"removed": list(ids), "reason": reason, "cause": reason, **details})
        self.catalog.delete_checkpoints(ids, event=event)
        self.emit(event)

    def after_commit(self, event: Event, *, spare: Sequence[str] = (),
                     cap: int | None = None) -> None:
        """Tell the listeners, then apply the retention cap: `cap`, else the configured one,
        to this session's checkpoints on this root. Never evicts the checkpoint just committed
        (`event`'s) nor the ids in `spare` (a restore's target): the next oldest go instead,
        and when fewer remain the session keeps more than the cap until its next checkpoint."""
        self.emit(event)
        limit = self.config.retention_cap if cap is None else cap
        if not limit:
            return
        kept = {*spare, str(event.data.get("id"))}
        history = self.history()
        over = select_over_cap(history, limit, spare=kept)
        if over:
            beyond = {r.id for r in history[: max(0, len(history) - limit)]}
            self.drop([r.id for r in over], reason="retention-cap", cap=limit,
                      spared=sorted(beyond & kept))

    # -- snapshots -----------------------------------------------------------------------

    def _rules(self, translations: tuple[str, Mapping[str, Any]] | None,
               git_excludes: GitExcludes) -> IgnoreRules:
        from ckpt.checkpoints.snapshot.ignore import IgnoreRules, reuse_translations  # noqa: PLC0415 (lazy: pathspec)

        if translations is not None:  # saved by an earlier scan: spares importing pathspec
            reuse_translations(*translations)
        return IgnoreRules.load(self.root_b, use_gitignore=self.config.use_gitignore,
                                extra_patterns=self.config.extra_ignore, excluded=self.store_rel(),
                                git_excludes=git_excludes)

    def _scan_setup(self, cache: StatCache) -> tuple[ScanOptions, Callable[[], IgnoreRules],
                                                       list[IgnoreRules]]:
        """The options of a scan against `cache`, its rules factory and what it loaded."""
        self.refresh_config()
        # Git's exclude files lie outside the walk: what they hold is part of the settings.
        git_excludes = read_git_excludes(self.root) if self.config.use_gitignore else NO_EXCLUDES
        options = ScanOptions(max_file_size=self.config.max_file_size,
                              threads=self.config.effective_threads(),
                              deltas=self.config.deltas and self.config.delta_chain > 0,
                              ignore_settings=repr((self.config.use_gitignore,
                                                    tuple(self.config.extra_ignore),
                                                    tuple(self.store_rel()),
                                                    git_excludes.identity)))
        loaded: list[IgnoreRules] = []

        def rules() -> IgnoreRules:  # loaded by the scan only where a name must be decided
            loaded.append(self._rules(cache.ignore_translations, git_excludes))
            return loaded[-1]

        return options, rules, loaded

    def scan(self, locked: LockedRoot, covered: Sequence[RelPath] | None,
             progress: ProgressFn | None) -> ScanResult:
        """Scan, its objects durable; the stat cache it made goes to `locked.scanned_cache` (a
        restore that follows under the same locks plans and updates from it) and is saved with
        the call's bookkeeping. With a watcher, a whole-tree scan lists only what it names."""
        cache = self.read_cache()
        options, rules, loaded = self._scan_setup(cache)
        watch = self.watch if covered is None else None  # a paths scan leaves the rest dirty
        ticket = None
        if watch is not None:
            ticket = watch.begin(cache.dirs.keys)
            if ticket.view is not None:
                options = dataclasses.replace(options, watch=ticket.view)
        start_ns = time.time_ns()
        try:
            with naming(os.path.join(self.store_dir, "objects")):
                if covered is None:
                    result, new_cache = scan_workspace(self.root_b, self.objects, rules, cache,
                                                       options=options, scan_start_ns=start_ns, progress=progress)
                else:
                    result, new_cache = scan_paths(self.root_b, covered, self.objects, rules, cache,
                                                   options=options, scan_start_ns=start_ns, progress=progress)
                self.objects.sync()
        except BaseException:
            if watch is not None and ticket is not None:
                watch.abort(ticket)
            raise
        new_cache.ignore_translations = cache.ignore_translations
        if loaded:
            from ckpt.checkpoints.snapshot.ignore import known_translations  # noqa: PLC0415 (lazy: pathspec)

            new_cache.ignore_translations = known_translations()
            if new_cache.ignore_translations != cache.ignore_translations:
                new_cache.dirty = True
        if watch is not None and ticket is not None:
            watch.end(ticket, new_cache.dirs.keys(), unsaved=new_cache.dirty)
            # What this scan found unwatched is watched now: one native walk compares it with
            # the listings just made, so the next scan lists only what changed.
            watch.settle(new_cache.dirs.known)
        locked.scanned_cache = new_cache
        locked.note_files(result.hashed)
        return result

    def verify_watch(self, locked: LockedRoot) -> tuple[RelPath, ...]:
        """Under `locked`: the paths where a watched scan and a full walk against the same
        stat cache disagree (nothing committed, nothing saved; the dirty set is left as it
        is). A disagreement is logged at ERROR and makes the next scan a full walk."""
        watch = self.watch
        if watch is None:
            return ()
        cache = self.read_cache()
        options, rules, _loaded = self._scan_setup(cache)
        ticket = watch.begin(cache.dirs.keys, peek=True)
        if ticket.view is None:  # the next scan walks everything anyway
            watch.watcher.note_verify(watch.client, 0)
            return ()
        trees = []
        with naming(os.path.join(self.store_dir, "objects")):
            for view in (ticket.view, None):
                result, _ = scan_workspace(self.root_b, self.objects, rules, cache,
                                           options=dataclasses.replace(options, watch=view),
                                           scan_start_ns=time.time_ns())
                trees.append(result.tree)
            self.objects.sync()
        paths = tuple(change.path for change in diff_trees(self.objects.get_tree, *trees))
        watch.watcher.note_verify(watch.client, len(paths))
        if paths:
            shown = ", ".join(os.fsdecode(path) for path in paths[:20])
            logger.error("BUG: the file watcher of %s missed changes to %d path(s): %s",
                         self.root, len(paths), shown)
            watch.distrust("verification walk disagreed: the next snapshot walks everything")
        return paths

    def save_cache(self, cache: StatCache) -> None:
        self._cache_memo = None  # whatever happens, the files may no longer be what it held
        with naming(self.cache_path):
            write_stat_cache(self.cache_path, cache)
        cache.dirty = False  # saved: saving it again would change nothing
        if self.watch is not None:
            self._cache_memo = (self._cache_file_key(), _as_stored(cache))
            self.watch.saved()

    def _cache_file_key(self) -> CacheFileKey:
        """What identifies the cache's files as written: a save, or another process's, changes
        it (each is a new file); the gc generation decides what the cache must verify."""
        return (self.gc_generation(), _file_key(self.cache_path),
                _file_key(self.cache_path + ".delta"))

    def read_cache(self) -> StatCache:
        """The stat cache as saved: with a watcher, the one in memory while its files are
        those it was read from or saved as."""
        if self.watch is None:
            return read_stat_cache(self.cache_path, gc_generation=self.gc_generation())
        key = self._cache_file_key()
        memo = self._cache_memo
        if memo is not None and memo[0] == key:
            return memo[1]
        cache = read_stat_cache(self.cache_path, gc_generation=key[0])
        self._cache_memo = (key, cache)
        return cache

    def current_cache(self, locked: LockedRoot) -> StatCache:
        """The stat cache as this call's scan left it, else as saved (read from the files).
        The caller (a restore) changes it in place, and records of a cache are shared with the
        one it was made from: the one in memory is dropped until the next save."""
        self._cache_memo = None
        if locked.scanned_cache is not None:
            return locked.scanned_cache
        return read_stat_cache(self.cache_path, gc_generation=self.gc_generation())

    def scan_record(self, locked: LockedRoot, covered: Sequence[RelPath] | None,
                    progress: ProgressFn | None, **fields: Any) -> tuple[CheckpointRecord, Event]:
        """Scan, and make the record of what was seen (its objects durable), not committed."""
        started = time.monotonic()
        created_at = self.clock()
        result = self.scan(locked, covered, progress)
        parent = self.catalog.latest(session=self.session, root=self.root)
        duration = ms(time.monotonic() - started)
        record = CheckpointRecord(
            id=new_checkpoint_id(int(created_at.timestamp() * 1000), self.rng),
            session=self.session, scope="tree" if covered is None else "paths",
            parent=parent.id if parent else None, tree=result.tree, created_at=created_at,
            stats=CheckpointStats(result.files, result.bytes, result.new_objects, result.new_bytes,
                                  len(result.skipped), duration, result.hashed),
            root=self.root, skipped=result.skipped, paths=tuple(covered or ()),
            absent_parents=result.absent_parents, **fields,
        )
        event = Event("checkpoint:create", created_at, self.session, {
            "id": record.id, "label": record.label, "reason": record.reason,
            "turn_id": record.turn_id, "duration_ms": duration, "files": result.files,
            "hashed": result.hashed, "new_objects": result.new_objects,
            "new_bytes": result.new_bytes,
            "skipped": [{"path": os.fsdecode(s.path), "reason": s.reason} for s in result.skipped],
        })
        return record, event

    def snapshot(self, locked: LockedRoot, covered: Sequence[RelPath] | None,
                 progress: ProgressFn | None, *, keep: int | None = None,
                 **fields: Any) -> CheckpointRecord:
        """Scan, commit the record, tell the listeners, apply the retention cap (`keep`,
        else the configured one)."""
        record, event = self.scan_record(locked, covered, progress, **fields)
        locked.catch_up()  # a bulky scan's cache is saved before the commit
        self.catalog.add_checkpoint(record, event=event)
        self.after_commit(event, cap=keep)
        return record


def _as_stored(cache: StatCache) -> StatCache:
    """`cache` as a read of the files just saved from it gives it: every record in its stored
    form. A record changed in place (a restore teaches the cache so) would otherwise differ
    from the stored form a later scan copies (`DirTable.take`)."""
    return StatCache(DirTable(cache.dirs.to_wire()), cache.gc_generation, cache.settings,
                     needs_verification=cache.needs_verification, dirty=False,
                     ignore_translations=cache.ignore_translations, base=cache.base)


def _file_key(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
