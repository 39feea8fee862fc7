"""Shared helpers of the remote tests: seeded local stores and connecting to a test bucket.
Not a test module: the tests import it by name (tests/remote is on pytest's `pythonpath`)."""

from __future__ import annotations

import random
from pathlib import Path

from seaweed import Bucket

from ckpt.objstore import ObjectId, ObjectStore
from ckpt.objstore.remote import RemoteRepo, parse_remote_url


def seeded_store(path: Path, count: int, seed: int, *, big: int = 0) -> tuple[ObjectStore,
                                                                               list[ObjectId]]:
    """A packed store of `count` seeded objects of mixed sizes and compressibility (and `big`
    objects of 1-3 MiB), synced; their ids in order."""
    store = ObjectStore.init(str(path))
    rng = random.Random(seed)
    oids = []
    for n in range(count):
        size = rng.choice((0, 1, 50, 300, 4000, 20000))
        data = (rng.randbytes(size) if n % 2 else
                (f"line {n} " * (size // 8 + 1)).encode()[:size] + n.to_bytes(4, "little"))
        oids.append(store.put_bytes(data))
    for _ in range(big):
        oids.append(store.put_bytes(rng.randbytes(rng.randrange(1 << 20, 3 << 20))))
    store.sync()
    return store, list(dict.fromkeys(oids))


def connect(bucket: Bucket, cache: Path | None = None, *, create: bool = True,
            prefix: str = "repo", **options: object) -> RemoteRepo:
    spec = parse_remote_url(f"{bucket.url}/{prefix}", endpoint=bucket.endpoint)
    return RemoteRepo.connect(spec, None if cache is None else str(cache), create=create,
                              **options)  # type: ignore[arg-type]
