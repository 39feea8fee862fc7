"""Python API paths are relative to the workspace root, never to the process's current directory
(issue 27.3). The CLI keeps git's "relative to where you stand" by passing its cwd."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.checkpoints import RestoreOptions
from ckpt.checkpoints.service import Checkpoints


@pytest.fixture()
def in_sub(ws: Path, cp: Checkpoints) -> Iterator[Path]:
    """The process stands in `<root>/src` (restored at teardown)."""
    (ws / "src").mkdir()
    (ws / "src" / "x.py").write_bytes(b"one\n")
    before = os.getcwd()
    os.chdir(ws / "src")
    try:
        yield ws / "src"
    finally:
        os.chdir(before)


def test_track_and_untrack_are_relative_to_the_root(in_sub: Path, cp: Checkpoints) -> None:
    assert cp.track("src/x.py") == (b"src/x.py",)
    assert cp.untrack("src/x.py") == ()
    assert cp.track(os.fspath(in_sub / "x.py")) == (b"src/x.py",)  # absolute: as it is


def test_track_with_cwd_is_relative_to_it(in_sub: Path, cp: Checkpoints) -> None:
    assert cp.track("x.py", cwd=os.fspath(in_sub)) == (b"src/x.py",)
    assert cp.untrack("x.py", cwd=os.fspath(in_sub)) == ()


def test_create_paths_are_relative_to_the_root(in_sub: Path, cp: Checkpoints) -> None:
    record = cp.create(paths=["src/x.py"])
    assert record.paths == (b"src/x.py",)
    assert cp.read_file(record.id, "src/x.py") == b"one\n"
    assert [f.path for f in cp.files(record.id)] == [b"src/x.py"]
    assert cp.create(paths=["x.py"], cwd=os.fspath(in_sub)).paths == (b"src/x.py",)


def test_restore_paths_are_relative_to_the_root(in_sub: Path, cp: Checkpoints) -> None:
    record = cp.create()
    (in_sub / "x.py").write_bytes(b"two\n")
    (in_sub.parent / "top.txt").write_bytes(b"new\n")
    report = cp.restore(record.id, RestoreOptions(save=False, paths=("src/x.py",)))
    assert report.written == 1
    assert (in_sub / "x.py").read_bytes() == b"one\n"
    assert (in_sub.parent / "top.txt").exists()  # outside the path: left alone
    (in_sub / "x.py").write_bytes(b"three\n")
    cp.restore(record.id, RestoreOptions(save=False, paths=("x.py",)), cwd=os.fspath(in_sub))
    assert (in_sub / "x.py").read_bytes() == b"one\n"


def test_read_and_copy_file_are_relative_to_the_root(in_sub: Path, cp: Checkpoints) -> None:
    record = cp.create()
    assert cp.read_file(record.id, "src/x.py") == b"one\n"
    out = io.BytesIO()
    assert cp.copy_file(record.id, "src/x.py", out) == 4
    assert out.getvalue() == b"one\n"


def test_api_from_a_subfolder_in_a_fresh_process(ws: Path, cp: Checkpoints) -> None:
    """The issue's reproduction, in its own process started in the subfolder."""
    (ws / "src").mkdir()
    (ws / "src" / "x.py").write_bytes(b"one\n")
    script = (
        "import sys\n"
        "from ckpt.checkpoints import Checkpoints\n"
        "cp = Checkpoints.open(sys.argv[1])\n"
        "print(b','.join(cp.track('src/x.py')).decode())\n"
        "r = cp.create(paths=['src/x.py'])\n"
        "print(b','.join(r.paths).decode())\n"
        "print(cp.read_file(r.id, 'src/x.py').decode().strip())\n"
        "cp.close()\n"
    )
    run = subprocess.run([sys.executable, "-c", script, os.fspath(ws)], cwd=ws / "src",
                         capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["src/x.py", "src/x.py", "one"]
