"""A long-lived `Checkpoints` follows the configuration file: `ckpt config set` made by another
process (or another `Checkpoints`) applies to its next call, as it does to a new one. The
resident server keeps its services open across calls, so without this a served snapshot
would go on with the settings the server read when it first opened the store."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ckpt.checkpoints import Checkpoints
from ckpt.checkpoints.config import read_config, write_config


def test_a_config_change_by_another_writer_applies_to_an_open_service(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "small.txt").write_text("ok\n")
    Checkpoints.init(root).close()
    with Checkpoints.open(root) as cp:
        first = cp.create()
        assert first.stats.skipped == 0
        store = cp.store_dir
        write_config(store, dataclasses.replace(read_config(store), max_file_size=40))
        (root / "big.txt").write_text("longer than the forty bytes the store now allows\n")
        second = cp.create()
        assert cp.config.max_file_size == 40
        assert second.stats.skipped == 1
        assert [p.path for p in second.skipped] == [b"big.txt"]


def test_a_config_set_in_the_api_holds_until_the_file_changes(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "big.txt").write_text("longer than the forty bytes allowed by the set value\n")
    Checkpoints.init(root).close()
    with Checkpoints.open(root) as cp:
        cp.config = dataclasses.replace(cp.config, max_file_size=40)
        assert cp.create().stats.skipped == 1  # the value set here, not the file's
        write_config(cp.store_dir, dataclasses.replace(read_config(cp.store_dir),
                                                       max_file_size=1 << 20))
        (root / "big.txt").write_text("changed, and the file now allows it\n" * 3)
        assert cp.create().stats.skipped == 0  # the file changed: it is read again
