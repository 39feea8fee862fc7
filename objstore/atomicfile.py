"""`write_atomically`: the one write-temp, fsync, rename of the project.

A reader of the destination sees its old content or its new content, never a torn file: the
new bytes go to a temp file in the destination's own directory (a rename is atomic only within
one file system), which is fsynced if asked, then `os.replace`d over the destination, whose
directory is fsynced if asked. On any failure the temp file is removed and the destination is
untouched (or, if only the directory fsync failed, already new).

Durability is the caller's explicit choice, never a default: `fsync_file` makes the bytes
durable before the name points at them, `fsync_dir` makes the name itself durable. A caller
that defers them to a later batch point (a loose object under the `batch` policy) passes False
and records the path. This module does not decide policy, sweep old temp files or lock.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

_BUFFERS = (bytes, bytearray, memoryview)


def write_atomically(
    path: str,
    data: bytes | bytearray | memoryview | Iterable[bytes | bytearray | memoryview],
    *,
    fsync_file: bool,
    fsync_dir: bool,
    mode: int = 0o644,
    temp_prefix: str | None = None,
    replace: Callable[[str, str], None] = os.replace,
) -> None:
    """Replace `path` with `data` (bytes, or chunks written as they come) atomically.

    `mode` is the new file's permission bits (before the umask). The temp file is named
    `temp_prefix` plus random hex in `path`'s directory (default `.tmp-<name>-`), so that a
    sweep of leftovers from killed writers can find it. If iterating `data` raises, nothing is
    written and the exception propagates. `replace(temp, path)` gives the temp the
    destination's name: `os.replace`, or a caller's own atomic swap of the two names.
    """
    directory, name = os.path.split(path)
    directory = directory or "."
    prefix = f".tmp-{name}-" if temp_prefix is None else temp_prefix
    temp = os.path.join(directory, f"{prefix}{os.urandom(6).hex()}")
    # O_EXCL already refuses any existing name, a symlink included; O_NOFOLLOW says so.
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        try:
            for chunk in (data,) if isinstance(data, _BUFFERS) else data:
                _write_all(fd, chunk)
            if fsync_file:
                os.fsync(fd)
        finally:
            os.close(fd)
        replace(temp, path)
    except BaseException as exc:
        try:
            os.unlink(temp)
        except OSError:  # gone, or the directory refuses: the first failure is the one to tell
            pass
        if isinstance(exc, OSError) and exc.filename is None and exc.errno is not None:
            # A write or fsync of the descriptor names no file: name the one being written.
            raise OSError(exc.errno, exc.strerror, path) from exc
        raise
    if fsync_dir:
        sync_directory(directory)


def sync_directory(path: str) -> None:
    """fsync a directory: the names in it (a rename, a create, an unlink) become durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, chunk: bytes | bytearray | memoryview) -> None:
    written = os.write(fd, chunk)
    if written == len(chunk):  # a regular file takes it all at once, short of a full disk
        return
    view = memoryview(chunk)[written:]
    while view:
        view = view[os.write(fd, view):]
