"""Record files (checkpoints/history/records.py) and the catalog as an index over them."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ckpt.checkpoints.errors import CatalogCorrupt, CheckpointError
from ckpt.checkpoints.history.catalog import (
    EXPECTED_STRUCTURE,
    Catalog,
    _expected_structure,
    structure_digest,
)
from ckpt.checkpoints.history.records import (
    BadRecord,
    decode_record,
    encode_record,
    record_name,
    record_row,
)
from ckpt.checkpoints.model import CheckpointRecord, CheckpointStats
from ckpt.checkpoints.service import Checkpoints
from ckpt.checkpoints.store_setup import repair_catalog
from ckpt.objstore import ObjectStore

T0 = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


def _record(record_id: str, *, at: datetime = T0, **changes: Any) -> CheckpointRecord:
    fields: dict[str, Any] = {
        "id": record_id, "label": "l", "reason": None, "turn_id": "t", "message_id": None,
        "tool_call_id": None, "summary": "s", "metadata": {"k": [1, "x"]}, "session": "s",
        "scope": "paths", "parent": None, "tree": bytes(range(32)), "created_at": at,
        "stats": CheckpointStats(1, 2, 3, 4, 0, 5, 6), "root": "/w", "paths": (b"a/b",)}
    return CheckpointRecord(**(fields | changes))


def _interrupted_after_commit(write: Any) -> Any:
    """A catalog's `_write` whose transaction commits, then meets a Ctrl-C."""
    @contextmanager
    def interrupted() -> Iterator[Any]:
        with write() as conn:
            yield conn
        raise KeyboardInterrupt
    return interrupted


def _failing_before_commit(write: Any) -> Any:
    """A catalog's `_write` whose transaction fails (a disk error) before it commits."""
    @contextmanager
    def failing() -> Iterator[Any]:
        with write() as conn:
            yield conn
            raise sqlite3.OperationalError("disk I/O error")
    return failing


