"""Fixtures of the fault suite: bytecode cache for children, a clean temp root.

The tally of faults injected and cases passed is printed after the run (and written as JSON to
`$CKPT_FAULT_REPORT` if set) by tests/conftest.py, which also gathers it from xdist workers.
"""

from __future__ import annotations

import os
from pathlib import Path

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest


@pytest.fixture(scope="session", autouse=True)
def _child_bytecode(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Children keep compiled bytecode in a temp dir, never in the repo."""
    h.set_pycache(str(tmp_path_factory.mktemp("fault-pycache")))


@pytest.fixture
def base(tmp_path: Path) -> str:
    """A resolved temp directory (roots are compared as real paths)."""
    return os.path.realpath(tmp_path)

