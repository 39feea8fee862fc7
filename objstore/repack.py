"""Rewriting packs: drop deleted records, fold loose objects and small packs into new packs.

Used by `PackedBackend`: at `sync()` for deletions and, once a store holds more than a few
small packs (one per agent turn), to fold the smallest of them together (`packs_to_fold`, after
git's geometric repack); at `compact()` for everything. The order
of steps is the whole point: the new packs are written, made durable and indexed first; only
then are the sources removed (each pack before its index, so a reader never loads an index
whose pack is gone). A crash in between leaves duplicates, never a loss.

A source pack is rewritten only while this process holds its lock (no other compactor is at
it) and, for deletions, only if its mtime is unchanged since the delete: a newer mtime means
another process refreshed one of its objects (it may be about to reference it again), so the
deletions in that pack are dropped and it is kept whole. Nothing here decides what is garbage.
"""

from __future__ import annotations

import os
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass

from ckpt.objstore.atomicfile import sync_directory
from ckpt.objstore.backend import FsyncPolicy
from ckpt.objstore.errors import ObjectNotFound
from ckpt.objstore.ids import ObjectId
from ckpt.objstore.local import LocalBackend
from ckpt.objstore.packfile import (
    CorruptIndex,
    Entry,
    PackWriter,
    index_entries,
    index_path,
    iter_slice,
    list_packs,
    open_pack,
    pack_path,
    try_lock,
)

_CHUNK = 1 << 20


@dataclass(slots=True)
class Deletion:
    mtime_ns: int | None  # the pack's mtime at its first delete; None: this instance's own pack
    oids: set[bytes]


@dataclass(slots=True)
class _Source:
    name: str
    fd: int
    keep: list[Entry]
    size: int


def _take(directory: str, name: str, expect_mtime_ns: int | None) -> tuple[int, list[Entry]] | None:
    """Open and lock a published pack (and read its index), or None to leave it alone."""
    try:
        fd = open_pack(pack_path(directory, name))
    except FileNotFoundError:
        return None
    try:
        if try_lock(fd) and expect_mtime_ns in (None, os.fstat(fd).st_mtime_ns):
            return fd, index_entries(directory, name)
    except (FileNotFoundError, CorruptIndex):
        pass
    os.close(fd)
    return None


