"""A Ctrl-C while `ckpt` is still starting (importing click and its own modules) ends it
with exit 130 and one line, never a traceback: SIGINT at seeded random moments right after
spawning `python -m ckpt list` and the `ckpt` console script.

What no program can catch is not held against ckpt: a SIGINT before Python's own start-up is
done (the interpreter reports "Fatal Python error: init_..." or "Could not import runpy
module" itself, or dies of the signal before it installed its handler, or `site` reports it
from a .pth file and goes on), or while Python imports the `ckpt` package itself or runs
the first line of an entry module (`ckpt/__init__.py`, `ckpt/__main__.py`,
`ckpt/cli/__init__.py`: kept to a few statements for that reason). Any frame of another ckpt
module in a traceback fails the test.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from soak import scale

Env = Callable[..., dict[str, str]]
ENTRY_FILES = {"__init__.py", "__main__.py", "cli/__init__.py"}
# How Python itself reports a SIGINT before it could run `-m ckpt` or the script.
INTERPRETER_FAILURES = ("Fatal Python error: init_", "Could not import runpy module",
                        "python: failed to set __main__.__loader__")
SITE_PTH_ERROR = re.compile(r"Error processing line \d+ of .+\.pth:\n")
FRAME = re.compile(r'^  File "([^"]+)", line \d+, in (\S+)$', re.MULTILINE)


def ckpt_frames(stderr: str) -> list[str]:
    """The frames of a traceback in ckpt's own code, as paths inside the package (the file
    names the child's Python gives: `.../ckpt/cli/main.py`, wherever ckpt is installed)."""
    return [path.rpartition("/ckpt/")[2] for path, _function in FRAME.findall(stderr)
            if "/ckpt/" in path]


def judge(code: int, stderr: str) -> str:
    """One outcome's kind; raises when ckpt let a traceback out or exited otherwise."""
    if stderr.startswith(INTERPRETER_FAILURES):
        return "interpreter start-up"
    if SITE_PTH_ERROR.match(stderr):
        # Python's `site` caught it while running a .pth file (the editable install's
        # finder), printed it and went on: the command then ran, or, without the finder,
        # Python could not find ckpt at all.
        assert code == 0 or (code == 1 and "No module named" in stderr), (code, stderr)
        return "dropped by Python's site"
    if code == 1 and stderr == "KeyboardInterrupt\n":
        # Raised in Python's C start-up before the script's first line (no frame, so no
        # traceback): the interpreter prints the bare name and exits 1.
        return "interpreter start-up"
    if "Traceback" in stderr:
        ours = [f for f in ckpt_frames(stderr) if f not in ENTRY_FILES]
        assert not ours, f"a traceback through ckpt's code ({ours}):\n{stderr}"
        if stderr.startswith("Exception ignored in") and code == 0:
            # Python dropped it itself (an import lock's callback) before ckpt's first
            # statement could install the hook that raises it again; the command then ran.
            return "dropped by Python before ckpt's first statement"
        assert code == -signal.SIGINT, (code, stderr)
        return "before ckpt's first statement"
    if code == -signal.SIGINT:
        assert stderr == "", stderr
        return "killed before Python's handler"
    if code == 130:
        assert stderr == "ckpt: error: interrupted\n", stderr
        return "interrupted"
    assert code == 0, (code, stderr)
    return "finished"


def entry_points() -> list[list[str]]:
    found = [[sys.executable, "-m", "ckpt"]]
    script = shutil.which("ckpt", path=os.path.dirname(sys.executable))
    if script is not None:
        found.append([script])
    return found


@pytest.mark.in_process("its moments spread over the in-process start-up (click, the command "
                        "modules), which a call handed to a server does not have")
@pytest.mark.parametrize("entry", entry_points(), ids=lambda argv: "-m" if "-m" in argv else "script")
def test_sigint_during_start_up_exits_130_without_a_traceback(initialized: Path, env_for: Env,
                                                              entry: list[str]) -> None:
    env = env_for()
    argv = [*entry, "list"]
    for _ in range(2):  # the second run finds the bytecode compiled
        started = time.monotonic()
        done = subprocess.run(argv, cwd=initialized, env=env, capture_output=True,
                              timeout=60, check=False)
        assert done.returncode == 0, done.stderr
    whole = time.monotonic() - started  # the moments are spread over one whole run
    rng = random.Random(2817)
    seen: Counter[str] = Counter()
    for _ in range(scale(30, 300)):
        child = subprocess.Popen(argv, cwd=initialized, env=env, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0, whole))
        child.send_signal(signal.SIGINT)
        _out, err = child.communicate(timeout=60)
        seen[judge(child.returncode, err.decode("utf-8", "replace"))] += 1
    assert seen["interrupted"] > 0, seen  # some moments fell inside ckpt's own start-up


# `main` with the server's client replaced: a Ctrl-C lands in a finalizer on the main thread
# (as in an import lock's cleanup callback), where Python cannot raise it, then the command
# goes on for 30 s unless the interrupt comes back.
_LOST_INTERRUPT = """
import sys, time
import ckpt.cli
from ckpt.cli import client

class Finalized:
    def __del__(self):
        raise KeyboardInterrupt

def run(argv):
    Finalized()
    time.sleep(30)

client.run = run
sys.argv = ["ckpt", "list"]
ckpt.cli.main()
"""


def test_an_interrupt_python_cannot_raise_on_the_main_thread_still_ends_with_130(
        initialized: Path, env_for: Env) -> None:
    """The unraisable hook raises the interrupt again once it has returned: raised inside the
    hook it would be printed as "Exception ignored in sys.unraisablehook" and lost."""
    done = subprocess.run([sys.executable, "-c", _LOST_INTERRUPT], cwd=initialized,
                          env=env_for(), capture_output=True, text=True, timeout=25, check=False)
    assert (done.returncode, done.stderr) == (130, "ckpt: error: interrupted\n")
