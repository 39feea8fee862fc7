"""PackedBackend beyond the shared contract (which it passes in test_backend_contract.py):
crash safety (unindexed packs, torn tails, a writer killed mid-batch, a compaction cut short,
a truncated pack), compaction after delete, concurrent writers and threads, a 200 MiB object
streamed from a pack with bounded memory, the store's layout switch, and the folding of a long
session's per-checkpoint packs."""

from __future__ import annotations

import io
import json
import math
import os
import random
import signal
import subprocess
import sys
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st
from soak import scale  # tests/ is on pytest's `pythonpath`

from ckpt.objstore import (
    CorruptObject,
    EntryKind,
    ObjectId,
    ObjectNotFound,
    ObjectStore,
    StoreOptions,
    Tree,
    TreeEntry,
    hash_bytes,
    packfile,
)
from ckpt.objstore.gc import collect_garbage
from ckpt.objstore.local import LocalBackend
from ckpt.objstore.pack import PackedBackend
from ckpt.objstore.packfile import read_index
from ckpt.objstore.repack import packs_to_fold

# -- helpers ----------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
KIB, MIB = 1 << 10, 1 << 20


def blobs(seed: int, count: int, low: int = 1 * KIB, high: int = 8 * KIB) -> list[bytes]:
    """Seeded opaque 'stored bytes' of 1-8 KiB; each stored under its own BLAKE3."""
    rng = random.Random(seed)
    return [rng.randbytes(rng.randrange(low, high)) for _ in range(count)]


def put_all(backend: PackedBackend, items: list[bytes]) -> list[ObjectId]:
    oids = []
    for data in items:
        oid = hash_bytes(data)
        backend.put(oid, data)
        oids.append(oid)
    return oids


def pack_files(objects: Path, suffix: str = ".pack") -> list[Path]:
    return sorted((objects / "packs").glob(f"pack-*{suffix}"))


def run_python(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    run = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                         timeout=timeout, cwd=REPO, env=ENV, check=False)
    assert run.returncode == 0, run.stderr
    return run


# A writer that puts seeded blobs in batches, syncing after each, and can die without closing.
WRITER = """
import os, random, sys
from ckpt.objstore import hash_bytes
from ckpt.objstore.pack import PackedBackend
path, seed, count, batch, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rng = random.Random(seed)
items = [rng.randbytes(rng.randrange(1024, 8192)) for _ in range(count)]
if mode == "shuffle":
    random.Random(os.getpid()).shuffle(items)
backend = PackedBackend(path, fsync="batch", loose_puts=0, pack_size=1 << 20)
for n, data in enumerate(items, 1):
    backend.put(hash_bytes(data), data)
    if n % batch == 0:
        backend.sync()
        print(n, flush=True)
if mode == "die":
    backend._writer.flush()  # what was written reached the kernel (not the disk: no fsync)
    os._exit(0)  # no sync, no close: the open pack has no index and nobody holds its lock
backend.close()
"""


# -- crash safety -----------------------------------------------------------------------------


