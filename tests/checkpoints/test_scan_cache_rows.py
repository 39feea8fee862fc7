"""The stat cache's typed rows and the scan's debug log of its decisions.

`FileRow.matches` is the one decision that trusts a file without reading it: checked here
against every field it compares, and against what it is stored as (plain msgpack arrays, the
same bytes as before rows had a type). The log tests turn the `ckpt.checkpoints.scan` logger on
and check that a scan says why it read a file again (size, mtime, racy) and what it trusted.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.checkpoints.snapshot.dirlisting import ListedEntry
from ckpt.checkpoints.snapshot.ignore import IgnoreRules
from ckpt.checkpoints.snapshot.scan import ScanOptions, _Scanner, scan_workspace
from ckpt.checkpoints.snapshot.statcache import (
    RACY_WINDOW_NS,
    DirRecord,
    DirTable,
    FileRow,
    Recheck,
    StatCache,
    decode_rows,
    make_row,
    tree_row,
)
from ckpt.objstore import ObjectStore
from ckpt.objstore.codec import pack_data, unpack_data
from ckpt.objstore.errors import CorruptObject

# A fine-grained file system's stamps (not whole seconds: see statcache.is_racy).
PAST_NS = 1_600_000_000 * 10**9 + 123_456_789
STAT_FIELDS = ("st_size", "st_mtime_ns", "st_ctime_ns", "st_ino", "st_mode")

_ints = st.integers(min_value=0, max_value=2**63 - 1)
_rows = st.builds(
    FileRow, name=st.binary(min_size=1, max_size=12), kind=st.sampled_from([1, 2, 3, 4, 5]),
    size=_ints, mtime_ns=_ints, ctime_ns=_ints, ino=_ints, mode=st.integers(0, 0o177777),
    ref=st.one_of(st.binary(min_size=32, max_size=32), st.binary(max_size=40)),
    racy=st.booleans())


def _stat_of(row: FileRow) -> ListedEntry:
    return ListedEntry(row.name, row.mode, row.size, row.mtime_ns, row.ctime_ns, row.ino)


@given(rows=st.lists(_rows, max_size=8))
def test_rows_are_stored_as_the_plain_arrays_they_decode_from(rows: list[FileRow]) -> None:
    packed = pack_data(rows)
    assert packed == pack_data([list(row) for row in rows])  # the on-disk bytes: plain arrays
    decoded = decode_rows(unpack_data(packed))
    assert decoded == rows and all(type(row) is FileRow for row in decoded)


@given(rows=st.lists(_rows, max_size=6), recheck=st.none() | st.builds(
    Recheck, st.binary(max_size=20), st.lists(st.binary(min_size=1, max_size=5), max_size=3)))
def test_a_record_round_trips_through_its_wire_form(rows: list[FileRow],
                                                    recheck: Recheck | None) -> None:
    record = DirRecord(b"T" * 32, 7, 3, rows, listing=b"L", ignores=[], subdirs=[[b"s", b"S"]],
                       ignored=[b"x/"], leaves=4, recheck=recheck)
    again = DirRecord.from_wire(record.to_wire())
    assert (again.tree, again.size, again.files, again.leaves, again.listing) == (
        b"T" * 32, 7, 3, 4, b"L")
    assert (again.recheck, again.subdirs, again.ignored, again.rows) == (
        recheck, [[b"s", b"S"]], [b"x/"], rows)
    assert again.recheck is None or type(again.recheck) is Recheck
    summary = DirTable({b"k": record.to_wire()}).summary(b"k")
    assert summary == record.summary() == (b"T" * 32, 7, 3, 4)


@pytest.mark.parametrize("raw", [[[b"a", 1]], [b"short"], {"a": 1}, [[b"a"] * 10]])
def test_rows_that_are_not_rows_are_corrupt(raw: Any) -> None:
    with pytest.raises(CorruptObject):
        decode_rows(raw)


@given(row=_rows, changed=st.sets(st.sampled_from(STAT_FIELDS)), delta=st.integers(1, 2**20))
def test_matches_trusts_only_an_equal_stat_of_a_row_that_is_not_racy(
        row: FileRow, changed: set[str], delta: int) -> None:
    fields = {name: getattr(_stat_of(row), name) for name in STAT_FIELDS}
    for name in changed:
        fields[name] += delta
    stat = ListedEntry(row.name, fields["st_mode"], fields["st_size"], fields["st_mtime_ns"],
                       fields["st_ctime_ns"], fields["st_ino"])
    assert row.matches(stat) == (not changed and not row.racy)
    reason = row.mismatch(stat)
    assert (reason is None) == row.matches(stat)
    if "st_size" in changed:
        assert reason == "size changed"
    elif "st_mtime_ns" in changed:
        assert reason == "mtime changed"
    elif "st_ino" in changed:
        assert reason == "inode changed"
    elif not changed and row.racy:
        assert reason == "racy"


@given(row=_rows, start=_ints)
def test_a_row_made_from_a_stat_matches_it_unless_racy(row: FileRow, start: int) -> None:
    made = make_row(row.name, row.kind, _stat_of(row), row.ref, start)
    assert made.matches(_stat_of(row)) == (not made.racy)
    assert made._replace(racy=row.racy) == row
    assert not tree_row(b"d", b"T", 5).matches(_stat_of(row)._replace(st_mode=0o40755))


# -- the debug log of the cache's decisions ---------------------------------------------------


def _scan(root: bytes, store: ObjectStore, cache: StatCache, start_ns: int) -> Any:
    return scan_workspace(root, store, IgnoreRules.load(root), cache,
                          options=ScanOptions(threads=1), scan_start_ns=start_ns)


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.name == "ckpt.checkpoints.scan"]
    caplog.clear()
    return messages


def test_the_debug_log_says_why_each_file_is_read_again_or_trusted(
        tmp_path: Path, worktree_at: Any, caplog: pytest.LogCaptureFixture) -> None:
    ws = tmp_path / "ws"
    work = worktree_at(ws)
    root = os.fsencode(ws)
    work.write("grows.txt", b"AAAA", mtime_ns=PAST_NS)
    work.write("touched.txt", b"BBBB", mtime_ns=PAST_NS)
    work.write("same.txt", b"CCCC", mtime_ns=PAST_NS)
    work.write("sub/racy.txt", b"DDDD", mtime_ns=PAST_NS + 9 * 10**9)
    work.write("sub/old.txt", b"EEEE", mtime_ns=PAST_NS)
    work.write("odd/kept.txt", b"FFFF", mtime_ns=PAST_NS)
    os.mkfifo(ws / "odd" / "fifo")  # skipped: its directory's listing is not remembered
    caplog.set_level(logging.DEBUG, logger="ckpt.checkpoints.scan")
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        # The scan starts 1 ms after racy.txt's mtime: its row is racy.
        _, cache = _scan(root, store, StatCache(), PAST_NS + 9 * 10**9 + 1_000_000)
        assert "read grows.txt: not in the cache" in _messages(caplog)
        work.write("grows.txt", b"AAAAA", mtime_ns=PAST_NS)  # one byte more, same mtime
        work.write("touched.txt", b"bbbb", mtime_ns=PAST_NS + 10**9)  # same size, new mtime

        second, cache = _scan(root, store, cache, PAST_NS + 20 * 10**9)
        messages = _messages(caplog)
        assert second.hashed == 3
        assert "re-read grows.txt: size changed" in messages
        assert "re-read touched.txt: mtime changed" in messages
        assert "re-read sub/racy.txt: racy" in messages
        # The root is read in part: same.txt is not even looked at.
        assert "looked into ./: listing changed, 2 entries differ, 0 gone" in messages
        assert not [m for m in messages if "same.txt" in m]
        # A directory with no listing to compare with is read whole: each file is decided.
        assert "read odd/ whole: no usable cached listing" in messages
        assert "trusted odd/kept.txt: stat unchanged" in messages

        third, _ = _scan(root, store, cache, PAST_NS + 30 * 10**9)
        messages = _messages(caplog)
        assert third.hashed == 0 and third.tree == second.tree
        assert not [m for m in messages if m.startswith("re-read")]


def test_the_log_is_asked_once_per_scan_and_is_off_by_default(tmp_path: Path) -> None:
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        logger = logging.getLogger("ckpt.checkpoints.scan")
        assert not logger.isEnabledFor(logging.DEBUG)
        scanner = _Scanner(b"/nowhere", store, StatCache(), ScanOptions(), 0, None)
        assert scanner.log is None


def test_the_debug_log_says_which_directories_are_reused_whole(
        tmp_path: Path, worktree_at: Any, caplog: pytest.LogCaptureFixture) -> None:
    ws = tmp_path / "ws"
    work = worktree_at(ws)
    root = os.fsencode(ws)
    work.write("a.txt", b"A")
    work.write("sub/b.txt", b"B")
    work.age()
    time.sleep(2 * RACY_WINDOW_NS / 1e9)  # the ctimes settle: listings are trusted
    caplog.set_level(logging.DEBUG, logger="ckpt.checkpoints.scan")
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        first, cache = _scan(root, store, StatCache(), time.time_ns())
        _messages(caplog)
        second, _ = _scan(root, store, cache, time.time_ns())
        messages = _messages(caplog)
    assert second.tree == first.tree and second.hashed == 0
    assert sorted(messages) == ["reused ./ whole: listing unchanged",
                                "reused sub/ whole: listing unchanged"]
