"""Checkpoint records as files: the store's own copy of every checkpoint, beside the catalog.

Owns the row form of a `CheckpointRecord` (the tuple the catalog stores, and its digest), the
record file format and the `records/` directory of a store. The catalog (catalog.py) is an
index over these files: it writes a checkpoint's file before the row, inside the row's write
transaction (pending until the commit: `write_pending`), sets the files of pruned checkpoints
aside inside theirs (removed after the commit: `set_aside_pruned`), and is rebuilt from them
when it is lost. The files are fsynced only when the store's policy is `fsync = "full"`:
under `batch` each fsync would double the cost of a checkpoint that changed nothing, and the
committed row covers a power loss (a file lost to one is reported by fsck and written again
from the row by `fsck --repair`). As restic keeps `snapshots/<id>`, a store keeps
`records/<name>`:

    name:    the checkpoint id (`ckpt-<ms>-<8 base36>`; any other id: `x-` + hex of its UTF-8)
    file:    b"CKREC\\x00\\x00\\x01" | msgpack [1, row, tracked] | BLAKE3 of everything before (32)
    row:     the catalog's columns of the record (`record_row`), in its column order
    tracked: the session's tracked paths when the record was committed (a rebuild restores
             each session's set from its newest record)

A pruned checkpoint stays pruned because its file is gone (or set aside, which a rebuild
ignores): there is no deletion marker to lose. Must not open the catalog, touch the object
store or the working tree.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, cast

from ckpt.checkpoints.errors import naming
from ckpt.checkpoints.model import CheckpointRecord, CheckpointStats, SkippedPath
from ckpt.objstore.atomicfile import sync_directory, write_atomically
from ckpt.objstore.codec import pack_data, unpack_data
from ckpt.objstore.errors import CorruptObject
from ckpt.objstore.ids import hash_bytes

if TYPE_CHECKING:
    from ckpt.checkpoints.paths import RelPath
    from ckpt.objstore.ids import ObjectId

RECORDS_DIR = "records"
MAGIC = b"CKREC\x00\x00\x01"
FORMAT = 1
DIGEST_SIZE = 16  # of a catalog row: enough to catch a flipped byte, not an adversary
_TRAILER = 32
_TEMP_PREFIX = ".tmp-"
PENDING_PREFIX = ".pending-"
PRUNING_PREFIX = ".pruning-"
_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)

Row = tuple[Any, ...]


class BadRecord(ValueError):
    """A record file or row that does not decode (its `reason` says why)."""


# -- the row form ----------------------------------------------------------------------------

def to_us(dt: datetime) -> int:
    return (dt - _EPOCH) // _US


def from_us(us: int) -> datetime:
    return _EPOCH + us * _US


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _encode_skipped(skipped: Iterable[SkippedPath]) -> bytes:
    return b"\0".join(s.path + b"\0" + s.reason.encode("utf-8") for s in skipped)


def _decode_skipped(blob: bytes) -> tuple[SkippedPath, ...]:
    if not blob:
        return ()
    parts = blob.split(b"\0")
    if len(parts) % 2:
        raise ValueError("skipped paths list is truncated")
    return tuple(SkippedPath(_rel(parts[i]), parts[i + 1].decode("utf-8"))
                 for i in range(0, len(parts), 2))


def _rel(path: bytes) -> RelPath:
    return cast("RelPath", path)  # a NewType of bytes; the model checks the value


def oid_value(value: object) -> ObjectId:
    if type(value) is not bytes or len(value) != 32:
        raise ValueError(f"tree is not a 32-byte object id: {value!r}")
    return cast("ObjectId", value)


def record_row(r: CheckpointRecord) -> Row:
    """The catalog's columns of `r` (catalog.py `_COLUMNS` order, digest excluded)."""
    s = r.stats
    return (r.id, r.session, to_us(r.created_at), r.label, r.reason, r.turn_id, r.message_id,
            r.tool_call_id, r.summary, dump_json(r.to_json()["metadata"]), r.scope, r.parent,
            bytes(r.tree), os.fsencode(r.root), s.files, s.bytes, s.new_objects, s.new_bytes,
            s.skipped, s.duration_ms, s.hashed, _encode_skipped(r.skipped), b"\0".join(r.paths),
            b"\0".join(r.absent_parents))


def row_digest(row: Sequence[Any]) -> bytes:
    """The checksum the catalog keeps beside a row: a flipped byte in it does not pass."""
    return hash_bytes(pack_data(list(row)))[:DIGEST_SIZE]


