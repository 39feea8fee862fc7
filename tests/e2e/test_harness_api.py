"""A harness driving ckpt through the Python API for a whole agent session, as a harness author
would wire it: a checkpoint before every turn (with the turn, tool call and metadata), the
agent's changes, and now and then a revert of a bad turn to some earlier checkpoint, undone
again half the time, or with the later checkpoints discarded.

Every restore must give back exactly the tree the checkpoint saw (files, exec bits, symlinks),
leave ignored caches alone, and name an undo that gives back the tree it replaced; history,
latest, diff, the files of a checkpoint and the events must agree with what happened.
"""

from __future__ import annotations

import random
from pathlib import Path

from harness_project import Agent, Entry, ignored_state, make_project, tree_state
from soak import scale

from ckpt import Checkpoints, RestoreOptions

TURNS = scale(50, 300)


def _changed_paths(old: dict[str, Entry], new: dict[str, Entry]) -> set[str]:
    return {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}


def _diff_files(cp: Checkpoints, a: str, b: str) -> set[str]:
    """The file and symlink paths a diff names (a diff may name a whole added directory)."""
    out: set[str] = set()
    for change in cp.diff(a, b):
        path = change.path.decode()
        out.add(path)
    return out


def test_fifty_turn_session_through_the_api(tmp_path: Path) -> None:
    root = tmp_path / "requests-2.32.3"
    root.mkdir()
    make_project(root, seed=2323)
    agent, rng = Agent(root, seed=7), random.Random(11)
    seen: dict[str, dict[str, Entry]] = {}  # checkpoint id -> the tree it captured
    order: list[str] = []
    restores: list[object] = []
    with Checkpoints.init(root, session="conv-1") as cp:
        cp.on("checkpoint:restore", restores.append)  # registered before any restore
        for turn in range(TURNS):
            record = cp.create(reason="pre-turn", turn_id=f"turn-{turn}",
                               tool_call_id=f"call-{turn}", label=f"before turn {turn}",
                               metadata={"turn": turn})
            seen[record.id] = tree_state(root)
            order.append(record.id)
            assert cp.latest() is not None and cp.latest().id == record.id  # type: ignore[union-attr]
            files = {f.path.decode() for f in cp.files(record.id)}
            assert files == set(seen[record.id])

            agent.turn()
            if len(order) > 1:
                prev = order[-2]
                expected = _changed_paths(seen[prev], seen[record.id])
                named = _diff_files(cp, prev, record.id)
                # a diff names each changed path, or the directory that holds it when the
                # directory was added or removed whole
                for path in expected:
                    assert any(path == n or path.startswith(n + "/") for n in named), path
                for name in named:
                    assert any(p == name or p.startswith(name + "/") for p in expected), name

            if rng.random() < 0.25:  # the turn went wrong: go back to some earlier checkpoint
                target = rng.choice(order)
                now, caches = tree_state(root), ignored_state(root)
                discard = rng.random() < 0.2
                report = cp.restore(target, RestoreOptions(discard_later=discard))
                assert tree_state(root) == seen[target], f"turn {turn}: restore to {target}"
                assert ignored_state(root) == caches
                assert report.pre_restore is not None
                if discard:
                    gone = order[order.index(target) + 1:]
                    assert set(report.discarded) == set(gone)
                    del order[order.index(target) + 1:]
                    for cid in gone:
                        del seen[cid]
                    history = [r.id for r in cp.history()]
                    assert not set(gone) & set(history)
                seen[report.pre_restore] = now
                order.append(report.pre_restore)
                if rng.random() < 0.5:  # the user changes their mind: undo the restore
                    undo = cp.restore(report.pre_restore)
                    assert tree_state(root) == now
                    assert undo.pre_restore is not None
                    seen[undo.pre_restore] = seen[target]
                    order.append(undo.pre_restore)
                    assert ignored_state(root) == caches

        history = [r.id for r in cp.history()]
        assert set(order) <= set(history)
        assert [i for i in history if i in set(order)] == order  # in creation order
        assert len(restores) == sum(1 for e in cp.events(type="checkpoint:restore"))
        assert restores, "the session reverted at least once"
        check = cp.fsck(full=True)
        assert check.ok and not check.damaged_checkpoints
