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
from dataclasses import dataclass
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


def format_age(at: datetime, now: datetime) -> str:
    """How long before `now` `at` was: `12 s ago`, `3 min ago`, `5 h ago`, `2 days ago`,
    `7 weeks ago`, `2 years ago` (whole units, rounded down; a time ahead of `now` by clock
    skew is `just now`)."""
    seconds = int((now - at).total_seconds())
    if seconds < 1:
        return "just now"
    for limit, size, unit in ((60, 1, "s"), (3600, 60, "min"), (86400, 3600, "h")):
        if seconds < limit:
            return f"{seconds // size} {unit} ago"
    days = seconds // 86400
    for limit, size, unit in ((14, 1, "day"), (730, 7, "week")):
        if days < limit:
            n = days // size
            return f"{n} {unit}{'' if n == 1 else 's'} ago"
    return f"{days // 365} years ago"


_ID_MARK = "ckpt-"  # a word holding a checkpoint id is never cut


def cut_label(text: str | None, width: int = 40) -> str:
    """User text for a table cell: one line, cut at a word boundary with an ellipsis, never
    inside a word holding a checkpoint id (such a word is kept whole or left out). A single
    word longer than the cell, no id in it, is cut where the cell ends."""
    if not text:
        return "-"
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    kept: list[str] = []
    used = 0
    for word in flat.split(" "):
        need = len(word) + (1 if kept else 0)
        if used + need > width - 1:
            if not kept and _ID_MARK not in word:
                return word[: width - 1] + "…"
            if not kept:  # an id first: whole, past the width
                kept.append(word)
            break
        kept.append(word)
        used += need
    return " ".join(kept) + "…"


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


# -- diff --stat ----------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StatRow:
    """One file of `diff --stat`: its name as shown, lines (or, binary, bytes) each side."""

    name: str
    insertions: int
    deletions: int
    binary: bool = False
    old_size: int = 0
    new_size: int = 0


def diff_stat(rows: Sequence[StatRow], width: int = 80) -> list[str]:
    """`git diff --stat` for `rows` in `width` columns (git's diff.c `show_stats`): `name |
    N ++--` scaled to fit, `Bin A -> B bytes` for a binary file, then the summary line."""
    if not rows:
        return []
    max_len = max(_width(r.name) for r in rows)
    max_change = max((r.insertions + r.deletions for r in rows if not r.binary), default=0)
    bin_width = max((14 + len(str(r.new_size)) + len(str(r.old_size))
                     for r in rows if r.binary), default=0)
    number_width = max(len(str(max_change)), 3 if bin_width else 0)
    width = max(width, 16 + 6 + number_width)
    graph_width = max_change if max_change + 4 > bin_width else bin_width - 4
    name_width = max_len
    if name_width + number_width + 6 + graph_width > width:
        if graph_width > width * 3 // 8 - number_width - 6:
            graph_width = max(width * 3 // 8 - number_width - 6, 6)
        if name_width > width - number_width - 6 - graph_width:
            name_width = width - number_width - 6 - graph_width
        else:
            graph_width = width - number_width - 6 - name_width
    lines = []
    for row in rows:
        name, prefix = row.name, ""
        if name_width < _width(name):  # keep the tail, from a "/" when there is one
            prefix = "..."
            while name and _width(name) > max(name_width - 3, 0):
                name = name[1:]
            slash = name.find("/")
            if slash >= 0:
                name = name[slash:]
        head = f" {prefix}{name}{' ' * max(name_width - len(prefix) - _width(name), 0)} | "
        if row.binary:
            lines.append(f"{head}{'Bin'.rjust(number_width)} {row.old_size} -> "
                         f"{row.new_size} bytes")
            continue
        add, delete = row.insertions, row.deletions
        if graph_width <= max_change:
            total = _scale(add + delete, graph_width, max_change)
            if total < 2 and add and delete:
                total = 2
            if add < delete:
                add = _scale(add, graph_width, max_change)
                delete = total - add
            else:
                delete = _scale(delete, graph_width, max_change)
                add = total - delete
        changed = row.insertions + row.deletions
        lines.append(f"{head}{str(changed).rjust(number_width)}"
                     f"{' ' if changed else ''}{'+' * add}{'-' * delete}")
    text_rows = [r for r in rows if not r.binary]
    insertions = sum(r.insertions for r in text_rows)
    deletions = sum(r.deletions for r in text_rows)
    summary = f" {len(rows)} file{'' if len(rows) == 1 else 's'} changed"
    if insertions or not deletions:
        summary += f", {insertions} insertion{'' if insertions == 1 else 's'}(+)"
    if deletions or not insertions:
        summary += f", {deletions} deletion{'' if deletions == 1 else 's'}(-)"
    lines.append(summary)
    return lines


def _width(text: str) -> int:
    """Terminal columns of `text`: 2 for a wide character, 0 for a combining one (as git's
    utf8_strwidth counts them)."""
    if text.isascii():
        return len(text)
    import unicodedata  # only a name beyond ASCII needs it

    return sum(0 if unicodedata.combining(c) else
               2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _scale(it: int, width: int, max_change: int) -> int:
    return 0 if not it else 1 + (it * (width - 1) // max_change)


# -- --format templates ----------------------------------------------------------------------

Template = tuple[tuple[str, str | None], ...]  # (literal text, then a key or None)


def parse_template(text: str, keys: Iterable[str]) -> Template:
    """A `--format` template: literal text and `{key}` fields over `keys` (`{{`/`}}` are
    literal braces). Anything but a plain known key (`{}`, `{a.b}`, `{a[0]}`, `{a!r}`,
    `{a:>9}`, an unknown name, an unbalanced brace) is a ValueError naming the problem."""
    import string  # only --format needs it

    known = set(keys)
    parts: list[tuple[str, str | None]] = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"{exc} in {text!r}") from None
    for literal, field, spec, conversion in parsed:
        if field is None:
            parts.append((literal, None))
            continue
        if spec or conversion or not field or not field.isidentifier():
            shown = "{" + field + (f"!{conversion}" if conversion else "") + (
                f":{spec}" if spec else "") + "}"
            raise ValueError(f"{shown}: only plain {{key}} fields are supported")
        if field not in known:
            raise ValueError(f"unknown key {{{field}}} (keys: {', '.join(sorted(known))})")
        parts.append((literal, field))
    return tuple(parts)


def fill_template(template: Template, values: dict[str, Any]) -> str:
    """One line: each field's value as text (null: empty; numbers and booleans as JSON; an
    object or array as compact JSON; line breaks in text become spaces)."""
    out = []
    for literal, key in template:
        out.append(literal)
        if key is None:
            continue
        value = values.get(key)
        if value is None:
            continue
        text = value if isinstance(value, str) else dumps(value, indent=None)
        out.append(text.replace("\r\n", " ").replace("\n", " ").replace("\r", " "))
    return "".join(out)
