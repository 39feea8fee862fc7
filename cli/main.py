"""The `ckpt` command: the click group, its global options and the process entry point.

Owns the global options (`--root`/CKPT_ROOT, `--store`/CKPT_STORE, `--session`/CKPT_SESSION,
`--debug`/CKPT_DEBUG, `-v`/CKPT_LOG (see `cli/log.py`), `--no-progress`, `--version`), the
registration of the command modules and `main()`, which runs the group with `standalone_mode=False` and turns whatever escapes into
an exit code through `cli/errors.py` (the only exit-code table). Commands raise; they never
call `sys.exit` themselves.

Imports stay light: click and the command modules only. The library is imported by the
commands when they run (see `cli/context.py`).
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import click

from ckpt.cli import __version__, errors, log
from ckpt.cli.commands import (
    agents,
    history,
    maintenance,
    remote,
    restore,
    schema,
    server,
    setup,
    snapshot,
    tune,
)
from ckpt.cli.context import State, find_root, opened_store, text_callback
from ckpt.cli.render import delivered, reset_delivered

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

EPILOG = """\b
Examples:
  ckpt init                              # create .ckpt in the current directory
  ckpt create -m "before refactor"       # take a checkpoint, print its id
  ckpt diff ckpt-1764433022123-q7x2m9ta  # what changed since then
  ckpt restore ckpt-17644330221          # go back (any unique id prefix); undoable
  ckpt --session task-42 list --json     # another timeline, as JSON

\b
Environment:
  CKPT_ROOT, CKPT_STORE, CKPT_SESSION, CKPT_DEBUG   defaults for the global options
  CKPT_LOG=debug|info|warning   log lines on stderr (why files were re-read or trusted,
                                restore steps); -v is CKPT_LOG=debug

\b
Exit codes:
  0 ok   1 user error (also: unsupported platform; ckpt runs on Linux and macOS)
  2 usage   3 nothing matched / partial restore   4 store busy   5 corruption
  6 the resident server died during the command (run it again)
  130 interrupted   141 broken pipe (stdout closed early)

\b
Shell completion (bash; zsh/fish: zsh_source, fish_source):
  eval "$(_CKPT_COMPLETE=bash_source ckpt)"
"""


class CkptGroup(click.Group):
    """A group that maps every error of a command through `cli/errors.py`.

    Doing it here (not only in `main`) makes click's CliRunner see the same exit codes and
    stderr lines as a real process.
    """

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        # A Ctrl-C while the arguments are parsed is told here: click's own handling would
        # put a blank line before the error line.
        try:
            return super().make_context(info_name, args, parent, **extra)
        except KeyboardInterrupt as exc:
            raise click.exceptions.Exit(errors.report(exc, debug=_env_debug())) from None

    def invoke(self, ctx: click.Context) -> Any:
        reset_delivered()
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except BrokenPipeError:
            _silence_stdout()
            raise click.exceptions.Exit(errors.BROKEN_PIPE) from None
        except KeyboardInterrupt as exc:
            if delivered():  # the result was printed: it stands
                raise click.exceptions.Exit(errors.OK) from None
            state = ctx.find_object(State)
            code = errors.report(exc, debug=state.debug if state is not None else _env_debug())
            raise click.exceptions.Exit(code) from None
        except Exception as exc:  # noqa: BLE001 - the one error table
            state = ctx.find_object(State)
            debug = state.debug if state is not None else _env_debug()
            code = errors.report(exc, debug=debug)
            raise click.exceptions.Exit(code) from None


def _env_debug() -> bool:
    return os.environ.get("CKPT_DEBUG", "").lower() in ("1", "true", "yes", "on")


def _silence_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final flush is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


@click.group(cls=CkptGroup, context_settings=CONTEXT_SETTINGS, epilog=EPILOG)
@click.option("--root", metavar="DIR", envvar="CKPT_ROOT",
              type=click.Path(file_okay=False, path_type=str),
              help="Workspace root [env CKPT_ROOT; default: the nearest ancestor of the current "
                   "directory holding .ckpt, else the current directory].")
@click.option("--store", metavar="DIR", envvar="CKPT_STORE",
              type=click.Path(file_okay=False, path_type=str),
              help="Store directory [env CKPT_STORE; default: ROOT/.ckpt].")
@click.option("--session", metavar="NAME", envvar="CKPT_SESSION", default="default",
              show_default=True, callback=text_callback,
              help="Session (timeline) [env CKPT_SESSION].")
@click.option("--debug", is_flag=True, envvar="CKPT_DEBUG",
              help="Print a traceback with errors [env CKPT_DEBUG].")
@click.option("-v", "--verbose", count=True,
              help="Log on stderr why each file was re-read or trusted, and the restore's steps "
                   "(debug level) [env CKPT_LOG=debug|info|warning].")
@click.option("--no-progress", is_flag=True,
              help="Never draw progress on stderr (it is drawn only on a terminal anyway).")
@click.version_option(__version__, prog_name="ckpt", message="%(prog)s %(version)s")
@click.pass_context
def cli(ctx: click.Context, root: str | None, store: str | None, session: str, debug: bool,
        verbose: int, no_progress: bool) -> None:
    """ckpt: content-addressed checkpoints of a workspace, for AI coding agents.

    Take a checkpoint before and after every agent turn or tool call; restore one when a
    turn goes wrong (every restore can be undone). Every command takes --json.
    """
    # Debug first, so an error while resolving the rest is reported with it.
    state = State(root="", store=store, session=session, debug=debug,
                  progress_enabled=not no_progress)
    ctx.obj = state
    _start_logging(ctx, verbose)
    if not session:
        raise click.BadParameter("must not be empty", param_hint="'--session'")
    state.root = root or find_root(os.getcwd())


def _start_logging(ctx: click.Context, verbose: int) -> None:
    """Attach the stderr log handler for this invocation, if -v or CKPT_LOG asks for one."""
    try:
        level = log.chosen_level(verbose=verbose, env=os.environ.get(log.ENV))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=log.ENV) from None
    if level is not None:
        ctx.call_on_close(log.attach(level, sys.stderr))


for _module in (setup, snapshot, restore, maintenance, remote, tune, schema, agents, server):
    for _command in _module.COMMANDS:
        cli.add_command(_command)
cli.add_command(history.undo)
cli.add_command(history.forget)
cli.add_command(history.log_)


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script entry point: run `ckpt` and exit with the code of cli/errors.py."""
    # This process is one command and ends with os._exit below, so it runs without the cyclic
    # collector: a scan's records live until the command ends and hold no cycles, and the
    # collector would only walk them again and again. The library never touches it; a harness
    # owns its process and decides for itself.
    gc.disable()
    code = run_command(argv)
    _start_server_if_wanted()
    # Everything the command opened is closed and output is flushed; what the interpreter would
    # still do (free every object, a last cyclic collection) the kernel does at once on exit.
    os._exit(code)


