"""`forget`: drop checkpoints by ref as prune does; gc then frees only what no other
checkpoint shares; an unknown ref removes none; a checkpoint a restore journal needs stays."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ckpt.checkpoints import (
    CheckpointInUse,
    Checkpoints,
    ForgetReport,
    UnknownCheckpoint,
)
from ckpt.checkpoints.identity import root_key
from ckpt.checkpoints.restore.journal import RestoreIntent, encode_intent
from ckpt.objstore.gc import find_reachable


def test_forget_then_gc_frees_only_the_unshared_objects(cp: Checkpoints, ws: Path) -> None:
    (ws / "shared").write_text("in both")
    (ws / "own").write_text("only in the first " * 50)
    first = cp.create()
    (ws / "own").unlink()
    second = cp.create()
    own = next(f.oid for f in cp.files(first.id) if f.path == b"own")
    shared = next(f.oid for f in cp.files(second.id) if f.path == b"shared")
    report = cp.forget(first.id)
    assert report == ForgetReport((first.id,), False)
    assert [r.id for r in cp.list()] == [second.id]
    assert cp.objects.has(own)  # no gc in forget
    gc = cp.gc(grace_seconds=0)
    assert gc.objects_removed >= 2  # the file and the first root tree at least
    assert not cp.objects.has(own)
    assert cp.objects.has(shared)
    live = find_reachable(cp.objects, [second.tree])
    assert all(cp.objects.has(oid) for oid in live)
    assert cp.read_file(second.id, "shared") == b"in both"


def test_forget_records_one_prune_event_of_cause_forget(cp: Checkpoints, ws: Path) -> None:
    records = [cp.create(label=str(i)) for i in range(3)]
    report = cp.forget("latest", "latest~2", records[2].id)  # a repeat counts once
    assert report.removed == (records[2].id, records[0].id)
    events = cp.events(type="checkpoint:prune")
    assert len(events) == 1
    assert events[0].data["cause"] == "forget"
    assert list(events[0].data["removed"]) == [records[2].id, records[0].id]


def test_an_unknown_ref_removes_nothing(cp: Checkpoints) -> None:
    a = cp.create()
    with pytest.raises(UnknownCheckpoint):
        cp.forget(a.id, "ckpt-nope")
    with pytest.raises(UnknownCheckpoint):
        cp.forget(a.id, "latest~5")
    assert [r.id for r in cp.list()] == [a.id]
    assert cp.events(type="checkpoint:prune") == []


def test_dry_run_removes_nothing(cp: Checkpoints) -> None:
    a = cp.create()
    assert cp.forget("latest", dry_run=True) == ForgetReport((a.id,), True)
    assert [r.id for r in cp.list()] == [a.id]


@pytest.mark.parametrize("role", ["target", "pre_restore"])
def test_a_checkpoint_a_restore_journal_needs_is_refused(cp: Checkpoints, ws: Path,
                                                         role: str) -> None:
    (ws / "f").write_text("a")
    target = cp.create()
    (ws / "f").write_text("b")
    pre = cp.create(reason="pre-restore")
    other = cp.create()
    staging = os.fsencode(os.path.join(cp.store_dir, "roots", root_key(cp.root),
                                       "staging-" + "ab" * 6))
    # The journal a restore killed mid-apply leaves behind.
    cp.catalog.journal_restore(os.fsencode(cp.root), encode_intent(RestoreIntent(
        checkpoint=target.id, tree=target.tree, scope="tree", covered=(), absent_parents=(),
        keep=(), only=None, pre_restore=pre.id, record_event=True, discard_later=False,
        staging=staging)))
    needed = target if role == "target" else pre
    with pytest.raises(CheckpointInUse, match="interrupted restore") as caught:
        cp.forget(other.id, needed.id)
    assert caught.value.checkpoint == needed.id
    assert len(cp.list()) == 3  # nothing removed, not even the free one
    assert cp.recover() is not None
    assert cp.forget(needed.id).removed == (needed.id,)

