"""The stat cache's compact file (version 7): rows packed against their directory's listing
(statcache_rows.py), the whole file one compressed object envelope then its BLAKE3.

Shown here: any rows round-trip exactly through the compact encoding, whatever the listing
they are packed against holds (values, types, racy flags: what decides trust cannot change by
being stored); a record whose listing changes alone repacks its rows; a damaged file (a
flipped bit, a truncation) is rejected by a real `ckpt` process, which checkpoints the right
tree and writes the cache again, and `fsck` lists it meanwhile; a version-6 cache (plain rows,
not compressed) is read and trusted, and saved again as version 7 by the first scan that saves;
an older one is discarded and rebuilt.
"""

from __future__ import annotations

import base64
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt.checkpoints import Checkpoints
from ckpt.checkpoints.identity import root_key
from ckpt.checkpoints.snapshot.dirlisting import ListedEntry, encode_entry
from ckpt.checkpoints.snapshot.statcache import (
    CACHE_VERSION,
    DirRecord,
    FileRow,
    Recheck,
    _checked_body,
    check_stat_cache,
    read_stat_cache,
    row_of,
)
from ckpt.checkpoints.snapshot.statcache_rows import MAGIC, pack_rows, unpack_rows
from ckpt.objstore.codec import pack_data, unpack_data
from ckpt.objstore.errors import CorruptObject
from ckpt.objstore.ids import hash_bytes

PAST = 1_600_000_000  # seconds: outside the racy window
FILES = 90  # in `_tree`
_u64 = st.integers(min_value=0, max_value=2**64 - 1)
_i64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_rows = st.lists(
    st.builds(FileRow, name=st.binary(min_size=1, max_size=12), kind=st.integers(0, 9),
              size=_u64, mtime_ns=_i64, ctime_ns=_i64, ino=_u64,
              mode=st.integers(0, 2**32 - 1) | st.integers(-5, -1),
              ref=st.none() | st.binary(min_size=32, max_size=32) | st.binary(max_size=40),
              racy=st.booleans()),
    max_size=12, unique_by=lambda row: row.name)
# What the listing holds of each row: its entry with the row's stat, its entry with another
# stat, or no entry.
_places = st.lists(st.sampled_from(["same", "other", "absent"]), min_size=12, max_size=12)
_extra = st.lists(st.binary(min_size=1, max_size=12), max_size=6)


