"""Disk errors injected by real filesystems: ENOSPC from a small tmpfs; EIO from a loop
device over a memfd that is sealed against writes at a seeded moment (ext4 and ext2 on it,
mounted `sync` so the syscalls themselves fail; see `SealableDisk` in fault_helpers.py).

Promises, for create and restore: a clear error (exit 1, one line naming the path and the
errno text); the store consistent (`ckpt fsck --full` exits 0, nothing new listed by a failed
create); the workspace untouched (inodes and mtimes) — never a half-written file at its final
name; and once space is back, the same command succeeds and the tree is exact.
Needs root (mount, losetup); skipped otherwise.
"""

from __future__ import annotations

import errno
import glob
import os
import random
import shutil
import subprocess
import time
from collections.abc import Callable

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest

pytestmark = pytest.mark.skipif(not h.can_mount(), reason="needs root to mount filesystems")
# A failing device surfaces as EIO; then ext4 aborts its journal and refuses writes (EROFS),
# or reports its own metadata unwritable (EUCLEAN, "Structure needs cleaning").
DEVICE_ERRORS = (errno.EIO, errno.EROFS, errno.EUCLEAN)


def fill(root: str, rng: random.Random, *, files: int, size: int) -> None:
    for index in range(files):
        h.write_file(os.path.join(root, f"d{index % 8}", f"f{index:04}.bin"), rng.randbytes(size))


def ballast(path: str, leave: int) -> None:
    """Fill the filesystem holding `path` up to `leave` free bytes."""
    st = os.statvfs(os.path.dirname(path))
    free = st.f_bavail * st.f_frsize
    with open(path, "wb") as out:
        remaining = max(free - leave, 0)
        block = b"\0" * (1 << 20)
        while remaining > 0:
            try:
                remaining -= out.write(block[: min(remaining, len(block))])
            except OSError:
                break


def assert_clear_error(run: h.Run, code: int | tuple[int, ...], where: str) -> str:
    """Exit 1, one line naming the path and the errno text; returns the errno's name."""
    assert run.code == h.USER_ERROR, run
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.err, run
    codes = code if isinstance(code, tuple) else (code,)
    seen = [errno.errorcode[c] for c in codes if os.strerror(c) in lines[0]]
    if not seen and "catalog: " in lines[0]:
        seen = ["sqlite"]  # SQLite words its own IO errors ("disk I/O error", "unable to open")
    assert seen, f"errno text missing: {run}"
    assert where in lines[0], f"the path is not named: {run}"
    return seen[0]


def no_staging_left(store: str, root: str) -> None:
    assert not h.journals(store), "a failed restore left its journal"
    roots = os.path.join(store, "roots")
    leftovers = [n for k in os.listdir(roots) for n in os.listdir(os.path.join(roots, k))
                 if n.startswith("staging-")]
    assert not leftovers and not [n for n in os.listdir(root) if n.startswith(".ckpt-")]


# -- create ----------------------------------------------------------------------------------


def create_fails_cleanly(root: str, store: str, code: int, heal: Callable[[], None], *,
                         files: int = 300, size: int = 16 << 10) -> None:
    rng = random.Random(h.seed_for(f"disk-create-{code}-{files}"))
    h.write_file(os.path.join(root, "small.txt"), b"small\n")
    assert h.ckpt(root, "init", store=store).code == h.OK
    first = h.ckpt(root, "create", store=store)
    assert first.code == h.OK, first
    fill(root, rng, files=files, size=size)  # by default 4.7 MiB, incompressible, loose and packed
    model = h.tree_state(root, with_inodes=True)
    run = h.ckpt(root, "create", store=store)
    assert_clear_error(run, code, store)
    assert h.tree_state(root, with_inodes=True) == model, "create touched the workspace"
    assert h.listed_ids(root, store) == {first.out.strip()}, "a failed create left a record"
    fsck = h.ckpt(root, "fsck", "--full", store=store)
    assert fsck.code == h.OK, f"store inconsistent on the full disk:\n{fsck}"
    heal()
    second = h.ckpt(root, "create", store=store)
    assert second.code == h.OK, second
    h.fsck_clean(root, store)
    from ckpt.checkpoints.service import Checkpoints

    with Checkpoints.open(root, store) as cp:
        held = h.checkpoint_state(cp, second.out.strip())
    assert held == h.tree_state(root)
    h.tally(f"disk error {errno.errorcode[code]}", injected=1, passed=1)


