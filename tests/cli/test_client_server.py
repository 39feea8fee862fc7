"""The thin client against the real server: `python -m ckpt` through a running `ckpt server`
gives the bytes and exit codes of the in-process CLI, and the server really ran it.

Each test starts the store's server with `ckpt server start --json` and kills it by pid at
teardown.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

Env = Callable[..., dict[str, str]]


def ckpt(args: list[str], cwd: Path, env: dict[str, str],
         mode: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "ckpt", *args], cwd=cwd,
                          env={**env, "CKPT_SERVER": mode}, capture_output=True, check=False,
                          timeout=120, stdin=subprocess.DEVNULL)


def requests_served(root: Path, env: dict[str, str]) -> int:
    done = ckpt(["server", "status", "--json"], root, env, "off")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["running"] is True
    return int(status["requests"])


@pytest.fixture
def served_root(tmp_path: Path, env_for: Env) -> Iterator[Path]:
    """An initialized workspace with one checkpoint and its server running."""
    root = (tmp_path / "ws").resolve()
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("print('a')\n")
    (root / "notes.txt").write_text("one\n")
    env = env_for()
    for args in (["init"], ["create", "-m", "first"]):
        assert ckpt(args, root, env, "off").returncode == 0
    started = ckpt(["server", "start", "--json"], root, env, "off")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    try:
        yield root
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.parametrize("args", [
    ["list", "--json"],
    ["list"],
    ["--root", "{root}", "log", "--json"],
    ["diff", "--json"],
    ["restore", "no-such-checkpoint"],
    ["--session", "other", "list", "--json"],
    ["list", "--bogus-option"],
], ids=lambda args: " ".join(args))
def test_served_calls_match_the_in_process_cli(served_root: Path, env_for: Env,
                                               args: list[str]) -> None:
    env = env_for()
    args = [arg.format(root=served_root) for arg in args]
    (served_root / "notes.txt").write_text("two\n")
    before = requests_served(served_root, env)
    served = ckpt(args, served_root / "src", env, "auto")
    after = requests_served(served_root, env)
    local = ckpt(args, served_root / "src", env, "off")
    assert after == before + 1  # the server ran it, not the client
    assert (served.returncode, timeless(served.stdout), served.stderr) == \
        (local.returncode, timeless(local.stdout), local.stderr)


AGE = re.compile(rb"just now|\d+ (?:s|min|h|days?|weeks?|years?) ago")


def timeless(text: bytes) -> bytes:
    """`list`'s age column says how long ago, so two calls a second apart may differ there
    (and in the column's width): both become AGE, runs of spaces one."""
    return re.sub(rb" +", b" ", AGE.sub(b"AGE", text))


def test_a_checkpoint_made_through_the_server_is_seen_in_process(served_root: Path,
                                                                 env_for: Env) -> None:
    env = env_for()
    (served_root / "new.txt").write_text("new\n")
    made = ckpt(["create", "-m", "through the server", "--json"], served_root, env, "auto")
    assert made.returncode == 0, made.stderr
    listed = ckpt(["list", "--json"], served_root, env, "off")
    assert json.loads(made.stdout)["id"] in listed.stdout.decode()


def test_the_client_reaches_a_server_at_a_path_longer_than_sun_path(
        tmp_path: Path, env_for: Env) -> None:
    env = env_for()
    deep = tmp_path
    while len(os.fsencode(str(deep / ".ckpt" / "server" / "sock"))) <= 130:
        deep = deep / ("long" * 8)
    root = deep.resolve()
    root.mkdir(parents=True)
    (root / "f.txt").write_text("f\n")
    assert ckpt(["init"], root, env, "off").returncode == 0
    started = ckpt(["server", "start", "--json"], root, env, "off")
    assert started.returncode == 0, started.stderr
    pid = json.loads(started.stdout)["pid"]
    try:
        before = requests_served(root, env)
        served = ckpt(["list", "--json"], root, env, "auto")
        assert served.returncode == 0, served.stderr
        assert requests_served(root, env) == before + 1
    finally:
        os.kill(pid, signal.SIGKILL)
