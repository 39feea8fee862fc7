"""Fixtures for the CLI tests: a workspace in a temp dir, and two ways to run `ckpt`.

`ckpt_in` runs in-process with click's CliRunner (fast; stdout and stderr kept apart);
`ckpt_proc` runs the installed console script in a subprocess (the real entry point: exit
codes, streams, environment). Both clear the CKPT_* variables of the outer environment.

Both modes: with `CKPT_TEST_MODE=server` both fixtures run every command through the thin
client (`python -m ckpt` in a subprocess, stdout and stderr apart, the same `Run` record)
against a real server for the test's store, started before the first command that finds the
store and stopped at teardown, where the server's request count must cover every command
that the server (not the client) runs (tests/servers.py). A command whose store does not
exist yet (the first `init`, an uninitialized root) has no server to go to: it runs as in the
default mode (no server is spawned on demand either), so a test's servers are the fixture's. A test that is in-process by nature
(it patches library internals) carries `@pytest.mark.in_process("why")` and skips in server
mode; the tests here that use neither fixture are left out of a server-mode run (they would
repeat the default run). CI runs this suite in both modes (.ci/run).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
import servers  # tests/ is on pytest's `pythonpath`
from click.testing import CliRunner

from ckpt.cli.main import cli

CKPT_VARS = ("CKPT_ROOT", "CKPT_STORE", "CKPT_SESSION", "CKPT_DEBUG", "CKPT_LOG")


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    stdout_bytes: bytes = b""


def make_tree(root: Path) -> None:
    """A small workspace: a text file, a nested file, an executable and a symlink."""
    (root / "a.txt").write_text("alpha\n")
    (root / "sub").mkdir()
    (root / "sub" / "b.txt").write_text("beta\n")
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "link").symlink_to("a.txt")


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    """An un-initialized workspace root with a few files (resolved: no symlinked /tmp)."""
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    make_tree(root)
    return root


CkptIn = Callable[..., Run]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "in_process(reason): the test patches the running process's library or "
        "platform, which a server's process does not see; skipped when CKPT_TEST_MODE=server")


_HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Server mode: skip the `in_process` tests; leave out the tests of this folder that run
    no command through `ckpt_in`/`ckpt_proc` (unit tests, and tests that start their own
    processes): they would only repeat the default run."""
    if not servers.SERVER_MODE:
        return
    kept, left_out = [], []
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if (item.path.is_relative_to(_HERE) and "ckpt_in" not in fixtures
                and "ckpt_proc" not in fixtures):
            left_out.append(item)
            continue
        kept.append(item)
        marker = item.get_closest_marker("in_process")
        if marker is not None:
            why = marker.args[0] if marker.args else "in-process by nature"
            item.add_marker(pytest.mark.skip(reason=f"in-process only: {why}"))
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = kept


_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
    return report


