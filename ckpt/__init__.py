"""ckpt: content-addressed checkpoints of a workspace, for AI coding agents and their harnesses.

The one import namespace of the project. `ckpt.objstore` is the object store, `ckpt.checkpoints`
the domain (workspaces, checkpoints, restores), `ckpt.cli` the `ckpt` command and `ckpt.tuning`
the logic of `ckpt bench`. A harness imports the public API from here (`from ckpt import
Checkpoints`) or from `ckpt.checkpoints`; the names resolve on first use, so `import ckpt` (and
every CLI start) stays cheap.

The library logs under the `ckpt` logger (stdlib `logging`), at DEBUG only, and never
configures handlers: its records appear only where the application (or `ckpt -v`) asks.
`logging` is not imported here, so a CLI start that logs nothing does not pay for it.

Nothing else lives here: no logic, no state.
"""

from __future__ import annotations

# Not `typing.TYPE_CHECKING`: importing typing would lengthen every start before the command
# can catch a Ctrl-C (type checkers treat any TYPE_CHECKING name as true).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from ckpt import checkpoints, cli, objstore, tuning
    from ckpt.checkpoints import *

# The distribution's version, here so that `ckpt --version` does not pay for importlib.metadata
# (a test checks the two agree).
__version__ = "0.1.0"

__all__ = ["__version__", "checkpoints", "cli", "objstore", "tuning"]


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
