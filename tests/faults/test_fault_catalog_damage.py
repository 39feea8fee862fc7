"""A damaged catalog gives a clear answer: exit 5 naming catalog.db and the repair command.

A flipped byte in the schema (a column renamed) and a flipped byte in a row (a checkpoint's id
renamed) are made in the database file between real `python -m ckpt` processes; `fsck --repair`
then brings every checkpoint back under its own id.
"""

from __future__ import annotations

import os

import fault_helpers as h


def _store_with_checkpoints(base: str, count: int = 3) -> tuple[str, list[str]]:
    root = os.path.join(base, "ws")
    os.mkdir(root)
    assert h.ckpt(root, "init").code == h.OK
    ids = []
    for turn in range(count):
        with open(os.path.join(root, "f.txt"), "w") as out:
            out.write(f"turn {turn}\n")
        run = h.ckpt(root, "create", "--json")
        assert run.code == h.OK, run
        ids.append(run.json()["id"])
    return root, ids


def _flip(path: str, find: bytes, replace: bytes, *, followed_by: bytes = b"") -> None:
    """Overwrite the first occurrence of `find` (followed by `followed_by`) with `replace`."""
    with open(path, "rb") as stream:
        data = bytearray(stream.read())
    at = data.find(find + followed_by)
    assert at >= 0, f"{find!r} not in {path}"
    data[at:at + len(replace)] = replace
    with open(path, "wb") as out:
        out.write(data)


def _catalog(root: str) -> str:
    db = os.path.join(root, ".ckpt", "catalog.db")
    assert not os.path.exists(db + "-wal") or os.path.getsize(db + "-wal") == 0
    return db


def test_a_flipped_byte_in_the_schema_is_catalog_corruption(base: str) -> None:
    root, ids = _store_with_checkpoints(base)
    _flip(_catalog(root), b"absent_parents BLOB", b"absent_parentz BLOB")
    for args in (["list"], ["fsck"], ["stats"]):
        run = h.ckpt(root, *args)
        assert run.code == h.CORRUPT, run
        assert "catalog.db" in run.err and "ckpt fsck --repair" in run.err, run
        assert "internal error" not in run.err
    repair = h.ckpt(root, "fsck", "--repair")
    assert repair.code == h.OK, repair
    listed = h.ckpt(root, "list", "--json")
    assert [r["id"] for r in listed.json()] == ids
    h.tally("catalog damage", injected=1, passed=1)


def _flip_everywhere(path: str, find: bytes, replace: bytes) -> int:
    with open(path, "rb") as stream:
        data = stream.read()
    with open(path, "wb") as out:
        out.write(data.replace(find, replace))
    return data.count(find)


def test_a_flipped_byte_in_a_row_never_renames_a_checkpoint(base: str) -> None:
    root, ids = _store_with_checkpoints(base)
    victim = ids[1].encode()
    renamed = victim[:-1] + (b"a" if victim[-1:] != b"a" else b"b")
    # The id in its row, in the indexes that hold it and in the next record's parent column.
    assert _flip_everywhere(_catalog(root), victim, renamed) >= 3
    run = h.ckpt(root, "list")
    assert run.code == h.CORRUPT, run
    assert "catalog.db" in run.err and "ckpt fsck --repair" in run.err
    assert renamed.decode() not in run.out
    fsck = h.ckpt(root, "fsck")
    assert fsck.code == h.CORRUPT, fsck
    assert "checksum" in fsck.out
    assert h.ckpt(root, "fsck", "--repair").code == h.OK
    listed = h.ckpt(root, "list", "--json")
    assert [r["id"] for r in listed.json()] == ids
    assert h.ckpt(root, "fsck").code == h.OK
    h.tally("catalog damage", injected=1, passed=1)


def test_a_flipped_byte_in_a_label_is_found(base: str) -> None:
    root = os.path.join(base, "ws")
    os.mkdir(root)
    assert h.ckpt(root, "init").code == h.OK
    with open(os.path.join(root, "f.txt"), "w") as out:
        out.write("content\n")
    assert h.ckpt(root, "create", "-m", "label-before-the-flip").code == h.OK
    _flip(_catalog(root), b"label-before-the-flip", b"label-before-the-flap")
    run = h.ckpt(root, "list")
    assert run.code == h.CORRUPT, run
    assert "flap" not in run.out
    assert h.ckpt(root, "fsck", "--repair").code == h.OK
    assert h.ckpt(root, "list", "--json").json()[0]["label"] == "label-before-the-flip"
    h.tally("catalog damage", injected=1, passed=1)


def test_fsck_reports_a_lost_record_file_and_repair_writes_it(base: str) -> None:
    root, ids = _store_with_checkpoints(base, 2)
    os.unlink(os.path.join(root, ".ckpt", "records", ids[0]))
    fsck = h.ckpt(root, "fsck")
    assert fsck.code == h.CORRUPT, fsck
    assert f"checkpoint {ids[0]} has no record file" in fsck.out
    assert h.ckpt(root, "fsck", "--repair").code == h.OK
    assert os.path.exists(os.path.join(root, ".ckpt", "records", ids[0]))
    assert h.ckpt(root, "fsck").code == h.OK
    h.tally("catalog damage", injected=1, passed=1)
