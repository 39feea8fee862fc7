"""The catalog: checkpoint records, tracked paths and events in one SQLite database (WAL).

Owns the schema (versioned by `PRAGMA user_version`, created on first open, an older one
upgraded in place, a newer one refused), the row <-> record mapping and the queries. Besides
records, tracked paths and events it holds the journal of each root's restore in progress
(an opaque blob here; journal.py encodes it), written with the pre-restore record and cleared
with the restore's event, each in one transaction. Several processes share one catalog:
WAL lets readers run beside the single writer, every write is one `BEGIN IMMEDIATE`
transaction (so a writer waits for the lock up to `busy_timeout` instead of failing on a stale
snapshot), and a commit is atomic, so a process killed at any point leaves each record either
wholly present or absent. With the default `fsync="full"`/`"batch"` a commit is fsynced
(`synchronous=FULL`) before `add_checkpoint` returns: a checkpoint reported as created survives
power loss. The caller must make the objects a record points to durable *before* adding it.

Errors: a damaged database (SQLITE_CORRUPT/NOTADB) or a row that does not parse is
`CatalogCorrupt`; a lock still held after the timeout is `StoreBusy`; IO failures are
`OSError`. Must not touch the object store, the working tree or the clock; never prints.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, cast

from ckpt.checkpoints.errors import (
    AmbiguousCheckpoint,
    CatalogCorrupt,
    CheckpointError,
    StoreBusy,
    UnknownCheckpoint,
)
from ckpt.checkpoints.model import CheckpointRecord, CheckpointStats, Event, SkippedPath
from ckpt.objstore.atomicfile import sync_directory

if TYPE_CHECKING:
    from ckpt.checkpoints.paths import RelPath
    from ckpt.objstore.ids import ObjectId

SCHEMA_VERSION = 2  # 2: + restores (the journal of restores in progress; was a file per root)
APPLICATION_ID = 0x636B7074  # "ckpt": marks the file as ours (`PRAGMA application_id`)
DEFAULT_BUSY_TIMEOUT = 10.0
MAX_CANDIDATES = 10
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
_EVENT_KEYS = frozenset({"type", "at", "session"})  # event columns, not part of `data`
_PREFIX_END = "\U0010ffff"  # sorts after every character an id can hold (ids are ASCII)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS checkpoints (
    id TEXT PRIMARY KEY NOT NULL,
    session TEXT NOT NULL,
    created_us INTEGER NOT NULL,            -- created_at, UTC microseconds since the epoch
    label TEXT, reason TEXT, turn_id TEXT, message_id TEXT, tool_call_id TEXT, summary TEXT,
    metadata TEXT NOT NULL,                 -- JSON object
    scope TEXT NOT NULL,
    parent TEXT,
    tree BLOB NOT NULL,                     -- 32 raw bytes
    root BLOB NOT NULL,                     -- os.fsencode(root): byte-exact for any path
    files INTEGER NOT NULL, bytes INTEGER NOT NULL, new_objects INTEGER NOT NULL,
    new_bytes INTEGER NOT NULL, skipped_count INTEGER NOT NULL, duration_ms INTEGER NOT NULL,
    hashed INTEGER NOT NULL,
    skipped BLOB NOT NULL,                  -- path NUL reason NUL path NUL reason ...
    paths BLOB NOT NULL,                    -- path NUL path ... (paths never hold NUL)
    absent_parents BLOB NOT NULL            -- same encoding: ancestors of tombstones that
                                            -- did not exist (restore removes them again)
);
CREATE INDEX IF NOT EXISTS checkpoints_session_time ON checkpoints (session, created_us, id);
CREATE INDEX IF NOT EXISTS checkpoints_time ON checkpoints (created_us, id);
CREATE INDEX IF NOT EXISTS checkpoints_turn ON checkpoints (turn_id, session, created_us, id);
CREATE INDEX IF NOT EXISTS checkpoints_reason ON checkpoints (session, reason, created_us, id);
CREATE TABLE IF NOT EXISTS tracked (
    session TEXT NOT NULL,
    path BLOB NOT NULL,
    PRIMARY KEY (session, path)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    type TEXT NOT NULL,
    at_us INTEGER NOT NULL,
    session TEXT NOT NULL,
    data TEXT NOT NULL                      -- JSON object
);
CREATE INDEX IF NOT EXISTS events_time ON events (at_us);
CREATE INDEX IF NOT EXISTS events_session ON events (session, at_us);
CREATE INDEX IF NOT EXISTS events_type ON events (type, at_us);
CREATE TABLE IF NOT EXISTS restores (
    root BLOB PRIMARY KEY NOT NULL,         -- os.fsencode(root): one restore at a time per root
    intent BLOB NOT NULL                    -- journal.encode_intent
) WITHOUT ROWID;
"""

