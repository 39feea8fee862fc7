"""The SQLite catalog (checkpoints.history.catalog): round trips, queries, atomicity, damage, sharing."""

from __future__ import annotations

import dataclasses
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt import checkpoints
from ckpt.checkpoints.errors import (
    AmbiguousCheckpoint,
    CatalogCorrupt,
    CheckpointError,
    StoreBusy,
    UnknownCheckpoint,
)
from ckpt.checkpoints.history.catalog import SCHEMA_VERSION, Catalog, _records_sql
from ckpt.checkpoints.model import CheckpointRecord, CheckpointStats, Event, SkippedPath
from ckpt.checkpoints.paths import RelPath

REPO = str(Path(checkpoints.__path__[0]).resolve().parent)
T0 = datetime(2026, 11, 29, 16, 0, tzinfo=UTC)

# Deterministic records by number, shared with the child processes below (run via exec), so
# the parent can check that what a killed child wrote is exactly what it meant to write.
FACTORY = '''
from datetime import datetime, timedelta, timezone
from ckpt.checkpoints.model import CheckpointRecord, CheckpointStats, Event, SkippedPath

def numbered_record(n, session):
    at = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=n)
    return CheckpointRecord(
        id=f"ckpt-{1767225600000 + n:013d}-{n:08d}", label=f"label {n} \\u00e9", reason="turn",
        turn_id=f"turn-{n // 3}", message_id=None, tool_call_id=f"call-{n}",
        summary="x" * (n % 50), metadata={"n": n, "nested": {"l": [n, str(n), None]}},
        session=session, scope="paths", parent=None, tree=n.to_bytes(32, "big"),
        created_at=at, stats=CheckpointStats(n, 2 * n, 1, n, 1, 5), root="/r/\\udcff",
        skipped=(SkippedPath(b"big-%d" % n, "too-large"),), paths=(b"p/\\xff%d" % n,))

def numbered_event(record):
    return Event("checkpoint:create", record.created_at, record.session, {"id": record.id})
'''
_factory: dict[str, Any] = {}
exec(FACTORY, _factory)  # noqa: S102 - our own constant, shared with the children
numbered_record = _factory["numbered_record"]
numbered_event = _factory["numbered_event"]

WRITER = FACTORY + '''
import sys
from ckpt.checkpoints.history.catalog import Catalog
path, session, start, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
with Catalog.open(path) as catalog:
    print("ready", flush=True)
    for n in range(start, start + count):
        record = numbered_record(n, session)
        catalog.add_checkpoint(record, event=numbered_event(record))
        print(record.id, flush=True)
'''

PRUNER = '''
import sys
from datetime import datetime, timezone
from ckpt.checkpoints.history.catalog import Catalog
from ckpt.checkpoints.model import Event
path = sys.argv[1]
with Catalog.open(path) as catalog:
    while ids := [r.id for r in catalog.history(session="old")[:10]]:
        catalog.latest(session="old")
        catalog.tree_roots()
        catalog.delete_checkpoints(ids, event=Event(
            "checkpoint:prune", datetime.now(timezone.utc), "old", {"removed": ids}))
'''


def spawn(code: str, *args: object) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def make_record(record_id: str, *, session: str = "s", at: datetime = T0,
                **changes: Any) -> CheckpointRecord:
    fields: dict[str, Any] = {
        "id": record_id, "label": None, "reason": None, "turn_id": None, "message_id": None,
        "tool_call_id": None, "summary": None, "metadata": {}, "session": session,
        "scope": "tree", "parent": None, "tree": bytes(32), "created_at": at,
        "stats": CheckpointStats(0, 0, 0, 0, 0, 0), "root": "/w"}
    return CheckpointRecord(**(fields | changes))


@pytest.fixture
def db_path(tmp_path: Path) -> str:
    return str(tmp_path / "catalog.db")


@pytest.fixture
def catalog(db_path: str) -> Iterator[Catalog]:
    with Catalog.open(db_path) as opened:
        yield opened


