"""Snapshots through the Python API on real temp directories: what a checkpoint records.

Covers the record and its timeline metadata (after reopening the store), sessions, the
`checkpoint:create` event, ignore rules, odd names and symlinks captured byte-exact, exec bits,
empty directories, and the paths a snapshot skips (special, unreadable, too large) -- plus a
hypothesis property: a snapshot of a random tree, and of a second tree written over it, equals
the filesystem read directly.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nobody import NOBODY, run_as_nobody  # tests/checkpoints is on pytest's `pythonpath`

from ckpt.checkpoints.config import set_config_value
from ckpt.checkpoints.model import CheckpointRecord
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import EntryKind, hash_bytes

# -- the record ------------------------------------------------------------------------------


def test_every_record_field_survives_reopening_the_store(
        ws: Path, work: Any, reopen: Callable[..., Checkpoints]) -> None:
    clock_values = iter([datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC),
                         datetime(2026, 1, 2, 3, 4, 6, 1, tzinfo=UTC)])
    metadata = {
        "model": "m-1", "tokens": 1234, "ratio": 0.5, "ok": True, "nothing": None, "empty": {},
        "nested": {"list": [1, "two", {"three": 3.25}, []], "ünï": "cödé ✓ \u2603"},
    }
    with Checkpoints.init(ws, clock=lambda: next(clock_values)) as service:
        work.write("a.txt", b"alpha")
        work.write("bin/run", b"#!/bin/sh\n", mode=0o755)
        first = service.create(label="first")
        second = service.create(label="before edit ✓", reason="pre-tool", turn_id="turn-7",
                                message_id="msg-42", tool_call_id="call-9",
                                summary="line one\nline two", metadata=metadata)

    loaded = reopen().get(second.id)
    for field in dataclasses.fields(CheckpointRecord):
        assert getattr(loaded, field.name) == getattr(second, field.name), field.name
    assert loaded == second
    assert loaded.to_json() == second.to_json()
    assert (loaded.label, loaded.reason, loaded.turn_id, loaded.message_id, loaded.tool_call_id,
            loaded.summary) == ("before edit ✓", "pre-tool", "turn-7", "msg-42", "call-9",
                                "line one\nline two")
    assert loaded.to_json()["metadata"] == metadata
    assert loaded.metadata["nested"]["list"][2]["three"] == 3.25
    assert (loaded.session, loaded.scope, loaded.parent) == ("default", "tree", first.id)
    assert reopen().get(first.id).parent is None
    assert loaded.created_at == datetime(2026, 1, 2, 3, 4, 6, 1, tzinfo=UTC)
    assert loaded.id.startswith("ckpt-1767323046000-")
    assert loaded.tree == first.tree  # nothing changed between the two
    assert (loaded.stats.files, loaded.stats.bytes, loaded.stats.skipped) == (2, 15, 0)
    assert loaded.stats == second.stats
    assert loaded.to_json()["stats"] == {
        "files": 2, "bytes": 15, "new_objects": second.stats.new_objects,
        "new_bytes": second.stats.new_bytes, "skipped": 0, "duration_ms": second.stats.duration_ms}
    assert loaded.root == os.path.realpath(ws)
    assert reopen().get(second.id[:-3]) == second  # a unique prefix resolves


def test_history_and_latest_filter_by_turn_and_reason(cp: Checkpoints, work: Any) -> None:
    work.write("a.txt")
    pre1 = cp.create(turn_id="t1", reason="pre-tool")
    post1 = cp.create(turn_id="t1", reason="post-tool")
    pre2 = cp.create(turn_id="t2", reason="pre-tool")
    post2 = cp.create(turn_id="t2", reason="post-tool")

    def ids(records: list[CheckpointRecord]) -> list[str]:
        return [r.id for r in records]

    assert ids(cp.history()) == ids(cp.list()) == [pre1.id, post1.id, pre2.id, post2.id]
    assert ids(cp.history(turn_id="t1")) == [pre1.id, post1.id]
    assert ids(cp.history(reason="pre-tool")) == [pre1.id, pre2.id]
    assert ids(cp.history(turn_id="t2", reason="post-tool")) == [post2.id]
    assert cp.history(turn_id="t3") == []
    assert cp.latest() == post2
    assert cp.latest(turn_id="t1") == post1
    assert cp.latest(turn_id="t1", reason="pre-tool") == pre1
    assert cp.latest(reason="pre-tool") == pre2
    assert cp.latest(turn_id="t1", reason="nope") is None


def test_sessions_are_separate_timelines_in_one_store(cp: Checkpoints, work: Any,
                                                      reopen: Callable[..., Checkpoints]) -> None:
    work.write("a.txt")
    alpha, beta = reopen("alpha"), reopen("beta")
    a1 = alpha.create(label="a1")
    b1 = beta.create(label="b1")
    a2 = alpha.create(label="a2")

    assert [r.id for r in alpha.history()] == [a1.id, a2.id]
    assert [r.id for r in beta.history()] == [b1.id]
    assert cp.history() == [] and cp.latest() is None
    assert (a1.parent, a2.parent, b1.parent) == (None, a1.id, None)
    assert alpha.latest() == a2 and beta.latest() == b1
    assert {r.session for r in alpha.history()} == {"alpha"}
    assert [r.id for r in beta.history(all_sessions=True)] == [a1.id, b1.id, a2.id]


def test_create_event_reaches_listeners_and_the_persistent_log(
        cp: Checkpoints, ws: Path, work: Any, reopen: Callable[..., Checkpoints]) -> None:
    work.write("a.txt", b"alpha")
    work.write("b.txt", b"beta")
    os.mkfifo(ws / "pipe")
    created: list[Any] = []
    restored: list[Any] = []
    cp.on("checkpoint:create", created.append)
    cp.on("checkpoint:restore", restored.append)

    record = cp.create(label="L", reason="pre-tool", turn_id="t9")

    assert [event.data["id"] for event in created] == [record.id]
    assert restored == []
    event = created[0]
    assert (event.type, event.session) == ("checkpoint:create", "default")
    for logged in (cp.events(type="checkpoint:create")[-1], reopen().events()[-1]):
        assert logged == event
        data = logged.data
        assert (data["id"], data["label"], data["reason"], data["turn_id"]) == (
            record.id, "L", "pre-tool", "t9")
        assert data["duration_ms"] == record.stats.duration_ms >= 0
        assert logged.at == record.created_at
        assert (data["files"], data["hashed"]) == (2, 2)
        assert data["new_bytes"] == record.stats.new_bytes > 0
        assert data["new_objects"] == record.stats.new_objects
        assert data["skipped"] == ({"path": "pipe", "reason": "special"},)
    assert json.loads(json.dumps(event.to_json()))["skipped"] == [
        {"path": "pipe", "reason": "special"}]


# -- ignore rules ----------------------------------------------------------------------------


def _ignore_layout(work: Any, ws: Path) -> None:
    work.write(".gitignore", b"*.log\nbuild/\n!keep.log\n")
    work.write("app.log")  # ignored by *.log
    work.write("keep.log")  # re-included by the negation
    work.write("build/out.o")  # inside an ignored directory
    work.write("src/build")  # a file: "build/" only matches directories
    work.write("src/.gitignore", b"secret.txt\n!*.log\n")
    work.write("src/debug.log")  # the deeper file's negation wins over the root's *.log
    work.write("src/secret.txt")  # ignored by the nested file
    work.write("other/secret.txt")  # the nested file does not reach here
    work.write(".ckptignore", b"*.tmp\n")
    work.write("x.tmp")
    work.write("deep/y.tmp")
    work.write("nested/.ckptignore", b"/local.txt\n")
    work.write("nested/local.txt")  # anchored to nested/
    work.write("nested/deeper/local.txt")  # not matched by the anchored pattern
    work.write(".git/config", b"[core]\n")
    work.write(".git/objects/ab/cdef", b"object")
    work.write("vendor/lib/.git", b"gitdir: ../../.git/modules/lib\n")  # a submodule's .git file
    work.write("vendor/lib/code.c")
    work.write("ok.txt")


def test_ignore_rules_apply_to_snapshots(cp: Checkpoints, ws: Path, work: Any) -> None:
    _ignore_layout(work, ws)
    record = cp.create()
    assert sorted(f.path for f in cp.files(record.id)) == [
        b".ckptignore", b".gitignore", b"keep.log", b"nested/.ckptignore",
        b"nested/deeper/local.txt", b"ok.txt", b"other/secret.txt", b"src/.gitignore",
        b"src/build", b"src/debug.log", b"vendor/lib/code.c",
    ]


def test_store_and_git_are_excluded_even_with_gitignore_off(
        cp: Checkpoints, ws: Path, work: Any, reopen: Callable[..., Checkpoints]) -> None:
    _ignore_layout(work, ws)
    set_config_value(cp.store_dir, "use_gitignore", "false")
    service = reopen()
    assert service.config.use_gitignore is False
    record = service.create()
    paths = sorted(f.path for f in service.files(record.id))
    assert paths == [
        b".ckptignore", b".gitignore", b"app.log", b"build/out.o", b"keep.log",
        b"nested/.ckptignore", b"nested/deeper/local.txt", b"ok.txt", b"other/secret.txt",
        b"src/.gitignore", b"src/build", b"src/debug.log", b"src/secret.txt", b"vendor/lib/code.c",
    ]
    assert not any(p.startswith(b".ckpt/") or b".git/" in p or p.endswith(b"/.git") for p in paths)


def test_extra_ignore_patterns_from_the_config_apply(
        cp: Checkpoints, work: Any, reopen: Callable[..., Checkpoints]) -> None:
    work.write("a.bak")
    work.write("d/b.bak")
    work.write("d/c.txt")
    set_config_value(cp.store_dir, "extra_ignore", "*.bak")
    service = reopen()
    assert [f.path for f in service.files(service.create().id)] == [b"d/c.txt"]


def test_a_store_outside_the_root_is_not_excluded_by_name(tmp_path: Path, ws: Path,
                                                         work: Any) -> None:
    work.write(".ckpt/not-a-store.txt", b"user data")  # only the real store is excluded
    with Checkpoints.init(ws, store=tmp_path / "elsewhere") as service:
        record = service.create()
        assert [f.path for f in service.files(record.id)] == [b".ckpt/not-a-store.txt"]


# -- names, links, modes, directories --------------------------------------------------------

ODD_NAMES = [
    b"new\nline.txt", b"bad-\xff\xfe.bin", b"-rf", b"--help", b"with space .txt", b" leading",
    b"trailing ", b"tab\there", b"*?[glob]", b"back\\slash", b"#hash", b"!bang",
    unicodedata.normalize("NFC", "café").encode(), unicodedata.normalize("NFD", "café").encode(),
    "snow ☃ 雪".encode(), b"dir with \n newline/inner \xff name",
]


def test_odd_names_are_captured_byte_exact(cp: Checkpoints, ws: Path, work: Any,
                                           manifest: Callable[..., Any]) -> None:
    assert len(set(ODD_NAMES)) == len(ODD_NAMES)  # NFC and NFD spellings really differ
    for index, name in enumerate(ODD_NAMES):
        work.write(name, b"content %d of %r" % (index, name))
    record = cp.create()

    found = manifest(cp, record.id)
    files = {path: data for path, (kind, data) in found.items() if kind == "file"}
    assert files == {name: b"content %d of %r" % (i, name) for i, name in enumerate(ODD_NAMES)}
    for index, name in enumerate(ODD_NAMES):
        assert cp.read_file(record.id, name) == b"content %d of %r" % (index, name)
        assert cp.read_file(record.id, os.fsdecode(name)) == files[name]


def test_symlinks_are_captured_as_links_and_never_followed(
        cp: Checkpoints, ws: Path, tmp_path: Path, work: Any, manifest: Callable[..., Any]) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"outside secret, never to be stored")
    work.write("target/file.txt", b"inside")
    links = {
        b"relative": b"target/file.txt",
        b"up-and-out": b"../outside/secret.txt",
        b"absolute": os.fsencode(outside / "secret.txt"),
        b"dangling": b"does/not/exist",
        b"to-dir": b"target",
        b"to-outside-dir": os.fsencode(outside),
        b"loop": b"loop",
        b"odd target": b"\xff\n with space/../..",
        b"sub/parent": b"..",
    }
    for name, target in links.items():
        work.symlink(name, target)
    record = cp.create()

    found = manifest(cp, record.id)
    assert {p: e for p, e in found.items() if e[0] == "link"} == {
        name: ("link", target) for name, target in links.items()}
    assert set(found) == set(links) | {b"target", b"target/file.txt", b"sub"}
    assert not cp.objects.has(hash_bytes(b"outside secret, never to be stored"))
    listed = {(f.path, f.kind, f.target) for f in cp.files(record.id)
              if f.kind is EntryKind.SYMLINK}
    assert listed == {(name, EntryKind.SYMLINK, target) for name, target in links.items()}
    assert cp.read_file(record.id, "odd target") == b"\xff\n with space/../.."


def test_exec_bit_is_kept(cp: Checkpoints, work: Any) -> None:
    work.write("run.sh", b"#!/bin/sh\n", mode=0o755)
    work.write("owner-only", b"x", mode=0o700)
    work.write("plain.txt", b"x", mode=0o644)
    work.write("group-exec", b"x", mode=0o654)  # only the owner's bit counts, as in git
    kinds = {f.path: f.kind for f in cp.files(cp.create().id)}
    assert kinds == {b"run.sh": EntryKind.EXECUTABLE, b"owner-only": EntryKind.EXECUTABLE,
                     b"plain.txt": EntryKind.FILE, b"group-exec": EntryKind.FILE}


def test_empty_directories_are_kept(cp: Checkpoints, work: Any,
                                    manifest: Callable[..., Any]) -> None:
    work.mkdir("empty")
    work.mkdir("outer/inner/leaf")
    work.write("full/a.txt")
    record = cp.create()
    assert manifest(cp, record.id) == {
        b"empty": ("dir", None), b"outer": ("dir", None), b"outer/inner": ("dir", None),
        b"outer/inner/leaf": ("dir", None), b"full": ("dir", None), b"full/a.txt": ("file", b"x"),
    }
    assert record.stats.files == 1


# -- what a snapshot skips -------------------------------------------------------------------


def test_special_files_are_skipped_and_listed_in_the_record(
        cp: Checkpoints, ws: Path, work: Any, monkeypatch: pytest.MonkeyPatch,
        reopen: Callable[..., Checkpoints], manifest: Callable[..., Any]) -> None:
    work.write("regular.txt")
    os.mkfifo(ws / "fifo")  # opening it for reading would block: the scan must not
    work.mkdir("sub")
    monkeypatch.chdir(ws / "sub")  # AF_UNIX paths are limited to ~108 bytes: bind relatively
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        server.bind("sock")
        expected = [(b"fifo", "special"), (b"sub/sock", "special")]
        try:
            os.mknod(ws / "null", stat.S_IFCHR | 0o600, os.makedev(1, 3))
            expected.insert(1, (b"null", "special"))
        except PermissionError:
            pass  # no CAP_MKNOD here: fifo and socket still cover "special"
        record = cp.create()
    finally:
        server.close()

    assert [(s.path, s.reason) for s in record.skipped] == expected
    assert record.stats.skipped == len(expected)
    assert reopen().get(record.id).skipped == record.skipped
    assert manifest(cp, record.id) == {b"regular.txt": ("file", b"x"), b"sub": ("dir", None)}
    assert [dict(s) for s in cp.events()[-1].data["skipped"]] == [
        {"path": os.fsdecode(p), "reason": r} for p, r in expected]


def test_files_over_max_file_size_are_skipped_and_listed(
        cp: Checkpoints, work: Any, reopen: Callable[..., Checkpoints]) -> None:
    set_config_value(cp.store_dir, "max_file_size", "100")
    service = reopen()
    work.write("at-limit", b"a" * 100)
    work.write("over", b"b" * 101)
    work.write("deep/huge", b"c" * 5000)
    record = service.create()

    assert [(s.path, s.reason) for s in record.skipped] == [(b"deep/huge", "too-large"),
                                                           (b"over", "too-large")]
    assert (record.stats.skipped, record.stats.files, record.stats.bytes) == (2, 1, 100)
    assert [f.path for f in service.files(record.id)] == [b"at-limit"]
    assert not service.objects.has(hash_bytes(b"c" * 5000))

    work.write("at-limit", b"a" * 101)  # grows past the limit: skipped from now on
    later = service.create()
    assert [s.path for s in later.skipped] == [b"at-limit", b"deep/huge", b"over"]
    assert later.stats.files == 0


def test_unreadable_files_and_directories_are_skipped_and_listed(tmp_path: Path) -> None:
    as_root = os.geteuid() == 0
    # As root the snapshot runs as "nobody": the workspace must be reachable for it, and
    # pytest's tmp_path lies under a root-only directory.
    base = Path(tempfile.mkdtemp(prefix="ckpt-unreadable-")) if as_root else tmp_path
    try:
        ws = base / "ws"
        ws.mkdir()
        (ws / "ok.txt").write_bytes(b"readable")
        (ws / "secret.txt").write_bytes(b"no one may read this")
        (ws / "locked").mkdir()
        (ws / "locked" / "inner.txt").write_bytes(b"behind a locked door")
        os.chmod(ws / "secret.txt", 0)
        os.chmod(ws / "locked", 0)

        def snapshot() -> tuple[str, int]:
            with Checkpoints.init(ws) as service:
                return service.create().id, os.geteuid()

        if as_root:
            os.chown(base, NOBODY, NOBODY)
            os.chown(ws, NOBODY, NOBODY)  # the child creates the store inside
            record_id, euid = run_as_nobody(snapshot)
            assert euid == NOBODY
        else:
            record_id, _ = snapshot()

        with Checkpoints.open(ws) as service:
            record = service.get(record_id)
            assert [(s.path, s.reason.split(":")[0]) for s in record.skipped] == [
                (b"locked", "unreadable"), (b"secret.txt", "unreadable")]
            assert record.stats.skipped == 2
            assert [f.path for f in service.files(record_id)] == [b"ok.txt"]
            assert not service.objects.has(hash_bytes(b"no one may read this"))
            assert not service.objects.has(hash_bytes(b"behind a locked door"))
    finally:
        for path, mode in ((base / "ws" / "locked", 0o755), (base / "ws" / "secret.txt", 0o644)):
            if path.exists():
                os.chmod(path, mode)
        if as_root:
            shutil.rmtree(base, ignore_errors=True)


# -- property: a snapshot is the filesystem --------------------------------------------------

_NAME_POOL = [b"a", b"b", b"-x", b"new\nline", b"\xff\xfe", b"sp ace",
              unicodedata.normalize("NFC", "é").encode(),
              unicodedata.normalize("NFD", "é").encode()]
_RESERVED = {b".", b"..", b".git", b".ckpt", b".gitignore", b".ckptignore"}
_names = st.one_of(
    st.sampled_from(_NAME_POOL),
    st.binary(min_size=1, max_size=5).filter(lambda n: b"/" not in n and b"\0" not in n
                                             and n not in _RESERVED),
)
_leaf = st.one_of(
    st.tuples(st.just("file"), st.binary(max_size=12), st.booleans()),
    st.tuples(st.just("link"), st.binary(min_size=1, max_size=12).filter(lambda t: b"\0" not in t)),
    st.just({}),  # an empty directory
)
_node = st.recursive(_leaf, lambda inner: st.dictionaries(_names, inner, max_size=4),
                     max_leaves=10)
_trees = st.dictionaries(_names, _node, max_size=6)


def _materialize(base: bytes, spec: dict[bytes, Any]) -> None:
    for name, node in spec.items():
        path = os.path.join(base, name)
        if isinstance(node, dict):
            os.mkdir(path)
            _materialize(path, node)
        elif node[0] == "link":
            os.symlink(node[1], path)
        else:
            _, data, executable = node
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755 if executable else 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
            os.chmod(path, 0o755 if executable else 0o644)


def _wipe(root: bytes) -> None:
    for name in os.listdir(root):
        if name == b".ckpt":
            continue
        path = os.path.join(root, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=_trees, second=_trees)
def test_snapshot_of_a_random_tree_equals_the_filesystem(
        first: dict[bytes, Any], second: dict[bytes, Any],
        manifest: Callable[..., Any], fs_snapshot: Callable[..., Any],
        cold_scan: Callable[..., Any]) -> None:
    shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
    base = tempfile.mkdtemp(prefix="ckpt-prop-", dir=shm)
    try:
        root = os.fsencode(base) + b"/ws"
        os.mkdir(root)
        _materialize(root, first)
        with Checkpoints.init(os.fsdecode(root)) as service:
            one = service.create()
            assert manifest(service, one.id) == fs_snapshot(root)
            # The second tree replaces the first at once: same paths, sizes, maybe recycled
            # inodes, within the same timestamp tick -- the stat cache must not be fooled.
            _wipe(root)
            _materialize(root, second)
            two = service.create()
            assert manifest(service, two.id) == fs_snapshot(root)
        # What the stat cache produced is what a scan without any cache produces.
        assert cold_scan(os.fsdecode(root), base) == two.tree
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_snapshot_imports_neither_restoring_nor_maintenance(tmp_path: Path) -> None:
    """A `ckpt create` is one process start: the modules only a restore, a recovery or
    maintenance needs are not loaded for it (nor is a killed restore's absence costly)."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_text("a\n")
    code = ("import sys\nfrom ckpt.checkpoints.service import Checkpoints\n"
            "with Checkpoints.init(sys.argv[1]) as cp:\n    cp.create()\n    cp.create()\n"
            "print(sorted(m for m in sys.modules if m in ('ckpt.checkpoints.restore.restorer', "
            "'ckpt.checkpoints.maintenance', 'ckpt.checkpoints.restore.apply')))\n")
    done = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_snapshot_and_restore_leave_the_cyclic_collector_running(
        cp: Checkpoints, ws: Path) -> None:
    """The library changes no process-global state: a harness's collector keeps collecting
    during its calls (a library that paused it and switched it back would pass a before/after
    check, not this one)."""
    import gc

    for i in range(3000):
        (ws / f"d{i % 30}").mkdir(exist_ok=True)
        (ws / f"d{i % 30}" / f"f{i}.txt").write_text(f"{i}\n")
    collections: list[bool] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(gc.isenabled())

    gc.callbacks.append(seen)
    try:
        first = cp.create()
        shutil.rmtree(ws / "d0")
        cp.restore(first.id)
        cp.settle()
    finally:
        gc.callbacks.remove(seen)
    assert collections and all(collections)
    assert gc.isenabled()
