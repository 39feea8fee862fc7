"""Records, events, ids and times (checkpoints.model), and the messages of checkpoints.errors."""

from __future__ import annotations

import json
import pickle
import random
from dataclasses import FrozenInstanceError, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.checkpoints import errors
from ckpt.checkpoints.model import (
    CheckpointRecord,
    CheckpointStats,
    Event,
    SkippedPath,
    format_time,
    new_checkpoint_id,
    parse_time,
)
from ckpt.checkpoints.paths import RelPath

T0 = datetime(2026, 11, 29, 16, 17, 2, 123456, tzinfo=UTC)
TREE = bytes(range(32))
DESIGN_KEYS = ["id", "label", "reason", "turn_id", "message_id", "tool_call_id", "summary",
               "metadata", "session", "scope", "parent", "tree", "created_at", "stats"]


def make_record(**changes: Any) -> CheckpointRecord:
    fields: dict[str, Any] = {
        "id": "ckpt-1795969022123-abcd1234", "label": "before edit", "reason": "turn-start",
        "turn_id": "t1", "message_id": "m1", "tool_call_id": "c1", "summary": "edits main.py",
        "metadata": {"model": "x", "nested": {"list": [1, 2.5, None, True, "é"]}},
        "session": "default", "scope": "tree", "parent": None, "tree": TREE, "created_at": T0,
        "stats": CheckpointStats(files=3, bytes=10, new_objects=1, new_bytes=4, skipped=1,
                                 duration_ms=7, hashed=2),
        "root": "/srv/repo", "skipped": (SkippedPath(RelPath(b"big.bin"), "too-large"),),
        "paths": ()}
    return CheckpointRecord(**(fields | changes))


# -- CheckpointRecord ---------------------------------------------------------------------

def test_to_json_has_exactly_the_design_keys_in_order() -> None:
    data = make_record().to_json()
    assert list(data) == DESIGN_KEYS
    assert list(data["stats"]) == ["files", "bytes", "new_objects", "new_bytes", "skipped",
                                   "duration_ms"]


def test_to_json_renders_tree_as_hex_and_time_as_utc_millis_z() -> None:
    data = make_record().to_json()
    assert data["tree"] == TREE.hex()
    assert data["created_at"] == "2026-11-29T16:17:02.123Z"
    assert data["metadata"] == {"model": "x", "nested": {"list": [1, 2.5, None, True, "é"]}}
    assert json.loads(json.dumps(data)) == data


def test_to_json_returns_a_fresh_plain_dict_each_time() -> None:
    record = make_record()
    data = record.to_json()
    assert type(data["metadata"]) is dict and type(data["metadata"]["nested"]["list"]) is list
    data["metadata"]["nested"]["list"].append("mutated")
    assert record.to_json()["metadata"]["nested"]["list"] == [1, 2.5, None, True, "é"]


