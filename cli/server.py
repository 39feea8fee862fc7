"""The resident server of one store: `python -m ckpt.cli.server STORE [--foreground]`.

Owns the server's life: the lock (`<store>/server/lock`, flock held for the whole life: one
server per store, a second one exits 0), the socket (a stale one unlinked after a failed
connect; bound 0600 in a 0700 directory), the acceptor (a thread; a thread per connection for
the peer-uid check, HELLO, the REQUEST and the DECLINE table), the executor (the main thread,
one accepted request at a time: ACCEPTED, then the command, then EXIT), INTERRUPT forwarding,
QUIT, STATUS, the idle exit, the periodic verification walk, the heap trim after a request
that grew the process (cli/server_memory.py) and the log file.

The protocol is protocol-24.md (frames in cli/wire.py). A request is ACCEPTED only by the main
thread right before it runs; if that frame cannot be sent the request is dropped, so an
accepted request runs once and one not accepted is the client's to run. What it must not do:
run a command off the main thread, or run one it did not send ACCEPTED for.
"""

from __future__ import annotations

import _thread
import fcntl
import json
import logging
import logging.handlers
import os
import queue
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ckpt import __version__
from ckpt.cli import errors, wire
from ckpt.cli.render import delivered
from ckpt.cli.server_exec import Pool, close_all, execute, pause, warm_up
from ckpt.cli.server_memory import HeapTrim
from ckpt.cli.server_request import BadRequest, Request, decline_reason
from ckpt.cli.server_status import server_status

log = logging.getLogger("ckptserver")
LOG_BYTES = 1 << 20
HANDSHAKE_TIMEOUT = 10.0
TICK = 0.25  # how often the idle main thread looks at its flags and clocks
CHECK_EVERY = 2.0  # how often it checks that its socket is still there
VERSION_ENV = "CKPT_SERVER_TEST_VERSION"


@dataclass
class Pending:
    """A request waiting for the main thread: its channel, decoded request and descriptors."""

    channel: wire.Channel
    request: Request
    fds: list[int]
    id: int = 0


@dataclass
class Running:
    """What the main thread runs now (the acceptor's INTERRUPT looks here)."""

    # Reentrant: the SIGINT handler takes it on the main thread, which may hold it already.
    lock: threading.RLock = field(default_factory=threading.RLock)
    id: int = 0  # 0: none
    forwarded: int = 0  # interrupt_main calls not yet seen by the handler (it counts down)


