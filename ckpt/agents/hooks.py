"""Hook payloads of agent harnesses -> the arguments of one checkpoint. Pure.

Two payload formats, one result (`HookCall`):

- `parse_claude_code`: the JSON Claude Code writes on a hook command's stdin. `PreToolUse`
  becomes reason `pre-tool`, `PostToolUse` and `PostToolUseFailure` `post-tool` (the failure
  with metadata `failed=true`); `prompt_id` is the turn, `tool_use_id` the tool call; the
  tool's name and its file (`tool_input.file_path` / `notebook_path`) or command (cut to
  COMMAND_CHARS) go into metadata. Any other event is not ours: None.
- `parse_generic`: the harness-neutral form `{"reason", "turn_id", "tool_call_id",
  "message_id", "label", "summary", "metadata"}` (every key optional, nothing else allowed).

Also `choose_root`, the root rules of the Claude Code hook, with the file system question
passed in. This module does no IO and imports no library: the CLI (`cli/commands/agents.py`)
reads stdin, opens the store, takes the checkpoint and logs what failed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

COMMAND_CHARS = 500  # a Bash command kept in metadata (heredocs can be long)
LABEL_CHARS = 120

# hook_event_name -> the checkpoint's reason
CLAUDE_EVENTS: dict[str, str] = {
    "PreToolUse": "pre-tool",
    "PostToolUse": "post-tool",
    "PostToolUseFailure": "post-tool",
}
GENERIC_KEYS = ("reason", "turn_id", "tool_call_id", "message_id", "label", "summary",
                "metadata")


class PayloadError(ValueError):
    """A hook payload that is not the JSON its format describes."""


@dataclass(frozen=True, slots=True)
class CheckpointRequest:
    """The fields of one `Checkpoints.create` call."""

    reason: str | None = None
    label: str | None = None
    turn_id: str | None = None
    message_id: str | None = None
    tool_call_id: str | None = None
    summary: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def create_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `Checkpoints.create`."""
        return {"reason": self.reason, "label": self.label, "turn_id": self.turn_id,
                "message_id": self.message_id, "tool_call_id": self.tool_call_id,
                "summary": self.summary, "metadata": dict(self.metadata)}


@dataclass(frozen=True, slots=True)
class HookCall:
    """One hook invocation understood: the checkpoint to take and where.

    `cwd`: the agent's working directory from the payload (None: not given); `session`: the
    session the payload implies (`claude-<session_id>`; None: the caller's default)."""

    request: CheckpointRequest
    event: str
    cwd: str | None = None
    session: str | None = None


def _text(payload: Mapping[str, Any], key: str) -> str | None:
    value = payload.get(key)
    if value is None or isinstance(value, str):
        return value or None
    raise PayloadError(f"{key} must be a string, not {type(value).__name__}")


def _object(payload: object, what: str) -> Mapping[str, Any]:
    if not isinstance(payload, Mapping):
        raise PayloadError(f"{what} must be a JSON object, not {_json_type(payload)}")
    return payload


def _json_type(value: object) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def describe_payload(payload: object) -> str:
    """`<event> <tool_use_id>` of a payload, as far as it has them: for a log line."""
    if not isinstance(payload, Mapping):
        return "-"
    parts = [payload.get("hook_event_name"), payload.get("tool_use_id")]
    return " ".join(p for p in parts if isinstance(p, str) and p) or "-"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def parse_claude_code(payload: object) -> HookCall | None:
    """A Claude Code hook payload -> the checkpoint to take; None for an event not handled."""
    data = _object(payload, "the hook payload")
    event = _text(data, "hook_event_name")
    if event is None:
        raise PayloadError("hook_event_name is missing")
    reason = CLAUDE_EVENTS.get(event)
    if reason is None:
        return None
    tool = _text(data, "tool_name") or "tool"
    tool_input = data.get("tool_input")
    tool_input = tool_input if isinstance(tool_input, Mapping) else {}
    metadata: dict[str, str] = {"tool": tool, "hook_event": event}
    claude_session = _text(data, "session_id")
    if claude_session is not None:
        metadata["claude_session"] = claude_session
    target = ""
    file = tool_input.get("file_path") or tool_input.get("notebook_path")
    command = tool_input.get("command")
    if isinstance(file, str) and file:
        metadata["file"] = file
        target = " " + _relative(file, _text(data, "cwd"))
    elif isinstance(command, str) and command:
        metadata["command"] = _cut(command, COMMAND_CHARS)
    if event == "PostToolUseFailure":
        metadata["failed"] = "true"
        error = data.get("error")
        if isinstance(error, str) and error:
            metadata["error"] = _cut(error, COMMAND_CHARS)
    when = "before" if reason == "pre-tool" else "after"
    label = _cut(f"{when} {tool}{target}" + (" (failed)" if "failed" in metadata else ""),
                 LABEL_CHARS)
    request = CheckpointRequest(reason=reason, label=label, turn_id=_text(data, "prompt_id"),
                                tool_call_id=_text(data, "tool_use_id"), metadata=metadata)
    return HookCall(request, event, cwd=_text(data, "cwd"),
                    session=f"claude-{claude_session}" if claude_session else None)


def _relative(path: str, cwd: str | None) -> str:
    """A file path as a label shows it: relative to the agent's directory when inside it."""
    if cwd and os.path.isabs(path) and os.path.isabs(cwd):
        rel = os.path.relpath(path, cwd)
        if not rel.startswith(".."):
            return rel
    return path


def parse_generic(payload: object) -> HookCall:
    """The generic hook payload -> the checkpoint to take."""
    data = _object(payload, "the hook payload")
    unknown = sorted(set(data) - set(GENERIC_KEYS))
    if unknown:
        raise PayloadError(f"unknown key(s) {', '.join(map(repr, unknown))}; the keys are "
                           f"{', '.join(GENERIC_KEYS)} (put anything else in metadata)")
    metadata = data.get("metadata")
    metadata = {} if metadata is None else _object(metadata, "metadata")
    request = CheckpointRequest(reason=_text(data, "reason"), label=_text(data, "label"),
                                turn_id=_text(data, "turn_id"),
                                message_id=_text(data, "message_id"),
                                tool_call_id=_text(data, "tool_call_id"),
                                summary=_text(data, "summary"), metadata=dict(metadata))
    return HookCall(request, "json")


def choose_root(*, explicit: str | None, project_dir: str | None, cwd: str | None,
                has_store: Callable[[str], bool]) -> str | None:
    """The workspace root a Claude Code hook checkpoints: `explicit` (--root/CKPT_ROOT), else
    the project directory Claude Code names ($CLAUDE_PROJECT_DIR), else the nearest ancestor
    of the agent's `cwd` (it follows `cd`) for which `has_store` holds; None when none does."""
    if explicit:
        return explicit
    if project_dir:
        return project_dir
    if not cwd or not os.path.isabs(cwd):
        return None
    here = os.path.normpath(cwd)
    while True:
        if has_store(here):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return None
        here = parent
