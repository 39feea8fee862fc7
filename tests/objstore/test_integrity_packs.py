"""Pack records that are damaged on disk: a put never dedups onto one, an index rebuild loses
only the damaged record, and a full fsck reports a damaged record header.

Damage is done to the real pack files (flip a byte of a record's stored bytes or header).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from ckpt.objstore import ObjectId, ObjectStore, StoreOptions
from ckpt.objstore.fsck import check_store
from ckpt.objstore.pack import PackedBackend
from ckpt.objstore.packfile import RECORD, index_entries, list_packs

KIB = 1024


def blobs(seed: int, count: int, low: int = 1 * KIB, high: int = 6 * KIB) -> list[bytes]:
    rng = random.Random(seed)
    return [rng.randbytes(rng.randint(low, high)) for _ in range(count)]


def packed_store(tmp_path: Path) -> ObjectStore:
    return ObjectStore.init(str(tmp_path / "store"), StoreOptions(compression_level=0))


def only_pack(store: ObjectStore) -> tuple[str, str]:
    """(packs directory, the one pack's name)."""
    packs = os.path.join(str(store.backend.path), "packs")  # type: ignore[attr-defined]
    (name,) = list_packs(packs)[0]
    return packs, name


def record_at(packs: str, name: str, oid: ObjectId) -> tuple[int, int]:
    """(offset of the record's header, stored length) of `oid` in pack `name`."""
    for found, offset, length in index_entries(packs, name):
        if found == oid:
            return offset - RECORD.size, length
    raise AssertionError("not in the index")


def flip(path: str, offset: int) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as stream:
        stream.seek(offset)
        byte = stream.read(1)
        stream.seek(offset)
        stream.write(bytes([byte[0] ^ 0x5A]))


def put_all(store: ObjectStore, items: list[bytes]) -> list[ObjectId]:
    oids = [store.put_bytes(data) for data in items]
    store.sync()
    return oids


def one_pack(tmp_path: Path, seed: int, count: int
             ) -> tuple[list[bytes], list[ObjectId], str, str]:
    """A closed store holding `count` seeded blobs in one pack: (blobs, ids, packs directory,
    pack name)."""
    store = packed_store(tmp_path)
    items = blobs(seed, count)
    oids = put_all(store, items)
    store.close()
    return items, oids, *only_pack(store)


# -- dedup onto a damaged record (28.2) ---------------------------------------------------------


def test_a_put_of_content_whose_packed_copy_is_damaged_stores_a_good_copy(tmp_path: Path) -> None:
    items, oids, packs, name = one_pack(tmp_path, 1, 20)
    header, length = record_at(packs, name, oids[7])
    flip(f"{packs}/{name}.pack", header + RECORD.size + length // 2)

    again = packed_store(tmp_path)
    assert again.put_bytes(items[7]) == oids[7]  # the workspace still holds the good bytes
    again.close()
    reader = packed_store(tmp_path)
    assert [reader.get_bytes(oid) for oid in oids] == items
    assert check_store(reader, [], full=True).ok  # the damaged record is no longer indexed
    reader.close()


def test_put_files_of_content_whose_packed_copy_is_damaged_repairs_it(tmp_path: Path) -> None:
    store = packed_store(tmp_path)
    items = blobs(2, 12)
    files = []
    for number, data in enumerate(items):
        path = tmp_path / f"f{number}"
        path.write_bytes(data)
        files.append(str(path))
    oids = [result.oid for result in store.put_files(files)]  # type: ignore[union-attr]
    store.close()
    packs, name = only_pack(store)
    header, _ = record_at(packs, name, oids[3])
    flip(f"{packs}/{name}.pack", header + RECORD.size + 1)

    again = packed_store(tmp_path)
    results = list(again.put_files(files))
    assert [result.is_new for result in results] == [n == 3 for n in range(12)]  # type: ignore[union-attr]
    again.close()
    reader = packed_store(tmp_path)
    assert [reader.get_bytes(oid) for oid in oids] == items
    reader.close()


def test_a_put_of_content_whose_loose_copy_is_damaged_stores_a_good_copy(tmp_path: Path) -> None:
    options = StoreOptions(compression_level=0, layout="loose")
    store = ObjectStore.init(str(tmp_path / "store"), options)
    data = b"the workspace holds these bytes\n" * 50
    oid = store.put_bytes(data)
    store.close()
    path = tmp_path / "store" / "objects" / oid.hex()[:2] / oid.hex()[2:]
    flip(str(path), os.path.getsize(path) - 3)

    again = ObjectStore.open(str(tmp_path / "store"), options)
    assert again.put_bytes(data) == oid
    assert again.get_bytes(oid) == data
    again.close()


def test_an_intact_copy_found_present_is_checked_once_per_store_object(tmp_path: Path) -> None:
    store = packed_store(tmp_path)
    items = blobs(3, 5)
    oids = put_all(store, items)
    store.close()
    again = packed_store(tmp_path)
    backend = again.backend
    assert isinstance(backend, PackedBackend)
    checks: list[ObjectId] = []
    real = backend.check_stored

    def counted(oid: ObjectId) -> bool | None:
        checks.append(oid)
        return real(oid)

    backend.check_stored = counted  # type: ignore[method-assign]
    for _ in range(3):
        assert [again.put_bytes(data) for data in items] == oids
    assert checks == oids
    again.close()


# -- index rebuild past a damaged record (28.3) -----------------------------------------------


@pytest.mark.parametrize("where", ["body", "length", "id", "crc"])
def test_a_lost_index_is_rebuilt_past_a_damaged_record(tmp_path: Path, where: str) -> None:
    items, oids, packs, name = one_pack(tmp_path, 4, 120)
    victim = 40
    header, length = record_at(packs, name, oids[victim])
    offset = {"body": header + RECORD.size + length // 3, "id": header + 5,
              "length": header + 32 + 1, "crc": header + 40}[where]
    flip(f"{packs}/{name}.pack", offset)
    os.unlink(f"{packs}/{name}.idx")

    reader = packed_store(tmp_path)
    present = [reader.has(oid) for oid in oids]
    assert present == [n != victim for n in range(len(oids))]
    assert all(reader.get_bytes(oids[n]) == items[n] for n in range(len(oids)) if n != victim)
    reader.close()


def test_a_rebuild_skips_a_zero_filled_hole_and_keeps_what_follows(tmp_path: Path) -> None:
    items, oids, packs, name = one_pack(tmp_path, 5, 60)
    first, _ = record_at(packs, name, oids[10])
    last, length = record_at(packs, name, oids[14])
    path = f"{packs}/{name}.pack"
    os.chmod(path, 0o644)
    with open(path, "r+b") as stream:
        stream.seek(first)
        stream.write(bytes(last + RECORD.size + length - first))
    os.unlink(f"{packs}/{name}.idx")

    reader = packed_store(tmp_path)
    assert [reader.has(oid) for oid in oids] == [not 10 <= n <= 14 for n in range(60)]
    assert reader.get_bytes(oids[15]) == items[15] and reader.get_bytes(oids[-1]) == items[-1]
    reader.close()


# -- fsck --full checks every record header (28.4) --------------------------------------------


@pytest.mark.parametrize("where", ["id", "length", "crc"])
def test_full_fsck_reports_a_flipped_byte_in_a_record_header(tmp_path: Path, where: str) -> None:
    items, oids, packs, name = one_pack(tmp_path, 6, 30)
    header, _ = record_at(packs, name, oids[12])
    flip(f"{packs}/{name}.pack", {"id": header + 3, "length": header + 33, "crc": header + 41}[where])

    reader = packed_store(tmp_path)
    assert reader.get_bytes(oids[12]) == items[12]  # reads go through the index: latent
    report = check_store(reader, [], full=True)
    assert [damage.oid for damage in report.problems] == [oids[12]]
    assert f"{name}.pack" in report.problems[0].reason
    assert check_store(reader, [], full=False).ok
    reader.close()


def test_full_fsck_of_healthy_packs_reports_nothing(tmp_path: Path) -> None:
    store = packed_store(tmp_path)
    put_all(store, blobs(7, 30))
    assert check_store(store, [], full=True).ok
    store.close()


