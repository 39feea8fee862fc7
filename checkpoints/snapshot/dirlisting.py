"""Directory listings: one bytes object per directory holding every entry's name and lstat.

`scan_dirs(paths, threads)` lists and lstats a batch of directories; per directory it returns
`(listing, newest)` — the entries sorted by name, each a little-endian header (u16 name length,
u32 mode, u64 size, i64 mtime_ns, i64 ctime_ns, u64 inode) and the name; `newest` the largest
mtime or ctime among them — or the errno (an int) that stopped it. Equal listings mean an
unchanged directory, so the snapshot scan can compare one bytes object against its stat cache
where it would otherwise compare every entry.

`walk_dirs(starts, known, threads)` walks on from there for a scan with a stat cache: a
directory whose listing equals the one `known` holds for it is unchanged, and the subdirectories
`known` names for it are walked the same way; only the other directories come back (with their
listing or errno), plus the keys of the unchanged ones. A no-change snapshot of a large tree is
then one call, all of it off the GIL.

`walk_dirs_watched(starts, known, view, threads)` is the same walk for a scan whose file watcher
(watch.py) says which directories may have changed since their listing was taken: a directory
it calls clean, whose known listing is settled, is unchanged without a syscall; the others are
listed in batches and compared as `walk_dirs` does; a subtree the watcher cannot vouch for is
walked by `walk_dirs` itself.

`linked_dirs(paths, threads)` says which directories hold a file of more than one link (the
watcher lists those at every scan).

`listing_changes(old, new)` compares two listings of one directory: the entries of `new` not
in `old` byte for byte, and the names `new` lacks, so a scan that knows what `old` stood for
looks at those entries only. `patch_listing(listing, changes)` goes the other way: the listing
a directory has after changes whose stats are known (what a restore wrote and removed).

The native `_dirscan` extension does all four, the first two with the GIL released and several
threads; when it is not built (no compiler at install time) the pure-Python twins here produce
the same results, only slower. Listings, either way: directories opened with O_NOFOLLOW,
entries stat'ed without following symlinks; an entry that vanishes before its lstat is left
out; an entry whose lstat fails otherwise is kept with mode 0 and the errno as its size.

No ignore rules, caches or trees here.
"""

from __future__ import annotations

import itertools
import os
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from ckpt.objstore.native import load_native

_HEADER = struct.Struct("<HIQqqQ")
HEADER_SIZE = _HEADER.size  # 38
ScanOutcome = tuple[bytes, int] | int

_dirscan = load_native("ckpt.checkpoints._dirscan")
_native_scan_dirs = None if _dirscan is None else _dirscan.scan_dirs
_native_walk_dirs = None if _dirscan is None else _dirscan.walk_dirs
_native_linked_dirs = getattr(_dirscan, "linked_dirs", None)
_native_listing_changes = None if _dirscan is None else _dirscan.listing_changes
_native_patch_listing = None if _dirscan is None else _dirscan.patch_listing

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


