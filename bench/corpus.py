"""Named benchmark corpora, scratch copies of them, and content manifests of a tree.

Owns: where a corpus comes from (``stdlib``, ``linux`` or any directory), preparing it once in a
cache directory, copying it into a scratch work tree with mtimes and modes intact, listing which
files a gitignore-honouring snapshot captures, and the manifest used to prove that a restore
reproduced a tree exactly.

Must not: touch the source trees it copies from, or depend on ckpt itself (the library is what
is being measured, so the yardstick must not share its code or its bugs).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import sysconfig
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

try:  # blake3 is a ckpt dependency and several times faster than sha256; fall back if absent.
    from blake3 import blake3 as _blake3
except ImportError:  # pragma: no cover - exercised only without the dependency
    _blake3 = None  # type: ignore[assignment,misc]

LINUX_TARBALL = Path("/usr/src/linux-source-6.1.tar.xz")
LINUX_DIRNAME = "linux-source-6.1"
LINUX_INSTALL_HINT = "apt-get update && apt-get install -y linux-source-6.1"
# Debian's packaging appends these to the kernel's top .gitignore; together they ignore the
# whole top level, so a gitignore-honouring snapshot would capture almost nothing (docs/DESIGN.md).
LINUX_PACKAGING_IGNORE_LINES = ("/*", "!/debian/")
# The stdlib directory also holds installed packages and bytecode caches, which change whenever
# anything is pip-installed or imported; leaving them out keeps the corpus stable (2,450 files).
STDLIB_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})


class CorpusError(RuntimeError):
    """A corpus cannot be prepared; the message says what to do about it."""


@dataclass(frozen=True, slots=True)
class Corpus:
    """A prepared, read-only source tree that benchmark rounds copy from."""

    name: str
    path: Path
    origin: str  # where the tree came from, for the report


def describe(corpus: Corpus, baseline: Manifest, captured: Sequence[str]) -> dict[str, object]:
    """A report's ``corpus`` entry: where it is from, its files and bytes (``baseline``: its
    manifest), and how many of them a snapshot captures."""
    return {"name": corpus.name, "path": str(corpus.path), "origin": corpus.origin,
            "files": sum(1 for e in baseline.values() if e.kind != "dir"),
            "bytes": sum((corpus.path / p).lstat().st_size for p, e in baseline.items()
                         if e.kind == "file"),
            "captured_files": len(captured)}


def cache_dir() -> Path:
    """The directory holding prepared corpora: ``$CKPT_BENCH_CACHE`` or ``~/.cache/ckpt-bench``."""
    env = os.environ.get("CKPT_BENCH_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "ckpt-bench"


def get_corpus(spec: str, *, cache: Path | None = None) -> Corpus:
    """Resolve ``stdlib``, ``linux`` or a directory path to a prepared corpus (raises CorpusError)."""
    cache = cache or cache_dir()
    if spec == "stdlib":
        return prepare_stdlib(cache)
    if spec == "linux":
        return prepare_linux(cache)
    path = Path(spec).expanduser().resolve()
    if not path.is_dir():
        raise CorpusError(f"corpus {spec!r} is neither 'stdlib', 'linux' nor a directory")
    return Corpus(name=str(path), path=path, origin=str(path))


def prepare_stdlib(cache: Path) -> Corpus:
    """Copy the running interpreter's stdlib (minus packages and caches) into the cache once."""
    source = Path(sysconfig.get_paths()["stdlib"])
    target = cache / f"stdlib-{sysconfig.get_python_version()}"
    if not target.is_dir():
        _build_atomically(target, lambda tmp: shutil.copytree(
            source, tmp, symlinks=True,
            ignore=lambda _dir, names: [n for n in names if n in STDLIB_SKIP_DIRS]))
    return Corpus(name="stdlib", path=target, origin=str(source))


