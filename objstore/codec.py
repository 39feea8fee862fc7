"""The one place that turns objects into bytes and back: the only importer of msgpack and zstd.

Stored object envelope (all integers little-endian):

    magic b"CKO" | format u8 (=1) | codec u8 | length u64 | body

    codec 0 raw:    body = the content
    codec 1 zstd:   body = one zstd frame
    codec 2 dict:   body = dictionary id (32) | one zstd frame made with that dictionary
    codec 3 delta:  body = base id (32) | depth u8 | one zstd frame made with the base's
                    content as its raw-content prefix (zstd's patch-from); depth is the
                    number of objects a read decodes, this one included (a base that is no
                    delta has depth 0, so a delta on it has depth 1)
    codec 4 member: body = block id (32) | offset varint | length varint: the content is
                    bytes [offset, offset + length) of the block, an ordinary blob object
                    (objstore/blocks.py); a member is no delta (depth 0)

The dictionary, the base and the block are objects of the same store, named by their ids, which
`envelope_refs` reads from an envelope's first `REFS_PREFIX` bytes: whatever keeps an object
readable (gc, repack, push to a remote) keeps those too.

`length` is the size of the uncompressed content, so decompression is bounded before it starts.
Trees are canonical msgpack: `[1, [[name, kind, ref, size], ...]]` with entries sorted by name and
`ref` the object id (file, executable, tree), the link target (symlink) or nil (tombstone); a
file or executable whose permission bits are not its kind's default has a fifth field, the
bits (`[name, kind, oid, size, mode]`), so a tree of default modes encodes as before modes were
recorded, and a fifth field equal to the default is not canonical.
Every library exception becomes `CorruptObject`. Nothing here does file IO or hashing policy.
"""

from __future__ import annotations

import struct
import threading
from collections.abc import Iterator, Sequence
from typing import Any, BinaryIO, Protocol

import msgpack
import zstandard

from ckpt.objstore.errors import CorruptObject, InvalidTree, ObjectNotFound, ObjstoreError
from ckpt.objstore.ids import OID_SIZE, ObjectId
from ckpt.objstore.native import load_native
from ckpt.objstore.objects import EntryKind, Tree, TreeEntry, make_entry

MAGIC = b"CKO"
FORMAT = 1
CODEC_RAW = 0
CODEC_ZSTD = 1
CODEC_DICT = 2
CODEC_DELTA = 3
CODEC_BLOCK = 4
_HEADER = struct.Struct("<3sBBQ")
HEADER_SIZE = _HEADER.size
REFS_PREFIX = HEADER_SIZE + OID_SIZE + 1  # enough of an envelope for `envelope_refs`
TREE_FORMAT = 1
# In-memory decode refuses anything declared larger than this; larger blobs are streamed.
MAX_INMEMORY_SIZE = 1 << 30
CHUNK_SIZE = 1 << 20
# Compression must save at least 1/32 of the bytes to be worth a decompression on every read.
_MIN_SAVING_SHIFT = 5

# A delta's base is at most this deep: the depth byte is a u8, and a chain stays far shorter.
MAX_DELTA_DEPTH = 255
# zstd files a raw-content dictionary's positions into hash tables sized for the content to
# compress; a base of 2^n bytes needs tables of about 2^(n-2) entries to find its matches (below
# that, a small edit to a 2 MiB file compresses no better than without the base).
_DELTA_HASH_SHIFT = 2

_local = threading.local()
_DICT_DECOMPRESSORS = 16  # per thread, the oldest made dropped first
Frame = Any  # bytes-like: bytes or a zstandard BufferSegment (a slice of a batch's buffer)


class RefResolver(Protocol):
    """What decoding a codec 2, 3 or 4 envelope needs from its store (`ObjectStore` is one)."""

    def dictionary(self, oid: ObjectId) -> DictionaryData: ...
    def base(self, oid: ObjectId) -> bytes: ...
    def member(self, block: ObjectId, offset: int, length: int, oid: ObjectId | None
               ) -> bytes: ...


DictionaryData = zstandard.ZstdCompressionDict  # a loaded dictionary, ready for (de)compressors
# A zstd dictionary in use: its object id (named by every frame made with it) and its data.
Dictionary = tuple[ObjectId, DictionaryData]


