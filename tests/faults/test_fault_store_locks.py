"""The busy error names the holder (issue 28, item 17, the lock's side): a waiter that times
out while the lock file names nobody (its holder is between its flock and its write, or
releasing) does not report "another process" at once; it tries a little longer and then
either names the holder or takes the lock.

The holder is a real process; the moment the waiter first reads the file is pinned by wrapping
`read_holder`, so each case is exact, not a matter of luck.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import fault_helpers as h
import pytest

from ckpt.checkpoints import lock
from ckpt.checkpoints.errors import StoreBusy
from ckpt.checkpoints.lock import LockOwner, RootLock

# Takes the flock with no owner record, says so, then on "write" writes its record, on
# "exit" exits (releasing the lock); it answers each command with "ok".
_HOLDER = """
import fcntl, os, sys
from ckpt.checkpoints.lock import LockOwner
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
for line in sys.stdin:
    if line.strip() == "write":
        owner = LockOwner(pid=os.getpid(), host="box", started_at="2026-12-03T11:00:00.000Z",
                          purpose="restore")
        os.pwrite(fd, owner.encode(), 0)
        print("ok", flush=True)
    else:
        print("ok", flush=True)
        break
"""


@contextmanager
def holder(path: str) -> Iterator[subprocess.Popen[str]]:
    child = subprocess.Popen([sys.executable, "-c", _HOLDER, path], env=h.env(), text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdout is not None and child.stdout.readline().strip() == "locked"
    try:
        yield child
    finally:
        child.kill()
        child.communicate(timeout=30)


def tell(child: subprocess.Popen[str], command: str) -> None:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write(command + "\n")
    child.stdin.flush()
    assert child.stdout.readline().strip() == "ok"


def on_first_read(monkeypatch: pytest.MonkeyPatch, action: object) -> None:
    """Run `action()` right after the waiter's first read of the lock file."""
    real = lock.read_holder
    done: list[bool] = []

    def wrapped(path: str) -> LockOwner | None:
        found = real(path)
        if not done:
            done.append(True)
            action()  # type: ignore[operator]
        return found

    monkeypatch.setattr(lock, "read_holder", wrapped)


def test_busy_names_a_holder_caught_between_its_flock_and_its_record(
        base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.path.join(base, "lock")
    with holder(path) as child:
        on_first_read(monkeypatch, lambda: tell(child, "write"))
        with pytest.raises(StoreBusy) as busy:
            RootLock(path, timeout=0).acquire()
        assert busy.value.holder is not None and busy.value.holder.pid == child.pid
        assert f"pid {child.pid}" in str(busy.value)
    h.tally("store lock: busy names the holder", injected=1, passed=1)


def test_a_waiter_whose_holder_releases_as_it_times_out_takes_the_lock(
        base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.path.join(base, "lock")
    with holder(path) as child:
        def release() -> None:
            tell(child, "exit")
            child.wait(timeout=30)

        on_first_read(monkeypatch, release)
        waiter = RootLock(path, timeout=0, purpose="create")
        waiter.acquire()
        assert waiter.is_held and lock.read_holder(path).pid == os.getpid()  # type: ignore[union-attr]
        waiter.release()
    h.tally("store lock: busy names the holder", injected=1, passed=1)


def test_a_holder_that_never_writes_its_record_is_reported_as_another_process(
        base: str) -> None:
    path = os.path.join(base, "lock")
    with holder(path):
        with pytest.raises(StoreBusy) as busy:
            RootLock(path, timeout=0, poll_interval=0.01).acquire()
        assert busy.value.holder is None
