"""Fixtures of the fault suite: bytecode cache for children, a clean temp root, the tally.

The tally of faults injected and cases passed is printed after the run (and written as JSON to
`$CKPT_FAULT_REPORT` if set); RELIABILITY.md quotes it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest


def load_helpers() -> ModuleType:
    name = "ckpt_fault_helpers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("fault_helpers.py"))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


h = load_helpers()


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