def _compressor(level: int, dictionary: Dictionary | None = None) -> zstandard.ZstdCompressor:
    # ZstdCompressor objects are not thread-safe; one per thread, level and dictionary (which
    # a compressor loads once, not per frame).
    cache: dict[tuple[int, ObjectId | None], zstandard.ZstdCompressor] | None = getattr(
        _local, "compressors", None)
    if cache is None:
        cache = _local.compressors = {}
    key = (level, None if dictionary is None else dictionary[0])
    compressor = cache.get(key)
    if compressor is None:
        if dictionary is None:
            compressor = zstandard.ZstdCompressor(level=level, write_content_size=True)
        else:  # the envelope names the dictionary: the frame need not
            # Puts use one dictionary at a time: a replaced one's compressor goes.
            for old in [k for k in cache if k[0] == level and k[1] is not None]:
                del cache[old]
            compressor = zstandard.ZstdCompressor(
                level=level, dict_data=dictionary[1], write_content_size=True,
                write_dict_id=False)
        cache[key] = compressor
    return compressor


def _dict_decompressor(dictionary: Dictionary) -> zstandard.ZstdDecompressor:
    cache: dict[ObjectId, zstandard.ZstdDecompressor] | None = getattr(
        _local, "dict_decompressors", None)
    if cache is None:
        cache = _local.dict_decompressors = {}
    decompressor = cache.get(dictionary[0])
    if decompressor is None:
        if len(cache) >= _DICT_DECOMPRESSORS:  # bounded: a store may hold many dictionaries
            del cache[next(iter(cache))]
        decompressor = cache[dictionary[0]] = zstandard.ZstdDecompressor(dict_data=dictionary[1])
    return decompressor


def _decompressor() -> zstandard.ZstdDecompressor:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_local, "decompressor", None)
    if decompressor is None:
        decompressor = _local.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _pays(raw_size: int, compressed_size: int) -> bool:
    return compressed_size < raw_size - (raw_size >> _MIN_SAVING_SHIFT)


def encode_object(data: bytes | memoryview, level: int) -> bytes:
    """Envelope `data`, compressed at `level` (0 = never) unless compression does not pay."""
    if needs_compression(len(data), level):
        compressed = _compressor(level).compress(data)
        if _pays(len(data), len(compressed)):
            return _HEADER.pack(MAGIC, FORMAT, CODEC_ZSTD, len(data)) + compressed
    return _HEADER.pack(MAGIC, FORMAT, CODEC_RAW, len(data)) + bytes(data)


def compress_batch(items: Sequence[bytes], level: int, threads: int) -> Sequence[Frame]:
    """One zstd frame per item (each longer than 64 bytes, `level` > 0), in input order.

    The whole batch is compressed by `threads` native threads while the GIL is released once,
    so a Python thread can read and hash the next files meanwhile: per-file `compress` calls
    from a Python thread pool cost a GIL hand-off each, which on small files costs more than
    the compression. Frames are bytes-like (`envelope` takes them as they are, and checks that
    each declares its item's length: the order is the C code's contract, and a frame filed
    under another item's id would be a silent loss until read).

    The result is the native collection itself, not a list of its frames: this often runs on
    a pool thread, and every Python step it takes after the compression holds the GIL that
    the reading thread is waiting for.
    """
    return _compress_batch(items, level, threads, None)


def compress_batch_with_dictionary(items: Sequence[bytes], level: int,
                                   dictionary: Dictionary) -> Sequence[Frame]:
    """`compress_batch` (one native thread) of frames made with `dictionary` (codec 2)."""
    return _compress_batch(items, level, 1, dictionary)


def _compress_batch(items: Sequence[bytes], level: int, threads: int,
                    dictionary: Dictionary | None) -> Sequence[Frame]:
    compressor = _compressor(level, dictionary)  # this thread's: one batch at a time
    multi = getattr(compressor, "multi_compress_to_buffer", None)  # C backend only
    if multi is not None and len(items) > 1:
        try:
            frames = multi(items, threads=max(1, threads))
        except (NotImplementedError, zstandard.ZstdError):
            pass
        else:
            if len(frames) == len(items):
                return frames  # type: ignore[no-any-return]
    return compress_each(items, level, dictionary)


def compress_each(items: Sequence[bytes], level: int,
                  dictionary: Dictionary | None = None) -> list[bytes]:
    """`compress_batch` one item at a time in this thread (any zstandard backend)."""
    compressor = _compressor(level, dictionary)
    return [compressor.compress(item) for item in items]


