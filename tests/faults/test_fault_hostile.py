"""Hostile trees and crafted stores: nothing is ever written outside the root, nothing
crashes, and every case is reported (an exit code and a message, or a recorded skip).

- a directory replaced by a symlink after the checkpoint (and during the restore itself);
- symlinks pointing outside the root (recorded as links, never followed; tracking through
  one never deletes what it points at);
- crafted tree objects (raw bytes in the object envelope of objstore/codec.py) naming `..`,
  `a/b`, an absolute path, NUL, `.`, the empty name, the store, a `.git` directory, referenced
  from a catalog row or from a valid parent tree: restore refuses before writing anything;
- names that collide after Unicode normalization or case folding, and non-UTF-8 names;
- 255-byte names and paths deeper than PATH_MAX;
- one directory with 20k entries (100k with CKPT_SOAK=1);
- files and directories only their owner may read, checkpointed and restored as "nobody";
- files that grow (or shrink) while they are read.
"""

from __future__ import annotations

import errno
import io
import os
import random
import shutil
import sqlite3
import struct
import sys
import tempfile
import threading
import time
import unicodedata
from typing import Any

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import msgpack
import pytest
from nobody import NOBODY, run_as_nobody  # tests/checkpoints is on pytest's `pythonpath`

from ckpt.checkpoints.errors import RestoreIncomplete
from ckpt.checkpoints.history.catalog import _COLUMNS
from ckpt.checkpoints.history.records import row_digest
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import EntryKind, ObjectId, ObjectStore, hash_bytes

WIDE = h.scale(20_000, 100_000)
GROWTH_RUNS = h.scale(4, 20)


def read(*parts: str | bytes) -> bytes:
    with open(os.path.join(*parts), "rb") as stream:  # type: ignore[call-overload]
        return stream.read()  # type: ignore[no-any-return]


def workspace(base: str, name: str = "ws") -> str:
    root = os.path.join(base, name)
    os.mkdir(root)
    return root


def outside(base: str) -> str:
    """A directory beside the root, holding what a hostile tree would overwrite."""
    path = os.path.join(base, "outside")
    for name in ("a.txt", "secret.txt", "sub/b.txt"):
        h.write_file(os.path.join(path, name), b"outside: " + name.encode() + b"\n")
    return path


def created(root: str, *args: str) -> str:
    run = h.ckpt_in(root, "create", *args)
    assert run.code == h.OK, run
    return run.out.strip()


# -- symlinks ------------------------------------------------------------------------------


def test_directory_replaced_by_a_symlink_after_the_checkpoint(base: str) -> None:
    root, out = workspace(base), outside(base)
    h.write_file(os.path.join(root, "sub", "a.txt"), b"inside a\n")
    h.write_file(os.path.join(root, "sub", "b.txt"), b"inside b\n")
    assert h.ckpt_in(root, "init").code == h.OK
    first = created(root)
    model = h.tree_state(root)
    shutil.rmtree(os.path.join(root, "sub"))
    os.symlink(out, os.path.join(root, "sub"))
    before_out = h.tree_state(out, with_inodes=True)
    run = h.ckpt(root, "restore", first)
    assert run.code == h.OK, run
    assert h.tree_state(out, with_inodes=True) == before_out, "wrote through the symlink"
    assert h.tree_state(root) == model
    h.tally("hostile tree", injected=1, passed=1)


