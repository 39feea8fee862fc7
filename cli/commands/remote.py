"""Sharing checkpoints between machines: `remote add|list|remove`, `push`, `pull`, and what the
`--remote` option of `list`, `fsck`, `gc` and `prune` prints.

A remote is S3-compatible object storage (`s3://bucket/prefix`, `--endpoint` for a service
other than AWS). Credentials never pass through ckpt's files: the S3 client reads the standard
AWS environment variables and files. The remote code (and the S3 client) is imported by the
library only when one of these runs. Errors: unreachable or refused (credentials) exit 1 in one
line, damaged remote data exit 5 naming it, a remote locked by another machine's gc exit 4
(cli/errors.py).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ckpt.cli.context import State, json_option, pass_state
from ckpt.cli.errors import CORRUPTION, CliError
from ckpt.cli.render import (
    Template,
    display_path,
    fill_template,
    format_age,
    format_size,
    format_when,
    one_line,
    table,
    write_json,
    write_lines,
)

if TYPE_CHECKING:
    from ckpt.checkpoints import CheckpointRecord, RemoteGc

F = TypeVar("F", bound=Callable[..., Any])


@click.group(epilog="""\b
Examples:
  ckpt remote add origin s3://ckpt-bucket/team --endpoint http://127.0.0.1:8333
  ckpt remote list
  ckpt remote remove origin
""")
def remote() -> None:
    """Configure the remotes of the store (S3-compatible object storage)."""


@remote.command("add")
@click.argument("name")
@click.argument("url")
@click.option("--endpoint", metavar="URL",
              help="The S3 endpoint of a service other than AWS (http://host:port).")
@click.option("--region", metavar="R", help="The bucket's region (AWS), if not the default.")
@pass_state
def remote_add(state: State, name: str, url: str, endpoint: str | None,
               region: str | None) -> None:
    """Add remote NAME at URL (s3://BUCKET[/PREFIX]). Nothing is sent until 'ckpt push'.

    Credentials are not stored: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or
    AWS_PROFILE and ~/.aws/credentials) in the environment of every ckpt command that uses
    the remote."""
    info = state.open().remote_add(name, url, endpoint=endpoint, region=region)
    write_lines([f"added remote {info.name}: {info.url}"
                 + (f" (endpoint {info.endpoint})" if info.endpoint else "")])


@remote.command("list")
@json_option
@pass_state
def remote_list(state: State, as_json: bool) -> None:
    """List the configured remotes: name, URL, endpoint, region."""
    found = state.open().remote_list()
    if as_json:
        write_json([info.to_json() for info in found])
        return
    if found:
        write_lines(table(["name", "url", "endpoint", "region"],
                          [[i.name, i.url, i.endpoint or "-", i.region or "-"] for i in found]))


@remote.command("remove")
@click.argument("name")
@pass_state
def remote_remove(state: State, name: str) -> None:
    """Forget remote NAME and its local cache; the remote's data is left as it is."""
    state.open().remote_remove(name)
    write_lines([f"removed remote {name}"])


@click.command(epilog="""\b
Examples:
  ckpt push                      # every session's checkpoints of this root
  ckpt push origin --session agent-1
  ckpt push origin ckpt-1733412345678-k3x9d2ab
\b
Objects go up as packs (only those the remote lacks), then each record. Idempotent: a push
killed or cut off is completed by the next one.
""")
@click.argument("args", nargs=-1, metavar="[REMOTE] [ID...]")
@click.option("--session", "push_session", metavar="S",
              help="Only session S's checkpoints (of this root).")
@json_option
@pass_state
def push(state: State, args: tuple[str, ...], push_session: str | None, as_json: bool) -> None:
    """Send checkpoints the remote lacks, with the objects they need.

    The first argument is the remote when it names one (default: the only remote); the
    others are checkpoint ids (default: every checkpoint of this root, or of --session)."""
    from ckpt.checkpoints import UnknownCheckpoint

    service = state.open()
    names = {info.name for info in service.remote_list()}
    name: str | None = None
    if args and args[0] in names:
        name = args[0]
    elif args:
        try:
            service.resolve(args[0])
        except UnknownCheckpoint:  # neither a remote nor a checkpoint: an unknown remote
            name = args[0]
    ids = args[1:] if name is not None else args
    if ids and push_session is not None:
        raise click.UsageError("give either --session or checkpoint ids, not both")
    with state.progress() as progress:
        report = service.push(name, session=push_session, ids=ids, progress=progress)
    if as_json:
        write_json(report.to_json())
        return
    lines = [f"pushed {len(report.pushed)} checkpoint(s) to {report.remote}: "
             f"{report.objects} object(s) in {report.packs} pack(s), "
             f"{format_size(report.bytes_uploaded)}; {len(report.present)} already there"]
    if report.skipped_hollow:
        lines.append(f"skipped {len(report.skipped_hollow)} checkpoint(s) pulled from a remote "
                     "whose objects are not here")
    write_lines(lines)


