"""ckpt: content-addressed checkpoints of a workspace, for AI coding agents and their harnesses.

The one import namespace of the project. `ckpt.objstore` is the object store, `ckpt.checkpoints`
the domain (workspaces, checkpoints, restores) and `ckpt.cli` the `ckpt` command. A harness
imports the public API from here (`from ckpt import Checkpoints`) or from `ckpt.checkpoints`;
the names resolve on first use, so `import ckpt` (and every CLI start) stays cheap.

Nothing else lives here: no logic, no state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ckpt.cli import __version__

if TYPE_CHECKING:
    from ckpt.checkpoints import *  # noqa: F403

__all__ = ["__version__", "checkpoints", "cli", "objstore"]


def __getattr__(name: str) -> Any:
    import importlib

    if name in ("checkpoints", "cli", "objstore"):
        return importlib.import_module(f"ckpt.{name}")
    checkpoints = importlib.import_module("ckpt.checkpoints")
    if name in checkpoints.__all__:
        return getattr(checkpoints, name)
    raise AttributeError(f"module 'ckpt' has no attribute {name!r}")


def __dir__() -> list[str]:
    from ckpt.checkpoints import __all__ as names

    return sorted({*__all__, *names})
