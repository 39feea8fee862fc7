"""Looking after the store: `prune`, `gc`, `fsck`, `stats`, `events`.

`fsck` exits 5 when it finds damage, after printing every problem (stdout) and the one-line
error (stderr), so a script gets both the list and the code.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

import click

from ckpt.cli.commands.remote import fsck_remote, print_remote_gc, remote_option
from ckpt.cli.context import State, json_option, pass_state
from ckpt.cli.errors import NOTHING_MATCHED as PARTLY_DONE
from ckpt.cli.errors import CliError, DamageFound, classify
from ckpt.cli.params import event_type_callback, parse_duration
from ckpt.cli.render import (
    display_path,
    dumps,
    format_size,
    format_when,
    one_line,
    path_text,
    table,
    write_json,
    write_lines,
)

if TYPE_CHECKING:
    from ckpt.checkpoints import Event, GcReport, HeldBack, PruneReport


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic only in click >= 8.2
    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> timedelta:
        if isinstance(value, timedelta):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.command(epilog="""\b
Examples:
  ckpt prune --reason pre-tool --keep-latest 20   # keep the 20 newest pre-tool checkpoints
  ckpt prune --older-than 7d                      # drop what is older than a week
  ckpt prune --turn 7 --dry-run                   # what would go
  ckpt prune --keep-latest 50 --no-gc             # drop records now, collect later
\b
Durations: 30s, 15m, 2h, 7d, 1w, or sums like 1h30m.
Exit 3: the checkpoints were pruned but the gc after it failed ('ckpt gc' frees them later).
""")
@click.option("--reason", metavar="R", help="Only checkpoints taken for reason R.")
@click.option("--turn", "turn_id", metavar="T", help="Only checkpoints of turn T.")
@click.option("--keep-latest", type=click.IntRange(min=0), metavar="N",
              help="Spare the newest N of the matching checkpoints.")
@click.option("--older-than", type=Duration(), metavar="DUR",
              help="Only checkpoints older than DUR.")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--no-gc", "no_gc", is_flag=True,
              help="Only drop the checkpoints; free their objects later with 'ckpt gc'.")
@remote_option("Prune this session's checkpoints on remote NAME (default: the only one; "
               "every root) instead, under its exclusive lock, then gc it.")
@json_option
@pass_state
def prune(state: State, reason: str | None, turn_id: str | None, keep_latest: int | None,
          older_than: timedelta | None, dry_run: bool, no_gc: bool, remote_name: str | None,
          as_json: bool) -> None:
    """Drop this session's checkpoints on this root matching every filter, then collect
    garbage (unless --no-gc or nothing was dropped).

    At least one filter is required: pruning everything must not be one typo away.
    """
    from ckpt.checkpoints import PruneIncomplete, make_room

    if reason is None and turn_id is None and keep_latest is None and older_than is None:
        raise click.UsageError("give at least one of --reason, --turn, --keep-latest, "
                               "--older-than")
    if remote_name is not None:
        print_remote_gc(state.open().prune_remote(
            remote_name or None, reason=reason, turn_id=turn_id, keep_latest=keep_latest,
            older_than=older_than, dry_run=dry_run), as_json)
        return
    if not dry_run:
        make_room(state.store_dir)  # on a full disk, opening the catalog needs room too
    try:
        report = state.open().prune(reason=reason, turn_id=turn_id, keep_latest=keep_latest,
                                    older_than=older_than, dry_run=dry_run, collect=not no_gc)
    except PruneIncomplete as exc:
        _print_prune(cast("PruneReport", exc.report), as_json, gc_failed=exc.error)
        failure = classify(exc.error)
        raise CliError(f"pruned {len(exc.removed)} checkpoint(s), but gc failed: "
                       f"{failure.message}", hint="'ckpt gc' frees their objects once it can run"
                       + (f"; {failure.hint}" if failure.hint else ""), code=PARTLY_DONE) from exc
    _print_prune(report, as_json)
    if report.gc is not None:
        _stopped_compacting(report.gc)


def _print_prune(report: PruneReport, as_json: bool, *,
                 gc_failed: BaseException | None = None) -> None:
    if as_json:
        out = report.to_json()
        out["gc_error"] = classify(gc_failed).message if gc_failed is not None else None
        write_json(out)
        return
    if report.dry_run:
        write_lines([f"would remove {i}" for i in report.removed]
                    + [f"would remove {len(report.removed)} checkpoint(s)"])
        return
    line = f"removed {len(report.removed)} checkpoint(s)"
    if report.gc is not None:
        line += (f", {report.objects_removed} object(s), {format_size(report.bytes_freed)} "
                 "freed")
    elif report.removed and gc_failed is None:
        line += "; not collected ('ckpt gc' frees their objects)"
    lines = [line]
    if report.gc is not None and report.gc.held_back is not None:
        lines.append(_held_back_line(report.gc.held_back))
    write_lines(lines)


def _held_back_line(held: HeldBack) -> str:
    return (f"held back {held.objects} unreachable object(s) ({format_size(held.bytes)}) "
            f"younger than gc_grace_seconds ({held.grace_seconds:g} s): a gc frees them after "
            f"{format_when(held.until)} UTC")


@click.command(epilog="""\b
Examples:
  ckpt gc
  ckpt gc --dry-run --json
