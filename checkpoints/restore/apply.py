"""Applying a restore plan: the only module that mutates the working tree.

Two steps, so a bad store never leaves a half-restored tree:
1. stage (staging.py): every file's content is read from the store, verified, and written
   into a staging directory on the root's filesystem; a missing or corrupt object aborts
   here, with the workspace untouched;
2. apply: removals that make room, mkdirs, the staged files and symlinks swapped or renamed
   into place (no temporary name ever appears in the workspace, and a replaced file is never
   missing), chmods, then removals and rmdirs — all relative to directory descriptors opened
   with O_NOFOLLOW one component at a time, so nothing is ever written through a symlink or
   outside the root, whatever changed on disk since the plan was made. The descriptors kept
   open are bounded by what the process may still open (`open_dirs_bound`).
What a restore replaces or removes is freed with the staging directory (`remove_staging_soon`)
rather than where it stood: freeing a file's blocks is the dearest step of replacing it (on
ext4), and a thread can do it while the caller records what was written.
A path that cannot be applied (an ignored file keeps a directory from being replaced, a
directory appeared where a file must go) is reported as a conflict, never forced. A resource
that runs out (`RESOURCE_ERRNOS`: no space or inodes, a quota, no descriptors, no memory) is
no conflict: the OSError is raised, naming the path, and the caller's journal stays open so
that the restore is completed once the resource is back.
Crash safety (the journal) is the caller's: this module can be re-run on any state.

A file gets the permission bits its entry records (`restored_mode`). It is created in the
staging directory with those bits or fewer (the umask can only take bits away), then given
exactly them, so it is never readable by anyone its recorded mode excludes, even for a moment.

Restored files are dated `RESTORED_AGE_NS` before their staging, while they are still private
to the staging directory: any later write to one moves its mtime to the present, so a stat
that still shows that date proves the content is what was restored, and the next snapshot
need not read it again (a file dated "now" would be racy: see statcache.py).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import stat as statmod
from collections.abc import Callable
from dataclasses import dataclass, field

from ckpt.checkpoints.paths import RelPath, display, parent_rel
from ckpt.checkpoints.restore.plan import Chmod, FileWrite, RestorePlan
from ckpt.checkpoints.snapshot.statcache import RACY_WINDOW_NS
from ckpt.objstore import EntryKind, TreeEntry
from ckpt.objstore.native import load_native

_fsops = load_native("ckpt.checkpoints._fsops")
_native_empty_dir = None if _fsops is None else _fsops.empty_dir
_native_exchange = None if _fsops is None else _fsops.exchange

# How a restore opens a directory: never through a symlink.
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
ProgressFn = Callable[[str, int, int], None]
# Past the racy window, and past the lag of the kernel's coarse file clock (a jiffy, <= 10 ms)
# behind time.time_ns(), so that a write after staging always gives another mtime. Build tools
# comparing mtimes still see a restored file as newer than anything built before the restore.
RESTORED_AGE_NS = RACY_WINDOW_NS + 10_000_000
ConflictFn = Callable[[RelPath, str], None]
# Directory descriptors an apply keeps open at most (see _Dirs), and the share of the
# descriptors the process may still open that it takes (the rest is for the store, the
# catalog and the caller).
MAX_OPEN_DIRS = 64
_DIRS_SHARE = 4
# A resource ran out: retrying once it is back completes the restore, so these are raised,
# never reported as conflicts.
RESOURCE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EMFILE, errno.ENFILE,
                             errno.ENOMEM})
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE})
# How renameat2 says it cannot exchange two names here (an old kernel, a file system without
# RENAME_EXCHANGE): the staged file is renamed over the old one instead.
_NO_EXCHANGE = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP})


@dataclass(frozen=True, slots=True)
class Written:
    path: RelPath
    kind: EntryKind
    ref: bytes  # blob id, or link target
    stat: os.stat_result


@dataclass(slots=True)
class ApplyReport:
    written: int = 0
    deleted: int = 0
    dirs_created: int = 0
    dirs_removed: int = 0
    chmods: int = 0
    bytes_written: int = 0
    conflicts: list[tuple[RelPath, str]] = field(default_factory=list)
    written_files: list[Written] = field(default_factory=list)
    removed_paths: list[RelPath] = field(default_factory=list)
    # Every directory the apply went through (b"" the root) as it was when the apply ended:
    # with the stats of what it wrote, what the next scan will list there (see scan.py).
    dir_stats: dict[bytes, os.stat_result] = field(default_factory=dict)


def current_umask() -> int:
    """The process's umask (read by setting it, then set back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def open_dirs_bound() -> int:
    """How many directory descriptors an apply keeps open: a share of those the process may
    still open (the soft RLIMIT_NOFILE less those in use), at most `MAX_OPEN_DIRS`, at least
    one. (A descriptor that still cannot be had closes the others first: see `_Dirs.open`.)"""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return MAX_OPEN_DIRS
    try:
        in_use = len(os.listdir("/dev/fd"))
    except OSError:
        in_use = 0
    return max(1, min(MAX_OPEN_DIRS, (soft - in_use) // _DIRS_SHARE))


class _Dirs:
    """Directory descriptors under the root, opened without following symlinks.

    At most `bound` stay open (least recently used closed first; `open_dirs_bound`), so a
    restore that goes through more directories than the process may hold descriptors (1,024
    by default on many systems; the Linux source has ~5,000 directories) does not fail with
    EMFILE; one that meets EMFILE anyway closes the others and tries again, so a single
    descriptor besides the root's is enough. The plan's paths are sorted, so a directory is
    seldom opened twice. A descriptor is only ever closed once its caller is done with it:
    `open` evicts after the new one is opened, and never the one it opens below."""

    def __init__(self, root: bytes, report: ApplyReport) -> None:
        self.root = root
        self.bound = open_dirs_bound()
        self.root_fd = os.open(root, DIR_FLAGS)
        self.fds: dict[RelPath, int] = {}  # in order of last use
        self.closed: dict[bytes, os.stat_result] = {}  # the stat of each evicted one
        self.report = report

    def reason(self, exc: OSError, path: RelPath) -> str:
        """The words of the conflict `exc` makes at `path`. A resource that ran out makes no
        conflict: `exc` is raised again, naming `path` in the workspace."""
        if exc.errno in RESOURCE_ERRNOS:
            where = os.fsdecode(self.root + b"/" + path)
            raise OSError(exc.errno, exc.strerror, where) from exc
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            return "a symlink or file stands where a directory must be"
        return exc.strerror or str(exc)

    def stat_all(self) -> dict[bytes, os.stat_result]:
        """The stat of every directory the apply went through; one that cannot be had is left
        out (it only tells the stat cache what the next scan will see). An evicted directory's
        is the one it had when closed: only a descriptor of it could have changed it since."""
        stats: dict[bytes, os.stat_result] = dict(self.closed)
        for path, fd in [(b"", self.root_fd), *self.fds.items()]:
            with contextlib.suppress(OSError):
                stats[path] = os.fstat(fd)
        return stats

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()
        os.close(self.root_fd)

    def forget(self, path: RelPath) -> None:
        prefix = path + b"/"
        for key in [k for k in self.fds if k == path or k.startswith(prefix)]:
            os.close(self.fds.pop(key))
        for gone in [k for k in self.closed if k == path or k.startswith(prefix)]:
            del self.closed[gone]

    def open(self, path: RelPath | None, *, create: bool) -> int:
        if path is None:
            return self.root_fd
        fd = self.fds.pop(path, None)
        if fd is not None:
            self.fds[path] = fd  # now the most recently used
            return fd
        parent_fd = self.open(parent_rel(path), create=create)
        name = path.rsplit(b"/", 1)[-1]
        try:
            fd = self._open_below(parent_fd, name)
        except FileNotFoundError:
            if not create:
                raise
            os.mkdir(name, 0o777, dir_fd=parent_fd)
            self.report.dirs_created += 1
            fd = self._open_below(parent_fd, name)
        self.fds[path] = fd
        self.closed.pop(path, None)
        while len(self.fds) > self.bound:
            self._evict_oldest()
        return fd

    def _open_below(self, parent_fd: int, name: bytes) -> int:
        """Open directory `name` in `parent_fd`; out of descriptors, close the others (all but
        `parent_fd`) one by one and try again before giving up."""
        while True:
            try:
                return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
            except OSError as exc:
                if exc.errno not in _OUT_OF_DESCRIPTORS or not self._evict_oldest(parent_fd):
                    raise
                self.bound = len(self.fds) + 1  # keep to what could be had

    def _evict_oldest(self, keep: int = -1) -> bool:
        """Close the least recently used descriptor but `keep`; False if there is none."""
        oldest = next((path for path, fd in self.fds.items() if fd != keep), None)
        if oldest is None:
            return False
        old_fd = self.fds.pop(oldest)
        with contextlib.suppress(OSError):
            self.closed[oldest] = os.fstat(old_fd)
        os.close(old_fd)
        return True


def _name(path: RelPath) -> bytes:
    return path.rsplit(b"/", 1)[-1]


def restored_mode(entry: TreeEntry, umask: int) -> int:
    """The permission bits a restore gives the file of `entry`: those it records, exactly; for
    an entry of its kind's default mode (so every file of a tree made before modes were
    recorded) that default less the `umask`, as a restore always gave it."""
    return entry.perms if entry.mode is not None else entry.perms & ~umask


def remove_staging(staging: bytes) -> None:
    """Remove a staging directory, ignoring errors. It is flat (staged files and symlinks, and
    what the apply replaced or removed), so unlinking its entries is enough. A directory in
    it is left there, and so is the staging directory: only a race with another writer can
    put one there (see `_put_in_place`), and it is not the restore's to delete. A symlink in
    its place is not followed (one in the workspace is the workspace's to plant)."""
    try:
        fd = os.open(staging, DIR_FLAGS)
    except OSError:
        return
    try:
        for name in os.listdir(fd):
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=fd)
    except OSError:
        return
    finally:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(staging)


def remove_staging_soon(staging: bytes) -> Callable[[], None]:
    """Start removing `staging` on another thread, which frees the files the apply replaced
    and removed while the caller goes on; returns the wait for it, which removes what that
    thread left (if anything), so that `staging` is gone once it returns. Without the native
    extension the removal is done here and now: a Python thread would get the GIL back after
    each unlink only when the caller lets go of it."""
    if _native_empty_dir is None:
        remove_staging(staging)
        return lambda: None
    import threading  # noqa: PLC0415  (only restores that wrote something need it)

    outcome: list[int] = []
    thread = threading.Thread(target=lambda: outcome.append(_native_empty_dir(staging)),
                              name="ckpt-free-staging", daemon=True)
    thread.start()

    def wait() -> None:
        thread.join()
        if outcome != [0]:
            remove_staging(staging)

    return wait


def apply_plan(
    root: bytes,
    plan: RestorePlan,
    staged: dict[RelPath, bytes],
    *,
    staging: bytes,
    progress: ProgressFn | None = None,
) -> ApplyReport:
    """Apply `plan` under `root`, with the files `stage_files` staged in `staging`, which also
    takes the files the apply removes, so that they are freed with it."""
    report = ApplyReport()
    dirs = _Dirs(root, report)
    trash = _Trash(staging)
    total = len(plan.writes) + len(plan.removals) + len(plan.pre_removals)
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress is not None and (done % 256 == 0 or done == total):
            progress("restore", done, total)

    def conflict(path: RelPath, reason: str) -> None:
        report.conflicts.append((path, reason))

    try:
        for removal in plan.pre_removals:
            _remove(dirs, removal.path, removal.kind, report, conflict, trash, strict=True)
            tick()
        for path in plan.mkdirs:
            try:
                dirs.open(path, create=True)
            except OSError as exc:
                conflict(path, dirs.reason(exc, path))
        for write in plan.writes:
            _write(dirs, write, staged.get(write.path), report, conflict)
            tick()
        mask = current_umask() if plan.chmods else 0
        for chmod in plan.chmods:
            _chmod(dirs, chmod, restored_mode(chmod.entry, mask), report, conflict)
        for removal in plan.removals:
            _remove(dirs, removal.path, removal.kind, report, conflict, trash, strict=False)
            tick()
        report.dir_stats = dirs.stat_all()
    finally:
        dirs.close()
    return report


def _write(
    dirs: _Dirs, write: FileWrite, staged: bytes | None, report: ApplyReport, conflict: ConflictFn
) -> None:
    path, entry = write.path, write.entry
    try:
        parent_fd = dirs.open(parent_rel(path), create=True)
    except OSError as exc:
        conflict(path, dirs.reason(exc, path))
        return
    name = _name(path)
    try:
        existing = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        existing = None
    if existing is not None and statmod.S_ISDIR(existing.st_mode):
        conflict(path, "a directory stands where a file must go")
        return
    if existing is not None and write.replaces is None:
        # Not in the current manifest, yet there: ignored, skipped or created since the
        # scan. The pre-restore checkpoint does not hold it, so overwriting would lose it.
        conflict(path, "a file the current checkpoint did not capture is in the way")
        return
    assert staged is not None
    try:
        if not _put_in_place(staged, parent_fd, name, replacing=existing is not None):
            conflict(path, "a directory stands where a file must go")
            return
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except OSError as exc:
        conflict(path, dirs.reason(exc, path))
        return
    report.written += 1
    ref = entry.target if entry.kind is EntryKind.SYMLINK else entry.oid
    assert ref is not None
    report.written_files.append(Written(path, entry.kind, ref, st))
    if entry.kind is not EntryKind.SYMLINK:
        report.bytes_written += entry.size


def _put_in_place(staged: bytes, parent_fd: int, name: bytes, *, replacing: bool) -> bool:
    """Move `staged` to `name` in `parent_fd`. What stands there (`replacing`: something did at
    the last look) is swapped into the staged name where the file system can exchange names,
    to be freed with the staging directory; else renamed over. False, with nothing changed,
    if a directory took that place since the look (it goes back where it was)."""
    if replacing and _native_exchange is not None:
        try:
            _native_exchange(staged, parent_fd, name)
        except OSError as exc:
            if exc.errno not in _NO_EXCHANGE and exc.errno != errno.ENOENT:
                raise  # ENOENT: it went away since the look, so there is nothing to swap
        else:
            if not statmod.S_ISDIR(os.lstat(staged).st_mode):
                return True
            _native_exchange(staged, parent_fd, name)
            return False
    os.rename(staged, name, dst_dir_fd=parent_fd)
    return True


class _Trash:
    """Where the apply leaves the files it removes: a hard link in the staging directory made
    before the unlink, so that the unlink does not free the file's blocks then and there (the
    staging directory's removal does). Where a link cannot be made (another file system, a
    file system without hard links, a file its owner protects), the unlink frees the file as
    usual."""

    def __init__(self, staging: bytes) -> None:
        self.staging = staging
        self.count = 0

    def keep(self, parent_fd: int, name: bytes, st: os.stat_result) -> None:
        if not st.st_blocks or not statmod.S_ISREG(st.st_mode):
            return  # nothing to free, or nothing a link could hold (a symlink's own blocks)
        self.count += 1
        with contextlib.suppress(OSError):
            os.link(name, b"%s/removed-%d" % (self.staging, self.count), src_dir_fd=parent_fd,
                    follow_symlinks=False)


def _chmod(dirs: _Dirs, chmod: Chmod, mode: int, report: ApplyReport,
           conflict: ConflictFn) -> None:
    """Give the file at `chmod.path` exactly the permission bits `mode` (set-id and sticky bits
    go: a tree never records them)."""
    path = chmod.path
    try:
        parent_fd = dirs.open(parent_rel(path), create=False)
        fd = os.open(_name(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent_fd)
        try:
            st = os.fstat(fd)
            if not statmod.S_ISREG(st.st_mode):
                conflict(path, "not a regular file")
                return
            os.fchmod(fd, mode)
            report.chmods += 1
        finally:
            os.close(fd)
    except OSError as exc:
        conflict(path, dirs.reason(exc, path))


def _remove(
    dirs: _Dirs, path: RelPath, kind: EntryKind, report: ApplyReport, conflict: ConflictFn,
    trash: _Trash, *, strict: bool,
) -> None:
    try:
        parent_fd = dirs.open(parent_rel(path), create=False)
    except FileNotFoundError:
        return  # already gone with its parent
    except OSError as exc:
        conflict(path, dirs.reason(exc, path))
        return
    name = _name(path)
    try:
        if kind is EntryKind.TREE:
            dirs.forget(path)
            os.rmdir(name, dir_fd=parent_fd)
            report.dirs_removed += 1
        else:
            st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
            if statmod.S_ISDIR(st.st_mode):
                conflict(path, "a directory stands where a file was")
                return
            trash.keep(parent_fd, name, st)
            os.unlink(name, dir_fd=parent_fd)
            report.deleted += 1
        report.removed_paths.append(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST) and not strict:
            return  # ignored or unknown files remain inside: the directory stays
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            conflict(path, "directory holds files the checkpoint does not know (ignored?)")
            return
        conflict(path, dirs.reason(exc, path))


def describe_conflicts(conflicts: list[tuple[RelPath, str]]) -> str:
    return "; ".join(f"{display(path)}: {reason}" for path, reason in conflicts[:5])