# -- round trips --------------------------------------------------------------------------

def test_every_record_field_round_trips_byte_exact(catalog: Catalog, db_path: str) -> None:
    record = make_record(
        "ckpt-1795969022123-abcdefgh", label="rêve 🚀 \"quoted\"\nnewline", reason="turn-end",
        turn_id="turn-7", message_id="msg-é", tool_call_id="call-1", summary="ünïcode ∑",
        metadata={"a": [1, 2.5, {"b": None, "c": [True, False]}], "ü": {"": ""}, "big": 2**70},
        session="sessión", scope="paths", parent="ckpt-1795969022000-parent00",
        tree=bytes(range(1, 33)), at=datetime(2026, 11, 29, 16, 17, 2, 123456, UTC),
        stats=CheckpointStats(12, 3456, 7, 890, 2, 55, hashed=4), root="/srv/u/caf\udce9",
        skipped=(SkippedPath(RelPath(b"big\xff.bin"), "too-large"),
                 SkippedPath(RelPath(b"fifo"), "special")),
        paths=(b"src/\xff\xfe.py", b"docs/r\xc3\xa9sum\xc3\xa9.md", b"a"))
    catalog.add_checkpoint(record)
    for opened in (catalog, Catalog.open(db_path)):
        back = opened.resolve(record.id)
        assert back == record
        assert back.created_at == record.created_at  # microseconds kept, not only the JSON ms
        assert back.paths == record.paths and back.skipped == record.skipped
        assert back.root == record.root and back.stats.hashed == 4
        assert back.to_json() == record.to_json()


def test_none_fields_and_empty_tuples_round_trip(catalog: Catalog) -> None:
    record = make_record("ckpt-1")
    catalog.add_checkpoint(record)
    assert catalog.resolve("ckpt-1") == record
    assert catalog.history(session="s") == [record]


text = st.text(st.characters(codec="utf-8"), max_size=20)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63) | text
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12)
paths = st.binary(min_size=1, max_size=12).filter(lambda b: b"\0" not in b)
counts = st.integers(0, 2**63 - 1)
records = st.builds(
    CheckpointRecord,
    id=text.filter(bool), label=st.none() | text, reason=st.none() | text,
    turn_id=st.none() | text, message_id=st.none() | text, tool_call_id=st.none() | text,
    summary=st.none() | text, metadata=st.dictionaries(text, json_values, max_size=4),
    session=text, scope=st.sampled_from(["tree", "paths"]), parent=st.none() | text,
    tree=st.binary(min_size=32, max_size=32),
    created_at=st.datetimes(datetime(1900, 1, 1), datetime(2200, 1, 1),
                            timezones=st.builds(timezone, st.timedeltas(
                                -timedelta(hours=12), timedelta(hours=12)))),
    stats=st.builds(CheckpointStats, counts, counts, counts, counts, counts, counts, counts),
    root=st.binary(max_size=20).map(os.fsdecode),
    skipped=st.lists(st.builds(SkippedPath, paths, text.filter(lambda t: t and "\0" not in t)),
                     max_size=3).map(tuple),
    paths=st.lists(paths, max_size=4).map(tuple))


def test_any_record_round_trips_through_the_catalog(tmp_path: Path) -> None:
    catalog = Catalog.open(str(tmp_path / "catalog.db"), fsync="none")
    serial = iter(range(10**9))

    @settings(max_examples=80, deadline=None)
    @given(records)
    def round_trip(record: CheckpointRecord) -> None:
        kind = f"test:{next(serial)}"
        catalog.add_checkpoint(record, event=Event(kind, record.created_at, record.session,
                                                   {"meta": record.metadata}))
        try:
            back = catalog.resolve(record.id)
            assert back == record
            assert back.to_json() == record.to_json()
            assert json.loads(json.dumps(back.to_json())) == record.to_json()
            assert catalog.history(session=record.session, root=record.root) == [record]
            [event] = catalog.events(type=kind)
            assert event.to_json()["meta"] == record.to_json()["metadata"]
        finally:
            catalog.delete_checkpoints([record.id])

    with catalog:
        round_trip()


