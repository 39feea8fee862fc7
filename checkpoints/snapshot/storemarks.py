"""Recognising a ckpt store by its marker files, whatever the directory's name.

A store holds `format` (a regular file that starts with objstore's format tag, written by
`ObjectStore.init`) beside `catalog.db` or `objects/`. The scan excludes every directory
that holds them, as it excludes `.git/`: another workspace's store nested under the root, a
renamed store, the root's own store however it is reached. A `.gitignore` inside a store is
not a marker.

A restore leaves them alone too (`restore/restorer.py`'s `leave_stores_alone`, with
`is_store_dir`): a checkpoint taken while a directory was not yet a store may hold its files,
and none of them is written back into the store.

The test is built for the walk's hot path: `listing_may_hold_store` is two substring searches
of a listing's bytes, and only a directory that passes it is looked at (its listing parsed,
its `format` file read). This module reads at most that one small file; it never raises.
"""

from __future__ import annotations

import os
import stat
from typing import Final

from ckpt.checkpoints.snapshot.dirlisting import iter_listing

FORMAT: Final = b"format"
CATALOG: Final = b"catalog.db"
OBJECTS: Final = b"objects"
# objstore/store.py writes "ckpt-objstore <version>\n" into `format`.
FORMAT_TAG: Final = b"ckpt-objstore "
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def listing_may_hold_store(listing: bytes) -> bool:
    """False for a directory that surely holds no store markers (nearly every directory)."""
    return FORMAT in listing and (CATALOG in listing or OBJECTS in listing)


def listing_holds_store(listing: bytes, dir_path: bytes) -> bool:
    """Whether the directory at `dir_path`, whose listing is `listing`, is a ckpt store."""
    if not listing_may_hold_store(listing):
        return False
    format_file = other = False
    try:
        for entry in iter_listing(listing):
            if entry.name == FORMAT:
                format_file = stat.S_ISREG(entry.st_mode)
            elif entry.name == CATALOG:
                other = other or stat.S_ISREG(entry.st_mode)
            elif entry.name == OBJECTS:
                other = other or stat.S_ISDIR(entry.st_mode)
    except ValueError:
        return False
    return format_file and other and _format_tagged(dir_path + b"/" + FORMAT)


def is_store_dir(path: bytes) -> bool:
    """Whether the directory at `path` is a ckpt store (three lstats and a small read; for
    callers outside the walk, such as a tracked path's ancestors)."""
    try:
        if not stat.S_ISREG(os.lstat(path + b"/" + FORMAT).st_mode):
            return False
    except OSError:
        return False
    for name, is_kind in ((CATALOG, stat.S_ISREG), (OBJECTS, stat.S_ISDIR)):
        try:
            if is_kind(os.lstat(path + b"/" + name).st_mode):
                return _format_tagged(path + b"/" + FORMAT)
        except OSError:
            continue
    return False


def _format_tagged(path: bytes) -> bool:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError:
        return False
    try:
        return os.read(fd, len(FORMAT_TAG)) == FORMAT_TAG
    except OSError:
        return False
    finally:
        os.close(fd)
