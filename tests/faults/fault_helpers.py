"""Shared machinery of the fault suite: running `ckpt` as a real process (and killing it),
seeded workspaces, exact tree models, and the tally of injected faults.

Not a test module: the test files `import fault_helpers` (pyproject's pytest `pythonpath` puts
tests/faults on sys.path; the name is unique across tests/).

Scale: every count comes from `scale(default, soak)` (tests/soak.py: `CKPT_SOAK=1`).
The tally (faults injected, cases passed) is printed at the end of the run by `conftest.py` and
written as JSON to `$CKPT_FAULT_REPORT` when that is set.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from soak import SOAK as SOAK  # tests/ is on pytest's `pythonpath`; re-exported
from soak import scale as scale

from ckpt import checkpoints
from ckpt.checkpoints.identity import root_key
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import EntryKind, ObjectId, ObjectStore, hash_bytes

REPO = str(Path(checkpoints.__file__).resolve().parent.parent)
CKPT_VARS = ("CKPT_ROOT", "CKPT_STORE", "CKPT_SESSION", "CKPT_DEBUG")
ENTRY = "from ckpt.cli.main import main; main()"
# Exit codes of docs/DESIGN.md (the CLI contract), spelled out here so the tests pin them.
OK, USER_ERROR, USAGE, NOTHING, BUSY, CORRUPT = 0, 1, 2, 3, 4, 5


def seed_for(name: str) -> int:
    """A fixed seed per scenario (CKPT_FAULT_SEED shifts all of them for exploration)."""
    return int(os.environ.get("CKPT_FAULT_SEED", "0")) * 1_000_003 + sum(
        (i + 1) * ord(c) for i, c in enumerate(name))


# -- the tally -------------------------------------------------------------------------------

TALLY: dict[str, Counter[str]] = {}


def tally(area: str, **counts: int) -> None:
    """Add to the counters of `area` (e.g. tally("kill create", injected=1, landed=1))."""
    counter = TALLY.setdefault(area, Counter())
    for key, value in counts.items():
        counter[key] += value


def tally_lines() -> list[str]:
    lines = []
    for area in sorted(TALLY):
        parts = ", ".join(f"{k}={v}" for k, v in sorted(TALLY[area].items()))
        lines.append(f"{area}: {parts}")
    return lines


def write_tally(path: str) -> None:
    data = {"soak": SOAK, "areas": {a: dict(c) for a, c in sorted(TALLY.items())}}
    with open(path, "w", encoding="utf-8") as out:
        json.dump(data, out, indent=2, sort_keys=True)
        out.write("\n")


# -- running ckpt ----------------------------------------------------------------------------

_PYCACHE: list[str] = []


def set_pycache(path: str) -> None:
    _PYCACHE.append(path)


def env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a `ckpt` child: the repo importable, no CKPT_* from outside."""
    result = {k: v for k, v in os.environ.items()
              if k not in CKPT_VARS and k != "PYTHONDONTWRITEBYTECODE"}
    result["PYTHONPATH"] = REPO + (os.pathsep + result["PYTHONPATH"]
                                   if result.get("PYTHONPATH") else "")
    if _PYCACHE:
        result["PYTHONPYCACHEPREFIX"] = _PYCACHE[-1]
    result.update(extra or {})
    return result


def argv(root: str, *args: str, store: str | None = None) -> list[str]:
    head = [sys.executable, "-c", ENTRY, "--root", root]
    if store is not None:
        head += ["--store", store]
    return head + list(args)


@dataclass
class Run:
    code: int
    out: str
    err: str
    elapsed: float = 0.0
    killed: bool = False

    def json(self) -> Any:
        return json.loads(self.out)

    def __str__(self) -> str:
        return f"exit {self.code}\nstdout: {self.out[-2000:]}\nstderr: {self.err[-2000:]}"


def ckpt(root: str, *args: str, store: str | None = None, timeout: float = 180,
         extra_env: dict[str, str] | None = None) -> Run:
    """Run `ckpt --root ROOT [--store S] ARGS` as a real process."""
    started = time.monotonic()
    done = subprocess.run(argv(root, *args, store=store), env=env(extra_env),
                          capture_output=True, timeout=timeout, check=False, cwd=root)
    return Run(done.returncode, done.stdout.decode("utf-8", "surrogateescape"),
               done.stderr.decode("utf-8", "surrogateescape"), time.monotonic() - started)


