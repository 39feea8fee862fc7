"""A restore into another directory killed (SIGKILL) at seeded moments: the workspace and
its store are exactly as they were (only the catalog may have gained the event), `fsck
--full` is clean, and the partial directory is refused by the next `restore --target` until
it is emptied; a restore into a fresh directory is then whole."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from soak import scale

CATALOG = {".ckpt/catalog.db", ".ckpt/catalog.db-wal", ".ckpt/catalog.db-shm"}


def _state(root: Path) -> dict[str, tuple[Any, ...]]:
    out: dict[str, tuple[Any, ...]] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            st = os.lstat(path)
            content: Any = None
            if stat.S_ISREG(st.st_mode):
                with open(path, "rb") as stream:
                    content = hashlib.sha256(stream.read()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                content = os.readlink(path)
            out[os.path.relpath(path, root)] = (st.st_mode, content, st.st_mtime_ns, st.st_ino)
    # The store's own directory changes with the catalog's write-ahead log files.
    out[".ckpt"] = out[".ckpt"][:2]
    return {k: v for k, v in out.items() if k not in CATALOG}


def _ckpt(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ckpt", "--root", str(root), *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_restore_target_killed_at_any_moment_leaves_the_workspace_as_it_was(
        tmp_path: Path) -> None:
    root = tmp_path / "ws"
    for d in range(20):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(30):
            (root / f"d{d}" / f"f{f}.txt").write_bytes(os.urandom(64) * (f + 1))
    (root / "link").symlink_to("d0/f0.txt")
    assert _ckpt(root, "init").returncode == 0
    made = _ckpt(root, "create")
    assert made.returncode == 0, made.stderr
    ref = made.stdout.strip()
    original = (root / "d0" / "f0.txt").read_bytes()
    (root / "d0" / "f0.txt").write_text("changed since\n")
    assert _ckpt(root, "create").returncode == 0
    started = time.monotonic()
    assert _ckpt(root, "restore", ref, "--target", str(tmp_path / "timing")).returncode == 0
    whole = time.monotonic() - started
    before = _state(root)
    rng = random.Random(2626)
    killed = 0
    for attempt in range(scale(4, 20)):
        dest = tmp_path / f"out{attempt}"
        child = subprocess.Popen([sys.executable, "-m", "ckpt", "--root", str(root),
                                  "restore", ref, "--target", str(dest)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.0, whole))
        child.send_signal(signal.SIGKILL)
        child.communicate(timeout=60)
        assert _state(root) == before, attempt
        partial = dest.exists() and bool(os.listdir(dest))
        again = _ckpt(root, "restore", ref, "--target", str(dest))
        if child.returncode == 0 or partial:  # a whole or a partial copy: refused
            assert again.returncode == 1 and "not empty" in again.stderr, again
            if child.returncode != 0:
                shutil.rmtree(dest)
                again = _ckpt(root, "restore", ref, "--target", str(dest))
                assert again.returncode == 0, again.stderr
        else:
            assert again.returncode == 0, again.stderr
        assert (dest / "d5" / "f3.txt").read_bytes() == (root / "d5" / "f3.txt").read_bytes()
        assert (dest / "d0" / "f0.txt").read_bytes() == original
        assert os.readlink(dest / "link") == "d0/f0.txt"
        assert not [n for n in os.listdir(dest) if n.startswith(".ckpt-staging-")]
        killed += child.returncode != 0
    assert killed  # at least one kill landed inside the restore
    fsck = _ckpt(root, "fsck", "--full")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert _state(root) == before
