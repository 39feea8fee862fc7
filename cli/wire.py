"""The ckpt server's wire protocol (v1): frames, the channel that carries them, and the socket.

One frame is `u32 big-endian LENGTH | u8 KIND | PAYLOAD`, where LENGTH counts KIND and PAYLOAD
and is at most 16 MiB; PAYLOAD is a sequence of fields, each `u32 big-endian len | bytes`.
Strings travel `os.fsencode`d, integers as ASCII decimal fields. A `REQUEST` carries the
client's fds 0, 1 and 2 (SCM_RIGHTS), so the server writes to the client's own terminal or
pipes. The kinds, their fields and the sequence are pinned in the protocol note; the server's
files (`<store>/server/lock`, `sock`, `log`) are named here, so client and server agree.

Also here: binding and connecting a Unix socket whose path is longer than `sun_path` (through
the socket's directory, opened as an fd), the peer's uid (SO_PEERCRED), and which environment
names a request carries.

This module is loaded by the thin client on every CLI call, before anything else of ckpt:
it imports only `os`, `sys` and `_socket` (not `socket`, which loads enum and selectors; not
`struct` or `json`) and must never import more.
"""

import _socket
import os
import sys

from ckpt import __version__

TYPE_CHECKING = False  # not typing's: importing typing is what this module must not pay for
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

PROTOCOL = 1

HELLO = b"H"  # both ways, first: protocol, ckpt version, cache tag
REQUEST = b"R"  # C->S: cwd, argc, argv[1:]..., env items NAME=VALUE; fds 0, 1, 2 attached
DECLINE = b"D"  # S->C: reason; the client runs the command in-process
ACCEPTED = b"A"  # S->C: request id; the server runs it, the client never does
EXIT = b"X"  # S->C: exit code, sent after the server closed its copies of the fds
INTERRUPT = b"I"  # C->S: signal number (Ctrl-C, SIGTERM, SIGHUP forwarded)
QUIT = b"Q"  # C->S: stop when idle (a client of another version)
STATUS = b"S"  # C->S: ask for the status
STATUS_REPLY = b"T"  # S->C: one JSON text field
KINDS = frozenset((HELLO, REQUEST, DECLINE, ACCEPTED, EXIT, INTERRUPT, QUIT, STATUS,
                   STATUS_REPLY))

MAX_FRAME = 16 * 1024 * 1024  # LENGTH's bound: KIND + PAYLOAD
MAX_FDS = 8  # fds one frame may carry (a REQUEST carries 3)
SERVER_DIR = "server"
SOCKET_NAME = "sock"
LOCK_NAME = "lock"
LOG_NAME = "log"

# The environment a request carries (and the server applies, unsetting CKPT_* names not sent):
# what the CLI and the library read (AWS_*: a remote's S3 credentials, region and endpoint;
# the proxy and CA names: how a served push reaches the remote from the client's network).
FORWARDED_NAMES = frozenset(("TERM", "COLUMNS", "LINES", "NO_COLOR", "LANG", "PYTHONIOENCODING",
                             "HOME", "TZ", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_SYSTEM",
                             "GIT_CONFIG_NOSYSTEM", "CLAUDE_PROJECT_DIR",
                             "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy",
                             "https_proxy", "all_proxy", "no_proxy", "SSL_CERT_FILE",
                             "SSL_CERT_DIR"))
FORWARDED_PREFIXES = ("CKPT_", "LC_", "XDG_", "AWS_")

_SUN_PATH_MAX = 107  # sun_path holds 108 bytes with the terminating NUL on Linux (104 on BSDs)
_INT_SIZE = 4  # an fd in SCM_RIGHTS data: a C int
_FD_BYTES = MAX_FDS * _INT_SIZE


class ProtocolError(Exception):
    """A frame that breaks the protocol: too long, cut short, malformed fields, unknown kind."""


# -- the server's files ---------------------------------------------------------------------

def server_dir(store: str) -> str:
    """`<store>/server`: the server's lock, socket and log (mode 0700)."""
    return os.path.join(store, SERVER_DIR)


def socket_path(store: str) -> str:
    """`<store>/server/sock`: where a store's server listens."""
    return os.path.join(store, SERVER_DIR, SOCKET_NAME)


def hello_fields() -> list[bytes]:
    """This side's HELLO: protocol, ckpt version, the interpreter's cache tag. Any field that
    differs from the peer's means the two must not share a command."""
    tag = sys.implementation.cache_tag or ""
    return [str(PROTOCOL).encode("ascii"), __version__.encode("ascii"), tag.encode("ascii")]


# -- environment ----------------------------------------------------------------------------

def is_forwarded(name: str | bytes) -> bool:
    """Whether a request carries the environment variable `name`."""
    text = name.decode("ascii", "replace") if isinstance(name, bytes) else name
    return text in FORWARDED_NAMES or text.startswith(FORWARDED_PREFIXES)


