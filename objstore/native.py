"""ckpt's optional native extensions: the one place that loads them, and the switch that
turns them off.

Each extension (`ckpt.objstore._readfiles`, `_records`, `_codec`,
`ckpt.checkpoints._dirscan`, `_fsops`) has a pure-Python fallback that gives the same
results, for installs without a compiler (macOS without the command-line tools, a bare
container). `CKPT_NATIVE=0` in the environment makes every extension count as not built, so
the fallbacks run and are tested (CI runs the suite a second time that way). Nothing else
lives here.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

ENV_SWITCH = "CKPT_NATIVE"


def native_enabled() -> bool:
    """False when the environment turns the native extensions off (`CKPT_NATIVE=0`)."""
    return os.environ.get(ENV_SWITCH, "1").strip() not in ("0", "false", "no", "off")


def load_native(name: str) -> ModuleType | None:
    """The extension module `name`, or None where it is not built or is switched off."""
    if not native_enabled():
        return None
    try:
        return importlib.import_module(name)
    except ImportError:  # optional at install (pyproject.toml)
        return None
