"""Opening the store's own files and directories without following a symlink.

The store usually lives inside the workspace, where an agent runs arbitrary code: a symlink
planted in place of a lock file, a pack or a directory of the store must never make ckpt read,
truncate or write the file it points to. Every open of a store file goes through here:
`open_file` (the last component is never followed: `O_NOFOLLOW`), `open_beneath` (every
component below a verified base directory is opened with `O_NOFOLLOW` relative to its parent,
so no directory on the way can be swapped for a symlink either) and `check_directories` (the
store's own directories, when it is opened). A symlink found is `UnsafeStore`, naming it.

This module decides nothing about the layout (callers name the paths) and never creates
anything but the file it is asked to open.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable

from ckpt.objstore.errors import UnsafeStore

_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _FLAGS


def open_file(path: str, flags: int, mode: int = 0o644) -> int:
    """`os.open` that refuses a symlink at `path` itself with `UnsafeStore`."""
    try:
        return os.open(path, flags | _FLAGS, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafeStore(path, "is a symlink") from None
        raise


def open_beneath(base: str, relative: str, flags: int, mode: int = 0o644) -> int:
    """Open `base/relative` with no symlink followed below `base` (which the caller has
    verified): each directory on the way is opened relative to its parent, the file last."""
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"not a path beneath {base}: {relative!r}")
    fd = os.open(base, _DIR_FLAGS)
    try:
        for depth, part in enumerate(parts[:-1], 1):
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                _refuse_symlink(exc, os.path.join(base, *parts[:depth]))
                raise
            os.close(fd)
            fd = child
        try:
            return os.open(parts[-1], flags | _FLAGS, mode, dir_fd=fd)
        except OSError as exc:
            _refuse_symlink(exc, os.path.join(base, *parts))
            raise OSError(exc.errno, exc.strerror, os.path.join(base, *parts)) from exc
    finally:
        os.close(fd)


def check_directories(paths: Iterable[str]) -> None:
    """Refuse (`UnsafeStore`) any of these store directories that is a symlink or not a
    directory; one that does not exist is fine (the caller creates or needs it)."""
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(mode):
            raise UnsafeStore(path, "is a symlink")
        if not stat.S_ISDIR(mode):
            raise UnsafeStore(path, "is not a directory")


def _refuse_symlink(error: OSError, path: str) -> None:
    if error.errno in (errno.ELOOP, errno.ENOTDIR):
        try:
            is_link = stat.S_ISLNK(os.lstat(path).st_mode)
        except OSError:
            return
        if is_link:
            raise UnsafeStore(path, "is a symlink") from None