def run_command(argv: Sequence[str] | None = None) -> int:
    """Run `ckpt` with `argv`, flush stdout and stderr, and return the exit code: what `main`
    does in a process of its own, and the resident server for each request."""
    try:
        code = run(argv)
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            code = code or errors.BROKEN_PIPE
        except (OSError, ValueError):
            pass
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
    except KeyboardInterrupt as exc:  # between the command's end and the exit
        code = _interrupted(exc, debug=False)
    return code


def _start_server_if_wanted() -> None:
    """After a command that opened a store: start its resident server if none answers and
    neither CKPT_SERVER nor the store's `server` setting is off (cli/server_spawn.py).
    It never waits for the server, and never fails the command."""
    opened = opened_store()
    if opened is None:
        return
    try:
        from ckpt.cli import server_spawn

        store, setting = opened
        if server_spawn.wanted(setting, os.environ.get("CKPT_SERVER")):
            server_spawn.ensure_started(store)
    except (Exception, KeyboardInterrupt):  # noqa: BLE001 - the command's result stands
        pass


def run(argv: Sequence[str] | None = None) -> int:
    """Run `ckpt` with `argv` (default: sys.argv[1:]) and return the exit code."""
    reset_delivered()
    try:
        result = cli.main(args=list(argv) if argv is not None else None, prog_name="ckpt",
                          standalone_mode=False)
    except click.ClickException as exc:  # usage errors (2) and friends
        exc.show()
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort as exc:
        if isinstance(exc.__cause__, KeyboardInterrupt):
            return _interrupted(exc.__cause__, debug=False)
        return errors.report(exc, debug=False)
    except BrokenPipeError:
        _silence_stdout()
        return errors.BROKEN_PIPE
    except KeyboardInterrupt as exc:
        return _interrupted(exc, debug=_debug_asked(argv))
    except Exception as exc:  # noqa: BLE001 - before a command ran
        return errors.report(exc, debug=_debug_asked(argv))
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def _interrupted(exc: KeyboardInterrupt, *, debug: bool) -> int:
    """Ctrl-C outside a command's own error handling: 130, or 0 once its result was printed."""
    if delivered():
        return errors.OK
    return errors.report(exc, debug=debug)


def _debug_asked(argv: Sequence[str] | None) -> bool:
    return _env_debug() or "--debug" in (argv or sys.argv[1:])


if __name__ == "__main__":  # pragma: no cover
    main()
