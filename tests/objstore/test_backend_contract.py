"""The `Backend` contract: every backend passes these tests unchanged.

A backend stores opaque bytes by id (it neither hashes nor verifies). To add a backend, write a
harness class (how to make one, how to age an object, how to plant a crash leftover) and add
one line to `HARNESSES`.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from typing import Protocol

import pytest

from ckpt.objstore import ObjectId, ObjectNotFound, hash_bytes
from ckpt.objstore.backend import (
    FSYNC_POLICIES,
    Backend,
    BulkBackend,
    FsyncPolicy,
    LocatedBackend,
)
from ckpt.objstore.local import LocalBackend
from ckpt.objstore.memory import MemoryBackend
from ckpt.objstore.pack import PackedBackend


class Harness(Protocol):
    backend: Backend

    def now(self) -> float: ...

    def age(self, oid: ObjectId, seconds: float) -> None:
        """Make `oid` look written `seconds` ago (relative to `now()`)."""

    def plant_temporary(self, age_seconds: float) -> bool:
        """Leave what an interrupted put leaves; False if the backend has no such thing."""

    def leftovers(self) -> list[str]:
        """Anything the backend holds besides committed objects (temp files...)."""

    def reopen(self) -> Backend:
        """A second instance over the same storage (persistence), or the same one for RAM."""


class LocalHarness:
    def __init__(self, root: str, fsync: FsyncPolicy) -> None:
        self.root = root
        self.fsync: FsyncPolicy = fsync
        self.backend: Backend = LocalBackend(root, fsync=fsync)
        self._planted = 0

    def now(self) -> float:
        return time.time()

    def _path(self, oid: ObjectId) -> str:
        text = oid.hex()
        return os.path.join(self.root, text[:2], text[2:])

    def age(self, oid: ObjectId, seconds: float) -> None:
        then = time.time() - seconds
        os.utime(self._path(oid), (then, then))

    def plant_temporary(self, age_seconds: float) -> bool:
        directory = os.path.join(self.root, "ab")
        os.makedirs(directory, exist_ok=True)
        self._planted += 1
        path = os.path.join(directory, f".tmp-planted{self._planted}")
        with open(path, "wb") as out:
            out.write(b"half an object")
        then = time.time() - age_seconds
        os.utime(path, (then, then))
        return True

    def leftovers(self) -> list[str]:
        found = []
        for directory, _dirs, files in os.walk(self.root):
            found.extend(os.path.join(directory, name) for name in files
                         if len(name) != 62 or name.startswith("."))
        return found

    def reopen(self) -> Backend:
        return LocalBackend(self.root, fsync=self.fsync)


class MemoryHarness:
    def __init__(self) -> None:
        self.clock = 1_700_000_000.0
        self.backend: Backend = MemoryBackend(clock=lambda: self.clock)

    def now(self) -> float:
        return self.clock

    def age(self, oid: ObjectId, seconds: float) -> None:
        self.clock += seconds  # everything ages together; enough for these tests

    def plant_temporary(self, age_seconds: float) -> bool:
        return False

    def leftovers(self) -> list[str]:
        return []

    def reopen(self) -> Backend:
        return self.backend


class PackHarness(LocalHarness):
    """Packs, with loose files only for the first `loose_puts` puts (0: everything packed)."""

    def __init__(self, root: str, fsync: FsyncPolicy, loose_puts: int = 0) -> None:
        super().__init__(root, fsync)
        self.loose_puts = loose_puts
        self.backend = self.reopen()

    def _path(self, oid: ObjectId) -> str:
        return self.backend.find_location(oid)  # type: ignore[attr-defined,no-any-return]

    def leftovers(self) -> list[str]:
        packs = re.compile(r".*/packs/pack-[0-9a-f]{20}\.(pack|idx)")
        return [path for path in super().leftovers() if not packs.fullmatch(path)]

    def reopen(self) -> Backend:
        return PackedBackend(self.root, fsync=self.fsync, loose_puts=self.loose_puts)


HARNESSES = [
    *(
        pytest.param(
            lambda tmp, policy=policy: LocalHarness(str(tmp / "objects"), policy),
            id=f"local-{policy}",
        )
        for policy in FSYNC_POLICIES
    ),
    pytest.param(lambda tmp: MemoryHarness(), id="memory"),
    *(
        pytest.param(
            lambda tmp, policy=policy: PackHarness(str(tmp / "objects"), policy),
            id=f"pack-{policy}",
        )
        for policy in FSYNC_POLICIES
    ),
    pytest.param(lambda tmp: PackHarness(str(tmp / "objects"), "batch", 7), id="pack-mixed"),
]


@pytest.fixture(params=HARNESSES)
def harness(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[Harness]:
    made: Harness = request.param(tmp_path)
    yield made
    made.backend.close()


@pytest.fixture
def backend(harness: Harness) -> Backend:
    return harness.backend


def oid_for(label: bytes) -> ObjectId:
    return hash_bytes(label)


# -- put / get / has / open -----------------------------------------------------------------


def test_put_then_get_returns_the_stored_bytes(backend: Backend) -> None:
    oid = oid_for(b"one")
    assert backend.put(oid, b"stored bytes \x00\xff") is True
    assert backend.get(oid) == b"stored bytes \x00\xff"
    assert backend.has(oid)


def test_backend_stores_bytes_opaquely_without_verifying_the_id(backend: Backend) -> None:
    oid = oid_for(b"the id says one thing")
    backend.put(oid, b"the bytes say another")
    assert backend.get(oid) == b"the bytes say another"


def test_empty_object_round_trips(backend: Backend) -> None:
    oid = oid_for(b"empty")
    assert backend.put(oid, b"")
    assert backend.get(oid) == b""
    assert backend.stat(oid).size == 0


def test_absent_object_is_not_had_and_get_open_stat_raise_object_not_found(
    backend: Backend,
) -> None:
    oid = oid_for(b"never stored")
    assert not backend.has(oid)
    for call in (backend.get, backend.open, backend.stat):
        with pytest.raises(ObjectNotFound) as caught:
            call(oid)
        assert caught.value.oid == oid
        assert isinstance(caught.value, KeyError)
        assert oid.hex() in str(caught.value)


def test_open_streams_the_stored_bytes_in_parts(backend: Backend) -> None:
    oid = oid_for(b"streamed")
    stored = bytes(range(256)) * 1000
    backend.put(oid, stored)
    with backend.open(oid) as stream:
        head = stream.read(10)
        rest = stream.read()
    assert head + rest == stored


def test_objects_are_independent(backend: Backend) -> None:
    ids = {oid_for(bytes([n])): bytes([n]) * n for n in range(50)}
    for oid, stored in ids.items():
        backend.put(oid, stored)
    for oid, stored in ids.items():
        assert backend.get(oid) == stored


# -- put of an existing object ----------------------------------------------------------------


def test_put_of_existing_object_returns_false_and_refreshes_mtime(harness: Harness) -> None:
    backend = harness.backend
    oid = oid_for(b"dup")
    assert backend.put(oid, b"first") is True
    harness.age(oid, 3600)
    assert backend.stat(oid).mtime <= harness.now() - 3500
    assert backend.put(oid, b"first") is False
    assert backend.stat(oid).mtime >= harness.now() - 60
    assert backend.get(oid) == b"first"


def test_put_stream_of_existing_object_returns_false_refreshes_and_keeps_content(
    harness: Harness,
) -> None:
    backend = harness.backend
    oid = oid_for(b"dup-stream")
    backend.put(oid, b"original")
    harness.age(oid, 3600)
    assert backend.put_stream(oid, iter([b"other ", b"bytes"])) is False
    assert backend.stat(oid).mtime >= harness.now() - 60
    assert backend.get(oid) == b"original"


def test_refresh_marks_present_object_as_just_written(harness: Harness) -> None:
    backend = harness.backend
    oid = oid_for(b"refresh")
    backend.put(oid, b"x")
    harness.age(oid, 7200)
    assert backend.stat(oid).mtime <= harness.now() - 7000
    assert backend.refresh(oid) is True
    assert backend.stat(oid).mtime >= harness.now() - 60


def test_refresh_of_absent_object_returns_false_and_creates_nothing(backend: Backend) -> None:
    oid = oid_for(b"absent")
    assert backend.refresh(oid) is False
    assert not backend.has(oid)
    assert list(backend.iter_ids()) == []


# -- put_stream -------------------------------------------------------------------------------


def test_put_stream_stores_the_concatenated_chunks(backend: Backend) -> None:
    oid = oid_for(b"chunks")
    chunks = [bytes([n]) * (1000 + n) for n in range(40)]
    assert backend.put_stream(oid, iter(chunks)) is True
    assert backend.get(oid) == b"".join(chunks)
    assert backend.stat(oid).size == sum(map(len, chunks))


def test_put_stream_accepts_a_one_shot_generator_and_empty_chunks(backend: Backend) -> None:
    oid = oid_for(b"gen")
    assert backend.put_stream(oid, (part for part in (b"", b"a", b"", b"bc", b""))) is True
    assert backend.get(oid) == b"abc"


class ChunkSourceFailed(Exception):
    pass


def failing_chunks(good: int) -> Iterator[bytes]:
    for n in range(good):
        yield bytes([n]) * 65536
    raise ChunkSourceFailed("source went away")


@pytest.mark.parametrize("good_chunks", [0, 1, 5])
def test_put_stream_whose_chunks_raise_midway_stores_nothing_and_leaves_no_temp(
    harness: Harness, good_chunks: int
) -> None:
    backend = harness.backend
    keep = oid_for(b"bystander")
    backend.put(keep, b"already here")
    oid = oid_for(b"interrupted")
    with pytest.raises(ChunkSourceFailed):
        backend.put_stream(oid, failing_chunks(good_chunks))
    assert not backend.has(oid)
    with pytest.raises(ObjectNotFound):
        backend.get(oid)
    assert list(backend.iter_ids()) == [keep]
    assert harness.leftovers() == []
    # The failed put poisons nothing: the same id can be stored afterwards.
    assert backend.put_stream(oid, iter([b"second ", b"try"])) is True
    assert backend.get(oid) == b"second try"


# -- optional capabilities -------------------------------------------------------------------

# Which backends declare which capability: a method renamed away from its protocol would make
# the store fall back to plain puts silently, so the declaration itself is pinned.
CAPABLE = {"memory": set(), "local": {LocatedBackend}, "pack": {BulkBackend, LocatedBackend}}


def test_backend_declares_exactly_its_capabilities(
    request: pytest.FixtureRequest, backend: Backend
) -> None:
    kind = request.node.callspec.id.split("-")[0]
    assert isinstance(backend, Backend)
    declared = {cap for cap in (BulkBackend, LocatedBackend) if isinstance(backend, cap)}
    assert declared == CAPABLE[kind]


def test_bulk_puts_match_one_put_each(backend: Backend) -> None:
    if not isinstance(backend, BulkBackend):
        pytest.skip("not a BulkBackend")
    stored = [(oid_for(bytes([n])), bytes([n]) * (n * 100)) for n in range(12)]
    assert backend.put(*stored[2]) is True
    assert backend.put_absent(*stored[0]) is True
    assert backend.put_absent(*stored[0]) is False
    # already stored, new, and the same id twice in one batch
    assert backend.put_absent_many([*stored, stored[5]]) == (
        [n not in (0, 2) for n in range(12)] + [False])
    for oid, data in stored:
        assert backend.get(oid) == data
    assert sorted(backend.iter_ids()) == sorted(oid for oid, _ in stored)
    assert backend.put_absent_many([]) == []


# -- delete / iter_ids / stat -----------------------------------------------------------------


def test_delete_returns_bytes_freed_and_removes_the_object(backend: Backend) -> None:
    oid = oid_for(b"doomed")
    backend.put(oid, b"12345")
    assert backend.delete(oid) == 5
    assert not backend.has(oid)
    with pytest.raises(ObjectNotFound):
        backend.get(oid)


def test_delete_of_absent_object_returns_zero(backend: Backend) -> None:
    assert backend.delete(oid_for(b"nothing")) == 0


def test_iter_ids_lists_exactly_the_stored_objects(backend: Backend) -> None:
    assert list(backend.iter_ids()) == []
    ids = {oid_for(str(n).encode()) for n in range(120)}  # spreads over many fan-out dirs
    for oid in ids:
        backend.put(oid, b"x")
    listed = list(backend.iter_ids())
    assert len(listed) == len(ids)
    assert set(listed) == ids
    gone = sorted(ids)[:10]
    for oid in gone:
        backend.delete(oid)
    assert set(backend.iter_ids()) == ids - set(gone)


def test_objects_can_be_deleted_while_iterating_ids(backend: Backend) -> None:
    ids = {oid_for(str(n).encode()) for n in range(40)}
    for oid in ids:
        backend.put(oid, b"x")
    seen = set()
    for oid in backend.iter_ids():
        seen.add(oid)
        backend.delete(oid)
    assert seen == ids
    assert list(backend.iter_ids()) == []


def test_stat_reports_stored_size_and_a_recent_mtime(harness: Harness) -> None:
    backend = harness.backend
    oid = oid_for(b"stat")
    backend.put(oid, b"z" * 777)
    info = backend.stat(oid)
    assert info.size == 777
    assert abs(info.mtime - harness.now()) < 60


# -- sync / persistence / temporaries ---------------------------------------------------------


def test_sync_keeps_objects_readable_and_is_repeatable(harness: Harness) -> None:
    backend = harness.backend
    oid = oid_for(b"durable")
    backend.put(oid, b"durable bytes")
    backend.sync()
    backend.sync()
    assert backend.get(oid) == b"durable bytes"
    assert harness.reopen().get(oid) == b"durable bytes"


def test_sync_with_nothing_written_succeeds(backend: Backend) -> None:
    backend.sync()


def test_sweep_temporaries_removes_only_leftovers_older_than_the_cutoff(
    harness: Harness,
) -> None:
    backend = harness.backend
    old_object = oid_for(b"old object")
    backend.put(old_object, b"keep me")
    harness.age(old_object, 10 * 86400)
    if not harness.plant_temporary(age_seconds=7200):
        assert backend.sweep_temporaries(harness.now() + 10 * 86400) == 0
        assert backend.get(old_object) == b"keep me"
        return
    harness.plant_temporary(age_seconds=10)
    assert len(harness.leftovers()) == 2
    assert list(backend.iter_ids()) == [old_object]  # temporaries are never listed as objects
    assert backend.sweep_temporaries(harness.now() - 3600) == 1
    assert len(harness.leftovers()) == 1
    assert backend.sweep_temporaries(harness.now() + 3600) == 1
    assert harness.leftovers() == []
    assert backend.get(old_object) == b"keep me"  # objects are never swept, however old


def test_a_batch_sync_fsyncs_exactly_the_new_objects_then_their_directories(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    root = str(tmp_path) + "/objects"
    os.makedirs(root)
    backend = LocalBackend(root, fsync="batch")
    blobs = [b"object %d" % n for n in range(12)]
    oids = [hash_bytes(data) for data in blobs]
    for oid, data in zip(oids, blobs):
        backend.put(oid, data)
    os.unlink(f"{root}/{oids[0].hex()[:2]}/{oids[0].hex()[2:]}")  # removed before the sync
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    backend.sync()
    backend.sync()  # nothing new: nothing to do

    files = {f"{root}/{oid.hex()[:2]}/{oid.hex()[2:]}" for oid in oids[1:]}
    dirs = {f"{root}/{oid.hex()[:2]}" for oid in oids} | {root}
    assert sorted(synced[:len(files)]) == sorted(files)  # every file, before any directory
    assert sorted(synced[len(files):]) == sorted(dirs)
