"""Settings shared by the pytest-benchmark suites in `bench/` (run them with `pytest bench`).

`pytest` alone runs `tests/` only (pyproject `testpaths`), so nothing here slows the test run.
`CKPT_BENCH_SCALE` (default 1.0) scales every suite's data: CI runs `CKPT_BENCH_SCALE=0.05
pytest bench --benchmark-disable` to keep the benches from rotting; use e.g. 0.1 for a quick look
or 4 for steadier numbers. `CKPT_BENCH_LINUX=1` enables the Linux-source cases (bench/README.md).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.shapes import (
    REAL_TREES,
    BuiltShape,
    CorpusError,
    build_shape,
    get_real_tree,
    real_tree_unavailable,
)
from ckpt.checkpoints.config import StoreConfig, write_config
from ckpt.checkpoints.service import Checkpoints


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


@pytest.fixture(scope="session")
def shape_source(
    bench_scale: float, tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], BuiltShape]:
    """`get(name)`: the pristine tree of a named shape (bench/shapes.py), built once a session.

    Synthetic shapes are built at `CKPT_BENCH_SCALE` under the session's temp dir; `stdlib` and
    `linux` come from `bench.corpus`'s cache (`linux` skips unless `CKPT_BENCH_LINUX=1` and the
    source is installed). Benches copy from these trees and must never modify them.
    """
    built: dict[str, BuiltShape] = {}

    def get(name: str) -> BuiltShape:
        if name not in built:
            if name in REAL_TREES:
                reason = real_tree_unavailable(name)
                if reason:
                    pytest.skip(reason)
                try:
                    built[name] = get_real_tree(name)
                except CorpusError as exc:
                    pytest.skip(str(exc))
            else:
                root = tmp_path_factory.mktemp(f"shape-{name}") / "tree"
                built[name] = build_shape(name, root, bench_scale)
        return built[name]

    return get


@pytest.fixture(scope="session")
def make_checkpoints() -> Callable[..., Checkpoints]:
    """`make(root, store, **settings)`: a new store outside `root`, with StoreConfig `settings`.

    Benches keep the store outside the tree they measure (as `ckpt --store` does) so copies of a
    shape stay byte-identical to the source, and every setting they change is explicit.
    """

    def make(root: Path, store: Path, **settings: Any) -> Checkpoints:
        Checkpoints.init(root, store=store).close()
        write_config(str(store), StoreConfig(**settings))
        return Checkpoints.open(root, store=store)

    return make
