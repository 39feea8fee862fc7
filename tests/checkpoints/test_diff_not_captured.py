"""A path a checkpoint could not capture shows in `diff` as "S" with its reason (issue 27.5,
diff side): a file over max_file_size created (or grown) after a checkpoint, through the API
and the CLI, in text and JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

from click.testing import CliRunner

from ckpt.checkpoints.config import StoreConfig, write_config
from ckpt.checkpoints.diff.trees import Change, with_not_captured
from ckpt.checkpoints.model import SkippedPath
from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.service import Checkpoints
from ckpt.cli.main import cli


def _small_limit(ws: Path) -> Checkpoints:
    cp = Checkpoints.init(os.fspath(ws))
    write_config(cp.store_dir, StoreConfig(max_file_size=100))
    cp.close()
    return Checkpoints.open(os.fspath(ws))


def _summary(changes: list[Change]) -> list[tuple[bytes, str, str | None]]:
    return [(c.path, c.change, c.reason) for c in changes]


def test_a_large_file_created_after_a_checkpoint_shows_as_not_captured(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_bytes(b"a\n")
    with _small_limit(ws) as cp:
        first = cp.create()
        (ws / "src" / "big.bin").write_bytes(b"x" * 1000)
        (ws / "src" / "b.py").write_bytes(b"b\n")
        assert _summary(cp.diff(first.id)) == [
            (b"src/b.py", "A", None), (b"src/big.bin", "S", "too-large")]
        second = cp.create()
        assert _summary(cp.diff(first.id, second.id)) == [
            (b"src/b.py", "A", None), (b"src/big.bin", "S", "too-large")]
        # Skipped at both: nothing new to say.
        assert cp.diff(second.id) == []
        assert cp.diff(second.id, cp.create().id) == []


def test_a_file_grown_over_the_limit_is_not_reported_deleted(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "log.txt").write_bytes(b"short\n")
    with _small_limit(ws) as cp:
        first = cp.create()
        (ws / "log.txt").write_bytes(b"y" * 500)
        assert _summary(cp.diff(first.id)) == [(b"log.txt", "S", "too-large")]


def test_cli_diff_shows_not_captured_in_text_and_json(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_bytes(b"a\n")
    with _small_limit(ws) as cp:
        first = cp.create().id
    (ws / "huge.dat").write_bytes(b"z" * 1000)
    runner = CliRunner()
    text = runner.invoke(cli, ["--root", os.fspath(ws), "diff", first])
    assert text.exit_code == 0, text.output
    assert text.stdout == "S huge.dat (too-large)\n"
    as_json = runner.invoke(cli, ["--root", os.fspath(ws), "diff", first, "--json"])
    assert json.loads(as_json.stdout) == [
        {"path": "huge.dat", "change": "S", "reason": "too-large"}]


def test_with_not_captured_keeps_tree_order() -> None:
    changes = [Change(RelPath(b"a/b"), "A", None, None), Change(RelPath(b"a.txt"), "D", None, None)]
    merged = with_not_captured(changes, [], [SkippedPath(RelPath(b"a/c"), "special"),
                                             SkippedPath(RelPath(b"a.txt"), "too-large")])
    assert _summary(merged) == [(b"a/b", "A", None), (b"a/c", "S", "special"),
                                (b"a.txt", "S", "too-large")]
