"""Every kind of store file damaged: blob and tree objects, a catalog row pointing at a missing
tree, unparseable catalog rows, the stat cache, the restore journal.

Promises: reads fail with exit 5 naming what is damaged; restore refuses before touching the
workspace (inodes and mtimes unchanged, no staging or journal left); `ckpt fsck --full` lists
each damaged thing; gc never deletes anything while a checkpoint's trees are unreadable; a
damaged stat cache costs only speed (the checkpoint is exactly the tree, the cache rebuilt).
"""

from __future__ import annotations

import os
import random
import sqlite3
from collections.abc import Callable

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest

from ckpt.checkpoints.history.catalog import _COLUMNS
from ckpt.checkpoints.history.records import row_digest
from ckpt.checkpoints.restore.journal import RestoreIntent, encode_intent, write_intent
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import hash_bytes

STATCACHE_FLIPS = h.scale(48, 400)
HEADER = 13  # object envelope header (objstore/codec.py): magic, format, codec, length


class Scene:
    """A store with one checkpoint (`first`) and a workspace that has moved on since, so a
    restore of `first` has files to write, delete and create."""

    def __init__(self, base: str) -> None:
        self.root = os.path.join(base, "ws")
        self.store = os.path.join(self.root, ".ckpt")
        os.mkdir(self.root)
        rng = random.Random(h.seed_for("corruption-scene"))
        h.write_file(os.path.join(self.root, "a.txt"), b"alpha\n" * 50, old=True)
        h.write_file(os.path.join(self.root, "sub", "b.txt"), rng.randbytes(3000), old=True)
        h.write_file(os.path.join(self.root, "sub", "deep", "c.txt"), b"gamma\n", old=True)
        h.write_file(os.path.join(self.root, "run.sh"), b"#!/bin/sh\necho hi\n", executable=True,
                     old=True)
        os.symlink("a.txt", os.path.join(self.root, "link"))
        assert h.ckpt_in(self.root, "init").code == h.OK
        run = h.ckpt_in(self.root, "create", "-m", "first")
        assert run.code == h.OK, run
        self.first = run.out.strip()
        with Checkpoints.open(self.root) as cp:
            self.model = h.checkpoint_state(cp, self.first)
            self.tree = cp.get(self.first).tree
            root_tree = cp.objects.get_tree(self.tree)
            sub = root_tree.find(b"sub")
            assert sub is not None and sub.oid is not None
            self.sub_tree = sub.oid
        # the workspace moves on
        h.write_file(os.path.join(self.root, "a.txt"), b"edited\n")
        h.write_file(os.path.join(self.root, "sub", "b.txt"), b"edited too\n")
        h.write_file(os.path.join(self.root, "new.txt"), b"not in the checkpoint\n")

    def blob(self, rel: bytes) -> bytes:
        return bytes.fromhex(self.model[rel][2])

    def untouched(self) -> dict[bytes, tuple[object, ...]]:
        return h.tree_state(self.root, with_inodes=True)

    def assert_restore_refused(self, checkpoint: str, *names: str) -> None:
        before = self.untouched()
        run = h.ckpt(self.root, "restore", checkpoint)  # a real process, the real entry point
        assert run.code == h.CORRUPT, run
        for name in names:
            assert name in run.err, run
        assert len(run.err.strip().splitlines()) == 1, "one line, no traceback"
        assert self.untouched() == before, "restore touched the workspace"
        assert not h.journals(self.store), "a refused restore left its journal"
        assert not [p for p in os.listdir(h.root_dir(self.store, self.root))
                    if p.startswith("staging-")], "staging left behind"

    def assert_fsck_lists(self, *names: str) -> h.Run:
        run = h.ckpt_in(self.root, "fsck", "--full")
        assert run.code == h.CORRUPT, run
        for name in names:
            assert name in run.out, run
        return run


@pytest.fixture
def scene(base: str) -> Scene:
    return Scene(base)


DAMAGES = ["flip-payload", "flip-header", "truncate", "empty", "garbage", "missing"]


