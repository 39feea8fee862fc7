"""What a Ctrl-C (SIGINT) means for the exit code.

One rule: a command's result, once written, stands. `delivering()` wraps the writing of a
result that says something was done (the id `create` prints): a SIGINT that arrives while it
is written is held until the result is out and noted, so a Ctrl-C either comes first (nothing
printed, exit 130) or after (the result stands: exit 0, the rest of the command's tidying up
skipped). A SIGINT before any command code runs (while the command is still being imported) is
`cli/__init__.py`'s to catch.

Holds one flag per process (reset for each invocation, so in-process runs start clean). Imports
`signal` only when a result is delivered.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_delivered = False


def reset() -> None:
    global _delivered
    _delivered = False


def delivered() -> bool:
    """Whether this invocation's result was written in full (a later Ctrl-C exits 0)."""
    return _delivered


@contextmanager
def delivering() -> Iterator[None]:
    """Write the result inside this block; a SIGINT meanwhile is held until it is noted."""
    global _delivered
    import signal

    held: list[Any] = []
    try:
        previous = signal.signal(signal.SIGINT, lambda signum, frame: held.append(signum))
    except ValueError:  # not the main thread: nothing can be held
        yield
        _delivered = True
        return
    try:
        yield
        _delivered = True
    finally:
        signal.signal(signal.SIGINT, previous)
    if held:
        raise KeyboardInterrupt
