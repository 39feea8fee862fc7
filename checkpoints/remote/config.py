"""Which remotes a store knows, and what it remembers of checkpoints it got from one.

Owns two small files of a store, both read without importing the remote code:

    <store>/remotes.toml      [remote.NAME] url = "s3://bucket/prefix", endpoint = "http://...",
                              region = "..." (optional). Never credentials: the S3 client reads
                              them from the standard AWS environment variables and files.
    <store>/remotes/origins   one line per checkpoint pulled from a remote: "ID REMOTE STATE",
                              STATE `hollow` (its objects are on the remote only, perhaps in
                              part here) or `local` (every object it needs is here). gc keeps
                              no hollow checkpoint's objects (the remote has them) and never
                              fails for their absence; fsck reports them as remote-only.

Also the per-remote cache directory `<store>/remotes/<NAME>/` (the object layer keeps the
remote's indexes and record files there), and in it the empty file `pushed` once a push from
this store to that remote has completed (`mark_pushed`, `has_pushed`: the resident server
leaves a store's first push to a remote, its whole history, to the client). Must not import
`ckpt.objstore.remote`, open the catalog or touch a workspace.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ckpt.checkpoints.errors import CheckpointError, ConfigError, display_text
from ckpt.checkpoints.lock import RootLock
from ckpt.objstore.atomicfile import write_atomically

REMOTES_FILE = "remotes.toml"
REMOTES_DIR = "remotes"
ORIGINS_FILE = "origins"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_KEYS = frozenset({"url", "endpoint", "region"})


class UnknownRemote(CheckpointError, KeyError):
    """No remote of this name (or, `name` None, none is configured / which one is unclear)."""

    def __init__(self, name: str | None, known: Iterable[str] = ()) -> None:
        super().__init__(name)
        self.name = name
        self.known = tuple(known)

    def __str__(self) -> str:
        if self.name is None and not self.known:
            return "no remote is configured"
        if self.name is None:
            return (f"several remotes are configured ({', '.join(map(display_text, self.known))}):"
                    " name one")
        return f"unknown remote: {display_text(self.name)}"


class RemoteExists(CheckpointError, ValueError):
    """`remote_add` of a name already configured."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"remote {display_text(self.name)} already exists"


