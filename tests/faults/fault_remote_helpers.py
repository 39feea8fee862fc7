"""Shared machinery of the remote fault tests (tests/faults/test_fault_remote*.py): machines
(a root and a store with the test's bucket as remote `bench`), pushes watched key by key on the
real SeaweedFS, and the checks every scenario ends with.

Not a test module (the name is unique on pytest's `pythonpath`). Commands run as real `ckpt`
processes (`fault_helpers.ckpt`); every wait on one is bounded by HANG_GUARD, which only
guards against a hang and is never a timing assertion.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import fault_helpers as h
import servers
from seaweed import Bucket, SeaweedServer

REMOTE = "bench"
#: The longest any ckpt process of these tests may take before it counts as hung.
HANG_GUARD = 240.0
#: How often a watcher lists the bucket while a push runs.
POLL_SECONDS = 0.01


@dataclass
class Machine:
    """One machine of a test: its workspace root and store, the bucket as remote `bench`, and
    the trees of the checkpoints it created (id -> exact model)."""

    root: str
    store: str
    session: str | None = None
    models: dict[str, h.Model] = field(default_factory=dict)
    #: Commands go through the thin client (a running server is used) instead of in-process.
    served: bool = False

    def _env(self, extra_env: dict[str, str] | None = None) -> dict[str, str]:
        env = dict(extra_env or {})
        if self.session is not None:
            env.setdefault("CKPT_SESSION", self.session)
        if self.served:
            env.setdefault("CKPT_SERVER", "auto")
        return env

    def _argv(self, *args: str) -> list[str]:
        if self.served:  # the console script's way in: the thin client first
            return [*servers.CLIENT, "--root", self.root, "--store", self.store, *args]
        return h.argv(self.root, *args, store=self.store)

    def run(self, *args: str, extra_env: dict[str, str] | None = None) -> h.Run:
        if not self.served:
            return h.ckpt(self.root, *args, store=self.store, timeout=HANG_GUARD,
                          extra_env=self._env(extra_env))
        return finish(subprocess.Popen(self._argv(*args), env=h.env(self._env(extra_env)),
                                       cwd=self.root, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE))

    def ok(self, *args: str) -> h.Run:
        run = self.run(*args)
        assert run.code == h.OK, f"ckpt {' '.join(args)}: {run}"
        return run

    def create(self, label: str) -> str:
        run = self.ok("create", "-m", label, "--json")
        checkpoint_id = str(run.json()["id"])
        self.models[checkpoint_id] = h.tree_state(self.root)
        return checkpoint_id

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        env = h.env(self._env())
        return subprocess.Popen(self._argv(*args), env=env,
                                cwd=self.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def machine(base: str, name: str, bucket: Bucket, *, session: str | None = None,
            endpoint: str | None = None) -> Machine:
    """A new machine under `base/name` (an empty root and store), `init`ed, with the bucket as
    remote `bench` (at `endpoint`, default the bucket's server)."""
    root, store = os.path.join(base, name, "root"), os.path.join(base, name, "store")
    os.makedirs(root)
    m = Machine(root, store, session)
    m.ok("init")
    m.ok("remote", "add", REMOTE, bucket.url, "--endpoint", endpoint or bucket.endpoint)
    return m


def finish(child: subprocess.Popen[bytes]) -> h.Run:
    out, err = child.communicate(timeout=HANG_GUARD)
    return h.Run(child.returncode, out.decode("utf-8", "surrogateescape"),
                 err.decode("utf-8", "surrogateescape"),
                 killed=child.returncode == -signal.SIGKILL)


def push_until(m: Machine, bucket: Bucket, prefix: str,
               act: Callable[[subprocess.Popen[bytes]], None]) -> tuple[h.Run, bool]:
    """Run `ckpt push bench` and call `act(child)` as soon as a key under `prefix` appears in the
    bucket while the push still runs. Returns the push's result and whether `act` ran."""
    before = set(bucket.keys(prefix))
    child = m.popen("push", REMOTE)
    acted = False
    try:
        while child.poll() is None:
            try:
                keys = set(bucket.keys(prefix))
            except (OSError, AssertionError):
                keys = before  # the server is busy or restarting: look again
            if keys - before and child.poll() is None:
                act(child)
                acted = True
                break
            time.sleep(POLL_SECONDS)
        return finish(child), acted
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def remote_record_ids(bucket: Bucket) -> list[str]:
    """The checkpoint ids under `records/`, one per key (a list: duplicates would show)."""
    return [k.split("/", 1)[1] for k in bucket.keys("records/")]


def listed_remote(m: Machine, *extra: str) -> list[dict[str, Any]]:
    run = m.ok("list", "--remote", REMOTE, "--all-sessions", "--json", *extra)
    rows = run.json()
    assert isinstance(rows, list), run
    return rows


def check_remote(pushed: dict[str, h.Model], m: Machine, bucket: Bucket, base: str,
                 name: str) -> None:
    """What every scenario ends with: `fsck --remote --full` clean; each pushed checkpoint is
    under `records/` exactly once and listed once; and a fresh machine (an empty store with
    only the remote) restores each into an empty directory exactly."""
    fsck = m.run("fsck", "--remote", REMOTE, "--full")
    assert fsck.code == h.OK, f"fsck --remote --full is not clean:\n{fsck}"
    records = remote_record_ids(bucket)
    assert sorted(records) == sorted(set(records)), f"duplicate records: {records}"
    assert set(pushed) <= set(records), f"not on the remote: {set(pushed) - set(records)}"
    listed = [r["id"] for r in listed_remote(m)]
    assert len(listed) == len(set(listed)), f"listed twice: {listed}"
    assert set(pushed) <= set(listed)
    fresh = machine(base, name, bucket)
    for checkpoint_id, model in pushed.items():
        target = os.path.join(base, name, f"out-{checkpoint_id}")
        fresh.ok("restore", checkpoint_id, "--target", target)
        actual = h.tree_state(target)
        assert actual == model, f"{checkpoint_id}: {h.diff_models(model, actual)}"


def grow(m: Machine, rng: random.Random, changes: int) -> None:
    """Seeded edits to the machine's workspace (incompressible content: real bytes to upload)."""
    h.mutate(m.root, rng, changes=changes, max_size=60_000)


#: Where a push is killed: as soon as a new key shows under one of these prefixes.
STAGES = ("packs/", "index/", "records/")


def kill_stages(m: Machine, rng: random.Random, attempts: int) -> Iterator[str]:
    """Up to `attempts` times: a seeded turn on `m`, checkpointed, then the stage to kill the
    next push at (seeded, every stage in turn); the caller stops once enough kills landed."""
    for attempt in range(attempts):
        grow(m, rng, changes=120)
        m.create(f"turn {attempt}")
        yield STAGES[(attempt + rng.randrange(len(STAGES))) % len(STAGES)]


def restart(server: SeaweedServer) -> None:
    """Start a killed server again (same directory, same ports)."""
    server.kill()
    server.start()
