"""Going back: `restore` (with --dry-run, --no-save, --no-event, --discard-later, --path) and
`recover` (finish a restore that was killed, or with --abandon clear its journal).

A partial restore (`RestoreIncomplete`, exit 3) still prints its report: on stdout as JSON with
--json, else as the summary line ("partially restored ...") and one `conflict:` line per path
left as it was, before the error line on stderr. Paths the scan before the restore did not
capture (kept as they are) are warnings on stderr, as `create` warns of them.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from ckpt.cli.commands.snapshot import MAX_SKIPPED_SHOWN, checkpoint_id_callback
from ckpt.cli.context import State, complete_checkpoint_id, json_option, pass_state, user_path
from ckpt.cli.render import display_path, format_size, write_json, write_lines

if TYPE_CHECKING:
    from ckpt.checkpoints import AbandonedRestore, RestorePlan, RestoreReport


def summary_line(report: RestoreReport) -> str:
    if report.dry_run:
        head = f"would restore {report.id}"
    else:
        head = f"{'partially restored' if report.conflicts else 'restored'} {report.id}"
    if report.target is not None:
        head += f" into {display_path(report.target)}"
    line = (f"{head}: {report.written} written, {report.deleted} deleted, "
            f"{report.dirs_created} dirs created, {report.dirs_removed} dirs removed, "
            f"{report.unchanged} unchanged ({format_size(report.bytes_written)})")
    if report.later_tracked:
        line += f"; {len(report.later_tracked)} path(s) first tracked later included"
    if report.discarded:
        line += f"; {len(report.discarded)} later checkpoint(s) discarded"
    if report.pre_restore:
        line += f"; undo: ckpt restore {report.pre_restore}"
    return line


def plan_lines(plan: RestorePlan) -> list[str]:
    """The plan in the order it is applied, one action per line."""

    def removal(path: bytes, is_dir: bool) -> str:
        return f"{'rmdir' if is_dir else 'delete':<6} {display_path(path)}"

    def write(path: bytes, kind: str, target: bytes | None) -> str:
        if kind == "SYMLINK":
            return f"{'link':<6} {display_path(path)} -> {display_path(target or b'')}"
        return f"{'write':<6} {display_path(path)}"

    return [
        *(removal(r.path, r.kind.name == "TREE") for r in plan.pre_removals),
        *(f"{'mkdir':<6} {display_path(d)}" for d in plan.mkdirs),
        *(write(w.path, w.entry.kind.name, w.entry.target) for w in plan.writes),
        *(f"{'chmod':<6} {c.entry.perms:04o} {display_path(c.path)}" for c in plan.chmods),
        *(removal(r.path, r.kind.name == "TREE") for r in plan.removals),
    ]


@click.command(epilog="""\b
Examples:
  ckpt restore ckpt-1764433022123-q7x2m9ta    # saves the current state first, prints undo
  ckpt restore ckpt-17644 --dry-run           # show the plan, change nothing
  ckpt restore ckpt-17644 --path src/app.py   # only this path
  ckpt restore latest~2                       # two checkpoints back ('ckpt undo' undoes it)
  ckpt restore latest --target /tmp/copy      # into an empty directory; workspace untouched
  ckpt restore "$(ckpt latest --reason pre-tool)" --json
