"""Read-only commands work on a full disk: the catalog is read without a new file or page.

The store lives on a small tmpfs (mounted here: root only; skipped where mounting fails), the
workspace elsewhere. After two checkpoints the tmpfs is filled to its last byte; `list`,
`show`, `fsck`, `stats` and `events` must still answer, and a `create` must fail with a message
that names a path, not an internal error.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator

import fault_helpers as h
import pytest


@pytest.fixture
def small_disk(base: str) -> Iterator[str]:
    mount = os.path.join(base, "disk")
    os.mkdir(mount)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mount],
                          capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", mount], capture_output=True, check=False)


def _fill(directory: str) -> None:
    """Write until the file system has no byte left."""
    fd = os.open(os.path.join(directory, "filler"), os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        for size in (1 << 20, 64 << 10, 4096, 512, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    assert os.statvfs(directory).f_bavail < 2


def test_read_only_commands_answer_on_a_full_disk(base: str, small_disk: str) -> None:
    root = os.path.join(base, "ws")
    store = os.path.join(small_disk, "store")
    os.mkdir(root)
    assert h.ckpt(root, "init", store=store).code == h.OK
    ids = []
    for turn in range(2):
        with open(os.path.join(root, "f.txt"), "w") as out:
            out.write(f"turn {turn}\n" * 50)
        run = h.ckpt(root, "create", "--json", store=store)
        assert run.code == h.OK, run
        ids.append(run.json()["id"])
    _fill(small_disk)
    listed = h.ckpt(root, "list", "--json", store=store)
    assert listed.code == h.OK, listed
    assert [r["id"] for r in listed.json()] == ids
    for args in (["show", ids[0]], ["fsck"], ["stats"], ["events"]):
        run = h.ckpt(root, *args, store=store)
        assert run.code == h.OK, (args, run)
    with open(os.path.join(root, "f.txt"), "w") as out:
        out.write("a third state\n" * 100)
    create = h.ckpt(root, "create", store=store)
    assert create.code != h.OK
    assert "internal error" not in create.err
    assert "No space left on device" in create.err and small_disk in create.err, create
    h.tally("catalog full disk", injected=1, passed=1)
