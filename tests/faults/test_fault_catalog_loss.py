"""A lost catalog is rebuilt from the record files: nothing vanishes, gc deletes nothing live.

Real `python -m ckpt` processes on a real store: the catalog is deleted or truncated to zero
bytes between commands, then `list` must show every checkpoint again and `gc` (no grace) must
keep every object a checkpoint needs, which restoring every checkpoint afterwards proves.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import fault_helpers as h
import pytest


def _workspace(base: str, name: str) -> tuple[str, dict[str, dict[str, bytes]]]:
    """A root with four checkpoints of different content; their ids -> files."""
    root = os.path.join(base, "ws")
    os.mkdir(root)
    rng = random.Random(h.seed_for(name))
    assert h.ckpt(root, "init").code == h.OK
    assert h.ckpt(root, "config", "set", "gc_grace_seconds", "0").code == h.OK
    taken: dict[str, dict[str, bytes]] = {}
    for turn in range(4):
        files = {f"f{turn}-{i}.txt": rng.randbytes(rng.randrange(10, 3000)) for i in range(3)}
        for old in os.listdir(root):
            if old.endswith(".txt"):
                os.unlink(os.path.join(root, old))
        for rel, data in files.items():
            with open(os.path.join(root, rel), "wb") as out:
                out.write(data)
        run = h.ckpt(root, "create", "-m", f"turn {turn}", "--json")
        assert run.code == h.OK, run
        taken[run.json()["id"]] = files
    return root, taken


def _lose_catalog(root: str, how: str) -> None:
    db = os.path.join(root, ".ckpt", "catalog.db")
    for suffix in ("-wal", "-shm"):
        if os.path.exists(db + suffix):
            os.unlink(db + suffix)
    if how == "deleted":
        os.unlink(db)
    else:
        os.truncate(db, 0)


def _listed(root: str) -> list[str]:
    run = h.ckpt(root, "list", "--json")
    assert run.code == h.OK, run
    return [r["id"] for r in run.json()]


@pytest.mark.parametrize("how", ["deleted", "truncated"])
def test_a_lost_catalog_shows_every_checkpoint_and_gc_keeps_their_objects(base: str,
                                                                          how: str) -> None:
    root, taken = _workspace(base, f"catalog loss {how}")
    _lose_catalog(root, how)
    assert _listed(root) == sorted(taken)
    gc = h.ckpt(root, "gc", "--json")
    assert gc.code == h.OK, gc
    assert gc.json()["objects_removed"] == 0
    for checkpoint_id, files in taken.items():
        run = h.ckpt(root, "restore", checkpoint_id, "--no-save")
        assert run.code == h.OK, run
        found = {n: Path(root, n).read_bytes() for n in os.listdir(root) if n.endswith(".txt")}
        assert found == files
    assert h.ckpt(root, "fsck", "--full").code == h.OK
    h.tally("catalog loss", injected=1, passed=1)


def test_gc_right_after_losing_the_catalog_deletes_nothing_live(base: str) -> None:
    root, taken = _workspace(base, "catalog loss gc first")
    _lose_catalog(root, "deleted")
    gc = h.ckpt(root, "gc", "--json")  # the first command after the loss
    assert gc.code == h.OK, gc
    assert gc.json()["objects_removed"] == 0
    assert _listed(root) == sorted(taken)
    assert h.ckpt(root, "fsck", "--full").code == h.OK
    h.tally("catalog loss", injected=1, passed=1)


def test_a_pruned_checkpoint_stays_pruned_across_a_rebuild(base: str) -> None:
    root, taken = _workspace(base, "catalog loss prune")
    run = h.ckpt(root, "prune", "--keep-latest", "2")
    assert run.code == h.OK, run
    kept = sorted(taken)[-2:]
    _lose_catalog(root, "deleted")
    assert _listed(root) == kept
    h.tally("catalog loss", injected=1, passed=1)


def test_repair_rebuilds_a_catalog_sqlite_cannot_read(base: str) -> None:
    root, taken = _workspace(base, "catalog loss garbage")
    db = os.path.join(root, ".ckpt", "catalog.db")
    _lose_catalog(root, "truncated")
    with open(db, "wb") as out:
        out.write(b"this is not a database" * 300)
    run = h.ckpt(root, "list")
    assert run.code == h.CORRUPT, run
    assert "catalog.db" in run.err and "ckpt fsck --repair" in run.err
    assert h.ckpt(root, "fsck").code == h.CORRUPT
    repair = h.ckpt(root, "fsck", "--repair")
    assert repair.code == h.OK, repair
    assert "moved the damaged catalog" in repair.out
    assert _listed(root) == sorted(taken)
    h.tally("catalog loss", injected=1, passed=1)
