"""Restore end to end through `Checkpoints`, on real temp directories (docs/DESIGN.md "Restore rules").

Seed CheckpointService flow (tracked scope), undo via the pre-restore checkpoint, later
checkpoints kept or discarded, symlinks never written through, ignored and skipped paths never
deleted, `paths=` subsets, type swaps in every direction, chmod-only changes, minimal IO.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import restore_helpers as h  # tests/ dirs are on pytest's `pythonpath`

from ckpt.checkpoints import RestoreOptions
from ckpt.checkpoints.config import read_config, write_config
from ckpt.checkpoints.errors import RestoreIncomplete
from ckpt.checkpoints.service import Checkpoints
from ckpt.checkpoints.snapshot.statcache import RACY_WINDOW_NS
from ckpt.objstore import EntryKind, InvalidTree, Tree, TreeEntry


@pytest.fixture
def root(tmp_path: Path) -> str:
    path = os.path.realpath(tmp_path / "ws")
    os.mkdir(path)
    return path


@pytest.fixture
def outside(tmp_path: Path) -> str:
    path = os.path.realpath(tmp_path / "outside")
    os.mkdir(path)
    return path


@pytest.fixture
def service(root: str) -> Iterator[Checkpoints]:
    with Checkpoints.init(root) as cp:
        yield cp


def reopen(cp: Checkpoints, **config: object) -> Checkpoints:
    write_config(cp.store_dir, dataclasses.replace(read_config(cp.store_dir), **config))
    cp.close()
    return Checkpoints.open(cp.root)


def at(root: str, *parts: str) -> str:
    return os.path.join(root, *parts)


def read(root: str, rel: str) -> bytes:
    with open(at(root, rel), "rb") as stream:
        return stream.read()


# -- the seed CheckpointService flow (tracked scope) ------------------------------------


def test_tracked_restore_reverts_edits_removes_created_paths_recreates_deleted_dir(
        root: str, service: Checkpoints) -> None:
    h.write_file(root, "src/app.py", b"print('v1')\n")
    h.write_file(root, "src/lib/util.py", b"def util(): pass\n")
    h.write_file(root, "docs/guide.md", b"# Guide\n")
    h.write_file(root, "docs/img/logo.txt", b"logo\n")
    h.write_file(root, "notes.txt", b"untracked notes\n")
    service.track(at(root, "src/app.py"), at(root, "docs"), at(root, "gen/out/report.txt"))
    record = service.create(label="turn 1")
    assert record.scope == "paths"
    assert record.absent_parents == (b"gen", b"gen/out")

    h.write_file(root, "src/app.py", b"print('v2, broken')\n")
    h.write_file(root, "gen/out/report.txt", b"generated\n")  # the tracked missing file + parents
    h.write_file(root, "src/new_module.py", b"untracked sibling\n")
    h.write_file(root, "scratch/tmp.txt", b"untracked elsewhere\n")
    h.write_file(root, "src/lib/util.py", b"untracked edit\n")
    h.write_file(root, "notes.txt", b"untracked notes, edited\n")
    shutil.rmtree(at(root, "docs"))
    untracked_before = {p: v for p, v in h.tree_state(root).items()
                        if p.startswith(("scratch", "notes", "src/new", "src/lib"))}

    report = service.restore(record.id)

    state = h.tree_state(root)
    assert read(root, "src/app.py") == b"print('v1')\n"
    assert read(root, "docs/guide.md") == b"# Guide\n"
    assert read(root, "docs/img/logo.txt") == b"logo\n"
    assert not any(p == "gen" or p.startswith("gen/") for p in state)  # file and new parents gone
    assert {p: v for p, v in state.items() if p in untracked_before} == untracked_before
    assert set(untracked_before) <= set(state)
    assert (report.written, report.deleted, report.dirs_created, report.dirs_removed) == (3, 1, 2, 2)


def test_tracked_restore_keeps_a_new_parent_that_holds_untracked_files(root: str, service: Checkpoints) -> None:
    h.write_file(root, "a.txt", b"a")
    service.track(at(root, "a.txt"), at(root, "gen/out/report.txt"))
    record = service.create()
    h.write_file(root, "gen/out/report.txt", b"generated")
    h.write_file(root, "gen/mine.txt", b"the user's own file")
    service.restore(record.id)
    state = h.tree_state(root)
    assert "gen/out" not in state and "gen/out/report.txt" not in state
    assert state["gen/mine.txt"] == ("file", b"the user's own file", False)


def test_tracked_restore_of_still_missing_file_is_a_no_op(root: str, service: Checkpoints) -> None:
    service.track(at(root, "later/file.txt"))
    record = service.create()
    report = service.restore(record.id)
    assert (report.written, report.deleted, report.dirs_removed) == (0, 0, 0)
    assert h.tree_state(root) == {}


# -- undo and history ---------------------------------------------------------------------


def make_history(root: str, cp: Checkpoints) -> list[str]:
    h.write_file(root, "a.txt", b"v1")
    h.write_file(root, "dir/b.txt", b"b1")
    first = cp.create(label="one").id
    h.write_file(root, "a.txt", b"v2")
    second = cp.create(label="two").id
    h.write_file(root, "c.txt", b"c3")
    third = cp.create(label="three").id
    return [first, second, third]


def test_restore_is_undone_by_restoring_its_pre_restore_checkpoint(root: str, outside: str,
                                                                   service: Checkpoints) -> None:
    first, _, _ = make_history(root, service)
    h.write_file(root, "a.txt", b"uncommitted edit")
    h.write_file(root, "run.sh", b"#!/bin/sh\n", executable=True)
    os.symlink("a.txt", at(root, "link"))
    shutil.rmtree(at(root, "dir"))
    h.write_file(root, "dir", b"dir became a file")
    before = h.tree_state(root)

    report = service.restore(first)
    assert h.tree_state(root) != before
    pre = service.get(report.pre_restore)
    assert pre.reason == "pre-restore" and first in (pre.label or "")

    undo = service.restore(pre.id)
    assert h.tree_state(root) == before
    assert undo.pre_restore is not None


def test_restore_with_save_false_takes_no_pre_restore_checkpoint(root: str, service: Checkpoints) -> None:
    first, _, _ = make_history(root, service)
    count = len(service.history())
    report = service.restore(first, RestoreOptions(save=False))
    assert report.pre_restore is None
    assert len(service.history()) == count
    assert service.history(reason="pre-restore") == []


def test_discard_later_drops_later_checkpoints_but_keeps_the_pre_restore_one(root: str, service: Checkpoints) -> None:
    first, second, third = make_history(root, service)
    report = service.restore(first, RestoreOptions(discard_later=True))
    assert report.discarded == (second, third)
    assert [r.id for r in service.history()] == [first, report.pre_restore]
    prune = service.events(type="checkpoint:prune")[-1]
    assert list(prune.data["removed"]) == [second, third]
    assert list(service.events(type="checkpoint:restore")[-1].data["discarded"]) == [second, third]


def test_later_checkpoints_are_kept_by_default_so_redo_works(root: str, service: Checkpoints) -> None:
    first, second, third = make_history(root, service)
    at_third = h.tree_state(root)
    report = service.restore(first)
    assert report.discarded == ()
    assert [r.id for r in service.history()] == [first, second, third, report.pre_restore]
    assert read(root, "a.txt") == b"v1" and not os.path.exists(at(root, "c.txt"))
    service.restore(third)
    assert h.tree_state(root) == at_third


def test_restore_records_an_event_with_counts_and_tells_listeners(root: str, service: Checkpoints) -> None:
    first, _, _ = make_history(root, service)
    heard = []
    service.on("checkpoint:restore", heard.append)
    report = service.restore(first)
    event = service.events(type="checkpoint:restore")[-1]
    assert heard == [event]
    assert event.data["id"] == first and event.data["pre_restore"] == report.pre_restore
    assert (event.data["written"], event.data["deleted"]) == (1, 1) == (report.written, report.deleted)
    assert {"bytes_written", "dirs_created", "dirs_removed", "duration_ms"} <= set(event.data)


def test_restore_with_record_event_false_records_no_event(root: str, service: Checkpoints) -> None:
    first, _, _ = make_history(root, service)
    heard = []
    service.on("checkpoint:restore", heard.append)
    service.restore(first, RestoreOptions(record_event=False))
    assert service.events(type="checkpoint:restore") == [] and heard == []


def test_dry_run_returns_the_plan_and_changes_nothing(root: str, service: Checkpoints) -> None:
    first, _, _ = make_history(root, service)
    before, stats, count = h.tree_state(root), h.stat_state(root), len(service.history())
    report = service.restore(first, RestoreOptions(dry_run=True))
    assert report.dry_run and report.pre_restore is None
    assert [w.path for w in report.plan.writes] == [b"a.txt"]
    assert [r.path for r in report.plan.removals] == [b"c.txt"]
    assert (report.written, report.deleted) == (1, 1)
    assert h.tree_state(root) == before and h.stat_state(root) == stats
    assert len(service.history()) == count and service.events(type="checkpoint:restore") == []


# -- symlinks are never written through ---------------------------------------------------


def test_restore_replaces_a_directory_swapped_for_a_symlink_without_writing_through_it(
        root: str, outside: str, service: Checkpoints) -> None:
    h.write_file(root, "src/main.py", b"main")
    h.write_file(root, "src/pkg/mod.py", b"mod")
    record = service.create()
    expected = h.tree_state(root)
    h.write_file(outside, "main.py", b"OUTSIDE: must not be overwritten")
    h.write_file(outside, "keep.txt", b"outside only")
    shutil.rmtree(at(root, "src"))
    os.symlink(outside, at(root, "src"))
    outside_before, outside_stats = h.tree_state(outside), h.stat_state(outside)

    service.restore(record.id)

    assert h.tree_state(outside) == outside_before and h.stat_state(outside) == outside_stats
    assert not os.path.islink(at(root, "src")) and os.path.isdir(at(root, "src"))
    assert h.tree_state(root) == expected


def test_restore_replaces_a_file_swapped_for_a_symlink_to_an_outside_file(
        root: str, outside: str, service: Checkpoints) -> None:
    h.write_file(root, "config.ini", b"mine")
    record = service.create()
    h.write_file(outside, "secret", b"outside file")
    os.unlink(at(root, "config.ini"))
    os.symlink(at(outside, "secret"), at(root, "config.ini"))
    service.restore(record.id)
    assert read(outside, "secret") == b"outside file"
    assert not os.path.islink(at(root, "config.ini")) and read(root, "config.ini") == b"mine"


def test_tracked_restore_behind_a_symlinked_ancestor_writes_nothing_through_it(
        root: str, outside: str, service: Checkpoints) -> None:
    h.write_file(root, "src/a.py", b"tracked")
    service.track(at(root, "src/a.py"))
    record = service.create()
    shutil.rmtree(at(root, "src"))
    os.symlink(outside, at(root, "src"))
    with pytest.raises(RestoreIncomplete) as caught:
        service.restore(record.id)
    assert "src/a.py" in str(caught.value)
    assert h.tree_state(outside) == {}  # nothing written through the link
    assert os.readlink(at(root, "src")) == outside  # an untracked path is left alone


def test_a_manifest_naming_the_store_is_rejected_and_nothing_is_written(root: str, service: Checkpoints) -> None:
    h.write_file(root, "a.txt", b"a")
    record = service.create()
    blob = service.objects.put_bytes(b"evil")
    inner = service.objects.put_tree(Tree.build([TreeEntry(b"evil.txt", EntryKind.FILE, blob, None, 4)]))
    entries = list(service.objects.get_tree(record.tree).entries)
    forged = service.objects.put_tree(Tree.build([*entries, TreeEntry(b".ckpt", EntryKind.TREE, inner, None, 4)]))
    bad = dataclasses.replace(record, id=record.id[:-1] + ("0" if record.id[-1] != "0" else "1"), tree=forged)
    service.catalog.add_checkpoint(bad)
    store_before = sorted(os.listdir(service.store_dir))
    h.write_file(root, "a.txt", b"changed")
    with pytest.raises(InvalidTree):
        service.restore(bad.id)
    assert not os.path.exists(at(service.store_dir, "evil.txt"))
    assert sorted(os.listdir(service.store_dir)) == store_before
    assert read(root, "a.txt") == b"changed"


# -- ignored and skipped paths are never deleted ----------------------------------------


def test_whole_tree_restore_never_deletes_ignored_files(root: str, service: Checkpoints) -> None:
    h.write_file(root, ".gitignore", b"*.log\nbuild/\n")
    h.write_file(root, "a.txt", b"a")
    h.write_file(root, "app.log", b"log at checkpoint")
    h.write_file(root, ".git/HEAD", b"ref: refs/heads/main\n")
    record = service.create()
    h.write_file(root, "a.txt", b"edited")
    h.write_file(root, "app.log", b"log, later")
    h.write_file(root, "build/out.o", b"object")
    h.write_file(root, "newdir/inner.log", b"ignored, inside a directory the restore removes")
    h.write_file(root, "newdir/x.txt", b"x")
    h.write_file(root, ".git/ORIG_HEAD", b"abc\n")
    h.write_file(root, "sub/.git/config", b"[core]\n")
    h.write_file(root, "sub/y.txt", b"y")

    service.restore(record.id)

    state = h.tree_state(root)
    assert read(root, "a.txt") == b"a"
    assert read(root, "app.log") == b"log, later"
    assert read(root, "build/out.o") == b"object"
    assert read(root, "newdir/inner.log").startswith(b"ignored")
    assert "newdir/x.txt" not in state and state["newdir"] == ("dir",)  # the directory stays
    assert read(root, ".git/HEAD") == b"ref: refs/heads/main\n" and read(root, ".git/ORIG_HEAD") == b"abc\n"
    assert read(root, "sub/.git/config") == b"[core]\n" and "sub/y.txt" not in state


def test_restore_never_deletes_a_path_the_checkpoint_skipped_as_too_large(root: str, service: Checkpoints) -> None:
    service = reopen(service, max_file_size=1000)
    h.write_file(root, "big.bin", b"x" * 2000)
    h.write_file(root, "data/huge.bin", b"y" * 3000)
    h.write_file(root, "a.txt", b"a")
    record = service.create()
    assert {s.path for s in record.skipped} == {b"big.bin", b"data/huge.bin"}
    h.write_file(root, "big.bin", b"now small")  # in the current manifest, not in the target
    h.write_file(root, "data/huge.bin", b"z" * 3000)
    h.write_file(root, "a.txt", b"edited")
    service.restore(record.id)
    assert read(root, "big.bin") == b"now small"
    assert read(root, "data/huge.bin") == b"z" * 3000
    assert read(root, "a.txt") == b"a"
    service.close()


def test_restore_never_overwrites_an_ignored_file_standing_where_the_checkpoint_has_one(
        root: str, service: Checkpoints) -> None:
    h.write_file(root, "app.log", b"captured")
    record = service.create()
    h.write_file(root, ".gitignore", b"*.log\n")  # from now on the log is the user's, uncaptured
    h.write_file(root, "app.log", b"the user's newer log")
    with pytest.raises(RestoreIncomplete) as caught:
        service.restore(record.id)
    assert "app.log" in str(caught.value)
    assert read(root, "app.log") == b"the user's newer log"
    assert not os.path.exists(at(root, ".gitignore"))  # the rest of the restore was applied


def test_restore_paths_restores_only_that_subset(root: str, service: Checkpoints) -> None:
    h.write_file(root, "a/x.txt", b"x1")
    h.write_file(root, "a/y.txt", b"y1")
    h.write_file(root, "b.txt", b"b1")
    record = service.create()
    h.write_file(root, "a/x.txt", b"x2")
    h.write_file(root, "a/y.txt", b"y2")
    h.write_file(root, "a/new.txt", b"new")
    h.write_file(root, "b.txt", b"b2")
    h.write_file(root, "c.txt", b"c2")
    report = service.restore(record.id, RestoreOptions(paths=[at(root, "a/x.txt"), at(root, "b.txt")]))
    assert (report.written, report.deleted) == (2, 0)
    assert (read(root, "a/x.txt"), read(root, "b.txt")) == (b"x1", b"b1")
    assert (read(root, "a/y.txt"), read(root, "a/new.txt"), read(root, "c.txt")) == (b"y2", b"new", b"c2")
    service.restore(record.id, RestoreOptions(paths=[at(root, "a")]))
    assert read(root, "a/y.txt") == b"y1" and not os.path.exists(at(root, "a/new.txt"))
    assert read(root, "c.txt") == b"c2"


# -- type swaps and modes ---------------------------------------------------------------


def make_kind(root: str, rel: str, kind: str) -> None:
    if kind == "file":
        h.write_file(root, rel, b"file content\n")
    elif kind == "dir":
        h.write_file(root, rel + "/inner.txt", b"inner\n")
        h.write_file(root, rel + "/deeper/leaf.txt", b"leaf\n")
    else:
        os.symlink("elsewhere/target", at(root, rel))


def remove_kind(root: str, rel: str) -> None:
    path = at(root, rel)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.unlink(path)


SWAPS = [(a, b) for a in ("file", "dir", "symlink") for b in ("file", "dir", "symlink") if a != b]


@pytest.mark.parametrize(("was", "now"), SWAPS, ids=[f"{a}-then-{b}" for a, b in SWAPS])
def test_restore_brings_back_the_type_a_path_had(root: str, service: Checkpoints, was: str, now: str) -> None:
    h.write_file(root, "other.txt", b"unchanged")
    make_kind(root, "p", was)
    record = service.create()
    expected = h.tree_state(root)
    other = h.stat_state(root)["other.txt"]
    remove_kind(root, "p")
    make_kind(root, "p", now)
    service.restore(record.id)
    assert h.tree_state(root) == expected
    assert h.stat_state(root)["other.txt"] == other


@pytest.mark.parametrize("executable", [True, False])
def test_exec_bit_only_change_is_restored_by_chmod_keeping_the_inode(root: str, service: Checkpoints,
                                                                     executable: bool) -> None:
    h.write_file(root, "tool.sh", b"#!/bin/sh\necho hi\n", executable=executable)
    record = service.create()
    inode = os.stat(at(root, "tool.sh")).st_ino
    h.write_file(root, "tool.sh", b"#!/bin/sh\necho hi\n", executable=not executable)
    report = service.restore(record.id)
    st = os.stat(at(root, "tool.sh"))
    assert st.st_ino == inode
    assert bool(st.st_mode & 0o100) is executable
    assert [(c.path, c.executable) for c in report.plan.chmods] == [(b"tool.sh", executable)]
    assert report.plan.writes == ()
    assert report.bytes_written == 0


def test_restored_executable_keeps_its_exec_bit(root: str, service: Checkpoints) -> None:
    h.write_file(root, "bin/run", b"#!/bin/sh\n", executable=True)
    record = service.create()
    shutil.rmtree(at(root, "bin"))
    service.restore(record.id)
    assert os.stat(at(root, "bin/run")).st_mode & 0o100


def test_empty_directories_are_restored_and_removed(root: str, service: Checkpoints) -> None:
    os.makedirs(at(root, "empty/nested"))
    record = service.create()
    shutil.rmtree(at(root, "empty"))
    os.makedirs(at(root, "created/later"))
    service.restore(record.id)
    assert h.tree_state(root) == {"empty": ("dir",), "empty/nested": ("dir",)}


def test_tracked_restore_swaps_types_of_tracked_paths(root: str, service: Checkpoints) -> None:
    h.write_file(root, "out.txt", b"a file")
    service.track(at(root, "out.txt"), at(root, "later"), at(root, "link"))
    os.symlink("out.txt", at(root, "link"))
    record = service.create()
    expected = h.tree_state(root)
    os.unlink(at(root, "out.txt"))
    h.write_file(root, "out.txt/inner.txt", b"now a directory")
    h.write_file(root, "later/deep/x.txt", b"a directory where nothing was")
    os.unlink(at(root, "link"))
    h.write_file(root, "link/y.txt", b"a directory where a link was")
    service.restore(record.id)
    assert h.tree_state(root) == expected


# -- minimal IO -------------------------------------------------------------------------


def test_restore_after_20_edits_in_3000_files_rewrites_exactly_the_edited_paths(
        root: str, service: Checkpoints) -> None:
    names = [f"d{i // 100:02}/s{i // 10 % 10}/f{i:04}.txt" for i in range(3000)]
    for index, name in enumerate(names):
        h.write_file(root, name, b"original %d\n" % index)
    record = service.create()
    expected = h.tree_state(root)
    edited = names[7::150]
    assert len(edited) == 20
    for name in edited:
        h.write_file(root, name, b"edited by the agent\n")
    before = h.stat_state(root)

    report = service.restore(record.id)

    after = h.stat_state(root)
    assert after.keys() == before.keys()
    changed = sorted(p for p in after if after[p] != before[p])
    assert changed == sorted(edited)
    assert report.written == 20 and report.unchanged == 2980 and report.deleted == 0
    assert h.tree_state(root) == expected

    noop = service.restore(record.id)
    assert (noop.written, noop.deleted, noop.dirs_created, noop.dirs_removed, noop.bytes_written) == (0, 0, 0, 0, 0)
    assert noop.unchanged == 3000
    assert h.stat_state(root) == after


def test_next_snapshot_after_a_restore_reads_at_most_what_the_restore_wrote(root: str, service: Checkpoints) -> None:
    for index in range(50):
        h.write_file(root, f"f{index:02}", b"v1 %d" % index)
    time.sleep(2 * RACY_WINDOW_NS / 1e9)  # settled: only what the restore writes may be racy
    record = service.create()
    for index in range(0, 50, 5):
        h.write_file(root, f"f{index:02}", b"v2 %d" % index)
    time.sleep(2 * RACY_WINDOW_NS / 1e9)
    service.create()
    service.restore(record.id, RestoreOptions(save=False))
    # The restore taught the stat cache what it wrote, dated past the racy window: nothing is
    # read again, neither what the restore wrote nor what it left alone.
    again = service.create()
    assert again.tree == record.tree
    assert again.stats.hashed == 0


def test_an_edit_right_after_a_restore_is_seen_even_at_the_same_size(root: str, service: Checkpoints) -> None:
    for index in range(10):
        h.write_file(root, f"f{index}", b"first %d" % index)
    time.sleep(2 * RACY_WINDOW_NS / 1e9)
    record = service.create()
    for index in range(10):
        h.write_file(root, f"f{index}", b"later %d" % index)
    service.create()
    service.restore(record.id, RestoreOptions(save=False))
    # No sleep: the edits land within a clock tick of the restore, same sizes as restored.
    for index in range(0, 10, 3):
        h.write_file(root, f"f{index}", b"agent %d" % index)

    edited = service.create()

    assert edited.stats.hashed == 4
    for index in range(10):
        expected = b"agent %d" % index if index % 3 == 0 else b"first %d" % index
        assert read(root, f"f{index}") == expected
    assert {c.path for c in service.diff(record.id, edited.id)} == {b"f%d" % i for i in range(0, 10, 3)}


def test_a_restore_with_nothing_to_do_journals_and_stages_nothing(
        root: str, service: Checkpoints, monkeypatch: pytest.MonkeyPatch) -> None:
    for index in range(20):
        h.write_file(root, f"d{index % 4}/f{index}", b"%d" % index)
    record = service.create()
    journaled: list[object] = []
    real_add = service.catalog.add_checkpoint

    def add_checkpoint(record: object, *, event: object = None, journal: object = None) -> None:
        if journal is not None:
            journaled.append(journal)
        real_add(record, event=event, journal=journal)  # type: ignore[arg-type]

    monkeypatch.setattr(service.catalog, "add_checkpoint", add_checkpoint)
    monkeypatch.setattr(service.catalog, "journal_restore", lambda *args: journaled.append(args))
    events: list[object] = []
    service.on("checkpoint:restore", events.append)
    before = h.stat_state(root)

    noop = service.restore(record.id)

    assert journaled == [] and h.stat_state(root) == before
    assert (noop.written, noop.deleted, noop.unchanged) == (0, 0, 20)
    assert noop.pre_restore is not None and len(events) == 1  # still undoable and announced
    h.write_file(root, "d0/f0", b"changed")
    service.restore(record.id)
    with open(os.path.join(root, "d0", "f0"), "rb") as restored:
        assert len(journaled) == 1 and restored.read() == b"0"


def test_a_restore_through_more_directories_than_open_files_allowed_completes(
        root: str, service: Checkpoints) -> None:
    """800 directories to recreate under a descriptor limit far below that: the apply keeps
    at most MAX_OPEN_DIRS open (it held one per directory, and failed with EMFILE past ~1,000
    on a default `ulimit -n`), and what it tells the stat cache still holds."""
    import resource

    from ckpt.checkpoints.restore.apply import MAX_OPEN_DIRS

    for index in range(400):
        h.write_file(root, f"d{index:03}/sub/f.txt", b"%d" % index)
    time.sleep(2 * RACY_WINDOW_NS / 1e9)
    record = service.create()
    for index in range(400):
        shutil.rmtree(os.path.join(root, f"d{index:03}"))
    service.create()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    in_use = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 64
    resource.setrlimit(resource.RLIMIT_NOFILE, (in_use + MAX_OPEN_DIRS + 64, hard))
    try:
        report = service.restore(record.id)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert (report.written, report.dirs_created, report.conflicts) == (400, 800, ())
    assert h.tree_state(root) == {**{f"d{i:03}": ("dir",) for i in range(400)},
                                  **{f"d{i:03}/sub": ("dir",) for i in range(400)},
                                  **{f"d{i:03}/sub/f.txt": ("file", b"%d" % i, False)
                                     for i in range(400)}}
    after = service.create()
    assert after.tree == record.tree and after.stats.hashed == 0


def test_restore_options_keep_paths_as_a_tuple_and_default_to_a_saved_recorded_restore() -> None:
    options = RestoreOptions(paths=["a", b"b"])
    assert options.paths == ("a", b"b")
    assert RestoreOptions() == RestoreOptions(save=True, record_event=True, discard_later=False,
                                              dry_run=False, paths=())
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.save = False  # type: ignore[misc]


def test_a_restore_logs_its_steps_at_debug_level(
        root: str, service: Checkpoints, caplog: pytest.LogCaptureFixture) -> None:
    h.write_file(root, "kept.txt", b"kept\n")
    record = service.create()
    h.write_file(root, "kept.txt", b"edited\n")
    h.write_file(root, "new.txt", b"new\n")
    with caplog.at_level(logging.DEBUG, logger="ckpt.checkpoints.restore"):
        service.restore(record.id)
    messages = [r.getMessage() for r in caplog.records if r.name == "ckpt.checkpoints.restore"]
    assert any(m.startswith(f"plan to {record.id}: 1 writes") for m in messages), messages
    assert any(m.startswith(f"journal opened for {record.id}") for m in messages), messages
    assert any(m.startswith("staged 1 files") for m in messages), messages
    assert any(m.startswith(f"journal closed, restore to {record.id} done: 1 written, 1 deleted")
               for m in messages), messages
