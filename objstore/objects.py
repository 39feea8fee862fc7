"""Tree objects: one directory's entries, the nodes of a checkpoint's Merkle tree.

Holds the record types and the rules a tree must obey (names, order, kinds, modes). Encoding
to bytes lives in `codec`; storing lives in `store`. Nothing here touches the filesystem.

A file's permission bits (the nine rwx bits; never setuid, setgid or sticky) are part of its
entry only where they differ from its kind's default (`DEFAULT_MODES`: 0644 for a file, 0755
for an executable): an entry of default mode carries `mode=None`, so a tree of such files
encodes, and hashes, exactly as before modes were recorded. The kind still says whether the
owner may execute (`EXECUTABLE` exactly when the owner's x bit is set).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from enum import IntEnum

from ckpt.objstore.errors import InvalidTree
from ckpt.objstore.ids import OID_SIZE, ObjectId

_SIZE_LIMIT = 1 << 64
# The permission bits a tree records: user, group and other rwx. The setuid, setgid and sticky
# bits are left out: a restore must never make a set-id program (the workspace is hostile, and
# whoever restores may be more privileged than whoever wrote it).
MODE_BITS = 0o777


class EntryKind(IntEnum):
    FILE = 1
    EXECUTABLE = 2
    SYMLINK = 3
    TREE = 4
    TOMBSTONE = 5  # "this path must not exist"

    @property
    def is_blob(self) -> bool:
        return self is EntryKind.FILE or self is EntryKind.EXECUTABLE


@dataclass(frozen=True, slots=True)
class TreeEntry:
    name: bytes
    kind: EntryKind
    oid: ObjectId | None = None  # blob id for files, tree id for trees
    target: bytes | None = None  # symlink target
    size: int = 0  # file bytes; for a tree, the file bytes below it

    # FILE/EXECUTABLE: the permission bits where they differ from DEFAULT_MODES[kind]; else None
    mode: int | None = None

    def __post_init__(self) -> None:
        if not _common_entry(self.name, self.kind, self.oid, self.target, self.size, self.mode):
            validate_entry(self)

    @property
    def perms(self) -> int:
        """The permission bits of a file or executable: its `mode`, or its kind's default."""
        return DEFAULT_MODES.get(self.kind, 0) if self.mode is None else self.mode


def entry_mode(kind: EntryKind | int, st_mode: int) -> int | None:
    """The `mode` of the entry of a file of `kind` whose lstat gave `st_mode`: its permission
    bits, or None where they are its kind's default (and for any other kind)."""
    default = DEFAULT_MODES.get(kind)
    if default is None:
        return None
    bits = st_mode & MODE_BITS
    return None if bits == default else bits


def _common_entry(name: object, kind: object, oid: object, target: object, size: object,
                  mode: object) -> bool:
    """A file or tree entry with a plain name, in one expression: the case of ~80k entries of a
    first snapshot of a large tree. Anything else gets the full check (`validate_entry`)."""
    return (
        (kind is _FILE or kind is _TREE or kind is _EXECUTABLE)
        and (mode is None or (kind is not _TREE and type(mode) is int
                              and not mode & ~MODE_BITS and mode != DEFAULT_MODES[kind]
                              and bool(mode & 0o100) is (kind is _EXECUTABLE)))
        and type(name) is bytes
        and type(oid) is bytes
        and len(oid) == OID_SIZE
        and target is None
        and type(size) is int
        and 0 <= size < _SIZE_LIMIT
        and bool(name)
        and b"/" not in name
        and b"\0" not in name
        and name not in _DOT_NAMES
    )


_new_object = object.__new__
# The slots' own setters: they bypass the frozen class's __setattr__ without the name lookup
# that object.__setattr__(entry, "name", ...) makes for each field.
_set_name, _set_kind, _set_oid, _set_target, _set_size, _set_mode = (
    TreeEntry.__dict__[field].__set__
    for field in ("name", "kind", "oid", "target", "size", "mode"))
_FILE, _EXECUTABLE, _TREE = EntryKind.FILE, EntryKind.EXECUTABLE, EntryKind.TREE
# The mode an entry of each blob kind has when it carries none. (An IntEnum member hashes and
# compares as its value, so an int kind finds its default too.)
DEFAULT_MODES: dict[int, int] = {EntryKind.FILE: 0o644, EntryKind.EXECUTABLE: 0o755}


