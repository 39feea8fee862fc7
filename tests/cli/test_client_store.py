"""The thin client finds the store a command uses exactly as the library does, on every layout.

The client (cli/client.py) resolves root and store without click or the library, from the
global options, CKPT_ROOT/CKPT_STORE and the markers. Here each layout is set up with the real
`ckpt init`, and the client's answer is compared with what the real command line resolves
(the click group's options and envvars, `find_root`, `State.store_dir`, the library's
`locate_store`), through a probe command added to the group for the test.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from ckpt.cli import client
from ckpt.cli.context import State, pass_state
from ckpt.cli.main import cli
from ckpt.cli.wire import socket_path

Resolve = Callable[..., tuple[str | None, str | None]]


@pytest.fixture
def resolve(monkeypatch: pytest.MonkeyPatch) -> Iterator[Resolve]:
    """(client's store, command line's store) for `args` run from `cwd` with `env`."""
    seen: list[str] = []

    @click.command("probe-store")
    @pass_state
    def probe(state: State) -> None:
        seen.append(state.store_dir)

    cli.add_command(probe)

    def run(args: list[str], cwd: Path,
            env: dict[str, str] | None = None) -> tuple[str | None, str | None]:
        env = env or {}
        for name in ("CKPT_ROOT", "CKPT_STORE"):
            monkeypatch.delenv(name, raising=False)
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.chdir(cwd)
        mine = client.find_store([*args, "probe-store"], dict(os.environ))
        seen.clear()
        result = CliRunner().invoke(cli, [*args, "probe-store"], prog_name="ckpt")
        assert result.exit_code == 0, result.output
        return mine, seen[0]

    yield run
    cli.commands.pop("probe-store")


def init(root: Path, *args: str, env: dict[str, str] | None = None) -> None:
    result = CliRunner().invoke(cli, ["--root", str(root), *args, "init"], env=env,
                                prog_name="ckpt")
    assert result.exit_code == 0, result.output


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = (tmp_path / "ws").resolve()
    (root / "sub" / "deeper").mkdir(parents=True)
    return root


def test_store_in_the_root_from_the_root_and_a_nested_directory(ws: Path,
                                                                resolve: Resolve) -> None:
    init(ws)
    for cwd in (ws, ws / "sub", ws / "sub" / "deeper"):
        mine, theirs = resolve([], cwd)
        assert mine == theirs == str(ws / ".ckpt")


def test_store_elsewhere_through_the_link_directory(ws: Path, tmp_path: Path,
                                                    resolve: Resolve) -> None:
    elsewhere = tmp_path / "fast" / "store"
    init(ws, "--store", str(elsewhere))
    assert not (ws / ".ckpt" / "format").exists()  # a link, not the store
    for cwd in (ws, ws / "sub"):
        mine, theirs = resolve([], cwd)
        assert mine == theirs == str(elsewhere.resolve())


def test_store_outside_the_workspace_in_the_user_data_dir(ws: Path, tmp_path: Path,
                                                          resolve: Resolve,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "xdg"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    result = CliRunner().invoke(cli, ["--root", str(ws), "init", "--store-outside"],
                                prog_name="ckpt")
    assert result.exit_code == 0, result.output
    mine, theirs = resolve([], ws / "sub" / "deeper")
    assert mine == theirs
    assert mine is not None and mine.startswith(str(data.resolve()))


@pytest.mark.parametrize("form", ["--store X", "--store=X", "CKPT_STORE"])
def test_a_named_store(ws: Path, tmp_path: Path, resolve: Resolve, form: str,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "named"
    init(ws, "--store", str(store))
    (tmp_path / "away").mkdir()
    link = tmp_path / "via-link"
    link.symlink_to(store)
    args = {"--store X": ["--store", str(link)], "--store=X": [f"--store={link}"],
            "CKPT_STORE": []}[form]
    env = {"CKPT_STORE": str(link)} if form == "CKPT_STORE" else None
    mine, theirs = resolve([*args, "--root", str(ws)], tmp_path / "away", env)
    assert mine == theirs == str(store.resolve())


@pytest.mark.parametrize("form", ["--root X", "--root=X", "CKPT_ROOT", "relative"])
def test_a_named_root_from_elsewhere(ws: Path, tmp_path: Path, resolve: Resolve,
                                     form: str) -> None:
    init(ws)
    away = tmp_path / "away"
    away.mkdir()
    args = {"--root X": ["--root", str(ws)], "--root=X": [f"--root={ws}"], "CKPT_ROOT": [],
            "relative": ["--root", "../ws"]}[form]
    env = {"CKPT_ROOT": str(ws)} if form == "CKPT_ROOT" else None
    mine, theirs = resolve(["--debug", "-v", "--session", "s", *args, "--no-progress"],
                           away, env)
    assert mine == theirs == str(ws / ".ckpt")


def test_the_option_wins_over_the_environment(ws: Path, tmp_path: Path,
                                              resolve: Resolve) -> None:
    init(ws)
    other = tmp_path / "other"
    other.mkdir()
    init(other)
    mine, theirs = resolve(["--root", str(other)], ws, {"CKPT_ROOT": str(ws)})
    assert mine == theirs == str(other / ".ckpt")


def test_a_root_reached_through_a_symlink(ws: Path, tmp_path: Path, resolve: Resolve) -> None:
    init(ws)
    link = tmp_path / "link-to-ws"
    link.symlink_to(ws)
    mine, theirs = resolve([], link / "sub")
    assert mine == theirs == str(ws / ".ckpt")


def test_no_workspace_means_no_server_to_ask(ws: Path, resolve: Resolve) -> None:
    mine, theirs = resolve([], ws / "sub")
    assert mine is None  # the library would make the store here on `init`; nothing to serve
    assert theirs == str(ws / "sub" / ".ckpt")


def test_a_marker_that_is_neither_store_nor_link(ws: Path, resolve: Resolve) -> None:
    (ws / ".ckpt").mkdir()
    (ws / ".ckpt" / "workspace").write_bytes(b"something else\nstore /elsewhere\n")
    mine, theirs = resolve([], ws)
    assert mine is None
    assert theirs == str(ws / ".ckpt")


@pytest.mark.parametrize("args", [
    ["--help"], ["-h"], ["--version", "list"], ["--", "list"], ["--bogus", "list"],
    ["--root"], ["--root="], ["--root", "x"], ["-x", "list"], ["-vx", "list"], [],
    ["-", "list"],
])
def test_unusual_arguments_leave_the_call_in_process(args: list[str]) -> None:
    assert client.parse_globals(args) is None


def test_global_options_before_the_command_are_read() -> None:
    assert client.parse_globals(["-vv", "--root", "r", "--store=s", "--session", "--x",
                                 "list", "--root", "ignored"]) == {
        "--root": "r", "--store": "s", "--session": "--x"}


def test_socket_path_follows_the_store(ws: Path) -> None:
    init(ws)
    store = client.find_store(["list"], {"CKPT_ROOT": str(ws)})
    assert store is not None
    assert socket_path(store) == str(ws / ".ckpt" / "server" / "sock")
    assert os.path.join(store, client.SERVER_DIR, client.SOCKET_NAME) == socket_path(store)