# 300 files of 16 KiB go through put_files' batches; one of 12 MiB is above the stream
# threshold (8 MiB) and streams into the store, where a full disk is the store's failure,
# not the file's: it used to be recorded as the file being unreadable, and the create went
# on to commit a checkpoint without it.
@pytest.mark.parametrize(("files", "size"), [(300, 16 << 10), (1, 12 << 20)],
                         ids=["batched", "streamed"])
def test_enospc_during_create(base: str, files: int, size: int) -> None:
    root = os.path.join(base, "ws")
    os.mkdir(root)
    mount = os.path.join(base, "small")
    with h.tmpfs(mount, "3m"):
        store = os.path.join(mount, "store")
        create_fails_cleanly(root, store, errno.ENOSPC, lambda: h.remount(mount, "64m"),
                             files=files, size=size)


# -- restore ---------------------------------------------------------------------------------


def restore_fails_cleanly(root: str, ballast_path: str, code: int) -> None:
    rng = random.Random(h.seed_for(f"disk-restore-{code}"))
    store = os.path.join(root, ".ckpt")
    fill(root, rng, files=120, size=32 << 10)  # 3.75 MiB
    assert h.ckpt(root, "init").code == h.OK
    first = h.ckpt(root, "create")
    assert first.code == h.OK, first
    target = h.tree_state(root)
    fill(root, rng, files=120, size=32 << 10)
    assert h.ckpt(root, "create").code == h.OK
    ballast(ballast_path, leave=600 << 10)
    before = h.tree_state(root, with_inodes=True)
    run = h.ckpt(root, "restore", first.out.strip())
    assert_clear_error(run, code, root)
    assert h.tree_state(root, with_inodes=True) == before, "a failed restore touched the tree"
    no_staging_left(store, root)
    os.unlink(ballast_path)
    h.fsck_clean(root)
    again = h.ckpt(root, "restore", first.out.strip())
    assert again.code == h.OK, again
    assert h.tree_state(root) == target
    no_staging_left(store, root)
    h.tally(f"disk error {errno.errorcode[code]}", injected=1, passed=1)


def test_enospc_during_restore(base: str) -> None:
    mount = os.path.join(base, "small")
    with h.tmpfs(mount, "24m"):
        root = os.path.join(mount, "ws")
        os.mkdir(root)
        restore_fails_cleanly(root, os.path.join(mount, "ballast"), errno.ENOSPC)


def test_enospc_while_completing_a_killed_restore_keeps_the_journal(base: str) -> None:
    """A restore killed mid-apply, then the disk fills: the next command fails naming the
    path, but the journal stays, so the restore is completed once there is space again."""
    rng = random.Random(h.seed_for("enospc-completion"))
    mount = os.path.join(base, "small")
    with h.tmpfs(mount, "32m"):
        root = os.path.join(mount, "ws")
        store = os.path.join(root, ".ckpt")
        os.mkdir(root)
        fill(root, rng, files=800, size=6 << 10)
        assert h.ckpt(root, "init").code == h.OK
        first = h.ckpt(root, "create").out.strip()
        target = h.tree_state(root)
        fill(root, rng, files=800, size=6 << 10)
        second = h.ckpt(root, "create").out.strip()
        current = h.tree_state(root)
        h.kill_restore_mid_apply(root, store, first, second, target, current, rng)
        half = h.tree_state(root)
        # The killed restore's staged files would be freed by the completion itself: free
        # them first, so the ballast leaves too little room to stage the rest again.
        for staging in glob.glob(os.path.join(store, "roots", "*", "staging-*")):
            shutil.rmtree(staging)
        ballast(os.path.join(mount, "ballast"), leave=400 << 10)
        run = h.ckpt(root, "recover")
        assert_clear_error(run, errno.ENOSPC, root)
        assert h.journals(store), "the journal of a half-applied restore was dropped"
        assert h.tree_state(root) == half
        os.unlink(os.path.join(mount, "ballast"))
        again = h.ckpt(root, "recover")
        assert again.code == h.OK, again
        assert h.tree_state(root) == target
        no_staging_left(store, root)
        h.fsck_clean(root)
    h.tally("disk error ENOSPC", injected=1, passed=1)


# -- EIO -------------------------------------------------------------------------------------

EIO_POINTS = h.scale(3, 12)
# Timing differs from machine to machine (a CI box may restore twice as fast as the calibration
# run did): until one fault has landed inside the operation, aim ever earlier, for at most this
# many extra points.
EIO_EXTRA_POINTS = 6


def eio_points() -> range:
    return range(EIO_POINTS + EIO_EXTRA_POINTS)


