"""cli/wire.py: frames, the channel (fd passing), long socket paths, the peer's uid."""

from __future__ import annotations

import _socket
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt.cli import wire


@pytest.fixture
def pair() -> Iterator[tuple[wire.Channel, wire.Channel]]:
    a, b = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    left, right = wire.Channel(a), wire.Channel(b)
    yield left, right
    left.close()
    right.close()


def raw_pair() -> tuple[socket.socket, wire.Channel]:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    return a, wire.Channel(_socket.socket(fileno=b.detach()))


def test_encode_is_length_kind_then_length_prefixed_fields() -> None:
    frame = wire.encode(wire.EXIT, [b"0", b"ab"])
    assert frame == (b"\x00\x00\x00\x0c" b"X" b"\x00\x00\x00\x01" b"0" b"\x00\x00\x00\x02" b"ab")


def test_encode_refuses_a_frame_over_16_mib() -> None:
    wire.encode(wire.STATUS_REPLY, [b"x" * (wire.MAX_FRAME - 5)])  # exactly the bound
    with pytest.raises(wire.ProtocolError):
        wire.encode(wire.STATUS_REPLY, [b"x" * (wire.MAX_FRAME - 4)])


@settings(max_examples=60, derandomize=True, deadline=None)
@given(kind=st.sampled_from(sorted(wire.KINDS)),
       fields=st.lists(st.binary(max_size=300), max_size=12))
def test_frames_round_trip_through_a_socketpair(kind: bytes, fields: list[bytes]) -> None:
    a, b = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
    left, right = wire.Channel(a), wire.Channel(b)
    try:
        left.send(kind, fields)
        left.send(wire.QUIT)
        assert right.recv() == (kind, fields, [])
        assert right.recv() == (wire.QUIT, [], [])
    finally:
        left.close()
        right.close()


def test_a_large_frame_crosses_in_many_reads(pair: tuple[wire.Channel, wire.Channel]) -> None:
    import threading

    left, right = pair
    big = [os.urandom(3 << 20), b"tail"]
    sender = threading.Thread(target=left.send, args=(wire.STATUS_REPLY, big))
    sender.start()
    assert right.recv() == (wire.STATUS_REPLY, big, [])
    sender.join()


def test_fds_travel_with_their_frame(pair: tuple[wire.Channel, wire.Channel],
                                     tmp_path: Path) -> None:
    left, right = pair
    target = tmp_path / "out"
    r, w = os.pipe()
    with open(target, "wb") as handle:
        left.send(wire.EXIT, [b"7"])
        left.send(wire.REQUEST, [b"/", b"0"], fds=[r, w, handle.fileno()])
        assert right.recv() == (wire.EXIT, [b"7"], [])
        kind, fields, fds = right.recv()
    assert (kind, fields, len(fds)) == (wire.REQUEST, [b"/", b"0"], 3)
    try:
        assert not set(fds) & {r, w}  # copies, not the sender's numbers
        assert all(not os.get_inheritable(fd) for fd in fds)
        os.write(fds[1], b"through the pipe")
        assert os.read(r, 100) == b"through the pipe"
        os.write(fds[2], b"into the file")
    finally:
        for fd in (*fds, r, w):
            os.close(fd)
    assert target.read_bytes() == b"into the file"


def test_received_frame_over_16_mib_is_refused_unread() -> None:
    raw, chan = raw_pair()
    try:
        raw.sendall((wire.MAX_FRAME + 1).to_bytes(4, "big") + wire.STATUS_REPLY)
        with pytest.raises(wire.ProtocolError, match="exceeds"):
            chan.recv()
    finally:
        raw.close()
        chan.close()


@pytest.mark.parametrize("data", [
    wire.encode(wire.EXIT, [b"12"])[:-1],  # payload cut short
    wire.encode(wire.EXIT, [b"12"])[:3],  # header cut short
    b"\x00\x00\x00\x03X\x00\x00",  # a field's length cut short
    b"\x00\x00\x00\x06X\x00\x00\x00\x09x",  # a field runs past the frame
    b"\x00\x00\x00\x00",  # no kind
    b"\x00\x00\x00\x01Z",  # no such kind
])
def test_a_truncated_or_malformed_frame_is_a_protocol_error(data: bytes) -> None:
    raw, chan = raw_pair()
    try:
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)
        with pytest.raises(wire.ProtocolError):
            chan.recv()
    finally:
        raw.close()
        chan.close()


def test_close_between_frames_is_eof(pair: tuple[wire.Channel, wire.Channel]) -> None:
    left, right = pair
    left.send(wire.ACCEPTED, [b"1"])
    left.close()
    assert right.recv() == (wire.ACCEPTED, [b"1"], [])
    with pytest.raises(EOFError):
        right.recv()


