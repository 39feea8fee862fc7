"""Snapshot and restore through the Python API, on every named shape (bench/shapes.py).

Scenarios (one benchmark group per shape, ``snapshots-<shape>``):
- ``initial``: the first snapshot of the tree into an empty store (a new store every round; the
  page cache is warm, the stat cache empty);
- ``no-change``: a snapshot when nothing changed since the last one (must read 0 files);
- ``after-turn``: a snapshot after a seeded agent turn (20 files edited, 5 added, 5 deleted,
  `ckpt.tuning.workload`; a new turn every round, each on top of the last);
- ``restore-first``: after a turn and its snapshot, restore to the first checkpoint (the default
  restore, so the pre-restore save is included, as a user pays for it);
- ``noop-restore``: restore to the checkpoint the tree already matches (must write nothing).

Settings: `StoreConfig` defaults (zstd level 3, threads = one per CPU, fsync "batch"), except
``max_file_size=0``: the default cap (100 MiB) would skip few-large's 128-512 MiB files. The
store lives outside the tree (``--store``), so a work copy stays byte-identical to its source.

Between a turn and the snapshot that measures it, setup sleeps 30 ms: a file modified within
20 ms of a scan's start is "racy" and is read again by the next snapshot (git's rule), and a
real agent turn takes seconds, so without the pause the benches would measure a harness that
does not exist. Every benchmark asserts what it measured: the snapshot's file manifest against
an independent hash of the tree (restricted to what `git add -A` would capture, so ckpt's ignore
rules are checked against git's), the number of files read, the restored tree's content and the
paths the restore rewrote (by inode and mtime).
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from bench.corpus import (
    Manifest,
    copy_tree,
    count_rewritten,
    diff_manifests,
    find_ignored,
    list_captured_files,
    read_manifest,
)
from bench.shapes import REAL_TREES, SHAPES, BuiltShape, describe
from ckpt.checkpoints import RestoreOptions
from ckpt.checkpoints.model import CheckpointRecord
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import EntryKind
from ckpt.tuning.workload import Turn, apply_turn, measure_tree, plan_turn

SHAPE_NAMES = [*SHAPES, *REAL_TREES]
SETTINGS: dict[str, Any] = {"max_file_size": 0}
RACY_PAUSE_S = 0.03  # > checkpoints.snapshot.statcache.RACY_WINDOW_NS (20 ms)
ROUNDS = {"initial": 3, "no-change": 5, "after-turn": 5, "restore-first": 5, "noop-restore": 5}
TURN_SEED = 1000


# -- the workspace a shape's benches share ----------------------------------------------------

@dataclass
class Workspace:
    """A work copy of a shape, its store and first checkpoint, and the tree's known state."""

    shape: BuiltShape
    work: Path
    cp: Checkpoints
    first: CheckpointRecord
    baseline: Manifest  # independent manifest of the tree at `first`
    captured: frozenset[str]  # what `git add -A` captures: the reference for ckpt's ignores
    pool: list[str]  # regular captured files at `first`: what a turn may edit or delete
    at_first: bool = True
    seeds: Iterator[int] = field(default_factory=lambda: itertools.count(TURN_SEED))

    def plan(self, files: list[str]) -> Turn:
        return plan_turn(files, next(self.seeds),
                         find_ignored=lambda paths: find_ignored(self.shape.path, paths))

    def reset(self) -> None:
        """Bring the tree back to `first` (outside any timing) and settle the stat cache."""
        if not self.at_first:
            self.cp.restore(self.first.id, RestoreOptions(save=False, record_event=False))
            assert diff_manifests(self.baseline, read_manifest(self.work)) == []
            self.at_first = True
        time.sleep(RACY_PAUSE_S)
        self.cp.create(label="settle")  # re-reads files a restore just wrote (racy rows)


@pytest.fixture(scope="module", params=SHAPE_NAMES)
def ws(request: pytest.FixtureRequest, shape_source: Callable[[str], BuiltShape],
       make_checkpoints: Callable[..., Checkpoints],
       tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workspace]:
    shape = shape_source(request.param)
    scratch = tmp_path_factory.mktemp(f"snap-{shape.name}")
    work = scratch / "work"
    copy_tree(shape.path, work)
    cp = make_checkpoints(work, scratch / "store", **SETTINGS)
    first = cp.create(label="first")
    captured = list_captured_files(work)
    pool = [p for p in captured if not (work / p).is_symlink()]
    yield Workspace(shape, work, cp, first, read_manifest(work), frozenset(captured), pool)
    cp.close()
    shutil.rmtree(scratch, ignore_errors=True)


