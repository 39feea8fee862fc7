"""A workspace on a file system that keeps whole seconds: ext4 made with 128-byte inodes (as
HFS+ and FAT, which keeps two, would be). A same-size rewrite within the second of the last
checkpoint leaves size, mtime and ctime as they were: only the racy rule can catch it
(statcache.is_racy). Before that rule knew such stamps, every one of 12 rewrites was missed.

Root only (a loop-mounted image); skipped where it cannot be mounted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest

from checkpoints.service import Checkpoints

pytestmark = pytest.mark.skipif(
    not (h.can_mount() and hasattr(os, "memfd_create") and shutil.which("losetup")
         and shutil.which("mkfs.ext4")),
    reason="needs root, memfd, losetup, mkfs.ext4")


@contextmanager
def whole_second_fs(mnt: Path) -> Iterator[Path]:
    fd = os.memfd_create("ckpt-coarse-stamps")
    os.ftruncate(fd, 32 << 20)
    image = f"/proc/{os.getpid()}/fd/{fd}"
    loop = ""
    try:
        subprocess.run(["mkfs.ext4", "-q", "-F", "-I", "128", image], check=True,
                       capture_output=True)
        loop = subprocess.run(["losetup", "-f", "--show", image], check=True,
                              capture_output=True, text=True).stdout.strip()
        mnt.mkdir(parents=True, exist_ok=True)
        mounted = subprocess.run(["mount", "-t", "ext4", loop, str(mnt)], check=False,
                                 capture_output=True)
        if mounted.returncode:
            pytest.skip(f"cannot mount a loop device here: {mounted.stderr.decode().strip()}")
        try:
            yield mnt
        finally:
            subprocess.run(["umount", str(mnt)], check=False, capture_output=True)
    finally:
        if loop:
            subprocess.run(["losetup", "-d", loop], check=False, capture_output=True)
        os.close(fd)


def test_a_same_second_rewrite_on_a_whole_second_file_system_is_caught(tmp_path: Path) -> None:
    with whole_second_fs(tmp_path / "mnt") as mnt:
        root = mnt / "ws"
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
