"""`ckpt hook json`: the generic hook for any harness, as a process: one checkpoint with the
payload's fields, root and session from the global options; a bad payload exits 0 with one
line on stderr and in the store's hook log."""

from __future__ import annotations

import json
from pathlib import Path

from agents.agent_helpers import RunCkpt, records


def test_one_checkpoint_with_the_payloads_fields(project: Path, run_ckpt: RunCkpt) -> None:
    body = {"reason": "pre-tool", "turn_id": "7", "tool_call_id": "call_42",
            "message_id": "m1", "label": "before bash", "summary": "runs the tests",
            "metadata": {"tool": "bash", "attempt": 2}}
    done = run_ckpt("--root", str(project), "--session", "harness", "hook", "json",
                    stdin=json.dumps(body).encode())
    assert (done.code, done.stdout, done.stderr) == (0, b"", "")
    [made] = records(project, "harness")
    assert {k: made[k] for k in body} == body


def test_a_bad_payload_exits_0_and_logs_in_the_store(project: Path, run_ckpt: RunCkpt) -> None:
    done = run_ckpt("--root", str(project), "hook", "json", stdin=b'{"turn": "7"}')
    assert (done.code, done.stdout) == (0, b"")
    log = (project / ".ckpt" / "logs" / "hook.log").read_text().splitlines()
    assert log == done.stderr.splitlines() and len(log) == 1
    assert log[0].endswith("Z ckpt hook json: -: bad_payload: unknown key(s) 'turn'; the keys "
                           "are reason, turn_id, tool_call_id, message_id, label, summary, "
                           "metadata (put anything else in metadata)")
    assert records(project, "default") == []
