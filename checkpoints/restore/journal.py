"""The restore journal: what a restore in progress must achieve, so a killed one is completed.

A restore journals its intent before it touches the workspace and clears it after the last
change. Completing is re-planning from the current state against the journaled target, which
is idempotent: whatever was applied before the kill, the next command (or `ckpt recover`) ends
with exactly the target. One intent per workspace root.

The intent lives in the catalog (`Catalog.journal_restore`), committed in the same transaction
as the pre-restore checkpoint and cleared in the same one as the restore's event: one fsync
each. This module holds its encoding, and the reading of the file (`roots/<key>/journal`) that
ckpt before catalog schema 2 wrote instead, so that a restore such a version left half done
is still completed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ckpt.checkpoints.errors import CatalogCorrupt
from ckpt.checkpoints.paths import RelPath, parse_relpath
from ckpt.objstore import ObjectId
from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.codec import pack_data, unpack_data
from ckpt.objstore.errors import CorruptObject
from ckpt.objstore.ids import check_oid

_VERSION = 1


@dataclass(frozen=True, slots=True)
class RestoreIntent:
    checkpoint: str  # the target record's id
    tree: ObjectId
    scope: str
    covered: tuple[RelPath, ...]
    absent_parents: tuple[RelPath, ...]
    keep: tuple[RelPath, ...]
    only: tuple[RelPath, ...] | None
    pre_restore: str | None
    record_event: bool
    discard_later: bool
    staging: bytes  # staging directory to clean up


def encode_intent(intent: RestoreIntent) -> bytes:
    payload: list[Any] = [
        _VERSION, intent.checkpoint, intent.tree, intent.scope, list(intent.covered),
        list(intent.absent_parents), list(intent.keep),
        None if intent.only is None else list(intent.only),
        intent.pre_restore, intent.record_event, intent.discard_later, intent.staging,
    ]
    return pack_data(payload)


def write_intent(path: str, intent: RestoreIntent) -> None:
    """Write a journal file as ckpt before catalog schema 2 did (atomically, fsynced)."""
    write_atomically(path, encode_intent(intent), fsync_file=True, fsync_dir=True,
                     temp_prefix=f"{os.path.basename(path)}.tmp-")


def read_intent(path: str) -> RestoreIntent | None:
    """The intent of a journal file (see the module docstring); None if there is none."""
    try:
        with open(path, "rb") as stream:
            data = stream.read()
    except FileNotFoundError:
        return None
    return decode_intent(data, path)


def decode_intent(data: bytes, where: str, root: bytes | None = None) -> RestoreIntent:
    """Parse an encoded intent; CatalogCorrupt naming `where` (the file or catalog holding
    it), and the `root` it is for when given, if it does not parse."""
    try:
        fields = unpack_data(data, what="restore journal")
        (version, checkpoint, tree, scope, covered, absent, keep, only, pre, event, discard,
         staging) = fields
        if version != _VERSION or scope not in ("tree", "paths"):
            raise ValueError("unknown journal version or scope")
        return RestoreIntent(
            checkpoint=str(checkpoint),
            tree=check_oid(tree),
            scope=scope,
            covered=tuple(parse_relpath(p) for p in covered),
            absent_parents=tuple(parse_relpath(p) for p in absent),
            keep=tuple(parse_relpath(p) for p in keep),
            only=None if only is None else tuple(parse_relpath(p) for p in only),
            pre_restore=None if pre is None else str(pre),
            record_event=bool(event),
            discard_later=bool(discard),
            staging=bytes(staging),
        )
    except (CorruptObject, ValueError, TypeError) as exc:
        whose = "" if root is None else f" of {os.fsdecode(root)}"
        raise CatalogCorrupt(where, f"restore journal{whose} is damaged: {exc}") from None


def clear_intent(path: str) -> None:
    """Remove a journal file (see the module docstring), if there is one."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
