"""Running one request in the resident server: the pool of open services and the executor.

Owns `Pool` (open `Checkpoints` per (root, store, session), least recently used closed past
`POOL_SIZE`; the CLI's `State.open` takes from it while the server runs a command) and
`execute` (one command run as `ckpt` runs it in its own process: the client's working
directory, environment and standard streams, the click group, the same exit code).

Everything here runs on the server's main thread, one request at a time: the working
directory, `os.environ` and `sys.std*` are process-global. What it must not do: talk the wire
protocol (cli/server.py does) or keep anything of a request after it (streams closed, env and
cwd restored).
"""

from __future__ import annotations

import inspect
import io
import logging
import os
import sys
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TextIO

from ckpt.cli.server_request import Request, RequestEnv, stream_encoding

if TYPE_CHECKING:
    from ckpt.checkpoints import Checkpoints

POOL_SIZE = 8
log = logging.getLogger("ckptserver")
# Test hook: a request whose env sets CKPT_SERVER_TEST_PAUSE=<point> makes the server create
# `<server dir>/paused-<point>` there and wait until the test removes it (or kills the server).
# Points: `accepted` (ACCEPTED sent, nothing run yet), `run` (in the command's environment
# and streams, before the command), `exit` (the command done, EXIT not sent yet).
PAUSE_ENV = "CKPT_SERVER_TEST_PAUSE"
PAUSE_LIMIT = 120.0

PoolKey = tuple[str, str | None, str]


class Pool:
    """Open services, most recently used last. A service is settled (its deferred
    bookkeeping joined) after each request that used it, and closed when evicted."""

    def __init__(self, size: int = POOL_SIZE) -> None:
        self.size = size
        self._open: OrderedDict[PoolKey, Checkpoints] = OrderedDict()
        self._identity: dict[PoolKey, tuple[int, ...]] = {}
        self._used: list[Checkpoints] = []
        self._watch: bool | None = None

    def checkout(self, root: str, store: str | None, session: str) -> tuple[Checkpoints, bool]:
        key = (os.path.realpath(root), os.path.realpath(store) if store else None, session)
        service = self._open.get(key)
        if service is not None and self._identity.get(key) != _identity(service):
            # The root or the catalog was replaced since (deleted, re-made, restored from a
            # backup): open it again, as a command in its own process would.
            log.info("%s or its catalog changed since it was opened: reopening", service.root)
            self._forget(service)
            service = None
        opened = service is None
        if service is None:
            service = self._open_service(root, store, session)
            self._open[key] = service
            self._identity[key] = _identity(service)
            while len(self._open) > self.size:
                old_key, old = self._open.popitem(last=False)
                self._identity.pop(old_key, None)
                self._close(old)
        self._open.move_to_end(key)
        self._used.append(service)
        return service, opened

    def _open_service(self, root: str, store: str | None, session: str) -> Checkpoints:
        from ckpt.cli.context import library

        checkpoints = library()
        if self._watch is None:
            params = inspect.signature(checkpoints.__init__).parameters
            self._watch = "watch" in params
        kwargs: dict[str, Any] = {"watch": True} if self._watch else {}
        return checkpoints.open(root, store, session, **kwargs)

    def settle(self) -> None:
        """Join the bookkeeping of the services the last request used; a failure there (a
        stat cache that could not be saved) is logged, and the service reopened next time."""
        used, self._used = self._used, []
        for service in dict.fromkeys(used):
            try:
                service.settle()
            except Exception:
                log.exception("bookkeeping of %s failed; closing it", service.root)
                self._forget(service)

    def _forget(self, service: Checkpoints) -> None:
        for key, value in list(self._open.items()):
            if value is service:
                del self._open[key]
                self._identity.pop(key, None)
        self._close(service)

    @staticmethod
    def _close(service: Checkpoints) -> None:
        try:
            service.close()
        except Exception:
            log.exception("closing %s failed", service.root)

    def services(self) -> list[tuple[PoolKey, Checkpoints]]:
        return list(self._open.items())

    def close(self) -> None:
        self._identity.clear()
        while self._open:
            _, service = self._open.popitem(last=False)
            self._close(service)

    def verify(self) -> int:
        """Run each watching service's verification walk; return the disagreements found
        (each logged at ERROR: the watcher missed a change, a bug)."""
        problems = walks = 0
        for (root, _, session), service in self.services():
            verify = getattr(service, "verify_watch", None)
            if verify is None or getattr(service, "watch_state", lambda: None)() is None:
                continue
            walks += 1
            try:
                found = verify()
            except Exception:
                log.exception("verification walk of %s failed", root)
                continue
            if found:
                problems += 1
                log.error("BUG: the watched state of %s (session %s) disagrees with a full "
                          "walk: %s", root, session, found)
        if walks:
            log.info("verification walk of %d root(s): %d disagreement(s)", walks, problems)
        return problems


