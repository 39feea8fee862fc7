"""Directory listings and the scan's whole-directory shortcut.

`dirlisting.scan_dirs` (native, threaded) must give byte for byte what its pure-Python twin
gives, on real trees with every kind of entry and error. The scan takes a directory's rows from
the stat cache when its listing is unchanged and no ignore file changed in it or above it; a
scan that takes shortcuts must always give the tree a scan with no cache gives (the property
test drives random edits, ignore-file edits included, through both; 15 examples, 300 with
CKPT_SOAK=1), scanning both right after the edits and past the racy window. Elsewhere the
tests sleep past the racy window between an edit and the scan that must see it, so listings
are settled and the shortcut is really taken (each test checks that it was).
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import time
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from soak import scale  # tests/ is on pytest's `pythonpath`

from ckpt.checkpoints.config import set_config_value
from ckpt.checkpoints.errors import PathNotInCheckpoint, RestoreIncomplete
from ckpt.checkpoints.restore.statcache_update import (
    _restored_listings,
    record_restore,
    record_restored,
)
from ckpt.checkpoints.service import Checkpoints
from ckpt.checkpoints.snapshot import dirlisting
from ckpt.checkpoints.snapshot import statcache as statcache_module
from ckpt.checkpoints.snapshot.ignore import IgnoreRules
from ckpt.checkpoints.snapshot.scan import ScanOptions, scan_workspace
from ckpt.checkpoints.snapshot.statcache import (
    RACY_WINDOW_NS,
    DirRecord,
    DirTable,
    FileRow,
    Recheck,
    StatCache,
    check_stat_cache,
    leaf_counts,
    read_stat_cache,
    write_stat_cache,
)
from ckpt.objstore import EntryKind, ObjectId, ObjectStore, Tree, TreeEntry, make_entry

SETTLE = 2 * RACY_WINDOW_NS / 1e9  # seconds: edits before this are outside the racy window

native_only = pytest.mark.skipif(not dirlisting.NATIVE, reason="the native scanner is not built")


def _settle() -> None:
    time.sleep(SETTLE)


def _decoded(outcome: Any) -> Any:
    if isinstance(outcome, int):
        return outcome
    listing, newest = outcome
    return [tuple(entry) for entry in dirlisting.iter_listing(listing)], newest


# -- listings ----------------------------------------------------------------------------------


def _every_kind(root: Path) -> list[bytes]:
    (root / "d" / "sub").mkdir(parents=True)
    (root / "d" / "file.txt").write_bytes(b"hello")
    (root / "d" / "exec.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(root / "d" / "exec.sh", 0o755)
    os.symlink("file.txt", root / "d" / "link")
    os.symlink("/nonexistent", root / "d" / "dangling")
    os.mkfifo(root / "d" / "fifo")
    with open(os.fsencode(root / "d") + b"/caf\xe9-not-utf8", "wb") as out:
        out.write(b"bytes name")
    (root / "empty").mkdir()
    os.symlink("d", root / "dirlink")
    return [os.fsencode(root / name) for name in ("d", "d/sub", "empty", "dirlink", "missing",
                                                  "d/file.txt")]


def test_listing_holds_every_entry_sorted_with_its_lstat(tmp_path: Path) -> None:
    paths = _every_kind(tmp_path)
    outcome = dirlisting.scan_dirs(paths[:1], 2)[0]
    assert not isinstance(outcome, int)
    listing, newest = outcome
    entries = list(dirlisting.iter_listing(listing))
    names = [e.name for e in entries]
    assert names == sorted(names) == sorted(os.listdir(paths[0]))
    for entry in entries:
        st = os.lstat(paths[0] + b"/" + entry.name)
        assert (entry.st_mode, entry.st_size, entry.st_mtime_ns, entry.st_ctime_ns,
                entry.st_ino) == (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                  st.st_ino)
    assert newest == max(max(e.st_mtime_ns, e.st_ctime_ns) for e in entries)


def test_errors_are_errnos_and_symlinked_directories_are_not_followed(tmp_path: Path) -> None:
    paths = _every_kind(tmp_path)
    outcomes = dirlisting.scan_dirs(paths, 3)
    assert outcomes[2] == (b"", -(1 << 63))  # an empty directory
    assert outcomes[3] in (errno.ENOTDIR, errno.ELOOP)  # "dirlink" is a symlink: O_NOFOLLOW
    assert outcomes[4] == errno.ENOENT
    assert outcomes[5] == errno.ENOTDIR


@native_only
@pytest.mark.parametrize("threads", [1, 2, 7])
def test_native_and_python_listings_are_identical(tmp_path: Path, threads: int) -> None:
    paths = _every_kind(tmp_path)
    rng = random.Random(7)
    for index in range(300):  # enough directories that every thread gets work
        path = tmp_path / f"many/d{index % 40}/f{index}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randrange(64)))
    paths += [os.fsencode(tmp_path / "many")] + [
        os.fsencode(tmp_path / f"many/d{i}") for i in range(40)]
    native = dirlisting._native_scan_dirs(paths, threads)  # the batch-size rule bypassed
    python = dirlisting.scan_dirs_python(paths)
    assert [_decoded(o) for o in native] == [_decoded(o) for o in python]
    assert native == python


_ENTRY = st.tuples(st.binary(min_size=1, max_size=5).filter(lambda n: b"/" not in n),
                  st.integers(0, 2**32 - 1), st.integers(0, 2**64 - 1),
                  st.integers(-(2**63), 2**63 - 1), st.integers(-(2**63), 2**63 - 1),
                  st.integers(0, 2**64 - 1))


def _listing(entries: dict[bytes, tuple[Any, ...]]) -> bytes:
    header = dirlisting._HEADER
    return b"".join(header.pack(len(name), *fields) + name
                    for name, fields in sorted(entries.items()))


@settings(max_examples=scale(60, 300), deadline=None)
@given(old=st.dictionaries(st.binary(min_size=1, max_size=4), _ENTRY, max_size=12),
       edits=st.lists(st.tuples(st.sampled_from(["add", "drop", "touch"]), _ENTRY), max_size=8))
def test_listing_changes_are_the_entries_that_differ(
        old: dict[bytes, tuple[Any, ...]], edits: list[tuple[str, tuple[Any, ...]]]) -> None:
    before = {name: fields[1:] for name, fields in old.items()}
    after = dict(before)
    for op, (name, *fields) in edits:
        if op == "add":
            after[name] = tuple(fields)
        elif op == "drop":
            after.pop(name, None)
            if after:
                after.pop(sorted(after)[len(name) % len(after)])
        elif after:
            touched = sorted(after)[len(name) % len(after)]
            after[touched] = (after[touched][0] ^ 1, *after[touched][1:])
    expected = ([(name, *after[name]) for name in sorted(after) if before.get(name) != after[name]],
                sorted(set(before) - set(after)))
    old_listing, new_listing = _listing(before), _listing(after)
    assert dirlisting.listing_changes_python(old_listing, new_listing) == expected
    if dirlisting._native_listing_changes is not None:
        assert dirlisting._native_listing_changes(old_listing, new_listing) == expected


_TWO_ENTRIES = _listing({b"a": (0o100644, 1, 2, 3, 4), b"bb": (0o40755, 0, 2, 3, 5)})


@settings(max_examples=scale(60, 300), deadline=None)
@given(old=st.dictionaries(st.binary(min_size=1, max_size=4), _ENTRY, max_size=12),
       changes=st.dictionaries(st.binary(min_size=1, max_size=4), st.none() | _ENTRY,
                               max_size=6),
       picks=st.lists(st.integers(0, 2**16), max_size=4))
def test_a_patched_listing_is_the_listing_with_those_changes(
        old: dict[bytes, tuple[Any, ...]], changes: dict[bytes, tuple[Any, ...] | None],
        picks: list[int]) -> None:
    before = {name: fields[1:] for name, fields in old.items()}
    if before:  # changes to names the listing holds, not only to new ones
        names = sorted(before)
        for pick in picks:
            changes[names[pick % len(names)]] = None if pick % 3 == 0 else (b"", *before[names[0]])
    patch = {name: None if fields is None else dirlisting.ListedEntry(name, *fields[1:])
             for name, fields in changes.items()}
    after = dict(before)
    for name, entry in patch.items():
        if entry is None:
            after.pop(name, None)
        else:
            after[name] = tuple(entry[1:])
    expected = _listing(after)
    assert dirlisting.patch_listing(_listing(before), patch) == expected
    ordered = [(name, None if entry is None else dirlisting.encode_entry(entry))
               for name, entry in sorted(patch.items())]
    assert dirlisting.patch_listing_python(_listing(before), ordered) == expected


@pytest.mark.parametrize("patch", [dirlisting.patch_listing_python,
                                   dirlisting._native_patch_listing])
def test_a_malformed_listing_or_change_cannot_be_patched(patch: Any) -> None:
    if patch is None:
        pytest.skip("the native scanner is not built")
    good = _TWO_ENTRIES
    entry = dirlisting.encode_entry(dirlisting.ListedEntry(b"b", 0o100644, 1, 2, 3, 6))
    assert patch(good, [(b"b", entry)]) == _listing({
        b"a": (0o100644, 1, 2, 3, 4), b"b": (0o100644, 1, 2, 3, 6), b"bb": (0o40755, 0, 2, 3, 5)})
    for bad in (good[:-1], good[:10], good + b"\x01"):
        with pytest.raises(ValueError):
            patch(bad, [(b"zz", None)])
    for changes in ([(b"b", None), (b"a", None)], [(b"a", None), (b"a", None)],  # not in order
                    [(b"a", entry)], [(b"b", entry[:-1])], [(b"b", entry + entry)]):
        with pytest.raises(ValueError):
            patch(good, changes)


@pytest.mark.parametrize("changes", [dirlisting.listing_changes_python,
                                     dirlisting._native_listing_changes])
def test_a_malformed_listing_cannot_be_compared(changes: Any) -> None:
    if changes is None:
        pytest.skip("the native scanner is not built")
    good = _TWO_ENTRIES
    for bad in (good[:-1], good[:10], good + b"\x01", good[:40] + b"\xff\xff" + good[42:]):
        with pytest.raises(ValueError):
            changes(good, bad)
        with pytest.raises(ValueError):
            changes(bad, good)


def _known_table(top: Path) -> dict[bytes, list[bytes]]:
    """What a stat cache would know of every directory under `top`: its listing and the
    subdirectories to follow (here all of them)."""
    known = {}
    for directory, subdirs, _files in os.walk(top):
        rel = os.fsencode(os.path.relpath(directory, top))
        key = b"" if rel == b"." else rel
        listing = dirlisting.scan_dirs_python([os.fsencode(directory)])[0]
        assert not isinstance(listing, int)
        known[key] = [listing[0], b"\0".join(sorted(os.fsencode(d) for d in subdirs)), b"rest"]
    return known


def _walk_both(starts: list[tuple[bytes, bytes, bool]], known: dict[bytes, list[bytes]] | None,
               threads: int) -> tuple[list[Any], list[bytes]]:
    python = dirlisting.walk_dirs_python(starts, known)
    if dirlisting._native_walk_dirs is not None:
        native = dirlisting._native_walk_dirs(starts, known, threads)
        assert sorted(native[0]) == sorted(python[0])
        assert sorted(native[1]) == sorted(python[1])
    return sorted(python[0]), sorted(python[1])


def _files_in_two_levels(top: Path, count: int, *, dirs: int,
                         subdirs: int) -> tuple[bytes, dict[bytes, list[bytes]]]:
    """`count` files f<i> in top/d<i % dirs>/e<i % subdirs>, f<i> holding i bytes; returns
    the top as bytes and the known table of it."""
    for index in range(count):
        path = top / f"d{index % dirs}/e{index % subdirs}/f{index}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * index)
    return os.fsencode(top), _known_table(top)


@pytest.mark.parametrize("threads", [1, 2, 5])
def test_a_walk_reports_exactly_the_directories_that_differ_from_what_is_known(
        tmp_path: Path, threads: int) -> None:
    top, known = _files_in_two_levels(tmp_path / "t", 200, dirs=9, subdirs=4)
    reports, unchanged = _walk_both([(b"", top, True)], known, threads)
    assert reports == [] and sorted(unchanged) == sorted(known)  # all of it, walked in C alone

    # A file rewritten in place changes its directory's listing and nothing above it.
    (tmp_path / "t/d3/e3/f3").write_bytes(b"changed!")
    reports, unchanged = _walk_both([(b"", top, True)], known, threads)
    assert [key for key, _ in reports] == [b"d3/e3"]
    assert dict(reports)[b"d3/e3"] == dirlisting.scan_dirs_python([top + b"/d3/e3"])[0]
    assert len(unchanged) == len(known) - 1

    # A directory removed or added changes its parent's mtime, so the parent's parent differs
    # too: the walk stops there and the scan goes on from its subdirectories.
    shutil.rmtree(tmp_path / "t/d5/e2")
    (tmp_path / "t/d8/new").mkdir()
    reports, unchanged = _walk_both([(b"", top, True)], known, threads)
    assert [key for key, _ in reports] == [b""] and unchanged == []
    children = [(f"d{i}".encode(), top + f"/d{i}".encode(), True) for i in range(9)]
    reports, unchanged = _walk_both(children, known, threads)
    assert [key for key, _ in reports] == [b"d3/e3", b"d5", b"d8"]
    # Below a reported directory nothing is walked: the scan decides what to follow there.
    assert sorted(unchanged) == sorted(
        key for key in known if key and key != b"d3/e3" and not key.startswith((b"d5", b"d8")))

    # Without the shortcut flag a start is reported even if unchanged; an unknown key too.
    assert _walk_both([(b"d0", top + b"/d0", False)], known, threads)[0][0][0] == b"d0"
    assert _walk_both([(b"zz", top + b"/d0", True)], known, threads)[0][0][0] == b"zz"
    # A directory that is gone comes back as its errno.
    assert _walk_both([(b"gone", top + b"/gone", True)], known, threads)[0] == [
        (b"gone", errno.ENOENT)]
    assert _walk_both([(b"", top, True)], None, threads)[0] == [
        (b"", dirlisting.scan_dirs_python([top])[0])]


@native_only
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs CPU affinity")
@pytest.mark.parametrize("cpus", ["all", "one"])
def test_a_walk_and_a_scan_on_helpers_kept_off_the_callers_cpu_or_not(
        tmp_path: Path, cpus: str) -> None:
    """Helpers kept off the caller's CPU (the thread may use others) or placed by the
    scheduler (it may use one only): the walk and the scan give what the Python twins give.
    (Where they run is not observable here; `perf sched` showed it, see `start_helpers`.)"""
    top, known = _files_in_two_levels(tmp_path / "t", 300, dirs=11, subdirs=5)
    (tmp_path / "t/d4/e4/f4").write_bytes(b"changed")
    allowed = os.sched_getaffinity(0)
    try:
        if cpus == "one":
            os.sched_setaffinity(0, {min(allowed)})
        reports, unchanged = _walk_both([(b"", top, True)], known, 4)
        dirs = [top + b"/d%d" % i for i in range(11)]
        assert dirlisting._native_scan_dirs(dirs, 4) == dirlisting.scan_dirs_python(dirs)
    finally:
        os.sched_setaffinity(0, allowed)
    assert [key for key, _ in reports] == [b"d4/e4"] and len(unchanged) == len(known) - 1


@pytest.mark.parametrize("names", [b"..", b".", b"e0/..", b"", b"e0\0\0e1", b"e0\0.."])
def test_a_damaged_known_entry_never_leads_the_walk_out_of_the_tree(
        tmp_path: Path, names: bytes) -> None:
    for sub in ("e0", "e1"):
        (tmp_path / "t/d" / sub).mkdir(parents=True)
    top = os.fsencode(tmp_path / "t")
    known = _known_table(tmp_path / "t")
    known[b"d"] = [known[b"d"][0], names]
    reports, unchanged = _walk_both([(b"", top, True)], known, 2)
    if names == b"":  # no subdirectories named: d is unchanged and its children unvisited
        assert reports == [] and sorted(unchanged) == [b"", b"d"]
    else:  # a name that is not plain: d is reported, to be read in full by the scan
        assert [key for key, _ in reports] == [b"d"] and unchanged == [b""]


def test_an_entry_that_cannot_be_stated_is_kept_with_its_errno(tmp_path: Path) -> None:
    # A name too long for lstat through the directory is impossible to make; an entry whose
    # lstat fails is produced by a directory that is listable but not searchable (no x bit),
    # which root ignores: only meaningful as another user.
    if os.geteuid() == 0:
        pytest.skip("root may search any directory")
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "f").write_bytes(b"x")
    os.chmod(locked, 0o444)
    try:
        outcome = dirlisting.scan_dirs([os.fsencode(locked)], 1)[0]
        assert not isinstance(outcome, int)
        [entry] = dirlisting.iter_listing(outcome[0])
        assert (entry.name, entry.st_mode, entry.st_size) == (b"f", 0, errno.EACCES)
    finally:
        os.chmod(locked, 0o755)


# -- the shortcut ------------------------------------------------------------------------------


def _scan(root: bytes, store: ObjectStore, cache: StatCache, **options: Any) -> Any:
    return scan_workspace(root, store, IgnoreRules.load(root), cache,
                          options=ScanOptions(threads=2, **options), scan_start_ns=time.time_ns())


def test_unchanged_directories_are_taken_whole_from_the_cache(cp: Checkpoints, work: Any,
                                                              count_calls: Any) -> None:
    for d in range(5):
        for f in range(10):
            work.write(f"d{d}/e/f{f}.txt", b"%d %d" % (d, f))
    _settle()
    first = cp.create()
    assert first.stats.hashed == 50
    _settle()
    rules_loaded = count_calls(IgnoreRules, "load")
    second = cp.create()
    assert second.tree == first.tree and second.stats.hashed == 0
    # Every directory but the root (the store inside it changes its listing) was a shortcut,
    # and nothing needed the ignore rules.
    assert rules_loaded.count == 0
    work.write("d3/e/f4.txt", b"edited")
    work.write("d3/e/new.txt", b"new")
    _settle()
    third = cp.create()
    assert third.stats.hashed == 2
    assert {(c.path, c.change) for c in cp.diff(second.id, third.id)} == {
        (b"d3/e/f4.txt", "M"), (b"d3/e/new.txt", "A")}


def test_a_rebuilt_directory_reuses_only_the_entries_that_are_still_true(
        tmp_path: Path, worktree_at: Any) -> None:
    """A scan rebuilding a directory whose old tree the store holds decoded reuses its
    unchanged entries: one that changed its content at the same size, its mode, its kind,
    or a subdirectory's id, is made anew (the tree equals a scan without a cache)."""
    work = worktree_at(tmp_path / "ws")
    for name in ("same", "content", "mode", "kind"):
        work.write(f"d/{name}", b"0123456789")
    work.write("d/sub/file", b"below")
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        _settle()
        before, cache = _scan(work.root, store, StatCache())
        old = store.get_tree(before.tree).find(b"d")
        assert old is not None and old.oid is not None
        assert store.cached_tree(old.oid) is not None  # built by this store: reused below
        work.write("d/content", b"9876543210")
        os.chmod(work.path("d/mode"), 0o755)
        os.unlink(work.path("d/kind"))
        os.symlink("same", work.path("d/kind"))
        work.write("d/sub/file", b"BELOW")
        _settle()
        old_entries = {e.name: e for e in store.get_tree(old.oid).entries}
        warm, _ = _scan(work.root, store, cache)
        new = store.get_tree(warm.tree).find(b"d")
        assert new is not None and new.oid is not None
        new_entries = {e.name: e for e in store.get_tree(new.oid).entries}
        cold, _ = _scan(work.root, store, StatCache())
        assert warm.tree == cold.tree != before.tree
        assert new_entries[b"same"] is old_entries[b"same"]
        for name in (b"content", b"mode", b"kind", b"sub"):
            assert new_entries[name] != old_entries[name], name
        assert new_entries[b"mode"].kind is EntryKind.EXECUTABLE
        assert new_entries[b"kind"].kind is EntryKind.SYMLINK


