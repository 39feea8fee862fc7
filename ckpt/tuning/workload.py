"""A seeded, agent-like workload: one turn (edit some files, add some, delete some), and the
size of a tree on disk.

Owns: choosing a turn (pure: a sorted file list and a seed in, a ``Turn`` value out), applying it
to a working copy, and ``measure_tree``. The same seed and the same file list give byte-identical
results, so every tool and every setting measured sees exactly the same change. ``ckpt bench``
(``ckpt.tuning.tune``) and the benchmarks in ``bench/`` share it.

Must not: read the clock or an unseeded random source, touch paths outside the plan, or import
anything beyond the standard library (``bench/compare.py`` imports it and must stay free of
ckpt's library).
"""

from __future__ import annotations

import os
import posixpath
import random
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# Editing an ignore file would change what both tools capture: a different scenario from an
# agent editing code, so these are never chosen.
PROTECTED_NAMES = frozenset({".gitignore", ".ckptignore", ".gitattributes"})


@dataclass(frozen=True, slots=True)
class Edit:
    """Insert ``text`` at the first line start at or after ``at`` (fraction of the file size)."""

    path: str
    at: float
    text: bytes


@dataclass(frozen=True, slots=True)
class Add:
    path: str
    content: bytes


@dataclass(frozen=True, slots=True)
class Turn:
    """One agent turn as plain data: what a harness would see happen between two checkpoints."""

    seed: int
    edits: tuple[Edit, ...]
    adds: tuple[Add, ...]
    deletes: tuple[str, ...]

    @property
    def paths(self) -> set[str]:
        return {e.path for e in self.edits} | {a.path for a in self.adds} | set(self.deletes)


IgnoreCheck = Callable[[Sequence[str]], set[str]]


def plan_turn(files: Iterable[str], seed: int, *, edits: int = 20, adds: int = 5,
              deletes: int = 5, find_ignored: IgnoreCheck | None = None) -> Turn:
    """Choose a turn over ``files`` (relative posix paths of regular files both tools capture).

    Edited and deleted files are distinct. Added files go into directories that already hold a
    chosen-from file and reuse a sibling's extension, as an agent adding a module would.
    ``find_ignored`` (paths -> the ignored subset) rejects new names the tree's ignore rules
    would hide, since neither tool would capture such a file and restore would rightly keep it.
    """
    pool = sorted({f for f in files if posixpath.basename(f) not in PROTECTED_NAMES})
    if len(pool) < edits + deletes:
        raise ValueError(f"need at least {edits + deletes} editable files, have {len(pool)}")
    rng = random.Random(seed)
    chosen = rng.sample(pool, edits + deletes)
    edit_paths, delete_paths = sorted(chosen[:edits]), sorted(chosen[edits:])
    planned_edits = tuple(Edit(p, rng.random(), _text_block(rng, lines=rng.randint(1, 12)))
                          for p in edit_paths)
    existing = set(pool)
    new_paths: list[str] = []
    attempt = 0
    while len(new_paths) < adds:
        batch: list[str] = []
        for _ in range(adds - len(new_paths)):
            sibling = rng.choice(pool)
            folder, ext = posixpath.dirname(sibling), posixpath.splitext(sibling)[1]
            name = f"ckpt_bench_{seed}_{attempt}_{len(new_paths) + len(batch)}{ext}"
            path = posixpath.join(folder, name) if folder else name
            if path not in existing and path not in new_paths and path not in batch:
                batch.append(path)
        hidden = find_ignored(batch) if find_ignored else set()
        new_paths.extend(p for p in batch if p not in hidden)
        attempt += 1
        if attempt > 100:
            raise ValueError("could not find new file names that the ignore rules allow")
    planned_adds = tuple(Add(p, _text_block(rng, lines=rng.randint(20, 200)))
                         for p in sorted(new_paths))
    return Turn(seed, planned_edits, planned_adds, tuple(delete_paths))


def _text_block(rng: random.Random, *, lines: int) -> bytes:
    """Source-like lines of seeded content (compressible like real code, unique per seed)."""
    words = ("value", "index", "result", "buffer", "count", "state", "config", "node", "item")
    out = []
    for _ in range(lines):
        w = rng.sample(words, 3)
        out.append(f"    {w[0]}_{rng.randrange(1 << 20):05x} = {w[1]}({w[2]}, "
                   f"{rng.randrange(1000)})  # ckpt-bench\n")
    return "".join(out).encode()


def apply_turn(root: Path, turn: Turn) -> None:
    """Apply ``turn`` to the working copy at ``root``, as an agent's file tools would.

    Edits rewrite the file in place (same inode, mode kept, so exec bits survive); adds fail if
    the path exists, so a planning mistake cannot pass silently as an overwrite.
    """
    for edit in turn.edits:
        path = root / edit.path
        data = path.read_bytes()
        pos = _line_start_at_or_after(data, int(edit.at * len(data)))
        with open(path, "r+b") as f:
            f.write(data[:pos] + edit.text + data[pos:])  # grows the file, so no truncate needed
    for add in turn.adds:
        path = root / add.path
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "xb") as f:
            f.write(add.content)
    for rel in turn.deletes:
        os.unlink(root / rel)


def _line_start_at_or_after(data: bytes, offset: int) -> int:
    if offset <= 0:
        return 0
    nl = data.find(b"\n", offset - 1)
    return len(data) if nl < 0 else nl + 1


@dataclass(frozen=True, slots=True)
class TreeSize:
    """Size of a tree on disk: logical bytes, allocated bytes (st_blocks * 512), file count."""

    apparent_bytes: int
    allocated_bytes: int
    files: int


def measure_tree(root: Path) -> TreeSize:
    """Sum sizes over every non-directory under ``root``; hard links are counted once."""
    apparent = allocated = files = 0
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            st = os.lstat(os.path.join(dirpath, name))
            if stat.S_ISDIR(st.st_mode):
                allocated += st.st_blocks * 512  # directories take blocks too (fan-out costs)
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            apparent += st.st_size
            allocated += st.st_blocks * 512
            files += 1
    return TreeSize(apparent, allocated, files)
