"""`ObjectStore.put_files`: the batch path of a first snapshot gives, file for file, what
`put_file` gives (same ids, same verified content, per-file errors as values, in order), with
compression batched on native threads; and `codec.compress_batch` keeps frames in input order."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt.objstore import (
    ContentChanged,
    ObjectStore,
    ObjstoreError,
    PutResult,
    StoreOptions,
    codec,
    hash_bytes,
)
from ckpt.objstore import putfiles as putfiles_module
from ckpt.objstore.backend import BulkBackend
from ckpt.objstore.ids import ObjectId
from ckpt.objstore.memory import MemoryBackend
from ckpt.objstore.objects import Tree
from ckpt.objstore.pack import PackedBackend

Content = Callable[[str, int, int], bytes]


def write(path: Path, data: bytes) -> bytes:
    path.write_bytes(data)
    return os.fsencode(path)


def make_files(tmp_path: Path, content: Content) -> tuple[list[bytes], dict[bytes, bytes]]:
    """A mix: text, tiny, empty, incompressible, a streamed one, duplicates, and failures."""
    files = tmp_path / "files"
    files.mkdir()
    data = {
        "text": content("text", 20_000, 1),
        "tiny": b"x" * 10,
        "empty": b"",
        "random": content("random", 30_000, 2),
        "large": content("sparse", 3 << 20, 3),  # above the stream threshold set below
        "dup1": content("text", 5_000, 4),
        "dup2": content("text", 5_000, 4),
        "text2": content("text", 70_000, 5),
    }
    paths = []
    expected: dict[bytes, bytes] = {}
    for name, blob in data.items():
        path = write(files / name, blob)
        paths.append(path)
        expected[path] = blob
    (files / "dir").mkdir()
    os.symlink(files / "text", files / "link")
    os.mkfifo(files / "fifo")
    paths[3:3] = [
        os.fsencode(files / "missing"),
        os.fsencode(files / "dir"),
        os.fsencode(files / "link"),
        os.fsencode(files / "fifo"),
    ]
    return paths, expected


@pytest.fixture(params=["native", "python"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """put_files reading through the native reader, then through its Python fallback."""
    if request.param == "native":
        if putfiles_module._native_read_files is None:
            pytest.skip("objstore._readfiles is not built")
    else:
        monkeypatch.setattr(putfiles_module, "_native_read_files", None)
    return str(request.param)


@pytest.mark.parametrize("layout", ["packed", "loose"])
@pytest.mark.parametrize("level", [0, 1, 3])
def test_put_files_matches_put_file_file_for_file(
    tmp_path: Path, content: Content, layout: str, level: int, reader: str
) -> None:
    paths, expected = make_files(tmp_path, content)
    options = StoreOptions(compression_level=level, layout=layout,  # type: ignore[arg-type]
                           stream_threshold=1 << 20, block_size=0)  # blocks: test_blocks.py
    batch = ObjectStore.init(str(tmp_path / "batch"), options)
    single = ObjectStore.init(str(tmp_path / "single"), options)
    results = list(batch.put_files(paths, threads=2))
    assert len(results) == len(paths)
    for path, result in zip(paths, results):
        try:
            want: PutResult | OSError = single.put_file(path)
        except OSError as exc:
            want = exc
        if isinstance(want, OSError):
            assert type(result) is type(want) and result.errno == want.errno, path
            continue
        assert isinstance(result, PutResult), (path, result)
        assert (result.oid, result.size, result.is_new) == (want.oid, want.size, want.is_new)
        assert result.oid == hash_bytes(expected[path])
        st = os.stat(path)
        assert (result.stat.st_mode, result.stat.st_size, result.stat.st_mtime_ns,
                result.stat.st_ctime_ns, result.stat.st_ino) == (
            st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        assert batch.get_bytes(result.oid) == expected[path]
        if result.is_new:
            assert result.stored_bytes == batch.backend.stat(result.oid).size
        else:
            assert result.stored_bytes == 0
    by_name = {os.path.basename(p): r for p, r in zip(paths, results)}
    assert by_name[b"dup1"].is_new and not by_name[b"dup2"].is_new
    assert isinstance(by_name[b"missing"], FileNotFoundError)
    assert isinstance(by_name[b"link"], OSError) and by_name[b"link"].errno == errno.ELOOP
    assert isinstance(by_name[b"dir"], OSError) and isinstance(by_name[b"fifo"], OSError)
    batch.close()
    single.close()
    reopened = ObjectStore.open(str(tmp_path / "batch"), options)  # published, verified
    for path, result in zip(paths, results):
        if isinstance(result, PutResult):
            assert reopened.get_bytes(result.oid) == expected[path]
    reopened.close()


def test_put_files_of_stored_content_is_not_new(tmp_path: Path, content: Content) -> None:
    paths, _ = make_files(tmp_path, content)
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(stream_threshold=1 << 20))
    first = [r for r in store.put_files(paths) if isinstance(r, PutResult)]
    store.sync()
    again = [r for r in store.put_files(paths) if isinstance(r, PutResult)]
    assert [r.oid for r in again] == [r.oid for r in first]
    assert not any(r.is_new or r.stored_bytes for r in again)
    store.close()


def _compress_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("objstore-compress")]


def test_put_files_of_one_batch_compresses_it_without_a_thread(
        tmp_path: Path, content: Content) -> None:
    files = tmp_path / "few"
    files.mkdir()
    blobs = [content("text", 20_000, i) for i in range(5)]
    paths = [write(files / f"f{i}", blob) for i, blob in enumerate(blobs)]
    store = ObjectStore.init(str(tmp_path / "store"))
    results = store.put_files(paths, threads=2)
    first = next(results)  # the batch is written by now; a pool would still be running
    assert _compress_threads() == []
    rest = list(results)
    for blob, result in zip(blobs, [first, *rest]):
        assert isinstance(result, PutResult) and result.is_new
        assert result.stored_bytes < len(blob) // 2  # compressed all the same
        assert store.get_bytes(result.oid) == blob
    store.close()


def test_put_files_many_batches_stay_in_order_and_in_packs(
    tmp_path: Path, content: Content, reader: str
) -> None:
    files = tmp_path / "many"
    files.mkdir()
    count = putfiles_module._BATCH_ITEMS * 3 + 7  # several batches, several in flight
    blobs = [content("text", 200 + i * 7, i) + i.to_bytes(4, "little") for i in range(count)]
    blobs += [content("random", 700_000, 99)] * 5  # batches closed by size, duplicates across
    paths = [write(files / f"f{i}", blob) for i, blob in enumerate(blobs)]
    store = ObjectStore.init(str(tmp_path / "store"))
    stream = store.put_files(paths, threads=2)
    results = [next(stream)]
    assert _compress_threads()  # more than a batch: compressed beside the reading
    results += stream
    assert [r.oid for r in results] == [hash_bytes(b) for b in blobs]  # type: ignore[union-attr]
    assert sum(r.is_new for r in results) == count + 1  # type: ignore[union-attr]
    store.close()
    store = ObjectStore.open(str(tmp_path / "store"))
    assert isinstance(store.backend, PackedBackend)
    for blob, result in zip(blobs, results):
        assert store.get_bytes(result.oid) == blob  # type: ignore[union-attr]
    assert os.listdir(tmp_path / "store" / "objects" / "packs")
    store.close()


def _numbered_files(tmp_path: Path, content: Content, count: int) -> tuple[list[bytes], list[bytes]]:
    files = tmp_path / "numbered"
    files.mkdir()
    blobs = [content("text", 300 + i % 97, i) + i.to_bytes(4, "little") for i in range(count)]
    return [write(files / f"f{i}", blob) for i, blob in enumerate(blobs)], blobs


def _assert_stored_in_order(store: ObjectStore, results: Sequence[object],
                            blobs: list[bytes]) -> None:
    assert [r.oid for r in results] == [hash_bytes(b) for b in blobs]  # type: ignore[attr-defined]
    for blob, result in zip(blobs, results):
        assert store.get_bytes(result.oid) == blob  # type: ignore[attr-defined]


def test_put_files_compresses_here_what_a_stalled_pool_has_not_started(
    tmp_path: Path, content: Content, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The pool's one thread is held on its first batch until the calling thread, finding the
    # pool behind, compresses a queued batch itself; whichever thread compressed each batch,
    # the results and the stored objects keep the input order.
    paths, blobs = _numbered_files(tmp_path, content, putfiles_module._BATCH_ITEMS * 8 + 3)
    caller = threading.get_ident()
    helped = threading.Event()
    by_caller: list[int] = []
    real = codec.compress_batch

    def compress_batch(items: list[bytes], level: int, threads: int) -> object:
        if threading.get_ident() == caller:
            by_caller.append(len(items))
            helped.set()
        else:
            helped.wait(timeout=60)
        return real(items, level, threads)

    monkeypatch.setattr(codec, "compress_batch", compress_batch)
    # Without dictionaries: every batch goes through the patched `compress_batch`.
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(dictionaries=False,
                                                                    block_size=0))
    results = list(store.put_files(paths, threads=2))
    assert len(by_caller) >= 2  # a batch taken back from the pool, and the last one
    _assert_stored_in_order(store, results, blobs)
    store.close()
    store = ObjectStore.open(str(tmp_path / "store"))
    _assert_stored_in_order(store, results, blobs)
    store.close()


def test_put_files_streams_large_files_on_the_pool_or_here_in_order(
    tmp_path: Path, content: Content, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files above the stream threshold go to the pool like batches. The pool's thread is
    # held on the first until the calling thread streams one it took back; results keep
    # the input order, small and large files interleaved.
    files = tmp_path / "mixed"
    files.mkdir()
    blobs = []
    for i in range(12):
        blobs.append(content("text", 2_000, i) + i.to_bytes(4, "little"))
        if i % 2:
            blobs.append(content("text", (1 << 20) + 4_096 * i, 100 + i))
    paths = [write(files / f"f{i}", blob) for i, blob in enumerate(blobs)]
    caller = threading.get_ident()
    helped = threading.Event()
    here: list[int] = []
    real = ObjectStore._put_large

    def put_large(self: ObjectStore, fd: int, *args: object, **kwargs: object) -> PutResult:
        if threading.get_ident() == caller:
            here.append(fd)
            helped.set()
        else:
            helped.wait(timeout=60)
        return real(self, fd, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(ObjectStore, "_put_large", put_large)
    store = ObjectStore.init(str(tmp_path / "store"), StoreOptions(stream_threshold=1 << 20))
    results = list(store.put_files(paths, threads=2))
    assert here  # a large file taken back from the stalled pool
    _assert_stored_in_order(store, results, blobs)
    store.close()


def test_a_large_file_never_streamed_has_its_descriptor_closed(tmp_path: Path) -> None:
    # put_files hands a large file's open descriptor to the pool; a put stopped early
    # cancels what no thread has started, and `discard` must close those descriptors.
    from concurrent.futures import ThreadPoolExecutor

    path = write(tmp_path / "big", b"x" * 100)
    release = threading.Event()
    ran: list[int] = []

    def put() -> Any:
        ran.append(1)

    with ThreadPoolExecutor(1) as pool:
        pool.submit(release.wait, 60)  # the only thread is busy: the next call waits
        fd = os.open(path, os.O_RDONLY)
        queued = putfiles_module._LargeFile(put, fd, [None])
        queued.submit(pool)
        pool.shutdown(wait=False, cancel_futures=True)
        release.set()
    queued.discard()
    assert ran == []
    with pytest.raises(OSError) as closed:
        os.fstat(fd)
    assert closed.value.errno == errno.EBADF


def test_put_files_on_one_thread_starts_no_thread(tmp_path: Path, content: Content) -> None:
    paths, blobs = _numbered_files(tmp_path, content, putfiles_module._BATCH_ITEMS * 3 + 1)
    store = ObjectStore.init(str(tmp_path / "store"))
    stream = store.put_files(paths, threads=1)
    results = [next(stream)]
    assert _compress_threads() == []
    results += stream
    assert all(r.stored_bytes < 300 for r in results)  # type: ignore[union-attr]
    _assert_stored_in_order(store, results, blobs)
    store.close()


def test_put_files_stopped_early_leaves_a_usable_store_and_no_thread(
    tmp_path: Path, content: Content
) -> None:
    files = tmp_path / "files"
    files.mkdir()
    blobs = [content("text", 3_000, i) + bytes([i % 256, i // 256]) for i in range(1_500)]
    paths = [write(files / f"f{i}", blob) for i, blob in enumerate(blobs)]
    store = ObjectStore.init(str(tmp_path / "store"))
    before = threading.active_count()
    results = store.put_files(paths)
    taken = [next(results) for _ in range(600)]
    results.close()  # type: ignore[attr-defined]
    assert threading.active_count() == before
    for blob, result in zip(blobs, taken):
        assert store.get_bytes(result.oid) == blob  # type: ignore[union-attr]
    again = list(store.put_files(paths))  # the rest is stored by a later call
    assert [r.oid for r in again] == [hash_bytes(b) for b in blobs]  # type: ignore[union-attr]
    store.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
def test_put_files_near_the_descriptor_limit_reads_every_file(
        tmp_path: Path, content: Content, reader: str) -> None:
    # The native reader holds a batch of files open together; out of descriptors, it must
    # leave the rest of the batch to its next call, not report them unreadable (EMFILE).
    import resource  # POSIX only

    paths, blobs = _numbered_files(tmp_path, content, 300)
    store = ObjectStore.init(str(tmp_path / "store"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 24, hard))
    try:
        results = list(store.put_files(paths, threads=1))
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    _assert_stored_in_order(store, results, blobs)
    store.close()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc")
def test_put_files_refuses_content_that_differs_from_its_stat(
        tmp_path: Path, reader: str) -> None:
    # A /proc file is a regular file whose stat says 0 bytes but which reads as more: exactly
    # what a file growing between stat and read looks like. Nothing torn may be stored.
    path = tmp_path / "ok"
    path.write_bytes(b"fine" * 100)
    store = ObjectStore.init(str(tmp_path / "store"))
    changed, ok = list(store.put_files([b"/proc/self/status", os.fsencode(path)]))
    assert isinstance(changed, ContentChanged)
    assert isinstance(ok, PutResult) and store.get_bytes(ok.oid) == b"fine" * 100
    with pytest.raises(ContentChanged):
        store.put_file(b"/proc/self/status")
    assert list(store.backend.iter_ids()) == [ok.oid]
    store.close()


def test_compress_batch_keeps_input_order_for_equal_lengths(content: Content) -> None:
    # Same lengths, different bytes: a reordering would pass a length check but not this.
    items = [content("text", 4_000, seed) for seed in range(64)]
    items += [bytes([i]) * 4_000 for i in range(64)]
    for threads in (1, 2, 4):
        frames = codec.compress_batch(items, 3, threads)
        assert len(frames) == len(items)
        for item, frame in zip(items, frames):
            stored = codec.envelope(item, frame)
            assert codec.decode_object(stored) == item
    each = codec.compress_each(items, 3)
    assert [codec.decode_object(codec.envelope(i, f)) for i, f in zip(items, each)] == items


def test_envelope_is_what_encode_object_stores(content: Content) -> None:
    for data in (content("text", 10_000, 1), content("random", 10_000, 2), b"x" * 65):
        frame = codec.compress_each([data], 3)[0]
        assert codec.envelope(data, frame) == codec.encode_object(data, 3)
    assert codec.envelope(b"short", None) == codec.encode_object(b"short", 3)


def test_envelope_refuses_a_frame_of_other_content(content: Content) -> None:
    data, other = content("text", 10_000, 1), content("text", 12_000, 2)
    frame = codec.compress_each([other], 3)[0]
    with pytest.raises(ObjstoreError, match="out of order"):
        codec.envelope(data, frame)


def test_put_absent_refuses_an_object_already_in_the_pack(tmp_path: Path) -> None:
    (tmp_path / "objects" / "packs").mkdir(parents=True)
    backend = PackedBackend(str(tmp_path / "objects"), loose_puts=0)
    oid = hash_bytes(b"content")
    stored = codec.encode_object(b"content", 3)
    assert backend.put_absent(oid, stored)
    assert not backend.put_absent(oid, stored)
    assert not backend.put(oid, stored)
    assert backend.get(oid) == stored
    backend.close()


def test_put_absent_many_across_pack_seals_matches_one_at_a_time(tmp_path: Path) -> None:
    (tmp_path / "objects" / "packs").mkdir(parents=True)
    backend = PackedBackend(str(tmp_path / "objects"), loose_puts=0, pack_size=64 << 10)
    blobs = [bytes([i]) * (5_000 + i) for i in range(60)]
    objects = [(hash_bytes(b), codec.encode_object(b, 0)) for b in blobs]
    assert backend.put_absent(*objects[3])
    # already stored, new, and the same id twice in one batch
    assert backend.put_absent_many([*objects, objects[10]]) == (
        [i != 3 for i in range(60)] + [False]
    )
    backend.close()
    packs = os.listdir(tmp_path / "objects" / "packs")
    assert len([p for p in packs if p.endswith(".idx")]) > 2  # sealed along the way
    reopened = PackedBackend(str(tmp_path / "objects"))
    for oid, stored in objects:
        assert reopened.get(oid) == stored
    reopened.close()


class _RecordingBulk(MemoryBackend):
    """A `BulkBackend` that records which put each object took."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def put(self, oid: ObjectId, stored: bytes) -> bool:
        self.calls.append("put")
        return super().put(oid, stored)

    def put_absent(self, oid: ObjectId, stored: bytes) -> bool:
        self.calls.append("put_absent")
        return super().put(oid, stored)

    def put_absent_many(self, objects: Sequence[tuple[ObjectId, bytes]]) -> list[bool]:
        self.calls.append(f"put_absent_many:{len(objects)}")
        return [super(_RecordingBulk, self).put(oid, stored) for oid, stored in objects]


