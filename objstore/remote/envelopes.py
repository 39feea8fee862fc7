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
from ckpt.objstore.ids import ObjectId, StreamHasher, hash_bytes
from ckpt.objstore.store import ObjectStore

# Decoding with references takes the store as `refs=` (objstore/codec.py's RefResolver);
# called through `Any` so this module type-checks against codecs with and without it.
_decode_stream: Any = codec.iter_decode_object
_decode_whole: Any = codec.decode_object
# Content up to this size is decoded in one call (a stream reader per object costs more than
# the decoding of a small one); larger content is streamed.
_WHOLE_CONTENT = 4 << 20


def check_envelope(oid: ObjectId, stored: bytes | memoryview, store: ObjectStore | None, *,
                   keep_block: bool = False) -> int:
    """The content size of a valid envelope of `oid`; CorruptObject naming `oid` otherwise.
    `store` resolves a dictionary, base or block (None: such an envelope is only checked for
    its framing, the caller having no store to decode it with). `keep_block`: `oid` is a
    block whose members are checked next: its verified content is left in `store`'s block
    cache for them."""
    _, length = codec.read_header(stored[:codec.HEADER_SIZE], oid)  # magic, format, codec
    refs = codec.envelope_refs(stored, oid)
    if refs and store is None:
        return 0
    if length <= _WHOLE_CONTENT:
        whole = bytes(stored)
        data = (_decode_whole(whole, oid, refs=store) if refs
                else codec.decode_object(whole, oid))
        if hash_bytes(data, parallel=False) != oid:
            raise CorruptObject(oid, "content does not match its id")
        if keep_block and store is not None:
            store.keep_block(oid, data)
        return len(data)
    stream = io.BytesIO(stored)
    chunks = (_decode_stream(stream, oid, refs=store) if refs
              else codec.iter_decode_object(stream, oid))
    hasher = StreamHasher(parallel=False)
    for chunk in chunks:
        hasher.update(chunk)
    if hasher.digest() != oid:
        raise CorruptObject(oid, "content does not match its id")
    return hasher.length