def test_a_duplicate_id_is_refused_and_changes_nothing(catalog: Catalog) -> None:
    catalog.add_checkpoint(make_record("ckpt-1", label="first"))
    with pytest.raises(CheckpointError, match="ckpt-1"):
        catalog.add_checkpoint(make_record("ckpt-1", label="second"),
                               event=Event("checkpoint:create", T0, "s", {}))
    assert catalog.resolve("ckpt-1").label == "first"
    assert catalog.events() == []


# -- resolve ------------------------------------------------------------------------------

def test_resolve_takes_a_full_id_or_a_unique_prefix(catalog: Catalog) -> None:
    for id_ in ("ckpt-100-aaa", "ckpt-100-aab", "ckpt-200-zzz", "ckpt-100"):
        catalog.add_checkpoint(make_record(id_))
    assert catalog.resolve("ckpt-2").id == "ckpt-200-zzz"
    assert catalog.resolve("ckpt-100-aab").id == "ckpt-100-aab"
    assert catalog.resolve("ckpt-100").id == "ckpt-100"  # an exact id wins over longer ones


def test_resolve_reports_ambiguous_prefixes_with_sorted_candidates(catalog: Catalog) -> None:
    ids = [f"ckpt-5-{n:02d}" for n in range(14)]
    for id_ in reversed(ids):
        catalog.add_checkpoint(make_record(id_))
    with pytest.raises(AmbiguousCheckpoint) as info:
        catalog.resolve("ckpt-5-0")
    assert info.value.candidates == tuple(ids[:10])
    with pytest.raises(AmbiguousCheckpoint) as info:
        catalog.resolve("ckpt-5-1")
    assert info.value.candidates == tuple(ids[10:])
    assert "ckpt-5-10" in str(info.value)


@pytest.mark.parametrize("ref", ["ckpt-9", "", "5-00", "CKPT-5", "ckpt-5-00x"])
def test_resolve_unknown_refs(catalog: Catalog, ref: str) -> None:
    catalog.add_checkpoint(make_record("ckpt-5-00"))
    with pytest.raises(UnknownCheckpoint) as info:
        catalog.resolve(ref)
    assert info.value.ref == ref and isinstance(info.value, KeyError)


# -- history, latest, later_than ----------------------------------------------------------

@pytest.fixture
def timeline(catalog: Catalog) -> Catalog:
    """Two sessions, inserted out of order; two records share a timestamp."""
    rows = [("ckpt-04", "a", 4, "t2", "turn-end"), ("ckpt-01", "a", 1, "t1", "turn-start"),
            ("ckpt-03b", "a", 3, "t2", "turn-start"), ("ckpt-03a", "a", 3, "t1", "turn-end"),
            ("ckpt-02", "b", 2, "t1", "turn-start"), ("ckpt-05", "b", 5, None, None)]
    for id_, session, minute, turn, reason in rows:
        catalog.add_checkpoint(make_record(id_, session=session, turn_id=turn, reason=reason,
                                           at=T0 + timedelta(minutes=minute),
                                           root="/w" if session == "a" else "/other"))
    return catalog


def ids(records: list[CheckpointRecord]) -> list[str]:
    return [r.id for r in records]


def test_history_is_oldest_first_by_time_then_id(timeline: Catalog) -> None:
    assert ids(timeline.history(session="a")) == ["ckpt-01", "ckpt-03a", "ckpt-03b", "ckpt-04"]
    assert ids(timeline.history(session=None)) == [
        "ckpt-01", "ckpt-02", "ckpt-03a", "ckpt-03b", "ckpt-04", "ckpt-05"]
    assert timeline.history(session="nobody") == []