def needs_compression(size: int, level: int) -> bool:
    """Whether `encode_object` would try zstd on content of `size` bytes."""
    return level > 0 and size > 64


def envelope(data: bytes, frame: Frame | None) -> bytes:
    """The stored bytes of `data` given its zstd `frame` (None: not compressed): exactly what
    `encode_object` returns, raw when compression does not pay. A frame that declares another
    length is not `data`'s (a batch out of order): refused, never stored under its id."""
    if frame is not None and _pays(len(data), len(frame)):
        if zstandard.frame_content_size(frame) != len(data):
            raise ObjstoreError(
                f"zstd frame declares {zstandard.frame_content_size(frame)} bytes for content "
                f"of {len(data)}: frames out of order")
        stored: bytes = _HEADER.pack(MAGIC, FORMAT, CODEC_ZSTD, len(data)) + frame  # one copy
        return stored
    return _HEADER.pack(MAGIC, FORMAT, CODEC_RAW, len(data)) + data


def train_dictionary(samples: Sequence[bytes], size: int, level: int) -> bytes:
    """A zstd dictionary of at most `size` bytes made from `samples` (fastCOVER with fixed
    parameters: one pass, no search over them, so its time is bounded by the samples')."""
    try:
        trained = zstandard.train_dictionary(size, list(samples), k=1024, d=8, f=18, accel=4,
                                             level=level, threads=1)
    except zstandard.ZstdError as exc:
        raise ObjstoreError(f"zstd could not train a dictionary: {exc}") from None
    data: bytes = trained.as_bytes()
    return data


def load_dictionary(data: bytes) -> DictionaryData:
    """The dictionary whose bytes are `data` (a dictionary object's verified content)."""
    return zstandard.ZstdCompressionDict(data)


def encode_with_dictionary(data: bytes | memoryview, level: int,
                           dictionary: Dictionary) -> bytes:
    """`encode_object` with `dictionary` (codec 2), raw when that does not pay."""
    if needs_compression(len(data), level):
        return dictionary_envelope(bytes(data), _compressor(level, dictionary).compress(data),
                                   dictionary[0])
    return _HEADER.pack(MAGIC, FORMAT, CODEC_RAW, len(data)) + bytes(data)


def dictionary_envelope(data: bytes, frame: Frame, dictionary_id: ObjectId) -> bytes:
    """`envelope` of a frame made with the dictionary `dictionary_id` (codec 2); raw when the
    frame and the id do not pay."""
    if _pays(len(data), len(frame) + OID_SIZE):
        if zstandard.frame_content_size(frame) != len(data):
            raise ObjstoreError(
                f"zstd frame declares {zstandard.frame_content_size(frame)} bytes for content "
                f"of {len(data)}: frames out of order")
        stored: bytes = (_HEADER.pack(MAGIC, FORMAT, CODEC_DICT, len(data)) + dictionary_id
                         + frame)
        return stored
    return _HEADER.pack(MAGIC, FORMAT, CODEC_RAW, len(data)) + data


def iter_encode_object(chunks: Iterator[bytes], length: int, level: int) -> Iterator[bytes]:
    """Streaming `encode_object` for content of known `length` given as chunks.

    The codec is chosen by trying the first chunk, so incompressible media is stored raw
    without compressing all of it. The caller checks that the chunks add up to `length`.
    """
    first = next(chunks, b"")
    codec = CODEC_RAW
    if level > 0 and len(first) > 64:
        trial = _compressor(level).compress(first)
        if _pays(len(first), len(trial)):
            codec = CODEC_ZSTD
    yield _HEADER.pack(MAGIC, FORMAT, codec, length)
    if codec == CODEC_RAW:
        yield first
        yield from chunks
        return
    compressor = zstandard.ZstdCompressor(level=level, write_content_size=True)
    stream = compressor.compressobj(size=length)
    yield stream.compress(first)
    for chunk in chunks:
        out = stream.compress(chunk)
        if out:
            yield out
    yield stream.flush()