_COLUMNS = ("id, session, created_us, label, reason, turn_id, message_id, tool_call_id, "
            "summary, metadata, scope, parent, tree, root, files, bytes, new_objects, "
            "new_bytes, skipped_count, duration_ms, hashed, skipped, paths, absent_parents")
_INSERT = (f"INSERT INTO checkpoints ({_COLUMNS}) VALUES "
           f"({', '.join('?' * len(_COLUMNS.split(',')))})")

# Primary SQLite result codes (the low byte of an extended code).
_CORRUPT = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
_OS_ERRNO = {3: errno.EACCES, 8: errno.EROFS, 10: errno.EIO, 13: errno.ENOSPC,
             14: errno.ENOENT, 23: errno.EACCES}  # PERM, READONLY, IOERR, FULL, CANTOPEN, AUTH


def _to_us(dt: datetime) -> int:
    return (dt - _EPOCH) // _US


def _from_us(us: int) -> datetime:
    return _EPOCH + us * _US


def _dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _encode_skipped(skipped: Iterable[SkippedPath]) -> bytes:
    return b"\0".join(s.path + b"\0" + s.reason.encode("utf-8") for s in skipped)


def _decode_skipped(blob: bytes) -> tuple[SkippedPath, ...]:
    if not blob:
        return ()
    parts = blob.split(b"\0")
    if len(parts) % 2:
        raise ValueError("skipped paths list is truncated")
    return tuple(SkippedPath(_rel(parts[i]), parts[i + 1].decode("utf-8"))
                 for i in range(0, len(parts), 2))


def _rel(path: bytes) -> RelPath:
    return cast("RelPath", path)  # a NewType of bytes; the model checks the value


def _oid(value: object) -> ObjectId:
    if type(value) is not bytes or len(value) != 32:
        raise ValueError(f"tree is not a 32-byte object id: {value!r}")
    return cast("ObjectId", value)


def _record_row(r: CheckpointRecord) -> tuple[Any, ...]:
    s = r.stats
    return (r.id, r.session, _to_us(r.created_at), r.label, r.reason, r.turn_id, r.message_id,
            r.tool_call_id, r.summary, _dump_json(r.to_json()["metadata"]), r.scope, r.parent,
            bytes(r.tree), os.fsencode(r.root), s.files, s.bytes, s.new_objects, s.new_bytes,
            s.skipped, s.duration_ms, s.hashed, _encode_skipped(r.skipped), b"\0".join(r.paths),
            b"\0".join(r.absent_parents))


def _parse_record(row: Sequence[Any]) -> CheckpointRecord:
    (id_, session, created_us, label, reason, turn_id, message_id, tool_call_id, summary,
     metadata, scope, parent, tree, root, files, nbytes, new_objects, new_bytes, skipped_count,
     duration_ms, hashed, skipped, paths, absent) = row
    if not isinstance(created_us, int):
        raise TypeError(f"created_at is not an integer: {created_us!r}")
    if not isinstance(skipped, bytes) or not isinstance(paths, bytes) \
            or not isinstance(root, bytes) or not isinstance(absent, bytes):
        raise TypeError("root/skipped/paths columns are not blobs")
    meta = json.loads(metadata)
    if not isinstance(meta, dict):
        raise TypeError("metadata is not a JSON object")
    return CheckpointRecord(
        id=id_, label=label, reason=reason, turn_id=turn_id, message_id=message_id,
        tool_call_id=tool_call_id, summary=summary, metadata=meta, session=session,
        scope=scope, parent=parent, tree=_oid(tree), created_at=_from_us(created_us),
        stats=CheckpointStats(files=files, bytes=nbytes, new_objects=new_objects,
                              new_bytes=new_bytes, skipped=skipped_count,
                              duration_ms=duration_ms, hashed=hashed),
        root=os.fsdecode(root), skipped=_decode_skipped(skipped),
        paths=tuple(_rel(p) for p in paths.split(b"\0")) if paths else (),
        absent_parents=tuple(_rel(p) for p in absent.split(b"\0")) if absent else ())


def _records_sql(*, session: str | None = None, turn_id: str | None = None,
                 reason: str | None = None, root: str | None = None, newest: bool = False,
                 limit: int | None = None) -> tuple[str, list[Any]]:
    """The SELECT behind history/latest; None filters are omitted (not `IS NULL`)."""
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("session", session), ("turn_id", turn_id), ("reason", reason)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if root is not None:
        where.append("root = ?")
        params.append(os.fsencode(root))
    sql = f"SELECT {_COLUMNS} FROM checkpoints"
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created_us DESC, id DESC" if newest else " ORDER BY created_us, id"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql, params


