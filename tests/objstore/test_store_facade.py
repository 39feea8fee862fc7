"""`ObjectStore` behaviour beyond round trips: dedupe, refusals, files changing under a put,
the format file, and object-id parsing."""

from __future__ import annotations

import errno
import os
import signal
import struct
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import BinaryIO

import blake3
import pytest

from ckpt.objstore import (
    ContentChanged,
    CorruptObject,
    EntryKind,
    ObjectId,
    ObjectStore,
    StoreNotFound,
    StoreOptions,
    Tree,
    TreeEntry,
    UnsupportedFormat,
    codec,
    hash_bytes,
    oid_hex,
    parse_oid,
)
from ckpt.objstore.backend import ObjectStat
from ckpt.objstore.local import LocalBackend
from ckpt.objstore.store import FORMAT_FILE, FORMAT_VERSION

SMALL_THRESHOLD = StoreOptions(stream_threshold=64 << 10)


class HookedBackend:
    """A real LocalBackend that runs `on_refresh` after each refresh.

    `put_file` refreshes exactly between reading a file and storing it, so the hook is where a
    concurrent editor (or another writer storing the same object) gets to act, deterministically.
    """

    def __init__(self, inner: LocalBackend, on_refresh: Callable[[ObjectId], None]) -> None:
        self.inner = inner
        self.on_refresh = on_refresh
        self.path = inner.path

    def refresh(self, oid: ObjectId) -> bool:
        found = self.inner.refresh(oid)
        self.on_refresh(oid)
        return found

    def has(self, oid: ObjectId) -> bool:
        return self.inner.has(oid)

    def get(self, oid: ObjectId) -> bytes:
        return self.inner.get(oid)

    def open(self, oid: ObjectId) -> BinaryIO:
        return self.inner.open(oid)

    def put(self, oid: ObjectId, stored: bytes) -> bool:
        return self.inner.put(oid, stored)

    def put_stream(self, oid: ObjectId, chunks: Iterable[bytes]) -> bool:
        return self.inner.put_stream(oid, chunks)

    def delete(self, oid: ObjectId) -> int:
        return self.inner.delete(oid)

    def iter_ids(self) -> Iterator[ObjectId]:
        return self.inner.iter_ids()

    def stat(self, oid: ObjectId) -> ObjectStat:
        return self.inner.stat(oid)

    def sync(self) -> None:
        self.inner.sync()

    def sweep_temporaries(self, older_than: float) -> int:
        return self.inner.sweep_temporaries(older_than)

    def close(self) -> None:
        self.inner.close()


def files_under(root: str) -> list[str]:
    return [os.path.join(d, n) for d, _, names in os.walk(root) for n in names]


# -- put_file -------------------------------------------------------------------------------


