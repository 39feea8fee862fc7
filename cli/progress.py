"""Progress lines on stderr for long work (hashing, restoring), only on a terminal.

Owns the `progress(stage, done, total)` callback the CLI hands to `Checkpoints.create`,
`restore` and `diff`. It draws one line that it rewrites in place (`\\r`, erase to the end of
the line), at most every `interval` seconds plus the first and the last call of a stage, and
erases it when done, so the terminal is left clean. It writes to stderr only: stdout carries
the command's output (possibly `--json`) and must never see a progress byte.

Enabled when stderr is a terminal (and `TERM` is not `dumb`), unless `--no-progress`.
The clock is injectable for tests.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import TextIO

_STAGE_NAMES = {"hash": "hashing", "restore": "restoring", "scan": "scanning"}


def stderr_is_terminal(stream: TextIO | None = None) -> bool:
    stream = stream if stream is not None else sys.stderr
    try:
        return stream.isatty() and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # closed or fake stream
        return False


class Progress:
    """A throttled one-line progress display; call it as the library's progress callback."""

    def __init__(self, stream: TextIO, *, interval: float = 0.1,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.interval = interval
        self.clock = clock
        self.draws = 0
        self._last = float("-inf")
        self._stage: str | None = None
        self._shown = False

    def __call__(self, stage: str, done: int, total: int) -> None:
        now = self.clock()
        new_stage = stage != self._stage
        if not (new_stage or done >= total or now - self._last >= self.interval):
            return
        self._stage = stage
        self._last = now
        name = _STAGE_NAMES.get(stage, stage)
        if total > 0:
            text = f"ckpt: {name} {done}/{total} ({100 * done // total}%)"
        else:
            text = f"ckpt: {name} {done}"
        self._write(f"\r\x1b[K{text}")
        self._shown = True
        self.draws += 1

    def finish(self) -> None:
        """Erase the line (call when the work is over, also on error)."""
        if self._shown:
            self._write("\r\x1b[K")
            self._shown = False

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a display problem must never fail the operation


def make_progress(*, enabled: bool, stream: TextIO | None = None) -> Progress | None:
    stream = stream if stream is not None else sys.stderr
    if enabled and stderr_is_terminal(stream):
        return Progress(stream)
    return None
