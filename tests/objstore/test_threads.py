"""The process's shared thread pools (objstore/threads.py): one per name, kept between uses,
and new ones in a forked child, whose parent's threads did not cross the fork."""

from __future__ import annotations

import os
import threading

from ckpt.objstore.threads import shared_pool


def test_a_pool_is_made_once_per_name_and_runs_on_named_threads() -> None:
    pool = shared_pool("ckpt-test-pool", 2)
    assert shared_pool("ckpt-test-pool", 5) is pool  # the first size stands
    assert shared_pool("ckpt-test-other", 1) is not pool
    names = set(pool.map(lambda _: threading.current_thread().name, range(8)))
    assert names and all(name.startswith("ckpt-test-pool") for name in names)


def test_a_forked_child_gets_a_pool_that_runs_its_tasks() -> None:
    """The child's first use makes a new pool: a task submitted to the parent's would wait
    for threads that the fork left behind, for ever."""
    pool = shared_pool("ckpt-test-fork", 1)
    assert pool.submit(lambda: 1).result() == 1  # its thread runs in the parent
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's result comes back through the pipe
        try:
            answer = shared_pool("ckpt-test-fork", 1).submit(lambda: 41 + 1).result(timeout=20)
            os.write(write, str(answer).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as got:
        assert got.read() == b"42"
    assert os.waitpid(child, 0)[1] == 0
    assert shared_pool("ckpt-test-fork", 1) is pool
