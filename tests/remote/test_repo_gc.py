"""Remote gc and locks: live packs kept, dead ones dropped past the grace period, half-dead ones
rewritten; restic's lock rules between shared and exclusive holders, stale locks ignored."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from remote_helpers import connect, remote_packs, seeded_store
from seaweed import Bucket

from ckpt.objstore import ObjectStore
from ckpt.objstore.remote import RemoteLocked
from ckpt.objstore.remote.locks import STALE_SECONDS, LockKind, encode_lock, process_start


def _pack_count(bucket: Bucket) -> int:
    return len(bucket.keys("repo/packs/"))


def test_gc_drops_dead_packs_past_the_grace_period_and_keeps_live_ones(
        s3_bucket: Bucket, tmp_path: Path) -> None:
    source, oids = seeded_store(tmp_path / "a", 80, seed=21)
    dead, live = oids[:40], oids[40:]
    repo = connect(s3_bucket)
    repo.upload(source, dead)
    repo.upload(source, live)
    assert _pack_count(s3_bucket) == 2
    with repo.lock("exclusive"):
        held = repo.gc(set(live), grace_seconds=3600)
        assert (held.packs_deleted, held.held_back) == (0, 1)
        report = repo.gc(set(live), grace_seconds=0)
    assert (report.packs_deleted, report.packs_rewritten, report.held_back) == (1, 0, 0)
    assert report.bytes_freed > 0
    assert _pack_count(s3_bucket) == 1
    assert repo.missing(oids) == set(dead)
    target = ObjectStore.init(str(tmp_path / "b"))
    assert connect(s3_bucket, create=False).fetch(target, live).objects == len(live)
    assert repo.check(full=True).problems == ()


def test_gc_rewrites_a_mostly_dead_pack_keeping_its_live_objects(
        s3_bucket: Bucket, tmp_path: Path) -> None:
    source, oids = seeded_store(tmp_path / "a", 80, seed=22)
    repo = connect(s3_bucket)
    repo.upload(source, oids)
    [(old_key, _)] = remote_packs(s3_bucket).items()
    live = set(oids[:10])
    with repo.lock("exclusive"):
        report = repo.gc(live, grace_seconds=0)
    assert (report.packs_deleted, report.packs_rewritten) == (0, 1)
    [(new_key, entries)] = remote_packs(s3_bucket).items()
    assert new_key != old_key and {oid for oid, _, _ in entries} == live
    assert repo.missing(oids) == set(oids) - live
    target = ObjectStore.init(str(tmp_path / "b"))
    assert connect(s3_bucket, create=False).fetch(target, live).objects == len(live)


def test_gc_removes_an_unindexed_pack_only_past_the_grace_period(
        s3_bucket: Bucket, tmp_path: Path) -> None:
    source, oids = seeded_store(tmp_path / "a", 20, seed=23)
    repo = connect(s3_bucket)
    repo.upload(source, oids)
    orphan = "repo/packs/ab/" + "ab" * 32  # what a push killed before its index leaves
    s3_bucket.raw.put_object(s3_bucket.name, orphan, b"CKPACK\x00\x01")
    assert repo.check(full=False).problems == ()  # garbage, not damage
    with repo.lock("exclusive"):
        assert repo.gc(set(oids), grace_seconds=3600).held_back == 1
        assert repo.gc(set(oids), grace_seconds=0).packs_deleted == 1
    assert orphan not in s3_bucket.keys("repo/packs/")
    assert repo.missing(oids) == set()


def test_gc_needs_the_exclusive_lock(s3_bucket: Bucket) -> None:
    repo = connect(s3_bucket)
    with pytest.raises(RuntimeError, match="exclusive"):
        repo.gc(set(), grace_seconds=0)
    with repo.lock("shared"), pytest.raises(RuntimeError, match="exclusive"):
        repo.gc(set(), grace_seconds=0)


def test_shared_locks_coexist_and_an_exclusive_one_waits_for_them(s3_bucket: Bucket) -> None:
    one, two = connect(s3_bucket), connect(s3_bucket)
    with one.lock("shared"), two.lock("shared"):
        with pytest.raises(RemoteLocked) as caught, one.lock("exclusive"):
            pass
        assert "shared lock of pid" in caught.value.holder
    with (one.lock("exclusive"), pytest.raises(RemoteLocked, match="exclusive lock"),
          two.lock("shared")):
        pass
    assert s3_bucket.keys("repo/locks/") == []
    with two.lock("exclusive"):
        pass


def test_a_stale_lock_is_ignored(s3_bucket: Bucket) -> None:
    clock = [1_000_000.0]
    dead_holder = connect(s3_bucket, clock=lambda: clock[0])
    lock = dead_holder.lock("exclusive")
    lock.__enter__()  # never released: its process "died"
    later = connect(s3_bucket, clock=lambda: clock[0] + STALE_SECONDS + 1)
    with later.lock("exclusive"):
        pass
    soon = connect(s3_bucket, clock=lambda: clock[0] + 60)
    with pytest.raises(RemoteLocked), soon.lock("shared"):
        pass
    lock.__exit__(None, None, None)


def _plant_lock(bucket: Bucket, name: str, kind: LockKind, host: str, pid: int,
                start: int | None) -> str:
    key = f"repo/locks/{name}"
    bucket.raw.put_object(bucket.name, key, encode_lock(kind, host, pid, time.time(), start))
    return key


def test_a_lock_of_a_dead_process_on_this_host_is_stale_at_once(s3_bucket: Bucket) -> None:
    """restic's rule: a lock of this host whose pid is gone (kill -9), or whose pid now runs
    another process (another start time), no longer holds; one of another host still does."""
    repo = connect(s3_bucket)
    host = socket.gethostname()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        start = process_start(child.pid)
        assert start is not None
        key = _plant_lock(s3_bucket, "held", "shared", host, child.pid, start)
        with pytest.raises(RemoteLocked, match="a shared lock of pid") as caught, \
                repo.lock("exclusive"):
            pass
        assert str(child.pid) in caught.value.holder
        # The same live pid with another start time: the pid was reused.
        s3_bucket.raw.delete_object(s3_bucket.name, key)
        _plant_lock(s3_bucket, "reused", "exclusive", host, child.pid, start + 1)
        with repo.lock("exclusive"):
            pass
        # A live pid and no start time recorded (a system without /proc): it holds.
        _plant_lock(s3_bucket, "no-start", "exclusive", host, child.pid, None)
        with pytest.raises(RemoteLocked, match="an exclusive lock"), repo.lock("shared"):
            pass
    finally:
        child.kill()
        child.wait(timeout=30)
    with repo.lock("exclusive"):  # its pid is gone now
        pass
    _plant_lock(s3_bucket, "elsewhere", "shared", host + "-elsewhere", child.pid, start)
    with pytest.raises(RemoteLocked, match="elsewhere"), repo.lock("exclusive"):
        pass
