"""The `Backend` protocol: stored object bytes by id, nothing more.

A backend neither hashes, compresses nor verifies: `ObjectStore` does that on top, so a pack-file
backend or a remote (S3-like) backend can replace the loose-file one without touching callers.
Every backend must pass `tests/objstore/test_backend_contract.py`.

Optional capabilities are declared here as runtime-checkable protocols (`BulkBackend`,
`Compactable`, `LocatedBackend`): the store asks `isinstance` once, never `getattr` per call.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO, Literal, Protocol, runtime_checkable

from ckpt.objstore.ids import ObjectId

FsyncPolicy = Literal["none", "batch", "full"]
FSYNC_POLICIES: tuple[FsyncPolicy, ...] = ("none", "batch", "full")


@dataclass(frozen=True, slots=True)
class ObjectStat:
    size: int  # stored (envelope) bytes
    mtime: float  # last write or refresh, seconds since the epoch: GC's grace period reads it


@runtime_checkable
class Backend(Protocol):
    def has(self, oid: ObjectId) -> bool: ...

    def refresh(self, oid: ObjectId) -> bool:
        """True if present, and mark it as just written so a concurrent GC keeps it."""
        ...

    def get(self, oid: ObjectId) -> bytes:
        """The stored bytes; `ObjectNotFound` if absent."""
        ...

    def open(self, oid: ObjectId) -> BinaryIO:
        """A readable stream of the stored bytes; `ObjectNotFound` if absent."""
        ...

    def put(self, oid: ObjectId, stored: bytes) -> bool:
        """Store atomically; False (and a refresh) if it was already there."""
        ...

    def put_stream(self, oid: ObjectId, chunks: Iterable[bytes]) -> bool:
        """Store a stream atomically. If `chunks` raises, nothing is stored and it propagates."""
        ...

    def delete(self, oid: ObjectId) -> int:
        """Remove; returns the stored bytes freed (0 if it was absent)."""
        ...

    def iter_ids(self) -> Iterator[ObjectId]: ...

    def stat(self, oid: ObjectId) -> ObjectStat:
        """`ObjectNotFound` if absent."""
        ...

    def sync(self) -> None:
        """Make every put so far durable (the 'batch' fsync point)."""
        ...

    def sweep_temporaries(self, older_than: float) -> int:
        """Remove leftovers of interrupted puts older than `older_than` (epoch seconds)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Compactable(Protocol):
    """Optional capability of a backend whose deletes or small writes leave space to reclaim
    (packs): garbage collection calls `compact()` after its sweep."""

    def compact(self) -> int:
        """Apply pending deletions and consolidate; returns the bytes reclaimed."""
        ...


@runtime_checkable
class BulkBackend(Backend, Protocol):
    """Optional capability: puts of objects the caller has just seen absent (`refresh` said
    False), skipping that lookup, one at a time or a batch under one lock round. The store's
    put paths use it when a backend has it, and plain `put` otherwise."""

    def put_absent(self, oid: ObjectId, stored: bytes) -> bool:
        """`put` of an object `refresh` has just reported absent. False (and nothing written)
        if it was stored since by another writer that the backend sees."""
        ...

    def put_absent_many(self, objects: Sequence[tuple[ObjectId, bytes]],
                        crcs: Sequence[int] | None = None) -> list[bool]:
        """`put_absent` of each object, in order: the same results as one call each. `crcs`:
        each object's record crc (`packfile.record_crc`), which a caller that has checked
        them (a fetch, from the remote's records) gives so they are not computed again."""
        ...


@runtime_checkable
class LocatedBackend(Protocol):
    """Optional capability of a backend that lives in a directory: an error that names no
    path (a write to an open descriptor) is reported as the store's, at `path`."""

    path: str


@runtime_checkable
class RecordChecking(Protocol):
    """Optional capability of a backend whose stored copies carry their own framing check
    (pack records: id, length, crc), which fsck --full compares with what the index says."""

    def check_records(self) -> Iterator[tuple[ObjectId, str, str]]:
        """(id, file, problem) for every stored copy whose framing disagrees with the index
        or the bytes."""
        ...


@runtime_checkable
class HeadReading(Protocol):
    """Optional capability: the first bytes of a stored copy without reading it all (gc
    reads the envelope header of every object it keeps, for the ids it names)."""

    def get_head(self, oid: ObjectId, size: int) -> bytes:
        """Up to `size` first stored bytes; `ObjectNotFound` if absent."""
        ...


@runtime_checkable
class Repairable(Protocol):
    """Optional capability: a put that finds its id present asks whether the stored copy is
    intact before trusting it, and replaces a damaged one (its good bytes are at hand)."""

    def check_stored(self, oid: ObjectId) -> bool | None:
        """Whether the copy reads return passes the backend's own framing check (False:
        damaged); None when there is no such check for it (then the store verifies the
        content). Cheap: one read of the stored bytes, never decompression or hashing."""
        ...

    def forget_damaged(self, oid: ObjectId) -> None:
        """Drop the damaged copy that reads return, so the next put stores a fresh one that
        reads return from then on."""
        ...
