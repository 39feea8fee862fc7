"""A generated, real-looking Python project and a seeded agent that works on it, for the harness
end-to-end tests (tests/e2e).

Owns: `make_project` (a requests-shaped source tree: a package, tests, docs, packaging files, a
binary asset, an executable script, a symlink, and build output and caches its `.gitignore`
hides), `Agent` (one seeded turn of the edits an agent's tools make: edit, add, add in a new
package, delete, move, remove a whole directory, chmod, replace a file by a symlink, write
caches), and `tree_state` (what a checkpoint of the tree must capture, as plain data to compare).

Must not: import ckpt (the harness tests drive ckpt; this module only stands in for the project
and the agent), read the clock, or use an unseeded random source.
"""

from __future__ import annotations

import os
import random
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

MODULES = ("__init__", "adapters", "api", "auth", "certs", "compat", "cookies", "exceptions",
           "help", "hooks", "models", "packages", "sessions", "status_codes", "structures",
           "utils", "_internal_utils", "__version__")
DOCS = ("index", "api", "user/quickstart", "user/advanced", "user/authentication",
        "user/install", "community/faq", "community/support", "community/updates",
        "dev/contributing", "dev/authors")
GITIGNORE = b"""\
__pycache__/
*.py[cod]
*.egg-info/
build/
dist/
.coverage
.pytest_cache/
"""
# Directories and names the project's ignore rules hide; `tree_state` leaves them out.
IGNORED_DIRS = frozenset({"__pycache__", "build", "dist", ".pytest_cache", ".ckpt", ".git"})


def _source(rng: random.Random, name: str, lines: int) -> bytes:
    out = [f'"""{name}: generated module."""\n', "\n", "import os\n", "\n"]
    for i in range(lines):
        if i % 12 == 0:
            out.append(f"\n\ndef {name.strip('_')}_{i}(value, index=0):\n")
        word = rng.choice(("value", "index", "session", "headers", "cookies", "url"))
        out.append(f"    {word}_{rng.randrange(1 << 16):04x} = {word} + {rng.randrange(999)}\n")
    return "".join(out).encode()


def make_project(root: Path, seed: int) -> None:
    """Write the project at `root` (which must exist and be empty)."""
    rng = random.Random(seed)
    pkg = root / "src" / "requests"
    pkg.mkdir(parents=True)
    for name in MODULES:
        (pkg / f"{name}.py").write_bytes(_source(rng, name, rng.randint(20, 160)))
    tests = root / "tests"
    (tests / "testserver").mkdir(parents=True)
    for name in MODULES[1:10]:
        (tests / f"test_{name}.py").write_bytes(_source(rng, f"test_{name}", rng.randint(10, 80)))
    (tests / "testserver" / "server.py").write_bytes(_source(rng, "server", 60))
    (tests / "__init__.py").write_bytes(b"")
    for doc in DOCS:
        path = root / "docs" / f"{doc}.rst"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f"{doc}\n{'=' * len(doc)}\n\n".encode() + rng.randbytes(64).hex().encode())
    (root / "docs" / "_static").mkdir()
    (root / "docs" / "_static" / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + rng.randbytes(3000))
    (root / "ext").mkdir()
    (root / "ext" / "flower-of-life.jpg").write_bytes(rng.randbytes(9000))
    (root / "pyproject.toml").write_bytes(b'[build-system]\nrequires = ["setuptools"]\n')
    (root / "setup.cfg").write_bytes(b"[metadata]\nname = requests\nversion = 2.32.3\n")
    (root / "README.md").write_bytes(b"# Requests\n\nHTTP for Humans.\n")
    (root / "HISTORY.md").write_bytes(_source(rng, "history", 40))
    (root / "LICENSE").write_bytes(b"Apache License\nVersion 2.0\n" * 20)
    (root / ".gitignore").write_bytes(GITIGNORE)
    script = root / "scripts" / "release.sh"
    script.parent.mkdir()
    script.write_bytes(b"#!/bin/sh\nset -e\npython -m build\n")
    script.chmod(0o755)
    (root / "docs" / "readme.md").symlink_to("../README.md")
    _write_caches(root, rng)


def _write_caches(root: Path, rng: random.Random) -> None:
    """Build output and bytecode: what running the tests and a build leave behind (ignored)."""
    for folder in (root / "src" / "requests", root / "tests"):
        if not folder.is_dir():  # the agent removed it
            continue
        cache = folder / "__pycache__"
        cache.mkdir(exist_ok=True)
        for name in sorted(p.stem for p in folder.glob("*.py"))[:6]:
            (cache / f"{name}.cpython-311.pyc").write_bytes(rng.randbytes(200))
    lib = root / "build" / "lib" / "requests"
    lib.mkdir(parents=True, exist_ok=True)
    (lib / "api.py").write_bytes(rng.randbytes(100).hex().encode())
    (root / ".coverage").write_bytes(rng.randbytes(64))


@dataclass(frozen=True, slots=True)
class Entry:
    """One captured path as a checkpoint must restore it."""

    kind: str  # "file", "exec", "link"
    data: bytes  # file content, or the link target


