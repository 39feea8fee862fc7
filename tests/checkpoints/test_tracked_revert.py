"""Reverting to a tracked-scope checkpoint K (issue 27.13): in the tracked-files model (track a
path before the agent first writes it, a checkpoint before every turn), a path first tracked
at a later checkpoint was untouched until then, so its earliest recorded state is its state at
K. One revert to K undoes every agent change since K, paths tracked later included, and says
which paths those were. Paths are given absolute (see test_tracked_scope.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckpt.checkpoints.restore.restorer import RestoreOptions
from ckpt.checkpoints.service import Checkpoints


def _session(cp: Checkpoints, ws: Path, work: Any) -> tuple[str, str, str]:
    """Three turns of an agent that tracks each path before its first write."""
    work.write("src/a.py", b"a = 1\n")
    work.write("src/b.py", b"b = 1\n")
    work.write("README.md", b"untracked, never touched by a revert\n")
    cp.track(str(ws / "src/a.py"))
    k1 = cp.create(turn_id="t1").id
    work.write("src/a.py", b"a = 2  # turn 1\n")
    cp.track(str(ws / "src/b.py"), str(ws / "src/new.py"))
    k2 = cp.create(turn_id="t2").id
    work.write("src/b.py", b"b = 2  # turn 2\n")
    work.write("src/new.py", b"new  # turn 2\n")
    cp.track(str(ws / "gen/out/data.txt"))
    k3 = cp.create(turn_id="t3").id
    work.write("gen/out/data.txt", b"generated  # turn 3\n")
    work.write("src/a.py", b"a = 3  # turn 3\n")
    work.write("README.md", b"the user's own edit\n")
    return k1, k2, k3


def test_revert_restores_paths_first_tracked_later_to_their_earliest_state(
        cp: Checkpoints, ws: Path, work: Any, fs_snapshot: Callable[..., Any]) -> None:
    k1, _k2, _k3 = _session(cp, ws, work)
    agent = fs_snapshot(ws)
    report = cp.restore(k1)
    assert report.later_tracked == (b"gen/out/data.txt", b"src/b.py", b"src/new.py")
    assert (ws / "src/a.py").read_bytes() == b"a = 1\n"
    assert (ws / "src/b.py").read_bytes() == b"b = 1\n"
    assert not (ws / "src/new.py").exists()
    assert not (ws / "gen").exists()  # existed only for the file the agent created
    assert (ws / "README.md").read_bytes() == b"the user's own edit\n"
    assert report.to_json()["later_tracked"] == ["gen/out/data.txt", "src/b.py", "src/new.py"]
    # The pre-restore save covers the same paths: restoring it undoes the whole revert.
    assert report.pre_restore is not None
    assert set(cp.get(report.pre_restore).paths) >= {b"src/a.py", b"src/b.py", b"src/new.py"}
    cp.restore(report.pre_restore)
    assert fs_snapshot(ws) == agent


def test_revert_to_a_middle_checkpoint_keeps_earlier_tracked_paths_at_that_state(
        cp: Checkpoints, ws: Path, work: Any) -> None:
    _k1, k2, _k3 = _session(cp, ws, work)
    report = cp.restore(k2)
    assert report.later_tracked == (b"gen/out/data.txt",)
    assert (ws / "src/a.py").read_bytes() == b"a = 2  # turn 1\n"
    assert (ws / "src/b.py").read_bytes() == b"b = 1\n"
    assert not (ws / "src/new.py").exists()
    assert not (ws / "gen").exists()


def test_dry_run_plans_the_later_paths_and_changes_nothing(cp: Checkpoints, ws: Path,
                                                           work: Any) -> None:
    k1, _k2, _k3 = _session(cp, ws, work)
    report = cp.restore(k1, RestoreOptions(dry_run=True))
    assert report.later_tracked == (b"gen/out/data.txt", b"src/b.py", b"src/new.py")
    assert {w.path for w in report.plan.writes} == {b"src/a.py", b"src/b.py"}
    assert {r.path for r in report.plan.removals} >= {b"src/new.py", b"gen/out/data.txt"}
    assert (ws / "src/new.py").exists()


def test_discard_later_then_drops_the_later_checkpoints(cp: Checkpoints, ws: Path,
                                                        work: Any) -> None:
    k1, k2, k3 = _session(cp, ws, work)
    baselines = {r.id for r in cp.history(reason="track")}  # what `track` recorded after k1
    assert len(baselines) == 2
    report = cp.restore(k1, RestoreOptions(discard_later=True))
    assert set(report.discarded) == {k2, k3} | baselines
    assert [r.id for r in cp.list() if r.reason != "pre-restore"] == [k1]
    # Again: the pre-restore save is no earliest state (it holds what the agent left).
    again = cp.restore(k1)
    assert again.later_tracked == ()
    assert (again.written, again.deleted) == (0, 0)
    assert (ws / "src/b.py").read_bytes() == b"b = 1\n"


def test_a_path_below_one_the_target_tracks_is_not_later_tracked(cp: Checkpoints, ws: Path,
                                                                 work: Any) -> None:
    work.write("src/a.py", b"a\n")
    cp.track(str(ws / "src"))
    k1 = cp.create().id
    cp.track(str(ws / "src/a.py"), str(ws / "other.txt"))
    cp.create()
    work.write("src/a.py", b"edited\n")
    work.write("other.txt", b"created\n")
    report = cp.restore(k1)
    assert report.later_tracked == (b"other.txt",)
    assert (ws / "src/a.py").read_bytes() == b"a\n"
    assert not (ws / "other.txt").exists()


def test_a_path_restore_covers_only_its_later_tracked_paths(cp: Checkpoints, ws: Path,
                                                            work: Any) -> None:
    k1, _k2, _k3 = _session(cp, ws, work)
    report = cp.restore(k1, RestoreOptions(paths=(str(ws / "src/new.py"),)))
    assert report.later_tracked == (b"src/new.py",)
    assert not (ws / "src/new.py").exists()
    assert (ws / "src/b.py").read_bytes() == b"b = 2  # turn 2\n"
    assert (ws / "gen/out/data.txt").exists()


def test_a_revert_killed_and_completed_reports_the_same_paths(
        cp: Checkpoints, ws: Path, work: Any, reopen: Callable[..., Checkpoints]) -> None:
    """The journal names the grafted tree and the covered paths: completing the restore
    (here: a journal left by a restore that never applied) ends in the same state."""
    k1, _k2, _k3 = _session(cp, ws, work)
    from ckpt.checkpoints.identity import root_key
    from ckpt.checkpoints.restore.journal import RestoreIntent, encode_intent
    from ckpt.checkpoints.restore.tracked_revert import revert_scope

    target = cp.get(k1)
    scope = revert_scope(cp.objects.get_tree, cp.objects.put_tree, target,
                         cp.catalog.later_than(target))
    assert scope is not None
    cp.objects.sync()
    root = os.fsencode(cp.root)  # a journal as a killed restore leaves it (ARCHITECTURE.md)
    staging = os.fsencode(os.path.join(cp.store_dir, "roots", root_key(cp.root),
                                       "staging-" + "ab" * 6))
    cp.catalog.journal_restore(root, encode_intent(RestoreIntent(
        checkpoint=k1, tree=scope.tree, scope="paths", covered=scope.covered,
        absent_parents=scope.absent_parents, keep=(), only=None, pre_restore=None,
        record_event=True, discard_later=False, staging=staging)))
    report = reopen().recover()
    assert report is not None
    assert report.later_tracked == (b"gen/out/data.txt", b"src/b.py", b"src/new.py")
    assert (ws / "src/b.py").read_bytes() == b"b = 1\n"
    assert not (ws / "src/new.py").exists()


def test_a_path_tracked_and_written_within_a_turn_reverts_to_its_state_before_the_write(
        cp: Checkpoints, ws: Path, work: Any) -> None:
    """The harness tracks right before the write, in the middle of a turn: the state `track`
    records is the path's state at the turn's checkpoint, so the revert puts it back."""
    work.write("src/a.py", b"a\n")
    work.write("src/mode.py", b"m\n")
    cp.track("src/a.py")
    k1 = cp.create(turn_id="t1").id
    cp.track("src/mode.py", "src/fresh.py")  # the agent is about to write these
    assert [r.reason for r in cp.history()][-1] == "track"
    os.chmod(ws / "src/mode.py", 0o755)
    work.write("src/mode.py", b"m2\n")
    work.write("src/fresh.py", b"new\n")
    cp.create(turn_id="t2")
    report = cp.restore(k1)
    assert set(report.later_tracked) == {b"src/fresh.py", b"src/mode.py"}
    assert (ws / "src/mode.py").read_bytes() == b"m\n"
    assert not os.stat(ws / "src/mode.py").st_mode & 0o111
    assert not (ws / "src/fresh.py").exists()
    before = len(cp.history())
    cp.track("src/a.py", "src/fresh.py")  # already tracked: no new baseline
    cp.track("src/deeper.py", baseline=False)
    assert len(cp.history()) == before
