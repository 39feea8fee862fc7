"""`ckpt diff` for people: `--patch`, `--stat`, `--name-only`, `--exit-code`, `--tool-call`,
`--turn`, and the patch text in `--json`.

The workspace is also a git repository (ckpt leaves `.git` out of its checkpoints and its store
holds a `.gitignore`), so the same two states are committed to git's index and checkpointed:
`git diff --cached` must print what `ckpt diff A B --patch` prints (less git's `index` lines),
and `git diff --cached --stat` what `ckpt diff A B --stat` prints, in the same 80 columns.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CkptIn = CkptProc = Callable[..., Any]

GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "COLUMNS": "80"}
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def create(ckpt_in: CkptIn, *args: str) -> str:
    run = ckpt_in("create", *args)
    assert run.code == 0, run.stderr
    return run.stdout.strip()


def git(ws: Path, *args: str) -> bytes:
    done = subprocess.run(["git", "-c", "core.quotepath=false", *args], cwd=ws,
                          capture_output=True, check=True,
                          env={**os.environ, **GIT_ENV, "HOME": str(ws.parent)})
    return done.stdout


def drop_index(text: bytes) -> bytes:
    return b"".join(line for line in text.splitlines(keepends=True)
                    if not line.startswith(b"index "))


def change_tree(ws: Path) -> None:
    """From make_tree's state (a.txt, sub/b.txt, run.sh 755, link -> a.txt) to another."""
    (ws / "a.txt").write_text("alpha\nbeta\n")
    (ws / "sub" / "b.txt").unlink()
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(120)))
    (ws / "run.sh").chmod(0o644)
    (ws / "link").unlink()
    (ws / "link").symlink_to("sub")
    (ws / "logo.bin").write_bytes(b"\x89PNG\0\0\x01")
    (ws / "no eol.txt").write_bytes(b"last line")
    (ws / "日本語のファイル.txt").write_text("wide name\n")  # two columns a character in --stat


@pytest.fixture
def two_states(initialized: Path, ckpt_in: CkptIn) -> tuple[str, str]:
    """Checkpoints A and B of the workspace, both also staged in git (B is in the index)."""
    git(initialized, "init", "-q", ".")
    git(initialized, "add", "-A")
    git(initialized, "commit", "-qm", "A")
    a = create(ckpt_in, "--reason", "pre-tool", "--tool-call", "call_1", "--turn", "t1")
    change_tree(initialized)
    b = create(ckpt_in, "--reason", "post-tool", "--tool-call", "call_1", "--turn", "t1")
    git(initialized, "add", "-A")
    return a, b


@needs_git
def test_patch_is_what_git_diff_prints(two_states: tuple[str, str], ckpt_proc: CkptProc,
                                       initialized: Path) -> None:
    a, b = two_states
    run = ckpt_proc("diff", a, b, "--patch")
    assert (run.code, run.stderr) == (0, "")
    expected = drop_index(git(initialized, "diff", "--cached", "--no-renames", "--no-color"))
    assert run.stdout_bytes == expected
    assert b"Binary files a/logo.bin and b/logo.bin differ" not in run.stdout_bytes  # added
    assert b"Binary files /dev/null and b/logo.bin differ\n" in run.stdout_bytes
    assert b"old mode 100755\nnew mode 100644\n" in run.stdout_bytes
    assert ckpt_proc("diff", a, b, "-p").stdout_bytes == run.stdout_bytes


@needs_git
def test_stat_is_what_git_diff_stat_prints(two_states: tuple[str, str], ckpt_proc: CkptProc,
                                           initialized: Path) -> None:
    a, b = two_states
    run = ckpt_proc("diff", a, b, "--stat", env={"COLUMNS": "80"})
    assert (run.code, run.stderr) == (0, "")
    expected = git(initialized, "diff", "--cached", "--no-renames", "--stat")
    assert run.stdout_bytes == expected
    assert re.search(rb"^ logo\.bin +\| +Bin 0 -> 7 bytes$", run.stdout_bytes, re.MULTILINE)
    both = ckpt_proc("diff", a, b, "--stat", "--patch", env={"COLUMNS": "80"})
    assert both.stdout_bytes == expected + b"\n" + drop_index(
        git(initialized, "diff", "--cached", "--no-renames", "--no-color"))


@needs_git
def test_stat_scales_to_the_columns_given(initialized: Path, ckpt_in: CkptIn,
                                          ckpt_proc: CkptProc) -> None:
    git(initialized, "init", "-q", ".")
    git(initialized, "add", "-A")
    git(initialized, "commit", "-qm", "A")
    a = create(ckpt_in)
    (initialized / "a.txt").write_text("".join(f"{i}\n" for i in range(300)))
    (initialized / "a-very-long-directory-name" / "and-a-long-file-name").mkdir(parents=True)
    (initialized / "a-very-long-directory-name" / "and-a-long-file-name" / "x.txt").write_text(
        "x\n" * 7)
    git(initialized, "add", "-A")
    for columns in ("40", "80", "132"):
        run = ckpt_proc("diff", a, "--stat", env={"COLUMNS": columns})
        expected = subprocess.run(
            ["git", "diff", "--cached", "--stat"], cwd=initialized, capture_output=True,
            check=True, env={**os.environ, **GIT_ENV, "COLUMNS": columns}).stdout
        assert run.stdout_bytes == expected, columns


