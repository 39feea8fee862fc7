"""One request to the resident server: what it asks, whether the server runs it, its environment.

Owns `Request` (a REQUEST frame's cwd, argv and environment, decoded), `decline_reason` (the
DECLINE table: the commands that run in the client, a request for another store) and
`RequestEnv` (the environment a request runs with, applied and restored around it).

What it must not do: run a command, touch the standard streams or the working directory (the
executor in cli/server_exec.py does), or import the library at module import time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ckpt.cli.wire import ProtocolError, is_forwarded, parse_request

# Commands run by the client itself: long work that should not hold the server (bench, gc,
# fsck, tune; pull and the downloads below, which would hold the server's one executor for as
# long as a remote takes), a store being made (init), the server's own control, shell
# completion and the long-lived stdio MCP server. `remote` runs there too. `push` is served
# once this store has pushed to that remote (`_pushed_before`): it is the command a harness
# runs after every turn, where it sends what that turn made (a few KiB) and a process of its
# own would spend most of its time starting; a store's first push to a remote (its whole
# history) runs in the client. The client's environment (its AWS credentials, proxy and CA
# names) is the request's, never one kept from another request.
LOCAL_COMMANDS = frozenset({"init", "bench", "gc", "fsck", "tune", "server", "completion", "mcp",
                            "pull", "remote"})
# Commands that reach a remote when given `--remote`, or (restore, diff, show, cat, undo) when the
# store has remotes: a checkpoint only a remote has is fetched first.
_REMOTE_OPTION = "--remote"
_MAY_FETCH = frozenset({"restore", "diff", "show", "cat", "undo"})
_REMOTES_FILE = "remotes.toml"
# Global options of `ckpt` that take a value (cli/main.py), to find the command name in argv.
_VALUE_OPTIONS = frozenset({"--root", "--store", "--session"})
class BadRequest(ValueError):
    """A REQUEST frame whose fields do not decode."""


@dataclass(frozen=True, slots=True)
class Request:
    """A decoded REQUEST: the client's working directory, argv[1:] and forwarded env."""

    cwd: str
    argv: tuple[str, ...]
    env: Mapping[str, str]

    @classmethod
    def decode(cls, fields: Sequence[bytes]) -> Request:
        try:
            cwd, args, env = parse_request(fields)
        except ProtocolError as exc:
            raise BadRequest(str(exc)) from None
        text = os.fsdecode(cwd)
        if not os.path.isabs(text):
            raise BadRequest("cwd is not absolute")
        return cls(text, tuple(os.fsdecode(a) for a in args),
                   {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()})

    def split(self) -> tuple[str | None, list[str]]:
        """The subcommand's name (the first argument that is no global option), or None, and
        the arguments after it."""
        args = iter(self.argv)
        for arg in args:
            if arg == "--":
                return next(args, None), list(args)
            if arg in _VALUE_OPTIONS:
                next(args, None)
            elif not arg.startswith("-"):
                return arg, list(args)
        return None, []

    def command(self) -> str | None:
        return self.split()[0]

    def follows(self) -> bool:
        """`events --follow`: it runs until the client's Ctrl-C, so it must not hold the
        server's one executor (a value that reads `-f` only costs a local run)."""
        command, args = self.split()
        return command == "events" and any(a in ("--follow", "-f") for a in args)

    def option(self, name: str) -> str | None:
        """The value of global option `name` (`--root X` or `--root=X`) before the command,
        else its environment variable as forwarded."""
        args = iter(self.argv)
        found: str | None = None
        for arg in args:
            if arg == name:
                found = next(args, None)
            elif arg.startswith(name + "="):
                found = arg[len(name) + 1:]
            elif arg in _VALUE_OPTIONS:
                next(args, None)
            elif not arg.startswith("-") or arg == "--":
                break
        if found is not None:
            return found
        value = self.env.get("CKPT_" + name[2:].upper())
        return value or None

    def store_dir(self) -> str:
        """The store this request would open, resolved as the CLI does (a real path)."""
        from ckpt.checkpoints import locate_store
        from ckpt.cli.context import find_root

        store = self.option("--store")
        if store is not None:
            return os.path.realpath(os.path.join(self.cwd, store))
        root = self.option("--root")
        root = os.path.join(self.cwd, root) if root is not None else find_root(self.cwd)
        return locate_store(root)


