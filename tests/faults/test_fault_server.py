"""Faults of the resident server, with real processes: a real server for a real store, the real
thin client (`python -m ckpt`), SIGKILL and SIGINT.

- The server is killed (SIGKILL) in the middle of a `create` and of a `restore` through it: the
  client exits 6 (SERVER_LOST) with its one line; the next CLI call is correct (a killed
  restore is completed, as after a kill of the in-process CLI) and `fsck --full` is clean.
- A stale socket (a killed server's): the client runs in-process; a new server starts over it.
- Two clients at once: both succeed, two checkpoints, each exactly its tree.
- A client meeting a server of another ckpt version (the server's CKPT_SERVER_TEST_VERSION
  hook): it runs the command itself, and the old server, asked to quit, goes.
- The server killed after the command ran, before its EXIT (the CKPT_SERVER_TEST_PAUSE hook):
  exit 6, and the command ran once, never again by the client.
- Ctrl-C to a client while the server restores: exit 130, and the store and tree are left as
  a Ctrl-C leaves them in-process (the restore pending, completed by the next call).

The moment of a kill or a Ctrl-C is seen, not guessed: the client's stderr is a terminal (a
pty), where the command draws its progress line as soon as a stage starts; the server writes
it to the client's own descriptor, so the first "ckpt: hashing" / "ckpt: restoring" on the pty
means the server is inside that stage.
"""

from __future__ import annotations

import os
import pty
import random
import re
import select
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest
import servers

SERVER_LOST = 6
INTERRUPTED = 130
LOST_LINE = ("ckpt: error: the ckpt server stopped during the command; run it again (an "
             "interrupted restore is completed by the next call)")
FILES = 600


def client_env(**extra: str) -> dict[str, str]:
    """A client's environment: the repo importable, the suite's CKPT_SERVER=off removed."""
    return servers.client_env(h.env(), extra)


def client(root: str, *args: str, **extra: str) -> h.Run:
    """`python -m ckpt --root ROOT ARGS` through the thin client (a server is used if up)."""
    started = time.monotonic()
    done = subprocess.run([*servers.CLIENT, "--root", root, *args], env=client_env(**extra),
                          cwd=root, stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=180, check=False)
    return h.Run(done.returncode, done.stdout.decode("utf-8", "surrogateescape"),
                 done.stderr.decode("utf-8", "surrogateescape"), time.monotonic() - started)


def in_process(root: str, *args: str) -> h.Run:
    return client(root, *args, CKPT_SERVER="off")


@dataclass
class Workspace:
    root: str
    store: str
    base: str  # the first checkpoint's id
    base_model: h.Model


@pytest.fixture
def workspace(base: str) -> Workspace:
    root = os.path.join(base, "ws")
    os.mkdir(root)
    h.build_tree(root, random.Random(h.seed_for("server-workspace")), files=FILES)
    assert in_process(root, "init").code == h.OK
    created = in_process(root, "create", "-m", "base")
    assert created.code == h.OK, created
    h.set_config(root, "lock_timeout", "5")
    return Workspace(root, os.path.join(root, ".ckpt"), created.out.strip(), h.tree_state(root))


@pytest.fixture
def server(workspace: Workspace) -> Iterator[servers.Server]:
    """The workspace's server, warmed (its root opened); stopped and killed at the end, with
    anything else a test left running under the temp dir."""
    srv = servers.start_server(workspace.store, client_env(), cwd=workspace.root)
    try:
        assert client(workspace.root, "list").code == h.OK
        yield srv
    finally:
        srv.stop()
        servers.reap_servers_under(os.path.dirname(workspace.root))


class PtyClient:
    """A client whose stderr is a terminal (progress draws there); stdout is a pipe."""

    def __init__(self, root: str, *args: str, **extra: str) -> None:
        self.master, slave = pty.openpty()
        self.seen = b""
        try:
            self.proc = subprocess.Popen(
                [*servers.CLIENT, "--root", root, *args], cwd=root, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=slave, env=client_env(TERM="xterm", **extra))
        finally:
            os.close(slave)
        self.out = b""
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        self.out = self.proc.stdout.read()

    def wait_for(self, text: bytes, timeout: float = 60) -> bool:
        """Read the terminal until `text` shows; False if the client ended first."""
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} never showed: {self.seen[-500:]!r}")
            ready, _, _ = select.select([self.master], [], [], 0.05)
            if ready and not self._read_once():
                return False
        return True

    def _read_once(self) -> bool:
        try:
            chunk = os.read(self.master, 65536)
        except OSError:  # EIO: every writer of the terminal has closed it
            return False
        self.seen += chunk
        return bool(chunk)

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        """Exit code, stdout, and the terminal's text with the progress lines removed."""
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout=timeout)
        while select.select([self.master], [], [], 0.2)[0] and self._read_once():
            pass
        os.close(self.master)
        text = self.seen.decode("utf-8", "replace").replace("\r\n", "\n")
        lines = [re.sub(r".*\x1b\[K", "", line) for line in text.split("\n")]
        return code, self.out.decode(), "\n".join(line for line in lines if line.strip())


