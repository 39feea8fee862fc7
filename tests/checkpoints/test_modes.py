"""File modes (issue 28.9): a snapshot records a file's nine rwx bits, a restore gives them back
exactly and never makes a file readable by anyone its recorded mode excludes, even for a
moment; trees of default modes (0644, 0755) keep the encoding and ids they always had.

Real workspaces and stores through `Checkpoints`; the umask is pinned per test (it is
process-wide) and put back.
"""

from __future__ import annotations

import os
import stat as statmod
import tempfile
from collections.abc import Iterator
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt.checkpoints.restore import staging
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import EntryKind, Tree, TreeEntry, hash_bytes
from ckpt.objstore.codec import encode_tree
from ckpt.objstore.objects import entry_mode

OID = hash_bytes(b"content")


def perms(path: str) -> int:
    return statmod.S_IMODE(os.lstat(path).st_mode)


def write(root: str, rel: str, data: bytes, mode: int) -> str:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write(data)
    os.chmod(path, mode)
    return path


def delete_and_restore(service: Checkpoints, *paths: str, umask: int = 0o022) -> None:
    """Checkpoint, delete `paths`, restore the checkpoint under `umask`."""
    record = service.create()
    for path in paths:
        os.unlink(path)
    old = os.umask(umask)
    try:
        service.restore(record.id)
    finally:
        os.umask(old)


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


@pytest.fixture
def root(ws: Path, umask_022: None) -> str:
    return os.path.realpath(ws)


@pytest.fixture
def service(cp: Checkpoints) -> Checkpoints:
    return cp  # on `ws` (tests/checkpoints/conftest.py)


def test_a_private_file_restores_private(root: str, service: Checkpoints) -> None:
    secret = write(root, "secret.env", b"TOKEN=1\n", 0o600)
    delete_and_restore(service, secret)
    assert perms(secret) == 0o600


def test_a_mode_only_change_is_seen_by_the_next_snapshot_and_undone_by_a_chmod(
        root: str, service: Checkpoints) -> None:
    path = write(root, "notes.txt", b"notes\n", 0o640)
    before = service.create()
    inode = os.stat(path).st_ino
    os.chmod(path, 0o644)
    after = service.create()
    assert after.tree != before.tree
    assert [(c.path, c.change) for c in service.diff(before.id, after.id)] == [(b"notes.txt", "M")]
    report = service.restore(before.id)
    assert perms(path) == 0o640
    assert os.stat(path).st_ino == inode  # a chmod, not a rewrite
    assert [c.entry.perms for c in report.plan.chmods] == [0o640] and report.plan.writes == ()


def test_trees_of_default_modes_encode_as_before_modes_were_recorded() -> None:
    """Old stores read as before and keep their ids: a 0644 file or a 0755 executable has no
    mode field; any other mode adds one."""
    tree = Tree.build([TreeEntry(b"a", EntryKind.FILE, OID, None, 3),
                       TreeEntry(b"b", EntryKind.EXECUTABLE, OID, None, 4)])
    assert encode_tree(tree) == msgpack.packb(
        (1, [(b"a", 1, OID, 3), (b"b", 2, OID, 4)]), use_bin_type=True)
    assert entry_mode(EntryKind.FILE, 0o100644) is None
    assert entry_mode(EntryKind.EXECUTABLE, 0o100755) is None
    private = Tree.build([TreeEntry(b"a", EntryKind.FILE, OID, None, 3, 0o600)])
    assert encode_tree(private) == msgpack.packb(
        (1, [(b"a", 1, OID, 3, 0o600)]), use_bin_type=True)


def test_a_workspace_of_default_modes_keeps_its_tree_id(root: str, service: Checkpoints) -> None:
    write(root, "a.txt", b"a\n", 0o644)
    write(root, "run.sh", b"#!/bin/sh\n", 0o755)
    record = service.create()
    expected = Tree.build([TreeEntry(b"a.txt", EntryKind.FILE, hash_bytes(b"a\n"), None, 2),
                           TreeEntry(b"run.sh", EntryKind.EXECUTABLE, hash_bytes(b"#!/bin/sh\n"),
                                     None, 10)])
    assert record.tree == hash_bytes(encode_tree(expected))