def envelope_refs(stored: bytes | memoryview, oid: ObjectId | None = None
                  ) -> tuple[ObjectId, ...]:
    """The ids an envelope needs to be decoded (its dictionary, delta base or block; () for raw and
    plain zstd), from at least its first `REFS_PREFIX` bytes (fewer for codecs 0 and 1)."""
    if len(stored) < HEADER_SIZE:
        raise CorruptObject(oid, f"truncated header ({len(stored)} bytes)")
    codec = stored[4]
    if codec in (CODEC_DICT, CODEC_DELTA, CODEC_BLOCK):
        if len(stored) < HEADER_SIZE + OID_SIZE:
            raise CorruptObject(oid, "truncated envelope reference")
        return (ObjectId(bytes(stored[HEADER_SIZE:HEADER_SIZE + OID_SIZE])),)
    return ()


def delta_header(stored: bytes | memoryview, oid: ObjectId | None = None
                 ) -> tuple[ObjectId, int]:
    """(base id, depth) of a codec 3 envelope, from at least its first `REFS_PREFIX` bytes."""
    if len(stored) < REFS_PREFIX:
        raise CorruptObject(oid, "truncated delta envelope")
    depth = stored[REFS_PREFIX - 1]
    if not 1 <= depth <= MAX_DELTA_DEPTH:
        raise CorruptObject(oid, f"delta depth {depth} out of range")
    return ObjectId(bytes(stored[HEADER_SIZE:HEADER_SIZE + OID_SIZE])), depth


def delta_frame(base: bytes, data: bytes | memoryview, level: int) -> bytes:
    """One zstd frame of `data` with `base` as its raw-content dictionary (zstd's
    patch-from): the window spans both, so any part of the base is in reach."""
    window = max(10, (len(base) + len(data)).bit_length())
    params = zstandard.ZstdCompressionParameters.from_level(
        max(1, level), source_size=len(data), dict_size=len(base))
    tables = max(params.hash_log, (max(1, len(base)) - 1).bit_length() - _DELTA_HASH_SHIFT)
    params = zstandard.ZstdCompressionParameters.from_level(
        max(1, level), source_size=len(data), dict_size=len(base), window_log=window,
        hash_log=tables, chain_log=tables, write_content_size=True)
    compressor = zstandard.ZstdCompressor(
        dict_data=zstandard.ZstdCompressionDict(base, dict_type=zstandard.DICT_TYPE_RAWCONTENT),
        compression_params=params)
    return compressor.compress(data)


def delta_envelope(length: int, base: ObjectId, depth: int, frame: bytes) -> bytes:
    """The stored bytes of a delta: content of `length` bytes, `frame` made on `base`'s
    content by `delta_frame`, `depth` objects deep (1: the base is no delta)."""
    if not 1 <= depth <= MAX_DELTA_DEPTH:
        raise ObjstoreError(f"delta depth {depth} out of range")
    return _HEADER.pack(MAGIC, FORMAT, CODEC_DELTA, length) + base + bytes((depth,)) + frame


def undelta(base: bytes, frame: bytes | memoryview, length: int, oid: ObjectId | None) -> bytes:
    """The content of a delta frame made on `base`, `length` bytes (checked, not hashed)."""
    try:
        framed = zstandard.frame_content_size(frame)
        if framed != length:
            raise CorruptObject(oid, f"zstd frame declares {framed} bytes, header {length}")
        window = max(10, (len(base) + length).bit_length())
        decompressor = zstandard.ZstdDecompressor(
            dict_data=zstandard.ZstdCompressionDict(
                base, dict_type=zstandard.DICT_TYPE_RAWCONTENT),
            max_window_size=1 << window)
        data: bytes = decompressor.decompress(frame, max_output_size=length)
    except zstandard.ZstdError as exc:
        raise CorruptObject(oid, f"zstd: {exc}") from None
    if len(data) != length:
        raise CorruptObject(oid, f"content is {len(data)} bytes, header says {length}")
    return data


def read_header(stored: bytes | memoryview, oid: ObjectId | None) -> tuple[int, int]:
    """Return (codec, declared length) of an envelope, or raise CorruptObject."""
    if len(stored) < HEADER_SIZE:
        raise CorruptObject(oid, f"truncated header ({len(stored)} bytes)")
    magic, version, codec, length = _HEADER.unpack_from(stored)
    if magic != MAGIC:
        raise CorruptObject(oid, "bad magic")
    if version != FORMAT:
        raise CorruptObject(oid, f"unknown object format {version}")
    if codec not in (CODEC_RAW, CODEC_ZSTD, CODEC_DICT, CODEC_DELTA, CODEC_BLOCK):
        raise CorruptObject(oid, f"unknown codec {codec}")
    return codec, length


