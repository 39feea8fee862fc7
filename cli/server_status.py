"""What `ckpt server status` reports: the server's facts, its roots and their watch state.

Owns the STATUS reply's JSON (documented in docs/CLI.md, `ckpt server status`): built from the
server's counters and its pool, memory from /proc/self/status. Runs on a connection thread
while the main thread may run a request: it only reads.
"""

from __future__ import annotations

import os
from typing import Any

from ckpt.cli.server_exec import Pool


def server_status(pool: Pool, *, pid: int, version: str, uptime: float, store: str,
                  socket: str, requests: int, idle: float,
                  verify_every: float) -> dict[str, Any]:
    roots: dict[str, dict[str, Any]] = {}
    for (root, _, session), service in pool.services():
        entry = roots.setdefault(root, {"root": root, "sessions": [], "watch": None})
        entry["sessions"].append(session)
        watch_state = getattr(service, "watch_state", None)
        if watch_state is not None:
            try:
                entry["watch"] = _jsonable(watch_state())
            except Exception as exc:  # noqa: BLE001 - status must answer
                entry["watch"] = {"error": str(exc)}
    rss, peak = _memory()
    return {
        "running": True, "pid": pid, "version": version, "uptime": round(uptime, 3),
        "store": store, "socket": socket, "roots": list(roots.values()), "requests": requests,
        "rss": rss, "peak_rss": peak, "idle_exit": idle or None,
        "verify_every": verify_every or None,
    }


def _memory() -> tuple[int | None, int | None]:
    """(VmRSS, VmHWM) of this process in bytes, from /proc/self/status (None elsewhere)."""
    found: dict[str, int] = {}
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                name, _, rest = line.partition(b":")
                if name in (b"VmRSS", b"VmHWM"):
                    found[name.decode()] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return found.get("VmRSS"), found.get("VmHWM")


def _jsonable(value: Any) -> Any:
    """A frozen dataclass (the watcher's state), an enum or a path, as JSON values."""
    import dataclasses
    import enum

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return os.fsdecode(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
