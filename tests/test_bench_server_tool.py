"""bench.compare's `ckpt-server` tool and the server's cases (bench/server_cases.py), on a small
tree: every step goes through a real server (a step that does not is a failure of the run),
restores are verified, the client cases are paired with `python -c pass`, and no server is
left running."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import servers  # tests/ is on pytest's `pythonpath`

from bench.compare import STEPS, Install, main
from bench.corpus import list_captured_files, read_manifest
from bench.server_cases import CLIENT_CASES, growth_per_cycle, server_rss, wrong_paths

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def make_tree(root: Path) -> None:
    for i in range(40):
        path = root / f"pkg{i % 4}" / f"mod{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"value = {i}\n" * (i + 1))


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("CKPT_SERVER", raising=False)  # the suite's default (off) would keep every call local
    root = tmp_path / "tree"
    root.mkdir()
    make_tree(root)
    return root


@needs_git
def test_ckpt_server_steps_go_through_the_server_and_the_client_cases_pair(
        tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out, scratch = tmp_path / "report.json", tmp_path / "scratch"
    try:
        code = main(["--corpus", str(tree), "--rounds", "1", "--tools", "ckpt,ckpt-server,git",
                     "--install", "current", "--client-reps", "2", "--json", str(out),
                     "--scratch", str(scratch)])
    finally:
        left = servers.reap_servers_under(tmp_path)
    assert code == 0, capsys.readouterr().err
    assert not left
    report = json.loads(out.read_text())
    run = next(r for r in report["runs"] if r["tool"] == "ckpt-server")
    for step in STEPS:
        cell = run["steps"][step]
        # The server's high-water mark, read from /proc after the step.
        assert cell["max_rss_kib"] == cell["report"]["server_hwm_kib"] > 0
    assert run["steps"]["restore"]["rewritten"] == 30
    assert run["steps"]["init"]["report"]["server_start_and_warm_seconds"] > 0
    client = report["client"]
    assert set(client["cases"]) == set(CLIENT_CASES) and client["server_requests"] >= 2
    assert client["cases"]["python -c pass"]["median_ratio"] == 1.0
    table = capsys.readouterr().out
    assert "ckpt-server/git" in table and "client start-up" in table


def test_server_rss_cycles_restore_exactly_through_the_server(tree: Path, tmp_path: Path) -> None:
    files = sorted(list_captured_files(tree))
    try:
        result = server_rss(Install.current(), tree, tmp_path / "store", files, cycles=4,
                            every=2)
    finally:
        left = servers.reap_servers_under(tmp_path)
    assert not left
    assert [c for c, _ in result["samples"]] == [0, 2, 4]
    assert result["server_requests"] >= 8
    assert result["peak_rss_kib"] >= max(k for _, k in result["samples"])


def test_wrong_paths_names_what_a_restore_left(tree: Path) -> None:
    expected = read_manifest(tree)
    (tree / "pkg0" / "mod0.py").write_text("changed\n")
    (tree / "pkg1" / "new.py").write_text("added\n")
    (tree / "pkg2" / "mod2.py").unlink()
    paths = {"pkg0/mod0.py", "pkg1/new.py", "pkg2/mod2.py", "pkg3/mod3.py"}
    assert wrong_paths(tree, expected, paths) == [
        "pkg0/mod0.py: not restored", "pkg1/new.py: left behind", "pkg2/mod2.py: not restored"]


def test_growth_per_cycle_is_the_slope_after_the_first_interval() -> None:
    samples = [(0, 1000), (50, 5000), (100, 5100), (150, 5200)]
    assert growth_per_cycle(samples, 50) == pytest.approx(2.0)
    assert growth_per_cycle(samples[:2], 50) is None