def _identity(service: Checkpoints) -> tuple[int, ...]:
    """(device, inode) of the service's root and catalog file; () where one is gone."""
    try:
        root = os.stat(service.root)
        catalog = os.stat(os.path.join(service.store_dir, "catalog.db"))
    except OSError:
        return ()
    return root.st_dev, root.st_ino, catalog.st_dev, catalog.st_ino


def _stream(fd: int, *, write: bool, encoding: str, errors: str,
            line_buffering: bool) -> TextIO:
    """A text stream on a received descriptor, built as CPython builds sys.std* at start
    (buffered by the descriptor's block size, newlines as written)."""
    buffered: Any = open(fd, "wb" if write else "rb", buffering=-1,  # noqa: SIM115
                         closefd=True)
    stream: TextIO = io.TextIOWrapper(buffered, encoding=encoding, errors=errors,
                                      newline="\n", line_buffering=line_buffering)
    return stream


@contextmanager
def client_streams(fds: list[int], request: Request) -> Iterator[None]:
    """`sys.stdin/stdout/stderr` (and the `__std*__` originals, which `shutil` asks for the
    terminal size) on the client's descriptors for the request; closed after it."""
    encoding, errors = stream_encoding(request.env)
    stdout_tty = os.isatty(fds[1])
    streams = (
        _stream(fds[0], write=False, encoding=encoding, errors=errors, line_buffering=False),
        _stream(fds[1], write=True, encoding=encoding, errors=errors, line_buffering=stdout_tty),
        _stream(fds[2], write=True, encoding=encoding, errors="backslashreplace",
                line_buffering=True),
    )
    saved: tuple[Any, ...] = (sys.stdin, sys.stdout, sys.stderr,
                              sys.__stdin__, sys.__stdout__, sys.__stderr__)
    _set_std(*streams, *streams)
    try:
        yield
    finally:
        _set_std(*saved)
        for stream in streams:
            try:
                stream.close()
            except (OSError, ValueError):  # a broken pipe's last flush: nothing to tell
                try:
                    os.close(stream.fileno())
                except (OSError, ValueError):
                    pass


def _set_std(*streams: Any) -> None:
    sys.stdin, sys.stdout, sys.stderr = streams[:3]
    setattr(sys, "__stdin__", streams[3])  # noqa: B010 - read-only for type checkers only
    setattr(sys, "__stdout__", streams[4])  # noqa: B010
    setattr(sys, "__stderr__", streams[5])  # noqa: B010


def pause(point: str, request: Request, directory: str) -> None:
    """Block at `point` while `<directory>/paused-<point>` exists, if the request asks."""
    if request.env.get(PAUSE_ENV) != point:
        return
    import time

    marker = os.path.join(directory, f"paused-{point}")
    with open(marker, "w", encoding="ascii") as f:
        f.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + PAUSE_LIMIT
    while os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.01)


def execute(request: Request, fds: list[int], directory: str) -> int:
    """Run the request's command with the client's cwd, env and streams; return its exit
    code. The descriptors are closed when this returns, whatever happened. `directory`: the
    server's, for the test hook `pause`."""
    from ckpt.cli.main import run_command

    if len(fds) != 3:
        close_all(fds)
        raise ValueError(f"a request carries 3 descriptors, not {len(fds)}")
    try:
        pause("accepted", request, directory)
    except KeyboardInterrupt:
        close_all(fds)
        return 130  # errors.INTERRUPTED: nothing ran

    saved_cwd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
    env = RequestEnv(request.env)
    try:
        with client_streams(fds, request):
            try:
                os.chdir(request.cwd)
            except OSError as exc:
                return _cwd_gone(exc)
            try:
                pause("run", request, directory)
            except KeyboardInterrupt as exc:  # told as a Ctrl-C while `ckpt` starts
                from ckpt.cli import errors

                return errors.report(exc, debug=False)
            return run_command(list(request.argv))
    finally:
        env.restore()
        os.fchdir(saved_cwd)
        os.close(saved_cwd)


def warm_up() -> None:
    """Import now what every request needs (click, the commands, the library and the restore
    side), so that the first one costs what the others do."""
    import ckpt.cli.main  # noqa: F401 - imported for its side effect: loaded once
    from ckpt.cli.context import library

    library()
    from ckpt.checkpoints import preload

    preload()
    import gc

    gc.freeze()  # what is loaded now lives as long as the server: out of the collector's way


def close_all(fds: list[int]) -> None:
    """Close received descriptors (a refused frame's, a dropped request's)."""
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _cwd_gone(exc: OSError) -> int:
    """The client's directory cannot be entered (removed since): said as `ckpt` would."""
    from ckpt.cli import errors

    return errors.report(exc, debug=False)
