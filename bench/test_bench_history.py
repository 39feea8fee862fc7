"""A long session of small turns, and timeline queries over 10,000 checkpoints (Python API).

- ``long-session``: the CPython stdlib tree (2,450 files, a real tree), then 500 checkpoints
  (x `CKPT_BENCH_SCALE`, at least 10), each after a small seeded turn (3 files edited, 1 added,
  1 deleted). One benchmark round = one checkpoint, so the stats are per checkpoint;
  `extra_info` adds the store growth per checkpoint (whole store, and objects only) and the
  median time of the first and last tenth of the session, which must stay close: a checkpoint
  must cost what changed, not what the timeline or the store has grown to.
- ``history-10k``: a catalog of 10,000 checkpoints (9,000 in the measured session, 1,000 in
  another; 5 per turn id, reasons cycling), then `history()`, `history(turn_id=)`,
  `history(reason=)`, `latest()`, `latest(turn_id=)` and `get(unique id prefix)`. The records
  are added through the catalog (a checkpoint each through `create` would take minutes and
  measure snapshots again); they all point at one real tree. The count is fixed, not scaled:
  setup takes a few seconds, and a query's cost is what is measured.

Every benchmark asserts its result against the records it made itself.
"""

from __future__ import annotations

import itertools
import random
import shutil
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bench.corpus import copy_tree, list_captured_files
from bench.shapes import BuiltShape
from ckpt.checkpoints.model import CheckpointRecord, CheckpointStats, new_checkpoint_id
from ckpt.checkpoints.service import Checkpoints
from ckpt.tuning.workload import Turn, apply_turn, measure_tree, plan_turn

RACY_PAUSE_S = 0.03  # > checkpoints.snapshot.statcache.RACY_WINDOW_NS; a real turn takes seconds
HISTORY_SIZE = 10_000
OTHER_SESSION_EVERY = 10
PER_TURN = 5
REASONS = ("pre-tool", "post-tool", "pre-tool", "post-tool", "turn-end")


# -- long session -----------------------------------------------------------------------------

