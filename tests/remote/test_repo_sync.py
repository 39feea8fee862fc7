"""The remote's indexes are listed and loaded once per lock hold: a fresh machine's restore
(a fetch per tree level, then the blobs) lists `index/` once, and a fetch of an object another
pusher indexed since lists it again. Against a real SeaweedFS."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from remote.sync_helpers import read_tree
from remote_helpers import connect, seeded_store
from seaweed import Bucket

from ckpt.checkpoints import Checkpoints
from ckpt.objstore import ObjectStore
from ckpt.objstore.remote.index import RemoteIndex


def _count_syncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one per `RemoteIndex.sync` (the real one runs)."""
    calls: list[int] = []
    sync = RemoteIndex.sync

    def counted(index: RemoteIndex, transport: Any) -> None:
        calls.append(1)
        sync(index, transport)

    monkeypatch.setattr(RemoteIndex, "sync", counted)
    return calls


def test_a_fresh_machine_restore_lists_the_remote_index_once(
        tmp_path: Path, s3_bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "a"
    rng = random.Random(51)
    for depth in range(6):  # six tree levels: six fetches of trees, then one of blobs
        folder = root.joinpath(*[f"l{d}" for d in range(depth + 1)])
        folder.mkdir(parents=True)
        for n in range(4):
            (folder / f"f{n}").write_bytes(rng.randbytes(rng.randint(10, 900)))
    with Checkpoints.init(root, session="s") as a:
        a.remote_add("origin", s3_bucket.url, endpoint=s3_bucket.endpoint)
        wanted = a.create().id
        a.push()
    expected = read_tree(root)

    syncs = _count_syncs(monkeypatch)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    with Checkpoints.init(fresh, session="s") as b:
        b.remote_add("origin", s3_bucket.url, endpoint=s3_bucket.endpoint)
        b.restore(wanted)
    assert read_tree(fresh) == expected
    assert len(syncs) == 1


def test_a_fetch_of_an_object_indexed_since_lists_again(s3_bucket: Bucket,
                                                         tmp_path: Path) -> None:
    source, oids = seeded_store(tmp_path / "a", 30, seed=52)
    early, late = oids[:15], oids[15:]
    pusher = connect(s3_bucket)
    pusher.upload(source, early)
    reader = connect(s3_bucket, create=False)
    target = ObjectStore.init(str(tmp_path / "b"))
    with reader.lock("shared"):
        assert reader.fetch(target, early[:5]).objects == 5
        pusher.upload(source, late)  # another pusher, while the reader holds its lock
        assert reader.fetch(target, early[5:] + late).objects == len(oids) - 5
    assert all(target.has(oid) for oid in oids)
