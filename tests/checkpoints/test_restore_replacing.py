"""How a restore replaces and removes files: swapped into place (or renamed over where the
system cannot swap), what stood there freed with the staging directory, never a directory.

Every test runs on real temp directories. The three ways a restore can replace a file are each
exercised end to end: the native exchange with the staging directory freed on a thread, the
pure-Python fallback (no extension built), and a file system that refuses RENAME_EXCHANGE.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import restore_helpers as h  # tests/ dirs are on pytest's `pythonpath`

from ckpt.checkpoints.restore import apply as restore
from ckpt.checkpoints.service import Checkpoints
from ckpt.checkpoints.snapshot.statcache import RACY_WINDOW_NS

NATIVE = restore._native_exchange is not None
native_only = pytest.mark.skipif(not NATIVE, reason="the native _fsops extension is not built")


def _refuse_exchange(src: bytes, dst_dir_fd: int, dst: bytes) -> None:
    raise OSError(errno.EINVAL, "Invalid argument", dst)  # what renameat2 says on such a file system


@pytest.fixture(params=["native", "python", "no-exchange"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "native" and not NATIVE:
        pytest.skip("the native _fsops extension is not built")
    if request.param == "python":
        monkeypatch.setattr(restore, "_native_exchange", None)
        monkeypatch.setattr(restore, "_native_empty_dir", None)
    if request.param == "no-exchange" and NATIVE:
        monkeypatch.setattr(restore, "_native_exchange", _refuse_exchange)
    return str(request.param)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[str, str]:
    root, outside = (os.path.realpath(tmp_path / name) for name in ("ws", "outside"))
    os.mkdir(root)
    os.mkdir(outside)
    return root, outside


@pytest.fixture
def service(dirs: tuple[str, str]) -> Iterator[Checkpoints]:
    with Checkpoints.init(dirs[0]) as cp:
        yield cp


def test_replaced_and_removed_files_keep_their_other_links_and_no_staging_is_left(
        dirs: tuple[str, str], service: Checkpoints, mode: str) -> None:
    root, outside = dirs
    for index in range(12):
        h.write_file(root, f"pkg{index % 3}/mod{index}.py", b"original %d\n" % index * 50)
    h.write_file(root, "empty.txt", b"")
    time.sleep(2 * RACY_WINDOW_NS / 1e9)  # settled: only what the restore writes may be racy
    first = service.create()
    model = h.tree_state(root)
    # A turn: edits in place (same inodes), a new file, a deletion; two of those files also
    # have a link outside the workspace, which the restore must neither write nor keep alive.
    for index in range(0, 12, 2):
        with open(os.path.join(root, f"pkg{index % 3}", f"mod{index}.py"), "r+b") as f:
            f.write(b"edited by the turn %d\n" % index)
    h.write_file(root, "pkg0/new.py", b"added by the turn\n" * 100)
    h.write_file(root, "empty.txt", b"now with content\n")
    os.unlink(os.path.join(root, "pkg1", "mod1.py"))
    replaced = os.path.join(outside, "replaced-link")
    removed = os.path.join(outside, "removed-link")
    os.link(os.path.join(root, "pkg0", "mod0.py"), replaced)
    os.link(os.path.join(root, "pkg0", "new.py"), removed)
    replaced_inode = os.stat(replaced).st_ino

    report = service.restore(first.id)
    service.settle()  # what the restore replaced is freed after it returns

    assert h.tree_state(root) == model
    assert (report.written, report.deleted) == (8, 1)
    assert h.staging_left(service.store_dir, root) == []
    with open(replaced, "rb") as f:
        assert f.read().startswith(b"edited by the turn 0\n")
    with open(removed, "rb") as f:
        assert f.read() == b"added by the turn\n" * 100
    assert os.stat(replaced).st_nlink == 1 and os.stat(removed).st_nlink == 1
    assert os.stat(os.path.join(root, "pkg0", "mod0.py")).st_ino != replaced_inode
    # The next snapshot trusts what the restore wrote: nothing is read again.
    assert service.create().stats.hashed == 0


def test_a_restore_that_only_removes_frees_what_it_removed(
        dirs: tuple[str, str], service: Checkpoints, mode: str) -> None:
    root, outside = dirs
    h.write_file(root, "keep.txt", b"kept\n")
    first = service.create()
    for index in range(5):
        h.write_file(root, f"gen/out{index}.bin", os.urandom(3000))
    os.link(os.path.join(root, "gen", "out0.bin"), os.path.join(outside, "link"))

    report = service.restore(first.id)
    service.settle()

    assert (report.written, report.deleted, report.dirs_removed) == (0, 5, 1)
    assert sorted(h.tree_state(root)) == ["keep.txt"]
    assert os.stat(os.path.join(outside, "link")).st_nlink == 1
    assert h.staging_left(service.store_dir, root) == []


@native_only
def test_a_directory_that_took_a_files_place_is_put_back_not_swapped_out(tmp_path: Path) -> None:
    """What `_put_in_place` does when a directory appeared after the apply's last look (a race
    with another writer): the exchange is undone and the directory keeps its place and content."""
    workspace, staging = tmp_path / "ws", tmp_path / "staging"
    (workspace / "name" / "inner").mkdir(parents=True)
    (workspace / "name" / "inner" / "data.txt").write_bytes(b"someone else's\n")
    staging.mkdir()
    staged = staging / "0"
    staged.write_bytes(b"restored\n")
    parent_fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    try:
        placed = restore._put_in_place(os.fsencode(staged), parent_fd, b"name", replacing=True)
    finally:
        os.close(parent_fd)
    assert placed is False
    assert (workspace / "name" / "inner" / "data.txt").read_bytes() == b"someone else's\n"
    assert staged.read_bytes() == b"restored\n"


@pytest.mark.parametrize("soon", [False, True], ids=["now", "on-a-thread"])
def test_removing_staging_never_deletes_a_directory_found_in_it(
        tmp_path: Path, soon: bool) -> None:
    staging = tmp_path / "staging-0123456789ab"
    staging.mkdir()
    for index in range(20):
        (staging / str(index)).write_bytes(b"x" * 5000)
    os.symlink("0", staging / "link")
    (staging / "swapped-in" / "deep").mkdir(parents=True)
    (staging / "swapped-in" / "deep" / "precious.txt").write_bytes(b"keep me\n")

    if soon:
        restore.remove_staging_soon(os.fsencode(staging))()
    else:
        restore.remove_staging(os.fsencode(staging))

    assert sorted(os.listdir(staging)) == ["swapped-in"]
    assert (staging / "swapped-in" / "deep" / "precious.txt").read_bytes() == b"keep me\n"


@pytest.mark.parametrize("soon", [False, True], ids=["now", "on-a-thread"])
def test_removing_a_flat_staging_directory_removes_it(tmp_path: Path, soon: bool) -> None:
    staging = tmp_path / "staging-0123456789ab"
    staging.mkdir()
    for index in range(50):
        (staging / str(index)).write_bytes(os.urandom(100 * index))
    if soon:
        restore.remove_staging_soon(os.fsencode(staging))()
    else:
        restore.remove_staging(os.fsencode(staging))
    assert not staging.exists()
    restore.remove_staging(os.fsencode(staging))  # already gone: nothing to do, no error
