"""Exceptions of the object store: one root, each carrying the object id or path involved.

Messages are one line. Nothing here maps errors to exit codes (that is the CLI's job).
"""

from __future__ import annotations

from ckpt.objstore.ids import ObjectId


class ObjstoreError(Exception):
    """Root of every error the object store raises."""


class ObjectNotFound(ObjstoreError, KeyError):
    def __init__(self, oid: ObjectId) -> None:
        super().__init__(oid)
        self.oid = oid

    def __str__(self) -> str:
        return f"object {self.oid.hex()} is missing from the store"


class CorruptObject(ObjstoreError, ValueError):
    def __init__(self, oid: ObjectId | None, reason: str) -> None:
        super().__init__(oid, reason)
        self.oid = oid
        self.reason = reason

    def __str__(self) -> str:
        if self.oid is None:
            return f"corrupt object: {self.reason}"
        return f"object {self.oid.hex()} is corrupt: {self.reason}"


class InvalidTree(CorruptObject):
    """A tree object that decodes but breaks the tree rules (bad names, order, kinds)."""


class UnsupportedFormat(ObjstoreError):
    def __init__(self, path: str, found: str, supported: int) -> None:
        super().__init__(path, found, supported)
        self.path = path
        self.found = found
        self.supported = supported

    def __str__(self) -> str:
        return (
            f"store {self.path} has format version {self.found}; this ckpt reads version "
            f"{self.supported} (upgrade ckpt to open it)"
        )


class StoreNotFound(ObjstoreError):
    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path

    def __str__(self) -> str:
        return f"no object store at {self.path}"


class ContentChanged(ObjstoreError):
    """The source of a streamed put changed while it was read; nothing was stored."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path

    def __str__(self) -> str:
        return f"{self.path} changed while it was read"


class StoreWriteError(ObjstoreError):
    """Writing a file's content into the store failed (`.error`, the OSError): the store's
    fault, not the file's. `put_file` and `put_files` report a file they cannot read as an
    OSError, which a snapshot records as a skipped path; a failed write must instead fail
    the snapshot, so it is raised as this, which is no OSError."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


class UnsafeStore(ObjstoreError):
    """A file or directory of the store is a symlink (or not the kind the layout says): the
    store never follows one, since whoever planted it could point it at any file the user can
    write. Raised when the store is opened and whenever such a path is met later."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"unsafe store: {self.path} {self.reason} (ckpt never follows symlinks in its store)"