def test_directory_swapped_for_a_symlink_during_the_restore(base: str) -> None:
    """The swap happens between the plan and the writes (from the progress callback of the
    apply phase): the restore must not follow it; it reports the paths it could not write."""
    root, out = workspace(base), outside(base)
    for index in range(300):
        h.write_file(os.path.join(root, "aa", f"f{index:03}.txt"), b"a%d\n" % index)
        h.write_file(os.path.join(root, "zz", f"f{index:03}.txt"), b"z%d\n" % index)
    with Checkpoints.init(root) as cp:
        first = cp.create().id
        for index in range(300):
            h.write_file(os.path.join(root, "aa", f"f{index:03}.txt"), b"edited\n")
            h.write_file(os.path.join(root, "zz", f"f{index:03}.txt"), b"edited\n")
        before_out = h.tree_state(out, with_inodes=True)
        swapped = []

        def swap(stage: str, done: int, total: int) -> None:
            if stage == "restore" and not swapped:
                os.rename(os.path.join(root, "zz"), os.path.join(base, "zz-moved"))
                os.symlink(out, os.path.join(root, "zz"))
                swapped.append(done)

        with pytest.raises(RestoreIncomplete) as caught:
            cp.restore(first, progress=swap)
        assert swapped and "zz/" in str(caught.value)
        assert h.tree_state(out, with_inodes=True) == before_out, "wrote through the symlink"
        assert os.path.islink(os.path.join(root, "zz"))
        # the next restore replaces the link by the directory
        cp.restore(first)
        assert h.tree_state(out, with_inodes=True) == before_out
        assert h.tree_state(root) == h.checkpoint_state(cp, first)
    h.tally("hostile tree", injected=1, passed=1)


def test_symlinks_out_of_the_root_are_recorded_never_followed(base: str) -> None:
    root, out = workspace(base), outside(base)
    links = {"out": out, "up": "../..", "abs": "/etc/hostname", "dangling": "no/such/file",
             "self": "self", "loop-a": "loop-b", "loop-b": "loop-a"}
    for name, target in links.items():
        os.symlink(target, os.path.join(root, name))
    h.write_file(os.path.join(root, "plain.txt"), b"plain\n")
    assert h.ckpt_in(root, "init").code == h.OK
    first = created(root)
    with Checkpoints.open(root) as cp:
        held = h.checkpoint_state(cp, first)
    assert held == {b"plain.txt": held[b"plain.txt"],
                    **{n.encode(): ("l", t.encode()) for n, t in links.items()}}
    before_out = h.tree_state(out, with_inodes=True)
    for name in links:
        os.unlink(os.path.join(root, name))
    assert h.ckpt(root, "restore", first).code == h.OK
    assert {n: os.readlink(os.path.join(root, n)) for n in links} == links
    # tracking a path behind a symlink: recorded as absent, and restoring that never
    # deletes the file the link leads to
    track = h.ckpt(root, "--session", "t", "track", "out/secret.txt")  # relative to cwd=root
    assert track.code == h.OK, track
    run = h.ckpt_in(root, "--session", "t", "create")
    assert run.code == h.OK, run
    tracked = run.out.strip()
    restore = h.ckpt_in(root, "--session", "t", "restore", tracked)
    assert restore.code in (h.OK, h.NOTHING), restore
    assert h.tree_state(out, with_inodes=True) == before_out, "touched the link's target"
    assert os.path.islink(os.path.join(root, "out"))
    h.tally("hostile tree", injected=len(links) + 1, passed=len(links) + 1)


# -- crafted tree objects ---------------------------------------------------------------------


def envelope(data: bytes) -> bytes:
    """The raw object envelope of objstore/codec.py: magic, format, codec (0 = raw), length."""
    return struct.pack("<3sBBQ", b"CKO", 1, 0, len(data)) + data


def put_raw_tree(store: str, rows: list[tuple[bytes, int, Any, int]]) -> ObjectId:
    """Store a tree object from raw rows (name, kind, ref, size), bypassing every check."""
    data = msgpack.packb((1, sorted(rows)), use_bin_type=True)
    oid = hash_bytes(data)
    objects = ObjectStore.open(store)
    try:
        objects.backend.put(oid, envelope(data))
    finally:
        objects.close()
    return oid


HOSTILE_NAMES = {
    "dotdot": b"..", "slash": b"sub/../../escaped.txt", "absolute": b"/tmp/escaped.txt",
    "nul": b"esc\x00aped.txt", "dot": b".", "empty": b"",
}


