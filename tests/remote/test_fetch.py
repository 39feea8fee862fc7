"""A fresh machine's restore from a remote (an empty store with only the remote configured,
`restore ID --target DIR`), through real `ckpt` processes against the real SeaweedFS:

- exact: many small files (enough for a trained dictionary, so envelopes that name one come
  down with it), nested and empty directories, symlinks, executables; the store fsck-clean;
- a bit-flipped or truncated remote pack: exit 5 in one line naming the object or the pack,
  the target directory not made, nothing in the store that fsck calls damaged; once the pack
  is put back the same restore completes exactly;
- a fetch killed -9 at seeded moments: the store stays fsck-clean and the next restore
  completes exactly.
"""

from __future__ import annotations

import glob
import os
import random
import signal
import time
from pathlib import Path

import fault_helpers as h
import fault_remote_helpers as r
import pytest
from seaweed import Bucket, s3_bucket, s3_env, seaweed

from ckpt.objstore import codec
from ckpt.objstore.packfile import decode_index
from ckpt.objstore.store import ObjectStore

__all__ = ["s3_bucket", "s3_env", "seaweed"]  # the fixtures these tests use

KILLS = h.scale(3, 10)


@pytest.fixture
def base(tmp_path: Path) -> str:
    """A resolved temp directory (roots are compared as real paths)."""
    return os.path.realpath(tmp_path)


def _tree(root: str, rng: random.Random, files: int) -> None:
    """Small source-like files (alike enough for a dictionary), nested and empty
    directories, executables and symlinks; seeded."""
    words = [rng.randbytes(6).hex() for _ in range(300)]
    for index in range(files):
        text = "\n".join(" ".join(rng.choices(words, k=8)) for _ in range(rng.randint(3, 40)))
        path = os.path.join(root, f"pkg{index % 9}", f"mod{index % 4}", f"f{index:04}.py")
        h.write_file(path, text.encode(), executable=index % 17 == 0)
    for empty in ("empty", "pkg0/mod0/empty/deeper"):
        os.makedirs(os.path.join(root, empty), exist_ok=True)
    os.symlink("pkg1/mod1/f0001.py", os.path.join(root, "link"))
    os.symlink("../missing", os.path.join(root, "pkg2", "dangling"))


def _pushed(base: str, bucket: Bucket, rng: random.Random, files: int) -> tuple[r.Machine, str]:
    a = r.machine(base, "a", bucket)
    _tree(a.root, rng, files)
    wanted = a.create("pushed")
    a.ok("push", r.REMOTE)
    return a, wanted


def _fsck_clean(m: r.Machine) -> None:
    fsck = m.run("fsck", "--json")
    assert fsck.code == h.OK, f"fsck after the fetch: {fsck}"


def test_fresh_machine_restore_is_exact(base: str, s3_bucket: Bucket) -> None:
    rng = random.Random(h.seed_for("fetch-exact"))
    a, wanted = _pushed(base, s3_bucket, rng, files=900)
    b = r.machine(base, "b", s3_bucket)
    target = os.path.join(base, "b", "out")
    b.ok("restore", wanted, "--target", target)
    assert h.tree_state(target) == a.models[wanted]
    _fsck_clean(b)
    assert _with_refs(b.store), "no fetched envelope names a dictionary: the case is too small"
    again = os.path.join(base, "b", "again")  # everything is local now: no fetch, same tree
    b.ok("restore", wanted, "--target", again)
    assert h.tree_state(again) == a.models[wanted]


def _with_refs(store_dir: str) -> int:
    """How many envelopes of the store name a dictionary or base (`codec.envelope_refs`)."""
    store = ObjectStore.open(store_dir)
    try:
        return sum(bool(codec.envelope_refs(store.backend.get(oid), oid))
                   for oid in store.backend.iter_ids())
    finally:
        store.close()