def changed_tree(ws: Workspace, name: str) -> h.Model:
    """Rewrite most files (a restore to the base then has much to do); the new tree."""
    h.mutate(ws.root, random.Random(h.seed_for(name)), changes=FILES)
    return h.tree_state(ws.root)


# -- kill -9 of the server mid-command -------------------------------------------------------

def kill_server_during(server: servers.Server, stage: bytes, root: str, *args: str) -> None:
    """Run `ckpt ARGS` through `server`, SIGKILL the server once the command draws `stage`:
    the client exits 6 (SERVER_LOST) with its line and nothing on stdout."""
    victim = server.pid
    run = PtyClient(root, *args)
    assert run.wait_for(stage), f"the command ended before {stage!r}"
    os.kill(victim, signal.SIGKILL)
    code, out, err = run.finish()
    assert (code, out) == (SERVER_LOST, ""), err
    assert err.strip().endswith(LOST_LINE)  # (after the progress line it interrupted)
    assert servers.wait_gone(victim, 10)


def test_server_killed_during_create_loses_the_call_not_the_store(
        workspace: Workspace, server: servers.Server) -> None:
    ws = workspace
    changed_tree(ws, "server-kill-create")
    kill_server_during(server, b"ckpt: hashing", ws.root, "create", "-m", "killed")
    h.tally("server kill create", injected=1)

    assert h.listed_ids(ws.root) == {ws.base}  # the killed create left nothing half-made
    model = h.tree_state(ws.root)
    again = client(ws.root, "create", "--json", "-m", "again")  # the next call: in-process
    assert again.code == h.OK, again
    ledger = h.Ledger(ws.root, expected={ws.base: ws.base_model})
    ledger.report(again.json()["id"], model)
    ledger.check("after the server was killed mid-create")
    h.tally("server kill create", passed=1)


@pytest.mark.parametrize("next_call", ["in-process", "new server"])
def test_server_killed_during_restore_is_completed_by_the_next_call(
        workspace: Workspace, server: servers.Server, next_call: str) -> None:
    ws = workspace
    changed = changed_tree(ws, f"server-kill-restore-{next_call}")
    kill_server_during(server, b"ckpt: restoring", ws.root, "restore", ws.base, "--json")
    h.tally("server kill restore", injected=1)
    pending = h.journals(ws.store)
    state = h.tree_state(ws.root)
    assert pending or state == ws.base_model, "no journal, yet the tree is half restored"
    assert state in (changed, ws.base_model) or pending

    if next_call == "new server":  # over the dead one's socket file
        assert os.path.exists(servers.socket_path(ws.store))
        again = servers.start_server(ws.store, client_env(), cwd=ws.root)
        try:
            done = client(ws.root, "restore", ws.base, "--json")
            assert servers.request_count(again.status() or {}) >= 1
        finally:
            again.stop()
    else:
        done = in_process(ws.root, "restore", ws.base, "--json")
    assert done.code == h.OK, done
    assert h.tree_state(ws.root) == ws.base_model
    assert not h.journals(ws.store)
    h.fsck_clean(ws.root)
    h.tally("server kill restore", passed=1, **({"pending": 1} if pending else {}))


# -- a stale socket, two clients, another version ---------------------------------------------

def test_a_stale_socket_is_passed_over_and_replaced(workspace: Workspace) -> None:
    ws = workspace
    srv = servers.start_server(ws.store, client_env(), cwd=ws.root)
    try:
        victim = srv.pid
        os.kill(victim, signal.SIGKILL)
        assert servers.wait_gone(victim, 10)
        assert os.path.exists(servers.socket_path(ws.store))  # left behind
        # Nobody answers there: the client runs the command itself, then (server = auto)
        # spawns a server, which takes the socket's place.
        listed = client(ws.root, "list", "--json")
        assert listed.code == h.OK, listed
        assert [r["id"] for r in listed.json()] == [ws.base]
        deadline = time.monotonic() + servers.START_TIMEOUT
        while (doc := servers.status(ws.store)) is None:
            assert time.monotonic() < deadline, "no server was spawned over the stale socket"
            time.sleep(0.05)
        assert doc["pid"] != victim
        created = client(ws.root, "create", "-m", "through the new server")
        assert created.code == h.OK, created
        after = servers.status(ws.store)
        assert after is not None and after["pid"] == doc["pid"]
        assert servers.request_count(after) >= 1
    finally:
        srv.stop()
        servers.reap_servers_under(os.path.dirname(ws.root))


