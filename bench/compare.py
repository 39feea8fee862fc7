"""Peer comparison: ckpt (CLI and Python API) against a git shadow repo, same corpus, same run.

Run ``python -m bench.compare --corpus stdlib|linux|PATH [--rounds N]
[--tools ckpt,ckpt-api,git] [--json OUT]``. Each round gives each tool a fresh ``cp -a`` copy of
the corpus and a store in a sibling directory, then measures five steps: first snapshot,
no-change snapshot, snapshot after a seeded agent turn, restore to the first snapshot, and a
no-op restore. ``ckpt`` and ``git`` run every step as whole processes (``ckpt`` with
``CKPT_SERVER=off``: the cold CLI); ``ckpt-server`` runs the same commands through the thin
client against the store's resident server, started and warmed before the first step;
``ckpt-api`` is ckpt's Python API in one long-lived worker (``bench/inprocess.py``) that opens
the store once and times each call inside itself, as a harness would see it. Tools alternate within a round so none
always runs on a warmer machine, and no copy is deleted before the run ends while the disk
has room (deleting one slows the file creations of the rounds after it). Every restore is
checked against a content manifest of the original tree: a fast but wrong restore aborts
the run. Each ckpt variant gets paired per-round ratios against git.

``--install venv`` (the default) measures ckpt as users install it: before the rounds, outside
every measurement, the checkout is pip-installed (non-editable, C extension built) into a fresh
virtual environment in the scratch directory, whose ``bin/ckpt`` and ``python`` then run the CLI
and the worker. ``--install current`` runs the interpreter this harness runs in (an editable
checkout here), whose start-up pays for the editable finder and other ``.pth`` hooks.

Owns: driving the tools, the ckpt install they run, timing, peak RSS, store size, the summary
table and the JSON. Must not: import ckpt's library (the CLI is measured as users run it; the
API runs in the worker, which is the only bench process that imports it; ``ckpt.tuning.workload``
is plain standard-library code), or modify the corpus.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime as dt
import fnmatch
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.corpus import (
    Corpus,
    CorpusError,
    Manifest,
    changed_paths,
    copy_tree,
    count_rewritten,
    describe,
    diff_manifests,
    find_ignored,
    get_corpus,
    list_captured_files,
    read_manifest,
)
from ckpt.tuning.workload import apply_turn, measure_tree, plan_turn

STEPS = ("first_snapshot", "no_change_snapshot", "turn_snapshot", "restore", "noop_restore")
STEP_TITLES = {"init": "init (not a scenario)", "first_snapshot": "first snapshot",
               "no_change_snapshot": "no-change snapshot", "turn_snapshot": "snapshot after turn",
               "restore": "restore to first", "noop_restore": "no-op restore"}
REPO_ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().with_name("inprocess.py")


class BenchFailure(RuntimeError):
    """A step failed or a restore produced the wrong tree; the run must not report numbers."""


@dataclass(slots=True)
class Measured:
    """One step: wall seconds over all its processes, the largest peak RSS among them.

    ``report`` is what the tool said about the step, kept raw in the JSON: ckpt's stats for a
    snapshot and its restore report (from ``--json`` or the API's ``to_json()``); the API
    worker's start-up and open costs on init; None for git. ``settled_seconds``: the API's
    call until its bookkeeping was done too (see bench/inprocess.py); None for processes.
    """

    seconds: float
    max_rss_kib: int
    stdout: list[str] = field(default_factory=list)
    report: Any = None
    settled_seconds: float | None = None


# Runs one command and writes "<wall seconds> <ru_maxrss KiB>" to argv[1]. Why a wrapper: on
# Linux, exec() folds the high-water RSS of the image it replaces into the new process's
# ru_maxrss, and a child forked (or vforked) from this harness starts from the harness's image,
# so every step would report at least the harness's own peak (measured: 167 MiB for every git
# step on the Linux tree, even ``git init``). This wrapper starts fresh with -I -S, so the floor
# it passes on is its own ~10 MiB. ``wait4`` on the one child then gives exactly that process's
# peak, including any descendants it waited for. ``getrusage(RUSAGE_CHILDREN)`` deltas would
# not work either: it is a running max over all children ever reaped, so a step using less
# memory than an earlier one would be invisible. Timing inside the wrapper leaves out its own
# start-up but keeps the measured command's, which is part of the CLI contract being measured.
_WRAPPER = """\
import os, sys, time
out, cmd = sys.argv[1], sys.argv[2:]
start = time.perf_counter()
pid = os.posix_spawnp(cmd[0], cmd, os.environ)
_, status, usage = os.wait4(pid, 0)
wall = time.perf_counter() - start
with open(out, "w") as f:
    f.write(f"{wall!r} {usage.ru_maxrss}")
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


# Starts the ckpt-api worker from a small interpreter instead of from this harness, for the
# reason _WRAPPER gives: the worker's own ``getrusage`` peak would otherwise start at the
# harness's (168 MiB on the Linux tree, the harness's manifests, not ckpt). It inherits the
# pipes, and its exit status is passed on.
_SPAWNER = """\
import os, sys
pid = os.posix_spawnp(sys.argv[1], sys.argv[1:], os.environ)
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 128 - code)
"""


def run_measured(cmds: Sequence[Sequence[str]], *, cwd: Path, env: dict[str, str]) -> Measured:
    """Run commands one after another (stopping at the first failure) and measure them.

    A step's time is the sum of its commands' wall times; its peak RSS is the max over them
    (they run in sequence, so never the sum). Output goes to temp files, read after exit.
    """
    total, peak, outs = 0.0, 0, []
    for cmd in cmds:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
                tempfile.NamedTemporaryFile("r", prefix="ckpt-bench-rss-") as res:
            code = subprocess.run([sys.executable, "-I", "-S", "-c", _WRAPPER, res.name, *cmd],
                                  cwd=cwd, env=env, stdout=out, stderr=err,
                                  stdin=subprocess.DEVNULL, check=False).returncode
            out.seek(0)
            err.seek(0)
            if code != 0:
                raise BenchFailure(f"{' '.join(cmd)} exited {code}: "
                                   f"{err.read().decode(errors='replace').strip()[-2000:]}")
            wall, rss = res.read().split()
            total += float(wall)
            peak = max(peak, int(rss))  # KiB on Linux
            outs.append(out.read().decode(errors="replace"))
    return Measured(total, peak, outs)


class Driver:
    """One tool in one round: its steps, each returning what it measured."""

    name: str

    def __init__(self, work: Path, store: Path, install: Install | None = None) -> None:
        """Drive ``work`` (a scratch copy of the corpus) with its store in ``store``.

        ``install`` is the ckpt the ckpt drivers run (default: ``Install.current()``).
        """

    def init(self) -> Measured:
        raise NotImplementedError

    def snapshot(self, label: str) -> tuple[Measured, str]:
        """Take a snapshot; its id is what ``restore`` takes."""
        raise NotImplementedError

    def restore(self, ref: str) -> Measured:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the driver holds (the API worker); called once the round is over."""


class GitShadow(Driver):
    """A shadow repo exactly as agent tools keep one: git dir outside the work tree."""

    name = "git"

    def __init__(self, work: Path, store: Path, install: Install | None = None) -> None:
        self.work = work
        self.base = ["git", f"--git-dir={store}", f"--work-tree={work}"]
        self.env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                    "GIT_AUTHOR_NAME": "ckpt-bench", "GIT_AUTHOR_EMAIL": "bench@ckpt.invalid",
                    "GIT_COMMITTER_NAME": "ckpt-bench", "GIT_COMMITTER_EMAIL": "bench@ckpt.invalid"}

    def _run(self, *cmds: list[str]) -> Measured:
        return run_measured([[*self.base, *c] for c in cmds], cwd=self.work, env=self.env)

    def init(self) -> Measured:
        # gc.auto=0 / maintenance.auto=false: on a kernel-sized first commit git's auto gc would
        # detach a repack into the background, racing the next timed steps and the store-size
        # reading. The reference figures (docs/perf-log.md: 83,609 store files) are the loose
        # store, so we measure that; an agent tool that let gc run would pay it later.
        return self._run(["init", "-q"], ["config", "core.autocrlf", "false"],
                         ["config", "gc.auto", "0"], ["config", "maintenance.auto", "false"],
                         ["config", "commit.gpgsign", "false"])

    def snapshot(self, label: str) -> tuple[Measured, str]:
        m = self._run(["add", "-A"], ["commit", "-q", "--allow-empty", "-m", label])
        # The commit id lookup is left out of the timing (a tool could parse commit's output).
        rev = run_measured([[*self.base, "rev-parse", "HEAD"]], cwd=self.work, env=self.env)
        return m, rev.stdout[0].strip()

    def restore(self, ref: str) -> Measured:
        return self._run(["reset", "--hard", "-q", ref], ["clean", "-fdq"])

    def captured_files(self) -> int:
        out = run_measured([[*self.base, "ls-files", "-z"]], cwd=self.work, env=self.env)
        return out.stdout[0].count("\0")


def ckpt_env() -> dict[str, str]:
    """The environment both ckpt drivers run in: this checkout importable, no CKPT_* defaults."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": f"{REPO_ROOT}{os.pathsep}{path}" if path
           else str(REPO_ROOT)}
    for var in ("CKPT_ROOT", "CKPT_STORE", "CKPT_SESSION"):  # the flags / arguments must decide
        env.pop(var, None)
    return env


