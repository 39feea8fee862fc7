"""Named, seeded data shapes for the checkpoint benches, and the real trees beside them.

Owns: building each synthetic shape into a directory (the same name, scale and seed always give
the same paths, bytes, modes and mtimes), the one-line description of each shape, and resolving
the real trees (``stdlib``, ``linux``) through `bench.corpus`, with a reason when one is absent.

Synthetic shapes at ``CKPT_BENCH_SCALE=1`` (counts and sizes scale linearly, with small floors):

| name | what |
| --- | --- |
| ``many-small`` | 50,000 files of 0.5-16 KiB (log-uniform), source-like text, in a fan-out of ~3,100 directories (skewed: most hold a few files, some hundreds; depth <= 8), 1% executable, 0.2% symlinks |
| ``few-large`` | 4 files of 64, 128, 256 and 512 MiB (text, random, text, 1 MiB blocks alternating text/random) beside 40 small source files |
| ``compressible`` | 2,000 files of 16-256 KiB of source-like text (zstd -3 shrinks it ~3.4x) |
| ``incompressible`` | the same names and sizes as ``compressible``, filled with random bytes |

Text is "source-like": each file (or 1 MiB block) draws words from its own small vocabulary with
indentation and punctuation tokens, so it compresses like code (ratio ~3.2 on small files,
CPython's stdlib files of the same sizes: ~3.4), not like repeated filler.

Must not: import ckpt (shapes are the yardstick, not the thing measured), import pytest, read
the clock, or use unseeded randomness.
"""

from __future__ import annotations

import os
import random
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.corpus import LINUX_INSTALL_HINT, LINUX_TARBALL, CorpusError, cache_dir, get_corpus

SEED = 0x5EED_C4B7
KIB, MIB = 1 << 10, 1 << 20
# Every generated file gets this mtime (plus its index in ns), far from "now": a deterministic
# tree, and no file is inside the stat cache's racy window on the first snapshot.
FIXED_MTIME_NS = 1_767_225_600 * 10**9  # 2026-01-01T00:00:00Z
LINUX_ENV = "CKPT_BENCH_LINUX"

_LETTERS = "abcdefghijklmnopqrstuvwxyz_"
_SYNTAX = ["\n", "\n    ", "\n        ", "\n            ", "(", "):", " = ", ", ", ".", "self",
           "return", "if", "def", "for", "in", "None", "# "]
_SOURCE_EXTS = [(".py", 30), (".c", 12), (".h", 10), (".ts", 10), (".js", 8), (".md", 8),
                (".json", 6), (".go", 6), (".rs", 6), (".txt", 4)]


@dataclass(frozen=True, slots=True)
class BuiltShape:
    """A tree on disk that a bench copies from (never modified after it is built)."""

    name: str
    path: Path
    files: int  # regular files + symlinks
    bytes: int  # regular file bytes
    origin: str  # "synthetic, seed ..., scale ..." or where a real tree came from


@dataclass(frozen=True, slots=True)
class ShapeSpec:
    name: str
    summary: str
    build: Callable[[Path, float], None]  # (empty target dir to create, scale)


# -- content ----------------------------------------------------------------------------------

