"""`ckpt.tuning.tune` (behind `ckpt bench`): it measures a scratch copy, never the user's tree.

A small generated tree with the things that must survive untouched (ignored files, an ignored
directory, `.git`, the user's own store, a symlink, an exec bit) is fingerprinted before and
after: bytes, modes, mtimes of every entry, directories included.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ckpt.checkpoints import Checkpoints, StoreConfig, write_config
from ckpt.tuning.tune import (
    DEFAULT_LEVELS,
    DEFAULT_SETTING,
    DEFAULT_THREADS,
    SESSION_TURNS,
    STORAGE_KEYS,
    Storage,
    TuningError,
    TuningRow,
    default_setting,
    grid_configs,
    list_capture,
    recommend,
    render_table,
    run_tuning,
)

PAST_NS = 1_600_000_000 * 10**9


def make_tree(root: Path, *, files: int = 60, seed: int = 11) -> None:
    rng = random.Random(seed)
    for i in range(files):
        path = root / f"pkg{i % 3}" / f"sub{i % 4}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"value_{j} = {rng.randrange(10**6)}\n"
                                for j in range(rng.randint(5, 80))))
    script = root / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    os.symlink("pkg0/sub0/mod0.py", root / "link.py")
    (root / ".gitignore").write_text("*.log\nbuild/\n")
    (root / "debug.log").write_text("ignored\n")
    (root / "build").mkdir()
    (root / "build" / "out.o").write_bytes(b"\0" * 4096)
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "empty-dir").mkdir()
    for dirpath, dirnames, filenames in os.walk(root):  # everything old: no racy entries
        for name in dirnames + filenames:
            os.utime(os.path.join(dirpath, name), ns=(PAST_NS, PAST_NS), follow_symlinks=False)
    os.utime(root, ns=(PAST_NS, PAST_NS))


def fingerprint(root: Path) -> dict[str, tuple[object, ...]]:
    """Every entry under root (and root itself): kind, mode, mtime, content or link target."""
    out: dict[str, tuple[object, ...]] = {}
    st = os.lstat(root)
    out["."] = ("dir", st.st_mode, st.st_mtime_ns)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", st.st_mode, st.st_mtime_ns, os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode, st.st_mtime_ns)
            else:
                out[rel] = ("file", st.st_mode, st.st_mtime_ns, Path(path).read_bytes())
    return out


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "user-tree"
    root.mkdir()
    make_tree(root)
    return root


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "scratch"
    path.mkdir()
    yield path
    assert list(path.iterdir()) == []  # run_tuning removes its scratch copy and stores


def test_tuning_leaves_the_tree_identical_and_measures_every_setting(
        tree: Path, scratch: Path) -> None:
    before = fingerprint(tree)
    messages: list[str] = []
    result = run_tuning(tree, scratch_dir=scratch, progress=messages.append)
    assert fingerprint(tree) == before  # bytes, modes and mtimes, directories included
    assert not (tree / ".ckpt").exists()
    grid = [(level, t) for level in DEFAULT_LEVELS for t in DEFAULT_THREADS]
    assert [(r.compression_level, r.threads) for r in result.rows[:len(grid)]] == grid
    # then each on/off storage setting flipped alone, at the default level and threads
    flipped = result.rows[len(grid):]
    assert [(r.compression_level, r.threads) for r in flipped] == [DEFAULT_SETTING] * len(
        [k for k in STORAGE_KEYS if k != "delta_chain"])
    for row in result.rows:
        assert row.measured
        assert row.snapshot_s is not None and row.snapshot_s > 0
        assert row.no_change_s is not None and row.no_change_s > 0
        assert row.turn_s is not None and row.turn_s > 0
        assert row.restore_s is not None and row.restore_s > 0
        assert row.store_bytes and row.store_allocated_bytes and row.store_files
        assert row.turn_store_bytes and row.session_store_bytes == (
            row.store_allocated_bytes + SESSION_TURNS * row.turn_store_bytes)
    rec = result.recommendation
    assert (rec.compression_level, rec.threads) in [(r.compression_level, r.threads)
                                                   for r in result.rows]
    assert rec.reason and "\n" not in rec.reason
    assert not result.sampled and result.note is None
    # 60 modules + run.sh + link.py + .gitignore; not debug.log, build/, .git/
    assert result.files == result.captured_files == 63
    assert result.turn == {"edited": 20, "added": 5, "deleted": 5, "seed": 1}
    assert messages  # progress was reported


def test_result_renders_as_a_table_and_as_json(tree: Path, scratch: Path) -> None:
    result = run_tuning(tree, scratch_dir=scratch, levels=(1, 3), threads=(1,),
                        dictionaries=(True,), deltas=(True,),
                        block_sizes=(StoreConfig().block_size,))  # no storage rows
    text = render_table(result)
    assert "recommended: compression_level" in text and "ckpt config set threads" in text
    assert len([line for line in text.splitlines() if line.lstrip().startswith(("1 ", "3 "))]) == 2
    data = json.loads(json.dumps(result.to_json()))
    assert data["recommendation"]["commands"][0].startswith("ckpt config set compression_level")
    assert [row["compression_level"] for row in data["rows"]] == [1, 3]
    assert data["files"] == 63 and data["sampled"] is False


def test_capture_honours_the_users_store_config_and_leaves_the_store_alone(
        tree: Path, scratch: Path) -> None:
    with Checkpoints.init(tree) as cp:
        cp.create(label="the user's own checkpoint")
    own = {"deltas": False} if "deltas" in STORAGE_KEYS else {}  # the grid starts from these
    write_config(str(tree / ".ckpt"), StoreConfig(extra_ignore=("pkg2/",), **own))
    before = fingerprint(tree)
    items, _dirs = list_capture(str(tree), str(tree / ".ckpt"), StoreConfig(
        extra_ignore=("pkg2/",)))
    captured = {i.rel for i in items}
    assert not any(p.startswith(("pkg2/", ".ckpt/", ".git/", "build/")) for p in captured)
    assert "debug.log" not in captured and "link.py" in captured
    result = run_tuning(tree, scratch_dir=scratch, levels=(3,), threads=(0,))
    assert fingerprint(tree) == before  # the store (objects, catalog, config) too
    assert result.captured_files == len(items) == 43  # pkg2 holds 20 of the 60 modules
    assert all(r.measured for r in result.rows)
    assert (result.rows[0].compression_level, result.rows[0].threads) == (3, 0)
    if own:
        assert result.rows[0].deltas is False  # the user's setting first, then flipped
        assert [r.deltas for r in result.rows[1:]].count(True) == 1


def test_large_tree_is_sampled_or_refused(tree: Path, scratch: Path) -> None:
    result = run_tuning(tree, scratch_dir=scratch, levels=(3,), threads=(1,), max_files=12)
    assert result.sampled and result.note and "sampled" in result.note
    assert result.files <= 12 + 1  # the sample, plus the ignore file that is always kept
    assert result.captured_files == 63
    assert result.rows[0].measured
    before = fingerprint(tree)
    with pytest.raises(TuningError, match="over the limit"):
        run_tuning(tree, scratch_dir=scratch, max_files=12, on_too_large="refuse")
    assert fingerprint(tree) == before


def test_time_budget_stops_the_grid_after_the_first_setting(tree: Path, scratch: Path) -> None:
    ticks = iter(range(0, 10**6, 10))  # every clock reading is 10 s later
    result = run_tuning(tree, scratch_dir=scratch, time_budget=60,
                        clock=lambda: float(next(ticks)))
    assert result.rows[0].measured
    assert all(not r.measured and "time budget" in (r.skipped or "") for r in result.rows[1:])
    first = result.rows[0]
    assert (result.recommendation.compression_level, result.recommendation.threads) == (
        first.compression_level, first.threads)
    assert "skipped" in render_table(result)


def test_scratch_inside_the_tree_is_refused_before_anything_is_written(tree: Path) -> None:
    before = fingerprint(tree)
    with pytest.raises(TuningError, match="inside"):
        run_tuning(tree, scratch_dir=tree / "pkg0")
    assert fingerprint(tree) == before


def test_missing_root_and_empty_tree_are_errors(tmp_path: Path) -> None:
    with pytest.raises(TuningError, match="not a directory"):
        run_tuning(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TuningError, match="captures no files"):
        run_tuning(empty, scratch_dir=tempfile.gettempdir())


def row(level: int, threads: int, total: float, store: int, *,
        storage: Storage | None = None, turn: int | None = None) -> TuningRow:
    storage = storage or default_setting()[2]
    return TuningRow(level, threads, threads or 2, storage.dictionaries, storage.deltas,
                     storage.delta_chain, storage.block_size, snapshot_s=total, no_change_s=0.0, turn_s=0.0,
                     restore_s=0.0, store_bytes=store, store_allocated_bytes=store, store_files=1,
                     turn_store_bytes=turn,
                     session_store_bytes=None if turn is None else store + SESSION_TURNS * turn)


def test_recommendation_is_fastest_within_ten_percent_of_smallest_store() -> None:
    default = DEFAULT_SETTING
    rows = [row(9, 1, 1.0, 130), row(5, 1, 2.0, 105), row(6, 1, 4.0, 100), row(*default, 1.8, 108)]
    rec = recommend(rows)
    assert (rec.compression_level, rec.threads) == default  # level 9 is fastest but 30% larger
    rows[3] = row(*default, 2.05, 108)  # defaults within 5% of the fastest (level 5, 1 thread)
    assert (recommend(rows).compression_level, recommend(rows).threads) == default
    assert "defaults" in recommend(rows).reason
    rows[3] = row(*default, 3.0, 108)
    assert (recommend(rows).compression_level, recommend(rows).threads) == (5, 1)



def test_recommendation_judges_the_store_of_a_session_of_turns() -> None:
    """A setting that is faster and as small after the first snapshot but grows more per turn
    (deltas off) loses once the session's store is more than 10% larger."""
    level, threads = DEFAULT_SETTING
    plain = dataclasses.replace(default_setting()[2], deltas=False)
    rows = [row(level, threads, 2.0, 1000, turn=10),
            row(level, threads, 1.0, 1000, storage=plain, turn=100)]
    rec = recommend(rows)
    assert (rec.compression_level, rec.threads) == DEFAULT_SETTING
    assert Storage(rec.dictionaries, rec.deltas, rec.delta_chain,
                   rec.block_size) == default_setting()[2]
    assert f"{SESSION_TURNS} such turns" in rec.reason
    rows[1] = row(level, threads, 1.0, 1000, storage=plain, turn=11)  # within 10%: faster wins
    assert recommend(rows).deltas is (False if "deltas" in STORAGE_KEYS else None)
    commands = recommend(rows).commands
    assert commands[:2] == [f"ckpt config set compression_level {level}",
                            f"ckpt config set threads {threads}"]
    if "deltas" in STORAGE_KEYS:
        assert "ckpt config set deltas false" in commands


