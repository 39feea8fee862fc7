"""RemoteRepo when things break: damaged remote packs and indexes, wrong or missing
credentials, an unreachable endpoint, a kill -9 mid-upload, a server killed and restarted."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from remote_helpers import connect, remote_packs, seeded_store
from seaweed import Bucket, SeaweedServer, free_ports

from ckpt.objstore import CorruptObject, ObjectStore
from ckpt.objstore.remote import (
    RemoteAuthError,
    RemoteCorrupt,
    RemoteRepo,
    RemoteUnreachable,
    parse_remote_url,
)


def _one_object(bucket: Bucket, *, min_length: int = 200) -> tuple[str, bytes, int, int]:
    """A pack key and one of its records (oid, offset, length) long enough to damage."""
    for key, entries in remote_packs(bucket).items():
        for oid, offset, length in entries:
            if length >= min_length:
                return key.removeprefix("repo/"), oid, offset, length
    raise AssertionError("no record long enough")


def test_a_bit_flipped_remote_pack_is_corrupt_object_naming_it_and_stores_nothing(
        s3_bucket: Bucket, tmp_path: Path) -> None:
    source, oids = seeded_store(tmp_path / "a", 40, seed=11)
    repo = connect(s3_bucket)
    repo.upload(source, oids)
    assert repo.check(full=True).problems == ()
    key, oid, offset, length = _one_object(s3_bucket)  # key: relative to the remote's URL
    data = bytearray(s3_bucket.raw.get_object(s3_bucket.name, f"repo/{key}"))
    data[offset + length // 2] ^= 0x10
    s3_bucket.raw.put_object(s3_bucket.name, f"repo/{key}", bytes(data))

    target = ObjectStore.init(str(tmp_path / "b"))
    with pytest.raises(CorruptObject) as caught:
        connect(s3_bucket, create=False).fetch(target, [oid])
    assert caught.value.oid == oid and key in str(caught.value)
    assert not target.has(oid)
    assert repo.check(full=False).problems == ()  # same size: only a full check reads bytes
    problems = repo.check(full=True).problems
    assert any(oid.hex() in p and key in p for p in problems), problems


def test_a_truncated_remote_pack_is_named_by_fetch_and_check(s3_bucket: Bucket, tmp_path: Path
                                                             ) -> None:
    source, oids = seeded_store(tmp_path / "a", 40, seed=12)
    repo = connect(s3_bucket)
    repo.upload(source, oids)
    full_key, entries = next(iter(remote_packs(s3_bucket).items()))
    key = full_key.removeprefix("repo/")
    last = max(entries, key=lambda e: e[1])
    data = s3_bucket.raw.get_object(s3_bucket.name, full_key)
    s3_bucket.raw.put_object(s3_bucket.name, full_key, data[:last[1] + last[2] // 2])

    problems = repo.check(full=False).problems
    assert any(key in p and "its index says" in p for p in problems), problems
    target = ObjectStore.init(str(tmp_path / "b"))
    with pytest.raises((CorruptObject, RemoteCorrupt)) as caught:
        repo.fetch(target, [last[0]])
    assert last[0].hex() in str(caught.value) or key in str(caught.value)
    assert not target.has(last[0])


def test_a_damaged_index_is_named_and_its_objects_are_sent_again(s3_bucket: Bucket,
                                                                tmp_path: Path) -> None:
    source, oids = seeded_store(tmp_path / "a", 30, seed=13)
    connect(s3_bucket).upload(source, oids)
    full_key = s3_bucket.keys("repo/index/")[0]
    s3_bucket.raw.put_object(s3_bucket.name, full_key, b"CKPIDX\x00\x01 torn")
    index_key = full_key.removeprefix("repo/")
    repo = connect(s3_bucket, tmp_path / "cache")
    target = ObjectStore.init(str(tmp_path / "b"))
    with pytest.raises(RemoteCorrupt) as caught:
        repo.fetch(target, oids[:1])
    assert caught.value.key == index_key
    assert any(index_key in p for p in repo.check(full=False).problems)
    assert repo.upload(source, oids).objects == len(oids)  # nothing trusted to a torn index
    assert repo.fetch(target, oids).objects == len(oids)


def test_wrong_credentials_are_remote_auth_error_in_one_line(
        s3_bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    connect(s3_bucket)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(RemoteAuthError) as caught:
        connect(s3_bucket, create=False)
    assert "secret key does not match" in str(caught.value) and "\n" not in str(caught.value)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "nobody")
    with pytest.raises(RemoteAuthError, match="unknown access key"):
        connect(s3_bucket, create=False)


def test_missing_credentials_are_refused_without_asking_the_network(
        s3_bucket: Bucket, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(RemoteAuthError, match="no AWS credentials"):
        connect(s3_bucket, create=False)


def test_credentials_come_from_the_shared_files_and_aws_profile(
        s3_bucket: Bucket, monkeypatch: pytest.MonkeyPatch) -> None:
    env = s3_bucket.server.env()
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    Path(env["AWS_SHARED_CREDENTIALS_FILE"]).write_text(
        "[default]\naws_access_key_id = wrong\naws_secret_access_key = wrong\n\n"
        f"[ckpt]\naws_access_key_id = {env['AWS_ACCESS_KEY_ID']}\n"
        f"aws_secret_access_key = {env['AWS_SECRET_ACCESS_KEY']}\n")
    with pytest.raises(RemoteAuthError):
        connect(s3_bucket)
    monkeypatch.setenv("AWS_PROFILE", "ckpt")
    assert connect(s3_bucket).list_records() == []


def test_an_unreachable_endpoint_is_remote_unreachable(s3_env: dict[str, str]) -> None:
    port = free_ports(1)[0]
    spec = parse_remote_url("s3://bucket-1/x", endpoint=f"http://127.0.0.1:{port}")
    with pytest.raises(RemoteUnreachable) as caught:
        RemoteRepo.connect(spec, None, create=True, timeout=2.0)
    assert "unreachable" in str(caught.value) and "\n" not in str(caught.value)


_UPLOADER = textwrap.dedent("""
    import os, sys, time
    from ckpt.objstore import ObjectStore, parse_oid
    from ckpt.objstore.remote import RemoteRepo, parse_remote_url
    store = ObjectStore.open(sys.argv[1])
    oids = [parse_oid(line) for line in open(sys.argv[2]).read().split()]
    spec = parse_remote_url(sys.argv[3], endpoint=os.environ["AWS_ENDPOINT_URL"])
    repo = RemoteRepo.connect(spec, None, create=True, pack_size=64 << 10)
    # Paced, so the parent's SIGKILL lands mid-upload (between packs or in one's PUT).
    repo.upload(store, oids, progress=lambda done, total: time.sleep(0.05))
