"""`Checkpoints.patch` (the Python API helper `agents` builds on) and `history(tool_call_id=)`."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt.checkpoints import Checkpoints, FilePatch


@pytest.fixture
def cp(tmp_path: Path) -> Checkpoints:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("def main():\n    return 1\n")
    (root / "README").write_text("readme\n")
    with Checkpoints.init(root) as opened:
        yield opened


def test_patch_against_the_working_tree_and_between_checkpoints(cp: Checkpoints) -> None:
    first = cp.create(tool_call_id="call_1", reason="pre-tool").id
    Path(cp.root, "src", "app.py").write_text("def main():\n    return 2\n")
    Path(cp.root, "README").unlink()
    patches = cp.patch(first)
    assert [(p.path, p.change) for p in patches] == [(b"README", "D"), (b"src/app.py", "M")]
    assert all(isinstance(p, FilePatch) for p in patches)
    assert patches[1].text == (b"diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n"
                               b"+++ b/src/app.py\n@@ -1,2 +1,2 @@\n def main():\n"
                               b"-    return 1\n+    return 2\n")
    second = cp.create(tool_call_id="call_1", reason="post-tool").id
    assert cp.patch(first, second) == patches
    assert cp.patch(second) == []
    assert [p.path for p in cp.patch(first, second, paths=["src"])] == [b"src/app.py"]
    assert [p.path for p in cp.patch(first, second, paths=["README", "nothing"])] == [b"README"]
    zero = cp.patch(first, second, paths=["src/app.py"], context=0)[0]
    assert b"@@ -2 +2 @@ def main():\n-    return 1\n+    return 2\n" in zero.text
    with pytest.raises(ValueError, match="context"):
        cp.patch(first, second, context=-1)


def test_history_filters_on_tool_call_id(cp: Checkpoints) -> None:
    a = cp.create(tool_call_id="call_1").id
    cp.create(tool_call_id="call_2")
    c = cp.create(tool_call_id="call_1").id
    assert [r.id for r in cp.history(tool_call_id="call_1")] == [a, c]
    assert cp.history(tool_call_id="call_9") == []
    assert len(cp.history()) == 3