def eio_moment(rng: random.Random, lead: float, duration: float, misses: int) -> float:
    """Seconds after the start at which the disk fails: at random within the operation once a
    fault has landed (`misses` < 0), else early and earlier after each miss."""
    window = max(duration - lead, 0.0)
    share = rng.random() * 0.9 if misses < 0 else 0.1 / (2 ** misses)
    return lead + share * window
needs_sealable_disk = pytest.mark.skipif(not h.SealableDisk.available(),
                                         reason="needs root, memfd, losetup, mkfs.ext4/ext2")


def fail_at(disk: h.SealableDisk, root: str, args: list[str], delay: float,
            store: str | None = None) -> h.Run:
    """Start `ckpt ARGS`; after `delay` seconds every write to `disk` fails."""
    started = time.monotonic()
    child = h.start(root, *args, store=store)
    try:
        child.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        pass
    disk.fail()
    out, err = child.communicate(timeout=300)
    return h.Run(child.returncode, out.decode("utf-8", "surrogateescape"),
                 err.decode("utf-8", "surrogateescape"), time.monotonic() - started)


@needs_sealable_disk
def test_eio_at_random_moments_of_create(base: str, fs: str = "ext4") -> None:
    rng = random.Random(h.seed_for(f"eio-create-{fs}"))
    area = f"disk error EIO create ({fs})"
    root = os.path.join(base, "ws")
    os.mkdir(root)
    h.build_tree(root, rng, files=1500)
    errors = done = 0
    with h.SealableDisk(os.path.join(base, "disk"), fs) as disk:
        store = os.path.join(disk.mnt, "store")
        assert h.ckpt(root, "init", store=store).code == h.OK
        ledger = h.Ledger(root, store)
        startup = h.startup_seconds(root, store)
        misses = 0
        for point in range(-2, len(eio_points())):
            if point >= EIO_POINTS and errors:
                break
            h.mutate(root, rng, changes=600, max_size=16000)
            model = h.tree_state(root, with_inodes=True)
            if point < 0:  # a first checkpoint, then one of the size the faults hit: timed
                run = h.ckpt(root, "create", store=store)
                assert run.code == h.OK, run
                duration = run.elapsed
                ledger.report(run.out.strip(), h.tree_state(root))
                continue
            run = fail_at(disk, root, ["create"],
                          eio_moment(rng, 0.8 * startup, duration, -1 if errors else misses), store)
            misses += run.code == h.OK
            if run.out.strip():
                ledger.report(run.out.strip(), h.tree_state(root))
            if run.code != h.OK:
                h.tally(area, **{assert_clear_error(run, DEVICE_ERRORS, store): 1})
                errors += 1
            assert h.tree_state(root, with_inodes=True) == model, "create touched the tree"
            disk.replace()
            done += 1
            ledger.check(f"EIO create point {point}")
            after = h.ckpt_in(root, "create", store=store)
            assert after.code == h.OK, after
            ledger.report(after.out.strip(), h.tree_state(root))
    h.tally(area, injected=done, failed_cleanly=errors, passed=done)
    assert errors >= 1, "no EIO landed inside a create"


@needs_sealable_disk
def test_eio_at_random_moments_of_restore(base: str, fs: str = "ext4") -> None:
    rng = random.Random(h.seed_for(f"eio-restore-{fs}"))
    area = f"disk error EIO restore ({fs})"
    errors = completed_later = done = 0
    with h.SealableDisk(os.path.join(base, "disk"), fs) as disk:
        root = os.path.join(disk.mnt, "ws")
        store = os.path.join(root, ".ckpt")
        os.mkdir(root)
        fill(root, rng, files=200, size=24 << 10)
        assert h.ckpt(root, "init").code == h.OK
        ids = [h.ckpt(root, "create").out.strip()]
        models = {ids[0]: h.tree_state(root)}
        fill(root, rng, files=200, size=24 << 10)
        ids.append(h.ckpt(root, "create").out.strip())
        models[ids[1]] = h.tree_state(root)
        ledger = h.Ledger(root)
        for checkpoint_id in ids:
            ledger.report(checkpoint_id, models[checkpoint_id])
        startup = h.startup_seconds(root)
        calibration = h.ckpt(root, "restore", ids[0])
        assert calibration.code == h.OK, calibration
        current = ids[0]
        misses = 0
        for point in eio_points():
            if point >= EIO_POINTS and errors:
                break
            target = ids[1] if current == ids[0] else ids[0]
            before = h.tree_state(root)
            run = fail_at(disk, root, ["restore", target],
                          eio_moment(rng, startup, calibration.elapsed, -1 if errors else misses))
            misses += run.code == h.OK
            if run.code != h.OK:
                assert run.code in (h.USER_ERROR, h.NOTHING), run
                if run.code == h.USER_ERROR:
                    h.tally(area, **{assert_clear_error(run, DEVICE_ERRORS, root): 1})
                errors += 1
            disk.replace()
            done += 1
            pending = bool(h.journals(store))
            state = h.tree_state(root)
            half = [p for p, v in state.items() if v[0] == "f"
                    and v not in (models[current].get(p), models[target].get(p))]
            assert not half, f"files that are neither version at their final names: {half[:5]}"
            nxt = h.ckpt(root, "recover")
            assert nxt.code == h.OK, nxt
            final = h.tree_state(root)
            if pending or run.code == h.OK:
                assert final == models[target], h.diff_models(models[target], final)
                completed_later += pending
            else:
                assert final in (before, models[target]), h.diff_models(before, final)
            no_staging_left(store, root)
            ledger.check(f"EIO restore point {point}")
            current = target if final == models[target] else current
    h.tally(area, injected=done, failed_cleanly=errors, completed_by_next_command=completed_later,
            passed=done)
    assert errors >= 1, "no EIO landed inside a restore"