def _listing(rows: list[FileRow], places: list[str], extra: list[bytes]) -> bytes:
    entries: dict[bytes, ListedEntry] = {name: ListedEntry(name, 0o100644, 1, 2, 3, 4)
                                         for name in extra}
    for row, place in zip(rows, places):
        if place == "absent":
            entries.pop(row.name, None)
            continue
        fits = 0 <= row.mode < 2**32 and row.size < 2**64 and 0 <= row.ino < 2**64
        if place == "same" and fits:
            entries[row.name] = ListedEntry(row.name, row.mode, row.size, row.mtime_ns,
                                            row.ctime_ns, row.ino)
        else:
            entries[row.name] = ListedEntry(row.name, 0o100755, row.size // 2 + 1, 7, 8, 9)
    return b"".join(encode_entry(entries[name]) for name in sorted(entries))


def _same(a: list[FileRow], b: list[FileRow]) -> bool:
    """Equal rows with equal types field by field (a bool stays a bool, an int an int)."""
    return len(a) == len(b) and all(
        type(x) is FileRow and list(map(type, x)) == list(map(type, y)) and x == y
        for x, y in zip(a, b))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(rows=_rows, places=_places, extra=_extra, sort=st.booleans())
def test_any_rows_round_trip_exactly_through_the_compact_encoding(
        rows: list[FileRow], places: list[str], extra: list[bytes], sort: bool) -> None:
    if sort:
        rows = sorted(rows, key=lambda row: row.name)
    listing = _listing(rows, places, extra)
    packed = pack_rows(rows, listing)
    assert _same(unpack_rows(packed, listing, row_of), rows)
    assert packed.startswith(MAGIC) or any(not 0 <= row.kind <= 7 for row in rows)


@settings(max_examples=100, deadline=None, derandomize=True)
@given(rows=_rows)
def test_rows_of_a_clean_directory_cost_an_index_a_byte_and_their_id(rows: list[FileRow]) -> None:
    rows = sorted((row._replace(kind=row.kind % 8, mode=abs(row.mode), ino=abs(row.ino),
                                ref=None if row.ref is None else b"i" * 32) for row in rows),
                  key=lambda row: row.name)
    listing = _listing(rows, ["same"] * len(rows), [])
    packed = pack_rows(rows, listing)
    assert _same(unpack_rows(packed, listing, row_of), rows)
    assert len(packed) <= 16 + 36 * len(rows)  # headers; index, kind byte, 32-byte bin
    assert len(packed) < len(pack_data(rows)) or not rows


def test_rows_packed_against_another_listing_are_corrupt_not_misread() -> None:
    rows = [FileRow(b"a", 1, 5, PAST, PAST, 11, 0o100644, b"A" * 32, False),
            FileRow(b"b", 1, 6, PAST, PAST, 12, 0o100644, b"B" * 32, True)]
    listing = _listing(rows, ["same", "same"], [])
    packed = pack_rows(rows, listing)
    for wrong in (b"", listing[:-1], listing[:40]):
        with pytest.raises(CorruptObject):
            unpack_rows(packed, wrong, row_of)
    for junk in (MAGIC + pack_data([1 << 40]), MAGIC + pack_data([0x20 | 1]),
                 MAGIC + pack_data({"a": 1}), MAGIC + pack_data([1, b"n", 1, 2, 3, 4])):
        with pytest.raises(CorruptObject):
            unpack_rows(junk, listing, row_of)


def test_a_record_whose_listing_changes_alone_repacks_its_rows() -> None:
    rows = [FileRow(b"a", 1, 5, PAST, PAST, 11, 0o100644, b"A" * 32, False),
            FileRow(b"d", 4, 9, 0, 0, 0, 0, b"T" * 32, False)]
    first = _listing(rows, ["same", "other"], [b"z"])
    record = DirRecord(b"T" * 32, 9, 1, rows, listing=first, subdirs=[[b"d", b"T" * 32]])
    stored = DirRecord.from_wire(record.to_wire())
    # A restore sets the listing aside (rows untouched); packed against the old listing, the
    # rows would now be read against another one.
    stored.listing, stored.recheck = b"", Recheck(_listing(rows, ["other", "other"], []), [b"a"])
    again = DirRecord.from_wire(stored.to_wire())
    assert _same(again.rows, rows) and again.recheck == stored.recheck
    stored.recheck = None
    assert _same(DirRecord.from_wire(stored.to_wire()).rows, rows)


# --- the file, through real processes -------------------------------------------------------


def _tree(root: Path) -> None:
    rng = random.Random(29)
    for d in range(6):
        for f in range(15):
            path = root / f"d{d}" / f"s{f % 3}" / f"f{f}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(rng.randbytes(rng.randrange(1, 400)))
    for path in root.rglob("*"):
        os.utime(path, (PAST, PAST), follow_symlinks=False)


def _ckpt(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckpt", "--root", str(root), *args, "--json"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, CKPT_SERVER="off"))


def _create(root: Path) -> dict[str, Any]:
    run = _ckpt(root, "create")
    assert run.returncode == 0, run.stderr
    out: dict[str, Any] = json.loads(run.stdout)
    return out


def _api_create(root: Path) -> tuple[str, int]:
    """(tree id, files hashed) of a checkpoint taken through the library."""
    with Checkpoints.open(root) as cp:
        record = cp.create()
    return record.tree.hex(), record.stats.hashed


def _cache_path(root: Path) -> Path:
    return root / ".ckpt" / "roots" / root_key(str(root)) / "statcache"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    _tree(root)
    assert _ckpt(root, "init").returncode == 0
    return root


def test_a_damaged_cache_file_is_rejected_listed_and_rebuilt(tree: Path) -> None:
    truth = _create(tree)["tree"]
    path = _cache_path(tree)
    pristine = path.read_bytes()
    assert pristine.startswith(b"CKO\x01\x01")  # one zstd object envelope
    assert _api_create(tree) == (truth, 0)
    rng = random.Random(7)
    cases = [("flip", rng.randrange(len(pristine))) for _ in range(6)]
    cases += [("truncate", rng.randrange(len(pristine))) for _ in range(3)]
    for how, at in cases:
        data = bytearray(pristine)
        if how == "flip":
            data[at] ^= 1 << rng.randrange(8)
        else:
            del data[at:]
        path.write_bytes(bytes(data))
        assert check_stat_cache(str(path)) is not None, (how, at)
        fsck = _ckpt(tree, "fsck")
        assert fsck.returncode == 0, fsck.stdout
        assert json.loads(fsck.stdout)["damaged_caches"], (how, at)
        if how == "truncate":  # a real process
            assert _create(tree)["tree"] == truth, (how, at)
        else:  # nothing of the damaged file trusted
            assert _api_create(tree) == (truth, FILES), (how, at)
        assert check_stat_cache(str(path)) is None  # written again whole
        assert _api_create(tree) == (truth, 0)


def _payload(path: Path) -> list[Any]:
    body = _checked_body(path.read_bytes())
    assert body is not None
    payload: list[Any] = unpack_data(body, what="test")
    return payload


def _write_version(path: Path, version: int) -> None:
    """Rewrite the cache at `path` as an older ckpt wrote it: rows as plain msgpack arrays,
    the payload not compressed, then its BLAKE3."""
    _, generation, settings_, wire, translations = _payload(path)
    for key, value in wire.items():
        record = DirRecord.from_wire(value)
        _packed, ignores, subdirs, ignored, recheck = unpack_data(value[4], what="test")
        value[4] = pack_data([pack_data(record.rows), ignores, subdirs, ignored, recheck])
        wire[key] = value
    data = pack_data((version, generation, settings_, wire, translations))
    path.write_bytes(data + hash_bytes(data))


def test_a_version_6_cache_is_read_and_trusted_and_saved_again_as_version_7(tree: Path) -> None:
    truth = _create(tree)["tree"]
    path = _cache_path(tree)
    compact = path.stat().st_size
    _write_version(path, 6)
    plain = path.stat().st_size
    assert plain > compact
    assert check_stat_cache(str(path)) is None  # not damage
    loaded = read_stat_cache(str(path), gc_generation=0)
    assert loaded.base is not None and loaded.base.version == 6 and len(loaded.dirs) > 10
    assert _api_create(tree) == (truth, 0)  # its rows were trusted
    assert _create(tree)["tree"] == truth
    assert _payload(path)[0] == 6  # nothing changed: nothing saved
    edited = tree / "d0" / "s0" / "f0.py"
    edited.write_bytes(b"edited")
    os.utime(edited, (PAST + 5, PAST + 5))
    changed, hashed = _api_create(tree)
    assert changed != truth and hashed == 1
    assert _payload(path)[0] == CACHE_VERSION == 7  # the first save repacks it whole
    assert not os.path.exists(str(path) + ".delta")
    assert path.read_bytes().startswith(b"CKO\x01\x01") and path.stat().st_size < plain
    assert _api_create(tree) == (changed, 0)


def test_a_version_6_cache_with_rows_that_changed_since_is_not_trusted_for_them(
        tree: Path) -> None:
    _create(tree)
    path = _cache_path(tree)
    _write_version(path, 6)
    edited = tree / "d2" / "s1" / "f4.py"
    edited.write_bytes(b"changed after the old cache was written")
    os.utime(edited, (PAST + 5, PAST + 5))
    assert _api_create(tree)[1] == 1
    made = _create(tree)
    fresh = _ckpt(tree, "cat", made["id"], "d2/s1/f4.py")
    assert fresh.returncode == 0, fresh.stderr
    assert base64.b64decode(json.loads(fresh.stdout)["content_base64"]) == edited.read_bytes()


def test_a_cache_older_than_version_6_is_discarded_and_rebuilt(tree: Path) -> None:
    truth = _create(tree)["tree"]
    path = _cache_path(tree)
    _write_version(path, 5)
    assert check_stat_cache(str(path)) is None  # another version: not damage
    assert not read_stat_cache(str(path), gc_generation=0).dirs.keys()
    assert _api_create(tree) == (truth, FILES)  # every file read again
    assert _payload(path)[0] == CACHE_VERSION


def test_a_real_directory_packs_its_rows_in_under_half_the_plain_form(tmp_path: Path) -> None:
    """One real directory's record: its rows packed against its listing take under half of
    what plain msgpack rows take (names and stat fields are the listing's)."""
    root = tmp_path / "one"
    root.mkdir()
    for i in range(200):
        path = root / f"source_file_{i:03d}.c"
        path.write_bytes(b"x" * i)
        os.utime(path, (PAST, PAST))
    store = tmp_path / "store"
    run = subprocess.run([sys.executable, "-m", "ckpt", "--root", str(root), "--store",
                          str(store), "init"], capture_output=True, text=True,
                         env=dict(os.environ, CKPT_SERVER="off"))
    assert run.returncode == 0, run.stderr
    with Checkpoints.open(root, store) as cp:
        cp.create()
    path = store / "roots" / root_key(str(root)) / "statcache"
    record = DirRecord.from_wire(_payload(path)[3][b""])
    assert len(record.rows) == 200 and record.reference_listing()  # kept aside: ctimes are new
    assert len(record.packed_rows()) * 2 < len(pack_data(record.rows))


def test_rows_of_a_record_whose_listing_is_not_one_are_stored_plain() -> None:
    rows = [FileRow(b"a", 1, 5, PAST, PAST, 11, 0o100644, b"A" * 32, False)]
    packed = pack_rows(rows, b"L")
    assert not packed.startswith(MAGIC) and _same(unpack_rows(packed, b"L", row_of), rows)
