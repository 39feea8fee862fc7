"""`checkpoints.paths`: the checked boundary between manifest/user paths and the filesystem.

Pure functions, tested with literals and hypothesis: whatever `parse_relpath` accepts stays
under the root when joined to it, and everything else is refused with `UnsafePath`.
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt.checkpoints.errors import UnsafePath
from ckpt.checkpoints.paths import (
    ancestors,
    join_rel,
    parent_rel,
    parse_relpath,
    to_fs_path,
    user_path_to_rel,
)

ROOT = "/srv/space"


@pytest.mark.parametrize("good", [
    "a", "a/b/c", "...", "..a", "a..", ".hidden/.x", "-rf", "with space/x", "new\nline",
    b"bad\xff\xfe/name", "snow ☃", "back\\slash", "a/.../b",
])
def test_parse_relpath_accepts_relative_paths_of_plain_names(good: str | bytes) -> None:
    parsed = parse_relpath(good)
    assert isinstance(parsed, bytes)
    assert parsed == os.fsencode(good)


@pytest.mark.parametrize("bad", [
    "", b"", "/", "/etc/passwd", "//x", "..", "../x", "a/..", "a/../b", ".", "./a", "a/.",
    "a//b", "a/", "a\0b", b"a\0", "\ud800", "a/\udfff",
])
def test_parse_relpath_refuses_absolute_dot_empty_and_nul(bad: str | bytes) -> None:
    with pytest.raises(UnsafePath) as caught:
        parse_relpath(bad)
    assert isinstance(caught.value, ValueError)
    assert str(caught.value)  # renders without raising, whatever the input


def test_non_utf8_text_from_the_command_line_round_trips() -> None:
    text = os.fsdecode(b"caf\xe9.txt")  # how argv carries a Latin-1 name
    assert parse_relpath(text) == b"caf\xe9.txt"


def test_to_fs_path_joins_under_the_root_and_refuses_escapes() -> None:
    assert to_fs_path(b"/r", parse_relpath("a/b")) == b"/r/a/b"
    for bad in (b"../x", b"/abs", b"a/../../x", b"a\0"):
        with pytest.raises(UnsafePath):
            to_fs_path(b"/r", bad)  # type: ignore[arg-type]


def test_small_helpers() -> None:
    assert ancestors(parse_relpath("a/b/c")) == [b"a", b"a/b"]
    assert ancestors(parse_relpath("a")) == []
    assert parent_rel(parse_relpath("a/b/c")) == b"a/b"
    assert parent_rel(parse_relpath("a")) is None
    assert join_rel(None, b"x") == b"x"
    assert join_rel(parse_relpath("a/b"), b"x") == b"a/b/x"


@pytest.mark.parametrize(("path", "cwd", "expected"), [
    ("/srv/space/a.txt", None, b"a.txt"),
    ("a.txt", "/srv/space", b"a.txt"),
    ("b/../a.txt", "/srv/space", b"a.txt"),
    ("../../space/a.txt", "/srv/space/sub", b"a.txt"),
    ("x", "/srv/space/sub/dir", b"sub/dir/x"),
    ("/srv/space/./sub//x/", None, b"sub/x"),
])
def test_user_path_to_rel_resolves_against_cwd(path: str, cwd: str | None,
                                               expected: bytes) -> None:
    assert user_path_to_rel(ROOT, path, cwd) == expected


@pytest.mark.parametrize(("path", "cwd"), [
    ("/srv/space", None),  # the root itself
    ("/srv/space/", None),
    (".", "/srv/space"),
    ("/srv/other/a.txt", None),
    ("/srv/spaceship/a.txt", None),  # shares the root's name as a prefix
    ("../a.txt", "/srv/space"),
    ("a/../../a.txt", "/srv/space"),
    ("/etc/passwd", None),
    ("a.txt", "/elsewhere"),
    ("/", None),
])
def test_user_path_to_rel_refuses_paths_outside_the_root(path: str, cwd: str | None) -> None:
    with pytest.raises(UnsafePath):
        user_path_to_rel(ROOT, path, cwd)


def test_user_path_to_rel_defaults_to_the_root_not_the_process_cwd(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    root = os.path.dirname(os.getcwd())
    assert user_path_to_rel(root, "x/y") == b"x/y"
    assert user_path_to_rel(root, "x/y", os.getcwd()) == b"sub/x/y"
    with pytest.raises(UnsafePath):
        user_path_to_rel(root, "../x")


# -- properties ------------------------------------------------------------------------------

_components = st.one_of(
    st.sampled_from([b"", b".", b"..", b"...", b"a", b"-x", b"\0", b"/", b"\xff", b"a b",
                     b"\n", b".git"]),
    st.binary(min_size=0, max_size=4),
)
_raw_paths = st.lists(_components, min_size=0, max_size=6).map(b"/".join)


@settings(max_examples=400, deadline=None)
@given(raw=_raw_paths)
def test_accepted_paths_join_under_the_root_without_escaping(raw: bytes) -> None:
    root = b"/srv/space"
    try:
        rel = parse_relpath(raw)
    except UnsafePath:
        parts = raw.split(b"/")
        assert not raw or b"\0" in raw or any(p in (b"", b".", b"..") for p in parts)
        return
    joined = to_fs_path(root, rel)
    normalized = posixpath.normpath(joined)
    assert normalized == joined  # nothing for normalization to collapse
    assert normalized.startswith(root + b"/")
    assert posixpath.relpath(normalized, root) == rel
    assert user_path_to_rel(os.fsdecode(root), os.fsdecode(joined)) == rel


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=12))
def test_any_text_is_either_a_safe_relpath_or_refused(text: str) -> None:
    try:
        rel = parse_relpath(text)
    except UnsafePath:
        return
    assert posixpath.normpath(b"/r/" + rel).startswith(b"/r/")
    assert rel.split(b"/") == [p for p in rel.split(b"/") if p not in (b"", b".", b"..")]


def _resolve(cwd: str, typed: str) -> str:
    resolved = posixpath.normpath(posixpath.join(cwd, typed))
    return "/" + resolved.lstrip("/")  # on Linux, "//x" names "/x" (normpath keeps it)


@settings(max_examples=300, deadline=None)
@given(path=st.lists(st.sampled_from(["a", "b", "..", ".", "", "space", "work"]),
                     max_size=6).map("/".join),
       absolute=st.booleans())
def test_user_paths_are_inside_the_root_or_refused(path: str, absolute: bool) -> None:
    cwd = "/srv/space/sub"
    typed = "/" + path if absolute else path
    resolved = _resolve(cwd, typed)
    try:
        rel = user_path_to_rel(ROOT, typed, cwd)
    except UnsafePath:
        assert resolved == ROOT or not resolved.startswith(ROOT + "/")
        return
    assert resolved == ROOT + "/" + os.fsdecode(rel)
