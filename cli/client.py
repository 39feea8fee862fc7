"""The thin client: hand a `ckpt` call to the store's server, or say it runs in-process.

`run(argv)` is the first thing `ckpt.cli.main` does. It returns the exit code of a command a
server ran, or None: run it in-process, as without a server. It answers `--version` itself,
finds the store without the library (global options `--root`/`--store` and CKPT_ROOT/
CKPT_STORE, the nearest ancestor holding `.ckpt`, the store the marker is or names: mirrors of
`cli/context.find_root` and `checkpoints/identity.read_marker`, kept in agreement by a test),
connects to `<store>/server/sock` and follows the protocol of `cli/wire.py`: HELLO, REQUEST with
the cwd, argv, the forwarded environment and fds 0, 1, 2; then DECLINE (in-process) or
ACCEPTED, after which the server alone runs the command and the client waits for EXIT,
forwarding SIGINT, SIGTERM and SIGHUP as INTERRUPT frames.

Anything unusual before ACCEPTED (no socket, a stale one, another user's, another version, an
option it does not know, a marker it cannot read) means in-process: the server is a speed-up,
never a requirement, and the library re-resolves whatever the client guessed. After ACCEPTED
the command is the server's: a lost connection is exit 6 with one line, never a second run.

This module runs on every CLI call before anything else is imported: it imports only `os`,
`sys`, `_signal` (not `signal`: it imports enum) and, once a socket file is there, `wire` and
its `_socket`; never click, json or anything of `ckpt.checkpoints`
(tests/cli/test_client_imports.py checks). Without a server the cold path costs a few stats.
"""

import os
import sys

from ckpt import __version__

TYPE_CHECKING = False  # not typing's: importing typing is what this module must not pay for
if TYPE_CHECKING:
    import signal as _signal  # the same functions, with stubs
    from collections.abc import Mapping, Sequence

    from ckpt.cli import wire
else:
    import _signal

MARKER = ".ckpt"  # checkpoints/identity.MARKER
IDENTITY_FILE = "workspace"  # checkpoints/identity.IDENTITY_FILE
FORMAT_FILE = "format"  # checkpoints/identity.FORMAT_FILE
FORMAT_TAG = b"ckpt-objstore "
WORKSPACE_TAG = b"ckpt-workspace 1"
_MAX_READ = 8192

SERVER_LOST = 6  # cli/errors.py's SERVER_LOST (that module imports too much to load here)
LOST_MESSAGE = ("ckpt: error: the ckpt server stopped during the command; run it again "
                "(an interrupted restore is completed by the next call)\n")
HELLO_TIMEOUT = 2.0  # seconds for connect and HELLO: a wedged server costs this, then in-process
FORWARDED_SIGNALS = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP)

SERVER_DIR = "server"  # wire.SERVER_DIR
SOCKET_NAME = "sock"  # wire.SOCKET_NAME

_FLAGS = frozenset(("--debug", "--no-progress", "--verbose"))
_VALUED = frozenset(("--root", "--store", "--session"))


def run(argv: "Sequence[str]") -> int | None:
    """The exit code of `argv` run by a server, or None to run it in-process. Once a server
    ran it, SIGINT, SIGTERM and SIGHUP are ignored: the caller exits with the code at once,
    and a signal in between must not turn a command that printed its result into exit 130."""
    args = list(argv[1:])
    if args == ["--version"]:
        return _print_version()
    if os.environ.get("CKPT_SERVER", "").strip().lower() == "off":  # as server_spawn.wanted
        return None
    try:
        store = find_store(args, os.environ)
    except (OSError, ValueError):  # a marker it cannot read, a cwd that is gone
        return None
    if store is None:
        return None
    path = os.path.join(store, SERVER_DIR, SOCKET_NAME)  # wire.socket_path(store)
    if not os.path.exists(path):  # no server: the cold path does not even load the socket module
        return None
    return _serve(path, args)


def _print_version() -> int:
    """`ckpt --version` as click prints it, with click's exit code for a reader that is gone
    (its `main` turns EPIPE into 1)."""
    try:
        sys.stdout.write(f"ckpt {__version__}\n")
        sys.stdout.flush()
    except BrokenPipeError:
        return 1
    except (OSError, ValueError, AttributeError):  # no stdout at all: as click's echo, quiet
        pass
    return 0


