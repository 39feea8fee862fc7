"""`ckpt mcp` as an agent meets it: a subprocess driven over stdio by the MCP SDK's own client.

One server process for the whole conversation: create, edit, diff (the patch shows the edit),
restore (a dry run first, which changes nothing; then for real), undo; the tree is checked at
each step. An unknown ref is a tool error and the server answers the next call. Every tool
publishes an output schema, and every result validates against it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")
import anyio
import jsonschema
from mcp import ClientSession, StdioServerParameters, stdio_client

TOOLS = {"checkpoint_create", "checkpoint_list", "checkpoint_diff", "checkpoint_restore",
         "checkpoint_undo", "checkpoint_read_file", "checkpoint_file_history"}


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPT_")}
    env["CKPT_SESSION"] = "mcp-test"
    env["CKPT_SERVER"] = "off"  # no resident server outlives the test (tests/conftest.py)
    return env


@asynccontextmanager
async def served(root: Path) -> AsyncIterator[Any]:
    """A client session with `python -m ckpt --root ROOT mcp`, and each tool's output schema."""
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "ckpt", "--root", str(root), "mcp"], env=_env())
    with open(root.parent / "server.err", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), \
                ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            session.schemas = {t.name: t.output_schema for t in listed.tools}
            yield session


async def call(session: Any, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call that must succeed; its result checked against the tool's output schema."""
    result = await session.call_tool(name, arguments)
    assert not result.is_error, result.content
    content: dict[str, Any] = result.structured_content
    jsonschema.validate(content, session.schemas[name])
    return content


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (root / "a.txt").write_text("original\n")
    (root / "b.txt").write_text("kept\n")
    subprocess.run([sys.executable, "-m", "ckpt", "--root", str(root), "init"], check=True,
                   env=_env(), capture_output=True)
    return root


async def _round_trip(root: Path) -> None:
    a = root / "a.txt"
    async with served(root) as session:
        assert set(session.schemas) == TOOLS
        assert all(schema and schema.get("type") == "object"
                   for schema in session.schemas.values()), session.schemas

        made = await call(session, "checkpoint_create", {"label": "before"})
        before = made["id"]
        assert (made["files"], made["skipped"]) == (2, [])

        a.write_text("changed\n")
        (root / "new.txt").write_text("new\n")
        diff = await call(session, "checkpoint_diff", {"from_ref": before})
        assert (diff["from"], diff["to"], diff["truncated"]) == (before, None, False)
        assert [(c["path"], c["change"]) for c in diff["changes"]] == [("a.txt", "M"),
                                                                      ("new.txt", "A")]
        assert "-original\n+changed\n" in diff["patch"]
        assert diff["stat"] == {"files": 2, "insertions": 2, "deletions": 1}
        latest = await call(session, "checkpoint_diff", {"patch": False})  # from "latest"
        assert latest["from"] == before and latest["patch"] is None

        preview = await call(session, "checkpoint_restore", {"ref": before})  # dry_run: true
        assert preview["dry_run"] is True and preview["pre_restore"] is None
        assert sorted((c["path"], c["change"]) for c in preview["changes"]) == [
            ("a.txt", "M"), ("new.txt", "D")]
        assert a.read_text() == "changed\n" and (root / "new.txt").exists()

        done = await call(session, "checkpoint_restore", {"ref": before, "dry_run": False})
        assert (done["dry_run"], done["complete"]) == (False, True)
        assert a.read_text() == "original\n" and not (root / "new.txt").exists()
        assert (root / "b.txt").read_text() == "kept\n"

        undone = await call(session, "checkpoint_undo", {})
        assert undone["undid"] == done["pre_restore"]
        assert a.read_text() == "changed\n" and (root / "new.txt").read_text() == "new\n"

        old = await call(session, "checkpoint_read_file", {"ref": before, "path": "a.txt"})
        assert (old["text"], old["binary"], old["truncated"]) == ("original\n", False, False)

        bad = await session.call_tool("checkpoint_read_file",
                                      {"ref": "ckpt-0000", "path": "a.txt"})
        assert bad.is_error and "unknown_checkpoint: unknown checkpoint ckpt-0000" in \
            bad.content[0].text
        far = await session.call_tool("checkpoint_restore", {"ref": "latest~99"})
        assert far.is_error and "unknown_checkpoint" in far.content[0].text
        # The server lives on after errors, and has kept count.
        listed = await call(session, "checkpoint_list", {})
        assert [c["reason"] for c in listed["checkpoints"]] == [
            "pre-restore", "pre-restore", "agent"]
        assert listed["checkpoints"][-1]["id"] == before
        history = await call(session, "checkpoint_file_history", {"path": "a.txt"})
        assert [e["change"] for e in history["entries"]] == ["M", "M", "A"]


def test_mcp_round_trip_over_stdio(workspace: Path) -> None:
    anyio.run(_round_trip, workspace)


async def _errors_before_a_store(root: Path) -> None:
    async with served(root) as session:
        first = await session.call_tool("checkpoint_list", {})
        assert first.is_error and "not_initialized" in first.content[0].text
        assert "(hint: run 'ckpt init'" in first.content[0].text
        subprocess.run([sys.executable, "-m", "ckpt", "--root", str(root), "init"], check=True,
                       env=_env(), capture_output=True)
        # Opened on the next call: the server did not have to be restarted.
        made = await call(session, "checkpoint_create", {})
        listed = await call(session, "checkpoint_list", {"limit": 5})
        assert [c["id"] for c in listed["checkpoints"]] == [made["id"]]


def test_a_missing_store_is_a_tool_error_until_it_exists(tmp_path: Path) -> None:
    root = (tmp_path / "bare").resolve()
    root.mkdir()
    anyio.run(_errors_before_a_store, root)


def test_without_the_mcp_package_ckpt_mcp_exits_1_with_the_pip_hint(tmp_path: Path) -> None:
    hide = ("import sys; sys.modules['mcp'] = None; from ckpt.cli.main import main; "
            "sys.argv[0] = 'ckpt'; main()")
    done = subprocess.run([sys.executable, "-c", hide, "--root", str(tmp_path), "mcp"],
                          env=_env(), capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, check=False)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("ckpt: error: ckpt mcp needs the 'mcp' package "
                           "(hint: pip install 'ckpt[mcp]')\n")
