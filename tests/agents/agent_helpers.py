"""Helpers and fixtures of the agent-facing tests (imported as `agents.agent_helpers`; the
fixtures are re-exported by tests/agents/conftest.py): a workspace with a store, `ckpt` as a
process (the hook's contract is about the process: exit code, stdout, stderr), the payloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "claude_hooks"
CLAUDE_SESSION = "9f1c2a7e-4b1d-4a6e-9d8e-2f3b5c6d7e8f"
PROMPT_ID = "0b6f7c1e-2d3a-4f5b-8c9d-1e2f3a4b5c6d"


@dataclass
class Proc:
    code: int
    stdout: bytes
    stderr: str


def clean_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a `ckpt` process: nothing of ckpt's or Claude Code's leaking in."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("CKPT_", "CLAUDE_", "XDG_STATE_HOME"))}
    env["CKPT_SERVER"] = "off"  # no resident server outlives the test (tests/conftest.py)
    env.update(extra or {})
    return env


def payload(name: str, project: Path) -> bytes:
    """A recorded payload with `$PROJECT` made the workspace root."""
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return text.replace("$PROJECT", str(project)).encode()


RunCkpt = Callable[..., Proc]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A workspace root with a store and a small tree (resolved: no symlinked /tmp)."""
    root = (tmp_path / "project").resolve()
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('v1')\n")
    (root / "notes.txt").write_text("notes\n")
    subprocess.run([sys.executable, "-m", "ckpt", "--root", str(root), "init"], check=True,
                   env=clean_env(), capture_output=True)
    return root


@pytest.fixture
def state_home(tmp_path: Path) -> Path:
    """$XDG_STATE_HOME for the processes: where the hook logs when no store can take it."""
    return tmp_path / "state"


@pytest.fixture
def run_ckpt(tmp_path: Path, state_home: Path) -> RunCkpt:
    """`python -m ckpt ARGS` with `stdin` (bytes), from a directory outside the workspace."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)

    def run(*args: str, stdin: bytes = b"", env: dict[str, str] | None = None,
            cwd: Path | None = None) -> Proc:
        done = subprocess.run([sys.executable, "-m", "ckpt", *args], input=stdin,
                              cwd=cwd or elsewhere, capture_output=True, timeout=120,
                              env=clean_env({"XDG_STATE_HOME": str(state_home), **(env or {})}),
                              check=False)
        return Proc(done.returncode, done.stdout, done.stderr.decode("utf-8", "replace"))

    return run


def records(root: Path, session: str) -> list[dict[str, object]]:
    """The session's checkpoints on `root`, oldest first, as `ckpt list --json` prints them."""
    done = subprocess.run([sys.executable, "-m", "ckpt", "--root", str(root), "--session",
                           session, "list", "--json"], env=clean_env(), capture_output=True,
                          check=True)
    found: list[dict[str, object]] = json.loads(done.stdout)
    return found