def test_history_filters_by_turn_reason_and_root(timeline: Catalog) -> None:
    assert ids(timeline.history(session="a", turn_id="t1")) == ["ckpt-01", "ckpt-03a"]
    assert ids(timeline.history(session=None, turn_id="t1")) == [
        "ckpt-01", "ckpt-02", "ckpt-03a"]
    assert ids(timeline.history(session="a", reason="turn-end")) == ["ckpt-03a", "ckpt-04"]
    assert ids(timeline.history(session="a", turn_id="t2", reason="turn-start")) == ["ckpt-03b"]
    assert ids(timeline.history(session=None, root="/other")) == ["ckpt-02", "ckpt-05"]


def test_latest_is_the_newest_match_or_none(timeline: Catalog) -> None:
    assert timeline.latest(session="a") is not None
    assert timeline.latest(session="a").id == "ckpt-04"  # type: ignore[union-attr]
    assert timeline.latest(session="a", turn_id="t1").id == "ckpt-03a"  # type: ignore[union-attr]
    assert timeline.latest(session="b", reason="turn-start").id == "ckpt-02"  # type: ignore[union-attr]
    assert timeline.latest(session="b", reason="turn-end") is None
    assert timeline.latest(session="nobody") is None


def test_later_than_lists_the_same_sessions_later_records(timeline: Catalog) -> None:
    first = timeline.resolve("ckpt-01")
    assert ids(timeline.later_than(first)) == ["ckpt-03a", "ckpt-03b", "ckpt-04"]
    assert ids(timeline.later_than(timeline.resolve("ckpt-03a"))) == ["ckpt-03b", "ckpt-04"]
    assert timeline.later_than(timeline.resolve("ckpt-04")) == []
    assert ids(timeline.later_than(timeline.resolve("ckpt-02"))) == ["ckpt-05"]


def test_counts_and_tree_roots(catalog: Catalog) -> None:
    for n, (session, tree) in enumerate([("a", 1), ("a", 2), ("b", 1), ("c", 3)]):
        catalog.add_checkpoint(make_record(f"ckpt-{n}", session=session,
                                           tree=bytes([tree]) * 32))
    assert catalog.count() == 4
    assert catalog.session_counts() == {"a": 2, "b": 1, "c": 1}
    assert catalog.tree_roots() == [bytes([1]) * 32, bytes([2]) * 32, bytes([3]) * 32]


def test_delete_removes_records_and_records_the_event_together(timeline: Catalog) -> None:
    event = Event("checkpoint:prune", T0, "a", {"removed": ["ckpt-01", "ckpt-04", "ckpt-zz"]})
    timeline.delete_checkpoints(["ckpt-01", "ckpt-04", "ckpt-zz"], event=event)
    assert ids(timeline.history(session="a")) == ["ckpt-03a", "ckpt-03b"]
    assert timeline.events(type="checkpoint:prune") == [event]
    assert timeline.session_counts() == {"a": 2, "b": 2}
    timeline.delete_checkpoints([])
    with pytest.raises(TypeError):
        timeline.delete_checkpoints("ckpt-02")  # one string is not a list of ids
    assert timeline.count() == 4


# -- tracked paths and events -------------------------------------------------------------

def test_tracked_paths_are_per_session_sorted_and_replaced(catalog: Catalog) -> None:
    assert catalog.tracked("s") == ()
    catalog.set_tracked("s", [b"src/z.py", b"\xff\xfe/raw", b"a", b"src/z.py"])
    catalog.set_tracked("t", [b"other"])
    assert catalog.tracked("s") == (b"a", b"src/z.py", b"\xff\xfe/raw")
    catalog.set_tracked("s", [b"b"])
    assert catalog.tracked("s") == (b"b",) and catalog.tracked("t") == (b"other",)
    catalog.set_tracked("s", [])
    assert catalog.tracked("s") == ()
    with pytest.raises(ValueError):
        catalog.set_tracked("t", [b"ok", b"bad\0path"])
    assert catalog.tracked("t") == (b"other",)