@dataclass(slots=True)
class Install:
    """The ckpt that both ckpt drivers run: the CLI's launcher, the worker's interpreter, their
    environment.

    ``prefix`` is the virtual environment ckpt must be imported from (None: the current
    interpreter, with whatever it imports). ``info`` describes the install for the report
    (``prepare_install`` fills it).
    """

    mode: str
    launcher: tuple[str, ...]
    python: str
    env: dict[str, str]
    prefix: Path | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def current(cls) -> Install:
        """This interpreter, as the harness runs (``--install current``)."""
        # The console script installed beside this interpreter, not the first `ckpt` on PATH:
        # version-manager shims (pyenv) add ~0.1 s of shell to every call, which a user who
        # installs ckpt normally does not pay.
        beside = Path(sys.executable).with_name("ckpt")
        exe = str(beside) if beside.is_file() else shutil.which("ckpt")
        launcher = ((exe,) if exe
                    else (sys.executable, "-c", "from ckpt.cli.main import main; main()"))
        return cls("current", launcher, sys.executable, ckpt_env())


# What the source copy a venv is built from leaves out: VCS data, build output and caches at the
# top, compiled files anywhere. (pip builds in the source tree: installing the checkout itself
# would write build/ and *.egg-info into it, and setuptools could ship stale files from an
# earlier build/.)
_SOURCE_SKIP_TOP = frozenset({".git", "build", "dist", ".venv", ".ckpt", ".benchmarks",
                              ".hypothesis", ".mypy_cache", ".ruff_cache", ".pytest_cache"})
_SOURCE_SKIP_ANY = ("__pycache__", "*.pyc", "*.so", "*.egg-info")


