"""Helpers of the push/pull tests (tests/remote/test_sync*.py, test_cli_remote*.py): seeded
workspaces, an agent-like turn, reading a tree back, and damaging a remote pack through the raw
S3 client of tests/seaweed.py (never through ckpt's own transport)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from seaweed import Bucket

SKIP = {".ckpt"}


def make_tree(root: Path, rng: random.Random, files: int = 40) -> None:
    """`files` regular files of 50 B..16 KiB in a few directories, one executable, one
    symlink; seeded."""
    root.mkdir(parents=True, exist_ok=True)
    for index in range(files):
        path = root / f"d{index % 5}" / f"f{index:03}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(50, 16384)))
    tool = root / "tool.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    (root / "link").symlink_to("d0/f000.txt")


def agent_turn(root: Path, rng: random.Random, *, edits: int = 8, new: int = 3,
               deleted: int = 2) -> None:
    """Edit, add and delete files as an agent turn does (seeded)."""
    existing = sorted(p for p in root.rglob("*.txt") if ".ckpt" not in p.parts)
    rng.shuffle(existing)
    for path in existing[:edits]:
        path.write_bytes(path.read_bytes()[:100] + rng.randbytes(200))
    for path in existing[edits:edits + deleted]:
        path.unlink()
    for index in range(new):
        path = root / "new" / f"n{rng.randrange(10**6)}-{index}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(100, 4000)))


def read_tree(root: Path) -> dict[str, Any]:
    """Every path below `root` but the store: file bytes and x bit, link targets, dirs."""
    found: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP or Path(dirpath) != root]
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel in SKIP:
                continue
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = ("dir",)
            else:
                found[rel] = ("file", path.read_bytes(), bool(path.stat().st_mode & 0o100))
    return found


def pack_keys(bucket: Bucket) -> list[str]:
    return sorted(k for k in bucket.keys("packs/"))


def damage_pack(bucket: Bucket, key: str, *, how: str) -> None:
    """Flip one byte in the middle of a pack's object data, or cut the pack short."""
    data = bytearray(bucket.raw.get_object(bucket.name, key))
    if how == "flip":
        data[len(data) // 2] ^= 0x5A
    else:
        del data[len(data) // 2:]
    bucket.raw.put_object(bucket.name, key, bytes(data))


def run_ckpt(root: Path, *args: str, env: dict[str, str] | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`python -m ckpt --root ROOT ARGS...` in a process of its own (the test's environment,
    with `env` over it)."""
    full = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "ckpt", "--root", str(root), *args],
                          capture_output=True, text=True, timeout=timeout, env=full,
                          check=False)
