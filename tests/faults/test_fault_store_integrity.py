"""Damaged pack records under a real `ckpt` (issue 28, items 2, 3 and 4): a create whose
content matches a damaged object repairs it from the workspace, an index rebuilt past a
damaged record loses only that record, and `fsck --full` reports a flipped header byte.

The damage is done to the real pack file of a real store, at the record of a chosen file.
"""

from __future__ import annotations

import glob
import os
import random

import fault_helpers as h

from ckpt.objstore import hash_bytes
from ckpt.objstore.packfile import RECORD, index_entries

FILES = 60


def workspace(base: str, name: str) -> tuple[str, str, dict[str, bytes], str]:
    """(root, store, files by name, the first checkpoint's id): FILES seeded files, one pack."""
    rng = random.Random(h.seed_for(name))
    root = os.path.join(base, "ws")
    files = {f"f{n:03}.bin": rng.randbytes(rng.randint(2000, 9000)) for n in range(FILES)}
    for path, data in files.items():
        h.write_file(os.path.join(root, path), data)
    assert h.ckpt(root, "init").code == h.OK
    first = h.ckpt(root, "create")
    assert first.code == h.OK, first
    return root, os.path.join(root, ".ckpt"), files, first.out.strip()


def record_of(store: str, data: bytes) -> tuple[str, int, int]:
    """(pack path, offset of the record header, stored length) of the object of `data`."""
    oid = hash_bytes(data)
    packs = os.path.join(store, "objects", "packs")
    for index in glob.glob(os.path.join(packs, "*.idx")):
        name = os.path.basename(index)[: -len(".idx")]
        for found, offset, length in index_entries(packs, name):
            if found == oid:
                return os.path.join(packs, name + ".pack"), offset - RECORD.size, length
    raise AssertionError("object not packed")


def test_a_create_whose_content_matches_a_damaged_object_repairs_it(base: str) -> None:
    root, store, files, first = workspace(base, "store-integrity-dedup")
    victim = "f017.bin"
    pack, header, length = record_of(store, files[victim])
    h.flip_byte(pack, header + RECORD.size + length // 2)
    os.utime(os.path.join(root, victim), ns=(1, 1))  # re-hashed by the next create

    second = h.ckpt(root, "create")
    assert second.code == h.OK, second
    h.fsck_clean(root)  # the new checkpoint and the old one both read the good bytes
    from ckpt.checkpoints.service import Checkpoints

    with Checkpoints.open(root) as cp:
        assert h.checkpoint_state(cp, first) == h.checkpoint_state(cp, second.out.strip())
        assert cp.objects.get_bytes(hash_bytes(files[victim])) == files[victim]
    h.tally("store integrity: dedup onto a damaged object", injected=1, passed=1)


def test_a_lost_index_is_rebuilt_past_a_damaged_record_losing_only_it(base: str) -> None:
    root, store, files, _ = workspace(base, "store-integrity-resync")
    pack, header, length = record_of(store, files["f005.bin"])
    h.flip_byte(pack, header + RECORD.size + length // 2)
    os.unlink(pack[: -len(".pack")] + ".idx")

    run = h.ckpt(root, "fsck", "--full", "--json")
    assert run.code == h.CORRUPT, run
    problems = run.json()["problems"]
    assert [p["oid"] for p in problems] == [hash_bytes(files["f005.bin"]).hex()], run
    h.tally("store integrity: index rebuilt past a damaged record", injected=1, passed=1)


def test_full_fsck_reports_a_flipped_byte_in_a_record_header(base: str) -> None:
    root, store, files, _ = workspace(base, "store-integrity-header")
    for where in (5, 32 + 2, 40 + 1):  # the id, the length, the crc
        pack, header, _ = record_of(store, files[f"f0{where:02}.bin"])
        h.flip_byte(pack, header + where)
    run = h.ckpt(root, "fsck", "--full")
    assert run.code == h.CORRUPT, run
    assert h.ckpt(root, "fsck").code == h.OK  # a structural check reads through the index
    h.tally("store integrity: flipped record header", injected=3, passed=3)