def env_items(environ: "Mapping[bytes, bytes]") -> list[bytes]:
    """The `NAME=VALUE` fields of a request, from an environment of bytes (`os.environb`)."""
    return [name + b"=" + value for name, value in environ.items() if is_forwarded(name)]


def request_fields(cwd: str | bytes, args: "Sequence[str | bytes]",
                   env: "Iterable[bytes]") -> list[bytes]:
    """A REQUEST's fields: cwd, the count of `args` (argv[1:]), the args, the env items."""
    return [os.fsencode(cwd), str(len(args)).encode("ascii"),
            *(os.fsencode(arg) for arg in args), *env]


def parse_request(fields: "Sequence[bytes]") -> tuple[bytes, list[bytes], dict[bytes, bytes]]:
    """(cwd, argv[1:], env) of a REQUEST's fields; ProtocolError when they are not one."""
    if len(fields) < 2:
        raise ProtocolError("a request needs a cwd and an argument count")
    count = parse_int(fields[1])
    if count < 0 or len(fields) < 2 + count:
        raise ProtocolError("a request's argument count exceeds its fields")
    env: dict[bytes, bytes] = {}
    for item in fields[2 + count:]:
        name, sep, value = item.partition(b"=")
        if not sep or not name or not is_forwarded(name):
            raise ProtocolError(f"a request carries an environment item it must not: {name!r}")
        env[name] = value
    return fields[0], list(fields[2:2 + count]), env


def parse_int(field: bytes) -> int:
    """An integer field (ASCII decimal, an optional minus sign); ProtocolError otherwise."""
    digits = field[1:] if field[:1] == b"-" else field
    if not digits or not digits.isdigit() or len(digits) > 20:
        raise ProtocolError(f"not an integer field: {field[:24]!r}")
    return int(field)


# -- frames ---------------------------------------------------------------------------------

def encode(kind: bytes, fields: "Sequence[bytes]" = ()) -> bytes:
    """One frame's bytes; ProtocolError if `kind` is not one byte or it exceeds MAX_FRAME."""
    if len(kind) != 1:
        raise ProtocolError(f"a frame's kind is one byte, not {kind!r}")
    parts = [b"", kind]
    size = 1
    for field in fields:
        parts.append(len(field).to_bytes(4, "big"))
        parts.append(field)
        size += 4 + len(field)
    if size > MAX_FRAME:
        raise ProtocolError(f"a frame of {size} bytes exceeds {MAX_FRAME}")
    parts[0] = size.to_bytes(4, "big")
    return b"".join(parts)


def decode_fields(payload: bytes) -> list[bytes]:
    """The fields of a frame's payload; ProtocolError unless they fill it exactly."""
    fields = []
    at, end = 0, len(payload)
    while at < end:
        if end - at < 4:
            raise ProtocolError("a field's length is cut short")
        size = int.from_bytes(payload[at:at + 4], "big")
        at += 4
        if size > end - at:
            raise ProtocolError("a field runs past its frame")
        fields.append(payload[at:at + size])
        at += size
    return fields


class Channel:
    """Frames over a connected Unix stream socket, with fds attached (SCM_RIGHTS).

    Reads take exactly one frame's bytes, never more, so the fds the kernel hands over with
    them are that frame's (the kernel attaches them to the first byte of the frame they were
    sent with). Received fds belong to the caller, close-on-exec; they are closed here only
    when the frame carrying them is refused.
    """

    __slots__ = ("sock",)

    def __init__(self, sock: _socket.socket) -> None:
        self.sock = sock

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def send(self, kind: bytes, fields: "Sequence[bytes]" = (), fds: "Sequence[int]" = ()) -> None:
        """Send one frame, with `fds` attached to its first byte."""
        if len(fds) > MAX_FDS:
            raise ProtocolError(f"a frame carries at most {MAX_FDS} fds, not {len(fds)}")
        data = memoryview(encode(kind, fields))
        ancillary = []
        if fds:
            fd_data = b"".join(fd.to_bytes(_INT_SIZE, sys.byteorder) for fd in fds)
            ancillary.append((_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fd_data))
        while data:
            sent = self.sock.sendmsg([data], ancillary, _NOSIGNAL)
            data = data[sent:]
            ancillary = []  # the fds went with the first part

    def recv(self) -> tuple[bytes, list[bytes], list[int]]:
        """The next frame: (kind, fields, fds). EOFError when the peer closed between frames;
        ProtocolError for a frame cut short, too long or malformed (its fds closed)."""
        fds: list[int] = []
        try:
            head = self._read(5, fds, at_boundary=True)
            size = int.from_bytes(head[:4], "big")
            kind = head[4:5]
            if size > MAX_FRAME:
                raise ProtocolError(f"a frame of {size} bytes exceeds {MAX_FRAME}")
            if size < 1:
                raise ProtocolError("a frame without a kind")
            if kind not in KINDS:
                raise ProtocolError(f"unknown frame kind {kind!r}")
            payload = self._read(size - 1, fds, at_boundary=False) if size > 1 else b""
            return kind, decode_fields(payload), fds
        except BaseException:
            for fd in fds:
                _close_quietly(fd)
            raise

    def _read(self, size: int, fds: list[int], *, at_boundary: bool) -> bytes:
        chunks = []
        left = size
        while left:
            data, ancdata, flags, _ = self.sock.recvmsg(min(left, 1 << 20),
                                                         _ANCBUF, _CMSG_CLOEXEC)
            for level, kind, cdata in ancdata:
                if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
                    usable = len(cdata) - len(cdata) % _INT_SIZE
                    fds.extend(int.from_bytes(cdata[i:i + _INT_SIZE], sys.byteorder)
                               for i in range(0, usable, _INT_SIZE))
            if flags & _socket.MSG_CTRUNC:
                raise ProtocolError(f"a frame carried more than {MAX_FDS} fds")
            if not data:
                if at_boundary and left == size:
                    raise EOFError("the peer closed the connection")
                raise ProtocolError("the connection closed in the middle of a frame")
            chunks.append(data)
            left -= len(data)
        return b"".join(chunks)


