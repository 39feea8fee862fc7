"""A shared store, a workspace moved away, and a new workspace made at its old path before the
moved one is opened again: each keeps exactly its own history (records carry the root path,
so the path's previous owner's records are parked before the newcomer takes the path).
"""

from __future__ import annotations

import os
from pathlib import Path

from ckpt.checkpoints.service import Checkpoints


def _workspace(path: Path, text: str) -> str:
    path.mkdir(parents=True)
    (path / "a.txt").write_text(text)
    return str(path.resolve())


def test_a_new_workspace_at_a_moved_ones_old_path_keeps_histories_apart(
        tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    p = _workspace(tmp_path / "p", "first\n")
    with Checkpoints.init(p, store) as cp:
        moved = [cp.create(label=f"x{i}").id for i in range(2)]
    q = str(tmp_path / "q")
    os.rename(p, q)
    _workspace(tmp_path / "p", "second\n")
    with Checkpoints.init(p, store) as cp:
        newcomer = [cp.create(label="y").id]
        assert [r.id for r in cp.history()] == newcomer
    with Checkpoints.open(q, store) as cp:
        assert [r.id for r in cp.history()] == moved
        assert cp.moved_from is not None
        cp.restore(moved[0])
        assert Path(q, "a.txt").read_text() == "first\n"
        check = cp.fsck()
        assert check.ok and not check.damaged_files, check
    with Checkpoints.open(p, store) as cp:
        assert [r.id for r in cp.history()] == newcomer


def test_a_workspace_moved_onto_another_moved_ones_old_path_keeps_histories_apart(
        tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    a = _workspace(tmp_path / "a", "a\n")
    b = _workspace(tmp_path / "b", "b\n")
    with Checkpoints.init(a, store) as cp:
        a_ids = [cp.create().id]
    with Checkpoints.init(b, store) as cp:
        b_ids = [cp.create().id]
    os.rename(a, str(tmp_path / "a2"))
    os.rename(b, a)  # b takes a's old path before a is opened again
    with Checkpoints.open(a, store) as cp:
        assert [r.id for r in cp.history()] == b_ids
    with Checkpoints.open(str(tmp_path / "a2"), store) as cp:
        assert [r.id for r in cp.history()] == a_ids