def decline_reason(request: Request, store: str) -> str | None:
    """Why the server runs `request` in the client (a DECLINE reason), or None: it runs it."""
    command = request.command()
    if command in LOCAL_COMMANDS or request.follows():
        return "local"
    if "--help" in request.argv or "-h" in request.argv or "--version" in request.argv:
        return None  # no store is opened
    if command is None:
        return None  # `ckpt` alone prints its usage
    if any(a == _REMOTE_OPTION or a.startswith(_REMOTE_OPTION + "=") for a in request.argv):
        return "local"
    try:
        wanted = request.store_dir()
    except (OSError, ValueError):
        return "store"
    if wanted != store:
        return "store"
    if command in _MAY_FETCH and os.path.exists(os.path.join(store, _REMOTES_FILE)):
        return "local"
    if command == "push" and not _pushed_before(request, store):
        return "local"
    return None


def _pushed_before(request: Request, store: str) -> bool:
    """Whether the remote a `push` request names (its first argument when that is a remote's
    name, else the only remote) has had a push from this store complete. Anything unclear
    (no such remote, several and none named, a remotes.toml that does not read) is False:
    the client runs it, and says what is wrong."""
    from ckpt.checkpoints import CheckpointError, has_pushed, remote_names

    try:
        names = set(remote_names(store))
    except (CheckpointError, OSError):
        return False
    args = iter(request.split()[1])
    first = None
    for arg in args:
        if arg == "--session":
            next(args, None)
        elif not arg.startswith("-"):
            first = arg
            break
    name = first if first in names else (next(iter(names)) if len(names) == 1 else None)
    return name is not None and has_pushed(store, name)


class RequestEnv:
    """The process environment of one request: the client's forwarded names set, the names a
    client would forward but did not send unset, everything else of the server's own left as
    it is. `restore()` puts the server's back."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._saved = {k: v for k, v in os.environ.items() if is_forwarded(k)}
        for name in self._saved:
            if name not in env:
                del os.environ[name]
        os.environ.update(env)
        self._tz_changed = env.get("TZ") != self._saved.get("TZ")
        if self._tz_changed:
            time.tzset()

    def restore(self) -> None:
        for name in [k for k in os.environ if is_forwarded(k)]:
            del os.environ[name]
        os.environ.update(self._saved)
        if self._tz_changed:
            time.tzset()


def stream_encoding(env: Mapping[str, str]) -> tuple[str, str]:
    """(encoding, errors) of the client's stdout, as its interpreter chose them at start.

    PYTHONIOENCODING wins; else the codeset of the client's LC_ALL / LC_CTYPE / LANG locale.
    A C or POSIX locale, or one not installed, is UTF-8 with surrogateescape (CPython's locale
    coercion and UTF-8 mode)."""
    name = env.get("LC_ALL") or env.get("LC_CTYPE") or env.get("LANG") or "C"
    codeset = _locale_codeset(name)
    encoding, errors = ("utf-8", "surrogateescape") if codeset is None else (codeset, "strict")
    io_encoding, _, io_errors = env.get("PYTHONIOENCODING", "").partition(":")
    if io_encoding:  # an encoding named there comes with strict errors unless it says
        return _codec_name(io_encoding), io_errors or "strict"
    return encoding, io_errors or errors


def _codec_name(codeset: str) -> str:
    import codecs

    try:
        return codecs.lookup(codeset).name
    except LookupError:
        return "utf-8"


def _locale_codeset(name: str) -> str | None:
    """The codeset of locale `name`; None for C, POSIX and their UTF-8 forms, and for a
    locale this system does not have."""
    import locale

    base = name.partition(".")[0].partition("@")[0]
    if base in ("C", "POSIX"):
        return None
    saved = locale.setlocale(locale.LC_CTYPE)
    try:
        locale.setlocale(locale.LC_CTYPE, name)
        return _codec_name(locale.nl_langinfo(locale.CODESET))
    except locale.Error:
        return None
    finally:
        locale.setlocale(locale.LC_CTYPE, saved)
