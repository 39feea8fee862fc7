"""The catalog as an index over the record files: checked at open, audited, repaired.

Owns what compares the catalog's rows with the record files (records.py): `reconcile` (at
every open: settle the records a killed create left pending and those a killed prune set
aside, `settle_aside`; refuse a catalog that lacks record files), `unindexed` (which files
it lacks, under the write lock), `adopt` (add record files' checkpoints, rebuilding a new
catalog's tracked paths), `audit` (fsck: every row against its file, tolerating damage) and
`repair` (fsck --repair: make them agree, the sound file winning). The SQL and the
transactions are the catalog's (catalog.py); this module never touches the object store or
the working tree and reads the clock only for the event of a rebuild.
"""

from __future__ import annotations

import os
import sqlite3
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ckpt.checkpoints.errors import CatalogCorrupt, display_text
from ckpt.checkpoints.history.records import (
    BadRecord,
    Row,
    parse_row,
    record_name,
    row_digest,
    to_us,
)
from ckpt.checkpoints.model import CheckpointRecord, Event

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ckpt.checkpoints.history.catalog import Catalog
    from ckpt.checkpoints.history.records import RecordDir

REPAIR_HINT = "run 'ckpt fsck --repair' to rebuild the catalog from the record files"
Problem = tuple[str, str]  # (where, what)


def known_names(conn: sqlite3.Connection) -> set[str]:
    return {record_name(str(row[0])) for row in conn.execute("SELECT id FROM checkpoints")}


def tracked_by_session(conn: sqlite3.Connection) -> dict[str, list[bytes]]:
    found: dict[str, list[bytes]] = {}
    for session, path in conn.execute("SELECT session, path FROM tracked ORDER BY path"):
        found.setdefault(str(session), []).append(bytes(path))
    return found


def reconcile(catalog: Catalog) -> None:
    """At open: settle the records a killed create left pending and those a killed prune set
    aside, and refuse a catalog that lacks record files (`CatalogCorrupt` naming the repair
    command). The test is one listing and one count."""
    records = catalog.records
    names, pending, pruning = records.listing()
    if (pending or pruning) and catalog.readonly is None:
        with catalog.transaction() as conn:
            # Under the write lock no create or prune is between its files and its commit: a
            # pending record with a row was committed, one without never will be; a record
            # set aside whose row is still there belongs to a prune that never committed.
            committed = known_names(conn)
            for name in sorted(pending):
                if name in committed:
                    records.publish(name)
                    names.add(name)
                else:
                    records.discard_pending(name)
            names.update(settle_aside(records, conn, pruning))
    if not names:
        return
    if len(names) > catalog.count():  # or a prune between the listing and the count: again
        lacking = unindexed(catalog) if catalog.readonly is None else names
        if lacking:
            raise CatalogCorrupt(catalog.path, f"{len(lacking)} checkpoint record(s) in "
                                 f"{records.path} are not in the catalog; {REPAIR_HINT}")


def settle_aside(records: RecordDir, conn: sqlite3.Connection, aside: Iterable[str]
                 ) -> list[str]:
    """Settle record files a prune set aside, in the caller's write transaction (so no prune
    is between its files and its commit): named back where the row is still there (that
    prune never committed), removed where it is gone. Returns the names put back."""
    committed = known_names(conn)
    names = sorted(set(aside))
    back = [n for n in names if n in committed]
    records.restore_pruned(back)
    records.drop_pruned([n for n in names if n not in committed])
    return back


def unindexed(catalog: Catalog) -> set[str]:
    """The record files whose checkpoints the catalog lacks, looked at under the write lock:
    no create or prune is half done meanwhile (each changes its files inside its
    transaction, and a create names its file only once its row is committed)."""
    with catalog.transaction() as conn:
        return catalog.records.names() - known_names(conn)


def adopt(catalog: Catalog, conn: sqlite3.Connection, *,
          now: datetime | None = None) -> list[str]:
    """Add the record files' checkpoints that the catalog lacks (in the caller's write
    transaction; a damaged file is skipped: `audit` reports it). A catalog that held no
    checkpoint also gets each session's tracked paths from its newest record, and a
    `catalog:rebuild` event per session. Returns the ids added."""
    known = known_names(conn)
    added: list[str] = []
    newest: dict[str, tuple[int, tuple[bytes, ...]]] = {}
    per_session: dict[str, int] = {}
    for name in sorted(catalog.records.names() - known):
        try:
            row, tracked, record = catalog.records.read(name)
        except (BadRecord, FileNotFoundError):
            continue
        catalog.insert_row(conn, row)
        added.append(record.id)
        per_session[record.session] = per_session.get(record.session, 0) + 1
        created = to_us(record.created_at)
        if record.session not in newest or newest[record.session][0] <= created:
            newest[record.session] = (created, tracked)
    if not known and added:
        for session, (_, tracked) in newest.items():
            conn.executemany("INSERT OR IGNORE INTO tracked (session, path) VALUES (?, ?)",
                             ((session, p) for p in tracked))
        when = now or datetime.now(UTC)
        for session in sorted(newest):
            catalog.insert_event(conn, Event("catalog:rebuild", when, session,
                                             {"adopted": per_session[session]}))
    return added


