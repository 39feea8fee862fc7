"""`ckpt mcp`: checkpoints as Model Context Protocol tools, for an agent to call itself.

One long-lived stdio server per workspace (`build_server(...).run()`), on the official SDK
(`mcp` >= 2.3, `mcp.server.mcpserver.MCPServer`). Seven tools: `checkpoint_create`, `_list`,
`_diff`, `_restore`, `_undo`, `_read_file`, `_file_history`. Each returns a small TypedDict
(so the SDK publishes an output schema), with lists capped and a `truncated` flag.

- The `Checkpoints` is opened on the first call and kept open (a missing store is a tool
  error, not a failed start; the next call tries again). The SDK runs sync tools on worker
  threads at once, so every tool body runs under one lock.
- Errors: every ckpt error becomes a `ToolError` "KIND: MESSAGE (hint: HINT)" worded by the
  CLI's table, which the caller passes in (`describe`, cli/errors.py): this layer never
  imports the CLI. A partial restore is no error: its report comes back. Anything else is
  "internal error: ..." with the traceback logged to stderr; the server lives on.

Uses only the public API of `ckpt.checkpoints`. Must not write to stdout (the protocol's).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, BinaryIO, TypeVar, cast

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field
from typing_extensions import TypedDict  # pydantic needs it on Python < 3.12

from ckpt.checkpoints import RestoreIncomplete, RestoreOptions

if TYPE_CHECKING:
    from ckpt.checkpoints import CheckpointRecord, Checkpoints, RestoreReport

logger = logging.getLogger("ckpt.agents.mcp")

T = TypeVar("T")
Describe = Callable[[BaseException], tuple[int, str, str, str | None]]
Opener = Callable[[], "Checkpoints"]

MAX_LIST = 200  # checkpoints, history entries
MAX_CHANGES = 200  # diff changes, restore plan entries
MAX_SKIPPED = 20
BINARY_PROBE = 8000  # a NUL in the first bytes makes a file binary, as git decides

INSTRUCTIONS = """\
ckpt keeps checkpoints (content-addressed snapshots) of this workspace. Take one with
checkpoint_create before a risky change; see what changed with checkpoint_diff (from_ref
"latest" = the newest checkpoint of this session, "latest~1" the one before); go back with
checkpoint_restore (preview with dry_run=true first, then dry_run=false); every real restore
saves the current state first, and checkpoint_undo reverts the last restore. Refs are
checkpoint ids (any unique prefix), "latest" or "latest~N". Paths are relative to the
workspace root."""

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, open_world_hint=False)
ADDITIVE = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True,
                              idempotent_hint=False, open_world_hint=False)


# -- result types (their JSON Schemas are the tools' output schemas) ----------------------

class SkippedItem(TypedDict):
    path: str
    reason: str


class Created(TypedDict):
    id: str
    created_at: str
    files: int
    changed: int | None
    skipped: list[SkippedItem]
    skipped_total: int


class ListedCheckpoint(TypedDict):
    id: str
    created_at: str
    age: str
    session: str
    reason: str | None
    turn_id: str | None
    tool_call_id: str | None
    label: str | None
    files: int
    changed: int | None


class Listed(TypedDict):
    checkpoints: list[ListedCheckpoint]
    total: int
    truncated: bool


class ChangeItem(TypedDict):
    path: str
    change: str
    reason: str | None


class DiffStat(TypedDict):
    files: int
    insertions: int
    deletions: int


# "from" is a keyword: the functional form.
Diffed = TypedDict("Diffed", {
    "from": str, "to": str | None, "changes": list[ChangeItem], "changes_total": int,
    "stat": DiffStat, "patch": str | None, "truncated": bool, "note": str | None})


class PlannedChange(TypedDict):
    path: str
    change: str


class Conflict(TypedDict):
    path: str
    reason: str


class Restored(TypedDict):
    id: str
    dry_run: bool
    complete: bool
    written: int
    deleted: int
    dirs_created: int
    dirs_removed: int
    unchanged: int
    bytes_written: int
    pre_restore: str | None
    discarded: list[str]
    conflicts: list[Conflict]
    not_captured: list[SkippedItem]
    changes: list[PlannedChange]
    changes_total: int


class Undone(Restored):
    undid: str | None


class FileRead(TypedDict):
    id: str
    path: str
    kind: str
    size: int
    text: str | None
    binary: bool
    truncated: bool
    target: str | None


class HistoryEntry(TypedDict):
    id: str
    created_at: str
    change: str
    kind: str | None
    size: int | None
    reason: str | None
    turn_id: str | None
    tool_call_id: str | None


class FileHistory(TypedDict):
    path: str
    entries: list[HistoryEntry]
    total: int
    truncated: bool


# -- the service, opened once, one call at a time -----------------------------------------

class Backend:
    """The `Checkpoints` of this server: opened by `opener` on first use, kept open, used by
    one tool call at a time; ckpt errors turned into tool errors with `describe`."""

    def __init__(self, opener: Opener, describe: Describe) -> None:
        self._opener = opener
        self._describe = describe
        self._lock = threading.Lock()
        self._service: Checkpoints | None = None

    def call(self, name: str, body: Callable[[Checkpoints], T]) -> T:
        with self._lock:
            try:
                if self._service is None:
                    self._service = self._opener()
                return body(self._service)
            except ToolError:
                raise
            except Exception as exc:  # every failure is the caller's tool error
                raise self.tool_error(name, exc) from exc

    def tool_error(self, name: str, exc: BaseException) -> ToolError:
        _, kind, message, hint = self._describe(exc)
        if kind == "internal":
            logger.error("tool %s failed", name, exc_info=exc)
            return ToolError(f"internal error: {type(exc).__name__}: {exc}")
        return ToolError(f"{kind}: {message}" + (f" (hint: {hint})" if hint else ""))

    def close(self) -> None:
        with self._lock:
            service, self._service = self._service, None
        if service is not None:
            service.close()


# -- helpers ------------------------------------------------------------------------------

def _text(path: bytes | str) -> str:
    """A path for JSON: UTF-8, undecodable bytes as backslash escapes (never a surrogate)."""
    if isinstance(path, str):
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return path.decode("utf-8", "backslashreplace")


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def age(at: datetime, now: datetime) -> str:
    """How long ago, for a model: "just now", "3 min ago", "2 h ago", "5 days ago"."""
    seconds = int((now - at).total_seconds())
    if seconds < 0:
        return "in the future"
    if seconds < 10:
        return "just now"
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def _under(path: bytes, prefixes: Sequence[bytes]) -> bool:
    return any(path == p or path.startswith(p.rstrip(b"/") + b"/") for p in prefixes)


def _skipped(record: CheckpointRecord) -> list[SkippedItem]:
    return [{"path": _text(s.path), "reason": s.reason} for s in record.skipped[:MAX_SKIPPED]]


def _plan_changes(report: RestoreReport) -> list[PlannedChange]:
    """The restore plan as path changes: A written new, M rewritten or re-moded, T replaced
    by another type, D deleted (directories are not listed)."""
    plan = report.plan
    out: dict[bytes, str] = {}
    for removal in plan.pre_removals:
        if removal.kind.name != "TREE":
            out[removal.path] = "D"
    for write in plan.writes:
        if write.replaces is None:
            out[write.path] = "T" if write.path in out else "A"
        elif write.replaces.name == "TREE" or (
                (write.replaces.name == "SYMLINK") != (write.entry.kind.name == "SYMLINK")):
            out[write.path] = "T"
        else:
            out[write.path] = "M"
    for chmod in plan.chmods:
        out.setdefault(chmod.path, "M")
    for removal in plan.removals:
        if removal.kind.name != "TREE":
            out[removal.path] = "D"
    return [{"path": _text(p), "change": c} for p, c in sorted(out.items())]


def restored(report: RestoreReport, *, complete: bool = True) -> Restored:
    changes = _plan_changes(report)
    return {
        "id": report.id, "dry_run": report.dry_run, "complete": complete and not report.conflicts,
        "written": report.written, "deleted": report.deleted,
        "dirs_created": report.dirs_created, "dirs_removed": report.dirs_removed,
        "unchanged": report.unchanged, "bytes_written": report.bytes_written,
        "pre_restore": report.pre_restore, "discarded": list(report.discarded),
        "conflicts": [{"path": _text(c.path), "reason": c.reason} for c in report.conflicts],
        "not_captured": [{"path": _text(s.path), "reason": s.reason}
                         for s in report.not_captured[:MAX_SKIPPED]],
        "changes": changes[:MAX_CHANGES], "changes_total": len(changes),
    }


def _restore(service: Checkpoints, ref: str, options: Any) -> Restored:
    try:
        return restored(service.restore(ref, options))
    except RestoreIncomplete as exc:
        partial: RestoreReport | None = getattr(exc, "report", None)
        if partial is None:
            raise
        return restored(partial, complete=False)


def cut_patch(parts: Sequence[bytes], max_bytes: int) -> tuple[str, int, bool]:
    """The patch text of `parts` (one per file) within `max_bytes`, cut at a file boundary
    (or a hunk boundary inside the first file): (text, files shown, truncated)."""
    total = sum(len(p) for p in parts)
    if total <= max_bytes:
        return b"".join(parts).decode("utf-8", "replace"), len(parts), False
    kept: list[bytes] = []
    used = 0
    for part in parts:
        if used + len(part) > max_bytes:
            break
        kept.append(part)
        used += len(part)
    if not kept and parts:  # the first file alone is too big: its hunks that fit
        first = parts[0]
        cut = first.rfind(b"\n@@ ", 0, max_bytes)
        if cut > 0:
            return first[:cut + 1].decode("utf-8", "replace"), 1, True
        return "", 0, True
    return b"".join(kept).decode("utf-8", "replace"), len(kept), True


# -- the tools ----------------------------------------------------------------------------

RefArg = Annotated[str, Field(description='A checkpoint id (or unique prefix), "latest", or '
                                          '"latest~N" (N checkpoints before the latest).')]
PathsArg = Annotated[list[str] | None, Field(
    description="Only these paths (files or directories, relative to the workspace root).")]


def create(service: Checkpoints, *, label: str | None, reason: str | None, turn_id: str | None,
           tool_call_id: str | None, summary: str | None, paths: list[str] | None) -> Created:
    record = service.create(label=label, reason=reason, turn_id=turn_id,
                            tool_call_id=tool_call_id, summary=summary, paths=paths or None)
    return {"id": record.id, "created_at": _when(record.created_at), "files": record.stats.files,
            "changed": service.changed(record), "skipped": _skipped(record),
            "skipped_total": len(record.skipped)}


def list_checkpoints(service: Checkpoints, *, limit: int, reason: str | None,
                     turn_id: str | None, tool_call_id: str | None, all_sessions: bool,
                     now: datetime) -> Listed:
    records = service.history(turn_id=turn_id, reason=reason, tool_call_id=tool_call_id,
                              all_sessions=all_sessions)
    newest = records[::-1][:max(1, min(limit, MAX_LIST))]
    return {"checkpoints": [{
        "id": r.id, "created_at": _when(r.created_at), "age": age(r.created_at, now),
        "session": r.session, "reason": r.reason, "turn_id": r.turn_id,
        "tool_call_id": r.tool_call_id, "label": r.label, "files": r.stats.files,
        "changed": service.changed(r)} for r in newest],
        "total": len(records), "truncated": len(records) > len(newest)}


def diff(service: Checkpoints, *, from_ref: str, to_ref: str | None, paths: list[str] | None,
         patch: bool, max_bytes: int) -> Diffed:
    start = service.resolve(from_ref)
    end_id = service.resolve(to_ref).id if to_ref is not None else None
    insertions = deletions = 0
    text: str | None = None
    truncated = False
    note: str | None = None
    if patch:  # one diff (one scan of the workspace) gives the changes and their patches
        patches = service.patch(start.id, end_id, paths=paths or None)
        changes = [(p.path, p.change, p.reason) for p in patches]
        insertions = sum(p.insertions for p in patches)
        deletions = sum(p.deletions for p in patches)
        parts = [p.text for p in patches if p.text]
        text, shown, truncated = cut_patch(parts, max(0, max_bytes))
        if truncated:
            note = (f"patch cut at {len(text.encode())} of {sum(map(len, parts))} bytes; "
                    f"{shown} of {len(parts)} files shown; pass paths=[...] for the rest")
    else:
        wanted = [p.encode("utf-8", "surrogateescape") for p in paths or ()]
        changes = [(c.path, c.change, c.reason) for c in service.diff(start.id, end_id)
                   if not wanted or _under(c.path, wanted)]
    listed = changes[:MAX_CHANGES]
    if len(changes) > len(listed):
        truncated = True
        note = (note + "; " if note else "") + (
            f"{len(listed)} of {len(changes)} changes listed; pass paths=[...] to narrow")
    return {"from": start.id, "to": end_id,
            "changes": [{"path": _text(path), "change": change, "reason": reason}
                        for path, change, reason in listed],
            "changes_total": len(changes),
            "stat": {"files": sum(1 for _, change, _ in changes if change != "S"),
                     "insertions": insertions, "deletions": deletions},
            "patch": text, "truncated": truncated, "note": note}


def restore(service: Checkpoints, *, ref: str, dry_run: bool, paths: list[str] | None) -> Restored:
    return _restore(service, ref, RestoreOptions(dry_run=dry_run, paths=tuple(paths or ())))


def undo(service: Checkpoints, *, dry_run: bool) -> Undone:
    try:
        report = service.undo(dry_run=dry_run)
        result = restored(report)
    except RestoreIncomplete as exc:
        partial = getattr(exc, "report", None)
        if partial is None:
            raise
        report, result = partial, restored(partial, complete=False)
    return {**result, "undid": report.undid}


class _Capped:
    """A binary sink that keeps the first `limit` bytes and counts the rest."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.kept = bytearray()
        self.size = 0

    def write(self, data: bytes) -> int:
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += data[:room]
        self.size += len(data)
        return len(data)