def prepare_linux(cache: Path, tarball: Path = LINUX_TARBALL) -> Corpus:
    """Extract Debian's Linux 6.1 source into the cache once and drop the packaging ignore lines."""
    target = cache / LINUX_DIRNAME
    if not target.is_dir():
        if not tarball.is_file():
            raise CorpusError(f"{tarball} not found; install the Linux 6.1 source with: "
                              f"{LINUX_INSTALL_HINT}")

        def extract(tmp: Path) -> None:
            tmp.mkdir()
            # tar (not tarfile): it is several times faster on 1.3 GB and keeps modes and mtimes.
            subprocess.run(["tar", "-xJf", str(tarball), "-C", str(tmp)], check=True)
            inner = tmp / LINUX_DIRNAME
            fix_linux_gitignore(inner / ".gitignore")
            for child in inner.iterdir():  # flatten so the tree root is the kernel root
                child.rename(tmp / child.name)
            inner.rmdir()

        _build_atomically(target, extract)
    return Corpus(name="linux", path=target, origin=f"{tarball} (Debian linux-source-6.1)")


def fix_linux_gitignore(path: Path) -> None:
    """Remove the two Debian packaging lines from the kernel's top .gitignore, keeping its mtime.

    Raises CorpusError if they are absent: a different package layout would silently change
    the file count everyone compares against (78,311).
    """
    text = path.read_text(encoding="utf-8")
    kept = remove_lines(text, LINUX_PACKAGING_IGNORE_LINES)
    if kept == text:
        raise CorpusError(f"{path}: expected Debian packaging lines {LINUX_PACKAGING_IGNORE_LINES}")
    st = path.stat()
    path.write_text(kept, encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def remove_lines(text: str, lines: Sequence[str]) -> str:
    """Drop every line of ``text`` that equals one of ``lines`` (ignoring trailing spaces)."""
    drop = set(lines)
    return "".join(line for line in text.splitlines(keepends=True) if line.rstrip() not in drop)


def _build_atomically(target: Path, build: Callable[[Path], object]) -> None:
    """Build into a sibling temp dir and rename, so an interrupted build never looks complete."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    tmp.rmdir()  # builders create the directory themselves (copytree insists on it)
    try:
        build(tmp)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def copy_tree(source: Path, dest: Path) -> None:
    """Copy a corpus into a fresh scratch work tree, preserving modes, mtimes and symlinks."""
    if dest.exists():
        raise FileExistsError(dest)
    # cp -a is what the brief asks for and is faster than copytree on 80k files.
    subprocess.run(["cp", "-a", "--", str(source), str(dest)], check=True)


# --- what a gitignore-honouring snapshot captures -------------------------------------------

def _git_env() -> dict[str, str]:
    # Isolate from the user's configuration so listings are reproducible.
    return {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull}


def list_captured_files(root: Path) -> list[str]:
    """Paths (posix, relative, sorted) of files and symlinks that ``git add -A`` would capture.

    Uses a throwaway git dir outside ``root``: git's own ignore engine is the reference both
    tools must agree with, and the listing never writes into the tree.
    """
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-ls-") as gd:
        base = ["git", f"--git-dir={gd}", f"--work-tree={root}"]
        subprocess.run(["git", f"--git-dir={gd}", "init", "-q"], check=True, env=_git_env())
        out = subprocess.run([*base, "ls-files", "-z", "--others", "--exclude-standard"],
                             cwd=root, check=True, capture_output=True, env=_git_env()).stdout
    return sorted(p.decode("utf-8", "surrogateescape") for p in out.split(b"\0") if p)


def find_ignored(root: Path, paths: Iterable[str]) -> set[str]:
    """Which of ``paths`` (relative, need not exist) the tree's ignore files exclude."""
    paths = list(paths)
    if not paths:
        return set()
    with tempfile.TemporaryDirectory(prefix="ckpt-bench-ci-") as gd:
        subprocess.run(["git", f"--git-dir={gd}", "init", "-q"], check=True, env=_git_env())
        proc = subprocess.run(
            ["git", f"--git-dir={gd}", f"--work-tree={root}", "check-ignore", "--no-index",
             "-z", "--stdin"], check=False, cwd=root, input="\0".join(paths).encode() + b"\0",
            capture_output=True, env=_git_env())
    if proc.returncode not in (0, 1):  # 1 means "none ignored"
        raise CorpusError(f"git check-ignore failed: {proc.stderr.decode(errors='replace')}")
    return {p.decode() for p in proc.stdout.split(b"\0") if p}


# --- manifests: the ground truth for "restored exactly" -------------------------------------

@dataclass(frozen=True, slots=True)
class Entry:
    """One path's state. Content fields decide equality; ``ino``/``mtime_ns`` count rewrites."""

    kind: str  # "file", "symlink" or "dir"
    executable: bool
    digest: str  # content hash for files, "" otherwise
    target: str  # symlink target, "" otherwise
    ino: int
    mtime_ns: int

    @property
    def content(self) -> tuple[str, bool, str, str]:
        return (self.kind, self.executable, self.digest, self.target)


Manifest = dict[str, Entry]


def read_manifest(root: Path) -> Manifest:
    """Every file, symlink and directory under ``root`` (never following symlinks).

    Directories are included so a restore that drops an empty directory, or leaves one the turn
    created, is caught as well. The root's `.ckpt` is left out: with the store elsewhere it is
    ckpt's link to it (the workspace identity), not workspace content, as `.git` is git's.
    """
    manifest: Manifest = {}
    stack = [("", str(root))]
    while stack:
        rel_dir, abs_dir = stack.pop()
        with os.scandir(abs_dir) as it:
            for de in it:
                rel = f"{rel_dir}{de.name}"
                if rel == ".ckpt":
                    continue
                st = de.stat(follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    manifest[rel] = Entry("dir", False, "", "", st.st_ino, 0)  # dir mtimes churn
                    stack.append((rel + "/", de.path))
                elif stat.S_ISLNK(st.st_mode):
                    manifest[rel] = Entry("symlink", False, "", os.readlink(de.path),
                                          st.st_ino, st.st_mtime_ns)
                elif stat.S_ISREG(st.st_mode):
                    manifest[rel] = Entry("file", bool(st.st_mode & stat.S_IXUSR),
                                          hash_file(de.path), "", st.st_ino, st.st_mtime_ns)
                else:
                    manifest[rel] = Entry("special", False, "", "", st.st_ino, st.st_mtime_ns)
    return manifest


def hash_file(path: str) -> str:
    """Content hash of one file, streamed so large files stay in bounded memory."""
    h = _blake3() if _blake3 is not None else hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def diff_manifests(expected: Manifest, actual: Manifest) -> list[str]:
    """Content differences as sorted ``"<change> <path>: detail"`` lines; empty means equal."""
    out: list[str] = []
    for path in sorted(expected.keys() | actual.keys()):
        e, a = expected.get(path), actual.get(path)
        if a is None:
            out.append(f"missing {path}")
        elif e is None:
            out.append(f"extra {path}")
        elif e.content != a.content:
            what = [name for name, x, y in zip(("kind", "exec bit", "content", "symlink target"),
                                               e.content, a.content) if x != y]
            out.append(f"changed {path}: {', '.join(what)}")
    return out


def changed_paths(expected: Manifest, actual: Manifest) -> set[str]:
    """Paths whose content differs, or that exist on one side only."""
    return {p for p in expected.keys() | actual.keys()
            if p not in expected or p not in actual or expected[p].content != actual[p].content}


def count_rewritten(before: Manifest, after: Manifest) -> int:
    """Paths created, removed, or whose inode or mtime changed: what a step actually touched."""
    keys = before.keys() | after.keys()
    return sum(1 for k in keys if k not in before or k not in after
               or (before[k].ino, before[k].mtime_ns) != (after[k].ino, after[k].mtime_ns))
