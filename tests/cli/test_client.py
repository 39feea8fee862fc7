"""The thin client against a fake server on a real Unix socket (cli/client.py, cli/wire.py).

Each test starts a server thread that speaks the wire protocol by script, and runs `python -m
ckpt` as a subprocess with pipes: what the client sends, what it does with DECLINE, ACCEPTED,
EXIT, a lost connection, another version, a stale socket and a signal.
"""

from __future__ import annotations

import _socket
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ckpt.cli import client, errors, wire

Script = Callable[[wire.Channel, "Seen"], None]


@dataclass
class Seen:
    """What the fake server received."""

    request: list[bytes] = field(default_factory=list)
    fds: int = 0
    frames: list[tuple[bytes, list[bytes]]] = field(default_factory=list)
    got_request: threading.Event = field(default_factory=threading.Event)


class FakeServer:
    """One connection served by `script` on a thread, at the store's real socket path."""

    def __init__(self, store: Path, script: Script) -> None:
        (store / "server").mkdir(mode=0o700, exist_ok=True)
        self.listener = wire.bind(wire.socket_path(str(store)))
        self.listener.settimeout(60)
        self.script = script
        self.seen = Seen()
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            fd, _ = self.listener._accept()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.errors.append(exc)
            return
        channel = wire.Channel(_socket.socket(fileno=fd))
        try:
            self.script(channel, self.seen)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.errors.append(exc)
        finally:
            channel.close()

    def stop(self) -> None:
        self.thread.join(60)
        self.listener.close()
        assert not self.thread.is_alive()
        if self.errors:
            raise self.errors[0]


def greet(channel: wire.Channel, fields: list[bytes] | None = None) -> None:
    kind, theirs, _ = channel.recv()
    assert (kind, theirs) == (wire.HELLO, wire.hello_fields())
    channel.send(wire.HELLO, wire.hello_fields() if fields is None else fields)


def take_request(channel: wire.Channel, seen: Seen) -> list[int]:
    kind, fields, fds = channel.recv()
    assert kind == wire.REQUEST
    seen.request = fields
    seen.fds = len(fds)
    seen.got_request.set()
    return fds


def close_all(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)


def answering(*frames: tuple[bytes, list[bytes]]) -> Script:
    """A script: HELLO, take the REQUEST (closing its fds), send `frames`, hang up."""

    def script(channel: wire.Channel, seen: Seen) -> None:
        greet(channel)
        close_all(take_request(channel, seen))
        for kind, fields in frames:
            channel.send(kind, fields)

    return script


@pytest.fixture
def store_ws(tmp_path: Path, env_for: Callable[..., dict[str, str]]) -> Path:
    """A workspace with a store inside and one checkpoint (made with no server around). Its
    `server` setting is off, so a command the client runs in-process never spawns a real
    server (the client itself does not read the setting: it asks whatever socket is there)."""
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    off = env_for({"CKPT_SERVER": "off"})
    for args in (["init"], ["config", "set", "server", "off"], ["create", "-m", "first"]):
        done = subprocess.run([sys.executable, "-m", "ckpt", *args], cwd=root, env=off,
                              capture_output=True, check=False, timeout=60)
        assert done.returncode == 0, done.stderr
    return root


@pytest.fixture
def serve(store_ws: Path) -> Iterator[Callable[[Script], FakeServer]]:
    started: list[FakeServer] = []

    def start(script: Script) -> FakeServer:
        server = FakeServer(store_ws / ".ckpt", script)
        started.append(server)
        return server

    yield start
    for server in started:
        server.listener.close()


def run_client(root: Path, env_for: Callable[..., dict[str, str]], *args: str,
               extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    env = env_for({"CKPT_SERVER": "auto", **(extra or {})})
    return subprocess.run([sys.executable, "-m", "ckpt", *args], cwd=root, env=env,
                          capture_output=True, check=False, timeout=60)


def in_process(root: Path, env_for: Callable[..., dict[str, str]],
               *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "ckpt", *args], cwd=root,
                          env=env_for({"CKPT_SERVER": "off"}), capture_output=True,
                          check=False, timeout=60)


