"""Checking one stored envelope against its id before it crosses the wire either way: decoded
(streamed, so a large blob never needs its content in memory at once) and hashed.

An envelope that names a dictionary or a delta base (codec 2 or 3, `codec.envelope_refs`) is
decoded with its store as the resolver of those references, so they must be in that store
first. Nothing here does network or file IO.
"""

from __future__ import annotations

import io
from typing import Any

from ckpt.objstore import codec
from ckpt.objstore.errors import CorruptObject
from ckpt.objstore.ids import ObjectId, StreamHasher
from ckpt.objstore.store import ObjectStore

# Decoding with references takes the store as `refs=` (objstore/codec.py's RefResolver);
# called through `Any` so this module type-checks against codecs with and without it.
_decode_stream: Any = codec.iter_decode_object


def check_envelope(oid: ObjectId, stored: bytes | memoryview, store: ObjectStore | None) -> int:
    """The content size of a valid envelope of `oid`; CorruptObject naming `oid` otherwise.
    `store` resolves a dictionary or base (None: such an envelope is only checked for its
    framing, the caller having no store to decode it with)."""
    codec.read_header(stored[:codec.HEADER_SIZE], oid)  # magic, format, known codec
    refs = codec.envelope_refs(stored, oid)
    if refs and store is None:
        return 0
    stream = io.BytesIO(stored)
    chunks = (_decode_stream(stream, oid, refs=store) if refs
              else codec.iter_decode_object(stream, oid))
    hasher = StreamHasher(parallel=False)
    for chunk in chunks:
        hasher.update(chunk)
    if hasher.digest() != oid:
        raise CorruptObject(oid, "content does not match its id")
    return hasher.length
