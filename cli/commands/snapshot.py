"""Taking and inspecting checkpoints: `create`, `list`, `latest`, `show`, `diff`, `cat`.

Thin: each command parses options, calls one `Checkpoints` method and hands the result to
`cli/render.py`. The library is imported inside the commands (see `cli/context.py`).
"""

from __future__ import annotations

import base64
import inspect
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, BinaryIO

import click

from ckpt.cli.commands.remote import list_remote, remote_option
from ckpt.cli.context import (
    State,
    complete_checkpoint_id,
    json_option,
    pass_state,
    text_callback,
    user_path,
)
from ckpt.cli.params import parse_meta
from ckpt.cli.progress import stderr_is_terminal
from ckpt.cli.render import (
    StatRow,
    Template,
    cut_label,
    delivering,
    diff_stat,
    display_path,
    dumps,
    fill_template,
    format_age,
    format_size,
    format_when,
    key_values,
    one_line,
    parse_template,
    path_text,
    table,
    write_json,
    write_lines,
)

if TYPE_CHECKING:
    from ckpt.checkpoints import CheckpointRecord, Checkpoints, FileEntry, FilePatch

MAX_SKIPPED_SHOWN = 20


def _meta_callback(ctx: click.Context, param: click.Parameter,
                   value: tuple[str, ...]) -> dict[str, str]:
    try:
        return parse_meta(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def checkpoint_id_callback(ctx: click.Context, param: click.Parameter,
                           value: str | None) -> str | None:
    """A checkpoint id typed as bytes that are not UTF-8 (lone surrogates in argv) names no
    checkpoint: the unknown-id error, before the catalog is asked."""
    if value is not None and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            from ckpt.checkpoints import UnknownCheckpoint

            raise UnknownCheckpoint(value) from None
    return value


def _checkpoint_id(name: str = "id", *, required: bool = True) -> Callable[[Any], Any]:
    return click.argument(name, required=required, shell_complete=complete_checkpoint_id,
                          callback=checkpoint_id_callback)


def warn_restore_pending(service: Checkpoints) -> None:
    """A read-only command does not complete a killed restore: it says one is pending."""
    from ckpt.checkpoints import CheckpointError

    try:
        pending = service.restore_pending()
    except CheckpointError as exc:  # a damaged journal: the completing commands report it
        click.echo(f"ckpt: warning: a killed restore left a journal that cannot be read: "
                   f"{exc}", err=True)
        return
    if pending is not None:
        click.echo(f"ckpt: warning: the restore of {pending} was interrupted and is not "
                   "complete: the workspace is half restored ('ckpt recover' finishes it)",
                   err=True)


def record_json(record: CheckpointRecord) -> dict[str, Any]:
    """A record as the CLI prints it: `record.to_json()` plus what the text also shows, the
    covered `paths` (scope "paths") and the `skipped` paths with their reasons."""
    return {**record.to_json(), "paths": [path_text(p) for p in record.paths],
            "skipped": [{"path": path_text(i.path), "reason": i.reason} for i in record.skipped]}


def warn_skipped(record: CheckpointRecord) -> None:
    """Paths a checkpoint did not capture are never silent (stderr, one line each)."""
    for item in record.skipped[:MAX_SKIPPED_SHOWN]:
        click.echo(f"ckpt: warning: not captured: {display_path(item.path)} ({item.reason})",
                   err=True)
    if len(record.skipped) > MAX_SKIPPED_SHOWN:
        click.echo(f"ckpt: warning: ... and {len(record.skipped) - MAX_SKIPPED_SHOWN} more "
                   "('ckpt show ID' lists them)", err=True)


def summarize_record(record: CheckpointRecord) -> str:
    s = record.stats
    return (f"{record.id}: {s.files} files ({format_size(s.bytes)}), {s.new_objects} new "
            f"objects ({format_size(s.new_bytes)}), {s.duration_ms} ms")


@click.command(epilog="""\b
Examples:
  ckpt create -m "before tool call" --turn 7 --tool-call call_42
  ckpt create --reason pre-edit --meta model=opus --meta attempt=2
  id=$(ckpt create --turn 7) && echo "checkpoint $id"
""")
@click.option("-m", "--label", callback=text_callback, help="A short label for people.")
@click.option("--reason", callback=text_callback,
              help="Why it was taken (e.g. pre-tool, post-turn); 'list' and 'prune' filter on it.")
@click.option("--turn", "turn_id", metavar="T", callback=text_callback,
              help="The agent turn id.")
@click.option("--message", "message_id", metavar="M", callback=text_callback,
              help="The conversation message id.")
@click.option("--tool-call", "tool_call_id", metavar="C", callback=text_callback,
              help="The tool call id.")
@click.option("--summary", metavar="S", callback=text_callback, help="A longer description.")
@click.option("--meta", "metadata", metavar="K=V", multiple=True, callback=_meta_callback,
              help="Metadata (repeatable); values are stored as text.")
@click.option("--path", "paths", metavar="P", multiple=True, type=click.Path(path_type=str),
              help="Also cover P (repeatable; relative to the current directory); with "
                   "--path or tracked paths the checkpoint covers only those.")
@click.option("--keep", type=click.IntRange(min=0), metavar="N",
              help="Keep the session's newest N checkpoints on this root, this one included "
                   "(the oldest go; 0: no cap); default: the retention_cap setting.")
@json_option
@pass_state
def create(state: State, label: str | None, reason: str | None, turn_id: str | None,
           message_id: str | None, tool_call_id: str | None, summary: str | None,
           metadata: dict[str, str], paths: tuple[str, ...], keep: int | None,
           as_json: bool) -> None:
    """Take a checkpoint of the workspace; print its id.

    Covers the whole tree (minus the store, .git and ignored files) unless the session has
    tracked paths or --path is given. Paths it could not capture (too large, unreadable) are
    named on stderr.
    """
    service = state.open()
    with state.progress() as progress:
        record = service.create(label=label, reason=reason, turn_id=turn_id,
                                message_id=message_id, tool_call_id=tool_call_id,
                                summary=summary, metadata=metadata,
                                paths=[user_path(p) for p in paths] or None, progress=progress,
                                keep=keep, cwd=os.getcwd())
    warn_skipped(record)
    with delivering():  # printed means it exists: a Ctrl-C from here on exits 0
        if as_json:
            write_json(record_json(record))
        else:
            write_lines([record.id])
    if not as_json and stderr_is_terminal():
        click.echo(f"ckpt: {summarize_record(record)}", err=True)


_LIST_EPILOG = """\b
Examples:
  ckpt list
  ckpt list --turn 7 --reason pre-tool
  ckpt list --format '{id} {age} {reason}'
  ckpt list --all-sessions --json | jq -r '.[].id'
"""

# What `--format` fields name: the keys of a `list --json` element (a test pins them to the
# JSON), and `age`, which the JSON leaves out (it has `created_at`; its text would change by
# the second).
LIST_KEYS = ("id", "label", "reason", "turn_id", "message_id", "tool_call_id", "summary",
             "metadata", "session", "scope", "parent", "tree", "created_at", "stats", "paths",
             "skipped", "changed")
FORMAT_KEYS = (*LIST_KEYS, "age")
# Columns shown only when some row has a value: a plain `ckpt create` history has none.
_OPTIONAL_COLUMNS = (("reason", "reason", 16), ("turn", "turn_id", 16),
                     ("tool_call", "tool_call_id", 24))


def _format_callback(ctx: click.Context, param: click.Parameter,
                     value: str | None) -> Template | None:
    if value is None:
        return None
    try:
        return parse_template(value, FORMAT_KEYS)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("list", epilog=_LIST_EPILOG)
@click.option("--turn", "turn_id", metavar="T", callback=text_callback,
              help="Only checkpoints of turn T.")
@click.option("--reason", metavar="R", callback=text_callback,
              help="Only checkpoints taken for reason R.")
@click.option("--all-sessions", is_flag=True,
              help="Every session on this root, not only --session.")
@click.option("--all-roots", is_flag=True,
              help="Every root of the store too, not only this one (adds a root column).")
@click.option("--format", "template", metavar="TEMPLATE", callback=_format_callback,
              help="One line per checkpoint from TEMPLATE: {key} fields over the keys of "
                   "--json and {age} (e.g. '{id} {age} {reason}'; null prints nothing).")
@remote_option("The checkpoints on remote NAME (default: the only one) instead: the "
               "session's, or every one with --all-sessions.")
@json_option
@pass_state
def list_(state: State, turn_id: str | None, reason: str | None, all_sessions: bool,
          all_roots: bool, template: Template | None, remote_name: str | None,
          as_json: bool) -> None:
    """List checkpoints, oldest first.

    Columns: id, created (UTC), age, root (with --all-roots), session (with
    --all-sessions), reason, turn and tool_call (each when some checkpoint has one), label,
    files, changed (files added, deleted or modified since the checkpoint's parent; - when
    the parent was pruned).
    """
    if template is not None and as_json:
        raise click.UsageError("--format and --json exclude each other")
    if remote_name is not None:
        if turn_id is not None or reason is not None or all_roots:
            raise click.UsageError("--remote takes only --all-sessions, --format and --json")
        list_remote(state, remote_name, all_sessions=all_sessions, as_json=as_json,
                    template=template)
        return
    service = state.open()
    warn_restore_pending(service)
    records = service.history(turn_id=turn_id, reason=reason, all_sessions=all_sessions,
                              all_roots=all_roots)
    changed = [service.changed(r) for r in records]
    docs = [{**record_json(r), "changed": n} for r, n in zip(records, changed)]
    if as_json:
        write_json(docs)
        return
    now = datetime.now(UTC)
    ages = [format_age(r.created_at, now) for r in records]
    if template is not None:
        write_lines(fill_template(template, {**doc, "age": age}) for doc, age in zip(docs, ages))
        return
    if not records:
        return
    optional = [(title, key, width) for title, key, width in _OPTIONAL_COLUMNS
                if any(getattr(r, key) for r in records)]
    header = (["id", "created (UTC)", "age"] + (["root"] if all_roots else [])
              + (["session"] if all_sessions else []) + [title for title, _, _ in optional]
              + ["label", "files", "changed"])
    rows = [[r.id, format_when(r.created_at), age]
            + ([display_path(r.root)] if all_roots else [])
            + ([one_line(r.session, 24)] if all_sessions else [])
            + [one_line(getattr(r, key), width) for _, key, width in optional]
            + [cut_label(r.label), str(r.stats.files), "-" if n is None else str(n)]
            for r, n, age in zip(records, changed, ages)]
    width = len(header)
    write_lines(table(header, rows, right=frozenset({width - 2, width - 1})))


@click.command(epilog="""\b
Examples:
  ckpt latest                       # newest checkpoint of the session
  ckpt latest --turn 7 --reason pre-tool
  ckpt restore "$(ckpt latest --reason pre-tool)"
""")
@click.option("--turn", "turn_id", metavar="T", callback=text_callback,
              help="Only checkpoints of turn T.")
@click.option("--reason", metavar="R", callback=text_callback,
              help="Only checkpoints taken for reason R.")
@json_option
@pass_state
def latest(state: State, turn_id: str | None, reason: str | None, as_json: bool) -> None:
    """Print the newest matching checkpoint of the session (exit 3 if none)."""
    from ckpt.checkpoints import NothingMatched

    service = state.open()
    warn_restore_pending(service)
    record = service.latest(turn_id=turn_id, reason=reason)
    if record is None:
        filters = [f"turn {turn_id}" if turn_id is not None else "",
                   f"reason {reason}" if reason is not None else ""]
        what = " and ".join(f for f in filters if f)
        raise NothingMatched(f"no checkpoint in session {service.session}"
                             + (f" with {what}" if what else ""))
    if as_json:
        write_json(record_json(record))
    else:
        write_lines([record.id])


def file_json(entry: FileEntry) -> dict[str, Any]:
    out: dict[str, Any] = {"path": path_text(entry.path), "kind": entry.kind.name.lower(),
                           "size": entry.size}
    if entry.target is not None:
        out["target"] = path_text(entry.target)
    else:
        out["oid"] = entry.oid.hex() if entry.oid is not None else None
    return out


@click.command(epilog="""\b
Examples:
  ckpt show ckpt-1764433022123-q7x2m9ta
  ckpt show ckpt-17644 --json | jq '.files[].path'
""")
@_checkpoint_id()
@json_option
@pass_state
def show(state: State, id: str, as_json: bool) -> None:  # noqa: A002
    """Show checkpoint ID (any unique prefix) and the files it holds."""
    service = state.open()
    warn_restore_pending(service)
    record = service.get(id)
    files = service.files(record.id)
    absent = service.absent(record.id) if record.scope == "paths" else []
    if as_json:
        write_json({**record_json(record), "files": [file_json(f) for f in files],
                    "absent": [path_text(p) for p in absent]})
        return
    s = record.stats
    pairs = [
        ("id", record.id), ("created", record.to_json()["created_at"]), ("session", record.session),
        ("scope", record.scope), ("parent", record.parent or "-"), ("label", record.label or "-"),
        ("reason", record.reason or "-"), ("turn", record.turn_id or "-"),
        ("message", record.message_id or "-"), ("tool call", record.tool_call_id or "-"),
        ("summary", one_line(record.summary, 200)),
        ("metadata", " ".join(f"{k}={v if isinstance(v, str) else dumps(v, indent=None)}"
                              for k, v in record.to_json()["metadata"].items()) or "-"),
        ("tree", record.tree.hex()),
        ("stats", (f"{s.files} files, {format_size(s.bytes)}; {s.new_objects} new objects "
                   f"({format_size(s.new_bytes)}); {s.duration_ms} ms")),
    ]
    if record.scope == "paths":
        pairs.append(("paths", " ".join(display_path(p) for p in record.paths)))
    lines = key_values(pairs)
    for item in record.skipped:
        lines.append(f"not captured: {display_path(item.path)} ({item.reason})")
    for path in absent:
        lines.append(f"did not exist: {display_path(path)}")
    lines.append("")
    rows = []
    for f in files:
        name = display_path(f.path)
        if f.target is not None:
            name += " -> " + display_path(f.target)
        rows.append([f.kind.name.lower(), str(f.size), name])
    lines.extend(table(["kind", "size", "path"], rows, right=frozenset({1})))
    write_lines(lines)


def _accepts_progress(method: Callable[..., Any]) -> bool:
    try:
        return "progress" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def _around(service: Checkpoints, tool_call_id: str | None,
            turn_id: str | None) -> tuple[str, str | None]:
    """The oldest and newest checkpoint of this root (any session) with that tool call or
    turn id; one alone: it and the working tree (said on stderr). None: exit 3."""
    from ckpt.checkpoints import NothingMatched

    what = f"tool call {tool_call_id}" if tool_call_id is not None else f"turn {turn_id}"
    records = service.history(all_sessions=True, tool_call_id=tool_call_id, turn_id=turn_id)
    if not records:
        raise NothingMatched(f"no checkpoint on this root with {what}")
    if len(records) == 1:
        click.echo(f"ckpt: note: only {records[0].id} has {what}: diffing it against the "
                   "working tree", err=True)
        return records[0].id, None
    return records[0].id, records[-1].id


def _warn_not_captured(path: bytes, reason: str | None) -> None:
    click.echo(f"ckpt: warning: not captured: {display_path(path)} ({reason})", err=True)


@click.command(epilog="""\b
Examples:
  ckpt diff ckpt-1764433022123-q7x2m9ta         # checkpoint vs the working tree
  ckpt diff ckpt-17644330221 ckpt-1764433099812-3bd0kfzw   # between two checkpoints
  ckpt diff latest~1 latest -p                  # the last change as a patch
  ckpt diff --tool-call call_42 --stat          # what tool call call_42 changed
  ckpt diff ckpt-17644 --exit-code --name-only || echo changed
\b
A added  D deleted  M modified (content or exec bit)  T type changed (file <-> symlink)
S not captured (too large, special, unreadable; the reason follows the path)
""")
@_checkpoint_id("id", required=False)
@_checkpoint_id("id2", required=False)
@click.option("-p", "--patch", "as_patch", is_flag=True,
              help="Print a unified patch, as git diff does (binary files named as such).")
@click.option("--stat", "as_stat", is_flag=True,
              help="Print git's --stat summary (with --patch: before the patch).")
@click.option("--name-only", is_flag=True, help="Print the changed paths only.")
@click.option("--exit-code", is_flag=True,
              help="Exit 1 when anything differs, 0 when nothing does (as git diff).")
@click.option("--tool-call", "tool_call_id", metavar="C", callback=text_callback,
              help="Diff the first and last checkpoint of tool call C (this root).")
@click.option("--turn", "turn_id", metavar="T", callback=text_callback,
              help="Diff the first and last checkpoint of turn T (this root).")
@json_option
@pass_state
def diff(state: State, id: str | None, id2: str | None, as_patch: bool,  # noqa: A002
         as_stat: bool, name_only: bool, exit_code: bool, tool_call_id: str | None,
         turn_id: str | None, as_json: bool) -> None:
    """Show what changed from checkpoint ID to the working tree (or to checkpoint ID2).

    With --tool-call C or --turn T instead of IDs: from the first to the last checkpoint
    of this root with that id (any session); one alone is diffed against the working tree.
    """
    from ckpt.cli.errors import DIFFERENCES

    picked = [name for name, given in (("ID", id is not None), ("--tool-call", tool_call_id
              is not None), ("--turn", turn_id is not None)) if given]
    if len(picked) != 1:
        raise click.UsageError("give a checkpoint ID, --tool-call C or --turn T"
                               if not picked else f"{' and '.join(picked)} exclude each other")
    if name_only and (as_patch or as_stat):
        raise click.UsageError("--name-only excludes --patch and --stat")
    if as_json and (as_stat or name_only):
        raise click.UsageError("--json takes --patch, not --stat or --name-only")
    service = state.open()
    if id is None:
        id, id2 = _around(service, tool_call_id, turn_id)  # noqa: A001
    if id2 is not None:
        warn_restore_pending(service)
    if as_patch or as_stat:
        patches = service.patch(id, id2)
        _print_patches(patches, as_patch=as_patch, as_stat=as_stat, as_json=as_json)
        differ = bool(patches)
    else:
        with state.progress() as progress:
            if id2 is None and progress is not None and _accepts_progress(service.diff):
                changes = service.diff(id, None, progress=progress)  # type: ignore[call-arg]
            else:
                changes = service.diff(id, id2)
        if as_json:
            write_json([{"path": path_text(c.path), "change": c.change}
                        | ({"reason": c.reason} if c.reason is not None else {})
                        for c in changes])
        elif name_only:
            write_lines(display_path(c.path) for c in changes)
        else:
            write_lines(f"{c.change} {display_path(c.path)}"
                        + (f" ({c.reason})" if c.reason is not None else "") for c in changes)
        differ = bool(changes)
    if exit_code and differ:
        raise click.exceptions.Exit(DIFFERENCES)


def _print_patches(patches: list[FilePatch], *, as_patch: bool, as_stat: bool,
                   as_json: bool) -> None:
    if as_json:
        write_json([{"path": path_text(p.path), "change": p.change}
                    | ({"reason": p.reason} if p.reason is not None else {})
                    | {"patch": None if p.change == "S"
                       else p.text.decode("utf-8", "surrogateescape"),
                       "binary": p.binary, "insertions": p.insertions,
                       "deletions": p.deletions}
                    for p in patches])
        return
    for p in patches:
        if p.change == "S":
            _warn_not_captured(p.path, p.reason)
    shown = [p for p in patches if p.change != "S"]
    if as_stat:
        import shutil

        rows = [StatRow(display_path(p.path), p.insertions, p.deletions, p.binary,
                        p.old_size, p.new_size) for p in shown]
        lines = diff_stat(rows, shutil.get_terminal_size((80, 24)).columns)
        write_lines(lines + ([""] if as_patch and lines else []))
    if as_patch:
        stdout = sys.stdout.buffer
        for p in shown:
            stdout.write(p.text)
        stdout.flush()


class _Base64Writer:
    """A binary sink that writes base64 text in pieces (multiples of 3 input bytes).

    `prefix` is written before the first piece, so an error raised before any content
    (no such file) leaves stdout empty.
    """

    def __init__(self, out: BinaryIO, prefix: bytes) -> None:
        self.out = out
        self.prefix: bytes | None = prefix
        self.pending = b""

    def _start(self) -> None:
        if self.prefix is not None:
            self.out.write(self.prefix)
            self.prefix = None

    def write(self, data: bytes) -> int:
        self._start()
        data = self.pending + bytes(data)
        cut = len(data) - len(data) % 3
        self.out.write(base64.b64encode(data[:cut]))
        self.pending = data[cut:]
        return len(data) - len(self.pending)

    def close(self) -> None:
        self._start()
        self.out.write(base64.b64encode(self.pending))
        self.pending = b""


@click.command(epilog="""\b
Examples:
  ckpt cat ckpt-1764433022123-q7x2m9ta src/app.py > app.py.old
  ckpt cat ckpt-17644 src/app.py | diff - src/app.py
  ckpt cat ckpt-17644 logo.png --json | jq -r .content_base64 | base64 -d > logo.png
""")
@_checkpoint_id()
@click.argument("path")
@json_option
@pass_state
def cat(state: State, id: str, path: str, as_json: bool) -> None:  # noqa: A002
    """Write file PATH of checkpoint ID to stdout (PATH relative to the workspace root).

    Streams the bytes (verified at the end: a corrupt object exits 5). A symlink prints its
    target. With --json: {"id", "path", "content_base64", "size"}.
    """
    service = state.open()
    warn_restore_pending(service)
    record = service.get(id)
    stdout = sys.stdout.buffer  # click.get_binary_stream is deprecated (click 9)
    if not as_json:
        service.copy_file(record.id, path, stdout)
        stdout.flush()
        return
    head = dumps({"id": record.id, "path": path})[:-2]  # drop the closing "\n}"
    encoder = _Base64Writer(stdout, head.encode("utf-8") + b',\n  "content_base64": "')
    size = service.copy_file(record.id, path, encoder)  # type: ignore[arg-type]
    encoder.close()
    stdout.write(f'",\n  "size": {size}\n}}\n'.encode("ascii"))
    stdout.flush()


COMMANDS = [create, list_, latest, show, diff, cat]
