"""prune and gc on a full disk, with real processes on a small tmpfs holding the store.

Promises: a prune either does what it reports or reports what it did (the records it dropped
are named, and a gc that fails after them is exit 3 "pruned N checkpoint(s), but gc failed:
...", never a plain failure after dropping); on a disk the store itself filled, prune and gc
run (the store's space reserve is given back first, so the catalog can be opened and
written) and free space, or say exactly why not (the errno text and the store's path).
Needs root (mount); skipped otherwise. Each tmpfs is unmounted by its context manager.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest

pytestmark = pytest.mark.skipif(not h.can_mount(), reason="needs root to mount filesystems")
ENOSPC_TEXT = os.strerror(28)


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def ballast(path: str, leave: int) -> None:
    """Fill the file system holding `path` up to `leave` free bytes."""
    with open(path, "wb") as out:
        remaining = max(free_bytes(os.path.dirname(path)) - leave, 0)
        block = b"\0" * (1 << 20)
        while remaining > 0:
            try:
                remaining -= out.write(block[: min(remaining, len(block))])
                out.flush()
            except OSError:
                break


def checkpoint(root: str, store: str, rng: random.Random, index: int, *,
               replace: bool) -> h.Run:
    """A checkpoint adding 1.2 MiB of incompressible data (`replace`: instead of the last)."""
    if replace and index:
        os.unlink(os.path.join(root, f"data{index - 1}.bin"))
    h.write_file(os.path.join(root, f"data{index}.bin"), rng.randbytes(1200 << 10))
    return h.ckpt(root, "create", "--reason", "auto", store=store)


def assert_pruned_or_says_why(run: h.Run, dropped: int, store: str) -> None:
    """Exit 0 having pruned and collected, or exit 3 naming what it pruned and why the gc
    after it failed or stopped compacting; never exit 1 after dropping checkpoints."""
    assert run.code in (h.OK, h.NOTHING), run
    assert run.out.startswith(f"removed {dropped} checkpoint(s)"), run
    lines = run.err.strip().splitlines()
    assert len(lines) <= 1 and "Traceback" not in run.err, run
    if run.code == h.NOTHING:
        assert lines[0].startswith(f"ckpt: error: pruned {dropped} checkpoint(s), but gc "
                                   f"failed: {ENOSPC_TEXT}: {store}"), run
        assert "'ckpt gc' frees their objects once it can run" in lines[0], run
    elif lines:  # collected, but compacting was left undone for lack of room
        assert lines[0].startswith("ckpt: warning: gc stopped compacting: "), run
        assert ENOSPC_TEXT in lines[0] and store in lines[0], run


@contextmanager
def store_on_tmpfs(base: str, size: str) -> Iterator[tuple[str, str, str]]:
    """(root, store, mount): a workspace beside a store on a fresh tmpfs of `size`, grace 0."""
    root = os.path.join(base, "ws")
    os.mkdir(root)
    mount = os.path.join(base, "small")
    with h.tmpfs(mount, size):
        store = os.path.join(mount, "store")
        assert h.ckpt(root, "init", store=store).code == h.OK
        h.set_config(root, "gc_grace_seconds", "0", store=store)
        yield root, store, mount


def test_prune_on_a_nearly_full_disk_reports_what_it_pruned(base: str) -> None:
    rng = random.Random(h.seed_for("prune-nearly-full"))
    with store_on_tmpfs(base, "8m") as (root, store, mount):
        ids = []
        for index in range(4):  # files accumulate: a compaction must rewrite 4.8 MiB live
            made = checkpoint(root, store, rng, index, replace=False)
            assert made.code == h.OK, made
            ids.append(made.out.strip())
        ballast(os.path.join(mount, "ballast"), leave=96 << 10)
        run = h.ckpt(root, "prune", "--reason", "auto", "--keep-latest", "1", store=store)
        assert_pruned_or_says_why(run, 3, store)
        assert h.listed_ids(root, store) == {ids[-1]}, "the output does not say what it did"
        h.remount(mount, "64m")  # room for a compaction of everything live
        assert h.ckpt(root, "gc", store=store).code == h.OK
        h.fsck_clean(root, store)
        with h.Checkpoints.open(root, store) as cp:
            assert h.checkpoint_state(cp, ids[-1]) == h.tree_state(root)
        h.tally("disk full prune", injected=1, passed=1, gc_failed=int(run.code == h.NOTHING))


def test_prune_and_gc_run_on_a_disk_the_store_filled(base: str) -> None:
    rng = random.Random(h.seed_for("prune-store-filled"))
    with store_on_tmpfs(base, "6m") as (root, store, mount):
        ids: list[str] = []
        for index in range(12):  # each checkpoint's data is its own: the old ones free it all
            made = checkpoint(root, store, rng, index, replace=True)
            if made.code != h.OK:
                assert ENOSPC_TEXT in made.err, made
                break
            ids.append(made.out.strip())
        else:
            pytest.fail("the disk never filled")
        assert len(ids) >= 2
        full = free_bytes(mount)
        dry = h.ckpt(root, "prune", "--reason", "auto", "--keep-latest", "1", "--dry-run",
                     store=store)
        assert dry.code == h.OK, dry  # reading needs no room
        run = h.ckpt(root, "prune", "--reason", "auto", "--keep-latest", "1", store=store)
        assert_pruned_or_says_why(run, len(ids) - 1, store)
        assert h.listed_ids(root, store) == {ids[-1]}
        gc = h.ckpt(root, "gc", store=store)
        # Packs that hold only garbage go first, without needing room: space comes back even
        # when the compaction after it runs out (a warning says so).
        assert gc.code == h.OK and gc.out.startswith("removed "), gc
        assert free_bytes(mount) > full + (1 << 20), f"gc freed nothing: {gc}"
        if gc.err:
            assert gc.err.startswith("ckpt: warning: gc stopped compacting: "), gc
            assert ENOSPC_TEXT in gc.err and store in gc.err, gc
        h.tally("disk full store-filled", injected=1, passed=1, gc_failed=int(gc.code != h.OK))
        h.remount(mount, "64m")  # with room again, everything works and nothing was lost
        assert h.ckpt(root, "gc", store=store).code == h.OK
        h.fsck_clean(root, store)
        again = h.ckpt(root, "create", store=store)
        assert again.code == h.OK, again
        with h.Checkpoints.open(root, store) as cp:
            assert h.checkpoint_state(cp, again.out.strip()) == h.tree_state(root)
