"""The thin client's import budget: on its path a `ckpt` call loads only os, sys, _socket and
_signal beyond what `python -c pass` loads; never click, json, socket, signal, enum, typing,
re or anything of ckpt.checkpoints / ckpt.objstore.

Checked two ways: `python -X importtime` on the real entry (`python -m ckpt`) against
`python -c pass` in the same environment, for `--version`, a call with no server (the cold
path up to the in-process hand-over) and a call a server accepts; and, strictly, in an
interpreter without `site` (`-S`), where the modules loaded after the client returns are
compared with those of `import os, sys` alone.
"""

from __future__ import annotations

import _socket
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import ckpt
from ckpt.cli import wire

FORBIDDEN = {"click", "json", "socket", "signal", "enum", "typing", "re", "selectors",
             "ckpt.checkpoints", "ckpt.objstore", "ckpt.cli.main", "ckpt.cli.errors",
             "importlib.metadata", "dataclasses"}
# What the client itself adds to an interpreter that has imported os and sys.
CLIENT_MODULES = {"ckpt", "ckpt.cli", "ckpt.cli.client", "ckpt.cli.wire", "_socket", "_signal",
                  "__future__"}
PACKAGE_PARENT = str(Path(ckpt.__file__).resolve().parent.parent)


def imported(stderr: str) -> set[str]:
    """Module names from `-X importtime` lines (`import time: self | cumulative | name`)."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def importtime(argv: list[str], cwd: Path, env: dict[str, str]) -> set[str]:
    done = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=cwd, env=env,
                          capture_output=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return imported(done.stderr.decode("utf-8", "replace"))


@pytest.fixture
def store_root(tmp_path: Path) -> Path:
    """A root whose marker is a store (only what the client looks at: no library needed),
    set never to spawn a server after an in-process command."""
    root = (tmp_path / "ws").resolve()
    (root / ".ckpt").mkdir(parents=True)
    (root / ".ckpt" / "format").write_bytes(b"ckpt-objstore 1\n")
    (root / ".ckpt" / "config.toml").write_bytes(b'server = "off"\n')
    return root


@pytest.fixture
def accepting_server(store_root: Path) -> Iterator[Callable[[], None]]:
    """A server that accepts one request and answers EXIT 0 at once (`wait` joins it)."""
    (store_root / ".ckpt" / "server").mkdir(mode=0o700)
    listener = wire.bind(wire.socket_path(str(store_root / ".ckpt")))
    listener.settimeout(60)
    failures: list[BaseException] = []

    def serve() -> None:
        try:
            fd, _ = listener._accept()
            channel = wire.Channel(_socket.socket(fileno=fd))
            try:
                channel.recv()
                channel.send(wire.HELLO, wire.hello_fields())
                _, _, fds = channel.recv()
                for passed in fds:
                    os.close(passed)
                channel.send(wire.ACCEPTED, [b"1"])
                channel.send(wire.EXIT, [b"0"])
            finally:
                channel.close()
        except BaseException as exc:  # noqa: BLE001 - raised by wait()
            failures.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def wait() -> None:
        thread.join(60)
        if failures:
            raise failures[0]

    yield wait
    listener.close()


def test_version_imports_nothing_heavy(store_root: Path,
                                       env_for: Callable[..., dict[str, str]]) -> None:
    env = env_for({"CKPT_SERVER": "auto"})
    base = importtime(["-c", "pass"], store_root, env)
    extra = importtime(["-m", "ckpt", "--version"], store_root, env) - base
    assert not extra & FORBIDDEN, sorted(extra & FORBIDDEN)


def test_a_call_the_server_runs_imports_nothing_heavy(
        store_root: Path, accepting_server: Callable[[], None],
        env_for: Callable[..., dict[str, str]]) -> None:
    env = env_for({"CKPT_SERVER": "auto"})
    base = importtime(["-c", "pass"], store_root, env)
    extra = importtime(["-m", "ckpt", "list", "--json"], store_root, env) - base
    accepting_server()
    assert "ckpt.cli.client" in extra  # the client ran
    assert not extra & FORBIDDEN, sorted(extra & FORBIDDEN)


def test_without_a_server_the_call_goes_on_in_process(
        store_root: Path, env_for: Callable[..., dict[str, str]]) -> None:
    env = env_for({"CKPT_SERVER": "auto"})
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "ckpt", "list", "--json"],
                          cwd=store_root, env=env, capture_output=True, check=False, timeout=60)
    assert "click" in imported(done.stderr.decode("utf-8", "replace"))  # the in-process path


STRICT = """
import sys
sys.path.insert(0, {parent!r})
import os
before = set(sys.modules)
from ckpt.cli import client
result = client.run({argv!r})
print(repr(result))
print(" ".join(sorted(set(sys.modules) - before)))
"""


@pytest.mark.parametrize("case", ["version", "no server", "accepted"])
def test_the_client_path_adds_only_its_own_modules(
        case: str, store_root: Path, request: pytest.FixtureRequest,
        env_for: Callable[..., dict[str, str]]) -> None:
    argv = ["ckpt", "--version"] if case == "version" else ["ckpt", "list", "--json"]
    wait = request.getfixturevalue("accepting_server") if case == "accepted" else None
    code = STRICT.format(parent=PACKAGE_PARENT, argv=argv)
    done = subprocess.run([sys.executable, "-S", "-c", code], cwd=store_root,
                          env=env_for({"CKPT_SERVER": "auto"}), capture_output=True,
                          check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    expected = {"version": "0", "no server": "None", "accepted": "0"}[case]
    assert lines[-2] == expected
    added = set(lines[-1].split())
    assert added <= CLIENT_MODULES, sorted(added - CLIENT_MODULES)
    if case != "accepted":  # no socket file: the socket module is not even loaded
        assert not added & {"_socket", "ckpt.cli.wire"}
    if wait is not None:
        wait()