def listed_entry(name: bytes, st: Any) -> ListedEntry:
    """The listing entry of `name` with stat `st` (an os.stat_result or anything with its
    fields), as a walk would list it."""
    return ListedEntry(name, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


# Below this many directories a batch runs on one thread: starting and joining threads costs
# more than a small batch of directories takes to list.
THREADED_BATCH = 64


def scan_dirs(paths: Sequence[bytes], threads: int = 1) -> list[ScanOutcome]:
    """(listing, newest) or errno for each directory of `paths`, in order."""
    if _native_scan_dirs is not None:
        return _native_scan_dirs(paths, threads if len(paths) >= THREADED_BATCH else 1)  # type: ignore[no-any-return]
    return scan_dirs_python(paths)


def scan_dirs_python(paths: Sequence[bytes]) -> list[ScanOutcome]:
    return [_scan_one(path) for path in paths]


# One directory to walk from: (key, path, shortcut). The key names it in `known` (b"" for the
# root of the walk, then "a/b" below); `shortcut` False makes it a report even if its listing
# is the known one (its ignore rules may have changed).
WalkStart = tuple[bytes, bytes, bool]
# What a scan knows of a directory: (listing, NUL-separated names of the subdirectories to walk
# when the listing is unchanged, anything else). An empty listing is never a match.
Known = Mapping[bytes, Sequence[Any]]
WalkReport = tuple[bytes, ScanOutcome]


def walk_dirs(starts: Sequence[WalkStart], known: Known | None,
              threads: int = 1) -> tuple[list[WalkReport], list[bytes]]:
    """(reports, unchanged keys): every directory under `starts` whose listing differs from
    `known` or is not known, sorted by key, and the keys of the unchanged ones walked through."""
    if _native_walk_dirs is not None:
        reports, unchanged = _native_walk_dirs(starts, known, threads)
    else:
        reports, unchanged = walk_dirs_python(starts, known)
    reports.sort(key=_report_key)
    return reports, unchanged


def walk_dirs_python(starts: Sequence[WalkStart],
                     known: Known | None) -> tuple[list[WalkReport], list[bytes]]:
    reports: list[WalkReport] = []
    unchanged: list[bytes] = []
    pending = list(starts)
    while pending:
        key, path, shortcut = pending.pop()
        outcome = _scan_one(path)
        entry = known.get(key) if known is not None and shortcut else None
        if (entry is not None and not isinstance(outcome, int) and entry[0]
                and entry[0] == outcome[0] and _plain_names(entry[1])):
            unchanged.append(key)
            prefix = key + b"/" if key else b""
            pending.extend((prefix + name, path + b"/" + name, True)
                           for name in entry[1].split(b"\0") if entry[1])
        else:
            reports.append((key, outcome))
    return reports, unchanged


class WatchedView(Protocol):
    """What `walk_dirs_watched` asks of a watcher's view (watch.py's `WatchView`)."""

    def listed(self, key: bytes) -> bool:
        """Whether the directory `key` may have changed since its last listing was taken."""
        ...

    def walked(self, key: bytes) -> bool:
        """Whether the whole subtree at `key` must be walked (no watch vouches for it)."""
        ...

    def within_walked(self, key: bytes) -> bool:
        """Whether `key` or one of its ancestors is `walked`."""
        ...


def walk_dirs_watched(starts: Sequence[WalkStart], known: Known | None, view: WatchedView,
                      threads: int = 1) -> tuple[list[WalkReport], list[bytes]]:
    """`walk_dirs`, but a directory `view` calls clean whose `known` listing is settled (not
    empty) and whose subdirectory names are plain is taken as unchanged without being listed;
    the rest is listed and compared exactly as `walk_dirs` does, and a subtree `view` says no
    watch covers goes to `walk_dirs` whole."""
    if known is None:
        return walk_dirs(starts, None, threads)
    reports: list[WalkReport] = []
    unchanged: list[bytes] = []
    whole: list[WalkStart] = []
    # The scanner's starts may lie anywhere (below a directory that changed): ask about their
    # ancestors too; a directory reached through a clean parent is walked only if it is a root.
    pending: list[WalkStart] = []
    for start in starts:
        (whole if view.within_walked(start[0]) else pending).append(start)
    listed, walked = view.listed, view.walked
    while pending:
        listing: list[WalkStart] = []
        # The hot loop of a watched no-change snapshot: one pass over the known directories.
        pop, push, get = pending.pop, pending.extend, known.get
        while pending:
            start = pop()
            key, path, shortcut = start
            if walked(key):
                whole.append(start)
                continue
            entry = get(key) if shortcut else None
            if entry is None or not entry[0] or listed(key) or not _plain_names(entry[1]):
                listing.append(start)
                continue
            unchanged.append(key)
            names = entry[1]
            if names:
                prefix, base = (key + b"/" if key else b""), path + b"/"
                push([(prefix + name, base + name, True) for name in names.split(b"\0")])
        if not listing:
            break
        outcomes = scan_dirs([start[1] for start in listing], threads)
        for (key, path, shortcut), outcome in zip(listing, outcomes, strict=True):
            entry = get(key) if shortcut else None
            if (entry is not None and not isinstance(outcome, int) and entry[0]
                    and entry[0] == outcome[0] and _plain_names(entry[1])):
                unchanged.append(key)
                _push_subdirs(pending, key, path, entry[1])
            else:
                reports.append((key, outcome))
    if whole:
        more, same = walk_dirs(whole, known, threads)
        reports += more
        unchanged += same
    reports.sort(key=_report_key)
    return reports, unchanged


def linked_dirs(paths: Sequence[bytes], threads: int = 1) -> list[bool | int]:
    """For each directory of `paths`: whether it holds a non-directory entry of more than one
    link (True/False), or the errno that stopped the look."""
    if _native_linked_dirs is not None:
        return _native_linked_dirs(paths, threads if len(paths) >= THREADED_BATCH else 1)  # type: ignore[no-any-return]
    return [_linked_one(path) for path in paths]


def _linked_one(path: bytes) -> bool | int:
    try:
        with os.scandir(path) as entries:
            return any(not entry.is_dir(follow_symlinks=False)
                       and entry.stat(follow_symlinks=False).st_nlink > 1 for entry in entries)
    except OSError as exc:
        return exc.errno or 0


def _push_subdirs(pending: list[WalkStart], key: bytes, path: bytes, names: bytes) -> None:
    if names:
        prefix = key + b"/" if key else b""
        pending.extend((prefix + name, path + b"/" + name, True) for name in names.split(b"\0"))


def _plain_names(names: bytes) -> bool:
    """No name that could lead outside the directory (checked as the native walk does)."""
    if not names:
        return True
    if b"/" in names or b"\0\0" in names or names[:1] == b"\0" or names[-1:] == b"\0":
        return False  # a slash, or an empty name
    return b"." not in names or all(name not in (b".", b"..") for name in names.split(b"\0"))


def _report_key(report: WalkReport) -> bytes:
    return report[0]


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
    """The entries of a listing, in name order; ValueError where it is malformed."""
    unpack = _HEADER.unpack_from
    offset, end = 0, len(listing)
    while offset < end:
        if end - offset < HEADER_SIZE:
            raise ValueError("malformed listing")
        length, mode, size, mtime, ctime, ino = unpack(listing, offset)
        start = offset + HEADER_SIZE
        offset = start + length
        if offset > end:
            raise ValueError("malformed listing")
        yield ListedEntry(listing[start:offset], mode, size, mtime, ctime, ino)


EntryFields = tuple[bytes, int, int, int, int, int]  # a ListedEntry's fields, in its order


def listing_changes(old: bytes, new: bytes) -> tuple[list[EntryFields], list[bytes]]:
    """(entries of `new` that `old` lacks or holds otherwise, names of `old` that `new` lacks),
    both in name order; ValueError if a listing is malformed."""
    if _native_listing_changes is not None:
        return _native_listing_changes(old, new)  # type: ignore[no-any-return]
    return listing_changes_python(old, new)


def listing_changes_python(old: bytes, new: bytes) -> tuple[list[EntryFields], list[bytes]]:
    before = {entry.name: entry for entry in iter_listing(old)}
    changed: list[EntryFields] = [entry for entry in iter_listing(new)
                                  if before.pop(entry.name, None) != entry]
    return changed, sorted(before)


def encode_entry(entry: ListedEntry) -> bytes:
    """One entry as a listing holds it (a listing of that entry alone)."""
    return _HEADER.pack(len(entry.name), *entry[1:]) + entry.name


def patch_listing(listing: bytes, changes: Mapping[bytes, ListedEntry | None]) -> bytes:
    """`listing` with each entry `changes` names replaced by (or, where it has none, given in
    name order) the change's entry, or dropped where the change is None: what the directory
    lists once those changes, and nothing else, happened. ValueError if `listing` is
    malformed or a change's entry is not of its name."""
    ordered = [(name, None if entry is None else encode_entry(entry))
               for name, entry in sorted(changes.items())]
    if _native_patch_listing is not None:
        return _native_patch_listing(listing, ordered)  # type: ignore[no-any-return]
    return patch_listing_python(listing, ordered)


def patch_listing_python(listing: bytes, ordered: Sequence[tuple[bytes, bytes | None]]) -> bytes:
    names = [name for name, _encoded in ordered]
    if any(a >= b for a, b in itertools.pairwise(names)):
        raise ValueError("changes must be in strictly increasing name order")
    entries = {entry.name: encode_entry(entry) for entry in iter_listing(listing)}
    for name, encoded in ordered:
        if encoded is None:
            entries.pop(name, None)
            continue
        if [entry.name for entry in iter_listing(encoded)] != [name]:
            raise ValueError("a change's entry must be one entry of its name")
        entries[name] = encoded
    return b"".join(entries[name] for name in sorted(entries))


class MaybeNames:
    """A cheap stand-in for the set of names in a listing, for callers that only use it to skip
    lookups: `name in it` is True for every name present (and rarely for one that is not: the
    test is a substring search of the listing's bytes)."""

    __slots__ = ("_listing",)

    def __init__(self, listing: bytes) -> None:
        self._listing = listing

    def __contains__(self, name: object) -> bool:
        return not isinstance(name, bytes) or name in self._listing
