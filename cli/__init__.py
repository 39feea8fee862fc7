"""ckpt's command line (click): the only package that imports click or decides exit codes.

It reaches the library through the public API of `ckpt.checkpoints` only (the package's lazy
exports, never a submodule) and never imports `ckpt.objstore`; tests/test_layers.py checks both.
`__version__` is the package's (`ckpt.__version__`).
"""

from ckpt import __version__

__all__ = ["__version__"]
