"""Staging (checkpoints/restore/staging.py): the native batch writer and the Python one stage the same
files, a restore into a new directory builds the tree in place and leaves nothing behind when
an object is damaged, and a write that fails names its staged file."""

from __future__ import annotations

import errno
import os
import random
import tempfile
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
import restore_helpers as h  # tests/ dirs are on pytest's `pythonpath`
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt.checkpoints.errors import CheckpointError
from ckpt.checkpoints.restore import staging
from ckpt.checkpoints.restore.plan import FileWrite, plan_restore
from ckpt.checkpoints.restore.restorer import RestoreOptions
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import CorruptObject, ObjectId, ObjectStore, Slice, hash_bytes
from ckpt.objstore.errors import ObjstoreError


def _tree_state(top: Path) -> dict[str, tuple[int, bytes]]:
    """Each file's and symlink's permission bits and content (link target) below `top`."""
    state: dict[str, tuple[int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, top)
            if os.path.islink(path):
                state[rel] = (0, os.fsencode(os.readlink(path)))
            else:
                state[rel] = (os.lstat(path).st_mode & 0o7777, Path(path).read_bytes())
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
    return state


def _fill(root: Path, rng: random.Random, count: int) -> None:
    for i in range(count):
        path = root / f"d{i % 5}" / f"e{i % 3}" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        # Some contents beyond a batch's bytes and beyond WHOLE_CONTENT (streamed).
        size = rng.choice([0, 10, 4000, 70_000, staging.BATCH_BYTES + 5])
        path.write_bytes(rng.randbytes(size))
        os.chmod(path, rng.choice([0o644, 0o600, 0o755, 0o640]))
    os.symlink("d0/e0/f0.txt", root / "link")


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                              HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**16), native=st.booleans(), batch=st.sampled_from([1, 3, 128]))
def test_a_restore_into_a_new_directory_is_exact_with_either_writer(
        ws: Path, cp: Checkpoints, monkeypatch: pytest.MonkeyPatch, seed: int, native: bool,
        batch: int) -> None:
    if native and staging._native_write_files is None:
        pytest.skip("the native extension is not built")
    with monkeypatch.context() as patch:  # undone after each example
        patch.setattr(staging, "BATCH_FILES", batch)
        if not native:
            patch.setattr(staging, "_native_write_files", None)
        _restore_and_compare(ws, cp, f"{seed}-{native}-{batch}", seed)


def _restore_and_compare(ws: Path, cp: Checkpoints, tag: str, seed: int) -> None:
    _fill(ws / f"w{tag}", random.Random(seed), 40)
    record = cp.create()
    dest = ws.parent / f"dest-{tag}"
    report = cp.restore(record.id, RestoreOptions(target=str(dest)))
    expected = {k: v for k, v in _tree_state(ws).items() if not k.startswith(".ckpt")}
    assert _tree_state(dest) == expected
    assert report.written == len(expected)
    assert not [n for n in os.listdir(dest) if n.startswith(".ckpt-staging")]


