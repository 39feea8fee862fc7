"""Fixtures of the fault suite: bytecode cache for children, a clean temp root, the tally.

The tally of faults injected and cases passed is printed after the run (and written as JSON to
`$CKPT_FAULT_REPORT` if set); RELIABILITY.md quotes it.
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


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not h.TALLY:
        return
    terminalreporter.section(f"ckpt fault tally ({'soak' if h.SOAK else 'default'} run)")
    for line in h.tally_lines():
        terminalreporter.write_line(line)
    target = os.environ.get("CKPT_FAULT_REPORT")
    if target:
        h.write_tally(target)