def decode_object(
    stored: bytes, oid: ObjectId | None = None, *, max_size: int = MAX_INMEMORY_SIZE,
    refs: RefResolver | None = None,
) -> bytes:
    """The content inside an envelope (not yet hash-verified: the store does that). An
    envelope that names a dictionary or a base gets it from `refs`."""
    codec, length = read_header(stored, oid)
    if length > max_size:
        raise CorruptObject(oid, f"declared size {length} exceeds the in-memory limit {max_size}")
    body = memoryview(stored)[HEADER_SIZE:]
    decompressor = None
    if codec == CODEC_BLOCK:
        return _member(stored, length, oid, refs)
    if codec == CODEC_DICT:
        decompressor, body = _with_dictionary(body, oid, refs)
    if codec == CODEC_RAW:
        data = bytes(body)
    elif codec == CODEC_DELTA:
        base_id, _depth = delta_header(stored, oid)
        if refs is None:
            raise CorruptObject(oid, "a delta needs its base to be decoded")
        try:
            base = refs.base(base_id)
        except ObjectNotFound:
            raise CorruptObject(oid, f"its delta base {base_id.hex()} is missing") from None
        except CorruptObject as exc:
            raise CorruptObject(oid, f"its delta base {base_id.hex()} is damaged "
                                     f"({exc})") from None
        data = undelta(base, body[OID_SIZE + 1:], length, oid)
    else:
        try:
            # zstd sizes its output buffer from the frame header, not from max_output_size:
            # a frame claiming terabytes would raise MemoryError (or allocate gigabytes), so
            # the frame must declare exactly the envelope's (already bounded) length.
            framed = zstandard.frame_content_size(body)
            if framed != length:
                raise CorruptObject(oid, f"zstd frame declares {framed} bytes, header {length}")
            data = (decompressor or _decompressor()).decompress(body, max_output_size=length)
        except zstandard.ZstdError as exc:
            raise CorruptObject(oid, f"zstd: {exc}") from None
    if len(data) != length:
        raise CorruptObject(oid, f"content is {len(data)} bytes, header says {length}")
    return data


def _with_dictionary(body: memoryview, oid: ObjectId | None, refs: RefResolver | None
                     ) -> tuple[zstandard.ZstdDecompressor, memoryview]:
    """The decompressor of a codec 2 body's dictionary, and its frame. Whatever keeps the
    dictionary from being used is this object's damage too, named for it."""
    if len(body) < OID_SIZE:
        raise CorruptObject(oid, "truncated envelope reference")
    dictionary_id = ObjectId(bytes(body[:OID_SIZE]))
    if refs is None:
        raise CorruptObject(oid, "needs its dictionary")
    try:
        dictionary = refs.dictionary(dictionary_id)
    except ObjstoreError as exc:  # CorruptObject, ObjectNotFound
        raise CorruptObject(oid, f"its dictionary {dictionary_id.hex()} is unreadable: "
                                 f"{getattr(exc, 'reason', exc)}") from None
    return _dict_decompressor((dictionary_id, dictionary)), body[OID_SIZE:]


# The native decoders (objstore/_codec.c): of a canonical tree of common entries (most trees
# of a source tree) and of a well-formed member envelope. They answer None for anything else,
# which the Python code decodes or refuses.
_native = load_native("ckpt.objstore._codec")
_native_decode = _native_member = None
if _native is not None:
    _native.configure(
        TreeEntry, Tree, (None, *sorted(EntryKind)),
        tuple(TreeEntry.__dict__[field] for field in
              ("name", "kind", "oid", "target", "size", "mode")),
        Tree.__dict__["entries"])
    _native_decode = _native.decode_tree
    _native_member = _native.member_place


def member_envelope(length: int, block: ObjectId, offset: int) -> bytes:
    """The stored bytes of a block's member (codec 4): content of `length` bytes at `offset`
    in the content of the block `block`."""
    return (_HEADER.pack(MAGIC, FORMAT, CODEC_BLOCK, length) + block + _varint(offset)
            + _varint(length))


