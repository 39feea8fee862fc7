"""The resident server as real processes: start/status/stop, requests served exactly as in-process,
spawn on demand, idle exit, one server per store, a stale socket, refused peers, long socket
paths, a QUIT from a client of another version.

Requests are sent by a small client made here with cli/wire.py (`served`), so these tests do
not depend on the thin client; each test stops the servers it started (by pid at teardown).
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ckpt.cli import errors, wire
from ckpt.cli.commands.server import gone

PY = sys.executable
WAIT = 30.0


def ckpt(*args: str, cwd: Path, env: dict[str, str] | None = None,
         server: str = "off") -> subprocess.CompletedProcess[str]:
    """`python -m ckpt ARGS` in its own process (in-process CLI), with CKPT_SERVER=`server`."""
    full = dict(os.environ if env is None else env)
    full["CKPT_SERVER"] = server
    return subprocess.run([PY, "-m", "ckpt", *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)


def send_request(store: str, args: list[str], cwd: Path, fds: list[int], *,
                 hello: list[bytes] | None = None,
                 extra_env: dict[str, str] | None = None) -> wire.Channel:
    """Connect, exchange HELLO, send a REQUEST with `fds`; the channel, for the answer."""
    channel = wire.Channel(wire.connect(wire.socket_path(store), timeout=10))
    channel.send(wire.HELLO, hello or wire.hello_fields())
    kind, _, _ = channel.recv()
    assert kind == wire.HELLO
    environ = {k: v for k, v in os.environb.items() if k != b"CKPT_SERVER"}
    environ.update({os.fsencode(k): os.fsencode(v) for k, v in (extra_env or {}).items()})
    channel.send(wire.REQUEST, wire.request_fields(str(cwd), args, wire.env_items(environ)),
                 fds=fds)
    return channel


def served(store: str, args: list[str], cwd: Path, tmp: Path, *,
           hello: list[bytes] | None = None) -> tuple[str | None, int, str, str]:
    """Send one REQUEST to the store's server as the thin client does: (decline reason or
    None, exit code, stdout, stderr). stdout/stderr are files, so no pipe can fill up."""
    out_path, err_path = tmp / "served.out", tmp / "served.err"
    with open(out_path, "wb") as out, open(err_path, "wb") as err, \
            open(os.devnull, "rb") as stdin:
        channel = send_request(store, args, cwd, [stdin.fileno(), out.fileno(), err.fileno()],
                               hello=hello)
        kind, fields, _ = channel.recv()
        if kind == wire.DECLINE:
            channel.close()
            return fields[0].decode(), -1, "", ""
        assert kind == wire.ACCEPTED
        kind, fields, _ = channel.recv()
        assert kind == wire.EXIT
        channel.close()
    return None, int(fields[0]), out_path.read_text(), err_path.read_text()


def status(root: Path) -> dict[str, Any]:
    result = ckpt("server", "status", "--json", cwd=root)
    assert result.returncode == 0, result.stderr
    value: dict[str, Any] = json.loads(result.stdout)
    return value


def wait_until(predicate: Any, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.05)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ours or one nobody reaps, counts as gone)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    return not gone(pid)


class Servers:
    """The server pids a test saw; killed at teardown if still alive."""

    def __init__(self) -> None:
        self.pids: set[int] = set()

    def start(self, root: Path, *extra: str) -> dict[str, Any]:
        result = ckpt(*extra, "server", "start", "--json", cwd=root)
        assert result.returncode == 0, result.stderr
        found: dict[str, Any] = json.loads(result.stdout)
        self.pids.add(found["pid"])
        return found

    def kill_all(self) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def servers() -> Iterator[Servers]:
    found = Servers()
    try:
        yield found
    finally:
        found.kill_all()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("print('a')\n")
    (root / "notes.txt").write_text("one\n")
    assert ckpt("init", cwd=root).returncode == 0
    return root


def store_of(root: Path) -> str:
    return os.path.realpath(root / ".ckpt")


def test_start_status_stop(ws: Path, servers: Servers) -> None:
    assert status(ws) == {"running": False}
    first = servers.start(ws)
    again = servers.start(ws)
    assert again["pid"] == first["pid"]  # idempotent
    found = status(ws)
    assert found["running"] is True and found["pid"] == first["pid"]
    assert found["store"] == store_of(ws)
    assert found["socket"] == wire.socket_path(store_of(ws))
    assert found["rss"] > 0 and found["peak_rss"] >= found["rss"]
    assert found["idle_exit"] == 600
    mode = os.stat(found["socket"]).st_mode & 0o777
    assert mode == 0o600 and os.stat(wire.server_dir(store_of(ws))).st_mode & 0o777 == 0o700
    plain = ckpt("server", "status", cwd=ws).stdout
    assert f"pid: {first['pid']}" in plain and "running: true" in plain
    stopped = ckpt("server", "stop", cwd=ws)
    assert stopped.returncode == 0 and str(first["pid"]) in stopped.stdout
    assert not alive(first["pid"])
    assert not os.path.exists(found["socket"])
    assert status(ws) == {"running": False}
    assert ckpt("server", "stop", cwd=ws).stdout == "no ckpt server running\n"


ID = re.compile(r"ckpt-\d+-[0-9a-z]+")


def same(in_process: subprocess.CompletedProcess[str],
         through: tuple[str | None, int, str, str], *, ids: bool = False) -> None:
    reason, code, out, err = through
    assert reason is None
    mask = (lambda t: ID.sub("ID", t)) if ids else (lambda t: t)
    assert (code, mask(out), mask(err)) == (in_process.returncode, mask(in_process.stdout),
                                            mask(in_process.stderr))


def test_served_commands_match_in_process(ws: Path, tmp_path: Path, servers: Servers) -> None:
    store = store_of(ws)
    servers.start(ws)
    # create: same output but for the id
    same(ckpt("create", "-m", "one", cwd=ws), served(store, ["create", "-m", "one"], ws, tmp_path),
         ids=True)
    first = ckpt("list", "--json", cwd=ws)
    same(first, served(store, ["list", "--json"], ws, tmp_path))
    oldest = json.loads(first.stdout)[0]["id"]
    (ws / "notes.txt").write_text("two\n")
    (ws / "src" / "b.py").write_text("b\n")
    same(ckpt("diff", oldest, cwd=ws), served(store, ["diff", oldest], ws, tmp_path))
    same(ckpt("diff", oldest, "--json", cwd=ws / "src"),
         served(store, ["diff", oldest, "--json"], ws / "src", tmp_path))
    # restore, from the same starting state both ways
    in_process = ckpt("restore", oldest, cwd=ws)
    assert in_process.returncode == 0, in_process.stderr
    (ws / "notes.txt").write_text("two\n")
    (ws / "src" / "b.py").write_text("b\n")
    same(in_process, served(store, ["restore", oldest], ws, tmp_path), ids=True)
    assert (ws / "notes.txt").read_text() == "one\n" and not (ws / "src" / "b.py").exists()
    # errors: exit 1 (unknown id), 2 (usage), 3 (nothing matched)
    for args in (["restore", "nope"], ["list", "--bogus"], ["latest", "--reason", "none"]):
        in_process = ckpt(*args, cwd=ws)
        assert in_process.returncode in (errors.USER_ERROR, errors.USAGE,
                                         errors.NOTHING_MATCHED)
        same(in_process, served(store, args, ws, tmp_path))
    assert status(ws)["requests"] == 8


def test_corruption_exits_5_through_the_server(ws: Path, tmp_path: Path,
                                               servers: Servers) -> None:
    store = store_of(ws)
    (ws / "big.bin").write_bytes(os.urandom(4096))
    made = ckpt("create", cwd=ws)
    ident = made.stdout.strip()
    servers.start(ws)
    for pack in (Path(store) / "objects").rglob("*"):
        if pack.is_file() and pack.stat().st_size > 4096 and not pack.name.endswith(".idx"):
            data = bytearray(pack.read_bytes())
            data[len(data) // 2] ^= 0xFF
            pack.write_bytes(bytes(data))
    in_process = ckpt("cat", ident, "big.bin", cwd=ws)
    assert in_process.returncode == errors.CORRUPTION, in_process.stderr
    reason, code, _, err = served(store, ["cat", ident, "big.bin"], ws, tmp_path)
    assert (reason, code, err) == (None, errors.CORRUPTION, in_process.stderr)


def test_declined_commands_run_in_the_client(ws: Path, tmp_path: Path,
                                             servers: Servers) -> None:
    store = store_of(ws)
    servers.start(ws)
    for args in (["gc"], ["fsck"], ["--root", str(ws), "init"], ["server", "status"]):
        assert served(store, args, ws, tmp_path)[0] == "local"
    other = tmp_path / "other"
    other.mkdir()
    assert ckpt("init", cwd=other).returncode == 0
    assert served(store, ["list"], other, tmp_path)[0] == "store"
    assert served(store, ["--root", str(other), "list"], ws, tmp_path)[0] == "store"
    assert served(store, ["--root", str(ws), "list"], other, tmp_path)[0] is None
    other_version = [b"1", b"0.0.0-other", wire.hello_fields()[2]]
    assert served(store, ["list"], ws, tmp_path, hello=other_version)[0] == "version"
    assert status(ws)["requests"] == 1


def test_spawned_on_demand_and_then_serves(ws: Path, tmp_path: Path, servers: Servers) -> None:
    store = store_of(ws)
    result = ckpt("list", cwd=ws, server="auto")  # in-process: no server answers yet
    assert result.returncode == 0
    wait_until(lambda: status(ws)["running"], "the spawned server")
    servers.pids.add(status(ws)["pid"])
    # the next calls go through the thin client to the server, with the same results
    again = ckpt("list", cwd=ws, server="auto")
    assert (again.returncode, again.stdout, again.stderr) == (0, result.stdout, "")
    missing = ckpt("diff", "nope", cwd=ws, server="auto")
    assert (missing.returncode, missing.stderr) == (
        errors.USER_ERROR, ckpt("diff", "nope", cwd=ws).stderr)
    assert served(store, ["list"], ws, tmp_path)[1:] == (0, result.stdout, "")
    assert status(ws)["requests"] == 3
    log = (Path(wire.server_dir(store)) / "log").read_text()
    assert "request 1: list -> exit 0" in log and "request 2: diff nope -> exit 1" in log


def test_not_spawned_when_off(ws: Path) -> None:
    assert ckpt("list", cwd=ws, server="off").returncode == 0
    assert ckpt("config", "set", "server", "off", cwd=ws).returncode == 0
    assert ckpt("list", cwd=ws, server="auto").returncode == 0
    time.sleep(0.5)  # a spawn would have bound the socket by now; none must
    assert not os.path.exists(wire.socket_path(store_of(ws)))
    refused = ckpt("server", "start", cwd=ws)
    assert refused.returncode == errors.USER_ERROR and "server = off" in refused.stderr


def test_idle_exit(ws: Path, servers: Servers) -> None:
    assert ckpt("config", "set", "server_idle", "1", cwd=ws).returncode == 0
    pid = servers.start(ws)["pid"]
    wait_until(lambda: not alive(pid), "the idle exit")
    assert status(ws) == {"running": False}
    assert "idle for" in (Path(wire.server_dir(store_of(ws))) / "log").read_text()


def test_one_server_per_store(ws: Path, servers: Servers) -> None:
    pid = servers.start(ws)["pid"]
    second = subprocess.run([PY, "-m", "ckpt.cli.server", store_of(ws)], timeout=60,
                            capture_output=True)
    assert second.returncode == 0  # the lock is held: it leaves at once
    assert status(ws)["pid"] == pid
    assert ckpt("server", "start", "--foreground", cwd=ws).returncode == errors.USER_ERROR


def test_stale_socket_after_kill_9(ws: Path, servers: Servers) -> None:
    first = servers.start(ws)
    os.kill(first["pid"], signal.SIGKILL)
    wait_until(lambda: not alive(first["pid"]), "the killed server to go")
    assert os.path.exists(first["socket"])  # left behind
    assert status(ws) == {"running": False}
    second = servers.start(ws)
    assert second["pid"] != first["pid"] and status(ws)["pid"] == second["pid"]
    assert "removing stale socket" in (Path(wire.server_dir(store_of(ws))) / "log").read_text()


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                    reason="needs root to act as another user")
def test_another_user_is_refused(ws: Path, servers: Servers) -> None:
    found = servers.start(ws)
    # Open the way past the file modes, so that the peer-credential check alone refuses.
    os.chmod(wire.server_dir(store_of(ws)), 0o755)
    os.chmod(found["socket"], 0o777)
    # The directory is opened before the switch: the test's tmp dirs above it are root's 0700.
    directory = os.open(wire.server_dir(store_of(ws)), os.O_RDONLY | os.O_DIRECTORY)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(10)
            sock.connect(f"/proc/self/fd/{directory}/sock")
            channel = wire.Channel(sock)
            channel.send(wire.HELLO, wire.hello_fields())
            try:
                channel.recv()
            except (EOFError, OSError):
                code = 0  # refused: closed without a HELLO
        finally:
            os._exit(code)
    os.close(directory)
    _, code = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(code) == 0
    assert "refused a connection of uid 65534" in (
        Path(wire.server_dir(store_of(ws))) / "log").read_text()


def test_socket_path_longer_than_sun_path(tmp_path: Path, servers: Servers) -> None:
    deep = tmp_path.joinpath(*["d" * 30] * 4) / "ws"
    deep.mkdir(parents=True)
    (deep / "f.txt").write_text("x\n")
    assert ckpt("init", cwd=deep).returncode == 0
    path = wire.socket_path(store_of(deep))
    assert len(os.fsencode(path)) > 108
    servers.start(deep)
    assert status(deep)["socket"] == path
    reason, code, out, _ = served(store_of(deep), ["create", "-m", "deep"], deep, tmp_path)
    assert (reason, code) == (None, 0) and ID.fullmatch(out.strip())


def test_quit_from_a_client_of_another_version(ws: Path, servers: Servers) -> None:
    pid = servers.start(ws)["pid"]
    channel = wire.Channel(wire.connect(wire.socket_path(store_of(ws)), timeout=10))
    channel.send(wire.HELLO, [b"1", b"999.0.0", wire.hello_fields()[2]])
    kind, fields, _ = channel.recv()
    assert kind == wire.HELLO and fields == wire.hello_fields()
    channel.send(wire.QUIT)
    channel.close()
    wait_until(lambda: not alive(pid), "the old server to leave")
    assert status(ws) == {"running": False}


def test_interrupt_reaches_the_running_command(ws: Path, tmp_path: Path,
                                               servers: Servers) -> None:
    store = store_of(ws)
    servers.start(ws)
    marker = Path(wire.server_dir(store)) / "paused-run"
    with open(tmp_path / "err", "wb") as err, open(tmp_path / "out", "wb") as out, \
            open(os.devnull, "rb") as stdin:
        channel = send_request(store, ["create"], ws, [stdin.fileno(), out.fileno(),
                                                       err.fileno()],
                               extra_env={"CKPT_SERVER_TEST_PAUSE": "run"})
    assert channel.recv()[0] == wire.ACCEPTED
    wait_until(marker.exists, "the request to pause")
    channel.send(wire.INTERRUPT, [str(int(signal.SIGINT)).encode()])
    kind, fields, _ = channel.recv()
    assert (kind, fields) == (wire.EXIT, [b"130"])
    assert (tmp_path / "err").read_text() == "ckpt: error: interrupted\n"
    assert (tmp_path / "out").read_text() == ""
    assert json.loads(ckpt("list", "--json", cwd=ws).stdout) == []
    # the next request is not hit by a late interrupt, and the server still serves
    assert served(store, ["list"], ws, tmp_path)[1] == 0


def test_a_request_not_accepted_is_never_run(ws: Path, tmp_path: Path,
                                             servers: Servers) -> None:
    """The client of a queued request leaves before the server gets to it: ACCEPTED cannot be
    sent, so the server drops it (the client would have run it itself)."""
    store = store_of(ws)
    servers.start(ws)
    marker = Path(wire.server_dir(store)) / "paused-accepted"
    with open(os.devnull, "wb") as sink, open(os.devnull, "rb") as stdin:
        fds = [stdin.fileno(), sink.fileno(), sink.fileno()]
        busy = send_request(store, ["list"], ws, fds,
                            extra_env={"CKPT_SERVER_TEST_PAUSE": "accepted"})
        assert busy.recv()[0] == wire.ACCEPTED
        wait_until(marker.exists, "the first request to pause")
        queued = send_request(store, ["create", "-m", "dropped"], ws, fds)
        time.sleep(0.2)  # queued behind the paused one
        queued.close()
    marker.unlink()
    assert busy.recv()[:2] == (wire.EXIT, [b"0"])
    busy.close()
    wait_until(lambda: "dropped" in (Path(wire.server_dir(store)) / "log").read_text(),
               "the server to reach the queued request")
    assert json.loads(ckpt("list", "--json", cwd=ws).stdout) == []
    assert status(ws)["requests"] == 1


def test_a_server_of_another_version_declines_and_can_be_replaced(
        ws: Path, tmp_path: Path, servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_SERVER_TEST_VERSION", "0.0.1-old")
    old = servers.start(ws)
    monkeypatch.delenv("CKPT_SERVER_TEST_VERSION")
    assert old["version"] == "0.0.1-old"
    assert served(store_of(ws), ["list"], ws, tmp_path)[0] == "version"
    channel = wire.Channel(wire.connect(wire.socket_path(store_of(ws)), timeout=10))
    channel.send(wire.HELLO, wire.hello_fields())
    channel.recv()
    channel.send(wire.QUIT)
    channel.close()
    wait_until(lambda: not alive(old["pid"]), "the old server to leave")
    assert ckpt("list", cwd=ws, server="auto").returncode == 0  # in-process; spawns anew
    wait_until(lambda: status(ws)["running"], "the new server")
    new = status(ws)
    servers.pids.add(new["pid"])
    assert new["version"] == wire.hello_fields()[1].decode()


def test_idle_server_runs_the_verification_walk(ws: Path, tmp_path: Path,
                                                servers: Servers) -> None:
    assert ckpt("config", "set", "server_verify", "0.5", cwd=ws).returncode == 0
    servers.start(ws)
    assert served(store_of(ws), ["create"], ws, tmp_path)[1] == 0
    (ws / "notes.txt").write_text("changed\n")
    log = Path(wire.server_dir(store_of(ws))) / "log"
    wait_until(lambda: "verification walk of 1 root(s): 0 disagreement(s)" in log.read_text(),
               "a verification walk")
    roots = status(ws)["roots"]
    assert [r["root"] for r in roots] == [os.path.realpath(ws)]
    assert roots[0]["sessions"] == ["default"] and roots[0]["watch"] is not None
    assert "BUG" not in log.read_text()


def test_a_server_whose_store_is_deleted_exits(ws: Path, servers: Servers) -> None:
    pid = servers.start(ws)["pid"]
    shutil.rmtree(ws / ".ckpt")
    wait_until(lambda: not alive(pid), "the server of a deleted store to exit")


def test_a_closed_stdout_is_exit_141_as_in_process(ws: Path, tmp_path: Path,
                                                   servers: Servers) -> None:
    store = store_of(ws)
    servers.start(ws)
    for _ in range(3):
        assert ckpt("create", cwd=ws).returncode == 0
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(tmp_path / "err", "wb") as err, open(os.devnull, "rb") as stdin:
        channel = send_request(store, ["list", "--json"], ws,
                               [stdin.fileno(), write_end, err.fileno()])
    os.close(write_end)
    assert channel.recv()[0] == wire.ACCEPTED
    assert channel.recv()[:2] == (wire.EXIT, [str(errors.BROKEN_PIPE).encode()])
    assert (tmp_path / "err").read_text() == ""
    assert served(store, ["list"], ws, tmp_path)[1] == 0  # the server is unharmed


def test_spawned_server_keeps_none_of_the_callers_descriptors(ws: Path,
                                                              servers: Servers) -> None:
    """A harness waiting for EOF on any pipe it gave `ckpt` (stdout, or an inherited extra
    descriptor) sees it when `ckpt` exits, though the server it spawned lives on."""
    extra_r, extra_w = os.pipe()
    env = dict(os.environ, CKPT_SERVER="auto")
    proc = subprocess.Popen([PY, "-m", "ckpt", "list"], cwd=ws, env=env, pass_fds=(extra_w,),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    os.close(extra_w)
    proc.communicate(timeout=120)  # EOF on stdout and stderr
    assert proc.returncode == 0
    wait_until(lambda: status(ws)["running"], "the spawned server")
    servers.pids.add(status(ws)["pid"])
    # EOF: nobody holds the write end any more
    assert select.select([extra_r], [], [], WAIT)[0] and os.read(extra_r, 1) == b""
    os.close(extra_r)


def test_pool_keeps_the_most_recently_used_services(tmp_path: Path) -> None:
    from ckpt.cli.server_exec import Pool

    roots = []
    for name in ("a", "b", "c"):
        root = tmp_path / name
        root.mkdir()
        assert ckpt("init", cwd=root).returncode == 0
        roots.append(str(root))
    pool = Pool(size=2)
    try:
        first, opened = pool.checkout(roots[0], None, "default")
        assert opened and pool.checkout(roots[0], None, "default") == (first, False)
        pool.checkout(roots[1], None, "default")
        pool.checkout(roots[0], None, "default")  # a used again: b is now the oldest
        pool.checkout(roots[2], None, "default")
        kept = [key[0] for key, _ in pool.services()]
        assert kept == [os.path.realpath(roots[0]), os.path.realpath(roots[2])]
        assert pool.checkout(roots[1], None, "other")[1]  # another session: its own service
        pool.settle()
    finally:
        pool.close()
    assert pool.services() == []


def test_a_lost_catalog_is_rebuilt_through_the_server_as_in_process(
        ws: Path, tmp_path: Path, servers: Servers) -> None:
    store = store_of(ws)
    made = ckpt("create", "-m", "kept", cwd=ws).stdout.strip()
    servers.start(ws)
    assert served(store, ["list"], ws, tmp_path)[1] == 0  # the root is open in the server
    for name in ("catalog.db", "catalog.db-wal", "catalog.db-shm"):
        (Path(store) / name).unlink(missing_ok=True)
    reason, code, out, _ = served(store, ["list", "--json"], ws, tmp_path)
    assert (reason, code) == (None, 0)
    assert [r["id"] for r in json.loads(out)] == [made]
    assert (Path(store) / "catalog.db").exists()  # rebuilt, as an in-process call does
    later = served(store, ["create", "-m", "later"], ws, tmp_path)[2].strip()
    listed = json.loads(ckpt("list", "--json", cwd=ws).stdout)  # in its own process
    assert [r["id"] for r in listed] == [made, later]


def test_stop_lets_the_running_request_finish(ws: Path, tmp_path: Path,
                                              servers: Servers) -> None:
    store = store_of(ws)
    pid = servers.start(ws)["pid"]
    marker = Path(wire.server_dir(store)) / "paused-run"
    with open(tmp_path / "out", "wb") as out, open(os.devnull, "rb") as stdin:
        channel = send_request(store, ["create", "-m", "during stop"], ws,
                               [stdin.fileno(), out.fileno(), out.fileno()],
                               extra_env={"CKPT_SERVER_TEST_PAUSE": "run"})
    assert channel.recv()[0] == wire.ACCEPTED
    wait_until(marker.exists, "the request to pause")
    env = dict(os.environ, CKPT_SERVER="off")
    stopping = subprocess.Popen([PY, "-m", "ckpt", "server", "stop"], cwd=ws, env=env,
                                stdout=subprocess.PIPE, text=True)
    log = Path(wire.server_dir(store)) / "log"
    wait_until(lambda: "asked to stop" in log.read_text(), "the stop request")
    assert stopping.poll() is None and alive(pid)  # waiting for the request
    marker.unlink()
    assert channel.recv()[:2] == (wire.EXIT, [b"0"])
    out_text, _ = stopping.communicate(timeout=120)
    assert stopping.returncode == 0 and f"pid {pid}" in out_text
    assert not alive(pid)
    assert [r["label"] for r in json.loads(ckpt("list", "--json", cwd=ws).stdout)] == [
        "during stop"]


def test_foreground_server_serves_and_stops_on_sigint(ws: Path, tmp_path: Path,
                                                      servers: Servers) -> None:
    env = dict(os.environ, CKPT_SERVER="off")
    proc = subprocess.Popen([PY, "-m", "ckpt", "server", "start", "--foreground"], cwd=ws,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    servers.pids.add(proc.pid)
    wait_until(lambda: status(ws)["running"], "the foreground server")
    assert status(ws)["pid"] == proc.pid
    assert served(store_of(ws), ["list"], ws, tmp_path)[1] == 0
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert "request 1: list -> exit 0" in err  # the log on its stderr too
    assert status(ws) == {"running": False}


def test_a_request_runs_with_the_clients_env_not_the_servers(
        ws: Path, tmp_path: Path, servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_SESSION", "servers-own")  # the env the server is started with
    servers.start(ws)
    monkeypatch.delenv("CKPT_SESSION")
    store = store_of(ws)
    assert served(store, ["create", "-m", "plain"], ws, tmp_path)[1] == 0
    with open(os.devnull, "wb") as sink, open(os.devnull, "rb") as stdin:
        channel = send_request(store, ["create", "-m", "s1"], ws,
                               [stdin.fileno(), sink.fileno(), sink.fileno()],
                               extra_env={"CKPT_SESSION": "s1"})
        assert channel.recv()[0] == wire.ACCEPTED
        assert channel.recv()[:2] == (wire.EXIT, [b"0"])
    listed = json.loads(ckpt("list", "--all-sessions", "--json", cwd=ws).stdout)
    assert sorted((r["label"], r["session"]) for r in listed) == [
        ("plain", "default"), ("s1", "s1")]
