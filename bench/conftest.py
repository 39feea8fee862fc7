"""Settings shared by the pytest-benchmark suites in `bench/` (run them with `pytest bench`).

`pytest` alone runs `tests/` only (pyproject `testpaths`), so nothing here slows the test run.
`CKPT_BENCH_SCALE` (default 1.0) scales every suite's data: CI runs `pytest bench
--benchmark-disable` at the default scale to keep the benches from rotting; use e.g. 0.1 for a
quick look or 4 for steadier numbers.
"""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def bench_scale() -> float:
    text = os.environ.get("CKPT_BENCH_SCALE", "1.0")
    try:
        scale = float(text)
    except ValueError:
        raise pytest.UsageError(f"CKPT_BENCH_SCALE must be a number, not {text!r}") from None
    if not scale > 0:
        raise pytest.UsageError(f"CKPT_BENCH_SCALE must be positive, not {text!r}")
    return scale
