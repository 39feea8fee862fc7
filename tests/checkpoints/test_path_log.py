"""`path_log`: the checkpoints where the entry at a path changed, A/M/D/T, directories by
their subtree, every session's with `all_sessions`, trees loaded once per subtree."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ckpt.checkpoints import Checkpoints, UnsafePath


def _log(cp: Checkpoints, path: str, **kw: Any) -> list[tuple[str, str, str | None]]:
    return [(c.record.label or "", c.change, c.kind) for c in cp.path_log(path, **kw)]


def test_a_file_added_modified_retyped_and_deleted(cp: Checkpoints, ws: Path) -> None:
    cp.create(label="empty")
    (ws / "f").write_text("1")
    cp.create(label="add")
    cp.create(label="same")
    (ws / "f").write_text("2")
    cp.create(label="edit")
    os.chmod(ws / "f", 0o755)
    cp.create(label="chmod")
    (ws / "f").unlink()
    (ws / "f").symlink_to("elsewhere")
    cp.create(label="link")
    (ws / "f").unlink()
    (ws / "f").symlink_to("other")
    cp.create(label="relink")
    (ws / "f").unlink()
    (ws / "f").mkdir()
    (ws / "f" / "x").write_text("x")
    cp.create(label="dir")
    shutil.rmtree(ws / "f")
    cp.create(label="gone")
    cp.create(label="still gone")
    (ws / "f").write_text("back")
    cp.create(label="back")
    assert _log(cp, "f") == [("add", "A", "file"), ("edit", "M", "file"),
                             ("chmod", "M", "executable"), ("link", "T", "symlink"),
                             ("relink", "M", "symlink"), ("dir", "T", "tree"),
                             ("gone", "D", None), ("back", "A", "file")]


def test_a_directory_changes_with_anything_below_it(cp: Checkpoints, ws: Path) -> None:
    (ws / "src" / "deep").mkdir(parents=True)
    (ws / "src" / "deep" / "a").write_text("a")
    (ws / "other").write_text("o")
    cp.create(label="one")
    (ws / "other").write_text("changed elsewhere")
    cp.create(label="elsewhere")
    (ws / "src" / "deep" / "a").write_text("b")
    cp.create(label="deep edit")
    changes = cp.path_log("src")
    assert [(c.record.label, c.change, c.kind) for c in changes] == [
        ("one", "A", "tree"), ("deep edit", "M", "tree")]
    assert changes[-1].size == 1
    assert _log(cp, "src/deep/a") == [("one", "A", "file"), ("deep edit", "M", "file")]
    assert _log(cp, "src/nothing") == []


def test_all_sessions_merges_the_timelines_of_the_root(ws: Path) -> None:
    cp = Checkpoints.init(ws)
    agent = Checkpoints.open(ws, session="agent")
    try:
        (ws / "f").write_text("1")
        cp.create(label="mine")
        (ws / "f").write_text("2")
        agent.create(label="theirs")
        (ws / "f").write_text("3")
        cp.create(label="mine again")
        assert _log(cp, "f") == [("mine", "A", "file"), ("mine again", "M", "file")]
        merged = cp.path_log("f", all_sessions=True)
        assert [(c.record.label, c.change) for c in merged] == [
            ("mine", "A"), ("theirs", "M"), ("mine again", "M")]
        assert merged[1].to_json()["session"] == "agent"
    finally:
        agent.close()
        cp.close()


def test_relative_to_cwd_and_refused_outside_the_root(cp: Checkpoints, ws: Path,
                                                      tmp_path: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "sub" / "f").write_text("x")
    cp.create(label="one")
    assert _log(cp, "f", cwd=str(ws / "sub")) == [("one", "A", "file")]
    assert _log(cp, str(ws / "sub" / "f")) == [("one", "A", "file")]
    with pytest.raises(UnsafePath):
        cp.path_log(str(tmp_path / "elsewhere"))


def test_a_tracked_scope_checkpoint_not_covering_the_path_says_nothing(
        cp: Checkpoints, ws: Path) -> None:
    (ws / "f").write_text("1")
    (ws / "g").write_text("1")
    cp.create(label="whole")
    cp.track("g")
    (ws / "g").write_text("2")
    cp.create(label="tracked g")  # holds g only: f is not known, not deleted
    assert _log(cp, "f") == [("whole", "A", "file")]
    assert _log(cp, "g")[-1] == ("tracked g", "M", "file")


def test_equal_subtrees_are_loaded_once(cp: Checkpoints, ws: Path, count_calls: Any) -> None:
    (ws / "a" / "b").mkdir(parents=True)
    (ws / "a" / "b" / "f").write_text("x")
    for i in range(20):
        (ws / f"top{i % 2}").write_text(str(i))  # a new root tree, the same subtree a/
        cp.create()
    counter = count_calls(cp.objects, "get_tree")
    try:
        assert len(cp.path_log("a/b/f")) == 1
        assert counter.count <= 2 + 20  # each root tree once, a/ and a/b/ once
    finally:
        counter.restore()
