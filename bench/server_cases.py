"""The resident server's own cases: what a call through the thin client costs against
``python -c pass``, and the server's memory over many snapshot/restore cycles.

- ``client_startup``: on a small workspace with a warmed server, paired per repetition:
  ``python -c pass`` (the interpreter of the install), ``ckpt --version`` and
  ``ckpt list --json`` through the client, and ``list --json`` run in-process
  (``CKPT_SERVER=off``) for reference. ``python -m bench.compare`` runs it when the
  ``ckpt-server`` tool is measured.
- ``server_rss``: N cycles of (seeded agent turn, ``create``, ``restore`` to the first
  checkpoint) through the client against one server, VmRSS sampled every K cycles, the peak
  (VmHWM) and the growth per cycle (least squares over the samples after the first K cycles).
  ``python -m bench.server_cases --corpus stdlib|linux|DIR --cycles 1000`` runs it on a
  corpus; ``bench/test_bench_server.py`` at ``CKPT_BENCH_SCALE``.

Owns: those two measurements and their report dicts. Must not: import ckpt's library (as
bench/compare.py, whose drivers and timing it uses), or leave a server running: every server
started here is stopped and then killed by pid in a ``finally``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import stat
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.compare import (
    BenchFailure,
    Install,
    Measured,
    prepare_install,
    proc_memory_kib,
    run_measured,
    run_program,
    stop_pid,
)
from bench.corpus import (
    CorpusError,
    Manifest,
    copy_tree,
    diff_manifests,
    get_corpus,
    hash_file,
    list_captured_files,
    read_manifest,
)
from ckpt.tuning.workload import apply_turn, plan_turn

#: (case name, command after the install's launcher or python, uses the server)
CLIENT_CASES = ("python -c pass", "ckpt --version", "ckpt list --json",
                "ckpt list --json (in-process)")


class ServerSession:
    """``ckpt --root W --store S ...`` for one workspace whose server this object started."""

    def __init__(self, install: Install, work: Path, store: Path) -> None:
        self.install, self.work, self.store = install, work, store
        self.base = [*install.launcher, "--root", str(work), "--store", str(store)]
        self.env = {k: v for k, v in install.env.items() if k != "CKPT_SERVER"}
        self.cold = {**self.env, "CKPT_SERVER": "off"}
        self.cwd = work.parent
        self.pid: int | None = None

    def run(self, *args: str, in_process: bool = False) -> Measured:
        return run_measured([[*self.base, *args]], cwd=self.cwd,
                            env=self.cold if in_process else self.env)

    def json(self, *args: str, in_process: bool = False) -> Any:
        m = self.run(*args, "--json", in_process=in_process)
        return json.loads(m.stdout[0])

    def status(self) -> dict[str, Any]:
        value = self.json("server", "status")
        if not isinstance(value, dict) or not value.get("running"):
            raise BenchFailure(f"the ckpt server of {self.store} is not running: {value}")
        return value

    def memory_kib(self) -> tuple[int, int]:
        assert self.pid is not None
        return proc_memory_kib(self.pid)

    @contextlib.contextmanager
    def server(self) -> Iterator[dict[str, Any]]:
        """Start the server (and warm it: two ``list --json``); stop it, kill it by pid."""
        try:
            started = self.json("server", "start")
            self.pid = int(started["pid"])
            for _ in range(2):
                self.run("list", "--json")
            yield self.status()
        finally:
            if self.pid is not None:
                try:
                    subprocess.run([*self.base, "server", "stop"], cwd=self.cwd, env=self.env,
                                   capture_output=True, check=False, timeout=180)
                finally:
                    stop_pid(self.pid)
                    self.pid = None


def _small_workspace(work: Path) -> None:
    work.mkdir(parents=True)
    for i in range(40):
        sub = work / f"pkg{i % 4}"
        sub.mkdir(exist_ok=True)
        (sub / f"mod{i}.py").write_text(f"# module {i}\nVALUE = {i}\n" * 20)


def client_startup(install: Install, scratch: Path, reps: int = 20) -> dict[str, Any]:
    """Each case ``reps`` times, in rotating order; medians, and per-repetition ratios
    against ``python -c pass`` of the same repetition."""
    work, store = scratch / "client" / "work", scratch / "client" / "store"
    _small_workspace(work)
    session = ServerSession(install, work, store)
    session.run("init", in_process=True)
    for i in range(5):
        session.run("create", "-m", f"checkpoint {i}", in_process=True)
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "python -c pass": ([install.python, "-c", "pass"], session.env),
        "ckpt --version": ([*install.launcher, "--version"], session.env),
        "ckpt list --json": ([*session.base, "list", "--json"], session.env),
        "ckpt list --json (in-process)": ([*session.base, "list", "--json"], session.cold),
    }
    seconds: dict[str, list[float]] = {name: [] for name in CLIENT_CASES}
    rss: dict[str, int] = dict.fromkeys(CLIENT_CASES, 0)
    with session.server() as status:
        before = status["requests"]
        for rep in range(reps):
            names = CLIENT_CASES[rep % len(CLIENT_CASES):] + CLIENT_CASES[:rep % len(CLIENT_CASES)]
            for name in names:
                cmd, env = commands[name]
                m = run_measured([cmd], cwd=session.cwd, env=env)
                seconds[name].append(m.seconds)
                rss[name] = max(rss[name], m.max_rss_kib)
        served = session.status()["requests"] - before
        server_rss, server_hwm = session.memory_kib()
    if served < reps:
        raise BenchFailure(f"list --json went through the server {served} times of {reps}")
    base = seconds["python -c pass"]
    cases = {name: {"median_s": statistics.median(values), "max_rss_kib": rss[name],
                    "ratios": [v / b for v, b in zip(values, base)],
                    "median_ratio": statistics.median(v / b for v, b in zip(values, base)),
                    "seconds": values}
             for name, values in seconds.items()}
    return {"reps": reps, "cases": cases, "server_requests": served,
            "server_rss_kib": server_rss, "server_hwm_kib": server_hwm}


def render_client(client: dict[str, Any]) -> list[str]:
    lines = ["", f"{'client start-up':<32}{'median ms':>10}{'/ python -c pass':>18}",
             f"  ({client['reps']} repetitions, paired; the server warmed, "
             f"its RSS {client['server_rss_kib'] / 1024:.1f} MiB)"]
    for name in CLIENT_CASES:
        case = client["cases"][name]
        lines.append(f"{name:<32}{case['median_s'] * 1000:10.1f}{case['median_ratio']:18.2f}")
    return lines


# -- memory over many cycles ---------------------------------------------------------------

def growth_per_cycle(samples: Sequence[tuple[int, int]], skip_until: int) -> float | None:
    """KiB per cycle: the least-squares slope of VmRSS over the samples taken at or after
    cycle ``skip_until`` (the first cycles fill caches that then stay); None below 2."""
    points = [(c, kib) for c, kib in samples if c >= skip_until]
    if len(points) < 2:
        return None
    slope, _ = statistics.linear_regression([c for c, _ in points], [k for _, k in points])
    return slope


def server_rss(install: Install, work: Path, store: Path, files: Sequence[str], *,
               cycles: int, every: int, seed: int = 1,
               baseline: Manifest | None = None,
               progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``cycles`` x (turn, ``create``, ``restore`` to the first checkpoint) through one server.

    ``work`` holds the tree (``files``: its regular files, which turns edit and delete) and
    ``store`` its store (both made here if absent: ``init`` and the first checkpoint run
    in-process, before the server starts). Every ``every`` cycles VmRSS is sampled and the
    paths the turns since the last sample touched are checked against ``baseline`` (default:
    the tree's manifest at start); at the end the whole tree is.
    """
    session = ServerSession(install, work, store)
    store.mkdir(parents=True, exist_ok=True)
    session.run("init", in_process=True)
    first = session.json("create", "-m", "first", in_process=True)["id"]
    expected = baseline if baseline is not None else read_manifest(work)
    samples: list[tuple[int, int]] = []
    seconds: list[float] = []
    with session.server() as status:
        requests = status["requests"]
        samples.append((0, session.memory_kib()[0]))
        touched: set[str] = set()
        for cycle in range(1, cycles + 1):
            turn = plan_turn(files, seed + cycle)
            apply_turn(work, turn)
            touched |= turn.paths
            created = session.run("create", "--json", "-m", f"cycle {cycle}")
            restored = session.run("restore", first, "--json")
            seconds.append(created.seconds + restored.seconds)
            if cycle % every == 0 or cycle == cycles:
                samples.append((cycle, session.memory_kib()[0]))
                wrong = wrong_paths(work, expected, touched)
                if wrong:
                    raise BenchFailure(f"cycle {cycle}: the restores left {len(wrong)} paths "
                                       f"different: {wrong[:10]}")
                touched.clear()
                if progress is not None:
                    progress(f"cycle {cycle}: VmRSS {samples[-1][1] / 1024:.1f} MiB")
        served = session.status()["requests"] - requests
        rss, hwm = session.memory_kib()
    diffs = diff_manifests(expected, read_manifest(work))
    if diffs:
        raise BenchFailure(f"after {cycles} cycles the tree differs in {len(diffs)} paths: "
                           f"{diffs[:10]}")
    if served < 2 * cycles:
        raise BenchFailure(f"{served} of {2 * cycles} cycle calls went through the server")
    return {"cycles": cycles, "every": every, "samples": samples, "peak_rss_kib": hwm,
            "final_rss_kib": rss, "growth_kib_per_cycle": growth_per_cycle(samples, every),
            "median_cycle_s": statistics.median(seconds), "server_requests": served}


