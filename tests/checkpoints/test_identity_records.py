"""A moved workspace's re-binding keeps the catalog's row digests and the record files in step
with the rows: `fsck` stays clean, and a catalog lost after the move is rebuilt with the
records under the new root, so the history still follows the workspace.
"""

from __future__ import annotations

import os
from pathlib import Path

from ckpt.checkpoints.service import Checkpoints


def _workspace(path: Path) -> str:
    (path / "src").mkdir(parents=True)
    for i in range(5):
        (path / "src" / f"f{i}.py").write_text(f"print({i})\n")
    return str(path.resolve())


def test_a_moved_workspace_keeps_digests_and_record_files_in_step(tmp_path: Path) -> None:
    w1 = _workspace(tmp_path / "w1")
    with Checkpoints.init(w1) as cp:
        ids = [cp.create(label=str(i)).id for i in range(3)]
    w2 = str(tmp_path / "w2")
    os.rename(w1, w2)
    with Checkpoints.open(w2) as cp:
        assert cp.moved_from == w1
        assert [r.id for r in cp.history()] == ids
        assert all(cp.get(i).root == w2 for i in ids)
        check = cp.fsck()
        assert check.ok and not check.damaged_files, check
    os.remove(os.path.join(w2, ".ckpt", "catalog.db"))
    with Checkpoints.open(w2) as cp:
        assert [r.id for r in cp.history()] == ids, "rebuilt from record files of the new root"
