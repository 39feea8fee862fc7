"""Pure prune decisions: which checkpoints a prune removes. No IO, no clock reads."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta

from ckpt.checkpoints.model import CheckpointRecord


def select_prunable(
    records: Sequence[CheckpointRecord],
    *,
    now: datetime,
    reason: str | None = None,
    turn_id: str | None = None,
    keep_latest: int | None = None,
    older_than: timedelta | None = None,
) -> list[CheckpointRecord]:
    """Records (oldest first in, oldest first out) that match every filter given.

    `keep_latest=N` spares the newest N of the matching records; `older_than` spares those
    younger than that age. With no filter at all nothing is selected: pruning everything by
    accident must not be one flag away.
    """
    if reason is None and turn_id is None and keep_latest is None and older_than is None:
        return []
    matching = [
        r for r in records
        if (reason is None or r.reason == reason) and (turn_id is None or r.turn_id == turn_id)
    ]
    if keep_latest is not None:
        if keep_latest < 0:
            raise ValueError("keep_latest must be >= 0")
        matching = matching[: max(0, len(matching) - keep_latest)]
    if older_than is not None:
        cutoff = now - older_than
        matching = [r for r in matching if r.created_at < cutoff]
    return matching


def select_over_cap(records: Sequence[CheckpointRecord], cap: int, *,
                    spare: Collection[str] = ()) -> list[CheckpointRecord]:
    """The oldest records beyond a per-session cap (0 = no cap), never one whose id is in
    `spare` (the target of the restore whose pre-restore save is being added): the next
    oldest goes in its place."""
    if cap <= 0 or len(records) <= cap:
        return []
    return [r for r in records if r.id not in spare][: len(records) - cap]
