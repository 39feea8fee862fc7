"""Shared fixtures for the objstore tests: real stores in temp dirs, seeded content, sample trees.

Helpers are exposed as session-scoped fixtures, not imported: `tests/` directories are not
packages, and session scope lets hypothesis tests use them.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from ckpt.objstore import EntryKind, ObjectId, ObjectStore, StoreOptions, Tree, TreeEntry
from ckpt.objstore.memory import MemoryBackend

_WORDS = (
    b"def",
    b"return",
    b"self",
    b"import",
    b"class",
    b"None",
    b"for",
    b"in",
    b"if",
    b"else",
    b"checkpoint",
    b"restore",
    b"tree",
    b"blob",
    b"object",
    b"store",
    b"value",
    b"index",
    b"    ",
    b"(",
    b")",
    b":",
    b"=",
    b"+=",
    b"0",
    b"1",
    b"42",
    b"# comment",
    b"path",
    b"data",
)


def make_content(kind: str, size: int, seed: int) -> bytes:
    """Seeded content of an exact size.

    `random`: incompressible; `text`: source-like lines (zstd shrinks it a lot);
    `sparse`: zero runs with random blocks.
    """
    rng = random.Random(seed)
    if kind == "random":
        return rng.randbytes(size)
    if kind == "text":
        pool = bytearray()
        while len(pool) < min(size, 64 << 10):
            line = b" ".join(rng.choice(_WORDS) for _ in range(rng.randrange(1, 12)))
            pool += line + b"\n"
        if not pool:
            return b""
        repeats = size // len(pool) + 1
        return bytes(pool * repeats)[:size]
    if kind == "sparse":
        out = bytearray(size)
        block = 4096
        for offset in range(0, size, block * 16):
            if rng.random() < 0.3:
                out[offset : offset + block] = rng.randbytes(min(block, size - offset))
        return bytes(out)
    raise ValueError(kind)


@pytest.fixture(scope="session")
def content() -> Callable[[str, int, int], bytes]:
    return make_content


@pytest.fixture
def local_store(tmp_path: os.PathLike[str]) -> Iterator[ObjectStore]:
    """A loose-layout store: one file per object, for tests that reach for object files."""
    store = ObjectStore.init(os.path.join(tmp_path, "store"), StoreOptions(layout="loose"))
    yield store
    store.close()


class FakeClock:
    """A settable clock for MemoryBackend mtimes and GC `now`."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def memory_store(clock: FakeClock) -> ObjectStore:
    return ObjectStore(MemoryBackend(clock=clock), StoreOptions())


def object_path(store: ObjectStore, oid: ObjectId) -> str:
    """Where a LocalBackend store keeps `oid` (the layout is the backend's, pinned here)."""
    path: str = store.backend.path  # type: ignore[attr-defined]
    text = oid.hex()
    return os.path.join(path, text[:2], text[2:])


@pytest.fixture(scope="session")
def object_file() -> Callable[[ObjectStore, ObjectId], str]:
    return object_path


@dataclass(frozen=True)
class SampleTrees:
    """root -> {a.txt, shared/ -> {x.bin, link}, sub/ -> {shared/ (same tree), gone (tombstone)}}"""

    root: ObjectId
    sub: ObjectId
    shared: ObjectId
    blob_a: ObjectId
    blob_x: ObjectId

    @property
    def trees(self) -> set[ObjectId]:
        return {self.root, self.sub, self.shared}

    @property
    def blobs(self) -> set[ObjectId]:
        return {self.blob_a, self.blob_x}

    @property
    def all(self) -> set[ObjectId]:
        return self.trees | self.blobs


def build_sample(store: ObjectStore, tag: bytes = b"") -> SampleTrees:
    blob_a = store.put_bytes(b"alpha file " * 50 + tag)
    blob_x = store.put_bytes(bytes(range(256)) * 8 + tag)
    shared = store.put_tree(
        Tree.build(
            [
                TreeEntry(b"x.bin", EntryKind.EXECUTABLE, blob_x, None, 2048 + len(tag)),
                TreeEntry(b"link", EntryKind.SYMLINK, None, b"../a.txt", 0),
            ]
        )
    )
    sub = store.put_tree(
        Tree.build(
            [
                TreeEntry(b"shared", EntryKind.TREE, shared, None, 2048 + len(tag)),
                TreeEntry(b"gone", EntryKind.TOMBSTONE),
            ]
        )
    )
    root = store.put_tree(
        Tree.build(
            [
                TreeEntry(b"a.txt", EntryKind.FILE, blob_a, None, 550 + len(tag)),
                TreeEntry(b"shared", EntryKind.TREE, shared, None, 2048 + len(tag)),
                TreeEntry(b"sub", EntryKind.TREE, sub, None, 2048 + len(tag)),
            ]
        )
    )
    return SampleTrees(root, sub, shared, blob_a, blob_x)


@pytest.fixture(scope="session")
def sample_builder() -> Callable[..., SampleTrees]:
    return build_sample
