"""A workspace on a file system that keeps whole seconds: ext4 made with 128-byte inodes (as
HFS+ and FAT, which keeps two, would be). A same-size rewrite within the second of the last
checkpoint leaves size, mtime and ctime as they were: only the racy rule can catch it
(statcache.is_racy). Before that rule knew such stamps, every one of 12 rewrites was missed.

Root only (a loop-mounted image); skipped where it cannot be mounted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest

from ckpt.checkpoints.service import Checkpoints

pytestmark = pytest.mark.skipif(not h.SealableDisk.available(),
                                reason="needs root, memfd, losetup, mkfs.ext4")


def test_a_same_second_rewrite_on_a_whole_second_file_system_is_caught(tmp_path: Path) -> None:
    with h.SealableDisk(str(tmp_path / "mnt"), mkfs_options=("-I", "128")) as disk:
        root = Path(disk.mnt) / "ws"
        root.mkdir()
        path = root / "a.txt"
        path.write_bytes(b"version-a")
        assert os.stat(path).st_mtime_ns % 10**9 == 0  # the file system keeps whole seconds
        with Checkpoints.init(root, tmp_path / "store") as cp:
            cp.create()
            for round_ in range(4):
                path.write_bytes(b"before-%02d" % round_)
                cp.create()
                path.write_bytes(b"after--%02d" % round_)  # same size, very likely same second
                record = cp.create()
                assert cp.read_file(record.id, "a.txt") == b"after--%02d" % round_
                time.sleep(0.3)
            # And once the stamps are old enough, an unchanged tree reads nothing.
            time.sleep(2.1)
            cp.create()
            assert cp.create().stats.hashed == 0
