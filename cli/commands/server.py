"""`ckpt server start|stop|status`: explicit control of the store's resident server.

Owns the three commands and their output. The server itself is cli/server.py; starting it
detached is cli/server_spawn.py. These commands always run in the client's own process (the
server's DECLINE table names `server`), and reach the server through cli/wire.py.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import click

from ckpt.cli import wire
from ckpt.cli.context import State, json_option, library, pass_state
from ckpt.cli.errors import CliError
from ckpt.cli.render import write_json

START_WAIT = 30.0  # seconds `start` waits for a spawned server to answer
STOP_WAIT = 120.0  # seconds `stop` waits for the server to finish its request and exit


def _store(state: State) -> str:
    """The store the options name; NotInitialized (exit 1) when there is none."""
    library()
    from ckpt.checkpoints import NotInitialized, is_store_dir

    store = state.store_dir
    if not is_store_dir(store):
        raise NotInitialized(state.root, store)
    return store


def ask(store: str, kind: bytes, *, timeout: float = 5.0) -> list[bytes] | None:
    """Send `kind` to the store's server after HELLO; the reply's fields (STATUS), [] when
    no reply is expected (QUIT), None when no server answers."""
    try:
        sock = wire.connect(wire.socket_path(store), timeout=timeout)
    except OSError:
        return None
    channel = wire.Channel(sock)
    try:
        sock.settimeout(timeout)
        if wire.peer_uid(sock) not in (os.geteuid(), -1):
            raise CliError(f"the server socket of {store} belongs to another user")
        channel.send(wire.HELLO, wire.hello_fields())
        kind_back, _, fds = channel.recv()
        for fd in fds:
            os.close(fd)
        if kind_back != wire.HELLO:
            return None
        channel.send(kind)
        if kind != wire.STATUS:
            return []
        kind_back, fields, fds = channel.recv()
        for fd in fds:
            os.close(fd)
        return fields if kind_back == wire.STATUS_REPLY else None
    except (OSError, EOFError, wire.ProtocolError):
        return None
    finally:
        channel.close()


def read_status(store: str) -> dict[str, Any] | None:
    fields = ask(store, wire.STATUS)
    if not fields:
        return None
    value = json.loads(fields[0])
    return value if isinstance(value, dict) else None


def lock_held(store: str) -> bool:
    """Whether a server process holds the store's server lock (alive, maybe not yet bound)."""
    import fcntl  # here: `ckpt --help` must load on a platform without it (and refuse there)

    try:
        fd = os.open(os.path.join(wire.server_dir(store), "lock"), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@click.group()
def server() -> None:
    """The store's resident server (serves CLI calls without starting Python each time)."""


@server.command(epilog="""\b
Examples:
  ckpt server start                 # detached; returns once it answers
  ckpt server start --foreground    # in this terminal, logging on stderr too""")
@click.option("--foreground", is_flag=True, help="Run the server in this process.")
@json_option
@pass_state
def start(state: State, foreground: bool, as_json: bool) -> None:
    """Start the store's server unless one runs (idempotent)."""
    store = _store(state)
    from ckpt.checkpoints import read_config

    if read_config(store).server == "off":
        raise CliError("the resident server is off for this store (setting server = off)",
                       hint="'ckpt config set server auto' turns it on")
    if foreground:
        from ckpt.cli.server import Server

        if lock_held(store):
            raise CliError(f"a server already runs for {store}", hint="'ckpt server status'")
        Server(store, foreground=True).serve()
        return
    status = read_status(store)
    if status is None:
        status = _spawn_and_wait(store)
    if as_json:
        write_json(status)
    else:
        click.echo(f"ckpt server running: pid {status['pid']}, socket {status['socket']}")


def _spawn_and_wait(store: str) -> dict[str, Any]:
    from ckpt.cli.server_spawn import spawn

    pid = spawn(store) if not lock_held(store) else None
    deadline = time.monotonic() + START_WAIT
    while time.monotonic() < deadline:
        status = read_status(store)
        if status is not None:
            return status
        if pid is not None and os.waitpid(pid, os.WNOHANG)[0] == pid:
            pid = None  # it exited: another server won the lock, or it failed (its log says)
            if not lock_held(store):
                break
        time.sleep(0.02)
    log = os.path.join(wire.server_dir(store), "log")
    raise CliError("the server did not start", hint=f"see {log}")


@server.command()
@json_option
@pass_state
def stop(state: State, as_json: bool) -> None:
    """Stop the store's server after the request it runs (waits until it has exited)."""
    store = _store(state)
    status = read_status(store)
    if status is None:
        _print_stopped(None, as_json)
        return
    ask(store, wire.QUIT)
    deadline = time.monotonic() + STOP_WAIT
    while (lock_held(store) and _same_server(store, status)) or not gone(status["pid"]):
        if time.monotonic() > deadline:
            raise CliError(f"the server (pid {status['pid']}) did not stop",
                           hint=f"kill {status['pid']}")
        time.sleep(0.02)
    _print_stopped(status["pid"], as_json)


def gone(pid: int) -> bool:
    """Whether process `pid` has exited (a zombie nobody reaped yet counts as exited)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


def _same_server(store: str, status: dict[str, Any]) -> bool:
    """Whether the lock's owner line still names the server we stopped (not a new one)."""
    try:
        with open(os.path.join(wire.server_dir(store), "lock"), encoding="utf-8") as f:
            line = f.read()
    except OSError:
        return False
    return f"pid={status['pid']} " in line


def _print_stopped(pid: int | None, as_json: bool) -> None:
    if as_json:
        write_json({"stopped": pid is not None, "pid": pid})
    elif pid is None:
        click.echo("no ckpt server running")
    else:
        click.echo(f"ckpt server stopped (pid {pid})")


@server.command()
@json_option
@pass_state
def status(state: State, as_json: bool) -> None:
    """Whether the store's server runs: pid, version, uptime, roots, watch state, memory."""
    store = _store(state)
    found = read_status(store)
    if as_json:
        write_json(found if found is not None else {"running": False})
        return
    if found is None:
        click.echo("running: false")
        return
    for line in status_lines(found):
        click.echo(line)


def status_lines(s: dict[str, Any]) -> list[str]:
    idle = f"after {s['idle_exit']:g} s idle" if s.get("idle_exit") else "never"
    lines = [
        "running: true",
        f"pid: {s['pid']}",
        f"version: {s['version']}",
        f"uptime: {s['uptime']:.0f} s",
        f"store: {s['store']}",
        f"socket: {s['socket']}",
        f"requests: {s['requests']}",
        f"rss: {_mib(s.get('rss'))} (peak {_mib(s.get('peak_rss'))})",
        f"idle exit: {idle}",
        f"roots: {len(s['roots'])}",
    ]
    for root in s["roots"]:
        watch = root.get("watch")
        shown = "off" if watch is None else json.dumps(watch, sort_keys=True)
        lines.append(f"  {root['root']}  sessions: {', '.join(root['sessions'])}  "
                     f"watch: {shown}")
    return lines


def _mib(value: int | None) -> str:
    return "?" if value is None else f"{value / (1 << 20):.1f} MiB"


COMMANDS = [server]
