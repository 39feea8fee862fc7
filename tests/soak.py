"""The test suite's soak switch: `CKPT_SOAK=1` (or true/yes/on) runs the long variants.

Every bounded count that has a soak figure (kill points, race length, hypothesis examples,
tree sizes) comes from `scale(default, soak)`, so one variable switches the whole suite and
the default run stays within CI's time. Not a test module: tests import it by name (pyproject
puts tests/ on pytest's `pythonpath`).
"""

from __future__ import annotations

import os

SOAK = os.environ.get("CKPT_SOAK", "").strip().lower() in ("1", "true", "yes", "on")


def scale(default: int, soak: int) -> int:
    """`soak` in a soak run, `default` otherwise."""
    return soak if SOAK else default
