"""`MemoryBackend`: the in-memory fake of the `Backend` contract, for fast tests."""

from __future__ import annotations

import io
import time
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO

from ckpt.objstore.backend import ObjectStat
from ckpt.objstore.errors import ObjectNotFound
from ckpt.objstore.ids import ObjectId


class MemoryBackend:
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._objects: dict[ObjectId, tuple[bytes, float]] = {}
        self._clock = clock

    def has(self, oid: ObjectId) -> bool:
        return oid in self._objects

    def refresh(self, oid: ObjectId) -> bool:
        found = self._objects.get(oid)
        if found is None:
            return False
        self._objects[oid] = (found[0], self._clock())
        return True

    def get(self, oid: ObjectId) -> bytes:
        try:
            return self._objects[oid][0]
        except KeyError:
            raise ObjectNotFound(oid) from None

    def open(self, oid: ObjectId) -> BinaryIO:
        return io.BytesIO(self.get(oid))

    def put(self, oid: ObjectId, stored: bytes) -> bool:
        if self.refresh(oid):
            return False
        self._objects[oid] = (bytes(stored), self._clock())
        return True

    def put_stream(self, oid: ObjectId, chunks: Iterable[bytes]) -> bool:
        if self.refresh(oid):
            return False
        data = b"".join(chunks)  # if chunks raises, nothing was stored
        self._objects[oid] = (data, self._clock())
        return True

    def check_stored(self, oid: ObjectId) -> bool | None:
        return None

    def forget_damaged(self, oid: ObjectId) -> None:
        self.delete(oid)

    def delete(self, oid: ObjectId) -> int:
        found = self._objects.pop(oid, None)
        return 0 if found is None else len(found[0])

    def iter_ids(self) -> Iterator[ObjectId]:
        return iter(list(self._objects))

    def stat(self, oid: ObjectId) -> ObjectStat:
        try:
            data, mtime = self._objects[oid]
        except KeyError:
            raise ObjectNotFound(oid) from None
        return ObjectStat(len(data), mtime)

    def sync(self) -> None:
        pass

    def sweep_temporaries(self, older_than: float) -> int:
        return 0

    def close(self) -> None:
        pass

    def replace_raw(self, oid: ObjectId, stored: bytes) -> None:
        """Test hook: overwrite stored bytes as a damaged disk would."""
        self._objects[oid] = (stored, self._clock())
