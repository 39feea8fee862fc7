"""What ckpt's store weighs: the storage cases of issue 29, against a baseline ckpt and peers.

Run ``python -m bench.storage --case linux|django|longfile [--rounds N]
[--baseline-python PY] [--set KEY=VALUE ...] [--scratch DIR] [--json OUT]``:

- ``linux``: the first snapshot of the Linux 6.1 tree (``bench.corpus``; ``--corpus DIR`` for
  another tree): the store's allocated size (``du -sB1`` of the whole store directory:
  objects, catalog, record files, stat cache, reserve) and the ``create``'s wall time, every
  round a fresh store on one scratch copy, the tools alternating who goes first; paired
  ratios against the baseline. Targets: <= 230 MB, <= 1.1x the baseline's time.
- ``django``: the 8 sdists of Django 5.1.1-5.1.8, extracted into one workspace in turn (each
  replacing the one before) with a snapshot after each; the store after all 8. A recipe:
  ``pip download --no-deps --no-binary :all: django==5.1.N`` into ``<cache>/django-5.1`` on
  the first run (``bench.corpus.cache_dir``). git (commits, then after ``git gc``) and, where
  installed, restic and borg do the same for context. Target: <= 16 MB.
- ``longfile``: one generated 2 MB text file (seeded), 200 checkpoints each after a small
  local edit (lines replaced, inserted or deleted at one place), through the Python API in
  one worker (``bench/inprocess.py``): the store's growth (at rest, the worker closed: the
  catalog's write-ahead log gone) against 200 independently compressed copies (zstd at the
  store's level), checkpoints 1, 100 and 200 restored and
  checked byte for byte, and the restore of the version whose blob is the deepest delta
  against that of checkpoint 1 (a full blob), paired medians over repetitions, each into a
  fresh directory; the blob reads alone too. Targets: growth <= 5%, restore <= 2x.

The tools are ckpt processes: ``ckpt`` is this checkout, or the one ``--ckpt-path`` names
(the running interpreter, that checkout first on ``PYTHONPATH``), ``baseline`` is whatever
ckpt ``--baseline-python`` imports (e.g. the ``bin/python`` of a venv that has an install of main), run
with no ``PYTHONPATH`` from the scratch directory. ``--set`` applies ``ckpt config set`` to
``ckpt``'s stores only. Every ckpt command runs with ``CKPT_SERVER=off``.

Owns: the three cases, their summaries and the table. Must not: import ckpt's library (as
bench/compare.py; the library runs in the tools' processes), or modify a corpus.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from bench.compare import (
    BenchFailure,
    Measured,
    ckpt_env,
    machine_info,
    run_measured,
    run_program,
)
from bench.corpus import CorpusError, cache_dir, copy_tree, get_corpus, hash_file
from ckpt.tuning.workload import measure_tree

CASES = ("linux", "django", "longfile")
LINUX_TARGET_BYTES = 230_000_000
LINUX_TIME_TARGET = 1.1
DJANGO_VERSIONS = tuple(f"5.1.{n}" for n in range(1, 9))
DJANGO_DIR = "django-5.1"
DJANGO_TARGET_BYTES = 16_000_000
LONGFILE_SIZE = 2_000_000
LONGFILE_CHECKPOINTS = 200
LONGFILE_GROWTH_TARGET = 0.05
LONGFILE_RESTORE_TARGET = 2.0
RACY_PAUSE_S = 0.03  # > the stat cache's racy window: a real edit comes seconds after a scan
WORKER = Path(__file__).resolve().with_name("inprocess.py")
Say = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Tool:
    """A ckpt to measure: the interpreter that runs ``-m ckpt``, its environment, settings."""

    name: str
    python: str
    env: dict[str, str]
    settings: tuple[tuple[str, str], ...] = ()

    def cli(self, work: Path, store: Path) -> list[str]:
        return [self.python, "-m", "ckpt", "--root", str(work), "--store", str(store)]

    def run(self, work: Path, store: Path, *args: str) -> Measured:
        return run_measured([[*self.cli(work, store), *args]], cwd=store.parent, env=self.env)

    def init(self, work: Path, store: Path) -> None:
        """``ckpt init`` and this tool's settings; ``store`` must not exist yet."""
        self.run(work, store, "init", "--json")
        for key, value in self.settings:
            self.run(work, store, "config", "set", key, value)

    def json(self, work: Path, store: Path, *args: str) -> Any:
        m = self.run(work, store, *args, "--json")
        try:
            return json.loads(m.stdout[0])
        except (json.JSONDecodeError, IndexError) as exc:
            raise BenchFailure(f"{self.name}: ckpt {args[0]} --json printed no JSON") from exc


