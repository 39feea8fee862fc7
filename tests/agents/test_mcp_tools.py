"""The MCP tools' bodies (ckpt/agents/mcp_server.py) on a real store, in-process: patch
truncation at file and hunk boundaries with its note, reading text, binary and symlinks,
caps on lists, the error words, and one call at a time under concurrent callers."""

from __future__ import annotations

import os
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

pytest.importorskip("mcp")
from mcp.server.mcpserver.exceptions import ToolError

from ckpt.agents import mcp_server as tools
from ckpt.checkpoints import Checkpoints
from ckpt.cli.errors import describe


@pytest.fixture
def cp(tmp_path: Path) -> Checkpoints:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    service = Checkpoints.init(root, session="t")
    yield service
    service.close()


def test_cut_patch_keeps_whole_files_then_whole_hunks() -> None:
    files = [b"diff --git a/a b/a\n" + b"x" * 100, b"diff --git a/b b/b\n" + b"y" * 100]
    assert tools.cut_patch(files, 10_000) == (b"".join(files).decode(), 2, False)
    text, shown, cut = tools.cut_patch(files, 150)
    assert (text, shown, cut) == (files[0].decode(), 1, True)
    big = b"diff --git a/c b/c\n@@ -1 +1 @@\n-a\n+b\n@@ -9 +9 @@\n-c\n+d\n"
    text, shown, cut = tools.cut_patch([big], 40)
    assert (text, shown, cut) == ("diff --git a/c b/c\n@@ -1 +1 @@\n-a\n+b\n", 1, True)
    assert tools.cut_patch([big], 5) == ("", 0, True)


def test_a_long_diff_is_cut_with_a_note_and_paths_narrow_it(cp: Checkpoints) -> None:
    root = Path(cp.root)
    for i in range(12):
        (root / f"f{i:02}.txt").write_text("".join(f"line {n}\n" for n in range(300)))
    first = cp.create().id
    for i in range(12):
        (root / f"f{i:02}.txt").write_text("".join(f"LINE {n}\n" for n in range(300)))
    out = tools.diff(cp, from_ref=first, to_ref=None, paths=None, patch=True, max_bytes=20_000)
    assert out["truncated"] and out["patch"] is not None and len(out["patch"]) <= 20_000
    assert out["patch"].count("diff --git ") < 12 and out["changes_total"] == 12
    assert out["note"] is not None and out["note"].startswith("patch cut at ")
    assert out["note"].endswith("files shown; pass paths=[...] for the rest")
    assert out["stat"] == {"files": 12, "insertions": 3600, "deletions": 3600}
    one = tools.diff(cp, from_ref=first, to_ref=None, paths=["f11.txt"], patch=True,
                     max_bytes=20_000)
    assert not one["truncated"] and [c["path"] for c in one["changes"]] == ["f11.txt"]
    assert one["patch"] is not None and one["patch"].startswith("diff --git a/f11.txt b/f11.txt")
    names = tools.diff(cp, from_ref=first, to_ref=None, paths=["f11.txt"], patch=False,
                       max_bytes=0)
    assert (names["patch"], [c["path"] for c in names["changes"]]) == (None, ["f11.txt"])


def test_read_file_text_binary_symlink_and_cap(cp: Checkpoints) -> None:
    root = Path(cp.root)
    (root / "t.txt").write_text("hello\n" * 100)
    (root / "b.bin").write_bytes(b"\0\1\2" * 10)
    os.symlink("t.txt", root / "link")
    ref = cp.create().id
    text = tools.read_file(cp, ref="latest", path="t.txt", max_bytes=12)
    assert (text["id"], text["text"], text["size"], text["truncated"]) == (
        ref, "hello\nhello\n", 600, True)
    binary = tools.read_file(cp, ref=ref, path="./b.bin", max_bytes=50)
    assert (binary["binary"], binary["text"], binary["path"]) == (True, None, "b.bin")
    link = tools.read_file(cp, ref=ref, path="link", max_bytes=50)
    assert (link["kind"], link["target"], link["text"]) == ("symlink", "t.txt", None)


def test_errors_are_tool_errors_with_kind_message_and_hint(cp: Checkpoints) -> None:
    backend = tools.Backend(lambda: cp, describe)
    with pytest.raises(ToolError, match=r"^no_such_path: no file nope in checkpoint ckpt-"):
        backend.call("t", lambda s: tools.read_file(s, ref=s.create().id, path="nope",
                                                     max_bytes=10))
    with pytest.raises(ToolError, match=r"^nothing_matched: .*"):
        backend.call("t", lambda s: tools.undo(s, dry_run=False))
    with pytest.raises(ToolError, match=r"^internal error: ZeroDivisionError: division by zero$"):
        backend.call("t", lambda s: 1 / 0)


def test_calls_run_one_at_a_time(cp: Checkpoints) -> None:
    backend = tools.Backend(lambda: cp, describe)
    inside = 0
    most = 0
    guard = threading.Lock()

    def body(service: Checkpoints) -> str:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        record = service.create()
        with guard:
            inside -= 1
        return record.id

    made: list[str] = []
    threads = [threading.Thread(target=lambda: made.append(backend.call("c", body)))
               for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1 and len(set(made)) == 6


def test_list_is_newest_first_capped_and_filtered(cp: Checkpoints) -> None:
    for i in range(5):
        cp.create(reason="pre-tool" if i % 2 else "agent", tool_call_id=f"call_{i}")
    now = datetime.now(UTC) + timedelta(minutes=3)
    out = tools.list_checkpoints(cp, limit=2, reason=None, turn_id=None, tool_call_id=None,
                                 all_sessions=True, now=now)
    assert (out["total"], out["truncated"], len(out["checkpoints"])) == (5, True, 2)
    assert [c["tool_call_id"] for c in out["checkpoints"]] == ["call_4", "call_3"]
    assert out["checkpoints"][0]["age"] == "3 min ago"
    one = tools.list_checkpoints(cp, limit=20, reason=None, turn_id=None, tool_call_id="call_3",
                                 all_sessions=True, now=now)
    assert [c["reason"] for c in one["checkpoints"]] == ["pre-tool"]


@pytest.mark.parametrize(("seconds", "said"), [(-5, "in the future"), (3, "just now"),
                                               (42, "42 s ago"), (3600 * 5, "5 h ago"),
                                               (86400 * 2 + 5, "2 days ago")])
def test_age_words(seconds: int, said: str) -> None:
    now = datetime(2026, 12, 3, tzinfo=UTC)
    assert tools.age(now - timedelta(seconds=seconds), now) == said