@pytest.mark.parametrize("store_inside", [True, False])
def test_a_file_touched_but_unchanged_is_read_once(tmp_path: Path, worktree_at: Any,
                                                   store_inside: bool) -> None:
    """A touch (or an editor's save of the same bytes) moves a file's stat but not the tree:
    the scan that reads it again must remember the new stat, or every later scan reads it.
    (A store inside the root changes the root's listing on every checkpoint.)"""
    work = worktree_at(tmp_path / "ws")
    for f in range(5):
        work.write(f"d/e/f{f}.txt", b"content %d" % f)
    cp = Checkpoints.init(tmp_path / "ws", None if store_inside else tmp_path / "store")
    _settle()
    first = cp.create()
    _settle()
    os.utime(work.path("d/e/f2.txt"))
    _settle()
    second = cp.create()
    assert second.tree == first.tree and second.stats.hashed == 1
    _settle()
    third = cp.create()
    assert third.tree == first.tree and third.stats.hashed == 0
    cp.close()


def _names_at(store: ObjectStore, tree: Any, path: bytes) -> list[bytes]:
    for name in path.split(b"/"):
        entry = store.get_tree(tree).find(name)
        assert entry is not None
        tree = entry.oid
    return store.get_tree(tree).names()


def test_a_change_deep_down_costs_one_cache_write_not_two(tmp_path: Path, worktree_at: Any) -> None:
    work = worktree_at(tmp_path / "ws")
    for d in range(3):
        work.write(f"a/b{d}/c/f.txt", b"%d" % d)
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        _settle()
        _, cache = _scan(work.root, store, StatCache())
        _settle()
        _, cache = _scan(work.root, store, cache)
        work.write("a/b1/c/f.txt", b"edited")
        _settle()
        edited, cache = _scan(work.root, store, cache)
        assert cache.dirty and edited.hashed == 1
        _settle()

        again, after = _scan(work.root, store, cache)

    # The directories rebuilt around the edit (a/b1/c up to the root) kept their listings:
    # the next scan takes every directory whole and has nothing to save.
    assert again.tree == edited.tree and again.dirs_unchanged == 8 and not after.dirty


