"""The server's heap trim (cli/server_memory.py) on this process's real glibc heap: memory freed
in the middle of the heap stays resident until `HeapTrim` trims, and it trims only after
growth past its threshold."""

from __future__ import annotations

import ctypes

import pytest

from ckpt.cli.server_memory import HeapTrim, _resident_bytes

CHUNK = 64 << 10  # under glibc's mmap threshold: from the heap, not a mapping of its own
CHUNKS = 1600  # 100 MiB


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None)
    if not hasattr(libc, "malloc_trim") or _resident_bytes() is None:
        pytest.skip("needs glibc's malloc_trim and /proc")
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    return libc


def test_a_request_that_grew_the_heap_is_trimmed_back() -> None:
    libc = _libc()
    heap = HeapTrim(growth=32 << 20)
    chunks = [libc.malloc(CHUNK) for _ in range(CHUNKS)]
    assert all(chunks)
    for chunk in chunks:
        ctypes.memset(chunk, 1, CHUNK)  # resident
    for chunk in chunks[:-1]:  # the last one pins the heap's top: free() alone returns nothing
        libc.free(chunk)
    before = _resident_bytes()
    assert before is not None
    try:
        trimmed = heap.after_request()
        after = _resident_bytes()
        assert trimmed is not None and after is not None
        assert before - after >= CHUNK * CHUNKS // 2, (before >> 20, after >> 20)
        assert trimmed <= after + (1 << 20)
        assert heap.after_request() is None  # no growth since: no second trim
    finally:
        libc.free(chunks[-1])


def test_no_trim_below_the_threshold() -> None:
    _libc()
    heap = HeapTrim(growth=1 << 40)
    assert heap.after_request() is None
