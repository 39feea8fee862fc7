"""Thread pools that live as long as the process: the one place that makes them.

A restore of a source tree hands work to threads (block decompression, ranged GETs) in
dozens of batches; a pool per batch starts and joins its threads each time, on the thread
that also stores and stages what arrives. A pool here is made on first use and kept: its
idle threads cost nothing, and the resident server reuses them request after request.

What runs on these pools must not wait for another task of the same pool (a full pool would
wait for itself); a caller that stops early cancels the tasks it no longer needs. A process
forked after a pool was made gets new pools (the threads do not cross a fork).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_pools: dict[str, tuple[int, ThreadPoolExecutor]] = {}
_lock = threading.Lock()


def shared_pool(name: str, threads: int) -> ThreadPoolExecutor:
    """The process's pool `name` (its threads are named after it), with `threads` threads
    at most; the size given the first time stands."""
    pid = os.getpid()
    with _lock:
        made = _pools.get(name)
        if made is None or made[0] != pid:
            made = _pools[name] = (pid, ThreadPoolExecutor(threads, thread_name_prefix=name))
        return made[1]
