"""Prune, retention and garbage collection through `Checkpoints`, on real stores.

The seed sandbox flow (restore without an event, `prune(reason=, keep_latest=)` with its
event), the filters, the per-session cap, what gc frees and what it must keep, and bounded
growth: a long session pruned to its last ten checkpoints is no bigger than a fresh store
holding just those ten.
"""

from __future__ import annotations

import dataclasses
import os
import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import restore_helpers as h  # tests/ dirs are on pytest's `pythonpath`

from ckpt.checkpoints import RestoreOptions
from ckpt.checkpoints.config import read_config, write_config
from ckpt.checkpoints.errors import UnknownCheckpoint
from ckpt.checkpoints.history.retention import select_over_cap
from ckpt.checkpoints.service import Checkpoints


class StepClock:
    """A clock that moves one minute per reading: creation times are distinct and ordered."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(minutes=1)
        return self.now


@pytest.fixture
def root(tmp_path: Path) -> str:
    path = os.path.realpath(tmp_path / "ws")
    os.mkdir(path)
    return path


@pytest.fixture
def service(root: str) -> Iterator[Checkpoints]:
    Checkpoints.init(root).close()
    with Checkpoints.open(root, clock=StepClock()) as cp:
        yield cp


def turn(root: str, cp: Checkpoints, index: int, reason: str, turn_id: str | None = None) -> str:
    h.write_file(root, "work.txt", b"turn %d\n" % index)
    return cp.create(label=f"turn {index}", reason=reason, turn_id=turn_id).id


# -- the seed sandbox flow ----------------------------------------------------------------


def test_seed_sandbox_flow_restores_without_event_and_prunes_by_reason_keeping_latest(
        root: str, service: Checkpoints) -> None:
    heard = []
    service.on("checkpoint:prune", heard.append)
    auto = [turn(root, service, i, "auto") for i in range(5)]
    manual = turn(root, service, 5, "manual")
    auto.append(turn(root, service, 6, "auto"))

    service.restore(auto[1], RestoreOptions(record_event=False))
    assert service.events(type="checkpoint:restore") == []
    assert Path(root, "work.txt").read_bytes() == b"turn 1\n"

    report = service.prune(reason="auto", keep_latest=2)

    assert list(report.removed) == auto[:4]  # the older matching ones, oldest first
    remaining = [r.id for r in service.history()]
    assert remaining[:3] == [auto[4], manual, auto[5]] and len(remaining) == 4  # + pre-restore
    event = service.events(type="checkpoint:prune")[-1]
    assert list(event.data["removed"]) == auto[:4]
    assert event.data["reason"] == "auto" and event.data["keep_latest"] == 2
    assert heard == [event]
    with pytest.raises(UnknownCheckpoint):
        service.get(auto[0])


def test_prune_by_turn_id(root: str, service: Checkpoints) -> None:
    a = [turn(root, service, i, "auto", turn_id="t1") for i in range(3)]
    b = turn(root, service, 3, "auto", turn_id="t2")
    assert list(service.prune(turn_id="t1").removed) == a
    assert [r.id for r in service.history()] == [b]


def test_prune_older_than_spares_younger_checkpoints(root: str, service: Checkpoints) -> None:
    ids = [turn(root, service, i, "auto") for i in range(6)]  # one clock minute apart
    # The prune reads the clock once more: now is one minute after the last checkpoint.
    report = service.prune(older_than=timedelta(minutes=3, seconds=30))
    assert list(report.removed) == ids[:3]


def test_prune_with_no_filter_removes_nothing(root: str, service: Checkpoints) -> None:
    ids = [turn(root, service, i, "auto") for i in range(3)]
    assert service.prune().removed == ()
    assert [r.id for r in service.history()] == ids


def test_prune_dry_run_removes_nothing(root: str, service: Checkpoints) -> None:
    ids = [turn(root, service, i, "auto") for i in range(3)]
    report = service.prune(keep_latest=1, dry_run=True)
    assert list(report.removed) == ids[:2]
    assert [r.id for r in service.history()] == ids
    assert service.events(type="checkpoint:prune") == []


def test_prune_only_touches_its_own_session(root: str, service: Checkpoints) -> None:
    mine = [turn(root, service, i, "auto") for i in range(3)]
    with Checkpoints.open(root, session="other") as other:
        theirs = [turn(root, other, i, "auto") for i in range(3)]
        service.prune(keep_latest=1)
        assert [r.id for r in other.history()] == theirs
    assert [r.id for r in service.history()] == mine[-1:]


def test_retention_cap_evicts_the_oldest_of_the_session(root: str, service: Checkpoints) -> None:
    write_config(service.store_dir, dataclasses.replace(read_config(service.store_dir), retention_cap=3))
    with Checkpoints.open(root, clock=StepClock()) as capped:
        ids = [turn(root, capped, i, "auto") for i in range(5)]
        assert [r.id for r in capped.history()] == ids[2:]
        evictions = [e for e in capped.events(type="checkpoint:prune") if e.data["reason"] == "retention-cap"]
        assert [list(e.data["removed"]) for e in evictions] == [[ids[0]], [ids[1]]]


def test_retention_cap_never_evicts_the_checkpoint_a_restore_goes_back_to(
        root: str, service: Checkpoints) -> None:
    write_config(service.store_dir, dataclasses.replace(read_config(service.store_dir), retention_cap=3))
    with Checkpoints.open(root, clock=StepClock()) as capped:
        ids = [turn(root, capped, i, "auto") for i in range(3)]
        report = capped.restore(ids[0])  # its pre-restore save is the 4th: one must go
        assert Path(root, "work.txt").read_bytes() == b"turn 0\n"
        kept = [r.id for r in capped.history()]
        assert kept == [ids[0], ids[2], report.pre_restore]  # the next oldest went instead
        evictions = [e for e in capped.events(type="checkpoint:prune") if e.data["reason"] == "retention-cap"]
        assert [list(e.data["removed"]) for e in evictions] == [[ids[1]]]
        capped.restore(ids[0])  # still there to go back to again


def test_select_over_cap_spares_the_named_records_and_takes_the_next_oldest() -> None:
    # The decision reads only the ids: stand-ins keep the test to that.
    records: list[Any] = [SimpleNamespace(id=f"ckpt-{i}") for i in range(5)]
    assert select_over_cap(records, 3) == records[:2]
    assert select_over_cap(records, 3, spare=("ckpt-0",)) == records[1:3]
    assert select_over_cap(records, 3, spare=("ckpt-4",)) == records[:2]  # not among the oldest
    assert select_over_cap(records, 5, spare=("ckpt-0",)) == []
    assert select_over_cap(records, 0, spare=("ckpt-0",)) == []  # no cap


# -- garbage collection -----------------------------------------------------------------


def blob_of(cp: Checkpoints, ref: str, path: bytes) -> bytes:
    oid = next(e.oid for e in cp.files(ref) if e.path == path)
    assert oid is not None
    return oid


def test_gc_frees_what_no_remaining_checkpoint_references_and_keeps_the_rest(root: str, service: Checkpoints) -> None:
    h.write_file(root, "data.bin", random.Random(1).randbytes(50_000))
    h.write_file(root, "shared.txt", b"in both checkpoints")
    old = service.create(label="old").id
    h.write_file(root, "data.bin", random.Random(2).randbytes(50_000))
    new = service.create(label="new").id
    gone, kept, shared = blob_of(service, old, b"data.bin"), blob_of(service, new, b"data.bin"), \
        blob_of(service, new, b"shared.txt")

    service.prune(keep_latest=1, collect=False)
    young = service.gc()  # default grace period: everything was written just now
    assert young.objects_removed == 0 and service.objects.has(gone)
    report = service.gc(grace_seconds=0)

    assert report.objects_removed >= 2 and report.bytes_freed >= 50_000  # the blob and old root tree
    assert not service.objects.has(gone)
    assert service.objects.has(kept) and service.objects.has(shared)
    assert service.fsck(full=True).ok
    h.write_file(root, "data.bin", b"edited")
    service.restore(new)
    assert Path(root, "data.bin").read_bytes() == random.Random(2).randbytes(50_000)


def test_snapshot_after_gc_stores_again_a_blob_gc_freed(root: str, service: Checkpoints) -> None:
    content = random.Random(3).randbytes(20_000)
    h.write_file(root, "f.bin", content)
    first = service.create().id
    oid = blob_of(service, first, b"f.bin")
    h.write_file(root, "f.bin", b"other")
    service.create()
    service.prune(keep_latest=1, collect=False)
    service.gc(grace_seconds=0)
    assert not service.objects.has(oid)
    h.write_file(root, "f.bin", content)  # the stat cache remembers an id that is gone now
    again = service.create().id
    assert service.objects.has(oid)
    assert service.fsck(full=True).ok
    h.write_file(root, "f.bin", b"x")
    service.restore(again)
    assert Path(root, "f.bin").read_bytes() == content


# -- bounded growth -----------------------------------------------------------------------


def test_200_turns_pruned_to_10_and_collected_are_no_bigger_than_a_fresh_store_of_those_10(
        tmp_path: Path, root: str) -> None:
    rng = random.Random(2024)
    words = [b"def", b"return", b"self", b"value", b"index", b"tree", b"store", b"path", b"42"]
    files = [f"pkg{i % 8}/mod{i:03}.py" for i in range(120)]

    def text(lines: int) -> bytes:
        return b"".join(b" ".join(rng.choice(words) for _ in range(8)) + b"\n" for _ in range(lines))

    for name in files:
        h.write_file(root, name, text(40))
    store = str(tmp_path / "store")
    # Without blocks: a live member keeps its whole block, its dead members' bytes included,
    # which pruning does not free either (docs/DESIGN.md "Storage rules").
    _without_blocks(root, store)
    with Checkpoints.open(root, store=store) as cp:
        # Without deltas: a live delta keeps its base, which pruning does not free (see
        # tests/checkpoints/test_delta_session.py for the store with them).
        cp.config = dataclasses.replace(cp.config, deltas=False)
        for index in range(200):  # a small turn: one to three files touched
            for name in rng.sample(files, rng.randint(1, 3)):
                with open(os.path.join(root, name), "ab") as out:
                    out.write(text(1))
            if index % 20 == 0:
                h.write_file(root, f"notes/turn{index}.md", text(5))
            cp.create(reason="turn", turn_id=f"t{index}")
        assert len(cp.history()) == 200
        report = cp.prune(keep_latest=10, collect=False)
        assert len(report.removed) == 190
        cp.gc(grace_seconds=0)
        kept = cp.history()
        pruned_disk, pruned_objects = h.store_bytes(store), cp.stats().stored_bytes

        fresh_store = str(tmp_path / "fresh")
        _without_blocks(root, fresh_store)
        with Checkpoints.open(root, store=fresh_store) as fresh:
            fresh.config = dataclasses.replace(fresh.config, deltas=False)
            for record in kept:
                cp.restore(record.id, RestoreOptions(save=False, record_event=False))
                assert fresh.create().tree == record.tree
            # The same maintenance on both sides (it frees nothing here, but a packed store
            # compacts on gc, and pack framing differs from loose files).
            assert fresh.gc(grace_seconds=0).objects_removed == 0
            fresh_disk, fresh_objects = h.store_bytes(fresh_store), fresh.stats().stored_bytes
    assert pruned_objects / fresh_objects <= 1.2, (pruned_objects, fresh_objects)
    ratio = pruned_disk / fresh_disk
    assert ratio <= 1.2, f"pruned store {pruned_disk} B on disk vs fresh {fresh_disk} B: {ratio:.3f}"


def _without_blocks(root: str, store: str) -> None:
    Checkpoints.init(root, store=store).close()
    write_config(store, dataclasses.replace(read_config(store), block_size=0))


def test_gc_sweeps_temporaries_a_kill_left_of_caches_and_journals(root: str, service: Checkpoints) -> None:
    h.write_file(root, "a.txt", b"a")
    first = service.create()
    root_dirs = [os.path.join(service.store_dir, "roots", d)
                 for d in os.listdir(os.path.join(service.store_dir, "roots"))]
    leftovers = [os.path.join(root_dirs[0], "statcache.tmp-0a1b2c3d"),
                 os.path.join(root_dirs[0], "journal.tmp-deadbeef"),
                 os.path.join(service.store_dir, "gc-generation.tmp-01234567")]
    for path in leftovers:
        with open(path, "wb") as out:
            out.write(b"torn")
        os.utime(path, (1, 1))  # older than any grace period
    young = os.path.join(root_dirs[0], "statcache.tmp-fffffff0")
    with open(young, "wb") as out:
        out.write(b"being written, as far as gc can tell")
    # A restore's staging directory that no journal names (killed after its journal was
    # closed), on a root no call has used since; and one too young to tell.
    old_staging, young_staging = (os.path.join(root_dirs[0], f"staging-{token}")
                                  for token in ("0123456789ab", "ba9876543210"))
    for staging in (old_staging, young_staging):
        os.mkdir(staging)
        for name in ("0", "1"):
            with open(os.path.join(staging, name), "wb") as out:
                out.write(b"staged or replaced")
    os.utime(old_staging, (1, 1))

    assert service.gc(dry_run=True).temporaries_removed == 0
    assert all(os.path.exists(p) for p in leftovers)
    assert os.path.exists(old_staging)
    report = service.gc(grace_seconds=60)
    assert report.temporaries_removed == 4
    assert not any(os.path.exists(p) for p in leftovers) and os.path.exists(young)
    assert not os.path.exists(old_staging) and sorted(os.listdir(young_staging)) == ["0", "1"]
    assert os.path.exists(os.path.join(root_dirs[0], "statcache"))  # the real files stay
    assert service.create().tree == first.tree  # and snapshots go on
