"""The retention options of the CLI: `create --keep N`, `prune --no-gc`, what prune and gc
say they held back (text and JSON), events naming the ids they evicted, and the scope of
list (`--all-sessions`, `--all-roots`) beside what `stats` counts.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CkptIn = Callable[..., Any]


@pytest.fixture
def initialized(ws: Path, ckpt_in: CkptIn) -> Path:
    """The workspace, initialized; every command names its root (`--root`), so no store in
    an ancestor directory of the temp dir can be found instead."""
    assert ckpt_in("--root", str(ws), "init").code == 0
    return ws


@pytest.fixture
def run(initialized: Path, ckpt_in: CkptIn) -> CkptIn:
    return lambda *args: ckpt_in("--root", str(initialized), *args)


def create(run: CkptIn, ws: Path, index: int, *args: str, session: str = "default") -> str:
    (ws / "work.txt").write_text(f"step {index}\n")
    (ws / f"unique{index}.bin").write_bytes(os.urandom(2000))
    made = run("--session", session, "create", *args)
    assert made.code == 0, made.stderr
    return made.stdout.strip()


def listed(run: CkptIn, *args: str) -> list[str]:
    return [r["id"] for r in json.loads(run("list", "--json", *args).stdout)]


def test_create_keep_caps_the_session_and_no_other(initialized: Path, run: CkptIn) -> None:
    other = [create(run, initialized, i, session="other") for i in range(3)]
    mine = [create(run, initialized, i, "--keep", "2") for i in range(4)]
    assert listed(run) == mine[2:]
    assert [r["id"] for r in json.loads(run("--session", "other", "list", "--json").stdout)] == other
    bad = run("create", "--keep", "-1")
    assert bad.code == 2 and "--keep" in bad.stderr
    events = json.loads(run("events", "--type", "checkpoint:prune", "--json").stdout)
    assert [e["removed"] for e in events] == [[mine[0]], [mine[1]]]
    assert {(e["cause"], e["cap"]) for e in events} == {("retention-cap", 2)}
    text = run("events", "--type", "checkpoint:prune").stdout
    assert f"removed={mine[0]}" in text and "cause=retention-cap" in text and "cap=2" in text


def test_prune_no_gc_drops_records_and_collects_nothing(initialized: Path, run: CkptIn) -> None:
    ids = [create(run, initialized, i) for i in range(3)]
    done = run("prune", "--keep-latest", "1", "--no-gc")
    assert (done.code, done.stderr) == (0, "")
    assert done.stdout == "removed 2 checkpoint(s); not collected ('ckpt gc' frees their objects)\n"
    assert listed(run) == ids[2:]
    out = json.loads(run("prune", "--keep-latest", "0", "--no-gc", "--json").stdout)
    assert (out["removed"], out["gc"], out["gc_error"]) == (ids[2:], None, None)
    assert run("config", "set", "gc_grace_seconds", "0").code == 0
    assert json.loads(run("gc", "--json").stdout)["objects_removed"] > 0  # left to gc


def test_prune_and_gc_say_what_they_held_back_and_until_when(initialized: Path, run: CkptIn) -> None:
    ids = [create(run, initialized, i) for i in range(3)]
    pruned = run("prune", "--keep-latest", "1")
    assert (pruned.code, pruned.stderr) == (0, "")
    first, held = pruned.stdout.splitlines()
    assert first == "removed 2 checkpoint(s), 0 object(s), 0 B freed"
    assert re.fullmatch(r"held back \d+ unreachable object\(s\) \([\d.]+ [KMG]?i?B\) younger "
                        r"than gc_grace_seconds \(3600 s\): a gc frees them after "
                        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", held), held
    assert listed(run) == ids[2:]
    gc = json.loads(run("gc", "--json").stdout)
    assert gc["held_back"]["objects"] == gc["objects_young"] > 0
    assert gc["held_back"]["grace_seconds"] == 3600
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", gc["held_back"]["until"])
    assert "held back" in run("gc").stdout
    assert run("config", "set", "gc_grace_seconds", "0").code == 0
    done = json.loads(run("gc", "--json").stdout)
    assert done["held_back"] is None and done["objects_removed"] == gc["objects_young"]


def test_list_scope_is_explicit_beside_what_stats_counts(initialized: Path, run: CkptIn,
                                                         tmp_path: Path) -> None:
    mine = create(run, initialized, 0)
    theirs = create(run, initialized, 1, session="s2")
    elsewhere = tmp_path / "other-root"
    elsewhere.mkdir()
    store = str(initialized / ".ckpt")
    away = run("--store", store, "--root", str(elsewhere), "create")
    assert away.code == 0, away.stderr
    assert listed(run, "--all-sessions") == [mine, theirs]  # this root only
    assert listed(run, "--all-sessions", "--all-roots") == [mine, theirs, away.stdout.strip()]
    table = run("list", "--all-sessions", "--all-roots").stdout.splitlines()
    assert table[0].split()[:6] == ["id", "created", "(UTC)", "age", "root", "session"]
    assert str(elsewhere) in table[3]
    stats = json.loads(run("stats", "--json").stdout)
    assert stats["checkpoints"] == 3
    assert stats["roots"] == {str(initialized): 2, str(elsewhere): 1}
    text = run("stats").stdout
    assert "checkpoints    3 (every root and session of the store)" in text
    assert f"  root {elsewhere}  1" in text.splitlines()
