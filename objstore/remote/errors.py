"""Exceptions of the remote layer: all subclass objstore's `ObjstoreError` through `RemoteError`,
which names the remote (`.remote`, its URL). Messages are one line.

Damaged remote data is objstore's `CorruptObject` (`.oid`) for an object, or `RemoteCorrupt`
(`.key`, `.reason`) for a pack, index or other remote file. Nothing here maps errors to exit
codes (the CLI does).
"""

from __future__ import annotations

from ckpt.objstore.errors import ObjstoreError
from ckpt.objstore.ids import ObjectId


class RemoteError(ObjstoreError):
    """Root of the remote layer's errors; `.remote` is the remote's URL."""

    def __init__(self, remote: str, message: str) -> None:
        super().__init__(remote, message)
        self.remote = remote
        self.message = message

    def __str__(self) -> str:
        return f"remote {self.remote}: {self.message}"


class RemoteUnreachable(RemoteError):
    """Connection refused, timed out or name not resolved (after the bounded retries)."""


class RemoteAuthError(RemoteError):
    """401/403, or no credentials at all."""


class RemoteConflict(RemoteError):
    """A conditional write lost (412) where retrying would not help."""


class RemoteLocked(RemoteError):
    """Another process holds a lock that the operation must not run beside; `.holder` says
    whose (host, pid, kind, age)."""

    def __init__(self, remote: str, holder: str) -> None:
        super().__init__(remote, f"locked by {holder}")
        self.holder = holder


class RemoteFormatError(RemoteError):
    """No ckpt remote where one is required (no `config`), or a foreign or newer one."""


class RemoteNotFound(RemoteError, KeyError):
    """A record, head or object the remote does not have (`.key`; `.oid` for an object)."""

    def __init__(self, remote: str, key: str, oid: ObjectId | None = None) -> None:
        what = f"object {oid.hex()}" if oid is not None else key
        super().__init__(remote, f"{what} is not on the remote")
        self.key = key
        self.oid = oid

    def __str__(self) -> str:
        return RemoteError.__str__(self)


class RemoteCorrupt(RemoteError):
    """A damaged pack, index or other remote file (`.key`, `.reason`)."""

    def __init__(self, remote: str, key: str, reason: str) -> None:
        super().__init__(remote, f"{key} is damaged: {reason}")
        self.key = key
        self.reason = reason