# -- helpers ----------------------------------------------------------------------------------

def measure(benchmark: Any, target: Callable[..., Any], *, rounds: int,
            verify: Callable[..., None], setup: Callable[[], tuple[Any, ...]] | None = None) -> None:
    """`benchmark.pedantic` with `verify(*setup_args, result)` after every round, untimed.

    With timing on, verification runs in pedantic's teardown; with `--benchmark-disable`
    pedantic runs setup and target once and skips teardown, so it runs here instead.
    """
    results: list[Any] = []

    def timed(*args: Any) -> Any:
        result = target(*args)
        results.append(result)
        return result

    def check(*args: Any) -> None:
        verify(*args, results[-1])

    args_seen: list[tuple[Any, ...]] = []

    def setup_round() -> tuple[tuple[Any, ...], dict[str, Any]]:
        args = setup() if setup else ()
        args_seen.append(args)
        return args, {}

    benchmark.pedantic(timed, setup=setup_round, teardown=check, rounds=rounds)
    if benchmark.disabled:
        check(*args_seen[-1])


def tree_content(manifest: Manifest) -> dict[str, tuple[str, bool, str, str]]:
    return {path: e.content for path, e in manifest.items() if e.kind != "dir"}


def checkpoint_content(cp: Checkpoints, ref: str) -> dict[str, tuple[str, bool, str, str]]:
    """A checkpoint's files in `bench.corpus.Entry.content` form (a blob id is its b3sum)."""
    out = {}
    for f in cp.files(ref):
        path = os.fsdecode(f.path)
        if f.kind is EntryKind.SYMLINK:
            out[path] = ("symlink", False, "", os.fsdecode(f.target or b""))
        else:
            assert f.oid is not None and f.kind in (EntryKind.FILE, EntryKind.EXECUTABLE)
            out[path] = ("file", f.kind is EntryKind.EXECUTABLE, f.oid.hex(), "")
    return out


def describe_run(benchmark: Any, ws: Workspace, scenario: str, bench_scale: float) -> None:
    """Name the group and record the shape and settings (before the run: pytest-benchmark
    fixes a benchmark's group when it starts measuring)."""
    benchmark.group = f"snapshots-{ws.shape.name}"
    benchmark.extra_info.update(
        shape=ws.shape.name, shape_summary=describe(ws.shape.name), origin=ws.shape.origin,
        scenario=scenario, scale=bench_scale, files=ws.shape.files, bytes=ws.shape.bytes,
        settings={"compression_level": ws.cp.config.compression_level,
                  "threads": ws.cp.config.threads, "fsync": ws.cp.config.fsync,
                  "max_file_size": ws.cp.config.max_file_size})


# -- benchmarks -------------------------------------------------------------------------------

def test_initial_snapshot(benchmark: Any, ws: Workspace, bench_scale: float, tmp_path: Path,
                          make_checkpoints: Callable[..., Checkpoints]) -> None:
    describe_run(benchmark, ws, "initial", bench_scale)
    ws.reset()  # the tree at `first`, whatever ran before
    stores = itertools.count()
    expected = {p: c for p, c in tree_content(ws.baseline).items() if p in ws.captured}
    regular = sum(1 for c in expected.values() if c[0] == "file")
    measured: dict[str, Any] = {}

    def setup() -> tuple[Checkpoints]:
        return (make_checkpoints(ws.work, tmp_path / f"store-{next(stores)}", **SETTINGS),)

    def verify(cp: Checkpoints, record: CheckpointRecord) -> None:
        assert record.stats.hashed == record.stats.files == regular
        assert record.stats.skipped == 0
        assert checkpoint_content(cp, record.id) == expected
        cp.settle()  # the stat cache may still be being saved: measure the settled store
        size = measure_tree(Path(cp.store_dir))
        measured.update(hashed=record.stats.hashed, new_objects=record.stats.new_objects,
                        store_apparent_bytes=size.apparent_bytes,
                        store_allocated_bytes=size.allocated_bytes, store_files=size.files,
                        compression_ratio=round(ws.shape.bytes / max(1, size.apparent_bytes), 2))
        cp.close()
        shutil.rmtree(cp.store_dir)

    measure(benchmark, lambda cp: cp.create(label="initial"), setup=setup, verify=verify,
            rounds=ROUNDS["initial"])
    benchmark.extra_info.update(measured)