def test_an_ignore_file_above_an_unchanged_directory_is_honoured(tmp_path: Path,
                                                                 worktree_at: Any) -> None:
    work = worktree_at(tmp_path / "ws")
    root = work.root
    work.write("a/b/c/keep.txt", b"keep")
    work.write("a/b/c/app.log", b"log")
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        _settle()
        first, cache = _scan(root, store, StatCache())
        _settle()
        again, cache = _scan(root, store, cache)
        assert again.tree == first.tree and again.dirs_unchanged >= 3
        work.write("a/.gitignore", b"*.log\n")  # a/ changes; a/b and a/b/c do not
        _settle()
        third, cache = _scan(root, store, cache)
        assert store.get_tree(third.tree) != store.get_tree(first.tree)
        assert third.tree == _scan(root, store, StatCache())[0].tree
        work.write("a/.gitignore", b"*.log\n!app.log\n")  # the log is back in
        _settle()
        fourth, cache = _scan(root, store, cache)
        assert fourth.tree == _scan(root, store, StatCache())[0].tree
        assert _names_at(store, fourth.tree, b"a/b/c") == [b"app.log", b"keep.txt"]


def test_a_change_of_settings_disables_the_shortcut(tmp_path: Path, worktree_at: Any) -> None:
    work = worktree_at(tmp_path / "ws")
    work.write("a/b/big.bin", b"x" * 1000)
    work.write("a/b/small.txt", b"x")
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        _settle()
        first, cache = _scan(work.root, store, StatCache())
        _settle()
        limited, _ = _scan(work.root, store, cache, max_file_size=100)
        assert limited.dirs_unchanged == 0
        assert [s.path for s in limited.skipped] == [b"a/b/big.bin"]
        assert limited.tree != first.tree


