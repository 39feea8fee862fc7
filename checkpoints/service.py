"""`Checkpoints`: the Python API of ckpt (DESIGN.md), composing scan, plan, restore and catalog.

It owns the locks (one per workspace root for snapshot/restore; one per store that gc takes
exclusively and writers take shared, so gc never sweeps what a running snapshot writes), the
clock, the event listeners and the order of durable steps: objects synced, then the record
committed, then the checkpoint reported. It never prints and never exits.
"""

from __future__ import annotations

import builtins
import dataclasses
import gc
import glob
import os
import random
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timedelta, timezone
from functools import partial
from typing import TYPE_CHECKING, Any, BinaryIO

from ckpt.checkpoints.catalog import Catalog
from ckpt.checkpoints.config import StoreConfig, read_config, write_config
from ckpt.checkpoints.diff import Change, diff_trees, iter_leaves
from ckpt.checkpoints.errors import (
    CatalogCorrupt,
    CheckpointError,
    NothingMatched,
    NotInitialized,
    PathNotInCheckpoint,
    RestoreIncomplete,
    UnknownCheckpoint,
    UnsafePath,
)
from ckpt.checkpoints.journal import (
    RestoreIntent,
    clear_intent,
    decode_intent,
    encode_intent,
    read_intent,
)
from ckpt.checkpoints.lock import RootLock
from ckpt.checkpoints.model import CheckpointRecord, CheckpointStats, Event, new_checkpoint_id
from ckpt.checkpoints.paths import RelPath, parse_relpath, user_path_to_rel
from ckpt.checkpoints.retention import select_over_cap, select_prunable
from ckpt.checkpoints.scan import (
    ProgressFn,
    ScanOptions,
    ScanResult,
    record_restore,
    scan_paths,
    scan_workspace,
)
from ckpt.checkpoints.statcache import (
    StatCache,
    check_stat_cache,
    leaf_counts,
    read_stat_cache,
    write_stat_cache,
)
from ckpt.objstore import EntryKind, ObjectId, ObjectStore, StoreOptions, TreeEntry, hash_bytes
from ckpt.objstore.errors import ObjstoreError, StoreNotFound
from ckpt.objstore.local import remove_if_older

# The restore side (plan, restore, reports) is imported where it is used: a `ckpt create` is
# one process start, and those modules' classes cost ~10 ms to build for nothing.
if TYPE_CHECKING:
    from ckpt.checkpoints.ignore import IgnoreRules
    from ckpt.checkpoints.plan import RestorePlan
    from ckpt.checkpoints.reports import CheckReport, FileEntry, PruneReport, RestoreReport, StoreStats
    from ckpt.checkpoints.restore import ApplyReport
    from ckpt.objstore.gc import GcReport

Clock = Callable[[], datetime]
# A call whose scan hashed, or whose restore wrote, more files than this is bulky: it does its
# bookkeeping where it always did (a snapshot before its commit, a restore before closing its
# journal, else as the call ends): its stat cache is big, and saving that on another thread
# raised the peak RSS of a Linux-source first snapshot from 173 to 198 MiB (the thread's big
# buffers come from a malloc arena of its own), while the call's own seconds dwarf the save.
BEHIND_MAX_FILES = 2000
# roots/<key>/staging-<12 hex digits>: a restore's staging directory on the store's side.
STAGING_PREFIX = "staging-"
Listener = Callable[[Event], None]
STORE_NAME = ".ckpt"


def preload() -> None:
    """Import now what the service imports only where it is first used: the restore side
    (~12 ms of class building) and the ignore rules (pathspec, ~60 ms). For a long-lived
    process, such as an agent harness, that would rather pay once at start than at its first
    restore or first scan without a stat cache. The CLI never calls it: each command is one
    process start, and most never need those modules."""
    import ckpt.checkpoints.ignore  # noqa: PLC0415
    import ckpt.checkpoints.plan  # noqa: PLC0415
    import ckpt.checkpoints.reports  # noqa: PLC0415
    import ckpt.checkpoints.restore  # noqa: PLC0415


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """No cyclic garbage collection during a snapshot or restore: a scan allocates tens of
    thousands of container objects, each batch of which triggers a collection that traverses
    the whole heap (Linux, no-change, in a process that took a first snapshot: 200-470 ms with
    it, 155-190 without). Reference counting still frees everything acyclic; the few cycles (a
    scan's directory nodes) wait for the next collection after the operation."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _run_all(jobs: Sequence[Callable[[], None]]) -> BaseException | None:
    """Run every job, whatever fails (each frees or saves something of its own); return the
    first failure."""
    failure = None
    for job in jobs:
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 (the caller raises it)
            failure = failure or exc
    return failure


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


@contextmanager
def _naming(path: str | bytes) -> Iterator[None]:
    """A write through a file object fails with an OSError naming no file (ENOSPC, EIO):
    name `path`, the file or directory being written, so the error says where."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, os.fsdecode(path)) from exc
        raise


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


