"""What the remote operations return: frozen records, no behaviour."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class UploadReport:
    objects: int  # objects uploaded (closure included)
    packs: int  # packs written (each with its index)
    bytes_uploaded: int  # pack bytes PUT (indexes and refs not counted)
    skipped_present: int  # asked-for objects (closure included) the remote already had


@dataclass(frozen=True, slots=True)
class FetchReport:
    objects: int  # objects put into the local store (closure included)
    bytes_fetched: int  # bytes of the ranged GETs
    requests: int  # ranged GETs sent


@dataclass(frozen=True, slots=True)
class RemoteCheckReport:
    packs: int  # indexed packs
    objects: int  # distinct objects the indexes name
    records: int  # files under records/
    problems: tuple[str, ...]  # one line each; empty when the remote is sound


@dataclass(frozen=True, slots=True)
class RemoteGcReport:
    packs_deleted: int  # packs (with their index) removed: no live object, or no index
    packs_rewritten: int  # packs more than half dead, replaced by a pack of their live objects
    bytes_freed: int  # pack bytes removed, less the bytes of the rewritten packs
    held_back: int  # packs that would go but are younger than the grace period
