"""RemoteRepo against a real SeaweedFS: upload/fetch round trips, dedup, records, heads, URLs."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from remote_helpers import connect, seeded_store
from seaweed import Bucket

from ckpt.objstore import ObjectStore
from ckpt.objstore.packfile import decode_index
from ckpt.objstore.remote import (
    RemoteConflict,
    RemoteFormatError,
    RemoteNotFound,
    parse_remote_url,
)
from ckpt.objstore.remote import repo as repo_module
from ckpt.objstore.remote.packs import Entry
from ckpt.objstore.remote.repo import Arrived, RemoteRepo, head_name


def test_upload_then_fetch_into_an_empty_store_round_trips_every_object(
        s3_bucket: Bucket, tmp_path: Path) -> None:
    source, oids = seeded_store(tmp_path / "a", 120, seed=1, big=2)
    repo = connect(s3_bucket, tmp_path / "cache-a", pack_size=1 << 20)
    report = repo.upload(source, oids)
    assert report.objects == len(oids) and report.skipped_present == 0
    assert report.packs >= 2  # 1 MiB packs: the 1-3 MiB objects close one each
    keys = s3_bucket.keys("repo/")
    packs = [k for k in keys if k.startswith("repo/packs/")]
    indexes = [k for k in keys if k.startswith("repo/index/")]
    assert len(packs) == len(indexes) == report.packs
    assert report.bytes_uploaded == sum(
        decode_index(s3_bucket.raw.get_object(s3_bucket.name, k))[2] for k in indexes)

    target = ObjectStore.init(str(tmp_path / "b"))
    fresh = connect(s3_bucket, tmp_path / "cache-b", create=False)
    fetched = fresh.fetch(target, oids)
    assert fetched.objects == len(oids)
    assert fetched.requests <= report.packs  # neighbouring records come in one GET
    for oid in oids:
        assert target.get_bytes(oid) == source.get_bytes(oid)
        # copied as stored: same envelope bytes on both sides
        assert target.backend.get(oid) == source.backend.get(oid)
    target.sync()
    # the records' crcs came with the remote's records: each one checks against its bytes
    assert list(target.backend.check_records()) == []
    again = fresh.fetch(target, oids)
    assert (again.objects, again.requests) == (0, 0)


def test_upload_packs_grow_from_a_small_first_one_to_the_pack_size(
        s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(repo_module, "FIRST_PACK_SIZE", 16 << 10)
    source, oids = seeded_store(tmp_path / "a", 400, seed=5)
    largest = max(len(source.backend.get(oid)) for oid in oids)
    repo = connect(s3_bucket, tmp_path / "cache-a", pack_size=128 << 10)
    report = repo.upload(source, oids)
    sizes = sorted(decode_index(s3_bucket.raw.get_object(s3_bucket.name, k))[2]
                   for k in s3_bucket.keys("repo/index/"))
    assert len(sizes) == report.packs > 5
    # One pack closed at the first size (16 KiB), one at each doubling (32, 64 KiB), the
    # rest at the pack size, but for the last, whatever it holds.
    assert sum(16 << 10 <= size < (16 << 10) + largest + 64 for size in sizes) >= 1
    assert sum(size < 128 << 10 for size in sizes) <= 4
    assert all(size < (128 << 10) + largest + 64 for size in sizes)
    fresh = ObjectStore.init(str(tmp_path / "b"))
    assert connect(s3_bucket, create=False).fetch(fresh, oids).objects == len(oids)


def test_fetch_says_each_object_ready_once_as_soon_as_it_can_be_read(
        s3_bucket: Bucket, tmp_path: Path) -> None:
    source, oids = seeded_store(tmp_path / "a", 300, seed=4, big=2)
    repo = connect(s3_bucket, tmp_path / "cache-a", pack_size=64 << 10)
    assert repo.upload(source, oids).packs > 3
    target = ObjectStore.init(str(tmp_path / "b"))
    had = oids[::3]  # a third here already: said first, without a fetch
    for oid in had:
        target.backend.put(oid, source.backend.get(oid))
    said: list[list[bytes]] = []

    def ready(batch: list[Arrived]) -> None:
        for oid, stored in batch:  # readable and verified at the moment it is said
            assert target.get_bytes(oid) == source.get_bytes(oid)
            # a fetched one comes with its envelope as stored; one it had, without
            assert stored == (None if oid in had else target.backend.get(oid))
        said.append([oid for oid, _ in batch])

    fresh = connect(s3_bucket, tmp_path / "cache-b", create=False)
    report = fresh.fetch(target, oids + oids[:5], ready=ready)  # a repeat is asked for once
    assert report.objects == len(oids) - len(had)
    flat = [oid for batch in said for oid in batch]
    assert sorted(flat) == sorted(oids)
    assert set(said[0]) == set(had)
    assert len(said) > 2  # the fetched ones in several batches, one per pack at least


def test_fetch_reads_a_pack_in_parts_and_stores_it_in_batches(
        s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, oids = seeded_store(tmp_path / "a", 300, seed=6)
    assert connect(s3_bucket, tmp_path / "cache-a").upload(source, oids).packs == 1
    sizes = {oid: len(source.backend.get(oid)) for oid in oids}
    monkeypatch.setattr(repo_module, "FETCH_PART", 64 << 10)
    monkeypatch.setattr(repo_module, "STORE_BATCH", 16 << 10)
    parts: list[int] = []
    spans = repo_module.RemoteRepo._get_spans

    def counted(self: RemoteRepo, key: str, entries: list[Entry]) -> object:
        parts.append(sum(length for _, _, length in entries))
        return spans(self, key, entries)

    monkeypatch.setattr(repo_module.RemoteRepo, "_get_spans", counted)
    batches: list[int] = []
    target = ObjectStore.init(str(tmp_path / "b"))
    connect(s3_bucket, create=False).fetch(
        target, oids, ready=lambda batch: batches.append(sum(sizes[oid] for oid, _ in batch)))
    assert all(target.get_bytes(oid) == source.get_bytes(oid) for oid in oids)
    largest = max(sizes.values())
    assert len(parts) >= sum(sizes.values()) // (64 << 10) > 2  # one pack, read in parts
    assert max(parts) < (64 << 10) + largest
    assert len(batches) > len(parts) and max(batches) < (16 << 10) + largest


def test_fetch_of_a_few_objects_reads_only_their_ranges(s3_bucket: Bucket, tmp_path: Path
                                                        ) -> None:
    source, oids = seeded_store(tmp_path / "a", 60, seed=2, big=3)
    repo = connect(s3_bucket, pack_size=16 << 20)
    up = repo.upload(source, oids)
    assert up.packs == 1
    target = ObjectStore.init(str(tmp_path / "b"))
    small = [oid for oid in oids if len(source.backend.get(oid)) < 1000][:3]
    report = repo.fetch(target, small)
    assert report.objects == len(small)
    assert report.bytes_fetched < up.bytes_uploaded // 4
    assert all(target.get_bytes(oid) == source.get_bytes(oid) for oid in small)


def test_second_upload_of_the_same_set_uploads_nothing_and_a_changed_set_only_the_new(
        s3_bucket: Bucket, tmp_path: Path) -> None:
    source, oids = seeded_store(tmp_path / "a", 80, seed=3)
    repo = connect(s3_bucket, tmp_path / "cache")
    repo.upload(source, oids)
    keys_before = set(s3_bucket.keys())
    second = connect(s3_bucket, tmp_path / "cache").upload(source, oids)
    assert (second.objects, second.packs, second.skipped_present) == (0, 0, len(oids))
    assert set(s3_bucket.keys()) == keys_before

    new = [source.put_bytes(f"new object {n}".encode() * 50) for n in range(5)]
    source.sync()
    other_machine = connect(s3_bucket, tmp_path / "other-cache")  # no cache: lists index/
    assert other_machine.missing(oids + new) == set(new)
    third = other_machine.upload(source, oids + new)
    assert (third.objects, third.packs, third.skipped_present) == (5, 1, len(oids))
    assert other_machine.missing(oids + new) == set()


def test_progress_reports_objects_done_of_objects_to_send(s3_bucket: Bucket, tmp_path: Path
                                                         ) -> None:
    source, oids = seeded_store(tmp_path / "a", 40, seed=4, big=2)
    seen: list[tuple[int, int]] = []
    report = connect(s3_bucket, pack_size=1 << 20).upload(
        source, oids, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (report.objects, report.objects)
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_connect_without_create_refuses_an_empty_prefix_and_a_foreign_config(
        s3_bucket: Bucket) -> None:
    with pytest.raises(RemoteFormatError, match="no ckpt remote"):
        connect(s3_bucket, create=False)
    s3_bucket.raw.put_object(s3_bucket.name, "foreign/config", b"restic repo\n")
    with pytest.raises(RemoteFormatError, match="not a ckpt remote"):
        connect(s3_bucket, prefix="foreign", create=True)


def test_two_first_connects_agree_on_one_config(s3_bucket: Bucket) -> None:
    ids: list[str] = []
    threads = [threading.Thread(target=lambda: ids.append(connect(s3_bucket).id))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(ids) == 4 and len(set(ids)) == 1


def test_records_are_written_once_and_conflicting_bytes_are_refused(s3_bucket: Bucket) -> None:
    repo = connect(s3_bucket)
    assert repo.put_record("ckpt-0000000000001-aaaaaaaa", b"one") is True
    assert repo.put_record("ckpt-0000000000001-aaaaaaaa", b"one") is False
    with pytest.raises(RemoteConflict):
        repo.put_record("ckpt-0000000000001-aaaaaaaa", b"two")
    assert repo.put_record("ckpt-0000000000002-bbbbbbbb", b"2") is True
    assert repo.list_records() == ["ckpt-0000000000001-aaaaaaaa", "ckpt-0000000000002-bbbbbbbb"]
    assert repo.get_record("ckpt-0000000000001-aaaaaaaa") == b"one"
    with pytest.raises(RemoteNotFound):
        repo.get_record("ckpt-0000000000003-cccccccc")
    with pytest.raises(ValueError, match="not allowed"):
        repo.put_record("../escape", b"x")
    with pytest.raises(RuntimeError, match="exclusive"):
        repo.delete_record("ckpt-0000000000002-bbbbbbbb")
    with repo.lock("exclusive"):
        repo.delete_record("ckpt-0000000000002-bbbbbbbb")
    assert repo.list_records() == ["ckpt-0000000000001-aaaaaaaa"]


def test_two_writers_of_one_record_one_wins_the_other_is_told(s3_bucket: Bucket) -> None:
    repos = [connect(s3_bucket) for _ in range(2)]
    outcomes: list[object] = []
    barrier = threading.Barrier(2)

    def write(n: int) -> None:
        barrier.wait(30)
        try:
            outcomes.append(repos[n].put_record("ckpt-0000000000009-race0000", f"{n}".encode()))
        except RemoteConflict as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(type(o).__name__ for o in outcomes) == ["RemoteConflict", "bool"]
    assert True in outcomes


def test_two_writers_of_one_head_lose_nothing(s3_bucket: Bucket) -> None:
    repos = [connect(s3_bucket) for _ in range(2)]
    rounds = 12

    def append(n: int) -> None:
        for k in range(rounds):
            repos[n].update_head("session/one", lambda old, k=k: (
                (old or b"") + f"{n}:{k}\n".encode()))

    threads = [threading.Thread(target=append, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    head = repos[0].get_head("session/one")
    assert head is not None
    lines = head.decode().split()
    assert sorted(lines) == sorted(f"{n}:{k}" for n in range(2) for k in range(rounds))
    assert [line for line in lines if line.startswith("0:")] == [f"0:{k}" for k in range(rounds)]


def test_session_names_become_distinct_safe_key_names() -> None:
    names = ["a", "a/b", "a~2Fb", "a~b", "a%7Eb", "ümlaut", "x y", ".", ".."]
    encoded = [head_name(n) for n in names]
    assert len(set(encoded)) == len(names)
    assert all("/" not in e and "%" not in e for e in encoded)


@pytest.mark.parametrize("url, bucket, prefix", [
    ("s3://bucket-1", "bucket-1", ""),
    ("s3://bucket-1/", "bucket-1", ""),
    ("s3://my.bucket/a/b/", "my.bucket", "a/b"),
])
def test_parse_remote_url_normalizes(url: str, bucket: str, prefix: str) -> None:
    spec = parse_remote_url(url, endpoint="http://127.0.0.1:8333/", region="eu-west-1")
    assert (spec.bucket, spec.prefix, spec.endpoint, spec.region) == (
        bucket, prefix, "http://127.0.0.1:8333", "eu-west-1")
    assert spec.url == f"s3://{bucket}" + (f"/{prefix}" if prefix else "")


@pytest.mark.parametrize("url", [
    "http://bucket/x", "s3://B", "s3://ab", "s3://user:pw@bucket-1", "s3://bucket-1/../x",
    "s3://bucket-1/a?x=1", "s3://bucket-1/a b", "s3://bucket-1:9000",
])
def test_parse_remote_url_refuses_bad_urls_in_one_line(url: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_remote_url(url)
    assert "\n" not in str(caught.value)


def test_parse_remote_url_refuses_an_endpoint_with_a_path() -> None:
    with pytest.raises(ValueError, match="endpoint"):
        parse_remote_url("s3://bucket-1", endpoint="http://127.0.0.1:1/x")
    with pytest.raises(ValueError, match="endpoint"):
        parse_remote_url("s3://bucket-1", endpoint="ftp://127.0.0.1")



def test_a_walk_of_levels_reads_a_stretch_it_fetched_from_memory(
        s3_bucket: Bucket, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Fetches one after another of objects in one stretch of a pack (a tree walk's levels)
    GET it once; what a lock hold kept is gone after it, and a big GET is not kept."""
    source, oids = seeded_store(tmp_path / "a", 240, seed=9)
    assert connect(s3_bucket).upload(source, oids).packs == 1
    gets: list[int] = []
    get_ranges = repo_module.S3Transport.get_range_views

    def counted(self: object, key: str, ranges: list[tuple[int, int]]) -> list[memoryview]:
        gets.append(len(ranges))
        return get_ranges(self, key, ranges)  # type: ignore[arg-type]

    monkeypatch.setattr(repo_module.S3Transport, "get_range_views", counted)
    repo = connect(s3_bucket, create=False)
    target = ObjectStore.init(str(tmp_path / "b"))
    with repo.lock("shared"):
        reports = [repo.fetch(target, level) for level in (oids[::3], oids[1::3], oids[2::3])]
    assert len(gets) == 1, gets
    assert reports[0].requests == 1 and reports[0].bytes_fetched > 0
    assert [(r.requests, r.bytes_fetched) for r in reports[1:]] == [(0, 0), (0, 0)]
    assert all(target.get_bytes(oid) == source.get_bytes(oid) for oid in oids)

    again = ObjectStore.init(str(tmp_path / "c"))
    with repo.lock("shared"):
        repo.fetch(again, oids[:5])
    assert len(gets) == 2  # a new hold GETs again
    monkeypatch.setattr(repo_module, "RECENT_BYTES", 64)
    with repo.lock("shared"):
        repo.fetch(again, oids[5:10])
        repo.fetch(again, oids[10:15])
    assert len(gets) == 4  # too big to keep