def test_the_extra_ignore_setting_disables_the_shortcut(cp: Checkpoints, work: Any) -> None:
    work.write("src/deep/app.log", b"log")
    work.write("src/deep/main.c", b"int main;")
    _settle()
    cp.create()
    set_config_value(cp.store_dir, "extra_ignore", "*.log")
    with closing(Checkpoints.open(cp.root, cp.store_dir)) as again:
        _settle()
        record = again.create()
        assert again.read_file(record.id, "src/deep/main.c") == b"int main;"
        with pytest.raises(PathNotInCheckpoint):
            again.read_file(record.id, "src/deep/app.log")


def test_after_gc_the_shortcut_is_not_trusted(cp: Checkpoints, work: Any) -> None:
    work.write("a/b/f.txt", b"first")
    _settle()
    first = cp.create()
    work.write("a/b/f.txt", b"second")
    _settle()
    cp.create()
    cp.prune(keep_latest=1)  # collects: the gc generation moves on
    work.write("a/b/f.txt", b"first")
    os.utime(work.path("a/b/f.txt"), ns=(1, 1))
    _settle()
    record = cp.create()
    assert cp.read_file(record.id, "a/b/f.txt") == b"first"
    assert record.stats.hashed == 1 and first.id not in {r.id for r in cp.history()}


