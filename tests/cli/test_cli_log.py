"""`-v/--verbose` and `CKPT_LOG`: log records of the `ckpt` logger on stderr, one line each
(`logger.name: message`), and never a byte of them on stdout."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.cli import log

CkptIn = Callable[..., Any]
CkptProc = Callable[..., Any]

LINE = re.compile(r"ckpt(\.\w+)*: \S.*")


def _log_lines(stderr: str) -> list[str]:
    lines = stderr.splitlines()
    assert all(LINE.fullmatch(line) for line in lines), lines
    return lines


def test_verbose_create_logs_debug_lines_on_stderr_only(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("-v", "create")
    assert run.code == 0, run.stderr
    assert re.fullmatch(r"ckpt-\S+\n", run.stdout)
    lines = _log_lines(run.stderr)
    assert f"ckpt.cli.context: opening root {initialized}, store {initialized / '.ckpt'}, " \
           "session default" in lines


def test_ckpt_log_debug_keeps_json_stdout_clean(initialized: Path, ckpt_proc: CkptProc) -> None:
    run = ckpt_proc("create", "--json", env={"CKPT_LOG": "debug"})
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["id"].startswith("ckpt-")
    assert any(line.startswith("ckpt.cli.context: opening root ") for line in _log_lines(run.stderr))


@pytest.mark.parametrize("env", [{}, {"CKPT_LOG": ""}, {"CKPT_LOG": "warning"}, {"CKPT_LOG": "INFO"}])
def test_no_debug_lines_without_asking(initialized: Path, ckpt_in: CkptIn, env: dict[str, str]) -> None:
    run = ckpt_in("create", env=env)
    assert (run.code, run.stderr) == (0, "")


def test_verbose_wins_over_a_quieter_ckpt_log(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("--verbose", "create", env={"CKPT_LOG": "warning"})
    assert run.code == 0 and "ckpt.cli.context: opening root" in run.stderr


def test_a_bad_ckpt_log_is_a_usage_error_naming_it(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("create", env={"CKPT_LOG": "loud"})
    assert (run.code, run.stdout) == (2, "")
    assert "CKPT_LOG" in run.stderr and "'loud' is not a log level" in run.stderr


def test_each_invocation_takes_its_handler_away(initialized: Path, ckpt_in: CkptIn) -> None:
    logger = logging.getLogger("ckpt")
    before = (list(logger.handlers), logger.level)
    for _ in range(3):
        assert ckpt_in("-v", "list").code == 0
    assert (list(logger.handlers), logger.level) == before
    assert logger.handlers == []


def test_the_library_logs_nothing_by_default(initialized: Path, ckpt_in: CkptIn,
                                             capfd: pytest.CaptureFixture[str]) -> None:
    """Library records stay off stderr without a handler (no lastResort warnings)."""
    logging.getLogger("ckpt.checkpoints.test").warning("not for the user")
    assert capfd.readouterr().err == ""


def test_help_documents_the_switch(ckpt_in: CkptIn) -> None:
    out = ckpt_in("--help").stdout
    assert "-v, --verbose" in out and "CKPT_LOG=debug|info|warning" in out


@given(st.sampled_from(["debug", "info", "warning"]), st.sampled_from([str.lower, str.upper]),
       st.sampled_from(["", " ", "\n"]))
def test_levels_parse_in_any_case_and_padding(name: str, case: object, pad: str) -> None:
    assert callable(case)
    assert log.parse_level(pad + case(name) + pad) == getattr(logging, name.upper())


@given(st.text(max_size=12).filter(lambda t: t.strip().lower() not in log.LEVELS))
def test_anything_else_is_refused(text: str) -> None:
    if not text.strip():
        assert log.chosen_level(verbose=0, env=text) is None
        return
    with pytest.raises(ValueError, match="not a log level"):
        log.chosen_level(verbose=0, env=text)


@given(st.integers(min_value=1, max_value=5), st.one_of(st.none(), st.sampled_from(["", "warning", "x"])))
def test_verbose_means_debug_whatever_the_environment(verbose: int, env: str | None) -> None:
    assert log.chosen_level(verbose=verbose, env=env) == logging.DEBUG
