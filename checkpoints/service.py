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
import importlib
import os
import random
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any, BinaryIO, Self

from ckpt.checkpoints.catalog import Catalog
from ckpt.checkpoints.config import StoreConfig, read_config, write_config
from ckpt.checkpoints.diff import Change, diff_trees, iter_leaves
from ckpt.checkpoints.errors import NotInitialized, PathNotInCheckpoint, UnsafePath
from ckpt.checkpoints.model import CheckpointRecord, Event
from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.scan import ProgressFn
from ckpt.checkpoints.workspace import Clock, Listener, Workspace
from ckpt.checkpoints.writing import LockedRoot, naming
from ckpt.objstore import EntryKind, ObjectStore, StoreOptions, TreeEntry
from ckpt.objstore.errors import StoreNotFound

# The restore side (plan, restore, reports) is imported where it is used: a `ckpt create` is
# one process start, and building those modules' classes would be paid for nothing.
if TYPE_CHECKING:
    from ckpt.checkpoints.maintenance import Maintenance
    from ckpt.checkpoints.reports import (
        CheckReport,
        FileEntry,
        PruneReport,
        RestoreReport,
        StoreStats,
    )
    from ckpt.checkpoints.restoring import RestoreOptions, Restorer
    from ckpt.objstore.gc import GcReport

STORE_NAME = ".ckpt"


def preload() -> None:
    """Import now what the service imports only where it is first used: the restore side
    and the ignore rules (pathspec). For a long-lived process, such as an agent harness, that
    would rather pay once at start than at its first restore or first scan without a stat
    cache. The CLI never calls it: each command is one process start, and most never need
    those modules."""
    for name in ("ignore", "plan", "reports", "restore", "restoring"):
        importlib.import_module(f"ckpt.checkpoints.{name}")


def _utc_now() -> datetime:
    return datetime.now(UTC)


class Checkpoints:
    """Checkpoints of one workspace root in one store, for one session."""

    def __init__(self, root: str, store_dir: str, session: str, *, clock: Clock = _utc_now,
                 rng: random.Random | None = None) -> None:
        config = read_config(store_dir)
        objects = ObjectStore.open(store_dir, StoreOptions(
            compression_level=config.compression_level, fsync=config.fsync))  # type: ignore[arg-type]
        catalog = Catalog.open(os.path.join(store_dir, "catalog.db"), fsync=config.fsync)  # type: ignore[arg-type]
        self._ws = Workspace(root, store_dir, session, config, objects, catalog, clock=clock,
                             rng=rng or random.Random())
        self._last_write: LockedRoot | None = None  # its bookkeeping may still be running

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
    def config(self, value: StoreConfig) -> None:  # read again at each lock and scan
        self._ws.config = value

    # Restoring and maintenance are imported on first use: a snapshot needs neither.
    @cached_property
    def _restorer(self) -> Restorer:
        from ckpt.checkpoints.restoring import Restorer  # noqa: PLC0415 (see above)

        return Restorer(self._ws)

    @cached_property
    def _maintenance(self) -> Maintenance:
        from ckpt.checkpoints.maintenance import Maintenance  # noqa: PLC0415 (see above)

        return Maintenance(self._ws, self._restorer.pending_intent)

    # -- opening and closing -------------------------------------------------------------

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
            with naming(os.path.join(self.store_dir, "objects")):
                self.objects.close()  # publishes what was written: can fail like a put
        finally:
            self.catalog.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
               progress: ProgressFn | None = None) -> CheckpointRecord:
        extra = [self._ws.user_rel(p, None) for p in paths or ()]
        with self._writing("create") as locked:
            tracked = list(self.tracked())
            covered = sorted(set(tracked + extra)) if tracked or extra else None
            return self._ws.snapshot(locked, covered, progress, label=label, reason=reason,
                                     turn_id=turn_id, message_id=message_id,
                                     tool_call_id=tool_call_id, summary=summary,
                                     metadata=dict(metadata or {}))

    def restore(self, ref: str, options: RestoreOptions | None = None, *,
                progress: ProgressFn | None = None) -> RestoreReport:
        """Make the workspace match checkpoint `ref`, as `options` say (the default: the whole
        scope, saving the current state first as the undo, recording the event)."""
        if options is None:
            from ckpt.checkpoints.restoring import RestoreOptions  # noqa: PLC0415 (see above)

            options = RestoreOptions()
        target, only = self._restorer.resolve(ref, options)
        started = time.monotonic()
        with self._writing("restore") as locked:
            return self._restorer.restore(locked, target, only, options, progress, started)

    def recover(self) -> RestoreReport | None:
        """Complete a restore that was killed; None when there was nothing to complete."""
        self.settle()
        locked = self._ws.lock_root("recover")
        with locked:
            report = self._restorer.complete_interrupted(locked)
        self._last_write = locked
        return report

    # -- events and tracking -------------------------------------------------------------

    def on(self, event_type: str, callback: Listener) -> None:
        self._ws.listeners.setdefault(event_type, []).append(callback)

    def events(self, *, type: str | None = None, limit: int | None = None,  # noqa: A002
               all_sessions: bool = False) -> builtins.list[Event]:
        return self.catalog.events(session=None if all_sessions else self.session, type=type, limit=limit)

    def tracked(self) -> tuple[RelPath, ...]:
        return self.catalog.tracked(self.session)

    def track(self, *paths: str | bytes, cwd: str | None = None) -> tuple[RelPath, ...]:
        new = {self._ws.user_rel(p, cwd) for p in paths}
        self.catalog.set_tracked(self.session, sorted(set(self.tracked()) | new))
        return self.tracked()

    def untrack(self, *paths: str | bytes, cwd: str | None = None) -> tuple[RelPath, ...]:
        gone = {self._ws.user_rel(p, cwd) for p in paths}
        self.catalog.set_tracked(self.session, sorted(set(self.tracked()) - gone))
        return self.tracked()

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
        from ckpt.checkpoints.reports import FileEntry  # noqa: PLC0415 (lazy: see the module)

        record = self.get(ref)
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
        record = self.get(ref)
        if ref2 is not None:
            return diff_trees(self.objects.get_tree, record.tree, self.get(ref2).tree)
        with self._writing("diff") as locked:
            current = self._ws.scan(locked, record.paths if record.scope == "paths" else None, None)
        return diff_trees(self.objects.get_tree, record.tree, current.tree)

    def _find_entry(self, record: CheckpointRecord, path: str | bytes) -> TreeEntry:
        rel = self._ws.rel(path)
        entry = self._ws.lookup(record.tree, rel)
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

    # -- maintenance ---------------------------------------------------------------------

    def prune(self, *, reason: str | None = None, turn_id: str | None = None,
              keep_latest: int | None = None, older_than: timedelta | None = None,
              dry_run: bool = False, collect: bool = True) -> PruneReport:
        return self._maintenance.prune(reason=reason, turn_id=turn_id, keep_latest=keep_latest,
                                       older_than=older_than, dry_run=dry_run,
                                       collect=self.gc if collect else None)

    def gc(self, *, dry_run: bool = False, grace_seconds: float | None = None) -> GcReport:
        self.settle()
        return self._maintenance.gc(dry_run=dry_run, grace_seconds=grace_seconds)

    def fsck(self, *, full: bool = False) -> CheckReport:
        self.settle()
        return self._maintenance.fsck(full=full)

    def stats(self) -> StoreStats:
        return self._maintenance.stats()
