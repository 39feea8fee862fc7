"""A tracked-files harness (CodeBuddy-style): the harness tracks each path right before the
agent's tool writes it, takes a checkpoint before every turn, and covers only the paths the
agent touched; it never snapshots the whole tree.

The agent touches only tracked paths, so every other file is as it was at any checkpoint, and a
path first tracked after checkpoint K was untouched until it was tracked: its earliest recorded
state is its state at K. One revert to K must therefore give back the whole tree as it was at K
(files written since K restored, files created since K deleted), and `--discard-later` then
drops the later checkpoints.
"""

from __future__ import annotations

import random
from pathlib import Path

from harness_project import Agent, Entry, ignored_state, make_project, tree_state
from soak import scale

from ckpt import Checkpoints, RestoreOptions

TURNS = scale(30, 200)


def test_tracked_files_session_reverts_every_agent_change(tmp_path: Path) -> None:
    root = tmp_path / "requests-2.32.3"
    root.mkdir()
    make_project(root, seed=99)
    agent, rng = Agent(root, seed=3), random.Random(17)
    seen: dict[str, dict[str, Entry]] = {}
    order: list[str] = []
    reverts = 0
    with Checkpoints.init(root, session="codebuddy") as cp:

        def track(paths: set[str]) -> None:
            cp.track(*sorted(paths))

        cp.track("README.md")  # the harness opened the project's README first
        for turn in range(TURNS):
            record = cp.create(reason="pre-turn", turn_id=f"turn-{turn}")
            assert record.scope == "paths"
            seen[record.id] = tree_state(root)
            order.append(record.id)
            agent.turn(before_write=track)
            if turn >= 2 and rng.random() < 0.3:
                target = rng.choice(order[:-1])
                caches = ignored_state(root)
                discard = rng.random() < 0.3
                report = cp.restore(target, RestoreOptions(discard_later=discard))
                assert tree_state(root) == seen[target], f"turn {turn}: revert to {target}"
                assert ignored_state(root) == caches
                reverts += 1
                if discard:
                    gone = order[order.index(target) + 1:]
                    assert set(gone) <= set(report.discarded)
                    del order[order.index(target) + 1:]
                    history = {r.id for r in cp.history()}
                    assert not set(gone) & history
        assert reverts