def copy_source(dest: Path) -> None:
    """Copy the checkout (REPO_ROOT) to ``dest`` as a clean source tree to install from."""
    inside = REPO_ROOT in dest.resolve().parents
    avoid = {dest.resolve(), *dest.resolve().parents}

    def ignore(directory: str, names: list[str]) -> set[str]:
        here = Path(directory)
        skip = {n for n in names if any(fnmatch.fnmatch(n, p) for p in _SOURCE_SKIP_ANY)}
        if here == REPO_ROOT:
            skip |= _SOURCE_SKIP_TOP & set(names)
        if inside:  # a --scratch inside the checkout must not be copied into itself
            skip |= {n for n in names if (here / n).resolve() in avoid}
        return skip

    shutil.copytree(REPO_ROOT, dest, symlinks=True, ignore=ignore)


def _run_logged(cmd: Sequence[str], log: Path, what: str, env: dict[str, str]) -> None:
    """Run a set-up command with its output appended to ``log``; a failure shows the log's end."""
    with log.open("ab") as out:
        out.write(f"$ {' '.join(cmd)}\n".encode())
        out.flush()
        try:
            code: int | None = subprocess.run(
                cmd, cwd=log.parent, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, check=False, timeout=900).returncode
        except subprocess.TimeoutExpired:
            code = None
    if code != 0:
        tail = log.read_text(errors="replace").strip()[-3000:]
        raise BenchFailure(f"{what} {'timed out' if code is None else f'exited {code}'}; "
                           f"the end of {log}:\n{tail}")


