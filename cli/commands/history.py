"""History verbs: `undo` (the last restore of this root), `forget` (drop checkpoints by ref)
and `log PATH` (the checkpoints where a path changed).

Every ID argument of the CLI takes a ref (`latest`, `latest~N`, `ID~N`, an id or a unique
prefix); the library resolves it. `undo` with nothing left to undo exits 3.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from ckpt.cli.commands.restore import plan_lines, report_lines, warn_not_captured
from ckpt.cli.commands.snapshot import checkpoint_id_callback
from ckpt.cli.context import State, complete_checkpoint_id, json_option, pass_state, user_path
from ckpt.cli.render import format_size, format_when, one_line, table, write_json, write_lines

if TYPE_CHECKING:
    from ckpt.checkpoints import PathChange


@click.command(epilog="""\b
Examples:
  ckpt restore latest~3     # go back; the current state is saved first
  ckpt undo                 # ... and undo that restore
  ckpt undo --dry-run --json
\b
Exit 3: nothing to undo.
""")
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@json_option
@pass_state
def undo(state: State, dry_run: bool, as_json: bool) -> None:
    """Undo the last restore of this root (any session).

    Restores the newest 'pre-restore' checkpoint no undo has restored yet, saving the current
    state first (its id is printed: 'ckpt restore' of it redoes). Repeated, undo walks back
    through earlier restores. A restore of some paths (--path) is undone for those paths.
    Restores made with --no-save cannot be undone.
    """
    report = state.open().undo(dry_run=dry_run)
    warn_not_captured(report)
    if as_json:
        write_json(report.to_json())
        return
    if dry_run:
        write_lines(plan_lines(report.plan))
    lines = report_lines(report)
    lines[0] = (f"{'would undo' if dry_run else 'undid'} the restore saved as {report.undid}: "
                + lines[0].replace("; undo: ckpt restore", "; redo: ckpt restore"))
    write_lines(lines)


@click.command(epilog="""\b
Examples:
  ckpt forget ckpt-1764433022123-q7x2m9ta
  ckpt forget latest latest~1 --dry-run
  ckpt forget latest~2 && ckpt gc      # free their objects now
""")
@click.argument("refs", metavar="REF...", nargs=-1, required=True,
                shell_complete=complete_checkpoint_id, callback=lambda c, p, v: tuple(
                    checkpoint_id_callback(c, p, r) for r in v))
@click.option("--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@json_option
@pass_state
def forget(state: State, refs: tuple[str, ...], dry_run: bool, as_json: bool) -> None:
    """Drop the checkpoints REF... names (ids, unique prefixes, latest~N).

    All are resolved first: an unknown one removes none (exit 1), nor does one that an
    interrupted restore still needs. Their objects are freed by the next 'ckpt gc'.
    JSON: {"removed": [ids], "dry_run": bool}.
    """
    report = state.open().forget(*refs, dry_run=dry_run)
    if as_json:
        write_json(report.to_json())
        return
    verb = "would forget" if dry_run else "forgot"
    write_lines([f"{verb} {len(report.removed)} checkpoint(s)",
                 *(f"  {checkpoint_id}" for checkpoint_id in report.removed)])


@click.command(name="log", epilog="""\b
Examples:
  ckpt log src/app.py
  ckpt log src --all-sessions       # a directory: any change below it
  ckpt log src/app.py --json
\b
Changes: A added, M modified (content, mode, link target; a directory: anything below it),
D deleted, T type changed (file, symlink, directory).
""")
@click.argument("path", type=click.Path(path_type=str))
@click.option("--all-sessions", is_flag=True,
              help="Every session's checkpoints on this root, not only --session.")
@json_option
@pass_state
def log_(state: State, path: str, all_sessions: bool, as_json: bool) -> None:
    """List the checkpoints where PATH changed, oldest first.

    PATH is relative to the current directory. Columns: id, created (UTC), age, change,
    kind, size, reason, turn, tool call.
    """
    rows = state.open().path_log(user_path(path), all_sessions=all_sessions, cwd=os.getcwd())
    if as_json:
        write_json([row.to_json() for row in rows])
        return
    if rows:
        now = datetime.now(UTC)
        write_lines(table(["id", "created (UTC)", "age", "change", "kind", "size", "reason",
                           "turn", "tool_call"], [_row(r, now) for r in rows],
                          right=frozenset({5})))


def _row(row: PathChange, now: datetime) -> list[str]:
    r = row.record
    return [r.id, format_when(r.created_at), age(r.created_at, now), row.change,
            row.kind or "-", "-" if row.size is None else format_size(row.size),
            one_line(r.reason, 16), one_line(r.turn_id, 16), one_line(r.tool_call_id, 24)]


def age(at: datetime, now: datetime) -> str:
    """`just now`, `42 s ago`, `3 min ago`, `5 h ago`, `2 d ago`."""
    seconds = int((now - at).total_seconds())
    if seconds < 1:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


COMMANDS = [undo, forget, log_]
