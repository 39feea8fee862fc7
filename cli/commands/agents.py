"""Where agents meet ckpt: `ckpt mcp` (an MCP server on stdio) and `ckpt hook FORMAT` (one
checkpoint per hook call of an agent harness: `claude-code`, or the generic `json`).

`mcp` needs the optional `mcp` package (`pip install 'ckpt[mcp]'`); without it, exit 1 with
that hint. It runs until its client closes stdin, with one `Checkpoints` opened on the first
tool call (ckpt/agents/mcp_server.py) and tool errors worded by cli/errors.py.

`hook` never fails the agent's tool call: whatever goes wrong (bad JSON, no store, a busy or
damaged store, a bad option of its own), it exits 0, prints nothing on stdout (a PreToolUse
hook's stdout is a decision for Claude Code) and reports the failure as one line on stderr and
in `<store>/logs/hook.log` (else `$XDG_STATE_HOME/ckpt/hook.log`). The wait for a busy store is
capped by `--lock-timeout`. Payload parsing is ckpt/agents/hooks.py (pure).
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from ckpt.cli import errors
from ckpt.cli.context import STORE_NAME, State, library, pass_state

if TYPE_CHECKING:
    from ckpt.agents.hooks import HookCall

DEFAULT_LOCK_TIMEOUT = 5.0
LOG_NAME = "hook.log"
MCP_HINT = "pip install 'ckpt[mcp]'"


# -- ckpt mcp -----------------------------------------------------------------------------

@click.command(epilog="""\b
Examples:
  ckpt --root /abs/repo mcp                     # what an MCP client starts
  claude mcp add ckpt -- ckpt --root "$PWD" mcp # register it with Claude Code
\b
Tools: checkpoint_create, checkpoint_list, checkpoint_diff, checkpoint_restore (dry_run
defaults to true), checkpoint_undo, checkpoint_read_file, checkpoint_file_history.
""")
@pass_state
def mcp(state: State) -> None:
    """Serve this workspace's checkpoints as MCP tools over stdio (until stdin closes).

    For an agent that should checkpoint, diff, restore and undo by itself. The store is opened
    on the first tool call and kept open; errors are tool errors, never the server's end.
    Needs the optional 'mcp' package (pip install 'ckpt[mcp]').
    """
    checkpoints = library()  # the platform check, before the SDK loads
    try:
        from ckpt.agents.mcp_server import build_server
    except ModuleNotFoundError as exc:  # the optional extra is not installed (or not whole)
        raise errors.CliError("ckpt mcp needs the 'mcp' package", hint=MCP_HINT) from exc
    from ckpt.checkpoints import preload

    # main() turns the collector off for one-shot commands; a server lives long.
    gc.enable()
    preload()
    server, backend = build_server(
        lambda: checkpoints.open(state.root, state.store, state.session), errors.describe)
    try:
        server.run()
    finally:
        backend.close()


# -- ckpt hook ----------------------------------------------------------------------------

_HOOK_SETTINGS = {"ignore_unknown_options": True, "allow_extra_args": True}
_USAGE_ERROR = "ckpt.hook.usage_error"


class HookCommand(click.Command):
    """A hook subcommand whose own usage errors (`--lock-timeout` without a value) are no
    exit 2, which would block the agent's tool call: kept for `_run_hook` to log."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            if isinstance(exc, click.exceptions.NoArgsIsHelpError):
                raise
            ctx.meta[_USAGE_ERROR] = exc.format_message()
            for param in self.get_params(ctx):
                if param.expose_value and param.name and param.name not in ctx.params:
                    ctx.params[param.name] = param.get_default(ctx)
            return []


@click.group(epilog="""\b
Examples (stdin is the harness's JSON):
  ckpt hook claude-code                 # in .claude/settings.json, see the README
  echo '{"reason": "pre-tool", "tool_call_id": "call_1"}' | ckpt hook json
""")
def hook() -> None:
    """Take one checkpoint per hook call of an agent harness (JSON on stdin).

    Never blocks or fails the agent: always exits 0 with nothing on stdout; a failure is one
    line on stderr and in STORE/logs/hook.log.
    """


def _lock_option(func: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--lock-timeout", default=str(DEFAULT_LOCK_TIMEOUT), metavar="SECONDS",
                        show_default=True,
                        help="Wait at most this long for a busy store (then log and skip); "
                             "the store's lock_timeout applies when it is lower.")(func)


@hook.command("claude-code", cls=HookCommand, context_settings=_HOOK_SETTINGS, epilog="""\b
Root: --root/CKPT_ROOT, else $CLAUDE_PROJECT_DIR, else the nearest ancestor of the
payload's cwd holding .ckpt (never initialized here: run 'ckpt init' once).
Session: --session/CKPT_SESSION, else claude-<session_id>.
PreToolUse -> reason pre-tool; PostToolUse, PostToolUseFailure -> post-tool; other events
are ignored. turn = prompt_id, tool call = tool_use_id; metadata: tool, hook_event,
claude_session, and file or command (failed=true after a failure).
""")
@_lock_option
@click.pass_context
def claude_code(ctx: click.Context, lock_timeout: str) -> None:
    """Checkpoint before and after a Claude Code tool call (a hook command)."""
    from ckpt.agents.hooks import choose_root, parse_claude_code

    def target(call: HookCall | None, state: State) -> tuple[str | None, str]:
        explicit = _given(ctx, "root")
        root = choose_root(explicit=state.root if explicit else None,
                           project_dir=os.environ.get("CLAUDE_PROJECT_DIR"),
                           cwd=call.cwd if call is not None else None,
                           has_store=lambda d: os.path.isdir(os.path.join(d, STORE_NAME)))
        session = (state.session if _given(ctx, "session") or call is None
                   else call.session or state.session)
        return root, session

    _run_hook(ctx, "claude-code", parse_claude_code, target, lock_timeout)


