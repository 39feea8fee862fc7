"""Tests for the benchmark yardsticks: seeded turns, manifests, and the git shadow-repo driver.

If these are wrong, every number the peer comparison prints is wrong, so they run with the
normal test suite (fast, real temp directories, real git).
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench.compare import BenchFailure, CkptCli, GitShadow, run_measured
from bench.corpus import (
    changed_paths,
    copy_tree,
    count_rewritten,
    diff_manifests,
    find_ignored,
    list_captured_files,
    read_manifest,
    remove_lines,
)
from bench.turns import Edit, Turn, apply_turn, plan_turn

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def make_tree(root: Path, *, files: int = 60, seed: int = 7) -> None:
    """A small source-like tree: nested dirs, an exec script, a symlink, an ignored file."""
    rng = random.Random(seed)
    for i in range(files):
        path = root / f"pkg{i % 4}" / f"sub{i % 3}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"x{j} = {rng.randrange(10**6)}\n" for j in range(rng.randint(1, 30))]
        path.write_text("".join(lines))
    script = root / "run.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o755)
    os.symlink("pkg0/sub0/mod0.py", root / "link.py")
    (root / ".gitignore").write_text("*.log\n")
    (root / "debug.log").write_text("ignored by both tools\n")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    make_tree(root)
    return root


def regular_files(root: Path) -> list[str]:
    return [p for p in list_captured_files(root) if not (root / p).is_symlink()]


def test_turn_plan_is_deterministic_for_a_seed(tree: Path) -> None:
    files = regular_files(tree)
    assert plan_turn(files, 42) == plan_turn(list(reversed(files)), 42)
    assert plan_turn(files, 42) != plan_turn(files, 43)


def test_turn_has_exactly_20_edits_5_adds_5_deletes(tree: Path) -> None:
    turn = plan_turn(regular_files(tree), 3)
    assert (len(turn.edits), len(turn.adds), len(turn.deletes)) == (20, 5, 5)
    edited = {e.path for e in turn.edits}
    assert edited.isdisjoint(turn.deletes) and len(turn.paths) == 30
    before = read_manifest(tree)
    apply_turn(tree, turn)
    after = read_manifest(tree)
    assert changed_paths(before, after) == turn.paths
    assert {p for p in turn.paths if p not in before} == {a.path for a in turn.adds}
    assert {p for p in turn.paths if p not in after} == set(turn.deletes)


def test_turn_applied_to_two_copies_gives_identical_trees(tree: Path, tmp_path: Path) -> None:
    copy_tree(tree, tmp_path / "a")
    copy_tree(tree, tmp_path / "b")
    turn = plan_turn(regular_files(tree), 11)
    apply_turn(tmp_path / "a", turn)
    apply_turn(tmp_path / "b", turn)
    assert diff_manifests(read_manifest(tmp_path / "a"), read_manifest(tmp_path / "b")) == []


def test_turn_never_touches_ignore_files_or_adds_ignored_names(tree: Path) -> None:
    files = regular_files(tree)
    assert ".gitignore" in files
    for seed in range(20):
        first_try = f"ckpt_bench_{seed}_0_"  # reject every name of the first attempt

        def reject_first_try(paths: Sequence[str], marker: str = first_try) -> set[str]:
            return {p for p in paths if marker in p}

        turn = plan_turn(files, seed, find_ignored=reject_first_try)
        assert ".gitignore" not in turn.paths and len(turn.adds) == 5
        assert not any(first_try in a.path for a in turn.adds)


def test_edit_keeps_exec_bit_and_inode(tree: Path) -> None:
    turn = Turn(0, (Edit("run.sh", 0.5, b"echo edited\n"),), (), ())
    ino = (tree / "run.sh").stat().st_ino
    apply_turn(tree, turn)
    st = (tree / "run.sh").stat()
    assert st.st_ino == ino and st.st_mode & 0o100
    assert (tree / "run.sh").read_bytes() == b"#!/bin/sh\necho edited\necho hi\n"


def test_manifest_detects_one_changed_byte(tree: Path) -> None:
    before = read_manifest(tree)
    path = tree / "pkg1" / "sub1" / "mod1.py"
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    assert diff_manifests(before, read_manifest(tree)) == ["changed pkg1/sub1/mod1.py: content"]


def test_manifest_detects_a_lost_exec_bit(tree: Path) -> None:
    before = read_manifest(tree)
    (tree / "run.sh").chmod(0o644)
    assert diff_manifests(before, read_manifest(tree)) == ["changed run.sh: exec bit"]


def test_manifest_detects_a_changed_symlink_target(tree: Path) -> None:
    before = read_manifest(tree)
    (tree / "link.py").unlink()
    os.symlink("pkg0/sub0/mod4.py", tree / "link.py")
    assert diff_manifests(before, read_manifest(tree)) == ["changed link.py: symlink target"]


def test_manifest_detects_missing_extra_and_kind_change(tree: Path) -> None:
    before = read_manifest(tree)
    (tree / "pkg2" / "sub2" / "mod2.py").unlink()
    (tree / "new.txt").write_text("x")
    (tree / "pkg3" / "sub0" / "mod3.py").unlink()
    (tree / "pkg3" / "sub0" / "mod3.py").mkdir()
    assert diff_manifests(before, read_manifest(tree)) == [
        "extra new.txt", "missing pkg2/sub2/mod2.py", "changed pkg3/sub0/mod3.py: kind, content"]


def test_count_rewritten_sees_a_same_content_rewrite(tree: Path) -> None:
    before = read_manifest(tree)
    path = tree / "pkg0" / "sub0" / "mod0.py"
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(path.read_bytes())
    os.replace(tmp, path)  # same bytes, new inode: a restore that rewrote instead of skipping
    after = read_manifest(tree)
    assert diff_manifests(before, after) == [] and count_rewritten(before, after) == 1


def test_captured_files_honour_gitignore(tree: Path) -> None:
    captured = list_captured_files(tree)
    assert "debug.log" not in captured and "link.py" in captured and len(captured) == 63
    assert find_ignored(tree, ["a/b.log", "a/b.py"]) == {"a/b.log"}


def test_linux_packaging_lines_are_removed_and_nothing_else() -> None:
    text = "*.o\n/*\n!/debian/\n!.gitignore\n"
    assert remove_lines(text, ("/*", "!/debian/")) == "*.o\n!.gitignore\n"


def test_run_measured_reports_time_rss_and_fails_loudly(tmp_path: Path) -> None:
    m = run_measured([["sh", "-c", "echo out"], ["true"]], cwd=tmp_path, env=dict(os.environ))
    assert m.stdout == ["out\n", ""] and m.max_rss_kib > 0 and m.seconds > 0
    ballast = bytearray(150 << 20)  # this process's peak must not leak into the child's
    small = run_measured([["true"]], cwd=tmp_path, env=dict(os.environ))
    assert small.max_rss_kib < 50 << 10 and len(ballast) > 0
    with pytest.raises(BenchFailure, match="exited 3: boom"):
        run_measured([["sh", "-c", "echo boom >&2; exit 3"]], cwd=tmp_path, env=dict(os.environ))


@needs_git
def test_git_shadow_restore_round_trip_is_exact(tree: Path, tmp_path: Path) -> None:
    store = tmp_path / "shadow"
    store.mkdir()
    git = GitShadow(tree, store)
    git.init()
    baseline = read_manifest(tree)
    _, first = git.snapshot("first")
    assert git.captured_files() == 63  # the ignored log is not in the shadow repo
    apply_turn(tree, plan_turn(regular_files(tree), 5))
    (tree / "run.sh").chmod(0o644)
    (tree / "link.py").unlink()
    os.symlink("elsewhere", tree / "link.py")
    (tree / "brand" / "new").mkdir(parents=True)
    (tree / "brand" / "new" / "file.py").write_text("agent output\n")
    _, second = git.snapshot("after-turn")
    assert second != first
    git.restore(first)
    restored = read_manifest(tree)
    assert diff_manifests(baseline, restored) == []  # incl. exec bit, symlink, ignored file
    git.restore(first)
    assert count_rewritten(restored, read_manifest(tree)) == 0  # a no-op restore writes nothing
    assert not any(store == p or store in p.parents for p in tree.rglob("*"))


def test_ckpt_driver_speaks_the_cli_contract(tmp_path: Path) -> None:
    ckpt = CkptCli(tmp_path / "work", tmp_path / "store")
    args = ckpt.base[-4:]
    assert args == ["--root", str(tmp_path / "work"), "--store", str(tmp_path / "store")]
    assert ckpt.cwd == tmp_path  # never the work tree: python -c would import from it
