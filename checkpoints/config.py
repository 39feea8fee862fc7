"""Store settings: the `StoreConfig` record and its file, `<store>/config.toml`.

Owns the setting names, their defaults, types and ranges, parsing a value typed by a user
(`set_config_value`), and reading/writing the TOML file (read with `tomllib`, written by hand
so there is no extra dependency). A `StoreConfig` is validated when it is built, so one that
exists is valid. Every problem is a `ConfigError` naming the key (and the file when it comes
from one). This module does not look at environment variables or command-line options (the
CLI layers those on top) and never prints.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ckpt.checkpoints.errors import ConfigError
from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.blocks import DEFAULT_BLOCK_SIZE, MAX_BLOCK_SIZE
from ckpt.objstore.codec import MAX_DELTA_DEPTH
from ckpt.objstore.delta import DEFAULT_DELTA_CHAIN

CONFIG_FILE = "config.toml"
FSYNC_MODES = ("none", "batch", "full")
SERVER_MODES = ("auto", "on", "off")
MAX_COMPRESSION_LEVEL = 19
MAX_THREADS = 1024
# TOML integers are 64-bit signed; a larger value would be unreadable by other TOML tools.
_MAX_TOML_INT = 2**63 - 1


class _Invalid(Exception):
    """A field check failed; turned into ConfigError once the key is known."""


def _check_int(low: int, high: int = _MAX_TOML_INT) -> Callable[[object], object]:
    def check(value: object) -> object:
        # bool is an int subclass, but `threads = true` is a mistake, not 1.
        if not isinstance(value, int) or isinstance(value, bool):
            raise _Invalid(f"must be an integer, not {type(value).__name__}")
        if not low <= value <= high:
            raise _Invalid(f"must be between {low} and {high}, not {value}")
        return value
    return check


def _check_bool(value: object) -> object:
    if not isinstance(value, bool):
        raise _Invalid(f"must be true or false, not {type(value).__name__}")
    return value


def _check_choice(choices: tuple[str, ...]) -> Callable[[object], object]:
    def check(value: object) -> object:
        if not isinstance(value, str):
            raise _Invalid(f"must be a string, not {type(value).__name__}")
        if value not in choices:
            raise _Invalid(f"must be one of {', '.join(choices)}, not {value!r}")
        return value
    return check


def _check_seconds(value: object) -> object:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise _Invalid(f"must be a number of seconds, not {type(value).__name__}")
    if not (math.isfinite(value) and value >= 0):
        raise _Invalid(f"must be a finite number >= 0, not {value}")
    return float(value)


def _check_patterns(value: object) -> object:
    # A str is iterable too; accepting it would turn "*.log" into five one-letter patterns.
    if not isinstance(value, (tuple, list)):
        raise _Invalid(f"must be a list of strings, not {type(value).__name__}")
    for pattern in value:
        if not isinstance(pattern, str):
            raise _Invalid(f"must be a list of strings, found {type(pattern).__name__}")
        # Patterns are lines of an ignore file, so a line break cannot be part of one; text
        # that cannot be UTF-8 (surrogate-escaped bytes) cannot be written to the file.
        if any(c in pattern for c in "\n\r\0"):
            raise _Invalid(f"pattern {pattern!r} contains a line break or NUL")
        try:
            pattern.encode("utf-8")
        except UnicodeEncodeError:
            raise _Invalid(f"pattern {pattern!r} is not valid Unicode text") from None
    return tuple(value)


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """Settings of one store. Building one with a bad value raises ConfigError."""

    compression_level: int = 1  # zstd level 1..19; 0 stores blobs raw (1: the cheapest CPU)
    threads: int = 0  # hashing/compression workers; 0 = one per CPU
    fsync: str = "batch"  # "none" | "batch" (once per checkpoint) | "full" (every object)
    max_file_size: int = 100 * 1024 * 1024  # larger files are skipped and recorded; 0 = off
    retention_cap: int = 0  # checkpoints kept per session, oldest evicted on create; 0 = off
    extra_ignore: tuple[str, ...] = ()  # gitignore-style patterns on top of the ignore files
    use_gitignore: bool = True  # honour .gitignore files (.ckptignore always applies)
    gc_grace_seconds: int = 3600  # gc keeps objects younger than this (racing writers)
    lock_timeout: float = 10.0  # seconds to wait for a busy store before StoreBusy
    server: str = "auto"  # "auto"/"on": a resident server started on demand; "off": never
    server_idle: float = 600.0  # seconds without a request before the server exits; 0 = never
    server_verify: float = 3600.0  # seconds between the idle server's verification walks; 0 = never
    dictionaries: bool = True  # small objects compressed with a zstd dictionary trained here
    # A changed file may be stored as a delta on its previous version (objstore/delta.py), in
    # chains at most `delta_chain` deep (0: none); both as the store is opened.
    deltas: bool = True
    delta_chain: int = DEFAULT_DELTA_CHAIN
    # A snapshot's new small files are stored together in blocks of about this many bytes
    # (objstore/blocks.py); 0: one object each. As the store is opened.
    block_size: int = DEFAULT_BLOCK_SIZE

    def __post_init__(self) -> None:
        for name, (check, _) in _FIELDS.items():
            value = getattr(self, name)
            try:
                normalized = check(value)
            except _Invalid as exc:
                raise ConfigError(name, str(exc)) from None
            if normalized is not value:
                # Frozen: lists become tuples, int seconds become float, so that equal
                # settings compare and hash equal however they were spelled.
                object.__setattr__(self, name, normalized)

    def effective_threads(self) -> int:
        """`threads`, with 0 resolved to the number of CPUs."""
        return self.threads or os.cpu_count() or 1


CONFIG_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(StoreConfig))


def read_config(store_dir: str) -> StoreConfig:
    """Read `<store_dir>/config.toml`; a missing file means all defaults.

    Keys missing from the file take their defaults. An unknown key, a wrong type or an
    out-of-range value raises ConfigError naming the key and the file; unparsable TOML (or an
    unreadable file) raises ConfigError naming the file.
    """
    path = os.path.join(store_dir, CONFIG_FILE)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return StoreConfig()
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(None, f"{path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(None, f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(None, f"cannot read {path}: {exc.strerror or exc}") from None
    for key in data:
        if key not in _FIELDS:
            raise ConfigError(key, f"unknown setting in {path} (known: {', '.join(CONFIG_KEYS)})")
    try:
        return StoreConfig(**data)
    except ConfigError as exc:
        raise ConfigError(exc.key, f"{exc.reason} (in {path})") from None


def write_config(store_dir: str, cfg: StoreConfig) -> None:
    """Write `cfg` to `<store_dir>/config.toml` atomically (temp file, fsync, rename).

    Every setting is written, defaults included, so the file documents what is in force.
    Always durable whatever `cfg.fsync` says: the file is tiny and rarely written.
    """
    write_atomically(os.path.join(store_dir, CONFIG_FILE), encode_config(cfg).encode("utf-8"),
                     fsync_file=True, fsync_dir=True, mode=0o644,
                     temp_prefix=f".{CONFIG_FILE}.tmp-")


def encode_config(cfg: StoreConfig) -> str:
    """The TOML text `write_config` writes: one `key = value` line per setting."""
    lines = [f"{key} = {_toml_value(getattr(cfg, key))}\n" for key in CONFIG_KEYS]
    return "# ckpt store settings. Unknown keys are an error.\n" + "".join(lines)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # finite (validated), always has "." or "e": a TOML float
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


# TOML basic strings forbid raw control characters: short escapes where TOML has one, else \uXXXX.
_TOML_ESCAPES = str.maketrans({chr(c): f"\\u{c:04X}" for c in [*range(0x20), 0x7F]} | {
    '"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"})


def _toml_string(text: str) -> str:
    return '"' + text.translate(_TOML_ESCAPES) + '"'


def get_config_value(cfg: StoreConfig, key: str) -> object:
    """The value of setting `key`; ConfigError for an unknown key."""
    if key not in _FIELDS:
        raise ConfigError(key, f"unknown setting (known: {', '.join(CONFIG_KEYS)})")
    return getattr(cfg, key)


def set_config_value(store_dir: str, key: str, text: str) -> StoreConfig:
    """Parse `text` as a value of `key`, validate it, write the file and return the result.

    Integers are decimal; `max_file_size` also takes a size such as `64M`, `1.5G`, `100KiB`
    (K/M/G/T and KiB/MiB/... are powers of 1024; KB/MB/GB/TB are powers of 1000). Booleans take
    true/false, yes/no, on/off, 1/0. `extra_ignore` takes comma-separated patterns (empty text
    clears it). Not safe against a concurrent writer of the same file (last write wins).
    """
    if key not in _FIELDS:
        raise ConfigError(key, f"unknown setting (known: {', '.join(CONFIG_KEYS)})")
    try:
        value = _FIELDS[key][1](text)
    except _Invalid as exc:
        raise ConfigError(key, str(exc)) from None
    cfg = dataclasses.replace(read_config(store_dir), **{key: value})
    write_config(store_dir, cfg)
    return cfg


def _parse_number(convert: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        try:
            return convert(text.strip())
        except ValueError:
            raise _Invalid(f"{text!r} is not {what}") from None
    return parse


# number, then an optional unit: K/M/G/T alone or with "iB" (binary), or with "B" (SI), or "B".
_SIZE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*(?:([kmgt])(ib|b)?|b)?", re.IGNORECASE)
_SIZE_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4}


def _parse_size(text: str) -> Any:
    """Bytes from `123`, `64M`, `1.5G`, `100KiB`, `10MB`."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise _Invalid(f"{text!r} is not a size (examples: 1048576, 64M, 1.5G, 100KiB)")
    number, unit, tail = match.groups()
    factor = 1
    if unit:
        # "M" and "MiB" mean 1024**2, as in git and most tools; "MB" spells out SI.
        base = 1000 if tail and tail.lower() == "b" else 1024
        factor = base ** _SIZE_POWERS[unit.lower()]
    from fractions import Fraction  # noqa: PLC0415 (rarely needed: kept off start-up)

    size = Fraction(number) * factor  # exact: "1.1G" must not pick up float rounding
    if size.denominator != 1:
        raise _Invalid(f"{text!r} is not a whole number of bytes")
    return int(size)