class TextSource:
    """Seeded source-like text: a global vocabulary, a small local one per file or block."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words = ["".join(rng.choices(_LETTERS, k=rng.randint(2, 12))) for _ in range(5000)]

    def text(self, size: int) -> bytes:
        rng = self.rng
        local = rng.sample(self.words, min(400, 30 + size // 200)) + _SYNTAX * 3
        parts, n = [], 0
        while n < size:
            chunk = " ".join(rng.choices(local, k=size // 6 + 16))
            parts.append(chunk)
            n += len(chunk)
        return "".join(parts).encode()[:size]

    def large_text(self, size: int) -> bytes:
        """Text in 1 MiB blocks, each with its own vocabulary (bounded working memory per call)."""
        return b"".join(self.text(min(MIB, size - off)) for off in range(0, size, MIB))


def _log_uniform(rng: random.Random, low: int, high: int) -> int:
    return int(low * (high / low) ** rng.random())


# -- layout -----------------------------------------------------------------------------------

def fan_out(rng: random.Random, words: list[str], n_files: int, *, files_per_dir: int = 16,
            max_depth: int = 8) -> list[str]:
    """Relative paths of ``n_files`` files spread over a repository-like directory tree.

    Directories attach to a parent chosen with weight 1/(depth+1)^2, so the tree is bushy near
    the top and thins out with depth, as real repositories do; files go to directories with a
    Pareto weight, so most directories hold a handful of files and a few hold hundreds.
    """
    dirs: list[tuple[str, int]] = [("", 0)]
    names_in: dict[str, set[str]] = {"": set()}
    parent_weights = [1.0]
    for _ in range(max(0, n_files // files_per_dir - 1)):
        parent, depth = rng.choices(dirs, parent_weights)[0]
        name = rng.choice(words)[:10]
        while name in names_in[parent]:
            name = rng.choice(words)[:10]
        names_in[parent].add(name)
        path = f"{parent}/{name}" if parent else name
        dirs.append((path, depth + 1))
        parent_weights.append(0.0 if depth + 1 >= max_depth else 1.0 / (depth + 2) ** 2)
        names_in[path] = set()
    weights = [rng.paretovariate(1.1) for _ in dirs]
    exts, ext_weights = zip(*_SOURCE_EXTS)
    out = []
    for index, (folder, _) in enumerate(rng.choices(dirs, weights, k=n_files)):
        stem = rng.choice(words)[:14]
        name = f"{stem}_{index}{rng.choices(exts, ext_weights)[0]}"
        out.append(f"{folder}/{name}" if folder else name)
    return out


def _write(root: Path, rel: str, data: bytes, index: int, *, executable: bool = False) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "xb") as f:
        f.write(data)
    if executable:
        path.chmod(0o755)
    mtime = FIXED_MTIME_NS + index
    os.utime(path, ns=(mtime, mtime))


def _scaled(count: int, scale: float, floor: int) -> int:
    return max(floor, round(count * scale))


# -- shapes -----------------------------------------------------------------------------------

def build_many_small(root: Path, scale: float) -> None:
    rng = random.Random(SEED)
    text = TextSource(rng)
    paths = fan_out(rng, text.words, _scaled(50_000, scale, 200))
    root.mkdir()
    for index, rel in enumerate(paths):
        header = f"# {rel}\n".encode()  # every file distinct, as in a real tree
        body = text.text(max(0, _log_uniform(rng, 512, 16 * KIB) - len(header)))
        _write(root, rel, header + body, index, executable=rng.random() < 0.01)
    for index in range(max(1, len(paths) // 500)):  # relative symlinks to files
        source, target = rng.sample(paths, 2)
        link = f"{source}.link{index}"
        os.symlink(os.path.relpath(root / target, (root / link).parent), root / link)


def build_few_large(root: Path, scale: float) -> None:
    rng = random.Random(SEED + 1)
    text = TextSource(rng)
    root.mkdir()
    kinds = ("text", "random", "text", "mixed")
    for index, (mib, kind) in enumerate(zip((64, 128, 256, 512), kinds)):
        size = max(256 * KIB, int(mib * MIB * scale))
        if kind == "text":
            data = text.large_text(size)
        elif kind == "random":
            data = rng.randbytes(size)
        else:
            data = b"".join(text.text(min(MIB, size - off)) if (off // MIB) % 2 == 0
                            else rng.randbytes(min(MIB, size - off)) for off in range(0, size, MIB))
        _write(root, f"data/{kind}_{index}_{mib}m.bin", data, index)
        del data
    # The small files a repository holding large files still has (and a turn can edit).
    for index, rel in enumerate(fan_out(rng, text.words, 40, files_per_dir=8)):
        _write(root, f"src/{rel}", text.text(_log_uniform(rng, 512, 16 * KIB)), 100 + index)


def _medium_files(root: Path, scale: float, fill: Callable[[random.Random, TextSource, int], bytes]
                  ) -> None:
    # One layout and size sequence for both contents, so the pair isolates compression.
    layout_rng = random.Random(SEED + 2)
    words = TextSource(layout_rng).words
    paths = fan_out(layout_rng, words, _scaled(2_000, scale, 40))
    sizes = [_log_uniform(layout_rng, 16 * KIB, 256 * KIB) for _ in paths]
    content_rng = random.Random(SEED + 3)
    text = TextSource(content_rng)
    root.mkdir()
    for index, (rel, size) in enumerate(zip(paths, sizes)):
        _write(root, rel, fill(content_rng, text, size), index)


def build_compressible(root: Path, scale: float) -> None:
    _medium_files(root, scale, lambda _rng, text, size: text.text(size))


def build_incompressible(root: Path, scale: float) -> None:
    _medium_files(root, scale, lambda rng, _text, size: rng.randbytes(size))


SHAPES: dict[str, ShapeSpec] = {spec.name: spec for spec in (
    ShapeSpec("many-small", "50k files of 0.5-16 KiB, source-like text, repository fan-out",
              build_many_small),
    ShapeSpec("few-large", "4 files of 64-512 MiB (text/random/mixed) + 40 small files",
              build_few_large),
    ShapeSpec("compressible", "2,000 files of 16-256 KiB, source-like text", build_compressible),
    ShapeSpec("incompressible", "2,000 files of 16-256 KiB, random bytes", build_incompressible),
)}
REAL_TREES = ("stdlib", "linux")


def build_shape(name: str, root: Path, scale: float) -> BuiltShape:
    """Build synthetic shape ``name`` into ``root`` (which must not exist)."""
    SHAPES[name].build(root, scale)
    files, size = count_tree(root)
    return BuiltShape(name, root, files, size, f"synthetic, seed {SEED:#x}, scale {scale:g}")


def count_tree(root: Path) -> tuple[int, int]:
    """(files + symlinks, regular file bytes) under ``root``."""
    files = size = 0
    for dirpath, _dirs, names in os.walk(root):
        for name in names:
            st = os.lstat(os.path.join(dirpath, name))
            files += 1
            size += st.st_size if stat.S_ISREG(st.st_mode) else 0
    return files, size


def real_tree_unavailable(name: str) -> str | None:
    """Why real tree ``name`` cannot be used here (a skip reason), or None when it can."""
    if name == "linux":
        if os.environ.get(LINUX_ENV) != "1":
            return (f"the Linux tree (1.3 GB, minutes per round) runs only with {LINUX_ENV}=1")
        if not (cache_dir() / "linux-source-6.1").is_dir() and not LINUX_TARBALL.is_file():
            return f"{LINUX_TARBALL} not found; install it with: {LINUX_INSTALL_HINT}"
    return None


def get_real_tree(name: str) -> BuiltShape:
    """The prepared ``stdlib`` or ``linux`` corpus (raises CorpusError with what to do)."""
    corpus = get_corpus(name)
    files, size = count_tree(corpus.path)
    return BuiltShape(name, corpus.path, files, size, corpus.origin)


def describe(name: str) -> str:
    if name in SHAPES:
        return SHAPES[name].summary
    return {"stdlib": "CPython standard library of the running interpreter (real tree)",
            "linux": "Linux 6.1 source from Debian's linux-source-6.1 (real tree)"}[name]


__all__ = [
    "REAL_TREES",
    "SHAPES",
    "BuiltShape",
    "CorpusError",
    "build_shape",
    "count_tree",
    "describe",
    "fan_out",
    "get_real_tree",
    "real_tree_unavailable",
]