def member_place(stored: bytes) -> tuple[ObjectId, int, int] | None:
    """(block id, offset, length) of a block member's envelope; None for another envelope, or
    a damaged one (`member_header` or `decode_object` says why)."""
    if len(stored) < HEADER_SIZE + OID_SIZE or stored[4] != CODEC_BLOCK:
        return None
    if _native_member is not None:
        return _native_member(stored)  # type: ignore[no-any-return]
    try:
        return member_header(stored)
    except CorruptObject:
        return None


def member_header(stored: bytes | memoryview, oid: ObjectId | None = None
                  ) -> tuple[ObjectId, int, int]:
    """(block id, offset, length) of a codec 4 envelope; its length must be the header's."""
    if _native_member is not None:
        place: tuple[ObjectId, int, int] | None = _native_member(stored)
        if place is not None:
            return place
    _, declared = read_header(stored, oid)
    at = HEADER_SIZE + OID_SIZE
    if len(stored) < at:
        raise CorruptObject(oid, "truncated envelope reference")
    # The two varints in one loop: a restore reads this for every small file.
    values: list[int] = []
    value = shift = 0
    for byte in stored[at:]:
        value |= (byte & 0x7F) << shift
        if byte & 0x80:
            shift += 7
            if shift > 63:
                break
        else:
            values.append(value)
            value = shift = 0
    if shift or len(values) != 2 or values[1] != declared:
        raise CorruptObject(oid, "malformed block member envelope")
    return ObjectId(bytes(stored[HEADER_SIZE:at])), values[0], values[1]


def _member(stored: bytes, length: int, oid: ObjectId | None, refs: RefResolver | None
            ) -> bytes:
    block, offset, _ = member_header(stored, oid)
    if refs is None:
        raise CorruptObject(oid, "a block member needs its block to be decoded")
    data = refs.member(block, offset, length, oid)
    if len(data) != length:
        raise CorruptObject(oid, f"content is {len(data)} bytes, header says {length}")
    return data


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def decompress_prefix(frame: bytes | memoryview, size: int, oid: ObjectId | None, *,
                      declared: int) -> bytes:
    """The first `size` bytes of the content of one zstd `frame`, which must declare
    `declared` bytes (fewer if the content is shorter): decompression stops once they are
    out."""
    try:
        framed = zstandard.frame_content_size(frame)
        if framed != declared:
            raise CorruptObject(oid, f"zstd frame declares {framed} bytes, header {declared}")
        # Its own decompressor per thread: a reader dropped before the frame's end leaves its
        # context mid-frame, which the next reader resets (the thread's one-shot decompressor
        # is never left so).
        decompressor: zstandard.ZstdDecompressor | None = getattr(_local, "prefix", None)
        if decompressor is None:
            decompressor = _local.prefix = zstandard.ZstdDecompressor()
        reader = decompressor.stream_reader(frame, read_across_frames=False)
        parts = []
        got = 0
        while got < size:
            chunk = reader.read(size - got)
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
    except zstandard.ZstdError as exc:
        raise CorruptObject(oid, f"zstd: {exc}") from None
    return b"".join(parts)


def iter_decode_object(stream: BinaryIO, oid: ObjectId | None, *,
                       refs: RefResolver | None = None) -> Iterator[bytes]:
    """Stream the content of an envelope read from `stream`, bounded by the declared length.
    A codec 2, 3 or 4 envelope (a small object, a delta, a block's member: never larger than
    fits in memory) is decoded whole, with `refs`."""
    header = stream.read(HEADER_SIZE)
    codec, length = read_header(header, oid)
    if codec in (CODEC_DICT, CODEC_DELTA, CODEC_BLOCK):
        yield decode_object(header + stream.read(MAX_INMEMORY_SIZE), oid, refs=refs)
        return
    source: Any = stream
    if codec == CODEC_ZSTD:
        # A stream reader uses its decompressor's context for its whole life: sharing the
        # thread's decompressor would let two interleaved streams (or a one-shot decode in
        # between) corrupt each other, so each stream gets its own.
        source = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=False)
    produced = 0
    try:
        while True:
            chunk = source.read(CHUNK_SIZE)
            if not chunk:
                break
            produced += len(chunk)
            if produced > length:
                raise CorruptObject(oid, f"content exceeds the declared {length} bytes")
            yield chunk
        if codec == CODEC_RAW and stream.read(1):
            raise CorruptObject(oid, f"content exceeds the declared {length} bytes")
    except zstandard.ZstdError as exc:
        raise CorruptObject(oid, f"zstd: {exc}") from None
    if produced != length:
        raise CorruptObject(oid, f"content is {produced} bytes, header says {length}")