def parse_row(row: Sequence[Any]) -> CheckpointRecord:
    """The record of a row; ValueError/TypeError/OverflowError when it does not parse."""
    (id_, session, created_us, label, reason, turn_id, message_id, tool_call_id, summary,
     metadata, scope, parent, tree, root, files, nbytes, new_objects, new_bytes, skipped_count,
     duration_ms, hashed, skipped, paths, absent) = row
    if not isinstance(created_us, int):
        raise TypeError(f"created_at is not an integer: {created_us!r}")
    if not isinstance(skipped, bytes) or not isinstance(paths, bytes) \
            or not isinstance(root, bytes) or not isinstance(absent, bytes):
        raise TypeError("root/skipped/paths columns are not blobs")
    meta = json.loads(metadata)
    if not isinstance(meta, dict):
        raise TypeError("metadata is not a JSON object")
    return CheckpointRecord(
        id=id_, label=label, reason=reason, turn_id=turn_id, message_id=message_id,
        tool_call_id=tool_call_id, summary=summary, metadata=meta, session=session,
        scope=scope, parent=parent, tree=oid_value(tree), created_at=from_us(created_us),
        stats=CheckpointStats(files=files, bytes=nbytes, new_objects=new_objects,
                              new_bytes=new_bytes, skipped=skipped_count,
                              duration_ms=duration_ms, hashed=hashed),
        root=os.fsdecode(root), skipped=_decode_skipped(skipped),
        paths=tuple(_rel(p) for p in paths.split(b"\0")) if paths else (),
        absent_parents=tuple(_rel(p) for p in absent.split(b"\0")) if absent else ())


# -- the file form ---------------------------------------------------------------------------

def record_name(checkpoint_id: str) -> str:
    """The file name of a checkpoint's record (never starts with "." nor holds "/")."""
    if _SAFE_NAME.fullmatch(checkpoint_id) and not checkpoint_id.startswith("x-"):
        return checkpoint_id
    return "x-" + checkpoint_id.encode("utf-8", "surrogatepass").hex()


def encode_record(row: Sequence[Any], tracked: Sequence[bytes]) -> bytes:
    body = MAGIC + pack_data([FORMAT, list(row), list(tracked)])
    return body + hash_bytes(body)


def decode_record(data: bytes) -> tuple[Row, tuple[bytes, ...], CheckpointRecord]:
    """(row, tracked, record) of a record file's bytes; `BadRecord` if they are damaged."""
    if len(data) < len(MAGIC) + _TRAILER or not data.startswith(MAGIC):
        raise BadRecord("not a checkpoint record (bad magic or truncated)")
    body, trailer = data[:-_TRAILER], data[-_TRAILER:]
    if hash_bytes(body) != trailer:
        raise BadRecord("checksum mismatch")
    try:
        value = unpack_data(memoryview(body)[len(MAGIC):], what="checkpoint record")
        version, row, tracked = value
        if version != FORMAT or not isinstance(row, list) or not isinstance(tracked, list):
            raise ValueError(f"unknown record format {version!r}")
        if not all(isinstance(p, bytes) and p and b"\0" not in p for p in tracked):
            raise ValueError("tracked paths are not non-empty bytes without NUL")
        return tuple(row), tuple(tracked), parse_row(row)
    except (CorruptObject, ValueError, TypeError, OverflowError) as exc:
        raise BadRecord(str(exc)) from None


