"""Linux and macOS are supported; Windows is refused with one line (exit 1), never an ImportError.

The Windows runs are simulated: `sys.platform` is patched, and in a subprocess the POSIX parts
the library needs at import time (`fcntl`, `os.O_NOFOLLOW`, ...) are taken away first, so an
import that reached them would fail the test.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckpt.checkpoints import CheckpointError, UnsupportedPlatform, check_platform

CkptIn = Callable[..., Any]
Env = Callable[..., dict[str, str]]
REFUSAL = ("ckpt: error: unsupported platform win32: ckpt runs on Linux and macOS "
           "(hint: on Windows, run ckpt inside WSL)\n")

# Windows as ckpt would meet it: no fcntl, none of the POSIX-only open flags.
AS_ON_WINDOWS = """\
import os, sys
sys.modules["fcntl"] = None
for flag in ("O_NOFOLLOW", "O_DIRECTORY", "O_CLOEXEC"):
    delattr(os, flag)
from ckpt.cli.main import run
sys.platform = "win32"  # after click's import, which picks its own Windows code paths
code = run(sys.argv[1:])
library = sorted(m for m in sys.modules if m.startswith(("ckpt.objstore", "ckpt.checkpoints.")))
print(code, library, file=sys.stderr)
"""


@pytest.mark.parametrize("platform", ["linux", "darwin", "freebsd14"])
def test_posix_platforms_pass(platform: str) -> None:
    check_platform(platform)


def test_windows_is_refused_with_a_checkpoint_error() -> None:
    with pytest.raises(UnsupportedPlatform) as raised:
        check_platform("win32")
    assert isinstance(raised.value, CheckpointError)
    assert (raised.value.platform, str(raised.value)) == (
        "win32", "unsupported platform win32: ckpt runs on Linux and macOS")


@pytest.mark.in_process("patches sys.platform in this process; a server's is Linux")
@pytest.mark.parametrize("args", [["init"], ["create"], ["list"], ["config", "list"]])
def test_cli_refuses_windows_before_touching_anything(ws: Path, ckpt_in: CkptIn,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      args: list[str]) -> None:
    monkeypatch.setattr(sys, "platform", "win32")
    run = ckpt_in(*args)
    assert (run.code, run.stdout, run.stderr) == (1, "", REFUSAL)
    assert not (ws / ".ckpt").exists()


def test_without_fcntl_help_works_and_init_is_refused_in_one_line(ws: Path, env_for: Env) -> None:
    def ckpt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", AS_ON_WINDOWS, *args], cwd=ws,
                              env=env_for(), capture_output=True, text=True, timeout=60,
                              check=False)

    shown = ckpt("--help")
    # The exceptions and the check are all of the library that loads, there or anywhere.
    light = "['ckpt.checkpoints.errors', 'ckpt.checkpoints.platform']"
    assert shown.stdout.startswith("Usage: ckpt")
    assert shown.stderr == f"0 {light}\n"
    for args in (["init"], ["create"], ["config", "list"]):
        refused = ckpt(*args)
        assert (refused.stdout, refused.stderr) == ("", f"{REFUSAL}1 {light}\n"), args
    assert not (ws / ".ckpt").exists()
