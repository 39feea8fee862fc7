"""Refs: the names of checkpoints that people and scripts type, resolved to records.

    REF  := BASE ("~" N)?          N := [0-9]+
    BASE := "latest" | ID | a unique prefix of an ID

`latest` is the session's newest checkpoint on this root (what `Checkpoints.latest()` gives);
`X~N` is the checkpoint N steps before X in X's session's history on X's root, in history
order (created_at, then id), never by `parent` links, which a prune can break. Ids start with
`ckpt-`, so no id is ever read as `latest`, and no id holds a `~`.

Owns the grammar and its error messages; the lookups are the catalog's. No IO of its own.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ckpt.checkpoints.errors import UnknownCheckpoint

if TYPE_CHECKING:
    from ckpt.checkpoints.history.catalog import Catalog
    from ckpt.checkpoints.model import CheckpointRecord

LATEST = "latest"
_STEPS = re.compile(r"~([0-9]+)\Z")


def parse_ref(ref: str) -> tuple[str, int]:
    """(base, steps back): `latest~2` -> ("latest", 2), `ckpt-17` -> ("ckpt-17", 0)."""
    match = _STEPS.search(ref)
    if match is None:
        return ref, 0
    return ref[: match.start()], int(match.group(1))


def resolve_ref(catalog: Catalog, ref: str, *, session: str, root: str) -> CheckpointRecord:
    """The record `ref` names for `session` on `root`; UnknownCheckpoint (with a detail
    saying how far the timeline goes) when it names none, AmbiguousCheckpoint for a prefix
    that several ids start with."""
    base, steps = parse_ref(ref)
    if base == LATEST:
        record = catalog.latest(session=session, root=root)
        if record is None:
            raise UnknownCheckpoint(ref, f"session {session} has no checkpoint on {root}")
    elif not base:
        raise UnknownCheckpoint(ref)
    else:
        record = catalog.resolve(base)
    if not steps:
        return record
    found = catalog.steps_back(record, steps)
    if found is None:
        count = catalog.timeline_length(session=record.session, root=record.root)
        where = "latest" if base == LATEST else record.id
        raise UnknownCheckpoint(ref, f"{where} has {_before(catalog, record, count)} "
                                f"checkpoint(s) before it in session {record.session} "
                                f"({count} in all)")
    return found


def _before(catalog: Catalog, record: CheckpointRecord, count: int) -> int:
    """How many checkpoints precede `record` in its timeline of `count`."""
    return count - 1 - len(catalog.later_than(record))