class Crafted:
    def __init__(self, base: str) -> None:
        self.base = base
        self.root = workspace(base)
        self.store = os.path.join(self.root, ".ckpt")
        h.write_file(os.path.join(self.root, "a.txt"), b"payload\n")
        assert h.ckpt_in(self.root, "init").code == h.OK
        self.first = created(self.root)
        self.blob = hash_bytes(b"payload\n")
        h.write_file(os.path.join(self.root, "a.txt"), b"edited\n")

    def point_record_at(self, tree: ObjectId) -> None:
        with sqlite3.connect(os.path.join(self.store, "catalog.db")) as db:
            db.execute("UPDATE checkpoints SET tree = ? WHERE id = ?", (tree, self.first))
            # with its digest: a crafted tree behind a sound row, not a damaged row
            row = db.execute(f"SELECT {_COLUMNS} FROM checkpoints WHERE id = ?",
                             (self.first,)).fetchone()
            db.execute("UPDATE checkpoints SET digest = ? WHERE id = ?",
                       (row_digest(row), self.first))

    def nothing_written(self, before: dict[bytes, tuple[Any, ...]]) -> None:
        assert h.tree_state(self.root, with_inodes=True) == before
        for leak in ("escaped.txt", "tmp/escaped.txt"):
            assert not os.path.lexists(os.path.join(self.base, leak))
        assert not os.path.lexists("/tmp/escaped.txt")


@pytest.mark.parametrize("where", ["root-tree", "subtree"])
@pytest.mark.parametrize("name", sorted(HOSTILE_NAMES))
def test_crafted_tree_with_an_unsafe_name_is_refused_before_writing(
        base: str, name: str, where: str) -> None:
    scene = Crafted(base)
    bad = put_raw_tree(scene.store, [(HOSTILE_NAMES[name], int(EntryKind.FILE), scene.blob, 8),
                                     (b"z.txt", int(EntryKind.FILE), scene.blob, 8)])
    if where == "subtree":
        tree = put_raw_tree(scene.store, [(b"a.txt", int(EntryKind.FILE), scene.blob, 8),
                                          (b"sub", int(EntryKind.TREE), bad, 16)])
    else:
        tree = bad
    scene.point_record_at(tree)
    before = h.tree_state(scene.root, with_inodes=True)
    run = h.ckpt(scene.root, "restore", scene.first)
    assert run.code == h.CORRUPT and bad.hex() in run.err, run
    scene.nothing_written(before)
    assert h.ckpt_in(scene.root, "show", scene.first).code == h.CORRUPT
    fsck = h.ckpt_in(scene.root, "fsck", "--full")
    assert fsck.code == h.CORRUPT and f"corrupt object {bad.hex()}" in fsck.out, fsck
    h.tally("crafted store", injected=1, passed=1)


@pytest.mark.parametrize("path", [b".ckpt", b".git", b"sub/.git"])
def test_crafted_tree_naming_the_store_or_a_git_directory_is_refused(
        base: str, path: bytes) -> None:
    scene = Crafted(base)
    os.makedirs(os.path.join(scene.root, "sub", ".git"))
    h.write_file(os.path.join(scene.root, ".git", "config"), b"[core]\n")
    leaf = put_raw_tree(scene.store, [(b"config", int(EntryKind.FILE), scene.blob, 8),
                                      (b"config.toml", int(EntryKind.FILE), scene.blob, 8)])
    *parents, name = path.split(b"/")
    tree = put_raw_tree(scene.store, [(name, int(EntryKind.TREE), leaf, 16)])
    for parent in reversed(parents):
        tree = put_raw_tree(scene.store, [(parent, int(EntryKind.TREE), tree, 16)])
    scene.point_record_at(tree)
    before = h.tree_state(scene.root, exclude=(), with_inodes=True)
    config = read(scene.store, "config.toml")
    run = h.ckpt(scene.root, "restore", scene.first, "--no-save")
    assert run.code == h.CORRUPT, run
    after = h.tree_state(scene.root, exclude=(), with_inodes=True)
    changed = sorted(p for p in set(before) | set(after)
                     if before.get(p) != after.get(p) and not p.startswith(b".ckpt/"))
    assert not changed, f"restore touched {changed}"
    assert read(scene.store, "config.toml") == config
    h.tally("crafted store", injected=1, passed=1)