def test_a_record_file_round_trips_and_refuses_a_flipped_byte() -> None:
    record = _record("ckpt-1-abc")
    data = encode_record(record_row(record), [b"a/b", b"c"])
    row, tracked, decoded = decode_record(data)
    assert decoded == record and tracked == (b"a/b", b"c") and row == record_row(record)
    for at in (3, len(data) // 2, len(data) - 1):
        damaged = bytearray(data)
        damaged[at] ^= 0x01
        with pytest.raises(BadRecord):
            decode_record(bytes(damaged))


def test_record_names_are_plain_file_names() -> None:
    assert record_name("ckpt-1796296767619-9iiut6fi") == "ckpt-1796296767619-9iiut6fi"
    for odd in ("../x", ".hidden", "a/b", "x-41", "ü"):
        name = record_name(odd)
        assert name.startswith("x-") and "/" not in name


def test_every_checkpoint_gets_a_record_file_and_prune_removes_it(tmp_path: Path) -> None:
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as catalog:
        catalog.set_tracked("s", [b"a/b"])
        catalog.add_checkpoint(_record("ckpt-1-a"))
        catalog.add_checkpoint(_record("ckpt-2-b", at=T0 + timedelta(seconds=1)))
        assert catalog.records.names() == {"ckpt-1-a", "ckpt-2-b"}
        assert catalog.records.read("ckpt-1-a")[1] == (b"a/b",)
        catalog.delete_checkpoints(["ckpt-1-a"])
        assert catalog.records.names() == {"ckpt-2-b"}


def test_a_deleted_catalog_is_rebuilt_with_tracked_paths_at_open(tmp_path: Path) -> None:
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as catalog:
        catalog.set_tracked("s", [b"a/b", b"z"])
        records = [_record(f"ckpt-{i}-x", at=T0 + timedelta(seconds=i)) for i in range(3)]
        for record in records:
            catalog.add_checkpoint(record)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.unlink(db + suffix)
    with Catalog.open(db) as catalog:
        assert catalog.rebuilt == 3
        assert catalog.history(session=None) == records
        assert catalog.tracked("s") == (b"a/b", b"z")
        assert [e.type for e in catalog.events()] == ["catalog:rebuild"]


def test_a_catalog_lacking_a_record_file_is_corrupt_until_repaired(tmp_path: Path) -> None:
    ObjectStore.init(str(tmp_path)).close()  # repair_catalog works on a store
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as catalog:
        for i in range(3):
            catalog.add_checkpoint(_record(f"ckpt-{i}-x", at=T0 + timedelta(seconds=i)))
    raw = sqlite3.connect(db)
    raw.execute("DELETE FROM checkpoints WHERE id = 'ckpt-1-x'")  # a catalog behind its files
    raw.commit()
    raw.close()
    with pytest.raises(CatalogCorrupt, match="1 checkpoint record"):
        Catalog.open(db)
    assert repair_catalog(tmp_path) == ["added checkpoint ckpt-1-x from its record file"]
    with Catalog.open(db) as catalog:
        assert [r.id for r in catalog.history(session=None)] == ["ckpt-0-x", "ckpt-1-x",
                                                                 "ckpt-2-x"]


def test_repair_sets_aside_a_damaged_record_file_no_row_holds(tmp_path: Path) -> None:
    ObjectStore.init(str(tmp_path)).close()
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as catalog:
        for i in range(2):
            catalog.add_checkpoint(_record(f"ckpt-{i}-x", at=T0 + timedelta(seconds=i)))
    damaged = tmp_path / "records" / "ckpt-1-x"
    damaged.write_bytes(damaged.read_bytes()[:-1] + b"?")
    os.unlink(db)
    with pytest.raises(CatalogCorrupt, match="1 checkpoint record"):  # rebuilt, but for one
        Catalog.open(db)
    done = repair_catalog(tmp_path)
    assert len(done) == 1 and done[0].startswith("moved the damaged record file ckpt-1-x")
    with Catalog.open(db) as catalog:
        assert [r.id for r in catalog.history(session=None)] == ["ckpt-0-x"]


def test_a_create_killed_between_its_record_and_its_row_leaves_neither(tmp_path: Path) -> None:
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as catalog:
        committed = _record("ckpt-1-a")
        catalog.add_checkpoint(committed)
        # What a kill leaves: a pending record whose row never committed, and one whose did.
        catalog.records.write_pending(record_row(_record("ckpt-2-b")), [])
        os.rename(catalog.records.file("ckpt-1-a"),
                  os.path.join(catalog.records.path, ".pending-ckpt-1-a"))
    with Catalog.open(db) as catalog:
        assert catalog.history(session=None) == [committed]
        assert catalog.records.listing() == ({"ckpt-1-a"}, set(), set())


def test_a_row_that_fails_its_digest_is_catalog_corruption(tmp_path: Path) -> None:
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as catalog:
        catalog.add_checkpoint(_record("ckpt-1-a"))
    raw = sqlite3.connect(db)
    raw.execute("UPDATE checkpoints SET label = 'renamed'")
    raw.commit()
    raw.close()
    with Catalog.open(db) as catalog:
        with pytest.raises(CatalogCorrupt, match=r"checksum.*fsck --repair"):
            catalog.history(session=None)
        good, problems = catalog.audit()
        assert good == [] and any("checksum" in what for _, what in problems)
        assert catalog.repair() == ["checkpoint ckpt-1-a: catalog row rewritten from its "
                                    "record file"]
        assert catalog.history(session=None)[0].label == "l"
        assert catalog.audit() == ([_record("ckpt-1-a")], [])


def test_a_damaged_schema_is_catalog_corruption_not_an_sqlite_error(tmp_path: Path) -> None:
    db = str(tmp_path / "catalog.db")
    Catalog.open(db).close()
    raw = sqlite3.connect(db)
    raw.execute("DROP INDEX checkpoints_turn")
    raw.commit()
    raw.close()
    with pytest.raises(CatalogCorrupt, match=r"damaged schema.*fsck --repair"):
        Catalog.open(db)


def test_gc_refuses_while_a_record_file_is_not_in_the_catalog(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "f").write_text("x")
    with Checkpoints.init(root) as cp:
        cp.create()
        raw = sqlite3.connect(os.path.join(cp.store_dir, "catalog.db"))
        raw.execute("DELETE FROM checkpoints")  # lost behind this process's back
        raw.commit()
        raw.close()
        with pytest.raises(CatalogCorrupt, match="gc refuses"):
            cp.gc(grace_seconds=0)
        assert cp.objects.backend is not None and sum(1 for _ in cp.objects.backend.iter_ids())


def test_an_older_catalog_gets_record_files_when_upgraded(tmp_path: Path) -> None:
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as catalog:
        catalog.add_checkpoint(_record("ckpt-1-a"))
    for name in os.listdir(tmp_path / "records"):
        os.unlink(tmp_path / "records" / name)
    raw = sqlite3.connect(db)  # what ckpt before record files made: schema 2, no digest
    raw.execute("ALTER TABLE checkpoints DROP COLUMN digest")
    raw.execute("PRAGMA user_version = 2")
    raw.commit()
    raw.close()
    with Catalog.open(db) as catalog:
        assert catalog.records.names() == {"ckpt-1-a"}
        assert catalog.audit() == ([_record("ckpt-1-a")], [])


def test_a_prune_killed_before_or_after_its_commit_leaves_a_consistent_catalog(
        tmp_path: Path) -> None:
    """What a kill -9 of a prune leaves: its record files set aside (`.pruning-`) with the
    rows still there (killed before the COMMIT: the prune never happened), or with the rows
    gone (killed after it). The next open names the first back and removes the second;
    fsck's audit is clean either way."""
    db = str(tmp_path / "catalog.db")
    records = [_record(f"ckpt-{i}-x", at=T0 + timedelta(seconds=i)) for i in range(4)]
    with Catalog.open(db) as catalog:
        for record in records:
            catalog.add_checkpoint(record)
        aside = catalog.records.set_aside_pruned(["ckpt-0-x", "ckpt-1-x", "ckpt-9-none"])
        assert aside == ["ckpt-0-x", "ckpt-1-x"]
        assert catalog.records.names() == {"ckpt-2-x", "ckpt-3-x"}  # a rebuild skips them
    raw = sqlite3.connect(db)
    raw.execute("DELETE FROM checkpoints WHERE id = 'ckpt-1-x'")  # its prune committed
    raw.commit()
    raw.close()
    with Catalog.open(db) as catalog:
        assert [r.id for r in catalog.history(session=None)] == ["ckpt-0-x", "ckpt-2-x",
                                                                 "ckpt-3-x"]
        assert catalog.records.listing() == ({"ckpt-0-x", "ckpt-2-x", "ckpt-3-x"}, set(),
                                             set())
        sound, problems = catalog.audit()
        assert len(sound) == 3 and problems == []


def test_a_prune_that_raises_before_or_after_its_commit_keeps_files_and_rows_together(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as catalog:
        for i in range(3):
            catalog.add_checkpoint(_record(f"ckpt-{i}-x", at=T0 + timedelta(seconds=i)))
        write = catalog._write
        monkeypatch.setattr(catalog, "_write", _failing_before_commit(write))
        with pytest.raises(sqlite3.OperationalError):
            catalog.delete_checkpoints(["ckpt-0-x"])
        assert catalog.records.listing() == ({"ckpt-0-x", "ckpt-1-x", "ckpt-2-x"}, set(),
                                             set())
        monkeypatch.setattr(catalog, "_write", _interrupted_after_commit(write))
        with pytest.raises(KeyboardInterrupt):
            catalog.delete_checkpoints(["ckpt-1-x"])
        monkeypatch.undo()
        assert catalog.records.listing() == ({"ckpt-0-x", "ckpt-2-x"}, set(), set())
    with Catalog.open(db) as catalog:
        assert [r.id for r in catalog.history(session=None)] == ["ckpt-0-x", "ckpt-2-x"]
        assert catalog.audit()[1] == []


def test_a_failed_prune_settles_its_files_by_the_rows_another_process_left(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prune whose transaction fails while another process prunes the same checkpoint
    (between the failure and the cleanup): the file goes with the row the other one
    deleted, instead of coming back without it."""
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as first:
        for i in range(2):
            first.add_checkpoint(_record(f"ckpt-{i}-x", at=T0 + timedelta(seconds=i)))
        write = first._write

        def other_prune_first() -> Any:
            with Catalog.open(db) as other:
                other.delete_checkpoints(["ckpt-0-x"])
            return write()

        calls = iter([_failing_before_commit(write), other_prune_first])
        monkeypatch.setattr(first, "_write", lambda: next(calls)())
        with pytest.raises(sqlite3.OperationalError):
            first.delete_checkpoints(["ckpt-0-x"])
        monkeypatch.undo()
        assert first.records.listing() == ({"ckpt-1-x"}, set(), set())
    with Catalog.open(db) as catalog:
        assert [r.id for r in catalog.history(session=None)] == ["ckpt-1-x"]
        assert catalog.audit()[1] == []


def test_repair_settles_what_a_killed_prune_set_aside(tmp_path: Path) -> None:
    ObjectStore.init(str(tmp_path)).close()
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as catalog:
        for i in range(2):
            catalog.add_checkpoint(_record(f"ckpt-{i}-x", at=T0 + timedelta(seconds=i)))
        catalog.records.set_aside_pruned(["ckpt-0-x"])  # and killed before its COMMIT
    assert repair_catalog(tmp_path) == []  # nothing to write: the file is named back
    with Catalog.open(db) as catalog:
        assert catalog.records.listing() == ({"ckpt-0-x", "ckpt-1-x"}, set(), set())


def test_the_pinned_schema_structure_is_the_schema_s() -> None:
    assert structure_digest(_expected_structure()) == EXPECTED_STRUCTURE


def test_a_ctrl_c_after_the_commit_keeps_the_record_file(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A KeyboardInterrupt that lands in the transaction's exit after the COMMIT: the row
    exists, so its pending record file stays, and the next open names it."""
    db = str(tmp_path / "catalog.db")
    with Catalog.open(db) as catalog:
        monkeypatch.setattr(catalog, "_write", _interrupted_after_commit(catalog._write))
        with pytest.raises(KeyboardInterrupt):
            catalog.add_checkpoint(_record("ckpt-1-a"))
        monkeypatch.undo()
        with pytest.raises(CheckpointError):  # an error before the commit: nothing is kept
            catalog.add_checkpoint(_record("ckpt-1-a"))
    with Catalog.open(db) as catalog:
        assert [r.id for r in catalog.history(session=None)] == ["ckpt-1-a"]
        assert catalog.records.names() == {"ckpt-1-a"}
        sound, problems = catalog.audit()
        assert [r.id for r in sound] == ["ckpt-1-a"] and problems == []
