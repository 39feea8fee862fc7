"""Tree deltas through checkpoints: a big directory with one file edited stores its new tree as
a delta on the previous one, so a checkpoint grows by a fraction of the tree; every checkpoint
of a seeded edit sequence restores exactly through prune and gc; a damaged base tree fails a
dependent's restore with exit 5 through the CLI."""

from __future__ import annotations

import dataclasses
import os
import random
from pathlib import Path

import pytest
import restore_helpers as h  # tests/ dirs are on pytest's `pythonpath`

from ckpt.checkpoints.restore.restorer import RestoreOptions
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import EntryKind, ObjectId, ObjectStore, codec
from ckpt.objstore.delta import read_chain

_QUIET = RestoreOptions(save=False, record_event=False)
_FILES = 2000


def _fill(root: str, rng: random.Random) -> dict[str, bytes]:
    os.mkdir(os.path.join(root, "big"))
    files = {f"big/f{i:05}.txt": b"%d %d\n" % (i, rng.randrange(1 << 30)) for i in range(_FILES)}
    files["top.txt"] = b"top\n"
    for name, data in files.items():
        _write(root, name, data)
    return files


def _write(root: str, name: str, data: bytes) -> None:
    h.write_file(root, name, data)


def _read(root: str, name: str) -> bytes:
    return Path(root, name).read_bytes()


def _subtree(objects: ObjectStore, tree: ObjectId, name: bytes) -> ObjectId:
    entry = objects.get_tree(tree).find(name)
    assert entry is not None and entry.kind is EntryKind.TREE and entry.oid is not None
    return entry.oid


def test_one_edit_in_a_big_directory_stores_its_tree_as_a_small_delta(
    ws: Path, tmp_path: Path
) -> None:
    root = os.path.realpath(ws)
    rng = random.Random(29)
    _fill(root, rng)
    with Checkpoints.init(root, store=str(tmp_path / "store")) as cp:
        first = cp.create()
        objects = cp._ws.objects
        old_tree = _subtree(objects, first.tree, b"big")
        plain = len(objects.backend.get(old_tree))
        assert objects.backend.get(old_tree)[4] != codec.CODEC_DELTA  # nothing to build on
        before = cp.stats().stored_bytes
        _write(root, "big/f00100.txt", b"edited\n")
        second = cp.create(reason="turn")
        growth = cp.stats().stored_bytes - before
        new_tree = _subtree(objects, second.tree, b"big")
        stored = objects.backend.get(new_tree)
        assert stored[4] == codec.CODEC_DELTA
        assert codec.delta_header(stored)[0] == old_tree
        assert growth < plain // 10, (growth, plain)
        cp.restore(first.id, _QUIET)
        assert _read(root, "big/f00100.txt") != b"edited\n"
        cp.restore(second.id, _QUIET)
        assert _read(root, "big/f00100.txt") == b"edited\n"


def test_deltas_off_store_trees_plain(ws: Path, tmp_path: Path) -> None:
    root = os.path.realpath(ws)
    _fill(root, random.Random(1))
    with Checkpoints.init(root, store=str(tmp_path / "store")) as cp:
        cp.config = dataclasses.replace(cp.config, deltas=False)
        cp.create()
        _write(root, "big/f00007.txt", b"edited\n")
        second = cp.create(reason="turn")
        objects = cp._ws.objects
        assert objects.backend.get(_subtree(objects, second.tree, b"big"))[4] \
            != codec.CODEC_DELTA


@pytest.mark.parametrize("seed", [3, 11, 42])
def test_every_checkpoint_restores_exactly_through_prune_and_gc(
    tmp_path: Path, seed: int
) -> None:
    base = os.path.realpath(tmp_path)
    root = os.path.join(base, "ws")
    os.mkdir(root)
    rng = random.Random(seed)
    files = _fill(root, rng)
    expected: dict[str, dict[str, bytes]] = {}
    with Checkpoints.init(root, store=os.path.join(base, "store")) as cp:
        expected[cp.create().id] = dict(files)
        for _ in range(14):
            action = rng.choice(["edit"] * 6 + ["new", "delete", "prune", "gc"])
            if action == "edit":
                for name in rng.sample(sorted(files), rng.randint(1, 3)):
                    files[name] = b"edit %d\n" % rng.randrange(1 << 30)
                    _write(root, name, files[name])
            elif action == "new":
                name = f"big/new{rng.randrange(1 << 20)}.txt"
                files[name] = b"new\n"
                _write(root, name, files[name])
            elif action == "delete":
                name = rng.choice(sorted(n for n in files if n.startswith("big/")))
                del files[name]
                os.unlink(os.path.join(root, name))
            elif action == "prune":
                for gone in cp.prune(keep_latest=rng.randint(1, 4),
                                     collect=rng.random() < 0.5).removed:
                    expected.pop(gone, None)
                continue
            else:
                cp.gc(grace_seconds=0)
                continue
            expected[cp.create(reason="turn").id] = dict(files)
        cp.gc(grace_seconds=0)
        assert cp.fsck(full=True).ok
        objects = cp._ws.objects
        objects.forget_cached()
        deltas = 0
        for record in cp.history():
            tree = _subtree(objects, record.tree, b"big")
            assert len(read_chain(objects.backend, tree)) <= cp.config.delta_chain + 1
            deltas += objects.backend.get(tree)[4] == codec.CODEC_DELTA
        for ident, contents in expected.items():
            cp.restore(ident, _QUIET)
            on_disk = {os.path.relpath(os.path.join(d, f), root)
                       for d, _, names in os.walk(root) for f in names} - {
                ".ckpt/workspace", ".ckpt/.gitignore"}
            assert on_disk == set(contents), ident
            for name, data in contents.items():
                assert _read(root, name) == data, (ident, name)
    if len(expected) > 2:
        assert deltas, "every big tree was stored whole"


_ckpt = h.ckpt_cli


def test_a_damaged_base_tree_fails_a_dependents_restore_with_exit_5(ws: Path) -> None:
    root = os.path.realpath(ws)
    _fill(root, random.Random(9))
    with Checkpoints.init(root) as cp:
        first = cp.create()
        _write(root, "big/f00001.txt", b"edited\n")
        second = cp.create(reason="turn")
        objects = cp._ws.objects
        base = _subtree(objects, first.tree, b"big")
        dependent = _subtree(objects, second.tree, b"big")
        assert codec.delta_header(objects.backend.get(dependent))[0] == base
        h.flip_packed_byte(objects.backend, base)
    # A workspace edit inside big/: the restore must read the dependent tree to undo it.
    _write(root, "big/f00002.txt", b"unsaved-but-kept\n")
    restore = _ckpt(root, "restore", second.id, "--no-save")
    assert restore.returncode == 5, (restore.stdout, restore.stderr)
    assert "corrupt" in restore.stderr
    assert _read(root, "big/f00002.txt") == b"unsaved-but-kept\n"  # nothing torn written
    fsck = _ckpt(root, "fsck", "--full", "--json")
    assert fsck.returncode == 5, fsck.stderr
    assert second.id in fsck.stdout