def test_no_change_snapshot(benchmark: Any, ws: Workspace, bench_scale: float) -> None:
    describe_run(benchmark, ws, "no-change", bench_scale)
    ws.reset()

    def verify(record: CheckpointRecord) -> None:
        assert record.stats.hashed == 0
        assert record.stats.new_objects == 0
        assert record.tree == ws.first.tree

    measure(benchmark, lambda: ws.cp.create(label="no-change"), verify=verify,
            rounds=ROUNDS["no-change"])
    benchmark.extra_info.update(hashed=0)


def test_snapshot_after_turn(benchmark: Any, ws: Workspace, bench_scale: float) -> None:
    describe_run(benchmark, ws, "after-turn", bench_scale)
    ws.reset()
    files = list(ws.pool)
    previous = [ws.cp.latest()]
    measured: dict[str, Any] = {}

    def setup() -> tuple[Turn]:
        turn = ws.plan(files)
        apply_turn(ws.work, turn)
        ws.at_first = False
        files[:] = sorted((set(files) - set(turn.deletes)) | {a.path for a in turn.adds})
        time.sleep(RACY_PAUSE_S)
        return (turn,)

    def verify(turn: Turn, record: CheckpointRecord) -> None:
        assert record.stats.hashed == len(turn.edits) + len(turn.adds)
        prev = previous[0]
        assert prev is not None
        changes = {os.fsdecode(c.path): c.change for c in ws.cp.diff(prev.id, record.id)}
        assert changes == ({e.path: "M" for e in turn.edits} | {a.path: "A" for a in turn.adds}
                           | dict.fromkeys(turn.deletes, "D"))
        measured.update(hashed=record.stats.hashed, new_objects=record.stats.new_objects,
                        new_bytes=record.stats.new_bytes)
        previous[0] = record

    measure(benchmark, lambda turn: ws.cp.create(label="after-turn"), setup=setup,
            verify=verify, rounds=ROUNDS["after-turn"])
    benchmark.extra_info.update(turn="20 edited, 5 added, 5 deleted", **measured)


def test_restore_to_first_after_turn(benchmark: Any, ws: Workspace, bench_scale: float) -> None:
    describe_run(benchmark, ws, "restore-first", bench_scale)
    ws.reset()
    measured: dict[str, Any] = {}

    def setup() -> tuple[Turn, Manifest]:
        turn = ws.plan(ws.pool)
        apply_turn(ws.work, turn)
        ws.at_first = False
        time.sleep(RACY_PAUSE_S)
        ws.cp.create(label="after-turn")
        return turn, read_manifest(ws.work)

    def verify(turn: Turn, before: Manifest, report: Any) -> None:
        after = read_manifest(ws.work)
        assert diff_manifests(ws.baseline, after) == []
        ws.at_first = True
        assert count_rewritten(before, after) == len(turn.paths)  # only what the turn touched
        assert report.written == len(turn.edits) + len(turn.deletes)
        assert report.deleted == len(turn.adds)
        assert report.pre_restore is not None
        measured.update(written=report.written, deleted=report.deleted,
                        bytes_written=report.bytes_written, rewritten=len(turn.paths))

    measure(benchmark, lambda turn, before: ws.cp.restore(ws.first.id), setup=setup,
            verify=verify, rounds=ROUNDS["restore-first"])
    benchmark.extra_info.update(measured)


def test_noop_restore(benchmark: Any, ws: Workspace, bench_scale: float) -> None:
    describe_run(benchmark, ws, "noop-restore", bench_scale)
    ws.reset()
    before = read_manifest(ws.work)

    def verify(report: Any) -> None:
        assert (report.written, report.deleted, report.bytes_written) == (0, 0, 0)
        after = read_manifest(ws.work)
        assert count_rewritten(before, after) == 0
        assert diff_manifests(ws.baseline, after) == []

    measure(benchmark, lambda: ws.cp.restore(ws.first.id), verify=verify,
            rounds=ROUNDS["noop-restore"])
    benchmark.extra_info.update(written=0, rewritten=0)