""")
@click.option("--dry-run", is_flag=True, help="Count what would be removed; remove nothing.")
@remote_option("Collect remote NAME (default: the only one) instead: delete its packs no "
               "record there needs, under its exclusive lock.")
@json_option
@pass_state
def gc(state: State, dry_run: bool, remote_name: str | None, as_json: bool) -> None:
    """Remove objects no checkpoint of any root or session needs (once older than the
    gc_grace_seconds setting)."""
    from ckpt.checkpoints import make_room

    if remote_name is not None:
        if dry_run:
            raise click.UsageError("--dry-run does not apply to --remote")
        print_remote_gc(state.open().gc_remote(remote_name or None), as_json)
        return

    if not dry_run:
        make_room(state.store_dir)  # on a full disk, opening the catalog needs room too
    report = state.open().gc(dry_run=dry_run)
    if as_json:
        write_json(report.to_json())
        _stopped_compacting(report)
        return
    verb = "would remove" if dry_run else "removed"
    lines = [(f"{verb} {report.objects_removed} object(s), "
              f"{format_size(report.bytes_freed)}; kept {report.objects_kept} reachable, "
              f"{report.objects_young} young")]
    if report.held_back is not None:
        lines.append(_held_back_line(report.held_back))
    write_lines(lines)
    _stopped_compacting(report)


def _stopped_compacting(report: GcReport) -> None:
    """A gc that ran out of room while compacting freed what its report counts and left the
    rest of the store whole: say on stderr that compacting is left undone."""
    if report.compaction_error is not None:
        click.echo(f"ckpt: warning: gc stopped compacting: {report.compaction_error}; run "
                   "'ckpt gc' again once there is room", err=True)


def _damage_json(d: Any) -> dict[str, Any]:
    return {"oid": d.oid.hex(), "problem": d.problem, "reason": d.reason,
            "parent": d.parent.hex() if d.parent is not None else None,
            "name": display_name(d.name)}


def display_name(name: bytes | None) -> str | None:
    return path_text(name) if name is not None else None


@click.command(epilog="""\b
Examples:
  ckpt fsck            # every object the checkpoints need is present and sound
  ckpt fsck --full     # also re-hash every object in the store
  ckpt fsck --repair   # first rebuild or mend the catalog from the record files