# -- the property: a scan with shortcuts gives what a scan without a cache gives ---------------

_NAMES = ["a", "b", "c.log", "d.txt", "e"]
_DIRS = ["", "x", "x/y", "x/y/z", "w"]
_IGNORES = [b"*.log\n", b"b\n", b"!c.log\n*.log\n", b"y/\n", b"", b"e\n!x\n"]

_OPS = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(_DIRS), st.sampled_from(_NAMES),
              st.binary(max_size=6)),
    st.tuples(st.just("remove"), st.sampled_from(_DIRS), st.sampled_from(_NAMES), st.none()),
    st.tuples(st.just("ignore"), st.sampled_from(_DIRS), st.sampled_from([".gitignore",
                                                                          ".ckptignore"]),
              st.sampled_from(_IGNORES)),
    st.tuples(st.just("unignore"), st.sampled_from(_DIRS), st.sampled_from([".gitignore",
                                                                            ".ckptignore"]),
              st.none()),
    st.tuples(st.just("chmod"), st.sampled_from(_DIRS), st.sampled_from(_NAMES), st.none()),
    st.tuples(st.just("link"), st.sampled_from(_DIRS), st.sampled_from(_NAMES),
              st.sampled_from([b"a", b"../x", b"nowhere"])),
    st.tuples(st.just("rmdir"), st.sampled_from(_DIRS[1:]), st.none(), st.none()),
)


def _apply(work: Any, op: tuple[str, str, str | None, bytes | None]) -> None:
    kind, directory, name, data = op
    rel = f"{directory}/{name}" if directory else str(name)
    path = work.path(rel) if name is not None else work.path(directory)
    if kind in ("write", "ignore", "link"):
        if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
            os.unlink(path)
        elif os.path.isdir(path):
            return  # a directory stands there: leave it
        try:
            if kind == "link":
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.symlink(data or b"x", path)
            else:
                work.write(rel, data or b"")
        except (NotADirectoryError, FileExistsError):
            return  # a file stands where a parent directory would be
    elif kind in ("remove", "unignore"):
        if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
            os.unlink(path)
    elif kind == "chmod":
        if os.path.isfile(path) and not os.path.islink(path):
            os.chmod(path, os.stat(path).st_mode ^ 0o100)
    elif kind == "rmdir" and os.path.isdir(path) and not os.path.islink(path):
        work.remove(directory)


def _property_workspace(base: Path, worktree_at: Any, python_listings: bool,
                        monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Any]:
    """Every name of _NAMES in every directory of _DIRS; with `python_listings`, the native
    listing functions are replaced by their Python twins for the test."""
    work = worktree_at(base / "ws")
    for directory in _DIRS:
        for name in _NAMES:
            work.write(f"{directory}/{name}" if directory else name, name.encode())
    if python_listings:
        for native in ("_native_scan_dirs", "_native_walk_dirs", "_native_listing_changes",
                       "_native_patch_listing"):
            monkeypatch.setattr(dirlisting, native, None)
    return base, work


@settings(max_examples=scale(15, 300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.lists(_OPS, min_size=1, max_size=4), st.booleans()),
                      min_size=2, max_size=6),
       python_listings=st.booleans())
