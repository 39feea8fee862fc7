"""Which workspace a root is, and which store it uses: the workspace identity.

A workspace is recognised by an identity of its own (16 random hex digits, made once), never
by its path, so a moved workspace (`mv w1 w2`, or one mounted at another path in a container)
keeps its history. The identity lives in the workspace, in its marker `<root>/.ckpt/`, which
is one of two things (as git's `.git` is a directory or a `gitdir:` file, and jj's `.jj/`
holds the workspace's id and a pointer to its repo):

    <root>/.ckpt/                 the store itself: its `workspace` file names the workspace
                                  that holds it (a store inside a root belongs to that root,
                                  wherever it is mounted)
    <root>/.ckpt/                 or a link to a store elsewhere: a `workspace` file naming the
                                  identity and the store, and a `.gitignore`
    <store>/roots/<id>/root       the path the workspace was last seen at: the back pointer
                                  (git keeps one in `worktrees/<name>/gitdir`)

Opening a root reads its identity and the back pointer. When they disagree, the workspace has
moved: its records and its restore journal are re-bound to the new path (one catalog
transaction with a `workspace:moved` event), under the root lock. In a shared store, a back
pointer to a path that still holds the same identity means a copy (`cp -r`), not a move: the
copy gets an identity of its own and starts a history of its own, so neither can take the
other's timeline. A store of an older ckpt gets an identity on first open (its per-root
directory, keyed by the path's hash, is renamed to the identity's): where the root cannot be
written, the old key by path stays in use.

Also here: where a root's store is when none is named (`locate_store`), the per-user store
outside the workspace (`outside_store_dir`), the refusals of layouts that would capture the
store as workspace content (`check_layout`), what marks a directory as a ckpt store
(`is_store_dir`), and the store's `.gitignore` (`mark_ignored`). Must not scan, restore or
print; takes the root lock only to re-bind.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ckpt.checkpoints.errors import CheckpointError, display_text
from ckpt.objstore.atomicfile import write_atomically
from ckpt.objstore.ids import hash_bytes

if TYPE_CHECKING:
    from ckpt.checkpoints.history.catalog import Catalog
    from ckpt.checkpoints.model import Event

MARKER = ".ckpt"  # the marker directory of a workspace (the store, or a link to it)
IDENTITY_FILE = "workspace"  # in the marker: the identity (and the store, in a link)
BINDING_FILE = "root"  # in roots/<key>/: the path the workspace was last seen at
FORMAT_FILE = "format"  # a store's own marker (objstore): "ckpt-objstore <version>"
FORMAT_TAG = b"ckpt-objstore "
_TAG = b"ckpt-workspace 1"
_ID = re.compile(rb"[0-9a-f]{16}")
_MAX_READ = 8192
# A store holds no workspace content: git ignores all of it (as it does a venv or
# .pytest_cache), so `git status` is clean, `git add -A` commits none of it and `git clean -fd`
# keeps it (`git clean -x` does not: it removes ignored files too).
GITIGNORE = ".gitignore"
GITIGNORE_TEXT = b"# ckpt: a checkpoint store, never workspace content\n*\n"


class WorkspaceRefused(CheckpointError, ValueError):
    """A root and store that must not be used together: the store would be captured as
    workspace content (the root inside a store, the store is the root) or the root is `/`."""

    def __init__(self, root: str, store: str, reason: str) -> None:
        super().__init__(root, store, reason)
        self.root = root
        self.store = store
        self.reason = reason

    def __str__(self) -> str:
        return (f"refusing root {display_text(self.root)} with store "
                f"{display_text(self.store)}: {display_text(self.reason)}")


class ForeignCheckpoint(CheckpointError, ValueError):
    """A restore of a checkpoint taken in another workspace root, not asked for explicitly."""

    def __init__(self, ref: str, root: str, other: str) -> None:
        super().__init__(ref, root, other)
        self.ref = ref
        self.root = root
        self.other = other

    def __str__(self) -> str:
        return (f"checkpoint {display_text(self.ref)} was taken in another workspace root, "
                f"{display_text(self.other)}, not {display_text(self.root)}; pass "
                "--from-other-root (RestoreOptions(from_other_root=True)) to restore it here")


@dataclass(frozen=True, slots=True)
class Marker:
    """What `<root>/.ckpt` says: the workspace's identity (None: a store of an older ckpt, or
    a damaged file) and the store it names (a real path)."""

    identity: str | None
    store: str
    is_store: bool  # the marker is the store itself (else a link to one)


@dataclass(frozen=True, slots=True)
class Binding:
    """Where a root's files are in a store, and what opening it found."""

    key: str  # roots/<key>/: the identity (or, where none could be made, the path's hash)
    identity: str | None
    moved_from: str | None = None  # the workspace was re-bound from this path
    copied_from: str | None = None  # the workspace is a copy of the one at this path