""")
@click.option("--full", is_flag=True,
              help="Read and verify every object (slow), not only what is reachable.")
@click.option("--repair", is_flag=True,
              help="First make the catalog agree with the record files (rebuilding a "
                   "damaged or lost catalog), then check.")
@remote_option("Check remote NAME (default: the only one) instead: every index against "
               "its pack, every record; with --full every object's hash too.")
@json_option
@pass_state
def fsck(state: State, full: bool, repair: bool, remote_name: str | None,
         as_json: bool) -> None:
    """Check the store; exit 5 and list every damaged object and checkpoint if any.
    Checkpoints pulled from a remote whose objects are not here are listed as remote-only,
    not as damage."""
    if remote_name is not None:
        if repair:
            raise click.UsageError("--repair does not apply to --remote")
        fsck_remote(state, remote_name, full=full, as_json=as_json)
        return
    repaired: list[str] = []
    if repair:
        from ckpt.checkpoints import repair_catalog  # the library is imported lazily

        repaired = repair_catalog(state.store_dir)
        if not as_json:
            write_lines([f"repaired: {line}" for line in repaired])
    check = state.open().fsck(full=full)
    objects = check.objects
    if as_json:
        write_json({"ok": check.ok, "full": objects.full, "repaired": repaired, "trees_checked": objects.trees_checked,
                    "blobs_checked": objects.blobs_checked,
                    "objects_verified": objects.objects_verified,
                    "problems": [_damage_json(d) for d in objects.problems],
                    "damaged_checkpoints": list(check.damaged_checkpoints),
                    "damaged_files": [{"path": path_text(p), "problem": why}
                                      for p, why in check.damaged_files],
                    "damaged_caches": [{"path": path_text(p), "problem": why}
                                       for p, why in check.damaged_caches],
                    "remote_only": list(check.remote_only),
                    "stranded": [oid.hex() for oid in objects.stranded]})
    else:
        lines = []
        for d in objects.problems:
            where = ""
            if d.parent is not None:
                where = f" (in tree {d.parent.hex()} as {display_path(d.name or b'?')})"
            why = "" if d.problem == "missing" else f": {d.reason}"
            lines.append(f"{d.problem} object {d.oid.hex()}{why}{where}")
        lines.extend(f"damaged checkpoint {i}" for i in check.damaged_checkpoints)
        lines.extend(f"damaged file {path_text(p)}: {why}" for p, why in check.damaged_files)
        lines.extend(f"note: damaged stat cache {path_text(p)}: {why}"
                     for p, why in check.damaged_caches)
        if objects.stranded:
            lines.append(f"note: {len(objects.stranded)} unreachable object(s) cannot be read: "
                         "what they were stored against is gone (a gc was stopped part-way); "
                         "the next gc removes them")
        if check.remote_only:
            lines.append(f"note: {len(check.remote_only)} checkpoint(s) pulled from a remote, "
                         "objects only there (fetched when restored)")
        if check.ok:
            lines.append(f"ok: {objects.trees_checked} trees, {objects.blobs_checked} blobs"
                         + (f", {objects.objects_verified} objects verified" if full else ""))
        write_lines(lines)
    if not check.ok:
        raise DamageFound(len(objects.problems), len(check.damaged_checkpoints),
                          len(check.damaged_files))


@click.command(epilog="""\b
Examples:
  ckpt stats
  ckpt stats --json | jq .dedup_ratio