def read_file(service: Checkpoints, *, ref: str, path: str, max_bytes: int) -> FileRead:
    record = service.resolve(ref)
    sink = _Capped(max(0, max_bytes))
    # The library finds the entry and refuses what is no file (missing, a directory, unsafe).
    service.copy_file(record.id, path, cast("BinaryIO", sink))
    rel = os.path.relpath(os.path.normpath(os.path.join(service.root, path)),
                          service.root).encode("utf-8", "surrogateescape")
    entry = next((f for f in service.files(record.id) if f.path == rel), None)
    kind = entry.kind.name.lower() if entry is not None else "file"
    shown = _text(entry.path if entry is not None else rel)
    data = bytes(sink.kept)
    if entry is not None and entry.target is not None:
        return {"id": record.id, "path": shown, "kind": kind, "size": sink.size, "text": None,
                "binary": False, "truncated": False, "target": _text(entry.target)}
    binary = b"\0" in data[:BINARY_PROBE]
    return {"id": record.id, "path": shown, "kind": kind, "size": sink.size,
            "text": None if binary else data.decode("utf-8", "replace"), "binary": binary,
            "truncated": sink.size > len(data), "target": None}


def file_history(service: Checkpoints, *, path: str, limit: int, all_sessions: bool) -> FileHistory:
    changes = service.path_log(path, all_sessions=all_sessions)
    newest = changes[::-1][:max(1, min(limit, MAX_LIST))]
    entries: list[HistoryEntry] = []
    for item in newest:
        record = item.record
        entries.append({
            "id": record.id, "created_at": _when(record.created_at), "change": item.change,
            "kind": item.kind, "size": item.size, "reason": record.reason, "turn_id": record.turn_id,
            "tool_call_id": record.tool_call_id})
    return {"path": path, "entries": entries, "total": len(changes),
            "truncated": len(changes) > len(newest)}