# -- reading and writing the marker ------------------------------------------------------

def _read_small(path: str) -> bytes | None:
    """A small file's bytes, never through a symlink; None when it is not there."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.ELOOP):
            return None
        raise
    try:
        return os.read(fd, _MAX_READ)
    finally:
        os.close(fd)


def _parse_identity_file(data: bytes) -> tuple[str | None, str | None]:
    """(identity, store) from an identity file; (None, None) if it is not one."""
    lines = data.split(b"\n")
    if lines[0] != _TAG:
        return None, None
    identity = store = None
    for line in lines[1:]:
        key, _, value = line.partition(b" ")
        if key == b"id" and _ID.fullmatch(value):
            identity = value.decode("ascii")
        elif key == b"store" and value.startswith(b"/"):
            store = os.fsdecode(value)
    return identity, store


def is_store_dir(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a ckpt store: a directory holding a regular `format` file that starts
    with `ckpt-objstore ` (what a scan recognises stores by, whatever their name)."""
    data = _read_small(os.path.join(os.fspath(path), FORMAT_FILE))
    return data is not None and data.startswith(FORMAT_TAG)


def read_marker(root: str) -> Marker | None:
    """What `<root>/.ckpt` says, None when the root has no marker (or one of no ckpt)."""
    marker = os.path.join(root, MARKER)
    if not os.path.isdir(marker):
        return None
    data = _read_small(os.path.join(marker, IDENTITY_FILE))
    identity, store = _parse_identity_file(data) if data is not None else (None, None)
    if is_store_dir(marker):
        return Marker(identity, os.path.realpath(marker), is_store=True)
    if store is None:
        return None
    return Marker(identity, os.path.realpath(store), is_store=False)


def locate_store(root: str | os.PathLike[str]) -> str:
    """The store `root` uses when none is named: the one its marker is or links to, else
    `<root>/.ckpt` (which `init` creates). A real path, so a store reached through a symlink
    is known for where it is."""
    root_abs = os.path.realpath(os.fspath(root))
    marker = read_marker(root_abs)
    if marker is not None:
        return marker.store
    return os.path.realpath(os.path.join(root_abs, MARKER))


def outside_store_dir(identity: str, environ: Mapping[str, str] = os.environ) -> str:
    """The per-user store of a workspace kept outside it: `$XDG_DATA_HOME/ckpt/stores/<id>`
    (default `~/.local/share/ckpt/stores/<id>`), keyed by the workspace's identity."""
    base = environ.get("XDG_DATA_HOME", "")
    if not os.path.isabs(base):  # the XDG spec: a relative value is ignored
        base = os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(os.path.realpath(base), "ckpt", "stores", identity)


def new_identity() -> str:
    return os.urandom(8).hex()


def _identity_bytes(identity: str, store: str | None) -> bytes:
    text = _TAG + b"\nid " + identity.encode("ascii") + b"\n"
    if store is not None:
        text += b"store " + os.fsencode(store) + b"\n"
    return text


