"""Pure parsers for option values: durations (`--older-than 7d`), `--meta KEY=VALUE`, event
types (`events --type`), and the check that free text (labels, ids, sessions) is Unicode the
catalog can store.

No IO, no click: the command modules wrap these in click parameter types so a bad value is a
usage error (exit 2) naming the option; `event_type_callback` raises the CLI's own usage error
(one line naming the valid types).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

# The events the library records (docs/CLI.md, "events").
EVENT_TYPES = ("checkpoint:create", "checkpoint:restore", "checkpoint:prune", "workspace:moved",
               "catalog:rebuild")

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


def parse_duration(text: str) -> timedelta:
    """`30s`, `15m`, `2h`, `7d`, `1w`, or a sum such as `1h30m`; ValueError otherwise.

    A unit is required: a bare `30` could mean seconds or days, and prune is not the place
    to guess.
    """
    spec = text.strip().lower()
    pos = 0
    seconds = 0.0
    for match in _PART.finditer(spec):
        if match.start() != pos:
            break
        seconds += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if not spec or pos != len(spec):
        raise ValueError(f"{text!r} is not a duration (examples: 30s, 15m, 2h, 7d, 1h30m)")
    return timedelta(seconds=seconds)


def parse_meta(items: Iterable[str]) -> dict[str, str]:
    """`["a=1", "b=x=y"]` -> `{"a": "1", "b": "x=y"}`; values stay text; ValueError on `a`."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{item!r} is not KEY=VALUE")
        out[check_text(key)] = check_text(value)
    return out


def check_text(text: str) -> str:
    """`text` if it encodes as UTF-8; ValueError for bytes that are not (lone surrogates that
    Python makes of a non-UTF-8 command line)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{text.encode('utf-8', 'backslashreplace').decode()!r} is not valid "
                         "UTF-8 text") from None
    return text


def event_type_callback(ctx: Any, param: Any, value: str | None) -> str | None:
    """`events --type`: one of EVENT_TYPES, else a one-line usage error (exit 2) naming them."""
    if value is None or value in EVENT_TYPES:
        return value
    from ckpt.cli.errors import USAGE, CliError

    shown = value.encode("utf-8", "backslashreplace").decode()
    raise CliError(f"unknown event type {shown!r} for --type: the types are "
                   f"{', '.join(EVENT_TYPES)}", code=USAGE)
