"""Object store put/get throughput on two named, seeded data shapes.

Shapes (at CKPT_BENCH_SCALE=1):
- `many-small`: 10,000 blobs of 1-8 KiB (seeded uniform sizes), half source-like text, half
  random bytes: per-object overhead (file creation, fan-out directories, compression setup).
- `few-large`: 3 blobs of 64 MiB: text, random, and alternating 1 MiB blocks of both: the
  streaming path (two read passes, chunked zstd, verify-at-end reads).

Put = `put_file` of every source file into an empty store (fsync policy `batch`, so one
`sync()` at the end, as a checkpoint does). Get = verified reads from a store holding the
shape, page cache warm: `get_bytes` for small blobs, `copy_to` into a hashing sink for large
ones. Every benchmark asserts what it measured round-trips. `extra_info["mb_per_s"]` is the
content bytes (10^6 B = 1 MB) per second of the median round; puts also report the share of
the final `sync()` (`sync_seconds_median`, `mb_per_s_before_sync`), because syncfs flushes
everything dirty on the filesystem and so depends on what else the machine is writing.
"""

from __future__ import annotations

import os
import random
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3
import pytest

from ckpt.objstore import ObjectId, ObjectStore, StoreOptions

SEED = 0x0C4E_C4B7
KIB, MIB = 1 << 10, 1 << 20


# -- seeded data shapes -----------------------------------------------------------------------


