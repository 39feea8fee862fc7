"""A restore's staging directory in the workspace (`.ckpt-staging-<hex>`, used when the store
is on another file system, left behind by a kill) is never captured as workspace content
(issue 28.14, capture side)."""

from __future__ import annotations

import os
from pathlib import Path

import fault_helpers as h


def _plant(root: Path, token: str) -> Path:
    staging = root / f".ckpt-staging-{token}"
    staging.mkdir()
    (staging / "0").write_bytes(b"staged content\n")
    (staging / "1").write_bytes(b"replaced content\n")
    return staging


def test_a_left_over_staging_directory_is_not_captured(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    assert h.ckpt(str(root), "init").code == 0
    first = h.ckpt(str(root), "create", "--json")
    assert first.code == 0, first
    _plant(root, "0123456789ab")
    run = h.ckpt(str(root), "create", "--json")
    assert run.code == 0, run
    shown = h.ckpt(str(root), "show", run.json()["id"], "--json").json()
    assert [f["path"] for f in shown["files"]] == ["a.txt"]
    diff = h.ckpt(str(root), "diff", first.json()["id"], "--json")
    assert diff.code == 0 and diff.json() == [], diff
    h.tally("capture", staging_left_over=1)


def test_a_name_only_like_staging_is_captured(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / ".ckpt-staging-notes").write_text("mine\n")  # not "<prefix><hex>"
    (root / "sub").mkdir()
    _plant(root / "sub", "00ff00ff00ff")  # staging is only ever made at the root
    assert h.ckpt(str(root), "init").code == 0
    run = h.ckpt(str(root), "create", "--json")
    shown = h.ckpt(str(root), "show", run.json()["id"], "--json").json()
    assert sorted(f["path"] for f in shown["files"]) == [
        ".ckpt-staging-notes", "sub/.ckpt-staging-00ff00ff00ff/0",
        "sub/.ckpt-staging-00ff00ff00ff/1"]


def test_a_staging_directory_is_not_captured_from_the_api_either(tmp_path: Path) -> None:
    from ckpt.checkpoints.service import Checkpoints

    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    with Checkpoints.init(os.fspath(root)) as cp:
        cp.create()
        _plant(root, "abcdefabcdef")
        record = cp.create()
        assert [f.path for f in cp.files(record.id)] == [b"a.txt"]
