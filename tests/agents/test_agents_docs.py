"""The README's "Use with Claude Code" and "Use over MCP" snippets run as written.

The settings.json block is parsed, and each hook command in it is run by a shell, as Claude
Code runs it, on recorded payloads of tools its matcher selects: each takes its checkpoint.
The shell lines after it run against that project. The .mcp.json block's command is started
and driven by the MCP SDK's client; the `claude mcp add` line names the same command.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from agents.agent_helpers import CLAUDE_SESSION, clean_env, payload, records

README = Path(__file__).resolve().parents[2] / "README.md"


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.DOTALL | re.MULTILINE)


def shell_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The console script `ckpt` on PATH, as an installed ckpt has it."""
    env = clean_env(extra)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def test_the_claude_code_settings_snippet_checkpoints_each_matched_tool_call(
        project: Path) -> None:
    text = section("Use with Claude Code")
    [settings_text] = blocks(text, "json")
    hooks = json.loads(settings_text)["hooks"]
    assert set(hooks) == {"PreToolUse", "PostToolUse", "PostToolUseFailure"}
    cases = {"PreToolUse": "pre_write.json", "PostToolUse": "post_edit.json",
             "PostToolUseFailure": "post_bash_failure.json"}
    for event, entries in hooks.items():
        [entry] = entries
        data = json.loads(payload(cases[event], project))
        assert re.fullmatch(entry["matcher"], data["tool_name"])
        assert not re.fullmatch(entry["matcher"], "Read")
        [command] = entry["hooks"]
        assert command["type"] == "command" and command["timeout"] >= 10
        done = subprocess.run(["sh", "-c", command["command"]], input=json.dumps(data).encode(),
                              cwd=project, capture_output=True, timeout=120, check=False,
                              env=shell_env({"CLAUDE_PROJECT_DIR": str(project)}))
        assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    made = records(project, f"claude-{CLAUDE_SESSION}")
    assert [r["reason"] for r in made] == ["pre-tool", "post-tool", "post-tool"]

    # The shell lines that follow, on this project (the id is the one its list shows).
    [shell] = blocks(text, "sh")
    has_tool_call = "--tool-call" in subprocess.run(
        ["ckpt", "diff", "--help"], env=shell_env(), capture_output=True, text=True,
        check=False).stdout
    for line in shell.splitlines():
        command = line.split("#", 1)[0].strip()
        if not has_tool_call and "--tool-call" in command:
            continue  # the patch-diff options of `ckpt diff` are another part of the work
        command = re.sub(r"ckpt-\d+", str(made[0]["id"]), command)
        done = subprocess.run(["sh", "-c", command], cwd=project, capture_output=True, text=True,
                              timeout=120, check=False, env=shell_env())
        assert done.returncode == 0, (command, done.stderr)
    # The generic form's one-liner, as written.
    generic = re.search(r"`(echo '.*?' \| ckpt hook json)`", " ".join(text.split()))
    assert generic is not None
    done = subprocess.run(["sh", "-c", generic.group(1)], cwd=project, capture_output=True,
                          timeout=120, check=False, env=shell_env())
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"")
    assert [r["tool_call_id"] for r in records(project, "default")][-1] == "call_1"


def test_the_mcp_config_snippets_start_a_server_that_answers(project: Path) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import ClientSession, StdioServerParameters, stdio_client

    text = section("Use over MCP")
    [config_text] = blocks(text, "json")
    server = json.loads(config_text)["mcpServers"]["ckpt"]
    args = [str(project) if a == "/abs/path/to/project" else a for a in server["args"]]
    # `claude mcp add ... -- COMMAND ARGS` names the same command ($PWD: the project).
    [add_line] = blocks(text, "sh")
    added = shlex.split(add_line.replace('"$PWD"', str(project)))
    assert added[:2] == ["claude", "mcp"] and added[added.index("--") + 1:] == [
        server["command"], *args]

    async def drive() -> dict[str, Any]:
        params = StdioServerParameters(command=server["command"], args=args, env=shell_env())
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            made = await session.call_tool("checkpoint_create", {"label": "from the README"})
            assert not made.is_error, made.content
            content: dict[str, Any] = made.structured_content
            return content

    made = anyio.run(drive)
    assert made["id"] in [r["id"] for r in records(project, "default")]
