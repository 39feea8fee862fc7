"""Advisory inter-process locks on store files, with the holder named in the lock file.

Owns `RootLock` (an `fcntl.flock` lock on a lock file), `LockOwner` (who holds it) and
`read_holder`. The kernel drops a flock lock when its last open file description closes, so a
lock whose owner died is free at once: there is no stale lock to detect and nothing to unlink.
This module must never unlink a lock file: a process could open the old inode, another create a
new one, and both would "hold" the lock. It does not create directories (the caller owns the
store layout), reads no configuration and never prints.

Owner info is JSON written into the lock file by the exclusive holder, so a waiter reads it
without taking the lock. It is written in place over a blank record of `RECORD_SIZE` bytes that
the file keeps from its first use (and cleared by blanking it again), never by truncating and
appending: on a full disk, taking a lock that exists needs no free block (gc and prune must run
there), and a holder that cannot write its record all the same still holds the lock. Shared
holders write nothing: they can run side by side. They blank the owner info of a previous
exclusive holder that was killed before it could, since holding the lock shared proves nobody
holds it exclusively. A waiter that times out while the file names nobody tries a little longer
(the holder may be between its flock and its write, or releasing): it then either gets the lock
or names the holder.

Lock files live in the store, which an agent in the workspace can write: they are opened
without following a symlink anywhere below `beneath` (the store directory), so a symlink
planted in place of a lock file or of a directory on its way is refused (`UnsafeStore`), never
truncated through.

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
from ckpt.objstore.safeopen import open_beneath

# The owner record is a few hundred bytes; anything longer is not ours and is not parsed.
_MAX_OWNER_BYTES = 4096
# The size of the blank record a lock file keeps, so that owner info is written in place.
RECORD_SIZE = 512
_BLANK = b" " * RECORD_SIZE
_FULL_DISK = (errno.ENOSPC, errno.EDQUOT)
# After the timeout, while the file names no holder: more attempts before reporting busy.
_LAST_TRIES = 10


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
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a planted symlink names nobody
            return None
        raise
    try:
        data = os.read(fd, _MAX_OWNER_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > _MAX_OWNER_BYTES:
        return None
    return LockOwner.decode(data)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _blank(fd: int, size: int) -> None:
    """Blank the owner record in place (no new block once the file has one); a file with none
    yet gets its blank record now, while writing it costs nothing to wait for. A full disk
    leaves the file empty instead."""
    try:
        os.pwrite(fd, _BLANK if size <= RECORD_SIZE else b" " * size, 0)
    except OSError as exc:
        if exc.errno not in _FULL_DISK:
            raise
        os.ftruncate(fd, 0)


# `_named_holder`'s answer when it took the lock instead of finding a holder.
_ACQUIRED = LockOwner(pid=-1, host="", started_at="")


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
                 poll_interval: float = 0.05, beneath: str | None = None,
                 clock: Callable[[], datetime] = _utc_now) -> None:
        if not (math.isfinite(timeout) and timeout >= 0):
            raise ValueError(f"lock timeout must be a finite number >= 0, not {timeout!r}")
        if not (math.isfinite(poll_interval) and poll_interval > 0):
            raise ValueError(f"lock poll interval must be a finite number > 0, "
                             f"not {poll_interval!r}")
        self.path = path
        # No symlink is followed below this directory (default: the lock file's own).
        self.beneath = os.path.dirname(path) if beneath is None else beneath
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
        # O_CLOEXEC (added by open_beneath): a child we exec (a hook, a subprocess) must not
        # keep the store locked after we exit. O_NOFOLLOW: see the module doc.
        fd = open_beneath(self.beneath, os.path.relpath(self.path, self.beneath),
                          os.O_RDWR | os.O_CREAT, 0o644)
        try:
            self._wait_for(fd)
            try:
                if self.shared:
                    # Nobody holds the lock exclusively now, so any owner record is left by a
                    # killed exclusive holder; blanking it keeps StoreBusy from naming a dead
                    # pid. Concurrent shared holders may all do this: it is idempotent.
                    data = os.pread(fd, _MAX_OWNER_BYTES + 1, 0)
                    if len(data) < RECORD_SIZE or data.strip():
                        _blank(fd, len(data))
                else:
                    self._write_owner(fd)
            except OSError as exc:  # name the file: these calls take a descriptor
                raise OSError(exc.errno, exc.strerror, self.path) from exc
        except BaseException:
            os.close(fd)  # also releases the flock if we got it
            raise
        self.holder = None
        self._fd = fd

    def _write_owner(self, fd: int) -> None:
        """Record this process as the holder, in place (see the module doc)."""
        # Same shape as the records' created_at: "2026-11-29T16:17:02.123Z".
        started = self._clock().astimezone(UTC).isoformat(timespec="milliseconds")
        owner = LockOwner(pid=os.getpid(), host=os.uname().nodename,
                          started_at=started.replace("+00:00", "Z"), purpose=self.purpose)
        record = owner.encode().ljust(RECORD_SIZE, b" ")
        try:
            # One positional write over the blank: a reader sees the blank or the record.
            os.pwrite(fd, record, 0)
            if os.fstat(fd).st_size > len(record):  # a longer record left by an older ckpt
                os.ftruncate(fd, len(record))
        except OSError as exc:
            if exc.errno not in _FULL_DISK:
                raise
            # A full disk (a file with no blank record yet): the lock is held all the same;
            # an empty file names nobody rather than a previous holder.
            os.ftruncate(fd, 0)

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
                self.holder = self._named_holder(fd, operation)
                if self.holder is _ACQUIRED:
                    self.holder = None
                    return
                raise StoreBusy(self.path, self.holder)
            time.sleep(min(self.poll_interval, remaining))

    def _named_holder(self, fd: int, operation: int) -> LockOwner | None:
        """The holder the file names once the wait is over. A file that names nobody may be
        caught between a holder's flock and its write, or in a release: a few more attempts
        (each a read, then a flock) either find the name or take the lock (`_ACQUIRED`)."""
        for attempt in range(_LAST_TRIES + 1):
            holder = read_holder(self.path)
            if holder is not None or attempt == _LAST_TRIES:
                return holder
            time.sleep(min(self.poll_interval, 0.05))
            try:
                fcntl.flock(fd, operation)
                return _ACQUIRED
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise
        return None

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
                    _blank(fd, os.fstat(fd).st_size)
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
