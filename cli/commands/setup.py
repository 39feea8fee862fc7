"""Setting a workspace up: `init`, `track`, `untrack`, `config get|set|list`.

`config` reads and writes `<store>/config.toml` through the library's config functions
(`read_config`, `set_config_value`) without opening the whole library; `check_store` still
requires an initialized store (`config` on an uninitialized root exits 1).
"""

from __future__ import annotations

import os
from typing import Any

import click

from ckpt.cli.context import State, json_option, pass_state, user_path
from ckpt.cli.errors import USAGE, CliError
from ckpt.cli.render import path_text, write_json, write_lines


@click.command(epilog="""\b
Examples:
  ckpt init                      # store in ./.ckpt
  ckpt init --store-outside      # store in ~/.local/share/ckpt/stores/<id>, linked from ./.ckpt
  ckpt --root ~/proj init        # store in ~/proj/.ckpt
  ckpt --store /fast/ckpt init   # store elsewhere, linked from ./.ckpt (later commands find it)
""")
@click.option("--store-outside", is_flag=True,
              help="Keep the store outside the workspace, in $XDG_DATA_HOME/ckpt/stores/<id> "
                   "(default ~/.local/share/...), keyed by the workspace's identity; ./.ckpt "
                   "then only links to it.")
@json_option
@pass_state
def init(state: State, store_outside: bool, as_json: bool) -> None:
    """Create the store for the workspace root (idempotent).

    Prints the store path. Nothing is checkpointed yet: run 'ckpt create'. Inside a folder
    of an initialized workspace, init reuses that workspace's store and says so; pass
    --root . to make the folder a workspace of its own (a nested store, which the outer
    workspace's checkpoints leave out).
    """
    if not os.path.isdir(state.root):
        raise CliError(f"workspace root {state.root} is not a directory",
                       hint="create it first, or pass --root DIR")
    if store_outside and state.store is not None:
        raise CliError("--store-outside and --store exclude each other", code=USAGE)
    from ckpt.checkpoints import is_store_dir

    reused = is_store_dir(state.store_dir)
    service = state.init(store_outside=store_outside)
    if reused and _in_subfolder(state, service.root):
        click.echo(f"ckpt: note: {path_text(service.root)} is already a ckpt workspace; "
                   f"reusing its store {path_text(service.store_dir)} (to make this folder "
                   "a workspace of its own, run 'ckpt --root . init')", err=True)
    if as_json:
        write_json({"store": path_text(service.store_dir), "root": path_text(service.root),
                    "workspace": service.workspace_id, "reused": reused})
    else:
        write_lines([service.store_dir])


def _in_subfolder(state: State, root: str) -> bool:
    """Whether the root was found above the current directory (no --root given)."""
    explicit = click.get_current_context().find_root().params.get("root")
    return not explicit and os.path.realpath(os.getcwd()) != root


_TRACK_EPILOG = """\b
Examples:
  ckpt track src/app.py notes/   # checkpoints of this session now cover only these
  ckpt untrack notes/            # stop covering a path
  ckpt --session task-42 track config.yaml
"""


@click.command(epilog=_TRACK_EPILOG, short_help="Add paths to the session's tracked paths.")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@json_option
@pass_state
def track(state: State, paths: tuple[str, ...], as_json: bool) -> None:
    """Add PATH... to the session's tracked paths (relative to the current directory).

    A session with tracked paths checkpoints only those (plus 'create --path' extras); a
    tracked path that does not exist is recorded as absent, and a restore deletes it.
    """
    service = state.open()
    tracked = service.track(*(user_path(p) for p in paths), cwd=os.getcwd())
    _print_tracked(tracked, as_json)


@click.command(epilog=_TRACK_EPILOG,
               short_help="Remove paths from the session's tracked paths.")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str))
@json_option
@pass_state
def untrack(state: State, paths: tuple[str, ...], as_json: bool) -> None:
    """Remove PATH... from the session's tracked paths (relative to the current directory).

    When no tracked path is left, checkpoints cover the whole tree again.
    """
    service = state.open()
    tracked = service.untrack(*(user_path(p) for p in paths), cwd=os.getcwd())
    _print_tracked(tracked, as_json)


def _print_tracked(tracked: tuple[bytes, ...], as_json: bool) -> None:
    if as_json:
        write_json({"tracked": [path_text(p) for p in tracked]})


# -- config -------------------------------------------------------------------------------

def _config_value_json(value: object) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _config_value_text(value: object) -> str:
    """The form 'config set' accepts back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def _store_dir(state: State) -> str:
    """The store directory, checked to be an initialized store of a format we read."""
    from ckpt.checkpoints import check_store

    check_store(state.store_dir)  # StoreNotFound -> "run 'ckpt init'"
    return state.store_dir


@click.group(epilog="""\b
Examples:
  ckpt config list
  ckpt config get compression_level
  ckpt config set lock_timeout 30
  ckpt config set extra_ignore '*.log,build/'
  ckpt config set max_file_size 256M
""")
def config() -> None:
    """Read and change the store's settings (<store>/config.toml)."""


@config.command("get")
@click.argument("key")
@json_option
@pass_state
def config_get(state: State, key: str, as_json: bool) -> None:
    """Print the value of setting KEY."""
    from ckpt.checkpoints import get_config_value, read_config

    value = get_config_value(read_config(_store_dir(state)), key)
    if as_json:
        write_json({"key": key, "value": _config_value_json(value)})
    else:
        write_lines([_config_value_text(value)])


@config.command("set")
@click.argument("key")
@click.argument("value")
@json_option
@pass_state
def config_set(state: State, key: str, value: str, as_json: bool) -> None:
    """Set KEY to VALUE (checked before the file is written).

    Sizes take units (64M, 1.5G, 100KiB), booleans true/false/yes/no/on/off/1/0, and
    extra_ignore comma-separated gitignore patterns ('' clears it).
    """
    from ckpt.checkpoints import get_config_value, set_config_value

    new = get_config_value(set_config_value(_store_dir(state), key, value), key)
    if as_json:
        write_json({"key": key, "value": _config_value_json(new)})
    else:
        write_lines([f"{key} = {_config_value_text(new)}"])


@config.command("list")
@json_option
@pass_state
def config_list(state: State, as_json: bool) -> None:
    """Print every setting and its value (defaults included)."""
    from ckpt.checkpoints import CONFIG_KEYS, get_config_value, read_config

    cfg = read_config(_store_dir(state))
    values = {key: get_config_value(cfg, key) for key in CONFIG_KEYS}
    if as_json:
        write_json({key: _config_value_json(v) for key, v in values.items()})
    else:
        write_lines([f"{key} = {_config_value_text(v)}" for key, v in values.items()])


COMMANDS = [init, track, untrack, config]