class BadRemote(CheckpointError, ValueError):
    """A remote URL (or endpoint) that does not parse."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(url, reason)
        self.url = url
        self.reason = reason

    def __str__(self) -> str:
        return f"bad remote URL {display_text(self.url)}: {display_text(self.reason)}"


class RemoteDataDamaged(CheckpointError):
    """A file on the remote that does not decode (a record): `key` names it."""

    def __init__(self, remote: str, key: str, reason: str) -> None:
        super().__init__(remote, key, reason)
        self.remote = remote
        self.key = key
        self.reason = reason

    def __str__(self) -> str:
        return (f"damaged remote data: {display_text(self.key)} on {display_text(self.remote)}: "
                f"{display_text(self.reason)}")


@dataclass(frozen=True, slots=True)
class RemoteInfo:
    """One configured remote: its name, URL and the S3 endpoint/region given for it."""

    name: str
    url: str
    endpoint: str | None = None
    region: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "url": self.url, "endpoint": self.endpoint,
                "region": self.region}


def parse_remote_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise ValueError(f"bad remote name {display_text(name)}: use letters, digits, '.', "
                         "'_' and '-' (at most 64, not starting with '.' or '-')")
    return name


def read_remotes(store_dir: str) -> dict[str, RemoteInfo]:
    """The configured remotes by name ({} without a remotes.toml)."""
    path = os.path.join(store_dir, REMOTES_FILE)
    try:
        with open(path, "rb") as stream:
            data = tomllib.load(stream)
    except FileNotFoundError:
        return {}
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(None, f"{exc} (in {path})") from None
    table = data.get("remote", {})
    if not isinstance(table, dict):
        raise ConfigError(None, f"[remote] is not a table (in {path})")
    found: dict[str, RemoteInfo] = {}
    for name, entry in table.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("url"), str) \
                or not set(entry) <= _KEYS \
                or any(not isinstance(v, str) for v in entry.values()) \
                or not _NAME.fullmatch(name):
            raise ConfigError(None, f"remote {display_text(name)}: expected url and optional "
                              f"endpoint/region strings (in {path})")
        found[name] = RemoteInfo(name, entry["url"], entry.get("endpoint"), entry.get("region"))
    return found


def has_remotes(store_dir: str) -> bool:
    """Whether the store has a remotes file (one stat: the check local commands pay)."""
    return os.path.exists(os.path.join(store_dir, REMOTES_FILE))


def _toml_string(value: str) -> str:
    """A TOML basic string: `\\`, `"` and control characters escaped, the rest as UTF-8
    (JSON's escapes of astral characters as surrogate pairs are not TOML)."""
    out = []
    for char in value:
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def write_remotes(store_dir: str, remotes: Mapping[str, RemoteInfo]) -> None:
    lines = ["# ckpt remotes: no credentials here (the S3 client reads AWS_* and ~/.aws)\n"]
    for name in sorted(remotes):
        info = remotes[name]
        lines.append(f"\n[remote.{_toml_string(name)}]\nurl = {_toml_string(info.url)}\n")
        if info.endpoint is not None:
            lines.append(f"endpoint = {_toml_string(info.endpoint)}\n")
        if info.region is not None:
            lines.append(f"region = {_toml_string(info.region)}\n")
    write_atomically(os.path.join(store_dir, REMOTES_FILE), "".join(lines).encode("utf-8"),
                     fsync_file=True, fsync_dir=True, temp_prefix=".remotes.toml.tmp-")


def choose_remote(store_dir: str, name: str | None) -> RemoteInfo:
    """Remote `name`, or the only one when None (UnknownRemote otherwise)."""
    remotes = read_remotes(store_dir)
    if name is None:
        if len(remotes) == 1:
            return next(iter(remotes.values()))
        raise UnknownRemote(None, sorted(remotes))
    if name not in remotes:
        raise UnknownRemote(name, sorted(remotes))
    return remotes[name]


def cache_dir(store_dir: str, name: str) -> str:
    path = os.path.join(store_dir, REMOTES_DIR, name)
    os.makedirs(path, exist_ok=True)
    return path


_PUSHED = "pushed"


def mark_pushed(store_dir: str, name: str) -> None:
    """Note that a push from this store to remote `name` has completed."""
    with open(os.path.join(cache_dir(store_dir, name), _PUSHED), "ab"):
        pass


def has_pushed(store_dir: str, name: str) -> bool:
    """Whether a push from this store to remote `name` has completed (`mark_pushed`)."""
    return os.path.exists(os.path.join(store_dir, REMOTES_DIR, name, _PUSHED))


def remote_names(store_dir: str) -> list[str]:
    """The configured remotes' names, sorted (ConfigError if remotes.toml does not read)."""
    return sorted(read_remotes(store_dir))


# -- origins: checkpoints pulled from a remote ------------------------------------------------

class Origin(Enum):
    HOLLOW = "hollow"  # objects on the remote only (or some here): fetched when needed
    LOCAL = "local"  # every object it needs is in the local store


@dataclass(frozen=True, slots=True)
class Pulled:
    remote: str
    state: Origin


_origins_cache: dict[str, tuple[tuple[int, int, int, int], dict[str, Pulled]]] = {}


def read_origins(store_dir: str) -> dict[str, Pulled]:
    """Checkpoint id -> where it was pulled from and whether it is hollow ({} for none).
    Cached by the file's identity and times (`list` asks once per checkpoint): each
    update replaces the file, so a new one has another inode even when its size and
    coarse mtime are the old one's (a resident server reads it across many commands)."""
    path = os.path.join(store_dir, REMOTES_DIR, ORIGINS_FILE)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return {}
    key = (st.st_ino, st.st_mtime_ns, st.st_ctime_ns, st.st_size)
    cached = _origins_cache.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    found: dict[str, Pulled] = {}
    with open(path, encoding="utf-8") as stream:
        for line in stream:
            parts = line.split()
            if len(parts) == 3 and parts[2] in ("hollow", "local"):
                found[parts[0]] = Pulled(parts[1], Origin(parts[2]))
    _origins_cache[path] = (key, found)
    return found


def hollow_ids(store_dir: str) -> set[str]:
    return {i for i, p in read_origins(store_dir).items() if p.state is Origin.HOLLOW}


def update_origins(store_dir: str, changes: Mapping[str, Pulled | None]) -> None:
    """Set (or, None, forget) the origin of these checkpoints, under the origins lock."""
    if not changes:
        return
    folder = os.path.join(store_dir, REMOTES_DIR)
    os.makedirs(folder, exist_ok=True)
    with RootLock(os.path.join(folder, "origins.lock"), timeout=30.0, purpose="origins"):
        _origins_cache.pop(os.path.join(folder, ORIGINS_FILE), None)
        current = dict(read_origins(store_dir))
        for checkpoint_id, pulled in changes.items():
            if pulled is None:
                current.pop(checkpoint_id, None)
            else:
                current[checkpoint_id] = pulled
        text = "".join(f"{i} {p.remote} {p.state.value}\n" for i, p in sorted(current.items()))
        write_atomically(os.path.join(folder, ORIGINS_FILE), text.encode("utf-8"),
                         fsync_file=True, fsync_dir=True, temp_prefix=".origins.tmp-")
        _origins_cache.pop(os.path.join(folder, ORIGINS_FILE), None)