def _one_pack(bucket: Bucket) -> tuple[str, bytes, list[tuple[bytes, int, int]]]:
    packs = bucket.keys("packs/")
    assert len(packs) == 1, f"expected one pack: {packs}"
    key = packs[0]
    oids, locations, _ = decode_index(
        bucket.raw.get_object(bucket.name, f"index/{key.rsplit('/', 1)[1]}"))
    records = [(oids[i * 32:(i + 1) * 32], locations[2 * i], locations[2 * i + 1])
               for i in range(len(oids) // 32)]
    return key, bucket.raw.get_object(bucket.name, key), records


def test_damaged_remote_pack_during_a_fresh_restore(base: str, s3_bucket: Bucket) -> None:
    rng = random.Random(h.seed_for("fetch-damage"))
    a, wanted = _pushed(base, s3_bucket, rng, files=120)
    key, good, records = _one_pack(s3_bucket)
    packid = key.rsplit("/", 1)[1]
    oid, offset, length = rng.choice([rec for rec in records if rec[2] > 0])
    flipped = bytearray(good)
    flipped[offset + rng.randrange(length)] ^= 1 << rng.randrange(8)
    cases = [("flipped", bytes(flipped), [oid.hex(), packid]),
             ("truncated", good[:len(good) * 2 // 3], [packid])]
    for number, (what, damaged, names) in enumerate(cases):
        b = r.machine(base, f"b{number}", s3_bucket)
        s3_bucket.raw.put_object(s3_bucket.name, key, damaged)
        target = os.path.join(base, f"b{number}", "out")
        run = b.run("restore", wanted, "--target", target)
        assert run.code == h.CORRUPT, f"{what}: {run}"
        assert len(run.err.strip().splitlines()) == 1, f"{what}: one line: {run}"
        assert any(n in run.err for n in names), f"{what}: names none of {names}: {run}"
        assert not os.path.lexists(target), f"{what}: the target was made"
        _fsck_clean(b)
        s3_bucket.raw.put_object(s3_bucket.name, key, good)
        b.ok("restore", wanted, "--target", target)
        assert h.tree_state(target) == a.models[wanted], what
        _fsck_clean(b)


def _packs(store: str) -> list[str]:
    return glob.glob(os.path.join(store, "**", "pack-*.pack"), recursive=True)


def test_fetch_killed_midway_leaves_a_clean_store(base: str, s3_bucket: Bucket) -> None:
    rng = random.Random(h.seed_for("fetch-kill"))
    a, wanted = _pushed(base, s3_bucket, rng, files=1500)
    calibration = r.machine(base, "calibration", s3_bucket)
    started = time.monotonic()
    calibration.ok("restore", wanted, "--target", os.path.join(base, "calibration", "out"))
    whole = time.monotonic() - started
    killed = attempts = 0
    while killed < KILLS and attempts < 3 * KILLS:
        number, attempts = attempts, attempts + 1
        b = r.machine(base, f"b{number}", s3_bucket)
        target = os.path.join(base, f"b{number}", "out")
        child = b.popen("restore", wanted, "--target", target)
        deadline = time.monotonic() + r.HANG_GUARD
        # Kill once the fetch has begun writing packs (then a seeded moment later), or at a
        # seeded moment of an unkilled run's length; a run that ends first is tried again.
        wait_for_pack = number % 2 == 0
        delay = rng.uniform(0.0, 0.05) if wait_for_pack else rng.uniform(0.2, 0.9) * whole
        started = time.monotonic()
        while child.poll() is None and time.monotonic() < deadline:
            if (_packs(b.store) if wait_for_pack else time.monotonic() - started > delay):
                if wait_for_pack:
                    time.sleep(delay)
                child.send_signal(signal.SIGKILL)
                break
            time.sleep(0.002)
        run = r.finish(child)
        killed += run.killed
        assert run.killed or run.code == h.OK, run
        _fsck_clean(b)
        if os.path.lexists(target):  # killed inside the restore itself: a partial target
            target = os.path.join(base, f"b{number}", "out2")
        b.ok("restore", wanted, "--target", target)
        assert h.tree_state(target) == a.models[wanted]
        _fsck_clean(b)
    assert killed >= KILLS // 2 + 1, f"only {killed} of {attempts} runs were killed midway"
