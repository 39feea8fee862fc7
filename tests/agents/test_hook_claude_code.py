"""`ckpt hook claude-code` fed recorded Claude Code hook payloads, as Claude Code runs it: a
process per tool call, JSON on stdin, from any directory.

It must checkpoint before and after each matching tool call with the right reason, turn, tool
call, metadata and session; and whatever goes wrong (bad JSON, no store, a damaged, unreadable
or busy store, a bad option) it must exit 0 with nothing on stdout (exit 2 would block the
tool call; stdout is a decision for Claude Code) and one line on stderr and in the log.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from agents.agent_helpers import CLAUDE_SESSION, PROMPT_ID, RunCkpt, clean_env, payload, records

SESSION = f"claude-{CLAUDE_SESSION}"
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ckpt hook claude-code: (.*)")


def hook(run_ckpt: RunCkpt, name: str, project: Path, *args: str,
         env: dict[str, str] | None = None) -> str:
    """Run the hook on fixture `name`; assert it kept quiet and exited 0; return stderr."""
    done = run_ckpt(*args, "hook", "claude-code", stdin=payload(name, project), env=env)
    assert (done.code, done.stdout) == (0, b""), done.stderr
    return done.stderr


def test_recorded_payloads_checkpoint_before_and_after_each_tool_call(
        project: Path, run_ckpt: RunCkpt) -> None:
    app = project / "src" / "app.py"
    assert hook(run_ckpt, "pre_write.json", project) == ""
    app.write_text("print('v2')\n")
    assert hook(run_ckpt, "post_write.json", project) == ""
    assert hook(run_ckpt, "pre_edit.json", project) == ""
    app.write_text("print('v3')\n")
    assert hook(run_ckpt, "post_edit.json", project) == ""
    assert hook(run_ckpt, "pre_bash.json", project) == ""
    (project / "notes.txt").unlink()
    assert hook(run_ckpt, "post_bash.json", project) == ""
    assert hook(run_ckpt, "post_bash_failure.json", project) == ""
    assert hook(run_ckpt, "pre_bash_no_prompt_id.json", project) == ""
    assert hook(run_ckpt, "user_prompt_submit.json", project) == ""  # not a tool event

    made = records(project, SESSION)
    assert [(r["reason"], r["turn_id"], r["tool_call_id"], r["label"]) for r in made] == [
        ("pre-tool", PROMPT_ID, "toolu_01A1write", "before Write src/app.py"),
        ("post-tool", PROMPT_ID, "toolu_01A1write", "after Write src/app.py"),
        ("pre-tool", PROMPT_ID, "toolu_01B2edit", "before Edit src/app.py"),
        ("post-tool", PROMPT_ID, "toolu_01B2edit", "after Edit src/app.py"),
        ("pre-tool", PROMPT_ID, "toolu_01C3bash", "before Bash"),
        ("post-tool", PROMPT_ID, "toolu_01C3bash", "after Bash"),
        ("post-tool", PROMPT_ID, "toolu_01D4fail", "after Bash (failed)"),
        ("pre-tool", None, "toolu_01E5noprompt", "before Bash"),
    ]
    assert {r["session"] for r in made} == {SESSION}
    base = {"claude_session": CLAUDE_SESSION}
    assert made[0]["metadata"] == {**base, "tool": "Write", "hook_event": "PreToolUse",
                                   "file": str(project / "src" / "app.py")}
    assert made[3]["metadata"] == {**base, "tool": "Edit", "hook_event": "PostToolUse",
                                   "file": str(project / "src" / "app.py")}
    assert made[4]["metadata"] == {**base, "tool": "Bash", "hook_event": "PreToolUse",
                                   "command": "rm -f notes.txt && echo done"}
    assert made[6]["metadata"] == {**base, "tool": "Bash", "hook_event": "PostToolUseFailure",
                                   "command": "make test", "failed": "true",
                                   "error": "Command failed with exit code 2"}
    # Each checkpoint holds the tree as it was at that moment of the tool call.
    contents = [_cat(project, r["id"], "src/app.py") for r in made[:4]]
    assert contents == [b"print('v1')\n", b"print('v2')\n", b"print('v2')\n", b"print('v3')\n"]
    assert _cat(project, made[4]["id"], "notes.txt") == b"notes\n"
    assert _cat(project, made[5]["id"], "notes.txt") is None


def _cat(root: Path, ref: object, path: str) -> bytes | None:
    done = subprocess.run([sys.executable, "-m", "ckpt", "--root", str(root), "cat", str(ref),
                           path], env=clean_env(), capture_output=True, check=False)
    return done.stdout if done.returncode == 0 else None


def test_root_is_the_project_dir_else_the_nearest_store_above_cwd(
        project: Path, run_ckpt: RunCkpt, tmp_path: Path) -> None:
    # cwd follows `cd`: a payload from a subdirectory still finds the project's store.
    sub = project / "src"
    data = json.loads(payload("pre_bash.json", project))
    data["cwd"] = str(sub)
    done = run_ckpt("hook", "claude-code", stdin=json.dumps(data).encode())
    assert (done.code, done.stdout, done.stderr) == (0, b"", "")
    assert len(records(project, SESSION)) == 1
    # $CLAUDE_PROJECT_DIR wins over the payload's cwd ...
    other = (tmp_path / "other").resolve()
    other.mkdir()
    subprocess.run([sys.executable, "-m", "ckpt", "--root", str(other), "init"], check=True,
                   env=clean_env(), capture_output=True)
    assert hook(run_ckpt, "pre_bash.json", project,
                env={"CLAUDE_PROJECT_DIR": str(other)}) == ""
    assert len(records(other, SESSION)) == 1
    # ... and --root / CKPT_ROOT and --session / CKPT_SESSION win over both.
    assert hook(run_ckpt, "pre_bash.json", project, "--session", "mine",
                env={"CLAUDE_PROJECT_DIR": str(project), "CKPT_ROOT": str(other)}) == ""
    assert [r["tool_call_id"] for r in records(other, "mine")] == ["toolu_01C3bash"]
    assert len(records(project, SESSION)) == 1


def _log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _fails_quietly(run_ckpt: RunCkpt, stdin: bytes, log: Path, *args: str,
                   env: dict[str, str] | None = None) -> str:
    """The hook exits 0, prints nothing on stdout, and tells the failure in one line on
    stderr and one more line in `log`; returns what the line says after the time."""
    before = _log_lines(log)
    done = run_ckpt("hook", "claude-code", *args, stdin=stdin, env=env)
    assert (done.code, done.stdout) == (0, b""), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    after = _log_lines(log)
    assert after[:len(before)] == before and len(after) == len(before) + 1, (after, done.stderr)
    assert after[-1] == done.stderr.rstrip("\n")
    found = LOG_LINE.fullmatch(after[-1])
    assert found, after[-1]
    return found.group(1)


def test_malformed_json_no_store_and_bad_options_exit_0_with_one_log_line(
        project: Path, run_ckpt: RunCkpt, state_home: Path, tmp_path: Path) -> None:
    fallback = state_home / "ckpt" / "hook.log"
    said = _fails_quietly(run_ckpt, b'{"hook_event_name": "PreToolUse", ', fallback)
    assert said.startswith("-: bad_payload: stdin is not JSON")
    said = _fails_quietly(run_ckpt, b"[1, 2]", fallback)
    assert said == "-: bad_payload: the hook payload must be a JSON object, not an array"
    nowhere = (tmp_path / "no-store").resolve()
    nowhere.mkdir()
    said = _fails_quietly(run_ckpt, payload("pre_bash.json", nowhere), fallback)
    assert said.startswith(f"PreToolUse toolu_01C3bash: user_error: no ckpt store for {nowhere}")
    # A project dir without a store is never initialized by the hook.
    said = _fails_quietly(run_ckpt, payload("pre_bash.json", nowhere), fallback,
                          env={"CLAUDE_PROJECT_DIR": str(nowhere)})
    assert "not_initialized" in said and not (nowhere / ".ckpt").exists()
    # Its own options cannot make it fail either (exit 2 would block the tool call).
    store_log = project / ".ckpt" / "logs" / "hook.log"
    said = _fails_quietly(run_ckpt, payload("pre_bash.json", project), fallback,
                          "--lock-timeout", "soon")
    assert said.startswith("PreToolUse toolu_01C3bash: user_error: --lock-timeout must be a "
                           "number of seconds >= 0, not 'soon'")
    said = _fails_quietly(run_ckpt, payload("pre_bash.json", project), fallback, "--bogus")
    assert "unexpected argument(s): --bogus" in said
    said = _fails_quietly(run_ckpt, payload("pre_bash.json", project), fallback,
                          "--lock-timeout")
    assert said == "PreToolUse toolu_01C3bash: usage: Option '--lock-timeout' requires an argument."
    assert not store_log.exists()
    assert records(project, SESSION) == []


def test_garbage_catalog_exits_0_and_logs_in_the_store(project: Path, run_ckpt: RunCkpt) -> None:
    catalog = project / ".ckpt" / "catalog.db"
    catalog.write_bytes(b"this is not a database" * 100)
    for name in ("-wal", "-shm"):
        Path(f"{catalog}{name}").unlink(missing_ok=True)
    log = project / ".ckpt" / "logs" / "hook.log"
    said = _fails_quietly(run_ckpt, payload("pre_write.json", project), log)
    assert said.startswith("PreToolUse toolu_01A1write: corrupt: "), said


def test_a_store_held_past_the_lock_timeout_exits_0_and_logs_the_holder(
        project: Path, run_ckpt: RunCkpt) -> None:
    from ckpt.checkpoints import Checkpoints

    with Checkpoints.open(project) as cp:
        cp.create()  # binds the root, so its lock file's place exists
        lock = Path(cp.store_dir) / "roots"
    lock_file = next(lock.glob("*/lock"), None) or next(lock.iterdir()) / "lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock_file)], env=clean_env(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        log = project / ".ckpt" / "logs" / "hook.log"
        said = _fails_quietly(run_ckpt, payload("pre_edit.json", project), log,
                              "--lock-timeout", "0.2")
        assert said.startswith("PreToolUse toolu_01B2edit: store_busy: store busy: ")
        assert f"locked by pid {holder.pid} " in said
    finally:
        holder.communicate("", timeout=30)
    assert hook(run_ckpt, "pre_edit.json", project) == ""  # free again: it checkpoints
    assert [r["tool_call_id"] for r in records(project, SESSION)] == ["toolu_01B2edit"]


HOLD_LOCK = """
import sys
from ckpt.checkpoints.lock import RootLock
with RootLock(sys.argv[1], timeout=5, purpose="test-holder"):
    print("locked", flush=True)
    sys.stdin.read()
"""


def test_an_unreadable_store_exits_0_and_logs_to_the_state_dir(
        project: Path, run_ckpt: RunCkpt, state_home: Path) -> None:
    """The store chmod 000: the hook can neither open it nor log in it; it logs in the state
    dir. Skipped where mode 000 stops nothing (root)."""
    store = project / ".ckpt"
    store.chmod(0)
    try:
        if os.access(store, os.R_OK | os.X_OK):
            pytest.skip("this user reads through mode 000 (root)")
        said = _fails_quietly(run_ckpt, payload("pre_write.json", project),
                              state_home / "ckpt" / "hook.log")
    finally:
        store.chmod(0o755)
    assert said.startswith("PreToolUse toolu_01A1write: "), said
    assert not (store / "logs").exists()
    assert records(project, SESSION) == []
