"""`write_atomically`: the destination holds its old or its new content, never a torn one, and
no temp file outlives a failed write."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt.objstore.atomicfile import write_atomically


class _Boom(Exception):
    pass


def _names(directory: Path) -> list[str]:
    return sorted(os.listdir(directory))


def test_write_creates_then_replaces_the_destination(tmp_path: Path) -> None:
    target = tmp_path / "file"
    write_atomically(str(target), b"first", fsync_file=True, fsync_dir=True)
    assert target.read_bytes() == b"first"
    write_atomically(str(target), [b"sec", b"", bytearray(b"on"), memoryview(b"d")],
                     fsync_file=False, fsync_dir=False)
    assert target.read_bytes() == b"second"
    assert _names(tmp_path) == ["file"]


def test_write_sets_the_mode_and_names_its_temp_file_with_the_prefix(tmp_path: Path) -> None:
    seen: list[str] = []

    def replace(src: str, dst: str) -> None:
        seen.extend(_names(tmp_path))
        os.replace(src, dst)

    old_umask = os.umask(0o022)
    try:
        write_atomically(str(tmp_path / "obj"), b"x", fsync_file=False, fsync_dir=False,
                         mode=0o444, temp_prefix="part-", replace=replace)
    finally:
        os.umask(old_umask)
    assert len(seen) == 1 and seen[0].startswith("part-")
    assert stat.S_IMODE(os.stat(tmp_path / "obj").st_mode) == 0o444


def test_a_failing_replace_of_the_callers_leaves_the_old_content_and_no_temp(
        tmp_path: Path) -> None:
    target = tmp_path / "obj"
    target.write_bytes(b"old")

    def replace(src: str, dst: str) -> None:
        raise OSError(errno.EXDEV, "cannot swap here")

    with pytest.raises(OSError, match="cannot swap"):
        write_atomically(str(target), b"new", fsync_file=False, fsync_dir=False,
                         replace=replace)
    assert target.read_bytes() == b"old"
    assert _names(tmp_path) == ["obj"]


def test_fsyncs_only_what_the_caller_asks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[bool] = []  # True: a directory
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(stat.S_ISDIR(os.fstat(fd).st_mode))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    for fsync_file in (False, True):
        for fsync_dir in (False, True):
            synced.clear()
            write_atomically(str(tmp_path / "f"), b"data", fsync_file=fsync_file,
                             fsync_dir=fsync_dir)
            assert synced == [False] * fsync_file + [True] * fsync_dir


def test_chunks_that_raise_leave_the_old_content_and_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"old")

    def chunks() -> Iterator[bytes]:
        yield b"new part"
        raise _Boom

    with pytest.raises(_Boom):
        write_atomically(str(target), chunks(), fsync_file=True, fsync_dir=True)
    assert target.read_bytes() == b"old"
    assert _names(tmp_path) == ["file"]


def test_a_failed_fsync_leaves_the_old_content_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "file"
    target.write_bytes(b"old")

    def fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(OSError):
        write_atomically(str(target), b"new", fsync_file=True, fsync_dir=False)
    assert target.read_bytes() == b"old"
    assert _names(tmp_path) == ["file"]


def test_a_failed_rename_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    target.mkdir()
    (target / "inside").write_bytes(b"keeps the directory non-empty")
    with pytest.raises(OSError):
        write_atomically(str(target), b"new", fsync_file=False, fsync_dir=False)
    assert _names(tmp_path) == ["taken"]
    assert _names(target) == ["inside"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory")
def test_a_directory_made_read_only_after_the_temp_is_created_keeps_the_old_content(
    tmp_path: Path,
) -> None:
    directory = tmp_path / "dir"
    directory.mkdir()
    target = directory / "file"
    target.write_bytes(b"old")

    def chunks() -> Iterator[bytes]:
        directory.chmod(0o555)  # the temp exists; the rename (and its removal) now fail
        yield b"new"

    try:
        with pytest.raises(PermissionError) as raised:
            write_atomically(str(target), chunks(), fsync_file=False, fsync_dir=False)
        assert target.read_bytes() == b"old"
        assert raised.value.filename == str(target) or raised.value.filename2 == str(target)
    finally:
        directory.chmod(0o755)


@settings(max_examples=60, deadline=None)
@given(old=st.binary(max_size=64), new=st.lists(st.binary(max_size=64), max_size=5),
       fail_at=st.none() | st.integers(min_value=0, max_value=5))
def test_destination_is_old_or_new_and_no_temp_survives(
    tmp_path_factory: pytest.TempPathFactory, old: bytes, new: list[bytes], fail_at: int | None
) -> None:
    directory = tmp_path_factory.mktemp("atomic")
    target = directory / "file"
    target.write_bytes(old)

    def chunks() -> Iterator[bytes]:
        for index, chunk in enumerate(new):
            if index == fail_at:
                raise _Boom
            yield chunk

    failed = fail_at is not None and fail_at < len(new)
    try:
        write_atomically(str(target), chunks(), fsync_file=False, fsync_dir=False)
    except _Boom:
        assert failed
    else:
        assert not failed
    assert target.read_bytes() == (old if failed else b"".join(new))
    assert _names(directory) == ["file"]
