"""Checks on a store that commands make without opening the whole library.

Owns `check_store`: is this directory an initialized ckpt store in a format this version reads?
`ckpt config` needs that answer before it reads or writes `config.toml`, without the catalog,
the lock or the working tree.

Must not write to the store, take its lock or open the catalog.
"""

from __future__ import annotations

import os

from ckpt.checkpoints.platform import check_platform


def check_store(store_dir: str | os.PathLike[str]) -> None:
    """Raise unless `store_dir` is an initialized store this version can open.

    Raises objstore's `StoreNotFound` (no store there) or `UnsupportedFormat` (a newer format),
    and `UnsupportedPlatform` where ckpt does not run.
    """
    check_platform()
    from ckpt.objstore import ObjectStore  # noqa: PLC0415 (after the check: needs fcntl)

    ObjectStore.open(os.fspath(store_dir)).close()