def damage(path: str, offset: int, length: int, how: str) -> None:
    rng = random.Random(h.seed_for(how))
    if how == "missing":
        os.unlink(path)
        return
    os.chmod(path, 0o644)
    if how == "flip-payload":
        h.flip_byte(path, offset + HEADER + rng.randrange(length - HEADER))
    elif how == "flip-header":
        h.flip_byte(path, offset + rng.randrange(HEADER))
    elif how in ("truncate", "empty"):
        assert offset == 0, "only loose objects are truncated"
        os.truncate(path, length // 2 if how == "truncate" else 0)
    else:
        with open(path, "r+b") as stream:
            stream.seek(offset)
            stream.write(rng.randbytes(length))


def _loose_only(scene: Scene, oid: bytes, how: str) -> tuple[str, int, int]:
    path, offset, length = h.object_file(scene.store, oid)
    if offset and how in ("truncate", "empty", "missing"):
        pytest.skip("the object is packed: whole-file damage applies to loose objects")
    return path, offset, length


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_blob_fails_reads_with_exit_5_and_restore_refuses(scene: Scene, how: str) -> None:
    oid = scene.blob(b"a.txt")
    damage(*_loose_only(scene, oid, how), how)
    cat = h.ckpt_in(scene.root, "cat", scene.first, "a.txt")
    assert cat.code == h.CORRUPT and oid.hex() in cat.err, cat
    scene.assert_restore_refused(scene.first, oid.hex())
    scene.assert_fsck_lists(oid.hex(), f"damaged checkpoint {scene.first}")
    # what is intact stays readable
    ok = h.ckpt_in(scene.root, "cat", scene.first, "sub/deep/c.txt")
    assert ok.code == h.OK and ok.out == "gamma\n", ok
    h.tally("corruption", injected=1, passed=1)


@pytest.mark.parametrize("how", DAMAGES)
def test_damaged_tree_fails_reads_with_exit_5_and_restore_refuses(scene: Scene, how: str) -> None:
    damage(*_loose_only(scene, scene.sub_tree, how), how)
    show = h.ckpt_in(scene.root, "show", scene.first)
    assert show.code == h.CORRUPT and scene.sub_tree.hex() in show.err, show
    diff = h.ckpt_in(scene.root, "diff", scene.first)
    assert diff.code == h.CORRUPT and scene.sub_tree.hex() in diff.err, diff
    scene.assert_restore_refused(scene.first, scene.sub_tree.hex())
    scene.assert_fsck_lists(scene.sub_tree.hex(), f"damaged checkpoint {scene.first}")
    h.tally("corruption", injected=1, passed=1)


def _catalog(scene: Scene) -> sqlite3.Connection:
    return sqlite3.connect(os.path.join(scene.store, "catalog.db"), isolation_level=None)


def test_catalog_row_pointing_at_a_missing_tree(scene: Scene) -> None:
    ghost = hash_bytes(b"a tree that was never stored")
    with _catalog(scene) as db:
        db.execute("UPDATE checkpoints SET tree = ? WHERE id = ?", (ghost, scene.first))
        # a sound row (its digest matches) whose tree is gone, not a damaged row
        row = db.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE id = ?",
                         (scene.first,)).fetchone()
        db.execute("UPDATE checkpoints SET digest = ? WHERE id = ?",
                   (row_digest(row), scene.first))
    assert h.ckpt_in(scene.root, "list").code == h.OK  # records stay listable
    show = h.ckpt_in(scene.root, "show", scene.first)
    assert show.code == h.CORRUPT and ghost.hex() in show.err and "missing" in show.err, show
    scene.assert_restore_refused(scene.first, ghost.hex())
    scene.assert_fsck_lists(f"missing object {ghost.hex()}", f"damaged checkpoint {scene.first}")
    # gc must not sweep while a checkpoint's trees are unknown: they may reference anything
    objects = h.ckpt_in(scene.root, "stats", "--json").json()["objects"]
    h.set_config(scene.root, "gc_grace_seconds", "0")
    gc = h.ckpt_in(scene.root, "gc")
    assert gc.code == h.CORRUPT and ghost.hex() in gc.err, gc
    assert h.ckpt_in(scene.root, "stats", "--json").json()["objects"] == objects
    h.tally("corruption", injected=1, passed=1)