def audit(catalog: Catalog) -> tuple[list[CheckpointRecord], list[Problem]]:
    """Compare every row with its record file, tolerating damage: (the records whose rows are
    sound, the problems). Never raises for a damaged row or file."""
    problems: list[Problem] = []
    good: list[CheckpointRecord] = []
    records = catalog.records
    with catalog.reading() as conn:
        checked = [str(row[0]) for row in conn.execute("PRAGMA integrity_check")]
        rows = conn.execute(f"{catalog.select} ORDER BY created_us, id").fetchall()
    if checked != ["ok"]:  # such as an index entry that no longer matches its row
        problems.extend((catalog.path, f"integrity check: {line}; {REPAIR_HINT}")
                        for line in checked[:10])
    names = records.names()
    seen: set[str] = set()
    for row in rows:
        columns = row[:-1]
        name = record_name(str(columns[0]))
        seen.add(name)
        try:
            record = catalog.parse(row)
        except CatalogCorrupt as exc:
            problems.append((catalog.path, exc.reason))
            continue
        good.append(record)
        if name not in names:
            problems.append((records.file(record.id),
                             f"checkpoint {record.id} has no record file; {REPAIR_HINT}"))
            continue
        try:
            file_row = records.read(name)[0]
        except (BadRecord, OSError) as exc:
            problems.append((records.file(record.id),
                             f"damaged record file: {exc}; {REPAIR_HINT}"))
            continue
        if tuple(file_row) != tuple(columns):
            problems.append((catalog.path, f"checkpoint {record.id}: the catalog row differs "
                             f"from its record file; {REPAIR_HINT}"))
    problems.extend((os.path.join(records.path, name),
                     f"a checkpoint record the catalog lacks; {REPAIR_HINT}")
                    for name in sorted(names - seen))
    return good, problems


def _sound(row: Row, digest: object) -> bool:
    try:
        parse_row(row)
    except (ValueError, TypeError, OverflowError):
        return False
    return digest is not None and row_digest(row) == digest


def repair(catalog: Catalog) -> list[str]:
    """Make rows and record files agree, the file winning where both are sound: rebuild the
    indexes, adopt the files the catalog lacks, rewrite damaged or differing rows from their
    files, write the files that are missing or damaged from sound rows, drop a damaged row
    with no sound file (nothing sound is left of it) and set aside a damaged file with no row.
    Returns what it did, one line per change."""
    records = catalog.records
    with catalog.transaction() as conn:
        settle_aside(records, conn, records.listing()[2])  # a killed prune's, as an open does
        conn.execute("REINDEX")  # indexes rebuilt from the rows, which are checked below
        done = [f"added checkpoint {i} from its record file" for i in adopt(catalog, conn)]
    for name in sorted(unindexed(catalog)):  # left out by `adopt`: unreadable
        aside = records.set_aside(name)
        done.append(f"moved the damaged record file {name} (no row holds its checkpoint) "
                    f"to {aside}")
    with catalog.transaction() as conn:
        tracked = tracked_by_session(conn)
        names = records.names()
        for row in conn.execute(catalog.select).fetchall():
            columns, digest = row[:-1], row[-1]
            checkpoint_id = str(columns[0])
            name = record_name(checkpoint_id)
            sound = _sound(columns, digest)
            try:
                file_row: Row | None = records.read(name)[0] if name in names else None
            except (BadRecord, OSError):
                file_row = None
            if file_row is not None and (not sound or tuple(file_row) != tuple(columns)):
                conn.execute("DELETE FROM checkpoints WHERE id = ?", (checkpoint_id,))
                if conn.execute("SELECT 1 FROM checkpoints WHERE id = ?",
                                (file_row[0],)).fetchone() is None:
                    catalog.insert_row(conn, file_row)
                done.append(f"checkpoint {file_row[0]}: catalog row rewritten from its "
                            "record file")
            elif file_row is None and sound:
                records.write(columns, tracked.get(str(columns[1]), ()))
                done.append(f"checkpoint {checkpoint_id}: record file written")
            elif file_row is None:
                conn.execute("DELETE FROM checkpoints WHERE id = ?", (checkpoint_id,))
                done.append(f"checkpoint {display_text(checkpoint_id)}: dropped (damaged row, "
                            "no sound record file)")
    return done
