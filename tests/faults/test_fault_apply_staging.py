"""Staging left in the workspace (issue 28.14): with the store on another file system than
the root, a restore stages in `<root>/.ckpt-staging-<hex>/`; a kill late in the restore (after
its journal is closed, before its bookkeeping freed the staging) leaves that directory. The
next write call on the root removes it, whatever file system the store is on; a symlink
planted under such a name is never followed.

Real processes and real file systems: the workspace on a tmpfs, the store on the disk (root
only: mount; skipped elsewhere).
"""

from __future__ import annotations

import os
import random
import subprocess
import time
from collections.abc import Iterator

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest

pytestmark = pytest.mark.skipif(not h.can_mount(), reason="needs root to mount a tmpfs")


@pytest.fixture
def split(base: str) -> Iterator[tuple[str, str]]:
    """(root on a tmpfs, store on the disk)."""
    mount = os.path.join(base, "mnt")
    os.makedirs(mount)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0755", "tmpfs", mount],
                   check=True, capture_output=True)
    try:
        root = os.path.join(mount, "ws")
        os.mkdir(root)
        store = os.path.join(base, "store")
        assert os.stat(root).st_dev != os.stat(base).st_dev
        assert h.ckpt(root, "init", store=store).code == h.OK
        yield root, store
    finally:
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)


def leftovers(root: str) -> list[str]:
    return sorted(n for n in os.listdir(root) if n.startswith(".ckpt-staging-"))


def test_a_staging_directory_left_in_the_workspace_is_removed_by_the_next_call(
        split: tuple[str, str], base: str) -> None:
    root, store = split
    h.write_file(os.path.join(root, "a.txt"), b"a\n")
    # What a kill after the journal was closed leaves: staged and replaced files, no journal.
    left = os.path.join(root, ".ckpt-staging-0123456789ab")
    os.mkdir(left)
    for name in ("0", "1", "removed-1"):
        h.write_file(os.path.join(left, name), b"old content\n")
    # A symlink under such a name (the workspace is hostile) is not followed.
    outside = os.path.join(base, "outside")
    os.mkdir(outside)
    h.write_file(os.path.join(outside, "keep.txt"), b"keep\n")
    os.symlink(outside, os.path.join(root, ".ckpt-staging-aaaaaaaaaaaa"))
    # A name that is not one a restore makes is the user's.
    os.mkdir(os.path.join(root, ".ckpt-staging-mine"))
    created = h.ckpt(root, "create", "--json", store=store)
    assert created.code == h.OK, created
    assert leftovers(root) == [".ckpt-staging-aaaaaaaaaaaa", ".ckpt-staging-mine"]
    assert os.listdir(outside) == ["keep.txt"]
    h.tally("apply staging in the workspace", injected=1, removed=1)


def test_kills_late_in_a_restore_leave_no_staging_in_the_workspace(
        split: tuple[str, str]) -> None:
    root, store = split
    rng = random.Random(h.seed_for("apply staging kills"))
    h.build_tree(root, rng, files=300, dirs=12)
    first = h.ckpt(root, "create", store=store).out.strip()
    h.mutate(root, rng, changes=150)
    second = h.ckpt(root, "create", store=store).out.strip()
    started = time.monotonic()
    assert h.ckpt(root, "restore", first, store=store).code == h.OK
    duration = time.monotonic() - started
    target = second
    kills = h.scale(6, 40)
    killed = 0
    for _ in range(kills):
        # Late: the second half of the run, where the journal closes and staging is freed.
        run = h.kill_after(root, ["restore", target], rng.uniform(0.5, 1.0) * duration,
                           store=store)
        killed += run.killed
        after = h.ckpt(root, "recover", store=store)
        assert after.code == h.OK, after
        assert leftovers(root) == [], f"left after a kill at {run.elapsed:.3f}s"
        target = first if target == second else second
    h.tally("kill late in a restore, store on another file system", injected=killed,
            passed=kills)
