"""The resident server's memory over many snapshot/restore cycles (bench/server_cases.py).

``test_server_rss_over_cycles``: 1,000 cycles x ``CKPT_BENCH_SCALE`` (at least 10) of a seeded
agent turn, ``ckpt create`` and ``ckpt restore`` to the first checkpoint, every call a real
client process against one real server, on the ``many-small`` shape (the Linux tree with
``CKPT_BENCH_LINUX=1``: ``-k linux``). VmRSS is sampled every 50 cycles (fewer at small
scales); ``extra_info`` holds the samples, the peak (VmHWM), the growth per cycle and the
median cycle's seconds. Asserted: every restore reproduced the first checkpoint's tree, every
call went through the server, and the peak stays under 250 MB. The growth per cycle is
reported, and asserted under 50 KiB a cycle only from 500 cycles on (below that a few
allocator arenas decide the slope).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.compare import Install
from bench.corpus import copy_tree, list_captured_files
from bench.server_cases import server_rss
from bench.shapes import BuiltShape

CYCLES = 1000
PEAK_LIMIT_KIB = 250 * 1000 * 1000 // 1024  # 250 MB
FLAT_KIB_PER_CYCLE = 50.0


@pytest.mark.parametrize("shape", ["many-small", "linux"])
def test_server_rss_over_cycles(shape: str, bench_scale: float,
                                shape_source: Callable[[str], BuiltShape], tmp_path: Path,
                                benchmark: Any) -> None:
    source = shape_source(shape)
    cycles = max(10, round(CYCLES * bench_scale))
    every = max(1, min(50, cycles // 5))
    work = tmp_path / "work"
    copy_tree(source.path, work)
    files = [f for f in list_captured_files(work) if not (work / f).is_symlink()]
    result = benchmark.pedantic(
        lambda: server_rss(Install.current(), work, tmp_path / "store", files, cycles=cycles,
                           every=every), rounds=1, iterations=1)
    benchmark.extra_info.update({k: v for k, v in result.items() if k != "samples"},
                                samples=result["samples"])
    assert result["server_requests"] >= 2 * cycles
    assert result["peak_rss_kib"] < PEAK_LIMIT_KIB, result
    if cycles >= 500:
        assert result["growth_kib_per_cycle"] < FLAT_KIB_PER_CYCLE, result
