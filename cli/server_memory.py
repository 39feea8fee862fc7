"""Giving the heap a big request freed back to the system, so the resident server stays small.

Owns `HeapTrim`: after each request the server asks it whether the process's resident size
grew by more than `GROWTH` since the last look; if so it calls glibc's `malloc_trim(0)`, which
returns the free pages of every malloc arena (a first push or a big restore frees hundreds of
MiB that glibc would otherwise keep for the process's life). Where there is no `malloc_trim`
(musl, macOS) or no /proc, it does nothing.

What it must not do: run during a request (the server calls it after EXIT is sent), or trim
after every small request (a trim costs page faults on the next request's allocations).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable

GROWTH = 64 << 20  # bytes of resident growth since the last look that make a trim worth it


def _resident_bytes() -> int | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        libc = ctypes.CDLL(None)
        trim: Callable[[int], int] = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    return trim


class HeapTrim:
    """Trims the heap after a request that grew the process by more than `growth` bytes."""

    def __init__(self, growth: int = GROWTH) -> None:
        self.growth = growth
        self.trim = _malloc_trim()
        self.baseline = _resident_bytes()

    def after_request(self) -> int | None:
        """Trim if the process grew past the baseline by `growth`: the resident bytes after
        the trim, None when it did not trim."""
        now = _resident_bytes()
        if self.trim is None or now is None or self.baseline is None:
            return None
        if now - self.baseline < self.growth:
            self.baseline = min(self.baseline, now)
            return None
        self.trim(0)
        self.baseline = _resident_bytes() or now
        return self.baseline