""")
@click.argument("id", shell_complete=complete_checkpoint_id, callback=checkpoint_id_callback)
@click.option("--dry-run", is_flag=True, help="Print the plan; change nothing.")
@click.option("--no-save", is_flag=True,
              help="Do not save the current state first (the restore cannot be undone).")
@click.option("--no-event", is_flag=True, help="Do not record a checkpoint:restore event.")
@click.option("--discard-later", is_flag=True,
              help="Drop the session's checkpoints newer than ID (no redo).")
@click.option("--path", "paths", metavar="P", multiple=True, type=click.Path(path_type=str),
              help="Restore only P (repeatable; relative to the current directory): what "
                   "the checkpoint lacks at or below P is deleted.")
@click.option("--from-other-root", is_flag=True,
              help="Allow ID to be a checkpoint of another workspace root (refused otherwise).")
@click.option("--target", metavar="DIR", type=click.Path(path_type=str),
              help="Write the checkpoint into DIR (absent or empty, not in the store) "
                   "instead; the workspace is not touched, nothing is saved first.")
@json_option
@pass_state
def restore(state: State, id: str, dry_run: bool, no_save: bool, no_event: bool,  # noqa: A002
            discard_later: bool, paths: tuple[str, ...], from_other_root: bool,
            target: str | None, as_json: bool) -> None:
    """Make the workspace match checkpoint ID (a ref: an id, a unique prefix, latest,
    latest~N, ID~N).

    Only what differs is touched. The current state is saved first as a 'pre-restore'
    checkpoint, whose id the summary prints: restoring it undoes the restore. Ignored files
    and paths the checkpoint did not capture are never deleted.
    """
    from ckpt.checkpoints import RestoreIncomplete, RestoreOptions

    if target is not None and discard_later:
        from ckpt.cli.errors import USAGE, CliError

        raise CliError("--target and --discard-later do not go together: a restore into "
                       "another directory leaves the session's history as it is", code=USAGE)
    service = state.open()
    try:
        with state.progress() as progress:
            options = RestoreOptions(save=not no_save, record_event=not no_event,
                                     discard_later=discard_later, dry_run=dry_run,
                                     paths=tuple(user_path(p) for p in paths),
                                     from_other_root=from_other_root,
                                     target=None if target is None else user_path(target))
            report = service.restore(id, options, progress=progress, cwd=os.getcwd())
    except RestoreIncomplete as exc:
        partial = getattr(exc, "report", None)
        if partial is not None:
            _print(partial, as_json)
        raise
    if dry_run and not as_json:
        write_lines(plan_lines(report.plan))
    _print(report, as_json)


def report_lines(report: RestoreReport) -> list[str]:
    """The plain report: the summary line, then each path left as it was and why."""
    return [summary_line(report),
            *(f"conflict: {display_path(c.path)} ({c.reason})" for c in report.conflicts)]


def warn_not_captured(report: RestoreReport) -> None:
    """Paths the restore kept because the scan before it could not capture them (stderr)."""
    for item in report.not_captured[:MAX_SKIPPED_SHOWN]:
        click.echo(f"ckpt: warning: not captured, kept: {display_path(item.path)} "
                   f"({item.reason})", err=True)
    if len(report.not_captured) > MAX_SKIPPED_SHOWN:
        click.echo(f"ckpt: warning: ... and {len(report.not_captured) - MAX_SKIPPED_SHOWN} "
                   "more (--json lists them)", err=True)


def _print(report: RestoreReport, as_json: bool) -> None:
    warn_not_captured(report)
    if as_json:
        write_json(report.to_json())
    else:
        write_lines(report_lines(report))


@click.command(epilog="""\b
Examples:
  ckpt recover          # after a crash or kill -9 during 'ckpt restore'
  ckpt recover --abandon   # a restore that cannot complete (its checkpoint's tree is gone)
""")
@click.option("--abandon", is_flag=True,
              help="Clear the interrupted restore's journal without finishing it, after "
                   "saying what it had and had not done; the files stay as they are.")
@json_option
@pass_state
def recover(state: State, abandon: bool, as_json: bool) -> None:
    """Finish a restore that was interrupted (the next create, restore or diff would too).

    JSON: {"recovered": bool, "restore": <restore report> | null}; with --abandon
    {"abandoned": <abandoned restore> | null}.
    """
    if abandon:
        abandoned = state.open().abandon_restore()
        if as_json:
            write_json({"abandoned": abandoned.to_json() if abandoned is not None else None})
        else:
            write_lines(abandon_lines(abandoned))
        return
    report = state.open().recover()
    if as_json:
        write_json({"recovered": report is not None,
                    "restore": report.to_json() if report is not None else None})
    elif report is None:
        write_lines(["nothing to recover"])
    else:
        write_lines(report_lines(report))


def abandon_lines(abandoned: AbandonedRestore | None) -> list[str]:
    """What `recover --abandon` cleared and what that lost, one fact a line."""
    if abandoned is None:
        return ["nothing to recover"]
    if abandoned.checkpoint is None:
        return [f"abandoned an unreadable restore journal ({abandoned.problem}); "
                "what it had done is unknown; the files are left as they are"]
    why = f" ({abandoned.problem})" if abandoned.problem else ""
    lines = [f"abandoned the restore to {abandoned.checkpoint}{why}; the files are left as "
             "they are"]
    if abandoned.applied is None:
        lines.append("done: unknown (no pre-restore checkpoint to compare with)")
    else:
        lines.append(f"done: {len(abandoned.applied)} change(s) since {abandoned.pre_restore}"
                     f" (undo: ckpt restore {abandoned.pre_restore})")
        lines += [f"  {c.change} {display_path(c.path)}" for c in abandoned.applied]
    if abandoned.not_applied is None:
        lines.append("not done: unknown (the checkpoint's tree cannot be read)")
    else:
        lines.append(f"not done: {len(abandoned.not_applied)} change(s)")
        lines += [f"  {c.change} {display_path(c.path)}" for c in abandoned.not_applied]
    return lines


COMMANDS = [restore, recover]
