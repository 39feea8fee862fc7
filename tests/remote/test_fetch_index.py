"""The remote index a fetch and an upload read (objstore/remote/index.py), against the real
SeaweedFS: its tables are built on first use, and until then `names` answers by binary search
of each synced index. Whatever the order of questions, the answers are the ones a table built
at once gives: every uploaded id is named, no other id is, a pack uploaded after the sync
joins the answers, and the built table locates each id where its index says."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import given, seed, settings
from hypothesis import strategies as st
from remote_helpers import connect, remote_packs, seeded_store
from seaweed import Bucket, s3_bucket, s3_env, seaweed

from ckpt.objstore import ObjectId, codec, hash_bytes
from ckpt.objstore.remote import layout
from ckpt.objstore.remote.index import RemoteIndex

__all__ = ["s3_bucket", "s3_env", "seaweed"]  # the fixtures these tests use


def test_names_and_tables_agree_with_the_indexes(tmp_path: Path, s3_bucket: Bucket) -> None:
    rng = random.Random(25)
    store, oids = seeded_store(tmp_path / "store", 300, seed=25)
    repo = connect(s3_bucket, pack_size=8 << 10)  # many small packs
    with repo.lock("shared"):
        repo.upload(store, oids[:200])
    packs = remote_packs(s3_bucket)
    assert len(packs) > 3, packs.keys()
    first: dict[ObjectId, tuple[str, int, int]] = {}
    for key in sorted(packs, key=lambda k: k.rsplit("/", 1)[1]):
        for oid, offset, length in packs[key]:
            first.setdefault(oid, (key.rsplit("/", 1)[1], offset, length))
    absent = [hash_bytes(rng.randbytes(8)) for _ in range(50)] + oids[200:]

    for case in range(3):
        repo = connect(s3_bucket, tmp_path / f"cache{case}")
        with repo.lock("shared"):
            index: RemoteIndex = repo._index
            repo.missing([])  # synced, nothing built
            asked = list(first) + absent
            rng.shuffle(asked)
            if case == 1:  # a pack this process uploads joins before the tables are built
                store.put_bytes(b"later %d" % case)
                extra = store.put_bytes(b"uploaded after the sync")
                repo.upload(store, [extra])
                first[extra] = ("", 0, 0)
                asked.append(extra)
            assert {oid for oid in asked if index.names(oid)} == set(first)
            if case == 2:  # the tables, built now, say the same, first pack by name first
                table = index.locations
                for oid, (packid, offset, length) in first.items():
                    if packid:
                        assert tuple(table[oid]) == (packid, offset, length)
                assert not any(oid in table for oid in absent)
            assert repo.missing(asked) == set(absent)


_ID = st.binary(min_size=32, max_size=32)
_NOT_AN_ID = st.binary(max_size=40).filter(lambda b: len(b) != 32) | st.text(max_size=3) | st.none()


@given(pairs=st.lists(st.tuples(_ID, _ID), max_size=20),
       bad=st.none() | st.tuples(_NOT_AN_ID, _ID) | st.tuples(_ID, _NOT_AN_ID)
       | st.just(("three", "ids", "row")) | st.just(7),
       at=st.integers(0, 20))
@settings(max_examples=150, deadline=None)
@seed(2525)
def test_a_refs_file_loads_whole_or_is_noted_damaged(
        pairs: list[tuple[bytes, bytes]], bad: object, at: int) -> None:
    """A pack's refs file (msgpack rows of two 32-byte ids) is loaded whole; one row that is
    not two ids makes the file damaged, noted by its key, and nothing of it is loaded."""
    index = RemoteIndex(cache_dir=None)
    rows: list[object] = [list(pair) for pair in pairs]
    if bad is not None:
        rows.insert(min(at, len(rows)), list(bad) if isinstance(bad, tuple) else bad)
    index._load_refs("p1", codec.pack_data(rows))
    if bad is None:
        assert index._refs == dict(pairs) and not index._damaged
    else:
        assert index._refs == {} and list(index._damaged) == [layout.refs_key("p1")]
    index._load_refs("p2", b"\xc1 not msgpack")
    assert layout.refs_key("p2") in index._damaged
