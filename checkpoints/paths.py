"""Workspace-relative paths: the one checked boundary between manifest names and the filesystem.

A `RelPath` is bytes like b"src/main.py": no leading or trailing '/', no empty, '.', '..' or NUL
component. It is made only by `parse_relpath` (untrusted text) or `join_rel` (a checked name
under a checked parent). `to_fs_path` is the only way to turn one into a path on disk.
No IO here: symlink checks happen where the tree is touched (`restore`).
"""

from __future__ import annotations

import os
from typing import NewType

from ckpt.checkpoints.errors import UnsafePath

RelPath = NewType("RelPath", bytes)


def parse_relpath(path: str | bytes) -> RelPath:
    """Validate a relative path from an untrusted source (a manifest, a user, a journal)."""
    try:
        raw = os.fsencode(path)
    except UnicodeEncodeError:  # text with a lone surrogate names no file
        raise UnsafePath(path, "not encodable as a file name") from None
    if not raw:
        raise UnsafePath(raw, "empty path")
    if raw.startswith(b"/"):
        raise UnsafePath(raw, "absolute path")
    if b"\0" in raw:
        raise UnsafePath(raw, "NUL byte in path")
    for part in raw.split(b"/"):
        if part in (b"", b".", b".."):
            raise UnsafePath(raw, f"path component {part.decode() or '(empty)'!r} is not allowed")
    return RelPath(raw)


def join_rel(parent: RelPath | None, name: bytes) -> RelPath:
    """`name` is a validated tree entry name (objstore refuses '/', NUL, '.', '..')."""
    return RelPath(name if parent is None else parent + b"/" + name)


def parent_rel(path: RelPath) -> RelPath | None:
    cut = path.rfind(b"/")
    return None if cut < 0 else RelPath(path[:cut])


def ancestors(path: RelPath) -> list[RelPath]:
    """Proper ancestors, outermost first: b"a/b/c" -> [b"a", b"a/b"]."""
    parts = path.split(b"/")
    return [RelPath(b"/".join(parts[:i])) for i in range(1, len(parts))]


def to_fs_path(root: bytes, rel: RelPath) -> bytes:
    """The on-disk path of `rel` under `root`, refusing anything that could escape it."""
    parse_relpath(rel)
    return root + b"/" + rel


def display(path: bytes | str) -> str:
    """For messages only: never for opening files (lossless for non-UTF-8 names)."""
    return os.fsdecode(path) if isinstance(path, bytes) else path


def user_path_to_rel(root: str, path: str, cwd: str | None = None) -> RelPath:
    """A path given by a caller (absolute, or relative to `cwd`) as a path under `root`.

    Without `cwd` a relative path is relative to `root`, never to the process's current
    directory: a library call means the same path wherever its process stands. The CLI
    passes its current directory, so that a typed path is relative to where the user stands.
    """
    absolute = os.path.normpath(os.path.join(cwd or root, path))
    root_abs = os.path.normpath(root)
    relative = os.path.relpath(absolute, root_abs)
    if relative == "." or relative == ".." or relative.startswith("../"):
        raise UnsafePath(path, f"not inside the workspace root {root_abs}")
    return parse_relpath(relative)