@hook.command("json", cls=HookCommand, context_settings=_HOOK_SETTINGS, epilog="""\b
stdin: {"reason", "turn_id", "tool_call_id", "message_id", "label", "summary", "metadata"}
(every key optional; strings, metadata an object). Root and session as for every command.
\b
Example:
  echo '{"reason": "pre-tool", "turn_id": "7", "tool_call_id": "call_42",
         "metadata": {"tool": "bash"}}' | ckpt hook json
""")
@_lock_option
@click.pass_context
def json_(ctx: click.Context, lock_timeout: str) -> None:
    """Take one checkpoint described by a JSON object on stdin (any harness)."""
    from ckpt.agents.hooks import parse_generic

    def target(call: HookCall | None, state: State) -> tuple[str | None, str]:
        return state.root, state.session

    _run_hook(ctx, "json", parse_generic, target, lock_timeout)


def _given(ctx: click.Context, name: str) -> bool:
    """Whether the global option `name` was given (command line or environment)."""
    source = ctx.find_root().get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


# (the call, or None when the payload could not be read) -> (root or None, session)
Target = Callable[["HookCall | None", State], tuple[str | None, str]]


def _run_hook(ctx: click.Context, fmt: str, parse: Callable[[object], HookCall | None],
              target: Target, lock_timeout: str) -> None:
    """Parse stdin, take the checkpoint; any failure is logged, never raised."""
    state = ctx.find_object(State)
    payload: object = None
    store: str | None = None
    try:
        assert state is not None
        payload = _read_payload()  # first: the log line then names the event
        if _USAGE_ERROR in ctx.meta:
            raise errors.CliError(ctx.meta[_USAGE_ERROR], code=errors.USAGE)
        if ctx.args:
            raise errors.CliError(f"unexpected argument(s): {' '.join(ctx.args)}")
        timeout = _seconds(lock_timeout)
        call = parse(payload)
        if call is None:  # an event this format does not checkpoint
            return
        root, session = target(call, state)
        if root is None:
            raise errors.CliError(
                f"no ckpt store for {call.cwd or 'the hook'}: neither $CLAUDE_PROJECT_DIR nor "
                f"an ancestor of the payload's cwd holds {STORE_NAME}",
                hint="run 'ckpt init' in the project, or pass --root")
        store = state.store if state.store is not None else os.path.join(root, STORE_NAME)
        with library().open(root, state.store, session) as service:
            store = service.store_dir
            if timeout < service.config.lock_timeout:
                service.config = dataclasses.replace(service.config, lock_timeout=timeout)
            service.create(**call.request.create_kwargs())
    except BaseException as exc:  # noqa: BLE001 - a hook never fails the agent's tool call
        if store is None and state is not None:
            store = _store_guess(state, target)
        _log_failure(fmt, payload, exc, store)


def _store_guess(state: State, target: Target) -> str | None:
    """Where the failure of a call that found no root is logged: the store of the root the
    options or the environment name, if any."""
    try:
        root, _ = target(None, state)
    except Exception:  # noqa: BLE001 - only a guess, for the log line
        return None
    if root is None:
        return None
    return state.store if state.store is not None else os.path.join(root, STORE_NAME)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise errors.CliError(f"--lock-timeout must be a number of seconds >= 0, not {text!r}")
    return value


def _read_payload() -> object:
    from ckpt.agents.hooks import PayloadError

    raw = sys.stdin.buffer.read()
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise PayloadError(f"stdin is not JSON: {exc}") from None


def _log_failure(fmt: str, payload: object, exc: BaseException, store: str | None) -> None:
    """One line on stderr and in the hook log; nothing here may raise."""
    from ckpt.agents.hooks import PayloadError, describe_payload
    from ckpt.checkpoints import display_text

    try:
        if isinstance(exc, PayloadError):
            kind, message, hint = "bad_payload", str(exc), None
        else:
            _, kind, message, hint = errors.describe(exc)
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        line = display_text(f"{when} ckpt hook {fmt}: {describe_payload(payload)}: {kind}: "
                            f"{message}" + (f" (hint: {hint})" if hint else ""))
    except BaseException:  # noqa: BLE001 - the log line itself must not fail the hook
        line = f"ckpt hook {fmt}: failed: {type(exc).__name__}"
    for path in _log_paths(store):
        if _append(path, line):
            break
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def _log_paths(store: str | None) -> list[str]:
    state_home = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state")
    fallback = os.path.join(state_home, "ckpt", LOG_NAME)
    if store is None or not os.path.isdir(store):
        return [fallback]
    return [os.path.join(store, "logs", LOG_NAME), fallback]


def _append(path: str, line: str) -> bool:
    """Append `line` to the log at `path` (created 0600; a symlink there is not followed)."""
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, (line + "\n").encode("utf-8", "backslashreplace"))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return False
    return True


COMMANDS = [mcp, hook]
