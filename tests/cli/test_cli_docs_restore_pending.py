"""A killed restore is completed by exactly the commands the README names (`create`,
`restore`, `diff` against the workspace, `recover`); the read-only ones (`list`, `latest`,
`show`, `cat`, `diff ID ID2`) leave it pending and say so on stderr, exit 0."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from fault_helpers import kill_mid_apply

from ckpt import Checkpoints

CkptIn = Callable[..., Any]


def killed_restore(root: Path, ckpt_in: CkptIn) -> tuple[str, str]:
    """Checkpoints A and B of a tree of 800 files, then a restore of A killed mid-apply."""
    for d in range(20):
        (root / f"d{d}").mkdir()
        for f in range(40):
            (root / f"d{d}" / f"f{f}.txt").write_bytes(f"A {d} {f}\n".encode() * 600)
    a = ckpt_in("create").stdout.strip()
    for path in root.glob("d*/f*.txt"):
        path.write_bytes(b"B\n" + path.read_bytes())
    b = ckpt_in("create").stdout.strip()
    rng = random.Random(2781)
    for _ in range(6):  # on a loaded machine the kill may land after the apply
        if kill_mid_apply(str(root), a, rng):
            with Checkpoints.open(str(root)) as cp:
                if cp.restore_pending() == a:
                    return a, b
        assert ckpt_in("recover").code == 0
        assert ckpt_in("restore", "--no-save", b).code == 0
    pytest.skip("the restore was never killed mid-apply")


WARNING = "ckpt: warning: the restore of {} was interrupted and is not complete"


def test_read_only_commands_warn_and_leave_a_killed_restore_pending(initialized: Path,
                                                                   ckpt_in: CkptIn) -> None:
    a, b = killed_restore(initialized, ckpt_in)
    for args in (["list"], ["latest"], ["show", a], ["cat", a, "d0/f0.txt"], ["diff", a, b],
                 ["list", "--json"]):
        run = ckpt_in(*args)
        assert run.code == 0, (args, run.stderr)
        assert run.stderr.startswith(WARNING.format(a)), (args, run.stderr)
        assert "'ckpt recover' finishes it" in run.stderr
    # Nothing of that completed it: `diff` against the workspace does, silently.
    completing = ckpt_in("diff", a)
    assert (completing.code, completing.stdout, completing.stderr) == (0, "", "")
    after = ckpt_in("list")
    assert after.code == 0 and after.stderr == ""
    assert ckpt_in("recover").stdout == "nothing to recover\n"


def test_no_warning_without_a_pending_restore(initialized: Path, ckpt_in: CkptIn) -> None:
    made = ckpt_in("create").stdout.strip()
    assert ckpt_in("restore", made).code == 0
    for args in (["list"], ["latest"], ["show", made], ["cat", made, "a.txt"]):
        assert ckpt_in(*args).stderr == "", args