def test_name_only_and_exit_code(initialized: Path, ckpt_in: CkptIn, ckpt_proc: CkptProc) -> None:
    a = create(ckpt_in)
    same = ckpt_proc("diff", a, "--exit-code")
    assert (same.code, same.stdout, same.stderr) == (0, "", "")
    (initialized / "a.txt").write_text("changed\n")
    (initialized / "new.txt").write_text("new\n")
    run = ckpt_proc("diff", a, "--exit-code", "--name-only")
    # exit 1 for "they differ" has no error line; exit 1 for a user error has one
    assert (run.code, run.stdout, run.stderr) == (1, "a.txt\nnew.txt\n", "")
    bad = ckpt_proc("diff", "ckpt-0000000000000-zzzzzzzz", "--exit-code")
    assert bad.code == 1 and bad.stderr.startswith("ckpt: error: unknown checkpoint")
    assert ckpt_proc("diff", a, "--name-only").code == 0  # without --exit-code: 0
    for flags in (["--patch"], ["--stat"], ["--json"], ["--json", "--patch"]):
        assert ckpt_proc("diff", a, "--exit-code", *flags).code == 1, flags


def test_json_patch_adds_patch_and_binary(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    (initialized / "a.txt").write_bytes(b"caf\xe9 \xff\n")  # not UTF-8
    (initialized / "bin").write_bytes(b"\0\1")
    plain = json.loads(ckpt_in("diff", a, "--json").stdout)
    assert plain == [{"path": "a.txt", "change": "M"}, {"path": "bin", "change": "A"}]
    run = ckpt_in("diff", a, "--json", "--patch")
    assert run.code == 0
    docs = json.loads(run.stdout)
    assert [list(d) for d in docs] == [["path", "change", "patch", "binary", "insertions",
                                        "deletions"]] * 2
    text = ckpt_in("diff", a, "--patch").stdout_bytes
    # lossless: the patch string is the patch bytes through utf-8 + surrogateescape
    assert "".join(d["patch"] for d in docs).encode("utf-8", "surrogateescape") == text
    assert b"+caf\xe9 \xff\n" in text
    assert (docs[0]["binary"], docs[0]["insertions"], docs[0]["deletions"]) == (False, 1, 1)
    assert docs[1]["binary"] is True and "Binary files /dev/null and b/bin differ" in docs[1]["patch"]


def test_not_captured_is_named_on_stderr_not_patched(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    assert ckpt_in("config", "set", "max_file_size", "40").code == 0
    (initialized / "a.txt").write_text("now longer than the forty bytes allowed here\n")
    run = ckpt_in("diff", a, "--patch")
    assert run.code == 0 and run.stdout == ""
    assert "ckpt: warning: not captured: a.txt (too-large)" in run.stderr
    docs = json.loads(ckpt_in("diff", a, "--json", "--patch").stdout)
    assert docs == [{"path": "a.txt", "change": "S", "reason": "too-large", "patch": None,
                     "binary": False, "insertions": 0, "deletions": 0}]
    assert ckpt_in("diff", a).stdout == "S a.txt (too-large)\n"


def test_tool_call_and_turn_diff_the_pair_around_them(initialized: Path, ckpt_in: CkptIn,
                                                       ckpt_proc: CkptProc) -> None:
    create(ckpt_in, "--tool-call", "other")
    pre = create(ckpt_in, "--reason", "pre-tool", "--tool-call", "call_7", "--turn", "t3")
    (initialized / "a.txt").write_text("edited by the tool\n")
    # another session's checkpoint of the same tool call counts (any session, this root)
    post = ckpt_in("--session", "hook", "create", "--reason", "post-tool", "--tool-call",
                   "call_7", "--turn", "t3").stdout.strip()
    (initialized / "later.txt").write_text("after the tool call\n")
    by_ids = ckpt_proc("diff", pre, post, "-p").stdout
    run = ckpt_proc("diff", "--tool-call", "call_7", "-p")
    assert (run.code, run.stderr) == (0, "")
    assert run.stdout == by_ids and "+edited by the tool" in run.stdout
    assert "later.txt" not in run.stdout
    turn = ckpt_proc("diff", "--turn", "t3", "--name-only")
    assert (turn.code, turn.stdout) == (0, "a.txt\n")
    # one checkpoint alone: it against the working tree, said on stderr
    alone = ckpt_proc("diff", "--tool-call", "other", "--name-only")
    assert alone.code == 0 and alone.stdout == "a.txt\nlater.txt\n"
    assert alone.stderr.startswith("ckpt: note: only ckpt-") and "tool call other" in alone.stderr
    none = ckpt_proc("diff", "--turn", "t99")
    assert none.code == 3 and "no checkpoint on this root with turn t99" in none.stderr


@pytest.mark.parametrize("args", [
    [], ["--tool-call", "c", "--turn", "t"], ["ID", "--turn", "t"], ["ID", "--tool-call", "c"],
    ["ID", "--name-only", "--patch"], ["ID", "--name-only", "--stat"], ["ID", "--json", "--stat"],
    ["ID", "--json", "--name-only"],
])
def test_conflicting_flags_are_usage_errors(initialized: Path, ckpt_in: CkptIn,
                                            args: list[str]) -> None:
    a = create(ckpt_in)
    run = ckpt_in("diff", *[a if x == "ID" else x for x in args])
    assert run.code == 2, run.stderr
    assert run.stdout == ""