def tree_state(root: Path) -> dict[str, Entry]:
    """Every path the project's rules capture: files (content, exec bit) and symlinks."""
    state: dict[str, Entry] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in IGNORED_DIRS
                       and not d.endswith(".egg-info")]
        rel_dir = os.path.relpath(dirpath, root)
        for name in dirnames + filenames:
            if name.endswith((".pyc", ".pyo", ".pyd")) or name == ".coverage":
                continue
            path = os.path.join(dirpath, name)
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                state[rel] = Entry("link", os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                kind = "exec" if st.st_mode & 0o100 else "file"
                state[rel] = Entry(kind, Path(path).read_bytes())
    return state


def ignored_state(root: Path) -> dict[str, bytes]:
    """The ignored files (caches, build output): a restore must leave them as they are."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in (".ckpt", ".git")]
        rel_dir = os.path.relpath(dirpath, root)
        parts = set(rel_dir.split(os.sep))
        for name in filenames:
            hidden = bool(parts & IGNORED_DIRS) or name.endswith((".pyc", ".pyo")) \
                or name == ".coverage"
            if hidden:
                path = os.path.join(dirpath, name)
                out[os.path.relpath(path, root)] = Path(path).read_bytes()
    return out


class Agent:
    """A seeded agent: each `turn` makes a handful of the changes a coding agent's tools make,
    and returns the paths it touched (relative, posix), as a tracked-files harness learns them
    from the tool calls."""

    def __init__(self, root: Path, seed: int) -> None:
        self.root = root
        self.rng = random.Random(seed)
        self.counter = 0

    def _files(self) -> list[str]:
        return sorted(rel for rel, e in tree_state(self.root).items()
                      if e.kind in ("file", "exec") and not rel.endswith(".gitignore"))

    def _dirs(self) -> list[str]:
        return sorted({os.path.dirname(rel) for rel in tree_state(self.root)} - {""})

    def _new_name(self, folder: str, ext: str) -> str:
        self.counter += 1
        name = f"agent_{self.counter}{ext}"
        return f"{folder}/{name}" if folder else name

    def turn(self, before_write: Callable[[set[str]], None] | None = None) -> set[str]:
        """Make one turn's changes; `before_write(paths)` runs before each change that touches
        `paths` (a tracked-files harness tracks them there). Returns every path touched."""
        touched: set[str] = set()
        for _ in range(self.rng.randint(1, 6)):
            paths, change = self._action()
            if before_write is not None and paths:
                before_write(paths)
            change()
            touched |= paths
        if self.rng.random() < 0.3:  # the agent ran the tests: caches change, nobody cares
            _write_caches(self.root, self.rng)
        return touched

    def _action(self) -> tuple[set[str], Callable[[], None]]:
        """Choose one change: the paths it touches, and the change itself (not yet made)."""
        rng, root = self.rng, self.root
        files = self._files()
        roll = rng.random()
        if roll < 0.35 or len(files) < 10:  # edit in place
            rel = rng.choice(files)
            text = _source(rng, "edit", rng.randint(1, 8))

            def edit() -> None:
                with open(root / rel, "ab") as f:
                    f.write(text)
            return {rel}, edit
        if roll < 0.5:  # add a module next to an existing one
            rel = self._new_name(os.path.dirname(rng.choice(files)), ".py")
            data = _source(rng, "new", rng.randint(5, 50))

            def add() -> None:
                (root / rel).write_bytes(data)
            return {rel}, add
        if roll < 0.58:  # add a new subpackage
            folder = self._new_name(rng.choice(["src/requests", "tests", "docs"]), "")
            core = _source(rng, "core", 30)

            def add_package() -> None:
                (root / folder).mkdir(parents=True)
                (root / folder / "__init__.py").write_bytes(b"")
                (root / folder / "core.py").write_bytes(core)
            return {f"{folder}/__init__.py", f"{folder}/core.py"}, add_package
        if roll < 0.7:  # delete a file
            rel = rng.choice(files)
            return {rel}, lambda: os.unlink(root / rel)
        if roll < 0.8:  # move (rename) a file
            rel = rng.choice(files)
            dest = self._new_name(os.path.dirname(rel), os.path.splitext(rel)[1])
            return {rel, dest}, lambda: os.rename(root / rel, root / dest)
        if roll < 0.85:  # remove a whole directory the agent "cleaned up"
            dirs = [d for d in self._dirs() if d.count("/") >= 1]
            if not dirs:
                return set(), lambda: None
            folder = rng.choice(dirs)
            gone = {rel for rel in tree_state(root) if rel.startswith(folder + "/")}
            return gone, lambda: shutil.rmtree(root / folder)
        if roll < 0.92:  # chmod +x / -x
            rel = rng.choice(files)
            return {rel}, lambda: (root / rel).chmod((root / rel).stat().st_mode ^ 0o111)
        # replace a file by a symlink to another one
        rel, target = rng.sample(files, 2)
        link_to = os.path.relpath(root / target, (root / rel).parent)

        def relink() -> None:
            os.unlink(root / rel)
            os.symlink(link_to, root / rel)
        return {rel}, relink
