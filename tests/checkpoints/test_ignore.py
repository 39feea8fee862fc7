"""Ignore rules (checkpoints.snapshot.ignore): gitignore semantics, checked against real git."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt.checkpoints.snapshot.ignore import DirRules, IgnoreRules

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


def make_tree(root: Path, files: Iterable[bytes], ignores: Mapping[bytes, bytes] = {}) -> None:
    """Create `files` (root-relative bytes paths, parents implied) and ignore files."""
    for rel in files:
        path = os.path.join(bytes(root), rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb"):
            pass
    for rel, content in ignores.items():
        path = os.path.join(bytes(root), rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as stream:
            stream.write(content)


def walk(rules: IgnoreRules, root: Path) -> set[bytes]:
    """The files a snapshot walk keeps: scandir recursion through root_context/enter/is_ignored."""
    kept: set[bytes] = set()
    stack: list[tuple[bytes, bytes, DirRules]] = [(bytes(root), b"", rules.root_context())]
    while stack:
        path, rel, ctx = stack.pop()
        with os.scandir(path) as entries:
            for entry in entries:
                is_dir = entry.is_dir(follow_symlinks=False)
                if ctx.is_ignored(entry.name, is_dir=is_dir):
                    continue
                if is_dir:
                    stack.append((entry.path, rel + entry.name + b"/", ctx.enter(entry.name)))
                else:
                    kept.add(rel + entry.name)
    return kept


def kept_files(root: Path, **options: object) -> set[bytes]:
    return walk(IgnoreRules.load(bytes(root), **options), root)  # type: ignore[arg-type]


def git_kept_files(root: Path) -> set[bytes]:
    """What git keeps (untracked, not ignored) in a fresh repository at `root`."""
    home = root.parent / "git-home"
    home.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home), XDG_CONFIG_HOME=str(home), GIT_CONFIG_NOSYSTEM="1",
               GIT_CONFIG_GLOBAL=os.devnull)
    git = [GIT or "git", "-C", str(root)]
    subprocess.run([*git, "init", "-q"], env=env, check=True)
    out = subprocess.run([*git, "ls-files", "-o", "--exclude-standard", "-z"], env=env,
                         check=True, capture_output=True).stdout
    return {path for path in out.split(b"\0") if path}


# -- semantics, one behaviour each -------------------------------------------------------------


def test_nested_gitignore_applies_relative_to_its_directory(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"a.log", b"sub/a.log", b"sub/keep", b"sub/x/keep", b"other/keep"],
              {b"sub/.gitignore": b"/keep\n*.log\n"})
    assert kept_files(tmp_path) == {b"a.log", b"sub/.gitignore", b"sub/x/keep", b"other/keep"}


def test_deeper_file_overrides_shallower(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"a.o", b"lib/a.o", b"lib/b.o"],
              {b".gitignore": b"*.o\n", b"lib/.gitignore": b"!a.o\n"})
    assert kept_files(tmp_path) == {b".gitignore", b"lib/.gitignore", b"lib/a.o"}


def test_negation_last_match_wins(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"a.txt", b"b.txt", b"c.txt"],
              {b".gitignore": b"*.txt\n!b.txt\nc.txt\n!c.txt\n"})
    assert kept_files(tmp_path) == {b".gitignore", b"b.txt", b"c.txt"}


def test_file_cannot_be_reincluded_under_an_ignored_directory(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"build/keep.txt", b"build/x.o", b"logs/a/keep"],
              {b".gitignore": b"build/\n!build/keep.txt\nlogs\n", b"logs/a/.gitignore": b"!keep\n"})
    rules = IgnoreRules.load(bytes(tmp_path))
    assert kept_files(tmp_path) == {b".gitignore"}
    assert rules.is_ignored_path(b"build/keep.txt", is_dir=False)
    assert rules.is_ignored_path(b"logs/a/keep", is_dir=False)
    assert rules.is_ignored_path(b"build", is_dir=True)


def test_directory_contents_can_be_reincluded_when_only_contents_are_ignored(
    tmp_path: Path,
) -> None:
    make_tree(tmp_path, [b"build/keep.txt", b"build/x.o"],
              {b".gitignore": b"build/*\n!build/keep.txt\n"})
    assert kept_files(tmp_path) == {b".gitignore", b"build/keep.txt"}


def test_anchored_and_unanchored_patterns(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"foo", b"d/foo", b"bar", b"d/bar", b"a/b", b"x/a/b"],
              {b".gitignore": b"/foo\nbar\na/b\n"})
    assert kept_files(tmp_path) == {b".gitignore", b"d/foo", b"x/a/b"}


def test_reincluded_directory_does_not_shield_its_files_from_shallower_patterns(
    tmp_path: Path,
) -> None:
    # m/A is re-included by m/.gitignore, but "!A/" matches only the directory: for m/A/x.c git
    # falls through to the root's "*.c". (A per-file check of "A/x.c" against m's patterns with
    # pathspec's check_file would stop at "!A/", because it also matches what lies inside A.)
    make_tree(tmp_path, [b"m/A/x.c", b"m/A/y.h"], {b".gitignore": b"A/\n*.c\n", b"m/.gitignore": b"!A/\n"})
    assert kept_files(tmp_path) == {b".gitignore", b"m/.gitignore", b"m/A/y.h"}


def test_anchored_pattern_with_glob_segment_reaches_only_matching_directories(
    tmp_path: Path,
) -> None:
    files = [b"src/x/gen/a", b"src/y/gen/a", b"src/x/y/gen/a", b"other/x/gen/a", b"src/gen/a"]
    make_tree(tmp_path, files, {b".gitignore": b"/src/*/gen/\n"})
    assert kept_files(tmp_path) == {b".gitignore", b"src/x/y/gen/a", b"other/x/gen/a", b"src/gen/a"}


def test_malformed_patterns_do_not_break_the_walk(tmp_path: Path) -> None:
    # A trailing backslash and an unterminated range match nothing, as in git; "[z-a]" is a range
    # Python's re rejects (git would match "z" with it) and must not raise.
    make_tree(tmp_path, [b"a", b"foo", b"b", b"q"], {b".gitignore": b"[z-a]\nfoo\\\n[a-\nb\n"})
    assert kept_files(tmp_path) == {b".gitignore", b"a", b"foo", b"q"}


def test_directory_only_pattern_skips_files(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"build", b"sub/build/x", b"out/x"], {b".gitignore": b"build/\nout/\n"})
    assert kept_files(tmp_path) == {b".gitignore", b"build"}


def test_double_star_forms(tmp_path: Path) -> None:
    files = [b"a/x/y/b", b"a/b", b"c/a/b", b"logs/q/r.log", b"top.log", b"d/e/f", b"d/g"]
    make_tree(tmp_path, files, {b".gitignore": b"a/**/b\n**/q/*.log\nd/**/\n"})
    # d/**/ matches the directories inside d, not d itself nor the files directly in it.
    assert kept_files(tmp_path) == {b".gitignore", b"c/a/b", b"top.log", b"d/g"}


def test_trailing_double_star_ignores_contents_not_the_directory(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"gen/a", b"gen/b/c", b"keep"], {b".gitignore": b"gen/**\n!gen/b/\n"})
    rules = IgnoreRules.load(bytes(tmp_path))
    assert not rules.is_ignored_path(b"gen", is_dir=True)
    assert kept_files(tmp_path) == {b".gitignore", b"keep"}  # gen/b/c: matched by gen/** itself


def test_comments_escapes_and_trailing_spaces(tmp_path: Path) -> None:
    files = [b"#note", b"!bang", b"sp ", b"tail", b"comment"]
    make_tree(tmp_path, files, {b".gitignore": b"# comment\n\\#note\n\\!bang\nsp\\ \ntail   \n"})
    assert kept_files(tmp_path) == {b".gitignore", b"comment"}


def test_crlf_and_bom_in_ignore_file(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"a", b"b", b"c"], {b".gitignore": b"\xef\xbb\xbfa\r\nb\r\n"})
    assert kept_files(tmp_path) == {b".gitignore", b"c"}


def test_ckptignore_applies_without_gitignore(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"a.tmp", b"a.log", b"sub/b.tmp", b"sub/b.log"],
              {b".gitignore": b"*.log\n", b"sub/.ckptignore": b"*.tmp\n"})
    assert kept_files(tmp_path, use_gitignore=False) == {
        b".gitignore", b"a.tmp", b"a.log", b"sub/.ckptignore", b"sub/b.log"}
    assert kept_files(tmp_path) == {b".gitignore", b"a.tmp", b"sub/.ckptignore"}


def test_ckptignore_takes_precedence_over_gitignore_in_the_same_directory(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"a.log", b"b.log", b"keep"],
              {b".gitignore": b"*.log\nkeep\n", b".ckptignore": b"!a.log\n"})
    assert kept_files(tmp_path) == {b".gitignore", b".ckptignore", b"a.log"}


def test_extra_patterns_act_after_root_files_and_before_deeper_ones(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"a.bin", b"b.bin", b"sub/c.bin", b"sub/d.bin", b"x/a.bin"],
              {b".gitignore": b"!b.bin\n", b"sub/.gitignore": b"!c.bin\n"})
    kept = kept_files(tmp_path, extra_patterns=["*.bin", "/x/"])
    assert kept == {b".gitignore", b"sub/.gitignore", b"sub/c.bin"}


def test_git_is_always_ignored_even_when_negated(tmp_path: Path) -> None:
    make_tree(tmp_path, [b".git/HEAD", b"sub/.git", b"sub/f", b"sub/deeper/.git/config"],
              {b".gitignore": b"!.git\n!.git/\n", b".ckptignore": b"!**/.git\n"})
    rules = IgnoreRules.load(bytes(tmp_path), extra_patterns=["!.git"])
    assert walk(rules, tmp_path) == {b".gitignore", b".ckptignore", b"sub/f"}
    assert rules.is_ignored_path(b"sub/.git", is_dir=False)
    assert rules.is_ignored_path(b".git/HEAD", is_dir=False)


def test_excluded_store_path_is_always_ignored(tmp_path: Path) -> None:
    make_tree(tmp_path, [b".ckpt/objects/x", b"nested/store/y", b"nested/keep", b"store/z"],
              {b".ckptignore": b"!.ckpt/\n!store\n"})
    rules = IgnoreRules.load(bytes(tmp_path), excluded=[b".ckpt", b"nested/store"])
    assert walk(rules, tmp_path) == {b".ckptignore", b"nested/keep", b"store/z"}
    assert rules.is_ignored_path(b"nested/store/y", is_dir=False)
    assert not rules.is_ignored_path(b"store/z", is_dir=False)


def test_excluded_path_must_be_root_relative(tmp_path: Path) -> None:
    for bad in (b"/abs", b"a/../b", b"", b"a/"):
        with pytest.raises(ValueError):
            IgnoreRules.load(bytes(tmp_path), excluded=[bad])
    with pytest.raises(ValueError):
        IgnoreRules.load(b"relative/root")


def test_non_utf8_names_and_patterns(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"caf\xe9.o", b"caf\xe9.txt", b"\xff/x", b"ok/\xfe"],
              {b".gitignore": b"caf\xe9.*\n!*.txt\n\xff/\nok/?\n"})
    rules = IgnoreRules.load(bytes(tmp_path))
    assert walk(rules, tmp_path) == {b".gitignore", b"caf\xe9.txt"}
    assert rules.is_ignored_path(b"\xff/x", is_dir=False)
    assert rules.is_ignored_path(b"ok/\xfe", is_dir=False)


def test_unreadable_or_symlinked_ignore_file_counts_as_empty(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"a/x", b"b/x", b"c/x"], {b"a/.gitignore": b"x\n", b"elsewhere": b"x\n"})
    (tmp_path / "b" / ".gitignore").symlink_to(tmp_path / "elsewhere")  # git does not follow it
    (tmp_path / "c" / ".gitignore").mkdir()
    os.mkfifo(tmp_path / "c" / ".ckptignore")  # must not block the walk
    os.chmod(tmp_path / "a" / ".gitignore", 0)
    try:
        rules = IgnoreRules.load(bytes(tmp_path))
        kept = walk(rules, tmp_path)
    finally:
        os.chmod(tmp_path / "a" / ".gitignore", 0o644)
    assert {b"b/x", b"c/x"} <= kept
    unreadable = {os.path.relpath(p, bytes(tmp_path)) for p in rules.unreadable}
    assert {b"b/.gitignore", b"c/.gitignore", b"c/.ckptignore"} <= unreadable
    if os.geteuid() != 0:  # root reads a mode-000 file anyway
        assert b"a/x" in kept and b"a/.gitignore" in unreadable


def test_rules_in_a_directory_without_ignore_files_are_shared(tmp_path: Path) -> None:
    make_tree(tmp_path, [b"a/b/c/d.o"], {b".gitignore": b"*.o\n/top\n"})
    root = IgnoreRules.load(bytes(tmp_path)).root_context()
    deep = root.enter(b"a").enter(b"b")
    assert deep._pre is deep.enter(b"c")._pre  # no re-evaluation of ancestors per directory
    assert deep.enter(b"c").is_ignored(b"d.o", is_dir=False)
    assert not root.enter(b"a").is_ignored(b"top", is_dir=False)


def test_pathspec_regex_shapes_this_module_relies_on() -> None:
    # checkpoints.snapshot.ignore reads these shapes to tell name patterns, "everything" patterns and
    # trailing "/**" apart; a pathspec release that changes them must fail here, not silently.
    from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

    def source(line: str) -> str | None:
        return GitIgnoreSpecPattern.pattern_to_regex(line)[0]

    assert source("foo") == "^(?:.+/)?foo(?:(?P<ps_d>/)|$)"
    assert source("foo/") == "^(?:.+/)?foo(?P<ps_d>/)"
    assert source("*") == source("**") == "."
    assert source("*/") == source("**/") == "(?P<ps_d>/)"
    assert source("a/**") == "^a/"
    assert source("a/**/") == "^a(?P<ps_d>/)"


# -- differential: the same trees and patterns through real git -----------------------------

NAMES = [b"a", b"b", b"ab", b"c.o", b"d.txt", b"build", b"x y", b".h", b"#n", b"!n", b"\xff"]
SEGMENTS = ["a", "b", "ab", "c.o", "d.txt", "build", "x y", ".h", "\udcff", "*", "**", "?",
            "[ab]", "*.o", "b*", "[!a]*", "\\#n", "\\!n", "x\\ y", "*.txt", "a?"]
LINES = ["", "# c", "*", "**", "**/", "*/", "/", "**/a", "a/**", "a/**/b", "a/**/", "**/build/",
         "!*/", "x y  ", "x y\\ ", "*.o\r", "\\", "[a-", "!", "**/*.o", "/**/a", "!**/b/"]


@st.composite
def patterns(draw: st.DrawFn) -> str:
    if draw(st.integers(0, 4)) == 0:
        return draw(st.sampled_from(LINES))
    segs = draw(st.lists(st.sampled_from(SEGMENTS), min_size=1, max_size=3))
    bang = draw(st.sampled_from(["", "", "!"]))
    lead = draw(st.sampled_from(["", "", "/"]))
    trail = draw(st.sampled_from(["", "", "/"]))
    return bang + lead + "/".join(segs) + trail


def ignore_text(lines: list[str]) -> bytes:
    return os.fsencode("".join(line + "\n" for line in lines))


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[bytes], dict[bytes, tuple[list[str], list[str]]]]:
    files = draw(st.lists(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4).map(
        lambda parts: b"/".join(parts)), min_size=1, max_size=14))
    # A name can't be both a file and a directory: keep the first use.
    kept: list[bytes] = []
    for path in files:
        prefixes = {b"/".join(path.split(b"/")[:i]) for i in range(1, path.count(b"/") + 1)}
        if all(p not in kept for p in prefixes) and not any(k.startswith(path + b"/") for k in kept):
            kept.append(path)
    dirs = sorted({b""} | {b"/".join(p.split(b"/")[:i]) + b"/" for p in kept
                           for i in range(1, p.count(b"/") + 1)})
    ignores = {}
    for d in draw(st.lists(st.sampled_from(dirs), max_size=4, unique=True)):
        ignores[d] = (draw(st.lists(patterns(), max_size=4)), draw(st.lists(patterns(), max_size=3)))
    return kept, ignores


@needs_git
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases(), extra=st.lists(patterns(), max_size=2), use_gitignore=st.booleans())
def test_walk_and_paths_agree_with_git(
    case: tuple[list[bytes], dict[bytes, tuple[list[str], list[str]]]],
    extra: list[str],
    use_gitignore: bool,
) -> None:
    files, ignores = case
    with tempfile.TemporaryDirectory() as tmp:
        ours, theirs = Path(tmp, "ours"), Path(tmp, "git")
        ours_ignores: dict[bytes, bytes] = {}
        git_ignores: dict[bytes, bytes] = {}
        ignores.setdefault(b"", ([], []))
        for d, (gitignore, ckptignore) in ignores.items():
            ours_ignores[d + b".gitignore"] = ignore_text(gitignore)
            ours_ignores[d + b".ckptignore"] = ignore_text(ckptignore)
            # git sees one file per directory: .gitignore (if honoured), then .ckptignore,
            # then (root) the extra patterns; the .ckptignore entry exists on both sides.
            merged = (gitignore if use_gitignore else []) + ckptignore + (extra if d == b"" else [])
            git_ignores[d + b".gitignore"] = ignore_text(merged)
            git_ignores[d + b".ckptignore"] = b""
        make_tree(ours, files, ours_ignores)
        make_tree(theirs, files, git_ignores)
        expected = git_kept_files(theirs)
        rules = IgnoreRules.load(bytes(ours), use_gitignore=use_gitignore, extra_patterns=extra)
        assert walk(rules, ours) == expected
        every_file = set(files) | set(ours_ignores)
        assert {p for p in every_file if not rules.is_ignored_path(p, is_dir=False)} == expected