def make_tools(baseline_python: str | None, settings: Sequence[tuple[str, str]] = (), *,
               ckpt_path: Path | None = None, baseline_path: Path | None = None) -> list[Tool]:
    """``ckpt`` (this checkout, or the one at ``ckpt_path``), then ``baseline`` when an
    interpreter or a checkout (``baseline_path``, run by this interpreter) is given."""
    env = {**ckpt_env(), "CKPT_SERVER": "off"}
    if ckpt_path is not None:  # first on the path: before this interpreter's own install
        env["PYTHONPATH"] = str(ckpt_path.resolve())
    tools = [Tool("ckpt", sys.executable, env, tuple(settings))]
    if baseline_python or baseline_path:
        base_env = {k: v for k, v in env.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        if baseline_path is not None:
            base_env["PYTHONPATH"] = str(baseline_path.resolve())
        tools.append(Tool("baseline", baseline_python or sys.executable, base_env))
    return tools


def version_of(tool: Tool) -> dict[str, Any]:
    """Where the tool's ckpt comes from and its config keys (which features it knows)."""
    probe = ("import json, ckpt, ckpt.checkpoints.config as c; print(json.dumps("
             "{'module': ckpt.__file__, 'config_keys': list(c.CONFIG_KEYS)}))")
    done = subprocess.run([tool.python, "-c", probe], env=tool.env, capture_output=True,
                          text=True, check=False, cwd=tempfile.gettempdir())
    if done.returncode != 0:
        raise BenchFailure(f"{tool.name}: {tool.python} cannot import ckpt: "
                           f"{done.stderr.strip()[-1000:]}")
    info: dict[str, Any] = json.loads(done.stdout)
    return info


def store_size(store: Path) -> dict[str, int]:
    size = measure_tree(store)
    return {"apparent_bytes": size.apparent_bytes, "allocated_bytes": size.allocated_bytes,
            "files": size.files}


def _paired(values: dict[str, list[float]], tools: Sequence[Tool]) -> dict[str, Any]:
    """Medians per tool; with a baseline, ckpt/baseline per round and their median."""
    out: dict[str, Any] = {t.name: statistics.median(values[t.name]) for t in tools}
    if "baseline" in values:
        ratios = [a / b for a, b in zip(values["ckpt"], values["baseline"])]
        out["ratios"] = ratios
        out["median_ratio"] = statistics.median(ratios)
    return out


# -- linux: the first snapshot of a large tree ----------------------------------------------

def first_snapshot_case(source: Path, tools: Sequence[Tool], scratch: Path, *, rounds: int,
                        say: Say) -> dict[str, Any]:
    """``rounds`` x each tool: a fresh store, ``init``, the timed ``create``, the store's size.

    One scratch copy serves every round (a first snapshot only reads the tree; the workspace
    link ``.ckpt`` that ``init`` writes into it is removed before each).
    """
    work = scratch / "work"
    say(f"copying {source} ...")
    copy_tree(source, work)
    os.sync()  # the copy's writeback must not land inside a timed step
    runs: list[dict[str, Any]] = []
    for i in range(rounds):
        for tool in (tools if i % 2 == 0 else list(reversed(tools))):
            say(f"round {i} {tool.name} ...")
            shutil.rmtree(work / ".ckpt", ignore_errors=True)
            store = scratch / f"r{i}-{tool.name}" / "store"
            store.parent.mkdir()
            tool.init(work, store)
            m = tool.run(work, store, "create", "--json", "-m", "first")
            record = json.loads(m.stdout[0])
            size = store_size(store)
            stats = tool.json(work, store, "stats")
            runs.append({"round": i, "tool": tool.name, "seconds": m.seconds,
                         "max_rss_kib": m.max_rss_kib, "create": record.get("stats"),
                         "store": size, "stats": stats,
                         "codecs": codec_sizes(tool, store) if i == 0 else None})
            say(f"  {m.seconds:.2f} s, {size['allocated_bytes'] / 1e6:.1f} MB allocated")
            shutil.rmtree(store.parent)
    by = {t.name: [r for r in runs if r["tool"] == t.name] for t in tools}
    return {"runs": runs,
            "seconds": _paired({n: [r["seconds"] for r in rs] for n, rs in by.items()}, tools),
            "allocated_bytes": {n: statistics.median(r["store"]["allocated_bytes"] for r in rs)
                                for n, rs in by.items()},
            "apparent_bytes": {n: statistics.median(r["store"]["apparent_bytes"] for r in rs)
                               for n, rs in by.items()}}


# Run by the tool's interpreter: per envelope codec (0 raw, 1 zstd, 2 dictionary, 3 delta,
# 4 block member), the objects, their stored and content bytes; blocks are codec 0/1 objects
# that members name, counted apart.
_CODECS = r"""
import json, sys
from ckpt.objstore import codec
from ckpt.objstore.store import ObjectStore
store = ObjectStore.open(sys.argv[1])
out, blocks = {}, set()
for oid in store.backend.iter_ids():
    stored = store.backend.get(oid)
    row = out.setdefault(str(stored[4]), {"objects": 0, "stored_bytes": 0, "content_bytes": 0})
    row["objects"] += 1
    row["stored_bytes"] += len(stored)
    row["content_bytes"] += codec.read_header(stored, oid)[1]
    if stored[4] == 4:
        blocks.add(codec.envelope_refs(stored, oid)[0])
out["blocks"] = {"objects": len(blocks),
                 "stored_bytes": sum(store.backend.stat(b).size for b in blocks)}
print(json.dumps(out))
"""


def codec_sizes(tool: Tool, store: Path) -> dict[str, Any] | None:
    """What each codec holds in ``store`` (see ``_CODECS``), or None if that failed."""
    done = subprocess.run([tool.python, "-c", _CODECS, str(store)], env=tool.env,
                          capture_output=True, text=True, check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


# -- django: releases one after another --------------------------------------------------------

def django_sdists(cache: Path, *, download: bool, say: Say) -> list[Path]:
    """The 8 sdists in ``cache/django-5.1`` (downloaded with pip when absent and allowed)."""
    folder = cache / DJANGO_DIR
    paths = [folder / f"Django-{v}.tar.gz" for v in DJANGO_VERSIONS]
    missing = [v for v, p in zip(DJANGO_VERSIONS, paths) if not p.is_file()]
    if missing and not download:
        raise CorpusError(f"the Django sdists are not in {folder}; `python -m bench.storage "
                          "--case django` downloads them")
    for version in missing:
        say(f"pip download django=={version} ...")
        folder.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                               "--no-binary", ":all:", f"django=={version}", "-d", str(folder)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0 or not (folder / f"Django-{version}.tar.gz").is_file():
            raise CorpusError(f"pip download django=={version} failed: "
                              f"{done.stderr.strip()[-1000:]}")
    return paths


def extract_release(tarball: Path, work: Path) -> None:
    """Replace what ``work`` holds (its ``.ckpt`` link and ``.git`` kept) by the release."""
    for child in work.iterdir():
        if child.name in (".ckpt", ".git"):
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    with tarfile.open(tarball) as tar:
        prefix = tar.getmembers()[0].name.split("/")[0] + "/"
        members = []
        for member in tar.getmembers():
            if not member.name.startswith(prefix):
                continue
            member.name = member.name[len(prefix):]
            members.append(member)
        tar.extractall(work, members=members, filter="data")


class Peer:
    """A peer tool in the releases case: init, one snapshot per release, its store's size."""

    name: str

    def __init__(self, work: Path, repo: Path) -> None:
        self.work, self.repo = work, repo

    def init(self) -> None:
        raise NotImplementedError

    def snapshot(self, label: str) -> None:
        raise NotImplementedError

    def sizes(self) -> dict[str, Any]:
        return {"store": store_size(self.repo)}


class CkptPeer(Peer):
    def __init__(self, work: Path, repo: Path, tool: Tool) -> None:
        super().__init__(work, repo)
        self.tool = tool
        self.name = tool.name

    def init(self) -> None:
        self.tool.init(self.work, self.repo)

    def snapshot(self, label: str) -> None:
        self.tool.run(self.work, self.repo, "create", "-m", label)

    def sizes(self) -> dict[str, Any]:
        return {"store": store_size(self.repo),
                "stats": self.tool.json(self.work, self.repo, "stats")}


def _quiet(cmd: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BenchFailure(f"{' '.join(cmd)} exited {done.returncode}: "
                           f"{done.stderr.strip()[-1000:]}")


class GitPeer(Peer):
    name = "git"

    def _git(self, *args: str) -> None:
        env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
               "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@ckpt.invalid",
               "GIT_COMMITTER_NAME": "b", "GIT_COMMITTER_EMAIL": "b@ckpt.invalid"}
        _quiet(["git", f"--git-dir={self.repo}", f"--work-tree={self.work}", *args],
               cwd=self.work, env=env)

    def init(self) -> None:
        self._git("init", "-q")
        for key, value in (("gc.auto", "0"), ("core.autocrlf", "false"),
                           ("commit.gpgsign", "false")):
            self._git("config", key, value)

    def snapshot(self, label: str) -> None:
        self._git("add", "-A")
        self._git("commit", "-q", "--allow-empty", "-m", label)

    def sizes(self) -> dict[str, Any]:
        loose = store_size(self.repo)
        self._git("gc", "-q")
        return {"store": loose, "after_gc": store_size(self.repo)}


class ResticPeer(Peer):
    name = "restic"

    def init(self) -> None:
        self.env = {**os.environ, "RESTIC_PASSWORD": "ckpt-bench",
                    "RESTIC_CACHE_DIR": str(self.repo.parent / "restic-cache")}
        _quiet(["restic", "init", "-q", "--repo", str(self.repo)], cwd=self.work, env=self.env)

    def snapshot(self, label: str) -> None:
        _quiet(["restic", "backup", "-q", "--repo", str(self.repo), "--tag", label, "."],
               cwd=self.work, env=self.env)


class BorgPeer(Peer):
    name = "borg"

    def init(self) -> None:
        self.env = {**os.environ, "BORG_PASSPHRASE": "",
                    "BORG_UNKNOWN_UNENCRYPTED_REPO_ACCESS_IS_OK": "yes",
                    "BORG_BASE_DIR": str(self.repo.parent / "borg-base")}
        _quiet(["borg", "init", "-e", "none", str(self.repo)], cwd=self.work, env=self.env)

    def snapshot(self, label: str) -> None:
        _quiet(["borg", "create", "-C", "zstd,3", f"{self.repo}::{label}", "."], cwd=self.work,
               env=self.env)


def releases_case(sdists: Sequence[Path], tools: Sequence[Tool], scratch: Path, *,
                  peers: bool, say: Say) -> dict[str, Any]:
    """Each tool in turn: one workspace, each release extracted and snapshotted; sizes after."""
    chosen: list[Callable[[Path, Path], Peer]] = [
        lambda w, r, t=t: CkptPeer(w, r, t) for t in tools]  # type: ignore[misc]
    if peers:
        chosen.append(GitPeer)
        chosen += [cls for cls, exe in ((ResticPeer, "restic"), (BorgPeer, "borg"))
                   if shutil.which(exe)]
    results: dict[str, Any] = {}
    for make in chosen:
        folder = scratch / f"releases-{len(results)}"
        work, repo = folder / "work", folder / "store"
        work.mkdir(parents=True)
        peer = make(work, repo)
        say(f"{peer.name}: {len(sdists)} releases ...")
        peer.init()
        seconds, growth = [], []
        for tarball in sdists:
            extract_release(tarball, work)
            time.sleep(RACY_PAUSE_S)
            start = time.perf_counter()
            peer.snapshot(tarball.name)
            seconds.append(time.perf_counter() - start)
            growth.append(store_size(repo)["allocated_bytes"])  # after each release
        results[peer.name] = {**peer.sizes(), "snapshot_seconds": seconds,
                              "allocated_after_each": growth}
        say(f"  {results[peer.name]['store']['allocated_bytes'] / 1e6:.1f} MB allocated")
        shutil.rmtree(folder)
    return {"releases": [p.name for p in sdists], "tools": results}


# -- longfile: one file, many small edits ------------------------------------------------------

_WORDS = ("value", "index", "result", "buffer", "count", "state", "config", "node", "item",
          "handle", "parse", "update", "render", "token", "offset", "length", "cache", "entry")


def _line(rng: random.Random) -> str:
    indent = "    " * rng.randint(0, 3)
    w = rng.sample(_WORDS, 4)
    kind = rng.random()
    if kind < 0.15:
        return f"{indent}def {w[0]}_{w[1]}({w[2]}, {w[3]}={rng.randrange(100)}):\n"
    if kind < 0.25:
        return f"{indent}# {' '.join(rng.sample(_WORDS, rng.randint(3, 9)))}\n"
    if kind < 0.35:
        return "\n"
    return (f"{indent}{w[0]}_{rng.randrange(1 << 12):03x} = {w[1]}.{w[2]}({w[3]}, "
            f"{rng.randrange(1000)})\n")


def long_text(size: int, seed: int) -> list[str]:
    """Source-like lines summing to about ``size`` bytes (seeded)."""
    rng = random.Random(seed)
    lines, total = [], 0
    while total < size:
        line = _line(rng)
        lines.append(line)
        total += len(line)
    return lines


def edit_lines(lines: list[str], rng: random.Random) -> None:
    """One small local edit, in place: 1-3 lines replaced, 1-5 inserted, or 1-3 deleted."""
    at = rng.randrange(len(lines))
    kind = rng.random()
    if kind < 0.5:
        n = rng.randint(1, 3)
        lines[at:at + n] = [_line(rng) for _ in range(n)]
    elif kind < 0.8:
        lines[at:at] = [_line(rng) for _ in range(rng.randint(1, 5))]
    else:
        del lines[at:at + rng.randint(1, 3)]


class ApiWorker:
    """bench/inprocess.py under a tool's interpreter: the store opened once, one call a step."""

    def __init__(self, tool: Tool, cwd: Path) -> None:
        self.proc = subprocess.Popen([tool.python, str(WORKER)], cwd=cwd, env=tool.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.call_ready()

    def call_ready(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise BenchFailure(f"the API worker exited {self.proc.wait()}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise BenchFailure(f"API worker: {answer['error']}\n{answer['traceback'][-2000:]}")
        return answer

    def call(self, op: str, **args: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        return self.call_ready()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("close")
            finally:
                self.proc.wait(timeout=60)


# Run by the tool's interpreter after the session: each version's blob as stored (codec,
# stored size, delta depth from the envelope: codec 3 keeps it after the base id), then the
# paired repetitions: the restore of checkpoint 1 (a full blob) and of the deepest version,
# each into a new empty directory, and the blob reads alone, in alternating order.
_READS = r"""
import json, os, sys, tempfile, time
from ckpt.checkpoints import Checkpoints, RestoreOptions
from ckpt.objstore.ids import parse_oid
from ckpt.objstore.store import ObjectStore
args = json.loads(sys.argv[1])
store = ObjectStore.open(args["store"])
blobs = []
for hexid in args["blobs"]:
    stored = store.backend.get(parse_oid(hexid))
    codec = stored[4]
    blobs.append({"codec": codec, "stored": len(stored),
                  "depth": stored[13 + 32] if codec == 3 else 0})
full, deep = 0, max(range(len(blobs)), key=lambda i: (blobs[i]["depth"], i))
pairs = {"restore": {"full": [], "deep": []}, "read": {"full": [], "deep": []}}
scratch = tempfile.mkdtemp(dir=args["scratch"])
with Checkpoints.open(args["root"], store=args["store"]) as cp:
    for index in (full, deep):  # imports and first-call costs, untimed
        cp.restore(args["ids"][index], RestoreOptions(target=os.path.join(scratch, f"w{index}")))
    for rep in range(args["reps"]):
        for which in (("full", "deep") if rep % 2 == 0 else ("deep", "full")):
            index = full if which == "full" else deep
            target = os.path.join(scratch, f"{which}-{rep}")
            start = time.perf_counter()
            cp.restore(args["ids"][index], RestoreOptions(target=target))
            pairs["restore"][which].append(time.perf_counter() - start)
            oid = parse_oid(args["blobs"][index])
            start = time.perf_counter()
            store.get_bytes(oid)
            pairs["read"][which].append(time.perf_counter() - start)
print(json.dumps({"blobs": blobs, "full": full, "deep": deep, "pairs": pairs}))
"""


def long_session_case(tool: Tool, scratch: Path, *, size: int, checkpoints: int, reps: int,
                      seed: int, say: Say) -> dict[str, Any]:
    """One file, ``checkpoints`` snapshots each after one small edit (the first: as made)."""
    work, store = scratch / "work", scratch / "store"
    work.mkdir(parents=True)
    path = work / "module.py"
    lines = long_text(size, seed)
    rng = random.Random(seed + 1)
    worker = ApiWorker(tool, scratch)
    try:
        worker.call("init", root=str(work), store=str(store))
        for key, value in tool.settings:
            tool.run(work, store, "config", "set", key, value)
        empty = store_size(store)
        worker.call("open", root=str(work), store=str(store))
        ids, hashes, copies, level = [], [], 0, _level(tool, work, store)
        compressor = zstandard.ZstdCompressor(level=level) if level else None
        seconds = []
        for n in range(checkpoints):
            if n:
                edit_lines(lines, rng)
            data = "".join(lines).encode()
            path.write_bytes(data)
            hashes.append(hash_file(str(path)))
            copies += len(compressor.compress(data)) if compressor else len(data)
            time.sleep(RACY_PAUSE_S)
            answer = worker.call("create", label=f"edit {n}")
            ids.append(answer["id"])
            seconds.append(answer["seconds"])
            if (n + 1) % 50 == 0:
                say(f"  {tool.name}: {n + 1} checkpoints")
        open_size = store_size(store)  # the catalog's write-ahead log included
    finally:
        worker.close()
    after = store_size(store)  # at rest: what the session left
    checked = sorted({0, (checkpoints - 1) // 2, checkpoints - 1})
    if checkpoints >= 200:
        checked = [0, 99, 199]
    worker = ApiWorker(tool, scratch)
    try:
        worker.call("open", root=str(work), store=str(store))
        for index in checked:
            worker.call("restore", ref=ids[index])
            if hash_file(str(path)) != hashes[index]:
                raise BenchFailure(f"{tool.name}: checkpoint {index + 1} did not restore "
                                   "byte for byte")
    finally:
        worker.close()
    done = subprocess.run([tool.python, "-c", _READS, json.dumps({
        "store": str(store), "root": str(work), "blobs": hashes, "ids": ids, "reps": reps,
        "scratch": str(scratch)})], cwd=scratch, env=tool.env, capture_output=True, text=True,
        check=False)
    if done.returncode != 0:
        raise BenchFailure(f"{tool.name}: the restore timings failed: {done.stderr[-2000:]}")
    reads = json.loads(done.stdout)
    pairs = reads.pop("pairs")
    growth = after["allocated_bytes"] - empty["allocated_bytes"]
    timing = {}
    for what, cells in pairs.items():
        timing[what] = {"full_median_s": statistics.median(cells["full"]),
                        "deep_median_s": statistics.median(cells["deep"]),
                        "paired_ratio": statistics.median(
                            d / f for d, f in zip(cells["deep"], cells["full"]))}
    return {"size": len(data), "checkpoints": checkpoints, "compression_level": level,
            "restored_exactly": [i + 1 for i in checked], "empty_store": empty,
            "store": after, "store_while_open": open_size, "growth_allocated_bytes": growth,
            "growth_apparent_bytes": after["apparent_bytes"] - empty["apparent_bytes"],
            "independent_copies_bytes": copies, "growth_ratio": growth / copies,
            "create_median_s": statistics.median(seconds),
            "deepest": {"checkpoint": reads["deep"] + 1, **reads["blobs"][reads["deep"]]},
            "full": {"checkpoint": reads["full"] + 1, **reads["blobs"][reads["full"]]},
            "max_depth": max(b["depth"] for b in reads["blobs"]),
            "codecs": {str(c): sum(1 for b in reads["blobs"] if b["codec"] == c)
                       for c in sorted({b["codec"] for b in reads["blobs"]})},
            "timing": timing, "reps": reps}


def _level(tool: Tool, work: Path, store: Path) -> int:
    return int(tool.json(work, store, "config", "get", "compression_level")["value"])


# -- the program ---------------------------------------------------------------------------------

def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def render(report: dict[str, Any]) -> str:
    case, res = report["case"], report["result"]
    lines = [f"case {case}; {report['date']}; {report['machine']['cpu']} "
             f"x{report['machine']['nproc']}"]
    for name, info in report["tools"].items():
        lines.append(f"  {name}: {info['module']}"
                     + (f" (set: {info['settings']})" if info.get("settings") else ""))
    lines.append("")
    if case == "linux":
        s = res["seconds"]
        lines.append(f"{'tool':<10}{'first snapshot s':>18}{'allocated MB':>14}"
                     f"{'apparent MB':>13}")
        lines += [f"{name:<10}{s[name]:>18.2f}{res['allocated_bytes'][name] / 1e6:>14.1f}"
                  f"{res['apparent_bytes'][name] / 1e6:>13.1f}" for name in report["tools"]]
        if "median_ratio" in s:
            lines.append(f"ckpt/baseline time: {s['median_ratio']:.2f} (rounds: "
                         + " ".join(f"{r:.2f}" for r in s["ratios"]) + ")")
        for run in res["runs"]:
            blocks = (run.get("codecs") or {}).get("blocks")
            if blocks and blocks["objects"]:
                members = run["codecs"].get("4", {})
                lines.append(f"{run['tool']}: {blocks['objects']:,} blocks "
                             f"{_mb(blocks['stored_bytes'])} holding {members.get('objects', 0):,}"
                             f" members ({_mb(members.get('content_bytes', 0))} content, "
                             f"envelopes {_mb(members.get('stored_bytes', 0))})")
        alloc = res["allocated_bytes"]["ckpt"]
        lines.append(f"targets: store {_mb(alloc)} <= {_mb(LINUX_TARGET_BYTES)}: "
                     f"{'met' if alloc <= LINUX_TARGET_BYTES else 'NOT met'}"
                     + (f"; time {s['median_ratio']:.2f}x <= {LINUX_TIME_TARGET}x: "
                        f"{'met' if s['median_ratio'] <= LINUX_TIME_TARGET else 'NOT met'}"
                        if "median_ratio" in s else ""))
    elif case == "django":
        lines.append(f"{len(res['releases'])} releases: {', '.join(res['releases'])}")
        lines.append(f"{'tool':<10}{'allocated MB':>14}{'apparent MB':>13}{'after gc MB':>13}"
                     f"{'snapshots s':>13}")
        for name, r in res["tools"].items():
            gc = r.get("after_gc", {}).get("allocated_bytes")
            lines.append(f"{name:<10}{r['store']['allocated_bytes'] / 1e6:>14.1f}"
                         f"{r['store']['apparent_bytes'] / 1e6:>13.1f}"
                         f"{'-' if gc is None else f'{gc / 1e6:.1f}':>13}"
                         f"{sum(r['snapshot_seconds']):>13.2f}")
        lines.append("allocated MB after each release: " + "; ".join(
            f"{name} " + " ".join(f"{b / 1e6:.1f}" for b in r["allocated_after_each"])
            for name, r in res["tools"].items()))
        alloc = res["tools"]["ckpt"]["store"]["allocated_bytes"]
        lines.append(f"target: store {_mb(alloc)} <= {_mb(DJANGO_TARGET_BYTES)}: "
                     f"{'met' if alloc <= DJANGO_TARGET_BYTES else 'NOT met'}")
    else:
        lines.append(f"{'tool':<10}{'growth MB':>10}{'/ copies':>9}{'max depth':>10}"
                     f"{'restore deep/full':>19}{'read deep/full':>16}{'create ms':>10}")
        for name, r in res.items():
            t = r["timing"]
            lines.append(f"{name:<10}{r['growth_allocated_bytes'] / 1e6:>10.2f}"
                         f"{r['growth_ratio']:>9.1%}{r['max_depth']:>10}"
                         f"{t['restore']['paired_ratio']:>19.2f}{t['read']['paired_ratio']:>16.2f}"
                         f"{r['create_median_s'] * 1000:>10.1f}")
        r = res["ckpt"]
        lines.append(f"{r['checkpoints']} checkpoints of a {_mb(r['size'])} file; 200 "
                     f"independent copies (zstd {r['compression_level']}): "
                     f"{_mb(r['independent_copies_bytes'])}; restored byte for byte: "
                     f"checkpoints {', '.join(map(str, r['restored_exactly']))}")
        t = r["timing"]["restore"]
        lines.append(f"restore of checkpoint {r['deepest']['checkpoint']} (depth "
                     f"{r['deepest']['depth']}) {t['deep_median_s'] * 1000:.1f} ms vs checkpoint "
                     f"{r['full']['checkpoint']} (full) {t['full_median_s'] * 1000:.1f} ms "
                     f"({r['reps']} paired repetitions)")
        lines.append(f"targets: growth {r['growth_ratio']:.1%} <= {LONGFILE_GROWTH_TARGET:.0%}: "
                     f"{'met' if r['growth_ratio'] <= LONGFILE_GROWTH_TARGET else 'NOT met'}; "
                     f"restore {t['paired_ratio']:.2f}x <= {LONGFILE_RESTORE_TARGET}x: "
                     f"{'met' if t['paired_ratio'] <= LONGFILE_RESTORE_TARGET else 'NOT met'}")
    return "\n".join(lines)


def run_case(case: str, tools: Sequence[Tool], scratch: Path, *, rounds: int = 2,
             corpus: str | None = None, download: bool = True, peers: bool = True,
             scale: float = 1.0, reps: int = 15, seed: int = 1,
             say: Say = lambda _m: None) -> dict[str, Any]:
    """One case's result (the ``result`` of the report); raises BenchFailure, CorpusError."""
    if case == "linux":
        source = get_corpus(corpus or "linux").path
        return first_snapshot_case(source, tools, scratch, rounds=rounds, say=say)
    if case == "django":
        sdists = django_sdists(cache_dir(), download=download, say=say)
        return releases_case(sdists, tools, scratch, peers=peers, say=say)
    out = {}
    for tool in tools:
        say(f"{tool.name}: long session ...")
        out[tool.name] = long_session_case(
            tool, scratch / tool.name, size=max(10_000, round(LONGFILE_SIZE * scale)),
            checkpoints=max(10, round(LONGFILE_CHECKPOINTS * scale)), reps=reps, seed=seed,
            say=say)
    return out


def _setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--set takes KEY=VALUE, not {text!r}")
    return key, value


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.storage",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", required=True, choices=CASES)
    ap.add_argument("--rounds", type=int, default=2, help="linux: rounds per tool (default 2)")
    ap.add_argument("--corpus", help="linux: another tree than the Linux source (a directory, "
                                     "'stdlib' or 'linux')")
    ap.add_argument("--baseline-python", help="an interpreter whose ckpt is the baseline, run "
                                              "in the same run (e.g. an install of main)")
    ap.add_argument("--baseline-path", type=Path,
                    help="a checkout whose ckpt is the baseline (run by --baseline-python, or "
                         "this interpreter)")
    ap.add_argument("--ckpt-path", type=Path,
                    help="the checkout ckpt is imported from (default: this one; a detached "
                         "worktree keeps a run's code fixed while this one changes)")
    ap.add_argument("--set", dest="settings", type=_setting, action="append", default=[],
                    metavar="KEY=VALUE", help="ckpt config set on ckpt's stores (repeatable)")
    ap.add_argument("--reps", type=int, default=15,
                    help="longfile: paired restore repetitions (default 15)")
    ap.add_argument("--no-peers", action="store_true", help="django: ckpt only (no git, restic, "
                                                            "borg)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--scratch", type=Path, help="where copies and stores go (a temp dir)")
    ap.add_argument("--json", type=Path, help="write the full report here")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.reps < 1:
        ap.error("--rounds and --reps must be >= 1")
    tools = make_tools(args.baseline_python, args.settings, ckpt_path=args.ckpt_path,
                       baseline_path=args.baseline_path)
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f"ckpt-storage-{args.case}-", dir=args.scratch))

    def say(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    try:
        infos = {t.name: {**version_of(t), "python": t.python,
                          "settings": dict(t.settings)} for t in tools}
        result = run_case(args.case, tools, scratch, rounds=args.rounds, corpus=args.corpus,
                          peers=not args.no_peers, reps=args.reps, seed=args.seed, say=say)
    except CorpusError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    report = {"case": args.case, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": machine_info(), "tools": infos, "seed": args.seed, "result": result}
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    run_program(main)