def build_server(opener: Opener, describe: Describe, *,
                 clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 ) -> tuple[MCPServer[Any], Backend]:
    """The `ckpt` MCP server and its backend (close it when the server returns)."""
    backend = Backend(opener, describe)
    server: MCPServer[Any] = MCPServer("ckpt", instructions=INSTRUCTIONS)

    @server.tool(annotations=ADDITIVE)
    def checkpoint_create(
        label: Annotated[str | None, Field(description="A short label for people, e.g. "
                                                       "'before refactoring parser'.")] = None,
        reason: Annotated[str | None, Field(description="Why it is taken; list filters on "
                                                        "it.")] = "agent",
        turn_id: Annotated[str | None, Field(description="Your turn or prompt id.")] = None,
        tool_call_id: Annotated[str | None, Field(description="The tool call id it goes "
                                                              "with.")] = None,
        summary: Annotated[str | None, Field(description="A longer description.")] = None,
        paths: PathsArg = None,
    ) -> Created:
        """Save a checkpoint of the workspace now (every file but ignored ones), so that it
        can be compared with or restored later. Cheap: unchanged files are not copied again.
        Take one before a risky or large change. Returns its id; `changed` counts files
        changed since the previous checkpoint; `skipped` lists files it could not capture."""
        return backend.call("checkpoint_create", lambda cp: create(
            cp, label=label, reason=reason, turn_id=turn_id, tool_call_id=tool_call_id,
            summary=summary, paths=paths))

    @server.tool(annotations=READ_ONLY)
    def checkpoint_list(
        limit: Annotated[int, Field(ge=1, le=MAX_LIST, description="At most this many, "
                                                                    "newest first.")] = 20,
        reason: Annotated[str | None, Field(description="Only this reason (e.g. pre-tool, "
                                                        "post-tool, agent).")] = None,
        turn_id: Annotated[str | None, Field(description="Only this turn.")] = None,
        tool_call_id: Annotated[str | None, Field(description="Only this tool call.")] = None,
        all_sessions: Annotated[bool, Field(description="Every session's checkpoints of this "
                                                        "workspace, not only this one's.")] = True,
    ) -> Listed:
        """List the workspace's checkpoints, newest first, with their age, reason, turn,
        tool call and label. `total` is how many matched; `truncated` says more exist."""
        return backend.call("checkpoint_list", lambda cp: list_checkpoints(
            cp, limit=limit, reason=reason, turn_id=turn_id, tool_call_id=tool_call_id,
            all_sessions=all_sessions, now=clock()))

    @server.tool(annotations=READ_ONLY)
    def checkpoint_diff(
        from_ref: RefArg = "latest",
        to_ref: Annotated[str | None, Field(description="The newer side: a ref, or null for "
                                                        "the workspace as it is now.")] = None,
        paths: PathsArg = None,
        patch: Annotated[bool, Field(description="Include the unified diff text.")] = True,
        max_bytes: Annotated[int, Field(ge=0, description="Cap on the patch text; it is cut at "
                                                          "a file boundary, with a note.")] = 20000,
    ) -> Diffed:
        """Show what changed from checkpoint `from_ref` to the workspace now (or to checkpoint
        `to_ref`): each changed path (A added, D deleted, M modified, T type changed, S not
        captured with its reason), line counts, and a unified diff like `git diff`. A long
        patch is cut (`truncated`, `note`); ask again with `paths` for the rest."""
        return backend.call("checkpoint_diff", lambda cp: diff(
            cp, from_ref=from_ref, to_ref=to_ref, paths=paths, patch=patch,
            max_bytes=max_bytes))

    @server.tool(annotations=DESTRUCTIVE)
    def checkpoint_restore(
        ref: RefArg,
        dry_run: Annotated[bool, Field(description="true: only say what would change. "
                                                   "false: change the files.")] = True,
        paths: PathsArg = None,
    ) -> Restored:
        """Put the workspace's files back as they were at checkpoint `ref` (or only `paths`).
        Call first with dry_run=true and show the user `changes`, then with dry_run=false.
        A real restore saves the current state first (`pre_restore`), so checkpoint_undo
        reverts it. Ignored files are never touched. `complete` is false when some paths
        could not be restored (`conflicts` says which and why)."""
        return backend.call("checkpoint_restore", lambda cp: restore(
            cp, ref=ref, dry_run=dry_run, paths=paths))

    @server.tool(annotations=DESTRUCTIVE)
    def checkpoint_undo(
        dry_run: Annotated[bool, Field(description="true: only say what would change.")] = False,
    ) -> Undone:
        """Undo the last restore of this workspace: put back the state it saved before
        restoring (`undid` is that checkpoint). The undo saves first too, so calling it again
        redoes the restore. A tool error `nothing_matched` means there is nothing to undo."""
        return backend.call("checkpoint_undo", lambda cp: undo(cp, dry_run=dry_run))

    @server.tool(annotations=READ_ONLY)
    def checkpoint_read_file(
        ref: RefArg,
        path: Annotated[str, Field(description="The file, relative to the workspace root.")],
        max_bytes: Annotated[int, Field(ge=0, description="Cap on the text returned.")] = 50000,
    ) -> FileRead:
        """Read one file as it was at checkpoint `ref`, without touching the workspace.
        Text comes back as UTF-8 (`truncated` past max_bytes); a binary file has `binary`
        true and no text; a symlink gives its `target`."""
        return backend.call("checkpoint_read_file", lambda cp: read_file(
            cp, ref=ref, path=path, max_bytes=max_bytes))

    @server.tool(annotations=READ_ONLY)
    def checkpoint_file_history(
        path: Annotated[str, Field(description="A file or directory, relative to the "
                                               "workspace root.")],
        limit: Annotated[int, Field(ge=1, le=MAX_LIST, description="At most this many, "
                                                                    "newest first.")] = 20,
        all_sessions: Annotated[bool, Field(description="Every session's checkpoints, not "
                                                        "only this one's.")] = True,
    ) -> FileHistory:
        """The checkpoints in which `path` changed, newest first: change A added, M modified,
        D deleted, T type changed, with the checkpoint's reason, turn and tool call. Use it
        to find the checkpoint to read or restore a file from."""
        return backend.call("checkpoint_file_history", lambda cp: file_history(
            cp, path=path, limit=limit, all_sessions=all_sessions))

    return server, backend