def test_set_id_and_sticky_bits_are_never_recorded_nor_restored(
        root: str, service: Checkpoints) -> None:
    path = write(root, "tool", b"#!/bin/sh\n", 0o755)
    os.chmod(path, 0o4755 | statmod.S_ISGID)
    if perms(path) & 0o6000 == 0:
        pytest.skip("this file system keeps no set-id bits")
    delete_and_restore(service, path)
    assert perms(path) == 0o755


def test_an_explicit_mode_is_exact_whatever_the_umask_and_a_default_one_is_narrowed(
        root: str, service: Checkpoints) -> None:
    """A recorded mode is given back exactly; a file of its kind's default mode (which is how
    every file of a tree made before modes were recorded reads) gets it less the umask, as a
    restore always did: never wider than the umask allows."""
    shared = write(root, "shared.txt", b"s\n", 0o664)
    plain = write(root, "plain.txt", b"p\n", 0o644)
    delete_and_restore(service, shared, plain, umask=0o077)
    assert (perms(shared), perms(plain)) == (0o664, 0o600)


def test_a_staged_file_is_never_more_open_than_its_recorded_mode(
        root: str, service: Checkpoints, monkeypatch: pytest.MonkeyPatch) -> None:
    """While its content is written, a staged file already has its recorded mode or less."""
    modes = {"a": 0o600, "b": 0o640, "c": 0o400, "d": 0o755, "e": 0o644, "f": 0o711}
    for name, mode in modes.items():
        write(root, name, name.encode() * 100, mode)
    record = service.create()
    for name in modes:
        os.unlink(os.path.join(root, name))
    seen: list[int] = []
    create_new = staging.create_new

    def watching(dir_fd: int, name: bytes, mode: int) -> int:
        fd = create_new(dir_fd, name, mode)
        seen.append(statmod.S_IMODE(os.fstat(fd).st_mode))  # before any content is written
        return fd

    # The Python writer, whose descriptor can be watched; the native one opens with the same
    # mode (`write_files` in _fsops.c), so the kernel narrows it alike.
    monkeypatch.setattr(staging, "_native_write_files", None)
    monkeypatch.setattr(staging, "create_new", watching)
    service.restore(record.id)
    assert sorted(seen) == sorted(modes.values())  # with umask 022 all are created exactly so
    assert all(not mode & 0o077 for mode in seen if mode in (0o600, 0o400))
    assert {name: perms(os.path.join(root, name)) for name in modes} == modes


# Owner-readable modes (a snapshot by an unprivileged user cannot read the others), with any
# owner x (the kind) and any group and other bits.
modes = st.integers(0, 0o377).map(lambda bits: bits | 0o400)
names = st.sampled_from(["a", "b", "c", "d/e", "d/f", "g/h/i"])
actions = st.sampled_from(["keep", "chmod", "delete", "rewrite"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(files=st.dictionaries(names, st.tuples(modes, actions, modes), min_size=1, max_size=6))
def test_random_modes_survive_snapshot_change_and_restore(
        files: dict[str, tuple[int, str, int]]) -> None:
    old = os.umask(0o022)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = os.path.realpath(tmp)
            with Checkpoints.init(root) as cp:
                for rel, (mode, _action, _other) in files.items():
                    write(root, rel, rel.encode(), mode)
                record = cp.create()
                for rel, (_mode, action, other) in files.items():
                    path = os.path.join(root, rel)
                    if action == "chmod":
                        os.chmod(path, other)
                    elif action == "delete":
                        os.unlink(path)
                    elif action == "rewrite":
                        write(root, rel, b"new " + rel.encode(), other)
                cp.restore(record.id)
                got = {rel: (perms(os.path.join(root, rel)), Path(root, rel).read_bytes())
                       for rel in files}
                assert got == {rel: (mode, rel.encode()) for rel, (mode, _a, _o) in files.items()}
                again = cp.create()
                assert again.tree == record.tree
    finally:
        os.umask(old)