def test_two_clients_at_once_both_succeed(workspace: Workspace, server: servers.Server) -> None:
    ws = workspace
    before = servers.request_count(server.status() or {})
    procs = [subprocess.Popen([*servers.CLIENT, "--root", ws.root, "--session", f"s{i}",
                               "create", "--json", "-m", f"client {i}"], cwd=ws.root,
                              env=client_env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for i in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    for proc, (_out, err) in zip(procs, results):
        assert proc.returncode == h.OK, err
    ids = {servers_json(out)["id"] for out, _ in results}
    assert len(ids) == 2
    assert servers.request_count(server.status() or {}) >= before + 2
    assert h.listed_ids(ws.root) == {ws.base, *ids}
    ledger = h.Ledger(ws.root, expected={ws.base: ws.base_model, **dict.fromkeys(ids,
                                                                             ws.base_model)})
    ledger.check("two clients at once")


def servers_json(out: bytes) -> dict[str, object]:
    import json

    value = json.loads(out)
    assert isinstance(value, dict)
    return value


def test_a_client_of_another_version_runs_in_process_and_the_old_server_goes(
        workspace: Workspace) -> None:
    ws = workspace
    # The server's test hook: a real server that says it is another ckpt version.
    old = servers.start_server(ws.store, client_env(), cwd=ws.root,
                               extra_env={"CKPT_SERVER_TEST_VERSION": "0.0.0+old"})
    try:
        doc = old.status()
        assert doc is not None and doc["version"] == "0.0.0+old"
        created = client(ws.root, "create", "--json", "-m", "new client")
        assert created.code == h.OK, created
        assert h.listed_ids(ws.root) == {ws.base, created.json()["id"]}
        old.proc.wait(timeout=servers.STOP_TIMEOUT)  # asked to quit once idle: it goes
    finally:
        old.stop()
        servers.reap_servers_under(os.path.dirname(ws.root))


def test_server_killed_after_the_command_before_its_exit_ran_it_once(
        workspace: Workspace, server: servers.Server) -> None:
    """The request ran to its end; the server dies before EXIT: the client says so (exit 6)
    and never runs it again itself, so there is exactly one new checkpoint."""
    ws = workspace
    (Path(ws.root) / "new.txt").write_text("made before the call\n")
    marker = Path(servers.server_dir(ws.store)) / "paused-exit"
    proc = subprocess.Popen([*servers.CLIENT, "--root", ws.root, "create", "-m", "once"],
                            cwd=ws.root, env=client_env(CKPT_SERVER_TEST_PAUSE="exit"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the server never paused after the command"
            time.sleep(0.01)
        victim = server.pid
        os.kill(victim, signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    h.tally("server kill before exit", injected=1)
    assert proc.returncode == SERVER_LOST, err
    assert err.decode().strip() == LOST_LINE
    assert re.fullmatch(rb"ckpt-\d{13}-[0-9a-z]{8}\n", out)  # it had printed the id
    assert servers.wait_gone(victim, 10)
    assert h.listed_ids(ws.root) == {ws.base, out.decode().strip()}
    h.fsck_clean(ws.root)
    h.tally("server kill before exit", passed=1)


# -- Ctrl-C ----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["in-process", "server"])
def test_ctrl_c_during_a_restore_exits_130_and_leaves_it_pending_as_in_process(
        workspace: Workspace, mode: str) -> None:
    ws = workspace
    changed_tree(ws, "server-ctrl-c")
    srv = servers.start_server(ws.store, client_env(), cwd=ws.root) if mode == "server" else None
    try:
        extra = {"CKPT_SERVER": "off"} if srv is None else {}
        if srv is not None:
            assert client(ws.root, "list").code == h.OK  # warm: the root open in the server
        run = PtyClient(ws.root, "restore", ws.base, **extra)
        assert run.wait_for(b"ckpt: restoring"), "the restore ended before it applied"
        run.proc.send_signal(signal.SIGINT)
        code, out, err = run.finish()
        h.tally(f"ctrl-c restore {mode}", injected=1)
        assert (code, out, err.strip()) == (INTERRUPTED, "", "ckpt: error: interrupted")
        pending = h.journals(ws.store)
        assert pending, "a Ctrl-C mid-apply leaves the restore journaled"
        if srv is not None:
            assert srv.proc.poll() is None and servers.alive(srv.pid)  # the server stays
        # The next call (through the server, if one runs) completes it.
        done = client(ws.root, "recover", **extra)
        assert done.code == h.OK, done
        assert h.tree_state(ws.root) == ws.base_model
        assert not h.journals(ws.store)
    finally:
        if srv is not None:
            srv.stop()
        servers.reap_servers_under(os.path.dirname(ws.root))
    h.fsck_clean(ws.root)
    h.tally(f"ctrl-c restore {mode}", passed=1)