@pytest.fixture(autouse=True)
def _no_server_outlives_the_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Whatever a test started or spawned on demand for a store in its temp dir is killed
    (by pid) when it ends, in both modes."""
    top = request.getfixturevalue("tmp_path") if "tmp_path" in request.fixturenames else None
    yield
    if top is not None:
        servers.reap_servers_under(top)


@pytest.fixture
def test_servers(tmp_path: Path, request: pytest.FixtureRequest
                 ) -> Iterator[servers.TestServers | None]:
    """In server mode, the servers of this test's stores (None otherwise); at teardown each
    must have run every command sent to it (unless the test failed already), and none is
    left running."""
    if not servers.SERVER_MODE:
        yield None
        return
    group = servers.TestServers(proc_env(), tmp_path)
    try:
        yield group
    finally:
        problems = group.close()
    if problems and not request.node.stash.get(_CALL_FAILED, False):
        pytest.fail("\n".join(problems))


def _through_client(group: servers.TestServers, store: str | None, args: Sequence[str],
                    cwd: str, env: dict[str, str], stdin_bytes: bytes | None, timeout: float,
                    stdin: int | None) -> Run:
    """`ckpt ARGS` through the thin client (`group.before` started the store's server)."""
    done = subprocess.run(["ckpt", *args], cwd=cwd, env=env, input=stdin_bytes,
                          stdin=stdin if stdin_bytes is None else None, capture_output=True,
                          timeout=timeout, check=False)
    group.after(store, args, env)
    return Run(done.returncode, done.stdout.decode("utf-8", "surrogateescape"),
               done.stderr.decode("utf-8", "surrogateescape"), done.stdout)


@pytest.fixture
def ckpt_in(ws: Path, monkeypatch: pytest.MonkeyPatch,
            test_servers: servers.TestServers | None) -> CkptIn:
    """Run `ckpt ARGS` in-process with the current directory at the workspace root (in
    server mode: through the client, in the current directory and environment)."""
    monkeypatch.chdir(ws)
    for name in CKPT_VARS:
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()

    def run(*args: str, env: dict[str, str | None] | None = None,
            input: bytes | None = None) -> Run:  # noqa: A002 (CliRunner's keyword)
        if test_servers is not None:
            # The process's environment as the test left it (monkeypatch), `env` over it.
            full = servers.client_env(_with_pycache(dict(os.environ)), env)
            store = test_servers.before(args, os.getcwd(), full)
            if store is not None:
                return _through_client(test_servers, store, args, os.getcwd(), full, input,
                                       60, subprocess.DEVNULL)
            # No store yet (a first `init`, an uninitialized root): no server to ask, and
            # the client would run it in-process; it runs here, as in the default mode.
        result = runner.invoke(cli, list(args), env=env, input=input, prog_name="ckpt")
        return Run(result.exit_code, result.stdout, result.stderr, result.stdout_bytes)

    from schema_check import validating  # each --json stdout is checked against its schema
    return validating(run)


@pytest.fixture
def initialized(ws: Path, ckpt_in: CkptIn) -> Path:
    assert ckpt_in("init").code == 0
    return ws


_PYCACHE: list[str] = []


@pytest.fixture(scope="session", autouse=True)
def _bytecode_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Subprocesses keep compiled bytecode in a temp dir (never in the repo): without it,
    under PYTHONDONTWRITEBYTECODE, every `ckpt` run recompiles every module it imports."""
    _PYCACHE.append(str(tmp_path_factory.mktemp("pycache")))


def _with_pycache(env: dict[str, str]) -> dict[str, str]:
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if _PYCACHE:
        env["PYTHONPYCACHEPREFIX"] = _PYCACHE[-1]
    return env


def proc_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a `ckpt` subprocess: no CKPT_* leaking in from outside (in server
    mode not the suite's CKPT_SERVER=off either, so a running server is used)."""
    env = {k: v for k, v in os.environ.items()
           if k not in CKPT_VARS and k != "PYTHONDONTWRITEBYTECODE"}
    if servers.SERVER_MODE:
        env.pop("CKPT_SERVER", None)
    if _PYCACHE:
        env["PYTHONPYCACHEPREFIX"] = _PYCACHE[-1]
    env.update(extra or {})
    return env


@pytest.fixture
def env_for() -> Callable[..., dict[str, str]]:
    """`proc_env` for tests that start processes themselves."""
    return proc_env


CkptProc = Callable[..., Run]


@pytest.fixture
def ckpt_proc(ws: Path, test_servers: servers.TestServers | None) -> CkptProc:
    """Run the installed `ckpt` console script; cwd defaults to the workspace root (in
    server mode: through the client, against the store's server)."""

    def run(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float = 30) -> Run:
        if test_servers is not None:
            full, here = proc_env(env), str(cwd or ws)
            store = test_servers.before(args, here, full)
            if store is None:  # no store yet: in-process, and no server spawned on demand
                full.setdefault("CKPT_SERVER", "off")
            return _through_client(test_servers, store, args, here, full, None, timeout, None)
        done = subprocess.run(["ckpt", *args], cwd=cwd or ws, env=proc_env(env),
                              capture_output=True, timeout=timeout, check=False)
        return Run(done.returncode, done.stdout.decode("utf-8", "surrogateescape"),
                   done.stderr.decode("utf-8", "surrogateescape"), done.stdout)

    from schema_check import validating  # each --json stdout is checked against its schema
    return validating(run)
