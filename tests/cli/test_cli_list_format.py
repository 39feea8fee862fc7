"""`ckpt list` for people and scripts: the age beside UTC, labels cut at a word and never
inside a checkpoint id, the reason/turn/tool_call columns some checkpoint fills, and
`--format` templates over the JSON keys (anything but a plain `{key}` is a usage error)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ckpt.cli.commands.snapshot import LIST_KEYS
from ckpt.cli.render import cut_label, format_age

CkptIn = CkptProc = Callable[..., Any]
ID = r"ckpt-\d{13}-[0-9a-z]{8}"


def create(ckpt_in: CkptIn, *args: str) -> str:
    run = ckpt_in("create", *args)
    assert run.code == 0, run.stderr
    return run.stdout.strip()


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


NOW = datetime(2026, 12, 3, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(("ago", "text"), [
    (timedelta(seconds=-5), "just now"), (timedelta(milliseconds=400), "just now"),
    (timedelta(seconds=12), "12 s ago"), (timedelta(seconds=59.9), "59 s ago"),
    (timedelta(minutes=3, seconds=59), "3 min ago"), (timedelta(hours=5), "5 h ago"),
    (timedelta(hours=23, minutes=59), "23 h ago"), (timedelta(days=1), "1 day ago"),
    (timedelta(days=13), "13 days ago"), (timedelta(days=14), "2 weeks ago"),
    (timedelta(days=729), "104 weeks ago"), (timedelta(days=800), "2 years ago"),
])
def test_age_is_whole_units_rounded_down(ago: timedelta, text: str) -> None:
    assert format_age(NOW - ago, NOW) == text


ANID = "ckpt-1764433022123-q7x2m9ta"


@pytest.mark.parametrize(("label", "shown"), [
    (None, "-"),
    ("short", "short"),
    ("a  label\nover two lines", "a label over two lines"),
    ("undo the edit of the parser that broke the build", "undo the edit of the parser that broke…"),
    (f"please retry after {ANID} failed", "please retry after…"),  # the id left out whole
    (f"retry after {ANID} failed", f"retry after {ANID}…"),  # fits: kept
    (f"{ANID} and the rest of a long label here", f"{ANID} and the…"),
    (f"{ANID}{ANID}", f"{ANID}{ANID}…"),  # an id first: whole, past the width
    ("x" * 60, "x" * 39 + "…"),  # one long word without an id: cut where the cell ends
])
def test_labels_are_cut_at_a_word_never_inside_an_id(label: str | None, shown: str) -> None:
    assert cut_label(label) == shown
    if ANID not in shown:
        assert len(shown) <= 40


def test_list_shows_age_and_the_columns_that_matter(initialized: Path, ckpt_in: CkptIn) -> None:
    plain = create(ckpt_in, "-m", f"before the risky refactor, like {ANID} tried yesterday")
    run = ckpt_in("list")
    header = cells(run.stdout.splitlines()[0])
    # no checkpoint has a reason, turn or tool call: no such columns
    assert header == ["id", "created (UTC)", "age", "label", "files", "changed"]
    row = cells(run.stdout.splitlines()[1])
    assert row[0] == plain and re.fullmatch(r"just now|\d+ s ago", row[2])
    assert row[3] == "before the risky refactor, like…"
    tool = create(ckpt_in, "--reason", "pre-tool", "--tool-call", "toolu_01ABC")
    lines = ckpt_in("list").stdout.splitlines()
    assert cells(lines[0]) == ["id", "created (UTC)", "age", "reason", "tool_call", "label",
                               "files", "changed"]
    assert cells(lines[1])[3:5] == ["-", "-"]
    assert cells(lines[2])[0] == tool and cells(lines[2])[3:6] == ["pre-tool", "toolu_01ABC", "-"]
    create(ckpt_in, "--turn", "7")
    assert "turn" in cells(ckpt_in("list").stdout.splitlines()[0])


def test_format_prints_one_line_per_checkpoint(initialized: Path, ckpt_in: CkptIn,
                                               ckpt_proc: CkptProc) -> None:
    a = create(ckpt_in, "--reason", "pre-tool", "-m", "two\nlines")
    b = create(ckpt_in)
    run = ckpt_proc("list", "--format", "{id} [{reason}] {label} {{literal}} {stats}")
    assert (run.code, run.stderr) == (0, "")
    first, second = run.stdout.splitlines()
    assert first.startswith(f"{a} [pre-tool] two lines {{literal}} {{\"files\": 3")
    assert second.startswith(f"{b} [] ")  # null prints nothing
    ages = ckpt_proc("list", "--format", "{age}|{changed}|{scope}").stdout.splitlines()
    assert len(ages) == 2 and all(re.fullmatch(r"(just now|\d+ s ago)\|\d+\|tree", x)
                                  for x in ages)


def test_format_keys_are_the_json_keys(initialized: Path, ckpt_in: CkptIn) -> None:
    create(ckpt_in, "--tool-call", "c")
    doc = json.loads(ckpt_in("list", "--json").stdout)[0]
    assert tuple(doc) == LIST_KEYS  # and `age`, which only --format has
    assert "age" not in doc
    line = ckpt_in("list", "--format", " ".join(f"{{{k}}}" for k in (*LIST_KEYS, "age")))
    assert line.code == 0 and line.stdout.startswith(doc["id"] + " ")


@pytest.mark.parametrize(("template", "says"), [
    ("{id.x}", "only plain {key}"), ("{stats[files]}", "only plain {key}"),
    ("{}", "only plain {key}"), ("{0}", "only plain {key}"), ("{id!r}", "only plain {key}"),
    ("{id:>30}", "only plain {key}"), ("{nope}", "unknown key {nope}"), ("{id", "expected '}'"),
    ("id}", "Single '}'"),
])
def test_format_refuses_anything_but_plain_keys(initialized: Path, ckpt_in: CkptIn,
                                                template: str, says: str) -> None:
    create(ckpt_in)
    run = ckpt_in("list", "--format", template)
    assert run.code == 2 and run.stdout == ""
    assert says in run.stderr and "--format" in run.stderr


def test_format_and_json_exclude_each_other(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("list", "--format", "{id}", "--json")
    assert run.code == 2 and "exclude each other" in run.stderr
