"""Content-addressed object store: immutable objects keyed by the BLAKE3 of their bytes.

This package knows nothing of workspaces, sessions or ignore rules: it stores and returns
verified bytes and trees by id. Import the names below; submodules are internal structure.
"""

from ckpt.objstore.errors import (
    ContentChanged,
    CorruptObject,
    InvalidTree,
    ObjectNotFound,
    ObjstoreError,
    StoreNotFound,
    StoreWriteError,
    UnsafeStore,
    UnsupportedFormat,
)
from ckpt.objstore.ids import ObjectId, hash_bytes, oid_hex, parse_oid
from ckpt.objstore.objects import EntryKind, Tree, TreeEntry, make_entry
from ckpt.objstore.store import FileState, ObjectStore, PutResult, Slice, StoreOptions

__all__ = [
    "ContentChanged",
    "CorruptObject",
    "EntryKind",
    "FileState",
    "InvalidTree",
    "ObjectId",
    "ObjectNotFound",
    "ObjectStore",
    "ObjstoreError",
    "PutResult",
    "Slice",
    "StoreNotFound",
    "StoreOptions",
    "StoreWriteError",
    "Tree",
    "TreeEntry",
    "UnsafeStore",
    "UnsupportedFormat",
    "hash_bytes",
    "make_entry",
    "oid_hex",
    "parse_oid",
]