def encode_tree(tree: Tree) -> bytes:
    # The kind goes as the IntEnum itself: msgpack packs an int subclass as the int.
    symlink = EntryKind.SYMLINK
    rows = [(e.name, e.kind, e.target if e.kind is symlink else e.oid, e.size)
            if e.mode is None else (e.name, e.kind, e.oid, e.size, e.mode)
            for e in tree.entries]
    return msgpack.packb((TREE_FORMAT, rows), use_bin_type=True)  # type: ignore[no-any-return]


_KINDS = {int(kind): kind for kind in EntryKind}


def decode_tree(data: bytes, oid: ObjectId | None = None) -> Tree:
    """Decode and validate a tree; anything that is not a canonical tree is `InvalidTree`."""
    if _native_decode is not None:
        decoded_natively: Tree | None = _native_decode(data)
        if decoded_natively is not None:
            return decoded_natively
    try:
        decoded = msgpack.unpackb(data, use_list=False, raw=True, strict_map_key=True)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise InvalidTree(oid, f"not msgpack: {exc}") from None
    if (
        type(decoded) is not tuple
        or len(decoded) != 2
        or type(decoded[0]) is not int  # True == 1: a bool must not pass for the format
        or decoded[0] != TREE_FORMAT
        or type(decoded[1]) is not tuple
    ):
        raise InvalidTree(oid, "not a tree")
    entries = []
    try:
        for row in decoded[1]:
            if type(row) is not tuple:
                raise InvalidTree(oid, "malformed entry")
            if len(row) == 4:
                name, kind_code, ref, size = row
                mode = None
            elif len(row) == 5:  # validated with the entry: a blob's mode, never its default
                name, kind_code, ref, size, mode = row
                if mode is None:
                    raise InvalidTree(oid, f"entry {name!r} has an invalid mode None")
            else:
                raise InvalidTree(oid, "malformed entry")
            kind = _KINDS.get(kind_code) if type(kind_code) is int else None
            if kind is None:
                raise InvalidTree(oid, f"unknown entry kind {kind_code!r}")
            if kind is EntryKind.SYMLINK:
                entries.append(TreeEntry(name, kind, None, ref, size, mode))
            else:
                if (ref is not None and type(ref) is bytes and kind is not EntryKind.TOMBSTONE
                        and len(ref) != OID_SIZE):
                    raise InvalidTree(oid, f"entry {name!r} has a bad object id")
                entries.append(make_entry(name, kind, ref, None, size, mode))
        tree = Tree(tuple(entries))
    except InvalidTree as exc:
        if exc.oid is None:
            raise InvalidTree(oid, exc.reason) from None
        raise
    # Equal trees must have equal ids: refuse any encoding that is not the canonical one.
    # The validated rows re-packed as decoded are exactly encode_tree(tree) (same values, same
    # shapes), without a second pass over the entries.
    if msgpack.packb(decoded, use_bin_type=True) != data:
        raise InvalidTree(oid, "non-canonical encoding")
    return tree


def pack_data(value: Any) -> bytes:
    """msgpack for other modules' records (stat caches, journals): bytes stay bytes."""
    return msgpack.packb(value, use_bin_type=True)  # type: ignore[no-any-return]


def unpack_data(data: bytes | memoryview, *, what: str = "data") -> Any:
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 (msgpack raises a zoo of types for bad input)
        raise CorruptObject(None, f"{what} is not valid msgpack: {exc}") from None


__all__ = [
    "CHUNK_SIZE",
    "CODEC_BLOCK",
    "HEADER_SIZE",
    "MAX_DELTA_DEPTH",
    "ObjstoreError",
    "RefResolver",
    "compress_batch",
    "compress_each",
    "decode_object",
    "decode_tree",
    "delta_envelope",
    "delta_frame",
    "delta_header",
    "encode_object",
    "encode_tree",
    "envelope",
    "iter_decode_object",
    "iter_encode_object",
    "member_envelope",
    "member_header",
    "member_place",
    "needs_compression",
    "pack_data",
    "read_header",
    "undelta",
    "unpack_data",
]