def venv_install(scratch: Path) -> Install:
    """pip-install the checkout, non-editable, into a fresh venv under ``scratch``.

    Why: the current interpreter runs ckpt from an editable install, whose import-hook finder
    (``__editable___ckpt_*_finder``, imported by a .pth file at every start-up) and any other
    .pth hooks of its site-packages (here the sandbox's ``_sandboxing_egress_ca.pth``, which
    imports certifi) cost every ckpt process tens of milliseconds that ``pip install ckpt``
    users never pay. The venv has no system site packages, so none of them run. Its
    site-packages is precompiled: under PYTHONDONTWRITEBYTECODE nothing would write the .pyc
    files, and every call would recompile what it imports.
    """
    venv, src, log = scratch / "venv", scratch / "src", scratch / "install.log"
    python, ckpt = venv / "bin" / "python", venv / "bin" / "ckpt"
    # Nothing of the checkout or the caller's paths may leak in: ckpt comes from the venv only.
    env = {k: v for k, v in ckpt_env().items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    copy_source(src)
    _run_logged([sys.executable, "-m", "venv", str(venv)], log, "python -m venv", env)
    _run_logged([str(python), "-m", "pip", "install", "--no-input", "--disable-pip-version-check",
                 str(src.resolve())], log, f"pip install {src} (non-editable)", env)
    _run_logged([str(python), "-m", "compileall", "-q", "-j", "0", str(venv / "lib")], log,
                "compileall of the venv", env)
    shutil.rmtree(src)  # the install is done; nothing may import from the copy
    if not ckpt.is_file():
        raise BenchFailure(f"pip install left no console script at {ckpt}; see {log}")
    return Install("venv", (str(ckpt),), str(python), env, prefix=venv)


# Run by the install's interpreter, in the drivers' environment: where ckpt and the worker are
# imported from, whether the native scanner loaded, and which imported modules have no .pyc.
_PROBE = """\
import importlib.metadata, importlib.util, json, os, sys
import ckpt.checkpoints, ckpt.checkpoints.snapshot.dirlisting, ckpt.checkpoints.service, ckpt.cli.main
print(json.dumps({
    "python": sys.executable, "prefix": sys.prefix, "ckpt_module": ckpt.checkpoints.__file__,
    "native": ckpt.checkpoints.snapshot.dirlisting.NATIVE,
    "version": importlib.metadata.version("ckpt"),
    "without_pyc": sorted(name for name, m in list(sys.modules.items())
                          if (f := getattr(m, "__file__", None) or "").endswith(".py")
                          and not os.path.exists(importlib.util.cache_from_source(f)))}))
"""


def _interpreter(launcher: Sequence[str]) -> str:
    """The interpreter a launcher runs: its shebang's, or the command itself."""
    if len(launcher) == 1:
        try:
            with open(launcher[0], "rb") as f:
                first = f.readline(4096)
        except OSError:
            first = b""
        if first.startswith(b"#!") and first[2:].split():
            return first[2:].split()[0].decode(errors="replace")
    return launcher[0]


def _inside(path: str | None, prefix: Path) -> bool:
    """Whether ``path`` lies in ``prefix``; its last component is not resolved (venv/bin/python
    is a symlink to the base interpreter, and is in the venv all the same)."""
    if path is None:
        return False
    p = Path(path)
    return (p.parent.resolve() / p.name).is_relative_to(prefix.resolve())


def prepare_install(mode: str, scratch: Path) -> Install:
    """The ckpt to measure (``--install``), ready to run, its ``info`` filled and checked."""
    start = time.perf_counter()
    if mode == "venv":
        install = venv_install(scratch)
    else:
        # An installed package has its bytecode compiled; an editable checkout under
        # PYTHONDONTWRITEBYTECODE would recompile every module on every call.
        compileall.compile_dir(REPO_ROOT / "ckpt", quiet=1)
        install = Install.current()
    probe = subprocess.run([install.python, "-c", _PROBE], cwd=scratch, env=install.env,
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise BenchFailure(f"the {mode} install of ckpt does not import: "
                           f"{probe.stderr.strip()[-2000:]}")
    install.info = {"mode": mode, "ckpt": install.launcher[0], "launcher": list(install.launcher),
                    "cli_interpreter": _interpreter(install.launcher),
                    "venv": None if install.prefix is None else str(install.prefix),
                    **json.loads(probe.stdout), "setup_seconds": time.perf_counter() - start}
    if install.prefix is not None:
        for key in ("ckpt", "cli_interpreter", "ckpt_module"):
            if not _inside(install.info[key], install.prefix):
                raise BenchFailure(f"{key} is {install.info[key]}, outside the venv "
                                   f"{install.prefix}")
    return install


class CkptCli(Driver):
    """ckpt through its CLI contract (docs/DESIGN.md), one whole process per command."""

    name = "ckpt"

    def __init__(self, work: Path, store: Path, install: Install | None = None) -> None:
        # Run from the scratch parent, never from the work tree: with ``python -c`` (and
        # ``python -m``, for the API worker) the current directory is on sys.path, so the stdlib
        # corpus would shadow real modules and Python would write __pycache__ into the tree
        # being measured.
        self.cwd = work.parent
        install = install or Install.current()
        self.base = [*install.launcher, "--root", str(work), "--store", str(store)]
        # The cold CLI: every call its own interpreter, no resident server used or spawned
        # (that is the ckpt-server tool).
        self.env = {**install.env, "CKPT_SERVER": "off"}

    def _run(self, *args: str) -> Measured:
        return run_measured([[*self.base, *args]], cwd=self.cwd, env=self.env)

    def init(self) -> Measured:
        return self._run("init", "--json")

    def snapshot(self, label: str) -> tuple[Measured, str]:
        m = self._run("create", "--json", "-m", label)
        record = _parse_json(m, "create")
        m.report = record.get("stats")
        return m, str(record["id"])

    def restore(self, ref: str) -> Measured:
        # Default restore: includes the pre-restore save, which the contract requires.
        m = self._run("restore", ref, "--json")
        m.report = _parse_json(m, "restore")
        return m


class CkptApi(Driver):
    """ckpt through its Python API, in-process, as a harness calls it.

    One worker process per round (``python -m bench.inprocess``, JSON lines over stdin/stdout)
    imports the library, opens the store once and runs each step as one call, timed inside the
    worker with ``perf_counter``. Its start-up (interpreter, imports) happens before the first
    step and is reported apart, never inside a step. Peak RSS is the worker's high-water mark
    after the step (``getrusage``), so it is cumulative over the round; it is started through
    ``_SPAWNER``, so that mark is its own, not this harness's.
    """

    name = "ckpt-api"

    def __init__(self, work: Path, store: Path, install: Install | None = None) -> None:
        self.root, self.store = str(work), str(store)
        install = install or Install.current()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the worker)
        start = time.perf_counter()
        # cwd: the scratch parent, for the reason CkptCli gives (``-m`` puts it on sys.path).
        # The worker runs as a script from the checkout (bench/ is not in the wheel): its own
        # folder goes on sys.path, the checkout does not, so ckpt comes from the install.
        self._proc: subprocess.Popen[str] | None = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _SPAWNER, install.python, str(WORKER)],
            cwd=work.parent, env=install.env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            encoding="utf-8")
        try:
            ready = self._answer("start-up")
            if install.prefix is not None and not _inside(ready.get("ckpt_module"),
                                                          install.prefix):
                raise BenchFailure(f"the ckpt-api worker imported ckpt from "
                                   f"{ready.get('ckpt_module')}, not from {install.prefix}")
        except BaseException:
            self.close()
            raise
        self.startup = {"startup_seconds": time.perf_counter() - start,
                        "startup_rss_kib": ready["max_rss_kib"],
                        "ckpt_module": ready.get("ckpt_module")}

    def _answer(self, what: str) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            self._stderr.seek(0)
            tail = self._stderr.read().decode(errors="replace").strip()[-2000:]
            raise BenchFailure(f"ckpt-api worker died during {what} "
                               f"(exit {self._proc.wait()}): {tail}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise BenchFailure(f"ckpt-api {answer['error']}\n{answer['traceback'][-2000:]}")
        return answer

    def _call(self, op: str, **args: str) -> tuple[Measured, dict[str, Any]]:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self._proc.stdin.flush()
        answer = self._answer(op)
        return Measured(answer["seconds"], answer["max_rss_kib"], report=answer.get("report"),
                        settled_seconds=answer.get("settled_seconds")), answer

    def init(self) -> Measured:
        m, _ = self._call("init", root=self.root, store=self.store)
        opened, _ = self._call("open", root=self.root, store=self.store)
        m.max_rss_kib = opened.max_rss_kib
        m.report = {**self.startup, "open_seconds": opened.seconds}
        return m

    def snapshot(self, label: str) -> tuple[Measured, str]:
        m, answer = self._call("create", label=label)
        return m, str(answer["id"])

    def restore(self, ref: str) -> Measured:
        m, _ = self._call("restore", ref=ref)  # the default: pre-restore save included
        return m

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.poll() is None:
                assert proc.stdin is not None
                proc.stdin.write(json.dumps({"op": "close"}) + "\n")
                proc.stdin.close()
                proc.wait(timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        finally:
            for stream in (proc.stdin, proc.stdout):  # EOF ends a worker its spawner left
                if stream is not None:
                    with contextlib.suppress(OSError):
                        stream.close()
            self._stderr.close()


class CkptServer(CkptCli):
    """ckpt's CLI through the store's resident server: the same commands as ``ckpt``, each a
    whole client process, with the server started and warmed before the first step.

    The thin client forwards each call to the server (the default ``CKPT_SERVER=auto``), which
    keeps the store open and the tree watched. Outside every step: ``ckpt server start``
    after init, then two ``list --json`` calls (imports done, the root opened and watched).
    After each step the server's request count must have grown by one (a call that ran
    in-process would be measured as the wrong thing) and its memory is read from /proc: the
    step's peak RSS is the server's high-water mark (cumulative over the round), the client's
    own is in ``report``.
    """

    name = "ckpt-server"

    def __init__(self, work: Path, store: Path, install: Install | None = None) -> None:
        super().__init__(work, store, install)
        self.env = {k: v for k, v in self.env.items() if k != "CKPT_SERVER"}
        self.pid: int | None = None
        self.requests = 0

    def status(self) -> dict[str, Any]:
        done = subprocess.run([*self.base, "server", "status", "--json"], cwd=self.cwd,
                              env=self.env, capture_output=True, text=True, check=False,
                              timeout=120)
        if done.returncode != 0:
            raise BenchFailure(f"ckpt server status exited {done.returncode}: "
                               f"{done.stderr.strip()[-2000:]}")
        value = json.loads(done.stdout)
        if not isinstance(value, dict) or not value.get("running"):
            raise BenchFailure(f"the ckpt server is not running: {done.stdout.strip()}")
        return value

    def _served(self, m: Measured, calls: int) -> Measured:
        """Check the step went through the server; its memory becomes the step's."""
        status = self.status()
        if status["pid"] != self.pid or status["requests"] < self.requests + calls:
            raise BenchFailure(f"a ckpt-server step did not go through the server (pid "
                               f"{self.pid}, {self.requests} + {calls} requests expected): "
                               f"{status}")
        self.requests = status["requests"]
        rss, hwm = proc_memory_kib(status["pid"])
        m.report = {"tool": m.report, "client_max_rss_kib": m.max_rss_kib,
                    "server_rss_kib": rss, "server_hwm_kib": hwm}
        m.max_rss_kib = hwm
        return m

    def init(self) -> Measured:
        m = super().init()
        start = time.perf_counter()
        started = run_measured([[*self.base, "server", "start", "--json"]], cwd=self.cwd,
                               env=self.env)
        self.pid = int(json.loads(started.stdout[0])["pid"])
        for _ in range(2):  # warm: imports, the root opened and its watch set up
            run_measured([[*self.base, "list", "--json"]], cwd=self.cwd, env=self.env)
        self.requests = self.status()["requests"]
        warm = time.perf_counter() - start
        rss, hwm = proc_memory_kib(self.pid)
        m.report = {"init": m.report, "server_start_and_warm_seconds": warm,
                    "server_rss_kib": rss, "server_hwm_kib": hwm}
        return m

    def snapshot(self, label: str) -> tuple[Measured, str]:
        m, ref = super().snapshot(label)
        return self._served(m, 1), ref

    def restore(self, ref: str) -> Measured:
        return self._served(super().restore(ref), 1)

    def close(self) -> None:
        pid, self.pid = self.pid, None
        if pid is None:
            return
        try:
            subprocess.run([*self.base, "server", "stop"], cwd=self.cwd, env=self.env,
                           capture_output=True, check=False, timeout=180)
        finally:
            stop_pid(pid)


def proc_memory_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in KiB, from /proc (0, 0 where there is none)."""
    values = {"VmRSS:": 0, "VmHWM:": 0}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                words = line.split()
                if words and words[0] in values:
                    values[words[0]] = int(words[1])
    except (OSError, ValueError, IndexError):
        pass
    return values["VmRSS:"], values["VmHWM:"]


def stop_pid(pid: int, timeout: float = 30.0) -> None:
    """Make sure a server process is gone: wait for it, then SIGKILL it."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        if _zombie(pid):
            return
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, 9)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _parse_json(m: Measured, what: str) -> dict[str, Any]:
    try:
        value = json.loads(m.stdout[0])
    except (json.JSONDecodeError, IndexError) as exc:
        raise BenchFailure(f"ckpt {what} --json printed no JSON: {m.stdout[:1]!r}") from exc
    if not isinstance(value, dict):
        raise BenchFailure(f"ckpt {what} --json printed {type(value).__name__}, not an object")
    return value


# Table and JSON order: the ckpt variants, then git, the yardstick each is divided by.
TOOLS: dict[str, type[Driver]] = {"ckpt": CkptCli, "ckpt-server": CkptServer,
                                  "ckpt-api": CkptApi, "git": GitShadow}


def _check(expected: Manifest, actual: Manifest, what: str) -> None:
    diffs = diff_manifests(expected, actual)
    if diffs:
        shown = "\n  ".join(diffs[:20])
        raise BenchFailure(f"{what}: tree differs in {len(diffs)} paths:\n  {shown}")


def run_tool_round(tool_name: str, corpus: Corpus, baseline: Manifest, files: list[str],
                   seed: int, scratch: Path, *, install: Install | None = None) -> dict[str, Any]:
    """One tool, one round, five steps on a fresh copy in ``scratch``; returns the raw numbers.
    The copy is left for the caller to delete (see ``copies_to_delete``).

    ``install``: the ckpt the ckpt tools run (default: ``Install.current()``).
    """
    work, store = scratch / "work", scratch / "store"
    scratch.mkdir(parents=True)
    copy_tree(corpus.path, work)
    store.mkdir()
    # Flush the copy's dirty pages now so its writeback does not land inside the first step.
    os.sync()
    tool: Driver | None = None
    steps: dict[str, dict[str, Any]] = {}

    def record(step: str, m: Measured, **extra: object) -> None:
        steps[step] = {"seconds": m.seconds, "max_rss_kib": m.max_rss_kib, "report": m.report,
                       **extra}
        if m.settled_seconds is not None:
            steps[step]["settled_seconds"] = m.settled_seconds

    try:
        tool = TOOLS[tool_name](work, store, install)
        record("init", tool.init())
        m, first = tool.snapshot("first")
        record("first_snapshot", m)
        size = measure_tree(store)
        m, _ = tool.snapshot("no-change")
        record("no_change_snapshot", m)

        turn = plan_turn(files, seed, find_ignored=lambda ps: find_ignored(corpus.path, ps))
        apply_turn(work, turn)
        after_turn = read_manifest(work)
        changed = changed_paths(baseline, after_turn)
        if changed != turn.paths:  # the turn itself must be exactly what was planned
            raise BenchFailure(f"turn changed {sorted(changed ^ turn.paths)[:10]} unexpectedly")
        m, _ = tool.snapshot("after-turn")
        record("turn_snapshot", m)

        m = tool.restore(first)
        restored = read_manifest(work)
        _check(baseline, restored, f"{tool_name} restore to the first snapshot")
        record("restore", m, rewritten=count_rewritten(after_turn, restored))
        m = tool.restore(first)
        again = read_manifest(work)
        _check(baseline, again, f"{tool_name} no-op restore")
        record("noop_restore", m, rewritten=count_rewritten(restored, again))
        result: dict[str, Any] = {
            "tool": tool_name, "steps": steps, "store": asdict(size), "verified": True,
            "turn": {"seed": seed, "edited": len(turn.edits), "added": len(turn.adds),
                     "deleted": len(turn.deletes)}}
        if isinstance(tool, GitShadow):
            result["captured_files"] = tool.captured_files()
        return result
    finally:
        if tool is not None:
            tool.close()


# Room kept free beyond the largest round seen, when deciding whether the next round fits.
ROOM_MARGIN_BYTES = 512 << 20


def copies_to_delete(kept: Sequence[tuple[Path, int]], free_bytes: int,
                     need_bytes: int) -> list[Path]:
    """The oldest kept round directories (``(path, allocated bytes)``, oldest first) to delete so
    that ``need_bytes`` are free; none while they fit.

    Rounds are kept to the end of the run because deleting one is not free for the next: on
    the ext4 of these machines (kernel 6.18) each inode freed by deleting a copy is skipped,
    one by one, by every file created in the following seconds to minutes (``recently_deleted``
    in the inode allocator, seen with ``perf``): creating a file cost ~1.2 ms instead of
    ~40 us, so the next tool's restore paid ~30 ms for the harness's own cleanup.
    """
    doomed: list[Path] = []
    for path, size in kept:
        if free_bytes >= need_bytes:
            break
        doomed.append(path)
        free_bytes += size
    return doomed


def ordered(tools: Sequence[str]) -> list[str]:
    """The tools in table order (TOOLS'), whatever order --tools named them in."""
    return [t for t in TOOLS if t in tools]


def variants(tools: Sequence[str]) -> list[str]:
    """The ckpt variants that get a paired ratio: all of them, when git ran too."""
    return [t for t in ordered(tools) if t != "git"] if "git" in tools else []


def summarize(runs: list[dict[str, Any]], tools: Sequence[str]) -> dict[str, Any]:
    """Medians per tool and step; paired ratios against git per round, per ckpt variant.

    ``ratios`` and ``median_ratio`` map each ckpt variant ("ckpt", "ckpt-api") to its list of
    per-round ratios and their median.
    """
    by = {t: [r for r in runs if r["tool"] == t] for t in tools}
    out: dict[str, Any] = {}
    for step in ("init", *STEPS):
        row: dict[str, Any] = {}
        for t in tools:
            cells = [r["steps"][step] for r in by[t]]
            row[t] = {"median_s": statistics.median(c["seconds"] for c in cells),
                      "peak_rss_kib": max(c["max_rss_kib"] for c in cells)}
            if "rewritten" in cells[0]:
                row[t]["median_rewritten"] = statistics.median(c["rewritten"] for c in cells)
            if "settled_seconds" in cells[0]:
                row[t]["median_settled_s"] = statistics.median(c["settled_seconds"] for c in cells)
                if "git" in by:
                    row[t]["median_settled_ratio"] = statistics.median(
                        c["settled_seconds"] / g["steps"][step]["seconds"]
                        for c, g in zip(cells, by["git"]))
        if variants(tools):
            # Paired by round: the tools ran back to back, so machine drift mostly cancels.
            row["ratios"] = {t: [c["steps"][step]["seconds"] / g["steps"][step]["seconds"]
                                 for c, g in zip(by[t], by["git"])] for t in variants(tools)}
            row["median_ratio"] = {t: statistics.median(r) for t, r in row["ratios"].items()}
        out[step] = row
    out["store"] = {t: {k: statistics.median(r["store"][k] for r in by[t])
                        for k in ("apparent_bytes", "allocated_bytes", "files")} for t in tools}
    if "ckpt-api" in tools:  # what the worker paid outside the steps
        inits = [r["steps"]["init"]["report"] for r in by["ckpt-api"]]
        out["ckpt-api worker"] = {
            "median_startup_s": statistics.median(i["startup_seconds"] for i in inits),
            "median_open_s": statistics.median(i["open_seconds"] for i in inits),
            "startup_rss_kib": max(i["startup_rss_kib"] for i in inits)}
    return out


def _cell(value: float | None, spec: str) -> str:
    return f"{'-':>{spec[:2]}}" if value is None else format(value, spec)


def render_table(report: dict[str, Any]) -> str:
    """The human-readable summary: one row per scenario, then memory, store size, rewrites."""
    s, c = report["summary"], report["corpus"]
    cols, pairs = ordered(report["tools"]), variants(report["tools"])
    heads = [f"{t}/git" for t in pairs]
    widths = [max(10, len(h) + 2) for h in heads]

    def get(step: str, tool: str, key: str) -> float | None:
        return s[step][tool].get(key) if tool in s[step] else None

    def tools_header(title: str) -> str:
        return f"{title:<28}" + "".join(f"{t:>12}" for t in cols)

    lines = [(f"corpus {c['name']}: {c['captured_files']:,} captured files of {c['files']:,} "
              f"({c['bytes'] / 1e6:,.0f} MB); {report['rounds']} rounds; {report['date']}"),
             (f"{report['machine']['cpu']} x{report['machine']['nproc']}, "
              f"{report['git_version']}, ckpt {report['ckpt_version']}"),
             *([f"ckpt install {i['mode']}: {i['ckpt']} (native scanner: {i['native']})"]
               if (i := report.get("install")) else []), "",
             tools_header("step (median wall s)")
             + "".join(f"{h:>{w}}" for h, w in zip(heads, widths))
             + ("  per round" + (f" ({', '.join(pairs)})" if len(pairs) > 1 else "")
                if pairs else "")]
    for step in ("init", *STEPS):
        medians = s[step].get("median_ratio", {})
        rounds = s[step].get("ratios", {})
        lines.append(f"{STEP_TITLES[step]:<28}"
                     + "".join(_cell(get(step, t, "median_s"), "12.3f") for t in cols)
                     + "".join(f"{medians[t]:{w}.2f}" for t, w in zip(pairs, widths))
                     + ("  " + " | ".join(" ".join(f"{r:.2f}" for r in rounds[t])
                                          for t in pairs) if pairs else ""))
    if "ckpt-api" in cols and "median_settled_s" in s["turn_snapshot"].get("ckpt-api", {}):
        lines += ["", f"{'ckpt-api until settled':<28}{'median s':>10}"
                  + (f"{'ratio/git':>10}" if "git" in cols else ""),
                  ("  (the call and its bookkeeping: stat cache saved, what a restore "
                   "replaced freed)")]
        for step in STEPS:
            cell = s[step]["ckpt-api"]
            lines.append(f"{STEP_TITLES[step]:<28}" + _cell(cell["median_settled_s"], "10.3f")
                         + (_cell(cell.get("median_settled_ratio"), "10.2f")
                            if "git" in cols else ""))
    lines += ["", tools_header("peak RSS (MiB, max of rounds)")]
    for step in STEPS:
        cells = [get(step, t, "peak_rss_kib") for t in cols]
        lines.append(f"{STEP_TITLES[step]:<28}" + "".join(
            _cell(None if v is None else v / 1024, "12.1f") for v in cells))
    if "ckpt-server" in cols:
        lines.append("  (ckpt-server: the server's high-water mark after the step, cumulative "
                     "over the round)")
    if any(t != "ckpt-api" for t in cols):
        lines.append(f"  (the RSS wrapper's floor is {report['rss_floor_kib'] / 1024:.1f} MiB: "
                     "a value near it means 'at most that')")
    if "ckpt-api" in cols:
        w = s["ckpt-api worker"]
        lines += [("  (ckpt-api: the worker's high-water mark after the step, cumulative over "
                   "the round;"),
                  (f"  {w['startup_rss_kib'] / 1024:.1f} MiB after its imports. Outside every "
                   f"step: start-up {w['median_startup_s']:.3f} s, "
                   f"open {w['median_open_s']:.3f} s, medians)")]
    lines += ["", tools_header("store after first snapshot")]
    for key, title, div in (("apparent_bytes", "apparent MB", 1e6),
                            ("allocated_bytes", "allocated MB", 1e6), ("files", "files", 1)):
        cells = [s["store"][t][key] / div if t in s["store"] else None for t in cols]
        lines.append(f"  {title:<26}" + "".join(_cell(v, "12,.0f") for v in cells))
    lines += ["", tools_header("paths rewritten (median)")]
    for step in ("restore", "noop_restore"):
        lines.append(f"{STEP_TITLES[step]:<28}" + "".join(
            _cell(get(step, t, "median_rewritten"), "12,.0f") for t in cols))
    if report.get("client"):
        from bench.server_cases import render_client

        lines += render_client(report["client"])
    return "\n".join(lines)


def machine_info() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": len(os.sched_getaffinity(0)), "cpu": cpu, "kernel": platform.release(),
            "python": platform.python_version()}


