"""The storage cases of issue 29 (bench/storage.py) at ``CKPT_BENCH_SCALE``.

- ``test_first_snapshot_store``: the first snapshot of ``many-small`` (the Linux tree with
  ``CKPT_BENCH_LINUX=1``, ``-k linux``) through the CLI; ``extra_info`` holds the store's
  allocated and apparent bytes and the seconds. Asserted: the store holds the tree (ckpt's own
  stats count every file) and, on Linux, the issue's 230 MB.
- ``test_releases_store``: the Django 5.1.x sdists in turn (8; 2 below full scale), when cached
  (``python -m bench.storage --case django`` downloads them; CI never does: it skips). At
  full scale the store must stay within 16 MB.
- ``test_long_session``: a generated text file of 2 MB x scale, 200 x scale (>= 10)
  checkpoints of small local edits through the API; the first, middle and last checkpoints
  restore byte for byte (checked inside the case). At scale 1 the issue's targets hold: growth
  <= 5% of independently compressed copies, the deepest version's restore <= 2x a full blob's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.corpus import CorpusError, cache_dir
from bench.shapes import BuiltShape
from bench.storage import (
    DJANGO_TARGET_BYTES,
    LINUX_TARGET_BYTES,
    LONGFILE_GROWTH_TARGET,
    LONGFILE_RESTORE_TARGET,
    django_sdists,
    first_snapshot_case,
    long_session_case,
    make_tools,
    releases_case,
)


@pytest.mark.parametrize("shape", ["many-small", "linux"])
def test_first_snapshot_store(shape: str, shape_source: Callable[[str], BuiltShape],
                              tmp_path: Path, benchmark: Any) -> None:
    source = shape_source(shape)
    tools = make_tools(None)
    result = benchmark.pedantic(lambda: first_snapshot_case(
        source.path, tools, tmp_path, rounds=1, say=lambda _m: None), rounds=1, iterations=1)
    run = result["runs"][0]
    benchmark.extra_info.update(seconds=run["seconds"], store=run["store"],
                                stats=run["stats"])
    assert run["create"]["files"] >= source.files - source.files // 100
    if shape == "linux":
        assert run["store"]["allocated_bytes"] <= LINUX_TARGET_BYTES, run["store"]


def test_releases_store(bench_scale: float, tmp_path: Path, benchmark: Any) -> None:
    try:
        sdists = django_sdists(cache_dir(), download=False, say=lambda _m: None)
    except CorpusError as exc:
        pytest.skip(str(exc))
    sdists = sdists[:max(2, round(len(sdists) * bench_scale))]  # all of them at full scale
    result = benchmark.pedantic(lambda: releases_case(
        sdists, make_tools(None), tmp_path, peers=False, say=lambda _m: None),
        rounds=1, iterations=1)
    ckpt = result["tools"]["ckpt"]
    benchmark.extra_info.update(store=ckpt["store"], stats=ckpt["stats"])
    assert ckpt["stats"]["checkpoints"] == len(sdists)
    if bench_scale >= 1:
        assert ckpt["store"]["allocated_bytes"] <= DJANGO_TARGET_BYTES, ckpt["store"]


def test_long_session(bench_scale: float, tmp_path: Path, benchmark: Any) -> None:
    (tool,) = make_tools(None)
    result = benchmark.pedantic(lambda: long_session_case(
        tool, tmp_path, size=max(10_000, round(2_000_000 * bench_scale)),
        checkpoints=max(10, round(200 * bench_scale)), reps=max(3, round(15 * bench_scale)),
        seed=1, say=lambda _m: None), rounds=1, iterations=1)
    benchmark.extra_info.update({k: v for k, v in result.items() if k != "timing"},
                                timing=result["timing"])
    assert len(result["restored_exactly"]) == 3
    if bench_scale >= 1:
        assert result["growth_ratio"] <= LONGFILE_GROWTH_TARGET, result
        assert result["timing"]["restore"]["paired_ratio"] <= LONGFILE_RESTORE_TARGET, result
