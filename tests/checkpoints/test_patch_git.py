"""Patch text checked against git: `git diff --no-index` on the same pair of trees gives the
same sections (less git's `index` lines), and git applies our patches.

The corpus covers the cases design-26 lists: a one-line change, inserts at the top and the
bottom, a delete, hunks 6 and 7 lines apart (the merge edge), no final newline on either side,
CRLF, empty files, added, deleted, 644 -> 755, a symlink retargeted, a file turned into a
symlink, a NUL file, names with a space and a tab; then changes git places by its
compaction and indent heuristic. Property tests: random edits of a file of distinct lines give
git's hunks exactly; random edits of repetitive lines give a patch `git apply` turns the old
file into the new one with.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ckpt.checkpoints import Checkpoints
from ckpt.checkpoints.diff import linediff
from ckpt.checkpoints.diff.patch import FilePatch, quote_name, render_change
from ckpt.checkpoints.diff.trees import Change
from ckpt.checkpoints.paths import parse_relpath
from ckpt.objstore import EntryKind, TreeEntry
from ckpt.objstore.ids import hash_bytes

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

# path -> ("file", bytes, mode) | ("link", target)
Spec = dict[str, tuple]

NUMBERS = b"".join(b"line %d\n" % i for i in range(1, 31))


def _edit(data: bytes, index: int, new: bytes) -> bytes:
    lines = data.split(b"\n")
    lines[index] = new
    return b"\n".join(lines)


OLD: Spec = {
    "one.txt": ("file", NUMBERS, 0o644),
    "top.txt": ("file", NUMBERS, 0o644),
    "bottom.txt": ("file", NUMBERS, 0o644),
    "delete.txt": ("file", NUMBERS, 0o644),
    "gap6.txt": ("file", NUMBERS, 0o644),
    "gap7.txt": ("file", NUMBERS, 0o644),
    "eol_old.txt": ("file", b"a\nb\nc", 0o644),
    "eol_new.txt": ("file", b"a\nb\nc\n", 0o644),
    "eol_both.txt": ("file", b"a\nb\nc", 0o644),
    "crlf.txt": ("file", b"one\r\ntwo\r\nthree\r\n", 0o644),
    "empty_to_text.txt": ("file", b"", 0o644),
    "text_to_empty.txt": ("file", b"x\ny\n", 0o644),
    "deleted.txt": ("file", b"gone\nfor good\n", 0o644),
    "deleted_empty": ("file", b"", 0o644),
    "mode.sh": ("file", b"#!/bin/sh\necho hi\n", 0o644),
    "mode_and_text.sh": ("file", b"#!/bin/sh\necho hi\n", 0o644),
    "retarget": ("link", b"old/target"),
    "file_to_link": ("file", b"was a file\n", 0o644),
    "link_to_file": ("link", b"somewhere"),
    "nul.bin": ("file", b"head\0tail\n", 0o644),
    "sp ace.txt": ("file", b"left\n", 0o644),
    "tab\there.txt": ("file", b"left\n", 0o644),
    "sub/dir/deep.c": ("file", b"int main(void)\n{\n" + NUMBERS + b"}\n", 0o644),
    "same.txt": ("file", b"unchanged\n", 0o644),
}

NEW: Spec = {
    "one.txt": ("file", _edit(NUMBERS, 14, b"line fifteen"), 0o644),
    "top.txt": ("file", b"new first\n" + NUMBERS, 0o644),
    "bottom.txt": ("file", NUMBERS + b"new last\n", 0o644),
    "delete.txt": ("file", NUMBERS.replace(b"line 10\n", b""), 0o644),
    # changed lines 5 and 12: six equal lines between (one hunk); 5 and 13: seven (two)
    "gap6.txt": ("file", _edit(_edit(NUMBERS, 4, b"five"), 11, b"twelve"), 0o644),
    "gap7.txt": ("file", _edit(_edit(NUMBERS, 4, b"five"), 12, b"thirteen"), 0o644),
    "eol_old.txt": ("file", b"a\nb\nc\n", 0o644),
    "eol_new.txt": ("file", b"a\nb\nc", 0o644),
    "eol_both.txt": ("file", b"a\nB\nc", 0o644),
    "crlf.txt": ("file", b"one\r\n2\r\nthree\r\n", 0o644),
    "empty_to_text.txt": ("file", b"now text\n", 0o644),
    "text_to_empty.txt": ("file", b"", 0o644),
    "added.txt": ("file", b"brand\nnew\n", 0o644),
    "added_empty": ("file", b"", 0o644),
    "added.sh": ("file", b"#!/bin/sh\n", 0o755),
    "added_link": ("link", b"added.txt"),
    "mode.sh": ("file", b"#!/bin/sh\necho hi\n", 0o755),
    "mode_and_text.sh": ("file", b"#!/bin/sh\necho bye\n", 0o755),
    "retarget": ("link", b"new/target"),
    "file_to_link": ("link", b"one.txt"),
    "link_to_file": ("file", b"now a file\n", 0o644),
    "nul.bin": ("file", b"head\0tail, longer\n", 0o644),
    "added.bin": ("file", b"\0\1\2", 0o644),
    "sp ace.txt": ("file", b"right\n", 0o644),
    "tab\there.txt": ("file", b"right\n", 0o644),
    "sub/dir/deep.c": ("file", b"int main(void)\n{\n" + _edit(NUMBERS, 20, b"X") + b"}\n", 0o644),
    "same.txt": ("file", b"unchanged\n", 0o644),
}


def write_tree(root: Path, spec: Spec) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for rel, entry in spec.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if entry[0] == "link":
            os.symlink(entry[1], path)
        else:
            path.write_bytes(entry[1])
            path.chmod(entry[2])


def clear(root: Path) -> None:
    for child in root.iterdir():
        if child.name == ".ckpt":
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def git_sections(tmp: Path) -> dict[bytes, bytes]:
    """`git diff --no-index a b` run in `tmp`, split per path, `diff --git`/`index` dropped."""
    done = subprocess.run(
        ["git", "-c", "core.quotepath=false", "diff", "--no-index", "--no-prefix", "--no-color",
         "--no-ext-diff", "--no-renames", "a", "b"],
        cwd=tmp, capture_output=True, check=False, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1",
                                                         "HOME": str(tmp)})
    assert done.returncode == 1, done.stderr
    return split_sections(done.stdout)


def split_sections(text: bytes) -> dict[bytes, bytes]:
    """Per path (from the `diff --git` line's last name), the lines after it but `index`.
    A type change's two sections fall under one path, in order."""
    sections: dict[bytes, bytes] = {}
    current: bytes | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith(b"diff --git "):
            # "X/P Y/P": both names are P behind a one-letter prefix (git --no-prefix on
            # the dirs a and b names a deletion `a/P a/P`), quoted alike when quoted.
            names = line[len(b"diff --git "):].rstrip(b"\n")
            first = names[: (len(names) - 1) // 2]
            current = b'"' + first[3:] if first.startswith(b'"') else first[2:]
            sections.setdefault(current, b"")
            continue
        if line.startswith(b"index "):
            continue
        assert current is not None
        sections[current] += line
    return sections


def ours(patches: list[FilePatch]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for fp in patches:
        out.update(split_sections(fp.text))
    return out


@pytest.fixture
def pair(tmp_path: Path) -> list[FilePatch]:
    write_tree(tmp_path / "a", OLD)
    write_tree(tmp_path / "b", NEW)
    ws = tmp_path / "ws"
    write_tree(ws, OLD)
    with Checkpoints.init(ws) as cp:
        first = cp.create(label="old").id
        clear(ws)
        write_tree(ws, NEW)
        second = cp.create(label="new").id
        patches = cp.patch(first, second)
        assert cp.patch(first) == patches  # against the working tree: the same
    return patches


def test_corpus_sections_equal_git(pair: list[FilePatch], tmp_path: Path) -> None:
    expected = git_sections(tmp_path)
    got = ours(pair)
    assert sorted(got) == sorted(expected)
    for name in expected:
        assert got[name] == expected[name], name.decode(errors="replace")


def test_counts_kinds_and_binary_flags(pair: list[FilePatch]) -> None:
    by = {fp.path: fp for fp in pair}
    assert b"same.txt" not in by
    assert (by[b"one.txt"].change, by[b"one.txt"].insertions, by[b"one.txt"].deletions) \
        == ("M", 1, 1)
    assert by[b"file_to_link"].change == "T"
    assert by[b"nul.bin"].binary and by[b"added.bin"].binary
    assert (by[b"nul.bin"].insertions, by[b"nul.bin"].old_size, by[b"nul.bin"].new_size) \
        == (0, 10, 18)
    assert by[b"mode.sh"].text.endswith(b"old mode 100644\nnew mode 100755\n")
    assert by[b"added_empty"].text == b"diff --git a/added_empty b/added_empty\nnew file mode 100644\n"


def test_mode_bits_beyond_git_are_kept() -> None:
    old = TreeEntry(b"f", EntryKind.FILE, hash_bytes(b"x\n"), None, 2, None)
    new = TreeEntry(b"f", EntryKind.FILE, hash_bytes(b"x\n"), None, 2, 0o600)
    fp = render_change(Change(parse_relpath(b"f"), "M", old, new), {}.__getitem__)
    assert fp.text == b"diff --git a/f b/f\nold mode 100644\nnew mode 100600\n"


def test_not_captured_has_no_section() -> None:
    fp = render_change(Change(parse_relpath(b"big"), "S", None, None, "too-large"),
                       {}.__getitem__)
    assert (fp.text, fp.reason, fp.change) == (b"", "too-large", "S")


def test_names_are_quoted_like_git() -> None:
    assert quote_name(b"a/plain name") == b"a/plain name"
    assert quote_name("a/café".encode()) == "a/café".encode()  # core.quotepath=false
    assert quote_name(b'a/x"y\\z\n\x01\x7f') == b'"a/x\\"y\\\\z\\n\\001\\177"'


def test_function_line_in_hunk_header_follows_git(tmp_path: Path) -> None:
    """The `@@ ... @@ FUNC` text: the nearest line above starting with a letter, reused by
    the next hunk when none lies between."""
    body = [b"def first():\n"] + [b"    x = %d\n" % i for i in range(40)]
    old = b"".join(body)
    new = old.replace(b"x = 10\n", b"x = ten\n").replace(b"x = 30\n", b"x = thirty\n")
    check_against_git(tmp_path, {"f.py": ("file", old, 0o644)}, {"f.py": ("file", new, 0o644)})


def check_against_git(tmp_path: Path, old: Spec, new: Spec) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    write_tree(a, old)
    write_tree(b, new)
    expected = git_sections(tmp_path)
    patches = [render_change(change, blobs.__getitem__)
               for change, blobs in (_change(rel, old.get(rel), new.get(rel))
                                     for rel in sorted(old.keys() | new.keys()))
               if change is not None]
    assert ours(patches) == expected


def _entry(rel: str, spec: tuple | None, blobs: dict) -> TreeEntry | None:
    if spec is None:
        return None
    name = os.path.basename(rel).encode()
    if spec[0] == "link":
        return TreeEntry(name, EntryKind.SYMLINK, None, spec[1], 0, None)
    oid = hash_bytes(spec[1])
    blobs[oid] = spec[1]
    kind = EntryKind.EXECUTABLE if spec[2] & 0o100 else EntryKind.FILE
    return TreeEntry(name, kind, oid, None, len(spec[1]), None)


def _change(rel: str, old: tuple | None, new: tuple | None) -> tuple[Change | None, dict]:
    blobs: dict = {}
    a, b = _entry(rel, old, blobs), _entry(rel, new, blobs)
    if a == b:
        return None, blobs
    kind = "A" if a is None else "D" if b is None else (
        "T" if (a.kind is EntryKind.SYMLINK) != (b.kind is EntryKind.SYMLINK) else "M")
    return Change(parse_relpath(rel.encode()), kind, a, b), blobs


# -- random line edits: git applies our patch ----------------------------------------------

LINES = st.sampled_from([b"a", b"b", b"c", b"", b"  indented", b"x\r", b"{", b"}", b"dup"])


@st.composite
def edited(draw: st.DrawFn) -> tuple[bytes, bytes, int]:
    old = draw(st.lists(LINES, max_size=40))
    new = list(old)
    for _ in range(draw(st.integers(0, 6))):
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        at = draw(st.integers(0, len(new)))
        if op == "insert":
            new[at:at] = draw(st.lists(LINES, min_size=1, max_size=4))
        elif new and at < len(new):
            new[at:at + 1] = [] if op == "delete" else [draw(LINES) + b"!"]
    old_eol = draw(st.booleans()) or not old
    new_eol = draw(st.booleans()) or not new
    context = draw(st.integers(0, 4))

    def join(lines: list[bytes], eol: bool) -> bytes:
        return b"\n".join(lines) + (b"\n" if eol and lines else b"")

    return join(old, old_eol), join(new, new_eol), context


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=edited())
def test_git_apply_turns_old_into_new(case: tuple[bytes, bytes, int], tmp_path: Path) -> None:
    old, new, context = case
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    (root / "f").write_bytes(old)
    change, blobs = _change("f", ("file", old, 0o644), ("file", new, 0o644))
    if change is None:
        return
    fp = render_change(change, blobs.__getitem__, context=context)
    assert fp.insertions + fp.deletions > 0
    patch = root / "p.diff"
    patch.write_bytes(fp.text)
    done = subprocess.run(["git", "apply", "--unidiff-zero", "p.diff"], cwd=root,
                          capture_output=True, check=False)
    assert done.returncode == 0, (done.stderr, fp.text)
    assert (root / "f").read_bytes() == new


def test_sliding_changes_are_placed_as_git_places_them(tmp_path: Path) -> None:
    """Blocks that could sit in several places (repeated blank lines and braces): git's
    compaction and indent heuristic decide, and ours follow them."""
    old = (b"#include <stdio.h>\n\nint f(void)\n{\n\treturn 1;\n}\n\nint g(void)\n{\n"
           b"\treturn 2;\n}\n")
    new = old.replace(b"}\n\nint g", b"}\n\nint h(void)\n{\n\treturn 3;\n}\n\nint g")
    py_old = b"class A:\n    def f(self):\n        pass\n\n    def g(self):\n        pass\n"
    py_new = py_old.replace(b"        pass\n\n    def g",
                            b"        pass\n\n    def x(self):\n        pass\n\n    def g")
    check_against_git(tmp_path, {"c.c": ("file", old, 0o644), "p.py": ("file", py_old, 0o644),
                                 "d.txt": ("file", b"a\nb\nb\nb\nc\n", 0o644)},
                      {"c.c": ("file", new, 0o644), "p.py": ("file", py_new, 0o644),
                       "d.txt": ("file", b"a\nb\nb\nc\n", 0o644)})


@st.composite
def distinct_edits(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """Edits of a file whose lines are all different: one shortest script, so git's hunks
    and ours must agree line for line."""
    old = [b"line %d" % i for i in range(draw(st.integers(0, 60)))]
    new = list(old)
    fresh = iter(range(10**6))
    for _ in range(draw(st.integers(1, 6))):
        at = draw(st.integers(0, len(new)))
        op = draw(st.sampled_from(["insert", "delete", "replace"]))
        if op == "insert":
            new[at:at] = [b"new %d" % next(fresh) for _ in range(draw(st.integers(1, 3)))]
        elif at < len(new):
            new[at:at + 1] = [] if op == "delete" else [b"new %d" % next(fresh)]
    return (b"".join(x + b"\n" for x in old), b"".join(x + b"\n" for x in new))


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=distinct_edits())
def test_hunks_equal_gits_for_random_edits(case: tuple[bytes, bytes], tmp_path: Path) -> None:
    old, new = case
    if old == new:
        return
    check_against_git(Path(tempfile.mkdtemp(dir=tmp_path)), {"f": ("file", old, 0o644)},
                      {"f": ("file", new, 0o644)})


def test_a_costly_diff_replaces_the_middle_and_still_applies(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linediff, "MAX_COST", 4)
    old = b"same\n" + b"".join(b"old %d\n" % i for i in range(10)) + b"same end\n"
    new = b"same\n" + b"".join(b"new %d\n" % i for i in range(10)) + b"same end\n"
    change, blobs = _change("f", ("file", old, 0o644), ("file", new, 0o644))
    assert change is not None
    fp = render_change(change, blobs.__getitem__)
    assert (fp.insertions, fp.deletions) == (10, 10)
    assert fp.text.count(b"\n@@ ") == 1
    (tmp_path / "f").write_bytes(old)
    (tmp_path / "p.diff").write_bytes(fp.text)
    subprocess.run(["git", "apply", "p.diff"], cwd=tmp_path, check=True)
    assert (tmp_path / "f").read_bytes() == new