def _vocabulary(rng: random.Random) -> list[bytes]:
    letters = b"abcdefghijklmnopqrstuvwxyz_"
    words = [bytes(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(3000)]
    return words + [b"\n", b"\n    ", b"\n        ", b"(", b")", b":", b" = ", b", ", b"."] * 40


def text_like(rng: random.Random, vocab: list[bytes], size: int) -> bytes:
    """Source-like text: zstd level 3 shrinks it about 3-4x, as it does real code."""
    out = b" ".join(rng.choices(vocab, k=size // 5 + 16))
    while len(out) < size:
        out += b" ".join(rng.choices(vocab, k=size // 5 + 16))
    return out[:size]


@dataclass(frozen=True)
class Shape:
    name: str
    files: list[Path]
    expected: list[ObjectId]  # b3sum of each file, computed independently of the store
    total_bytes: int


def write_shape(name: str, blobs: Iterator[bytes], directory: Path) -> Shape:
    directory.mkdir(parents=True)
    files, expected, total = [], [], 0
    for index, data in enumerate(blobs):
        path = directory / f"{index:06d}"
        path.write_bytes(data)
        files.append(path)
        expected.append(ObjectId(blake3.blake3(data).digest()))
        total += len(data)
    return Shape(name, files, expected, total)


def many_small(scale: float) -> Iterator[bytes]:
    rng = random.Random(SEED)
    vocab = _vocabulary(rng)
    for index in range(max(2, round(10_000 * scale))):
        size = rng.randint(1 * KIB, 8 * KIB)
        if index % 2:
            yield rng.randbytes(size)
        else:
            header = b"# blob %d\n" % index  # keeps every text blob distinct
            yield header + text_like(rng, vocab, size - len(header))


def few_large(scale: float) -> Iterator[bytes]:
    rng = random.Random(SEED + 1)
    vocab = _vocabulary(rng)
    size = max(64 * KIB, int(64 * MIB * scale))
    yield text_like(rng, vocab, size)
    yield rng.randbytes(size)
    mixed = bytearray()
    for block in range(0, size, MIB):
        part = min(MIB, size - block)
        mixed += text_like(rng, vocab, part) if block // MIB % 2 == 0 else rng.randbytes(part)
    yield bytes(mixed)


SHAPES: dict[str, Callable[[float], Iterator[bytes]]] = {
    "many-small": many_small,
    "few-large": few_large,
}


@pytest.fixture(scope="module", params=list(SHAPES))
def shape(
    request: pytest.FixtureRequest, bench_scale: float, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Shape]:
    root = tmp_path_factory.mktemp(f"bench-objstore-{request.param}")
    made = write_shape(request.param, SHAPES[request.param](bench_scale), root / "source")
    yield made
    shutil.rmtree(root)


# -- helpers ----------------------------------------------------------------------------------


def report(
    benchmark: Any, shape: Shape, op: str, seconds: list[float], api: str, bench_scale: float
) -> None:
    median = statistics.median(seconds)
    benchmark.extra_info.update(
        shape=shape.name,
        op=op,
        api=api,
        objects=len(shape.files),
        bytes=shape.total_bytes,
        scale=bench_scale,
        fsync="batch",
        rounds=len(seconds),
        seconds_median=round(median, 4),
        mb_per_s=round(shape.total_bytes / median / 1e6, 1),
    )


class HashingSink:
    """A write-only stream that hashes and counts what `copy_to` writes (no disk in the way)."""

    def __init__(self) -> None:
        self.hasher = blake3.blake3()
        self.length = 0

    def write(self, data: bytes) -> int:
        self.hasher.update(data)
        self.length += len(data)
        return len(data)


# -- benchmarks -------------------------------------------------------------------------------


def test_put_throughput(benchmark: Any, shape: Shape, bench_scale: float, tmp_path: Path) -> None:
    benchmark.group = f"objstore-put-{shape.name}"
    seconds: list[float] = []
    sync_seconds: list[float] = []  # syncfs flushes the whole filesystem: noisy on shared disks
    rounds = iter(range(1_000_000))

    def fresh_store() -> tuple[tuple[ObjectStore], dict[str, Any]]:
        return (ObjectStore.init(str(tmp_path / f"store-{next(rounds)}"), StoreOptions()),), {}

    def put_all(store: ObjectStore) -> tuple[ObjectStore, list[ObjectId]]:
        started = time.perf_counter()
        oids = [store.put_file(path).oid for path in shape.files]
        synced = time.perf_counter()
        store.sync()
        seconds.append(time.perf_counter() - started)
        sync_seconds.append(time.perf_counter() - synced)
        return store, oids

    def drop(store: ObjectStore) -> None:
        store.close()
        shutil.rmtree(os.path.dirname(store.backend.path))  # type: ignore[attr-defined]

    store, oids = benchmark.pedantic(put_all, setup=fresh_store, teardown=drop, rounds=3)
    report(benchmark, shape, "put", seconds, "put_file", bench_scale)
    before_sync = statistics.median(a - b for a, b in zip(seconds, sync_seconds))
    benchmark.extra_info.update(
        sync_seconds_median=round(statistics.median(sync_seconds), 4),
        mb_per_s_before_sync=round(shape.total_bytes / before_sync / 1e6, 1),
    )
    assert oids == shape.expected
    if os.path.isdir(os.path.dirname(store.backend.path)):  # disabled mode skips teardown
        assert sorted(store.backend.iter_ids()) == sorted(set(shape.expected))
        for oid, path in zip(oids[:50], shape.files):
            assert store.get_bytes(oid) == path.read_bytes()
        drop(store)


def test_get_throughput(benchmark: Any, shape: Shape, bench_scale: float, tmp_path: Path) -> None:
    benchmark.group = f"objstore-get-{shape.name}"
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions())
    for path, oid in zip(shape.files, shape.expected):
        assert store.put_file(path).oid == oid
    store.sync()
    seconds: list[float] = []
    large = shape.total_bytes / len(shape.files) > StoreOptions().stream_threshold

    def get_small() -> list[bytes]:
        started = time.perf_counter()
        blobs = [store.get_bytes(oid) for oid in shape.expected]
        seconds.append(time.perf_counter() - started)
        return blobs

    def get_large() -> list[tuple[bytes, int]]:
        started = time.perf_counter()
        sinks = []
        for oid in shape.expected:
            sink = HashingSink()
            store.copy_to(oid, sink)  # type: ignore[arg-type]
            sinks.append((sink.hasher.digest(), sink.length))
        seconds.append(time.perf_counter() - started)
        return sinks

    if large:
        got = benchmark.pedantic(get_large, rounds=3)
        assert got == [(oid, path.stat().st_size) for oid, path in zip(shape.expected, shape.files)]
    else:
        got = benchmark.pedantic(get_small, rounds=5)
        assert len(got) == len(shape.files)
        for data, path in zip(got, shape.files):
            assert data == path.read_bytes()
    report(benchmark, shape, "get", seconds, "copy_to" if large else "get_bytes", bench_scale)
    store.close()
