"""Fixtures of the end-to-end suite: no ckpt server outlives a test.

The harness tests run `ckpt` the way a harness does, with none of the suite's CKPT_*
variables (CKPT_SERVER=off included), so their first call may spawn the store's server on
demand, as it would for a harness. In server mode (`CKPT_TEST_MODE=server`) the CLI harness
must have been served by it (its request count is checked). Either way every server is killed
by pid when the test ends (tests/servers.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import servers  # tests/ is on pytest's `pythonpath`


@pytest.fixture(autouse=True)
def _no_server_outlives_the_test(tmp_path: Path, request: pytest.FixtureRequest
                                 ) -> Iterator[None]:
    yield
    served = {store: servers.status(store) for store in servers.find_server_locks(tmp_path)}
    servers.reap_servers_under(tmp_path)
    if servers.SERVER_MODE and request.module.__name__.endswith("test_harness_cli"):
        counts = {store: servers.request_count(doc) if doc else 0 for store, doc in served.items()}
        assert counts and all(counts.values()), f"not served by a ckpt server: {counts}"