def test_store_writes_through_the_bulk_capability_when_the_backend_declares_it(
    tmp_path: Path,
) -> None:
    backend = _RecordingBulk()
    assert isinstance(backend, BulkBackend)
    store = ObjectStore(backend, StoreOptions(compression_level=1))
    paths = [write(tmp_path / f"f{n}", b"file %d " % n * 50) for n in range(5)]
    assert all(isinstance(r, PutResult) and r.is_new for r in store.put_files(paths))
    assert backend.calls == ["put_absent_many:5"]
    backend.calls.clear()
    store.put_bytes(b"one more")  # put_bytes has always taken plain put
    store.store_tree(Tree(()))
    assert backend.calls == ["put", "put_absent"]


# A file: an index into a few contents (so duplicates are common), or None for a missing path.
_POOL = [bytes([n]) * size for n, size in enumerate((0, 10, 65, 700, 3_000, 9_000, 20_000))]
_POOL += [os.urandom(5_000), os.urandom(12_000)]  # incompressible, small and large


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(st.none() | st.integers(0, len(_POOL) - 1), max_size=40),
       threads=st.integers(1, 3), level=st.sampled_from([0, 1]),
       native=st.booleans(), batch_items=st.integers(1, 4))
def test_put_files_in_any_batching_matches_put_file_in_order(
    tmp_path_factory: pytest.TempPathFactory, files: list[int | None], threads: int,
    level: int, native: bool, batch_items: int
) -> None:
    # Tiny batches and a low stream threshold make every step run: batches closed by count and
    # by size, several in flight and taken back, large files streamed on the pool in line.
    directory = tmp_path_factory.mktemp("files")
    paths = []
    for n, index in enumerate(files):
        file = directory / f"f{n}"
        if index is not None:
            file.write_bytes(_POOL[index])
        paths.append(os.fsencode(file))
    options = StoreOptions(compression_level=level, stream_threshold=8_000)
    batch = ObjectStore(MemoryBackend(), options)
    single = ObjectStore(MemoryBackend(), options)
    reader = putfiles_module._native_read_files if native else None
    with mock.patch.object(putfiles_module, "_BATCH_ITEMS", batch_items), \
            mock.patch.object(putfiles_module, "_BATCH_BYTES", 10_000), \
            mock.patch.object(putfiles_module, "_native_read_files", reader):
        results = list(batch.put_files(paths, threads=threads))
    assert len(results) == len(paths)
    new_here: list[ObjectId] = []
    new_alone: list[ObjectId] = []
    for path, index, result in zip(paths, files, results):
        if index is None:
            assert isinstance(result, FileNotFoundError)
            continue
        want = single.put_file(path)
        assert isinstance(result, PutResult), result
        assert (result.oid, result.size) == (want.oid, want.size)
        if result.size <= options.stream_threshold:
            assert result.is_new == want.is_new  # the first copy read is the new one
        # Copies of a large file may stream at once (one on the pool, one taken back): which
        # of them is new is a race, that exactly one is new is not.
        new_here += [result.oid] if result.is_new else []
        new_alone += [want.oid] if want.is_new else []
        assert batch.get_bytes(result.oid) == _POOL[index]
        assert result.stored_bytes == (batch.backend.stat(result.oid).size if result.is_new
                                       else 0)
    assert sorted(new_here) == sorted(new_alone)
    assert _compress_threads() == []  # the pool is shut down with the call


def test_copies_of_a_large_file_streamed_side_by_side_are_new_once(tmp_path: Path) -> None:
    """Several copies of one content above the stream threshold stream on the pool at once and
    may each find the object absent; the call reports it new once, and the rest as present."""
    content = os.urandom(40_000)
    paths = []
    for n in range(4):
        (tmp_path / f"copy{n}").write_bytes(content)
        paths.append(str(tmp_path / f"copy{n}"))
    for _ in range(20):  # the race the report must not depend on
        store = ObjectStore(MemoryBackend(), StoreOptions(stream_threshold=8_000))
        results = list(store.put_files(paths, threads=3))
        assert all(isinstance(r, PutResult) for r in results), results
        assert [r.oid for r in results if r.is_new] == [results[0].oid]
        assert [r.stored_bytes > 0 for r in results] == [r.is_new for r in results]