def test_grid_flips_each_storage_setting_alone_at_the_default_level() -> None:
    base = StoreConfig()
    configs = grid_configs(base, (1, 3), (1, 0))
    grid = [(c.compression_level, c.threads) for c in configs]
    assert grid[:4] == [(1, 1), (1, 0), (3, 1), (3, 0)]
    extra = configs[4:]
    switches = [k for k in STORAGE_KEYS if k != "delta_chain"]
    assert len(extra) == len(switches)  # a chain only when asked for
    for config, key in zip(extra, switches):
        assert (config.compression_level, config.threads) == DEFAULT_SETTING
        changed = [k for k in STORAGE_KEYS if getattr(config, k) != getattr(base, k)]
        assert changed == [key]
    if "delta_chain" in STORAGE_KEYS:
        chains = grid_configs(base, (3,), (1,), deltas=(True,), dictionaries=(True,),
                              block_sizes=(base.block_size,), delta_chains=(base.delta_chain, 2, 2, base.delta_chain + 2))
        # the grid's first setting when the defaults are not in it; repeats and the
        # configured value give no row of their own
        assert [(c.compression_level, c.threads, c.delta_chain) for c in chains] == [
            (3, 1, base.delta_chain), (3, 1, 2), (3, 1, base.delta_chain + 2)]
    assert all(c.retention_cap == 0 for c in configs)


@pytest.mark.skipif("deltas" not in STORAGE_KEYS, reason="this ckpt has no deltas")
def test_deltas_row_measures_a_smaller_turn(tmp_path: Path, scratch: Path) -> None:
    """Files of a few KiB edited by the turn: with deltas the turn's snapshot adds less."""
    root = tmp_path / "larger-files"
    rng = random.Random(5)
    for i in range(40):
        path = root / f"pkg{i % 4}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"def f_{j}(x):\n    return x * {rng.randrange(10**6)}\n"
                                for j in range(300)))
    result = run_tuning(root, scratch_dir=scratch, levels=(1,), threads=(1,), deltas=(True, False),
                        dictionaries=(True,) if "dictionaries" in STORAGE_KEYS else None,
                        block_sizes=(StoreConfig().block_size,))
    on, off = result.rows
    assert (on.deltas, off.deltas) == (True, False)
    assert on.turn_store_bytes is not None and off.turn_store_bytes is not None
    assert on.turn_store_bytes < off.turn_store_bytes
    text = render_table(result)
    assert " deltas " in text.splitlines()[5] and "+100 MB" in text
