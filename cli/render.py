"""Output for people and for scripts: JSON documents, tables, sizes, paths.

Owns how every value is shown. JSON goes through `dumps`: UTF-8 text (`ensure_ascii=False`),
two-space indent, keys in the order the library gives them. Paths are bytes inside ckpt; in
JSON they become `os.fsdecode(path)`, so a name that is not valid UTF-8 carries lone
surrogates (U+DC80..U+DCFF, Python's surrogateescape), which `dumps` writes as `\\udcXX`
escapes. That is lossless: `os.fsencode(json.loads(text)["path"])` gives back the exact bytes.
(Parsers other than Python may turn lone surrogates into U+FFFD.) In plain text a path is shown
as it is unless it holds control characters, a backslash, a double quote or non-UTF-8 bytes;
then it is quoted as git does (`"a\\nb"`, `"caf\\303"`).

Writes only to the streams it is given (stdout by default); never imports the library's heavy
modules and never decides exit codes.

A result, once written, stands: `delivering()` wraps the writing of a result that says
something was done (the id `create` prints). A SIGINT that arrives meanwhile is held until the
result is out and noted (`delivered()`), so a Ctrl-C comes either before it (nothing printed,
exit 130) or after it (exit 0, the rest of the command's tidying up skipped: `cli/main.py`).
The note is one flag per process, reset for each invocation.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, TextIO

_SURROGATE = re.compile("[\ud800-\udfff]")
_delivered = False


def path_text(path: bytes | str) -> str:
    """A path for JSON: `os.fsdecode` (surrogateescape for non-UTF-8 bytes)."""
    return os.fsdecode(path) if isinstance(path, bytes) else path


def dumps(value: Any, *, indent: int | None = 2) -> str:
    """JSON text of `value`; lone surrogates (non-UTF-8 names) become `\\udcXX` escapes."""
    import json  # here, not at the top: `ckpt --version` / plain output do not need it

    text = json.dumps(value, ensure_ascii=False, indent=indent, allow_nan=False)
    # json only emits a surrogate inside a string literal, so escaping it here is exact.
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def write_json(value: Any, out: TextIO | None = None) -> None:
    stream = out if out is not None else sys.stdout
    stream.write(dumps(value) + "\n")
    stream.flush()


def write_lines(lines: Iterable[str], out: TextIO | None = None) -> None:
    stream = out if out is not None else sys.stdout
    for line in lines:
        stream.write(line + "\n")
    stream.flush()


# -- a result that stands -----------------------------------------------------------------

def reset_delivered() -> None:
    global _delivered
    _delivered = False


def delivered() -> bool:
    """Whether this invocation's result was written in full (a later Ctrl-C exits 0)."""
    return _delivered


@contextmanager
def delivering() -> Iterator[None]:
    """Write the result inside this block; a SIGINT meanwhile is held until it is noted."""
    global _delivered
    import signal  # only a command that delivers a result pays for it

    held: list[int] = []
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


# -- plain text ---------------------------------------------------------------------------

_C_ESCAPES = {"\a": "\\a", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\v": "\\v", "\f": "\\f",
              "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def display_path(path: bytes | str) -> str:
    """A path for a person: as is, or git-style quoted when it holds anything unusual."""
    raw = os.fsencode(path) if isinstance(path, str) else path
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and text.isprintable() and '"' not in text and "\\" not in text:
        return text
    out = []
    for char in raw.decode("utf-8", "surrogateescape"):
        code = ord(char)
        if char in _C_ESCAPES:
            out.append(_C_ESCAPES[char])
        elif 0xDC80 <= code <= 0xDCFF:  # an undecodable byte
            out.append(f"\\{code - 0xDC00:03o}")
        elif not char.isprintable():
            out.extend(f"\\{b:03o}" for b in char.encode("utf-8"))
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def format_size(n: int) -> str:
    """`512 B`, `1.5 KiB`, `3.2 GiB`."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_when(at: datetime) -> str:
    """`2026-11-29 16:17:02` in UTC (tables say "UTC" in their header)."""
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def one_line(text: str | None, width: int = 40) -> str:
    """User text squeezed into a table cell: no line breaks, cut with an ellipsis."""
    if not text:
        return "-"
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], *,
          right: frozenset[int] = frozenset()) -> list[str]:
    """Columns aligned with two spaces; columns in `right` (numbers) align right."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def fmt(cells: Sequence[str]) -> str:
        parts = [c.rjust(widths[i]) if i in right else c.ljust(widths[i])
                 for i, c in enumerate(cells)]
        return "  ".join(parts).rstrip()

    return [fmt(header)] + [fmt(row) for row in rows]


def key_values(pairs: Sequence[tuple[str, str]]) -> list[str]:
    width = max((len(k) for k, _ in pairs), default=0)
    return [f"{k.ljust(width)}  {v}" for k, v in pairs]