# -- where the store is, without the library ---------------------------------------------------

def parse_globals(args: "Sequence[str]") -> dict[str, str] | None:
    """The values of the global options before the command (`--root`, `--store`, `--session`),
    None if the arguments hold anything else before it (help, `--`, an unknown option, an
    empty value) or no command at all."""
    values: dict[str, str] = {}
    at = 0
    while at < len(args):
        arg = args[at]
        if not arg.startswith("-"):
            return values
        if arg in _FLAGS or (len(arg) > 1 and arg[1:] == "v" * (len(arg) - 1)):
            at += 1
            continue
        name, eq, value = arg.partition("=")
        if name not in _VALUED:
            return None
        if not eq:
            if at + 1 >= len(args):
                return None
            value = args[at + 1]
            at += 1
        if not value:
            return None
        values[name] = value
        at += 1
    return None


def find_store(args: "Sequence[str]", environ: "Mapping[str, str]") -> str | None:
    """The store a call with `args` uses (a real path), None when the client cannot tell or
    there is none yet. OSError when a marker cannot be read."""
    values = parse_globals(args)
    if values is None:
        return None
    root = values.get("--root", environ.get("CKPT_ROOT"))
    store = values.get("--store", environ.get("CKPT_STORE"))
    if root == "" or store == "":  # click's treatment of an empty default is not ours to guess
        return None
    if store is not None:
        return os.path.realpath(store)
    if root is None:
        root = find_root(os.getcwd())
    return read_marker_store(os.path.realpath(root))


