"""Symlinks planted in the store by a hostile workspace (issue 28, item 8): ckpt never opens a
store file through a symlink, and a store whose own directories are symlinks is refused.

Each case plants a symlink where ckpt keeps a lock file or a directory, pointing at a file
outside the store that stands for `~/.bashrc`, runs a real `ckpt` process and checks that the
file outside is untouched and that the command fails with one clear line (exit 5, "unsafe
store", naming the symlink).
"""

from __future__ import annotations

import glob
import os
import shutil

import fault_helpers as h
import pytest

PRECIOUS = b"export PATH=/usr/bin  # the user's own file\n"


def workspace(base: str) -> tuple[str, str, str]:
    """(root, its store, a file outside both) with one checkpoint made."""
    root = os.path.join(base, "ws")
    os.mkdir(root)
    h.write_file(os.path.join(root, "a.txt"), b"a\n")
    assert h.ckpt(root, "init").code == h.OK
    assert h.ckpt(root, "create").code == h.OK
    outside = os.path.join(base, "bashrc")
    h.write_file(outside, PRECIOUS)
    return root, os.path.join(root, ".ckpt"), outside


def plant(link: str, target: str) -> None:
    if os.path.isdir(link) and not os.path.islink(link):
        shutil.rmtree(link)
    elif os.path.lexists(link):
        os.unlink(link)
    os.symlink(target, link)


def assert_refused(run: h.Run, link: str) -> None:
    assert run.code == h.CORRUPT, run
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.err, run
    assert "unsafe store" in lines[0] and link in lines[0], run


def untouched(outside: str) -> None:
    with open(outside, "rb") as stream:
        assert stream.read() == PRECIOUS, "ckpt wrote through a planted symlink"


def root_dir(store: str) -> str:
    (found,) = glob.glob(os.path.join(store, "roots", "*"))
    return found


@pytest.mark.parametrize("command", ["create", "gc"])
def test_a_symlink_planted_at_a_lock_file_is_refused_and_its_target_untouched(
        base: str, command: str) -> None:
    root, store, outside = workspace(base)
    link = (os.path.join(root_dir(store), "lock") if command == "create"
            else os.path.join(store, "gc.lock"))
    plant(link, outside)
    run = h.ckpt(root, command)
    assert_refused(run, link)
    untouched(outside)
    h.tally("hostile store: symlinked lock", injected=1, passed=1)


def test_a_symlinked_root_directory_is_refused_and_the_lock_outside_untouched(
        base: str) -> None:
    root, store, outside = workspace(base)
    elsewhere = os.path.join(base, "elsewhere")
    os.mkdir(elsewhere)
    shutil.copy(outside, os.path.join(elsewhere, "lock"))
    link = root_dir(store)
    plant(link, elsewhere)
    run = h.ckpt(root, "create")
    assert_refused(run, link)
    untouched(os.path.join(elsewhere, "lock"))
    h.tally("hostile store: symlinked directory", injected=1, passed=1)


@pytest.mark.parametrize("name", ["objects", "objects/packs"])
def test_a_store_whose_own_directory_is_a_symlink_is_refused(base: str, name: str) -> None:
    root, store, _ = workspace(base)
    moved = os.path.join(base, "moved")
    os.rename(os.path.join(store, name), moved)
    link = os.path.join(store, name)
    os.symlink(moved, link)
    for command in ("create", "list"):
        assert_refused(h.ckpt(root, command), link)
    h.tally("hostile store: symlinked directory", injected=1, passed=1)


def test_a_symlink_planted_at_a_pack_is_never_read(base: str) -> None:
    root, store, outside = workspace(base)
    (pack,) = glob.glob(os.path.join(store, "objects", "packs", "*.pack"))
    plant(pack, outside)
    run = h.ckpt(root, "fsck", "--full")
    assert run.code == h.CORRUPT and "Traceback" not in run.err, run
    assert pack in run.err + run.out, run
    untouched(outside)
    h.tally("hostile store: symlinked pack", injected=1, passed=1)
