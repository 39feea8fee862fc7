"""The closure of an upload, fetch and gc: an envelope that names a zstd dictionary (codec 2,
issue 29) takes its dictionary along, is fetched after it, and keeps it alive in gc. Runs once
the store can write dictionaries (`ObjectStore.train_dictionary`); skipped before."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
from remote_helpers import connect, remote_packs
from seaweed import Bucket

from ckpt.objstore import ObjectId, ObjectStore, codec
from ckpt.objstore.remote import repo as repo_module


def _dictionary_store(path: Path) -> tuple[ObjectStore, ObjectId, list[ObjectId]]:
    store = ObjectStore.init(str(path))
    train = getattr(store, "train_dictionary", None)
    if train is None:
        pytest.skip("this store writes no dictionaries yet (issue 29's codec 2)")
    rng = random.Random(29)

    def record(n: int) -> bytes:
        return json.dumps({"id": n, "name": f"user-{rng.randrange(10**6)}", "active": n % 2 == 0,
                           "tags": ["alpha", "beta", "gamma"][: n % 3 + 1]}).encode()

    dictionary = train([record(n) for n in range(400)])
    oids = [store.put_bytes(record(n) * 3) for n in range(1000, 1060)]
    store.sync()
    if not any(store.backend.get(oid)[4] == 2 for oid in oids):
        pytest.skip("the store chose no dictionary for these objects")
    return store, dictionary, oids


def test_upload_fetch_and_gc_carry_the_dictionary_along(s3_bucket: Bucket, tmp_path: Path
                                                        ) -> None:
    source, dictionary, oids = _dictionary_store(tmp_path / "a")
    repo = connect(s3_bucket)
    assert repo.upload(source, [dictionary]).objects == 1  # a pack of its own
    report = repo.upload(source, oids)
    assert report.objects == len(oids) and report.skipped_present == 1  # the dictionary
    assert s3_bucket.keys("repo/refs/")  # the pack names what its envelopes need

    with repo.lock("exclusive"):
        gc = repo.gc(set(oids), grace_seconds=0)  # the dictionary is not in `live`
    assert gc.packs_deleted == 0
    target = ObjectStore.init(str(tmp_path / "b"))
    fetched = connect(s3_bucket, create=False).fetch(target, oids)
    assert fetched.objects == len(oids) + 1 and target.has(dictionary)
    assert all(target.get_bytes(oid) == source.get_bytes(oid) for oid in oids)
    assert repo.check(full=True).problems == ()


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The pack keys a fetch's parts read, in order (one per `_get_spans`)."""
    keys: list[str] = []
    spans = repo_module.RemoteRepo._get_spans

    def noted(self: repo_module.RemoteRepo, key: str, entries: list) -> object:  # type: ignore[type-arg]
        keys.append(key)
        return spans(self, key, entries)

    monkeypatch.setattr(repo_module.RemoteRepo, "_get_spans", noted)
    return keys


