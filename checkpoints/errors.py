"""The exception hierarchy of the `checkpoints` package.

Owns `CheckpointError` (the one root) and its subclasses, `display_text`, the one way a value
is put into a one-line message (the CLI's messages use it too), and `naming`, which gives an
OSError that names no file the path it is about. Each error carries typed data
(the id, path, key...) and renders as one line naming it; `cli/errors.py` is the only place that
maps them to exit codes and words for users. Subclasses also derive from the natural builtin
(`KeyError` for "not found", `ValueError` for bad input) so generic callers can catch those.

Must not import other ckpt modules (everything imports this one), print, or decide exit codes.
objstore errors are not wrapped here: they propagate under their own root.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Protocol


@contextmanager
def naming(path: str | bytes) -> Iterator[None]:
    """A write through a file object fails with an OSError naming no file (ENOSPC, EIO):
    name `path`, the file or directory being written, so the error says where."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror, os.fsdecode(path)) from exc
        raise


def display_text(value: object) -> str:
    """Render a value for a one-line message: bytes/undecodable text escaped, no line breaks."""
    if isinstance(value, bytes):
        text = value.decode("utf-8", "backslashreplace")
    elif isinstance(value, str):
        try:
            text = os.fsencode(value).decode("utf-8", "backslashreplace")
        except UnicodeEncodeError:  # a lone surrogate that surrogateescape cannot map back
            text = value.encode("utf-8", "backslashreplace").decode("utf-8")
    else:
        text = str(value)
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii")
                   for ch in text)


class LockHolder(Protocol):
    """What `StoreBusy.holder` offers (`checkpoints.lock.LockOwner` satisfies it)."""

    @property
    def pid(self) -> object: ...
    @property
    def host(self) -> object: ...
    @property
    def started_at(self) -> object: ...


class CheckpointError(Exception):
    """Root of every error the checkpoints package raises on purpose."""


class NotInitialized(CheckpointError):
    """No store exists for the workspace root."""

    def __init__(self, root: str, store: str | None = None) -> None:
        super().__init__(root, store)
        self.root = root
        self.store = store

    def __str__(self) -> str:
        where = f" at {display_text(self.store)}" if self.store is not None else ""
        return (f"not initialized: no ckpt store{where} for root {display_text(self.root)} "
                "(run 'ckpt init')")


class UnknownCheckpoint(CheckpointError, KeyError):
    """No checkpoint has this id, id prefix or ref (`latest~9`); `detail` says why, where
    more than "none has it" can be said ("the session has 5 checkpoints on this root")."""

    def __init__(self, ref: str, detail: str | None = None) -> None:
        super().__init__(ref)
        self.ref = ref
        self.detail = detail

    def __str__(self) -> str:
        detail = f": {display_text(self.detail)}" if self.detail else ""
        return f"unknown checkpoint: {display_text(self.ref)}{detail}"


class PathNotInCheckpoint(UnknownCheckpoint):
    """The checkpoint exists but holds no file at this path."""

    def __init__(self, checkpoint: str, path: bytes) -> None:
        super().__init__(checkpoint)
        self.path = path

    def __str__(self) -> str:
        return f"no file {display_text(self.path)} in checkpoint {display_text(self.ref)}"


class AmbiguousCheckpoint(CheckpointError, KeyError):
    """An id prefix matches more than one checkpoint; `candidates` are some matches, sorted."""

    def __init__(self, ref: str, candidates: Sequence[str]) -> None:
        candidates = tuple(candidates)
        super().__init__(ref, candidates)
        self.ref = ref
        self.candidates: tuple[str, ...] = candidates

    def __str__(self) -> str:
        shown = ", ".join(display_text(c) for c in self.candidates)
        return f"ambiguous checkpoint prefix {display_text(self.ref)}: matches {shown}"


