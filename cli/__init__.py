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
    global _main_thread
    import _thread

    _main_thread = _thread.get_ident()
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


_main_thread: "int | None" = None  # `main`'s thread, where an interrupt is raised


def _unraisable(unraisable: "sys.UnraisableHookArgs") -> None:  # a type for checkers only
    """A Ctrl-C that lands where Python cannot raise it (an import lock's cleanup callback)
    would be printed and lost: it is raised again where the command handles it (exit 130).
    Not from inside this hook, where on the main thread it would be raised at once, in the
    hook, and so be printed and lost after all: a helper thread raises it once the main
    thread has left the hook."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and _main_thread is not None:
        import _thread

        _thread.start_new_thread(_interrupt_after_hook, (_main_thread,))
        return
    sys.__unraisablehook__(unraisable)


def _interrupt_after_hook(main_thread: int) -> None:
    """Send SIGINT to `main_thread` once no frame of it is `_unraisable`'s: a real signal, so
    that a blocking call there is interrupted as by the user's Ctrl-C."""
    import signal
    import time

    while True:
        frame = sys._current_frames().get(main_thread)
        while frame is not None and frame.f_code is not _unraisable.__code__:
            frame = frame.f_back
        if frame is None:
            break
        time.sleep(0.001)
    signal.pthread_kill(main_thread, signal.SIGINT)
