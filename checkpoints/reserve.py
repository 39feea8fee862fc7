"""The store's space reserve: preallocated bytes that prune and gc give back on a full disk.

A full disk must not jam the store: prune has to commit a catalog write (a few pages of the
SQLite WAL) and gc has to write its small files before they can free anything. So the store
keeps `<store>/reserve`, RESERVE_BYTES of allocated blocks (`_allocate`):

    made      by `init`, and again by prune/gc once the disk has room for it several times over
    released  by prune and gc before anything else, when the free space of the store's file
              system is under LOW_WATER (what frees space without needing space runs first);
              `make_room` does it before the store is even opened (opening the catalog
              needs a little room too), for a process about to prune or gc

The file is only ever created with O_EXCL|O_NOFOLLOW and removed by name (unlink follows no
symlink), so a file planted in its place is never written through. Nothing else in ckpt
reads it; fsck and stats do not count it. This module never raises for a reserve it cannot
make or remove: the reserve is a help, not a promise.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

RESERVE_NAME = "reserve"
RESERVE_BYTES = 512 << 10
# Under this much free space, prune and gc release the reserve before they write anything.
LOW_WATER = 4 * RESERVE_BYTES
# The reserve is made again only if at least this much stays free beside it: a reserve must
# never be what fills the disk.
REMAKE_FREE = 8 * RESERVE_BYTES
_TEMP_NAME = ".reserve.tmp"


def free_bytes(store_dir: str) -> int | None:
    """Bytes free for an unprivileged writer on the store's file system (None: unknown)."""
    try:
        st = os.statvfs(store_dir)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def release(store_dir: str, *, always: bool = False) -> int:
    """Remove the reserve (and a temp a kill left) when the disk is low, or `always`; the
    bytes given back (0 when there was none, or room enough)."""
    free = free_bytes(store_dir)
    if not always and free is not None and free >= LOW_WATER:
        return 0
    freed = 0
    for name in (_TEMP_NAME, RESERVE_NAME):
        path = os.path.join(store_dir, name)
        try:
            st = os.lstat(path)
            os.unlink(path)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            freed += st.st_blocks * 512
    return freed


def _allocate(fd: int) -> None:
    """RESERVE_BYTES of blocks really allocated: fallocate where the file system has it (no
    data written), else incompressible bytes written and synced (zeros might be compressed
    or left sparse, which would reserve nothing)."""
    try:
        os.posix_fallocate(fd, 0, RESERVE_BYTES)
        return
    except (AttributeError, OSError) as exc:  # macOS has none; some file systems refuse it
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise
    view = memoryview(os.urandom(RESERVE_BYTES))
    while view:
        view = view[os.write(fd, view):]
    os.fsync(fd)  # allocated for real, not only promised by a delayed-allocation fs


def replenish(store_dir: str) -> bool:
    """Make the reserve if it is missing and the disk has room for it (REMAKE_FREE beside
    it); True if made. A failure (the disk filled meanwhile, a read-only store) leaves no
    partial file behind."""
    path = os.path.join(store_dir, RESERVE_NAME)
    if os.path.lexists(path):
        return False
    free = free_bytes(store_dir)
    if free is None or free < RESERVE_BYTES + REMAKE_FREE:
        return False
    temp = os.path.join(store_dir, _TEMP_NAME)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)  # a kill's leftover
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError:
        return False
    try:
        try:
            _allocate(fd)
        finally:
            os.close(fd)
        os.rename(temp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        return False
    return True


def make_room(store_dir: str | os.PathLike[str]) -> int:
    """Give back the space reserve of the store at `store_dir` if its disk is nearly full:
    for a process about to prune or gc that has not opened the store yet. Touches nothing
    unless `store_dir` holds a ckpt store. The bytes given back."""
    path = os.fspath(store_dir)
    if not (os.path.isfile(os.path.join(path, "format"))
            and os.path.isfile(os.path.join(path, "catalog.db"))):
        return 0
    return release(path)
