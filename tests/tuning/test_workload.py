"""`ckpt.tuning.workload` is plain standard-library code: bench/compare.py (which must not load
ckpt's library, the thing it measures) imports it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_workload_loads_nothing_of_the_library_or_beyond_the_stdlib() -> None:
    code = ("import sys\n"
            "before = set(sys.modules)\n"
            "import ckpt.tuning.workload\n"
            "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
            "print(sorted(m for m in set(sys.modules) - before if m.startswith('ckpt')))\n"
            "print(sorted(new - set(sys.stdlib_module_names) - {'ckpt'}))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=True)
    ours, third_party = done.stdout.splitlines()
    assert ours == str(["ckpt", "ckpt.tuning", "ckpt.tuning.workload"])
    assert third_party == "[]"
