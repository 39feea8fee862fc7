"""Garbage collection: mark from roots, sweep the unreachable past the grace period, dry run,
refusal to sweep when a root is damaged, and leftover temp files."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from ckpt.objstore import CorruptObject, ObjectNotFound, ObjectStore, StoreOptions
from ckpt.objstore.gc import collect_garbage, find_reachable
from ckpt.objstore.memory import MemoryBackend

GRACE = 3600.0
HOUR = 3600.0


def ids(store: ObjectStore) -> set[bytes]:
    return set(store.backend.iter_ids())


def test_find_reachable_marks_every_tree_and_blob_including_shared_subtrees(
    memory_store: ObjectStore, sample_builder: Callable[..., object]
) -> None:
    sample = sample_builder(memory_store)
    memory_store.put_bytes(b"garbage")
    assert find_reachable(memory_store, [sample.root]) == sample.all
    assert find_reachable(memory_store, [sample.sub]) == {sample.sub, sample.shared, sample.blob_x}
    assert find_reachable(memory_store, []) == set()


def test_gc_keeps_everything_reachable_from_any_root_however_old(
    memory_store: ObjectStore, clock: Any, sample_builder: Callable[..., object]
) -> None:
    one = sample_builder(memory_store, b"one")
    two = sample_builder(memory_store, b"two")
    garbage = {memory_store.put_bytes(b"garbage %d" % n) for n in range(5)}
    clock.advance(30 * 24 * HOUR)
    report = collect_garbage(memory_store, [one.root, two.root], grace_seconds=GRACE, now=clock())
    assert ids(memory_store) == one.all | two.all
    assert report.objects_removed == len(garbage)
    assert report.objects_kept == len(one.all | two.all)
    for oid in one.blobs | two.blobs:
        memory_store.get_bytes(oid)  # still readable and verified
    assert memory_store.get_tree(two.sub).find(b"shared") is not None


def test_gc_removes_only_unreachable_objects_older_than_the_grace_period(
    memory_store: ObjectStore, clock: Any, sample_builder: Callable[..., object]
) -> None:
    sample = sample_builder(memory_store)
    old = memory_store.put_bytes(b"old garbage" * 10)
    clock.advance(2 * HOUR)
    young = memory_store.put_bytes(b"young garbage")
    clock.advance(GRACE / 2)
    old_size = memory_store.backend.stat(old).size
    report = collect_garbage(memory_store, [sample.root], grace_seconds=GRACE, now=clock())
    assert ids(memory_store) == sample.all | {young}
    assert (report.objects_removed, report.bytes_freed) == (1, old_size)
    assert report.objects_young == 1
    assert report.dry_run is False


def test_re_putting_an_unreachable_object_restarts_its_grace_period(
    memory_store: ObjectStore, clock: Any
) -> None:
    oid = memory_store.put_bytes(b"written long ago, reused just now")
    clock.advance(10 * HOUR)
    assert memory_store.put_bytes(b"written long ago, reused just now") == oid
    report = collect_garbage(memory_store, [], grace_seconds=GRACE, now=clock())
    assert memory_store.has(oid)
    assert (report.objects_removed, report.objects_young) == (0, 1)


def test_dry_run_removes_nothing_and_reports_what_a_real_run_then_does(
    memory_store: ObjectStore, clock: Any, sample_builder: Callable[..., object]
) -> None:
    sample = sample_builder(memory_store)
    for n in range(7):
        memory_store.put_bytes(b"old %d " % n * 100)
    clock.advance(5 * HOUR)
    memory_store.put_bytes(b"young")
    before = ids(memory_store)
    dry = collect_garbage(
        memory_store, [sample.root], grace_seconds=GRACE, now=clock(), dry_run=True
    )
    assert ids(memory_store) == before
    assert dry.dry_run
    real = collect_garbage(memory_store, [sample.root], grace_seconds=GRACE, now=clock())
    counts = ("objects_removed", "bytes_freed", "objects_kept", "objects_young")
    assert [getattr(dry, c) for c in counts] == [getattr(real, c) for c in counts]
    assert real.objects_removed == 7
    assert len(ids(memory_store)) == len(before) - 7


@pytest.mark.parametrize("damage", ["missing", "corrupt"])
@pytest.mark.parametrize("victim", ["sub", "shared", "root"])
def test_damaged_tree_under_a_root_aborts_gc_before_removing_anything(
    clock: Any, sample_builder: Callable[..., object], damage: str, victim: str
) -> None:
    backend = MemoryBackend(clock=clock)
    writer = ObjectStore(backend)
    sample = sample_builder(writer)
    healthy = sample_builder(writer, b"another root")
    for n in range(3):
        writer.put_bytes(b"old garbage %d" % n)
    clock.advance(48 * HOUR)
    oid = getattr(sample, victim)
    if damage == "missing":
        backend.delete(oid)
    else:
        backend.replace_raw(oid, backend.get(healthy.shared))
    before = ids(writer)
    gc_store = ObjectStore(backend, StoreOptions())  # a later process: no tree cache
    expected = ObjectNotFound if damage == "missing" else CorruptObject
    for dry_run in (True, False):
        with pytest.raises(expected) as caught:
            collect_garbage(
                gc_store,
                [healthy.root, sample.root],
                grace_seconds=GRACE,
                now=clock(),
                dry_run=dry_run,
            )
        assert caught.value.oid == oid
    assert ids(writer) == before


def test_gc_on_a_local_store_uses_file_mtimes_for_the_grace_period(
    local_store: ObjectStore,
    object_file: Callable[..., str],
    sample_builder: Callable[..., object],
) -> None:
    sample = sample_builder(local_store)
    old = local_store.put_bytes(b"old unreachable")
    young = local_store.put_bytes(b"young unreachable")
    now = time.time()
    for oid in sample.all | {old}:
        os.utime(object_file(local_store, oid), (now - 2 * GRACE, now - 2 * GRACE))
    old_size = os.path.getsize(object_file(local_store, old))
    report = collect_garbage(local_store, [sample.root], grace_seconds=GRACE, now=now)
    assert ids(local_store) == sample.all | {young}
    assert not os.path.exists(object_file(local_store, old))
    assert (report.objects_removed, report.bytes_freed, report.objects_young) == (1, old_size, 1)


def test_gc_sweeps_leftover_temp_files_older_than_the_grace_period(
    local_store: ObjectStore, sample_builder: Callable[..., object]
) -> None:
    sample = sample_builder(local_store)
    objects: str = local_store.backend.path
    now = time.time()
    os.makedirs(os.path.join(objects, "7f"), exist_ok=True)
    leftovers = {}
    for name, age in ((".tmp-crashed", 2 * GRACE), (".tmp-in-flight", 10.0)):
        path = os.path.join(objects, "7f", name)
        with open(path, "wb") as out:
            out.write(b"partial object")
        os.utime(path, (now - age, now - age))
        leftovers[name] = path
    dry = collect_garbage(local_store, [sample.root], grace_seconds=GRACE, now=now, dry_run=True)
    assert dry.temporaries_removed == 0
    assert all(os.path.exists(path) for path in leftovers.values())
    report = collect_garbage(local_store, [sample.root], grace_seconds=GRACE, now=now)
    assert report.temporaries_removed == 1
    assert not os.path.exists(leftovers[".tmp-crashed"])
    assert os.path.exists(leftovers[".tmp-in-flight"])
    assert ids(local_store) == sample.all
