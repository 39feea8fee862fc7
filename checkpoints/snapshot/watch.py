"""The file watcher: which directories of a root may have changed since a scan listed them.

One `Watcher` per root per process (Linux inotify, one instance each, so an overflow is per
root), shared by every `Checkpoints` opened on that root with `watch=True` and closed with the
last. Each stat cache that scans the root (one per store: `WatchClient`) keeps its own dirty
and fresh sets, since a scan that clears them vouches only for the cache it saves. A thread
drains the event queue: an event on a directory marks it dirty; a directory created or moved
in marks its whole subtree to be walked. A scan asks, under the root lock:

    begin(keys):  cookie sync (create and unlink a file in <root>/.ckpt, wait for its event:
                  every change completed before the call is now marked)
                  if the client is not trusted (first scan, overflow, root replaced, sync
                  failed, a cache not saved, verify): watch every key of the cache first,
                  clear, and return None: a full walk
                  else swap the dirty and fresh sets for empty ones and return their union
                  as a `WatchView`
    (the scan lists only dirty and fresh directories, unwatched ones and walked subtrees;
     dirlisting.walk_dirs_watched)
    end(keys):    watch the directories the scan found that have no watch: fresh for this
                  client (listed before their watch: their events before it are lost), dirty
                  for every other; a full walk makes the client trusted for this generation
    settle(known): take the fresh set (under the lock, left in place), list those directories
                  again in one native walk (dirlisting.walk_dirs) and compare with `known`, the
                  listings of the cache that scan just made; then, under the lock, each one
                  still fresh leaves it, into dirty unless its listing was equal (an empty,
                  racy listing or a missing one is never equal)

So a new store's first snapshot (a full walk, with nothing to watch before it) pays one more
native walk, and the next one lists only what changed.

Invariant: for every directory D whose listing the cache holds, if D changed since that
listing was taken then D is dirty, fresh or under a walked subtree, or the client is not
trusted. What keeps it: every new or moved mapping of a watch marks its key dirty, or fresh
for the client whose scan listed it just before; a fresh key leaves `fresh` only for a scan
that lists it (after its watch) or through `settle`, whose listing is taken after the watch
was added: equal to the cache's, it shows D unchanged up to the watch, and any change since
is an event into dirty (which `settle` never clears); every watch forgotten marks its key
dirty; the dirty and fresh sets are swapped only after the cookie sync and before anything
is listed; a cache that was not saved makes the next scan a full walk.

Fallbacks (counted in `WatchState`, logged): an event-queue overflow makes every client
untrusted (a full walk, with all watches set again); a directory whose watch cannot be added
(ENOSPC from fs.inotify.max_user_watches, EACCES) is listed at every scan until the next full
walk retries it; a directory on another device than the root, or any mount point below the
root (/proc/self/mountinfo, re-read when it changes) is walked whole at every scan; a
directory holding a file with more than one link is listed at every scan (a write through a
link outside it sends no event here); a root renamed, replaced or deleted (IN_MOVE_SELF,
IN_DELETE_SELF, or its st_dev/st_ino changed) drops every watch; a root on a network or FUSE
file system, or no inotify, is never watched (every scan a full walk).

No scanning, caches or trees here: keys are directory paths relative to the root (b"" is the
root), as the stat cache names them.
"""

from __future__ import annotations

import errno
import logging
import os
import select
import struct
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ckpt.checkpoints.snapshot.dirlisting import Known, linked_dirs, walk_dirs

logger = logging.getLogger("ckpt")

IN_MODIFY = 0x2
IN_ATTRIB = 0x4
IN_CLOSE_WRITE = 0x8
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
# watchman's mask (watcher/inotify.cpp); symlinks are never followed to a directory.
DIR_MASK = (IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_MODIFY | IN_CLOSE_WRITE
            | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK
            | IN_DONT_FOLLOW)
COOKIE_MASK = IN_CREATE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR
_EVENT = struct.Struct("iIII")
_APPEARED = IN_CREATE | IN_MOVED_TO
_LEFT_SUBTREE = IN_MOVED_FROM
_SELF_GONE = IN_DELETE_SELF | IN_MOVE_SELF
_LINK_EVENTS = IN_CREATE | IN_MOVED_TO | IN_ATTRIB
# How long a scan waits for its cookie before it walks everything instead.
COOKIE_TIMEOUT = 2.0
# File systems whose changes may come from elsewhere than this kernel: never watched.
_REMOTE_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "ceph", "glusterfs",
                        "afs", "lustre", "gfs2", "ocfs2", "sshfs", "davfs", "virtiofs"})
