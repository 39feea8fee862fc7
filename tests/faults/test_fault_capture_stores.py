"""Every ckpt store under a root is left out of a checkpoint, like `.git/` (issue 28.10,
capture side): a nested workspace's `.ckpt/`, a renamed store, the root's own store reached
through a symlink. They are recognised by their marker files (`format` + `catalog.db` or
`objects/`), and restoring the outer root never writes into or deletes from them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import fault_helpers as h
import pytest


def _files(root: str, ref: str, store: str | None = None) -> list[str]:
    run = h.ckpt(root, "show", ref, "--json", store=store)
    assert run.code == 0, run
    return [f["path"] for f in run.json()["files"]]


def _create(root: str, store: str | None = None) -> str:
    run = h.ckpt(root, "create", "--json", store=store)
    assert run.code == 0, run
    return str(run.json()["id"])


def _nested(tmp_path: Path) -> tuple[str, str]:
    """An outer workspace holding a project with a store of its own, with checkpoints."""
    outer = tmp_path / "outer"
    inner = outer / "vendor" / "inner"
    (inner / "src").mkdir(parents=True)
    (inner / "src" / "lib.py").write_text("x = 1\n")
    (outer / "main.py").write_text("print()\n")
    assert h.ckpt(str(inner), "init").code == 0
    _create(str(inner))
    return str(outer), str(inner)


def test_a_nested_workspace_store_is_not_captured(tmp_path: Path) -> None:
    outer, _inner = _nested(tmp_path)
    assert h.ckpt(outer, "init").code == 0
    ref = _create(outer)
    assert sorted(_files(outer, ref)) == ["main.py", "vendor/inner/src/lib.py"]
    h.tally("capture", nested_store=1)


def test_a_renamed_store_is_not_captured_and_tracks_its_markers(tmp_path: Path) -> None:
    outer, inner = _nested(tmp_path)
    os.rename(os.path.join(inner, ".ckpt"), os.path.join(inner, "history"))
    assert h.ckpt(outer, "init").code == 0
    first = _create(outer)
    assert "vendor/inner/history/format" not in _files(outer, first)
    # A write into the store, then one beside it: the next checkpoint still leaves it out
    # (the stat cache does not keep a stale answer either way).
    assert h.ckpt(inner, "create", store=os.path.join(inner, "history")).code == 0
    (Path(outer) / "new.txt").write_text("n\n")
    second = _create(outer)
    assert sorted(_files(outer, second)) == ["main.py", "new.txt", "vendor/inner/src/lib.py"]
    # Without its format file (and the `.gitignore` a store keeps so git leaves it alone) it
    # is no store: an ordinary directory, captured.
    os.remove(os.path.join(inner, "history", "format"))
    os.remove(os.path.join(inner, "history", ".gitignore"))
    third = _create(outer)
    assert "vendor/inner/history/catalog.db" in _files(outer, third)
    h.tally("capture", renamed_store=1)


def test_a_directory_with_only_some_markers_is_captured(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "docs" / "objects").mkdir(parents=True)
    (root / "docs" / "format").write_text("a4\n")  # not objstore's format tag
    (root / "docs" / "objects" / "x").write_text("x\n")
    assert h.ckpt(str(root), "init").code == 0
    ref = _create(str(root))
    assert sorted(_files(str(root), ref)) == ["docs/format", "docs/objects/x"]


def test_the_store_reached_through_a_symlink_is_not_captured(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "a.txt").write_text("a\n")
    link = tmp_path / "link"
    link.symlink_to(real)
    store = str(link / ".ckpt")  # the root's own store, named through the symlink
    assert h.ckpt(str(real), "init", store=store).code == 0
    ref = _create(str(real), store=store)
    assert _files(str(real), ref, store=store) == ["a.txt"]
    # A renamed store inside the root, named through the symlink too.
    other = str(link / "elsewhere")
    assert h.ckpt(str(real), "init", store=other).code == 0
    ref = _create(str(real), store=other)
    assert _files(str(real), ref, store=other) == ["a.txt"]
    h.tally("capture", store_through_symlink=1)


def test_restoring_the_outer_root_leaves_the_nested_store_alone(tmp_path: Path) -> None:
    outer, inner = _nested(tmp_path)
    assert h.ckpt(outer, "init").code == 0
    ref = _create(outer)
    # The inner workspace moves on: a second checkpoint (new pack, catalog rows).
    (Path(inner) / "src" / "lib.py").write_text("x = 2\n")
    assert h.ckpt(inner, "create").code == 0
    before = h.tree_state(os.path.join(inner, ".ckpt"), exclude=())
    run = h.ckpt(outer, "restore", ref, "--json")
    assert run.code == 0, run
    assert (Path(inner) / "src" / "lib.py").read_text() == "x = 1\n"
    assert h.tree_state(os.path.join(inner, ".ckpt"), exclude=()) == before
    fsck = h.ckpt(inner, "fsck", "--full")
    assert fsck.code == 0, fsck
    listed = json.loads(h.ckpt(inner, "list", "--json").out)
    assert len(listed) == 2
    h.tally("capture", restore_beside_nested_store=1)


def test_a_tracked_path_inside_a_nested_store_is_not_captured(tmp_path: Path) -> None:
    outer, _inner = _nested(tmp_path)
    assert h.ckpt(outer, "init").code == 0
    assert h.ckpt(outer, "track", "main.py", "vendor/inner/.ckpt/catalog.db").code == 0
    ref = _create(outer)
    assert _files(outer, ref) == ["main.py"]


@pytest.mark.parametrize("marker", ["catalog.db", "objects"])
def test_either_second_marker_makes_a_store(tmp_path: Path, marker: str) -> None:
    root = tmp_path / "ws"
    store = root / "s"
    store.mkdir(parents=True)
    (root / "keep.txt").write_text("k\n")
    (store / "format").write_text("ckpt-objstore 1\n")
    if marker == "objects":
        (store / "objects").mkdir()
        (store / "objects" / "blob").write_text("b\n")
    else:
        (store / "catalog.db").write_text("db\n")
    assert h.ckpt(str(root), "init").code == 0
    ref = _create(str(root))
    assert _files(str(root), ref) == ["keep.txt"]


def test_restore_never_writes_into_a_store_an_old_checkpoint_holds(tmp_path: Path) -> None:
    """A checkpoint taken while a directory was not yet a store holds its files: restoring
    it writes none of them back into the store (and restores the rest)."""
    root = tmp_path / "ws"
    (root / "s" / "objects").mkdir(parents=True)
    (root / "s" / "objects" / "old").write_text("old pack\n")
    (root / "s" / "catalog.db").write_text("db\n")
    (root / "a.txt").write_text("a\n")
    assert h.ckpt(str(root), "init").code == 0
    ref = _create(str(root))
    assert "s/objects/old" in _files(str(root), ref)
    (root / "s" / "format").write_text("ckpt-objstore 1\n")  # now it is a store
    (root / "s" / "objects" / "old").unlink()
    (root / "a.txt").unlink()
    before = h.tree_state(str(root / "s"), exclude=())
    run = h.ckpt(str(root), "restore", ref, "--json")
    assert run.code == 0, run
    assert (root / "a.txt").read_text() == "a\n"
    assert h.tree_state(str(root / "s"), exclude=()) == before
    h.tally("capture", restore_into_store_refused=1)


def test_a_store_named_through_a_symlink_in_the_root_is_not_captured(tmp_path: Path) -> None:
    """`<root>/.ckpt` a symlink to a store elsewhere: neither the link nor the store is
    workspace content."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    elsewhere = tmp_path / "data" / "store"
    elsewhere.parent.mkdir()
    assert h.ckpt(str(root), "init", store=str(elsewhere)).code == 0
    shutil.rmtree(root / ".ckpt")  # init's link to the store, replaced by a symlink
    (root / ".ckpt").symlink_to(elsewhere)
    ref = _create(str(root), store=str(root / ".ckpt"))
    assert _files(str(root), ref, store=str(root / ".ckpt")) == ["a.txt"]
