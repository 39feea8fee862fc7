"""Refs (`latest`, `latest~N`, `ID~N`, ids and prefixes) resolve in list order, per session
and root, and every ref-taking method accepts them."""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from ckpt.checkpoints import AmbiguousCheckpoint, Checkpoints, UnknownCheckpoint
from ckpt.checkpoints.history.refs import parse_ref


def test_parse_ref_splits_the_steps_off() -> None:
    assert parse_ref("latest") == ("latest", 0)
    assert parse_ref("latest~12") == ("latest", 12)
    assert parse_ref("ckpt-17~0") == ("ckpt-17", 0)
    assert parse_ref("latest~") == ("latest~", 0)
    assert parse_ref("latest~x") == ("latest~x", 0)


@seed(2611)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(st.sampled_from(["a", "b", "other-session", "other-root"]),
                     min_size=1, max_size=7))
def test_latest_n_is_the_nth_from_the_end_of_list(plan: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root, other = Path(tmp, "ws"), Path(tmp, "ws2")
        root.mkdir()
        other.mkdir()
        store = Path(tmp, "store")
        cp = Checkpoints.init(root, store, rng=random.Random(1))
        side = Checkpoints.open(root, store, "side", rng=random.Random(2))
        far = Checkpoints.open(other, store, rng=random.Random(3))
        try:
            for i, step in enumerate(plan):
                (root / "f").write_text(f"{i}{step}")
                {"a": cp, "b": cp, "other-session": side, "other-root": far}[step].create(
                    label=step)
            listed = cp.list()
            for n in range(len(listed)):
                assert cp.resolve(f"latest~{n}").id == listed[-1 - n].id
                assert cp.resolve(f"{listed[-1].id}~{n}").id == listed[-1 - n].id
            if listed:
                assert cp.resolve(listed[0].id + "~0") == listed[0]
            with pytest.raises(UnknownCheckpoint) as caught:
                cp.resolve(f"latest~{len(listed)}")
            assert caught.value.detail
            assert f"{len(listed)} in all" in str(caught.value) or not listed
        finally:
            far.close()
            side.close()
            cp.close()


def test_every_ref_taking_method_accepts_refs(cp: Checkpoints, ws: Path) -> None:
    (ws / "f").write_text("one")
    first = cp.create()
    (ws / "f").write_text("two")
    cp.create()
    assert cp.get("latest~1") == first
    assert cp.read_file("latest~1", "f") == b"one"
    assert [f.path for f in cp.files("latest~1")] == [b"f"]
    assert cp.absent("latest~1") == []
    assert [c.path for c in cp.diff("latest~1", "latest")] == [b"f"]
    assert cp.restore("latest~1").id == first.id
    assert (ws / "f").read_text() == "one"


def test_an_empty_session_has_no_latest(cp: Checkpoints) -> None:
    with pytest.raises(UnknownCheckpoint, match="no checkpoint"):
        cp.resolve("latest")


def test_an_id_from_another_session_steps_back_in_its_own_timeline(ws: Path) -> None:
    cp = Checkpoints.init(ws)
    other = Checkpoints.open(ws, session="other")
    try:
        (ws / "f").write_text("1")
        a = other.create()
        cp.create()
        b = other.create()
        assert cp.resolve(f"{b.id}~1") == a
        with pytest.raises(UnknownCheckpoint, match="2 in all"):
            cp.resolve(f"{b.id}~2")
    finally:
        other.close()
        cp.close()


def test_a_prefix_still_resolves_and_an_ambiguous_one_is_refused(cp: Checkpoints) -> None:
    a = cp.create()
    b = cp.create()
    with pytest.raises(AmbiguousCheckpoint):
        cp.resolve("ckpt-")
    with pytest.raises(AmbiguousCheckpoint):
        cp.resolve("ckpt-~1")
    assert cp.resolve(b.id[:-1] + "~1") == a
    with pytest.raises(UnknownCheckpoint):
        cp.resolve("~1")
