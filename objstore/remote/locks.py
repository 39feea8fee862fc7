"""Remote locks, restic's rules: a lock is a file `locks/<random>` holding msgpack
{"kind": "shared"|"exclusive", "host", "pid", "time"}.

- shared (push, pull): refused while another non-stale exclusive lock exists.
- exclusive (gc, prune): refused while any other non-stale lock exists.
- stale: a lock whose time is older than STALE_SECONDS. The holder rewrites its lock every
  REFRESH_SECONDS while it runs, so only a lock whose process died goes stale.
- taking one: check the others, write ours, check again (two that raced both see each other;
  each that now conflicts removes its own and refuses), then hold it until release.
"""

from __future__ import annotations

import os
import secrets
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

    def describe(self, now: float) -> str:
        return (f"an {self.kind} lock of pid {self.pid} on {self.host}, "
                f"{max(0.0, now - self.time):.0f} s old")


def encode_lock(kind: LockKind, host: str, pid: int, time: float) -> bytes:
    return codec.pack_data({"kind": kind, "host": host, "pid": pid, "time": time})


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
    return LockInfo(key, kind, host, pid, float(time))


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


def conflicting(kind: LockKind, locks: list[LockInfo], own: str | None, now: float
                ) -> LockInfo | None:
    for lock in locks:
        if lock.key == own or now - lock.time > STALE_SECONDS:
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
        self.key = f"{layout.LOCKS}{secrets.token_hex(16)}"
        self.host = socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _write(self) -> None:
        self.transport.put(self.key, encode_lock(self.kind, self.host, os.getpid(),
                                                 self.clock()))

    def acquire(self) -> None:
        url = self.transport.url
        found = conflicting(self.kind, read_locks(self.transport), None, self.clock())
        if found is not None:
            raise RemoteLocked(url, found.describe(self.clock()))
        self._write()
        found = conflicting(self.kind, read_locks(self.transport), self.key, self.clock())
        if found is not None:
            self.transport.delete(self.key)
            raise RemoteLocked(url, found.describe(self.clock()))
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
        self.transport.delete(self.key)
