"""A damaged pack on the remote: truncated, or one byte flipped inside an object's stored bytes.

Machine A pushes one checkpoint; the test then damages its pack on the server (through raw S3
requests, around ckpt) and machine B, whose workspace holds files of its own and a checkpoint,
asks for A's checkpoint. Promises:
- B's `restore ID --from-other-root` (which fetches what it needs) exits 5 with one line naming
  the pack (or, for a flipped byte, the damaged object's id); B's workspace is untouched
  (contents, inodes, mtimes) and no restore journal is left; B's own checkpoint stays intact;
- `fsck --remote --full` on A exits 5 naming the pack; for a truncated pack plain
  `fsck --remote` (sizes only) does too;
- once the pack is put back, B restores A's checkpoint exactly.
Cases: 2 truncations (one inside the last record) and 3 flipped bytes by default, 3 + 12 with
CKPT_SOAK=1.
"""

from __future__ import annotations

import os
import random

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import fault_remote_helpers as r
import pytest
from seaweed import Bucket, s3_bucket, s3_env, seaweed

from ckpt.objstore.packfile import decode_index

__all__ = ["s3_bucket", "s3_env", "seaweed"]  # the fixtures these tests use

FLIPS = h.scale(3, 12)
TRUNCATIONS = h.scale(1, 2)


def _pack(bucket: Bucket) -> tuple[str, bytes, list[tuple[bytes, int, int]]]:
    """The remote's one pack: its key, its bytes, and its records (oid, offset, length) from
    its index."""
    packs = bucket.keys("packs/")
    assert len(packs) == 1, f"expected one pack: {packs}"
    key = packs[0]
    packid = key.rsplit("/", 1)[1]
    oids, locations, _size = decode_index(bucket.raw.get_object(bucket.name, f"index/{packid}"))
    records = [(oids[i * 32:(i + 1) * 32], locations[2 * i], locations[2 * i + 1])
               for i in range(len(oids) // 32)]
    return key, bucket.raw.get_object(bucket.name, key), records


def _damages(rng: random.Random, data: bytes,
             records: list[tuple[bytes, int, int]]) -> list[tuple[str, bytes, bytes | None]]:
    """(what, damaged pack bytes, the object whose bytes were hit or None) per case."""
    # Inside the last record (its read comes back short), then seeded cuts (reads that start
    # past the end get 416).
    _, offset, length = max(records, key=lambda rec: rec[1])
    cuts = [offset + length // 2]
    cuts += [rng.randrange(len(data) // 4, len(data) - 1) for _ in range(TRUNCATIONS)]
    cases: list[tuple[str, bytes, bytes | None]] = [(f"truncated to {cut} of {len(data)} bytes", data[:cut], None) for cut in cuts]
    stored = [rec for rec in records if rec[2] > 0]
    for _ in range(FLIPS):
        oid, offset, length = rng.choice(stored)
        at = offset + rng.randrange(length)
        flipped = bytearray(data)
        flipped[at] ^= 1 << rng.randrange(8)
        cases.append((f"bit flipped at byte {at}", bytes(flipped), oid))
    return cases


# A truncated pack is damage whichever read meets the cut first: a ranged GET that starts past
# the end (S3 answers 416) or one that comes back short.
@pytest.mark.parametrize("kind", ["truncated", "flipped"])
def test_damaged_remote_pack_is_exit_5_naming_it_and_the_workspace_is_untouched(
        base: str, s3_bucket: Bucket, kind: str) -> None:
    rng = random.Random(h.seed_for(f"remote-damage-{kind}"))
    a = r.machine(base, "a", s3_bucket)
    h.build_tree(a.root, rng, files=120)
    wanted = a.create("pushed")
    a.ok("push", r.REMOTE)
    key, good, records = _pack(s3_bucket)
    packid = key.rsplit("/", 1)[1]

    cases = [c for c in _damages(rng, good, records)
             if c[0].startswith("truncated") == (kind == "truncated")]
    for number, (what, damaged, hit) in enumerate(cases):
        # A machine per case: objects an earlier case fetched intact stay in its store.
        b = r.machine(base, f"b{number}", s3_bucket)
        h.build_tree(b.root, rng, files=40)
        own = b.create("b's own")
        s3_bucket.raw.put_object(s3_bucket.name, key, damaged)
        checks = [("fsck", "--remote", r.REMOTE, "--full")]
        if hit is None:
            checks.append(("fsck", "--remote", r.REMOTE))
        for args in checks:
            fsck = a.run(*args)
            assert fsck.code == h.CORRUPT, f"{what}: {' '.join(args)}: {fsck}"
            assert packid in fsck.out + fsck.err, f"{what}: {' '.join(args)}: {fsck}"
        before = h.tree_state(b.root, with_inodes=True)
        run = b.run("restore", wanted, "--from-other-root")
        assert run.code == h.CORRUPT, f"{what}: {run}"
        assert len(run.err.strip().splitlines()) == 1, f"{what}: one line, no traceback: {run}"
        names = [packid] + ([hit.hex()] if hit is not None else [])
        assert any(n in run.err for n in names), f"{what}: does not name {names}: {run}"
        assert h.tree_state(b.root, with_inodes=True) == before, f"{what}: workspace changed"
        assert h.journals(b.store) == [], f"{what}: a restore journal was left"
        s3_bucket.raw.put_object(s3_bucket.name, key, good)
        h.build_tree(b.root, rng, files=10)  # changes of its own, then back to its checkpoint
        b.ok("restore", own, "--no-save")
        assert h.tree_state(b.root) == b.models[own]
        target = os.path.join(base, f"b{number}", "out")
        b.ok("restore", wanted, "--target", target)  # the pack put back: exact
        assert h.tree_state(target) == a.models[wanted]
        h.tally(f"remote: damaged pack ({kind})", injected=1, passed=1)