def test_events_filter_by_session_and_type_and_limit_keeps_the_newest(catalog: Catalog) -> None:
    made = [Event("checkpoint:create" if n % 3 else "checkpoint:restore",
                  T0 + timedelta(seconds=n), "a" if n % 2 else "b", {"n": n, "ids": [str(n)]})
            for n in range(10)]
    for event in reversed(made[5:]):  # inserted out of time order: events() sorts by time
        catalog.add_event(event)
    for event in made[:5]:
        catalog.add_event(event)
    assert catalog.events() == made
    assert catalog.events(session="a") == [e for e in made if e.session == "a"]
    assert catalog.events(type="checkpoint:restore") == [made[0], made[3], made[6], made[9]]
    assert catalog.events(session="b", type="checkpoint:create") == [made[2], made[4], made[8]]
    assert catalog.events(limit=3) == made[-3:]
    assert catalog.events(session="a", limit=2) == [made[7], made[9]]
    assert catalog.events(limit=0) == []
    assert catalog.events()[3].to_json() == {"type": "checkpoint:restore",
                                             "at": "2026-11-29T16:00:03.000Z", "session": "a",
                                             "n": 3, "ids": ["3"]}


# -- schema, damage, locking --------------------------------------------------------------

def test_a_new_catalog_is_wal_and_versioned(catalog: Catalog, db_path: str) -> None:
    raw = sqlite3.connect(db_path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()


def test_a_schema_1_catalog_is_upgraded_in_place_keeping_its_rows(db_path: str) -> None:
    with Catalog.open(db_path) as catalog:
        record = numbered_record(1, "s")
        catalog.add_checkpoint(record, event=numbered_event(record))
    raw = sqlite3.connect(db_path)  # what ckpt before the restores table made
    raw.execute("DROP TABLE restores")
    raw.execute("PRAGMA user_version = 1")
    raw.commit()
    raw.close()
    with Catalog.open(db_path) as catalog:
        assert catalog.history(session=None) == [record]
        assert len(catalog.events()) == 1 and catalog.restore_journals() == []
        catalog.journal_restore(b"/root", b"intent")
        assert catalog.restore_journal(b"/root") == b"intent"
    raw = sqlite3.connect(db_path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    raw.close()


def test_a_restore_journal_goes_in_with_its_pre_restore_record_and_out_with_its_event(
        catalog: Catalog) -> None:
    record = dataclasses.replace(numbered_record(1, "s"), root="/ws/\udcff")
    root = os.fsencode(record.root)
    catalog.add_checkpoint(record, event=numbered_event(record), journal=b"first")
    assert catalog.restore_journal(root) == b"first"
    catalog.journal_restore(b"/other", b"theirs")
    catalog.journal_restore(root, b"second")  # one restore in progress per root
    assert catalog.restore_journals() == [(b"/other", b"theirs"), (root, b"second")]
    done = Event("checkpoint:restore", T0, "s", {"id": record.id})
    catalog.end_restore(root, event=done)
    assert catalog.restore_journal(root) is None and catalog.events()[-1] == done
    assert catalog.restore_journals() == [(b"/other", b"theirs")]
    catalog.end_restore(root)  # none left: nothing happens
    assert len(catalog.events()) == 2
    with pytest.raises(CheckpointError, match="already exists"):  # the journal is not left alone
        catalog.add_checkpoint(record, journal=b"third")
    assert catalog.restore_journal(root) is None


def test_a_newer_schema_version_is_refused(db_path: str) -> None:
    Catalog.open(db_path).close()
    raw = sqlite3.connect(db_path)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(CatalogCorrupt, match="newer"):
        Catalog.open(db_path)


def test_a_foreign_sqlite_database_is_refused(db_path: str) -> None:
    raw = sqlite3.connect(db_path)
    raw.execute("CREATE TABLE notes (x)")
    raw.commit()
    raw.close()
    with pytest.raises(CatalogCorrupt, match="not a ckpt catalog"):
        Catalog.open(db_path)


def test_a_damaged_header_is_catalog_corrupt(db_path: str) -> None:
    with Catalog.open(db_path) as catalog:
        catalog.add_checkpoint(make_record("ckpt-1"))
    with open(db_path, "r+b") as f:
        f.write(b"this is not sqlite at all")
    with pytest.raises(CatalogCorrupt) as info:
        Catalog.open(db_path)
    assert info.value.path == db_path and "not a database" in str(info.value)


def test_damaged_pages_are_catalog_corrupt(db_path: str) -> None:
    with Catalog.open(db_path, fsync="none") as catalog:
        for n in range(300):
            catalog.add_checkpoint(numbered_record(n, "s"))
    # The last connection closed, so the WAL is folded into the main file: damage it there.
    page_size = 4096
    size = os.path.getsize(db_path)
    with open(db_path, "r+b") as f:
        for offset in range(page_size, size, page_size):
            f.seek(offset)
            f.write(b"\xa5" * 64)
    with pytest.raises(CatalogCorrupt), Catalog.open(db_path) as catalog:
        catalog.history(session=None)


@pytest.mark.parametrize(("column", "value"), [
    ("tree", "x'00'"), ("tree", "'" + "ab" * 32 + "'"), ("metadata", "'{not json'"),
    ("metadata", "'[1]'"), ("metadata", "'{\"x\": NaN}'"), ("scope", "'everything'"),
    ("paths", "x'00'"), ("skipped", "x'6100'"), ("created_us", "'soon'"),
])
def test_a_row_that_does_not_parse_is_corrupt_naming_the_id(
        catalog: Catalog, db_path: str, column: str, value: str) -> None:
    catalog.add_checkpoint(make_record("ckpt-bad"))
    catalog.add_checkpoint(make_record("ckpt-good", at=T0 - timedelta(1)))
    raw = sqlite3.connect(db_path)
    raw.execute(f"UPDATE checkpoints SET {column} = {value} WHERE id = 'ckpt-bad'")
    raw.commit()
    raw.close()
    with pytest.raises(CatalogCorrupt, match="ckpt-bad"):
        catalog.resolve("ckpt-bad")
    with pytest.raises(CatalogCorrupt, match="ckpt-bad"):
        catalog.history(session="s")
    assert catalog.resolve("ckpt-good").id == "ckpt-good"


def test_a_tree_that_is_not_an_object_id_is_corrupt_in_tree_roots(
        catalog: Catalog, db_path: str) -> None:
    catalog.add_checkpoint(make_record("ckpt-1"))
    raw = sqlite3.connect(db_path)
    raw.execute("UPDATE checkpoints SET tree = 'abc'")
    raw.commit()
    raw.close()
    with pytest.raises(CatalogCorrupt):
        catalog.tree_roots()


def test_a_missing_directory_is_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Catalog.open(str(tmp_path / "no" / "catalog.db"))


def test_a_writer_held_past_the_timeout_is_store_busy(db_path: str) -> None:
    Catalog.open(db_path).close()
    holder = sqlite3.connect(db_path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with Catalog.open(db_path, busy_timeout=0.05) as catalog:
            with pytest.raises(StoreBusy) as info:
                catalog.add_checkpoint(make_record("ckpt-1"))
            assert info.value.path == db_path
            assert catalog.count() == 0  # readers are not blocked by the writer (WAL)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with Catalog.open(db_path) as catalog:
        catalog.add_checkpoint(make_record("ckpt-1"))  # nothing was left half done
        assert catalog.count() == 1


def test_queries_use_indexes() -> None:
    with tempfile.TemporaryDirectory() as tmp, Catalog.open(f"{tmp}/c.db") as catalog:
        cases: list[dict[str, Any]] = [
            {"session": "s"}, {"session": "s", "turn_id": "t"}, {"session": "s", "reason": "r"},
            {"session": None, "turn_id": "t"}, {"session": "s", "newest": True, "limit": 1},
            {"session": "s", "reason": "r", "newest": True, "limit": 1}]
        for case in cases:
            sql, params = _records_sql(**case)
            plan = " ".join(row[3] for row in catalog._conn.execute(
                "EXPLAIN QUERY PLAN " + sql, params))
            assert "USING INDEX" in plan, plan
            if case["session"] is not None:  # served in index order: no sort step
                assert "TEMP B-TREE" not in plan, plan


def test_one_catalog_can_be_shared_by_threads(catalog: Catalog) -> None:
    def add(start: int) -> None:
        for n in range(start, start + 25):
            catalog.add_checkpoint(numbered_record(n, "threads"))
            catalog.history(session="threads")

    workers = [threading.Thread(target=add, args=(k * 100,)) for k in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert catalog.count() == 100


# -- several processes --------------------------------------------------------------------

def test_records_survive_kill_9_at_any_moment_whole(db_path: str) -> None:
    rng = random.Random(20261129)
    for round_ in range(10):
        session, start = f"kill-{round_}", round_ * 100_000
        child = spawn(WRITER, db_path, session, start, 99_999)
        assert child.stdout is not None
        assert child.stdout.readline() == "ready\n", child.stderr.read()  # type: ignore[union-attr]
        reported = [child.stdout.readline() for _ in range(rng.randint(0, 25))]
        if rng.random() < 0.5:
            threading.Event().wait(rng.uniform(0, 0.005))
        child.send_signal(signal.SIGKILL)
        # read() also returns the lines readline() buffered; communicate() reads the raw pipe
        rest = child.stdout.read()
        child.communicate()
        assert child.returncode == -signal.SIGKILL
        reported += [line + "\n" for line in rest.split("\n")[:-1]]  # a torn last line: unsure
        reported_ids = [line.strip() for line in reported]
        with Catalog.open(db_path) as catalog:
            stored = catalog.history(session=session)
            stored_ids = ids(stored)
            # every reported id is there; at most the one in flight when killed is extra
            assert stored_ids[:len(reported_ids)] == reported_ids
            assert len(stored_ids) - len(reported_ids) in (0, 1)
            for n, record in enumerate(stored, start):
                assert record == numbered_record(n, session)
            events = catalog.events(session=session)
            assert [e.data["id"] for e in events] == stored_ids  # record and event: one txn
            assert catalog._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_concurrent_writers_and_a_pruner_lose_nothing(db_path: str) -> None:
    with Catalog.open(db_path, fsync="none") as catalog:
        for n in range(60):
            catalog.add_checkpoint(numbered_record(n, "old"))
    writers = [spawn(WRITER, db_path, f"w{k}", 1000 * (k + 1), 40) for k in range(4)]
    pruner = spawn(PRUNER, db_path)
    for proc in [*writers, pruner]:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    with Catalog.open(db_path) as catalog:
        assert catalog.session_counts() == {f"w{k}": 40 for k in range(4)}
        for k in range(4):
            start = 1000 * (k + 1)
            expected = [numbered_record(n, f"w{k}") for n in range(start, start + 40)]
            assert catalog.history(session=f"w{k}") == expected
        pruned = [i for e in catalog.events(type="checkpoint:prune") for i in e.data["removed"]]
        assert sorted(pruned) == sorted(numbered_record(n, "old").id for n in range(60))


def test_two_processes_creating_one_new_catalog_both_succeed(db_path: str) -> None:
    procs = [spawn(WRITER, db_path, f"p{k}", 10_000 * k, 30) for k in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert len(out.split()) == 31
    with Catalog.open(db_path) as catalog:
        assert catalog.session_counts() == {"p0": 30, "p1": 30}
        assert len(catalog.events()) == 60
