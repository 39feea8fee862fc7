"""The JSON Schemas (Draft 2020-12) of every `--json` output and every event, as package data.

One `NAME.json` file per output; `$id` is `https://ckpt.invalid/schemas/NAME.json` and the
files refer to one another by relative `$ref` (`record.json#/$defs/time`), so a validator or a
type generator given the whole folder resolves them offline. `USED_BY` says which command (and
option) prints each one; `ckpt schema` lists them and prints one.

Only reads the files: ckpt never validates its own output at run time (the tests do, with
`jsonschema`), so nothing here imports a validator.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

# Which invocation prints each schema: a command path, then the option that selects it when
# one command prints two shapes. The tests validate every `--json` output through this table.
USED_BY: dict[str, tuple[str, ...]] = {
    "record": ("create", "latest"),
    "list": ("list", "list --remote"),
    "show": ("show",),
    "diff": ("diff",),
    "diff-patch": ("diff --patch",),
    "restore": ("restore",),
    "undo": ("undo",),
    "recover": ("recover",),
    "prune": ("prune",),
    "forget": ("forget",),
    "gc": ("gc",),
    "fsck": ("fsck",),
    "fsck-remote": ("fsck --remote",),
    "gc-remote": ("gc --remote",),
    "prune-remote": ("prune --remote",),
    "push": ("push",),
    "pull": ("pull",),
    "remote-list": ("remote list",),
    "stats": ("stats",),
    "events": ("events",),
    "event": ("events --follow",),  # JSON Lines: one event a line; also each element of `events`
    "log": ("log",),
    "init": ("init",),
    "track": ("track", "untrack"),
    "cat": ("cat",),
    "config-get": ("config get", "config set"),
    "config-list": ("config list",),
    "bench": ("bench",),
    "schema-list": ("schema",),
    "server-status": ("server status", "server start"),
    "server-stop": ("server stop",),
}


class UnknownSchema(LookupError):
    """No shipped schema has this name."""


def names() -> tuple[str, ...]:
    """The names of the shipped schemas, sorted."""
    found = (entry.name for entry in resources.files(__name__).iterdir())
    return tuple(sorted(name[: -len(".json")] for name in found if name.endswith(".json")))


def text(name: str) -> str:
    """The schema `name` as the file holds it (UTF-8 JSON text)."""
    if name not in names():
        raise UnknownSchema(f"no schema named {name!r}; one of: {', '.join(names())}")
    return resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8")


def load(name: str) -> dict[str, Any]:
    """The schema `name` as a fresh dict (UnknownSchema, a LookupError, for another name)."""
    schema: dict[str, Any] = json.loads(text(name))
    return schema