_MAX_QUEUED = "/proc/sys/fs/inotify/max_queued_events"
_MAX_WATCHES = "/proc/sys/fs/inotify/max_user_watches"


@dataclass(frozen=True, slots=True)
class WatchState:
    """What a `Checkpoints` opened with `watch=True` reports of its watcher."""

    active: bool  # events are being read (False: every snapshot is a full walk)
    watched_dirs: int
    unwatched_dirs: int  # listed or walked at every snapshot (see `last_fallback`)
    full_walks: int  # snapshots that walked everything (the first one included)
    overflows: int  # event-queue overflows
    last_fallback: str | None  # why the last fallback to listing or walking happened
    verify_runs: int
    verify_mismatches: int


@dataclass(frozen=True, slots=True)
class WatchView:
    """What one scan may trust: every directory not `dirty` and not under a `trees` root."""

    dirty: frozenset[bytes]
    trees: frozenset[bytes]

    def listed(self, key: bytes) -> bool:
        return key in self.dirty

    def walked(self, key: bytes) -> bool:
        return key in self.trees

    def within_walked(self, key: bytes) -> bool:
        if not self.trees:
            return False
        while True:
            if key in self.trees:
                return True
            if not key:
                return False
            key = key.rpartition(b"/")[0]


@dataclass(frozen=True, slots=True)
class ScanTicket:
    """One scan's hold on the watcher, from `begin` to `end`: `view` None is a full walk."""

    view: WatchView | None
    generation: int
    full: bool


def _identity(path: bytes) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _read_int(path: str) -> int | None:
    try:
        with open(path, "rb") as stream:
            return int(stream.read().strip())
    except (OSError, ValueError):
        return None


def _unescape(field: bytes) -> bytes:
    """A path of /proc/self/mountinfo (octal escapes for space, tab, newline, backslash)."""
    if b"\\" not in field:
        return field
    out = bytearray()
    index = 0
    while index < len(field):
        if field[index:index + 1] == b"\\" and field[index + 1:index + 4].isdigit():
            out.append(int(field[index + 1:index + 4], 8))
            index += 4
        else:
            out.append(field[index])
            index += 1
    return bytes(out)


def read_mounts(root: bytes, data: bytes) -> tuple[set[bytes], str]:
    """(keys of the mount points strictly below `root`, fs type of the mount holding `root`)
    from the text of /proc/self/mountinfo."""
    below: set[bytes] = set()
    holder, fstype = b"", ""
    prefix = root.rstrip(b"/") + b"/"
    for line in data.splitlines():
        fields = line.split(b" ")
        if len(fields) < 10 or b"-" not in fields[6:]:
            continue
        point = _unescape(fields[4])
        kind = fields[fields.index(b"-", 6) + 1].decode("ascii", "replace")
        if point.startswith(prefix):
            below.add(point[len(prefix):])
        if (root == point or root.startswith(point.rstrip(b"/") + b"/")) \
                and len(point) >= len(holder):
            holder, fstype = point, kind
    return below, fstype


class WatchClient:
    """One stat cache's view of a watched root (see the module): its dirty set and trust."""

    __slots__ = ("dirty", "fresh", "fresh_listed", "fresh_settled", "full_walks", "key",
                 "refs", "trees", "trusted_generation", "unsaved", "verify_mismatches",
                 "verify_runs")

    def __init__(self, key: str) -> None:
        self.key = key
        self.refs = 0
        self.dirty: set[bytes] = set()
        # Watched after the scan listed them, not yet compared again (`Watcher.settle`): a
        # scan treats them as dirty. Events never land here: they mark `dirty`.
        self.fresh: set[bytes] = set()
        self.fresh_settled = 0  # fresh directories `settle` found unchanged
        self.fresh_listed = 0  # fresh directories `settle` found changed (moved to `dirty`)
        self.trees: set[bytes] = set()
        self.trusted_generation = -1
        self.unsaved = False  # a scan's cache is not saved yet: the next scan walks everything
        self.full_walks = 0
        self.verify_runs = 0
        self.verify_mismatches = 0