@click.command(epilog="""\b
Examples:
  ckpt pull                      # the records of every checkpoint the remote has
  ckpt pull origin --session agent-1
  ckpt restore ckpt-1733412345678-k3x9d2ab   # fetches what that restore needs
""")
@click.argument("name", required=False, metavar="[REMOTE]")
@click.option("--session", "pull_session", metavar="S", help="Only session S's checkpoints.")
@json_option
@pass_state
def pull(state: State, name: str | None, pull_session: str | None, as_json: bool) -> None:
    """Adopt the remote's checkpoints this store lacks (records only: their objects are
    fetched when a restore, diff or show needs them). They keep the root they were taken
    at: 'ckpt list --all-roots' shows them."""
    report = state.open().pull(name, session=pull_session)
    if as_json:
        write_json(report.to_json())
        return
    write_lines([f"pulled {len(report.pulled)} checkpoint(s) from {report.remote}; "
                 f"{report.present} already here"])


COMMANDS = (remote, push, pull)


# -- the --remote forms of list, fsck, gc and prune ------------------------------------------

def remote_option(help_text: str) -> Callable[[F], F]:
    """`--remote [NAME]`: the value is optional (`--remote` alone: the only remote)."""
    return click.option("--remote", "remote_name", is_flag=False, flag_value="",
                         default=None, metavar="[NAME]", help=help_text)


def list_remote(state: State, name: str, *, all_sessions: bool, as_json: bool,
                template: Template | None) -> None:
    """`list --remote`: the list shape (`changed` null: no parent is read from the remote)."""
    from ckpt.cli.commands.snapshot import record_json

    service = state.open()
    records = service.remote_history(name or None,
                                     session=None if all_sessions else state.session)
    docs = [{**record_json(r), "changed": None} for r in records]
    if as_json:
        write_json(docs)
        return
    now = datetime.now(UTC)
    if template is not None:
        write_lines(fill_template(template, {**doc, "age": format_age(r.created_at, now)})
                    for doc, r in zip(docs, records))
        return
    if records:
        write_lines(table(["id", "created (UTC)", "age", "session", "root", "label", "files"],
                          [_row(r, now) for r in records], right=frozenset({6})))


def _row(r: CheckpointRecord, now: datetime) -> list[str]:
    return [r.id, format_when(r.created_at), format_age(r.created_at, now),
            one_line(r.session, 24), display_path(r.root), one_line(r.label, 40),
            str(r.stats.files)]


def fsck_remote(state: State, name: str, *, full: bool, as_json: bool) -> None:
    check = state.open().fsck_remote(name or None, full=full)
    if as_json:
        write_json(check.to_json())
    else:
        lines = [f"damaged: {p}" for p in check.problems]
        if check.ok:
            lines.append(f"ok: remote {check.remote}: {check.packs} pack(s), "
                         f"{check.objects} object(s), {check.records} record(s)")
        write_lines(lines)
    if not check.ok:
        raise CliError(f"remote {check.remote} damaged: {len(check.problems)} problem(s), "
                       f"first: {check.problems[0]}",
                       hint="'ckpt push' from a machine with the checkpoints uploads what is "
                            "missing again", code=CORRUPTION)


def print_remote_gc(report: RemoteGc, as_json: bool) -> None:
    if as_json:
        write_json(report.to_json())
        return
    lines: list[str] = []
    if report.dry_run:
        lines.extend(f"would remove {i} from {report.remote}" for i in report.removed)
        lines.append(f"would remove {len(report.removed)} checkpoint(s) from {report.remote}")
    else:
        if report.removed:
            lines.append(f"removed {len(report.removed)} checkpoint(s) from {report.remote}")
        lines.append(f"remote {report.remote}: {report.packs_deleted} pack(s) deleted, "
                     f"{report.packs_rewritten} rewritten, {format_size(report.bytes_freed)} "
                     f"freed; {report.held_back} held back by the grace period")
    write_lines(lines)