def _victim(writes: Iterable[FileWrite], streamed: bool) -> FileWrite:
    """A file of `writes`: one whose content is streamed (over WHOLE_CONTENT, written by a
    writer thread on its own), or the middle one of those handed over whole."""
    files = [w for w in writes if w.entry.oid is not None and w.entry.size > 0
             and (w.entry.size > staging.WHOLE_CONTENT) == streamed]
    return files[len(files) // 2]


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("existed", [False, True], ids=["absent", "empty"])
def test_a_damaged_object_leaves_the_new_directory_as_it_was(
        ws: Path, cp: Checkpoints, existed: bool, streamed: bool) -> None:
    _fill(ws, random.Random(7), 30)
    record = cp.create()
    objects = cp._ws.objects
    plan = plan_restore(objects.get_tree, None, record.tree, scope="tree")
    victim = _victim(plan.writes, streamed).entry.oid
    assert victim is not None
    h.flip_packed_byte(objects.backend, victim)
    dest = ws.parent / "dest-damaged"
    if existed:
        dest.mkdir()
    with pytest.raises((CheckpointError, ObjstoreError)):
        cp.restore(record.id, RestoreOptions(target=str(dest)))
    # No staging directory, no partial tree; a directory the restore made is gone again.
    assert os.listdir(dest) == [] if existed else not dest.exists()


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_failed_write_names_the_staged_file_and_removes_staging(
        ws: Path, cp: Checkpoints, tmp_path: Path, streamed: bool) -> None:
    _fill(ws, random.Random(3), 20)
    record = cp.create()
    objects = cp._ws.objects
    plan = plan_restore(objects.get_tree, None, record.tree, scope="tree")
    where = os.fsencode(tmp_path / "staging")
    os.makedirs(where)
    taken = b"%d" % plan.writes.index(_victim(plan.writes, streamed))
    os.mkdir(where + b"/" + taken)  # O_EXCL: the last file cannot be created
    with pytest.raises(OSError) as caught:
        staging.stage_files(plan, objects, where)
    assert caught.value.filename == os.fsdecode(where + b"/" + taken)
    assert os.listdir(where) == [taken]  # staged files gone; a directory stays



def test_a_stream_stops_once_its_writer_is_abandoned(tmp_path: Path) -> None:
    """A large file a writer thread streams takes no more chunks once the writer is
    abandoned (an error elsewhere, Ctrl-C): abandoning does not wait for the rest of it."""
    store = ObjectStore.init(str(tmp_path / "store"))
    content = random.Random(5).randbytes(staging.WHOLE_CONTENT + 5)
    oid = store.put_bytes(content)
    store.sync()
    out = tmp_path / "out"
    out.mkdir()
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        stop = threading.Event()
        staging._stream(store, oid, fd, b"whole", 0o644, False, 0, stop)
        assert (out / "whole").read_bytes() == content  # not stopped: the whole content
        stop.set()
        with pytest.raises(OSError) as caught:
            staging._stream(store, oid, fd, b"stopped", 0o644, False, 0, stop)
        assert caught.value.errno == errno.ECANCELED
        assert (out / "stopped").stat().st_size < len(content)
    finally:
        os.close(fd)
        store.close()


_BOUNDARIES = [0, 1, 63, 64, 65, 1023, 1024, 1025, 2047, 2048, 4097, 16_384, 65_537, 300_000]


@settings(max_examples=60, deadline=None)
@given(size=st.sampled_from(_BOUNDARIES) | st.integers(0, 20_000), seed=st.integers(0, 2**16),
       flip=st.booleans())
def test_the_native_writer_writes_a_content_only_under_its_own_id(
        size: int, seed: int, flip: bool) -> None:
    """`write_files` hashes a content given with its id (BLAKE3, its own C code) and creates
    the file only when the hash is the id: the same digests as the `blake3` package, at the
    sizes around BLAKE3's chunk and block boundaries, for a content that is a slice of a
    larger buffer (a block member's) as for a whole one. A slice outside its buffer is
    refused before anything is written."""
    if staging._native_write_files is None:
        pytest.skip("the native extension is not built")
    rng = random.Random(seed)
    data = rng.randbytes(size)
    oid = hash_bytes(data)
    if flip and size:
        at = rng.randrange(size)
        data = data[:at] + bytes([data[at] ^ 1 << rng.randrange(8)]) + data[at + 1:]
    before, after = rng.randbytes(rng.randrange(64)), rng.randbytes(rng.randrange(64))
    buffer = before + data + after
    with tempfile.TemporaryDirectory() as where:
        fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY)
        try:
            for start, length in ((-1, size), (len(before), size + len(after) + 1)):
                with pytest.raises(ValueError, match="outside its buffer"):
                    staging._native_write_files(
                        fd, [(b"x", buffer, start, length, 0o644, False, None)], 0)
            assert os.listdir(where) == []
            failed = staging._native_write_files(
                fd, [(b"ok", b"before", 0, 6, 0o644, False, None),
                     (b"f", buffer, len(before), size, 0o644, False, oid)], 0)
        finally:
            os.close(fd)
        if flip and size:
            assert failed == (1, staging._NOT_ITS_ID)
            assert os.listdir(where) == ["ok"]  # never created, let alone written
        else:
            assert failed is None
            assert Path(where, "f").read_bytes() == data


def test_a_content_that_is_not_its_id_is_caught_before_it_is_written(
        ws: Path, cp: Checkpoints, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The staging thread does not hash what it decodes: the writer does (the native one on
    its thread, else on the caller's), and a content that decoded wrong is CorruptObject
    naming it, its file never made."""
    _fill(ws, random.Random(5), 20)
    record = cp.create()
    objects = cp._ws.objects
    plan = plan_restore(objects.get_tree, None, record.tree, scope="tree")
    victim = next(w for w in plan.writes
                  if w.entry.oid is not None and 0 < w.entry.size <= staging.WHOLE_CONTENT)
    real = ObjectStore.get_many_slices

    def tampered(self: ObjectStore, items: Iterable[tuple[ObjectId, bytes | None]]
                 ) -> Iterator[Slice]:
        items = list(items)
        for (oid, _), (data, start, length) in zip(items, real(self, items), strict=True):
            if oid == victim.entry.oid:
                yield data[start:start + length] + b"!", 0, length + 1
            else:
                yield data, start, length

    monkeypatch.setattr(ObjectStore, "get_many_slices", tampered)
    where = os.fsencode(tmp_path / "staging")
    with pytest.raises(CorruptObject) as caught:
        staging.stage_tree(plan, objects, where, None)
    assert caught.value.oid == victim.entry.oid
    assert not os.path.lexists(where + b"/" + victim.path)