def signalled_client(root: Path, env_for: Callable[..., dict[str, str]],
                     moment: threading.Event, signum: int,
                     then: threading.Event | None = None) -> tuple[int, bytes, bytes]:
    """Run `ckpt list` as a client; send it `signum` once `moment` is set (then set `then`)."""
    proc = subprocess.Popen([sys.executable, "-m", "ckpt", "list"], cwd=root,
                            env=env_for({"CKPT_SERVER": "auto"}), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        assert moment.wait(60)
        proc.send_signal(signum)
        if then is not None:
            then.set()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def test_decline_runs_the_command_in_process(store_ws: Path, serve: Callable[[Script], FakeServer],
                                             env_for: Callable[..., dict[str, str]]) -> None:
    server = serve(answering((wire.DECLINE, [b"local"])))
    done = run_client(store_ws, env_for, "list", "--json")
    server.stop()
    expected = in_process(store_ws, env_for, "list", "--json")
    assert (done.returncode, done.stdout, done.stderr) == (0, expected.stdout, expected.stderr)
    assert b"first" in done.stdout
    assert server.seen.fds == 3


def test_accepted_request_carries_cwd_argv_env_and_exits_with_the_servers_code(
        store_ws: Path, serve: Callable[[Script], FakeServer],
        env_for: Callable[..., dict[str, str]]) -> None:
    def script(channel: wire.Channel, seen: Seen) -> None:
        greet(channel)
        fds = take_request(channel, seen)
        channel.send(wire.ACCEPTED, [b"1"])
        os.write(fds[1], b"from the server on stdout\n")
        os.write(fds[2], b"from the server on stderr\n")
        close_all(fds)
        channel.send(wire.EXIT, [b"3"])

    server = serve(script)
    (store_ws / "sub").mkdir()
    done = run_client(store_ws / "sub", env_for, "--session", "s1", "restore", "x\udce9",
                      extra={"CKPT_DEBUG": "1", "LC_ALL": "C", "SECRET_TOKEN": "no"})
    server.stop()
    assert done.returncode == 3
    assert done.stdout == b"from the server on stdout\n"
    assert done.stderr == b"from the server on stderr\n"
    cwd, argv, env = wire.parse_request(server.seen.request)
    assert cwd == os.fsencode(store_ws / "sub")
    assert argv == [b"--session", b"s1", b"restore", b"x\xe9"]
    assert env[b"CKPT_DEBUG"] == b"1" and env[b"CKPT_SERVER"] == b"auto"
    assert env[b"LC_ALL"] == b"C"
    assert b"SECRET_TOKEN" not in env and b"PATH" not in env


def test_connection_lost_after_accepted_is_exit_6_and_never_a_second_run(
        store_ws: Path, serve: Callable[[Script], FakeServer],
        env_for: Callable[..., dict[str, str]]) -> None:
    server = serve(answering((wire.ACCEPTED, [b"1"])))
    done = run_client(store_ws, env_for, "list", "--json")
    server.stop()
    assert done.returncode == 6 == client.SERVER_LOST == errors.SERVER_LOST
    assert done.stdout == b""  # the command did not run in the client as well
    assert done.stderr == (b"ckpt: error: the ckpt server stopped during the command; run it "
                           b"again (an interrupted restore is completed by the next call)\n")


def test_a_server_of_another_version_is_asked_to_quit_and_the_call_runs_in_process(
        store_ws: Path, serve: Callable[[Script], FakeServer],
        env_for: Callable[..., dict[str, str]]) -> None:
    def script(channel: wire.Channel, seen: Seen) -> None:
        greet(channel, [b"1", b"0.0.0-other", wire.hello_fields()[2]])
        while True:
            try:
                kind, fields, fds = channel.recv()
            except EOFError:
                return
            close_all(fds)
            seen.frames.append((kind, fields))

    server = serve(script)
    done = run_client(store_ws, env_for, "list", "--json")
    server.stop()
    assert server.seen.frames == [(wire.QUIT, [])]  # and no REQUEST
    expected = in_process(store_ws, env_for, "list", "--json")
    assert (done.returncode, done.stdout) == (0, expected.stdout)


def test_a_stale_socket_file_means_in_process(store_ws: Path,
                                              env_for: Callable[..., dict[str, str]]) -> None:
    (store_ws / ".ckpt" / "server").mkdir(mode=0o700)
    wire.bind(wire.socket_path(str(store_ws / ".ckpt"))).close()  # the file stays, nobody listens
    done = run_client(store_ws, env_for, "list", "--json")
    expected = in_process(store_ws, env_for, "list", "--json")
    assert (done.returncode, done.stdout, done.stderr) == (0, expected.stdout, expected.stderr)


def test_a_hello_that_never_comes_means_in_process(store_ws: Path,
                                                   serve: Callable[[Script], FakeServer],
                                                   env_for: Callable[..., dict[str, str]],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def script(channel: wire.Channel, seen: Seen) -> None:
        channel.recv()  # HELLO, never answered
        try:
            channel.recv()
        except (EOFError, OSError):
            return

    server = serve(script)
    done = run_client(store_ws, env_for, "list", "--json")
    server.stop()
    expected = in_process(store_ws, env_for, "list", "--json")
    assert (done.returncode, done.stdout) == (0, expected.stdout)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_after_accepted_is_forwarded_as_interrupt(
        store_ws: Path, serve: Callable[[Script], FakeServer],
        env_for: Callable[..., dict[str, str]], signum: int) -> None:
    accepted = threading.Event()

    def script(channel: wire.Channel, seen: Seen) -> None:
        greet(channel)
        close_all(take_request(channel, seen))
        channel.send(wire.ACCEPTED, [b"1"])
        accepted.set()
        kind, fields, _ = channel.recv()
        seen.frames.append((kind, fields))
        channel.send(wire.EXIT, [b"130"])

    server = serve(script)
    code, out, err = signalled_client(store_ws, env_for, accepted, signum)
    server.stop()
    assert server.seen.frames == [(wire.INTERRUPT, [str(int(signum)).encode()])]
    assert (code, out, err) == (130, b"", b"")


def test_a_signal_after_the_exit_code_leaves_the_code_as_it_is(
        store_ws: Path, serve: Callable[[Script], FakeServer],
        env_for: Callable[..., dict[str, str]]) -> None:
    """A Ctrl-C (or SIGTERM, SIGHUP) that lands after the server's EXIT, before the client's
    process exits, is ignored: it once turned a `create` whose id the server had printed into
    exit 130."""
    server = serve(answering((wire.ACCEPTED, [b"1"]), (wire.EXIT, [b"0"])))
    late = ("import signal\n"
            "from ckpt.cli import client\n"
            "code = client.run(['ckpt', 'list'])\n"
            "for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):\n"
            "    signal.raise_signal(signum)\n"
            "print(code)\n")
    done = subprocess.run([sys.executable, "-c", late], cwd=store_ws,
                          env=env_for({"CKPT_SERVER": "auto"}), capture_output=True,
                          check=False, timeout=60)
    server.stop()
    assert (done.returncode, done.stdout, done.stderr) == (0, b"0\n", b"")


def test_a_ctrl_c_before_the_answer_then_decline_is_an_in_process_interrupt(
        store_ws: Path, serve: Callable[[Script], FakeServer],
        env_for: Callable[..., dict[str, str]]) -> None:
    may_answer = threading.Event()

    def script(channel: wire.Channel, seen: Seen) -> None:
        greet(channel)
        close_all(take_request(channel, seen))
        assert may_answer.wait(60)
        channel.send(wire.DECLINE, [b"busy-shutdown"])

    server = serve(script)
    code, out, err = signalled_client(store_ws, env_for, server.seen.got_request,
                                      signal.SIGINT, then=may_answer)
    server.stop()
    assert (code, out, err) == (130, b"", b"ckpt: error: interrupted\n")


def test_exit_code_and_message_of_a_malformed_exit_frame(
        store_ws: Path, serve: Callable[[Script], FakeServer],
        env_for: Callable[..., dict[str, str]]) -> None:
    server = serve(answering((wire.ACCEPTED, [b"1"]), (wire.EXIT, [b"999"])))
    done = run_client(store_ws, env_for, "list")
    server.stop()
    assert done.returncode == 6
    assert done.stderr.startswith(b"ckpt: error: the ckpt server stopped")


@pytest.mark.parametrize("off", ["off", " OFF "])
def test_server_off_never_connects(store_ws: Path, serve: Callable[[Script], FakeServer],
                                   env_for: Callable[..., dict[str, str]], off: str) -> None:
    def script(channel: wire.Channel, seen: Seen) -> None:
        kind, fields, _ = channel.recv()
        seen.frames.append((kind, fields))

    server = serve(script)
    done = run_client(store_ws, env_for, "list", "--json", extra={"CKPT_SERVER": off})
    assert done.returncode == 0
    wire.Channel(wire.connect(wire.socket_path(str(store_ws / ".ckpt")))).send(wire.STATUS)
    server.stop()
    assert server.seen.frames == [(wire.STATUS, [])]  # the first connection was the test's


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to listen as another user")
def test_a_socket_of_another_user_is_refused_with_a_warning(
        store_ws: Path, env_for: Callable[..., dict[str, str]]) -> None:
    (store_ws / ".ckpt" / "server").mkdir(mode=0o700)
    path = wire.socket_path(str(store_ws / ".ckpt"))
    if len(os.fsencode(path)) > 100:
        pytest.skip("a short socket path keeps the forked listener simple")
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the listener: bound as root, listening (which fixes its credentials) as nobody
        try:
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.bind(path)
            os.setgid(65534)
            os.setuid(65534)
            sock.listen(4)
            os.write(ready_w, b"r")
            conn, _ = sock._accept()
            os.read(conn, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    try:
        assert os.read(ready_r, 1) == b"r"
        done = run_client(store_ws, env_for, "list", "--json")
    finally:
        os.close(ready_r)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    expected = in_process(store_ws, env_for, "list", "--json")
    assert (done.returncode, done.stdout) == (0, expected.stdout)
    assert done.stderr.startswith(b"ckpt: warning: not using the server socket")
    assert b"uid 65534" in done.stderr


def test_the_client_and_the_error_table_agree_on_server_lost() -> None:
    assert client.SERVER_LOST == errors.SERVER_LOST
