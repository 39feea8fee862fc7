"""ckpt's command line (click): the only package that imports click or decides exit codes.

It reaches the library through the public API of `ckpt.checkpoints` only (the package's lazy
exports, never a submodule) and never imports `ckpt.objstore`; tests/test_layers.py checks both.
`__version__` is the package's (`ckpt.__version__`).

`main` is the process entry point (the `ckpt` script, `python -m ckpt`). It lives here, in a
module that imports nothing, so that a Ctrl-C while the command is still being imported (click,
the command modules) is caught like one during a command: exit 130, one line, no traceback.
It first offers the call to the store's server through the thin client (`cli/client.py`, which
imports neither click nor the library); only when no server takes it is the command line
imported and run in this process.
"""

import sys

from ckpt import __version__

__all__ = ["__version__", "main"]


def main() -> None:
    """Hand the call to the store's server, else import the command line and run it; either
    way the process exits with cli/errors.py's code."""
    sys.unraisablehook = _unraisable  # this process is the command's: first thing, then
    try:
        from ckpt.cli import client

        code = client.run(sys.argv)
        if code is not None:  # the server ran it
            import os

            os._exit(code)
        from ckpt.cli.main import main as run_command
    except (KeyboardInterrupt, RuntimeError) as exc:
        # A class body's `__set_name__` (platform's, while click imports) wraps a Ctrl-C in
        # a RuntimeError: the same interrupt.
        if not isinstance(exc, KeyboardInterrupt) and not isinstance(
                exc.__cause__, KeyboardInterrupt):
            raise
        import os

        try:
            sys.stderr.write("ckpt: error: interrupted\n")
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os._exit(130)  # errors.INTERRUPTED, which is not imported yet
    run_command()


def _unraisable(unraisable: "sys.UnraisableHookArgs") -> None:  # a type for checkers only
    """A Ctrl-C that lands where Python cannot raise it (an import lock's cleanup callback)
    would be printed and lost: it is raised again where the command handles it (exit 130)."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt):
        import _thread

        _thread.interrupt_main()
        return
    sys.__unraisablehook__(unraisable)
