"""Deltas (codec 3): a new blob stored against the previous version of its path.

What lives here, for `ObjectStore`: the decision to store a blob as a delta against a hint
(`DeltaEncoder.encode`: where it pays, chains bounded), the reading of a chain (`read_base`),
the ledger of what deltas saved (`ckpt stats`), and the ids gc and fsck must follow from the
objects they keep (`envelope_closure`). What does not: zstd (codec.py), where the hints come
from (checkpoints/snapshot/scan.py: a changed file's previous blob).

A chain: a full object F (depth 0), deltas on it (depth 1), deltas on those (depth 2), ... at
most `chain` deep. A hint at depth `chain` is not extended: the delta is made against its
chain's full object instead (depth 1 again), so every version of an edited file stays a small
step from one full copy, and a read decodes at most `chain` + 1 objects. A delta is kept only
where it pays (`_PAYS_SHIFT`); else the blob is stored plain and starts a chain of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from ckpt.objstore import codec
from ckpt.objstore.backend import Backend, HeadReading
from ckpt.objstore.errors import CorruptObject, ObjectNotFound, ObjstoreError
from ckpt.objstore.ids import ObjectId, hash_bytes
from ckpt.objstore.safeopen import open_file

# Smaller contents are never deltas: their plain frame is a few hundred bytes at most.
MIN_DELTA_SIZE = 1 << 10
# Default chain bound: restoring the deepest version of a 2 MiB text file costs under twice
# restoring a full one (bench/storage.py measures it; see docs/DESIGN.md "Storage").
DEFAULT_DELTA_CHAIN = 4
# A delta is kept when its envelope is at most this fraction (1/2^n) of the plain one: each
# read of it decodes its chain too.
_PAYS_SHIFT = 1
LEDGER_FILE = "deltas"


@dataclass(frozen=True, slots=True)
class DeltaOptions:
    enabled: bool = True
    chain: int = DEFAULT_DELTA_CHAIN  # K: a read decodes at most K + 1 objects
    max_size: int = 8 << 20  # larger blobs stream and are never deltas (stream_threshold)


@dataclass(frozen=True, slots=True)
class _Base:
    oid: ObjectId
    content: bytes
    depth: int  # of the base itself (0: a full object)
    chain: tuple[ObjectId, ...]  # the objects a read of the base decodes


def read_chain(backend: Backend, oid: ObjectId, stored: bytes | None = None
               ) -> list[tuple[ObjectId, bytes]]:
    """The envelopes a read of `oid` decodes, from `oid` down to its full object: each delta
    one level above the next (its depth byte says so), or `CorruptObject`/`ObjectNotFound`."""
    chain = [(oid, stored if stored is not None else backend.get(oid))]
    while chain[-1][1][4:5] == bytes((codec.CODEC_DELTA,)):
        here, envelope = chain[-1]
        base_id, depth = codec.delta_header(envelope, here)
        if len(chain) > 1 and depth != _depth(chain[-2][1]) - 1:
            raise CorruptObject(chain[-2][0], "delta chain depths do not step down by one")
        try:
            chain.append((base_id, backend.get(base_id)))
        except ObjectNotFound:
            raise CorruptObject(here, f"its delta base {base_id.hex()} is missing") from None
    if len(chain) > 1 and _depth(chain[-2][1]) != 1:
        raise CorruptObject(chain[-2][0], "delta chain ends above depth 1")
    return chain


def _depth(envelope: bytes) -> int:
    return codec.delta_header(envelope)[1] if envelope[4:5] == bytes((codec.CODEC_DELTA,)) else 0


def decode_chain(chain: list[tuple[ObjectId, bytes]], refs: codec.RefResolver, *,
                 verify_each: bool = False) -> bytes:
    """The content at the top of a `read_chain`, verified against its id. `verify_each`:
    every level verified, so `CorruptObject` names the first that fails (a damaged base as
    itself); a read first goes without (one hash whatever the depth), and again with it only
    to name what failed. Only the level below is kept while the next is decoded."""
    content = b""
    top = len(chain) - 1
    for at, (oid, envelope) in enumerate(reversed(chain)):
        resolver: codec.RefResolver = refs if not at else _Known(content, refs)
        content = codec.decode_object(envelope, oid, refs=resolver)
        if (verify_each or at == top) and hash_bytes(content) != oid:
            if not verify_each and top:
                decode_chain(chain, refs, verify_each=True)  # raises for the first bad one
            raise CorruptObject(oid, "content does not match its id")
    return content


class _Known:
    """The resolver of one step up a chain: the base just decoded; dictionaries from the store."""

    __slots__ = ("_content", "_refs")

    def __init__(self, content: bytes, refs: codec.RefResolver) -> None:
        self._content = content
        self._refs = refs

    def base(self, oid: ObjectId) -> bytes:
        return self._content

    def dictionary(self, oid: ObjectId) -> Any:
        return self._refs.dictionary(oid)

    def member(self, block: ObjectId, offset: int, length: int, oid: ObjectId | None
               ) -> bytes:
        return self._refs.member(block, offset, length, oid)


def read_base(backend: Backend, oid: ObjectId, refs: codec.RefResolver) -> bytes:
    """The verified content of `oid`, a delta's base, read down its chain without recursion
    (a chain is bounded by its depth bytes, never by Python's stack)."""
    return decode_chain(read_chain(backend, oid), refs)


class DeltaEncoder:
    """Chooses, for a new blob with a hint, between its plain envelope and a delta."""

    __slots__ = ("_backend", "_level", "_options", "_raise_format", "_refs", "ledger")

    def __init__(self, backend: Backend, refs: codec.RefResolver, options: DeltaOptions,
                 level: int, ledger: DeltaLedger, raise_format: Callable[[], None]) -> None:
        self._backend = backend
        self._refs = refs
        self._options = options
        self._level = level
        self.ledger = ledger
        self._raise_format = raise_format

    def wants(self, size: int, hint: ObjectId | None) -> bool:
        """Whether content of `size` bytes with `hint` is worth trying as a delta."""
        options = self._options
        return (hint is not None and options.enabled and options.chain > 0
                and MIN_DELTA_SIZE <= size <= options.max_size)

    def encode(self, oid: ObjectId, data: bytes | memoryview, hint: ObjectId | None,
               plain: bytes) -> bytes:
        """What to store for `data` (id `oid`): a delta against `hint`'s version where it
        pays against `plain` (its plain envelope), else `plain`."""
        if hint is None or hint == oid or not self.wants(len(data), hint):
            return plain
        base = self._base(hint)
        if base is None:
            return plain
        frame = codec.delta_frame(base.content, data, self._level)
        stored = codec.delta_envelope(len(data), base.oid, base.depth + 1, frame)
        if len(stored) > len(plain) >> _PAYS_SHIFT:
            return plain
        # A racing gc keeps what was refreshed within its grace period: the chain this delta
        # needs stays until the delta is reachable (and gc follows it from there). A member
        # gone since it was read is no base.
        if not all(self._backend.refresh(member) for member in base.chain):
            return plain
        self._raise_format()
        self.ledger.record(oid, len(plain) - len(stored))
        return stored

    def _base(self, hint: ObjectId) -> _Base | None:
        """The object a delta on `hint` is made against: `hint` while it is less than the chain
        bound deep, else its chain's full object; None where it cannot serve (absent, damaged,
        too large)."""
        try:
            chain = read_chain(self._backend, hint)
            if codec.read_header(chain[-1][1], chain[-1][0])[1] > self._options.max_size:
                return None
            if len(chain) - 1 >= self._options.chain:
                del chain[:-1]  # only the full object
            content = decode_chain(chain, self._refs)
        except ObjstoreError:
            return None  # a damaged hint is no base; fsck and reads report it
        if len(content) > self._options.max_size:
            return None
        return _Base(chain[0][0], content, len(chain) - 1,
                     tuple(member for member, _ in chain))


class DeltaLedger:
    """What each delta saved over its plain envelope, for `ckpt stats`: one line per delta
    (`<id hex> <bytes>`) appended to the store's `deltas` file when it is chosen (before it is
    written: a line may name an object never stored, or one gc removed since; `saved` counts
    only those present). Append-only and small; gc rewrites it without the lines of objects
    gone (`prune`). A store without a directory keeps it in memory."""

    __slots__ = ("_memory", "_path")

    def __init__(self, path: str | None) -> None:
        self._path = path
        self._memory: dict[ObjectId, int] = {}

    def record(self, oid: ObjectId, saved: int) -> None:
        if self._path is None:
            self._memory[oid] = saved
            return
        fd = open_file(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, f"{oid.hex()} {saved}\n".encode("ascii"))
        finally:
            os.close(fd)

    def entries(self) -> dict[ObjectId, int]:
        if self._path is None:
            return dict(self._memory)
        try:
            fd = open_file(self._path, os.O_RDONLY)
        except FileNotFoundError:
            return {}
        with open(fd, "rb") as stream:
            text = stream.read()
        found: dict[ObjectId, int] = {}
        for line in text.split(b"\n"):
            oid_hex, _, saved = line.partition(b" ")
            if len(oid_hex) == 64 and saved.isdigit():  # a torn last line is skipped
                try:
                    found[ObjectId(bytes.fromhex(oid_hex.decode("ascii")))] = int(saved)
                except ValueError:
                    continue
        return found

    def saved(self, backend: Backend) -> int:
        return sum(saved for oid, saved in self.entries().items() if backend.has(oid))

    def prune(self, backend: Backend) -> None:
        """Drop the lines of deltas no longer stored (after a gc)."""
        entries = self.entries()
        kept = {oid: saved for oid, saved in entries.items() if backend.has(oid)}
        if self._path is None:
            self._memory = kept
            return
        if len(kept) == len(entries):
            return
        from ckpt.objstore.atomicfile import write_atomically  # noqa: PLC0415 (gc only)

        text = "".join(f"{oid.hex()} {saved}\n" for oid, saved in kept.items())
        write_atomically(self._path, text.encode("ascii"), fsync_file=False, fsync_dir=False,
                         mode=0o666)


HeadReader = Callable[[ObjectId], bytes]


def head_reader(backend: Backend) -> HeadReader:
    """A reader of the first `codec.REFS_PREFIX` bytes of a stored envelope (or all of a
    shorter one): one short read where the backend can (`HeadReading`). Asked once per walk:
    a protocol check costs more than the read."""
    if isinstance(backend, HeadReading):
        return partial(backend.get_head, size=codec.REFS_PREFIX)

    def read(oid: ObjectId) -> bytes:
        with backend.open(oid) as stream:
            return stream.read(codec.REFS_PREFIX)

    return read


def envelope_closure(backend: Backend, kept: Iterable[ObjectId]) -> set[ObjectId]:
    """The ids the envelopes of `kept` name (delta bases, dictionaries), and theirs in turn,
    that are not in `kept`: what gc must keep besides. One short read per object."""
    read = head_reader(backend)
    kept_set = set(kept)
    extra: set[ObjectId] = set()
    pending = list(kept_set)
    while pending:
        oid = pending.pop()
        try:
            refs = codec.envelope_refs(read(oid), oid)
        except ObjectNotFound:
            continue
        for ref in refs:
            if ref not in kept_set and ref not in extra:
                extra.add(ref)
                pending.append(ref)
    return extra


def missing_ref(backend: Backend, oid: ObjectId, read: HeadReader) -> str | None:
    """Why `oid` cannot be read for want of an object its envelope names (down its chain:
    one short read each, by `read` from `head_reader`), or None: fsck's structural check of
    a present object."""
    seen = 0
    here = oid
    while seen <= codec.MAX_DELTA_DEPTH:
        try:
            refs = codec.envelope_refs(read(here), here)
        except ObjectNotFound:
            return None  # removed since it was found: the caller's own check
        except CorruptObject as exc:
            return exc.reason if here == oid else f"it needs {here.hex()}, which is damaged"
        if not refs:
            return None
        for ref in refs[1:]:
            if not backend.has(ref):
                return f"it needs {ref.hex()}, which is missing"
        if not backend.has(refs[0]):
            return f"it needs {refs[0].hex()}, which is missing"
        here = refs[0]
        seen += 1
    return "its delta chain does not end"
