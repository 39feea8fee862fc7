"""What commands do to a store without opening the whole library: check it, repair its catalog.

Owns `check_store`: is this directory an initialized ckpt store in a format this version reads?
`ckpt config` needs that answer before it reads or writes `config.toml`, without the catalog,
the lock or the working tree. And `repair_catalog` (`ckpt fsck --repair`): the catalog is an
index over the record files (records.py), so a damaged, emptied or lost catalog is rebuilt
from them, and a record file lost from a sound row is written again.

`check_store` must not write to the store, take its lock or open the catalog; `repair_catalog`
writes only the catalog and the record files, under the store's gc lock held exclusively.
"""

from __future__ import annotations

import os
import time

from ckpt.checkpoints.platform import check_platform

CATALOG_NAME = "catalog.db"


def check_store(store_dir: str | os.PathLike[str]) -> None:
    """Raise unless `store_dir` is an initialized store this version can open.

    Raises objstore's `StoreNotFound` (no store there) or `UnsupportedFormat` (a newer format),
    and `UnsupportedPlatform` where ckpt does not run.
    """
    check_platform()
    from ckpt.objstore import ObjectStore  # noqa: PLC0415 (after the check: needs fcntl)

    ObjectStore.open(os.fspath(store_dir)).close()


def repair_catalog(store_dir: str | os.PathLike[str], *, lock_timeout: float = 60.0) -> list[str]:
    """Make the catalog of the store at `store_dir` agree with its record files; returns what
    was done, one line each (empty when nothing was wrong).

    A catalog SQLite cannot read, or whose schema is damaged, is moved aside to
    `catalog.db.damaged-<unix time>` (with its -wal/-shm) and a new one is built from the
    record files: records, sessions, and each session's tracked paths as its newest record
    holds them (events and a killed restore's journal are not in the records). Otherwise rows
    and files are compared and mended (`Catalog.repair`). Takes the store's gc lock
    exclusively, so no write call runs meanwhile (`StoreBusy` after `lock_timeout`).
    """
    check_store(store_dir)
    from ckpt.checkpoints.errors import CatalogCorrupt  # noqa: PLC0415
    from ckpt.checkpoints.history.catalog import Catalog  # noqa: PLC0415 (after the platform check)
    from ckpt.checkpoints.lock import RootLock  # noqa: PLC0415

    store = os.fspath(store_dir)
    path = os.path.join(store, CATALOG_NAME)
    done: list[str] = []
    with RootLock(os.path.join(store, "gc.lock"), timeout=lock_timeout, purpose="repair"):
        try:
            catalog = Catalog.open(path, check_records=False)
        except CatalogCorrupt as exc:
            aside = f"{path}.damaged-{int(time.time())}"
            for suffix in ("", "-wal", "-shm"):
                if os.path.exists(path + suffix):
                    os.replace(path + suffix, aside + suffix)
            done.append(f"moved the damaged catalog to {aside} ({exc.reason})")
            catalog = Catalog.open(path)
        with catalog:
            if catalog.rebuilt:
                done.append(f"rebuilt the catalog: {catalog.rebuilt} checkpoint(s) from "
                            "their record files")
            done.extend(catalog.repair())
    return done
