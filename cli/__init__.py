"""ckpt's command line (click): the only package that imports click or decides exit codes.

`__version__` is the distribution's version, kept here so `ckpt --version` does not pay for
`importlib.metadata` (a test checks the two agree).
"""

__version__ = "0.1.0"