class RecordDir:
    """The `records/` directory of a store: one file per checkpoint (see the module)."""

    def __init__(self, path: str, *, fsync: bool) -> None:
        self.path = path
        self.fsync = fsync

    @classmethod
    def beside(cls, catalog_path: str, *, fsync: bool) -> RecordDir:
        return cls(os.path.join(os.path.dirname(os.path.abspath(catalog_path)), RECORDS_DIR),
                   fsync=fsync)

    def file(self, checkpoint_id: str) -> str:
        return os.path.join(self.path, record_name(checkpoint_id))

    def names(self) -> set[str]:
        """The names of the record files (temporaries and pending files excluded)."""
        return self.listing()[0]

    def listing(self) -> tuple[set[str], set[str], set[str]]:
        """(record file names, names of pending files: see `write_pending`, names of files a
        prune set aside: see `set_aside_pruned`)."""
        try:
            entries = os.listdir(self.path)
        except FileNotFoundError:
            return set(), set(), set()
        names = {n for n in entries if not n.startswith(".")}
        pending = {n[len(PENDING_PREFIX):] for n in entries if n.startswith(PENDING_PREFIX)}
        pruning = {n[len(PRUNING_PREFIX):] for n in entries if n.startswith(PRUNING_PREFIX)}
        return names, pending, pruning

    def _ensure_dir(self) -> None:
        if not os.path.isdir(self.path):
            os.makedirs(self.path, exist_ok=True)
            if self.fsync:
                sync_directory(os.path.dirname(self.path))

    def write(self, row: Sequence[Any], tracked: Sequence[bytes]) -> None:
        """Write (or replace) the record file of `row`, durable when this returns (if fsync)."""
        self._ensure_dir()
        write_atomically(self.file(row[0]), encode_record(row, tracked), fsync_file=self.fsync,
                         fsync_dir=self.fsync, temp_prefix=_TEMP_PREFIX)

    def write_pending(self, row: Sequence[Any], tracked: Sequence[bytes]) -> str:
        """The first half of a new record: its bytes, durable (if fsync) under the pending name
        `.pending-<name>`, written inside the row's transaction. `publish` (after the commit)
        gives it its name; a process killed in between leaves it pending, and the next open
        publishes it if its row was committed, else removes it. So a record file the catalog
        lacks is never a create's leftover: it is damage to the catalog."""
        self._ensure_dir()
        name = record_name(row[0])
        pending = os.path.join(self.path, PENDING_PREFIX + name)
        fd = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                     | os.O_CLOEXEC, 0o644)
        try:
            with naming(pending):  # os.write and os.fsync name no file (EIO, ENOSPC, EROFS)
                data = encode_record(row, tracked)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                if self.fsync:
                    os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(pending)
            raise
        with naming(pending):
            os.close(fd)
        return name

    def publish(self, name: str) -> None:
        """Give a pending record its name (durably, if fsync). Another process may have done it
        already (an open that found it pending after the commit)."""
        try:
            os.rename(os.path.join(self.path, PENDING_PREFIX + name),
                      os.path.join(self.path, name))
        except FileNotFoundError:
            if not os.path.exists(os.path.join(self.path, name)):
                raise
        if self.fsync:
            sync_directory(self.path)

    def set_aside(self, name: str) -> str:
        """Rename a damaged record file out of the listing (`.damaged-<name>`); returns where."""
        aside = os.path.join(self.path, f".damaged-{name}")
        os.replace(os.path.join(self.path, name), aside)
        return aside

    def discard_pending(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.path, PENDING_PREFIX + name))

    def read(self, name: str) -> tuple[Row, tuple[bytes, ...], CheckpointRecord]:
        """Decode one record file; `BadRecord` if damaged, FileNotFoundError if gone."""
        fd = os.open(os.path.join(self.path, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            with os.fdopen(fd, "rb", closefd=False) as stream:
                data = stream.read()
        finally:
            os.close(fd)
        return decode_record(data)

    def set_aside_pruned(self, checkpoint_ids: Iterable[str]) -> list[str]:
        """The first half of a prune, inside its rows' transaction: each record file renamed
        `.pruning-<name>` (absent ones skipped), durably if fsync; the names set aside. After
        the commit `drop_pruned` removes them; if the transaction fails, `restore_pruned`
        names them back. A process killed in between leaves them set aside, and the next open
        settles them by the catalog (reindex.reconcile): back if the rows are still there,
        removed if not. A rebuild never adopts a file set aside."""
        moved: list[str] = []
        try:
            for checkpoint_id in checkpoint_ids:
                name = record_name(checkpoint_id)
                try:
                    os.rename(os.path.join(self.path, name),
                              os.path.join(self.path, PRUNING_PREFIX + name))
                except FileNotFoundError:
                    continue
                moved.append(name)
            if moved and self.fsync:
                sync_directory(self.path)
        except BaseException:
            self.restore_pruned(moved)
            raise
        return moved

    def restore_pruned(self, names: Iterable[str]) -> None:
        """Name back files a prune set aside (its transaction did not commit)."""
        back = list(names)
        for name in back:
            with contextlib.suppress(FileNotFoundError):
                os.rename(os.path.join(self.path, PRUNING_PREFIX + name),
                          os.path.join(self.path, name))
        if back and self.fsync:
            sync_directory(self.path)

    def drop_pruned(self, names: Iterable[str]) -> None:
        """Remove files a prune set aside (its rows' deletion is committed)."""
        removed = False
        for name in names:
            try:
                os.unlink(os.path.join(self.path, PRUNING_PREFIX + name))
                removed = True
            except FileNotFoundError:
                pass
            except OSError as exc:
                if exc.errno != errno.ENOENT:
                    raise
        if removed and self.fsync:
            sync_directory(self.path)