def _link_new(temp: str, path: str) -> None:
    """Give `temp` the name `path` unless `path` exists (FileExistsError then)."""
    os.link(temp, path)
    os.unlink(temp)


def write_identity(marker: str, identity: str, store: str | None, *, replace: bool = False) -> None:
    """Write the identity file of the marker directory `marker` (`store`: a link's target).
    Unless `replace`, an existing file wins (FileExistsError): two processes giving one
    workspace an identity at once agree on the first."""
    if store is not None and "\n" in store:
        raise ValueError(f"store path holds a line break: {store!r}")
    write_atomically(os.path.join(marker, IDENTITY_FILE), _identity_bytes(identity, store),
                     fsync_file=True, fsync_dir=True,
                     replace=os.replace if replace else _link_new)


def mark_ignored(store: str) -> None:
    """Give the store its `.gitignore` (`*`) if it has none: at init, and on open of a store
    an older ckpt made. An entry already there (even a symlink) is left alone."""
    path = os.path.join(store, GITIGNORE)
    if os.path.lexists(path):
        return
    try:
        write_atomically(path, GITIGNORE_TEXT, fsync_file=False, fsync_dir=False,
                         replace=_link_new)
    except FileExistsError:
        pass


def make_link(root: str, identity: str, store: str) -> None:
    """Create `<root>/.ckpt` as a link to the store elsewhere (FileExistsError if the root
    already has one)."""
    marker = os.path.join(root, MARKER)
    os.mkdir(marker, 0o755)
    mark_ignored(marker)
    write_identity(marker, identity, store)


# -- refusals ----------------------------------------------------------------------------

def check_layout(root: str, store: str) -> None:
    """Refuse a root and store (both real paths) whose checkpoints would capture the store,
    or a root that is `/`: raises `WorkspaceRefused`."""
    if root == os.path.sep:
        raise WorkspaceRefused(root, store, "the root is the file system root; pass --root DIR")
    if store == root:
        raise WorkspaceRefused(root, store, "the store is the root itself")
    if root.startswith(store.rstrip(os.path.sep) + os.path.sep):
        raise WorkspaceRefused(root, store, "the root lies inside the store")
    here = root
    while True:  # a root that is, or lies inside, any store (another workspace's) too
        if is_store_dir(here):
            raise WorkspaceRefused(root, store, "the root is a ckpt store" if here == root
                                   else f"the root lies inside the ckpt store {here}")
        parent = os.path.dirname(here)
        if parent == here:
            return
        here = parent


# -- binding a root to its records -------------------------------------------------------

def legacy_key(root: str) -> str:
    """The key of `roots/<key>/` before identities: blake3 of the root path, 16 hex."""
    return hash_bytes(os.fsencode(root)).hex()[:16]


def root_key(root: str) -> str:
    """The key of the root's files in its store (`roots/<key>/`): its identity, else (a
    store of an older ckpt not yet opened) the hash of its path."""
    root_abs = os.path.realpath(root)
    marker = read_marker(root_abs)
    if marker is not None and marker.identity is not None:
        return marker.identity
    return legacy_key(root_abs)


def _own_identity(root: str, store: str) -> tuple[str | None, bool]:
    """(the identity of `root`, whether `store` is the root's own store inside its marker),
    giving the workspace one if it has none (None where it cannot be written)."""
    marker = read_marker(root)
    own = marker is not None and marker.is_store and marker.store == store
    if marker is not None and marker.identity is not None:
        return marker.identity, own
    try:
        if marker is not None and marker.is_store:
            write_identity(os.path.join(root, MARKER), new_identity(), None)
        elif marker is None and store != os.path.join(root, MARKER):
            make_link(root, new_identity(), store)
        else:
            return None, own
    except FileExistsError:
        pass  # another process gave it one first: read it below
    except (OSError, ValueError):
        return None, own  # a root that cannot be written keeps the key by path
    marker = read_marker(root)
    return (marker.identity if marker is not None else None), own


