"""Ctrl-C and `create` agree with each other: a printed id means the checkpoint exists and the
exit is 0; an exit of 130 means nothing was printed. SIGINT goes to a real `python -m ckpt
create` at seeded random moments of its run, and just after its id came out (where the id
once came out and the exit was still 130). Every printed id is listed afterwards and the store
checks clean.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from soak import scale
from test_cli_signals_startup import ckpt_frames  # tests/cli is on pytest's pythonpath

Env = Callable[..., dict[str, str]]
# Python's own report of a SIGINT before it could run `-m ckpt` (test_cli_signals_startup.py).
INTERPRETER_FAILURES = ("Fatal Python error: init_", "Could not import runpy module",
                        "python: failed to set __main__.__loader__")


def interrupted_create(root: Path, env: dict[str, str], delay: float | None,
                       after_output: float) -> tuple[int, str, str]:
    """Run `create`; SIGINT it `delay` seconds after the start, or (delay None) `after_output`
    seconds after its first byte on stdout."""
    child = subprocess.Popen([sys.executable, "-m", "ckpt", "create"], cwd=root, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    assert child.stdout is not None
    head = b""
    if delay is None:
        head = child.stdout.read(1)  # blocks until the id starts coming out (or the end)
        time.sleep(after_output)
    else:
        time.sleep(delay)
    child.send_signal(signal.SIGINT)
    out, err = child.communicate(timeout=120)
    return child.returncode, (head + out).decode(), err.decode("utf-8", "replace")


def test_a_printed_id_exits_0_and_an_interrupted_create_prints_nothing(
        initialized: Path, env_for: Env) -> None:
    root = initialized
    for d in range(30):
        (root / f"d{d}").mkdir()
        for f in range(20):
            (root / f"d{d}" / f"f{f}.txt").write_text(f"{d} {f}\n" * 40)
    env = env_for()
    subprocess.run([sys.executable, "-m", "ckpt", "create"], cwd=root, env=env, check=True,
                   capture_output=True)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "ckpt", "create"], cwd=root, env=env, check=True,
                   capture_output=True)
    whole = time.monotonic() - started
    rng = random.Random(2710)
    printed: list[str] = []
    seen: Counter[str] = Counter()
    for i in range(scale(24, 240)):
        with open(root / f"d{i % 30}" / "f0.txt", "a") as out:
            out.write(f"turn {i}\n")
        after_output = i % 2 == 1
        code, out_text, err = interrupted_create(
            root, env, None if after_output else rng.uniform(0, whole), rng.uniform(0, 0.004))
        assert "Traceback" not in err or err.startswith(INTERPRETER_FAILURES) \
            or not ckpt_frames(err), err  # runpy or the import system, before ckpt's code
        if code == 0:
            ids = out_text.split()
            assert len(ids) == 1 and out_text == ids[0] + "\n", out_text
            printed.append(ids[0])
            seen["exit 0" + (" after the id" if after_output else "")] += 1
        else:
            assert code in (130, -signal.SIGINT, 1), (code, err)
            assert out_text == "", f"exit {code} after printing {out_text!r}"
            seen[f"exit {code}"] += 1
    assert seen["exit 0 after the id"] > 0, seen
    listed = json.loads(subprocess.run([sys.executable, "-m", "ckpt", "list", "--json"],
                                       cwd=root, env=env, check=True,
                                       capture_output=True).stdout)
    assert set(printed) <= {r["id"] for r in listed}
    fsck = subprocess.run([sys.executable, "-m", "ckpt", "fsck"], cwd=root, env=env,
                          capture_output=True, text=True, check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