class Watcher:
    """The inotify watches of one root and the thread that reads their events."""

    def __init__(self, root: bytes) -> None:
        self.root = root
        self.refs = 0
        self._cond = threading.Condition()
        self._clients: dict[str, WatchClient] = {}
        self._wd_key: dict[int, bytes] = {}
        self._key_wd: dict[bytes, int] = {}
        self._failed: dict[bytes, str] = {}  # keys listed at every scan: why unwatched
        self._linked: set[bytes] = set()  # keys holding a file of several links
        self._mounts: set[bytes] = set()  # keys walked whole at every scan
        self._generation = 0
        self._overflows = 0
        self._last_fallback: str | None = None
        self._seen: set[bytes] = set()  # cookies seen that a scan still waits for
        self._waiting: set[bytes] = set()
        self._seq = 0
        self._cookie_wd: int | None = None
        self._cookie_dir = b""
        self._cookie_prefix = b""
        self._root_wd: int | None = None
        self._root_id: tuple[int, int] | None = None
        self._root_changed = False
        self._closed = False
        self._inactive: str | None = None
        self._fd = -1
        self._inotify: Any = None  # inotify_simple.INotify (the library has no types)
        self._thread: threading.Thread | None = None
        self._wake = (-1, -1)
        self._mountinfo: object | None = None
        self._mount_poll: select.poll | None = None
        self._gate: threading.Lock | None = None
        self._paused = threading.Event()
        self._cookie_id: tuple[int, int] | None = None
        self._queue: int | None = None
        self._start()

    # -- setting up --------------------------------------------------------------------

    def _start(self) -> None:
        try:
            import inotify_simple  # type: ignore[import-untyped]  # noqa: PLC0415 (Linux only; untyped: ~100 lines of ctypes)
        except ImportError:
            self._inactive = "inotify_simple is not installed"
            return
        try:
            st = os.stat(self.root)
            self._root_id = (st.st_dev, st.st_ino)
            self._read_mounts()
            if self._inactive is not None:
                return
            self._queue = _read_int(_MAX_QUEUED)  # as this instance gets it
            self._inotify = inotify_simple.INotify(nonblocking=True)
        except OSError as exc:
            self._inactive = f"inotify unavailable: {exc.strerror}"
            return
        self._fd = self._inotify.fileno()
        self._wake = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        with self._cond:
            self._watch_root()
        self._thread = threading.Thread(target=self._run, name="ckpt-watch", daemon=True)
        self._thread.start()

    def _add_watch(self, path: bytes, mask: int) -> int:
        wd: int = self._inotify.add_watch(path, mask)
        return wd

    def _rm_watch(self, wd: int) -> None:
        try:
            self._inotify.rm_watch(wd)
        except OSError:
            pass  # gone already (IN_IGNORED is on its way)

    def _watch_root(self) -> None:
        """(Re)start from nothing: the root's watch and the cookie directory's."""
        for wd in list(self._wd_key):
            self._rm_watch(wd)
        for client in self._clients.values():
            client.dirty.update(self._key_wd)
        self._wd_key.clear()
        self._key_wd.clear()
        self._failed.clear()
        self._linked.clear()
        self._root_wd = self._cookie_wd = None
        self._root_changed = False
        if self._map(b"") is None:
            self._inactive = f"root not watchable: {self._failed.get(b'', 'gone')}"
            return
        self._root_wd = self._key_wd[b""]
        self._watch_cookie_dir()

    def _watch_cookie_dir(self) -> None:
        marker = self.root + b"/.ckpt"
        if os.path.isdir(marker):
            try:
                self._cookie_wd = self._add_watch(marker, COOKIE_MASK)
                self._cookie_dir, self._cookie_prefix = marker, b"cookie-"
                self._cookie_id = _identity(marker)
                return
            except OSError:
                pass
        # No marker directory: the cookie goes in the root itself, under a name of ours.
        self._cookie_wd = self._root_wd
        self._cookie_dir, self._cookie_prefix = self.root, b".ckpt-cookie-"
        self._cookie_id = None

    def _read_mounts(self) -> None:
        """The mount points below the root, read again whenever the mount table changes."""
        if self._mountinfo is None:
            try:
                self._mountinfo = open("/proc/self/mountinfo", "rb")  # noqa: SIM115 (kept open: polled)
            except OSError:
                return
            self._mount_poll = select.poll()
            self._mount_poll.register(self._mountinfo, select.POLLPRI | select.POLLERR)
        elif self._mount_poll is not None and not self._mount_poll.poll(0):
            return
        stream = self._mountinfo
        stream.seek(0)  # type: ignore[attr-defined]
        below, fstype = read_mounts(self.root, stream.read())  # type: ignore[attr-defined]
        if fstype in _REMOTE_FS or fstype.startswith("fuse"):
            self._inactive = f"root on a {fstype} file system: not watched"
        new = below - self._mounts
        if new:
            self._fallback(f"{len(new)} mount point(s) below the root: walked at every snapshot")
        self._mounts = below

    def _fallback(self, reason: str) -> None:
        self._last_fallback = reason
        logger.info("watcher of %s: %s", os.fsdecode(self.root), reason)

    # -- mapping keys to watches (callers hold the lock) --------------------------------

    def _path(self, key: bytes) -> bytes:
        return self.root + b"/" + key if key else self.root

    def _under_mount(self, key: bytes) -> bool:
        if not self._mounts:
            return False
        while key:
            if key in self._mounts:
                return True
            key = key.rpartition(b"/")[0]
        return False

    def _map(self, key: bytes) -> int | None:
        """Watch directory `key` (its events before now are lost: it is marked dirty)."""
        path = self._path(key)
        try:
            wd = self._add_watch(path, DIR_MASK)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
                self._forget_key(key)
                return None
            if exc.errno == errno.ENOSPC:
                reason = f"fs.inotify.max_user_watches={_read_int(_MAX_WATCHES)}"
            elif exc.errno in (errno.EACCES, errno.EPERM):
                reason = "permission denied"
            else:
                reason = exc.strerror or str(exc.errno)
            if key not in self._failed:
                self._failed[key] = reason
                self._last_fallback = f"dirs unwatched: {reason}"
            return None
        try:
            st = os.lstat(path)
        except OSError:
            st = None
        if key and st is not None and self._root_id is not None \
                and st.st_dev != self._root_id[0]:
            self._rm_watch(wd)
            if key not in self._mounts:
                self._mounts.add(key)
                self._fallback(f"{os.fsdecode(key)}/ is on another device: walked at every "
                               "snapshot")
            return None
        old_key = self._wd_key.get(wd)
        if old_key is not None and old_key != key:
            self._key_wd.pop(old_key, None)
            self._mark(old_key)
        old_wd = self._key_wd.get(key)
        if old_wd is not None and old_wd != wd:
            self._wd_key.pop(old_wd, None)
        self._wd_key[wd] = key
        self._key_wd[key] = wd
        self._failed.pop(key, None)
        self._mark(key)
        return wd

    def _mark(self, key: bytes) -> None:
        for client in self._clients.values():
            client.dirty.add(key)

    def _forget_key(self, key: bytes) -> None:
        wd = self._key_wd.pop(key, None)
        if wd is not None:
            self._wd_key.pop(wd, None)
        self._mark(key)

    def _forget_subtree(self, key: bytes, *, remove: bool) -> None:
        """Forget the watches of `key` and below (moved away: their keys no longer hold)."""
        prefix = key + b"/"
        for other in [k for k in self._key_wd if k == key or k.startswith(prefix)]:
            wd = self._key_wd.pop(other)
            self._wd_key.pop(wd, None)
            if remove:
                self._rm_watch(wd)
            self._mark(other)

    # -- the reader thread ---------------------------------------------------------------

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._wake[0], select.POLLIN)
        while not self._closed:
            try:
                poller.poll()
            except InterruptedError:
                continue
            if self._closed:
                break
            self._take_wakeups()
            chunks = []
            while True:
                try:
                    data = os.read(self._fd, 1 << 18)
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    return  # closed under us
                if not data:
                    break
                chunks.append(data)
            if chunks:
                self._handle(b"".join(chunks))

    def _take_wakeups(self) -> None:
        try:
            os.read(self._wake[0], 64)
        except (BlockingIOError, InterruptedError):
            return
        gate, self._gate = self._gate, None
        if gate is not None:  # a test keeps the events in the kernel's queue meanwhile
            self._paused.set()
            with gate:
                pass
            self._paused.clear()

    def _handle(self, data: bytes) -> None:
        """Apply a batch of events, then wake the scans whose cookies it holds."""
        unpack = _EVENT.unpack_from
        size = _EVENT.size
        touched: set[int] = set()
        cookies: list[bytes] = []
        special: list[tuple[int, int, bytes]] = []
        offset, end = 0, len(data)
        cookie_wd, prefix = self._cookie_wd, self._cookie_prefix
        while offset < end:
            wd, mask, _cookie, length = unpack(data, offset)
            offset += size + length
            name = data[offset - length:offset].rstrip(b"\0") if length else b""
            if wd == cookie_wd and name.startswith(prefix):
                if mask & IN_CREATE:
                    cookies.append(name)
                continue
            if mask & (IN_ISDIR | _SELF_GONE | IN_IGNORED | IN_Q_OVERFLOW | _LINK_EVENTS):
                special.append((wd, mask, name))
            else:
                touched.add(wd)
        with self._cond:
            wd_key = self._wd_key
            for wd in touched:
                key = wd_key.get(wd)
                if key is not None:
                    self._mark(key)
            for wd, mask, name in special:
                self._special(wd, mask, name)
            if cookies:
                self._seen.update(name for name in cookies if name in self._waiting)
                self._cond.notify_all()

    def _special(self, wd: int, mask: int, name: bytes) -> None:
        if mask & IN_Q_OVERFLOW:
            self._overflows += 1
            self._generation += 1
            self._fallback(f"event queue overflow (fs.inotify.max_queued_events={self._queue}):"
                           " the next snapshot walks everything")
            self._cond.notify_all()
            return
        if wd == self._cookie_wd and wd != self._root_wd:
            if mask & (_SELF_GONE | IN_IGNORED):
                self._cookie_wd = None  # found again at the next sync
            return
        key = self._wd_key.get(wd)
        if key is None:
            return  # a watch forgotten (its subtree moved or went): nothing here depends on it
        if mask & (_SELF_GONE | IN_IGNORED):
            if wd == self._root_wd:
                self._root_changed = True
            elif mask & IN_MOVE_SELF:
                self._forget_subtree(key, remove=True)
            else:
                self._forget_key(key)
            return
        self._mark(key)
        child = key + b"/" + name if key else name
        if mask & IN_ISDIR:
            if mask & _APPEARED:
                for client in self._clients.values():
                    client.trees.add(child)
            elif mask & _LEFT_SUBTREE:
                self._forget_subtree(child, remove=True)
        elif mask & _LINK_EVENTS and name and key not in self._linked:
            try:
                links = os.lstat(self._path(child)).st_nlink
            except OSError:
                return
            if links > 1:
                self._linked.add(key)
                self._fallback(f"{os.fsdecode(child)} has {links} links: its directory is "
                               "listed at every snapshot")

    # -- cookies --------------------------------------------------------------------------

    def _sync(self) -> str | None:
        """Wait until every event of a change completed before this call is applied (a
        cookie file's creation comes back through the same queue, in order); the reason
        when that could not be done."""
        with self._cond:
            if self._cookie_wd is None or (self._cookie_id is not None
                                           and _identity(self._cookie_dir) != self._cookie_id):
                if self._cookie_wd is not None and self._cookie_wd != self._root_wd:
                    self._rm_watch(self._cookie_wd)
                self._watch_cookie_dir()
            self._seq += 1
            name = self._cookie_prefix + b"%d-%d" % (os.getpid(), self._seq)
            path = self._cookie_dir + b"/" + name
            generation = self._generation
            self._waiting.add(name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            os.close(fd)
            os.unlink(path)
        except OSError as exc:
            with self._cond:
                self._waiting.discard(name)
            return f"cookie {os.fsdecode(path)}: {exc.strerror}"
        # An overflow drops events, the cookie's maybe: it ends the wait (a full walk follows).
        with self._cond:
            self._cond.wait_for(lambda: name in self._seen or self._closed
                                or self._generation != generation, COOKIE_TIMEOUT)
            self._waiting.discard(name)
            if name in self._seen:
                self._seen.discard(name)
                return None
            if self._generation != generation:
                return "event queue overflow during the cookie sync"
        return "cookie not seen in time"

    # -- what scans ask ----------------------------------------------------------------------

    def client(self, key: str) -> WatchClient:
        with self._cond:
            client = self._clients.get(key)
            if client is None:
                client = self._clients[key] = WatchClient(key)
            client.refs += 1
            return client

    def release(self, client: WatchClient) -> bool:
        """Drop one hold on `client`; True when the watcher has no client left."""
        with self._cond:
            client.refs -= 1
            if client.refs <= 0:
                self._clients.pop(client.key, None)
            return not self._clients

    def _check_root(self) -> None:
        """A root renamed, replaced or deleted since the last scan drops every watch."""
        try:
            st = os.stat(self.root)
            now: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except OSError:
            now = None
        if now != self._root_id or self._root_changed:
            self._root_id = now
            self._generation += 1
            self._fallback("root renamed, replaced or deleted: watches set again")
            if now is not None:
                self._inactive = None
                self._watch_root()

    def begin(self, client: WatchClient, keys: Callable[[], Iterable[bytes]], *,
              peek: bool = False, force_full: str | None = None) -> ScanTicket:
        """Start a scan for `client` whose cache holds `keys` (see the module). `peek`: leave
        the dirty set as it is (a verification that commits nothing)."""
        with self._cond:
            self._check_root()
            self._read_mounts()
        reason = force_full
        if self._inactive is None and self._fd >= 0:
            synced = self._sync()
            reason = reason or synced
        with self._cond:
            generation = self._generation
            if self._inactive is not None or self._fd < 0:
                client.full_walks += not peek
                return ScanTicket(None, generation, full=True)
            if client.unsaved:
                reason = reason or "the last snapshot's stat cache was not saved"
            if client.trusted_generation != generation and reason is None:
                reason = "first snapshot" if client.trusted_generation < 0 \
                    else self._last_fallback or "watches set again"
            if reason is not None:
                if not peek:
                    for key in keys():
                        if key not in self._key_wd and not self._under_mount(key):
                            self._map(key)
                    self._failed_retry()
                    client.dirty.clear()
                    client.fresh.clear()
                    client.trees.clear()
                    client.full_walks += 1
                    client.unsaved = False
                    logger.debug("watcher of %s: full walk (%s)", os.fsdecode(self.root),
                                 reason)
                return ScanTicket(None, generation, full=True)
            dirty = frozenset(client.dirty).union(client.fresh, self._failed, self._linked)
            view = WatchView(dirty, frozenset(client.trees) | self._mounts)
            if not peek:  # this scan lists the fresh ones after their watch: settled by it
                client.dirty, client.fresh, client.trees = set(), set(), set()
            return ScanTicket(view, generation, full=False)

    def _failed_retry(self) -> None:
        for key in list(self._failed):
            del self._failed[key]
            self._map(key)

    def abort(self, client: WatchClient, ticket: ScanTicket) -> None:
        """A scan that failed: what it took off the dirty set is put back."""
        with self._cond:
            if ticket.view is not None:
                client.dirty |= ticket.view.dirty
                client.trees |= ticket.view.trees
            client.trusted_generation = -2 if ticket.full else client.trusted_generation

    def end(self, client: WatchClient, ticket: ScanTicket, keys: Iterable[bytes], *,
            unsaved: bool) -> None:
        """A scan whose new cache holds `keys` is done; `unsaved`: that cache still has to
        be saved (`saved` is told when it is)."""
        keys = list(keys)
        with self._cond:
            if self._fd < 0 or self._inactive is not None:
                return
            key_wd, failed = self._key_wd, self._failed
            new = [key for key in keys if key not in key_wd and key not in failed
                   and not self._under_mount(key)]
            dirty = client.dirty
            for key in new:
                # Listed before its watch: fresh for this client (`settle` compares it again),
                # unless something else marked it dirty already; dirty for every other client.
                was_dirty = key in dirty
                if self._map(key) is not None and not was_dirty:
                    dirty.discard(key)
                    client.fresh.add(key)
            client.unsaved = unsaved
            if ticket.full and ticket.generation == self._generation:
                client.trusted_generation = ticket.generation
            listed = [] if ticket.view is None else \
                [key for key in ticket.view.dirty if key not in self._linked]
        self._find_links(keys if ticket.full else new + listed)

    def settle(self, client: WatchClient, known: Callable[[], Known]) -> int:
        """List the fresh directories of `client` again, now that they are watched, and compare
        with `known` (the listings of the cache the scan that found them just made): an equal
        one leaves `fresh` (a change since its watch was added is an event, in `dirty`), any
        other goes to `dirty`. The number found changed."""
        with self._cond:
            if not client.fresh or self._fd < 0 or self._inactive is not None:
                return 0
            keys = sorted(client.fresh)
        listings = known()
        # No subdirectory names: each directory is compared alone, nothing below it is walked.
        table = {key: [listings[key][0], b""] for key in keys if key in listings}
        starts = [(key, self._path(key), True) for key in keys]
        reports, _unchanged = walk_dirs(starts, table, os.cpu_count() or 1)
        changed = {key for key, _outcome in reports}
        with self._cond:
            fresh = client.fresh
            for key in keys:
                if key in fresh:
                    fresh.discard(key)
                    if key in changed:
                        client.dirty.add(key)
            client.fresh_settled += len(keys) - len(changed)
            client.fresh_listed += len(changed)
        return len(changed)

    def _find_links(self, keys: list[bytes]) -> None:
        """Mark the directories of `keys` that hold a file of several links (outside the
        lock: one lstat per file, on native threads)."""
        if self._inactive is not None or not keys:
            return
        outcomes = linked_dirs([self._path(key) for key in keys], os.cpu_count() or 1)
        found = [key for key, linked in zip(keys, outcomes, strict=True) if linked is True]
        if found:
            with self._cond:
                self._linked.update(found)
                self._fallback(f"{len(found)} dir(s) hold files of several links: listed at "
                               "every snapshot")

    def saved(self, client: WatchClient) -> None:
        with self._cond:
            client.unsaved = False

    def distrust(self, client: WatchClient, reason: str) -> None:
        with self._cond:
            client.trusted_generation = -2
            self._fallback(reason)

    def note_verify(self, client: WatchClient, mismatches: int) -> None:
        with self._cond:
            client.verify_runs += 1
            client.verify_mismatches += bool(mismatches)

    def state(self, client: WatchClient) -> WatchState:
        with self._cond:
            active = self._inactive is None and self._fd >= 0
            return WatchState(
                active=active, watched_dirs=len(self._key_wd),
                unwatched_dirs=len(self._failed.keys() | self._linked | self._mounts),
                full_walks=client.full_walks, overflows=self._overflows,
                last_fallback=self._last_fallback if active else self._inactive,
                verify_runs=client.verify_runs, verify_mismatches=client.verify_mismatches)

    def pause_reader(self) -> threading.Lock:
        """Test hook: the reader stops reading until the returned (held) lock is released,
        so events stay in the kernel's queue (and overflow it)."""
        gate = threading.Lock()
        gate.acquire()
        self._gate = gate
        os.write(self._wake[1], b"p")
        self._paused.wait(5)
        return gate

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._wake[1] >= 0:
            os.write(self._wake[1], b"x")
        if self._thread is not None:
            self._thread.join()
        if self._inotify is not None:
            self._inotify.close()
        for fd in self._wake:
            if fd >= 0:
                os.close(fd)
        if self._mountinfo is not None:
            self._mountinfo.close()  # type: ignore[attr-defined]


_registry: dict[bytes, Watcher] = {}
_registry_lock = threading.Lock()


class WatchHandle:
    """A `Checkpoints`' hold on the watcher of its root, for the stat cache at `cache_key`."""

    def __init__(self, root: bytes, cache_key: str) -> None:
        with _registry_lock:
            watcher = _registry.get(root)
            if watcher is None:
                watcher = _registry[root] = Watcher(root)
            watcher.refs += 1
        self.watcher = watcher
        self.client = watcher.client(cache_key)
        self._closed = False
        self._force: str | None = None

    def begin(self, keys: Callable[[], Iterable[bytes]], *, peek: bool = False) -> ScanTicket:
        force, self._force = self._force, None
        return self.watcher.begin(self.client, keys, peek=peek, force_full=force)

    def end(self, ticket: ScanTicket, keys: Iterable[bytes], *, unsaved: bool) -> None:
        self.watcher.end(self.client, ticket, keys, unsaved=unsaved)

    def settle(self, known: Callable[[], Known]) -> int:
        return self.watcher.settle(self.client, known)

    def abort(self, ticket: ScanTicket) -> None:
        self.watcher.abort(self.client, ticket)

    def saved(self) -> None:
        self.watcher.saved(self.client)

    def distrust(self, reason: str) -> None:
        self.watcher.distrust(self.client, reason)

    def state(self) -> WatchState:
        return self.watcher.state(self.client)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.watcher.release(self.client)
        with _registry_lock:
            self.watcher.refs -= 1
            if self.watcher.refs > 0:
                return
            _registry.pop(self.watcher.root, None)
        self.watcher.close()

