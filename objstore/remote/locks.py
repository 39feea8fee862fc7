"""Remote locks, restic's rules: a lock is a file `locks/<random>` holding msgpack
{"kind": "shared"|"exclusive", "host", "pid", "time"} and, where the system tells it, "start"
(the holder's process start time, in the clock ticks of /proc/PID/stat).

- shared (push, pull): refused while another non-stale exclusive lock exists.
- exclusive (gc, prune): refused while any other non-stale lock exists.
- stale: a lock whose time is older than STALE_SECONDS. The holder rewrites its lock every
  REFRESH_SECONDS while it runs, so only a lock whose process died goes stale. A lock of this
  host whose pid is not running (or a zombie, or running with another start time than the
  lock records: the pid was reused) is stale at once, as restic does: its holder died
  without releasing it (kill -9, power loss of a laptop that rebooted).
- taking one: check the others, write ours, check again (two that raced both see each other;
  each that now conflicts removes its own and refuses), then hold it until release.
- a release whose delete fails (the remote unreachable at that moment) leaves a lock that
  goes stale only after STALE_SECONDS while this process lives (a resident server): the
  key is kept, and this process's next lock of that remote deletes it first.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ckpt.objstore import codec
from ckpt.objstore.remote import layout
from ckpt.objstore.remote.errors import RemoteError, RemoteLocked, RemoteNotFound
from ckpt.objstore.remote.transport import S3Transport

LockKind = Literal["shared", "exclusive"]
STALE_SECONDS = 30 * 60.0
REFRESH_SECONDS = 5 * 60.0


@dataclass(frozen=True, slots=True)
class LockInfo:
    key: str
    kind: str
    host: str
    pid: int
    time: float
    start: int | None = None  # the holder's process start time, where known

    def describe(self, now: float) -> str:
        article = "an" if self.kind == "exclusive" else "a"
        return (f"{article} {self.kind} lock of pid {self.pid} on {self.host}, "
                f"{max(0.0, now - self.time):.0f} s old")

    def stale(self, now: float, host: str) -> bool:
        """Whether the lock no longer holds: too old, or its holder on this host is gone."""
        if now - self.time > STALE_SECONDS:
            return True
        if self.host != host:
            return False
        running = process_start(self.pid)
        if running is None:
            return True
        return self.start is not None and running >= 0 and running != self.start


def process_start(pid: int) -> int | None:
    """None if process `pid` is not running (or is a zombie); else its start time in clock
    ticks since boot, or -1 where the system does not tell it (no /proc)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # running, as another user
    except (OverflowError, OSError):
        return None  # no such pid can exist
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
    except FileNotFoundError:
        return None if os.path.isdir("/proc/self") else -1
    except OSError:
        return -1
    try:
        # After the name: state is field 3, starttime field 22 of proc(5).
        return None if fields[0] == b"Z" else int(fields[19])
    except (IndexError, ValueError):
        return -1


def encode_lock(kind: LockKind, host: str, pid: int, time: float, start: int | None = None
                ) -> bytes:
    value: dict[str, object] = {"kind": kind, "host": host, "pid": pid, "time": time}
    if start is not None and start >= 0:
        value["start"] = start
    return codec.pack_data(value)


def decode_lock(key: str, data: bytes) -> LockInfo | None:
    try:
        value = codec.unpack_data(data, what=key)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    kind, host, pid, time = (value.get(k) for k in ("kind", "host", "pid", "time"))
    if (kind not in ("shared", "exclusive") or not isinstance(host, str)
            or not isinstance(pid, int) or not isinstance(time, int | float)):
        return None
    start = value.get("start")
    return LockInfo(key, kind, host, pid, float(time),
                    start if isinstance(start, int) and start >= 0 else None)


def read_locks(transport: S3Transport) -> list[LockInfo]:
    """Every readable lock (one removed while listed, or not ours to read, is skipped)."""
    found: list[LockInfo] = []
    for info in transport.list(layout.LOCKS):
        try:
            data, _ = transport.get(info.key)
        except RemoteNotFound:
            continue
        lock = decode_lock(info.key, data)
        if lock is not None:
            found.append(lock)
    return found


def conflicting(kind: LockKind, locks: list[LockInfo], own: str | None, now: float,
                host: str) -> LockInfo | None:
    """The first lock of `locks` (not `own`, not stale as seen from `host`) that forbids
    taking one of `kind`."""
    for lock in locks:
        if lock.key == own or lock.stale(now, host):
            continue
        if kind == "exclusive" or lock.kind == "exclusive":
            return lock
    return None


class HeldLock:
    """A lock this process wrote; a thread rewrites it every REFRESH_SECONDS until release."""

    def __init__(self, transport: S3Transport, kind: LockKind, clock: Callable[[], float]
                 ) -> None:
        self.transport = transport
        self.kind = kind
        self.clock = clock
        self.key = f"{layout.LOCKS}{os.urandom(16).hex()}"
        self.host = socket.gethostname()
        self.start = process_start(os.getpid())
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self) -> None:
        self.transport.put(self.key, encode_lock(self.kind, self.host, os.getpid(),
                                                 self.clock(), self.start))

    def acquire(self) -> None:
        url = self.transport.url
        _delete_left_behind(self.transport)
        found = conflicting(self.kind, read_locks(self.transport), None, self.clock(),
                            self.host)
        if found is not None:
            raise RemoteLocked(url, found.describe(self.clock()))
        try:
            self._write()
            found = conflicting(self.kind, read_locks(self.transport), self.key, self.clock(),
                                self.host)
            if found is not None:
                raise RemoteLocked(url, found.describe(self.clock()))
        except BaseException:  # refused, or a Ctrl-C: ours must not stay behind
            try:
                self.transport.delete(self.key)
            except RemoteError:
                _LEFT_BEHIND.setdefault(url, set()).add(self.key)
            raise
        self._thread = threading.Thread(target=self._refresh, name="ckpt-remote-lock",
                                        daemon=True)
        self._thread.start()

    def _refresh(self) -> None:
        while not self._stop.wait(REFRESH_SECONDS):
            try:
                self._write()
            except RemoteError:
                pass  # the next refresh tries again; a lock older than STALE is ignored

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        try:
            self.transport.delete(self.key)
        except RemoteError:
            _LEFT_BEHIND.setdefault(self.transport.url, set()).add(self.key)
            raise


# Keys of this process's locks whose delete failed, by remote URL (see the module docstring).
_LEFT_BEHIND: dict[str, set[str]] = {}


def _delete_left_behind(transport: S3Transport) -> None:
    keys = _LEFT_BEHIND.get(transport.url)
    if not keys:
        return
    for key in sorted(keys):
        try:
            transport.delete(key)
        except RemoteError:
            return  # unreachable still: the next lock tries again
        keys.discard(key)
