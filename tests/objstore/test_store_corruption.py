"""Damaged object files on a LocalBackend store: every read names the object, fsck finds it.

Damage is done to the real files (flip a byte, truncate, swap in another valid object, delete).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable

import pytest

from ckpt.objstore import CorruptObject, ObjectId, ObjectNotFound, ObjectStore, StoreOptions
from ckpt.objstore.codec import HEADER_SIZE
from ckpt.objstore.fsck import check_store

Damage = Callable[[str, bytes], None]


def read(path: str) -> bytes:
    with open(path, "rb") as stream:
        return stream.read()


def rewrite(path: str, data: bytes) -> None:
    os.chmod(path, 0o644)
    with open(path, "wb") as out:
        out.write(data)


def flip_header_byte(path: str, donor: bytes) -> None:
    data = bytearray(read(path))
    data[1] ^= 0x20  # magic
    rewrite(path, bytes(data))


def flip_length_byte(path: str, donor: bytes) -> None:
    data = bytearray(read(path))
    data[5] ^= 0x01  # lowest byte of the declared length
    rewrite(path, bytes(data))


def flip_body_byte(path: str, donor: bytes) -> None:
    data = bytearray(read(path))
    index = HEADER_SIZE + (len(data) - HEADER_SIZE) // 2
    data[index] ^= 0x01
    rewrite(path, bytes(data))


def flip_last_byte(path: str, donor: bytes) -> None:
    data = bytearray(read(path))
    data[-1] ^= 0x80
    rewrite(path, bytes(data))


def truncate_to_half(path: str, donor: bytes) -> None:
    rewrite(path, read(path)[: os.path.getsize(path) // 2])


def truncate_inside_header(path: str, donor: bytes) -> None:
    rewrite(path, read(path)[: HEADER_SIZE - 1])


def truncate_to_empty(path: str, donor: bytes) -> None:
    rewrite(path, b"")


def replace_with_other_object(path: str, donor: bytes) -> None:
    rewrite(path, donor)


DAMAGES = [
    flip_header_byte,
    flip_length_byte,
    flip_body_byte,
    flip_last_byte,
    truncate_to_half,
    truncate_inside_header,
    truncate_to_empty,
    replace_with_other_object,
]


def fresh(store: ObjectStore) -> ObjectStore:
    """The same store opened anew: no tree cache from when the objects were written."""
    return ObjectStore.open(
        os.path.dirname(store.backend.path),  # type: ignore[attr-defined]
        StoreOptions(),
    )


def donor_bytes(store: ObjectStore, object_file: Callable[..., str]) -> bytes:
    donor = store.put_bytes(b"a perfectly valid, different object" * 10)
    with open(object_file(store, donor), "rb") as stream:
        return stream.read()


@pytest.fixture(params=["compressible", "incompressible", "streamed"])
def damaged_blob_setup(
    request: pytest.FixtureRequest,
    tmp_path: os.PathLike[str],
    local_store: ObjectStore,
    content: Callable[[str, int, int], bytes],
) -> tuple[ObjectStore, ObjectId]:
    if request.param == "compressible":
        data = content("text", 50_000, 1)
    elif request.param == "incompressible":
        data = content("random", 50_000, 2)
    else:  # larger than the stream threshold: written by the streaming path
        data = content("sparse", StoreOptions().stream_threshold + 4096, 3)
    path = os.path.join(tmp_path, "source")
    with open(path, "wb") as out:
        out.write(data)
    return local_store, local_store.put_file(path).oid


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_blob_raises_corrupt_object_naming_it_on_every_read(
    damaged_blob_setup: tuple[ObjectStore, ObjectId],
    damage: Damage,
    object_file: Callable[..., str],
) -> None:
    store, oid = damaged_blob_setup
    donor = donor_bytes(store, object_file)
    damage(object_file(store, oid), donor)
    with open(object_file(store, oid), "rb") as damaged:  # an envelope a fetch brought
        envelope = damaged.read()
    for read in (store.get_bytes, lambda o: store.copy_to(o, io.BytesIO()), store.verify,
                 lambda o: store.get_bytes_from(o, envelope)):
        with pytest.raises(CorruptObject) as caught:
            read(oid)
        assert caught.value.oid == oid
        assert oid.hex() in str(caught.value)


@pytest.mark.parametrize("damage", DAMAGES)
def test_damaged_tree_raises_corrupt_object_naming_it(
    local_store: ObjectStore,
    damage: Damage,
    object_file: Callable[..., str],
    sample_builder: Callable[..., object],
) -> None:
    sample = sample_builder(local_store)
    donor = donor_bytes(local_store, object_file)
    damage(object_file(local_store, sample.sub), donor)
    store = fresh(local_store)
    for read in (store.get_tree, store.get_bytes):
        with pytest.raises(CorruptObject) as caught:
            read(sample.sub)
        assert caught.value.oid == sample.sub
        assert sample.sub.hex() in str(caught.value)
    assert store.get_tree(sample.shared) is not None  # the rest of the store still reads


def test_deleted_object_raises_object_not_found_naming_it(
    local_store: ObjectStore, object_file: Callable[..., str], sample_builder: Callable[..., object]
) -> None:
    sample = sample_builder(local_store)
    os.unlink(object_file(local_store, sample.blob_a))
    os.unlink(object_file(local_store, sample.sub))
    store = fresh(local_store)
    for read in (store.get_bytes, lambda o: store.copy_to(o, io.BytesIO())):
        with pytest.raises(ObjectNotFound) as caught:
            read(sample.blob_a)
        assert caught.value.oid == sample.blob_a
        assert sample.blob_a.hex() in str(caught.value)
    with pytest.raises(ObjectNotFound) as missing_tree:
        store.get_tree(sample.sub)
    assert missing_tree.value.oid == sample.sub


# -- fsck -----------------------------------------------------------------------------------


def test_fsck_of_a_healthy_store_reports_no_problems(
    local_store: ObjectStore, sample_builder: Callable[..., object]
) -> None:
    sample = sample_builder(local_store)
    for full in (False, True):
        report = check_store(local_store, [sample.root], full=full)
        assert report.ok
        assert report.damaged_roots == frozenset()
        assert report.trees_checked == 3
        assert report.blobs_checked == 2
    assert check_store(local_store, [sample.root], full=True).objects_verified == 5


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("victim", ["blob_a", "blob_x", "sub", "shared", "root"])
def test_full_fsck_reports_exactly_the_damaged_object(
    local_store: ObjectStore,
    damage: Damage,
    victim: str,
    object_file: Callable[..., str],
    sample_builder: Callable[..., object],
) -> None:
    # Same store instance that wrote the trees. Regression: fsck walked the tree cache, so a
    # tree damaged on disk after this process wrote it was reported healthy.
    sample = sample_builder(local_store)
    other = sample_builder(local_store, b"second checkpoint")  # shares nothing with `sample`
    donor = donor_bytes(local_store, object_file)
    oid = getattr(sample, victim)
    damage(object_file(local_store, oid), donor)
    report = check_store(local_store, [sample.root, other.root], full=True)
    assert [problem.oid for problem in report.problems] == [oid]
    assert report.problems[0].problem == "corrupt"
    assert report.damaged_roots == frozenset({sample.root})
    assert not report.ok


def test_full_fsck_reports_a_damaged_object_nothing_references(
    local_store: ObjectStore,
    object_file: Callable[..., str],
    sample_builder: Callable[..., object],
) -> None:
    sample = sample_builder(local_store)
    stray = local_store.put_bytes(b"referenced by no tree" * 100)
    flip_body_byte(object_file(local_store, stray), b"")
    report = check_store(local_store, [sample.root], full=True)
    assert [(p.oid, p.parent) for p in report.problems] == [(stray, None)]
    assert report.damaged_roots == frozenset()
    structural = check_store(local_store, [sample.root], full=False)
    assert structural.ok  # structural mode only follows references


@pytest.mark.parametrize("victim", ["blob_a", "blob_x", "sub", "shared"])
def test_structural_fsck_reports_a_missing_object_and_the_root_it_damages(
    local_store: ObjectStore,
    victim: str,
    object_file: Callable[..., str],
    sample_builder: Callable[..., object],
) -> None:
    sample = sample_builder(local_store)
    other = sample_builder(local_store, b"intact")
    oid = getattr(sample, victim)
    os.unlink(object_file(local_store, oid))
    report = check_store(local_store, [sample.root, other.root], full=False)
    assert [(p.oid, p.problem) for p in report.problems] == [(oid, "missing")]
    assert report.damaged_roots == frozenset({sample.root})
    # `shared` hangs under both root and sub: reported once, under whichever was walked first.
    parents = {
        "blob_a": {sample.root},
        "blob_x": {sample.shared},
        "sub": {sample.root},
        "shared": {sample.root, sample.sub},
    }
    assert report.problems[0].parent in parents[victim]
    assert report.problems[0].name in (b"a.txt", b"x.bin", b"sub", b"shared")


def test_structural_fsck_reports_a_missing_root(
    local_store: ObjectStore, object_file: Callable[..., str], sample_builder: Callable[..., object]
) -> None:
    sample = sample_builder(local_store)
    os.unlink(object_file(local_store, sample.root))
    report = check_store(local_store, [sample.root], full=False)
    assert [(p.oid, p.problem, p.parent) for p in report.problems] == [
        (sample.root, "missing", None)
    ]
    assert report.damaged_roots == frozenset({sample.root})