def test_metadata_is_a_read_only_copy_of_the_callers_mapping() -> None:
    meta: dict[str, Any] = {"a": {"b": [1]}}
    record = make_record(metadata=meta)
    meta["a"]["b"].append(2)
    meta["c"] = 3
    assert record.to_json()["metadata"] == {"a": {"b": [1]}}
    with pytest.raises(TypeError):
        record.metadata["x"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        record.metadata["a"]["new"] = 1
    assert record.metadata["a"]["b"] == (1,)


@pytest.mark.parametrize(("metadata", "where"), [
    ({"when": datetime(2020, 1, 1)}, "metadata['when']"),
    ({"deep": {"list": [1, {1, 2}]}}, "metadata['deep']['list'][1]"),
    ({"nan": float("nan")}, "metadata['nan']"),
    ({"raw": b"bytes"}, "metadata['raw']"),
    ({"bad": "\ud800"}, "metadata['bad']"),
    ({"nested": {1: "int key"}}, "metadata['nested']"),
])
def test_metadata_must_be_json_and_the_error_names_the_key(metadata: Any, where: str) -> None:
    with pytest.raises(ValueError) as info:
        make_record(metadata=metadata)
    assert where in str(info.value)


def test_record_is_frozen_hashable_and_compares_by_value() -> None:
    record = make_record()
    with pytest.raises(FrozenInstanceError):
        record.label = "x"  # type: ignore[misc]
    twin = make_record(metadata={"nested": {"list": [1, 2.5, None, True, "é"]}, "model": "x"})
    assert record == twin and hash(record) == hash(twin)
    assert record != replace(record, label="other")
    assert len({record, twin}) == 1


def test_created_at_must_be_aware_and_is_normalized_to_utc() -> None:
    with pytest.raises(ValueError, match="created_at"):
        make_record(created_at=datetime(2026, 1, 1))
    local = T0.astimezone(timezone(timedelta(hours=5, minutes=30)))
    record = make_record(created_at=local)
    assert record.created_at.tzinfo is UTC and record.created_at == T0
    assert record.to_json()["created_at"] == "2026-11-29T16:17:02.123Z"


@pytest.mark.parametrize("changes", [
    {"tree": b"short"}, {"tree": TREE.hex()}, {"scope": "everything"}, {"id": ""},
    {"label": "bad \udcff text"}, {"paths": (b"",)}, {"paths": (b"a\0b",)},
])
def test_invalid_fields_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        make_record(**changes)


@pytest.mark.parametrize("changes", [
    {"paths": ("text",)}, {"session": None}, {"label": 3}, {"skipped": ("x",)},
    {"stats": {"files": 1}},
])
def test_fields_of_the_wrong_type_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(TypeError):
        make_record(**changes)


def test_root_may_hold_undecodable_bytes_and_paths_need_not_be_utf8() -> None:
    record = make_record(root="/tmp/caf\udce9", scope="paths", paths=[b"\xff\xfe", b"ok"])
    assert record.paths == (b"\xff\xfe", b"ok")
    assert "root" not in record.to_json() and "paths" not in record.to_json()


@pytest.mark.parametrize("field", ["files", "bytes", "new_objects", "new_bytes", "skipped",
                                   "duration_ms", "hashed"])
def test_stats_refuse_negative_and_non_integer_counts(field: str) -> None:
    base = {"files": 0, "bytes": 0, "new_objects": 0, "new_bytes": 0, "skipped": 0,
            "duration_ms": 0}
    with pytest.raises(ValueError, match=field):
        CheckpointStats(**(base | {field: -1}))
    with pytest.raises(TypeError, match=field):
        CheckpointStats(**(base | {field: True}))


def test_skipped_path_needs_bytes_and_a_reason() -> None:
    assert SkippedPath(RelPath(b"\xffdata"), "unreadable").path == b"\xffdata"
    with pytest.raises(TypeError):
        SkippedPath("text", "too-large")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        SkippedPath(RelPath(b"x"), "")


# -- Event --------------------------------------------------------------------------------

def test_event_to_json_puts_type_at_session_first_then_data() -> None:
    event = Event("checkpoint:restore", T0, "s1", {"id": "ckpt-1", "written": 3})
    assert event.to_json() == {"type": "checkpoint:restore", "at": "2026-11-29T16:17:02.123Z",
                               "session": "s1", "id": "ckpt-1", "written": 3}
    assert list(event.to_json()) == ["type", "at", "session", "id", "written"]


def test_event_data_is_frozen_checked_and_may_not_shadow_the_header() -> None:
    data: dict[str, Any] = {"removed": ["a"]}
    event = Event("checkpoint:prune", T0, "s", data)
    data["removed"].append("b")
    assert event.to_json()["removed"] == ["a"]
    with pytest.raises(ValueError, match="reserved"):
        Event("checkpoint:create", T0, "s", {"session": "other"})
    with pytest.raises(ValueError, match="event data\\['x'\\]"):
        Event("checkpoint:create", T0, "s", {"x": object()})
    with pytest.raises(ValueError):
        Event("checkpoint:create", datetime(2026, 1, 1), "s", {})
    assert Event("t", T0, "s").to_json() == {"type": "t", "at": format_time(T0), "session": "s"}


# -- ids and times ------------------------------------------------------------------------

def test_checkpoint_id_shape_and_seeded_determinism() -> None:
    first = new_checkpoint_id(1795969022123, random.Random(7))
    assert first == new_checkpoint_id(1795969022123, random.Random(7))
    prefix, ms, suffix = first.split("-")
    assert prefix == "ckpt" and ms == "1795969022123"
    assert len(suffix) == 8 and set(suffix) <= set("0123456789abcdefghijklmnopqrstuvwxyz")
    with pytest.raises(ValueError):
        new_checkpoint_id(-1, random.Random(0))


@given(st.integers(0, 10**13 - 1), st.integers(0, 10**13 - 1), st.integers(0, 2**32))
def test_checkpoint_ids_sort_by_time(a: int, b: int, seed: int) -> None:
    rng = random.Random(seed)
    id_a, id_b = new_checkpoint_id(a, rng), new_checkpoint_id(b, rng)
    if a < b:
        assert id_a < id_b
    elif a > b:
        assert id_a > id_b


aware_times = st.datetimes(
    min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30),
    timezones=st.builds(timezone, st.timedeltas(-timedelta(hours=23), timedelta(hours=23))))


