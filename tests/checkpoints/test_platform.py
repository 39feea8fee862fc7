"""The library on a platform it does not run on, and `check_store` (checkpoints/platform.py,
checkpoints/store_setup.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ckpt.checkpoints import Checkpoints, check_store
from ckpt.objstore.errors import StoreNotFound

# Windows as the library would meet it: no fcntl, none of the POSIX-only open flags.
AS_ON_WINDOWS = """\
import os, sys
sys.modules["fcntl"] = None
for flag in ("O_NOFOLLOW", "O_DIRECTORY", "O_CLOEXEC"):
    delattr(os, flag)
sys.platform = "win32"
from ckpt import NotInitialized, UnsupportedPlatform, display_text
for name in ("Checkpoints", "read_config", "IgnoreRules"):
    try:
        __import__("ckpt", fromlist=[name])
    except UnsupportedPlatform as exc:
        print(name, exc)
"""


def test_on_windows_every_library_name_is_refused_and_the_exceptions_import() -> None:
    done = subprocess.run([sys.executable, "-c", AS_ON_WINDOWS], capture_output=True, text=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    refusal = "unsupported platform win32: ckpt runs on Linux and macOS"
    assert done.stdout.splitlines() == [f"{name} {refusal}"
                                        for name in ("Checkpoints", "read_config", "IgnoreRules")]


def test_check_store_accepts_an_initialized_store_only(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFound):
        check_store(tmp_path / ".ckpt")
    Checkpoints.init(tmp_path).close()
    check_store(tmp_path / ".ckpt")
    with pytest.raises(StoreNotFound):
        check_store(tmp_path)  # the root is not the store


def test_check_store_writes_nothing(tmp_path: Path) -> None:
    Checkpoints.init(tmp_path).close()
    store = tmp_path / ".ckpt"
    before = {p: p.stat().st_mtime_ns for p in store.rglob("*")}
    check_store(store)
    assert {p: p.stat().st_mtime_ns for p in store.rglob("*")} == before