def test_crafted_tree_with_unsorted_or_duplicate_entries_is_refused(base: str) -> None:
    scene = Crafted(base)
    for rows in ([(b"b", 1, scene.blob, 8), (b"a", 1, scene.blob, 8)],
                 [(b"a", 1, scene.blob, 8), (b"a", 1, scene.blob, 8)]):
        data = msgpack.packb((1, rows), use_bin_type=True)
        oid = hash_bytes(data)
        objects = ObjectStore.open(scene.store)
        objects.backend.put(oid, envelope(data))
        objects.close()
        scene.point_record_at(oid)
        before = h.tree_state(scene.root, with_inodes=True)
        run = h.ckpt_in(scene.root, "restore", scene.first)
        assert run.code == h.CORRUPT and oid.hex() in run.err, run
        scene.nothing_written(before)
    h.tally("crafted store", injected=2, passed=2)


# -- names -----------------------------------------------------------------------------------


def test_names_that_collide_after_normalization_stay_distinct(base: str) -> None:
    root = workspace(base)
    names = [unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café"),
             "README", "readme", "ReadMe", "\u212b", "\u00c5", "A\u030a"]
    raw = [n.encode() for n in names] + [b"\xff\xfe-not-utf8", b"tab\tand\nnewline"]
    for index, name in enumerate(raw):
        h.write_file(os.path.join(os.fsencode(root), name), b"%d\n" % index)
        os.makedirs(os.path.join(os.fsencode(root), b"dir-" + name))
        h.write_file(os.path.join(os.fsencode(root), b"dir-" + name, b"inner"), b"in %d\n" % index)
    model = h.tree_state(root)
    assert len(model) == 3 * len(raw)
    assert h.ckpt_in(root, "init").code == h.OK
    first = created(root)
    for name in raw[::2]:
        os.unlink(os.path.join(os.fsencode(root), name))
        shutil.rmtree(os.path.join(os.fsencode(root), b"dir-" + name))
    for name in raw[1::2]:
        h.write_file(os.path.join(os.fsencode(root), name), b"edited\n")
    run = h.ckpt(root, "restore", first)
    assert run.code == h.OK, run
    assert h.tree_state(root) == model
    h.tally("hostile tree", injected=len(raw), passed=len(raw))


