"""What every command shares: the resolved global options and the lazily opened library.

Owns `State` (root, store, session, debug, progress switch; one per invocation, kept in
click's `ctx.obj`), root discovery (nearest ancestor holding `.ckpt`), the conversion of
paths typed by a user into what the library expects, and the decorators the command modules
use (`pass_state`, `json_option`).

The library (`ckpt.checkpoints.Checkpoints`, and through it objstore, zstandard, blake3,
pathspec) is imported on the first `State.open()`, never at module import time, so
`ckpt --version` and `ckpt --help` do not load it. `library()` refuses an unsupported platform
before importing it, so Windows gets one line instead of an ImportError.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import click

from ckpt.checkpoints import display_text
from ckpt.cli.params import check_text
from ckpt.cli.progress import Progress, make_progress

if TYPE_CHECKING:
    import logging

    from ckpt.checkpoints import Checkpoints

STORE_NAME = ".ckpt"
F = TypeVar("F", bound=Callable[..., Any])


class ServicePool(Protocol):
    """Open `Checkpoints` kept across commands (the resident server's, cli/server_exec.py)."""

    def checkout(self, root: str, store: str | None, session: str) -> tuple[Checkpoints, bool]:
        """The service for (root, store, session), opened if needed; True if opened now."""
        ...


# Set by the resident server while it runs commands; None in a command's own process.
_pool: ServicePool | None = None
# The store the last `State.open` opened and its `server` setting, for the spawn on demand
# after an in-process command (cli/main.py).
_opened: tuple[str, str] | None = None


def set_pool(pool: ServicePool | None) -> None:
    global _pool
    _pool = pool


def opened_store() -> tuple[str, str] | None:
    """(store dir, its `server` setting) of the store a command of this process opened."""
    return _opened


def _log() -> logging.Logger:
    """This module's logger; `logging` is imported only by a command that opens the library."""
    import logging

    return logging.getLogger(__name__)


def library() -> type[Checkpoints]:
    """The library's entry point, imported after the platform check (`UnsupportedPlatform`,
    exit 1, on Windows)."""
    from ckpt.checkpoints import check_platform

    check_platform()
    from ckpt.checkpoints import Checkpoints

    return Checkpoints


def find_root(start: str) -> str:
    """The nearest ancestor of `start` (itself included) holding a `.ckpt` directory (the
    store, or a link to a store outside the workspace), else `start`."""
    here = os.path.abspath(start)
    while True:
        if os.path.isdir(os.path.join(here, STORE_NAME)):
            return here
        parent = os.path.dirname(here)
        if parent == here:
            return os.path.abspath(start)
        here = parent


def user_path(path: str) -> str:
    """A path typed by a user, as the library takes it (relative to the current directory).

    A relative path is passed on as typed, so messages name it as the user wrote it (the
    library joins it with `os.getcwd()`, which is already free of symlinks). An absolute
    path gets the symlinks of its parent directories resolved, because the library compares
    it with the resolved root; its last component is kept (tracking or restoring a symlink
    must not follow it).
    """
    if not os.path.isabs(path):
        return path
    head, tail = os.path.split(os.path.normpath(path))
    if not tail:  # "/" itself
        return head
    return os.path.join(os.path.realpath(head), tail)


@dataclass
class State:
    root: str
    store: str | None
    session: str
    debug: bool = False
    progress_enabled: bool = True
    _service: Checkpoints | None = field(default=None, repr=False)

    @property
    def store_dir(self) -> str:
        """The store directory as the library resolves it (a real path; found through the
        root's `.ckpt` when --store is not given)."""
        if self.store is not None:
            return os.path.realpath(self.store)
        library()
        from ckpt.checkpoints import locate_store

        return locate_store(self.root)

    def open(self) -> Checkpoints:
        """The library, opened once per invocation and closed when the command ends (in the
        resident server: taken from its pool, which keeps it open and settles it after)."""
        global _opened
        if self._service is None:
            _log().debug("opening root %s, store %s, session %s", self.root, self.store_dir,
                         self.session)
            if _pool is not None:
                self._service, opened = _pool.checkout(self.root, self.store, self.session)
                if opened:
                    _note_binding(self._service)
                return self._service
            self._service = library().open(self.root, self.store, self.session)
            click.get_current_context().call_on_close(self.close)
            _note_binding(self._service)
            _opened = (self._service.store_dir, self._service.config.server)
        return self._service

    def init(self, *, store_outside: bool = False) -> Checkpoints:
        _log().debug("initializing root %s, store %s", self.root,
                     "outside" if store_outside else self.store_dir)
        self._service = library().init(self.root, self.store, self.session,
                                       store_outside=store_outside)
        click.get_current_context().call_on_close(self.close)
        _note_binding(self._service)
        return self._service

    def close(self) -> None:
        if self._service is not None:
            service, self._service = self._service, None
            service.close()

    @contextmanager
    def progress(self) -> Iterator[Progress | None]:
        """A progress callback for the library (None when off); the line is erased after."""
        bar = make_progress(enabled=self.progress_enabled)
        try:
            yield bar
        finally:
            if bar is not None:
                bar.finish()


def _note_binding(service: Checkpoints) -> None:
    """One line on stderr when opening re-bound a moved workspace's history, or found the
    workspace to be a copy of another (the library records the move as an event too)."""
    if service.moved_from is not None:
        click.echo(f"ckpt: note: workspace moved from {display_text(service.moved_from)} to "
                   f"{display_text(service.root)}; its checkpoints follow it", err=True)
    if service.copied_from is not None:
        click.echo(f"ckpt: note: workspace is a copy of {display_text(service.copied_from)}; "
                   "it starts a history of its own", err=True)


pass_state = click.make_pass_decorator(State)


def text_callback(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """Reject text the catalog cannot store (usage error naming the option)."""
    try:
        if isinstance(value, tuple):
            return tuple(check_text(v) for v in value)
        return None if value is None else check_text(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None


def json_option(func: F) -> F:
    return click.option("--json", "as_json", is_flag=True,
                        help="Print JSON on stdout (see docs/CLI.md for the schema).")(func)


def complete_checkpoint_id(ctx: click.Context, param: click.Parameter,
                           incomplete: str) -> list[str]:
    """Shell completion of checkpoint ids (all sessions), from the store the options name."""
    try:
        params = ctx.find_root().params
        root = params.get("root") or find_root(os.getcwd())
        with library().open(root, params.get("store"), params.get("session") or "default") as cp:
            ids = [r.id for r in cp.history(all_sessions=True)]
    except Exception:  # noqa: BLE001 - completion must never print a traceback into the shell
        return []
    return [i for i in reversed(ids) if i.startswith(incomplete)][:200]