def _read_binding(root_dir: str) -> str | None:
    data = _read_small(os.path.join(root_dir, BINDING_FILE))
    return os.fsdecode(data) if data else None


def _write_binding(root_dir: str, root: str) -> None:
    write_atomically(os.path.join(root_dir, BINDING_FILE), os.fsencode(root),
                     fsync_file=True, fsync_dir=True)


def bind_root(root: str, store: str, catalog: Catalog, *,
              lock: Callable[[str], AbstractContextManager[object]],
              moved_event: Callable[[str, str, str, int], Event]) -> Binding:
    """Find (or give) `root` its identity in `store`, and re-bind its history when it moved.

    `lock(root_dir)` returns the root lock to enter (a context manager) for a re-bind;
    `moved_event(identity, old, new, count)` makes its event. Both root and store are real
    paths."""
    identity, own = _own_identity(root, store)
    roots = os.path.join(store, "roots")
    if identity is None:
        key = legacy_key(root)
        os.makedirs(os.path.join(roots, key), exist_ok=True)
        return Binding(key, None)
    root_dir = os.path.join(roots, identity)
    if not os.path.isdir(root_dir):
        _adopt_legacy_dir(roots, legacy_key(root), identity)
    bound = _read_binding(root_dir)
    if bound is None:
        _release_path(roots, root, identity, catalog, lock)
        _write_binding(root_dir, root)
        return Binding(identity, identity)
    if bound == root:
        return Binding(identity, identity)
    if not own:
        other = read_marker(bound) if os.path.isdir(bound) else None
        if other is not None and other.identity == identity:
            return _fork(root, store, bound)
    with lock(root_dir):
        bound = _read_binding(root_dir)
        if bound is None or bound == root:
            return Binding(identity, identity)
        _release_path(roots, root, identity, catalog, lock)
        count = len(catalog.history(session=None, root=bound))
        catalog.rebind_root(bound, root, event=moved_event(identity, bound, root, count))
        _write_binding(root_dir, root)
    return Binding(identity, identity, moved_from=bound)


def _release_path(roots: str, root: str, identity: str, catalog: Catalog,
                  lock: Callable[[str], AbstractContextManager[object]]) -> None:
    """`root` now holds workspace `identity`: any other workspace whose back pointer still
    names it has moved away and not been opened since. Records carry the root path, so its
    history is parked under a path no workspace has (`roots/<its id>/away`) before this one
    takes the path; opened where it went, it re-binds its own records, not this one's."""
    for other in sorted(os.listdir(roots)):
        other_dir = os.path.join(roots, other)
        if other == identity or not _ID.fullmatch(os.fsencode(other)) \
                or _read_binding(other_dir) != root:
            continue
        with lock(other_dir):
            if _read_binding(other_dir) == root:
                away = os.path.join(other_dir, "away")
                catalog.rebind_root(root, away)
                _write_binding(other_dir, away)


def _adopt_legacy_dir(roots: str, old: str, identity: str) -> None:
    """Rename the per-root directory an older ckpt kept under the path's hash to the
    identity's (its stat cache, lock and leftovers follow); else create it."""
    try:
        os.rename(os.path.join(roots, old), os.path.join(roots, identity))
    except FileNotFoundError:
        os.makedirs(os.path.join(roots, identity), exist_ok=True)
    except OSError as exc:
        if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
            raise


def _fork(root: str, store: str, original: str) -> Binding:
    """`root` is a copy of the workspace at `original` (same identity, both present): give
    the copy an identity of its own, bound to its own path, with no history yet."""
    identity = new_identity()
    marker = read_marker(root)
    write_identity(os.path.join(root, MARKER), identity,
                   None if marker is not None and marker.is_store else store, replace=True)
    root_dir = os.path.join(store, "roots", identity)
    os.makedirs(root_dir, exist_ok=True)
    _write_binding(root_dir, root)
    return Binding(identity, identity, copied_from=original)
