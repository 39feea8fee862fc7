"""The history verbs through the CLI: refs wherever an id goes, `undo` (exit 3 when nothing
is left), `forget`, `log PATH`, `restore --target` and `events --follow` (a real process,
SIGINT -> 130, JSON Lines)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CkptIn = Callable[..., Any]
CkptProc = Callable[..., Any]
Env = Callable[..., dict[str, str]]


def _id(run: CkptIn, *args: str) -> str:
    result = run("create", *args)
    assert result.code == 0, result.stderr
    return result.stdout.strip()


def test_refs_are_accepted_where_an_id_goes(initialized: Path, ckpt_in: CkptIn) -> None:
    ws = initialized
    first = _id(ckpt_in)
    (ws / "a.txt").write_text("changed\n")
    second = _id(ckpt_in)
    shown = ckpt_in("show", "latest~1", "--json")
    assert shown.code == 0 and json.loads(shown.stdout)["id"] == first
    assert ckpt_in("cat", "latest~1", "a.txt").stdout == "alpha\n"
    assert "a.txt" in ckpt_in("diff", "latest~1", "latest").stdout
    assert json.loads(ckpt_in("show", f"{second}~1", "--json").stdout)["id"] == first
    restored = ckpt_in("restore", "latest~1", "--json")
    assert restored.code == 0 and json.loads(restored.stdout)["id"] == first
    assert (ws / "a.txt").read_text() == "alpha\n"


def test_a_ref_out_of_range_exits_1_saying_how_far_it_goes(initialized: Path,
                                                          ckpt_in: CkptIn) -> None:
    _id(ckpt_in)
    _id(ckpt_in)
    result = ckpt_in("show", "latest~5")
    assert result.code == 1
    assert result.stderr.startswith("ckpt: error: unknown checkpoint latest~5: ")
    assert "2 in all" in result.stderr


def test_undo_redo_and_nothing_to_undo(initialized: Path, ckpt_in: CkptIn) -> None:
    ws = initialized
    first = _id(ckpt_in)
    (ws / "a.txt").write_text("two\n")
    _id(ckpt_in)
    restore = json.loads(ckpt_in("restore", first, "--json").stdout)
    assert (ws / "a.txt").read_text() == "alpha\n"
    dry = ckpt_in("undo", "--dry-run", "--json")
    assert dry.code == 0 and json.loads(dry.stdout)["undid"] == restore["pre_restore"]
    assert (ws / "a.txt").read_text() == "alpha\n"
    undone = ckpt_in("undo", "--json")
    assert undone.code == 0, undone.stderr
    report = json.loads(undone.stdout)
    assert report["undid"] == restore["pre_restore"] == report["id"]
    assert report["target"] is None
    assert (ws / "a.txt").read_text() == "two\n"
    nothing = ckpt_in("undo")
    assert nothing.code == 3
    assert nothing.stderr.startswith("ckpt: error: nothing to undo")
    plain_redo = ckpt_in("restore", report["pre_restore"])  # the redo the undo printed
    assert plain_redo.code == 0 and (ws / "a.txt").read_text() == "alpha\n"
    plain = ckpt_in("undo")
    assert plain.stdout.startswith("undid the restore saved as ckpt-")
    assert "; redo: ckpt restore ckpt-" in plain.stdout


def test_forget_by_ref_and_unknown_refs_remove_nothing(initialized: Path,
                                                       ckpt_in: CkptIn) -> None:
    ids = [_id(ckpt_in, "-m", str(i)) for i in range(3)]
    unknown = ckpt_in("forget", "latest", "ckpt-nope")
    assert unknown.code == 1 and "unknown checkpoint ckpt-nope" in unknown.stderr
    dry = json.loads(ckpt_in("forget", "latest", "--dry-run", "--json").stdout)
    assert dry == {"removed": [ids[2]], "dry_run": True}
    done = json.loads(ckpt_in("forget", "latest", "latest~2", "--json").stdout)
    assert done == {"removed": [ids[2], ids[0]], "dry_run": False}
    listed = [r["id"] for r in json.loads(ckpt_in("list", "--json").stdout)]
    assert listed == [ids[1]]
    plain = ckpt_in("forget", ids[1])
    assert plain.stdout.splitlines() == ["forgot 1 checkpoint(s)", f"  {ids[1]}"]
    assert ckpt_in("forget").code == 2  # REF... is required


def test_log_lists_the_changes_of_a_path(initialized: Path, ckpt_in: CkptIn,
                                         monkeypatch: object) -> None:
    ws = initialized
    first = _id(ckpt_in, "--reason", "pre-tool")
    (ws / "sub" / "b.txt").write_text("edited\n")
    second = _id(ckpt_in)
    (ws / "sub" / "b.txt").unlink()
    third = _id(ckpt_in)
    rows = json.loads(ckpt_in("log", "sub/b.txt", "--json").stdout)
    assert [(r["id"], r["change"], r["kind"]) for r in rows] == [
        (first, "A", "file"), (second, "M", "file"), (third, "D", None)]
    assert rows[0]["reason"] == "pre-tool" and rows[0]["size"] == 5
    assert set(rows[0]) == {"id", "created_at", "session", "change", "kind", "size", "reason",
                            "turn_id", "tool_call_id"}
    os.chdir(ws / "sub")
    plain = ckpt_in("log", "b.txt")
    lines = plain.stdout.splitlines()
    assert lines[0].split() == ["id", "created", "(UTC)", "age", "change", "kind", "size",
                                "reason", "turn", "tool_call"]
    assert [line.split()[0] for line in lines[1:]] == [first, second, third]
    assert "just now" in lines[1] or "s ago" in lines[1]
    assert json.loads(ckpt_in("log", "nothing-here", "--json").stdout) == []


def test_restore_target_writes_elsewhere_and_refuses_a_full_directory(
        initialized: Path, ckpt_in: CkptIn, tmp_path: Path) -> None:
    ws = initialized
    first = _id(ckpt_in)
    (ws / "a.txt").write_text("now\n")
    out = tmp_path / "copy"
    result = ckpt_in("restore", first, "--target", str(out), "--json")
    assert result.code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["target"] == str(out) and report["pre_restore"] is None
    assert (out / "a.txt").read_text() == "alpha\n"
    assert os.readlink(out / "link") == "a.txt"
    assert (ws / "a.txt").read_text() == "now\n"
    again = ckpt_in("restore", first, "--target", str(out))
    assert again.code == 1 and "not empty" in again.stderr
    inside = ckpt_in("restore", first, "--target", ".ckpt/x")
    assert inside.code == 1 and "inside the ckpt store" in inside.stderr
    both = ckpt_in("restore", first, "--target", str(tmp_path / "b"), "--discard-later")
    assert both.code == 2
    plain = ckpt_in("restore", first, "--target", str(tmp_path / "c"))
    assert plain.stdout.startswith(f"restored {first} into {tmp_path / 'c'}: ")


def test_undo_forget_log_in_a_real_process(initialized: Path, ckpt_proc: CkptProc) -> None:
    ws = initialized
    first = ckpt_proc("create").stdout.strip()
    (ws / "a.txt").write_text("two\n")
    ckpt_proc("create")
    assert ckpt_proc("restore", "latest~1").code == 0
    assert ckpt_proc("undo").code == 0
    assert (ws / "a.txt").read_text() == "two\n"
    assert ckpt_proc("undo").code == 3
    assert json.loads(ckpt_proc("log", "a.txt", "--json").stdout)[0]["id"] == first
    assert ckpt_proc("forget", first).code == 0


def _follow(ws: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    def default_sigint() -> None:  # a test runner may run with SIGINT ignored
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    return subprocess.Popen([sys.executable, "-m", "ckpt", "events", "--follow", *args],
                            cwd=ws, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, preexec_fn=default_sigint)


def _read_lines(child: subprocess.Popen[bytes], count: int, wait: float = 60) -> list[bytes]:
    """`count` lines of the child's stdout; fails instead of hanging when they never come."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    data = b""
    deadline = time.monotonic() + wait
    while data.count(b"\n") < count:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"{count} lines did not come: {data!r}"
        chunk = os.read(fd, 65536)
        assert chunk, (data, child.stderr.read() if child.stderr else b"")
        data += chunk
    lines = data.splitlines(keepends=True)
    assert len(lines) == count, lines
    return lines