class Catalog:
    """One connection to one catalog database; safe to share between threads (a lock
    serializes calls). Use `Catalog.open(path)`, and `close()` or `with`."""

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self._conn = conn
        self.path = path
        self._lock = threading.RLock()

    @classmethod
    def open(cls, path: str, *, fsync: Literal["none", "batch", "full"] = "full",
             busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Catalog:
        """Open (creating if new) the catalog at `path`; its directory must exist.

        `fsync="none"` commits with `synchronous=NORMAL`: still atomic and consistent after a
        crash or power loss, but the last commits may be lost on power loss.
        """
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise FileNotFoundError(errno.ENOENT, "catalog directory does not exist", parent)
        conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None,
                               check_same_thread=False)
        catalog = cls(conn, path)
        try:
            with catalog._guard():
                catalog._setup(fsync, busy_timeout)
        except BaseException:
            conn.close()
            raise
        return catalog

    def _setup(self, fsync: str, busy_timeout: float) -> None:
        conn = self._conn
        mode = self._use_wal(busy_timeout)
        if str(mode).lower() != "wal":
            raise CatalogCorrupt(self.path, f"cannot use WAL journal mode (got {mode})")
        conn.execute(f"PRAGMA synchronous = {'NORMAL' if fsync == 'none' else 'FULL'}")
        if self._check_version() == SCHEMA_VERSION:
            return
        with self._write():
            # Re-checked under the write lock: one creator, one upgrader. Every statement is
            # IF NOT EXISTS, so creating and upgrading (adding what a version lacks) are one.
            if self._check_version() < SCHEMA_VERSION:
                # Statement by statement: executescript() would COMMIT our transaction.
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        # The directory entry of a newly created database file must be durable too.
        sync_directory(os.path.dirname(os.path.abspath(self.path)))

    def _use_wal(self, busy_timeout: float) -> str:
        """Switch to WAL, waiting up to `busy_timeout` for another process switching too: while
        two processes create one new catalog SQLite can answer "locked" at once, without calling
        its busy handler (it would deadlock), so the wait is ours."""
        deadline = time.monotonic() + busy_timeout
        while True:
            try:
                return str(self._conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.005)

    def _check_version(self) -> int:
        # One statement, so one snapshot: read apart, another process creating the catalog
        # could commit between the version (still 0) and the tables (there), which read as
        # a foreign catalog (seen in CI: test_two_processes_creating_one_new_catalog...).
        version, app_id, tables = self._conn.execute(
            "SELECT (SELECT user_version FROM pragma_user_version),"
            " (SELECT application_id FROM pragma_application_id),"
            " (SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%')").fetchone()
        version, app_id = int(version), int(app_id)
        if app_id not in (0, APPLICATION_ID) or (version and app_id != APPLICATION_ID):
            raise CatalogCorrupt(self.path, f"not a ckpt catalog (application_id {app_id:#x})")
        if version > SCHEMA_VERSION:
            raise CatalogCorrupt(self.path, f"catalog schema version {version} is newer than "
                                 f"this ckpt supports ({SCHEMA_VERSION}); upgrade ckpt")
        if version == 0 and tables:
            raise CatalogCorrupt(self.path, "not a ckpt catalog (unversioned tables)")
        return version

    # -- plumbing -------------------------------------------------------------------------

    @contextmanager
    def _guard(self) -> Iterator[None]:
        """Serialize calls and turn sqlite3 errors into ours (see the module docstring)."""
        with self._lock:
            try:
                yield
            except sqlite3.DatabaseError as exc:
                code = getattr(exc, "sqlite_errorcode", None)
                primary = code & 0xFF if isinstance(code, int) else None
                if primary in _CORRUPT:
                    raise CatalogCorrupt(self.path, str(exc)) from exc
                if primary in _BUSY:
                    raise StoreBusy(self.path, None) from exc
                if primary in _OS_ERRNO:
                    raise OSError(_OS_ERRNO[primary], f"catalog: {exc}", self.path) from exc
                raise

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; the lock is taken up front so it cannot fail half way."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error:  # keep the original error; SQLite rolls back on close
                    pass
            raise

    def _records(self, sql: str, params: Sequence[Any]) -> list[CheckpointRecord]:
        rows = self._conn.execute(sql, params).fetchall()
        return [self._parse(row) for row in rows]

    def _parse(self, row: Sequence[Any]) -> CheckpointRecord:
        try:
            return _parse_record(row)
        except (ValueError, TypeError, OverflowError) as exc:  # JSON/Unicode errors: ValueError
            raise CatalogCorrupt(self.path, f"checkpoint {row[0]!s}: {exc}") from None

    def _insert_event(self, conn: sqlite3.Connection, event: Event) -> None:
        conn.execute("INSERT INTO events (type, at_us, session, data) VALUES (?, ?, ?, ?)",
                     (event.type, _to_us(event.at), event.session,
                      _dump_json({k: v for k, v in event.to_json().items()
                                  if k not in _EVENT_KEYS})))

    # -- records --------------------------------------------------------------------------

    def add_checkpoint(self, record: CheckpointRecord, *, event: Event | None = None,
                       journal: bytes | None = None) -> None:
        """Insert `record` (and `event`; and `journal`, the intent of the restore that
        `record` is the pre-restore save of, for `record.root`) in one transaction, durable
        when this returns."""
        row = _record_row(record)
        with self._guard(), self._write() as conn:
            try:
                conn.execute(_INSERT, row)
            except sqlite3.IntegrityError:
                raise CheckpointError(f"checkpoint id already exists: {record.id}") from None
            if event is not None:
                self._insert_event(conn, event)
            if journal is not None:
                self._set_journal(conn, os.fsencode(record.root), journal)

    def resolve(self, ref: str) -> CheckpointRecord:
        """The record with id `ref`, else the one whose id starts with `ref`.

        UnknownCheckpoint if none; AmbiguousCheckpoint with up to 10 sorted candidates."""
        if not ref:
            raise UnknownCheckpoint(ref)
        with self._guard():
            sql = f"SELECT {_COLUMNS} FROM checkpoints WHERE id = ?"
            rows = self._records(sql, (ref,))
            if rows:
                return rows[0]
            ids = [row[0] for row in self._conn.execute(
                "SELECT id FROM checkpoints WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                (ref, ref + _PREFIX_END, MAX_CANDIDATES + 1))]
            if not ids:
                raise UnknownCheckpoint(ref)
            if len(ids) > 1:
                raise AmbiguousCheckpoint(ref, ids[:MAX_CANDIDATES])
            return self._records(sql, (ids[0],))[0]

    def history(self, *, session: str | None, turn_id: str | None = None,
                reason: str | None = None, root: str | None = None) -> list[CheckpointRecord]:
        """Matching records, oldest first (created_at, then id). `session=None`: all."""
        sql, params = _records_sql(session=session, turn_id=turn_id, reason=reason, root=root)
        with self._guard():
            return self._records(sql, params)

    def latest(self, *, session: str, turn_id: str | None = None,
               reason: str | None = None, root: str | None = None) -> CheckpointRecord | None:
        sql, params = _records_sql(session=session, turn_id=turn_id, reason=reason,
                                   root=root, newest=True, limit=1)
        with self._guard():
            found = self._records(sql, params)
        return found[0] if found else None

    def later_than(self, record: CheckpointRecord) -> list[CheckpointRecord]:
        """Records of the same session and root after `record` in history order, oldest first."""
        us = _to_us(record.created_at)
        sql = (f"SELECT {_COLUMNS} FROM checkpoints WHERE session = ? AND root = ? AND "
               "(created_us > ? OR (created_us = ? AND id > ?)) ORDER BY created_us, id")
        with self._guard():
            return self._records(sql, (record.session, os.fsencode(record.root), us, us, record.id))

    def delete_checkpoints(self, ids: Sequence[str], *, event: Event | None = None) -> None:
        """Delete these records (ids not present are ignored) and add `event`, in one txn."""
        if isinstance(ids, str):
            raise TypeError("ids must be a sequence of ids, not one string")
        with self._guard(), self._write() as conn:
            conn.executemany("DELETE FROM checkpoints WHERE id = ?", ((i,) for i in ids))
            if event is not None:
                self._insert_event(conn, event)

    def tree_roots(self) -> list[ObjectId]:
        """The distinct tree ids of all records of all sessions (GC roots), sorted."""
        with self._guard():
            rows = self._conn.execute(
                "SELECT DISTINCT tree FROM checkpoints ORDER BY tree").fetchall()
        try:
            return [_oid(row[0]) for row in rows]
        except ValueError as exc:
            raise CatalogCorrupt(self.path, str(exc)) from None

    def session_counts(self) -> dict[str, int]:
        """Number of records per session (sessions with records only)."""
        with self._guard():
            rows = self._conn.execute(
                "SELECT session, count(*) FROM checkpoints GROUP BY session ORDER BY session")
            return {str(name): int(n) for name, n in rows}

    def count(self) -> int:
        with self._guard():
            return int(self._conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0])

    # -- tracked paths --------------------------------------------------------------------

    def tracked(self, session: str) -> tuple[RelPath, ...]:
        """The session's tracked paths, sorted by bytes."""
        with self._guard():
            rows = self._conn.execute("SELECT path FROM tracked WHERE session = ?", (session,))
            paths = sorted(bytes(row[0]) for row in rows)
        return tuple(_rel(p) for p in paths)

    def set_tracked(self, session: str, paths: Iterable[bytes]) -> None:
        """Replace the session's tracked set (duplicates collapse) in one transaction."""
        unique = set(paths)
        for p in unique:
            if not isinstance(p, bytes) or not p or b"\0" in p:
                raise ValueError(f"tracked path must be non-empty bytes without NUL: {p!r}")
        with self._guard(), self._write() as conn:
            conn.execute("DELETE FROM tracked WHERE session = ?", (session,))
            conn.executemany("INSERT INTO tracked (session, path) VALUES (?, ?)",
                             ((session, p) for p in sorted(unique)))

    # -- restores in progress -------------------------------------------------------------

    @staticmethod
    def _set_journal(conn: sqlite3.Connection, root: bytes, intent: bytes) -> None:
        conn.execute("INSERT OR REPLACE INTO restores (root, intent) VALUES (?, ?)",
                     (root, intent))

    def journal_restore(self, root: bytes, intent: bytes) -> None:
        """Record `root`'s restore in progress (replacing any), durable when this returns."""
        with self._guard(), self._write() as conn:
            self._set_journal(conn, root, intent)

    def end_restore(self, root: bytes, *, event: Event | None = None) -> None:
        """Clear `root`'s journal (if any) and add `event`, in one transaction: a restore's
        event is recorded once, whenever the process dies."""
        with self._guard(), self._write() as conn:
            conn.execute("DELETE FROM restores WHERE root = ?", (root,))
            if event is not None:
                self._insert_event(conn, event)

    def restore_journal(self, root: bytes) -> bytes | None:
        """The journal of `root`'s restore in progress, None if there is none."""
        with self._guard():
            row = self._conn.execute("SELECT intent FROM restores WHERE root = ?",
                                     (root,)).fetchone()
        return None if row is None else bytes(row[0])

    def restore_journals(self) -> list[tuple[bytes, bytes]]:
        """(root, journal) of every root with a restore in progress, by root."""
        with self._guard():
            rows = self._conn.execute("SELECT root, intent FROM restores ORDER BY root")
            return [(bytes(root), bytes(intent)) for root, intent in rows]

    # -- events ---------------------------------------------------------------------------

    def add_event(self, event: Event) -> None:
        with self._guard(), self._write() as conn:
            self._insert_event(conn, event)

    def events(self, *, session: str | None = None, type: str | None = None,  # noqa: A002
               limit: int | None = None) -> list[Event]:
        """Matching events, oldest first (time, then insertion); `limit` keeps the newest."""
        where, params = [], []
        for column, value in (("session", session), ("type", type)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = "SELECT seq, type, at_us, session, data FROM events"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY at_us DESC, seq DESC"
        if limit is not None:
            if limit < 0:
                raise ValueError(f"limit must be >= 0, not {limit}")
            sql += f" LIMIT {int(limit)}"
        with self._guard():
            rows = self._conn.execute(sql, params).fetchall()
        rows.reverse()
        return [self._parse_event(row) for row in rows]

    def _parse_event(self, row: Sequence[Any]) -> Event:
        seq, type_, at_us, session, data = row
        try:
            fields = json.loads(data)
            if not isinstance(fields, dict):
                raise TypeError("event data is not a JSON object")
            return Event(type=type_, at=_from_us(at_us), session=session, data=fields)
        except (ValueError, TypeError, OverflowError) as exc:
            raise CatalogCorrupt(self.path, f"event {seq}: {exc}") from None

    # -- lifetime -------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- a moved workspace (identity.py) -----------------------------------------------------

    def rebind_root(self, old: str, new: str, *, event: Event | None = None) -> int:
        """Move the records and the restore journal of root `old` to root `new` (a workspace
        that moved) and add `event`, in one transaction; the number of records moved."""
        with self._guard(), self._write() as conn:
            moved = conn.execute("UPDATE checkpoints SET root = ? WHERE root = ?",
                                 (os.fsencode(new), os.fsencode(old))).rowcount
            conn.execute("UPDATE OR REPLACE restores SET root = ? WHERE root = ?",
                         (os.fsencode(new), os.fsencode(old)))
            if event is not None:
                self._insert_event(conn, event)
        return int(moved)