def make_entry(name: bytes, kind: EntryKind, oid: ObjectId | None, target: bytes | None = None,
               size: int = 0, mode: int | None = None) -> TreeEntry:
    """`TreeEntry(name, kind, oid, target, size, mode)`, validated the same way, faster for
    the common entry (the generated constructor of a frozen dataclass sets each field through
    a Python-level call and then calls __post_init__): for the hot loops that build or decode
    whole trees."""
    if not _common_entry(name, kind, oid, target, size, mode):
        return TreeEntry(name, kind, oid, target, size, mode)
    entry: TreeEntry = _new_object(TreeEntry)
    _set_name(entry, name)
    _set_kind(entry, kind)
    _set_oid(entry, oid)
    _set_target(entry, None)
    _set_size(entry, size)
    _set_mode(entry, mode)
    return entry


_DOT_NAMES = frozenset((b".", b".."))


def validate_name(name: bytes) -> None:
    """A name is one path component: bytes, not empty, no '/', no NUL, not '.' or '..'."""
    if type(name) is not bytes:
        raise InvalidTree(None, f"entry name must be bytes, not {type(name).__name__}")
    if not name or name in (b".", b"..") or b"/" in name or b"\0" in name:
        raise InvalidTree(None, f"invalid entry name {name!r}")


def validate_entry(entry: TreeEntry) -> None:
    validate_name(entry.name)
    kind = entry.kind
    # Sizes are msgpack integers: anything outside u64 could not be encoded.
    if type(entry.size) is not int or not 0 <= entry.size < _SIZE_LIMIT:
        raise InvalidTree(None, f"entry {entry.name!r} has an invalid size")
    mode = entry.mode
    if mode is not None:
        if not entry.kind.is_blob:
            raise InvalidTree(None, f"entry {entry.name!r} must not carry a mode")
        if type(mode) is not int or mode & ~MODE_BITS or mode == DEFAULT_MODES[entry.kind]:
            raise InvalidTree(None, f"entry {entry.name!r} has an invalid mode {mode!r}")
        if bool(mode & 0o100) is not (kind is EntryKind.EXECUTABLE):
            raise InvalidTree(None, f"entry {entry.name!r}: mode {mode:o} does not fit its kind")
    if kind is EntryKind.SYMLINK:
        if type(entry.target) is not bytes or not entry.target or b"\0" in entry.target:
            raise InvalidTree(None, f"symlink {entry.name!r} has an invalid target")
        if entry.oid is not None:
            raise InvalidTree(None, f"symlink {entry.name!r} must not carry an object id")
    elif kind is EntryKind.TOMBSTONE:
        if entry.oid is not None or entry.target is not None or entry.size:
            raise InvalidTree(None, f"tombstone {entry.name!r} must carry nothing")
    elif kind in (EntryKind.FILE, EntryKind.EXECUTABLE, EntryKind.TREE):
        if type(entry.oid) is not bytes or len(entry.oid) != OID_SIZE:
            raise InvalidTree(None, f"entry {entry.name!r} needs a {OID_SIZE}-byte object id")
        if entry.target is not None:
            raise InvalidTree(None, f"entry {entry.name!r} must not carry a link target")
    else:  # pragma: no cover - EntryKind is closed
        raise InvalidTree(None, f"entry {entry.name!r} has unknown kind {kind!r}")


@dataclass(frozen=True, slots=True)
class Tree:
    """Entries sorted by name bytes, names unique. Build with `Tree.build` or `Tree.sorted`."""

    entries: tuple[TreeEntry, ...]

    def __post_init__(self) -> None:
        previous: bytes | None = None
        for entry in self.entries:
            if previous is not None and entry.name <= previous:
                if entry.name == previous:
                    raise InvalidTree(None, f"duplicate entry name {entry.name!r}")
                raise InvalidTree(None, f"entries out of order at {entry.name!r}")
            previous = entry.name

    @classmethod
    def build(cls, entries: Iterable[TreeEntry]) -> Tree:
        """Sort entries by name; duplicates are refused (the tree would be ambiguous)."""
        return cls(tuple(sorted(entries, key=_entry_name)))

    def find(self, name: bytes) -> TreeEntry | None:
        index = bisect.bisect_left(self.entries, name, key=_entry_name)
        if index < len(self.entries) and self.entries[index].name == name:
            return self.entries[index]
        return None

    def names(self) -> list[bytes]:
        return [entry.name for entry in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def total_size(self) -> int:
        return sum(entry.size for entry in self.entries)


def _entry_name(entry: TreeEntry) -> bytes:
    return entry.name


EMPTY_TREE = Tree(())
