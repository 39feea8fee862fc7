"""What prune and gc report through the API: what gc held back and until when, pruning
without collecting, and a gc that fails after the records went (`PruneIncomplete`).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ckpt.checkpoints import GcReport, HeldBack, PruneIncomplete, PruneReport
from ckpt.checkpoints.service import Checkpoints


@pytest.fixture
def cp(tmp_path: Path) -> Iterator[Checkpoints]:
    root = os.path.realpath(tmp_path / "ws")
    os.mkdir(root)
    with Checkpoints.init(root) as service:
        yield service


def three(cp: Checkpoints) -> list[str]:
    ids = []
    for index in range(3):
        Path(cp.root, f"f{index}.bin").write_bytes(os.urandom(3000))  # unique to this one
        Path(cp.root, f"f{index - 1}.bin").unlink(missing_ok=True)
        ids.append(cp.create(reason="auto").id)
    return ids


def test_prune_reports_what_gc_held_back_and_until_when(cp: Checkpoints) -> None:
    ids = three(cp)
    before = time.time()
    report = cp.prune(keep_latest=1)
    assert isinstance(report, PruneReport) and report.removed == tuple(ids[:2])
    assert isinstance(report.gc, GcReport)
    assert (report.objects_removed, report.bytes_freed) == (0, 0)  # all inside the grace period
    held = report.gc.held_back
    assert isinstance(held, HeldBack)
    assert held.objects == report.gc.objects_young >= 2 and held.bytes >= 6000
    assert held.grace_seconds == cp.config.gc_grace_seconds == 3600
    soonest = datetime.fromtimestamp(before - 5, UTC) + timedelta(seconds=3600)
    assert soonest <= held.until <= datetime.now(UTC) + timedelta(seconds=3600)
    assert report.to_json()["gc"]["held_back"]["until"].endswith("Z")
    freed = cp.gc(grace_seconds=0)  # once past the grace period, they go
    assert freed.objects_removed == held.objects and freed.held_back is None


def test_prune_without_collecting_and_prune_of_nothing_run_no_gc(cp: Checkpoints) -> None:
    ids = three(cp)
    report = cp.prune(keep_latest=2, collect=False)
    assert report.removed == (ids[0],) and report.gc is None
    assert cp.gc(dry_run=True, grace_seconds=0).objects_removed > 0  # left for a later gc
    nothing = cp.prune(reason="no-such-reason")
    assert nothing.removed == () and nothing.gc is None
    assert nothing.to_json() == {"removed": [], "objects_removed": 0, "bytes_freed": 0,
                                 "dry_run": False, "gc": None}


def test_a_gc_failing_after_the_prune_says_what_was_pruned(
        cp: Checkpoints, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = three(cp)

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("ckpt.objstore.gc.collect_garbage", full_disk)
    with pytest.raises(PruneIncomplete) as caught:
        cp.prune(keep_latest=1)
    assert caught.value.removed == tuple(ids[:2])
    assert isinstance(caught.value.error, OSError) and caught.value.error.errno == errno.ENOSPC
    assert str(caught.value).startswith("pruned 2 checkpoint(s), but gc failed: ")
    assert [r.id for r in cp.history()] == ids[2:]  # the prune itself is done
    monkeypatch.undo()
    assert cp.gc(grace_seconds=0).objects_removed > 0
