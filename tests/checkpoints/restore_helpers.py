"""Helpers shared by the restore, crash, state-machine and prune tests (not a test module).

The test modules `import restore_helpers` (pyproject's pytest `pythonpath` puts
tests/checkpoints on sys.path; the name is unique across tests/).
Everything here looks at the real filesystem: no mocks.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import stat as statmod
import subprocess
import sys
from collections.abc import Iterable

STORE_DIR_NAME = ".ckpt"

# What a path holds, as the restore contract sees it: ("dir",), ("file", bytes, exec bit),
# ("link", target bytes).
Node = tuple[object, ...]


def tree_state(root: str | os.PathLike[str], *, skip: Iterable[str] = (STORE_DIR_NAME,)) -> dict[str, Node]:
    """Every path under `root` (minus the top-level names in `skip`), never following links."""
    skipped = set(skip)
    state: dict[str, Node] = {}
    root_s = os.fspath(root)

    def walk(directory: str, prefix: str) -> None:
        for entry in sorted(os.scandir(directory), key=lambda e: e.name):
            if not prefix and entry.name in skipped:
                continue
            rel = prefix + entry.name
            st = entry.stat(follow_symlinks=False)
            if statmod.S_ISLNK(st.st_mode):
                state[rel] = ("link", os.fsencode(os.readlink(entry.path)))
            elif statmod.S_ISDIR(st.st_mode):
                state[rel] = ("dir",)
                walk(entry.path, rel + "/")
            else:
                with open(entry.path, "rb") as stream:
                    state[rel] = ("file", stream.read(), bool(st.st_mode & 0o100))

    walk(root_s, "")
    return state


def stat_state(root: str | os.PathLike[str], *, skip: Iterable[str] = (STORE_DIR_NAME,)) -> dict[str, tuple[int, int]]:
    """(inode, mtime_ns) of every non-directory under `root`: what a rewrite changes."""
    skipped = set(skip)
    result: dict[str, tuple[int, int]] = {}
    root_s = os.fspath(root)
    for dirpath, dirnames, filenames in os.walk(root_s):
        if dirpath == root_s:
            dirnames[:] = [d for d in dirnames if d not in skipped]
            filenames = [f for f in filenames if f not in skipped]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            result[os.path.relpath(path, root_s)] = (st.st_ino, st.st_mtime_ns)
    return result


def write_file(root: str | os.PathLike[str], rel: str, data: bytes, *, executable: bool = False) -> str:
    """Write `data` at `rel` (parents created); returns the absolute path."""
    path = os.path.join(os.fspath(root), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as out:
        out.write(data)
    mode = os.stat(path).st_mode & 0o7777
    os.chmod(path, mode | 0o111 if executable else mode & ~0o111)
    return path


def store_bytes(store_dir: str) -> int:
    """The size of a store as the growth contract counts it: every file under `objects/`
    (loose objects, and pack files with their indexes in a packed store)."""
    total = 0
    for dirpath, _, filenames in os.walk(os.path.join(store_dir, "objects")):
        total += sum(os.lstat(os.path.join(dirpath, name)).st_size for name in filenames)
    return total


def init_loose_store(store_dir: str) -> None:
    """Create a store that keeps one file per object (`objects/ab/cdef…`), so a test can damage
    or remove one object's file; `Checkpoints.init` then keeps that layout."""
    from ckpt.objstore import ObjectStore, StoreOptions

    if any(f.name == "layout" for f in dataclasses.fields(StoreOptions)):
        ObjectStore.init(store_dir, StoreOptions(layout="loose")).close()  # type: ignore[call-arg]
    else:
        ObjectStore.init(store_dir).close()


def object_path(store_dir: str, oid: bytes) -> str:
    """Where a loose store (see `init_loose_store`) keeps object `oid`."""
    text = oid.hex()
    return os.path.join(store_dir, "objects", text[:2], text[2:])


def staging_left(store_dir: str, root: str) -> list[str]:
    """Staging directories a restore left: in the store's root directories, or in the root
    itself when the store is on another file system."""
    return (glob.glob(os.path.join(store_dir, "roots", "*", "staging-*"))
            + glob.glob(os.path.join(root, ".ckpt-staging-*")))


def ckpt_cli(root: str | os.PathLike[str], *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m ckpt ARGS` in `root`, in its own process, with no server and no CKPT_* env."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPT_")}
    env["CKPT_SERVER"] = "off"
    return subprocess.run([sys.executable, "-m", "ckpt", *args], cwd=root, env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def flip_packed_byte(backend: object, oid: bytes) -> None:
    """Flip a byte near the end of `oid`'s stored record in its pack (a PackedBackend's)."""
    pack = backend.find_location(oid)  # type: ignore[attr-defined]
    _, _, offset, length = backend._find(oid)  # type: ignore[attr-defined]
    with open(pack, "r+b") as stream:
        stream.seek(offset + length - 2)
        byte = stream.read(1)
        stream.seek(offset + length - 2)
        stream.write(bytes([byte[0] ^ 0xFF]))
