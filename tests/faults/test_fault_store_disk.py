"""A full disk under the store (issue 28, items 13 and 17, the object store's side): a failed
write removes what it wrote, gc frees what needs no room before it compacts, a compaction that
runs out of room leaves the store intact, an existing lock is taken without a free block, and
the error names the file.

Real processes on a small tmpfs (root only; skipped where it cannot be mounted).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import random
import subprocess
from collections.abc import Iterator

import fault_helpers as h
import pytest

from ckpt.checkpoints.lock import RootLock, read_holder

pytestmark = pytest.mark.skipif(not h.can_mount(), reason="needs root to mount filesystems")


@pytest.fixture
def small_disk(base: str) -> Iterator[str]:
    mount = os.path.join(base, "small")
    with contextlib.ExitStack() as unmount:
        try:
            unmount.enter_context(h.tmpfs(mount, "8m"))
        except (OSError, subprocess.CalledProcessError) as exc:  # no mount(8), not allowed
            pytest.skip(f"cannot mount a tmpfs: {exc}")
        yield mount


def fill(root: str, rng: random.Random, *, files: int, size: int, prefix: str) -> None:
    for index in range(files):
        h.write_file(os.path.join(root, prefix, f"f{index:04}.bin"), rng.randbytes(size))


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def fill_disk(mount: str, leave: int = 0) -> str:
    """Fill the filesystem until `leave` bytes are free (0: to its last byte); returns the
    ballast file."""
    path = os.path.join(mount, "ballast")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (64 << 10, 4096, 1):
            block = b"\xa5" * size
            try:
                while free_bytes(mount) - size >= leave:
                    os.write(fd, block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return path


def bare_packs(store: str) -> list[str]:
    packs = glob.glob(os.path.join(store, "objects", "packs", "*.pack"))
    return [p for p in packs if not os.path.exists(p[: -len(".pack")] + ".idx")]


def test_a_create_that_fills_the_disk_leaves_none_of_its_pack(base: str, small_disk: str) -> None:
    rng = random.Random(h.seed_for("store-disk-create"))
    root = os.path.join(base, "ws")
    store = os.path.join(small_disk, "store")
    h.write_file(os.path.join(root, "small.txt"), b"small\n")
    assert h.ckpt(root, "init", store=store).code == h.OK
    assert h.ckpt(root, "create", store=store).code == h.OK
    free = free_bytes(small_disk)
    fill(root, rng, files=300, size=40 << 10, prefix="big")  # 12 MiB: more than the disk
    run = h.ckpt(root, "create", store=store)
    assert run.code == h.USER_ERROR and os.strerror(errno.ENOSPC) in run.err, run
    assert store in run.err, f"the error names no file of the store: {run}"
    assert bare_packs(store) == [], "the failed create left its partial pack"
    assert free_bytes(small_disk) >= free - (256 << 10), "the failed create kept its bytes"
    h.tally("store disk: failed create", injected=1, passed=1)


def garbage_beside_live_data(base: str, mount: str, keep_kib: int) -> tuple[str, str, int]:
    """A store on `mount` holding a pack of garbage only (1.6 MiB) and a pack whose live part
    is `keep_kib` KiB beside 1.6 MiB of garbage, all past the grace period, on a disk filled
    up to 256 KiB (room for the catalog's own work, not for rewriting the live part):
    (root, store, bytes of the garbage-only pack)."""
    rng = random.Random(h.seed_for(f"store-disk-gc-{keep_kib}"))
    root = os.path.join(base, "ws")
    store = os.path.join(mount, "store")
    os.mkdir(root)
    assert h.ckpt(root, "init", store=store).code == h.OK
    assert h.ckpt(root, "config", "set", "gc_grace_seconds", "3600", store=store).code == h.OK
    fill(root, rng, files=40, size=40 << 10, prefix="zero")
    assert h.ckpt(root, "create", store=store).code == h.OK
    (garbage,) = glob.glob(os.path.join(store, "objects", "packs", "*.pack"))
    for prefix in ("zero",):
        for name in os.listdir(os.path.join(root, prefix)):
            os.unlink(os.path.join(root, prefix, name))
    fill(root, rng, files=40, size=40 << 10, prefix="one")
    fill(root, rng, files=keep_kib // 40, size=40 << 10, prefix="keep")
    assert h.ckpt(root, "create", store=store).code == h.OK
    for name in os.listdir(os.path.join(root, "one")):
        os.unlink(os.path.join(root, "one", name))
    assert h.ckpt(root, "create", store=store).code == h.OK
    assert h.ckpt(root, "prune", "--keep-latest", "1", store=store).code == h.OK  # all young
    assert h.ckpt(root, "config", "set", "gc_grace_seconds", "0", store=store).code == h.OK
    fill_disk(mount, leave=256 << 10)
    return root, store, os.path.getsize(garbage)


# The live part fits in the room the garbage-only pack frees (1200 KiB), or not (2400 KiB).
@pytest.mark.parametrize("keep_kib", [1200, 2400], ids=["room-made", "no-room"])
def test_gc_on_a_nearly_full_disk_frees_garbage_packs_first_and_leaves_the_store_intact(
        base: str, small_disk: str, keep_kib: int) -> None:
    root, store, garbage = garbage_beside_live_data(base, small_disk, keep_kib=keep_kib)
    kept = h.listed_ids(root, store)
    free = free_bytes(small_disk)

    run = h.ckpt(root, "gc", store=store)
    assert "Traceback" not in run.err, run
    if keep_kib < 1600:  # the live part is rewritten in the room made: all garbage goes
        assert run.code == h.OK, run
        assert free_bytes(small_disk) >= free + garbage + (1 << 20), "gc did not free it all"
    else:
        if run.code != h.OK:  # what gc tells of a compaction left undone is the command's
            assert os.strerror(errno.ENOSPC) in run.err and store in run.err, run
        assert free_bytes(small_disk) >= free + garbage, "gc did not free the garbage pack"
    assert h.listed_ids(root, store) == kept and bare_packs(store) == []
    os.unlink(os.path.join(small_disk, "ballast"))
    h.fsck_clean(root, store)
    h.tally("store disk: gc on a nearly full disk", injected=1, passed=1)


def test_an_existing_lock_is_taken_on_a_full_disk_and_names_its_holder(
        base: str, small_disk: str) -> None:
    path = os.path.join(small_disk, "gc.lock")
    with RootLock(path, timeout=0, shared=True):  # first use: a writer's shared hold
        pass
    fill_disk(small_disk)
    with RootLock(path, timeout=0, purpose="gc"):
        holder = read_holder(path)
        assert holder is not None and holder.pid == os.getpid() and holder.purpose == "gc"
    assert read_holder(path) is None
    h.tally("store disk: lock on a full disk", injected=1, passed=1)