def writing(store: str, command: str) -> Callable[[], bool]:
    """True once the command is writing file contents: a new pack or new loose objects
    (create), a staging directory being filled (restore) — the store layout of
    ARCHITECTURE.md."""
    if command == "restore":
        return lambda: bool(glob.glob(os.path.join(store, "roots", "*", "staging-*", "*")))
    loose = os.path.join(store, "objects", "??", "*")
    packs = os.path.join(store, "objects", "packs", "pack-*.pack")
    baseline, known = len(glob.glob(loose)), set(glob.glob(packs))
    return lambda: len(glob.glob(loose)) > baseline + 8 or not set(glob.glob(packs)) <= known


def fail_when(disk: h.SealableDisk, root: str, args: list[str], store: str | None,
              ready: Callable[[], bool]) -> h.Run:
    """Start `ckpt ARGS`; as soon as `ready()` every write to `disk` fails."""
    started = time.monotonic()
    child = h.start(root, *args, store=store)
    while child.poll() is None and not ready() and time.monotonic() - started < 60:
        time.sleep(0.001)
    disk.fail()
    out, err = child.communicate(timeout=300)
    return h.Run(child.returncode, out.decode("utf-8", "surrogateescape"),
                 err.decode("utf-8", "surrogateescape"), time.monotonic() - started)


@needs_sealable_disk
@pytest.mark.parametrize("command", ["create", "restore"])
def test_eio_from_write_itself_is_a_clear_error(base: str, command: str) -> None:
    """On ext2 (no journal to abort) write(2) itself returns EIO: the user gets one line with
    the path and "Input/output error", and the tree is untouched (create) or each file is its
    old or its new version (restore). ext2 is not crash-consistent, so what the device holds
    afterwards is the filesystem's problem: the ext4 tests above check the store after."""
    rng = random.Random(h.seed_for(f"eio-ext2-{command}"))
    with h.SealableDisk(os.path.join(base, "disk"), "ext2") as disk:
        root = os.path.join(disk.mnt if command == "restore" else base, "ws")
        store = os.path.join(disk.mnt, "store") if command == "create" else None
        os.mkdir(root)
        fill(root, rng, files=200, size=24 << 10)
        assert h.ckpt(root, "init", store=store).code == h.OK
        first = h.ckpt(root, "create", store=store).out.strip()
        old = h.tree_state(root)
        fill(root, rng, files=200, size=24 << 10)
        new = h.tree_state(root)
        if command == "create":
            args, before = ["create"], h.tree_state(root, with_inodes=True)
        else:
            assert h.ckpt(root, "create").code == h.OK
            args, before = ["restore", first], None
        run = fail_when(disk, root, args, store, writing(store or os.path.join(root, ".ckpt"),
                                                         command))
        assert run.code in (h.USER_ERROR, h.NOTHING), run
        if run.code == h.USER_ERROR:
            name = assert_clear_error(run, DEVICE_ERRORS, store or root)
            h.tally("disk error EIO (ext2, write(2) fails)", **{name: 1})
        if before is not None:
            assert h.tree_state(root, with_inodes=True) == before
        else:
            state = h.tree_state(root)
            assert not [p for p, v in state.items() if v[0] == "f"
                        and v not in (old.get(p), new.get(p))], "a half-written file"
    h.tally("disk error EIO (ext2, write(2) fails)", injected=1, passed=1)
