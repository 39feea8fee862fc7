"""Advisory inter-process locks on store files, with the holder named in the lock file.

Owns `RootLock` (an `fcntl.flock` lock on a lock file), `LockOwner` (who holds it) and
`read_holder`. The kernel drops a flock lock when its last open file description closes, so a
lock whose owner died is free at once: there is no stale lock to detect and nothing to unlink.
This module must never unlink a lock file: a process could open the old inode, another create a
new one, and both would "hold" the lock. It does not create directories (the caller owns the
store layout), reads no configuration and never prints.

Owner info is JSON written into the lock file by the exclusive holder (truncate + write on the
locked descriptor), so a waiter reads it without taking the lock. Shared holders write nothing:
they can run side by side. They clear the owner info of a previous exclusive holder that was
killed before it could, since holding the lock shared proves nobody holds it exclusively.

A `RootLock` is not reentrant and not thread-safe: acquiring an object twice is a programming
error (`RuntimeError`). Two `RootLock` objects on one path exclude each other even in one
process, because flock locks belong to the open file description, not to the process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Self

from ckpt.checkpoints.errors import StoreBusy

# The owner record is a few hundred bytes; anything longer is not ours and is not parsed.
_MAX_OWNER_BYTES = 4096


@dataclass(frozen=True, slots=True)
class LockOwner:
    """Who holds a lock, as its lock file says. May name a dead pid (see `read_holder`)."""

    pid: int
    host: str
    started_at: str  # ISO 8601 UTC, e.g. "2026-11-29T16:17:02.123Z"
    purpose: str = ""  # "create", "restore", "gc", ... free text for messages

    def encode(self) -> bytes:
        record = {"pid": self.pid, "host": self.host, "started_at": self.started_at,
                  "purpose": self.purpose}
        return json.dumps(record, ensure_ascii=True).encode("ascii") + b"\n"

    @classmethod
    def decode(cls, data: bytes) -> LockOwner | None:
        """Parse an owner record; None for anything else (empty, torn, foreign)."""
        try:
            record = json.loads(data)
        except ValueError:  # includes UnicodeDecodeError and JSONDecodeError
            return None
        if not isinstance(record, dict):
            return None
        pid, host = record.get("pid"), record.get("host")
        started_at, purpose = record.get("started_at"), record.get("purpose", "")
        if (not isinstance(pid, int) or isinstance(pid, bool) or not isinstance(host, str)
                or not isinstance(started_at, str) or not isinstance(purpose, str)):
            return None
        return cls(pid=pid, host=host, started_at=started_at, purpose=purpose)


def read_holder(path: str) -> LockOwner | None:
    """Return the owner recorded in the lock file at `path`, or None if none is recorded.

    Needs no lock. The answer is what the file says, which can be out of date: the named
    process may have died while a child that inherited its descriptor (fork without exec)
    still holds the lock, and shared holders are never named. A torn read (racing a writer)
    yields None rather than a wrong owner.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        data = os.read(fd, _MAX_OWNER_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_OWNER_BYTES:
        return None
    return LockOwner.decode(data)


def _utc_now() -> datetime:
    return datetime.now(UTC)


class RootLock:
    """An exclusive (default) or shared flock lock on the file at `path`.

    `with RootLock(path, timeout=10.0, purpose="create"):` ... The file is created if missing
    (its directory must exist) and is never removed. Acquiring makes non-blocking attempts
    every `poll_interval` seconds until `timeout` seconds have passed (0 = one attempt), then
    raises `StoreBusy` naming the holder recorded in the file, also kept in `self.holder`.
    Polling instead of a blocking flock keeps the wait bounded and interruptible by signals.
    `clock` supplies the start time written into the file (tests inject it).
    """

    def __init__(self, path: str, *, timeout: float, shared: bool = False, purpose: str = "",
                 poll_interval: float = 0.05,
                 clock: Callable[[], datetime] = _utc_now) -> None:
        if not (math.isfinite(timeout) and timeout >= 0):
            raise ValueError(f"lock timeout must be a finite number >= 0, not {timeout!r}")
        if not (math.isfinite(poll_interval) and poll_interval > 0):
            raise ValueError(f"lock poll interval must be a finite number > 0, "
                             f"not {poll_interval!r}")
        self.path = path
        self.timeout = timeout
        self.shared = shared
        self.purpose = purpose
        self.poll_interval = poll_interval
        self.holder: LockOwner | None = None
        self._clock = clock
        self._fd: int | None = None

    @property
    def is_held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock or raise `StoreBusy` after `timeout` seconds."""
        if self._fd is not None:
            raise RuntimeError(f"lock {self.path} is already held by this RootLock "
                               "(RootLock is not reentrant)")
        # O_CLOEXEC: a child we exec (a hook, a subprocess) must not keep the store locked
        # after we exit. Python sets it by default (PEP 446); spelled out because it matters.
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            self._wait_for(fd)
            if self.shared:
                # Nobody holds the lock exclusively now, so any owner record is left by a
                # killed exclusive holder; clearing it keeps StoreBusy from naming a dead pid.
                # Concurrent shared holders may all do this: truncating to 0 is idempotent.
                if os.fstat(fd).st_size:
                    os.ftruncate(fd, 0)
            else:
                # Same shape as the records' created_at: "2026-11-29T16:17:02.123Z".
                started = self._clock().astimezone(UTC).isoformat(timespec="milliseconds")
                owner = LockOwner(pid=os.getpid(), host=os.uname().nodename,
                                  started_at=started.replace("+00:00", "Z"), purpose=self.purpose)
                # Truncate, then one positional write: a reader sees empty, or the record.
                try:
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, owner.encode(), 0)
                except OSError as exc:  # name the file: these calls take a descriptor
                    raise OSError(exc.errno, exc.strerror, self.path) from exc
        except BaseException:
            os.close(fd)  # also releases the flock if we got it
            raise
        self.holder = None
        self._fd = fd

    def _wait_for(self, fd: int) -> None:
        operation = (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(fd, operation)
                return
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.holder = read_holder(self.path)
                raise StoreBusy(self.path, self.holder)
            time.sleep(min(self.poll_interval, remaining))

    def release(self) -> None:
        """Give the lock up. Releasing a lock this object does not hold is a RuntimeError."""
        fd = self._fd
        if fd is None:
            raise RuntimeError(f"lock {self.path} is not held by this RootLock")
        self._fd = None
        try:
            if not self.shared:
                # Clear our record before unlocking so nobody is named after we are gone.
                # Best effort: on a disk gone read-only or failing, raising here would replace
                # the error that is unwinding through `with`; a stale record is harmless (the
                # next holder rewrites it, a shared one clears it).
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, 0)
        finally:
            os.close(fd)  # closing the only descriptor of this open file releases the flock

    def __enter__(self) -> Self:
        self.acquire()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.release()

    def __repr__(self) -> str:
        mode = "shared" if self.shared else "exclusive"
        state = "held" if self._fd is not None else "free"
        return f"RootLock({self.path!r}, {mode}, {state})"