def wrong_paths(work: Path, expected: Manifest, paths: set[str]) -> list[str]:
    """The ``paths`` (relative) whose file is not as in ``expected`` (absent from it: must
    not exist)."""
    wrong = []
    for rel in sorted(paths):
        path = work / rel
        want = expected.get(rel)
        if want is None:
            if path.exists() or path.is_symlink():
                wrong.append(f"{rel}: left behind")
        elif (path.is_symlink() or not path.is_file()
              or bool(path.stat().st_mode & stat.S_IXUSR) != want.executable
              or hash_file(str(path)) != want.digest):
            wrong.append(f"{rel}: not restored")
    return wrong


def render_rss(result: dict[str, Any]) -> list[str]:
    growth = result["growth_kib_per_cycle"]
    shown = "-" if growth is None else f"{growth:.2f} KiB"
    return [f"server RSS over {result['cycles']:,} snapshot/restore cycles: peak "
            f"{result['peak_rss_kib'] / 1024:.1f} MiB, final {result['final_rss_kib'] / 1024:.1f}"
            f" MiB, growth per cycle {shown} (samples every {result['every']}); median cycle "
            f"{result['median_cycle_s']:.3f} s",
            "  VmRSS MiB by cycle: " + ", ".join(f"{c}: {k / 1024:.1f}"
                                                 for c, k in result["samples"])]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.server_cases",
                                 description="The ckpt server's RSS over snapshot/restore cycles.")
    ap.add_argument("--corpus", required=True, help="stdlib, linux, or a directory")
    ap.add_argument("--cycles", type=int, default=1000)
    ap.add_argument("--every", type=int, default=50, help="sample VmRSS every N cycles")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--install", choices=("venv", "current"), default="venv")
    ap.add_argument("--scratch", type=Path, help="where the copy goes (default: a temp dir)")
    ap.add_argument("--json", type=Path, help="write the result here")
    args = ap.parse_args(argv)
    if args.cycles < 1 or args.every < 1:
        ap.error("--cycles and --every must be >= 1")
    try:
        corpus = get_corpus(args.corpus)
    except CorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="ckpt-server-rss-", dir=args.scratch))
    try:
        install = prepare_install(args.install, scratch)
        files = [f for f in list_captured_files(corpus.path)
                 if not (corpus.path / f).is_symlink()]
        work = scratch / "work"
        copy_tree(corpus.path, work)
        result = server_rss(install, work, scratch / "store", files, cycles=args.cycles,
                            every=args.every, seed=args.seed,
                            progress=lambda line: print(line, file=sys.stderr, flush=True))
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result["corpus"] = {"name": corpus.name, "path": str(corpus.path)}
    print("\n".join(render_rss(result)))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    run_program(main)
