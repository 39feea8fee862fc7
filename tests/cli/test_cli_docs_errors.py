"""Bad input gets the documented exit and one clear line (docs/CLI.md, "Exit codes"): an id
that is not UTF-8 is an unknown id (1), not an internal error; `events --type bogus` is a
usage error (2) naming the valid types; `cat ID DIR` says the path is a directory (1)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckpt.cli.params import EVENT_TYPES

CkptIn = Callable[..., Any]
Env = Callable[..., dict[str, str]]
BAD_ID = b"ckpt-\xff\xfe"
CKPT = [os.fsencode(sys.executable), b"-m", b"ckpt"]


@pytest.mark.parametrize("args", [[b"show", BAD_ID], [b"cat", BAD_ID, b"a.txt"],
                                  [b"diff", BAD_ID], [b"restore", BAD_ID],
                                  [b"restore", BAD_ID, b"--dry-run"]])
def test_an_id_that_is_not_utf8_is_an_unknown_id(initialized: Path, env_for: Env,
                                                 args: list[bytes]) -> None:
    # Raw bytes on the command line, as a shell passes them: Python's argv holds surrogates.
    done = subprocess.run([*CKPT, *args], cwd=initialized, env=env_for(), capture_output=True,
                          timeout=60, check=False)
    assert (done.returncode, done.stdout) == (1, b""), done.stderr
    assert done.stderr == (b"ckpt: error: unknown checkpoint ckpt-\\xff\\xfe "
                           b"(hint: 'ckpt list --all-sessions' shows the ids)\n")
    assert os.path.exists(initialized / "a.txt")


def test_filters_that_are_not_utf8_are_usage_errors(initialized: Path, env_for: Env) -> None:
    for args in ([b"list", b"--turn", b"\xff"], [b"latest", b"--reason", b"\xff"]):
        done = subprocess.run([*CKPT, *args], cwd=initialized, env=env_for(),
                              capture_output=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr
        assert b"is not valid UTF-8 text" in done.stderr and b"Traceback" not in done.stderr


def test_events_type_bogus_exits_2_naming_the_types(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("events", "--type", "bogus")
    assert (run.code, run.stdout) == (2, "")
    assert run.stderr == ("ckpt: error: unknown event type 'bogus' for --type: the types are "
                          + ", ".join(EVENT_TYPES) + "\n")
    for kind in EVENT_TYPES:
        assert ckpt_in("events", "--type", kind).code == 0


def test_cat_of_a_directory_says_it_is_a_directory(initialized: Path, ckpt_in: CkptIn) -> None:
    made = ckpt_in("create").stdout.strip()
    for args in (["sub"], ["sub", "--json"]):
        run = ckpt_in("cat", made, *args)
        assert (run.code, run.stdout) == (1, "")
        assert run.stderr == ("ckpt: error: sub is a directory, not a file "
                              "(hint: 'ckpt show ID' lists the files)\n")
    assert "unsafe path" in ckpt_in("cat", made, "../x").stderr
