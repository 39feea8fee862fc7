"""Checkpoint records and events: the domain's plain, immutable data.

Owns `CheckpointRecord`, `CheckpointStats`, `SkippedPath`, `Event`, their JSON shape (the keys
and order of docs/DESIGN.md), checkpoint ids (`new_checkpoint_id`) and the ISO 8601 time form
(`format_time` / `parse_time`). Values are checked when a record is built, so a record that
exists is well formed: aware UTC time, 32-byte tree id, JSON-safe metadata frozen against
mutation, text that can be written as UTF-8, paths that are non-empty bytes without NUL.

Must do no IO, read no clock and draw no randomness of its own (callers inject `now_ms` and
the `random.Random`), and know nothing of SQLite or the object store.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ckpt.checkpoints.paths import RelPath
    from ckpt.objstore.ids import ObjectId

Scope = Literal["tree", "paths"]
SCOPES: tuple[Scope, ...] = ("tree", "paths")
OID_SIZE = 32
ID_PREFIX = "ckpt-"
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_ID_RANDOM_CHARS = 8
_EVENT_RESERVED = frozenset({"type", "at", "session"})


# -- time ---------------------------------------------------------------------------------

def format_time(dt: datetime) -> str:
    """`2026-11-29T16:17:02.123Z`: UTC, milliseconds (truncated), always the `Z` suffix."""
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"time must be timezone-aware: {dt.isoformat()}")
    u = dt.astimezone(UTC)
    return (f"{u.year:04d}-{u.month:02d}-{u.day:02d}T{u.hour:02d}:{u.minute:02d}:"
            f"{u.second:02d}.{u.microsecond // 1000:03d}Z")


def parse_time(text: str) -> datetime:
    """Parse an ISO 8601 time with a zone (`Z` or an offset) into an aware UTC datetime."""
    try:
        dt = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise ValueError(f"not an ISO 8601 time: {text!r}") from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"time has no timezone: {text!r}")
    return dt.astimezone(UTC)


def _utc(name: str, dt: object) -> datetime:
    if not isinstance(dt, datetime):
        raise TypeError(f"{name} must be a datetime, not {type(dt).__name__}")
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware: {dt.isoformat()}")
    return dt.astimezone(UTC)


# -- ids ----------------------------------------------------------------------------------

def new_checkpoint_id(now_ms: int, rng: random.Random) -> str:
    """`ckpt-{unix ms, 13 digits}-{8 base36 chars}`.

    Ids sort (as strings) by creation time to the millisecond: the time is zero-padded to 13
    digits, which every time from 1970 to the year 2286 fills without padding anyway. Ids made
    in the same millisecond are ordered by their random part, not by creation.
    """
    if isinstance(now_ms, bool) or not isinstance(now_ms, int) or now_ms < 0:
        raise ValueError(f"now_ms must be a non-negative integer, not {now_ms!r}")
    suffix = "".join(rng.choice(_BASE36) for _ in range(_ID_RANDOM_CHARS))
    return f"{ID_PREFIX}{now_ms:013d}-{suffix}"


# -- value checks -------------------------------------------------------------------------

def _check_text(name: str, value: object, *, optional: bool = False) -> None:
    if type(value) is str:
        if value.isascii():
            return
    elif value is None and optional:
        return
    elif not isinstance(value, str):
        kind = "a string or None" if optional else "a string"
        raise TypeError(f"{name} must be {kind}, not {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{name} is not valid Unicode text (lone surrogate): {value!r}") from None


def _check_path(name: str, value: object) -> bytes:
    if not isinstance(value, bytes):
        raise TypeError(f"{name} must be bytes, not {type(value).__name__}")
    if not value or b"\0" in value:
        raise ValueError(f"{name} must be non-empty bytes without NUL: {value!r}")
    return value


class _NotJson(Exception):
    """Raised inside `_freeze`; `keys` collects the path to the bad value on the way out."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.keys: list[str | int] = []


def _freeze(value: object) -> Any:
    # Exact-type checks first: this runs for every value of every record the catalog loads.
    if type(value) is str:
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise _NotJson(f"is not valid Unicode text: {value!r}") from None
        return value
    if value is None or type(value) is int or type(value) is bool:
        return value
    if isinstance(value, Mapping):
        frozen: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotJson(f"has a non-string key {key!r}")
            try:
                _freeze(key)
                frozen[key] = _freeze(item)
            except _NotJson as exc:
                exc.keys.append(key)
                raise
        return MappingProxyType(frozen)
    if type(value) is list or type(value) is tuple:
        items = []
        for i, item in enumerate(value):
            try:
                items.append(_freeze(item))
            except _NotJson as exc:
                exc.keys.append(i)
                raise
        return tuple(items)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _NotJson(f"is not JSON-serializable: {value!r} (not finite)")
        return value
    if isinstance(value, (str, int)):  # subclasses (enum.StrEnum, IntEnum): plain values
        return _freeze(str(value) if isinstance(value, str) else int(value))
    if isinstance(value, (list, tuple)):
        return _freeze(tuple(value))
    raise _NotJson(f"is not JSON-serializable: {type(value).__name__}")


