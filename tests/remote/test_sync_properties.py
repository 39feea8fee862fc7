"""Properties of the remote bookkeeping that need no server (seeded hypothesis): a session's
head merged by two pushers in any order loses no one's checkpoints and orders them by time;
remotes.toml and the origins file round-trip any names and URLs, and hold no credentials."""

from __future__ import annotations

import itertools
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from ckpt.checkpoints import CheckpointRecord, CheckpointStats, RemoteInfo
from ckpt.checkpoints.remote.config import (
    Origin,
    Pulled,
    UnknownRemote,
    choose_remote,
    hollow_ids,
    read_origins,
    read_remotes,
    update_origins,
    write_remotes,
)
from ckpt.checkpoints.remote.remote import _merge_head
from ckpt.objstore.codec import unpack_data

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def record(checkpoint_id: str, ms: int) -> CheckpointRecord:
    return CheckpointRecord(
        id=checkpoint_id, label=None, reason=None, turn_id=None, message_id=None,
        tool_call_id=None, summary=None, metadata={}, session="shared", scope="tree",
        parent=None, tree=bytes(32), created_at=EPOCH + timedelta(milliseconds=ms),  # type: ignore[arg-type]
        stats=CheckpointStats(0, 0, 0, 0, 0, 0), root="/w")


pushes = st.lists(st.tuples(st.integers(0, 10**6), st.booleans()), max_size=12, unique_by=lambda t: t[0])


@seed(2501)
@settings(max_examples=60, deadline=None)
@given(pushes, st.randoms(use_true_random=False))
def test_two_pushers_merging_a_head_in_any_order_keep_everything_by_time(
        events: list[tuple[int, bool]], rng: object) -> None:
    made = [record(f"ckpt-{ms:013d}-{'a' if mine else 'c'}", ms) for ms, mine in events]
    a = [r for r in made if r.id.endswith("a")]
    c = [r for r in made if r.id.endswith("c")]
    batches = [b for b in (a[: len(a) // 2], c, a[len(a) // 2:]) if b]
    heads = set()
    for order in itertools.permutations(batches):
        head: bytes | None = None
        for batch in order:
            head = _merge_head(head, batch)
        heads.add(head)
    if not batches:
        return
    (only,) = heads  # the same bytes whoever pushed first
    assert only is not None
    value = unpack_data(only)
    ordered = sorted(made, key=lambda r: (r.created_at, r.id))
    assert value["ids"] == [r.id for r in ordered]


def test_a_damaged_head_is_rebuilt_from_what_is_pushed() -> None:
    head = _merge_head(b"\xc1not msgpack", [record("ckpt-1", 5)])
    assert unpack_data(head)["ids"] == ["ckpt-1"]


names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,20}", fullmatch=True)
text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)


@seed(2502)
@settings(max_examples=60, deadline=None)
@given(st.dictionaries(names, st.tuples(text, st.none() | text, st.none() | text), max_size=5))
def test_remotes_toml_round_trips_any_names_and_urls(
        tmp_path_factory: pytest.TempPathFactory,
        remotes: dict[str, tuple[str, str | None, str | None]]) -> None:
    store = tmp_path_factory.mktemp("store")
    infos = {n: RemoteInfo(n, url, endpoint, region) for n, (url, endpoint, region) in remotes.items()}
    write_remotes(str(store), infos)
    assert read_remotes(str(store)) == infos
    if len(infos) == 1:
        assert choose_remote(str(store), None) == next(iter(infos.values()))
    else:
        with pytest.raises(UnknownRemote):
            choose_remote(str(store), None)


def test_origins_follow_pull_and_hydrate(tmp_path: Path) -> None:
    store = str(tmp_path)
    assert read_origins(store) == {}
    update_origins(store, {"a": Pulled("origin", Origin.HOLLOW), "b": Pulled("origin", Origin.HOLLOW)})
    assert hollow_ids(store) == {"a", "b"}
    update_origins(store, {"a": Pulled("origin", Origin.LOCAL), "b": None})
    assert hollow_ids(store) == set()
    assert read_origins(store) == {"a": Pulled("origin", Origin.LOCAL)}
    # Another process's change of the same size within one tick of a coarse mtime (it
    # replaces the file, as update_origins does) is read all the same.
    path = tmp_path / "remotes" / "origins"
    before = path.stat()
    other = tmp_path / "remotes" / "origins.other"
    other.write_bytes(path.read_bytes().replace(b"a origin", b"c origin"))
    os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(other, path)
    assert path.stat().st_size == before.st_size
    assert read_origins(store) == {"c": Pulled("origin", Origin.LOCAL)}
