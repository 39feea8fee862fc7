"""Fixtures for the CLI tests: a workspace in a temp dir, and two ways to run `ckpt`.

`ckpt_in` runs in-process with click's CliRunner (fast; stdout and stderr kept apart);
`ckpt_proc` runs the installed console script in a subprocess (the real entry point: exit
codes, streams, environment). Both clear the CKPT_* variables of the outer environment.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from ckpt.cli.main import cli

CKPT_VARS = ("CKPT_ROOT", "CKPT_STORE", "CKPT_SESSION", "CKPT_DEBUG", "CKPT_LOG")


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes = b""


def make_tree(root: Path) -> None:
    """A small workspace: a text file, a nested file, an executable and a symlink."""
    (root / "a.txt").write_text("alpha\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("beta\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("a.txt")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An un-initialized workspace root with a few files (resolved: no symlinked /tmp)."""
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    make_tree(root)
    return root


CkptIn = Callable[..., Run]


@pytest.fixture
def ckpt_in(ws: Path, monkeypatch: pytest.MonkeyPatch) -> CkptIn:
    """Run `ckpt ARGS` in-process with the current directory at the workspace root."""
    monkeypatch.chdir(ws)
    for name in CKPT_VARS:
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()

    def run(*args: str, env: dict[str, str] | None = None,
            input: bytes | None = None) -> Run:  # noqa: A002 (CliRunner's keyword)
        result = runner.invoke(cli, list(args), env=env, input=input, prog_name="ckpt")
        return Run(result.exit_code, result.stdout, result.stderr, result.stdout_bytes)

    from schema_check import validating  # each --json stdout is checked against its schema
    return validating(run)


@pytest.fixture
def initialized(ws: Path, ckpt_in: CkptIn) -> Path:
    assert ckpt_in("init").code == 0
    return ws


_PYCACHE: list[str] = []


@pytest.fixture(scope="session", autouse=True)
def _bytecode_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Subprocesses keep compiled bytecode in a temp dir (never in the repo): without it,
    under PYTHONDONTWRITEBYTECODE, every `ckpt` run recompiles every module it imports."""
    _PYCACHE.append(str(tmp_path_factory.mktemp("pycache")))


def proc_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a `ckpt` subprocess: no CKPT_* leaking in from outside."""
    env = {k: v for k, v in os.environ.items()
           if k not in CKPT_VARS and k != "PYTHONDONTWRITEBYTECODE"}
    if _PYCACHE:
        env["PYTHONPYCACHEPREFIX"] = _PYCACHE[-1]
    env.update(extra or {})
    return env


@pytest.fixture
def env_for() -> Callable[..., dict[str, str]]:
    """`proc_env` for tests that start processes themselves."""
    return proc_env


CkptProc = Callable[..., Run]


@pytest.fixture
def ckpt_proc(ws: Path) -> CkptProc:
    """Run the installed `ckpt` console script; cwd defaults to the workspace root."""

    def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 30) -> Run:
        done = subprocess.run(["ckpt", *args], cwd=cwd or ws, env=proc_env(env),
                              capture_output=True, timeout=timeout, check=False)
        return Run(done.returncode, done.stdout.decode("utf-8", "surrogateescape"),
                   done.stderr.decode("utf-8", "surrogateescape"), done.stdout)

    from schema_check import validating  # each --json stdout is checked against its schema
    return validating(run)
