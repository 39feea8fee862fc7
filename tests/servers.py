"""Real ckpt servers for tests: start one for a store, ask it for its status, stop it, and
find and kill any server a test left behind (one spawned on demand by a CLI call).

Shared by the CLI suite's server mode (tests/cli/conftest.py, `CKPT_TEST_MODE=server`), the
e2e suite and the server fault tests (tests/faults/test_fault_server*.py). A server is asked
for its status and told to quit the way `ckpt server status|stop` do (their `read_status` and
`ask`, over the socket); the server process's own modules (cli/server*.py) are never
imported here, so a test sees what a client sees.

Must not: leave a process running. Every server started here is stopped, then killed by pid
in a `finally`; `reap_servers_under` kills what on-demand spawns left under a test's temp dir.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckpt.cli import wire

#: `CKPT_TEST_MODE=server`: the CLI fixtures run every command through the thin client
#: against a real server for the test's store (tests/cli/conftest.py).
SERVER_MODE = os.environ.get("CKPT_TEST_MODE", "") == "server"

#: How long a server gets to start listening, or to exit once asked.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0

#: The console script's interpreter runs `-m ckpt`: the real entry point, thin client first.
CLIENT = (sys.executable, "-m", "ckpt")


def server_dir(store: str | os.PathLike[str]) -> str:
    return wire.server_dir(os.fspath(store))


def socket_path(store: str | os.PathLike[str]) -> str:
    return wire.socket_path(os.fspath(store))


def lock_path(store: str | os.PathLike[str]) -> str:
    return os.path.join(server_dir(store), wire.LOCK_NAME)


# -- the lock file's owner line -----------------------------------------------------------------

def read_lock_pid(store: str | os.PathLike[str]) -> int | None:
    """The pid on the server lock's owner line (`pid=N version=V started=T`), None if there is
    no such line. The line stays after the server is gone: check `alive` too."""
    try:
        with open(lock_path(store), encoding="utf-8", errors="replace") as f:
            text = f.read(4096)
    except OSError:
        return None
    for word in text.split():
        if word.startswith("pid="):
            with contextlib.suppress(ValueError):
                return int(word[4:])
    return None


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie counts as gone: it serves nothing)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def is_ckpt_server(pid: int) -> bool:
    """Whether `pid` is a ckpt server process (its command line names the server), so a
    reused pid is never killed."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    text = b" ".join(argv)
    return b"ckpt" in text and b"server" in text


def wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def kill_pid(pid: int) -> None:
    """SIGKILL `pid` (if it is still a ckpt server) and wait until it is gone."""
    if alive(pid) and is_ckpt_server(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_gone(pid, STOP_TIMEOUT)


# -- talking to a server ----------------------------------------------------------------------

def status(store: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The server's `status --json` body, asked over its socket as `ckpt server status`
    asks it (HELLO, STATUS); None when no server answers there."""
    from ckpt.cli.commands.server import read_status

    return read_status(os.fspath(store))


def ask_to_quit(store: str | os.PathLike[str]) -> bool:
    """Send QUIT (stop once idle), as `ckpt server stop` does; False when none answers."""
    from ckpt.cli.commands.server import ask

    return ask(os.fspath(store), wire.QUIT) is not None


def request_count(doc: Mapping[str, Any]) -> int:
    """Requests the server ran (accepted), from its status body."""
    value = doc.get("requests", 0)
    if isinstance(value, Mapping):  # {"accepted": N, "declined": M, ...}
        value = value.get("accepted", value.get("total", 0))
    return int(value)


def client_env(base: Mapping[str, str], extra: Mapping[str, str | None] | None = None
               ) -> dict[str, str]:
    """An environment in which `ckpt` uses a running server: CKPT_SERVER from the suite's
    default (off) removed, `extra` applied (None unsets a name, as CliRunner's `env` does)."""
    env = {k: v for k, v in base.items() if k != "CKPT_SERVER"}
    for name, value in (extra or {}).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


@dataclass
class Server:
    """A server this process started in the foreground for one store."""

    store: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        """The serving process: the lock's owner (a server spawned on demand may have taken
        the lock first, and then ours exited), else our child."""
        owner = read_lock_pid(self.store)
        return owner if owner is not None and alive(owner) else self.proc.pid

    def status(self) -> dict[str, Any] | None:
        return status(self.store)

    def stop(self) -> None:
        """QUIT (what `ckpt server stop` sends), then SIGKILL by pid if it has not exited;
        always reaped."""
        try:
            if self.proc.poll() is None and ask_to_quit(self.store):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=STOP_TIMEOUT)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            owner = read_lock_pid(self.store)
            if owner is not None and owner != self.proc.pid:
                kill_pid(owner)
            with contextlib.suppress(OSError):
                self.log.unlink()

    def log_text(self) -> str:
        parts = []
        for path in (Path(server_dir(self.store)) / "log", self.log):
            with contextlib.suppress(OSError):
                parts.append(f"--- {path}\n{path.read_text(errors='replace')[-4000:]}")
        return "\n".join(parts)


def start_server(store: str | os.PathLike[str], env: Mapping[str, str], *,
                 extra_env: Mapping[str, str] | None = None,
                 cwd: str | os.PathLike[str] | None = None) -> Server:
    """Start a server for `store` in the foreground, as a child of this process, and wait
    until it answers STATUS on its socket. Killed if it does not."""
    store = os.fspath(store)
    # Outside the workspace and the store: a test compares both with what it expects.
    fd, name = tempfile.mkstemp(prefix="ckpt-test-server-", suffix=".out")
    log = Path(name)
    out = os.fdopen(fd, "wb")
    # The entry the on-demand spawn runs (cli/server_spawn.py), in the foreground.
    proc = subprocess.Popen([sys.executable, "-m", "ckpt.cli.server", store, "--foreground"],
                            env={**client_env(env), **(extra_env or {})},
                            cwd=cwd or os.path.dirname(store), stdin=subprocess.DEVNULL,
                            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    out.close()
    server = Server(store, proc, log)
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while status(store) is None:
            owner = read_lock_pid(store)
            if proc.poll() is not None and not (owner is not None and alive(owner)):
                # (A server spawned on demand that holds the lock serves instead of ours.)
                raise AssertionError(f"the server for {store} exited {proc.returncode} before "
                                     f"it listened:\n{server.log_text()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the server for {store} did not listen within "
                                     f"{START_TIMEOUT:.0f} s:\n{server.log_text()}")
            time.sleep(0.02)
    except BaseException:
        server.stop()
        raise
    return server


@contextlib.contextmanager
def running_server(store: str | os.PathLike[str], env: Mapping[str, str],
                   **kwargs: Any) -> Iterator[Server]:
    server = start_server(store, env, **kwargs)
    try:
        yield server
    finally:
        server.stop()


# -- servers a test left behind -----------------------------------------------------------------

def find_server_locks(top: str | os.PathLike[str], max_depth: int = 6) -> list[str]:
    """Stores under `top` (to `max_depth` levels) that have a `server/lock` file."""
    found: list[str] = []
    top = os.fspath(top)
    base_depth = top.rstrip(os.sep).count(os.sep)
    for dirpath, dirnames, filenames in os.walk(top):
        if os.path.basename(dirpath) == "server" and "lock" in filenames:
            found.append(os.path.dirname(dirpath))
            dirnames[:] = []
            continue
        if dirpath.count(os.sep) - base_depth >= max_depth:
            dirnames[:] = []
        else:  # a store's object folders never hold a server: skip their fan-out
            dirnames[:] = [d for d in dirnames if d not in ("objects", "packs", "records")]
    return sorted(found)


def server_pids_for(top: str | os.PathLike[str]) -> dict[int, str]:
    """Live `python -m ckpt.cli.server STORE` processes whose STORE lies under `top`, found by
    their command lines (so also one spawned on demand that has not taken its lock yet)."""
    prefix = os.fsencode(os.path.realpath(top)).rstrip(b"/") + b"/"
    found: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"ckpt.cli.server" not in argv:
            continue
        # Absolute arguments only: a relative one ("-m") would resolve against this
        # process's current directory, which may be inside `top`.
        stores = [a for a in argv[1:]
                  if a.startswith(b"/") and os.path.realpath(a).startswith(prefix)]
        if stores and alive(int(name)):
            found[int(name)] = os.fsdecode(stores[0])
    return found


def reap_servers_under(top: str | os.PathLike[str]) -> list[tuple[str, int]]:
    """Kill every live ckpt server whose store lies under `top` (the lock's owner, and any
    server process started for a store there); returns (store, pid) of each."""
    reaped = []
    for store in find_server_locks(top):
        pid = read_lock_pid(store)
        if pid is not None and pid != os.getpid() and alive(pid) and is_ckpt_server(pid):
            kill_pid(pid)
            reaped.append((store, pid))
    for pid, store in server_pids_for(top).items():
        kill_pid(pid)
        reaped.append((store, pid))
    return reaped


# -- which store a command uses ---------------------------------------------------------------

_GLOBAL_WITH_VALUE = ("--root", "--store", "--session")


def command_store(args: Sequence[str], cwd: str, env: Mapping[str, str]) -> str | None:
    """The store `ckpt ARGS` run in `cwd` with `env` opens, if it exists (resolved as the CLI
    does: --root/--store or CKPT_ROOT/CKPT_STORE, else the nearest `.ckpt` above `cwd`)."""
    root, store = env.get("CKPT_ROOT"), env.get("CKPT_STORE")
    i = 0
    while i < len(args):
        arg = args[i]
        name, eq, value = arg.partition("=")
        if name in _GLOBAL_WITH_VALUE:
            if not eq:
                if i + 1 >= len(args):
                    return None
                value, i = args[i + 1], i + 1
            if name == "--root":
                root = value
            elif name == "--store":
                store = value
        elif not arg.startswith("-"):
            break
        i += 1
    if store is not None:
        path = os.path.join(cwd, store)
    else:
        from ckpt.checkpoints import CheckpointError, locate_store
        from ckpt.cli.context import find_root

        start = os.path.join(cwd, root) if root is not None else cwd
        if root is None:
            start = find_root(start)
        try:
            path = locate_store(os.path.realpath(start))
        except (CheckpointError, OSError):
            return None
    path = os.path.realpath(path)
    return path if os.path.isfile(os.path.join(path, "format")) else None


# Commands the server leaves to the client (DECLINE local): they run in-process.
LOCAL_COMMANDS = frozenset({"init", "bench", "gc", "fsck", "tune", "server", "completion", "mcp"})


def subcommand(args: Sequence[str]) -> str | None:
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _GLOBAL_WITH_VALUE:
            i += 2
            continue
        if not arg.startswith("-"):
            return arg
        i += 1
    return None


def goes_through_server(args: Sequence[str]) -> bool:
    """Whether a server runs `ckpt ARGS` (rather than the client, in-process)."""
    if "--version" in args and subcommand(args) is None:
        return False
    return subcommand(args) not in LOCAL_COMMANDS


@dataclass
class TestServers:
    """The servers of one test in server mode: one per store the test's commands use,
    started before the first command that finds the store, checked and stopped at the end."""

    env: Mapping[str, str]
    sweep: Path
    servers: dict[str, Server] = field(default_factory=dict)
    expected: dict[str, list[list[str]]] = field(default_factory=dict)

    def before(self, args: Sequence[str], cwd: str, env: Mapping[str, str]) -> str | None:
        """Start the server of the store `ckpt ARGS` will use, if it exists and has none."""
        store = command_store(args, cwd, env)
        if store is not None and store not in self.servers and env.get("CKPT_SERVER") != "off":
            self.servers[store] = start_server(store, self.env)
        return store

    def after(self, store: str | None, args: Sequence[str], env: Mapping[str, str]) -> None:
        if (store is not None and store in self.servers and env.get("CKPT_SERVER") != "off"
                and goes_through_server(args)):
            self.expected.setdefault(store, []).append(list(args))

    def close(self) -> list[str]:
        """Stop every server; what did not add up (a call that missed its server)."""
        problems: list[str] = []
        try:
            for store, server in self.servers.items():
                doc = server.status()
                want = self.expected.get(store, [])
                if doc is None:
                    problems.append(f"the server for {store} did not answer at the end:\n"
                                    f"{server.log_text()}")
                elif request_count(doc) < len(want):
                    problems.append(f"the server for {store} ran {request_count(doc)} "
                                    f"requests, {len(want)} expected: {want}\n"
                                    f"{server.log_text()}")
        finally:
            for server in self.servers.values():
                with contextlib.suppress(Exception):
                    server.stop()
            # Servers the test's own subprocesses spawned on demand (CKPT_SERVER unset).
            reap_servers_under(self.sweep)
        return problems
