"""`Checkpoints`: the Python API of ckpt (ARCHITECTURE.md), a facade over its parts.

It opens the store and the catalog, wraps every write call in a `LockedRoot` (writing.py: the
locks, the deferred bookkeeping and its thread; a killed restore is completed first), and
hands the work to `Workspace` (paths, events, snapshots), `Restorer` (restore orchestration
and journal recovery) and `Maintenance` (prune, gc, fsck, stats). The order of durable steps is
theirs: objects synced, then the record committed, then the checkpoint reported. It never
prints, never exits and changes no process-global state.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import os
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, BinaryIO, Self

from ckpt.checkpoints.config import StoreConfig, read_config, write_config
from ckpt.checkpoints.diff.trees import Change, diff_trees, iter_leaves, with_not_captured
from ckpt.checkpoints.errors import NotInitialized, PathNotInCheckpoint, UnsafePath, naming
from ckpt.checkpoints.history.catalog import Catalog
from ckpt.checkpoints.identity import (
    MARKER,
    Binding,
    WorkspaceRefused,
    bind_root,
    check_layout,
    is_store_dir,
    locate_store,
    make_link,
    mark_ignored,
    new_identity,
    outside_store_dir,
    read_marker,
)
from ckpt.checkpoints.lock import RootLock
from ckpt.checkpoints.model import CheckpointRecord, Event
from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.remote.calls import RemoteCalls
from ckpt.checkpoints.snapshot.scan import ProgressFn
from ckpt.checkpoints.workspace import Clock, Listener, Workspace
from ckpt.checkpoints.writing import LockedRoot
from ckpt.objstore import EntryKind, ObjectStore, StoreOptions, TreeEntry
from ckpt.objstore.errors import StoreNotFound

# The restore side (plan, restore, reports) is imported where it is used: a `ckpt create` is
# one process start, and building those modules' classes would be paid for nothing.
if TYPE_CHECKING:
    from ckpt.checkpoints.diff.patch import FilePatch
    from ckpt.checkpoints.history.pathlog import PathChange
    from ckpt.checkpoints.maintenance import Maintenance
    from ckpt.checkpoints.reports import (
        CheckReport,
        FileEntry,
        ForgetReport,
        GcReport,
        PruneReport,
        StoreStats,
    )
    from ckpt.checkpoints.restore.reports import AbandonedRestore, RestoreReport
    from ckpt.checkpoints.restore.restorer import RestoreOptions, Restorer
    from ckpt.checkpoints.snapshot.watch import WatchState

STORE_NAME = ".ckpt"


def preload() -> None:
    """Import now what the service imports only where it is first used: the restore side
    and the ignore rules (pathspec). For a long-lived process, such as an agent harness, that
    would rather pay once at start than at its first restore or first scan without a stat
    cache. The CLI never calls it: each command is one process start, and most never need
    those modules."""
    for name in ("snapshot.ignore", "restore.plan", "reports", "restore.apply",
                 "restore.restorer"):
        importlib.import_module(f"ckpt.checkpoints.{name}")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Checkpoints(RemoteCalls):
    """Checkpoints of one workspace root in one store, for one session."""

    def __init__(self, root: str, store_dir: str, session: str, *, clock: Clock = _utc_now,
                 rng: random.Random | None = None, watch: bool = False) -> None:
        config = read_config(store_dir)
        objects = ObjectStore.open(store_dir, StoreOptions(
            compression_level=config.compression_level, fsync=config.fsync,  # type: ignore[arg-type]
            dictionaries=config.dictionaries, deltas=config.deltas,
            delta_chain=config.delta_chain, block_size=config.block_size))
        catalog = Catalog.open(os.path.join(store_dir, "catalog.db"), fsync=config.fsync)  # type: ignore[arg-type]
        try:
            self.binding = self._bind(root, store_dir, session, config, catalog, clock)
        except BaseException:
            catalog.close()
            objects.close()
            raise
        self._ws = Workspace(root, store_dir, session, config, objects, catalog, clock=clock,
                             rng=rng or random.Random(), key=self.binding.key)
        if watch:
            self._start_watch()
        self._last_write: LockedRoot | None = None  # its bookkeeping may still be running

    @staticmethod
    def _bind(root: str, store_dir: str, session: str, config: StoreConfig, catalog: Catalog,
              clock: Clock) -> Binding:
        """This root's identity and place in the store, its history re-bound if it moved
        (identity.py); the store's `.gitignore` written if an older ckpt made it."""
        try:
            mark_ignored(store_dir)
        except OSError:  # a read-only store is still readable
            pass

        def moved(identity: str, old: str, new: str, count: int) -> Event:
            return Event("workspace:moved", clock(), session,
                         {"workspace": identity, "from": old, "to": new, "checkpoints": count})

        return bind_root(root, store_dir, catalog, moved_event=moved, lock=lambda root_dir: RootLock(
            os.path.join(root_dir, "lock"), timeout=config.lock_timeout, purpose="rebind"))

    @property
    def root(self) -> str:
        return self._ws.root

    @property
    def store_dir(self) -> str:
        return self._ws.store_dir

    @property
    def session(self) -> str:
        return self._ws.session

    @property
    def objects(self) -> ObjectStore:
        return self._ws.objects

    @property
    def catalog(self) -> Catalog:
        return self._ws.catalog

    @property
    def config(self) -> StoreConfig:
        return self._ws.config

    @config.setter
    def config(self, value: StoreConfig) -> None:
        # Holds until config.toml changes (then the file is read again, as for every open).
        self._ws.adopt_config(value)

    # Restoring and maintenance are imported on first use: a snapshot needs neither.
    @cached_property
    def _restorer(self) -> Restorer:
        from ckpt.checkpoints.restore.restorer import Restorer  # noqa: PLC0415 (see above)

        return Restorer(self._ws)

    @cached_property
    def _maintenance(self) -> Maintenance:
        from ckpt.checkpoints.maintenance import Maintenance  # noqa: PLC0415 (see above)

        return Maintenance(self._ws, self._restorer.pending_intent)

    # -- opening and closing -------------------------------------------------------------

    @staticmethod
    def _locate(root: str | os.PathLike[str], store: str | os.PathLike[str] | None) -> tuple[str, str]:
        """The root and store as real paths (a store reached through a symlink is known for
        where it is), the store found through the root's marker when none is named; refuses
        a layout whose checkpoints would capture the store (identity.check_layout)."""
        root_abs = os.path.realpath(os.fspath(root))
        store_abs = os.path.realpath(os.fspath(store)) if store is not None else locate_store(root_abs)
        check_layout(root_abs, store_abs)
        return root_abs, store_abs

    @classmethod
    def init(cls, root: str | os.PathLike[str], store: str | os.PathLike[str] | None = None,
             session: str = "default", *, store_outside: bool = False,
             **kwargs: Any) -> Checkpoints:
        """Create the store (idempotent) and open it. `store_outside`: keep the store in the
        per-user data directory, keyed by the workspace's identity, linked from `<root>/.ckpt`
        so that later opens find it (`identity.outside_store_dir`)."""
        if store_outside:
            if store is not None:
                raise ValueError("pass either store or store_outside, not both")
            store = cls._outside_store(os.path.realpath(os.fspath(root)))
        root_abs, store_abs = cls._locate(root, store)
        if not os.path.isdir(root_abs):
            raise NotInitialized(root_abs, store_abs)
        if (store is None and store_abs != os.path.join(root_abs, MARKER)
                and not is_store_dir(store_abs)):
            # .ckpt is a symlink, or a link, to a directory that is no store: whoever planted
            # it must not get a store made wherever they point (a store is made where named).
            raise WorkspaceRefused(root_abs, store_abs, f"{MARKER} points at a directory that "
                                   "is not a ckpt store; pass --store DIR to make one there")
        ObjectStore.init(store_abs).close()
        if not os.path.exists(os.path.join(store_abs, "config.toml")):
            write_config(store_abs, StoreConfig())
        from ckpt.checkpoints.reserve import replenish  # noqa: PLC0415 (only init and gc need it)

        replenish(store_abs)  # room for prune and gc on a full disk
        return cls(root_abs, store_abs, session, **kwargs)

    @staticmethod
    def _outside_store(root: str) -> str:
        """The store outside the workspace `root`: the one its link names, else a new one."""
        marker = read_marker(root)
        if marker is not None:
            if marker.is_store:
                raise WorkspaceRefused(root, marker.store, "the workspace already has its "
                                       "store inside it; open it without --store-outside")
            return marker.store
        if not os.path.isdir(root):
            raise NotInitialized(root, None)
        identity = new_identity()
        store = outside_store_dir(identity)
        os.makedirs(os.path.dirname(store), mode=0o700, exist_ok=True)
        ObjectStore.init(store).close()
        try:
            make_link(root, identity, store)
        except FileExistsError:  # another init linked it first: use the store it named
            marker = read_marker(root)
            if marker is None:
                raise
            return marker.store
        return store

    @classmethod
    def open(cls, root: str | os.PathLike[str], store: str | os.PathLike[str] | None = None,
             session: str = "default", *, watch: bool = False, **kwargs: Any) -> Checkpoints:
        """Open the checkpoints of `root`. `watch`: keep a file watcher on the root (Linux
        inotify, watch.py) so that a snapshot lists only the directories that changed; it
        falls back to a full walk wherever it cannot vouch for a directory."""
        root_abs, store_abs = cls._locate(root, store)
        try:
            ObjectStore.open(store_abs)
        except StoreNotFound:
            raise NotInitialized(root_abs, store_abs) from None
        return cls(root_abs, store_abs, session, watch=watch, **kwargs)

    @property
    def workspace_id(self) -> str | None:
        """This workspace's identity (None: a root ckpt could not give one, keyed by path)."""
        return self.binding.identity

    @property
    def moved_from(self) -> str | None:
        """The path this workspace was re-bound from when it was opened (it had moved)."""
        return self.binding.moved_from

    @property
    def copied_from(self) -> str | None:
        """The workspace this one was found to be a copy of when opened (it got an identity
        and a history of its own)."""
        return self.binding.copied_from

    def close(self) -> None:
        try:
            self.settle()
        finally:
            try:
                self._stop_watch()
            finally:
                self._close_stores()

    def _close_stores(self) -> None:
        try:
            with naming(os.path.join(self.store_dir, "objects")):
                self.objects.close()  # publishes what was written: can fail like a put
        finally:
            self.catalog.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the file watcher ----------------------------------------------------------------

    def _start_watch(self) -> None:
        from ckpt.checkpoints.snapshot.watch import WatchHandle  # noqa: PLC0415 (only watch=True needs it)

        self._ws.watch = WatchHandle(self._ws.root_b, self._ws.cache_path)

    def _stop_watch(self) -> None:
        handle, self._ws.watch = self._ws.watch, None
        if handle is not None:
            handle.close()

    def watch_state(self) -> WatchState | None:
        """What the file watcher reports (None when not opened with watch=True)."""
        handle = self._ws.watch
        return None if handle is None else handle.state()

    def verify_watch(self) -> tuple[str, ...]:
        """Under the root lock: a watched scan and a full walk against the same stat cache,
        nothing committed. Returns the paths where they disagree (empty: they agree; each is
        logged at ERROR and the next snapshot walks everything). () when not watching."""
        if self._ws.watch is None:
            return ()
        with self._writing("verify") as locked:
            paths = self._ws.verify_watch(locked)
        return tuple(os.fsdecode(path) for path in paths)

    # -- write calls ---------------------------------------------------------------------

    @contextmanager
    def _writing(self, purpose: str) -> Iterator[LockedRoot]:
        """The locks of a write call (writing.py), after the last call's bookkeeping; a killed
        restore is completed first. The call's own bookkeeping runs behind it."""
        self.settle()
        locked = self._ws.lock_root(purpose)
        with locked:
            if self._ws.restore_left_over():
                self._restorer.complete_interrupted(locked)
            yield locked
        self._last_write = locked

    def settle(self) -> None:
        """Wait until the bookkeeping of the last call is done: its stat cache saved, what a
        restore replaced freed (the next call, and `close`, wait for it anyway). Raises what
        failed in it, such as a cache that could not be saved, once."""
        last, self._last_write = self._last_write, None
        if last is not None:
            last.wait()

    def create(self, *, label: str | None = None, reason: str | None = None,
               turn_id: str | None = None, message_id: str | None = None,
               tool_call_id: str | None = None, summary: str | None = None,
               metadata: Mapping[str, Any] | None = None, paths: Sequence[str | bytes] | None = None,
               progress: ProgressFn | None = None, keep: int | None = None,
               cwd: str | None = None) -> CheckpointRecord:
        """Take a checkpoint of the workspace (or its tracked paths and `paths`). `keep=N` caps
        the session's checkpoints on this root at N after it (the oldest go; 0 = no cap for this
        call); None applies `config.retention_cap`. A relative path in `paths` is relative to
        the root, or to `cwd` when given (the CLI's current directory)."""
        if keep is not None and keep < 0:
            raise ValueError("keep must be >= 0")
        extra = [self._ws.user_rel(p, cwd) for p in paths or ()]
        with self._writing("create") as locked:
            tracked = list(self.tracked())
            covered = sorted(set(tracked + extra)) if tracked or extra else None
            return self._ws.snapshot(locked, covered, progress, label=label, reason=reason,
                                     turn_id=turn_id, message_id=message_id,
                                     tool_call_id=tool_call_id, summary=summary,
                                     metadata=dict(metadata or {}), keep=keep)

    def restore(self, ref: str, options: RestoreOptions | None = None, *,
                progress: ProgressFn | None = None, cwd: str | None = None) -> RestoreReport:
        """Make the workspace match checkpoint `ref`, as `options` say (the default: the whole
        scope, saving the current state first as the undo, recording the event). A relative
        path in `options.paths` is relative to the root, or to `cwd` when given."""
        if options is None:
            from ckpt.checkpoints.restore.restorer import RestoreOptions  # noqa: PLC0415 (see above)

            options = RestoreOptions()
        if cwd is not None and options.paths:
            options = dataclasses.replace(options, paths=tuple(
                os.path.join(cwd, os.fsdecode(p)) for p in options.paths))
        options = self._from_remote(ref, options)
        target, only = self._restorer.resolve(ref, options)
        started = time.monotonic()
        if options.target is not None:
            from ckpt.checkpoints.restore.restore_into import restore_into  # noqa: PLC0415 (see above)

            self.settle()
            dest = os.path.join(cwd, options.target) if cwd is not None else options.target
            with self._hydrating(target) as fetch_blobs:
                return restore_into(self._ws, target, only, os.path.abspath(dest),
                                    dry_run=options.dry_run, record_event=options.record_event,
                                    progress=progress, started=started,
                                    fetch_blobs=fetch_blobs)
        with self._writing("restore") as locked:
            return self._restorer.restore(locked, target, only, options, progress, started)

    def undo(self, *, dry_run: bool = False, progress: ProgressFn | None = None) -> RestoreReport:
        """Undo the last restore of this root: restore the newest pre-restore checkpoint of
        the root (any session) that no undo restored yet, saving the current state first as
        a pre-restore checkpoint whose metadata `undo_of` names it. Restoring that save (the
        report's `pre_restore`) redoes; another undo walks further back. A restore of some
        paths is undone for those paths only. NothingToUndo when no restore is left."""
        from ckpt.checkpoints.restore.restorer import RestoreOptions, restored_paths  # noqa: PLC0415 (see above)

        started = time.monotonic()
        with self._writing("undo") as locked:
            pre = self._local(self._restorer.undo_candidate())
            options = RestoreOptions(dry_run=dry_run, paths=restored_paths(pre),
                                     save_metadata={"undo_of": pre.id})
            target, only = self._restorer.resolve(pre.id, options)
            return self._restorer.restore(locked, target, only, options, progress, started,
                                          undid=pre.id)

    def recover(self) -> RestoreReport | None:
        """Complete a restore that was killed; None when there was nothing to complete."""
        self.settle()
        locked = self._ws.lock_root("recover")
        with locked:
            report = self._restorer.complete_interrupted(locked)
        self._last_write = locked
        return report

    def abandon_restore(self) -> AbandonedRestore | None:
        """Clear the journal of a killed restore of this root without completing it (`ckpt
        recover --abandon`): for one that can never complete, such as one whose target tree
        is gone from the store. Says what that loses; leaves the workspace as it is. None
        when there was no journal."""
        self.settle()
        locked = self._ws.lock_root("recover")
        with locked:
            report = self._restorer.abandon(locked)
        self._last_write = locked
        return report

    # -- events and tracking -------------------------------------------------------------

    def on(self, event_type: str, callback: Listener) -> None:
        self._ws.listeners.setdefault(event_type, []).append(callback)

    def events(self, *, type: str | None = None, limit: int | None = None,  # noqa: A002
               all_sessions: bool = False) -> builtins.list[Event]:
        return self.catalog.events(session=None if all_sessions else self.session, type=type, limit=limit)

    def events_after(self, cursor: int, *, type: str | None = None,  # noqa: A002
                     limit: int | None = None,
                     all_sessions: bool = False) -> tuple[builtins.list[Event], int]:
        """The events recorded after `cursor` (0: from the first), in the order they were
        recorded (`limit`: only the newest), and the cursor of the next call: following the
        events (`ckpt events --follow`) is calling this again and again, each event told
        once."""
        return self.catalog.events_after(cursor, session=None if all_sessions else self.session,
                                         type=type, limit=limit)

    def tracked(self) -> tuple[RelPath, ...]:
        return self.catalog.tracked(self.session)

    def track(self, *paths: str | bytes, cwd: str | None = None,
              baseline: bool = True) -> tuple[RelPath, ...]:
        """Add `paths` to this session's tracked paths. A relative path is relative to the
        root, or to `cwd` when given (the CLI passes its current directory).

        A harness tracks a path right before its agent writes it, so the path's state now is
        its state at every earlier checkpoint. With `baseline` (the default), when this adds a
        path no tracked path covered yet and the session already has a checkpoint on this
        root, a checkpoint of reason `track` records that state: a later restore to an earlier
        checkpoint then puts the path back as it was (docs/DESIGN.md, "Snapshot scope")."""
        before = set(self.tracked())
        new = {self._ws.user_rel(p, cwd) for p in paths}
        self.catalog.set_tracked(self.session, sorted(before | new))
        covered = [p for p in new
                   if not any(p == t or p.startswith(t + b"/") for t in before)]
        if baseline and covered and self.latest() is not None:
            self.create(reason="track", label=f"track {len(covered)} path(s)")
        return self.tracked()

    def untrack(self, *paths: str | bytes, cwd: str | None = None) -> tuple[RelPath, ...]:
        """Remove `paths` from the tracked paths (relative as in `track`)."""
        gone = {self._ws.user_rel(p, cwd) for p in paths}
        self.catalog.set_tracked(self.session, sorted(set(self.tracked()) - gone))
        return self.tracked()

    # -- queries -------------------------------------------------------------------------

    def resolve(self, ref: str) -> CheckpointRecord:
        """The checkpoint `ref` names: `latest`, `latest~N`, `ID~N`, an id or a unique
        prefix of one (refs.py; `~N`: N steps back in the session's history on the root).
        UnknownCheckpoint (saying how far the history goes) or AmbiguousCheckpoint."""
        from ckpt.checkpoints.history.refs import resolve_ref  # noqa: PLC0415 (only here)

        return resolve_ref(self.catalog, ref, session=self.session, root=self.root)

    def get(self, ref: str) -> CheckpointRecord:
        return self.resolve(ref)

    def history(self, *, turn_id: str | None = None, reason: str | None = None,
                all_sessions: bool = False, all_roots: bool = False,
                tool_call_id: str | None = None) -> builtins.list[CheckpointRecord]:
        """The session's checkpoints on this root (`all_sessions`: every session's on this
        root; `all_roots`: on every root of the store too), oldest first."""
        # A store may be shared by several roots: a timeline is one root's checkpoints.
        return self.catalog.history(session=None if all_sessions else self.session,
                                    turn_id=turn_id, reason=reason,
                                    root=None if all_roots else self.root,
                                    tool_call_id=tool_call_id)

    def list(self) -> builtins.list[CheckpointRecord]:
        return self.history()

    def latest(self, *, turn_id: str | None = None, reason: str | None = None) -> CheckpointRecord | None:
        return self.catalog.latest(session=self.session, turn_id=turn_id, reason=reason,
                                   root=self.root)

    def files(self, ref: str) -> builtins.list[FileEntry]:
        from ckpt.checkpoints.reports import FileEntry  # noqa: PLC0415 (lazy: see the module)

        record = self._local(self.get(ref))
        return [FileEntry(path, e.kind, e.size, e.oid, e.target)
                for path, e in iter_leaves(self.objects.get_tree, record.tree, None)]

    def absent(self, ref: str) -> builtins.list[RelPath]:
        """The paths checkpoint `ref` recorded as "did not exist" (tracked paths missing when
        it was taken; restoring it deletes them), in path order. Read-only."""
        from ckpt.checkpoints.paths import join_rel  # noqa: PLC0415 (only here)

        def walk(oid: bytes, prefix: RelPath | None) -> Iterator[RelPath]:
            for entry in self.objects.get_tree(oid).entries:  # type: ignore[arg-type]
                path = join_rel(prefix, entry.name)
                if entry.kind is EntryKind.TOMBSTONE:
                    yield path
                elif entry.kind is EntryKind.TREE and entry.oid is not None:
                    yield from walk(entry.oid, path)
        return builtins.list(walk(self.get(ref).tree, None))

    def path_log(self, path: str | bytes, *, all_sessions: bool = False,
                 cwd: str | None = None) -> builtins.list[PathChange]:
        """The checkpoints of the session on this root (`all_sessions`: of every session),
        oldest first, where the entry at `path` differs from the checkpoint before: added,
        modified, deleted or changed in type (a directory: anything below it). Relative to
        the root, or to `cwd` when given. Read-only."""
        from ckpt.checkpoints.history.pathlog import path_changes  # noqa: PLC0415 (only here)

        rel = self._ws.user_rel(path, cwd)
        hollow = self._hollow()  # pulled, objects on the remote: not read for a log
        history = [r for r in self.history(all_sessions=all_sessions) if r.id not in hollow]
        return path_changes(self.objects.get_tree, history, rel)

    def changed(self, record: CheckpointRecord) -> int | None:
        """How many files `record` added, deleted or modified since its parent (the session's
        checkpoint before it), within its tracked paths for a `paths` scope; every file for a
        first checkpoint; None when the parent was pruned. Read-only: unlike
        `record.stats.hashed` (files read), a `diff` or a restore in between changes nothing."""
        from ckpt.checkpoints.errors import UnknownCheckpoint  # noqa: PLC0415 (only here)

        if record.parent is None:
            return record.stats.files
        try:
            parent = self.get(record.parent)
        except UnknownCheckpoint:
            return None
        if self._hollow() & {record.id, parent.id}:
            return None  # its objects are on a remote: not fetched just to count
        changes = diff_trees(self.objects.get_tree, parent.tree, record.tree)
        if record.scope == "paths":
            covered = record.paths
            changes = [c for c in changes
                       if any(c.path == p or c.path.startswith(p + b"/") for p in covered)]
        return len(changes)

    def restore_pending(self) -> str | None:
        """The id a killed restore of this root was restoring, while its journal is open;
        None when none is pending. Read-only: the next `create`, `restore`, `diff` against the
        workspace or `recover` completes it."""
        if not self._ws.restore_left_over():
            return None
        intent = self._restorer.pending_intent()
        return None if intent is None else intent.checkpoint

    def diff(self, ref: str, ref2: str | None = None) -> builtins.list[Change]:
        """What changed from checkpoint `ref` to the workspace (or to checkpoint `ref2`): its
        leaves added, deleted, modified or changed in type, and as "S" (not captured, with the
        reason) each path the newer state skipped that `ref` did not."""
        record = self._local(self.get(ref))
        if ref2 is not None:
            other = self._local(self.get(ref2))
            return with_not_captured(diff_trees(self.objects.get_tree, record.tree, other.tree),
                                     record.skipped, other.skipped)
        with self._writing("diff") as locked:
            current = self._ws.scan(locked, record.paths if record.scope == "paths" else None, None)
        return with_not_captured(diff_trees(self.objects.get_tree, record.tree, current.tree),
                                 record.skipped, current.skipped)

    def patch(self, ref: str, ref2: str | None = None, *, paths: Sequence[str] | None = None,
              context: int = 3) -> builtins.list[FilePatch]:
        """`diff(ref, ref2)` as git-format patches (patch.py), one per changed path, each
        changed path within `paths` (relative to the root) when given. Both sides come from
        the store: the scan of the workspace stores its new versions."""
        from ckpt.checkpoints.diff.patch import render  # noqa: PLC0415 (only here)

        changes = self.diff(ref, ref2)
        if paths is not None:
            wanted = [self._ws.rel(p) for p in paths]
            changes = [c for c in changes
                       if any(c.path == w or c.path.startswith(w + b"/") for w in wanted)]
        return builtins.list(render(changes, self.objects.get_bytes, context=context))

    def _find_entry(self, record: CheckpointRecord, path: str | bytes) -> TreeEntry:
        rel = self._ws.rel(path)
        entry = self._ws.lookup(record.tree, rel)
        if entry is None:
            raise PathNotInCheckpoint(record.id, rel)
        return entry

    def read_file(self, ref: str, path: str | bytes) -> bytes:
        entry = self._find_entry(self._local(self.get(ref)), path)
        if entry.kind is EntryKind.SYMLINK:
            assert entry.target is not None
            return entry.target
        if entry.kind is EntryKind.TREE:
            raise UnsafePath(os.fsencode(path), "is a directory")
        assert entry.oid is not None
        return self.objects.get_bytes(entry.oid)

    def copy_file(self, ref: str, path: str | bytes, out: BinaryIO) -> int:
        """Stream one file of a checkpoint into `out` (verified at the end)."""
        entry = self._find_entry(self._local(self.get(ref)), path)
        if entry.kind is EntryKind.SYMLINK:
            assert entry.target is not None
            out.write(entry.target)
            return len(entry.target)
        if entry.kind is EntryKind.TREE:
            raise UnsafePath(os.fsencode(path), "is a directory")
        assert entry.oid is not None
        return self.objects.copy_to(entry.oid, out)

    # -- maintenance ---------------------------------------------------------------------

    def prune(self, *, reason: str | None = None, turn_id: str | None = None,
              keep_latest: int | None = None, older_than: timedelta | None = None,
              dry_run: bool = False, collect: bool = True) -> PruneReport:
        """Drop this session's checkpoints on this root that match every filter, then (if
        any went and `collect`) run gc. `PruneIncomplete` if that gc fails: the checkpoints
        are gone all the same."""
        return self._maintenance.prune(reason=reason, turn_id=turn_id, keep_latest=keep_latest,
                                       older_than=older_than, dry_run=dry_run,
                                       collect=self.gc if collect else None)

    def gc(self, *, dry_run: bool = False, grace_seconds: float | None = None) -> GcReport:
        self.settle()
        return self._maintenance.gc(dry_run=dry_run, grace_seconds=grace_seconds)

    def fsck(self, *, full: bool = False) -> CheckReport:
        self.settle()
        return self._maintenance.fsck(full=full)

    def forget(self, *refs: str, dry_run: bool = False) -> ForgetReport:
        """Drop the checkpoints `refs` name, as a prune would (their objects are freed by the
        next gc). All are resolved first: an unknown or ambiguous one removes none; so does
        one that the journal of a killed restore needs (CheckpointInUse)."""
        self.settle()
        records = [self.resolve(ref) for ref in refs]
        return self._maintenance.forget(records, dry_run=dry_run)

    def stats(self) -> StoreStats:
        return self._maintenance.stats()