""")
@json_option
@pass_state
def stats(state: State, as_json: bool) -> None:
    """The whole store: objects, bytes on disk, logical bytes, dedup ratio, what dedup and
    deltas saved, and checkpoints of every root and session (per session and per root).

    Logical bytes add up every checkpoint's files; the dedup ratio is logical / on disk.
    Dedup saved: logical bytes less the distinct file contents; deltas saved: what storing
    changed files as deltas on their previous versions saved over compressing them alone.
    (`list`, `prune` and `events` work on the session; `list --all-sessions --all-roots`
    shows what `stats` counts.)
    """
    s = state.open().stats()
    if as_json:
        write_json({"objects": s.objects, "stored_bytes": s.stored_bytes,
                    "logical_bytes": s.logical_bytes, "dedup_ratio": round(s.dedup_ratio, 3),
                    "checkpoints": s.checkpoints, "sessions": dict(s.sessions),
                    "roots": dict(s.roots), "saved_by_dedup": s.saved_by_dedup,
                    "saved_by_dictionaries": s.saved_by_dictionaries,
                    "saved_by_deltas": s.saved_by_deltas})
        return
    lines = [f"objects        {s.objects}",
             f"on disk        {format_size(s.stored_bytes)} ({s.stored_bytes} bytes)",
             f"logical        {format_size(s.logical_bytes)} ({s.logical_bytes} bytes)",
             f"dedup ratio    {s.dedup_ratio:.2f}x",
             f"dedup saved    {format_size(s.saved_by_dedup)} ({s.saved_by_dedup} bytes)",
             f"dictionaries   {format_size(s.saved_by_dictionaries)} saved "
             f"({s.saved_by_dictionaries} bytes, estimated)",
             f"deltas saved   {format_size(s.saved_by_deltas)} ({s.saved_by_deltas} bytes)",
             f"checkpoints    {s.checkpoints} (every root and session of the store)"]
    lines.extend(f"  session {name}  {count}" for name, count in s.sessions.items())
    lines.extend(f"  root {display_path(root)}  {count}" for root, count in s.roots.items())
    write_lines(lines)


# Lists of checkpoint ids an event's details name one by one (up to _IDS_SHOWN): which
# checkpoints a prune or a cap evicted is the point of the event.
_ID_LISTS = frozenset({"removed", "spared", "discarded"})
_IDS_SHOWN = 3


def _event_details(data: dict[str, Any]) -> str:
    parts = []
    for key, value in data.items():
        if value is None or key in ("type", "at", "session"):
            continue
        if key in _ID_LISTS and isinstance(value, (list, tuple)):
            shown = ",".join(str(i) for i in value[:_IDS_SHOWN])
            more = f",+{len(value) - _IDS_SHOWN} more" if len(value) > _IDS_SHOWN else ""
            parts.append(f"{key}={shown or '-'}{more}")
        elif isinstance(value, (list, tuple)):
            parts.append(f"{key}={len(value)}")
        elif isinstance(value, dict):
            continue
        else:
            parts.append(f"{key}={one_line(str(value), 60)}")
    return " ".join(parts)


@click.command(epilog="""\b
Examples:
  ckpt events --limit 20
  ckpt events --type checkpoint:restore --all-sessions --json
  ckpt events --follow --json       # JSON Lines, one event a line, until Ctrl-C (exit 130)
""")
@click.option("--type", "type_", metavar="T", callback=event_type_callback,
              help="Only events of type T (checkpoint:create, checkpoint:restore, "
                   "checkpoint:prune).")
@click.option("--limit", type=click.IntRange(min=0), metavar="N",
              help="Only the newest N (still printed oldest first).")
@click.option("--all-sessions", is_flag=True,
              help="Every session, not only --session (events of every root either way).")
@click.option("--follow", "-f", is_flag=True,
              help="After the events there are, print each new one as it is recorded, until "
                   "Ctrl-C (exit 130); with --json one JSON object a line.")
@json_option
@pass_state
def events(state: State, type_: str | None, limit: int | None, all_sessions: bool,
           follow: bool, as_json: bool) -> None:
    """List the session's events (creates, restores, prunes), oldest first.

    Events are kept per store, not per root: those of the session on every root are listed.
    With --follow they are listed in the order they were recorded, then followed.
    """
    if follow:
        _follow(state, type_, limit, all_sessions, as_json)
        return
    found: list[Event] = state.open().events(type=type_, limit=limit, all_sessions=all_sessions)
    if as_json:
        write_json([e.to_json() for e in found])
        return
    rows = [[format_when(e.at), e.type, one_line(e.session, 24), _event_details(e.to_json())]
            for e in found]
    if rows:
        write_lines(table(["at (UTC)", "type", "session", "details"], rows))


FOLLOW_INTERVAL = 0.25  # seconds between two reads of the events table


def _follow(state: State, type_: str | None, limit: int | None, all_sessions: bool,
            as_json: bool) -> None:
    """Print the events there are, then poll for new ones (by their number in the table, so
    each is told once) until interrupted: the KeyboardInterrupt exits 130."""
    import sys
    import time

    service = state.open()
    found, cursor = service.events_after(0, type=type_, limit=limit, all_sessions=all_sessions)
    while True:
        for event in found:
            data = event.to_json()
            sys.stdout.write((dumps(data, indent=None) if as_json else "  ".join([
                format_when(event.at), event.type, one_line(event.session, 24),
                _event_details(data)])) + "\n")
        sys.stdout.flush()
        time.sleep(FOLLOW_INTERVAL)
        found, cursor = service.events_after(cursor, type=type_, all_sessions=all_sessions)


COMMANDS = [prune, gc, fsck, stats, events]
