"""ckpt/agents/hooks.py, pure: recorded Claude Code payloads -> create arguments, the generic
form, the root rules; and, for any JSON value at all, a `HookCall`, None, or `PayloadError`
(never another exception: the CLI logs that one as a bad payload)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from agents.agent_helpers import CLAUDE_SESSION, FIXTURES, PROMPT_ID
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from ckpt.agents.hooks import (
    COMMAND_CHARS,
    HookCall,
    PayloadError,
    choose_root,
    describe_payload,
    parse_claude_code,
    parse_generic,
)


def fixture(name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads(
        (FIXTURES / name).read_text().replace("$PROJECT", "/w/proj"))
    return data


def test_pre_write_becomes_a_pre_tool_checkpoint_of_the_file() -> None:
    call = parse_claude_code(fixture("pre_write.json"))
    assert call is not None
    assert (call.event, call.cwd, call.session) == ("PreToolUse", "/w/proj",
                                                    f"claude-{CLAUDE_SESSION}")
    assert call.request.create_kwargs() == {
        "reason": "pre-tool", "label": "before Write src/app.py", "turn_id": PROMPT_ID,
        "message_id": None, "tool_call_id": "toolu_01A1write", "summary": None,
        "metadata": {"tool": "Write", "hook_event": "PreToolUse",
                     "claude_session": CLAUDE_SESSION, "file": "/w/proj/src/app.py"}}


def test_other_events_are_not_ours_and_a_payload_needs_its_event() -> None:
    assert parse_claude_code(fixture("user_prompt_submit.json")) is None
    with pytest.raises(PayloadError, match="hook_event_name is missing"):
        parse_claude_code({"tool_name": "Bash"})
    with pytest.raises(PayloadError, match="tool_use_id must be a string, not int"):
        parse_claude_code({"hook_event_name": "PreToolUse", "tool_use_id": 7})


def test_a_long_command_is_cut_and_a_file_outside_cwd_keeps_its_path() -> None:
    data = fixture("pre_bash.json")
    data["tool_input"] = {"command": "x" * 10_000}
    call = parse_claude_code(data)
    assert call is not None and len(call.request.metadata["command"]) == COMMAND_CHARS
    data["tool_input"] = {"notebook_path": "/elsewhere/n.ipynb"}
    data["tool_name"] = "NotebookEdit"
    call = parse_claude_code(data)
    assert call is not None and call.request.label == "before NotebookEdit /elsewhere/n.ipynb"
    assert call.request.metadata["file"] == "/elsewhere/n.ipynb"


def test_the_generic_form_takes_its_keys_and_refuses_others() -> None:
    call = parse_generic({"reason": "pre-tool", "turn_id": "7", "tool_call_id": "call_42",
                          "label": "before bash", "metadata": {"tool": "bash", "n": 3}})
    assert call.request.create_kwargs() == {
        "reason": "pre-tool", "label": "before bash", "turn_id": "7", "message_id": None,
        "tool_call_id": "call_42", "summary": None, "metadata": {"tool": "bash", "n": 3}}
    assert parse_generic({}).request == HookCall(parse_generic({}).request, "json").request
    with pytest.raises(PayloadError, match=r"unknown key.*'turn'.*put anything else in metadata"):
        parse_generic({"turn": "7"})
    with pytest.raises(PayloadError, match="metadata must be a JSON object, not an array"):
        parse_generic({"metadata": [1]})


def test_root_rules_in_order(tmp_path: Path) -> None:
    stores = {"/w/proj"}
    has = stores.__contains__
    assert choose_root(explicit="/r", project_dir="/p", cwd="/w/proj/src", has_store=has) == "/r"
    assert choose_root(explicit=None, project_dir="/p", cwd="/w/proj/src", has_store=has) == "/p"
    assert choose_root(explicit=None, project_dir=None, cwd="/w/proj/src/x",
                       has_store=has) == "/w/proj"
    assert choose_root(explicit=None, project_dir=None, cwd="/other", has_store=has) is None
    assert choose_root(explicit=None, project_dir=None, cwd="relative", has_store=has) is None
    assert choose_root(explicit=None, project_dir=None, cwd=None, has_store=has) is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=6),
    max_leaves=20)
KEYS = st.sampled_from(["hook_event_name", "tool_name", "tool_input", "tool_use_id", "prompt_id",
                        "session_id", "cwd", "error", "reason", "turn_id", "metadata", "label"])
EVENTS = st.sampled_from(["PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop"])
PAYLOADS = JSON | st.dictionaries(KEYS, JSON | EVENTS | st.dictionaries(
    st.sampled_from(["file_path", "notebook_path", "command"]), JSON, max_size=3), max_size=8)


@seed(2026)
@settings(max_examples=400, deadline=None)
@given(PAYLOADS)
def test_any_json_is_a_call_none_or_a_payload_error(payload: object) -> None:
    for parse in (parse_claude_code, parse_generic):
        try:
            call = parse(payload)
        except PayloadError:
            continue
        if call is not None:
            kwargs = call.request.create_kwargs()
            assert all(v is None or isinstance(v, str) for k, v in kwargs.items()
                       if k != "metadata")
            json.dumps(kwargs["metadata"])
    assert isinstance(describe_payload(payload), str)
