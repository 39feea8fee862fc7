"""Reading one regular file for a put: whole or in chunks, refused if it changed while read.

Shared by `ObjectStore.put_file` and `put_files`' pipeline (objstore/putfiles.py). A file is
opened without following a symlink and without waiting on a FIFO; what was read is checked
against the `fstat` taken before reading, so a torn read is `ContentChanged`, never content.
This module neither hashes nor stores.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ckpt.objstore import codec
from ckpt.objstore.errors import ContentChanged

# O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever; it changes
# nothing for the regular files we go on to read.
READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def not_regular(path: str | bytes) -> IsADirectoryError:
    """The error a put gives for a path that is not a regular file."""
    return IsADirectoryError(f"not a regular file: {os.fsdecode(path)}")


def same_file_state(before: os.stat_result, after: os.stat_result) -> bool:
    return (
        before.st_size == after.st_size
        and before.st_mtime_ns == after.st_mtime_ns
        and before.st_ctime_ns == after.st_ctime_ns
        and before.st_ino == after.st_ino
    )


def read_whole(fd: int, path: str | bytes, before: os.stat_result) -> bytes:
    """The whole content of an open regular file, refused if it changed while read."""
    data = _read_all(fd, before.st_size)
    if len(data) != before.st_size or not same_file_state(before, os.fstat(fd)):
        raise ContentChanged(os.fsdecode(path))
    return data


def _read_all(fd: int, expected: int) -> bytes:
    # One extra byte detects a file that grew since fstat. A regular file normally returns
    # everything at once; the caller's fstat after reading catches growth after this read, so
    # no second read is spent to see EOF once `expected` bytes have arrived.
    data = os.read(fd, expected + 1)
    if len(data) >= expected or not data:
        return data
    parts = [data]
    got = len(data)
    while got <= expected:
        chunk = os.read(fd, expected + 1 - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def iter_chunks(fd: int) -> Iterator[bytes]:
    """The rest of an open file in `codec.CHUNK_SIZE` reads (the caller checks its state)."""
    while chunk := os.read(fd, codec.CHUNK_SIZE):
        yield chunk