def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_long_session(benchmark: Any, bench_scale: float, tmp_path: Path,
                      shape_source: Callable[[str], BuiltShape],
                      make_checkpoints: Callable[..., Checkpoints]) -> None:
    benchmark.group = "long-session"
    shape = shape_source("stdlib")
    count = max(10, round(500 * bench_scale))
    work, store = tmp_path / "work", tmp_path / "store"
    copy_tree(shape.path, work)
    cp = make_checkpoints(work, store, max_file_size=0)
    start = cp.create(label="session start")
    cp.settle()  # its stat cache is saved after it returns: measure the store once it is
    start_size = measure_tree(store)
    files = [p for p in list_captured_files(work) if not (work / p).is_symlink()]
    seeds = itertools.count(1)
    seconds: list[float] = []
    turns: list[Turn] = []
    records: list[CheckpointRecord] = []
    growth: list[int] = []
    object_growth: list[int] = []
    sizes = [(start_size.allocated_bytes, measure_tree(store / "objects").allocated_bytes)]

    def next_turn() -> tuple[tuple[Turn], dict[str, Any]]:
        turn = plan_turn(files, next(seeds), edits=3, adds=1, deletes=1)
        apply_turn(work, turn)
        files[:] = sorted((set(files) - set(turn.deletes)) | {a.path for a in turn.adds})
        time.sleep(RACY_PAUSE_S)
        turns.append(turn)
        return (turn,), {}

    def checkpoint(turn: Turn) -> CheckpointRecord:
        started = time.perf_counter()
        record = cp.create(reason="post-turn", turn_id=f"turn-{turn.seed}")
        seconds.append(time.perf_counter() - started)
        records.append(record)
        return record

    def check(turn: Turn) -> None:
        record = records[-1]
        assert record.stats.hashed == len(turn.edits) + len(turn.adds)
        assert record.parent == (records[-2].id if len(records) > 1 else start.id)
        cp.settle()
        size = (measure_tree(store).allocated_bytes,
                measure_tree(store / "objects").allocated_bytes)
        growth.append(size[0] - sizes[-1][0])
        object_growth.append(size[1] - sizes[-1][1])
        sizes.append(size)

    benchmark.pedantic(checkpoint, setup=next_turn, teardown=check, rounds=count)
    if benchmark.disabled:  # one round ran, without teardown: finish the session by hand
        check(turns[-1])
        for _ in range(count - 1):
            (turn,), _ = next_turn()
            checkpoint(turn)
            check(turn)
    cp.close()

    assert len(records) == count == len(cp_history(work, store))
    tenth = max(1, count // 10)
    early, late = statistics.median(seconds[:tenth]), statistics.median(seconds[-tenth:])
    # Times are reported (first and last tenth below), never asserted: machines here are
    # noisy. That the work per checkpoint does not grow with the timeline is what `check`
    # asserts of every one: it reads exactly the files its turn wrote.
    # A small turn must add about what it changed, far less than the tree's first snapshot.
    assert statistics.median(growth) < 0.05 * start_size.allocated_bytes
    benchmark.extra_info.update(
        tree="stdlib", files=shape.files, bytes=shape.bytes, scale=bench_scale,
        checkpoints=count, turn="3 edited, 1 added, 1 deleted",
        seconds_per_checkpoint={"median": round(statistics.median(seconds), 4),
                                "p90": round(_percentile(seconds, 0.9), 4),
                                "max": round(max(seconds), 4),
                                "first_tenth_median": round(early, 4),
                                "last_tenth_median": round(late, 4)},
        store_growth_per_checkpoint_bytes={
            "median": statistics.median(growth), "mean": round(statistics.mean(growth)),
            "objects_median": statistics.median(object_growth),
            "objects_mean": round(statistics.mean(object_growth))},
        store_allocated_bytes={"after_first": start_size.allocated_bytes,
                               "after_session": sizes[-1][0]},
        hashed_per_checkpoint=records[-1].stats.hashed)
    shutil.rmtree(tmp_path, ignore_errors=True)


def cp_history(work: Path, store: Path) -> list[CheckpointRecord]:
    with Checkpoints.open(work, store=store) as cp:
        return [r for r in cp.history() if r.reason == "post-turn"]


# -- history queries over 10k checkpoints -----------------------------------------------------

@dataclass
class Timeline:
    cp: Checkpoints
    mine: list[CheckpointRecord]  # the measured session's records, oldest first
    all_ids: list[str]


@pytest.fixture(scope="module")
def timeline(tmp_path_factory: pytest.TempPathFactory,
             make_checkpoints: Callable[..., Checkpoints]) -> Iterator[Timeline]:
    scratch = tmp_path_factory.mktemp("history")
    work = scratch / "work"
    work.mkdir()
    for name in ("a.py", "b.py", "README.md"):
        (work / name).write_text(f"# {name}\n")
    # fsync "none": adding 10,000 records one durable commit each would take a minute of
    # fsyncs and measure nothing the queries depend on.
    cp = make_checkpoints(work, scratch / "store", fsync="none")
    real = cp.create(label="tree")
    tree = real.tree
    rng = random.Random(0xC4EC)
    base = real.created_at + timedelta(seconds=1)
    mine: list[CheckpointRecord] = [real]
    parents: dict[str, str | None] = {"default": real.id, "other": None}
    for i in range(HISTORY_SIZE):
        at = base + timedelta(seconds=i)
        session = "other" if i % OTHER_SESSION_EVERY == OTHER_SESSION_EVERY - 1 else "default"
        record = CheckpointRecord(
            id=new_checkpoint_id(int(at.timestamp() * 1000), rng), label=None,
            reason=REASONS[i % len(REASONS)], turn_id=f"turn-{i // PER_TURN}",
            message_id=f"msg-{i // PER_TURN}", tool_call_id=f"call-{i}", summary=None,
            metadata={"tool": "bash", "i": i}, session=session, scope="tree",
            parent=parents[session], tree=tree, created_at=at,
            stats=CheckpointStats(3, 30, 0, 0, 0, 5), root=cp.root)
        cp.catalog.add_checkpoint(record)
        parents[session] = record.id
        if session == "default":
            mine.append(record)
    all_ids = [r.id for r in cp.history(all_sessions=True)]
    assert len(all_ids) == HISTORY_SIZE + 1
    yield Timeline(cp, mine, all_ids)
    cp.close()
    shutil.rmtree(scratch, ignore_errors=True)


def shortest_unique_prefix(ref: str, ids: list[str]) -> str:
    others = [i for i in ids if i != ref]
    for n in range(1, len(ref) + 1):
        if not any(i.startswith(ref[:n]) for i in others):
            return ref[:n]
    return ref


def _describe(benchmark: Any, query: str, timeline: Timeline, returned: int) -> None:
    benchmark.extra_info.update(query=query, checkpoints=len(timeline.all_ids),
                                in_session=len(timeline.mine), returned=returned)


def test_history_all(benchmark: Any, timeline: Timeline) -> None:
    benchmark.group = "history-10k"
    got = benchmark(timeline.cp.history)
    assert [r.id for r in got] == [r.id for r in timeline.mine]
    _describe(benchmark, "history()", timeline, len(got))


def test_history_by_turn(benchmark: Any, timeline: Timeline) -> None:
    benchmark.group = "history-10k"
    turn = "turn-1234"
    got = benchmark(timeline.cp.history, turn_id=turn)
    expected = [r.id for r in timeline.mine if r.turn_id == turn]
    assert [r.id for r in got] == expected and len(expected) == PER_TURN
    _describe(benchmark, "history(turn_id=)", timeline, len(got))


def test_history_by_reason(benchmark: Any, timeline: Timeline) -> None:
    benchmark.group = "history-10k"
    got = benchmark(timeline.cp.history, reason="turn-end")
    expected = [r.id for r in timeline.mine if r.reason == "turn-end"]
    assert [r.id for r in got] == expected and len(expected) >= 1000
    _describe(benchmark, "history(reason=)", timeline, len(got))


def test_latest(benchmark: Any, timeline: Timeline) -> None:
    benchmark.group = "history-10k"
    got = benchmark(timeline.cp.latest)
    assert got is not None and got.id == timeline.mine[-1].id
    _describe(benchmark, "latest()", timeline, 1)


def test_latest_by_turn(benchmark: Any, timeline: Timeline) -> None:
    benchmark.group = "history-10k"
    turn = "turn-777"
    got = benchmark(timeline.cp.latest, turn_id=turn)
    expected = [r for r in timeline.mine if r.turn_id == turn][-1]
    assert got == expected
    _describe(benchmark, "latest(turn_id=)", timeline, 1)


def test_get_by_unique_prefix(benchmark: Any, timeline: Timeline) -> None:
    benchmark.group = "history-10k"
    target = timeline.mine[len(timeline.mine) // 2]
    prefix = shortest_unique_prefix(target.id, timeline.all_ids)
    assert len(prefix) < len(target.id)
    got = benchmark(timeline.cp.get, prefix)
    assert got == target
    _describe(benchmark, f"get(prefix of {len(prefix)} chars)", timeline, 1)