@given(aware_times)
def test_format_then_parse_gives_the_time_truncated_to_milliseconds(dt: datetime) -> None:
    text = format_time(dt)
    assert text.endswith("Z") and len(text) == 24
    back = parse_time(text)
    assert back.tzinfo is UTC
    assert timedelta(0) <= dt - back < timedelta(milliseconds=1)
    assert format_time(back) == text


def test_parse_time_accepts_offsets_and_refuses_naive_or_garbage() -> None:
    assert parse_time("2026-11-29T18:17:02.123+02:00") == parse_time("2026-11-29T16:17:02.123Z")
    for bad in ("2026-11-29T16:17:02", "yesterday", ""):
        with pytest.raises(ValueError):
            parse_time(bad)
    with pytest.raises(ValueError):
        format_time(datetime(2026, 1, 1))


# -- errors (checkpoints/errors.py) -------------------------------------------------------

ERRORS = [
    (errors.NotInitialized("/w", "/w/.ckpt"), ("/w/.ckpt", "/w"), None),
    (errors.UnknownCheckpoint("ckpt-12"), ("ckpt-12",), KeyError),
    (errors.AmbiguousCheckpoint("ckpt-1", ["ckpt-1a", "ckpt-1b"]), ("ckpt-1a", "ckpt-1b"),
     KeyError),
    (errors.UnsafePath(b"../\xff\nx", "escapes the root"), ("escapes", "\\xff"), ValueError),
    (errors.StoreBusy("/w/.ckpt/lock", None), ("/w/.ckpt/lock",), None),
    (errors.NothingMatched("--turn t9"), ("--turn t9",), None),
    (errors.RestoreIncomplete("ckpt-9", "disk full"), ("ckpt-9", "disk full"), None),
    (errors.ConfigError("compression_level", "must be 1..22"), ("compression_level",),
     ValueError),
    (errors.ConfigError(None, "config.toml is not TOML"), ("config.toml",), ValueError),
    (errors.CatalogCorrupt("/w/.ckpt/catalog.db", "file is not a database"),
     ("catalog.db", "not a database"), None),
]


@pytest.mark.parametrize(("error", "words", "builtin"), ERRORS)
def test_errors_render_one_line_naming_their_data(
        error: errors.CheckpointError, words: tuple[str, ...], builtin: type | None) -> None:
    message = str(error)
    assert "\n" not in message and all(word in message for word in words)
    assert not message.startswith(("'", '"'))  # KeyError would quote its argument
    assert isinstance(error, errors.CheckpointError)
    if builtin is not None:
        assert isinstance(error, builtin)
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is type(error) and str(clone) == message


def test_store_busy_names_its_holder() -> None:
    class Holder:
        pid, host, started_at = 4242, "box", "2026-11-29T16:17:02Z"

    error = errors.StoreBusy("/s/lock", Holder())
    assert error.holder is not None and "4242" in str(error) and "box" in str(error)
    assert error.path == "/s/lock"


def test_ambiguous_checkpoint_keeps_candidates_as_a_tuple() -> None:
    error = errors.AmbiguousCheckpoint("c", ["c1", "c2"])
    assert error.candidates == ("c1", "c2") and error.ref == "c"
