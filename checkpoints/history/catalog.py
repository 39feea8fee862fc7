"""The catalog: checkpoint records, tracked paths and events in one SQLite database (WAL).

Owns the schema (versioned by `PRAGMA user_version`, created on first open, an older one
upgraded in place, a newer one refused, its tables and indexes checked at every open), the
row <-> record mapping and the queries. Besides records, tracked paths and events it holds the
journal of each root's restore in progress (an opaque blob here; journal.py encodes it),
written with the pre-restore record and cleared with the restore's event, each in one
transaction. Several processes share one catalog: WAL lets readers run beside the single
writer, every write is one `BEGIN IMMEDIATE` transaction (so a writer waits for the lock up to
`busy_timeout` instead of failing on a stale snapshot), and a commit is atomic, so a process
killed at any point leaves each record either wholly present or absent. With the default
`fsync="full"`/`"batch"` a commit is fsynced (`synchronous=FULL`) before `add_checkpoint`
returns: a checkpoint reported as created survives power loss. The caller must make the
objects a record points to durable *before* adding it.

The catalog is an index over the record files (records.py; the comparisons are reindex.py's):
each checkpoint's file is written inside its row's transaction and set aside inside a
prune's (removed after its commit; records.py `set_aside_pruned`). A new database beside
record files (the catalog deleted or emptied) is rebuilt from them as it is created; an
existing one that lacks record files is `CatalogCorrupt` naming `ckpt fsck --repair`
(`repair`), as is a row that fails its digest. On a full or read-only disk an existing catalog
is opened for reading only (`readonly`): SQLite's `mode=ro` while its shared-memory file is
whole, else `immutable` when no write-ahead log is left to read.

Errors: a damaged database (SQLITE_CORRUPT/NOTADB, or an SQLITE_ERROR from a statement of
ours: the schema is not what we made), a row that does not parse or fails its digest, a
damaged schema are `CatalogCorrupt`; a lock still held after the timeout is `StoreBusy`; IO
failures are `OSError` naming the database (ENOSPC when SQLite's "disk I/O error" comes from a
full disk). Must not touch the object store or the working tree; reads the clock only for the
event of a rebuild; never prints.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Self, cast

from ckpt.checkpoints.errors import (
    AmbiguousCheckpoint,
    CatalogCorrupt,
    CheckpointError,
    StoreBusy,
    UnknownCheckpoint,
    display_text,
)
from ckpt.checkpoints.history import reindex
from ckpt.checkpoints.history.records import (
    RecordDir,
    Row,
    dump_json,
    from_us,
    parse_row,
    record_name,
    record_row,
    row_digest,
    to_us,
)
from ckpt.checkpoints.history.reindex import REPAIR_HINT
from ckpt.checkpoints.model import CheckpointRecord, Event
from ckpt.objstore.atomicfile import sync_directory
from ckpt.objstore.ids import hash_bytes

if TYPE_CHECKING:
    from ckpt.checkpoints.paths import RelPath
    from ckpt.objstore.ids import ObjectId

# 2: + restores (the journal of restores in progress; was a file per root)
# 3: + checkpoints.digest (a row checksum) and a record file per checkpoint (records.py)
SCHEMA_VERSION = 3
APPLICATION_ID = 0x636B7074  # "ckpt": marks the file as ours (`PRAGMA application_id`)
DEFAULT_BUSY_TIMEOUT = 10.0
MAX_CANDIDATES = 10
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
    absent_parents BLOB NOT NULL,           -- same encoding: ancestors of tombstones that
                                            -- did not exist (restore removes them again)
    digest BLOB                             -- records.row_digest of the columns above
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
_INSERT = (f"INSERT INTO checkpoints ({_COLUMNS}, digest) VALUES "
           f"({', '.join('?' * (len(_COLUMNS.split(',')) + 1))})")
_SELECT = f"SELECT {_COLUMNS}, digest FROM checkpoints"

# Primary SQLite result codes (the low byte of an extended code).
_CORRUPT = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB
_BUSY = {5, 6}  # SQLITE_BUSY, SQLITE_LOCKED
# SQLITE_ERROR from a statement of ours means the schema is not what we made: a damaged one.
_SCHEMA_ERROR = 1
# Free bytes under which an IO error of SQLite is told as a full disk (it says "disk I/O error"
# when it cannot grow its shared-memory file).
_NEARLY_FULL = 64 << 10
_OS_ERRNO = {3: errno.EACCES, 8: errno.EROFS, 10: errno.EIO, 13: errno.ENOSPC,
             14: errno.ENOENT, 23: errno.EACCES}  # PERM, READONLY, IOERR, FULL, CANTOPEN, AUTH


def _records_sql(*, select: str = _SELECT, session: str | None = None, turn_id: str | None = None,
                 reason: str | None = None, root: str | None = None, newest: bool = False,
                 limit: int | None = None,
                 tool_call_id: str | None = None) -> tuple[str, list[Any]]:
    """The SELECT behind history/latest; None filters are omitted (not `IS NULL`)."""
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("session", session), ("turn_id", turn_id), ("reason", reason),
                          ("tool_call_id", tool_call_id)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if root is not None:
        where.append("root = ?")
        params.append(os.fsencode(root))
    sql = select
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY created_us DESC, id DESC" if newest else " ORDER BY created_us, id"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return sql, params


_EXPECTED: dict[str, object] | None = None
# structure_digest(_expected_structure()): spares building the schema in memory at every
# open (a test pins it to the schema above).
EXPECTED_STRUCTURE = "72aa4900b15d0f2d911fd6269c8492bb"


def _structure(conn: sqlite3.Connection) -> dict[str, object]:
    """Tables (columns: name, type, not null, key) and indexes (table, columns) of a database:
    what our statements rely on, without the comments and spacing of the stored SQL."""
    found: dict[str, object] = {}
    for kind, name, table in conn.execute(
            "SELECT type, name, tbl_name FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'"
            " ORDER BY name").fetchall():
        if kind == "table":
            found[name] = ("table", [(*row[1:4], row[5]) for row in
                                     conn.execute(f'PRAGMA table_info("{name}")')])
        else:
            found[name] = (kind, table, [row[2] for row in
                                         conn.execute(f'PRAGMA index_info("{name}")')])
    return found


def structure_digest(structure: dict[str, object]) -> str:
    return hash_bytes(repr(structure).encode("utf-8")).hex()[:32]


def _expected_structure() -> dict[str, object]:
    global _EXPECTED  # computed once per process, from the schema itself
    if _EXPECTED is None:
        conn = sqlite3.connect(":memory:")
        try:
            conn.executescript(_SCHEMA)
            _EXPECTED = _structure(conn)
        finally:
            conn.close()
    return _EXPECTED


def _disk_full(path: str) -> bool:
    try:
        info = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < _NEARLY_FULL or info.f_favail == 0


class Catalog:
    """One connection to one catalog database; safe to share between threads (a lock
    serializes calls). Use `Catalog.open(path)`, and `close()` or `with`.

    `readonly` is the OSError that made `open` fall back to reading only (a full disk or a
    read-only file system), None when the catalog is writable: a write call raises it."""

    def __init__(self, conn: sqlite3.Connection, path: str, *, fsync: bool = True) -> None:
        self._conn = conn
        self.path = path
        self._lock = threading.RLock()
        self.records = RecordDir.beside(path, fsync=fsync)
        self.readonly: OSError | None = None
        self.select = _SELECT
        self.rebuilt = 0  # records this open rebuilt a new database from (catalog lost)

    @classmethod
    def open(cls, path: str, *, fsync: Literal["none", "batch", "full"] = "full",
             busy_timeout: float = DEFAULT_BUSY_TIMEOUT, check_records: bool = True) -> Catalog:
        """Open (creating if new) the catalog at `path`; its directory must exist.

        `fsync="none"` commits with `synchronous=NORMAL`: still atomic and consistent after a
        crash or power loss, but the last commits may be lost on power loss.

        Record files the catalog lacks (a catalog deleted, emptied or replaced, or a create
        killed between its record file and its row) are added back; on a catalog opened for
        reading only, that is `CatalogCorrupt` naming the repair command instead. Where the
        disk is full (or read-only) an existing catalog is opened for reading only.
        `check_records=False` skips that test (for `repair`, which mends what it finds).
        """
        parent = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(parent):
            raise FileNotFoundError(errno.ENOENT, "catalog directory does not exist", parent)
        conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None,
                               check_same_thread=False)
        catalog = cls(conn, path, fsync=fsync == "full")
        try:
            with catalog._guard():
                catalog._setup(fsync, busy_timeout)
        except OSError as exc:
            conn.close()
            if exc.errno not in (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO) \
                    or not os.path.isfile(path) or os.path.getsize(path) == 0:
                raise
            catalog = cls._open_readonly(path, exc, busy_timeout)
        except BaseException:
            conn.close()
            raise
        try:
            if check_records:
                reindex.reconcile(catalog)
        except BaseException:
            catalog.close()
            raise
        return catalog

    @classmethod
    def _open_readonly(cls, path: str, error: OSError, busy_timeout: float) -> Catalog:
        """Read the catalog without creating or growing a file: SQLite's read-only mode works
        while its shared-memory file is there at full size; else, with no write-ahead log to
        read, the database file alone is the whole catalog (`immutable`). A log that cannot be
        read without a new file leaves `error` to raise."""
        uri = "file:" + urllib.parse.quote(os.path.abspath(path))
        wal = path + "-wal"
        attempts = [f"{uri}?mode=ro"]
        if not os.path.exists(wal) or os.path.getsize(wal) == 0:
            attempts.append(f"{uri}?immutable=1")
        for attempt in attempts:
            conn = sqlite3.connect(attempt, uri=True, timeout=busy_timeout,
                                   isolation_level=None, check_same_thread=False)
            catalog = cls(conn, path, fsync=False)
            catalog.readonly = error
            try:
                with catalog._guard():
                    version = catalog._check_version()
                    catalog._check_structure(version)
            except OSError:
                conn.close()
                continue
            except BaseException:
                conn.close()
                raise
            return catalog
        raise error

    def _setup(self, fsync: str, busy_timeout: float) -> None:
        conn = self._conn
        mode = self._use_wal(busy_timeout)
        if str(mode).lower() != "wal":
            raise CatalogCorrupt(self.path, f"cannot use WAL journal mode (got {mode})")
        conn.execute(f"PRAGMA synchronous = {'NORMAL' if fsync == 'none' else 'FULL'}")
        version = self._check_version()
        if version == SCHEMA_VERSION:
            self._check_structure(version)
            return
        with self._write():
            # Re-checked under the write lock: one creator, one upgrader. Every statement is
            # IF NOT EXISTS, so creating and upgrading (adding what a version lacks) are one.
            version = self._check_version()
            if version < SCHEMA_VERSION:
                if version:
                    self._upgrade(conn)
                # Statement by statement: executescript() would COMMIT our transaction.
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                if not version:
                    # A new database beside record files: the catalog was deleted or emptied.
                    # Rebuilt in the creating transaction, so no other process sees it empty.
                    self.rebuilt = len(reindex.adopt(self, conn))
            self._check_structure(SCHEMA_VERSION)
        # The directory entry of a newly created database file must be durable too.
        sync_directory(os.path.dirname(os.path.abspath(self.path)))

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """From schema 1 or 2 (in the caller's write transaction): add the digest column and
        give each row its digest and its record file. A file that cannot be written (a full
        disk) is left for `fsck --repair`; the upgrade itself needs none."""
        columns = {row[1] for row in conn.execute('PRAGMA table_info("checkpoints")')}
        if "digest" not in columns:
            conn.execute("ALTER TABLE checkpoints ADD COLUMN digest BLOB")
        rows = conn.execute(f"SELECT {_COLUMNS} FROM checkpoints").fetchall()
        conn.executemany("UPDATE checkpoints SET digest = ? WHERE id = ?",
                         ((row_digest(row), row[0]) for row in rows))
        tracked = reindex.tracked_by_session(conn)
        names = self.records.names()
        try:
            for row in rows:
                if record_name(row[0]) not in names:
                    self.records.write(row, tracked.get(row[1], ()))
        except OSError:
            pass

    def _check_structure(self, version: int) -> None:
        """Refuse a catalog whose tables or indexes are not the ones our statements expect
        (a damaged schema would fail later as "no such column", or quietly differ)."""
        found = _structure(self._conn)
        if version < SCHEMA_VERSION:  # read-only, not upgraded: no digest column
            table = found.get("checkpoints")
            if isinstance(table, tuple) and table[0] == "table":
                found["checkpoints"] = ("table", [*table[1], ("digest", "BLOB", 0, 0)])
            self.select = f"SELECT {_COLUMNS}, NULL FROM checkpoints"
        if not version or structure_digest(found) == EXPECTED_STRUCTURE:
            return
        expected = _expected_structure()
        if found != expected:
            damaged = sorted(name for name in set(expected) | set(found)
                             if expected.get(name) != found.get(name))
            raise CatalogCorrupt(self.path, f"damaged schema ({', '.join(damaged)}); "
                                 + REPAIR_HINT)

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
                if primary in _CORRUPT or primary == _SCHEMA_ERROR:
                    raise CatalogCorrupt(self.path, f"{exc}; {REPAIR_HINT}") from exc
                if primary in _BUSY:
                    raise StoreBusy(self.path, None) from exc
                if primary in _OS_ERRNO:
                    number = _OS_ERRNO[primary]
                    if number == errno.EIO and _disk_full(self.path):
                        number = errno.ENOSPC
                    raise OSError(number, f"{os.strerror(number)} (catalog: {exc})",
                                  self.path) from exc
                raise

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; the lock is taken up front so it cannot fail half way."""
        if self.readonly is not None:
            raise OSError(self.readonly.errno, self.readonly.strerror, self.path)
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
        """The record of a row with its digest last; a row whose digest does not match (a
        flipped byte) or that does not parse is `CatalogCorrupt`."""
        digest = row[-1]
        columns = row[:-1]
        try:
            if digest is not None and row_digest(columns) != digest:
                raise ValueError("row does not match its checksum")
            return parse_row(columns)
        except (ValueError, TypeError, OverflowError) as exc:  # JSON/Unicode errors: ValueError
            raise CatalogCorrupt(self.path, f"checkpoint {display_text(str(columns[0]))}: "
                                 f"{exc}; {REPAIR_HINT}") from None

    def _insert_event(self, conn: sqlite3.Connection, event: Event) -> None:
        conn.execute("INSERT INTO events (type, at_us, session, data) VALUES (?, ?, ?, ?)",
                     (event.type, to_us(event.at), event.session,
                      dump_json({k: v for k, v in event.to_json().items()
                                  if k not in _EVENT_KEYS})))

    # -- records --------------------------------------------------------------------------

    def add_checkpoint(self, record: CheckpointRecord, *, event: Event | None = None,
                       journal: bytes | None = None) -> None:
        """Insert `record` (and `event`; and `journal`, the intent of the restore that
        `record` is the pre-restore save of, for `record.root`) in one transaction, durable
        when this returns. Its record file is written durably first, inside the transaction,
        as pending, and named after the commit (records.py `write_pending`)."""
        row = record_row(record)
        name: str | None = None
        try:
            with self._guard(), self._write() as conn:
                if conn.execute("SELECT 1 FROM checkpoints WHERE id = ?",
                                (record.id,)).fetchone():
                    raise CheckpointError(f"checkpoint id already exists: {record.id}")
                name = self.records.write_pending(row, self._tracked_paths(conn, record.session))
                conn.execute(_INSERT, (*row, row_digest(row)))
                if event is not None:
                    self._insert_event(conn, event)
                if journal is not None:
                    self._set_journal(conn, os.fsencode(record.root), journal)
        except BaseException:
            # A Ctrl-C can land after the commit, in the transaction's exit: the row then
            # exists and its file must stay (the next open names it). Unsure: keep it too.
            if name is not None and not self._maybe_committed(record.id):
                self.records.discard_pending(name)
            raise
        # Committed: the checkpoint exists. A failure to name its file now is not a failure
        # of the create; the next open names it (the file is pending, its row committed).
        with contextlib.suppress(OSError):
            self.records.publish(name)

    def _maybe_committed(self, checkpoint_id: str) -> bool:
        """Whether the row of `checkpoint_id` may exist (True when the catalog cannot say)."""
        try:
            with self._guard():
                return self._conn.execute("SELECT 1 FROM checkpoints WHERE id = ?",
                                          (checkpoint_id,)).fetchone() is not None
        except Exception:  # noqa: BLE001 - keeping a pending file is always safe
            return True

    def resolve(self, ref: str) -> CheckpointRecord:
        """The record with id `ref`, else the one whose id starts with `ref`.

        UnknownCheckpoint if none; AmbiguousCheckpoint with up to 10 sorted candidates."""
        if not ref:
            raise UnknownCheckpoint(ref)
        with self._guard():
            sql = f"{self.select} WHERE id = ?"
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
                reason: str | None = None, root: str | None = None,
                tool_call_id: str | None = None) -> list[CheckpointRecord]:
        """Matching records, oldest first (created_at, then id). `session=None`: all."""
        sql, params = _records_sql(select=self.select, session=session, turn_id=turn_id,
                                   reason=reason, root=root, tool_call_id=tool_call_id)
        with self._guard():
            return self._records(sql, params)

    def latest(self, *, session: str, turn_id: str | None = None,
               reason: str | None = None, root: str | None = None) -> CheckpointRecord | None:
        sql, params = _records_sql(select=self.select, session=session, turn_id=turn_id,
                                   reason=reason, root=root, newest=True, limit=1)
        with self._guard():
            found = self._records(sql, params)
        return found[0] if found else None

    def later_than(self, record: CheckpointRecord) -> list[CheckpointRecord]:
        """Records of the same session and root after `record` in history order, oldest first."""
        us = to_us(record.created_at)
        sql = (f"{self.select} WHERE session = ? AND root = ? AND "
               "(created_us > ? OR (created_us = ? AND id > ?)) ORDER BY created_us, id")
        with self._guard():
            return self._records(sql, (record.session, os.fsencode(record.root), us, us, record.id))

    def steps_back(self, record: CheckpointRecord, steps: int) -> CheckpointRecord | None:
        """The record `steps` before `record` in its session's history on its root (history
        order, as `later_than`); None when the timeline is shorter (refs.py: `ID~N`)."""
        if steps <= 0:
            return record
        us = to_us(record.created_at)
        sql = (f"{self.select} WHERE session = ? AND root = ? AND "
               "(created_us < ? OR (created_us = ? AND id < ?)) "
               "ORDER BY created_us DESC, id DESC LIMIT 1 OFFSET ?")
        with self._guard():
            found = self._records(sql, (record.session, os.fsencode(record.root), us, us,
                                        record.id, steps - 1))
        return found[0] if found else None

    def timeline_length(self, *, session: str, root: str) -> int:
        """How many records `session` has on `root`."""
        with self._guard():
            return int(self._conn.execute(
                "SELECT count(*) FROM checkpoints WHERE session = ? AND root = ?",
                (session, os.fsencode(root))).fetchone()[0])

    def undone(self, root: str) -> set[str]:
        """The pre-restore checkpoints of `root` an undo restored: what the metadata key
        `undo_of` of its checkpoints names (any session)."""
        with self._guard():
            rows = self._conn.execute(
                "SELECT json_extract(metadata, '$.undo_of') FROM checkpoints WHERE root = ? "
                "AND json_type(metadata, '$.undo_of') = 'text'", (os.fsencode(root),))
            return {str(row[0]) for row in rows}

    def delete_checkpoints(self, ids: Sequence[str], *, event: Event | None = None) -> None:
        """Delete these records (ids not present are ignored) and add `event`, in one txn.
        Their record files are set aside first, inside the transaction (a pruned checkpoint
        never comes back in a rebuild) and removed after the commit. If the transaction
        raises, they are settled as the next open would settle them (`reindex.settle_aside`,
        under a new write transaction: a Ctrl-C can land after the COMMIT, and another
        process may prune the same checkpoints meanwhile); a kill leaves them to that open.
        Once the COMMIT is done, a failure to remove the files leaves them to it as well."""
        if isinstance(ids, str):
            raise TypeError("ids must be a sequence of ids, not one string")
        with self._guard():
            aside: list[str] = []
            try:
                with self._write() as conn:
                    aside = self.records.set_aside_pruned(ids)
                    conn.executemany("DELETE FROM checkpoints WHERE id = ?", ((i,) for i in ids))
                    if event is not None:
                        self._insert_event(conn, event)
            except BaseException:
                if aside:
                    with contextlib.suppress(Exception), self._write() as conn:
                        reindex.settle_aside(self.records, conn, aside)
                raise
            with contextlib.suppress(OSError):
                self.records.drop_pruned(aside)

    def tree_roots(self) -> list[ObjectId]:
        """The distinct tree ids of all records of all sessions (GC roots), sorted; every row
        is checked against its digest, so a damaged one stops gc instead of steering it."""
        return sorted({record.tree for record in self.history(session=None)})

    def session_counts(self) -> dict[str, int]:
        """Number of records per session (sessions with records only)."""
        with self._guard():
            rows = self._conn.execute(
                "SELECT session, count(*) FROM checkpoints GROUP BY session ORDER BY session")
            return {str(name): int(n) for name, n in rows}

    def count(self) -> int:
        with self._guard():
            return int(self._conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0])

    # -- the record files -----------------------------------------------------------------

    def _tracked_paths(self, conn: sqlite3.Connection, session: str) -> list[bytes]:
        return sorted(bytes(row[0]) for row in conn.execute(
            "SELECT path FROM tracked WHERE session = ?", (session,)))

    def unindexed_records(self) -> set[str]:
        """Names of the record files whose checkpoints the catalog lacks (reindex.py)."""
        return reindex.unindexed(self)

    def adopt_records(self) -> list[str]:
        """Add the record files' checkpoints the catalog lacks; the ids added (reindex.py)."""
        with self.transaction() as conn:
            return reindex.adopt(self, conn)

    def audit(self) -> tuple[list[CheckpointRecord], list[tuple[str, str]]]:
        """(sound records, problems as (where, what)): rows against record files (fsck)."""
        return reindex.audit(self)

    def repair(self) -> list[str]:
        """Make rows and record files agree (fsck --repair); one line per change."""
        return reindex.repair(self)

    # -- for reindex.py -------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction, errors turned into ours."""
        with self._guard(), self._write() as conn:
            yield conn

    @contextmanager
    def reading(self) -> Iterator[sqlite3.Connection]:
        """The connection for reads, errors turned into ours."""
        with self._guard():
            yield self._conn

    def parse(self, row: Sequence[Any]) -> CheckpointRecord:
        return self._parse(row)

    def insert_row(self, conn: sqlite3.Connection, row: Row) -> None:
        conn.execute(_INSERT, (*row, row_digest(row)))

    def insert_event(self, conn: sqlite3.Connection, event: Event) -> None:
        self._insert_event(conn, event)

    # -- tracked paths --------------------------------------------------------------------

    def tracked(self, session: str) -> tuple[RelPath, ...]:
        """The session's tracked paths, sorted by bytes."""
        with self._guard():
            rows = self._conn.execute("SELECT path FROM tracked WHERE session = ?", (session,))
            paths = sorted(bytes(row[0]) for row in rows)
        return tuple(cast("RelPath", p) for p in paths)

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

    def events_after(self, seq: int, *, session: str | None = None,
                     type: str | None = None,  # noqa: A002
                     limit: int | None = None) -> tuple[list[Event], int]:
        """The matching events added after event number `seq` (insertion order; `limit`
        keeps the newest), and the number of the last event of the table when read: the
        `seq` of the next call, so an event is never told twice (`events --follow`)."""
        where: list[str] = ["seq > ?", "seq <= ?"]
        params: list[Any] = [seq]
        with self._guard():
            row = self._conn.execute("SELECT max(seq) FROM events").fetchone()
            last = int(row[0]) if row and row[0] is not None else 0
            params.append(last)
            for column, value in (("session", session), ("type", type)):
                if value is not None:
                    where.append(f"{column} = ?")
                    params.append(value)
            sql = ("SELECT seq, type, at_us, session, data FROM events WHERE "
                   + " AND ".join(where) + " ORDER BY seq DESC")
            if limit is not None:
                if limit < 0:
                    raise ValueError(f"limit must be >= 0, not {limit}")
                sql += f" LIMIT {int(limit)}"
            rows = self._conn.execute(sql, params).fetchall()
        rows.reverse()
        return [self._parse_event(r) for r in rows], max(last, seq)

    def _parse_event(self, row: Sequence[Any]) -> Event:
        seq, type_, at_us, session, data = row
        try:
            fields = json.loads(data)
            if not isinstance(fields, dict):
                raise TypeError("event data is not a JSON object")
            return Event(type=type_, at=from_us(at_us), session=session, data=fields)
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
        that moved) and add `event`, in one transaction; the number of records moved. Each
        moved row gets its new digest, and its record file is rewritten after the commit (one
        a kill leaves stale is what `fsck` reports and `--repair` rewrites from the row)."""
        with self._guard(), self._write() as conn:
            rows = [(*row[:13], os.fsencode(new), *row[14:]) for row in conn.execute(
                f"SELECT {_COLUMNS} FROM checkpoints WHERE root = ?", (os.fsencode(old),))]
            conn.executemany("UPDATE checkpoints SET root = ?, digest = ? WHERE id = ?",
                             ((os.fsencode(new), row_digest(row), row[0]) for row in rows))
            conn.execute("UPDATE OR REPLACE restores SET root = ? WHERE root = ?",
                         (os.fsencode(new), os.fsencode(old)))
            if event is not None:
                self._insert_event(conn, event)
            tracked = reindex.tracked_by_session(conn)
        for row in rows:
            self.records.write(row, tracked.get(row[1], ()))
        return len(rows)
