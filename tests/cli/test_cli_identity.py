"""The workspace identity through the CLI: a moved workspace (`mv w1 w2`) keeps its history,
a store in a git repository stays out of git, `init --store-outside`, `init` inside an
initialized workspace, and `restore --from-other-root`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ckpt.cli.main import run

GIT = shutil.which("git")


def ckpt(cwd: Path | str, *args: str, monkeypatch: pytest.MonkeyPatch,
         capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def call(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):  # type: ignore[no-untyped-def]
    for name in ("CKPT_ROOT", "CKPT_STORE", "CKPT_SESSION", "CKPT_DEBUG", "CKPT_LOG"):
        monkeypatch.delenv(name, raising=False)

    def call(cwd: Path | str, *args: str) -> tuple[int, str, str]:
        return ckpt(cwd, *args, monkeypatch=monkeypatch, capsys=capsys)

    return call


def _tree(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n")
    (root / "README").write_text("readme\n")
    return root.resolve()


@pytest.mark.parametrize("shared", [False, True], ids=["own-store", "shared-store"])
def test_moved_workspace_lists_its_history(tmp_path: Path, call, shared: bool) -> None:  # type: ignore[no-untyped-def]
    w1 = _tree(tmp_path / "w1")
    store = ("--store", str(tmp_path / "store")) if shared else ()
    assert call(w1, *store, "init")[0] == 0
    code, out, _ = call(w1, "create", "--label", "first")
    assert code == 0
    first = out.strip()
    w2 = tmp_path / "w2"
    os.rename(w1, w2)
    code, out, err = call(w2, "list", "--json")  # no --store: .ckpt finds it
    assert code == 0, err
    assert [r["id"] for r in json.loads(out)] == [first]
    assert f"workspace moved from {w1} to {w2}" in err and err.count("\n") == 1
    code, out, err = call(w2, "latest")
    assert (code, out.strip(), err) == (0, first, "")
    code, out, _ = call(w2, "stats", "--json")
    assert code == 0 and json.loads(out)["checkpoints"] == 1
    code, out, _ = call(w2, "events", "--type", "workspace:moved", "--json")
    assert code == 0 and "workspace:moved" in out


def test_init_in_a_subfolder_says_it_reuses_the_parent_store(tmp_path: Path, call) -> None:  # type: ignore[no-untyped-def]
    root = _tree(tmp_path / "w")
    assert call(root, "init")[0] == 0
    code, out, err = call(root / "src", "init", "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["root"] == str(root) and doc["reused"] is True
    assert f"{root} is already a ckpt workspace; reusing its store" in err
    assert not (root / "src" / ".ckpt").exists()
    code, out, err = call(root / "src", "--root", ".", "init", "--json")  # nested, on purpose
    assert code == 0 and json.loads(out)["reused"] is False and "reusing" not in err
    assert (root / "src" / ".ckpt" / "format").is_file()


def test_init_store_outside(tmp_path: Path, call, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    root = _tree(tmp_path / "w")
    code, out, err = call(root, "init", "--store-outside", "--json")
    assert code == 0, err
    doc = json.loads(out)
    expected = tmp_path.resolve() / "data" / "ckpt" / "stores" / doc["workspace"]
    assert doc["store"] == str(expected) and doc["reused"] is False
    assert (expected / "format").is_file() and not (root / ".ckpt" / "format").exists()
    code, out, _ = call(root / "src", "create")
    assert code == 0
    code, listed, _ = call(root, "list", "--json")
    assert [r["id"] for r in json.loads(listed)] == [out.strip()]
    code, _, err = call(root, "--store", str(tmp_path / "x"), "init", "--store-outside")
    assert code == 2 and "exclude each other" in err


def test_root_slash_and_store_as_root_are_refused(tmp_path: Path, call) -> None:  # type: ignore[no-untyped-def]
    root = _tree(tmp_path / "w")
    # A store named in the temp dir: a ckpt without the refusal must not write into /.
    code, _, err = call(root, "--root", "/", "--store", str(tmp_path / "st"), "init")
    assert code == 1 and "file system root" in err
    assert not os.path.lexists("/.ckpt")
    code, _, err = call(root, "--store", ".", "init")
    assert code == 1 and "the store is the root" in err
    assert call(root, "init")[0] == 0
    code, _, err = call(root, "--root", ".ckpt/objects", "list")
    assert code == 1 and "lies inside the ckpt store" in err


def test_restore_of_another_roots_checkpoint_needs_the_flag(tmp_path: Path, call) -> None:  # type: ignore[no-untyped-def]
    store = str(tmp_path / "store")
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    (b / "only-b").write_text("b\n")
    assert call(a, "--store", store, "init")[0] == 0
    assert call(b, "--store", store, "init")[0] == 0
    of_a = call(a, "create")[1].strip()
    code, _, err = call(b, "restore", of_a)
    assert code == 1 and "another workspace root" in err and "--from-other-root" in err
    assert (b / "only-b").exists()
    code, _, err = call(b, "restore", of_a, "--from-other-root")
    assert code == 0, err
    assert not (b / "only-b").exists()


@pytest.mark.skipif(GIT is None, reason="git is not installed")
def test_store_stays_out_of_git(tmp_path: Path, call) -> None:  # type: ignore[no-untyped-def]
    root = _tree(tmp_path / "repo")

    def git(*args: str) -> str:
        env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
        done = subprocess.run([GIT or "git", "-C", str(root), *args], env=env, check=True,
                              capture_output=True, text=True)
        return done.stdout

    git("init", "-q")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    assert call(root, "init")[0] == 0
    code, out, _ = call(root, "create")
    assert code == 0
    assert git("status", "--porcelain") == ""
    git("add", "-A")
    assert ".ckpt" not in git("diff", "--cached", "--name-only")
    git("clean", "-fdq")
    assert (root / ".ckpt" / "catalog.db").exists()
    code, listed, _ = call(root, "list", "--json")
    assert [r["id"] for r in json.loads(listed)] == [out.strip()]