def test_events_follow_prints_new_events_as_json_lines_until_sigint(
        initialized: Path, ckpt_in: CkptIn, env_for: Env) -> None:
    ws = initialized
    first = _id(ckpt_in)
    child = _follow(ws, env_for(), "--json")
    try:
        head = _read_lines(child, 1)
        assert json.loads(head[0])["id"] == first
        second = _id(ckpt_in)
        (ws / "a.txt").write_text("x\n")
        ckpt_in("restore", first)
        new = [json.loads(line) for line in _read_lines(child, 3)]
        assert [e["type"] for e in new] == ["checkpoint:create", "checkpoint:create",
                                            "checkpoint:restore"]
        assert new[0]["id"] == second
        assert new[1]["reason"] == "pre-restore"
        assert new[-1]["id"] == first
    finally:
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    assert child.returncode == 130, err
    for line in out.splitlines():  # whatever came after: JSON too
        json.loads(line)


def test_events_follow_plain_with_limit_and_type(initialized: Path, ckpt_in: CkptIn,
                                                 env_for: Env) -> None:
    ws = initialized
    ids = [_id(ckpt_in) for _ in range(3)]
    child = _follow(ws, env_for(), "--limit", "1", "--type", "checkpoint:create")
    try:
        assert ids[2] in _read_lines(child, 1)[0].decode()
        ckpt_in("forget", ids[0])  # a prune event: filtered out
        fourth = _id(ckpt_in)
        line = _read_lines(child, 1)[0].decode()
        assert "checkpoint:create" in line and fourth in line
    finally:
        time.sleep(0.1)
        child.send_signal(signal.SIGINT)
        _out, err = child.communicate(timeout=30)
    assert child.returncode == 130, err
    assert err.decode().strip() == "ckpt: error: interrupted"
