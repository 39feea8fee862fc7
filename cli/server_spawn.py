"""Starting a store's resident server: whether one is wanted, whether one answers, the spawn.

Owns `wanted` (CKPT_SERVER and the store's `server` setting), `answering` (a connect to the
socket) and `spawn`: a detached `python -m ckpt.cli.server STORE` in a session of its own,
stdin on /dev/null, stdout and stderr on the server's log, every other descriptor closed (a
harness reading our stdout sees its EOF when we exit, not when the server does). Nobody waits
for it: the command that spawns it is no slower.

Imported after an in-process command and by `ckpt server start`: standard library and
cli/wire.py only (no click, no library).
"""

from __future__ import annotations

import os
import sys

from ckpt.cli import wire

ENV = "CKPT_SERVER"
MODES = ("auto", "on", "off")


def wanted(setting: str, env: str | None) -> bool:
    """CKPT_SERVER=off never starts one; else the store's `server` setting decides (`auto`
    and `on` are the same: a server refuses to run for a store that says `off`)."""
    if (env or "").strip().lower() == "off":
        return False
    return setting != "off"


def answering(store: str, *, timeout: float = 1.0) -> bool:
    """Whether a server accepts connections on the store's socket."""
    try:
        sock = wire.connect(wire.socket_path(store), timeout=timeout)
    except OSError:
        return False
    sock.close()
    return True


def ensure_started(store: str) -> int | None:
    """Spawn a server for `store` unless one answers (or the store is not writable); return
    the spawned pid, or None."""
    if answering(store) or not os.access(store, os.W_OK):
        return None
    return spawn(store)


def spawn(store: str) -> int:
    """Start `python -m ckpt.cli.server STORE` detached; return its pid (never waited for
    here: the process that spawns it exits first, and init adopts it)."""
    directory = wire.server_dir(store)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    log = os.path.join(directory, "log")
    actions: list[tuple[int, ...] | tuple[int, int, str, int, int]] = [
        (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    actions.extend((os.POSIX_SPAWN_CLOSE, fd) for fd in _inherited_fds())
    argv = [sys.executable, "-m", "ckpt.cli.server", store]
    return os.posix_spawn(sys.executable, argv, dict(os.environ), file_actions=actions,
                          setsid=True)


def _inherited_fds() -> list[int]:
    """Descriptors above 2 that an exec would keep (Python opens its own close-on-exec; a
    harness may have handed us others)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    kept = []
    for name in names:
        fd = int(name)
        if fd <= 2:
            continue
        try:
            if os.get_inheritable(fd):
                kept.append(fd)
        except OSError:  # the listing's own descriptor, closed by now
            continue
    return kept
