"""RootLock against real processes: exclusion, waiting, dead holders, shared mode, the file."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from ckpt import checkpoints
from ckpt.checkpoints.errors import CheckpointError, StoreBusy
from ckpt.checkpoints.lock import LockOwner, RootLock, read_holder

REPO = str(Path(checkpoints.__file__).resolve().parent.parent)

# Takes the lock, says so, holds it until stdin closes. argv: repo, path, mode, purpose.
HOLDER = """
import sys
sys.path.insert(0, sys.argv[1])
from ckpt.checkpoints.lock import RootLock
lock = RootLock(sys.argv[2], timeout=5, shared=sys.argv[3] == "shared", purpose=sys.argv[4])
lock.acquire()
print("locked", flush=True)
sys.stdin.read()
lock.release()
"""

# Takes the lock, forks, and exits: the recorded owner is dead, the forked child (which shares
# the open file description) still holds the lock until its stdin closes.
FORKER = """
import os, sys
sys.path.insert(0, sys.argv[1])
from ckpt.checkpoints.lock import RootLock
RootLock(sys.argv[2], timeout=5, purpose="create").acquire()
if os.fork() == 0:
    print(os.getpid(), flush=True)
    sys.stdin.read()
os._exit(0)
"""

Spawn = Callable[..., "subprocess.Popen[str]"]
Hold = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def lock_path(tmp_path: Path) -> str:
    return str(tmp_path / "lock")


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    procs: list[subprocess.Popen[str]] = []

    def start(script: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", script, REPO, *args], text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


@pytest.fixture
def hold(spawn: Spawn) -> Hold:
    def start(path: str, *, shared: bool = False, purpose: str = "create"
              ) -> subprocess.Popen[str]:
        proc = spawn(HOLDER, path, "shared" if shared else "exclusive", purpose)
        assert proc.stdout is not None
        assert proc.stdout.readline() == "locked\n"
        return proc
    return start


def release_holder(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=5) == 0


def test_lock_in_another_process_excludes_and_names_its_pid(lock_path: str, hold: Hold) -> None:
    proc = hold(lock_path, purpose="restore")
    lock = RootLock(lock_path, timeout=0.3)
    start = time.monotonic()
    with pytest.raises(StoreBusy) as caught:
        lock.acquire()
    waited = time.monotonic() - start
    assert 0.3 <= waited < 3
    holder = caught.value.holder
    assert isinstance(holder, LockOwner)
    assert (holder.pid, holder.host, holder.purpose) == (proc.pid, socket.gethostname(), "restore")
    assert datetime.fromisoformat(holder.started_at).utcoffset() == timedelta(0)
    assert caught.value.path == lock_path
    assert lock.holder == holder and not lock.is_held
    assert f"pid {proc.pid}" in str(caught.value)
    assert isinstance(caught.value, CheckpointError)


def test_waiter_gets_the_lock_when_the_other_process_releases_it(
    lock_path: str, hold: Hold,
) -> None:
    proc = hold(lock_path)
    releaser = threading.Timer(0.2, release_holder, (proc,))
    releaser.start()
    with RootLock(lock_path, timeout=5) as lock:
        assert lock.is_held
        owner = read_holder(lock_path)
        assert owner is not None and owner.pid == os.getpid()
    releaser.join()
    assert proc.returncode == 0


def test_sigkilled_holder_leaves_no_stale_lock(lock_path: str, hold: Hold) -> None:
    proc = hold(lock_path)
    inode = os.stat(lock_path).st_ino
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=5)
    holder = read_holder(lock_path)
    assert holder is not None and holder.pid == proc.pid  # its record survives it...
    with RootLock(lock_path, timeout=0, purpose="gc"):  # ...but the kernel freed the lock
        owner = read_holder(lock_path)
        assert owner is not None and (owner.pid, owner.purpose) == (os.getpid(), "gc")
    assert os.stat(lock_path).st_ino == inode


def test_dead_recorded_owner_with_live_inheritor_is_reported_as_recorded(
    lock_path: str, spawn: Spawn,
) -> None:
    proc = spawn(FORKER, lock_path)
    assert proc.stdout is not None and proc.stdin is not None
    child = int(proc.stdout.readline())
    try:
        assert proc.wait(timeout=5) == 0
        with pytest.raises(StoreBusy) as caught:
            RootLock(lock_path, timeout=0).acquire()
        assert caught.value.holder is not None and caught.value.holder.pid == proc.pid
        proc.stdin.close()  # the forked child sees EOF and exits, closing the last descriptor
        with RootLock(lock_path, timeout=5):
            pass
    finally:
        try:
            os.kill(child, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_shared_locks_coexist_and_block_an_exclusive_one(lock_path: str, hold: Hold) -> None:
    other = hold(lock_path, shared=True)
    with RootLock(lock_path, timeout=0, shared=True), RootLock(lock_path, timeout=0, shared=True):
        with pytest.raises(StoreBusy) as caught:
            RootLock(lock_path, timeout=0.1).acquire()
        assert caught.value.holder is None  # shared holders are not named
    with pytest.raises(StoreBusy):
        RootLock(lock_path, timeout=0).acquire()  # the other process still holds it shared
    release_holder(other)
    with RootLock(lock_path, timeout=0):
        pass


def test_exclusive_lock_blocks_a_shared_one(lock_path: str, hold: Hold) -> None:
    proc = hold(lock_path, purpose="gc")
    with pytest.raises(StoreBusy) as caught:
        RootLock(lock_path, timeout=0, shared=True).acquire()
    assert caught.value.holder is not None and caught.value.holder.pid == proc.pid


def test_shared_lock_clears_the_record_of_a_killed_exclusive_holder(
    lock_path: str, hold: Hold,
) -> None:
    proc = hold(lock_path)
    proc.kill()
    proc.wait(timeout=5)
    with RootLock(lock_path, timeout=0, shared=True):
        assert read_holder(lock_path) is None


def test_timeout_zero_makes_one_attempt(lock_path: str) -> None:
    with RootLock(lock_path, timeout=10):
        start = time.monotonic()
        with pytest.raises(StoreBusy):
            RootLock(lock_path, timeout=0, poll_interval=30).acquire()
        assert time.monotonic() - start < 1


def test_two_lock_objects_in_one_process_exclude_each_other(lock_path: str) -> None:
    first, second = RootLock(lock_path, timeout=0), RootLock(lock_path, timeout=0)
    first.acquire()
    with pytest.raises(StoreBusy) as caught:
        second.acquire()
    assert caught.value.holder is not None and caught.value.holder.pid == os.getpid()
    first.release()
    second.acquire()
    second.release()


def test_thread_waits_for_a_lock_released_by_another_thread(lock_path: str) -> None:
    first = RootLock(lock_path, timeout=0)
    first.acquire()
    threading.Timer(0.2, first.release).start()
    start = time.monotonic()
    with RootLock(lock_path, timeout=5, poll_interval=0.01):
        assert time.monotonic() - start >= 0.15


def test_lock_file_is_created_and_never_removed(lock_path: str) -> None:
    with RootLock(lock_path, timeout=0):
        inode = os.stat(lock_path).st_ino
        with pytest.raises(StoreBusy):
            RootLock(lock_path, timeout=0).acquire()
    assert os.stat(lock_path).st_ino == inode
    assert read_holder(lock_path) is None  # the record is cleared on release, not the file


def test_acquiring_twice_is_an_error_and_keeps_the_lock(lock_path: str) -> None:
    lock = RootLock(lock_path, timeout=0)
    with lock:
        with pytest.raises(RuntimeError, match="not reentrant"):
            lock.acquire()
        with pytest.raises(StoreBusy):
            RootLock(lock_path, timeout=0).acquire()
    with pytest.raises(RuntimeError, match="not held"):
        lock.release()
    with lock:  # usable again after release
        assert lock.is_held


def test_context_manager_releases_on_error(lock_path: str) -> None:
    with pytest.raises(KeyError), RootLock(lock_path, timeout=0):
        raise KeyError("boom")
    with RootLock(lock_path, timeout=0):
        pass


def test_child_processes_do_not_inherit_the_lock(lock_path: str) -> None:
    with RootLock(lock_path, timeout=0):
        child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                                 stdin=subprocess.PIPE, close_fds=False)
    try:
        # Not timeout=0: the exec'd child drops its copy of the descriptor a moment after
        # Popen returns (close-on-exec runs late in exec). It must not keep it while it runs.
        with RootLock(lock_path, timeout=2):
            assert child.poll() is None
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(timeout=5)


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_failed_acquire_leaks_no_descriptor(lock_path: str) -> None:
    with RootLock(lock_path, timeout=0):
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(5):
            with pytest.raises(StoreBusy):
                RootLock(lock_path, timeout=0).acquire()
        assert len(os.listdir("/proc/self/fd")) == before


def test_started_at_comes_from_the_clock_in_utc(lock_path: str) -> None:
    local = datetime(2024, 5, 1, 14, 0, 0, tzinfo=timezone(timedelta(hours=2)))
    with RootLock(lock_path, timeout=0, clock=lambda: local):
        holder = read_holder(lock_path)
    assert holder is not None and holder.started_at == "2024-05-01T12:00:00.000Z"
    assert datetime.fromisoformat(holder.started_at) == local.astimezone(UTC)


TOO_LONG = b'{"pid": 1, "host": "h", "started_at": "t"' + b" " * 5000 + b"}"


@pytest.mark.parametrize("content", [b"", b"garbage", b"[1, 2]", b'{"pid": "1"}', b"\xff\xfe",
                                     TOO_LONG])
def test_read_holder_returns_none_for_anything_but_an_owner_record(
    tmp_path: Path, content: bytes,
) -> None:
    path = tmp_path / "lock"
    path.write_bytes(content)
    assert read_holder(str(path)) is None


def test_read_holder_of_a_missing_file_is_none(tmp_path: Path) -> None:
    assert read_holder(str(tmp_path / "absent")) is None


def test_owner_record_round_trips() -> None:
    owner = LockOwner(pid=42, host="höst\n\"x\"", started_at="2024-01-01T00:00:00+00:00",
                      purpose="restore")
    assert LockOwner.decode(owner.encode()) == owner


def test_missing_directory_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        RootLock(str(tmp_path / "no" / "lock"), timeout=0).acquire()
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("kwargs", [{"timeout": -1}, {"timeout": float("nan")},
                                    {"timeout": 1, "poll_interval": 0}])
def test_bad_timeouts_are_rejected(lock_path: str, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        RootLock(lock_path, **kwargs)