def find_root(start: str) -> str:
    """cli/context.find_root: the nearest ancestor of `start` holding `.ckpt/`, else `start`."""
    here = os.path.abspath(start)
    while True:
        if os.path.isdir(os.path.join(here, MARKER)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return os.path.abspath(start)
        here = parent


def read_marker_store(root: str) -> str | None:
    """checkpoints/identity.read_marker's store: `<root>/.ckpt` if it is a store, else the
    `store` line of its `workspace` file; None without either."""
    marker = os.path.join(root, MARKER)
    if not os.path.isdir(marker):
        return None
    data = _read_small(os.path.join(marker, IDENTITY_FILE))
    named = _named_store(data) if data is not None else None
    tag = _read_small(os.path.join(marker, FORMAT_FILE))
    if tag is not None and tag.startswith(FORMAT_TAG):
        return os.path.realpath(marker)
    if named is None:
        return None
    return os.path.realpath(named)


def _named_store(data: bytes) -> str | None:
    lines = data.split(b"\n")
    if lines[0] != WORKSPACE_TAG:
        return None
    store = None
    for line in lines[1:]:
        key, _, value = line.partition(b" ")
        if key == b"store" and value.startswith(b"/"):
            store = os.fsdecode(value)
    return store


def _read_small(path: str) -> bytes | None:
    """checkpoints/identity._read_small: a small file, never through a symlink; None when it
    is not there. OSError for anything else, a symlink included (the library reads that as
    absent): the caller then leaves the call to the library."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        return os.read(fd, _MAX_READ)
    finally:
        os.close(fd)


# -- the conversation ---------------------------------------------------------------------------

def _serve(path: str, args: list[str]) -> int | None:
    from ckpt.cli import wire

    try:
        sock = wire.connect(path, timeout=HELLO_TIMEOUT)
    except OSError:  # no server (ENOENT), a stale socket (ECONNREFUSED), anything else
        return None
    channel = wire.Channel(sock)
    try:
        if not _greet(channel, path):
            return None
        return _request(channel, args)
    finally:
        channel.close()


def _greet(channel: "wire.Channel", path: str) -> bool:
    """Whether the peer is this user's server of this very version (HELLO both ways). A server
    of another version is asked to stop when idle (QUIT), so the next call can start a new one."""
    from ckpt.cli import wire

    try:
        channel.sock.settimeout(HELLO_TIMEOUT)
        uid = wire.peer_uid(channel.sock)
        if uid != os.geteuid():
            _say(f"ckpt: warning: not using the server socket {path!r}: it belongs to uid "
                 f"{uid}, not {os.geteuid()}; running in-process\n")
            return False
        mine = wire.hello_fields()
        channel.send(wire.HELLO, mine)
        kind, fields, fds = channel.recv()
        wire.close_fds(fds)
        if kind != wire.HELLO:
            return False
        if fields != mine:
            channel.send(wire.QUIT)
            return False
        channel.sock.settimeout(None)
        return True
    except (OSError, EOFError, wire.ProtocolError):
        return False


def _request(channel: "wire.Channel", args: list[str]) -> int | None:
    """Send the request and, once the server accepted it, wait for its exit code. The signal
    handlers are in place before the request leaves: a signal before ACCEPTED is held, then
    delivered as it would have been in-process (DECLINE) or forwarded (ACCEPTED)."""
    from ckpt.cli import wire

    relay = _Relay(channel)
    if not relay.install():
        return None
    accepted = False
    try:
        try:
            fields = wire.request_fields(os.getcwd(), args, wire.env_items(os.environb))
            channel.send(wire.REQUEST, fields, fds=(0, 1, 2))
            kind, _, fds = channel.recv()
            wire.close_fds(fds)
        except (OSError, EOFError, wire.ProtocolError):
            return None
        if kind != wire.ACCEPTED:  # DECLINE (or nonsense): the command is ours to run
            return None
        accepted = True
        relay.forward_pending()
        return _wait(channel)
    finally:
        if accepted:
            relay.ignore()  # the server's exit code stands (see `run`)
        else:
            relay.restore(deliver=True)


def _wait(channel: "wire.Channel") -> int:
    """The EXIT code of the accepted request; SERVER_LOST when the connection ends without one."""
    from ckpt.cli import wire

    while True:
        try:
            kind, fields, fds = channel.recv()
            wire.close_fds(fds)
            if kind != wire.EXIT:
                continue
            if len(fields) != 1:
                raise wire.ProtocolError("an EXIT frame holds one field")
            code = wire.parse_int(fields[0])
            if not 0 <= code <= 255:
                raise wire.ProtocolError(f"exit code {code} out of range")
            return code
        except (OSError, EOFError, wire.ProtocolError):
            _say(LOST_MESSAGE)
            return SERVER_LOST


class _Relay:
    """The SIGINT/SIGTERM/SIGHUP handlers of a request in flight: held until ACCEPTED, then
    each one sent as an INTERRUPT frame (a repeated Ctrl-C sends again)."""

    __slots__ = ("channel", "live", "pending", "previous")

    def __init__(self, channel: "wire.Channel") -> None:
        self.channel = channel
        self.pending: list[int] = []
        self.live = False
        self.previous: dict[int, _signal._HANDLER] = {}

    def install(self) -> bool:
        try:
            for signum in FORWARDED_SIGNALS:
                self.previous[signum] = _signal.signal(signum, self._handle)
        except (ValueError, OSError):  # not the main thread: no forwarding, so no server
            self._put_back()
            return False
        return True

    def _handle(self, signum: int, frame: object) -> None:
        if not self.live:
            self.pending.append(signum)
            return
        self._send(signum)

    def _send(self, signum: int) -> None:
        from ckpt.cli import wire

        try:
            self.channel.send(wire.INTERRUPT, [str(signum).encode("ascii")])
        except (OSError, wire.ProtocolError):
            pass  # the server is gone: the wait for EXIT says so

    def forward_pending(self) -> None:
        self.live = True
        for signum in self.pending:
            self._send(signum)
        self.pending.clear()

    def restore(self, *, deliver: bool) -> None:
        """Put the previous handlers back; with `deliver`, a held signal reaches the process
        as if it had arrived now (a Ctrl-C is KeyboardInterrupt, SIGTERM ends the process)."""
        self._put_back()
        if deliver:
            for signum in self.pending:
                _signal.raise_signal(signum)
        self.pending.clear()

    def ignore(self) -> None:
        """Ignore the forwarded signals from now on (a held one too)."""
        for signum in self.previous:
            _signal.signal(signum, _signal.SIG_IGN)
        self.previous.clear()
        self.pending.clear()

    def _put_back(self) -> None:
        for signum, handler in self.previous.items():
            _signal.signal(signum, handler)
        self.previous.clear()


def _say(text: str) -> None:
    """One line on stderr, written at once (nothing of ckpt has set up stderr yet)."""
    try:
        os.write(2, text.encode("utf-8", "backslashreplace"))
    except OSError:
        pass