_BOOLS = {"true": True, "yes": True, "on": True, "1": True,
          "false": False, "no": False, "off": False, "0": False}


def _parse_bool(text: str) -> Any:
    if (value := _BOOLS.get(text.strip().lower())) is None:
        raise _Invalid(f"{text!r} is not a boolean (true/false, yes/no, on/off, 1/0)")
    return value


def _parse_patterns(text: str) -> Any:
    return tuple(p.strip() for p in text.split(",") if p.strip())


_INT = _parse_number(int, "an integer")
# Per setting: the check run when a StoreConfig is built, and the parser of user text.
_FIELDS: dict[str, tuple[Callable[[object], object], Callable[[str], Any]]] = {
    "compression_level": (_check_int(0, MAX_COMPRESSION_LEVEL), _INT),
    "threads": (_check_int(0, MAX_THREADS), _INT),
    "fsync": (_check_choice(FSYNC_MODES), lambda text: text.strip().lower()),
    "max_file_size": (_check_int(0), _parse_size),
    "retention_cap": (_check_int(0), _INT),
    "extra_ignore": (_check_patterns, _parse_patterns),
    "use_gitignore": (_check_bool, _parse_bool),
    "gc_grace_seconds": (_check_int(0), _INT),
    "lock_timeout": (_check_seconds, _parse_number(float, "a number of seconds")),
    "server": (_check_choice(SERVER_MODES), lambda text: text.strip().lower()),
    "server_idle": (_check_seconds, _parse_number(float, "a number of seconds")),
    "server_verify": (_check_seconds, _parse_number(float, "a number of seconds")),
    "dictionaries": (_check_bool, _parse_bool),
    "deltas": (_check_bool, _parse_bool),
    "delta_chain": (_check_int(0, MAX_DELTA_DEPTH), _INT),
    "block_size": (_check_int(0, MAX_BLOCK_SIZE), _parse_size),
}
assert set(_FIELDS) == set(CONFIG_KEYS), "every setting needs a check and a parser"
