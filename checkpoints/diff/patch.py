"""Unified patches in git's format from a list of `Change`s: the text people and agents read.

Pure: the only way in is `read(oid) -> bytes` (a blob's content); no IO of its own, no clock.
It must not decide what changed (`diff/trees.py` does) nor print (the CLI does).

The format is what `git diff` prints, less git's `index` line (ckpt ids are BLAKE3, not
SHA-1), so `git apply` and `patch -p1` take it:

    diff --git a/P b/P                      one section per path; T (file <-> symlink) is
    new file mode 100644 | deleted file ... two sections, the old one's D then the new A
    old mode 100644 / new mode 100755       a mode change (ckpt keeps all nine bits: 100600)
    Binary files a/P and b/P differ         a NUL in the first 8000 bytes of either side
    --- a/P / +++ b/P                       /dev/null for the missing side; a tab after a
                                            name holding a space, as git writes it
    @@ -s,l +s,l @@ FUNC                    `,1` left out, an empty side is `-0,0`; FUNC is
                                            git's default: the nearest line above the hunk
                                            (in the old file) starting with a letter, _ or $
    ' ' / '-' / '+' lines, then `\\ No newline at end of file` after a line without one

Lines split on b"\\n" only (a "\\r" stays part of its line). Hunks carry `context` lines of
context and merge when at most 2*context equal lines lie between them, as git's do; the
edit script is `linediff.py`'s (a shortest one, its changes placed as git places them).
A symlink's content is its target, one line without a newline. Names are quoted as git
quotes them with core.quotepath=false.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from ckpt.checkpoints.diff.linediff import grouped, opcodes
from ckpt.checkpoints.diff.trees import Change
from ckpt.checkpoints.paths import RelPath
from ckpt.objstore import EntryKind, ObjectId, TreeEntry

ReadBlob = Callable[[ObjectId], bytes]

BINARY_PROBE = 8000  # git's FIRST_FEW_BYTES: a NUL this early makes a file binary
FUNC_WIDTH = 80  # git keeps at most this many bytes of the hunk header's function line
_NO_NEWLINE = b"\\ No newline at end of file\n"
_DEV_NULL = b"/dev/null"
_GIT_SPACE = b" \t\n\r"  # git's isspace (sane_ctype): not \v or \f
_C_ESCAPES = {0x07: b"a", 0x08: b"b", 0x09: b"t", 0x0A: b"n", 0x0B: b"v", 0x0C: b"f",
              0x0D: b"r", 0x22: b'"', 0x5C: b"\\"}


@dataclass(frozen=True, slots=True)
class FilePatch:
    """The patch of one changed path.

    `text`: its sections in git's format (empty for `S`, a path the newer state did not
    capture: `reason` says why). `insertions`/`deletions`: lines, counted as `git diff --stat`
    counts them (0 for a binary file). `old_size`/`new_size`: the bytes of each side (0 for
    a missing side), which `--stat` shows for a binary file.
    """

    path: RelPath
    change: str  # "A" | "D" | "M" | "T" | "S"
    text: bytes
    binary: bool
    insertions: int
    deletions: int
    reason: str | None = None
    old_size: int = 0
    new_size: int = 0


def render(changes: Iterable[Change], read: ReadBlob, *, context: int = 3) -> Iterator[FilePatch]:
    """The patch of each change, in the order given."""
    if context < 0:
        raise ValueError("context must be >= 0")
    for change in changes:
        yield render_change(change, read, context=context)


def render_change(change: Change, read: ReadBlob, *, context: int = 3) -> FilePatch:
    if change.change == "S":
        return FilePatch(change.path, "S", b"", False, 0, 0, change.reason)
    name = change.path
    if change.old is not None and change.new is not None and change.old.oid is not None \
            and change.old.oid == change.new.oid:  # the mode alone changed: no content read
        old_mode, new_mode = _mode(change.old), _mode(change.new)
        text = b"diff --git %s %s\nold mode %06o\nnew mode %06o\n" % (
            quote_name(b"a/" + name), quote_name(b"b/" + name), old_mode, new_mode)
        return FilePatch(name, change.change, text, False, 0, 0,
                         old_size=change.old.size, new_size=change.new.size)
    old = _Side.of(change.old, read)
    new = _Side.of(change.new, read)
    if change.change == "T":  # git splits a type change into a deletion and an addition
        gone = _section(name, old, _Side.absent(), context)
        came = _section(name, _Side.absent(), new, context)
        binary = old.binary or new.binary
        added, deleted = (0, 0) if binary else _count(old.lines, new.lines)
        return FilePatch(name, "T", gone.text + came.text, binary, added, deleted,
                         old_size=old.size, new_size=new.size)
    section = _section(name, old, new, context)
    return FilePatch(name, change.change, section.text, section.binary, section.insertions,
                     section.deletions, old_size=old.size, new_size=new.size)


# -- one side of a change ------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Side:
    present: bool
    mode: int
    data: bytes

    @staticmethod
    def absent() -> _Side:
        return _Side(False, 0, b"")

    @staticmethod
    def of(entry: TreeEntry | None, read: ReadBlob) -> _Side:
        if entry is None:
            return _Side.absent()
        if entry.kind is EntryKind.SYMLINK:
            assert entry.target is not None
            return _Side(True, _mode(entry), entry.target)
        assert entry.oid is not None
        return _Side(True, _mode(entry), read(entry.oid))

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def binary(self) -> bool:
        return b"\0" in self.data[:BINARY_PROBE]

    @property
    def lines(self) -> list[bytes]:
        """Each line with its b"\\n"; the last one without it when the data does not end so."""
        parts = self.data.split(b"\n")
        lines = [part + b"\n" for part in parts[:-1]]
        if parts[-1]:
            lines.append(parts[-1])
        return lines


def _mode(entry: TreeEntry) -> int:
    """git's mode of an entry: 120000 for a symlink, else 100000 and the entry's rwx bits."""
    return 0o120000 if entry.kind is EntryKind.SYMLINK else 0o100000 | entry.perms


@dataclass(frozen=True, slots=True)
class _Section:
    text: bytes
    binary: bool
    insertions: int
    deletions: int


def _section(path: RelPath, old: _Side, new: _Side, context: int) -> _Section:
    a_name = quote_name(b"a/" + path)
    b_name = quote_name(b"b/" + path)
    out = [b"diff --git " + a_name + b" " + b_name + b"\n"]
    if not old.present:
        out.append(b"new file mode %06o\n" % new.mode)
    elif not new.present:
        out.append(b"deleted file mode %06o\n" % old.mode)
    elif old.mode != new.mode:
        out.append(b"old mode %06o\nnew mode %06o\n" % (old.mode, new.mode))
    binary = old.binary or new.binary
    inserted = deleted = 0
    if old.present and new.present and old.data == new.data:
        pass  # a mode change alone: no hunk
    elif binary:
        out.append(b"Binary files %s and %s differ\n" % (a_name if old.present else _DEV_NULL,
                                                          b_name if new.present else _DEV_NULL))
    elif old.data or new.data:  # an empty file added or deleted prints its header only
        out.append(_file_line(b"--- ", a_name if old.present else _DEV_NULL))
        out.append(_file_line(b"+++ ", b_name if new.present else _DEV_NULL))
        body, inserted, deleted = _hunks(old.lines, new.lines, context)
        out.append(body)
    return _Section(b"".join(out), binary, inserted, deleted)


def _file_line(prefix: bytes, name: bytes) -> bytes:
    # git ends a `---`/`+++` line with a tab when the name holds a space (diff.c), so that
    # tools splitting on whitespace find where the name ends.
    return prefix + name + (b"\t" if b" " in name else b"") + b"\n"


def quote_name(name: bytes) -> bytes:
    """`name` as git prints it with core.quotepath=false: as is, or in double quotes with C
    escapes (octal for other control bytes) when it holds a control byte, `"` or `\\`."""
    if not any(b < 0x20 or b == 0x7F or b in (0x22, 0x5C) for b in name):
        return name
    out = bytearray(b'"')
    for b in name:
        if b in _C_ESCAPES:
            out += b"\\" + _C_ESCAPES[b]
        elif b < 0x20 or b == 0x7F:
            out += b"\\%03o" % b
        else:
            out.append(b)
    out += b'"'
    return bytes(out)


# -- hunks ---------------------------------------------------------------------------------

def _count(a: list[bytes], b: list[bytes]) -> tuple[int, int]:
    """Lines inserted and deleted from `a` to `b` (what --stat shows for a type change)."""
    inserted = deleted = 0
    for tag, i1, i2, j1, j2 in opcodes(a, b):
        if tag != "equal":
            deleted += i2 - i1
            inserted += j2 - j1
    return inserted, deleted


def _func_line(line: bytes) -> bytes | None:
    """git's default function line (xemit.c `def_ff`): a line starting with an ASCII letter,
    `_` or `$`, cut to 80 bytes and stripped of trailing whitespace."""
    if not line or not (chr(line[0]).isascii() and (chr(line[0]).isalpha() or line[0] in b"_$")):
        return None
    return line[:FUNC_WIDTH].rstrip(_GIT_SPACE)


def _hunks(a: list[bytes], b: list[bytes], context: int) -> tuple[bytes, int, int]:
    """The hunks from `a` to `b`, and the lines inserted and deleted."""
    if a == b:
        return b"", 0, 0
    out: list[bytes] = []
    inserted = deleted = 0
    func = b""
    searched_to = -1  # git looks for the function line only back to the last hunk's start
    for group in grouped(opcodes(a, b), context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        for index in range(i1 - 1, searched_to, -1):
            found = _func_line(a[index])
            if found is not None:
                func = found
                break
        searched_to = i1 - 1
        out.append(b"@@ -%s +%s @@%s\n" % (_range(i1, i2 - i1), _range(j1, j2 - j1),
                                           b" " + func if func else b""))
        for tag, k1, k2, m1, m2 in group:
            if tag == "equal":
                out.extend(_lines(b" ", a[k1:k2]))
                continue
            out.extend(_lines(b"-", a[k1:k2]))
            out.extend(_lines(b"+", b[m1:m2]))
            deleted += k2 - k1
            inserted += m2 - m1
    return b"".join(out), inserted, deleted


def _range(start: int, length: int) -> bytes:
    """A hunk side: 1-based start (the line before it for an empty side), length unless 1."""
    first = start + 1 if length else start
    return b"%d" % first if length == 1 else b"%d,%d" % (first, length)


def _lines(prefix: bytes, lines: list[bytes]) -> Iterator[bytes]:
    for line in lines:
        if line.endswith(b"\n"):
            yield prefix + line
        else:
            yield prefix + line + b"\n" + _NO_NEWLINE