def test_pack_left_without_index_by_a_dead_writer_is_indexed_by_scanning(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    run_python(WRITER, str(objects), "1", "150", "1000", "die")
    assert len(pack_files(objects)) == 1 and pack_files(objects, ".idx") == []
    reader = PackedBackend(str(objects))
    for data in blobs(1, 150):
        assert reader.get(hash_bytes(data)) == data
    assert len(pack_files(objects, ".idx")) == 1  # published for every later reader
    assert len(set(reader.iter_ids())) == 150
    reader.close()


def test_pack_of_a_live_writer_is_neither_indexed_nor_touched_by_others(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    writer = PackedBackend(str(objects), loose_puts=0)
    oids = put_all(writer, blobs(2, 50))
    other = PackedBackend(str(objects))
    assert not other.has(oids[0])
    assert other.sweep_temporaries(time.time() + 86400) == 0
    assert pack_files(objects, ".idx") == [] and len(pack_files(objects)) == 1
    writer.sync()
    assert other.get(oids[0]) == writer.get(oids[0])  # published: found after a catch-up
    writer.close()


@pytest.mark.parametrize("tail", ["torn", "zeros", "garbage"])
def test_torn_or_damaged_tail_record_is_ignored_and_the_rest_is_kept(
    tmp_path: Path, tail: str
) -> None:
    objects = tmp_path / "objects"
    run_python(WRITER, str(objects), "3", "40", "1000", "die")
    items = blobs(3, 40)
    (pack,) = pack_files(objects)
    size = pack.stat().st_size
    if tail == "torn":
        os.truncate(pack, size - len(items[-1]) // 2)  # the last record loses half its bytes
    else:
        os.chmod(pack, 0o644)
        with open(pack, "r+b") as out:
            out.seek(size - 100)
            out.write(bytes(100) if tail == "zeros" else b"\x5a" * 100)
    reader = PackedBackend(str(objects), loose_puts=0)
    for data in items[:-1]:
        assert reader.get(hash_bytes(data)) == data
    last = hash_bytes(items[-1])
    assert not reader.has(last)
    with pytest.raises(ObjectNotFound):
        reader.get(last)
    assert reader.put(last, items[-1]) is True  # stored again, whole, in a new pack
    reader.close()
    again = PackedBackend(str(objects))
    assert [again.get(hash_bytes(d)) for d in items] == items
    again.close()


@pytest.mark.parametrize("cut_to", [None, 0, 8, 40], ids=["flipped", "empty", "cut-8", "cut-40"])
def test_damaged_or_short_index_is_rebuilt_from_its_pack(tmp_path: Path, cut_to: int | None) -> None:
    """An index is derived from its pack. Its bytes are not fsynced (the pack's are), so after a
    power loss it may also be empty or cut short: opening the store rebuilds it from the pack
    instead of losing the objects."""
    objects = tmp_path / "objects"
    writer = PackedBackend(str(objects), loose_puts=0)
    oids = put_all(writer, items := blobs(6, 300))
    writer.close()
    (index,) = pack_files(objects, ".idx")
    os.chmod(index, 0o644)
    if cut_to is None:
        with open(index, "r+b") as out:
            out.seek(100)
            out.write(b"\xff\xff")
    else:
        os.truncate(index, cut_to)
    reader = PackedBackend(str(objects))
    assert [reader.get(oid) for oid in oids] == items
    reader.close()
    assert pack_files(objects, ".idx") == [index]
    found, _, _ = read_index(str(objects / "packs"), index.name.removesuffix(".idx"))
    assert sorted(found[n:n + 32] for n in range(0, len(found), 32)) == sorted(oids)


def test_writer_killed_mid_batch_loses_nothing_that_was_synced(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(objects), "5", "20000", "500", "keep"],
        stdout=subprocess.PIPE, text=True, cwd=REPO, env=ENV,
    )
    assert proc.stdout is not None
    synced = 0
    for line in proc.stdout:
        synced = int(line)
        if synced >= 2000:
            break
    time.sleep(0.05)  # well into the next batch
    proc.kill()
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    items = blobs(5, 20000)
    reader = PackedBackend(str(objects))
    for data in items[:synced]:
        assert reader.get(hash_bytes(data)) == data
    # Whatever else survived (recovered from the unindexed pack) is whole and correct.
    listed = set(reader.iter_ids())
    assert len(listed) >= synced
    by_id = {hash_bytes(d): d for d in items}
    for oid in listed:
        assert reader.get(oid) == by_id[oid]
    reader.close()


def test_a_crash_between_compaction_steps_leaves_duplicates_never_a_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    objects = tmp_path / "objects"
    backend = PackedBackend(str(objects), loose_puts=0)
    oids = put_all(backend, items := blobs(6, 200))
    backend.sync()
    for oid in oids[:50]:
        backend.delete(oid)
    real_unlink = os.unlink

    def crash_on_old_pack(path: Any, *args: Any, **kwargs: Any) -> None:
        if str(path).endswith(".pack"):
            raise OSError("simulated crash")
        real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", crash_on_old_pack)
    with pytest.raises(OSError, match="simulated"):
        backend.sync()
    monkeypatch.undo()
    reader = PackedBackend(str(objects))
    assert len(pack_files(objects, ".idx")) == 2  # the new pack and the old one, both whole
    assert [reader.get(oid) for oid in oids[50:]] == items[50:]
    reader.close()


# -- deletion and compaction ------------------------------------------------------------------


def test_delete_then_sync_rewrites_the_pack_and_frees_the_bytes(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    backend = PackedBackend(str(objects), loose_puts=0)
    oids = put_all(backend, items := blobs(7, 2000))
    backend.sync()
    before = sum(p.stat().st_size for p in pack_files(objects))
    freed = sum(backend.delete(oid) for oid in oids[::2])
    assert freed == sum(len(d) for d in items[::2])
    assert set(backend.iter_ids()) == set(oids[1::2])
    backend.sync()
    after = sum(p.stat().st_size for p in pack_files(objects))
    assert before - after >= freed  # record headers go too
    assert [backend.get(oid) for oid in oids[1::2]] == items[1::2]
    backend.close()
    reader = PackedBackend(str(objects))
    assert set(reader.iter_ids()) == set(oids[1::2])
    assert not any(reader.has(oid) for oid in oids[::2])
    reader.close()


def test_deleting_every_object_of_a_pack_removes_the_pack(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    backend = PackedBackend(str(objects), loose_puts=0)
    oids = put_all(backend, blobs(8, 30))
    for oid in oids:
        backend.delete(oid)
    backend.close()
    assert pack_files(objects) == [] and pack_files(objects, ".idx") == []


def test_compaction_keeps_a_pack_that_another_process_refreshed_since_the_delete(
    tmp_path: Path,
) -> None:
    objects = tmp_path / "objects"
    writer = PackedBackend(str(objects), loose_puts=0)
    oids = put_all(writer, items := blobs(9, 20))
    writer.close()
    (pack,) = pack_files(objects)
    os.utime(pack, (time.time() - 7200, time.time() - 7200))
    collector = PackedBackend(str(objects))
    collector.delete(oids[0])
    assert PackedBackend(str(objects)).refresh(oids[0])  # a writer re-uses it meanwhile
    collector.sync()
    reader = PackedBackend(str(objects))
    assert [reader.get(oid) for oid in oids] == items  # nothing lost
    collector.close()


def test_compact_folds_loose_objects_and_small_packs_into_one_pack(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    for seed in (10, 11, 12):  # three small packs from three short-lived writers
        writer = PackedBackend(str(objects), loose_puts=0)
        put_all(writer, blobs(seed, 40))
        writer.close()
    loose = PackedBackend(str(objects), loose_puts=1000)
    put_all(loose, blobs(13, 40))
    loose.close()
    assert len(pack_files(objects)) == 3
    assert len(list(objects.glob("??/*"))) == 40
    backend = PackedBackend(str(objects))
    backend.compact()
    assert len(pack_files(objects)) == 1 and list(objects.glob("??/*")) == []
    every = [d for seed in (10, 11, 12, 13) for d in blobs(seed, 40)]
    assert sorted(backend.iter_ids()) == sorted(hash_bytes(d) for d in every)
    assert all(backend.get(hash_bytes(d)) == d for d in every)
    backend.close()


def test_gc_on_a_packed_store_sweeps_old_garbage_and_compacts(tmp_path: Path) -> None:
    store = ObjectStore.init(str(tmp_path / "store"))
    backend = store.backend
    assert isinstance(backend, PackedBackend)
    backend.loose_puts = backend._loose_left = 0
    keep = [store.put_bytes(b"live %d " % n * 50) for n in range(100)]
    garbage = [store.put_bytes(b"garbage %d " % n * 50) for n in range(100)]
    root = store.put_tree(Tree.build(
        [TreeEntry(b"f%d" % n, EntryKind.FILE, oid, None, 1) for n, oid in enumerate(keep)]))
    store.sync()
    for pack in pack_files(tmp_path / "store" / "objects"):
        os.utime(pack, (time.time() - 7200, time.time() - 7200))
    report = collect_garbage(store, [root], grace_seconds=3600, now=time.time())
    assert report.objects_removed == 100 and report.bytes_freed > 0
    store.close()
    again = ObjectStore.open(str(tmp_path / "store"))
    assert set(again.backend.iter_ids()) == set(keep) | {root}
    assert all(again.get_bytes(oid) == b"live %d " % n * 50 for n, oid in enumerate(keep))
    assert not any(again.has(oid) for oid in garbage)
    again.close()


# -- concurrency ------------------------------------------------------------------------------


def test_two_processes_putting_overlapping_objects_both_end_up_readable(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(objects), "14", "3000", "1000",
                          "shuffle"], stdout=subprocess.DEVNULL, cwd=REPO, env=ENV)
        for _ in range(2)
    ]
    assert [proc.wait(timeout=120) for proc in procs] == [0, 0]
    items = blobs(14, 3000)
    reader = PackedBackend(str(objects))
    listed = list(reader.iter_ids())
    assert len(listed) == len(set(listed)) == 3000  # duplicates across packs listed once
    assert all(reader.get(hash_bytes(d)) == d for d in items)
    doomed = [hash_bytes(d) for d in items[:1000]]
    for oid in doomed:  # each may sit in both processes' packs
        reader.delete(oid)
    reader.close()
    after = PackedBackend(str(objects))
    assert not any(after.has(oid) for oid in doomed)
    assert all(after.get(hash_bytes(d)) == d for d in items[1000:])
    after.close()


def test_threads_putting_and_reading_share_one_pack_safely(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    backend = PackedBackend(str(objects), loose_puts=16, pack_size=256 * KIB)
    items = blobs(15, 4000)

    def work(part: list[bytes]) -> None:
        for data in part:
            oid = hash_bytes(data)
            backend.put(oid, data)
            assert backend.get(oid) == data

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(work, [items[n::4] + items[: 200] for n in range(4)]))
    backend.close()
    reader = PackedBackend(str(objects))
    assert sorted(reader.iter_ids()) == sorted({hash_bytes(d) for d in items})
    assert all(reader.get(hash_bytes(d)) == d for d in items)
    assert len(pack_files(objects)) > 4  # rolled over at pack_size
    reader.close()



# -- background sealing -------------------------------------------------------------------------


def test_a_full_pack_is_sealed_in_the_background_and_readable_meanwhile(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from ckpt.objstore import packfile

    objects = tmp_path / "objects"
    release = threading.Event()
    real_write_index = packfile.write_index

    sealed_by: list[str] = []

    def held_write_index(*args: Any, **kwargs: Any) -> None:
        sealed_by.append(threading.current_thread().name)
        if threading.current_thread() is not threading.main_thread():
            release.wait(30)
        real_write_index(*args, **kwargs)

    monkeypatch.setattr(packfile, "write_index", held_write_index)
    backend = PackedBackend(str(objects), loose_puts=0, pack_size=64 * KIB)
    items = blobs(21, 60)  # ~270 KiB: several packs fill up while the first seals are held
    oids = put_all(backend, items)

    assert pack_files(objects, ".idx") == [] and len(pack_files(objects)) >= 4
    assert all(backend.get(oid) == data for oid, data in zip(oids, items))
    other = PackedBackend(str(objects))
    assert not other.has(oids[0])  # unpublished, and a live writer's: not recovered by others
    assert backend.sweep_temporaries(time.time() + 86400) == 0  # its own seals are left alone
    assert all(backend.has(oid) for oid in oids) and pack_files(objects, ".idx") == []
    release.set()
    backend.sync()

    assert len(pack_files(objects, ".idx")) == len(pack_files(objects))
    assert all(other.get(oid) == data for oid, data in zip(oids, items))
    # Every full pack was sealed off the putting thread; only the last, partial one by sync.
    assert sealed_by[-1] == "MainThread" and len(sealed_by) == len(pack_files(objects))
    assert all(name.startswith("objstore-seal-") for name in sealed_by[:-1])
    backend.close()
    other.close()


def test_a_failed_background_seal_is_raised_by_sync_and_its_pack_removed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A seal that fails (a full disk) removes its pack: a failed write keeps none of its
    bytes, and what it held is put again by the next write."""
    import errno

    from ckpt.objstore import packfile

    objects = tmp_path / "objects"
    real_write_index = packfile.write_index
    failures = [OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(objects))]

    def failing_once(*args: Any, **kwargs: Any) -> None:
        if failures:
            raise failures.pop()
        real_write_index(*args, **kwargs)

    monkeypatch.setattr(packfile, "write_index", failing_once)
    backend = PackedBackend(str(objects), loose_puts=0, pack_size=64 * KIB)
    items = blobs(22, 30)
    oids = put_all(backend, items)

    with pytest.raises(OSError) as raised:
        backend.sync()
    assert raised.value.errno == errno.ENOSPC
    assert len(pack_files(objects, ".idx")) == len(pack_files(objects))  # no bare pack left
    lost = [oid for oid in oids if not backend.has(oid)]
    assert lost
    assert put_all(backend, [items[oids.index(oid)] for oid in lost]) == lost
    backend.sync()  # space is back
    reader = PackedBackend(str(objects))
    assert len(pack_files(objects, ".idx")) == len(pack_files(objects))
    assert sorted(reader.iter_ids()) == sorted(oids)
    assert all(reader.get(oid) == data for oid, data in zip(oids, items))
    backend.close()
    reader.close()


# -- large objects ------------------------------------------------------------------------------

READER = """
import os, sys
pid = os.fork()
if pid:
    sys.exit(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
import json, resource
from ckpt.objstore import ObjectStore, parse_oid

class Sink:
    size = 0
    def write(self, chunk):
        self.size += len(chunk)

store = ObjectStore.open(sys.argv[1])
where = store.backend.find_location(parse_oid(sys.argv[2]))
sink = Sink()
copied = store.copy_to(parse_oid(sys.argv[2]), sink)
print(json.dumps({"where": where, "copied": copied,
                  "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
os._exit(0)
"""


@pytest.mark.slow
def test_a_200_mib_object_streams_from_a_pack_with_bounded_memory(tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    rng = random.Random(16)
    with open(source, "wb") as out:
        out.writelines(rng.randbytes(MIB) for _ in range(200))
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(fsync="none"))
    put = store.put_file(str(source))
    store.put_bytes(b"a small neighbour")
    source.unlink()
    backend = store.backend
    assert isinstance(backend, PackedBackend)
    assert "/packs/" not in (backend.find_location(put.oid) or "")  # large: streamed loose
    backend.compact()  # GC folds loose objects into packs, the large one included
    assert "/packs/" in (backend.find_location(put.oid) or "")
    store.close()
    result = json.loads(run_python(READER, str(tmp_path / "store"), put.oid.hex()).stdout)
    assert result["copied"] == 200 * MIB and "/packs/" in result["where"]
    assert result["maxrss_kib"] * 1024 < 100 * 1000 * 1000, result


# -- the store's layout -------------------------------------------------------------------------


def test_a_new_store_is_packed_and_a_loose_store_stays_loose(tmp_path: Path) -> None:
    packed = ObjectStore.init(str(tmp_path / "packed"))
    assert isinstance(packed.backend, PackedBackend)
    assert (tmp_path / "packed" / "objects" / "packs").is_dir()
    oids = [packed.put_bytes(b"object %d" % n) for n in range(300)]
    packed.close()
    assert not list((tmp_path / "packed" / "objects").glob("??/*"))  # one pack, no loose file
    assert len(list((tmp_path / "packed" / "objects" / "packs").glob("*.idx"))) == 1
    reopened = ObjectStore.open(str(tmp_path / "packed"))
    assert [reopened.get_bytes(oid) for oid in oids] == [b"object %d" % n for n in range(300)]
    reopened.close()
    ObjectStore.init(str(tmp_path / "loose"), StoreOptions(layout="loose")).close()
    for opened in (ObjectStore.open(str(tmp_path / "loose")),
                   ObjectStore.init(str(tmp_path / "loose"))):  # default options: still loose
        assert isinstance(opened.backend, LocalBackend)
        opened.close()
    assert not (tmp_path / "loose" / "objects" / "packs").exists()


def test_refresh_of_a_packed_object_touches_its_pack(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    backend = PackedBackend(str(objects), loose_puts=0)
    (oid,) = put_all(backend, [b"refresh me"])
    backend.sync()
    (pack,) = pack_files(objects)
    os.utime(pack, (1_000_000, 1_000_000))
    assert backend.stat(oid).mtime == 1_000_000
    assert backend.refresh(oid)
    assert pack.stat().st_mtime > time.time() - 60
    backend.close()


# -- the index across instances ---------------------------------------------------------------


def test_lookups_agree_before_and_after_the_index_tables_merge(tmp_path: Path) -> None:
    objects = tmp_path / "objects"
    writers = [PackedBackend(str(objects), loose_puts=0) for _ in range(2)]
    for writer, seed in zip(writers, (17, 18)):  # neither sees the other's pack: 100 dupes
        put_all(writer, blobs(seed, 300) + blobs(19, 100))
    for writer in writers:
        writer.close()
    every = blobs(17, 300) + blobs(18, 300) + blobs(19, 100)
    absent = [hash_bytes(b"absent %d" % n) for n in range(50)]
    reader = PackedBackend(str(objects))
    for _merged in (False, True):  # searched in place first; iter_ids merges every index
        assert all(reader.get(hash_bytes(d)) == d for d in every)
        assert not any(reader.has(oid) for oid in absent)
        assert len(set(reader.iter_ids())) == 700
    shared = hash_bytes(blobs(19, 1)[0])
    assert reader.delete(shared) == 2 * len(blobs(19, 1)[0])  # both copies
    reader.close()
    assert not PackedBackend(str(objects)).has(shared)


def test_a_long_lived_reader_follows_publishing_and_compaction_by_another_process(
    tmp_path: Path,
) -> None:
    objects = tmp_path / "objects"
    reader = PackedBackend(str(objects))
    writer = PackedBackend(str(objects), loose_puts=0)
    oids = put_all(writer, items := blobs(20, 200))
    assert not reader.has(oids[0])  # not published yet
    writer.sync()
    assert reader.has(oids[0]) and reader.get(oids[1]) == items[1]  # caught up
    for oid in oids[:100]:
        writer.delete(oid)
    writer.sync()  # rewrites the pack the reader has loaded (and has open)
    assert not reader.has(oids[0]) and not reader.refresh(oids[2])
    assert reader.stat(oids[150]).size == len(items[150])
    assert [reader.get(oid) for oid in oids[100:]] == items[100:]
    writer.close()
    reader.close()


# -- folding the small packs of a long session -------------------------------------------------


def test_a_long_session_folds_its_per_checkpoint_packs_and_loses_nothing(tmp_path: Path) -> None:
    """One pack per sync (an agent turn), folded once there are more than `fold_after`: the
    pack count stays small, every object stays readable, also to a reader opened before the
    folds, and the writer's descriptors of folded packs are closed, not kept."""
    objects = tmp_path / "objects"
    writer = PackedBackend(str(objects), fold_after=4)
    reader = PackedBackend(str(objects))
    rng = random.Random(7)
    stored: dict[ObjectId, bytes] = {}
    counts = []
    fds_before = len(os.listdir("/proc/self/fd"))
    for turn in range(60):
        items = blobs(1000 + turn, rng.randrange(1, 40), low=64, high=4 * KIB)
        stored.update(zip(put_all(writer, items), items))
        writer.sync()
        counts.append(len(pack_files(objects)))
        sample = rng.sample(sorted(stored), 5)
        assert [writer.get(oid) for oid in sample] == [stored[oid] for oid in sample]
        assert [reader.get(oid) for oid in sample] == [stored[oid] for oid in sample]
    assert not list(objects.glob("??/*"))  # nothing loose
    assert max(counts) <= 4 + 1 and min(counts[8:]) < 4  # folded, more than once
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 4 + 2
    for backend in (writer, reader, PackedBackend(str(objects))):
        assert sorted(backend.iter_ids()) == sorted(stored)
        assert all(backend.get(oid) == data for oid, data in stored.items())
        backend.close()


def test_packs_a_writer_holds_are_not_folded_by_another(tmp_path: Path) -> None:
    """A pack still being written (its flock held) is never a fold source: only published
    packs are listed, and `_take` skips a locked one."""
    objects = tmp_path / "objects"
    slow = PackedBackend(str(objects))
    held = put_all(slow, slow_items := blobs(30, 10))  # open, unpublished pack
    busy = PackedBackend(str(objects), fold_after=2)
    for turn in range(8):
        put_all(busy, blobs(40 + turn, 5))
        busy.sync()
    slow.sync()
    assert [slow.get(oid) for oid in held] == slow_items
    fresh = PackedBackend(str(objects))
    assert [fresh.get(oid) for oid in held] == slow_items
    for backend in (slow, busy, fresh):
        backend.close()


@settings(max_examples=200, deadline=None, database=None)
@given(turns=st.lists(st.integers(1, 5000), min_size=1, max_size=300),
       keep_at_most=st.integers(2, 12))
def test_folding_keeps_a_progression_and_rewrites_each_byte_a_logarithmic_number_of_times(
    turns: list[int], keep_at_most: int,
) -> None:
    """A session of syncs, each adding one pack of the given size and folding what
    `packs_to_fold` names: the lightest packs, never fewer than two; what stays each
    outweighs twice everything lighter; bytes are conserved; and no byte is rewritten more
    than log1.5 of the session's size times."""
    packs: dict[str, int] = {}
    rewritten = 0
    for number, size in enumerate(turns):
        packs[f"p{number}"] = size
        doomed = packs_to_fold(packs, keep_at_most=keep_at_most)
        if len(packs) <= keep_at_most:
            assert doomed == []
        if not doomed:
            continue
        assert len(doomed) >= 2 and len(set(doomed)) == len(doomed)
        kept = sorted(size for name, size in packs.items() if name not in doomed)
        assert max(packs[name] for name in doomed) <= min(kept, default=float("inf"))
        folded = sum(packs.pop(name) for name in doomed)
        rewritten += folded
        packs[f"fold{number}"] = folded
        lighter = folded
        for size in kept:
            assert size >= 2 * lighter
            lighter += size
    assert sum(packs.values()) == sum(turns)
    assert rewritten <= sum(turns) * (math.log(sum(turns), 1.5) + 1)


def test_a_record_cut_off_by_a_truncated_pack_reads_as_corrupt_naming_the_object(
    tmp_path: Path,
) -> None:
    """The index still promises the record; the pack no longer holds it (truncated by a bad
    copy or a full disk): every read names the object as corrupt, never a bare EOFError."""
    store = ObjectStore.init(str(tmp_path / "store"))
    items = [os.urandom(5000 + n) for n in range(5)]
    oids = [store.put_bytes(data) for data in items]
    store.close()
    (pack,) = pack_files(tmp_path / "store" / "objects")
    os.truncate(pack, pack.stat().st_size - 100)  # into the last record written
    reopened = ObjectStore.open(str(tmp_path / "store"))
    cut = [oid for oid, data in zip(oids, items) if not _reads_back(reopened, oid, data)]
    assert len(cut) == 1
    for read in (reopened.get_bytes, lambda o: reopened.copy_to(o, io.BytesIO()),
                 reopened.verify):
        with pytest.raises(CorruptObject) as caught:
            read(cut[0])
        assert caught.value.oid == cut[0]
    reopened.close()


def _reads_back(store: ObjectStore, oid: ObjectId, data: bytes) -> bool:
    try:
        return store.get_bytes(oid) == data
    except CorruptObject:
        return False


# -- record crcs and batches -------------------------------------------------------------


@hypothesis_seed(31)
@settings(max_examples=scale(300, 3000), deadline=None, database=None)
@given(data=st.binary(max_size=600), start=st.integers(0, 2**32 - 1),
       skip=st.integers(0, 15), oid=st.binary(min_size=32, max_size=32))
def test_record_crcs_are_zlibs_whichever_implementation_computes_them(
    data: bytes, start: int, skip: int, oid: bytes,
) -> None:
    """The native crc32 (objstore/_records.c: carry-less multiply over 64-byte steps, tables
    for the rest) gives zlib's result at every length, alignment and starting value; so does
    the crc of a record, and so do the records framed for a batch."""
    view = memoryview(data)[skip:]
    assert packfile.crc32(view, start) == zlib.crc32(view, start)
    assert packfile.crc32(bytes(view)) == zlib.crc32(view)
    assert packfile.record_crc(oid, data) == zlib.crc32(
        oid + len(data).to_bytes(8, "little"), zlib.crc32(data))
    objects = [(oid, data), (bytes(reversed(oid)), bytes(view))]
    buffer = bytearray(b"x" * 700)  # longer than some batches: what is past them stays
    framed = bytes(packfile.frame_records(objects, None, buffer))
    crcs = [packfile.record_crc(*o) for o in objects]
    assert framed == bytes(packfile.frame_records(objects, crcs, bytearray()))
    at = 0
    for record_oid, stored in objects:
        found, length, crc = packfile.RECORD.unpack_from(framed, at)
        assert (found, length, crc) == (record_oid, len(stored),
                                        packfile.record_crc(record_oid, stored))
        at += packfile.RECORD.size
        assert framed[at:at + length] == stored
        at += length
    assert at == len(framed)


def test_a_long_crc_agrees_with_zlibs() -> None:
    """Megabytes, the size of a fetched part, through the 64-byte folding loop."""
    data = random.Random(32).randbytes(3 << 20)
    assert packfile.crc32(data) == zlib.crc32(data)
    assert packfile.crc32(data[5:], 12345) == zlib.crc32(data[5:], 12345)


@hypothesis_seed(33)
@settings(max_examples=scale(25, 250), deadline=None, database=None)
@given(batches=st.lists(st.lists(st.integers(0, 3000), min_size=1, max_size=40),
                        min_size=1, max_size=6),
       pack_size=st.integers(1000, 20000), with_crcs=st.booleans())
def test_batches_fill_packs_to_their_size_and_read_back_after_reopening(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[int]], pack_size: int,
    with_crcs: bool,
) -> None:
    """`put_absent_many` of new objects writes each batch framed in one piece, cut where a
    pack is full: every object reads back (from this instance and, once synced, from a new
    one), each sealed pack ends within one record of `pack_size`, and a batch that repeats
    or already holds an id still stores each once."""
    objects_dir = tmp_path_factory.mktemp("batches") / "objects"
    backend = PackedBackend(str(objects_dir), pack_size=pack_size)
    rng = random.Random(len(batches) * pack_size)
    stored: dict[ObjectId, bytes] = {}
    for sizes in batches:
        batch = []
        for size in sizes:
            data = rng.randbytes(size)
            batch.append((hash_bytes(data), data))
        if len(batch) > 2 and rng.random() < 0.3:
            batch.append(batch[0])  # the same id twice in one batch
        if stored and rng.random() < 0.3:
            batch.append(next(iter(stored.items())))  # one stored before
        crcs = [packfile.record_crc(oid, data) for oid, data in batch] if with_crcs else None
        results = backend.put_absent_many(batch, crcs)
        new = set()
        for (oid, _), result in zip(batch, results):
            assert result == (oid not in stored and oid not in new)
            new.add(oid)
        stored.update(batch)
    assert all(backend.get(oid) == data for oid, data in stored.items())
    backend.sync()
    largest = max(map(len, stored.values())) + packfile.RECORD.size
    for pack in pack_files(objects_dir):
        assert pack.stat().st_size <= pack_size + largest + len(packfile.PACK_MAGIC)
    reopened = PackedBackend(str(objects_dir))
    assert sorted(reopened.iter_ids()) == sorted(stored)
    assert all(reopened.get(oid) == data for oid, data in stored.items())
    for done in (backend, reopened):
        done.close()
