"""`LockedRoot` (writing.py): a write call's locks, its deferred jobs and their thread.

Its contracts: the locks are held from `__enter__` until the deferred jobs are done (on the
thread, or in the call for a bulky one); every job runs even when one fails, and the first
failure is raised once (by `wait` behind, by the call in it); a call that raises runs its jobs
quietly before the locks go. Real lock files in a temp directory; jobs are plain callables.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.checkpoints.errors import StoreBusy
from ckpt.checkpoints.lock import RootLock
from ckpt.checkpoints.writing import BEHIND_MAX_FILES, Bookkeeping, LockedRoot, run_all


def _locked(tmp: Path, purpose: str = "test") -> LockedRoot:
    return LockedRoot(str(tmp / "gc.lock"), str(tmp / "lock"), timeout=0.1, purpose=purpose,
                      save_cache=lambda cache: None)


def _root_is_free(tmp: Path) -> bool:
    try:
        with RootLock(str(tmp / "lock"), timeout=0.05):
            return True
    except StoreBusy:
        return False


def test_the_locks_are_held_until_the_jobs_behind_are_done(tmp_path: Path) -> None:
    release, started = threading.Event(), threading.Event()

    def slow() -> None:
        started.set()
        assert release.wait(30)

    locked = _locked(tmp_path)
    with locked:
        assert not _root_is_free(tmp_path)
        locked.defer(slow)
    assert started.wait(30) and locked.running
    assert not _root_is_free(tmp_path)  # the call returned; its job still holds the lock
    release.set()
    locked.wait()
    assert _root_is_free(tmp_path) and not locked.running


def test_a_call_with_nothing_deferred_releases_its_locks_as_it_ends(tmp_path: Path) -> None:
    locked = _locked(tmp_path)
    with locked:
        pass
    assert not locked.running and _root_is_free(tmp_path)


def test_the_first_failure_behind_is_raised_once_and_every_job_runs(tmp_path: Path) -> None:
    ran: list[int] = []

    def fail(index: int) -> None:
        ran.append(index)
        raise OSError(index, "failed")

    locked = _locked(tmp_path)
    with locked:
        locked.defer(lambda: fail(1), lambda: fail(2), lambda: ran.append(3))
    with pytest.raises(OSError) as caught:
        locked.wait()
    assert caught.value.errno == 1 and ran == [1, 2, 3]
    locked.wait()  # raised once
    assert _root_is_free(tmp_path)


def test_a_bulky_call_runs_what_it_defers_at_once_and_raises_its_first_failure(
        tmp_path: Path) -> None:
    ran: list[str] = []

    def update() -> None:
        ran.append("update")
        raise OSError(28, "No space left on device")

    locked = _locked(tmp_path)
    with pytest.raises(OSError), locked:
        locked.note_files(BEHIND_MAX_FILES + 1)
        assert locked.mode is Bookkeeping.IN_CALL
        locked.defer(update, lambda: ran.append("free"))
    assert ran == ["update", "free"]  # freeing ran although the update failed
    assert not locked.running and _root_is_free(tmp_path)


def test_a_failing_call_runs_its_jobs_quietly_and_raises_its_own_error(tmp_path: Path) -> None:
    ran: list[str] = []

    def broken_save() -> None:
        ran.append("save")
        raise OSError(5, "Input/output error")

    locked = _locked(tmp_path)
    with pytest.raises(KeyError), locked:
        locked.defer(broken_save)
        raise KeyError("the call's own failure")
    assert ran == ["save"] and not locked.running and _root_is_free(tmp_path)
    locked.wait()  # the job's failure was the quiet kind: nothing left to raise


@given(st.lists(st.integers(min_value=0, max_value=2 * BEHIND_MAX_FILES), max_size=4))
def test_a_call_is_bulky_once_any_step_passes_the_limit(counts: list[int]) -> None:
    locked = LockedRoot(os.devnull, os.devnull, timeout=0.1, purpose="test",
                        save_cache=lambda cache: None)  # never entered: no lock is taken
    for count in counts:
        locked.note_files(count)
    bulky = any(count > BEHIND_MAX_FILES for count in counts)
    assert locked.mode is (Bookkeeping.IN_CALL if bulky else Bookkeeping.BEHIND)


@given(st.lists(st.booleans(), max_size=6))
def test_run_all_runs_every_job_and_returns_the_first_failure(fails: list[bool]) -> None:
    ran: list[int] = []

    def job(index: int, fail: bool) -> Callable[[], None]:
        def run() -> None:
            ran.append(index)
            if fail:
                raise ValueError(index)
        return run

    failure = run_all([job(i, f) for i, f in enumerate(fails)])
    assert ran == list(range(len(fails)))
    first = next((i for i, f in enumerate(fails) if f), None)
    assert (failure is None) if first is None else (
        isinstance(failure, ValueError) and failure.args == (first,))