def _thaw_json(value: Any) -> Any:
    """A fresh plain copy (dict/list) of data made by `_freeze`."""
    if isinstance(value, Mapping):
        return {key: _thaw_json(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw_json(item) for item in value]
    return value


def _frozen_mapping(name: str, value: object) -> Mapping[str, Any]:
    """Check that `value` is a JSON object and return a deep read-only copy.

    Objects become read-only mappings (str keys), arrays tuples; floats must be finite (JSON
    has no NaN), text must encode as UTF-8. The ValueError names the offending key path.
    """
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a mapping, not {type(value).__name__}")
    try:
        frozen: Mapping[str, Any] = _freeze(value)
    except _NotJson as exc:
        where = name + "".join(f"[{key!r}]" for key in reversed(exc.keys))
        raise ValueError(f"{where} {exc.problem}") from None
    return frozen


_COUNTS = ("files", "bytes", "new_objects", "new_bytes", "skipped", "duration_ms", "hashed")


# -- records ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CheckpointStats:
    """What a checkpoint cost. `hashed` (files read this time) is not part of the JSON."""

    files: int
    bytes: int
    new_objects: int
    new_bytes: int
    skipped: int
    duration_ms: int
    hashed: int = 0

    def __post_init__(self) -> None:
        for name in _COUNTS:
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise TypeError(f"stats.{name} must be an int, not {type(value).__name__}")
                if value < 0:
                    raise ValueError(f"stats.{name} must be >= 0, not {value}")

    def to_json(self) -> dict[str, Any]:
        return {"files": self.files, "bytes": self.bytes, "new_objects": self.new_objects,
                "new_bytes": self.new_bytes, "skipped": self.skipped,
                "duration_ms": self.duration_ms}


@dataclass(frozen=True, slots=True)
class SkippedPath:
    """A path a checkpoint did not capture; restore must never delete it."""

    path: RelPath
    reason: str  # "too-large", "unreadable", "special", "changed"

    def __post_init__(self) -> None:
        _check_path("skipped path", self.path)
        _check_text("skipped reason", self.reason)
        if not self.reason or "\0" in self.reason:
            raise ValueError(f"skipped reason must be non-empty text without NUL: "
                             f"{self.reason!r}")


@dataclass(frozen=True, slots=True)
class CheckpointRecord:
    """One checkpoint. Equal records compare equal; hashing ignores `metadata`.

    `created_at` is normalized to UTC (a naive datetime is refused); `metadata` is checked to
    be JSON data and kept as a deep read-only copy (`to_json` returns fresh plain dicts);
    `skipped` and `paths` become tuples. `root`, `skipped` and `paths` are not in the JSON.
    """

    id: str
    label: str | None
    reason: str | None
    turn_id: str | None
    message_id: str | None
    tool_call_id: str | None
    summary: str | None
    metadata: Mapping[str, Any] = field(hash=False)
    session: str
    scope: Scope
    parent: str | None
    tree: ObjectId
    created_at: datetime
    stats: CheckpointStats
    root: str
    skipped: tuple[SkippedPath, ...] = ()
    paths: tuple[RelPath, ...] = ()  # scope "paths": the covered paths
    # scope "paths": ancestors of tombstoned paths that did not exist when it was taken
    absent_parents: tuple[RelPath, ...] = ()

    def __post_init__(self) -> None:
        _check_text("id", self.id)
        if not self.id:
            raise ValueError("checkpoint id must not be empty")
        for name in ("label", "reason", "turn_id", "message_id", "tool_call_id", "summary",
                     "parent"):
            _check_text(name, getattr(self, name), optional=True)
        _check_text("session", self.session)
        if self.scope not in SCOPES:
            raise ValueError(f"scope must be 'tree' or 'paths', not {self.scope!r}")
        if not isinstance(self.tree, bytes) or len(self.tree) != OID_SIZE:
            raise ValueError(f"tree must be a {OID_SIZE}-byte object id, not {self.tree!r}")
        if not isinstance(self.stats, CheckpointStats):
            raise TypeError(f"stats must be CheckpointStats, not {type(self.stats).__name__}")
        if not isinstance(self.root, str):  # may hold surrogateescape'd bytes: os.fsdecode
            raise TypeError(f"root must be a string, not {type(self.root).__name__}")
        object.__setattr__(self, "created_at", _utc("created_at", self.created_at))
        object.__setattr__(self, "metadata", _frozen_mapping("metadata", self.metadata))
        skipped = tuple(self.skipped)
        for item in skipped:
            if not isinstance(item, SkippedPath):
                raise TypeError(f"skipped must hold SkippedPath, not {type(item).__name__}")
        object.__setattr__(self, "skipped", skipped)
        object.__setattr__(self, "paths", tuple(_check_path("path", p) for p in self.paths))
        object.__setattr__(self, "absent_parents",
                           tuple(_check_path("absent parent", p) for p in self.absent_parents))

    def to_json(self) -> dict[str, Any]:
        """The record as docs/DESIGN.md shows it, keys in that order; a fresh plain dict."""
        return {
            "id": self.id,
            "label": self.label,
            "reason": self.reason,
            "turn_id": self.turn_id,
            "message_id": self.message_id,
            "tool_call_id": self.tool_call_id,
            "summary": self.summary,
            "metadata": _thaw_json(self.metadata),
            "session": self.session,
            "scope": self.scope,
            "parent": self.parent,
            "tree": self.tree.hex(),
            "created_at": format_time(self.created_at),
            "stats": self.stats.to_json(),
        }


@dataclass(frozen=True, slots=True)
class Event:
    """Something that happened to a session (`checkpoint:create`, `:restore`, `:prune`).

    `data` holds the event's own fields (JSON data, frozen like record metadata); it must not
    use the keys `type`, `at` or `session`, which `to_json` puts first.
    """

    type: str
    at: datetime
    session: str
    data: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        _check_text("event type", self.type)
        if not self.type:
            raise ValueError("event type must not be empty")
        _check_text("event session", self.session)
        object.__setattr__(self, "at", _utc("event time", self.at))
        data = _frozen_mapping("event data", self.data)
        clash = _EVENT_RESERVED.intersection(data)
        if clash:
            raise ValueError(f"event data must not use the reserved key(s) {sorted(clash)}")
        object.__setattr__(self, "data", data)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "at": format_time(self.at),
                               "session": self.session}
        out.update(_thaw_json(self.data))
        return out