@pytest.mark.parametrize("column,value", [
    ("metadata", "{not json"), ("tree", b"short"), ("skipped", b"dangling\0"),
    ("created_us", "yesterday"),
])
def test_unparseable_catalog_row_is_exit_5_naming_the_checkpoint(
        scene: Scene, column: str, value: object) -> None:
    with _catalog(scene) as db:
        db.execute(f"UPDATE checkpoints SET {column} = ? WHERE id = ?", (value, scene.first))
    for args in (["list"], ["show", scene.first], ["restore", scene.first], ["fsck", "--full"]):
        before = scene.untouched()
        run = h.ckpt_in(scene.root, *args)
        assert run.code == h.CORRUPT, (args, run)
        told = run.out + run.err if args[0] == "fsck" else run.err  # fsck lists on stdout
        assert scene.first in told and "catalog.db" in told, (args, run)
        assert scene.untouched() == before
    h.tally("corruption", injected=1, passed=1)


def test_damaged_catalog_file_is_exit_5_naming_it(scene: Scene) -> None:
    path = os.path.join(scene.store, "catalog.db")
    with open(path, "r+b") as stream:  # the SQLite header: not a database any more
        stream.write(b"garbage!" * 4)
    for wal in ("-wal", "-shm"):
        if os.path.exists(path + wal):
            os.unlink(path + wal)
    before = scene.untouched()
    for args in (["list"], ["restore", scene.first], ["create"], ["fsck", "--full"]):
        run = h.ckpt_in(scene.root, *args)
        assert run.code == h.CORRUPT and "catalog.db" in run.err, (args, run)
    assert scene.untouched() == before
    h.tally("corruption", injected=1, passed=1)


@pytest.mark.parametrize("damaged", ["statcache", "statcache.delta"])
def test_damaged_stat_cache_costs_only_speed(scene: Scene, damaged: str) -> None:
    """Seeded single-byte flips anywhere in the stat cache, its base or its delta (and
    truncations): every next checkpoint is exactly the tree; the cache is rebuilt (the one
    after reads nothing)."""
    rng = random.Random(h.seed_for(damaged))
    root = scene.root
    for path in h.walk_files(root):
        os.utime(path, (h.PAST, h.PAST), follow_symlinks=False)
    with Checkpoints.open(root) as cp:
        truth = cp.create().tree
        if damaged == "statcache.delta":  # a change saved as a delta against that base
            edited = min(h.walk_files(root))
            with open(edited, "ab") as out:
                out.write(b"edited")
            os.utime(edited, (h.PAST + 1, h.PAST + 1), follow_symlinks=False)
            truth = cp.create().tree
        assert cp.create().stats.hashed == 0
    cache = os.path.join(h.root_dir(scene.store, root), damaged)
    assert os.path.exists(cache)
    with open(cache, "rb") as stream:
        pristine = stream.read()
    cases = [("flip", rng.randrange(len(pristine))) for _ in range(STATCACHE_FLIPS)]
    cases += [("truncate", rng.randrange(len(pristine))) for _ in range(8)]
    cases += [("empty", 0), ("garbage", 0)]
    wrong = []
    for how, at in cases:
        data = bytearray(pristine)
        if how == "flip":
            data[at] ^= 1 << rng.randrange(8)
        elif how == "truncate":
            del data[at:]
        elif how == "empty":
            data = bytearray()
        else:
            data = bytearray(rng.randbytes(len(pristine)))
        with open(cache, "wb") as out:
            out.write(data)
        with Checkpoints.open(root) as cp:
            record = cp.create()
            if record.tree != truth:
                wrong.append((how, at))
            again = cp.create()
            assert again.tree == truth and again.stats.hashed == 0, "cache not rebuilt"
    assert not wrong, f"a damaged stat cache produced a wrong checkpoint: {wrong[:10]}"
    h.fsck_clean(root)
    h.tally(f"corruption: {damaged}", injected=len(cases), passed=len(cases))


