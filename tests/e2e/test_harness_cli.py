"""A harness driving ckpt through the `ckpt` command with `--json`, as a TypeScript or shell
harness does: every call a new process, every answer parsed from stdout, the exit code checked.

The session is the API harness's, through the CLI: a checkpoint before every turn, the diff of
each turn, reverts to earlier checkpoints (undone half the time, or discarding what came after),
then history, show and fsck. Restores must be exact; JSON must carry what the harness needs.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from harness_project import Agent, Entry, ignored_state, make_project, tree_state
from soak import scale

TURNS = scale(50, 200)


class Ckpt:
    """`ckpt ARGS --json` in a subprocess, in the workspace, with the harness's session."""

    def __init__(self, root: Path, session: str) -> None:
        self.root = root
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CKPT_")}
        self.env["CKPT_SESSION"] = session

    def __call__(self, *args: str, code: int = 0) -> Any:
        proc = subprocess.run([sys.executable, "-m", "ckpt", *args, "--json"], cwd=self.root,
                              env=self.env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == code, (args, proc.returncode, proc.stderr)
        return json.loads(proc.stdout) if proc.stdout.strip() else None


def _changed(old: dict[str, Entry], new: dict[str, Entry]) -> set[str]:
    return {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}


def test_fifty_turn_session_through_the_cli_with_json(tmp_path: Path) -> None:
    root = tmp_path / "requests-2.32.3"
    root.mkdir()
    make_project(root, seed=3232)
    agent, rng = Agent(root, seed=5), random.Random(13)
    ckpt = Ckpt(root, "conv-cli")
    init = ckpt("init")
    assert os.path.samefile(init["root"], root)
    seen: dict[str, dict[str, Entry]] = {}
    order: list[str] = []
    for turn in range(TURNS):
        record = ckpt("create", "--reason", "pre-turn", "--turn", f"turn-{turn}",
                      "--tool-call", f"call-{turn}", "-m", f"before turn {turn}")
        assert (record["turn_id"], record["reason"]) == (f"turn-{turn}", "pre-turn")
        seen[record["id"]] = tree_state(root)
        order.append(record["id"])
        if len(order) > 1:
            changes = ckpt("diff", order[-2], order[-1])
            named = {c["path"] for c in changes}
            for path in _changed(seen[order[-2]], seen[order[-1]]):
                assert any(path == n or path.startswith(n + "/") for n in named), path
        agent.turn()
        if rng.random() < 0.25:
            target = rng.choice(order)
            now, caches = tree_state(root), ignored_state(root)
            discard = rng.random() < 0.2
            report = ckpt("restore", target, *(["--discard-later"] if discard else []))
            assert tree_state(root) == seen[target]
            assert ignored_state(root) == caches
            if discard:
                gone = order[order.index(target) + 1:]
                assert set(report["discarded"]) == set(gone)
                del order[order.index(target) + 1:]
                for cid in gone:
                    del seen[cid]
            seen[report["pre_restore"]] = now
            order.append(report["pre_restore"])
            if rng.random() < 0.5:
                undo = ckpt("restore", report["pre_restore"])
                assert tree_state(root) == now
                seen[undo["pre_restore"]] = seen[target]
                order.append(undo["pre_restore"])

    listed = [r["id"] for r in ckpt("list")]
    assert [i for i in listed if i in set(order)] == order  # oldest first
    assert ckpt("latest")["id"] == order[-1]
    last = ckpt("show", order[-1])
    assert last["id"] == order[-1]
    assert {f["path"] for f in last["files"]} == set(seen[order[-1]])
    events = ckpt("events", "--type", "checkpoint:restore")
    assert events, "the session reverted at least once"
    assert ckpt("fsck", "--full")["ok"] is True