""")


def test_an_upload_killed_with_sigkill_completes_on_the_next_run(
        s3_bucket: Bucket, tmp_path: Path) -> None:
    source, oids = seeded_store(tmp_path / "a", 300, seed=14)
    listing = tmp_path / "oids"
    listing.write_text("\n".join(oid.hex() for oid in oids))
    source.close()
    child = subprocess.Popen(
        [sys.executable, "-c", _UPLOADER, str(tmp_path / "a"), str(listing),
         f"{s3_bucket.url}/repo"], env=dict(os.environ), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while len(s3_bucket.keys("repo/index/")) < 3 and child.poll() is None:
            assert time.monotonic() < deadline, "the upload never got going"
            time.sleep(0.02)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        _, err = child.communicate(timeout=30)
    assert child.returncode == -signal.SIGKILL, err.decode()[-2000:]

    source = ObjectStore.open(str(tmp_path / "a"))
    repo = connect(s3_bucket, pack_size=256 << 10)
    left = repo.missing(oids)
    assert 0 < len(left) < len(oids)
    report = repo.upload(source, oids)
    assert report.objects == len(left) and report.skipped_present == len(oids) - len(left)
    assert repo.check(full=True).problems == ()
    target = ObjectStore.init(str(tmp_path / "b"))
    assert repo.fetch(target, oids).objects == len(oids)
    assert all(target.get_bytes(oid) == source.get_bytes(oid) for oid in oids)


def test_a_server_killed_mid_session_is_unreachable_then_the_upload_completes(
        seaweed_own: SeaweedServer, tmp_path: Path) -> None:
    seaweed_own.raw.create_bucket("own-bucket")
    spec = parse_remote_url("s3://own-bucket/repo", endpoint=seaweed_own.endpoint)
    source, oids = seeded_store(tmp_path / "a", 60, seed=15)
    repo = RemoteRepo.connect(spec, str(tmp_path / "cache"), create=True, timeout=2.0)
    repo.upload(source, oids[:30])
    seaweed_own.kill()
    with pytest.raises(RemoteUnreachable):
        repo.upload(source, oids)
    seaweed_own.start()
    report = repo.upload(source, oids)
    assert report.objects == len(oids) - 30 and report.skipped_present == 30
    assert repo.check(full=True).problems == ()


def test_a_lock_whose_release_failed_is_deleted_by_this_process_next_lock(
        seaweed_own: SeaweedServer, tmp_path: Path) -> None:
    """A long-lived process (the resident server) whose release met a dead remote: its lock
    is not stale (the process lives), so its own next lock of that remote deletes it first;
    an exclusive lock would otherwise be refused by it for STALE_SECONDS."""
    seaweed_own.raw.create_bucket("own-locks")
    spec = parse_remote_url("s3://own-locks/repo", endpoint=seaweed_own.endpoint)
    repo = RemoteRepo.connect(spec, str(tmp_path / "cache"), create=True, timeout=2.0)
    with repo.lock("shared"):
        seaweed_own.kill()  # the release cannot delete the lock
    seaweed_own.start()
    (left,) = seaweed_own.raw.list_keys("own-locks", "repo/locks/")
    with repo.lock("exclusive"):
        assert left not in seaweed_own.raw.list_keys("own-locks", "repo/locks/")
    assert seaweed_own.raw.list_keys("own-locks", "repo/locks/") == []


def test_a_pack_truncated_before_several_wanted_ranges_is_remote_corrupt(
        s3_bucket: Bucket, tmp_path: Path) -> None:
    # Ranges far apart go out as separate GETs; one starting past the truncated end is a 416
    # from the server, named as the pack's damage (never a crash of the client).
    source, oids = seeded_store(tmp_path / "a", 10, seed=16, big=2)
    repo = connect(s3_bucket, pack_size=16 << 20)
    repo.upload(source, oids)
    [(full_key, entries)] = remote_packs(s3_bucket).items()
    by_offset = sorted(entries, key=lambda e: e[1])
    first, last = by_offset[0], by_offset[-1]
    assert last[1] - (first[1] + first[2]) > 1 << 20  # a big object between: two GETs
    data = s3_bucket.raw.get_object(s3_bucket.name, full_key)
    s3_bucket.raw.put_object(s3_bucket.name, full_key, data[:first[1] + first[2] + 10])
    target = ObjectStore.init(str(tmp_path / "b"))
    with pytest.raises(RemoteCorrupt) as caught:
        repo.fetch(target, [first[0], last[0]])
    assert caught.value.key == full_key.removeprefix("repo/")
    assert "\n" not in str(caught.value)
