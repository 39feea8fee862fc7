"""`python -m ckpt` is the `ckpt` command, for environments without the console script."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from ckpt import __version__

Env = Callable[..., dict[str, str]]


def _python_m_ckpt(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckpt", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60, check=False)


def test_python_m_ckpt_runs_the_command_and_passes_its_exit_code_on(ws: Path,
                                                                     env_for: Env) -> None:
    env = env_for()
    version = _python_m_ckpt(ws, env, "--version")
    assert (version.returncode, version.stdout) == (0, f"ckpt {__version__}\n")
    assert _python_m_ckpt(ws, env, "init").returncode == 0
    created = _python_m_ckpt(ws, env, "create", "--json")
    assert created.returncode == 0, created.stderr
    listed = _python_m_ckpt(ws, env, "list", "--json")
    assert [c["id"] for c in json.loads(listed.stdout)] == [
        json.loads(created.stdout)["id"]]
    missing = _python_m_ckpt(ws, env, "show", "ckpt-no-such-id")
    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr.startswith("ckpt: error: unknown checkpoint ckpt-no-such-id")
