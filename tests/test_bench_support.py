"""Tests for the benchmark yardsticks: seeded turns, manifests, the tool drivers, the comparison.

If these are wrong, every number the peer comparison prints is wrong, so they run with the
normal test suite (fast, real temp directories, real git).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench.compare import (
    REPO_ROOT,
    STEPS,
    BenchFailure,
    CkptApi,
    CkptCli,
    GitShadow,
    copies_to_delete,
    main,
    render_table,
    run_measured,
    summarize,
)
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
from ckpt.tuning.workload import Edit, Turn, apply_turn, plan_turn

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


def test_ckpt_api_worker_fails_loudly_and_exits(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    api = CkptApi(tmp_path / "work", tmp_path / "store")
    proc = api._proc
    assert proc is not None
    try:
        init = api.init()
        assert init.seconds > 0 and init.report["open_seconds"] >= 0
        assert init.report["startup_rss_kib"] <= init.max_rss_kib
        with pytest.raises(BenchFailure, match="UnknownCheckpoint"):
            api.restore("ckpt-0-nosuchid")
        m, ref = api.snapshot("after a failed step the worker still serves")
        assert ref.startswith("ckpt-") and m.report["files"] == 0
    finally:
        api.close()
    assert proc.returncode == 0
    api.close()  # idempotent


def test_ckpt_api_worker_peak_rss_is_its_own_not_the_harness_s(tmp_path: Path) -> None:
    # A harness that holds 300 MiB (the Linux run's manifests: ~170 MiB) when it starts the
    # worker: a process exec'd from a fork of it would report at least that as its own peak.
    ballast = bytearray(300 << 20)
    ballast[:: 4096] = b"x" * len(ballast[:: 4096])  # touched: resident
    (tmp_path / "work").mkdir()
    api = CkptApi(tmp_path / "work", tmp_path / "store")
    try:
        assert api.startup["startup_rss_kib"] < 150 << 10, api.startup
    finally:
        api.close()
        del ballast


def test_compare_never_imports_ckpts_library() -> None:
    """bench.compare may use the plain workload code in ckpt.tuning, nothing of the library."""
    code = ("import sys, bench.compare; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "{'ckpt', 'checkpoints', 'objstore', 'cli', 'zstandard', 'msgpack', "
            "'click', 'pathspec', 'sqlite3'}))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == str(["ckpt", "ckpt.tuning", "ckpt.tuning.workload"])


def _fake_run(tool: str, rnd: int, seconds: float) -> dict[str, object]:
    steps = {s: {"seconds": seconds * (rnd + 1), "max_rss_kib": 1024, "report": None}
             for s in ("init", *STEPS)}
    if tool == "ckpt-api":
        steps["init"]["report"] = {"startup_seconds": 0.2, "open_seconds": 0.01,
                                   "startup_rss_kib": 900}
    for s in ("restore", "noop_restore"):
        steps[s]["rewritten"] = 0
    return {"tool": tool, "round": rnd, "steps": steps,
            "store": {"apparent_bytes": 1, "allocated_bytes": 1, "files": 1}}


def test_summary_pairs_each_ckpt_variant_with_git_by_round() -> None:
    tools = ["git", "ckpt-api", "ckpt"]
    runs = [_fake_run(t, r, {"ckpt": 4.0, "ckpt-api": 0.5, "git": 1.0}[t])
            for r in range(2) for t in tools]
    summary = summarize(runs, tools)
    for step in ("init", *STEPS):
        assert summary[step]["ratios"] == {"ckpt": [4.0, 4.0], "ckpt-api": [0.5, 0.5]}
        assert summary[step]["median_ratio"] == {"ckpt": 4.0, "ckpt-api": 0.5}
    assert summary["ckpt-api worker"]["median_startup_s"] == 0.2
    table = render_table({"summary": summary, "tools": tools, "rounds": 2, "date": "d",
                          "corpus": {"name": "x", "captured_files": 1, "files": 1, "bytes": 1},
                          "machine": {"cpu": "cpu", "nproc": 2}, "git_version": "git",
                          "ckpt_version": "0", "rss_floor_kib": 8000})
    header = next(line for line in table.splitlines() if line.startswith("step"))
    assert header.split()[4:9] == ["ckpt", "ckpt-api", "git", "ckpt/git", "ckpt-api/git"]
    assert "4.00 4.00 | 0.50 0.50" in table
    assert "start-up 0.200 s" in table


@needs_git
def test_compare_runs_the_api_in_process_beside_git(tree: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    scratch = tmp_path / "scratch" / "new"  # made by the run
    assert main(["--corpus", str(tree), "--rounds", "1", "--tools", "ckpt-api,git",
                 "--install", "current", "--json", str(out), "--scratch", str(scratch)]) == 0
    report = json.loads(out.read_text())
    assert report["tools"] == ["ckpt-api", "git"]
    summary = report["summary"]
    api, git = (next(r for r in report["runs"] if r["tool"] == t) for t in ("ckpt-api", "git"))
    for step in ("init", *STEPS):
        assert api["steps"][step]["seconds"] > 0 and api["steps"][step]["max_rss_kib"] > 0
        ratio = api["steps"][step]["seconds"] / git["steps"][step]["seconds"]
        assert summary[step]["ratios"] == {"ckpt-api": [ratio]}
        assert summary[step]["median_ratio"] == {"ckpt-api": ratio}
        # Until settled: the call and its bookkeeping, never less than the call alone.
        settled = api["steps"][step]["settled_seconds"]
        assert settled >= api["steps"][step]["seconds"]
        assert summary[step]["ckpt-api"]["median_settled_s"] == settled
        if step != "init":
            assert summary[step]["ckpt-api"]["median_settled_ratio"] == \
                settled / git["steps"][step]["seconds"]
    steps = api["steps"]
    assert steps["first_snapshot"]["report"]["files"] == len(regular_files(tree))  # no symlink
    assert steps["no_change_snapshot"]["report"]["hashed"] == 0
    assert steps["no_change_snapshot"]["report"]["new_objects"] == 0
    assert steps["turn_snapshot"]["report"]["hashed"] == 25
    restore, noop = steps["restore"], steps["noop_restore"]
    assert (restore["rewritten"], restore["report"]["written"], restore["report"]["deleted"]) \
        == (30, 25, 5)
    assert restore["report"]["pre_restore"] is not None  # the default restore saves first
    assert (noop["rewritten"], noop["report"]["written"], noop["report"]["deleted"]) == (0, 0, 0)
    assert set(steps["init"]["report"]) == {"startup_seconds", "startup_rss_kib", "open_seconds",
                                            "ckpt_module"}
    assert report["install"]["mode"] == "current" and report["install"]["venv"] is None
    assert api["verified"] and api["store"]["files"] > 0
    # peak RSS is the worker's cumulative high-water mark: it never goes down within a round
    peaks = [steps[s]["max_rss_kib"] for s in ("init", *STEPS)]
    assert peaks == sorted(peaks)
    table = capsys.readouterr().out
    assert "ckpt-api/git" in table and "cumulative" in table
    assert "ckpt-api until settled" in table
    assert report["copies_deleted_between_rounds"] == 0
    assert list(scratch.iterdir()) == []  # worker gone, scratch removed


def test_round_copies_are_deleted_oldest_first_and_only_when_short_of_disk() -> None:
    kept = [(Path("r0-git"), 300), (Path("r0-ckpt"), 200), (Path("r1-ckpt"), 250)]
    assert copies_to_delete(kept, free_bytes=1000, need_bytes=1000) == []
    assert copies_to_delete(kept, free_bytes=900, need_bytes=1000) == [Path("r0-git")]
    assert copies_to_delete(kept, free_bytes=600, need_bytes=1100) == [Path("r0-git"),
                                                                        Path("r0-ckpt")]
    # Never more than there is: the round then runs on what is free, as before.
    assert copies_to_delete(kept, free_bytes=0, need_bytes=10_000) == [p for p, _ in kept]
    assert copies_to_delete([], free_bytes=0, need_bytes=1) == []


@needs_git
@pytest.mark.slow
@pytest.mark.packaging  # pip installs a venv: run by .ci/run's packaging step, not by default
def test_compare_measures_a_fresh_non_editable_venv_install(
        tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--install venv``: pip installs the checkout into a venv in the scratch dir (30-60 s at
    most, mostly pip), and both ckpt tools run from there, not from the editable checkout."""
    out = tmp_path / "report.json"
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert main(["--corpus", str(tree), "--rounds", "1", "--tools", "ckpt,ckpt-api,git",
                 "--install", "venv", "--json", str(out), "--scratch", str(scratch)]) == 0
    report = json.loads(out.read_text())
    install = report["install"]
    venv = Path(install["venv"])
    assert install["mode"] == "venv" and venv.parent.parent == scratch
    assert install["ckpt"] == str(venv / "bin" / "ckpt")
    assert install["cli_interpreter"] == str(venv / "bin" / "python")  # the CLI runs the venv
    site = venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    assert install["ckpt_module"] == str(site / "ckpt" / "checkpoints" / "__init__.py")
    assert install["without_pyc"] == []  # precompiled despite PYTHONDONTWRITEBYTECODE
    assert isinstance(install["native"], bool)
    api = next(r for r in report["runs"] if r["tool"] == "ckpt-api")
    assert api["steps"]["init"]["report"]["ckpt_module"] == install["ckpt_module"]
    assert {r["tool"] for r in report["runs"] if r["verified"]} == {"ckpt", "ckpt-api", "git"}
    table = capsys.readouterr().out
    assert f"ckpt install venv: {venv / 'bin' / 'ckpt'} (native scanner: " in table
    assert list(scratch.iterdir()) == []  # the venv went with the scratch dir