def test_fds_of_a_refused_frame_are_closed() -> None:
    raw, chan = raw_pair()
    r, w = os.pipe()
    try:
        bad = b"\x00\x00\x00\x06X\x00\x00\x00\x09x"
        raw.sendmsg([bad], [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                             r.to_bytes(4, sys.byteorder))])
        raw.shutdown(socket.SHUT_WR)
        before = set(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
        with pytest.raises(wire.ProtocolError):
            chan.recv()
        if before is not None:
            assert set(os.listdir("/proc/self/fd")) <= before
    finally:
        os.close(r)
        os.close(w)
        raw.close()
        chan.close()


def test_too_many_fds_are_refused(pair: tuple[wire.Channel, wire.Channel]) -> None:
    left, _ = pair
    with pytest.raises(wire.ProtocolError):
        left.send(wire.REQUEST, [], fds=[0] * (wire.MAX_FDS + 1))


def long_dir(base: Path) -> Path:
    """A directory whose socket path is well over sun_path's 108 bytes."""
    here = base
    while len(os.fsencode(str(here / "server" / "sock"))) <= 200:
        here = here / ("d" * 40)
    here = here / "server"
    here.mkdir(parents=True)
    return here


@pytest.mark.parametrize("long", [False, True], ids=["short", "long"])
def test_bind_and_connect_at_any_path_length(tmp_path: Path, long: bool) -> None:
    folder = long_dir(tmp_path) if long else tmp_path
    path = str(folder / "sock")
    assert (len(os.fsencode(path)) > 108) == long
    listener = wire.bind(path)
    try:
        assert (os.stat(path).st_mode & 0o777) == 0o600
        client = wire.connect(path, timeout=5)
        conn, _ = listener._accept()
        server = wire.Channel(_socket.socket(fileno=conn))
        wire.Channel(client).send(wire.HELLO, wire.hello_fields())
        assert server.recv() == (wire.HELLO, wire.hello_fields(), [])
        assert wire.peer_uid(client) == os.geteuid()
        assert wire.peer_uid(server.sock) == os.geteuid()
        client.close()
        server.close()
    finally:
        listener.close()


def test_long_path_without_proc_goes_through_fchdir(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    folder = long_dir(tmp_path)
    path = str(folder / "sock")
    real_isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir",
                        lambda p: False if str(p).startswith("/proc/self/fd/") else real_isdir(p))
    cwd = os.getcwd()
    listener = wire.bind(path)
    try:
        wire.connect(path).close()
        assert os.getcwd() == cwd
        assert os.path.exists(path)
    finally:
        listener.close()


def test_bind_unlinks_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "sock")
    first = wire.bind(path)
    try:
        with pytest.raises(OSError):
            wire.bind(path)
    finally:
        first.close()
    with pytest.raises(OSError):  # the stale file stays; the caller decides
        wire.bind(path)


def test_connect_to_a_missing_or_stale_socket_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        wire.connect(str(tmp_path / "none"))
    stale = str(tmp_path / "stale")
    wire.bind(stale).close()
    with pytest.raises(ConnectionRefusedError):
        wire.connect(stale)


def test_server_files_are_under_the_store() -> None:
    assert wire.server_dir("/s/.ckpt") == "/s/.ckpt/server"
    assert wire.socket_path("/s/.ckpt") == "/s/.ckpt/server/sock"


def test_hello_names_protocol_version_and_cache_tag() -> None:
    import ckpt

    assert wire.hello_fields() == [b"1", ckpt.__version__.encode(),
                                   sys.implementation.cache_tag.encode()]


def test_request_fields_round_trip() -> None:
    env = wire.env_items({b"CKPT_ROOT": b"/r", b"PATH": b"/bin", b"LC_ALL": b"C",
                          b"XDG_DATA_HOME": b"/x", b"TERM": b"dumb", b"SECRET": b"s"})
    assert sorted(env) == [b"CKPT_ROOT=/r", b"LC_ALL=C", b"TERM=dumb", b"XDG_DATA_HOME=/x"]
    fields = wire.request_fields("/w", ["list", "--json", "caf\udce9"], env)
    cwd, argv, parsed = wire.parse_request(fields)
    assert (cwd, argv) == (b"/w", [b"list", b"--json", b"caf\xe9"])
    assert parsed == {b"CKPT_ROOT": b"/r", b"LC_ALL": b"C", b"XDG_DATA_HOME": b"/x",
                      b"TERM": b"dumb"}


@pytest.mark.parametrize("fields", [
    [b"/w"], [b"/w", b"x"], [b"/w", b"3", b"a"], [b"/w", b"0", b"PATH=/bin"],
    [b"/w", b"0", b"novalue"], [b"/w", b"-1"],
])
def test_a_malformed_request_is_a_protocol_error(fields: list[bytes]) -> None:
    with pytest.raises(wire.ProtocolError):
        wire.parse_request(fields)


def test_forwarded_names_match_the_protocol() -> None:
    for name in ("CKPT_SERVER", "CKPT_ROOT", "TERM", "COLUMNS", "LINES", "NO_COLOR", "LANG",
                 "LC_ALL", "LC_CTYPE", "PYTHONIOENCODING", "HOME", "XDG_DATA_HOME", "TZ"):
        assert wire.is_forwarded(name)
    for name in ("PATH", "PWD", "PYTHONPATH", "USER", "SSH_AUTH_SOCK"):
        assert not wire.is_forwarded(name)
