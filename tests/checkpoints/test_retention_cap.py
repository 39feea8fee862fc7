"""The retention cap through the API: per session, settable per call, never the undo.

`create(keep=N)` caps this session's checkpoints on this root at N after the new one (the
config's `retention_cap` when not given), leaves other sessions alone, and names what it
evicted and why in its `checkpoint:prune` event; a restore's pre-restore save (its undo) and
its target are never what the cap evicts, even at cap 1.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ckpt.checkpoints import Event
from ckpt.checkpoints.config import read_config, write_config
from ckpt.checkpoints.service import Checkpoints


def minute_clock() -> Callable[[], datetime]:
    """A clock one minute further at each reading: creation times distinct and ordered."""
    minutes = itertools.count(1)
    start = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    return lambda: start + timedelta(minutes=next(minutes))


@pytest.fixture
def root(tmp_path: Path) -> str:
    path = os.path.realpath(tmp_path / "ws")
    os.mkdir(path)
    Checkpoints.init(path).close()
    return path


@pytest.fixture
def clock() -> Callable[[], datetime]:
    return minute_clock()


@pytest.fixture
def agent(root: str, clock: Callable[[], datetime]) -> Iterator[Checkpoints]:
    with Checkpoints.open(root, session="agent", clock=clock) as cp:
        yield cp


def step(root: str, cp: Checkpoints, index: int, **kwargs: object) -> str:
    Path(root, "work.txt").write_text(f"step {index}\n")
    return cp.create(label=f"step {index}", **kwargs).id  # type: ignore[arg-type]


def cap_events(cp: Checkpoints) -> list[Event]:
    return [e for e in cp.events(type="checkpoint:prune") if e.data["cause"] == "retention-cap"]


def test_create_keep_caps_this_session_only(root: str, agent: Checkpoints, clock: Callable[[], datetime]) -> None:
    with Checkpoints.open(root, session="other", clock=clock) as other:
        others = [step(root, other, i) for i in range(3)]
        mine = [step(root, agent, i, keep=2) for i in range(4)]
        assert [r.id for r in agent.history()] == mine[2:]
        assert [r.id for r in other.history()] == others  # not capped with the first session
        more = step(root, other, 9)  # no keep and no configured cap: nothing goes
        assert [r.id for r in other.history()] == [*others, more]


def test_keep_zero_lifts_the_configured_cap_for_one_call(root: str, clock: Callable[[], datetime]) -> None:
    write_config(f"{root}/.ckpt", dataclasses.replace(read_config(f"{root}/.ckpt"), retention_cap=2))
    with Checkpoints.open(root, clock=clock) as cp:
        ids = [step(root, cp, i) for i in range(3)]
        assert [r.id for r in cp.history()] == ids[1:]
        kept = step(root, cp, 3, keep=0)
        assert [r.id for r in cp.history()] == [*ids[1:], kept]
        with pytest.raises(ValueError, match="keep"):
            cp.create(keep=-1)


def test_cap_event_names_the_evicted_ids_the_cap_and_the_cause(root: str,
                                                                agent: Checkpoints) -> None:
    heard: list[Event] = []
    agent.on("checkpoint:prune", heard.append)
    ids = [step(root, agent, i, keep=3) for i in range(3)]
    newest = step(root, agent, 3, keep=1)
    (event,) = cap_events(agent)
    assert list(event.data["removed"]) == ids
    assert (event.data["cause"], event.data["reason"], event.data["cap"]) == (
        "retention-cap", "retention-cap", 1)
    assert list(event.data["spared"]) == []
    assert heard == [event] and [r.id for r in agent.history()] == [newest]


def test_cap_one_never_evicts_the_undo_a_restore_names(root: str, agent: Checkpoints) -> None:
    agent.config = dataclasses.replace(agent.config, retention_cap=1)  # this session's cap
    step(root, agent, 0)
    target = step(root, agent, 1)
    assert [r.id for r in agent.history()] == [target]
    Path(root, "work.txt").write_text("agent's last edit\n")
    report = agent.restore(target)
    assert report.pre_restore is not None
    assert [r.id for r in agent.history()] == [target, report.pre_restore]  # over the cap
    undo = agent.restore(report.pre_restore)  # so the restore can be undone
    assert Path(root, "work.txt").read_text() == "agent's last edit\n"
    assert undo.pre_restore in [r.id for r in agent.history()]
    (last,) = [e for e in cap_events(agent) if list(e.data["removed"]) == [target]]
    assert list(last.data["spared"]) == [report.pre_restore]  # the undo's target now
