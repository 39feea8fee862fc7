"""`--json` says at least what the plain text says: for show, list, diff, stats and events,
every fact of the text output is found in the JSON of the same command (the skipped paths,
the tracked paths and the "did not exist" markers of `show`; the `changed` count of `list`).
And `changed` counts changes since the parent, also after a `diff` read the files first."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CkptIn = Callable[..., Any]


def ok(run: Any) -> str:
    assert run.code == 0, run.stderr
    return str(run.stdout)


def both(ckpt_in: CkptIn, *args: str) -> tuple[list[str], Any]:
    return ok(ckpt_in(*args)).splitlines(), json.loads(ok(ckpt_in(*args, "--json")))


def when(iso: str) -> str:
    """A JSON time (`2026-11-29T16:17:02.123Z`) as the tables print it."""
    return iso[:19].replace("T", " ")


@pytest.fixture
def history(initialized: Path, ckpt_in: CkptIn) -> dict[str, str]:
    """A: a whole tree with a file too large to capture; B: one file changed, after a `diff`
    read it; C: tracked paths, one of which does not exist."""
    ws = initialized
    ok(ckpt_in("config", "set", "max_file_size", "100"))
    (ws / "big.bin").write_bytes(b"x" * 1000)
    a = ok(ckpt_in("create", "-m", "first", "--reason", "pre-tool", "--turn", "1",
                   "--meta", "k=v")).strip()
    (ws / "a.txt").write_text("changed\n")
    assert ok(ckpt_in("diff", a)) == "M a.txt\n"  # reads a.txt: the create below does not
    b = ok(ckpt_in("create", "--reason", "post-tool", "--turn", "1")).strip()
    ok(ckpt_in("track", "a.txt", "missing.txt"))
    c = ok(ckpt_in("create", "--turn", "2")).strip()
    return {"a": a, "b": b, "c": c}


def show_facts(lines: list[str]) -> tuple[dict[str, str], list[str], list[list[str]]]:
    blank = lines.index("")
    pairs: dict[str, str] = {}
    notes = []
    for line in lines[:blank]:
        if line.startswith(("not captured: ", "did not exist: ")):
            notes.append(line)
        else:
            key, value = re.split(r"\s{2,}", line, maxsplit=1)
            pairs[key] = value
    rows = [line.split(None, 2) for line in lines[blank + 2:]]
    return pairs, notes, rows


@pytest.mark.parametrize("which", ["a", "c"])
def test_show_json_holds_every_fact_of_the_text(history: dict[str, str], ckpt_in: CkptIn,
                                                which: str) -> None:
    lines, doc = both(ckpt_in, "show", history[which])
    pairs, notes, rows = show_facts(lines)
    plain = {"id": "id", "created": "created_at", "session": "session", "scope": "scope",
             "parent": "parent", "label": "label", "reason": "reason", "turn": "turn_id",
             "message": "message_id", "tool call": "tool_call_id", "summary": "summary",
             "tree": "tree"}
    for key, value in pairs.items():
        if key in plain:
            assert value == (doc[plain[key]] or "-"), key
        elif key == "metadata":
            assert value == (" ".join(f"{k}={v}" for k, v in doc["metadata"].items()) or "-")
        elif key == "stats":
            s = doc["stats"]
            numbers = [int(n) for n in re.findall(r"(?<![.\d])(\d+)(?= files| new| ms)", value)]
            assert numbers == [s["files"], s["new_objects"], s["duration_ms"]], value
        elif key == "paths":
            assert value.split() == doc["paths"]
        else:
            raise AssertionError(f"show prints {key!r}, which this test does not know")
    skipped = [f"not captured: {i['path']} ({i['reason']})" for i in doc["skipped"]]
    absent = [f"did not exist: {p}" for p in doc["absent"]]
    assert notes == skipped + absent
    files = [[f["kind"], str(f["size"]),
              f["path"] + (f" -> {f['target']}" if "target" in f else "")] for f in doc["files"]]
    assert rows == files
    if which == "a":
        assert doc["skipped"] == [{"path": "big.bin", "reason": "too-large"}]
    else:
        assert doc["scope"] == "paths" and doc["paths"] == ["a.txt", "missing.txt"]
        assert doc["absent"] == ["missing.txt"]


def test_list_json_holds_every_column_and_changed_counts_changes(history: dict[str, str],
                                                                 ckpt_in: CkptIn) -> None:
    lines, docs = both(ckpt_in, "list")
    header = re.split(r"\s{2,}", lines[0])
    # reason, turn and tool_call are shown when some checkpoint has one
    shown = [title for title, key in (("reason", "reason"), ("turn", "turn_id"),
                                      ("tool_call", "tool_call_id")) if any(d[key] for d in docs)]
    assert header == ["id", "created (UTC)", "age", *shown, "label", "files", "changed"]
    assert len(lines) - 1 == len(docs) == 4  # a, b, the checkpoint `track` took, c
    for line, doc in zip(lines[1:], docs):
        cells = re.split(r"\s{2,}", line.strip())
        optional = [doc[key] or "-" for key in ("reason", "turn_id", "tool_call_id")
                    if any(d[key] for d in docs)]
        assert cells[:2] + cells[3:] == [doc["id"], when(doc["created_at"]), *optional,
                                         doc["label"] or "-", str(doc["stats"]["files"]),
                                         "-" if doc["changed"] is None else str(doc["changed"])]
    changed = {doc["id"]: doc["changed"] for doc in docs if doc["reason"] != "track"}
    # A: every file is new; B: a.txt, though `diff` had read it; C: a.txt within its paths.
    assert changed == {history["a"]: docs[0]["stats"]["files"], history["b"]: 1,
                       history["c"]: 0}


def test_diff_json_holds_every_line(history: dict[str, str], ckpt_in: CkptIn) -> None:
    for args in ([history["a"], history["c"]], [history["a"]]):
        lines, doc = both(ckpt_in, "diff", *args)
        assert lines == [f"{c['change']} {c['path']}" for c in doc]
        assert lines


def test_stats_json_holds_every_line(history: dict[str, str], ckpt_in: CkptIn) -> None:
    lines, doc = both(ckpt_in, "stats")
    facts = dict(re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in lines)
    assert facts.pop("objects") == str(doc["objects"])
    assert facts.pop("on disk").endswith(f"({doc['stored_bytes']} bytes)")
    assert facts.pop("logical").endswith(f"({doc['logical_bytes']} bytes)")
    assert facts.pop("dedup ratio") == f"{doc['dedup_ratio']:.2f}x"
    assert facts.pop("dedup saved").endswith(f"({doc['saved_by_dedup']} bytes)")
    assert facts.pop("deltas saved").endswith(f"({doc['saved_by_deltas']} bytes)")
    assert facts.pop("checkpoints").split()[0] == str(doc["checkpoints"])
    assert facts == {**{f"session {name}": str(n) for name, n in doc["sessions"].items()},
                     **{f"root {root}": str(n) for root, n in doc["roots"].items()}}


def test_events_json_holds_every_row(history: dict[str, str], ckpt_in: CkptIn) -> None:
    ok(ckpt_in("restore", history["a"]))
    lines, docs = both(ckpt_in, "events")
    assert len(lines) - 1 == len(docs) >= 4
    for line, doc in zip(lines[1:], docs):
        at, kind, session, details = [*re.split(r"\s{2,}", line.strip(), maxsplit=3), ""][:4]
        assert (at, kind, session) == (when(doc["at"]), doc["type"], doc["session"])
        for key, value in re.findall(r"(\w+)=(.*?)(?= \w+=|$)", details):
            item = doc[key]
            if key in ("removed", "spared", "discarded"):  # ids, the first three named
                more = f",+{len(item) - 3} more" if len(item) > 3 else ""
                assert value == (",".join(item[:3]) or "-") + more, key
            else:
                assert value == (str(len(item)) if isinstance(item, list) else str(item)), key
