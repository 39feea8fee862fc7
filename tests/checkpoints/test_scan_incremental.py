"""Incremental cost: a checkpoint reads only what changed and writes only changed directories.

Content reads are counted by instrumenting `put_file` on the service's real object store (the
only way the scanner reads a file's content) and cross-checked with `record.stats.hashed`.
Files are aged (mtime moved into the past) before "zero reads" is measured: a file modified
within the racy window before a scan is, by design, hashed again by the next scan.
The racy rule itself is shown at the scan level, where the scan's start time is injected.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from contextlib import closing, suppress
from pathlib import Path
from typing import Any

import pytest

from ckpt.checkpoints import RestoreOptions
from ckpt.checkpoints.config import set_config_value
from ckpt.checkpoints.service import Checkpoints
from ckpt.checkpoints.snapshot.dirlisting import scan_dirs
from ckpt.checkpoints.snapshot.ignore import IgnoreRules
from ckpt.checkpoints.snapshot.scan import ScanOptions, _Scanner, scan_workspace
from ckpt.checkpoints.snapshot.statcache import (
    COARSE_RACY_WINDOW_NS,
    RACY_WINDOW_NS,
    FileRow,
    Recheck,
    StatCache,
    read_stat_cache,
)
from ckpt.objstore import ObjectStore
from ckpt.objstore.walk import walk_reachable

# A fine-grained file system's stamps (not whole seconds: see statcache.is_racy).
PAST_NS = 1_600_000_000 * 10**9 + 123_456_789


def _populate(work: Any, dirs: int = 10, per_dir: int = 20) -> list[bytes]:
    paths = []
    for d in range(dirs):
        for f in range(per_dir):
            rel = b"d%d/f%02d.txt" % (d, f)
            work.write(rel, b"file %d/%d\n" % (d, f))
            paths.append(rel)
    return paths


def test_unchanged_tree_is_snapshotted_with_zero_content_reads(
        cp: Checkpoints, work: Any, count_calls: Any, reopen: Callable[..., Checkpoints]) -> None:
    _populate(work)
    work.age()
    reads = count_calls(cp.objects, "put_file")
    first = cp.create()
    assert reads.count == first.stats.hashed == 200

    reads.reset()
    second = cp.create()
    assert reads.count == second.stats.hashed == 0
    assert second.tree == first.tree
    assert (second.stats.new_objects, second.stats.files) == (0, 200)

    other = reopen()  # the stat cache is on disk, not in the object
    other_reads = count_calls(other.objects, "put_file")
    third = other.create()
    assert other_reads.count == third.stats.hashed == 0
    assert third.tree == first.tree


def test_twenty_edited_files_cost_exactly_twenty_reads(
        cp: Checkpoints, ws: Path, work: Any, count_calls: Any) -> None:
    paths = _populate(work)
    work.age()
    before = cp.create()
    edited = paths[::10]
    assert len(edited) == 20
    for index, rel in enumerate(edited):
        # Half change size, half keep it (their mtime and ctime still move).
        work.write(rel, b"edited %d" % index if index % 2 else b"file 9/99\n")
    reads = count_calls(cp.objects, "put_file")
    after = cp.create()

    root = os.fsencode(ws)
    assert sorted(reads.calls) == sorted(root + b"/" + rel for rel in edited)
    assert after.stats.hashed == 20
    changes = cp.diff(before.id, after.id)
    assert [(c.path, c.change) for c in changes] == [(rel, "M") for rel in sorted(edited)]


def test_same_size_rewrite_with_mtime_forced_back_is_detected(
        cp: Checkpoints, ws: Path, work: Any) -> None:
    path = work.write("f.txt", b"AAAA")
    first = cp.create()
    st = os.stat(path)
    work.write("f.txt", b"BBBB")  # same size ...
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and the same mtime as cached
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns and os.stat(path).st_size == st.st_size
    second = cp.create()
    assert cp.read_file(first.id, "f.txt") == b"AAAA"
    assert cp.read_file(second.id, "f.txt") == b"BBBB"
    assert [(c.path, c.change) for c in cp.diff(first.id, second.id)] == [(b"f.txt", "M")]


# -- the racy rule, with the scan's start time injected --------------------------------------


def _scan(root: bytes, store: ObjectStore, cache: StatCache, start_ns: int) -> Any:
    rules = IgnoreRules.load(root)
    return scan_workspace(root, store, rules, cache, options=ScanOptions(threads=1),
                          scan_start_ns=start_ns)


def _freeze_row_stat(cache: StatCache, name: bytes, path: bytes) -> FileRow:
    """Make the cached row carry the file's current stat: what a rewrite inside one timestamp
    tick looks like (size, mtime, ctime, inode and mode all as the cache saw them)."""
    rows = cache.dirs[b""].rows
    at = next(i for i, r in enumerate(rows) if r.name == name)
    st = os.lstat(path)
    row = rows[at] = rows[at]._replace(size=st.st_size, mtime_ns=st.st_mtime_ns,
                                       ctime_ns=st.st_ctime_ns, ino=st.st_ino, mode=st.st_mode)
    return row


def _content(store: ObjectStore, tree: Any, name: bytes) -> bytes:
    entry = store.get_tree(tree).find(name)
    assert entry is not None and entry.oid is not None
    return store.get_bytes(entry.oid)


def test_same_tick_rewrite_is_rehashed_because_its_row_is_racy(tmp_path: Path,
                                                                worktree_at: Any) -> None:
    ws = tmp_path / "ws"
    work = worktree_at(ws)
    root = os.fsencode(ws)
    path = work.write("f.txt", b"AAAA", mtime_ns=PAST_NS)
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        # The scan starts 1 ms after the file's mtime: the same tick, so the row is racy.
        first, cache = _scan(root, store, StatCache(), PAST_NS + 1_000_000)
        assert _content(store, first.tree, b"f.txt") == b"AAAA"
        work.write("f.txt", b"BBBB", mtime_ns=PAST_NS)
        row = _freeze_row_stat(cache, b"f.txt", path)
        assert row.racy is True

        second, cache = _scan(root, store, cache, PAST_NS + 10 * 10**9)
        assert second.hashed == 1
        assert _content(store, second.tree, b"f.txt") == b"BBBB"
        # Hashed long after its mtime, the row is settled now.
        assert next(r for r in cache.dirs[b""].rows if r.name == b"f.txt").racy is False


def test_a_stamp_of_whole_seconds_is_racy_for_two_seconds(tmp_path: Path,
                                                          worktree_at: Any) -> None:
    """A file system that keeps whole seconds (ext4 with 128-byte inodes, HFS+; FAT keeps two)
    gives a same-size rewrite a second later the same stamp: such a stamp is trusted only two
    seconds (and the clock's lag) after it, where a fine one is after 20 ms."""
    ws = tmp_path / "ws"
    work = worktree_at(ws)
    root = os.fsencode(ws)
    whole = 1_600_000_000 * 10**9
    work.write("coarse.txt", b"AAAA", mtime_ns=whole)
    work.write("fine.txt", b"aaaa", mtime_ns=whole + 1)
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        first, cache = _scan(root, store, StatCache(), whole + 1_500_000_000)
        rows = {r.name: r for r in cache.dirs[b""].rows}
        assert rows[b"coarse.txt"].racy is True and rows[b"fine.txt"].racy is False
        second, cache = _scan(root, store, cache, whole + 1_600_000_000)
        assert second.hashed == 1  # the coarse one, again
        third, cache = _scan(root, store, cache, whole + COARSE_RACY_WINDOW_NS + 1)
        assert third.hashed == 1  # settled by this read
        fourth, _ = _scan(root, store, cache, whole + COARSE_RACY_WINDOW_NS + 2)
        assert fourth.hashed == 0 and fourth.tree == first.tree


def test_settled_row_with_unchanged_stat_is_trusted_without_reading(tmp_path: Path,
                                                                     worktree_at: Any) -> None:
    """The other side of the racy rule: the stat cache's promise of zero reads. With a row
    that is not racy, the identical-stat rewrite above goes unread (the racy flag is what
    catches it)."""
    ws = tmp_path / "ws"
    work = worktree_at(ws)
    root = os.fsencode(ws)
    path = work.write("f.txt", b"AAAA", mtime_ns=PAST_NS)
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        first, cache = _scan(root, store, StatCache(), PAST_NS + 10 * 10**9)
        work.write("f.txt", b"BBBB", mtime_ns=PAST_NS)
        row = _freeze_row_stat(cache, b"f.txt", path)
        assert row.racy is False
        second, _ = _scan(root, store, cache, PAST_NS + 20 * 10**9)
        assert second.hashed == 0
        assert second.tree == first.tree


def test_file_modified_just_before_a_scan_is_read_again_by_the_next(
        tmp_path: Path, worktree_at: Any) -> None:
    ws = tmp_path / "ws"
    work = worktree_at(ws)
    root = os.fsencode(ws)
    work.write("old.txt", b"old", mtime_ns=PAST_NS)
    work.write("fresh.txt", b"fresh", mtime_ns=PAST_NS + 10**9)
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        start = PAST_NS + 10**9 + 5_000_000  # 5 ms after fresh.txt's mtime
        first, cache = _scan(root, store, StatCache(), start)
        assert first.hashed == 2
        second, cache = _scan(root, store, cache, start + 10**9)
        assert second.hashed == 1 and second.tree == first.tree  # only the racy one
        third, _ = _scan(root, store, cache, start + 2 * 10**9)
        assert third.hashed == 0


def test_a_directory_kept_aside_for_its_racy_files_reads_only_those_again(
        tmp_path: Path, worktree_at: Any, count_calls: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A checkpoint right after an edit keeps the directory's listing aside with the racy
    names; the next scan that finds the same listing reads those files and nothing else of the
    directory, and keeps its tree id when they read as before."""
    ws = tmp_path / "ws"
    work = worktree_at(ws)
    root = os.fsencode(ws)
    for index in range(8):
        work.write(f"old{index}.txt", b"old %d" % index, mtime_ns=PAST_NS)
    work.write("fresh.txt", b"fresh", mtime_ns=PAST_NS + 10**9)
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        start = PAST_NS + 10**9 + 5_000_000  # 5 ms after fresh.txt's mtime
        first, cache = _scan(root, store, StatCache(), start)
        record = cache.dirs[b""]
        assert record.listing == b"" and record.recheck is not None
        assert record.recheck.names == [b"fresh.txt"]

        reads = count_calls(store, "put_file")
        whole_reads: list[bytes] = []
        read_dir = _Scanner._read_dir
        monkeypatch.setattr(_Scanner, "_read_dir", lambda self, node, *rest: (
            whole_reads.append(node.key), read_dir(self, node, *rest)))
        second, cache = _scan(root, store, cache, start + 10**9)
        assert reads.calls == [root + b"/fresh.txt"] and second.hashed == 1
        assert whole_reads == []
        assert second.tree == first.tree
        record = cache.dirs[b""]
        # Nothing racy is left. (The files' ctimes are real, so they lie after this injected
        # clock, which keeps the listing aside, with no names, instead of trusting it whole.)
        assert record.tree == first.tree
        assert record.recheck == Recheck(scan_dirs([root])[0][0], [])

        reads.reset()
        third, _ = _scan(root, store, cache, start + 2 * 10**9)
        assert (third.hashed, third.tree, reads.count, whole_reads) == (0, first.tree, 0, [])


def test_a_same_tick_rewrite_under_a_listing_kept_aside_is_read(tmp_path: Path,
                                                                worktree_at: Any) -> None:
    """The case the names are kept for: the file changes within the timestamp tick of the scan
    that listed it, so the listing (sizes, times, inodes) is the same and only reading the
    file can tell."""
    ws = tmp_path / "ws"
    work = worktree_at(ws)
    root = os.fsencode(ws)
    work.write("other.txt", b"other", mtime_ns=PAST_NS - 10**9)
    path = work.write("f.txt", b"AAAA", mtime_ns=PAST_NS)
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        first, cache = _scan(root, store, StatCache(), PAST_NS + 1_000_000)
        recheck = cache.dirs[b""].recheck
        assert recheck is not None
        work.write("f.txt", b"BBBB", mtime_ns=PAST_NS)
        _freeze_row_stat(cache, b"f.txt", path)
        # As if the rewrite had happened inside the tick: the kept listing is today's.
        cache.dirs[b""].recheck = recheck._replace(listing=scan_dirs([root])[0][0])

        second, cache = _scan(root, store, cache, PAST_NS + 10 * 10**9)
        assert second.hashed == 1 and second.tree != first.tree
        assert _content(store, second.tree, b"f.txt") == b"BBBB"
        assert _content(store, second.tree, b"other.txt") == b"other"
        assert cache.dirs[b""].tree == second.tree


def _count_whole_reads(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The keys of the directories a scan reads entry by entry (not just what changed)."""
    whole_reads: list[bytes] = []
    read_dir = _Scanner._read_dir
    monkeypatch.setattr(_Scanner, "_read_dir", lambda self, node, *rest: (
        whole_reads.append(node.key), read_dir(self, node, *rest)))
    return whole_reads


def test_an_edit_in_a_large_directory_looks_at_the_changed_entries_only(
        tmp_path: Path, worktree_at: Any, count_calls: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = tmp_path / "ws"
    work = worktree_at(ws)
    root = os.fsencode(ws)
    _populate(work, dirs=3, per_dir=50)
    work.age()
    with closing(ObjectStore.init(str(tmp_path / "store"))) as store:
        _, cache = _scan(root, store, StatCache(), time.time_ns())
        time.sleep(2 * RACY_WINDOW_NS / 1e9)  # the files' ctimes settle: listings are trusted
        _, cache = _scan(root, store, cache, time.time_ns())
        assert cache.dirs[b"d1"].listing

        work.write("d1/f03.txt", b"edited")
        work.write("d1/new.txt", b"new")
        os.unlink(work.path("d1/f07.txt"))
        reads = count_calls(store, "put_file")
        whole_reads = _count_whole_reads(monkeypatch)
        # Started 1 ms after the first edit, however slow the machine: both edits are racy.
        start = min(os.stat(work.path(f"d1/{name}")).st_mtime_ns
                    for name in ("f03.txt", "new.txt")) + 1_000_000
        edited, cache = _scan(root, store, cache, start)
        assert whole_reads == []  # the root and d1 differ, each in one entry or three
        assert sorted(reads.calls) == [root + b"/d1/f03.txt", root + b"/d1/new.txt"]
        monkeypatch.undo()
        cold, _ = _scan(root, store, StatCache(), time.time_ns())
        assert edited.tree == cold.tree
        d1 = store.get_tree(edited.tree).find(b"d1")
        assert d1 is not None and _content(store, d1.oid, b"f03.txt") == b"edited"
        # Just written, the two are racy: kept aside, with the listing, to be read next time.
        record = cache.dirs[b"d1"]
        assert record.recheck is not None and record.recheck.names == [b"f03.txt", b"new.txt"]
        assert record.tree == d1.oid


def test_after_a_restore_the_next_checkpoint_reads_nothing_whole(
        cp: Checkpoints, work: Any, count_calls: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    paths = _populate(work, dirs=3, per_dir=30)
    work.age()
    first = cp.create()
    for rel in paths[::7]:
        work.write(rel, b"turn edit")
    work.write("d2/added.txt", b"added")
    os.unlink(work.path(paths[1]))
    cp.create()
    time.sleep(2 * RACY_WINDOW_NS / 1e9)
    cp.restore(first.id)

    reads = count_calls(cp.objects, "put_file")
    builds = count_calls(cp.objects, "store_tree")
    whole_reads = _count_whole_reads(monkeypatch)
    after = cp.create()
    assert after.tree == first.tree
    assert reads.count == after.stats.hashed == 0  # what the restore wrote is known
    assert whole_reads == []  # each directory compared with its listing before the restore
    assert builds.count == 0  # and each holds the tree id the restore gave it


def _cache_files(cp: Checkpoints) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of the stat cache's files (its base and delta) that exist, once the last
    call's bookkeeping has saved them."""
    cp.settle()
    found = {}
    for path in (cp._ws.cache_path, cp._ws.cache_path + ".delta"):
        with suppress(FileNotFoundError):
            st = os.stat(path)
            found[path] = (st.st_ino, st.st_mtime_ns)
    return found


def test_after_a_restore_the_next_walk_finds_every_directory_unchanged(
        tmp_path: Path, worktree_at: Any, count_calls: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The restore knows what each directory it went through lists afterwards (what it wrote,
    with its stat; what it removed; the subdirectories' stats): the next checkpoint's walk
    compares every listing in C and hands no directory to Python, and its cache is not
    written again."""
    ws = tmp_path / "ws"
    work = worktree_at(ws)
    paths = _populate(work, dirs=3, per_dir=20)
    work.write("d1/deeper/g.txt", b"deep")
    work.age()
    with Checkpoints.init(str(ws), str(tmp_path / "store")) as cp:  # outside: the root too
        first = cp.create()
        for rel in paths[::9]:
            work.write(rel, b"turn edit")
        work.write("d2/added.txt", b"added")
        work.write("d1/deeper/g.txt", b"deep edit")
        os.unlink(work.path(paths[1]))
        cp.create()
        time.sleep(2 * RACY_WINDOW_NS / 1e9)
        cp.restore(first.id)
        saved = _cache_files(cp)

        reads = count_calls(cp.objects, "put_file")
        looked_at: list[bytes] = []
        for method in ("_read_dir", "_read_changes"):
            original = getattr(_Scanner, method)
            monkeypatch.setattr(_Scanner, method, lambda self, node, *rest, _f=original: (
                looked_at.append(node.key), _f(self, node, *rest))[1])
        after = cp.create()
        assert after.tree == first.tree and reads.count == after.stats.hashed == 0
        assert looked_at == []
        assert _cache_files(cp) == saved  # nothing new to save

        # An edit right after (a kept size, within the clock tick) is still seen.
        work.write(paths[9], b"turn edit")
        edited = cp.create()
        assert looked_at == [b"d0"] and edited.stats.hashed == 1
        assert cp.read_file(edited.id, paths[9]) == b"turn edit"


def test_a_restore_of_some_paths_gives_no_directory_a_tree_id_it_does_not_hold(
        cp: Checkpoints, work: Any, tmp_path: Path, cold_scan: Any) -> None:
    paths = _populate(work, dirs=2, per_dir=10)
    work.age()
    first = cp.create()
    for rel in paths[::3]:
        work.write(rel, b"turn edit")
    cp.create()
    time.sleep(2 * RACY_WINDOW_NS / 1e9)
    cp.restore(first.id, RestoreOptions(paths=[work.path(paths[0])]))  # d0 keeps its other edits
    cp.settle()  # the cache is saved after the restore returns
    cache = read_stat_cache(cp._ws.cache_path, gc_generation=cp._ws.gc_generation())
    first_d0 = cp.objects.get_tree(first.tree).find(b"d0")
    assert first_d0 is not None and cache.dirs[b"d0"].tree != first_d0.oid
    after = cp.create()
    assert after.tree == cold_scan(cp.root, tmp_path / "cold") != first.tree
    cp.restore(first.id)
    cp.settle()  # the cache is saved after the restore returns
    cache = read_stat_cache(cp._ws.cache_path, gc_generation=cp._ws.gc_generation())
    assert cache.dirs[b"d0"].tree == first_d0.oid and cache.dirs[b""].tree == first.tree
    assert cp.create().tree == first.tree


def test_ids_remembered_by_the_cache_are_rechecked_after_gc(cp: Checkpoints, work: Any) -> None:
    """A diff against the working tree stores blobs no checkpoint references; once gc has
    removed them, the stat cache's ids for those files must not be trusted blindly."""
    work.write("f.txt", b"one", mtime_ns=PAST_NS)
    first = cp.create()
    work.write("f.txt", b"two!", mtime_ns=PAST_NS + 1)
    assert [(c.path, c.change) for c in cp.diff(first.id)] == [(b"f.txt", "M")]
    assert cp.gc(grace_seconds=0).objects_removed > 0
    second = cp.create()
    assert second.stats.hashed == 1
    assert cp.read_file(second.id, "f.txt") == b"two!"
    assert cp.fsck(full=True).ok


# -- the cache never hides a change of the rules ---------------------------------------------


def test_ignore_rule_changes_take_effect_despite_the_stat_cache(
        cp: Checkpoints, work: Any, count_calls: Any, reopen: Callable[..., Checkpoints]) -> None:
    work.write(".gitignore", b"")
    work.write("sub/x.log", b"log")
    work.write("sub/deeper/y.log", b"log2")
    work.write("sub/y.txt", b"text")
    work.age()

    def paths(service: Checkpoints) -> list[bytes]:
        return [f.path for f in service.files(service.create().id)]

    assert paths(cp) == [b".gitignore", b"sub/deeper/y.log", b"sub/x.log", b"sub/y.txt"]
    work.write(".gitignore", b"*.log\n", mtime_ns=PAST_NS + 1)
    assert paths(cp) == [b".gitignore", b"sub/y.txt"]
    work.write("sub/.gitignore", b"!x.log\n", mtime_ns=PAST_NS)
    assert paths(cp) == [b".gitignore", b"sub/.gitignore", b"sub/x.log", b"sub/y.txt"]

    set_config_value(cp.store_dir, "use_gitignore", "false")
    service = reopen()
    reads = count_calls(service.objects, "put_file")
    assert paths(service) == [b".gitignore", b"sub/.gitignore", b"sub/deeper/y.log",
                              b"sub/x.log", b"sub/y.txt"]
    assert reads.count == 1  # only the file that came back into view


# -- structural sharing ----------------------------------------------------------------------

FAN_OUT = (5, 5, 5, 4)  # 5 + 25 + 125 + 500 = 655 directories below the root
FILES_PER_LEAF = 20  # 500 leaf directories x 20 = 10,000 files
DEPTH = len(FAN_OUT) + 1  # trees on the path from the root to a file: root + 4 levels


def _leaf_dirs(root: str) -> list[str]:
    leaves = [root]
    for fan in FAN_OUT:
        next_level = []
        for parent in leaves:
            for i in range(fan):
                child = os.path.join(parent, f"d{i}")
                os.mkdir(child)
                next_level.append(child)
        leaves = next_level
    return leaves


def test_hundred_deep_edits_in_a_10k_file_tree_share_all_unchanged_trees(fast_tmp: Path) -> None:
    root = fast_tmp / "ws"
    root.mkdir()
    leaves = _leaf_dirs(str(root))
    files = []
    for leaf in leaves:
        for _ in range(FILES_PER_LEAF):
            path = os.path.join(leaf, f"f{len(files)}.txt")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, b"%d\n" % len(files))
            os.utime(fd, ns=(PAST_NS, PAST_NS))  # settled: outside the first scan's racy window
            os.close(fd)
            files.append(path)
    assert len(files) == 10_000
    directories, level = 1, 1
    for fan in FAN_OUT:
        level *= fan
        directories += level

    rng = random.Random(20261129)
    with Checkpoints.init(root) as service:
        base = service.create()
        base_trees = walk_reachable(service.objects, [base.tree]).trees
        assert len(base_trees) == directories == 656
        for step in range(100):
            with open(rng.choice(files), "wb") as out:
                out.write(b"edit %d\n" % step)
            record = service.create()
            # One new blob, and a new tree for each directory on its path: nothing else.
            assert record.stats.new_objects == 1 + DEPTH, step
            assert record.stats.hashed <= 2  # this edit, and maybe the previous (racy) one
            # A scan of this tree takes less than the racy window: without a pause, an edit
            # would stay racy (and be re-read) for several checkpoints, not just the next one.
            time.sleep(RACY_WINDOW_NS / 1e9)
        records = service.history()
        reachable = walk_reachable(service.objects, [r.tree for r in records])
        assert len(records) == 101
        assert len(reachable.trees) <= len(base_trees) + 100 * DEPTH  # 1,156, not ~65,600
        stored = sum(1 for _ in service.objects.backend.iter_ids())
        assert stored == len(reachable.trees) + len(reachable.blobs)
        assert len(reachable.blobs) == 10_000 + 100
