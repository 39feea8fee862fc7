"""Suite-wide hooks: no resident servers unless a test asks; the fault tally, gathered from
pytest-xdist's workers when there are any.

Every test runs with CKPT_SERVER=off (`_no_resident_server`), so a `ckpt` subprocess never
spawns a server that outlives it; a test of the server sets CKPT_SERVER itself (monkeypatch, or
the env it hands a subprocess) and stops what it started.

The fault suite (tests/faults) counts the faults it injects in `fault_helpers.TALLY`. Under
xdist each worker process has its own tally; the workers hand theirs back when they finish and
the controlling process adds them up, so the summary (and `$CKPT_FAULT_REPORT`) covers the whole
run either way. This lives here, not in tests/faults/conftest.py, because the controlling
process loads only the top-level conftest.

A run started as a background job of a non-interactive shell (`.ci/run &`) inherits SIGINT
ignored, and would hand that on to every `ckpt` a test starts: a test that interrupts one would
wait for it forever. `pytest_configure` gives the run Python's own SIGINT handler back, so
what it starts gets the default again.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Iterator
from typing import Any

import fault_helpers as h  # tests/faults is on pytest's `pythonpath`
import pytest

_WORKER_KEY = "ckpt_fault_tally"


def pytest_configure(config: pytest.Config) -> None:
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _no_resident_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CKPT_SERVER", "off")


@pytest.fixture(scope="session", autouse=True)
def _no_server_outlives_the_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """A server a test's subprocess spawned with an environment of its own making is killed
    when the run ends, not left to its idle exit."""
    yield
    import servers  # tests/ is on pytest's `pythonpath`

    for pid in servers.server_pids_for(tmp_path_factory.getbasetemp()):
        servers.kill_pid(pid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the tally to the controller
        workeroutput[_WORKER_KEY] = {area: dict(c) for area, c in h.TALLY.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    for area, counts in getattr(node, "workeroutput", {}).get(_WORKER_KEY, {}).items():
        h.TALLY.setdefault(area, Counter()).update(counts)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not h.TALLY:
        return
    terminalreporter.section(f"ckpt fault tally ({'soak' if h.SOAK else 'default'} run)")
    for line in h.tally_lines():
        terminalreporter.write_line(line)
    target = os.environ.get("CKPT_FAULT_REPORT")
    if target:
        h.write_tally(target)