def ckpt_in(root: str, *args: str, store: str | None = None) -> Run:
    """Run the same command in this process (click's runner): the real command code and
    exit-code table without an interpreter start, for the many checks after each fault."""
    from click.testing import CliRunner

    from ckpt.cli.main import cli

    head = ["--root", root] + (["--store", store] if store is not None else [])
    started = time.monotonic()
    result = CliRunner().invoke(cli, head + list(args), prog_name="ckpt")
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Run(result.exit_code, result.stdout, result.stderr, time.monotonic() - started)


def start(root: str, *args: str, store: str | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv(root, *args, store=store), env=env(), cwd=root,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def kill_after(root: str, args: Sequence[str], delay: float, *, store: str | None = None,
               timeout: float = 180) -> Run:
    """Start `ckpt ARGS`, SIGKILL it `delay` seconds later (unless it finished first)."""
    started = time.monotonic()
    child = start(root, *args, store=store)
    killed = False
    try:
        child.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
        killed = True
    out, err = child.communicate(timeout=timeout)
    if killed and child.returncode != -signal.SIGKILL:
        killed = False  # it exited by itself in the instant before the signal
    return Run(child.returncode, out.decode("utf-8", "surrogateescape"),
               err.decode("utf-8", "surrogateescape"), time.monotonic() - started, killed)


# A restore through the Python API that prints a line per progress tick of its apply phase,
# so a test can SIGKILL it mid-apply. argv: root, checkpoint id.
_RESTORER = """
import sys
from ckpt.checkpoints.service import Checkpoints
def tick(stage, done, total):
    if stage == "restore":
        print("tick", done, total, flush=True)
with Checkpoints.open(sys.argv[1]) as cp:
    cp.restore(sys.argv[2], progress=tick)
print("done", flush=True)
"""


def kill_restore_mid_apply(root: str, store: str, first: str, second: str,
                           target: Model, current: Model,
                           rng: random.Random, attempts: int = 5) -> None:
    """Restore `first` (whose tree is `target`) over `current` (checkpoint `second`) and kill
    it mid-apply: a journal left and the tree neither state. On a loaded machine the kill may
    land after the apply: then recover, go back to `second` and try again."""
    for _attempt in range(attempts):
        killed = kill_mid_apply(root, first, rng)
        if killed and journals(store) and tree_state(root) not in (target, current):
            return
        assert ckpt(root, "recover").code == OK
        assert ckpt(root, "restore", "--no-save", second).code == OK
        assert tree_state(root) == current
    raise AssertionError(f"the restore was not killed mid-apply in {attempts} attempts")


def kill_mid_apply(root: str, checkpoint_id: str, rng: random.Random) -> bool:
    """Restore `checkpoint_id` in a child killed after its first apply tick (plus a seeded
    sub-tick delay); True if it was killed mid-apply (False: it finished first)."""
    child = subprocess.Popen([sys.executable, "-c", _RESTORER, root, checkpoint_id],
                             env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout is not None
    line = child.stdout.readline()
    if line.startswith(b"tick"):
        time.sleep(rng.uniform(0, 0.005))
        child.send_signal(signal.SIGKILL)
    child.communicate(timeout=120)
    return child.returncode == -signal.SIGKILL


def startup_seconds(root: str, store: str | None = None) -> float:
    """How long `ckpt` takes to start and open the store (a `list`): kills are spread after
    it, so they land inside the operation rather than in the interpreter's start."""
    return min(ckpt(root, "list", store=store).elapsed for _ in range(2))


# -- workspaces ------------------------------------------------------------------------------

PAST = 1_600_000_000  # an mtime outside the stat cache's racy window


def write_file(path: str | bytes, data: bytes, *, executable: bool = False,
               old: bool = False) -> None:
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    if os.path.islink(path):
        os.unlink(path)
    with open(path, "wb") as out:
        out.write(data)
    os.chmod(path, 0o755 if executable else 0o644)
    if old:
        os.utime(path, (PAST, PAST))


def build_tree(root: str, rng: random.Random, *, files: int, dirs: int = 40,
               max_size: int = 6000) -> None:
    """A seeded workspace: `files` files over nested directories, some executables, some
    symlinks (inside and outside the root, dangling), one file a few hundred KiB."""
    for index in range(files):
        path = os.path.join(root, f"d{index % dirs:02}", f"s{index % 7}", f"f{index:05}.txt")
        write_file(path, rng.randbytes(rng.randint(0, max_size)), executable=index % 13 == 0)
    write_file(os.path.join(root, "big.bin"), rng.randbytes(300_000))
    for index in range(min(files // 50, 40)):
        link = os.path.join(root, f"d{index % dirs:02}", f"link{index}")
        if not os.path.lexists(link):
            os.symlink(f"s{index % 7}/f{index:05}.txt" if index % 3 else "/etc/hostname", link)


def mutate(root: str, rng: random.Random, *, changes: int, max_size: int = 6000) -> None:
    """Seeded edits: rewrite, add, delete, chmod files; add and remove directories."""
    files = [p for p in walk_files(root) if not os.path.islink(p)]
    for _ in range(changes):
        roll = rng.random()
        if roll < 0.6 and files:
            path = rng.choice(files)
            write_file(path, rng.randbytes(rng.randint(0, max_size)),
                       executable=rng.random() < 0.05)
        elif roll < 0.8:
            path = os.path.join(root, f"new{rng.randrange(8)}", f"n{rng.randrange(10**6)}.txt")
            write_file(path, rng.randbytes(rng.randint(0, max_size)))
            files.append(path)
        elif files:
            path = files.pop(rng.randrange(len(files)))
            if os.path.exists(path):
                os.unlink(path)


def walk_files(root: str) -> list[str]:
    found = []
    for top, dirnames, filenames in os.walk(root):
        if top == root and ".ckpt" in dirnames:
            dirnames.remove(".ckpt")
        found.extend(os.path.join(top, f) for f in filenames)
    return sorted(found)


# -- exact models of a tree ------------------------------------------------------------------

Model = dict[bytes, tuple[Any, ...]]


def tree_state(root: str | bytes, *, exclude: Sequence[bytes] = (b".ckpt",),
               with_inodes: bool = False) -> Model:
    """Every path under `root` -> ("d",) | ("f", executable, blake3 hex) | ("l", target).

    `with_inodes` adds (inode, mtime_ns) to files and links, to prove something untouched."""
    model: Model = {}
    base = os.fsencode(root)

    def visit(directory: bytes, prefix: bytes) -> None:
        with os.scandir(directory) as entries:
            for entry in entries:
                rel = prefix + entry.name
                if not prefix and entry.name in exclude:
                    continue
                st = entry.stat(follow_symlinks=False)
                extra = (st.st_ino, st.st_mtime_ns) if with_inodes else ()
                if stat.S_ISDIR(st.st_mode):
                    model[rel] = ("d",)
                    visit(entry.path, rel + b"/")
                elif stat.S_ISLNK(st.st_mode):
                    model[rel] = ("l", os.readlink(entry.path), *extra)
                else:
                    with open(entry.path, "rb") as stream:
                        digest = hash_bytes(stream.read()).hex()
                    model[rel] = ("f", bool(st.st_mode & 0o100), digest, *extra)

    visit(base, b"")
    return model


def checkpoint_state(cp: Checkpoints, ref: str) -> Model:
    """The same model, read from a checkpoint's trees (verified reads)."""
    model: Model = {}

    def visit(oid: ObjectId, prefix: bytes) -> None:
        for entry in cp.objects.get_tree(oid).entries:
            rel = prefix + entry.name
            if entry.kind is EntryKind.TREE:
                model[rel] = ("d",)
                assert entry.oid is not None
                visit(entry.oid, rel + b"/")
            elif entry.kind is EntryKind.SYMLINK:
                model[rel] = ("l", entry.target)
            elif entry.kind in (EntryKind.FILE, EntryKind.EXECUTABLE):
                assert entry.oid is not None
                model[rel] = ("f", entry.kind is EntryKind.EXECUTABLE, entry.oid.hex())

    visit(cp.get(ref).tree, b"")
    return model


def diff_models(expected: Model, actual: Model, limit: int = 8) -> str:
    missing = sorted(set(expected) - set(actual))[:limit]
    extra = sorted(set(actual) - set(expected))[:limit]
    changed = sorted(p for p in set(expected) & set(actual) if expected[p] != actual[p])[:limit]
    return f"missing {missing}, extra {extra}, changed {changed}"


def journals(store: str) -> list[str]:
    """Pending restore journals (the store layout of ARCHITECTURE.md): the catalog's, named
    `<catalog>#<root>`, and the journal files of an older ckpt."""
    found = []
    catalog = os.path.join(store, "catalog.db")
    if os.path.exists(catalog):
        with contextlib.closing(sqlite3.connect(catalog)) as conn:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_schema")}
            if "restores" in tables:
                found += [f"{catalog}#{os.fsdecode(row[0])}"
                          for row in conn.execute("SELECT root FROM restores")]
    base = os.path.join(store, "roots")
    if os.path.isdir(base):
        found += [os.path.join(base, k, "journal") for k in os.listdir(base)
                  if os.path.exists(os.path.join(base, k, "journal"))]
    return sorted(found)


def root_dir(store: str, root: str) -> str:
    """`<store>/roots/<key>`: the workspace's identity, or the hash of the root path for a
    root not yet given one (ARCHITECTURE.md)."""
    return os.path.join(store, "roots", root_key(root))


def set_config(root: str, key: str, value: str, store: str | None = None) -> None:
    run = ckpt_in(root, "config", "set", key, value, store=store)
    assert run.code == OK, run


def fsck_clean(root: str, store: str | None = None) -> Run:
    run = ckpt_in(root, "fsck", "--full", store=store)
    assert run.code == OK, f"fsck --full is not clean:\n{run}"
    return run


def listed_ids(root: str, store: str | None = None) -> set[str]:
    run = ckpt_in(root, "list", "--all-sessions", "--json", store=store)
    assert run.code == OK, run
    return {r["id"] for r in run.json()}


@dataclass
class Ledger:
    """Checkpoints reported created (their id was printed) and the tree each must hold."""

    root: str
    store: str | None = None
    expected: dict[str, Model] = field(default_factory=dict)

    def report(self, checkpoint_id: str, model: Model) -> None:
        assert re.fullmatch(r"ckpt-\d+-[0-9a-z]+", checkpoint_id), checkpoint_id
        self.expected[checkpoint_id] = model

    def forget(self, ids: set[str]) -> None:
        for checkpoint_id in ids:
            self.expected.pop(checkpoint_id, None)

    def check(self, context: str) -> None:
        """fsck --full clean; every reported checkpoint listed, holding exactly its tree."""
        fsck_clean(self.root, self.store)
        listed = listed_ids(self.root, self.store)
        lost = sorted(set(self.expected) - listed)
        assert not lost, f"{context}: reported checkpoints are gone: {lost}"
        with Checkpoints.open(self.root, self.store) as cp:
            for checkpoint_id, model in self.expected.items():
                held = checkpoint_state(cp, checkpoint_id)
                assert held == model, f"{context}: {checkpoint_id}: {diff_models(model, held)}"


# -- file damage -----------------------------------------------------------------------------


def object_file(store: str, oid: ObjectId) -> tuple[str, int, int]:
    """Where the stored bytes of `oid` are: (file, offset, length), whatever the layout.

    A loose object is its own file; otherwise the stored envelope is found inside a pack
    file by its bytes (read through the public backend API), so the suite does not depend on
    the pack format."""
    text = oid.hex()
    loose = os.path.join(store, "objects", text[:2], text[2:])
    if os.path.exists(loose):
        return loose, 0, os.path.getsize(loose)
    objects = ObjectStore.open(store)
    try:
        stored = objects.backend.get(oid)
    finally:
        objects.close()
    packs = os.path.join(store, "objects", "packs")
    for name in sorted(os.listdir(packs)) if os.path.isdir(packs) else []:
        if not name.endswith(".pack"):
            continue
        with open(os.path.join(packs, name), "rb") as stream:
            data = stream.read()
        at = data.find(stored)
        if at >= 0:
            return os.path.join(packs, name), at, len(stored)
    raise AssertionError(f"object {text} not found on disk")


def flip_byte(path: str, offset: int) -> None:
    os.chmod(path, 0o644)  # loose objects are read-only files
    with open(path, "r+b") as stream:
        stream.seek(offset)
        byte = stream.read(1)
        stream.seek(offset)
        stream.write(bytes([byte[0] ^ 0x5A]))


# -- mounts ----------------------------------------------------------------------------------


def can_mount() -> bool:
    return os.geteuid() == 0 and sys.platform.startswith("linux")


@contextmanager
def tmpfs(path: str, size: str) -> Iterator[str]:
    """A small tmpfs at `path` (root only): a real filesystem that runs out of space."""
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", path],
                   check=True, capture_output=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", path], check=False, capture_output=True)


def remount(path: str, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", path], check=True,
                   capture_output=True)


class SealableDisk:
    """A real filesystem whose writes start failing with EIO when told to.

    A filesystem on a loop device over a memfd, mounted `sync` so that write(2), mkdir(2),
    rename(2) report the device's errors themselves. `fail()` seals the memfd against writes
    (F_SEAL_WRITE): from then on every block write of the loop device fails (reads still
    work). `replace()` unmounts, repairs (e2fsck, as a restart would) and mounts a copy of what
    had reached the device, as after a restart onto a healthy disk holding its image.
    `fs="ext4"` (journaled: the first failure aborts the journal, later writes get EROFS, the
    image stays consistent) or `fs="ext2"` (no journal: write(2) itself returns EIO, but the
    image is not crash-consistent, so a repair can lose files the disk held before).
    Root only; `available()` says whether this kernel allows it."""

    SIZE = 96 << 20

    def __init__(self, mnt: str, fs: str = "ext4", mkfs_options: tuple[str, ...] = ()) -> None:
        self.mnt = mnt
        self.fs = fs
        self.mkfs_options = mkfs_options  # more options for mkfs (ext4 -I 128: whole seconds)
        self.fd = -1
        self.loop = ""
        self.repairs = 0  # replacements whose filesystem e2fsck had to repair

    @staticmethod
    def available() -> bool:
        import shutil

        return (can_mount() and hasattr(os, "memfd_create") and bool(shutil.which("losetup"))
                and bool(shutil.which("mkfs.ext4")) and bool(shutil.which("mkfs.ext2")))

    def _attach(self, fd: int) -> None:
        path = f"/proc/{os.getpid()}/fd/{fd}"
        self.loop = subprocess.run(["losetup", "-f", "--show", path], check=True,
                                   capture_output=True, text=True).stdout.strip()
        self.fd = fd
        os.makedirs(self.mnt, exist_ok=True)
        options = "sync" if self.fs == "ext4" else "sync,errors=continue"
        subprocess.run(["mount", "-t", self.fs, "-o", options, self.loop, self.mnt], check=True,
                       capture_output=True)

    def _detach(self) -> None:
        subprocess.run(["umount", self.mnt], check=False, capture_output=True)
        subprocess.run(["losetup", "-d", self.loop], check=False, capture_output=True)
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> SealableDisk:  # noqa: PYI034
        fd = os.memfd_create("ckpt-fault-disk", os.MFD_ALLOW_SEALING)
        os.ftruncate(fd, self.SIZE)
        subprocess.run([f"mkfs.{self.fs}", "-q", "-F", "-b", "1024", *self.mkfs_options,
                        f"/proc/{os.getpid()}/fd/{fd}"], check=True, capture_output=True)
        self._attach(fd)
        return self

    def fail(self) -> None:
        import fcntl

        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)

    def replace(self) -> None:
        old = self.fd
        subprocess.run(["umount", self.mnt], check=True, capture_output=True)
        subprocess.run(["losetup", "-d", self.loop], check=False, capture_output=True)
        fd = os.memfd_create("ckpt-fault-disk", os.MFD_ALLOW_SEALING)
        offset = 0
        while chunk := os.pread(old, 1 << 20, offset):
            os.pwrite(fd, chunk, offset)
            offset += len(chunk)
        os.ftruncate(fd, self.SIZE)
        os.close(old)
        # as a restart would: repair the filesystem itself (ckpt's data is ckpt's business)
        for _ in range(3):  # a second pass finishes what the first one's fixes uncover
            check = subprocess.run(["e2fsck", "-f", "-y", f"/proc/{os.getpid()}/fd/{fd}"],
                                   capture_output=True, text=True, check=False)
            if check.returncode == 0:
                break
            self.repairs += 1
        # 1: fixed. A directory being created when the device failed can stay orphaned
        # ("couldn't fix parent"): lost to the filesystem, not ckpt's to judge.
        assert check.returncode < 4, f"e2fsck could not repair the image: {check.stdout}"
        self._attach(fd)

    def __exit__(self, *exc: object) -> None:
        if self.fd >= 0:
            self._detach()


# -- threads that disturb a tree -------------------------------------------------------------


class Appender(threading.Thread):
    """Appends to one file continuously until stopped (a log being written during a scan)."""

    def __init__(self, path: str, chunk: bytes) -> None:
        super().__init__(daemon=True)
        self.path = path
        self.chunk = chunk
        self.stop = threading.Event()
        self.appends = 0

    def run(self) -> None:
        with open(self.path, "ab", buffering=0) as out:
            while not self.stop.is_set():
                out.write(self.chunk)
                self.appends += 1
                time.sleep(0.0005)

