"""Tracked-paths scope: a session with tracked paths (plus per-checkpoint extras) covers only
those; a tracked path that does not exist is a tombstone, and the record names its missing
ancestors. Paths are given absolute or with `cwd=`: relative paths in the API are relative to
the process's current directory, as on the command line.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt.checkpoints.errors import UnsafePath
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import EntryKind


def _layout(work: Any) -> None:
    work.write("src/a.py", b"a = 1\n")
    work.write("src/b.py", b"b = 2\n")
    work.write("docs/guide.md", b"# guide\n")
    work.write("notes.txt", b"notes\n")
    work.write("exists/x.txt")


def test_missing_tracked_file_is_a_tombstone_with_its_missing_parents_recorded(
        cp: Checkpoints, ws: Path, work: Any, manifest: Callable[..., Any],
        reopen: Callable[..., Checkpoints]) -> None:
    _layout(work)
    tracked = cp.track("src/a.py", "exists/new/deeper/file.txt", "later.txt", cwd=str(ws))
    assert tracked == (b"exists/new/deeper/file.txt", b"later.txt", b"src/a.py")
    record = cp.create()

    assert (record.scope, record.paths) == ("paths", tracked)
    assert manifest(cp, record.id) == {
        b"exists": ("dir", None),
        b"exists/new": ("dir", None),
        b"exists/new/deeper": ("dir", None),
        b"exists/new/deeper/file.txt": ("tombstone", None),
        b"later.txt": ("tombstone", None),
        b"src": ("dir", None),
        b"src/a.py": ("file", b"a = 1\n"),
    }  # untracked: src/b.py, exists/x.txt, docs/, notes.txt
    # `exists/` was there; the two directories below it exist only for the tombstone.
    assert record.absent_parents == (b"exists/new", b"exists/new/deeper")
    assert reopen().get(record.id).absent_parents == record.absent_parents
    assert [f.path for f in cp.files(record.id)] == [b"src/a.py"]  # tombstones are not files
    assert record.stats.files == 1


def test_tracked_file_created_later_replaces_its_tombstone(
        cp: Checkpoints, ws: Path, work: Any, manifest: Callable[..., Any]) -> None:
    cp.track("new/file.txt", cwd=str(ws))
    before = cp.create()
    assert before.absent_parents == (b"new",)
    work.write("new/file.txt", b"hello")
    after = cp.create()
    assert manifest(cp, after.id) == {b"new": ("dir", None), b"new/file.txt": ("file", b"hello")}
    assert after.absent_parents == ()
    assert [(c.path, c.change) for c in cp.diff(before.id, after.id)] == [(b"new/file.txt", "A")]


def test_untracked_files_are_not_captured_and_directories_are_whole(
        cp: Checkpoints, ws: Path, work: Any) -> None:
    _layout(work)
    work.write("docs/.gitignore", b"*.tmp\n")
    work.write("docs/draft.tmp")
    work.write("docs/.git/HEAD", b"ref: refs/heads/main\n")
    cp.track(str(ws / "docs"), str(ws / "notes.txt"))
    record = cp.create()
    assert [f.path for f in cp.files(record.id)] == [
        b"docs/.gitignore", b"docs/guide.md", b"notes.txt"]


def test_extra_paths_join_the_tracked_set_for_one_checkpoint(
        cp: Checkpoints, ws: Path, work: Any) -> None:
    _layout(work)
    cp.track("notes.txt", cwd=str(ws))
    with_extra = cp.create(paths=[str(ws / "src/b.py"), str(ws / "missing.txt")])
    assert with_extra.paths == (b"missing.txt", b"notes.txt", b"src/b.py")
    assert [f.path for f in cp.files(with_extra.id)] == [b"notes.txt", b"src/b.py"]
    assert cp.tracked() == (b"notes.txt",)  # extras are not remembered
    plain = cp.create()
    assert [f.path for f in cp.files(plain.id)] == [b"notes.txt"]


def test_extra_paths_alone_make_a_paths_scope_checkpoint(cp: Checkpoints, ws: Path,
                                                         work: Any) -> None:
    _layout(work)
    record = cp.create(paths=[str(ws / "docs")])
    assert (record.scope, record.paths) == ("paths", (b"docs",))
    assert [f.path for f in cp.files(record.id)] == [b"docs/guide.md"]
    assert cp.create().scope == "tree"


def test_untracking_everything_returns_to_the_whole_tree(cp: Checkpoints, ws: Path,
                                                         work: Any) -> None:
    _layout(work)
    cp.track("src", "notes.txt", cwd=str(ws))
    assert cp.untrack("src", cwd=str(ws)) == (b"notes.txt",)
    assert [f.path for f in cp.files(cp.create().id)] == [b"notes.txt"]
    assert cp.untrack("notes.txt", cwd=str(ws)) == ()
    record = cp.create()
    assert record.scope == "tree"
    assert len(cp.files(record.id)) == 5


def test_tracked_sets_belong_to_their_session(cp: Checkpoints, ws: Path, work: Any,
                                              reopen: Callable[..., Checkpoints]) -> None:
    _layout(work)
    other = reopen("other")
    other.track("notes.txt", cwd=str(ws))
    assert cp.tracked() == ()
    assert cp.create().scope == "tree"
    assert [f.path for f in other.files(other.create().id)] == [b"notes.txt"]
    assert reopen("other").tracked() == (b"notes.txt",)


def test_tracked_symlinks_are_links_and_paths_behind_them_are_not_followed(
        cp: Checkpoints, ws: Path, tmp_path: Path, work: Any, manifest: Callable[..., Any]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file.txt").write_bytes(b"outside")
    work.symlink("link-dir", os.fsencode(outside))
    work.symlink("link-file", b"link-dir/file.txt")
    cp.track("link-file", "link-dir/file.txt", cwd=str(ws))
    record = cp.create()
    found = manifest(cp, record.id)
    assert found[b"link-file"] == ("link", b"link-dir/file.txt")
    # The path runs through a symlink: it is not read through it, it counts as absent.
    assert found[b"link-dir/file.txt"] == ("tombstone", None)
    assert record.absent_parents == (b"link-dir",)
    assert [f.path for f in cp.files(record.id)] == [b"link-file"]


def test_unchanged_tracked_files_are_not_read_again(cp: Checkpoints, ws: Path, work: Any,
                                                    count_calls: Any) -> None:
    _layout(work)
    work.age()
    cp.track("src/a.py", "notes.txt", "docs", "missing/x", cwd=str(ws))
    reads = count_calls(cp.objects, "put_file")
    first = cp.create()
    assert reads.count == first.stats.hashed == 3
    reads.reset()
    second = cp.create()
    assert reads.count == second.stats.hashed == 0
    assert second.tree == first.tree
    work.write("src/a.py", b"a = 11\n")
    third = cp.create()
    assert third.stats.hashed == 1
    assert cp.read_file(third.id, "src/a.py") == b"a = 11\n"


def test_tracked_scans_leave_the_whole_tree_cache_correct(cp: Checkpoints, ws: Path, work: Any,
                                                          count_calls: Any) -> None:
    """A tracked checkpoint that sees a file change must not leave a stale directory tree
    behind for the next whole-tree checkpoint (nor a needless re-read)."""
    _layout(work)
    work.age()
    whole = cp.create()
    cp.track("src/a.py", cwd=str(ws))
    work.write("src/a.py", b"a = 3\n", mtime_ns=1_600_000_001 * 10**9)
    cp.create()
    cp.untrack("src/a.py", cwd=str(ws))
    reads = count_calls(cp.objects, "put_file")
    again = cp.create()
    assert reads.count == 0
    assert cp.read_file(again.id, "src/a.py") == b"a = 3\n"
    assert [(c.path, c.change) for c in cp.diff(whole.id, again.id)] == [(b"src/a.py", "M")]


def test_mixing_tracked_and_whole_tree_checkpoints_matches_a_cold_scan(
        cp: Checkpoints, ws: Path, tmp_path: Path, work: Any, count_calls: Any,
        fs_snapshot: Callable[..., Any], manifest: Callable[..., Any],
        cold_scan: Callable[..., Any]) -> None:
    _layout(work)
    work.age()
    cp.create()
    work.write("src/new.py", b"new = 1\n", mtime_ns=1_600_000_002 * 10**9)
    work.write("deeper/still/new.txt", b"deep", mtime_ns=1_600_000_002 * 10**9)
    cp.track("src/new.py", "deeper/still/new.txt", "notes.txt", cwd=str(ws))
    tracked = cp.create()
    assert [f.path for f in cp.files(tracked.id)] == [
        b"deeper/still/new.txt", b"notes.txt", b"src/new.py"]
    cp.untrack("src/new.py", "deeper/still/new.txt", "notes.txt", cwd=str(ws))
    reads = count_calls(cp.objects, "put_file")
    whole = cp.create()
    assert reads.count == 0  # the tracked checkpoint already read both new files
    assert manifest(cp, whole.id) == fs_snapshot(ws)
    assert cold_scan(ws, tmp_path) == whole.tree


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", ".ckpt/catalog.db", ".ckpt",
                                  ".git", ".git/config", "vendor/.git/HEAD"])
def test_tracking_a_path_outside_the_root_the_store_or_git_is_refused(
        cp: Checkpoints, ws: Path, path: str) -> None:
    with pytest.raises(UnsafePath):
        cp.track(path, cwd=str(ws))
    with pytest.raises(UnsafePath):
        cp.create(paths=[str(ws / path) if not path.startswith("/") else path])
    assert cp.tracked() == ()


def test_tombstone_entries_carry_nothing(cp: Checkpoints, ws: Path) -> None:
    cp.track("ghost", cwd=str(ws))
    tree = cp.objects.get_tree(cp.create().tree)
    ghost = tree.find(b"ghost")
    assert ghost is not None
    assert (ghost.kind, ghost.oid, ghost.target, ghost.size) == (EntryKind.TOMBSTONE, None, None, 0)


# -- property: a tracked checkpoint is the tracked part of the filesystem --------------------

_NAMES = [b"a", b"b", b"\xff", b"n\nl"]
_name = st.sampled_from(_NAMES)
_leaf = st.one_of(
    st.tuples(st.just("file"), st.sampled_from([b"", b"1", b"22"]), st.booleans()),
    st.tuples(st.just("link"), st.sampled_from([b"a", b"..", b"b/a"])),
    st.just({}),
)
_spec = st.dictionaries(_name, st.recursive(
    _leaf, lambda inner: st.dictionaries(_name, inner, max_size=3), max_leaves=8), max_size=3)
_track = st.lists(st.lists(_name, min_size=1, max_size=3).map(b"/".join), min_size=1, max_size=3)


def _materialize(base: bytes, spec: dict[bytes, Any]) -> None:
    for name, node in spec.items():
        path = os.path.join(base, name)
        if isinstance(node, dict):
            os.mkdir(path)
            _materialize(path, node)
        elif node[0] == "link":
            os.symlink(node[1], path)
        else:
            with open(path, "wb") as out:
                out.write(node[1])
            os.chmod(path, 0o755 if node[2] else 0o644)


def _expected(root: bytes, tracked: list[bytes], everything: dict[bytes, Any]) -> dict[bytes, Any]:
    """The model: each outermost tracked path as the filesystem has it, or a tombstone when it
    (or a directory on the way, symlinks not followed) is missing; ancestors as directories."""
    out: dict[bytes, Any] = {}
    outermost = [p for p in sorted(set(tracked))
                 if not any(p.startswith(q + b"/") for q in tracked if q != p)]
    for path in outermost:
        parts = path.split(b"/")
        for i in range(1, len(parts)):
            out[b"/".join(parts[:i])] = ("dir", None)
        on_the_way = [b"/".join(parts[:i]) for i in range(1, len(parts))]
        if all(everything.get(a) == ("dir", None) for a in on_the_way) and path in everything:
            out[path] = everything[path]
            out.update({p: e for p, e in everything.items() if p.startswith(path + b"/")})
        else:
            out[path] = ("tombstone", None)
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=_spec, second=_spec, tracked=_track)
def test_tracked_checkpoint_of_a_random_tree_is_its_tracked_part(
        first: dict[bytes, Any], second: dict[bytes, Any], tracked: list[bytes],
        manifest: Callable[..., Any], fs_snapshot: Callable[..., Any],
        cold_scan: Callable[..., Any]) -> None:
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    base = tempfile.mkdtemp(prefix="ckpt-tracked-prop-", dir=shm)
    try:
        root = os.fsencode(base) + b"/ws"
        os.mkdir(root)
        _materialize(root, first)
        with Checkpoints.init(os.fsdecode(root)) as service:
            service.create()  # a whole-tree checkpoint first: its stat cache is then shared
            service.track(*(root + b"/" + p for p in tracked))
            for spec in (None, second):
                if spec is not None:
                    for name in os.listdir(root):
                        if name != b".ckpt":
                            path = os.path.join(root, name)
                            if os.path.isdir(path) and not os.path.islink(path):
                                shutil.rmtree(path)
                            else:
                                os.unlink(path)
                    _materialize(root, spec)
                record = service.create()
                assert manifest(service, record.id) == _expected(root, tracked, fs_snapshot(root))
            service.untrack(*(root + b"/" + p for p in tracked))
            whole = service.create()
            assert manifest(service, whole.id) == fs_snapshot(root)
        assert cold_scan(os.fsdecode(root), base) == whole.tree
    finally:
        shutil.rmtree(base, ignore_errors=True)