_NOSIGNAL = getattr(_socket, "MSG_NOSIGNAL", 0)  # EPIPE, not SIGPIPE, where the flag exists
_CMSG_CLOEXEC = getattr(_socket, "MSG_CMSG_CLOEXEC", 0)
_ANCBUF = _socket.CMSG_SPACE(_FD_BYTES)


def close_fds(fds: "Sequence[int]") -> None:
    """Close received fds, ignoring those already closed."""
    for fd in fds:
        _close_quietly(fd)


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


# -- the socket -----------------------------------------------------------------------------

def connect(path: str, timeout: float | None = None) -> _socket.socket:
    """A stream socket connected to the Unix socket at `path` (of any length). `timeout`
    bounds the connect only; the socket returned blocks. OSError as `connect(2)` fails
    (FileNotFoundError, ConnectionRefusedError for a socket file no server listens on)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _SOCK_CLOEXEC)
    try:
        sock.settimeout(timeout)
        _at_path(path, sock.connect)
        sock.settimeout(None)
    except BaseException:
        sock.close()
        raise
    return sock


def bind(path: str, backlog: int = 64) -> _socket.socket:
    """A listening stream socket bound at `path` (of any length), mode 0600. Unlinks nothing:
    an existing file at `path` is the caller's to judge (OSError EADDRINUSE)."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _SOCK_CLOEXEC)
    try:
        _at_path(path, sock.bind)
        parent, name = os.path.split(path)
        dir_fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.chmod(name, 0o600, dir_fd=dir_fd)  # in the server's 0700 directory
        finally:
            os.close(dir_fd)
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock


_SOCK_CLOEXEC = getattr(_socket, "SOCK_CLOEXEC", 0)


def _at_path(path: str, call: "Callable[[str], None]") -> None:
    """`call(address)` for the socket file at `path`. A path too long for `sun_path` is reached
    through its directory, opened as an fd: `/proc/self/fd/<fd>/<name>` on Linux, else the
    name alone after `fchdir` to the directory (and back)."""
    if len(os.fsencode(path)) <= _SUN_PATH_MAX:
        call(path)
        return
    parent, name = os.path.split(path)
    if len(os.fsencode(name)) > _SUN_PATH_MAX - 24:
        raise OSError(f"socket name too long: {name!r}")
    dir_fd = os.open(parent or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        via_proc = f"/proc/self/fd/{dir_fd}"
        if os.path.isdir(via_proc):
            call(f"{via_proc}/{name}")
            return
        here = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fchdir(dir_fd)
            try:
                call(name)
            finally:
                os.fchdir(here)
        finally:
            os.close(here)
    finally:
        os.close(dir_fd)


def peer_uid(sock: _socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket, -1 where this
    platform does not say (SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS and the BSDs)."""
    if hasattr(_socket, "SO_PEERCRED"):  # struct ucred {pid_t pid; uid_t uid; gid_t gid}
        data = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
        return int.from_bytes(data[4:8], sys.byteorder)
    if sys.platform == "darwin" or "bsd" in sys.platform:
        # struct xucred {u_int cr_version; uid_t cr_uid; ...}: SOL_LOCAL 0, LOCAL_PEERCRED 1
        data = sock.getsockopt(0, 1, 76)
        return int.from_bytes(data[4:8], sys.byteorder)
    return -1