def compact_packs(
    directory: str,
    loose: LocalBackend,
    deleted: Mapping[str, Deletion],
    *,
    fsync: FsyncPolicy,
    pack_size: int,
    repack: bool,
    packed: Container[bytes],
) -> int:
    """Rewrite the packs named in `deleted` without those records; with `repack`, also move
    every loose object and every pack smaller than `pack_size / 4` into new packs.

    `packed` answers whether an id is in a pack that stays (a loose copy of it is dropped).
    Returns the apparent bytes reclaimed (sources removed minus packs written).

    Built to work on a full disk: packs left with no live record are removed first (that
    needs no room), then each pack with deletions is rewritten on its own and removed before
    the next, those needing the least room first, so a rewrite needs room for one pack's live
    records at a time and frees its garbage before the next starts. A rewrite that runs out
    of space removes its partial new pack and raises, leaving the packs not yet rewritten as
    they were (their deletions are dropped: the objects stay, garbage for the next gc).
    """
    dead: set[bytes] = set()
    for deletion in deleted.values():
        dead |= deletion.oids
    sources: list[_Source] = []
    try:
        for name, deletion in sorted(deleted.items()):
            taken = _take(directory, name, deletion.mtime_ns)
            if taken is not None:
                keep = [entry for entry in taken[1] if entry[0] not in dead]
                sources.append(_Source(name, taken[0], keep, os.fstat(taken[0]).st_size))
        reclaimed = _remove_sources(directory, [s for s in sources if not s.keep], fsync)
        for source in sorted((s for s in sources if s.keep), key=_kept_bytes):
            reclaimed += _rewrite(directory, loose, [source], [], fsync, pack_size, frozenset())
        for source in sources:
            if source.fd >= 0:
                os.close(source.fd)
        sources = []
        if not repack:
            return reclaimed
        for name in _small_packs(directory, pack_size // 4, set()):
            taken = _take(directory, name, None)
            if taken is not None:
                sources.append(_Source(name, taken[0], taken[1], os.fstat(taken[0]).st_size))
        loose_ids = list(loose.iter_ids())
        if len(loose_ids) + len(sources) < 2:
            return reclaimed  # one loose object or one small pack: nothing to fold
        return reclaimed + _rewrite(directory, loose, sources, loose_ids, fsync, pack_size,
                                    packed)
    finally:
        for source in sources:
            if source.fd >= 0:
                os.close(source.fd)


def _kept_bytes(source: _Source) -> int:
    return sum(length for _, _, length in source.keep)


def packs_to_fold(sizes: Mapping[str, int], *, keep_at_most: int, factor: int = 2) -> list[str]:
    """Which of these packs (name -> bytes) to fold into one; none while there are no more
    than `keep_at_most`. The packs kept each outweigh `factor` times all smaller packs together,
    so at most ~log(total / smallest) of them remain, and a folded pack is at least 1.5 times
    the largest it absorbed: a byte is rewritten O(log n) times over a session, not per turn."""
    if len(sizes) <= keep_at_most:
        return []
    ordered = sorted(sizes, key=lambda name: (sizes[name], name))
    split = smaller = 0
    for position, name in enumerate(ordered):
        if sizes[name] < factor * smaller:
            split = position + 1  # too light to stand alone: it and everything below fold
        smaller += sizes[name]
    return ordered[:split] if split >= 2 else []


def fold_packs(directory: str, names: Iterable[str], *, fsync: FsyncPolicy, pack_size: int,
               loose: LocalBackend) -> int:
    """Rewrite these published packs into new ones (a pack another compactor holds is left
    alone); returns the apparent bytes reclaimed, as `compact_packs` does."""
    sources: list[_Source] = []
    try:
        for name in sorted(names):
            taken = _take(directory, name, None)
            if taken is not None:
                sources.append(_Source(name, taken[0], taken[1], os.fstat(taken[0]).st_size))
        if len(sources) < 2:
            return 0
        return _rewrite(directory, loose, sources, [], fsync, pack_size, frozenset())
    finally:
        for source in sources:
            if source.fd >= 0:
                os.close(source.fd)


def _small_packs(directory: str, below: int, skip: set[str]) -> list[str]:
    small = []
    for name in sorted(list_packs(directory)[0] - skip):
        try:
            if os.stat(pack_path(directory, name)).st_size < below:
                small.append(name)
        except FileNotFoundError:
            continue
    return small


def _rewrite(
    directory: str,
    loose: LocalBackend,
    sources: list[_Source],
    loose_ids: list[ObjectId],
    fsync: FsyncPolicy,
    pack_size: int,
    packed: Container[bytes],
) -> int:
    written = 0
    writer: PackWriter | None = None
    seen: set[bytes] = set()

    def add(oid: ObjectId, chunks: Iterator[bytes]) -> None:
        nonlocal writer, written
        if writer is None:
            os.makedirs(directory, exist_ok=True)
            writer = PackWriter(directory, fsync)
        writer.append_stream(oid, chunks)
        seen.add(oid)
        if writer.size >= pack_size:
            written += writer.size
            writer.seal()
            writer = None

    try:
        for source in sources:
            for oid, offset, length in source.keep:
                if oid not in seen:
                    add(oid, iter_slice(source.fd, offset, length))
        moved: list[ObjectId] = []
        for oid in loose_ids:
            if oid not in seen and oid not in packed:
                try:
                    with loose.open(oid) as stream:
                        add(oid, iter(lambda: stream.read(_CHUNK), b""))
                except ObjectNotFound:
                    continue  # deleted meanwhile
            moved.append(oid)
        if writer is not None:
            written += writer.size
            writer.seal()
            writer = None
    except BaseException:
        if writer is not None:
            writer.abandon()
        raise
    # Everything kept is now in published packs: the sources can go.
    removed = _remove_sources(directory, sources, fsync)
    for oid in moved:
        removed += loose.delete(oid)
    return removed - written


def _remove_sources(directory: str, sources: list[_Source], fsync: FsyncPolicy) -> int:
    """Unlink these packs (each before its index, so no reader loads an index whose pack is
    gone) and close them (a file's blocks are freed with its last descriptor); returns their
    bytes."""
    removed = 0
    for source in sources:
        if source.fd >= 0:
            os.close(source.fd)
            source.fd = -1
        for path in (pack_path(directory, source.name), index_path(directory, source.name)):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        removed += source.size
    if sources and fsync != "none":
        sync_directory(directory)
    return removed