def test_delta_chains_come_in_one_pass_over_the_packs_whatever_their_order(
        s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bases of a fetch's deltas, at every depth, come in one round: each pack is read
    at most twice (once for bases, once for what was asked), and a base that arrives before
    its own base (small packs spread the chains) waits for it and is stored after it."""
    source = ObjectStore.init(str(tmp_path / "a"))
    rng = random.Random(31)
    newest = []
    for _ in range(6):
        version = rng.randbytes(3000) * 4  # compressible, over MIN_DELTA_SIZE
        oid = source.put_bytes(version)
        for _ in range(3):
            at = rng.randrange(len(version) - 16)
            version = version[:at] + rng.randbytes(16) + version[at + 16:]
            oid = source.put_bytes(version, base=oid)
        newest.append(oid)
    source.sync()
    assert all(source.backend.get(oid)[4] == codec.CODEC_DELTA for oid in newest)
    monkeypatch.setattr(repo_module, "FIRST_PACK_SIZE", 2 << 10)
    repo = connect(s3_bucket, pack_size=2 << 10)
    # Newest first: a chain's versions land in packs apart, its newest in the first.
    for oid in [*newest, *source.backend.iter_ids()]:
        repo.upload(source, [oid])

    keys = _reads(monkeypatch)
    target = ObjectStore.init(str(tmp_path / "b"))
    fetched = connect(s3_bucket, create=False).fetch(target, newest)
    reads = Counter(keys)
    assert fetched.objects == 6 * 4
    assert all(target.get_bytes(oid) == source.get_bytes(oid) for oid in newest)
    assert len(reads) > 6 and max(reads.values()) <= 2, reads


def _blocks_store(path: Path, files: int) -> tuple[ObjectStore, list[ObjectId], set[ObjectId]]:
    """A store of `files` small source-like files put as `put_files` puts a tree's (members of
    blocks); their ids and their blocks' ids."""
    store = ObjectStore.init(str(path / "store"))
    rng = random.Random(37)
    folder = path / "files"
    folder.mkdir()
    for n in range(files):
        words = [rng.choice((b"int", b"return", b"struct", b"{", b"}", b";\n")) for _ in range(80)]
        (folder / f"f{n:04d}").write_bytes(b" ".join(words) + b"%d" % n)
    oids = [result.oid for result in store.put_files(  # type: ignore[union-attr]
        [str(folder / f"f{n:04d}") for n in range(files)], threads=1)]
    store.sync()
    blocks = {codec.member_header(store.backend.get(oid), oid)[0] for oid in oids
              if store.backend.get(oid)[4] == codec.CODEC_BLOCK}
    if not blocks:
        pytest.skip("the store put these files in no block")
    return store, oids, blocks


def test_blocks_come_in_the_same_pass_as_their_members(
        s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pushed block precedes its members in their pack: a fetch of the members reads the
    pack once, its bytes once (not the blocks in a round of their own, then the same ranges
    again for the members between them)."""
    source, oids, blocks = _blocks_store(tmp_path / "a", 400)
    repo = connect(s3_bucket)
    up = repo.upload(source, oids)
    assert up.packs == 1 and up.objects == len(oids) + len(blocks)
    keys = _reads(monkeypatch)
    target = ObjectStore.init(str(tmp_path / "b"))
    said: list[ObjectId] = []
    report = connect(s3_bucket, create=False).fetch(
        target, oids, ready=lambda batch: said.extend(oid for oid, _ in batch))
    assert report.objects == len(oids) + len(blocks)
    assert sorted(said) == sorted(oids)
    assert len(keys) == 1
    assert report.bytes_fetched <= up.bytes_uploaded
    assert all(target.get_bytes(oid) == source.get_bytes(oid) for oid in oids)


def test_a_pack_is_read_after_the_pack_holding_what_it_needs(
        s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks pushed in one pack and their members in a later one: one pass over the two,
    the blocks' pack first, whichever order the ids asked for meet them in."""
    source, oids, blocks = _blocks_store(tmp_path / "a", 400)
    repo = connect(s3_bucket)
    assert repo.upload(source, sorted(blocks)).packs == 1
    assert repo.upload(source, oids).objects == len(oids)  # the blocks are there already
    order = _reads(monkeypatch)
    target = ObjectStore.init(str(tmp_path / "b"))
    report = connect(s3_bucket, create=False).fetch(target, oids[::-1])
    assert report.objects == len(oids) + len(blocks)
    assert len(order) == len(set(order)) == 2, order
    holding = [key for key, entries in remote_packs(s3_bucket).items()
               if {oid for oid, _, _ in entries} == blocks]
    assert f"repo/{order[0]}" == holding[0]
    assert all(target.get_bytes(oid) == source.get_bytes(oid) for oid in oids)


def test_packs_are_ranked_after_what_they_need_and_a_cycle_is_broken() -> None:
    order = repo_module._pack_order({"b": {"a"}, "c": {"b"}, "d": {"c", "a"}})
    assert sorted(order, key=order.get) == ["a", "b", "c", "d"]
    cycle = repo_module._pack_order({"x": {"y"}, "y": {"x"}, "z": {"x"}})
    assert sorted(cycle.values()) == [0, 1, 2] and cycle["z"] > cycle["x"]