class Checkpoints:
    """Checkpoints of one workspace root in one store, for one session."""

    def __init__(self, root: str, store_dir: str, session: str, *, clock: Clock = _utc_now,
                 rng: random.Random | None = None) -> None:
        self.root = root
        self.store_dir = store_dir
        self.session = session
        self.config: StoreConfig = read_config(store_dir)
        self.objects = ObjectStore.open(store_dir, StoreOptions(
            compression_level=self.config.compression_level, fsync=self.config.fsync))  # type: ignore[arg-type]
        self.catalog = Catalog.open(os.path.join(store_dir, "catalog.db"), fsync=self.config.fsync)  # type: ignore[arg-type]
        self._clock = clock
        self._rng = rng or random.Random()
        self._listeners: dict[str, list[Listener]] = {}
        self._root_b = os.fsencode(root)
        key = hash_bytes(self._root_b).hex()[:16]
        self._root_dir = os.path.join(store_dir, "roots", key)
        os.makedirs(self._root_dir, exist_ok=True)
        # Set by a scan, for the rest of its lock; saved (if `dirty`) once the call's work is
        # done, with the other bookkeeping of `_jobs` (see `_writing`).
        self._scanned_cache: StatCache | None = None
        self._jobs: builtins.list[Callable[[], None]] = []
        self._behind: threading.Thread | None = None  # the last call's bookkeeping, if running
        self._behind_error: BaseException | None = None
        self._bulky = False  # this call's bookkeeping is not left to the thread (BEHIND_MAX_FILES)

    # -- opening -------------------------------------------------------------------------

    @staticmethod
    def _locate(root: str | os.PathLike[str], store: str | os.PathLike[str] | None) -> tuple[str, str]:
        root_abs = os.path.realpath(os.fspath(root))
        store_abs = os.path.abspath(os.fspath(store)) if store is not None else os.path.join(root_abs, STORE_NAME)
        return root_abs, store_abs

    @classmethod
    def init(cls, root: str | os.PathLike[str], store: str | os.PathLike[str] | None = None,
             session: str = "default", **kwargs: Any) -> Checkpoints:
        root_abs, store_abs = cls._locate(root, store)
        if not os.path.isdir(root_abs):
            raise NotInitialized(root_abs, store_abs)
        ObjectStore.init(store_abs).close()
        if not os.path.exists(os.path.join(store_abs, "config.toml")):
            write_config(store_abs, StoreConfig())
        return cls(root_abs, store_abs, session, **kwargs)

    @classmethod
    def open(cls, root: str | os.PathLike[str], store: str | os.PathLike[str] | None = None,
             session: str = "default", **kwargs: Any) -> Checkpoints:
        root_abs, store_abs = cls._locate(root, store)
        try:
            ObjectStore.open(store_abs)
        except StoreNotFound:
            raise NotInitialized(root_abs, store_abs) from None
        return cls(root_abs, store_abs, session, **kwargs)

    def close(self) -> None:
        try:
            self.settle()
        finally:
            self._close_stores()

    def _close_stores(self) -> None:
        try:
            with _naming(os.path.join(self.store_dir, "objects")):
                self.objects.close()  # publishes what was written: can fail like a put
        finally:
            self.catalog.close()

    def __enter__(self) -> Checkpoints:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- events --------------------------------------------------------------------------

    def on(self, event_type: str, callback: Listener) -> None:
        self._listeners.setdefault(event_type, []).append(callback)

    def _emit(self, event: Event) -> None:
        for callback in [*self._listeners.get(event.type, []), *self._listeners.get("*", [])]:
            callback(event)

    def events(self, *, type: str | None = None, limit: int | None = None,  # noqa: A002
               all_sessions: bool = False) -> builtins.list[Event]:
        return self.catalog.events(session=None if all_sessions else self.session, type=type, limit=limit)

    # -- locks and paths -----------------------------------------------------------------

    @contextmanager
    def _writing(self, purpose: str) -> Iterator[None]:
        """Shared store lock (keeps gc out) + exclusive root lock; completes a killed restore.

        What a call does only for the speed of later ones (the stat cache's update and save,
        freeing what a restore replaced) is queued in `_jobs` and done once the call's own work
        is done and durable, on a thread that keeps both locks until it has finished: the call
        returns meanwhile (a stdlib restore ~11 ms sooner), and the next call on this service,
        or `close`, waits for it first (`settle`). A bulky call does them where it always did
        (`BEHIND_MAX_FILES`); one that fails does them before raising, quietly: what its scan
        learnt still holds.
        """
        self.settle()
        self._bulky = False
        with ExitStack() as locks:
            locks.enter_context(RootLock(os.path.join(self.store_dir, "gc.lock"),
                                         timeout=self.config.lock_timeout, shared=True,
                                         purpose=purpose))
            locks.enter_context(RootLock(os.path.join(self._root_dir, "lock"),
                                         timeout=self.config.lock_timeout, purpose=purpose))
            try:
                with _cyclic_gc_paused():
                    self._complete_interrupted_restore()
                    yield
                    if self._bulky:
                        self._settle_now(quiet=False)
            except BaseException:
                self._settle_now(quiet=True)
                raise
            self._settle_behind(locks.pop_all())

    def _take_jobs(self) -> builtins.list[Callable[[], None]]:
        """The queued bookkeeping, then the save of the scan's stat cache if it changed (a
        restore's update, queued before, saves what it changes itself); the queue is emptied."""
        jobs, self._jobs = self._jobs, []
        cache, self._scanned_cache = self._scanned_cache, None
        if cache is not None and cache.dirty:
            jobs.append(partial(self._save_if_dirty, cache))
        return jobs

    def _settle_now(self, *, quiet: bool) -> None:
        """Do the queued jobs here; unless `quiet`, raise the first failure once all ran."""
        failure = _run_all(self._take_jobs())
        if failure is not None and not (
                quiet and isinstance(failure, (OSError, CheckpointError, ObjstoreError))):
            raise failure

    def _settle_behind(self, locks: ExitStack) -> None:
        """Do the queued jobs on a thread, which then lets go of `locks`."""
        jobs = self._take_jobs()
        if not jobs:
            locks.close()
            return

        def run() -> None:
            # Let the caller have the GIL back first: `start` waits until this thread runs, and
            # this thread would otherwise keep the GIL for a whole switch interval (5 ms).
            time.sleep(0)
            try:
                with _cyclic_gc_paused():  # for the reason the call itself pauses it
                    self._behind_error = _run_all(jobs)
            finally:
                locks.close()

        thread = threading.Thread(target=run, name="ckpt-bookkeeping")  # not a daemon: an
        try:  # interpreter that exits without `close` still finishes the cache's save
            thread.start()
        except RuntimeError:  # no thread to be had: do it here
            run()
            self.settle()
            return
        self._behind = thread

    def settle(self) -> None:
        """Wait until the bookkeeping of the last call is done: its stat cache saved, what a
        restore replaced freed (the next call, and `close`, wait for it anyway). Raises what
        failed in it, such as a cache that could not be saved, once."""
        thread, self._behind = self._behind, None
        if thread is not None:
            thread.join()
        error, self._behind_error = self._behind_error, None
        if error is not None:
            raise error

    def _store_rel(self) -> list[RelPath]:
        rel = os.path.relpath(self.store_dir, self.root)
        if rel == "." or rel.startswith(".."):
            return []
        return [parse_relpath(rel)]

    def _rules(self, translations: tuple[str, Mapping[str, Any]] | None = None) -> IgnoreRules:
        from ckpt.checkpoints.ignore import IgnoreRules, reuse_translations  # noqa: PLC0415  (lazy)

        if translations is not None:  # saved by an earlier scan: spares importing pathspec
            reuse_translations(*translations)
        return IgnoreRules.load(self._root_b, use_gitignore=self.config.use_gitignore,
                                extra_patterns=self.config.extra_ignore, excluded=self._store_rel())

    def _gc_generation(self) -> int:
        try:
            with open(os.path.join(self.store_dir, "gc-generation"), "rb") as stream:
                return int(stream.read().strip() or b"0")
        except (FileNotFoundError, ValueError):
            return 0

    @property
    def _cache_path(self) -> str:
        return os.path.join(self._root_dir, "statcache")

    @property
    def _journal_path(self) -> str:
        """Where ckpt before catalog schema 2 journaled this root's restores (journal.py)."""
        return os.path.join(self._root_dir, "journal")

    @property
    def _root_key(self) -> bytes:
        """This root in the catalog's restore journals (as in its records)."""
        return os.fsencode(self.root)

    def _rel(self, path: str | bytes) -> RelPath:
        text = os.fsdecode(path)
        if os.path.isabs(text):
            return user_path_to_rel(self.root, text)
        return parse_relpath(os.path.normpath(text)) if text not in (".", "") else parse_relpath(text)

    # -- tracking ------------------------------------------------------------------------

    def tracked(self) -> tuple[RelPath, ...]:
        return self.catalog.tracked(self.session)

    def track(self, *paths: str | bytes, cwd: str | None = None) -> tuple[RelPath, ...]:
        new = {self._user_rel(p, cwd) for p in paths}
        self.catalog.set_tracked(self.session, sorted(set(self.tracked()) | new))
        return self.tracked()

    def untrack(self, *paths: str | bytes, cwd: str | None = None) -> tuple[RelPath, ...]:
        gone = {self._user_rel(p, cwd) for p in paths}
        self.catalog.set_tracked(self.session, sorted(set(self.tracked()) - gone))
        return self.tracked()

    def _user_rel(self, path: str | bytes, cwd: str | None) -> RelPath:
        rel = user_path_to_rel(self.root, os.fsdecode(path), cwd)
        if rel in self._store_rel() or any(rel.startswith(s + b"/") for s in self._store_rel()):
            raise UnsafePath(rel, "names the store")
        if b".git" in rel.split(b"/"):  # excluded from every snapshot, so never tracked either
            raise UnsafePath(rel, "lies in a .git directory")
        return rel

    # -- snapshots -----------------------------------------------------------------------

    def _scan(self, covered: Sequence[RelPath] | None, progress: ProgressFn | None) -> ScanResult:
        """Scan, its objects durable; the stat cache it made is kept in `_scanned_cache` (a
        restore that follows under the same lock plans and updates from it) and saved with the
        call's bookkeeping (`_writing`)."""
        cache = read_stat_cache(self._cache_path, gc_generation=self._gc_generation())
        options = ScanOptions(max_file_size=self.config.max_file_size,
                              threads=self.config.effective_threads(),
                              ignore_settings=repr((self.config.use_gitignore,
                                                    tuple(self.config.extra_ignore),
                                                    tuple(self._store_rel()))))
        start_ns = time.time_ns()
        loaded: list[IgnoreRules] = []

        def rules() -> IgnoreRules:  # loaded by the scan only where a name must be decided
            loaded.append(self._rules(cache.ignore_translations))
            return loaded[-1]

        with _naming(os.path.join(self.store_dir, "objects")):
            if covered is None:
                result, new_cache = scan_workspace(self._root_b, self.objects, rules, cache,
                                                   options=options, scan_start_ns=start_ns, progress=progress)
            else:
                result, new_cache = scan_paths(self._root_b, covered, self.objects, rules, cache,
                                               options=options, scan_start_ns=start_ns, progress=progress)
            self.objects.sync()
        new_cache.ignore_translations = cache.ignore_translations
        if loaded:
            from ckpt.checkpoints.ignore import known_translations  # noqa: PLC0415  (loaded already)

            new_cache.ignore_translations = known_translations()
            if new_cache.ignore_translations != cache.ignore_translations:
                new_cache.dirty = True
        self._scanned_cache = new_cache
        self._bulky = self._bulky or result.hashed > BEHIND_MAX_FILES
        return result

    def _save_cache(self, cache: StatCache) -> None:
        with _naming(self._cache_path):
            write_stat_cache(self._cache_path, cache)
        cache.dirty = False  # saved: saving it again would change nothing

    def _save_if_dirty(self, cache: StatCache) -> None:
        if cache.dirty:
            self._save_cache(cache)

    def create(self, *, label: str | None = None, reason: str | None = None,
               turn_id: str | None = None, message_id: str | None = None,
               tool_call_id: str | None = None, summary: str | None = None,
               metadata: Mapping[str, Any] | None = None, paths: Sequence[str | bytes] | None = None,
               progress: ProgressFn | None = None) -> CheckpointRecord:
        extra = [self._user_rel(p, None) for p in paths or ()]
        with self._writing("create"):
            tracked = list(self.tracked())
            covered = sorted(set(tracked + extra)) if tracked or extra else None
            return self._snapshot(covered, progress, label=label, reason=reason, turn_id=turn_id,
                                  message_id=message_id, tool_call_id=tool_call_id,
                                  summary=summary, metadata=dict(metadata or {}))

    def _snapshot(self, covered: Sequence[RelPath] | None, progress: ProgressFn | None,
                  **fields: Any) -> CheckpointRecord:
        record, event = self._scan_record(covered, progress, **fields)
        if self._bulky:  # its cache saved before the commit (BEHIND_MAX_FILES)
            self._settle_now(quiet=False)
        self.catalog.add_checkpoint(record, event=event)
        self._after_commit(event)
        return record

    def _scan_record(self, covered: Sequence[RelPath] | None, progress: ProgressFn | None,
                     **fields: Any) -> tuple[CheckpointRecord, Event]:
        """Scan, and make the record of what was seen (its objects durable), not committed."""
        started = time.monotonic()
        created_at = self._clock()
        result = self._scan(covered, progress)
        parent = self.catalog.latest(session=self.session, root=self.root)
        duration = _ms(time.monotonic() - started)
        record = CheckpointRecord(
            id=new_checkpoint_id(int(created_at.timestamp() * 1000), self._rng),
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

    def _after_commit(self, event: Event, *, spare: Sequence[str] = ()) -> None:
        """Tell the listeners, then apply the retention cap (never to the ids in `spare`)."""
        self._emit(event)
        if self.config.retention_cap:
            over = select_over_cap(self.history(), self.config.retention_cap, spare=spare)
            if over:
                self._drop([r.id for r in over], reason="retention-cap")

    # -- queries -------------------------------------------------------------------------

    def get(self, ref: str) -> CheckpointRecord:
        return self.catalog.resolve(ref)

    def history(self, *, turn_id: str | None = None, reason: str | None = None,
                all_sessions: bool = False) -> builtins.list[CheckpointRecord]:
        # A store may be shared by several roots: a timeline is one root's checkpoints.
        return self.catalog.history(session=None if all_sessions else self.session,
                                    turn_id=turn_id, reason=reason, root=self.root)

    def list(self) -> builtins.list[CheckpointRecord]:
        return self.history()

    def latest(self, *, turn_id: str | None = None, reason: str | None = None) -> CheckpointRecord | None:
        return self.catalog.latest(session=self.session, turn_id=turn_id, reason=reason,
                                   root=self.root)

    def files(self, ref: str) -> builtins.list[FileEntry]:
        from ckpt.checkpoints.reports import FileEntry  # noqa: PLC0415 (see the imports)

        record = self.get(ref)
        return [FileEntry(path, e.kind, e.size, e.oid, e.target)
                for path, e in iter_leaves(self.objects.get_tree, record.tree, None)]

    def diff(self, ref: str, ref2: str | None = None) -> builtins.list[Change]:
        record = self.get(ref)
        if ref2 is not None:
            return diff_trees(self.objects.get_tree, record.tree, self.get(ref2).tree)
        with self._writing("diff"):
            current = self._scan(record.paths if record.scope == "paths" else None, None)
        return diff_trees(self.objects.get_tree, record.tree, current.tree)

    def _lookup(self, tree_id: ObjectId, rel: RelPath) -> TreeEntry | None:
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

    def _find_entry(self, record: CheckpointRecord, path: str | bytes) -> TreeEntry:
        rel = self._rel(path)
        entry = self._lookup(record.tree, rel)
        if entry is None:
            raise PathNotInCheckpoint(record.id, rel)
        return entry

    def read_file(self, ref: str, path: str | bytes) -> bytes:
        entry = self._find_entry(self.get(ref), path)
        if entry.kind is EntryKind.SYMLINK:
            assert entry.target is not None
            return entry.target
        if entry.kind is EntryKind.TREE:
            raise UnsafePath(os.fsencode(path), "is a directory")
        assert entry.oid is not None
        return self.objects.get_bytes(entry.oid)

    def copy_file(self, ref: str, path: str | bytes, out: BinaryIO) -> int:
        """Stream one file of a checkpoint into `out` (verified at the end)."""
        entry = self._find_entry(self.get(ref), path)
        if entry.kind is EntryKind.SYMLINK:
            assert entry.target is not None
            out.write(entry.target)
            return len(entry.target)
        if entry.kind is EntryKind.TREE:
            raise UnsafePath(os.fsencode(path), "is a directory")
        assert entry.oid is not None
        return self.objects.copy_to(entry.oid, out)

    # -- restore -------------------------------------------------------------------------

    def restore(self, ref: str, *, record_event: bool = True, dry_run: bool = False,
                discard_later: bool = False, save: bool = True,
                paths: Sequence[str | bytes] | None = None,
                progress: ProgressFn | None = None) -> RestoreReport:
        target = self.get(ref)
        only = None if paths is None or not paths else tuple(self._user_rel(p, None) for p in paths)
        if only is not None and not any(
            self._lookup(target.tree, p) is not None or os.path.lexists(self._root_b + b"/" + p)
            for p in only
        ):
            shown = ", ".join(map(os.fsdecode, only))
            raise NothingMatched(f"--path {shown} matches nothing in {target.id} or the workspace")
        started = time.monotonic()
        with self._writing("restore"):
            covered = target.paths if target.scope == "paths" else None
            pre: CheckpointRecord | None = None
            if save and not dry_run:
                pre, pre_event = self._scan_record(
                    covered, progress,
                    label=f"before restore to {target.id}", reason="pre-restore", turn_id=None,
                    message_id=None, tool_call_id=None, summary=None, metadata={})
                current = pre.tree
            else:
                current = self._scan(covered, progress).tree
            intent = RestoreIntent(
                checkpoint=target.id, tree=target.tree, scope=target.scope,
                covered=target.paths, absent_parents=target.absent_parents,
                keep=tuple(s.path for s in target.skipped), only=only,
                pre_restore=pre.id if pre else None, record_event=record_event,
                discard_later=discard_later, staging=self._staging_dir(),
            )
            plan = self._plan(intent, current)
            if dry_run:
                from ckpt.checkpoints.restore import ApplyReport  # noqa: PLC0415 (see the imports)

                return self._report(target, plan, ApplyReport(), None, (), True, started)
            # Nothing to write needs no journal. The journal and the pre-restore save go in one
            # transaction (one fsync), before anything is staged or applied; the cap must not
            # evict the very checkpoint being restored to.
            journal = None if plan.is_empty else encode_intent(intent)
            if pre is not None:
                self.catalog.add_checkpoint(pre, event=pre_event, journal=journal)
                try:
                    self._after_commit(pre_event, spare=(target.id,))
                except BaseException:  # a listener or the cap failed: the restore is not made
                    if journal is not None:
                        self.catalog.end_restore(self._root_key)
                    raise
            elif journal is not None:
                self.catalog.journal_restore(self._root_key, journal)
            return self._execute(intent, target, plan, started, progress)

    def _plan(self, intent: RestoreIntent, current: ObjectId) -> RestorePlan:
        """Plan from `current`, the state the scan just saw (and wrote to the stat cache)."""
        from ckpt.checkpoints.plan import plan_restore  # noqa: PLC0415 (see the imports)

        return plan_restore(self.objects.get_tree, current, intent.tree, scope=intent.scope,
                            covered=intent.covered, absent_parents=intent.absent_parents,
                            keep=intent.keep, only=intent.only, reserved=self._store_rel(),
                            count_leaves=self._leaf_counts().get)

    def _current_cache(self) -> StatCache:
        """The stat cache as this lock holder's scan left it, else as saved."""
        if self._scanned_cache is not None:
            return self._scanned_cache
        return read_stat_cache(self._cache_path, gc_generation=self._gc_generation())

    def _leaf_counts(self) -> dict[bytes, int]:
        """Tree id -> leaves below, for every directory of the last scan: so a plan counts an
        equal subtree as unchanged without loading it (the dominant cost of a no-op restore)."""
        return leaf_counts(self._current_cache())

    def _staging_dir(self) -> bytes:
        # Staged files are renamed (or swapped) into place, and what they replace or what is
        # removed is linked here: all on the root's filesystem.
        token = os.urandom(6).hex()
        if os.stat(self._root_dir).st_dev == os.stat(self.root).st_dev:
            return os.fsencode(os.path.join(self._root_dir, STAGING_PREFIX + token))
        return self._root_b + b"/.ckpt-staging-" + token.encode()

    def _execute(self, intent: RestoreIntent, target: CheckpointRecord, plan: RestorePlan,
                 started: float, progress: ProgressFn | None, *,
                 resuming: bool = False) -> RestoreReport:
        from ckpt.checkpoints.restore import ApplyReport, describe_conflicts  # noqa: PLC0415

        if plan.is_empty and not resuming:
            applied = ApplyReport()  # nothing to write, so nothing to journal or stage
        else:
            applied = self._apply_journaled(intent, plan, progress, resuming=resuming)
        discarded: tuple[str, ...] = ()
        if intent.discard_later:
            later = [r.id for r in self.catalog.later_than(target) if r.id != intent.pre_restore]
            if later:
                self._drop(later, reason="discard-later")
            discarded = tuple(later)
        report = self._report(target, plan, applied, intent.pre_restore, discarded, False, started)
        event = None
        if intent.record_event:
            event = Event("checkpoint:restore", self._clock(), self.session, {
                "id": target.id, "written": report.written, "deleted": report.deleted,
                "dirs_created": report.dirs_created, "dirs_removed": report.dirs_removed,
                "unchanged": report.unchanged, "bytes_written": report.bytes_written,
                "pre_restore": report.pre_restore, "discarded": list(discarded),
                "duration_ms": report.duration_ms, "conflicts": len(report.conflicts),
            })
        self.catalog.end_restore(self._root_key, event=event)
        if event is not None:
            self._emit(event)
        if applied.conflicts:
            error = RestoreIncomplete(target.id, describe_conflicts(applied.conflicts))
            error.report = report  # type: ignore[attr-defined]
            raise error
        return report

    def _apply_journaled(self, intent: RestoreIntent, plan: RestorePlan,
                         progress: ProgressFn | None, *, resuming: bool) -> ApplyReport:
        """Stage and apply `plan`; the caller has journaled `intent`."""
        from ckpt.checkpoints.restore import (  # noqa: PLC0415 (see the imports)
            apply_plan,
            remove_staging,
            remove_staging_soon,
            stage_files,
        )

        try:
            with _naming(intent.staging):
                staged = stage_files(plan, self.objects, intent.staging)
        except BaseException as exc:
            self._abandon_staging_failure(exc, resuming=resuming)
            raise
        try:
            applied = apply_plan(self._root_b, plan, staged, staging=intent.staging,
                                 progress=progress)
        except BaseException:
            remove_staging(intent.staging)
            raise
        # Bookkeeping (see `_writing`): the cache learns what was written while what the apply
        # replaced is freed.
        staging_removed = remove_staging_soon(intent.staging)
        update = partial(self._update_cache, applied, intent.tree, self._current_cache())
        self._bulky = self._bulky or (
            len(applied.written_files) + len(applied.removed_paths) > BEHIND_MAX_FILES)
        if not self._bulky:
            self._jobs += [update, staging_removed]
            return applied
        try:  # before the journal is closed, so a failure leaves it for the next call
            update()
        finally:
            staging_removed()
        return applied

    def _report(self, target: CheckpointRecord, plan: RestorePlan, applied: ApplyReport,
                pre: str | None, discarded: tuple[str, ...], dry_run: bool, started: float) -> RestoreReport:
        from ckpt.checkpoints.reports import RestoreReport  # noqa: PLC0415 (see the imports)

        if dry_run:
            written = len(plan.writes) + len(plan.chmods)
            deleted = sum(1 for r in plan.removals + plan.pre_removals if r.kind is not EntryKind.TREE)
            return RestoreReport(target.id, written, deleted, len(plan.mkdirs),
                                 sum(1 for r in plan.removals + plan.pre_removals if r.kind is EntryKind.TREE),
                                 plan.unchanged, plan.bytes_to_write, None, (), True, plan,
                                 duration_ms=_ms(time.monotonic() - started))
        return RestoreReport(target.id, applied.written + applied.chmods, applied.deleted,
                             applied.dirs_created, applied.dirs_removed, plan.unchanged,
                             applied.bytes_written, pre, discarded, False, plan,
                             tuple(applied.conflicts), _ms(time.monotonic() - started))

    def _update_cache(self, applied: ApplyReport, target: ObjectId, cache: StatCache) -> None:
        """Teach `cache` what was written, so the next snapshot does not read it, and which
        directories now hold `target`'s trees, so that it does not rebuild them; save it."""
        if not applied.written_files and not applied.removed_paths:
            return
        record_restore(cache, self.objects.get_tree, target,
                       [(w.path, int(w.kind), w.stat, w.ref) for w in applied.written_files],
                       applied.removed_paths, applied.dir_stats, time.time_ns())
        self._save_cache(cache)

    def _pending_intent(self) -> RestoreIntent | None:
        """The journal of a killed restore of this root, its staging path checked: completing
        deletes that directory, so a damaged or crafted journal must not name anything else
        than what `_staging_dir` makes (CatalogCorrupt naming the journal)."""
        data = self.catalog.restore_journal(self._root_key)
        where = self.catalog.path if data is not None else self._journal_path
        intent = (decode_intent(data, where, self._root_key) if data is not None
                  else read_intent(where))
        if intent is None:
            return None
        parent, _, name = intent.staging.rpartition(b"/")
        token = name.rpartition(b"-")[2]
        ours = (parent == os.fsencode(self._root_dir)
                and name == os.fsencode(STAGING_PREFIX) + token) or (
            parent == self._root_b and name == b".ckpt-staging-" + token)
        if not (ours and len(token) == 12 and all(c in b"0123456789abcdef" for c in token)):
            raise CatalogCorrupt(where, f"restore journal of {self.root} names a staging "
                                 f"directory ckpt does not make: {os.fsdecode(intent.staging)}")
        return intent

    def _complete_interrupted_restore(self) -> RestoreReport | None:
        """Finish a killed restore of this root, if any, its bookkeeping included: the call
        that follows reads the stat cache it saves."""
        intent = self._pending_intent()
        self._remove_leftover_staging()
        if intent is None:
            return None
        report = self._resume(intent)
        self._settle_now(quiet=False)
        return report

    def _remove_leftover_staging(self) -> None:
        """Remove staging directories that no journal names: a restore's journal is closed
        before what it replaced is freed (see `_writing`), so a kill in between, or a disk
        error while freeing, leaves one. The root lock is held: no restore of this root is
        running. (One in the workspace, for a store on another file system, is left.)"""
        try:
            names = [n for n in os.listdir(self._root_dir) if n.startswith(STAGING_PREFIX)]
        except OSError:
            return
        if names:
            from ckpt.checkpoints.restore import remove_staging  # noqa: PLC0415 (see the imports)

            for name in names:
                remove_staging(os.fsencode(os.path.join(self._root_dir, name)))

    def _resume(self, intent: RestoreIntent) -> RestoreReport | None:
        if os.path.lexists(self._journal_path):  # an older ckpt's journal file: carried over
            self.catalog.journal_restore(self._root_key, encode_intent(intent))
            clear_intent(self._journal_path)
        from ckpt.checkpoints.restore import remove_staging  # noqa: PLC0415 (see the imports)

        remove_staging(intent.staging)  # (in the workspace, for a store on another file system)
        try:
            target = self.get(intent.checkpoint)
        except UnknownCheckpoint:
            target = None
        covered = intent.covered if intent.scope == "paths" else None
        plan = self._plan(intent, self._scan(covered, None).tree)
        if target is None:  # pruned meanwhile: finish the tree, skip the bookkeeping
            self._apply_journaled(intent, plan, None, resuming=True)
            self.catalog.end_restore(self._root_key)
            return None
        return self._execute(intent, target, plan, time.monotonic(), None, resuming=True)

    def _abandon_staging_failure(self, exc: BaseException, *, resuming: bool) -> None:
        """Staging failed, so nothing of this attempt was applied. A new restore is forgotten
        (the tree is untouched). One being completed left the tree half restored: its journal
        stays through a full disk, an IO error or Ctrl-C, so the next command finishes it once
        the cause is gone; only a store that cannot give the content (retrying could never
        succeed) ends it, rather than jam every command."""
        if not resuming or isinstance(exc, (ObjstoreError, CheckpointError)):
            self.catalog.end_restore(self._root_key)

    def recover(self) -> RestoreReport | None:
        """Complete a restore that was killed; None when there was nothing to complete."""
        self.settle()
        with RootLock(os.path.join(self.store_dir, "gc.lock"), timeout=self.config.lock_timeout,
                      shared=True, purpose="recover"):
            with RootLock(os.path.join(self._root_dir, "lock"), timeout=self.config.lock_timeout,
                          purpose="recover"):
                return self._complete_interrupted_restore()

    # -- prune, gc, fsck, stats ------------------------------------------------------------

    def _drop(self, ids: Sequence[str], *, reason: str) -> None:
        event = Event("checkpoint:prune", self._clock(), self.session,
                      {"removed": list(ids), "reason": reason})
        self.catalog.delete_checkpoints(ids, event=event)
        self._emit(event)

    def prune(self, *, reason: str | None = None, turn_id: str | None = None,
              keep_latest: int | None = None, older_than: timedelta | None = None,
              dry_run: bool = False, collect: bool = True) -> PruneReport:
        from ckpt.checkpoints.reports import PruneReport  # noqa: PLC0415 (see the imports)

        victims = select_prunable(self.history(), now=self._clock(), reason=reason,
                                  turn_id=turn_id, keep_latest=keep_latest, older_than=older_than)
        ids = tuple(r.id for r in victims)
        if dry_run:
            return PruneReport(ids, 0, 0, True)
        if ids:
            event = Event("checkpoint:prune", self._clock(), self.session, {
                "removed": list(ids), "reason": reason, "turn_id": turn_id,
                "keep_latest": keep_latest,
                "older_than_s": None if older_than is None else older_than.total_seconds()})
            self.catalog.delete_checkpoints(ids, event=event)
            self._emit(event)
        report = self.gc() if collect else None
        return PruneReport(ids, report.objects_removed if report else 0,
                           report.bytes_freed if report else 0)

    def gc(self, *, dry_run: bool = False, grace_seconds: float | None = None) -> GcReport:
        self.settle()
        with RootLock(os.path.join(self.store_dir, "gc.lock"), timeout=max(self.config.lock_timeout, 60.0),
                      purpose="gc"):
            grace = self.config.gc_grace_seconds if grace_seconds is None else grace_seconds
            # Targets of killed restores not yet completed are live, even if their record was
            # pruned meanwhile, or completing them would fail for good.
            journaled = self._journaled_intents()
            roots = self.catalog.tree_roots() + [intent.tree for intent in journaled]
            from ckpt.objstore.gc import collect_garbage  # noqa: PLC0415 (off the start-up path)

            report = collect_garbage(self.objects, roots, grace_seconds=grace,
                                     now=time.time(), dry_run=dry_run)
            if report.objects_removed and not dry_run:
                self._bump_gc_generation()
            if not dry_run:
                swept = self._sweep_temporaries(time.time() - grace,
                                                {intent.staging for intent in journaled})
                report = dataclasses.replace(
                    report, temporaries_removed=report.temporaries_removed + swept)
            return report

    def _sweep_temporaries(self, older_than: float, journaled: set[bytes]) -> int:
        """Remove what a kill between writing and renaming left of the store's own small files
        (stat caches, journals, the gc generation), and the staging directories that no
        journal names (not in `journaled`: a kill after a restore closed its journal, on a
        root that no call has used since: the next write call on a root removes its own).
        Nobody writes them while gc holds its exclusive lock, so the age limit is only a
        second guard."""
        from ckpt.checkpoints.restore import remove_staging  # noqa: PLC0415 (see the imports)

        store = glob.escape(self.store_dir)
        swept = sum(remove_if_older(path, older_than)
                    for path in (glob.glob(os.path.join(store, "roots", "*", "*.tmp-*"))
                                 + glob.glob(os.path.join(store, "gc-generation.tmp-*"))))
        for path in glob.glob(os.path.join(store, "roots", "*", STAGING_PREFIX + "*")):
            staging = os.fsencode(path)
            try:
                if staging in journaled or os.stat(staging).st_mtime >= older_than:
                    continue
            except FileNotFoundError:
                continue
            remove_staging(staging)
            swept += 1
        return swept

    def _journaled_intents(self) -> builtins.list[RestoreIntent]:
        """The journals of killed restores (any root of this store) not yet completed. A
        damaged journal raises: gc must not guess what is still needed."""
        intents = [decode_intent(data, self.catalog.path, root)
                   for root, data in self.catalog.restore_journals()]
        for path in glob.glob(os.path.join(glob.escape(self.store_dir), "roots", "*", "journal")):
            intent = read_intent(path)
            if intent is not None:
                intents.append(intent)
        return intents

    def _bump_gc_generation(self) -> None:
        path = os.path.join(self.store_dir, "gc-generation")
        temp = f"{path}.tmp-{os.urandom(4).hex()}"
        with open(temp, "w", encoding="ascii") as out:
            out.write(f"{self._gc_generation() + 1}\n")
        os.replace(temp, path)

    def fsck(self, *, full: bool = False) -> CheckReport:
        self.settle()
        records = self.catalog.history(session=None)
        from ckpt.checkpoints.reports import CheckReport  # noqa: PLC0415 (see the imports)
        from ckpt.objstore.fsck import check_store  # noqa: PLC0415 (off the start-up path)

        report = check_store(self.objects, [r.tree for r in records], full=full)
        damaged = tuple(r.id for r in records if r.tree in report.damaged_roots)
        return CheckReport(report, damaged, *self._check_root_files())

    def _check_root_files(self) -> tuple[tuple[tuple[str, str], ...], ...]:
        """Damaged restore journals (in the catalog, or an older ckpt's files) and stat caches
        of every root of the store: (journals, caches), each as (where, what). A stat cache is
        written without fsync (a crash may tear it): damage there is a note."""
        found, caches = [], []
        row_hint = "delete its row from the catalog's restores table to abandon the restore"
        file_hint = "delete it to abandon the interrupted restore"

        def check(where: str, hint: str, read: Callable[[], object]) -> None:
            try:
                read()
            except CatalogCorrupt as exc:
                found.append((where, f"{exc.reason} ({hint})"))

        rows = dict(self.catalog.restore_journals())
        # This root's journal (the catalog's, else its file) also gets the staging check that
        # completing it would make.
        if self._root_key in rows:
            check(self.catalog.path, row_hint, self._pending_intent)
        else:
            check(self._journal_path, file_hint, self._pending_intent)
        for root, data in rows.items():
            if root != self._root_key:
                check(self.catalog.path, row_hint,
                      partial(decode_intent, data, self.catalog.path, root))
        for root_dir in sorted(glob.glob(os.path.join(glob.escape(self.store_dir), "roots", "*"))):
            journal = os.path.join(root_dir, "journal")
            if root_dir != self._root_dir:
                check(journal, file_hint, partial(read_intent, journal))
            cache = os.path.join(root_dir, "statcache")
            problem = check_stat_cache(cache)
            if problem is not None:
                caches.append((cache, f"{problem} (only a cache: the next checkpoint rebuilds it)"))
        return tuple(found), tuple(caches)

    def stats(self) -> StoreStats:
        from ckpt.checkpoints.reports import StoreStats  # noqa: PLC0415 (see the imports)

        backend = self.objects.backend
        count = stored = 0
        for oid in backend.iter_ids():
            count += 1
            stored += backend.stat(oid).size
        records = self.catalog.history(session=None)
        return StoreStats(count, stored, sum(r.stats.bytes for r in records), len(records),
                          self.catalog.session_counts())

