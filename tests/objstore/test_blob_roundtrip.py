"""Blobs through a real on-disk store: 0 B .. 64 MiB round trips, ids equal to b3sum."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

import blake3
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ckpt.objstore import ObjectStore, StoreOptions
from ckpt.objstore.codec import CODEC_RAW, CODEC_ZSTD, HEADER_SIZE, read_header

THRESHOLD = StoreOptions().stream_threshold
MAX_SIZE = 64 << 20


@pytest.fixture(scope="module")
def disk_store() -> Iterator[ObjectStore]:
    # Module scope (hypothesis runs many examples per test); removed at the end because the
    # examples write hundreds of MiB.
    root = tempfile.mkdtemp(prefix="ckpt-blobs-")
    store = ObjectStore.init(os.path.join(root, "store"))
    yield store
    store.close()
    shutil.rmtree(root)


def log_scale_sizes() -> st.SearchStrategy[int]:
    """0 .. 64 MiB, each power of two as likely as the next (bits 0..26)."""
    return st.integers(min_value=0, max_value=26).flatmap(
        lambda bits: (
            st.just(0) if bits == 0 else st.integers(1 << (bits - 1), min(1 << bits, MAX_SIZE))
        )
    )


def round_trip(store: ObjectStore, data: bytes) -> None:
    with tempfile.NamedTemporaryFile(dir=os.path.dirname(store.backend.path)) as source:  # type: ignore[attr-defined]
        source.write(data)
        source.flush()
        put = store.put_file(source.name)
    expected = blake3.blake3(data).digest()
    assert put.oid == expected  # the id is b3sum of the file
    assert put.size == len(data)
    assert store.has(put.oid)
    assert store.get_bytes(put.oid) == data
    out = io.BytesIO()
    assert store.copy_to(put.oid, out) == len(data)
    assert out.getvalue() == data
    assert store.put_bytes(data) == put.oid  # same content, same id, whichever way it came in


@settings(
    max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)
@given(
    size=log_scale_sizes(),
    kind=st.sampled_from(["random", "text", "sparse"]),
    seed=st.integers(0, 2**32),
)
@example(size=THRESHOLD - 1, kind="text", seed=1)
@example(size=THRESHOLD, kind="text", seed=2)
@example(size=THRESHOLD + 1, kind="text", seed=3)
@example(size=THRESHOLD - 1, kind="random", seed=4)
@example(size=THRESHOLD, kind="random", seed=5)
@example(size=THRESHOLD + 1, kind="random", seed=6)
@example(size=0, kind="random", seed=0)
@example(size=MAX_SIZE, kind="text", seed=7)
@example(size=MAX_SIZE, kind="random", seed=8)
def test_blob_put_file_then_get_round_trips_for_sizes_up_to_64_mib(
    disk_store: ObjectStore,
    content: Callable[[str, int, int], bytes],
    size: int,
    kind: str,
    seed: int,
) -> None:
    round_trip(disk_store, content(kind, size, seed))


@settings(max_examples=30, deadline=None, database=None)
@given(
    size=st.integers(0, 3 << 20),
    kind=st.sampled_from(["random", "text", "sparse"]),
    seed=st.integers(0, 2**32),
    threshold=st.sampled_from([0, 1, 4096, 1 << 20]),
)
def test_streamed_and_in_memory_puts_store_the_same_content(
    tmp_path_factory: pytest.TempPathFactory,
    content: Callable[[str, int, int], bytes],
    size: int,
    kind: str,
    seed: int,
    threshold: int,
) -> None:
    data = content(kind, size, seed)
    root = tmp_path_factory.mktemp("threshold")
    streaming = ObjectStore.init(str(root / "streamed"), StoreOptions(stream_threshold=threshold))
    in_memory = ObjectStore.init(str(root / "in-memory"), StoreOptions(stream_threshold=1 << 30))
    source = root / "source"
    source.write_bytes(data)
    streamed, whole = streaming.put_file(str(source)), in_memory.put_file(str(source))
    assert streamed.oid == whole.oid == blake3.blake3(data).digest()
    assert streamed.is_new and whole.is_new
    assert streaming.get_bytes(streamed.oid) == in_memory.get_bytes(whole.oid) == data
    shutil.rmtree(root)


def test_blob_id_equals_b3sum_of_the_file(
    tmp_path: os.PathLike[str], local_store: ObjectStore, content: Callable[[str, int, int], bytes]
) -> None:
    for size in (0, 1, 1024, 1025, THRESHOLD + 1, 3 * (1 << 20) + 7):
        path = os.path.join(tmp_path, f"f{size}")
        with open(path, "wb") as out:
            out.write(content("text", size, size))
        hasher = blake3.blake3()
        with open(path, "rb") as stream:
            while chunk := stream.read(1 << 16):
                hasher.update(chunk)
        assert local_store.put_file(path).oid.hex() == hasher.hexdigest()


def test_stored_form_is_compressed_for_text_and_raw_for_random_content(
    tmp_path: os.PathLike[str],
    local_store: ObjectStore,
    object_file: Callable[..., str],
    content: Callable[[str, int, int], bytes],
) -> None:
    for size in (100_000, THRESHOLD + 1):  # read whole, and streamed
        oids = {}
        for kind in ("text", "random"):
            path = os.path.join(tmp_path, f"{kind}-{size}")
            with open(path, "wb") as out:
                out.write(content(kind, size, size))
            put = local_store.put_file(path)
            assert put.is_new
            assert put.stored_bytes == os.path.getsize(object_file(local_store, put.oid))
            oids[kind] = put.oid
        with open(object_file(local_store, oids["text"]), "rb") as stream:
            assert read_header(stream.read(HEADER_SIZE), None) == (CODEC_ZSTD, size)
        assert os.path.getsize(object_file(local_store, oids["text"])) < size // 4
        with open(object_file(local_store, oids["random"]), "rb") as stream:
            assert read_header(stream.read(HEADER_SIZE), None) == (CODEC_RAW, size)
        assert os.path.getsize(object_file(local_store, oids["random"])) == HEADER_SIZE + size
