"""Directory listings: one bytes object per directory holding every entry's name and lstat.

`scan_dirs(paths, threads)` lists and lstats a batch of directories; per directory it returns
`(listing, newest)` — the entries sorted by name, each a little-endian header (u16 name length,
u32 mode, u64 size, i64 mtime_ns, i64 ctime_ns, u64 inode) and the name; `newest` the largest
mtime or ctime among them — or the errno (an int) that stopped it. Equal listings mean an
unchanged directory, so the snapshot scan can compare one bytes object against its stat cache
where it would otherwise compare every entry.

The native `_dirscan` extension does this with the GIL released and several threads; when it
is not built (no compiler at install time) the pure-Python twin here produces the same bytes,
only slower. Both: directories opened with O_NOFOLLOW, entries stat'ed without following
symlinks; an entry that vanishes before its lstat is left out; an entry whose lstat fails
otherwise is kept with mode 0 and the errno as its size.

No ignore rules, caches or trees here.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from typing import NamedTuple

_HEADER = struct.Struct("<HIQqqQ")
HEADER_SIZE = _HEADER.size  # 38
ScanOutcome = tuple[bytes, int] | int

try:
    from checkpoints._dirscan import scan_dirs as _native_scan_dirs  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - depends on the install
    _native_scan_dirs = None

NATIVE = _native_scan_dirs is not None
_OPEN_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ListedEntry(NamedTuple):
    """One entry; the fields are named like os.stat_result's, so either serves a caller."""

    name: bytes
    st_mode: int  # 0: the lstat failed, `st_size` holds the errno
    st_size: int
    st_mtime_ns: int
    st_ctime_ns: int
    st_ino: int


# Below this many directories a batch runs on one thread: starting and joining threads costs
# more than a small batch takes (measured: the stdlib's levels of 4-60 directories ran ~2x
# slower on two threads on a busy 2-core machine, Linux's levels of 200-1,500 no slower).
THREADED_BATCH = 64


def scan_dirs(paths: Sequence[bytes], threads: int = 1) -> list[ScanOutcome]:
    """(listing, newest) or errno for each directory of `paths`, in order."""
    if _native_scan_dirs is not None:
        return _native_scan_dirs(paths, threads if len(paths) >= THREADED_BATCH else 1)  # type: ignore[no-any-return]
    return scan_dirs_python(paths)


def scan_dirs_python(paths: Sequence[bytes]) -> list[ScanOutcome]:
    return [_scan_one(path) for path in paths]


def _scan_one(path: bytes) -> ScanOutcome:
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as exc:
        return exc.errno or 0
    entries = []
    newest = -(1 << 63)
    try:
        with os.scandir(fd) as listing:
            for entry in listing:
                name = os.fsencode(entry.name)
                try:
                    st = entry.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    entries.append((name, 0, exc.errno or 0, 0, 0, 0))
                    continue
                newest = max(newest, st.st_mtime_ns, st.st_ctime_ns)
                entries.append((name, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns,
                                st.st_ino))
    except OSError as exc:
        return exc.errno or 0
    finally:
        os.close(fd)
    entries.sort()
    pack = _HEADER.pack
    return b"".join(pack(len(e[0]), *e[1:]) + e[0] for e in entries), newest


def iter_listing(listing: bytes) -> Iterator[ListedEntry]:
    """The entries of a listing, in name order."""
    unpack = _HEADER.unpack_from
    offset, end = 0, len(listing)
    while offset < end:
        length, mode, size, mtime, ctime, ino = unpack(listing, offset)
        start = offset + HEADER_SIZE
        offset = start + length
        yield ListedEntry(listing[start:offset], mode, size, mtime, ctime, ino)


class MaybeNames:
    """A cheap stand-in for the set of names in a listing, for callers that only use it to skip
    lookups: `name in it` is True for every name present (and rarely for one that is not: the
    test is a substring search of the listing's bytes)."""

    __slots__ = ("_listing",)

    def __init__(self, listing: bytes) -> None:
        self._listing = listing

    def __contains__(self, name: object) -> bool:
        return not isinstance(name, bytes) or name in self._listing
