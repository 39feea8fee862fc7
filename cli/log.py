"""The `ckpt` command's log switch: `-v/--verbose` and `CKPT_LOG=debug|info|warning`.

Owns the one stderr handler the CLI puts on the `ckpt` logger for an invocation: one line per
record, `logger.name: message` (`ckpt.checkpoints.scan: re-read src/a.py: size changed`). The
library only emits records (its loggers are `ckpt.*`, at DEBUG); choosing whether and where they appear is the application's, here the CLI's.
stdout never sees a log line: it carries the command's output, possibly `--json`.

Without `-v` or `CKPT_LOG` nothing is attached, and `logging` itself is imported only then.
Must not import click or the library.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

LOGGER = "ckpt"
ENV = "CKPT_LOG"
FORMAT = "%(name)s: %(message)s"
# logging.DEBUG, INFO and WARNING, spelled out so that choosing a level imports nothing.
LEVELS = {"debug": 10, "info": 20, "warning": 30}


def parse_level(text: str) -> int:
    """`debug`, `info` or `warning` (any case) -> the logging level; ValueError otherwise."""
    level = LEVELS.get(text.strip().lower())
    if level is None:
        raise ValueError(f"{text!r} is not a log level (choose from {', '.join(LEVELS)})")
    return level


def chosen_level(*, verbose: int, env: str | None) -> int | None:
    """The level asked for, or None for no log output: `-v` means debug, whatever CKPT_LOG
    says; an empty CKPT_LOG counts as unset."""
    if verbose:
        return LEVELS["debug"]
    if env is None or not env.strip():
        return None
    return parse_level(env)


def attach(level: int, stream: TextIO) -> Callable[[], None]:
    """Send the `ckpt` logger's records at `level` and above to `stream`; returns the undo.

    The undo matters in-process (click's CliRunner runs many invocations in one interpreter,
    each with its own stderr): handlers and levels must not pile up on the global logger.
    """
    import logging

    logger = logging.getLogger(LOGGER)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(FORMAT))
    handler.setLevel(level)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)

    def detach() -> None:
        logger.removeHandler(handler)
        logger.setLevel(previous)

    return detach