def _deep(root: str, depth: int, name_len: int) -> bytes:
    """Nest `depth` directories of `name_len`-byte names (by descriptors: the full path is
    beyond PATH_MAX) and put a file at the bottom; returns the relative path."""
    parts = [(b"%03d" % level) + b"d" * (name_len - 3) for level in range(depth)]
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            os.mkdir(part, dir_fd=fd)
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        leaf = os.open(b"bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(leaf, b"at the bottom\n")
        os.close(leaf)
    finally:
        os.close(fd)
    return b"/".join([*parts, b"bottom.txt"])


def test_long_names_and_paths_beyond_path_max(base: str) -> None:
    root = workspace(base)
    long_name = b"n" * 255
    h.write_file(os.path.join(os.fsencode(root), long_name), b"long name\n")
    deep = _deep(root, depth=24, name_len=200)
    assert len(os.fsencode(root)) + 1 + len(deep) > 4096
    assert h.ckpt_in(root, "init").code == h.OK
    run = h.ckpt(root, "create")
    assert run.code == h.OK, run
    checkpoint = run.out.strip()
    with Checkpoints.open(root) as cp:
        record = cp.get(checkpoint)
        held = h.checkpoint_state(cp, checkpoint)
    assert held[long_name][0] == "f"
    captured = deep in held
    skipped = [s for s in record.skipped if deep.startswith(s.path)]
    # Either the deep file is in the checkpoint, or the path where the scan gave up is
    # recorded as skipped (and named on stderr): never silently missing, never a crash.
    assert captured or skipped, (record.skipped, sorted(held)[:3])
    if skipped:
        assert "not captured" in run.err, run
    os.unlink(os.path.join(os.fsencode(root), long_name))
    run = h.ckpt(root, "restore", checkpoint)
    assert run.code == h.OK, run
    assert os.path.exists(os.path.join(os.fsencode(root), long_name))
    h.tally("hostile tree", injected=2, passed=2,
            **({"deep path captured": 1} if captured else {"deep path reported skipped": 1}))


def test_one_directory_with_very_many_entries(base: str) -> None:
    root = workspace(base)
    wide = os.path.join(root, "wide")
    os.mkdir(wide)
    for index in range(WIDE):
        with open(os.path.join(wide, f"e{index:06}"), "wb") as out:
            out.write(b"%d\n" % (index % 1000))
    assert h.ckpt_in(root, "init").code == h.OK
    run = h.ckpt(root, "create", "--json", timeout=600)
    assert run.code == h.OK, run
    record = run.json()
    assert record["stats"]["files"] == WIDE
    rng = random.Random(h.seed_for("wide"))
    gone = rng.sample(range(WIDE), WIDE // 10)
    for index in gone:
        os.unlink(os.path.join(wide, f"e{index:06}"))
    for index in gone[:100]:
        h.write_file(os.path.join(wide, f"n{index:06}"), b"new\n")
    run = h.ckpt(root, "restore", record["id"], "--json", timeout=600)
    assert run.code == h.OK, run
    report = run.json()
    assert report["written"] == len(gone) and report["deleted"] == 100
    assert sorted(os.listdir(wide)) == [f"e{i:06}" for i in range(WIDE)]
    again = h.ckpt(root, "restore", record["id"], "--json", timeout=600).json()
    assert again["written"] == 0 and again["deleted"] == 0  # a no-op writes nothing
    h.tally("hostile tree", injected=1, passed=1, **{"entries in one dir": WIDE})


# -- permissions -----------------------------------------------------------------------------


def cli_as_nobody(root: str, *args: str) -> tuple[int, str, str]:
    """`ckpt ARGS` (the CLI's own entry code) run by "nobody"; (exit code, stdout, stderr)."""
    # The interpreter and its packages live under /root, which "nobody" cannot enter:
    # everything the command will import must be imported before the fork.
    import encodings.ascii  # noqa: F401  (codec lookups import lazily too)

    import ckpt.checkpoints.snapshot.ignore  # noqa: F401  (lazily imported by snapshots)
    from ckpt.cli.main import run

    def job() -> tuple[int, str, str]:
        with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
            out = io.TextIOWrapper(out_file, encoding="utf-8", errors="surrogateescape")
            err = io.TextIOWrapper(err_file, encoding="utf-8", errors="surrogateescape")
            sys.stdout, sys.stderr = out, err  # the child's own streams (pytest holds fds)
            code = run(["--root", root, *args])
            texts = []
            for stream in (out, err):
                stream.flush()
                stream.seek(0)
                texts.append(stream.read())
        return code, texts[0], texts[1]

    return tuple(run_as_nobody(job))  # type: ignore[return-value]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop privileges")
def test_unreadable_files_are_reported_and_never_lost_by_a_restore() -> None:
    base = tempfile.mkdtemp(prefix="ckpt-fault-perm-")  # reachable by nobody
    try:
        root = os.path.join(base, "ws")
        h.write_file(os.path.join(root, "ok.txt"), b"readable\n")
        h.write_file(os.path.join(root, "secret.txt"), b"only the owner's\n")
        h.write_file(os.path.join(root, "locked", "inner.txt"), b"behind a locked door\n")
        for path in (base, root, *[os.path.join(root, p) for p in
                                   ("ok.txt", "secret.txt", "locked", "locked/inner.txt")]):
            os.chown(path, NOBODY, NOBODY)
        os.chmod(os.path.join(root, "secret.txt"), 0)
        os.chmod(os.path.join(root, "locked"), 0)
        code, _, err = cli_as_nobody(root, "init")
        assert code == h.OK, err
        code, out, err = cli_as_nobody(root, "create")
        assert code == h.OK, err
        first = out.strip()
        assert "secret.txt (unreadable" in err and "locked (unreadable" in err, err
        h.write_file(os.path.join(root, "ok.txt"), b"edited\n")
        os.chown(os.path.join(root, "ok.txt"), NOBODY, NOBODY)
        code, out, err = cli_as_nobody(root, "restore", first)
        assert code == h.OK, err
        assert read(root, "ok.txt") == b"readable\n"
        assert read(root, "secret.txt") == b"only the owner's\n"
        assert read(root, "locked", "inner.txt") == b"behind a locked door\n"
        h.tally("hostile tree", injected=2, passed=2)
    finally:
        shutil.rmtree(base, ignore_errors=True)


# -- files changing while read ---------------------------------------------------------------


@pytest.mark.parametrize("size", [256 << 10, 9 << 20], ids=["small", "streamed"])
def test_file_growing_while_read_is_captured_whole_or_reported(base: str, size: int) -> None:
    root = workspace(base)
    path = os.path.join(root, "growing.log")
    chunk = b"0123456789abcdef" * 64  # 1 KiB records: any consistent state is whole records
    h.write_file(path, chunk * (size // len(chunk)))
    h.write_file(os.path.join(root, "calm.txt"), b"calm\n")
    assert h.ckpt_in(root, "init").code == h.OK
    outcomes = {"captured": 0, "skipped": 0}
    for _ in range(GROWTH_RUNS):
        appender = h.Appender(path, chunk)
        appender.start()
        try:
            time.sleep(0.05)
            run = h.ckpt(root, "create")
        finally:
            appender.stop.set()
            appender.join()
        assert run.code == h.OK, run
        checkpoint = run.out.strip()
        with Checkpoints.open(root) as cp:
            record = cp.get(checkpoint)
            files = {f.path: f for f in cp.files(checkpoint)}
            if b"growing.log" in files:
                content = cp.read_file(checkpoint, "growing.log")
                with open(path, "rb") as stream:
                    now = stream.read()
                assert now.startswith(content) and len(content) % len(chunk) == 0
                assert files[b"growing.log"].size == len(content)
                outcomes["captured"] += 1
            else:
                assert [(s.path, s.reason) for s in record.skipped] == [
                    (b"growing.log", "changed")]
                assert "growing.log (changed)" in run.err
                outcomes["skipped"] += 1
            assert b"calm.txt" in files
    h.fsck_clean(root)
    h.tally("hostile tree: growing file", injected=GROWTH_RUNS, passed=GROWTH_RUNS,
            **{k: v for k, v in outcomes.items() if v})


def test_file_truncated_while_read_is_never_stored_torn(base: str) -> None:
    root = workspace(base)
    path = os.path.join(root, "shrinking.bin")
    rng = random.Random(h.seed_for("shrink"))
    states = [rng.randbytes(2 << 20)]
    h.write_file(path, states[0])
    assert h.ckpt_in(root, "init").code == h.OK
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            with open(path, "r+b") as stream:
                stream.truncate(rng.randrange(1, 2 << 20))
            with open(path, "wb") as stream:
                stream.write(states[0])

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        runs = [h.ckpt(root, "create") for _ in range(GROWTH_RUNS)]
    finally:
        stop.set()
        worker.join()
    with Checkpoints.open(root) as cp:
        for run in runs:
            assert run.code == h.OK, run
            files = {f.path: f for f in cp.files(run.out.strip())}
            if b"shrinking.bin" in files:
                content = cp.read_file(run.out.strip(), "shrinking.bin")
                assert states[0].startswith(content), "a torn mix of two states was stored"
    h.fsck_clean(root)
    h.tally("hostile tree: shrinking file", injected=GROWTH_RUNS, passed=GROWTH_RUNS)


def test_errno_of_a_vanishing_tree_is_not_a_crash(base: str) -> None:
    """Directories deleted and re-created while the scan walks them: exit 0 or a clear
    error, never a traceback."""
    root = workspace(base)
    for index in range(2000):
        h.write_file(os.path.join(root, f"d{index % 50}", f"f{index}"), b"x" * (index % 700))
    assert h.ckpt_in(root, "init").code == h.OK
    stop = threading.Event()
    rng = random.Random(h.seed_for("vanish"))

    def churn() -> None:
        while not stop.is_set():
            victim = os.path.join(root, f"d{rng.randrange(50)}")
            shutil.rmtree(victim, ignore_errors=True)
            for index in range(20):
                try:
                    h.write_file(os.path.join(victim, f"g{index}"), b"again")
                except OSError as exc:
                    assert exc.errno == errno.ENOENT

    worker = threading.Thread(target=churn, daemon=True)
    worker.start()
    try:
        runs = [h.ckpt(root, "create") for _ in range(GROWTH_RUNS)]
    finally:
        stop.set()
        worker.join()
    for run in runs:
        assert run.code == h.OK, run
        assert "Traceback" not in run.err
    h.fsck_clean(root)
    h.tally("hostile tree: vanishing dirs", injected=GROWTH_RUNS, passed=GROWTH_RUNS)
