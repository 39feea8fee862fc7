"""Git's exclude files outside the work tree: `.git/info/exclude` and `core.excludesFile`
(issue 27.6). Honoured when use_gitignore is on, in git's order of precedence (every
`.gitignore` above `info/exclude` above `core.excludesFile`), found by parsing git's config
files (never by running git), and compared with what real git answers. The stat cache is
not fooled when those files change: they lie outside the walked tree."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from soak import scale

from ckpt.checkpoints.config import StoreConfig, write_config
from ckpt.checkpoints.service import Checkpoints
from ckpt.checkpoints.snapshot.gitexclude import config_value, read_git_excludes
from ckpt.checkpoints.snapshot.ignore import IgnoreRules

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


def _env(home: Path, xdg: Path | None = None) -> dict[str, str]:
    env = {"HOME": os.fspath(home), "GIT_CONFIG_NOSYSTEM": "1"}
    env["XDG_CONFIG_HOME"] = os.fspath(xdg) if xdg is not None else ""
    return env


@pytest.fixture()
def home(tmp_path: Path) -> Iterator[Path]:
    """A HOME of its own (and no XDG_CONFIG_HOME, no system config) for ckpt in this process."""
    home = tmp_path / "home"
    home.mkdir()
    with mock.patch.dict(os.environ, _env(home)):
        os.environ.pop("XDG_CONFIG_HOME")
        os.environ.pop("GIT_CONFIG_GLOBAL", None)
        yield home


def _repo(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    if GIT is not None:
        subprocess.run([GIT, "init", "-q", os.fspath(root)], check=True,
                       env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
    else:
        (root / ".git" / "info").mkdir(parents=True)


def _files(cp: Checkpoints, ref: str) -> set[str]:
    return {os.fsdecode(f.path) for f in cp.files(ref)}


def _git_untracked(root: Path, env: dict[str, str]) -> set[str]:
    """The files git would add: untracked and not ignored, each listed."""
    assert GIT is not None
    out = subprocess.run([GIT, "ls-files", "--others", "--exclude-standard", "-z"], cwd=root,
                         env={**os.environ, **env}, capture_output=True, check=True).stdout
    return {os.fsdecode(p) for p in out.split(b"\0") if p and not p.startswith(b".ckpt/")}


def _touch(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name + "\n")


@needs_git
def test_info_exclude_is_honoured_like_git(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "ws"
    _repo(root)
    _touch(root, "app.py", "secret.env", "local.cfg", "sub/secret.env")
    (root / ".git" / "info" / "exclude").write_text("# mine\nsecret.env\n/local.cfg\n")
    with Checkpoints.init(os.fspath(root)) as cp:
        captured = _files(cp, cp.create().id)
    assert captured == {"app.py"}
    assert captured == _git_untracked(root, _env(home))


@needs_git
def test_core_excludes_file_from_the_global_config_with_a_tilde(tmp_path: Path,
                                                               home: Path) -> None:
    root = tmp_path / "ws"
    _repo(root)
    _touch(root, "app.py", "notes.local", "build/out.o")
    (home / ".gitconfig").write_text('[user]\n\tname = x\n[core]\n\texcludesFile = "~/global ignore"  # c\n')
    (home / "global ignore").write_text("*.local\nbuild/\n")
    with Checkpoints.init(os.fspath(root)) as cp:
        captured = _files(cp, cp.create().id)
    assert captured == {"app.py"} == _git_untracked(root, _env(home))


@needs_git
def test_the_default_excludes_file_and_the_xdg_config(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "ws"
    _repo(root)
    _touch(root, "app.py", "a.tmp", "b.bak")
    xdg = tmp_path / "xdg"
    (xdg / "git").mkdir(parents=True)
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("*.tmp\n")  # default without XDG
    with Checkpoints.init(os.fspath(root)) as cp:
        assert _files(cp, cp.create().id) == {"app.py", "b.bak"} == _git_untracked(root, _env(home))
        (xdg / "git" / "ignore").write_text("*.bak\n")  # default under XDG_CONFIG_HOME
        with mock.patch.dict(os.environ, {"XDG_CONFIG_HOME": os.fspath(xdg)}):
            got = _files(cp, cp.create().id)
        assert got == {"app.py", "a.tmp"} == _git_untracked(root, _env(home, xdg))
        # The XDG config names another file; the repository's config overrides it.
        (xdg / "git" / "config").write_text("[core]\nexcludesfile = " + os.fspath(tmp_path / "x") + "\n")
        (tmp_path / "x").write_text("app.py\n")
        with mock.patch.dict(os.environ, {"XDG_CONFIG_HOME": os.fspath(xdg)}):
            got = _files(cp, cp.create().id)
            assert got == {"a.tmp", "b.bak"} == _git_untracked(root, _env(home, xdg))
            with (root / ".git" / "config").open("a") as config:
                config.write("[core]\n\texcludesFile =\n")  # empty: no file at all
            got = _files(cp, cp.create().id)
            assert got == {"app.py", "a.tmp", "b.bak"} == _git_untracked(root, _env(home, xdg))


@needs_git
def test_precedence_gitignore_over_info_exclude_over_excludes_file(tmp_path: Path,
                                                                  home: Path) -> None:
    root = tmp_path / "ws"
    _repo(root)
    _touch(root, "a.log", "b.log", "c.log", "keep/d.log", "e.txt")
    (home / ".config" / "git").mkdir(parents=True)
    (home / ".config" / "git" / "ignore").write_text("*.log\ne.txt\n")
    (root / ".git" / "info" / "exclude").write_text("!a.log\n!keep/\n!e.txt\n")
    (root / ".gitignore").write_text("a.log\n")
    (root / "keep" / ".gitignore").write_text("!d.log\n")
    with Checkpoints.init(os.fspath(root)) as cp:
        captured = _files(cp, cp.create().id)
    assert captured == _git_untracked(root, _env(home))
    assert captured == {".gitignore", "keep/.gitignore", "keep/d.log", "e.txt"}


def test_not_honoured_without_use_gitignore(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "ws"
    _repo(root)
    _touch(root, "app.py", "secret.env")
    (root / ".git" / "info" / "exclude").write_text("secret.env\n")
    cp = Checkpoints.init(os.fspath(root))
    write_config(cp.store_dir, StoreConfig(use_gitignore=False))
    cp.close()
    with Checkpoints.open(os.fspath(root)) as cp:
        assert _files(cp, cp.create().id) == {"app.py", "secret.env"}


def test_the_stat_cache_follows_changes_of_the_exclude_files(tmp_path: Path,
                                                            home: Path) -> None:
    """Those files lie outside the walk: editing them must change what the next checkpoint
    holds although no listing in the tree changed."""
    root = tmp_path / "ws"
    _repo(root)
    _touch(root, "app.py", "secret.env", "deep/er/local.cfg")
    exclude = root / ".git" / "info" / "exclude"
    global_ignore = home / ".config" / "git" / "ignore"
    global_ignore.parent.mkdir(parents=True)
    with Checkpoints.init(os.fspath(root)) as cp:
        assert _files(cp, cp.create().id) == {"app.py", "secret.env", "deep/er/local.cfg"}
        exclude.write_text("secret.env\n")
        assert _files(cp, cp.create().id) == {"app.py", "deep/er/local.cfg"}
        global_ignore.write_text("local.cfg\n")
        assert _files(cp, cp.create().id) == {"app.py"}
        assert _files(cp, cp.create().id) == {"app.py"}  # and again, from the cache
        exclude.write_text("")
        assert _files(cp, cp.create().id) == {"app.py", "secret.env"}
        global_ignore.unlink()
        assert _files(cp, cp.create().id) == {"app.py", "secret.env", "deep/er/local.cfg"}


def test_a_linked_worktree_reads_the_common_info_exclude(tmp_path: Path, home: Path) -> None:
    main = tmp_path / "main"
    (main / ".git" / "worktrees" / "wt" ).mkdir(parents=True)
    (main / ".git" / "info").mkdir()
    (main / ".git" / "info" / "exclude").write_text("*.secret\n")
    (main / ".git" / "worktrees" / "wt" / "commondir").write_text("../..\n")
    root = tmp_path / "wt"
    root.mkdir()
    (root / ".git").write_text(f"gitdir: {main}/.git/worktrees/wt\n")
    _touch(root, "a.py", "b.secret")
    rules = IgnoreRules.load(os.fsencode(root))
    assert rules.is_ignored_path(b"b.secret", is_dir=False)
    assert not rules.is_ignored_path(b"a.py", is_dir=False)


def test_unreadable_or_special_exclude_files_count_as_empty(tmp_path: Path, home: Path) -> None:
    root = tmp_path / "ws"
    _repo(root)
    (root / ".git" / "info" / "exclude").unlink(missing_ok=True)
    os.mkfifo(root / ".git" / "info" / "exclude")  # opening it must not wait for a writer
    (home / ".gitconfig").write_text("[core]\n\texcludesFile = /nonexistent/ignore\n")
    assert read_git_excludes(os.fspath(root)).empty


@pytest.mark.parametrize(("text", "expected"), [
    (b"[core]\n\texcludesFile = a\n", b"a"),
    (b"[Core]\n\tEXCLUDESFILE=a b  \n", b"a b"),
    (b"[core] excludesfile = x ; comment\n", b"x"),
    (b'[core]\n\texcludesfile = "a # b" c\n', b"a # b c"),
    (b"[core]\n\texcludesfile = a\\\nb\n", b"ab"),
    (b'[core]\n\texcludesfile = a\\"b\\\\c\n', b'a"b\\c'),
    (b'[core "sub"]\n\texcludesfile = no\n[core.x]\nexcludesfile = no\n', None),
    (b"[core]\n\texcludesfile = a\n[core]\n\texcludesfile = b\n", b"b"),
    (b"[other]\n\texcludesfile = a\n", None),
    (b"[core]\n\t# excludesfile = a\n", None),
])
def test_config_values_are_parsed_as_git_does(text: bytes, expected: bytes | None) -> None:
    assert config_value(text, "core", "excludesFile") == expected


@needs_git
@pytest.mark.parametrize(("text", "expected"), [
    (b"[core]\n\texcludesFile = a\n", "a"),
    (b"[core] excludesfile = x ; comment\n", "x"),
    (b'[core]\n\texcludesfile = "a # b" c\n', "a # b c"),
    (b"[core]\n\texcludesfile = a\\\nb\n", "ab"),
])
def test_config_parsing_agrees_with_git_config(tmp_path: Path, text: bytes, expected: str) -> None:
    assert GIT is not None
    path = tmp_path / "config"
    path.write_bytes(text)
    out = subprocess.run([GIT, "config", "--file", os.fspath(path), "core.excludesFile"],
                         capture_output=True, check=True).stdout.decode().rstrip("\n")
    assert out == expected == config_value(text, "core", "excludesFile").decode()  # type: ignore[union-attr]


# -- generated patterns against git ----------------------------------------------------------

_FILES = ("a.log", "b.txt", "c", "d/a.log", "d/b.txt", "d/e/c", "d/e/f.log", "g/h/b.txt",
          "g/c.log", "x.tmp")
_PATTERNS = st.sampled_from([
    "*.log", "!*.log", "a.log", "!a.log", "/a.log", "d/", "!d/", "d", "d/e/", "!d/e/",
    "e/", "b.txt", "!b.txt", "/b.txt", "d/*.txt", "!d/b.txt", "**/c", "!**/c", "g/**",
    "!g/h/", "g/h/**", "*.tmp", "!x.tmp", "*/a.log", "d/**/f.log", "!d/e/f.log", "[a-c]",
    "?.tmp", "#c", "c ", "\\!x", "h/", "!h/",
])
_SOURCE = st.lists(_PATTERNS, max_size=5)


@needs_git
@settings(max_examples=scale(30, 300), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(root_ignore=_SOURCE, sub_ignore=_SOURCE, info=_SOURCE, global_=_SOURCE)
def test_generated_patterns_match_git(root_ignore: list[str], sub_ignore: list[str],
                                      info: list[str], global_: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        home = base / "home"
        (home / ".config" / "git").mkdir(parents=True)
        root = base / "ws"
        _repo(root)
        _touch(root, *_FILES)
        (root / ".gitignore").write_text("\n".join(root_ignore) + "\n")
        (root / "d" / ".gitignore").write_text("\n".join(sub_ignore) + "\n")
        (root / ".git" / "info" / "exclude").write_text("\n".join(info) + "\n")
        (home / ".config" / "git" / "ignore").write_text("\n".join(global_) + "\n")
        env = _env(home)
        expected = _git_untracked(root, env)
        rules = IgnoreRules.load(os.fsencode(root),
                                 git_excludes=read_git_excludes(os.fspath(root), env))
        names = (*_FILES, ".gitignore", "d/.gitignore")
        captured = {n for n in names if not rules.is_ignored_path(os.fsencode(n), is_dir=False)}
        assert captured == expected, (root_ignore, sub_ignore, info, global_)