def test_a_scan_with_shortcuts_equals_a_scan_without_a_cache(
        tmp_path_factory: pytest.TempPathFactory, worktree_at: Any,
        steps: list[tuple[list[tuple[str, str, str | None, bytes | None]], bool]],
        python_listings: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each step's scan comes either after a pause (listings settle) or right after the edits
    (racy files: their directories' listings are kept aside, and read through next time)."""
    base, work = _property_workspace(tmp_path_factory.mktemp("prop"), worktree_at,
                                     python_listings, monkeypatch)
    with closing(ObjectStore.init(str(base / "store"))) as store:
        _settle()
        _, cache = _scan(work.root, store, StatCache())
        _settle()
        unchanged, cache = _scan(work.root, store, cache)
        assert unchanged.dirs_unchanged == len(_DIRS)  # the store is outside: the root too
        for ops, settle in steps:
            for op in ops:
                _apply(work, op)
            if settle:
                _settle()
            warm, cache = _scan(work.root, store, cache)
            cold, _ = _scan(work.root, store, StatCache())
            assert warm.tree == cold.tree, ops
            assert warm.skipped == cold.skipped
    monkeypatch.undo()


@settings(max_examples=scale(20, 300), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(turn=st.lists(_OPS, min_size=1, max_size=5), after=st.lists(_OPS, max_size=3),
       settle=st.booleans(), python_listings=st.booleans())
def test_the_checkpoint_after_a_restore_equals_a_scan_without_a_cache(
        tmp_path_factory: pytest.TempPathFactory, worktree_at: Any, cold_scan: Any,
        turn: list[tuple[str, str, str | None, bytes | None]],
        after: list[tuple[str, str, str | None, bytes | None]], settle: bool,
        python_listings: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a restore teaches the stat cache (rows, listings, tree ids) never hides a change:
    a turn, a restore (right after it, or once it settled), maybe edits right after the
    restore, then a checkpoint, which must be what a scan without a cache sees."""
    base, work = _property_workspace(tmp_path_factory.mktemp("restore-prop"), worktree_at,
                                     python_listings, monkeypatch)
    _settle()
    with Checkpoints.init(os.fsdecode(work.root), str(base / "store")) as cp:
        first = cp.create()
        for op in turn:
            _apply(work, op)
        cp.create()
        if settle:
            _settle()
        with suppress(RestoreIncomplete):  # a file the turn's rules ignore is in the way
            cp.restore(first.id)
        restored = cp.create()
        assert restored.tree == cold_scan(os.fsdecode(work.root), base / "cold-restored")
        for op in after:
            _apply(work, op)
        assert cp.create().tree == cold_scan(os.fsdecode(work.root), base / "cold-after")
    monkeypatch.undo()


# -- the stat cache's records (pure, no scan) ---------------------------------------------------


def _record(tree: bytes, names: list[bytes], listing: bytes = b"L") -> DirRecord:
    rows = [FileRow(n, 1, 1, 1, 1, 1, 0o100644, b"o" * 32, False) for n in names]
    return DirRecord(tree, len(names), len(names), rows, listing=listing, ignores=[],
                     subdirs=[], ignored=[], leaves=len(names))


def test_a_restore_drops_the_ids_and_listings_it_invalidates_and_nothing_else(
        tmp_path: Path) -> None:
    cache = StatCache(DirTable(records={
        b"": _record(b"T0", [b"a"]), b"a": _record(b"T1", [b"b"]),
        b"a/b": _record(b"T2", [b"f", b"g"]), b"z": _record(b"T3", [b"h"])}))
    (tmp_path / "just-written").write_bytes(b"x")
    st = os.stat(tmp_path / "just-written")
    cleared = record_restored(
        cache, [(b"a/b/f", 1, st, b"n" * 32), (b"a/b/new", 1, st, b"m" * 32)], [b"a/b/g"],
        time.time_ns())
    assert cleared == {b"a/b", b"a", b""}  # what adopt_restored_trees may give an id again
    changed = cache.dirs[b"a/b"]
    assert [r.name for r in changed.rows] == [b"f", b"new"]
    assert [r.ref for r in changed.rows] == [b"n" * 32, b"m" * 32]
    assert all(r.racy for r in changed.rows)  # just written: read once more next time
    assert (changed.tree, changed.listing) == (b"", b"")  # no shortcut, no reuse
    # The listing it had is kept aside: the next scan looks at what differs and at the names
    # the restore touched.
    assert changed.recheck == Recheck(b"L", [b"f", b"g", b"new"])
    assert cache.dirs[b"a"].tree == cache.dirs[b""].tree == b""  # ancestors lose their ids
    assert cache.dirs[b"a"].listing == b"L"  # their own entries did not change
    assert (cache.dirs[b"z"].tree, cache.dirs[b"z"].listing) == (b"T3", b"L")
    assert leaf_counts(cache) == {b"T3": 1}


def test_the_listings_a_restore_knows_are_what_its_directories_then_list(tmp_path: Path) -> None:
    """From the cached listing, what the restore wrote (with its stat), what it removed and the
    stats of the directories it went through, `_restored_listings` gives the listing a walk
    then finds, byte for byte; names that were racy stay aside unless the restore wrote them;
    a directory where a subdirectory came or went, or an ignore file changed, gets none."""
    root = tmp_path / "ws"
    (root / "s").mkdir(parents=True)
    for name in ("a", "b", "c"):
        (root / name).write_bytes(name.encode())
    for name in ("q", "r"):
        (root / "s" / name).write_bytes(name.encode())

    def listing(path: Path) -> bytes:
        outcome = dirlisting.scan_dirs([os.fsencode(path)])[0]
        assert not isinstance(outcome, int)
        return outcome[0]

    def cache_now() -> StatCache:
        top = _record(b"T0", [b"a", b"b", b"c"], listing(root))
        top.rows.append(FileRow(b"s", 4, 0, 0, 0, 0, 0, b"T1", False))
        below = _record(b"T1", [b"q", b"r"], b"")
        below.recheck = Recheck(listing(root / "s"), [b"r"])
        return StatCache(DirTable(records={b"": top, b"s": below}))

    cache, adopted, not_adopted = cache_now(), cache_now(), cache_now()

    def put(rel: str, data: bytes) -> tuple[bytes, int, os.stat_result, bytes]:
        staged = tmp_path / "staged"
        staged.write_bytes(data)
        os.rename(staged, root / rel)
        return (rel.encode(), 1, os.lstat(root / rel), b"n" * 32)

    written = [put("a", b"A"), put("d", b"D"), put("s/q", b"Q")]
    os.unlink(root / "b")
    dir_stats = {b"": os.stat(root), b"s": os.stat(root / "s")}
    assert _restored_listings(cache, written, [b"b"], dir_stats) == {
        b"": Recheck(listing(root), []), b"s": Recheck(listing(root / "s"), [b"r"])}

    # Through `record_restore`: a directory whose tree id is adopted trusts its new listing
    # when nothing racy is left in it; with a racy name, or without the id, it is kept aside.
    def files(*names: bytes) -> list[TreeEntry]:
        return [make_entry(name, EntryKind.FILE, ObjectId((b"o" if name in (b"c", b"r")
                                                            else b"n") * 32), None, 1)
                for name in names]

    below = Tree(tuple(files(b"q", b"r")))
    whole = Tree((*files(b"a", b"c", b"d"), make_entry(b"s", EntryKind.TREE, ObjectId(b"S" * 32),
                                                        None, 2)))
    trees = {ObjectId(b"S" * 32): below, ObjectId(b"R" * 32): whole,
             ObjectId(b"X" * 32): Tree((*files(b"a", b"d"), whole.entries[-1]))}
    record_restore(adopted, trees.__getitem__, ObjectId(b"R" * 32), written, [b"b"], dir_stats,
                   time.time_ns())
    top, sub = adopted.dirs[b""], adopted.dirs[b"s"]
    assert (top.tree, top.listing, top.recheck) == (b"R" * 32, listing(root), None)
    assert (sub.tree, sub.listing, sub.recheck) == (b"S" * 32, b"", Recheck(listing(root / "s"), [b"r"]))
    record_restore(not_adopted, trees.__getitem__, ObjectId(b"X" * 32), written, [b"b"],
                   dir_stats, time.time_ns())  # a target without "c": the root is not its tree
    top = not_adopted.dirs[b""]
    assert (top.tree, top.listing, top.recheck) == (b"", b"", Recheck(listing(root), []))

    cache = cache_now()  # listings of before the following changes: none can be known
    (root / "s" / "new").mkdir()
    written = [put(".gitignore", b"*.log\n")]
    dir_stats = {b"": os.stat(root), b"s": os.stat(root / "s"), b"s/new": os.stat(root / "s/new")}
    assert _restored_listings(cache, written, [], dir_stats) == {}


def test_a_cache_round_trips_with_rows_left_packed_until_asked(tmp_path: Path) -> None:
    aside = _record(b"T1", [b"c"], b"")
    aside.recheck = Recheck(b"L2", [b"c"])
    cache = StatCache(DirTable(records={b"": _record(b"T0", [b"a", b"b"]), b"d": aside}),
                      gc_generation=3, settings="s")
    path = str(tmp_path / "statcache")
    write_stat_cache(path, cache)
    again = read_stat_cache(path, gc_generation=3)
    assert (again.settings, again.needs_verification) == ("s", False)
    assert {k: (r.tree, r.listing, r.recheck, r.leaves) for k, r in again.dirs.items()} == {
        b"": (b"T0", b"L", None, 2), b"d": (b"T1", b"", Recheck(b"L2", [b"c"]), 1)}
    assert again.dirs[b""]._rows is None  # not decoded by loading
    assert again.dirs[b""].rows == cache.dirs[b""].rows
    assert read_stat_cache(path, gc_generation=4).needs_verification


def _refuse_exchange(src: bytes, dst_dir_fd: int, dst: bytes) -> None:
    raise OSError(errno.EINVAL, "Invalid argument", dst)  # a file system without the exchange


@pytest.mark.parametrize("how", ["native", "refused", "python"])
def test_a_save_replaces_the_cache_whole_and_leaves_no_temporary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    """Saved by swapping the new file in (ext4 writes a file renamed over another back at once)
    or, where names cannot be exchanged, by renaming over: either way the reader sees one whole
    cache and the old copy is gone."""
    if how == "native" and statcache_module._native_exchange is None:
        pytest.skip("the native _fsops extension is not built")
    if how == "refused":
        monkeypatch.setattr(statcache_module, "_native_exchange", _refuse_exchange)
    if how == "python":
        monkeypatch.setattr(statcache_module, "_native_exchange", None)
    path = str(tmp_path / "statcache")
    write_stat_cache(path, StatCache(DirTable(records={b"": _record(b"T0", [b"a"])}), settings="s"))
    first = os.stat(path)
    write_stat_cache(path, StatCache(DirTable(records={b"": _record(b"T1", [b"a", b"b"])}),
                                     settings="s"))  # no base read: written whole, not a delta
    assert os.listdir(tmp_path) == ["statcache"]
    assert os.stat(path).st_ino != first.st_ino
    assert {k: r.tree for k, r in read_stat_cache(path, gc_generation=0).dirs.items()} == {b"": b"T1"}


def _records(cache: StatCache) -> dict[bytes, tuple[Any, ...]]:
    return {key: (r.tree, r.listing, r.recheck, r.leaves, r.rows) for key, r in cache.dirs.items()}


def test_a_save_writes_a_delta_against_the_base_while_it_stays_small(tmp_path: Path) -> None:
    path = str(tmp_path / "statcache")
    delta = path + ".delta"
    many = {b"d%03d" % i: _record(b"T%03d" % i, [b"f%d" % j for j in range(20)])
            for i in range(200)}
    write_stat_cache(path, StatCache(DirTable(records=dict(many)), gc_generation=1, settings="s"))
    base = os.stat(path)
    base_bytes = Path(path).read_bytes()
    assert not os.path.exists(delta)

    loaded = read_stat_cache(path, gc_generation=1)
    # What a scan makes of it: records taken as they were, but one gone, one new, one added.
    cache = StatCache(gc_generation=2, settings="s", base=loaded.base)
    kept = [key for key in loaded.dirs.keys() if key != b"d008"]  # noqa: SIM118 (no __iter__)
    cache.dirs.take(loaded.dirs, kept)
    cache.dirs[b"d007"] = _record(b"NEW", [b"g"])
    cache.dirs[b"added"] = _record(b"ADD", [b"h"])
    write_stat_cache(path, cache)
    assert os.stat(path).st_mtime_ns == base.st_mtime_ns  # the base is not written again
    assert loaded.base is not None
    assert os.path.getsize(delta) < loaded.base.size // 8  # size: the base's, uncompressed

    again = read_stat_cache(path, gc_generation=2)
    assert not again.needs_verification  # the delta's generation
    assert _records(again) == _records(cache)
    assert b"d008" not in again.dirs and again.dirs[b"d007"].tree == b"NEW"

    # The delta is cumulative: a later save still has every change since the base.
    again.dirs[b"d009"] = _record(b"NINE", [b"i"])
    write_stat_cache(path, again)
    third = read_stat_cache(path, gc_generation=2)
    assert _records(third) == _records(again) and third.dirs[b"d007"].tree == b"NEW"

    # Changes past an eighth of the base: the base is written whole, the delta removed.
    for key in [k for k in third.dirs.keys() if k.startswith(b"d")][:60]:  # noqa: SIM118
        third.dirs[key] = _record(b"X", [b"x%d" % j for j in range(20)])
    write_stat_cache(path, third)
    assert Path(path).read_bytes() != base_bytes and not os.path.exists(delta)
    assert _records(read_stat_cache(path, gc_generation=2)) == _records(third)


def test_a_delta_of_another_base_or_damaged_is_ignored(tmp_path: Path) -> None:
    """The base alone is then read: an older cache, which costs only speed."""
    path = str(tmp_path / "statcache")
    write_stat_cache(path, StatCache(DirTable(records={b"a": _record(b"T1", [b"f"])})))
    cache = read_stat_cache(path, gc_generation=0)
    cache.dirs[b"a"] = _record(b"T2", [b"g"])
    write_stat_cache(path, cache)
    with open(path + ".delta", "rb") as stream:
        delta = stream.read()
    assert read_stat_cache(path, gc_generation=0).dirs[b"a"].tree == b"T2"
    assert check_stat_cache(path) is None

    damaged = bytearray(delta)
    damaged[len(damaged) // 2] ^= 0x10
    with open(path + ".delta", "wb") as out:
        out.write(damaged)
    assert read_stat_cache(path, gc_generation=0).dirs[b"a"].tree == b"T1"
    assert check_stat_cache(path) is not None  # fsck names it

    write_stat_cache(path, StatCache(DirTable(records={b"a": _record(b"T3", [b"h"])})))
    with open(path + ".delta", "wb") as out:  # a delta made against the base before
        out.write(delta)
    assert read_stat_cache(path, gc_generation=0).dirs[b"a"].tree == b"T3"
    assert check_stat_cache(path) is None  # stale, not damaged


# -- ignore rules without pathspec ---------------------------------------------------------------

_CREATE_IN_A_FRESH_PROCESS = """
import json, sys
from ckpt.checkpoints.service import Checkpoints
with Checkpoints.open(sys.argv[1]) as cp:
    record = cp.create()
    names = sorted(f.path.decode() for f in cp.files(record.id))
print(json.dumps({"pathspec": "pathspec" in sys.modules, "names": names}))
"""


def _create_in_a_fresh_process(root: Path) -> dict[str, Any]:
    import json
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    path = os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    run = subprocess.run([sys.executable, "-c", _CREATE_IN_A_FRESH_PROCESS, str(root)],
                         capture_output=True, text=True, env=env, check=True, timeout=120)
    return json.loads(run.stdout)  # type: ignore[no-any-return]


def test_ignore_rules_come_from_saved_translations_without_importing_pathspec(
        tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / ".gitignore").write_text("*.log\nbuild/\n!keep.log\n/top-[ab].txt\n**/tmp/**\n")
    (root / "src" / "a.py").write_text("a")
    with Checkpoints.init(str(root)):
        pass
    first = _create_in_a_fresh_process(root)
    assert first["pathspec"] and first["names"] == [".gitignore", "src/a.py"]
    for name in ("src/new.py", "src/new.log", "src/keep.log", "top-a.txt", "top-c.txt",
                 "build/out.o", "src/tmp/x/y.txt"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(name)

    second = _create_in_a_fresh_process(root)

    # New names had to be decided by the rules, from the translations the first process saved.
    assert not second["pathspec"]
    assert second["names"] == [".gitignore", "src/a.py", "src/keep.log", "src/new.py",
                               "top-c.txt"]


def test_translations_of_another_pathspec_are_not_reused(tmp_path: Path) -> None:
    from ckpt.checkpoints.snapshot import ignore

    cache_path = str(tmp_path / "cache")
    saved = ("another pathspec", {"*.log": [None, None]})
    cache = StatCache(settings="s", ignore_translations=saved)
    write_stat_cache(cache_path, cache)
    loaded = read_stat_cache(cache_path, gc_generation=0)
    assert loaded.ignore_translations == saved
    before = dict(ignore._translations)
    ignore.reuse_translations(*loaded.ignore_translations)  # a different identity: ignored
    assert ignore._translations == before
    ignore.reuse_translations(ignore.translator_identity(), {"x-never-seen-line": ["bad"], 3: None})
    assert ignore._translations == before  # wrong shapes are ignored