class Server:
    def __init__(self, store: str, *, foreground: bool = False) -> None:
        self.store = os.path.realpath(store)
        self.directory = wire.server_dir(self.store)
        self.path = wire.socket_path(self.store)
        self.foreground = foreground
        self.started = time.time()
        self.queue: queue.Queue[Pending | None] = queue.Queue()
        self.admit = threading.Lock()  # `stopping` and queueing, decided together
        self.stopping = False
        self.quit_when_idle = False
        self.running = Running()
        self.in_command = False
        self.served = 0
        self.next_id = 0
        self.last_activity = time.monotonic()
        self.last_verify = time.monotonic()
        self.last_check = time.monotonic()
        self.pool = Pool()
        self.heap = HeapTrim()
        self.listener: socket.socket | None = None
        self.bound: tuple[int, int] | None = None
        self.idle = 600.0
        self.verify_every = 3600.0
        # Test hook: a server that says it is of another version (a client newer than it).
        self.hello = wire.hello_fields()
        self.version = os.environ.get(VERSION_ENV) or __version__
        self.hello[1] = self.version.encode()

    # -- start ---------------------------------------------------------------------------

    def take_lock(self) -> int | None:
        """The lock file's descriptor, locked; None when another server holds it."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        os.chmod(self.directory, 0o700)
        fd = os.open(os.path.join(self.directory, "lock"),
                     os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid={os.getpid()} version={self.version} started={int(self.started)}\n"
                 .encode())
        return fd

    def bind(self) -> bool:
        """Bind the socket; a socket file nobody answers on is stale (a killed server).
        False: something answers there without holding the lock (its lock file was removed):
        it is left alone."""
        try:
            wire.connect(self.path, timeout=1.0).close()
        except FileNotFoundError:
            pass
        except OSError:
            log.info("removing stale socket %s", self.path)
            os.unlink(self.path)
        else:
            log.warning("a server without the lock answers on %s: not starting", self.path)
            return False
        umask = os.umask(0o077)
        try:
            raw = wire.bind(self.path)
            self.listener = socket.socket(raw.family, raw.type, fileno=raw.detach())
        finally:
            os.umask(umask)
        st = os.stat(self.path)
        self.bound = (st.st_dev, st.st_ino)
        return True

    def read_settings(self) -> str:
        """`server_idle`, `server_verify` from the store's config; returns `server`."""
        from ckpt.checkpoints import read_config

        try:
            cfg = read_config(self.store)
        except Exception:  # noqa: BLE001 - a broken config is each command's to report
            return "auto"
        self.idle, self.verify_every = cfg.server_idle, cfg.server_verify
        return cfg.server

    # -- the acceptor and connections ----------------------------------------------------

    def accept_loop(self) -> None:
        assert self.listener is not None
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return  # closed: stopping
            threading.Thread(target=self.connection, args=(conn,), daemon=True).start()

    def connection(self, conn: socket.socket) -> None:
        channel = wire.Channel(conn)
        try:
            if wire.peer_uid(conn) != os.geteuid():
                log.warning("refused a connection of uid %s", wire.peer_uid(conn))
                channel.close()
                return
            conn.settimeout(HANDSHAKE_TIMEOUT)
            kind, fields, fds = channel.recv()
            close_all(fds)
            if kind != wire.HELLO:
                raise wire.ProtocolError(f"first frame {kind!r}")
            channel.send(wire.HELLO, self.hello)
            same = fields == self.hello
            self.serve_channel(channel, conn, same_version=same)
        except (OSError, EOFError, wire.ProtocolError, BadRequest) as exc:
            log.debug("connection ended: %s", exc)
            channel.close()

    def serve_channel(self, channel: wire.Channel, conn: socket.socket, *,
                      same_version: bool) -> None:
        kind, fields, fds = channel.recv()
        if kind == wire.QUIT:
            close_all(fds)
            log.info("asked to stop when idle")
            self.quit_when_idle = True
            self.queue.put(None)
            channel.close()
            return
        if kind == wire.STATUS:
            close_all(fds)
            channel.send(wire.STATUS_REPLY, [json.dumps(self.status()).encode()])
            channel.close()
            return
        if kind != wire.REQUEST:
            close_all(fds)
            raise wire.ProtocolError(f"unexpected frame {kind!r}")
        try:
            request = Request.decode(fields)
        except BadRequest:
            close_all(fds)
            raise
        reason = "version" if not same_version else decline_reason(request, self.store)
        if reason is None and len(fds) != 3:
            reason = "fds"
        if reason is not None:
            close_all(fds)
            channel.send(wire.DECLINE, [reason.encode()])
            channel.close()
            return
        conn.settimeout(None)
        with self.admit:
            if self.stopping:
                close_all(fds)
                channel.send(wire.DECLINE, [b"busy-shutdown"])
                channel.close()
                return
            self.queue.put(Pending(channel, request, fds))

    def watch_interrupts(self, pending: Pending) -> None:
        """Forward INTERRUPT frames of a running request to the main thread (until EOF)."""
        while True:
            try:
                kind, _, fds = pending.channel.recv()
            except (OSError, EOFError, wire.ProtocolError, ValueError):
                return
            close_all(fds)
            if kind != wire.INTERRUPT:
                continue
            with self.running.lock:
                if self.running.id == pending.id:
                    self.running.forwarded += 1
                    log.info("request %d interrupted by the client", pending.id)
                    _thread.interrupt_main()

    # -- the main thread -----------------------------------------------------------------

    def on_sigint(self, signum: int, frame: Any) -> None:
        """A client's INTERRUPT (`interrupt_main`) or a real SIGINT: the running command
        gets KeyboardInterrupt as in its own process; a real one also stops the server."""
        with self.running.lock:
            forwarded = self.running.forwarded > 0
            if forwarded:
                self.running.forwarded -= 1
        if not forwarded:
            self.quit_when_idle = True
        if self.in_command:
            raise KeyboardInterrupt

    def on_sigterm(self, signum: int, frame: Any) -> None:
        self.quit_when_idle = True

    def run_one(self, pending: Pending) -> None:
        self.next_id += 1
        pending.id = self.next_id
        try:
            pending.channel.send(wire.ACCEPTED, [str(pending.id).encode()])
        except OSError:
            log.info("client of request %d gone before it was accepted: dropped", pending.id)
            close_all(pending.fds)
            hang_up(pending.channel)
            return
        watcher = threading.Thread(target=self.watch_interrupts, args=(pending,), daemon=True)
        watcher.start()
        started = time.monotonic()
        code = 1
        with self.running.lock:
            self.running.id = pending.id
        try:
            self.in_command = True
            try:
                code = execute(pending.request, pending.fds, self.directory)
            finally:
                self.in_command = False
        except KeyboardInterrupt:  # landed outside the command's own handling: as in-process,
            code = errors.OK if delivered() else errors.INTERRUPTED  # a printed result stands
        except Exception:
            log.exception("request %d failed in the server", pending.id)
        finally:
            with self.running.lock:
                self.running.id = 0
        self.served += 1
        log.info("request %d: %s -> exit %d in %.1f ms", pending.id,
                 " ".join(pending.request.argv), code, (time.monotonic() - started) * 1000)
        try:
            pause("exit", pending.request, self.directory)
        except KeyboardInterrupt:
            pass
        try:
            pending.channel.send(wire.EXIT, [str(code).encode()])
        except OSError:
            log.info("client of request %d gone before its exit code", pending.id)
        hang_up(pending.channel)  # also ends watch_interrupts' read
        self.pool.settle()
        trimmed = self.heap.after_request()
        if trimmed is not None:
            log.info("request %d: heap trimmed to %.0f MiB resident", pending.id,
                     trimmed / (1 << 20))
        self.last_activity = time.monotonic()

    def loop(self) -> None:
        """Run requests until asked to stop (after the one running: `stop` declines what is
        queued), the idle time runs out, or the socket is gone."""
        while True:
            if self.quit_when_idle:
                return
            try:
                pending = self.queue.get(timeout=TICK)
            except queue.Empty:
                pending = None
            except KeyboardInterrupt:
                pending = None
            if pending is not None:
                setting = self.read_settings()
                if setting == "off":
                    self.decline(pending, b"off")
                    self.quit_when_idle = True
                else:
                    self.run_one(pending)
                continue
            now = time.monotonic()
            if self.idle and now - self.last_activity >= self.idle:
                log.info("idle for %.0f s: exiting", now - self.last_activity)
                return
            if now - self.last_check >= CHECK_EVERY:
                self.last_check = now
                if not self.socket_is_ours():
                    log.info("socket %s removed or replaced (the store deleted?): exiting",
                             self.path)
                    return
            if self.verify_every and now - self.last_verify >= self.verify_every:
                self.last_verify = now
                self.pool.verify()

    def socket_is_ours(self) -> bool:
        """Whether the socket file is still the one this server bound (not removed with the
        store, not replaced by another server's)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return False
        return (st.st_dev, st.st_ino) == self.bound

    @staticmethod
    def decline(pending: Pending, reason: bytes) -> None:
        close_all(pending.fds)
        try:
            pending.channel.send(wire.DECLINE, [reason])
        except OSError:
            pass
        pending.channel.close()

    def stop(self) -> None:
        """Refuse what comes next, unlink the socket (if still ours), close the pool."""
        with self.admit:
            self.stopping = True
        if self.listener is not None:
            try:
                self.listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.listener.close()
        if self.socket_is_ours():
            try:
                os.unlink(self.path)
            except OSError:
                pass
        while True:
            try:
                pending = self.queue.get_nowait()
            except queue.Empty:
                break
            if pending is not None:
                self.decline(pending, b"busy-shutdown")
        self.pool.close()

    # -- status --------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        return server_status(self.pool, pid=os.getpid(), version=self.version,
                             uptime=time.time() - self.started, store=self.store,
                             socket=self.path, requests=self.served, idle=self.idle,
                             verify_every=self.verify_every)

    # -- the whole life ------------------------------------------------------------------

    def serve(self) -> int:
        import gc

        gc.enable()  # a long life (`ckpt` itself runs without the collector)
        lock = self.take_lock()
        if lock is None:
            return 0  # another server runs for this store
        try:
            os.chdir("/")  # hold no workspace directory (each request enters its client's)
            self.setup_log()
            if self.read_settings() == "off":
                log.info("server = off for this store: not starting")
                return 0
            if not self.bind():
                return 0
            signal.signal(signal.SIGINT, self.on_sigint)
            signal.signal(signal.SIGTERM, self.on_sigterm)
            signal.signal(signal.SIGHUP, signal.SIG_IGN)
            from ckpt.cli.context import set_pool

            set_pool(self.pool)
            log.info("server %s started: pid %d, store %s", self.version, os.getpid(), self.store)
            threading.Thread(target=self.accept_loop, daemon=True, name="acceptor").start()
            warm_up()
            try:
                self.loop()
            finally:
                self.stop()
                log.info("server stopped after %d request(s)", self.served)
        finally:
            os.close(lock)
        return 0

    def setup_log(self) -> None:
        handler: logging.Handler = logging.handlers.RotatingFileHandler(
            os.path.join(self.directory, "log"), maxBytes=LOG_BYTES, backupCount=1)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        if self.foreground:
            log.addHandler(logging.StreamHandler(sys.__stderr__))
        log.setLevel(logging.INFO)
        log.propagate = False


def hang_up(channel: wire.Channel) -> None:
    """Shut the connection down (a thread blocked reading it gets EOF), then close it."""
    try:
        channel.sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    channel.close()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    foreground = "--foreground" in args
    stores = [a for a in args if a != "--foreground"]
    if len(stores) != 1:
        sys.stderr.write("usage: python -m ckpt.cli.server STORE [--foreground]\n")
        return 2
    return Server(stores[0], foreground=foreground).serve()


if __name__ == "__main__":
    sys.exit(main())
