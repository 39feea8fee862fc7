"""Object identities: BLAKE3 digests of an object's uncompressed bytes.

An `ObjectId` is the raw 32-byte digest; hex appears only at the edges (`oid_hex`, `parse_oid`).
A blob's id is exactly `b3sum` of the file. Nothing here stores or reads objects.
"""

from __future__ import annotations

from typing import NewType

import blake3

ObjectId = NewType("ObjectId", bytes)

OID_SIZE = 32
HEX_SIZE = 2 * OID_SIZE
# Large buffers hash faster with BLAKE3's own threads; small ones pay for the thread start-up.
_THREADED_HASH_MIN = 4 << 20
_READ_CHUNK = 1 << 20
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")


def hash_bytes(data: bytes | memoryview, *, parallel: bool = True) -> ObjectId:
    """The id of `data`; `parallel=False` keeps a large buffer on this thread (for a caller
    whose other threads already keep the cores busy: see `StreamHasher`)."""
    if parallel and len(data) >= _THREADED_HASH_MIN:
        return ObjectId(blake3.blake3(data, max_threads=blake3.blake3.AUTO).digest())
    return ObjectId(blake3.blake3(data).digest())


class StreamHasher:
    """Incremental hashing for content that does not fit in memory at once.

    `parallel`: BLAKE3's own threads hash each large chunk, which pays on idle cores. Not when
    the caller's threads are compressing on them: the hashing thread would wait for BLAKE3's
    pool, whose threads take CPU from the compression.
    """

    __slots__ = ("_hasher", "length")

    def __init__(self, *, parallel: bool = True) -> None:
        self._hasher = (blake3.blake3(max_threads=blake3.blake3.AUTO) if parallel
                        else blake3.blake3())
        self.length = 0

    def update(self, chunk: bytes | memoryview) -> None:
        self._hasher.update(chunk)
        self.length += len(chunk)

    def digest(self) -> ObjectId:
        return ObjectId(self._hasher.digest())


def hash_file(path: str | bytes) -> ObjectId:
    hasher = StreamHasher()
    with open(path, "rb") as stream:
        while chunk := stream.read(_READ_CHUNK):
            hasher.update(chunk)
    return hasher.digest()


def oid_hex(oid: ObjectId) -> str:
    return oid.hex()


def parse_oid(text: str) -> ObjectId:
    """Parse a 64-character hex id; ValueError names the bad text."""
    if len(text) != HEX_SIZE:
        raise ValueError(f"object id must be {HEX_SIZE} hex characters: {text!r}")
    # bytes.fromhex skips whitespace, so "  ab…" (64 chars) would parse to a 31-byte id.
    if not _HEX_DIGITS.issuperset(text):
        raise ValueError(f"object id is not hex: {text!r}")
    return ObjectId(bytes.fromhex(text))


def check_oid(value: bytes) -> ObjectId:
    """Accept raw bytes read from disk as an id only if they have the right length."""
    if type(value) is not bytes or len(value) != OID_SIZE:
        raise ValueError(f"object id must be {OID_SIZE} raw bytes")
    return ObjectId(value)