def test_fsck_lists_a_damaged_stat_cache_as_harmless(scene: Scene) -> None:
    """Written without fsync, a stat cache may be torn by a crash: fsck names it, but the
    store is not damaged (exit 0), and the next checkpoint rebuilds it."""
    cache = os.path.join(h.root_dir(scene.store, scene.root), "statcache")
    with open(cache, "r+b") as stream:
        stream.write(b"\xc1\xc1\xc1")
    run = h.ckpt_in(scene.root, "fsck", "--full")
    assert run.code == h.OK and f"note: damaged stat cache {cache}" in run.out, run
    assert h.ckpt_in(scene.root, "create").code == h.OK
    run = h.ckpt_in(scene.root, "fsck", "--full", "--json")
    assert run.code == h.OK and run.json()["damaged_caches"] == [], run
    h.tally("corruption", injected=1, passed=1)


def _journal(scene: Scene, where: str, **changes: object) -> str:
    """Journal a restore of scene.first as if one had been killed: in the catalog, or in the
    journal file of a ckpt before catalog schema 2 (still completed). Returns where it is."""
    with Checkpoints.open(scene.root) as cp:
        fields: dict[str, object] = {
            "checkpoint": scene.first, "tree": scene.tree, "scope": "tree", "covered": (),
            "absent_parents": (), "keep": (), "only": None, "pre_restore": None,
            "record_event": True, "discard_later": False,
            "staging": os.fsencode(os.path.join(h.root_dir(scene.store, scene.root),
                                                "staging-0"))}
        fields.update(changes)
        intent = RestoreIntent(**fields)  # type: ignore[arg-type]
        assert cp.root == scene.root
        if where == "catalog":
            cp.catalog.journal_restore(os.fsencode(scene.root), encode_intent(intent))
            return cp.catalog.path
        path = os.path.join(h.root_dir(scene.store, scene.root), "journal")
        write_intent(path, intent)
    return path


def _overwrite_journal(scene: Scene, where: str, damage: Callable[[bytes], bytes]) -> None:
    if where == "catalog":
        with Checkpoints.open(scene.root) as cp:
            data = cp.catalog.restore_journal(os.fsencode(scene.root))
            assert data is not None
            cp.catalog.journal_restore(os.fsencode(scene.root), damage(data))
        return
    path = os.path.join(h.root_dir(scene.store, scene.root), "journal")
    with open(path, "rb") as stream:
        data = stream.read()
    with open(path, "wb") as out:
        out.write(damage(data))


@pytest.mark.parametrize("where", ["catalog", "file"])
@pytest.mark.parametrize("how", ["garbage", "truncate", "empty"])
def test_damaged_journal_is_exit_5_naming_it_and_nothing_is_touched(
        scene: Scene, how: str, where: str) -> None:
    path = _journal(scene, where)
    _overwrite_journal(scene, where, lambda data: {
        "garbage": b"\xc1" * 40, "truncate": data[: len(data) // 2], "empty": b""}[how])
    before = scene.untouched()
    for args in (["create"], ["restore", scene.first], ["recover"], ["diff", scene.first]):
        run = h.ckpt_in(scene.root, *args)
        assert run.code == h.CORRUPT and "journal" in run.err and path in run.err, (args, run)
        assert scene.untouched() == before
    scene.assert_fsck_lists("journal", path)
    h.tally("corruption", injected=1, passed=1)


@pytest.mark.parametrize("where", ["catalog", "file"])
def test_crafted_journal_cannot_make_ckpt_delete_outside_the_store(
        scene: Scene, base: str, where: str) -> None:
    victim = os.path.join(base, "victim")
    h.write_file(os.path.join(victim, "precious.txt"), b"do not delete\n")
    for staging in (victim, os.path.join(scene.root, "sub"), scene.store):
        _journal(scene, where, staging=os.fsencode(staging))
        before = scene.untouched()
        run = h.ckpt_in(scene.root, "recover")
        assert run.code == h.CORRUPT and "journal" in run.err, run
        assert os.path.exists(os.path.join(victim, "precious.txt")), "deleted outside the store"
        assert scene.untouched() == before
        assert os.path.exists(os.path.join(scene.store, "catalog.db"))
    h.tally("crafted store", injected=3, passed=3)
