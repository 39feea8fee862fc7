"""ckpt: content-addressed checkpoints of a workspace, for AI coding agents and their harnesses.

The one import namespace of the project. `ckpt.objstore` is the object store, `ckpt.checkpoints`
the domain (workspaces, checkpoints, restores), `ckpt.cli` the `ckpt` command and `ckpt.tuning`
the logic of `ckpt bench`. A harness imports the public API from here (`from ckpt import
Checkpoints`) or from `ckpt.checkpoints`; the names resolve on first use, so `import ckpt` (and
every CLI start) stays cheap.

The library logs under the `ckpt` logger (stdlib `logging`) and never configures handlers: the
NullHandler below keeps its records off stderr unless the application (or `ckpt -v`) adds one.

Nothing else lives here: no logic, no state.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ckpt.checkpoints import *

# The distribution's version, here so that `ckpt --version` does not pay for importlib.metadata
# (a test checks the two agree).
__version__ = "0.1.0"

__all__ = ["__version__", "checkpoints", "cli", "objstore", "tuning"]

logging.getLogger(__name__).addHandler(logging.NullHandler())


def __getattr__(name: str) -> Any:
    import importlib

    if name in ("checkpoints", "cli", "objstore", "tuning"):
        return importlib.import_module(f"ckpt.{name}")
    checkpoints = importlib.import_module("ckpt.checkpoints")
    if name in checkpoints.__all__:
        return getattr(checkpoints, name)
    raise AttributeError(f"module 'ckpt' has no attribute {name!r}")


def __dir__() -> list[str]:
    from ckpt.checkpoints import __all__ as names

    return sorted({*__all__, *names})