class UnsafePath(CheckpointError, ValueError):
    """A path is absolute, escapes the root, contains NUL/`..`, names the store, ..."""

    def __init__(self, path: str | bytes, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"unsafe path {display_text(self.path)}: {display_text(self.reason)}"


class StoreBusy(CheckpointError):
    """The store (or its catalog) is locked by a live process past the timeout."""

    def __init__(self, path: str, holder: LockHolder | None = None) -> None:
        super().__init__(path, holder)
        self.path = path
        self.holder = holder

    def __str__(self) -> str:
        holder = self.holder
        if holder is None:
            return f"store busy: {display_text(self.path)} is locked by another process"
        return (f"store busy: {display_text(self.path)} is locked by pid {display_text(holder.pid)} "
                f"on {display_text(holder.host)} since {display_text(holder.started_at)}")


class NothingMatched(CheckpointError):
    """A query or selection (latest, prune filters, --path) matched nothing."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what

    def __str__(self) -> str:
        return f"nothing matched: {display_text(self.what)}"


class NothingToUndo(NothingMatched):
    """`undo` found no restore of this root left to undo (every pre-restore checkpoint is
    undone already, or there never was one)."""

    def __init__(self, root: str) -> None:
        super().__init__(f"no restore of {root} is left to undo")
        self.root = root

    def __str__(self) -> str:
        return f"nothing to undo: {display_text(self.what)}"


class TargetRefused(CheckpointError, ValueError):
    """`RestoreOptions.target` names a directory a restore must not write into: not empty,
    not a directory, or inside a ckpt store."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"cannot restore into {display_text(self.path)}: {display_text(self.reason)}"


class CheckpointInUse(CheckpointError):
    """A checkpoint cannot be forgotten: the journal of a killed restore of `root` needs it
    (as its target or its pre-restore save) to complete or undo that restore."""

    def __init__(self, checkpoint: str, root: str) -> None:
        super().__init__(checkpoint, root)
        self.checkpoint = checkpoint
        self.root = root

    def __str__(self) -> str:
        return (f"checkpoint {display_text(self.checkpoint)} is needed by the interrupted "
                f"restore of {display_text(self.root)} ('ckpt recover' there completes it)")


class RestoreIncomplete(CheckpointError):
    """A restore stopped part way; its journal lets `recover` finish it."""

    def __init__(self, id: str, reason: str) -> None:  # noqa: A002 (the record's field)
        super().__init__(id, reason)
        self.id = id
        self.reason = reason

    def __str__(self) -> str:
        return f"restore of {display_text(self.id)} incomplete: {display_text(self.reason)}"


class PruneIncomplete(CheckpointError):
    """A prune removed its checkpoints (committed), then the gc that follows failed: the
    checkpoints are gone, their objects not yet freed. `report` says what was removed
    (`report.gc` is None), `error` why the gc failed; `ckpt gc` frees the objects later."""

    def __init__(self, report: object, error: BaseException) -> None:
        super().__init__(report, error)
        self.report = report  # a PruneReport (reports.py imports this module, not the reverse)
        self.error = error

    @property
    def removed(self) -> tuple[str, ...]:
        return tuple(getattr(self.report, "removed", ()))

    def __str__(self) -> str:
        return (f"pruned {len(self.removed)} checkpoint(s), but gc failed: "
                f"{display_text(self.error)}")


class ConfigError(CheckpointError, ValueError):
    """A setting is unknown or has a bad value; `key` is None when the whole file is bad."""

    def __init__(self, key: str | None, reason: str) -> None:
        super().__init__(key, reason)
        self.key = key
        self.reason = reason

    def __str__(self) -> str:
        if self.key is None:
            return f"bad config: {display_text(self.reason)}"
        return f"bad config value for {display_text(self.key)}: {display_text(self.reason)}"


class CatalogCorrupt(CheckpointError):
    """The catalog database is damaged, too new, or holds a row that does not parse."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(path, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"catalog corrupt: {display_text(self.path)}: {display_text(self.reason)}"


class UnsupportedPlatform(CheckpointError):
    """ckpt does not run on this operating system (`platform` is `sys.platform`)."""

    def __init__(self, platform: str) -> None:
        super().__init__(platform)
        self.platform = platform

    def __str__(self) -> str:
        return (f"unsupported platform {display_text(self.platform)}: ckpt runs on Linux and "
                "macOS")
