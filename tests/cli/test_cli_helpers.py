"""The CLI's pure helpers: rendering, option parsers, progress throttling, root discovery."""

from __future__ import annotations

import io
import json
import os
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.cli.context import find_root, user_path
from ckpt.cli.params import parse_duration, parse_meta
from ckpt.cli.progress import Progress, make_progress
from ckpt.cli.render import display_path, dumps, format_size, one_line, table

# -- render ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "shown"), [
    (b"src/app.py", "src/app.py"),
    ("naïve/файл.txt".encode(), "naïve/файл.txt"),
    (b"a b", "a b"),
    (b"tab\there", '"tab\\there"'),
    (b"new\nline", '"new\\nline"'),
    (b'quote"d', '"quote\\"d"'),
    (b"back\\slash", '"back\\\\slash"'),
    (b"caf\xe9", '"caf\\351"'),
    (b"\x1b[31mred", '"\\033[31mred"'),
])
def test_display_path(raw: bytes, shown: str) -> None:
    assert display_path(raw) == shown
    assert display_path(os.fsdecode(raw)) == shown


@given(st.binary(min_size=1, max_size=40).filter(lambda b: b"\0" not in b))
def test_json_paths_round_trip_any_bytes(raw: bytes) -> None:
    text = dumps({"path": os.fsdecode(raw)})
    text.encode("utf-8")  # always writable as UTF-8
    assert os.fsencode(json.loads(text)["path"]) == raw


@given(st.binary(min_size=1, max_size=40))
def test_display_path_is_one_printable_line(raw: bytes) -> None:
    shown = display_path(raw)
    assert shown.isprintable()


def test_dumps_keeps_unicode_readable() -> None:
    assert dumps({"label": "café ✓"}, indent=None) == '{"label": "café ✓"}'


@pytest.mark.parametrize(("n", "text"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"),
                                         (1536, "1.5 KiB"), (5 << 30, "5.0 GiB"),
                                         (3 << 50, "3072.0 TiB")])
def test_format_size(n: int, text: str) -> None:
    assert format_size(n) == text


def test_one_line_squeezes_and_cuts() -> None:
    assert one_line(None) == "-" and one_line("") == "-"
    assert one_line("a\nb  c") == "a b c"
    assert one_line("x" * 50, 10) == "x" * 9 + "…"


def test_table_aligns_and_right_aligns_numbers() -> None:
    lines = table(["name", "n"], [["a", "1"], ["long name", "100"]], right=frozenset({1}))
    assert lines == ["name         n", "a            1", "long name  100"]


# -- params ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "seconds"), [
    ("30s", 30), ("15m", 900), ("2h", 7200), ("7d", 604800), ("1w", 604800),
    ("1h30m", 5400), ("1.5h", 5400), (" 2H ", 7200)])
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize("text", ["", "30", "h", "2x", "1h 30m", "-1h", "1h30"])
def test_parse_duration_refuses(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_duration(text)


def test_parse_meta() -> None:
    assert parse_meta(["a=1", "b=x=y", "c=", "a=2"]) == {"a": "2", "b": "x=y", "c": ""}
    for bad in (["novalue"], ["=v"]):
        with pytest.raises(ValueError, match="is not KEY=VALUE"):
            parse_meta(bad)


# -- progress -------------------------------------------------------------------------------

class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_progress_throttles_and_always_draws_first_and_last() -> None:
    out = io.StringIO()
    clock = FakeClock()
    bar = Progress(out, interval=0.1, clock=clock)
    for done in range(1, 1001):
        clock.now += 0.001  # 1000 calls over one second
        bar("hash", done, 1000)
    assert 10 <= bar.draws <= 12
    assert out.getvalue().endswith("\r\x1b[Kckpt: hashing 1000/1000 (100%)")
    bar("restore", 1, 5)  # a new stage draws at once
    assert out.getvalue().endswith("ckpt: restoring 1/5 (20%)")
    bar.finish()
    assert out.getvalue().endswith("\r\x1b[K")
    assert "\n" not in out.getvalue()


def test_progress_is_off_unless_stderr_is_a_terminal() -> None:
    assert make_progress(enabled=True, stream=io.StringIO()) is None

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert isinstance(make_progress(enabled=True, stream=Tty()), Progress)
    assert make_progress(enabled=False, stream=Tty()) is None


def test_progress_with_unknown_total() -> None:
    out = io.StringIO()
    Progress(out)("scan", 42, 0)
    assert out.getvalue() == "\r\x1b[Kckpt: scanning 42"


# -- paths ---------------------------------------------------------------------------------

def test_find_root_walks_up_to_the_nearest_store(tmp_path: Path) -> None:
    (tmp_path / "outer" / ".ckpt").mkdir(parents=True)
    deep = tmp_path / "outer" / "a" / "b"
    deep.mkdir(parents=True)
    assert find_root(str(deep)) == str(tmp_path / "outer")
    (deep / ".ckpt").mkdir()
    assert find_root(str(deep)) == str(deep)
    lonely = tmp_path / "lonely"
    lonely.mkdir()
    assert find_root(str(lonely)) == str(lonely)


def test_user_path_keeps_relative_paths_and_resolves_absolute_parents(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "dir").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(real)
    assert user_path("a/../b.txt") == "a/../b.txt"
    assert user_path(str(tmp_path / "alias" / "dir" / "f")) == str(real.resolve() / "dir" / "f")
    # the last component is not followed: a symlink is tracked as itself
    assert user_path(str(tmp_path / "alias")) == str(tmp_path.resolve() / "alias")
