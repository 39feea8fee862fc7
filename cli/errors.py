"""The one table that turns exceptions into an exit code and a one-line message with a hint.

Owns the exit codes of the CLI contract (docs/CLI.md) and the words users see for every error:

    0 ok · 1 user error (also: unsupported platform; a remote unreachable or refusing the
    credentials) · 2 usage · 3 nothing matched / partial restore · 4 store busy (also: a
    remote locked by another machine) · 5 corruption (also: damaged remote data) · 6 server
    lost · 130 interrupted

`SERVER_LOST` is given only by the thin client (cli/client.py, which hard-codes it): the server
accepted the command and died before it ended.

`describe(exc)` gives the same as `(exit_code, kind, message, hint)`, with a stable kind word
(`KINDS`: `unknown_checkpoint`, `store_busy`, ...) for callers that report errors to a program
rather than as a `ckpt: error:` line: the MCP server's tool errors and the hook's log.

Unexpected exceptions (a bug in ckpt) exit 1 with "internal error: ..." and a hint to rerun
with `--debug`, which adds the traceback. A broken stdout pipe (`ckpt list | head -1`) exits
141 without a message, as a process killed by SIGPIPE would.

The table names exception classes by their dotted path and matches along the exception's MRO,
most specific class first. That keeps this module free of heavy imports: `objstore` (which
loads zstandard and blake3) is never imported just to be able to recognise its errors; if it
was never imported, none of its exceptions can be in flight. Must not import click, or more
of the library than `ckpt.checkpoints.display_text` (the one way a value goes into a message).
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TextIO

# Text for a message: bytes and undecodable names escaped, never a line break. The library's
# own messages use the same function, so a name reads the same in both.
from ckpt.checkpoints import display_text as show

OK = 0
USER_ERROR = 1
DIFFERENCES = 1  # `diff --exit-code` found changes: no error line, unlike USER_ERROR
USAGE = 2
NOTHING_MATCHED = 3
STORE_BUSY = 4
CORRUPTION = 5
SERVER_LOST = 6  # the resident server died while running the command (cli/client.py)
BROKEN_PIPE = 141
INTERRUPTED = 130


class CliError(Exception):
    """An error found by the CLI itself (bad input the library never sees)."""

    def __init__(self, message: str, *, hint: str | None = None, code: int = USER_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code


class DamageFound(Exception):
    """`fsck` found damage; the report was already printed."""

    def __init__(self, objects: int, checkpoints: int, files: int = 0) -> None:
        super().__init__(objects, checkpoints, files)
        self.objects = objects
        self.checkpoints = checkpoints
        self.files = files  # damaged per-root files (restore journals, stat caches)


@dataclass(frozen=True, slots=True)
class Failure:
    """What the user is told: exit code, message, optional hint."""

    code: int
    message: str
    hint: str | None = None

    def line(self) -> str:
        hint = f" (hint: {self.hint})" if self.hint else ""
        return f"ckpt: error: {self.message}{hint}"


# -- the table ----------------------------------------------------------------------------

Rule = Callable[[Any], Failure]
_INIT_HINT = "run 'ckpt init', or pass --root/--store"
_FSCK_HINT = "run 'ckpt fsck --full' to list the damage"
_PLATFORM_HINT = "on Windows, run ckpt inside WSL"


def _not_initialized(exc: Any) -> Failure:
    store = getattr(exc, "store", None) or getattr(exc, "path", None)
    root = getattr(exc, "root", None)
    where = f" for root {show(root)}" if root else ""
    return Failure(USER_ERROR, f"not initialized: no ckpt store at {show(store)}{where}",
                   _INIT_HINT)


def _unknown_checkpoint(exc: Any) -> Failure:
    ref = str(exc.ref)
    path = getattr(exc, "path", None)  # PathNotInCheckpoint: the checkpoint exists
    if path is not None:
        return Failure(USER_ERROR, f"no file {show(path)} in checkpoint {show(ref)}",
                       f"'ckpt show {show(ref)}' lists its files")
    detail = getattr(exc, "detail", None)  # a ref out of range says how far it can go
    return Failure(USER_ERROR, f"unknown checkpoint {show(ref)}"
                   + (f": {show(detail)}" if detail else ""),
                   "'ckpt list --all-sessions' shows the ids")


def _ambiguous(exc: Any) -> Failure:
    shown = ", ".join(show(c) for c in exc.candidates)
    return Failure(USER_ERROR, f"checkpoint prefix {show(exc.ref)} is ambiguous: matches {shown}",
                   "give more characters of the id")


def _store_busy(exc: Any) -> Failure:
    holder = exc.holder
    if holder is None:
        who = "another process"
    else:
        purpose = getattr(holder, "purpose", "")
        doing = f" ({show(purpose)})" if purpose else ""
        who = (f"pid {show(holder.pid)} on {show(holder.host)}{doing} "
               f"since {show(holder.started_at)}")
    return Failure(STORE_BUSY, f"store busy: {show(exc.path)} is locked by {who}",
                   "wait for it to finish, or raise the wait with "
                   "'ckpt config set lock_timeout SECONDS'")


def _restore_incomplete(exc: Any) -> Failure:
    return Failure(NOTHING_MATCHED, f"restore of {show(exc.id)} incomplete: {show(exc.reason)}",
                   "the paths named were left as they are; fix them and restore again")


def _unsafe_path(exc: Any) -> Failure:
    # `cat`/`read_file` of a directory: the path is fine, it is just not a file.
    if exc.reason == "is a directory":
        return Failure(USER_ERROR, f"{show(exc.path)} is a directory, not a file",
                       "'ckpt show ID' lists the files")
    return Failure(USER_ERROR, show(exc))


def _message(code: int, hint: str | None = None) -> Rule:
    return lambda exc: Failure(code, show(exc), hint)


def _catalog_corrupt(exc: Any) -> Failure:
    # A catalog that names its repair needs no second hint ('fsck --full' would fail too).
    repair = "fsck --repair" in str(getattr(exc, "reason", ""))
    return Failure(CORRUPTION, show(exc), None if repair else _FSCK_HINT)


def _config_error(exc: Any) -> Failure:
    # A problem in the file itself (read_config appends "(in <path>)", or names no key) is
    # fixed by editing the file: 'ckpt config set' reads (and so refuses) it too.
    from_file = exc.key is None or str(exc.reason).endswith(".toml)")
    hint = ("fix or delete that file (every setting has a default)" if from_file
            else "'ckpt config list' shows the settings")
    return Failure(USER_ERROR, show(exc), hint)


_REMOTE_HINT = "check the remote's URL and --endpoint ('ckpt remote list') and that it is up"
_AUTH_HINT = ("set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) for this "
              "remote; ckpt stores no credentials")


def _remote_locked(exc: Any) -> Failure:
    holder = getattr(exc, "holder", None)
    who = f": {show(holder)}" if holder else ""
    return Failure(STORE_BUSY, f"remote locked{who}",
                   "another machine's gc or prune holds it; wait and run again (a lock not "
                   "refreshed for 30 min is stale and ignored)")


def _remote_damaged(exc: Any) -> Failure:
    return Failure(CORRUPTION, show(exc), "'ckpt fsck --remote' lists the damage; a push "
                   "from a machine that has the checkpoints uploads missing objects again")


def _unknown_remote(exc: Any) -> Failure:
    return Failure(USER_ERROR, show(exc),
                   "'ckpt remote list' shows the remotes; 'ckpt remote add NAME URL' adds one")


def _cli_error(exc: Any) -> Failure:
    return Failure(exc.code, exc.message, exc.hint)


def _damage(exc: Any) -> Failure:
    files = f", {exc.files} damaged file(s)" if getattr(exc, "files", 0) else ""
    return Failure(CORRUPTION, f"store damaged: {exc.objects} object problem(s), "
                   f"{exc.checkpoints} damaged checkpoint(s){files}",
                   "restore what you can from undamaged checkpoints; 'ckpt prune' can drop "
                   "the damaged ones")


def _os_error(exc: Any) -> Failure:
    what = exc.strerror or str(exc)
    names = [show(n) for n in (exc.filename, exc.filename2) if n is not None]
    where = f": {' -> '.join(names)}" if names else ""
    hint = None
    if exc.errno == errno.ENOSPC:
        hint = "free disk space, e.g. 'ckpt prune ...' then 'ckpt gc'"
    elif exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = "check the permissions of that path"
    return Failure(USER_ERROR, f"{what}{where}", hint)


def _store_write(exc: Any) -> Failure:
    """A write into the store failed: told as the OSError it carries (ENOSPC, EIO, ...)."""
    return _os_error(exc.error)


def _interrupted(exc: Any) -> Failure:
    return Failure(INTERRUPTED, "interrupted")


def _internal(exc: Any) -> Failure:
    return Failure(USER_ERROR, f"internal error: {type(exc).__name__}: {show(exc)}",
                   "rerun with --debug for a traceback, and please report it")


# Exact classes by dotted path. Lookup walks the exception's MRO, so a subclass not listed
# here (InvalidTree under CorruptObject) takes its parent's rule; the package roots and the
# builtins at the end catch everything else.
RULES: dict[str, Rule] = {
    "ckpt.cli.errors.CliError": _cli_error,
    "ckpt.cli.errors.DamageFound": _damage,
    # checkpoints: user errors
    "ckpt.checkpoints.errors.NotInitialized": _not_initialized,
    "ckpt.checkpoints.errors.UnknownCheckpoint": _unknown_checkpoint,
    "ckpt.checkpoints.errors.AmbiguousCheckpoint": _ambiguous,
    "ckpt.checkpoints.errors.UnsafePath": _unsafe_path,
    "ckpt.checkpoints.errors.ConfigError": _config_error,
    "ckpt.checkpoints.errors.UnsupportedPlatform": _message(USER_ERROR, _PLATFORM_HINT),
    # nothing matched / partial restore
    "ckpt.checkpoints.errors.NothingMatched": _message(NOTHING_MATCHED),
    "ckpt.checkpoints.errors.RestoreIncomplete": _restore_incomplete,
    # busy
    "ckpt.checkpoints.errors.StoreBusy": _store_busy,
    # corruption
    "ckpt.checkpoints.errors.CatalogCorrupt": _catalog_corrupt,
    "ckpt.objstore.errors.CorruptObject": _message(CORRUPTION, _FSCK_HINT),
    "ckpt.objstore.errors.ObjectNotFound": _message(CORRUPTION, _FSCK_HINT),
    "ckpt.objstore.errors.UnsupportedFormat": _message(CORRUPTION, "upgrade ckpt to open this store"),
    # objstore errors that are the user's to fix
    "ckpt.objstore.errors.StoreNotFound": _not_initialized,
    "ckpt.objstore.errors.ContentChanged": _message(USER_ERROR, "a file changed while it was read; "
                                                           "run the command again"),
    "ckpt.objstore.errors.StoreWriteError": _store_write,
    # remotes (the object layer's errors, named by path: never imported to be recognised)
    "ckpt.checkpoints.remote.config.UnknownRemote": _unknown_remote,
    "ckpt.checkpoints.remote.config.RemoteDataDamaged": _remote_damaged,
    "ckpt.objstore.remote.errors.RemoteUnreachable": _message(USER_ERROR, _REMOTE_HINT),
    "ckpt.objstore.remote.errors.RemoteAuthError": _message(USER_ERROR, _AUTH_HINT),
    "ckpt.objstore.remote.errors.RemoteLocked": _remote_locked,
    "ckpt.objstore.remote.errors.RemoteCorrupt": _remote_damaged,
    "ckpt.objstore.remote.errors.RemoteFormatError": _message(
        USER_ERROR, "point the remote at a bucket/prefix that 'ckpt push' created, or an "
        "empty one"),
    "ckpt.objstore.remote.errors.RemoteConflict": _message(USER_ERROR, "run the command again"),
    "ckpt.objstore.remote.errors.RemoteError": _message(USER_ERROR, _REMOTE_HINT),
    # roots
    "ckpt.checkpoints.errors.CheckpointError": _message(USER_ERROR),
    "ckpt.objstore.errors.ObjstoreError": _message(CORRUPTION, _FSCK_HINT),
    "builtins.KeyboardInterrupt": _interrupted,
    "builtins.OSError": _os_error,
    "builtins.BaseException": _internal,
}


# The same errors by kind: a stable word for a program (an MCP client, a hook's log) that
# names the class of problem without parsing the message. Looked up along the MRO like RULES.
KINDS: dict[str, str] = {
    "ckpt.cli.errors.CliError": "user_error",
    "ckpt.cli.errors.DamageFound": "corrupt",
    "ckpt.checkpoints.errors.NotInitialized": "not_initialized",
    "ckpt.checkpoints.errors.PathNotInCheckpoint": "no_such_path",
    "ckpt.checkpoints.errors.UnknownCheckpoint": "unknown_checkpoint",
    "ckpt.checkpoints.errors.AmbiguousCheckpoint": "ambiguous",
    "ckpt.checkpoints.errors.UnsafePath": "unsafe_path",
    "ckpt.checkpoints.errors.ConfigError": "config_error",
    "ckpt.checkpoints.errors.UnsupportedPlatform": "unsupported_platform",
    "ckpt.checkpoints.errors.NothingMatched": "nothing_matched",
    "ckpt.checkpoints.errors.RestoreIncomplete": "restore_incomplete",
    "ckpt.checkpoints.errors.StoreBusy": "store_busy",
    "ckpt.checkpoints.identity.WorkspaceRefused": "workspace_refused",
    "ckpt.objstore.errors.StoreNotFound": "not_initialized",
    "ckpt.objstore.errors.ContentChanged": "content_changed",
    "ckpt.objstore.errors.StoreWriteError": "os_error",
    "ckpt.checkpoints.remote.config.UnknownRemote": "unknown_remote",
    "ckpt.checkpoints.remote.config.RemoteDataDamaged": "corrupt",
    "ckpt.objstore.remote.errors.RemoteUnreachable": "remote_unreachable",
    "ckpt.objstore.remote.errors.RemoteAuthError": "remote_auth",
    "ckpt.objstore.remote.errors.RemoteLocked": "remote_locked",
    "ckpt.objstore.remote.errors.RemoteCorrupt": "corrupt",
    "ckpt.objstore.remote.errors.RemoteError": "remote_error",
    "ckpt.checkpoints.errors.CheckpointError": "user_error",
    "ckpt.checkpoints.errors.CatalogCorrupt": "corrupt",
    "ckpt.objstore.errors.ObjstoreError": "corrupt",
    "builtins.KeyboardInterrupt": "interrupted",
    "builtins.OSError": "os_error",
    "builtins.BaseException": "internal",
}


def _lookup(table: dict[str, Any], exc: BaseException) -> Any:
    for cls in type(exc).__mro__:
        found = table.get(f"{cls.__module__}.{cls.__qualname__}")
        if found is not None:
            return found
    return None  # pragma: no cover - BaseException is in every table


def classify(exc: BaseException) -> Failure:
    """The exit code and words for `exc` (the first rule along its MRO)."""
    interrupt = _interrupt_inside(exc)
    if interrupt is not None:
        exc = interrupt
    rule: Rule | None = _lookup(RULES, exc)
    return rule(exc) if rule is not None else _internal(exc)


def describe(exc: BaseException) -> tuple[int, str, str, str | None]:
    """`(exit_code, kind, message, hint)` for `exc`: the CLI's table, for callers that report
    an error other than as a `ckpt: error:` line (the MCP server's tool errors, the hook's
    log). `kind` is a word from KINDS (`unknown_checkpoint`, `store_busy`, ...); a usage
    error of the CLI (exit 2) is `usage`."""
    failure = classify(exc)
    kind: str = _lookup(KINDS, exc) or "internal"
    if kind == "user_error" and failure.code == USAGE:
        kind = "usage"
    return failure.code, kind, failure.message, failure.hint


def _interrupt_inside(exc: BaseException) -> KeyboardInterrupt | None:
    """A Ctrl-C that Python wrapped in another error (a class body's `__set_name__` call
    raises RuntimeError from it) is still a Ctrl-C: exit 130, not an internal error."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__
    return None


def report(exc: BaseException, *, debug: bool, stream: TextIO | None = None) -> int:
    """Write the one-line error (and the traceback if `debug`) to stderr; return the code."""
    failure = classify(exc)
    out = stream if stream is not None else sys.stderr
    try:
        if debug:
            import traceback

            traceback.print_exception(exc, file=out)
        out.write(failure.line() + "\n")
        out.flush()
    except (OSError, ValueError):  # stderr gone: the exit code is all we can give
        pass
    return failure.code
