"""A workspace is known by an identity of its own (checkpoints/identity.py), not by its path.

Through the Python API: a moved workspace keeps its history and its stat cache, in its own
store and in a shared one; a copy in a shared store starts a history of its own; a store of
an older ckpt is migrated on open; the store marks itself ignored by git; a store outside the
workspace is found again without naming it; layouts that would capture the store are refused;
a checkpoint of another root is not restored over this one unless asked.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ckpt.checkpoints import ForeignCheckpoint, RestoreOptions, WorkspaceRefused
from ckpt.checkpoints.identity import (
    BINDING_FILE,
    GITIGNORE,
    IDENTITY_FILE,
    is_store_dir,
    legacy_key,
    locate_store,
)
from ckpt.checkpoints.service import Checkpoints

PAST = 1_600_000_000  # outside the stat cache's racy window


def _workspace(path: Path, files: int = 12) -> str:
    (path / "src").mkdir(parents=True)
    for i in range(files):
        item = path / "src" / f"f{i}.py"
        item.write_text(f"print({i})\n" * (i + 1))
        os.utime(item, (PAST, PAST))
    os.utime(path / "src", (PAST, PAST))
    return str(path.resolve())


def test_moved_workspace_keeps_history_and_stat_cache(tmp_path: Path) -> None:
    w1 = _workspace(tmp_path / "w1")
    with Checkpoints.init(w1) as cp:
        first = cp.create(label="one")
        second = cp.create(label="two")
        identity = cp.workspace_id
    w2 = str(tmp_path / "w2")
    os.rename(w1, w2)
    with Checkpoints.open(w2) as cp:
        assert cp.moved_from == w1 and cp.workspace_id == identity
        assert [r.id for r in cp.history()] == [first.id, second.id]
        latest = cp.latest()
        assert latest is not None and latest.id == second.id
        assert cp.stats().checkpoints == 2
        third = cp.create()
        assert third.stats.hashed == 0, "the stat cache followed the workspace"
        assert third.parent == second.id and third.tree == second.tree
        moved = cp.events(type="workspace:moved")
        assert [(e.data["from"], e.data["to"], e.data["checkpoints"]) for e in moved] == [
            (w1, w2, 2)]
    with Checkpoints.open(w2) as cp:  # bound now: no second re-bind
        assert cp.moved_from is None and len(cp.events(type="workspace:moved")) == 1


def test_moved_workspace_keeps_history_in_a_shared_store(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    w1 = _workspace(tmp_path / "w1")
    with Checkpoints.init(w1, store) as cp:
        first = cp.create()
    assert os.path.isdir(os.path.join(w1, ".ckpt")) and not is_store_dir(os.path.join(w1, ".ckpt"))
    assert locate_store(w1) == os.path.realpath(store)
    w2 = str(tmp_path / "w2")
    os.rename(w1, w2)
    with Checkpoints.open(w2) as cp:  # no store named: the link in .ckpt finds it
        assert cp.store_dir == os.path.realpath(store) and cp.moved_from == w1
        assert [r.id for r in cp.history()] == [first.id]
        assert cp.create().stats.hashed == 0


def test_copy_in_a_shared_store_starts_its_own_history(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    w1 = _workspace(tmp_path / "w1")
    with Checkpoints.init(w1, store) as cp:
        first = cp.create()
        identity = cp.workspace_id
    w2 = str(tmp_path / "w2")
    shutil.copytree(w1, w2, symlinks=True)
    with Checkpoints.open(w2) as cp:
        assert cp.copied_from == w1 and cp.workspace_id != identity
        assert cp.history() == []
        own = cp.create()
    with Checkpoints.open(w1) as cp:  # the original keeps its timeline, and only it
        assert cp.moved_from is None and cp.workspace_id == identity
        assert [r.id for r in cp.history()] == [first.id]
    with Checkpoints.open(w2) as cp:
        assert [r.id for r in cp.history()] == [own.id]


def test_store_of_an_older_ckpt_is_migrated_on_open(tmp_path: Path) -> None:
    root = _workspace(tmp_path / "w")
    with Checkpoints.init(root) as cp:
        record = cp.create()
        identity = cp.workspace_id
    store = os.path.join(root, ".ckpt")
    assert identity is not None
    # What an older ckpt left: no identity, no .gitignore, roots/ keyed by the path's hash.
    os.unlink(os.path.join(store, IDENTITY_FILE))
    os.unlink(os.path.join(store, GITIGNORE))
    os.unlink(os.path.join(store, "roots", identity, BINDING_FILE))
    os.rename(os.path.join(store, "roots", identity), os.path.join(store, "roots", legacy_key(root)))
    with Checkpoints.open(root) as cp:
        assert cp.workspace_id is not None and cp.moved_from is None
        assert [r.id for r in cp.history()] == [record.id]
        assert cp.create().stats.hashed == 0, "the old per-root directory was adopted"
        new_id = cp.workspace_id
    assert sorted(os.listdir(os.path.join(store, "roots"))) == [new_id]
    assert os.path.isfile(os.path.join(store, GITIGNORE))


def test_store_is_marked_ignored_by_git(tmp_path: Path) -> None:
    root = _workspace(tmp_path / "w")
    Checkpoints.init(root).close()
    with open(os.path.join(root, ".ckpt", GITIGNORE), "rb") as stream:
        assert stream.read().splitlines()[-1] == b"*"


def test_store_outside_is_found_again_without_naming_it(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(data))
    root = _workspace(tmp_path / "w")
    with Checkpoints.init(root, store_outside=True) as cp:
        record = cp.create()
        store = cp.store_dir
        assert store == os.path.join(os.path.realpath(data), "ckpt", "stores", cp.workspace_id)
    assert is_store_dir(store) and not is_store_dir(os.path.join(root, ".ckpt"))
    with Checkpoints.init(root, store_outside=True) as cp:  # idempotent
        assert cp.store_dir == store
    with Checkpoints.open(root) as cp:
        assert cp.store_dir == store and [r.id for r in cp.history()] == [record.id]
        assert all(not p.startswith(b".ckpt") for p in (e.path for e in cp.files(record.id)))


def test_refuses_layouts_that_capture_the_store(tmp_path: Path) -> None:
    root = _workspace(tmp_path / "w")
    Checkpoints.init(root).close()
    store = os.path.join(root, ".ckpt")
    with pytest.raises(WorkspaceRefused, match="file system root"):
        Checkpoints.open("/")
    with pytest.raises(WorkspaceRefused, match="the store is the root"):
        Checkpoints.init(root, store=root)
    with pytest.raises(WorkspaceRefused, match="inside the store"):
        Checkpoints.init(os.path.join(store, "objects"), store=store)
    with pytest.raises(WorkspaceRefused, match="inside the ckpt store"):
        Checkpoints.init(os.path.join(store, "roots"))


def test_store_reached_through_a_symlink_is_never_captured(tmp_path: Path) -> None:
    root = _workspace(tmp_path / "w")
    os.symlink(os.path.join(root, "data"), tmp_path / "via")
    os.mkdir(os.path.join(root, "data"))
    with Checkpoints.init(root, store=str(tmp_path / "via" / "store")) as cp:
        assert cp.store_dir == os.path.join(root, "data", "store")
        record = cp.create()
        paths = {os.fsdecode(e.path) for e in cp.files(record.id)}
    assert not any(p.startswith("data/store") for p in paths), paths
    # .ckpt itself a symlink to a store inside the root: neither the link nor the store
    other = _workspace(tmp_path / "w2")
    os.mkdir(os.path.join(other, "hidden"))
    Checkpoints.init(other, store=os.path.join(other, "hidden", "st")).close()
    shutil.rmtree(os.path.join(other, ".ckpt"))  # the link directory init wrote
    os.symlink("hidden/st", os.path.join(other, ".ckpt"))
    with Checkpoints.open(other) as cp:
        assert cp.store_dir == os.path.join(other, "hidden", "st")
        record = cp.create()
        paths = {os.fsdecode(e.path) for e in cp.files(record.id)}
    assert not any(p.startswith((".ckpt", "hidden/st")) for p in paths), paths


def test_checkpoint_of_another_root_is_not_restored_unless_asked(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    a = _workspace(tmp_path / "a", files=3)
    b = _workspace(tmp_path / "b", files=5)
    with Checkpoints.init(a, store) as cp:
        of_a = cp.create()
        later_a = cp.create(label="later")
    with Checkpoints.init(b, store) as cp:
        cp.create()
        with pytest.raises(ForeignCheckpoint, match="another workspace root"):
            cp.restore(of_a.id)
        assert len(os.listdir(os.path.join(b, "src"))) == 5, "nothing was touched"
        report = cp.restore(of_a.id, RestoreOptions(from_other_root=True, discard_later=True))
        assert report.discarded == ()
        assert sorted(os.listdir(os.path.join(b, "src"))) == ["f0.py", "f1.py", "f2.py"]
    with Checkpoints.open(a, store) as cp:  # a's timeline is untouched
        assert [r.id for r in cp.history()] == [of_a.id, later_a.id]
