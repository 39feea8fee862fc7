"""The line diff behind patches: a minimal edit script (Myers) with its changes placed as
git places them, grouped into hunks. Pure; lines are bytes (with their b"\\n").

    opcodes(a, b):
        drop the common head and tail
        Myers' greedy O(ND) search for a shortest edit script (linear in the lines when
        they mostly agree); past MAX_COST edits it stops, and the whole middle counts as
        replaced (bounded time and memory for files that share next to nothing)
        mark deleted lines of a and inserted lines of b
        compact each side as git's xdl_change_compact does: slide every run of changed
        lines as far down as equal lines allow, merging runs that meet, then back up to end
        beside a change of the other side when one lies in reach, else to where git's indent
        heuristic (blank lines and indentation at both cuts) scores best
        -> ("equal" | "delete" | "insert" | "replace", i1, i2, j1, j2) runs, as difflib's
    grouped(codes, context): the runs cut into hunks with `context` equal lines around each
        change; changes at most 2*context equal lines apart share a hunk (git's rule)

Must not know about files or the patch format (patch.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

Opcode = tuple[str, int, int, int, int]

# Edits past which the search stops (its time grows as lines * cost, its memory as cost^2).
MAX_COST = 1000


def opcodes(a: Sequence[bytes], b: Sequence[bytes]) -> list[Opcode]:
    head = 0
    while head < len(a) and head < len(b) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < len(a) - head and tail < len(b) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    deleted = [False] * len(a)
    inserted = [False] * len(b)
    middle_a, middle_b = a[head:len(a) - tail], b[head:len(b) - tail]
    script = _myers(middle_a, middle_b)
    if script is None:  # too costly to be worth reading: all of the middle is replaced
        deleted[head:len(a) - tail] = [True] * len(middle_a)
        inserted[head:len(b) - tail] = [True] * len(middle_b)
    else:
        for side, index in script:
            if side:
                inserted[head + index] = True
            else:
                deleted[head + index] = True
    _compact(a, deleted, inserted)
    _compact(b, inserted, deleted)
    return _runs(deleted, inserted)


def _myers(a: Sequence[bytes], b: Sequence[bytes]) -> list[tuple[bool, int]] | None:
    """A shortest edit script: (True, j) inserts b[j], (False, i) deletes a[i]. None when it
    costs more than MAX_COST edits."""
    n, m = len(a), len(b)
    if not n or not m:
        return [(False, i) for i in range(n)] + [(True, j) for j in range(m)]
    offset = m + n + 1
    v = [0] * (2 * offset + 1)
    trace: list[list[int]] = []
    for d in range(min(n + m, MAX_COST) + 1):
        trace.append(v[offset - d - 1:offset + d + 2])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]
            else:
                x = v[offset + k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x += 1
                y += 1
            v[offset + k] = x
            if x >= n and y >= m:
                return _backtrack(trace, n, m)
    return None


def _backtrack(trace: list[list[int]], n: int, m: int) -> list[tuple[bool, int]]:
    script: list[tuple[bool, int]] = []
    x, y = n, m
    for d in range(len(trace) - 1, 0, -1):
        v = trace[d]  # v[k] of step d-1 sits at index k + d + 1
        k = x - y
        down = k == -d or (k != d and v[k - 1 + d + 1] < v[k + 1 + d + 1])
        prev_k = k + 1 if down else k - 1
        prev_x = v[prev_k + d + 1]
        prev_y = prev_x - prev_k
        while x > prev_x and y > prev_y:  # the snake
            x -= 1
            y -= 1
        if x == prev_x:
            script.append((True, prev_y))
        else:
            script.append((False, prev_x))
        x, y = prev_x, prev_y
    script.reverse()
    return script


def _compact(lines: Sequence[bytes], changed: list[bool], other: list[bool]) -> None:
    """git's xdl_change_compact (xdiffi.c) for one side, without the indent heuristic.

    A group is the run of changed lines between two unchanged ones (maybe empty); unchanged
    lines pair up across the sides, so group k of one side faces group k of the other. Each
    group slides up, then down as far as equal lines allow, merging with the groups it meets;
    if it passed a non-empty group of the other side, it slides back up to end beside the
    last one; else it stays lowest."""
    x = _Side(lines, changed)
    o = _Side(None, other)
    g = x.first()
    go = o.first()
    while True:
        if g[1] != g[0]:
            while True:
                size = g[1] - g[0]
                end_matching_other = -1
                while (up := x.slide_up(g)) is not None:
                    g = up
                    go = o.previous(go)
                earliest_end = g[1]
                if go[1] > go[0]:
                    end_matching_other = g[1]
                while (down := x.slide_down(g)) is not None:
                    g = down
                    go = o.next(go)
                    if go[1] > go[0]:
                        end_matching_other = g[1]
                if size == g[1] - g[0]:
                    break
            if g[1] == earliest_end:
                pass  # it cannot move
            elif end_matching_other != -1:
                while go[1] == go[0]:
                    up = x.slide_up(g)
                    assert up is not None, "a match of the other side disappeared"
                    g = up
                    go = o.previous(go)
            else:
                best = _best_shift(lines, g[1], g[1] - g[0], earliest_end)
                while g[1] > best:
                    up = x.slide_up(g)
                    assert up is not None, "the best shift is out of reach"
                    g = up
                    go = o.previous(go)
        if g[1] == x.n:
            break
        g = x.next(g)
        go = o.next(go)
    x.store(changed)


# git's indent heuristic (xdiffi.c): where a group that can slide reads best, by the
# indentation and blank lines around its two ends. The weights are git's.
MAX_INDENT = 200
MAX_BLANKS = 20
START_OF_FILE_PENALTY = 1
END_OF_FILE_PENALTY = 21
TOTAL_BLANK_WEIGHT = -30
POST_BLANK_WEIGHT = 6
RELATIVE_INDENT_PENALTY = -4
RELATIVE_INDENT_WITH_BLANK_PENALTY = 10
RELATIVE_OUTDENT_PENALTY = 24
RELATIVE_OUTDENT_WITH_BLANK_PENALTY = 17
RELATIVE_DEDENT_PENALTY = 23
RELATIVE_DEDENT_WITH_BLANK_PENALTY = 17
INDENT_WEIGHT = 60
MAX_SLIDING = 100


def _indent(line: bytes) -> int:
    """Columns of leading blanks (a tab to the next multiple of 8); -1 for a blank line."""
    width = 0
    for byte in line:
        if byte not in b" \t\n\r":
            return width
        if byte == 0x20:
            width += 1
        elif byte == 0x09:
            width += 8 - width % 8
        if width >= MAX_INDENT:
            return MAX_INDENT
    return -1


def _blanks_then_indent(lines: Sequence[bytes], order: range) -> tuple[int, int]:
    """Blank lines met walking `order`, and the indent of the first other line (-1: none;
    0 after MAX_BLANKS blank lines)."""
    blanks = 0
    for i in order:
        indent = _indent(lines[i])
        if indent != -1:
            return blanks, indent
        blanks += 1
        if blanks == MAX_BLANKS:
            return blanks, 0
    return blanks, -1


def _split_score(lines: Sequence[bytes], split: int) -> tuple[int, int]:
    """(effective indent, penalty) of cutting `lines` before line `split`."""
    end_of_file = split >= len(lines)
    indent = -1 if end_of_file else _indent(lines[split])
    pre_blank, pre_indent = _blanks_then_indent(lines, range(split - 1, -1, -1))
    post_blank, post_indent = _blanks_then_indent(lines, range(split + 1, len(lines)))
    penalty = 0
    if pre_indent == -1 and pre_blank == 0:
        penalty += START_OF_FILE_PENALTY
    if end_of_file:
        penalty += END_OF_FILE_PENALTY
    blank_after = 1 + post_blank if indent == -1 else 0
    total_blank = pre_blank + blank_after
    penalty += TOTAL_BLANK_WEIGHT * total_blank + POST_BLANK_WEIGHT * blank_after
    here = indent if indent != -1 else post_indent
    blanks = total_blank != 0
    if here == -1 or pre_indent == -1 or here == pre_indent:
        pass
    elif here > pre_indent:
        penalty += RELATIVE_INDENT_WITH_BLANK_PENALTY if blanks else RELATIVE_INDENT_PENALTY
    elif post_indent != -1 and post_indent > here:
        penalty += RELATIVE_OUTDENT_WITH_BLANK_PENALTY if blanks else RELATIVE_OUTDENT_PENALTY
    else:
        penalty += RELATIVE_DEDENT_WITH_BLANK_PENALTY if blanks else RELATIVE_DEDENT_PENALTY
    return here, penalty


def _best_shift(lines: Sequence[bytes], end: int, size: int, earliest_end: int) -> int:
    """The end, at most `end` and at least `earliest_end`, whose two cuts score best (the
    highest such end on a tie: git's `<=` walking up from the lowest shift)."""
    shift = max(earliest_end, end - size - 1, end - MAX_SLIDING)
    best = -1
    best_score = (0, 0)
    for at in range(shift, end + 1):
        indent1, penalty1 = _split_score(lines, at)
        indent2, penalty2 = _split_score(lines, at - size)
        score = (indent1 + indent2, penalty1 + penalty2)
        if best == -1 or _compare(score, best_score) <= 0:
            best, best_score = at, score
    return best


def _compare(s1: tuple[int, int], s2: tuple[int, int]) -> int:
    return INDENT_WEIGHT * ((s1[0] > s2[0]) - (s1[0] < s2[0])) + (s1[1] - s2[1])


class _Side:
    """One side's changed marks with git's sentinels (unchanged) before and after."""

    def __init__(self, lines: Sequence[bytes] | None, changed: list[bool]) -> None:
        self.lines = lines
        self.n = len(changed)
        self.marks = [False, *changed, False]  # marks[i + 1] is line i

    def store(self, changed: list[bool]) -> None:
        changed[:] = self.marks[1:-1]

    def _changed(self, i: int) -> bool:
        return self.marks[i + 1]

    def first(self) -> tuple[int, int]:
        end = 0
        while self._changed(end):
            end += 1
        return 0, end

    def next(self, g: tuple[int, int]) -> tuple[int, int]:
        start = g[1] + 1
        end = start
        while self._changed(end):
            end += 1
        return start, end

    def previous(self, g: tuple[int, int]) -> tuple[int, int]:
        end = g[0] - 1
        start = end
        while self._changed(start - 1):
            start -= 1
        return start, end

    def slide_down(self, g: tuple[int, int]) -> tuple[int, int] | None:
        start, end = g
        assert self.lines is not None
        if end < self.n and self.lines[start] == self.lines[end]:
            self.marks[start + 1] = False
            self.marks[end + 1] = True
            start, end = start + 1, end + 1
            while self._changed(end):
                end += 1
            return start, end
        return None

    def slide_up(self, g: tuple[int, int]) -> tuple[int, int] | None:
        start, end = g
        assert self.lines is not None
        if start > 0 and self.lines[start - 1] == self.lines[end - 1]:
            start, end = start - 1, end - 1
            self.marks[start + 1] = True
            self.marks[end + 1] = False
            while self._changed(start - 1):
                start -= 1
            return start, end
        return None


def _runs(deleted: list[bool], inserted: list[bool]) -> list[Opcode]:
    codes: list[Opcode] = []
    i = j = 0
    n, m = len(deleted), len(inserted)
    while i < n or j < m:
        i0, j0 = i, j
        while i < n and j < m and not deleted[i] and not inserted[j]:
            i += 1
            j += 1
        if i > i0:
            codes.append(("equal", i0, i, j0, j))
        i0, j0 = i, j
        while i < n and deleted[i]:
            i += 1
        while j < m and inserted[j]:
            j += 1
        if i > i0 or j > j0:
            tag = "replace" if i > i0 and j > j0 else "delete" if i > i0 else "insert"
            codes.append((tag, i0, i, j0, j))
    return codes


def grouped(codes: list[Opcode], context: int) -> Iterator[list[Opcode]]:
    """difflib's get_grouped_opcodes on `codes`: hunks of changes with `context` lines."""
    if not any(tag != "equal" for tag, *_ in codes):
        return
    codes = list(codes)
    if codes[0][0] == "equal":
        tag, i1, i2, j1, j2 = codes[0]
        codes[0] = tag, max(i1, i2 - context), i2, max(j1, j2 - context), j2
    if codes[-1][0] == "equal":
        tag, i1, i2, j1, j2 = codes[-1]
        codes[-1] = tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)
    group: list[Opcode] = []
    for tag, i1, i2, j1, j2 in codes:
        if tag == "equal" and i2 - i1 > 2 * context:
            group.append((tag, i1, min(i2, i1 + context), j1, min(j2, j1 + context)))
            yield group
            group = []
            i1, j1 = max(i1, i2 - context), max(j1, j2 - context)
        group.append((tag, i1, i2, j1, j2))
    if group and not (len(group) == 1 and group[0][0] == "equal"):
        yield group