def test_put_file_of_stored_content_is_not_new_and_writes_nothing(
    tmp_path: os.PathLike[str], local_store: ObjectStore
) -> None:
    for size in (10, 9 << 20):  # whole read and streamed
        path = os.path.join(tmp_path, f"f{size}")
        with open(path, "wb") as out:
            out.write(b"abc" * (size // 3))
        first = local_store.put_file(path)
        again = local_store.put_file(path)
        assert first.is_new and first.stored_bytes > 0
        assert (again.oid, again.is_new, again.stored_bytes) == (first.oid, False, 0)


def test_put_file_refuses_to_follow_a_symlink(
    tmp_path: os.PathLike[str], local_store: ObjectStore
) -> None:
    target = os.path.join(tmp_path, "target")
    with open(target, "wb") as out:
        out.write(b"secret")
    link = os.path.join(tmp_path, "link")
    os.symlink(target, link)
    with pytest.raises(OSError) as caught:
        local_store.put_file(link)
    assert caught.value.errno == errno.ELOOP
    assert list(local_store.backend.iter_ids()) == []


def test_put_file_refuses_a_directory(tmp_path: os.PathLike[str], local_store: ObjectStore) -> None:
    with pytest.raises(OSError):
        local_store.put_file(os.fspath(tmp_path))


def test_put_file_refuses_a_fifo_without_waiting_for_a_writer(
    tmp_path: os.PathLike[str], local_store: ObjectStore
) -> None:
    # Regression: opening a FIFO blocked forever waiting for a writer.
    fifo = os.path.join(tmp_path, "pipe")
    os.mkfifo(fifo)

    def hung(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError("put_file blocked on a FIFO")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.setitimer(signal.ITIMER_REAL, 5.0)
    try:
        with pytest.raises(OSError) as caught:
            local_store.put_file(fifo)
        assert not isinstance(caught.value, TimeoutError)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_put_file_accepts_bytes_paths_that_are_not_utf8(
    tmp_path: os.PathLike[str], local_store: ObjectStore
) -> None:
    path = os.fsencode(tmp_path) + b"/caf\xe9"
    with open(path, "wb") as out:
        out.write(b"latin-1 name")
    put = local_store.put_file(path)
    assert local_store.get_bytes(put.oid) == b"latin-1 name"


def grow(path: str) -> None:
    with open(path, "ab") as out:
        out.write(b"appended while being stored" * 50_000)


def shrink(path: str) -> None:
    os.truncate(path, os.path.getsize(path) // 2)


def rewrite_same_size(path: str) -> None:
    with open(path, "r+b") as out:
        out.seek(1000)
        out.write(b"EDITED")


@pytest.mark.parametrize("change", [grow, shrink, rewrite_same_size])
@pytest.mark.parametrize("kind", ["text", "random"])  # zstd and raw streams
def test_streamed_put_of_a_file_changing_between_passes_raises_content_changed(
    tmp_path: os.PathLike[str],
    content: Callable[[str, int, int], bytes],
    change: Callable[[str], None],
    kind: str,
) -> None:
    # Regression (grow + text): the file outgrew the length pledged to zstd, which raised
    # zstandard.ZstdError instead of ContentChanged.
    path = os.path.join(tmp_path, "moving")
    with open(path, "wb") as out:
        out.write(content(kind, 3 << 20, 7))
    objects = os.path.join(tmp_path, "objects")
    store = ObjectStore(
        HookedBackend(LocalBackend(objects), lambda oid: change(path)), SMALL_THRESHOLD
    )
    with pytest.raises(ContentChanged) as caught:
        store.put_file(path)
    assert caught.value.path == path
    assert list(store.backend.iter_ids()) == []
    assert files_under(objects) == []  # no temp file left behind


def test_put_racing_another_writer_of_the_same_object_reports_nothing_written(
    tmp_path: os.PathLike[str],
) -> None:
    # Regression: when the backend found the object already stored (a concurrent writer won),
    # put_file still reported the envelope size as stored_bytes.
    path = os.path.join(tmp_path, "same")
    with open(path, "wb") as out:
        out.write(b"contended content")
    inner = LocalBackend(os.path.join(tmp_path, "objects"))

    def other_writer(oid: ObjectId) -> None:
        inner.put(oid, b"whatever the other writer stored")

    store = ObjectStore(HookedBackend(inner, other_writer))
    put = store.put_file(path)
    assert (put.is_new, put.stored_bytes) == (False, 0)


# -- trees ----------------------------------------------------------------------------------


def test_put_tree_then_get_tree_from_a_fresh_store_returns_an_equal_tree(
    local_store: ObjectStore,
) -> None:
    blob = local_store.put_bytes(b"content")
    tree = Tree.build(
        [
            TreeEntry(b"f\xff", EntryKind.EXECUTABLE, blob, None, 7),
            TreeEntry(b"l", EntryKind.SYMLINK, None, b"f\xff", 0),
        ]
    )
    oid = local_store.put_tree(tree)
    assert oid == local_store.tree_id(tree)
    reopened = ObjectStore.open(os.path.dirname(local_store.backend.path))  # type: ignore[attr-defined]
    assert reopened.get_tree(oid) == tree


def test_tree_is_stored_once_however_often_it_is_put(local_store: ObjectStore) -> None:
    tree = Tree.build([TreeEntry(b"gone", EntryKind.TOMBSTONE)])
    assert local_store.put_tree(tree) == local_store.put_tree(Tree.build(tree.entries))
    assert len(list(local_store.backend.iter_ids())) == 1


# -- format file ----------------------------------------------------------------------------


def test_init_is_idempotent_and_keeps_objects(tmp_path: os.PathLike[str]) -> None:
    root = os.path.join(tmp_path, "store")
    first = ObjectStore.init(root)
    oid = first.put_bytes(b"kept")
    first.close()
    again = ObjectStore.init(root)
    assert again.get_bytes(oid) == b"kept"
    with open(os.path.join(root, FORMAT_FILE)) as stream:
        assert stream.read() == f"ckpt-objstore {FORMAT_VERSION}\n"


def test_open_of_a_missing_store_raises_store_not_found(tmp_path: os.PathLike[str]) -> None:
    missing = os.path.join(tmp_path, "nowhere")
    with pytest.raises(StoreNotFound) as caught:
        ObjectStore.open(missing)
    assert caught.value.path == missing
    assert not os.path.exists(missing)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        (b"ckpt-objstore 99\n", "99"),
        (b"ckpt-objstore 4\n", "4"),
        (b"ckpt-objstore 0\n", "0"),
        (b"garbage\n", "garbage"),
        (b"ckpt-objstore one\n", "one"),
        (b"\x89PNG\r\n\x1a\n", "PNG"),
        (b"", "''"),
    ],
)
def test_open_refuses_a_wrong_format_naming_the_version_found(
    tmp_path: os.PathLike[str], text: bytes, named: str
) -> None:
    root = os.path.join(tmp_path, "store")
    ObjectStore.init(root).close()
    with open(os.path.join(root, FORMAT_FILE), "wb") as out:
        out.write(text)
    with pytest.raises(UnsupportedFormat) as caught:
        ObjectStore.open(root)
    assert named in str(caught.value)
    assert named in caught.value.found
    assert caught.value.supported == FORMAT_VERSION
    assert root in str(caught.value)
    with pytest.raises(UnsupportedFormat):
        ObjectStore.init(root)  # init does not paper over it either


def test_a_format_1_store_opens_and_is_raised_only_when_asked(
    tmp_path: os.PathLike[str]
) -> None:
    root = os.path.join(tmp_path, "store")
    ObjectStore.init(root).close()
    format_path = os.path.join(root, FORMAT_FILE)
    with open(format_path, "wb") as out:
        out.write(b"ckpt-objstore 1\n")
    store = ObjectStore.open(root)
    assert store.format_version == 1
    oid = store.put_bytes(b"still format 1" * 10)
    store.sync()
    with open(format_path, "rb") as stream:
        assert stream.read() == b"ckpt-objstore 1\n"
    store.ensure_format(2)
    store.ensure_format(1)  # never lowered
    with open(format_path, "rb") as stream:
        assert stream.read() == b"ckpt-objstore 2\n"
    store.close()
    reopened = ObjectStore.open(root)
    assert reopened.format_version == 2
    assert reopened.get_bytes(oid) == b"still format 1" * 10
    reopened.close()


def test_envelope_refs_name_the_dictionary_or_base_only() -> None:
    plain = codec.encode_object(b"a" * 200, 3)
    assert codec.envelope_refs(plain) == ()
    base = hash_bytes(b"base")
    for kind in (codec.CODEC_DICT, codec.CODEC_DELTA):
        header = struct.pack("<3sBBQ", b"CKO", 1, kind, 10)
        assert codec.envelope_refs(header + base + b"\x01") == (base,)
        with pytest.raises(CorruptObject):
            codec.envelope_refs(header + base[:5])


# -- ids ------------------------------------------------------------------------------------


def test_parse_oid_round_trips_hex() -> None:
    oid = hash_bytes(b"x")
    assert parse_oid(oid_hex(oid)) == oid
    assert parse_oid(oid_hex(oid).upper()) == oid


@pytest.mark.parametrize(
    "text",
    ["", "ab", "g" * 64, "0" * 63, "0" * 65, "  " + "ab" * 31, "ab" * 31 + "\n\n", "0x" + "a" * 62],
)
def test_parse_oid_refuses_anything_but_64_hex_digits(text: str) -> None:
    # Regression: whitespace passed the length check and bytes.fromhex skipped it (31-byte id).
    with pytest.raises(ValueError):
        parse_oid(text)


def test_hash_bytes_equals_blake3_for_small_and_threaded_sizes() -> None:
    for size in (0, 1, 4 << 20, (4 << 20) + 1):
        data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
        assert hash_bytes(data) == blake3.blake3(data).digest()
