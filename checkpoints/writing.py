"""`LockedRoot`: one write call's hold on a workspace root, and the bookkeeping it leaves behind.

A write call (snapshot, restore, a diff against the workspace, recover) holds two locks: the
store's gc lock shared (so gc never sweeps what it writes) and the root's lock exclusive. What
the call does only for the speed of later calls (the stat cache's update and save, freeing what
a restore replaced) is deferred: it runs once the call's own work is done and durable, on a
thread that keeps both locks until it has finished, so the call returns sooner. The object that
took the locks is the one that releases them, on whichever thread finishes last:

    with LockedRoot(...) as locked:     # takes both locks
        ... locked.defer(job) ...       # queued; run now instead if the call is bulky
    locked.wait()                       # (the next call, settle, close) joins the thread

A bulky call (past `BEHIND_MAX_FILES` files hashed or written) does its bookkeeping in the
call, at the points it names (`catch_up`): its cache is big, and saving that on another thread
raises the peak RSS (the thread's buffers come from a malloc arena of its own) while the call's
own time dwarfs the save. A call that fails runs its jobs before raising, quietly: what its scan
learnt still holds.

Jobs are plain callables; the one thing of a scan this module holds is the stat cache it made
(`scanned_cache`), to save it with the jobs. It knows nothing else of scans or restores, and it
changes no process-global state (the cyclic garbage collector included).
"""

from __future__ import annotations

import enum
import os
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Self

from ckpt.checkpoints.errors import CheckpointError
from ckpt.checkpoints.lock import RootLock
from ckpt.objstore.errors import ObjstoreError

if TYPE_CHECKING:
    from ckpt.checkpoints.snapshot.statcache import StatCache

Job = Callable[[], None]
# Past this many files hashed or written, a call's bookkeeping is done in the call (see above).
BEHIND_MAX_FILES = 2000


class Bookkeeping(enum.Enum):
    """Where a call's deferred jobs run."""

    BEHIND = "behind"  # on a thread after the call returns (the default)
    IN_CALL = "in call"  # in the call, at its `catch_up` points and before it returns


def run_all(jobs: Sequence[Job]) -> BaseException | None:
    """Run every job, whatever fails (each frees or saves something of its own); return the
    first failure."""
    failure = None
    for job in jobs:
        try:
            job()
        except BaseException as exc:  # noqa: BLE001 (the caller raises it)
            failure = failure or exc
    return failure


class LockedRoot:
    """The locks of one write call, its deferred jobs and the thread that runs them.

    Not reentrant and not thread-safe: one call uses it, then `wait` may be called from the
    thread that made it. `scanned_cache` is the stat cache a scan under these locks made: a
    restore that follows plans and updates from it, and it is saved with the jobs if dirty.
    """

    __slots__ = (
        "_error",
        "_gc_lock",
        "_jobs",
        "_locks",
        "_mode",
        "_root_lock",
        "_save",
        "_thread",
        "scanned_cache",
    )

    def __init__(self, gc_lock: str, root_lock: str, *, timeout: float, purpose: str,
                 save_cache: Callable[[StatCache], None]) -> None:
        self._gc_lock = RootLock(gc_lock, timeout=timeout, shared=True, purpose=purpose)
        # The gc lock is at the top of the store: no symlink below it is followed to the other.
        self._root_lock = RootLock(root_lock, timeout=timeout, purpose=purpose,
                                   beneath=os.path.dirname(gc_lock))
        self._locks = ExitStack()
        self._jobs: list[Job] = []
        self._mode = Bookkeeping.BEHIND
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._save = save_cache
        self.scanned_cache: StatCache | None = None

    # -- the call ------------------------------------------------------------------------

    def __enter__(self) -> Self:
        with ExitStack() as locks:
            locks.enter_context(self._gc_lock)
            locks.enter_context(self._root_lock)
            self._locks = locks.pop_all()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            try:
                self._run_now(quiet=True)
            finally:
                self._locks.close()
            return
        try:
            if self._mode is Bookkeeping.IN_CALL:
                self._run_now(quiet=False)
        except BaseException:
            self._locks.close()
            raise
        self._run_behind()

    @property
    def mode(self) -> Bookkeeping:
        return self._mode

    def note_files(self, count: int) -> None:
        """The call hashed or wrote `count` files: past `BEHIND_MAX_FILES` its bookkeeping is
        done in the call from now on."""
        if count > BEHIND_MAX_FILES:
            self._mode = Bookkeeping.IN_CALL

    def defer(self, *jobs: Job) -> None:
        """Queue `jobs` for after the call; a bulky call runs them now, all of them, and
        raises the first failure (so a restore's journal outlives a failed cache update)."""
        if self._mode is Bookkeeping.BEHIND:
            self._jobs += jobs
            return
        failure = run_all(jobs)
        if failure is not None:
            raise failure

    def catch_up(self) -> None:
        """A bulky call's point of doing what is queued (a snapshot saves its big cache
        before its commit); nothing for a call whose bookkeeping runs behind."""
        if self._mode is Bookkeeping.IN_CALL:
            self._run_now(quiet=False)

    def run_now(self) -> None:
        """Do what is queued here, now, whatever the mode, raising the first failure (a
        completed restore's cache must be saved before the call that follows scans)."""
        self._run_now(quiet=False)

    def _take_jobs(self) -> list[Job]:
        """The queued jobs, then the save of the scan's stat cache if it changed (a restore's
        update, queued before, saves what it changes itself); the queue is emptied."""
        jobs, self._jobs = self._jobs, []
        cache, self.scanned_cache = self.scanned_cache, None
        if cache is not None and cache.dirty:
            save = self._save
            jobs.append(lambda: save(cache) if cache.dirty else None)
        return jobs

    def _run_now(self, *, quiet: bool) -> None:
        """Do the queued jobs here; unless `quiet`, raise the first failure once all ran."""
        failure = run_all(self._take_jobs())
        if failure is not None and not (
                quiet and isinstance(failure, (OSError, CheckpointError, ObjstoreError))):
            raise failure

    def _run_behind(self) -> None:
        """Do the queued jobs on a thread, which then releases the locks."""
        jobs = self._take_jobs()
        if not jobs:
            self._locks.close()
            return

        def run() -> None:
            # Let the caller have the GIL back first: `start` waits until this thread runs, and
            # this thread would otherwise keep the GIL for a whole switch interval.
            time.sleep(0)
            try:
                self._error = run_all(jobs)
            finally:
                self._locks.close()

        thread = threading.Thread(target=run, name="ckpt-bookkeeping")  # not a daemon: an
        try:  # interpreter that exits without `close` still finishes the cache's save
            thread.start()
        except RuntimeError:  # no thread to be had: do it here
            run()
            self.wait()
            return
        self._thread = thread

    # -- after the call ------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the jobs are still running behind (the locks are still held)."""
        return self._thread is not None

    def wait(self) -> None:
        """Wait until the jobs are done and the locks released; raise what failed in them,
        once."""
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join()
        error, self._error = self._error, None
        if error is not None:
            raise error