def tool_versions() -> tuple[str, str]:
    git = subprocess.run(["git", "--version"], capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        ckpt = importlib.metadata.version("ckpt")
    except importlib.metadata.PackageNotFoundError:
        ckpt = "not installed"
    return git, ckpt


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.split(
        "\n\n")[0])
    ap.add_argument("--corpus", required=True, help="stdlib, linux, or a directory")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per tool (default 3)")
    ap.add_argument("--tools", default="ckpt,git",
                    help="comma list of ckpt (the CLI, no server), ckpt-server (the CLI "
                         "through a running server), ckpt-api (the Python API in-process), git "
                         "(default ckpt,git)")
    ap.add_argument("--seed", type=int, default=1, help="seed of round 0's turn (round i: +i)")
    ap.add_argument("--client-reps", type=int, default=20,
                    help="with ckpt-server: repetitions of the client start-up cases "
                         "(--version, list --json against python -c pass; 0: skip)")
    ap.add_argument("--json", type=Path, help="write the full report with raw numbers here")
    ap.add_argument("--scratch", type=Path, help="where copies go (default: a temp dir)")
    ap.add_argument("--keep", action="store_true",
                    help="keep scratch copies and stores after the run (during it, they are "
                         "kept while the disk has room: see copies_to_delete)")
    ap.add_argument("--install", choices=("venv", "current"), default="venv",
                    help="the ckpt to measure: venv (default) pip-installs this checkout "
                         "(non-editable) into a fresh venv in the scratch dir, as users install "
                         "it; current runs this interpreter's (here: editable) install")
    args = ap.parse_args(argv)
    tools = list(dict.fromkeys(t for t in args.tools.split(",") if t))
    if not tools or any(t not in TOOLS for t in tools) or args.rounds < 1:
        ap.error(f"--tools takes some of {','.join(TOOLS)}; --rounds must be >= 1")
    try:
        corpus = get_corpus(args.corpus)
    except CorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.scratch is not None:  # a fresh directory per run is the advice (bench/README.md)
        args.scratch.mkdir(parents=True, exist_ok=True)
    scratch_root = Path(tempfile.mkdtemp(prefix="ckpt-compare-", dir=args.scratch))
    print(f"corpus {corpus.name} at {corpus.path}; scratch {scratch_root}", file=sys.stderr)
    runs: list[dict[str, Any]] = []
    install: Install | None = None
    deleted_between_rounds = 0
    try:
        if any(t != "git" for t in tools):
            # Once, outside every measurement, and before the corpus is read: with ``current``
            # it compiles the checkout, which may be (or contain) the corpus.
            print(f"installing ckpt ({args.install}) ...", file=sys.stderr, flush=True)
            install = prepare_install(args.install, scratch_root)
            print(f"ckpt install {args.install}: {install.info['ckpt']} (native scanner: "
                  f"{install.info['native']}; {install.info['setup_seconds']:.1f} s)",
                  file=sys.stderr, flush=True)
        captured = list_captured_files(corpus.path)
        # The turn edits and deletes regular files only; symlinks stay as they are.
        files = [f for f in captured if not (corpus.path / f).is_symlink()]
        baseline = read_manifest(corpus.path)
        git_version, ckpt_version = tool_versions()
        kept: list[tuple[Path, int]] = []  # round directories, oldest first (see copies_to_delete)
        for i in range(args.rounds):
            order = tools if i % 2 == 0 else tools[::-1]  # alternate who goes first
            for t in order:
                need = max((size for _, size in kept), default=0) + ROOM_MARGIN_BYTES
                doomed = copies_to_delete(kept, shutil.disk_usage(scratch_root).free, need)
                if doomed:
                    print(f"  short of disk: deleting {len(doomed)} earlier round copies; the "
                          "next round may pay for it in file creations", file=sys.stderr)
                    for path in doomed:
                        shutil.rmtree(path, ignore_errors=True)
                    kept = kept[len(doomed):]
                    deleted_between_rounds += len(doomed)
                print(f"round {i} {t} ...", file=sys.stderr, flush=True)
                scratch = scratch_root / f"r{i}-{t}"
                free_before = shutil.disk_usage(scratch_root).free
                run = run_tool_round(t, corpus, baseline, files, args.seed + i, scratch,
                                     install=install)
                runs.append({"round": i, "position": order.index(t), **run})
                # What the round took, without walking its copy between two timed rounds.
                used = free_before - shutil.disk_usage(scratch_root).free
                kept.append((scratch, max(used, 0)))
        client = None
        if "ckpt-server" in tools and args.client_reps > 0:
            from bench.server_cases import client_startup

            print("client start-up cases ...", file=sys.stderr, flush=True)
            assert install is not None
            client = client_startup(install, scratch_root, args.client_reps)
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 2
    finally:
        if not args.keep:
            shutil.rmtree(scratch_root, ignore_errors=True)
    if args.keep:  # a Linux run keeps ~16 GB: easy to forget until the next run fills the disk
        print(f"kept {sum(size for _, size in kept) / 1e9:.1f} GB of copies and stores in "
              f"{scratch_root}: delete them when done, then wait a few minutes before "
              "measuring again (bench/README.md)", file=sys.stderr)
    report: dict[str, Any] = {
        "corpus": describe(corpus, baseline, captured),
        "machine": machine_info(), "date": dt.datetime.now(dt.UTC).isoformat(
            timespec="seconds"), "git_version": git_version,
        "ckpt_version": install.info["version"] if install else ckpt_version,
        "install": install.info if install else None,
        "rss_floor_kib": run_measured([["true"]], cwd=Path.cwd(), env=dict(os.environ)
                                      ).max_rss_kib,
        "rounds": args.rounds, "tools": tools, "seed": args.seed, "runs": runs,
        "copies_deleted_between_rounds": deleted_between_rounds,
        "summary": summarize(runs, tools), "client": client}
    print(render_table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def run_program(entry: Callable[[], int]) -> None:
    """Run a bench program's ``main`` as the process: a SIGTERM (``timeout``) unwinds like an
    error, so its servers are stopped and its scratch deleted; exit with its code."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(entry())


if __name__ == "__main__":
    run_program(main)
