"""Remotes at the object level: a ckpt repository in an S3-compatible bucket (packs of stored
envelopes, their indexes, opaque named records and heads, locks), and the moves between it
and a local `ObjectStore`.

Imported only when a remote is used: `import ckpt.objstore` never loads it, and the S3 client
(obstore, imported by transport.py alone) loads only with `RemoteRepo`. The error classes and
the URL parser load without it. Knows nothing of checkpoints, sessions or catalogs.

Modules: errors (the exceptions), url (`RemoteSpec`, `parse_remote_url`), credentials (AWS
environment and ~/.aws files), transport (the S3 calls, through obstore), layout (keys, config),
index (the remote indexes and their local cache), packs (building packs, planning ranged
reads), envelopes (checking an envelope against its id), locks, repo (`RemoteRepo`), reports,
maintenance (check and gc).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ckpt.objstore.remote.errors import (
    RemoteAuthError,
    RemoteConflict,
    RemoteCorrupt,
    RemoteError,
    RemoteFormatError,
    RemoteLocked,
    RemoteNotFound,
    RemoteUnreachable,
)
from ckpt.objstore.remote.reports import (
    FetchReport,
    RemoteCheckReport,
    RemoteGcReport,
    UploadReport,
)
from ckpt.objstore.remote.url import RemoteSpec, parse_remote_url

if TYPE_CHECKING:
    from ckpt.objstore.remote.repo import RemoteRepo


def __getattr__(name: str) -> Any:
    if name == "RemoteRepo":  # loads the S3 client: only when a remote is opened
        from ckpt.objstore.remote.repo import RemoteRepo  # noqa: PLC0415

        return RemoteRepo
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "FetchReport",
    "RemoteAuthError",
    "RemoteCheckReport",
    "RemoteConflict",
    "RemoteCorrupt",
    "RemoteError",
    "RemoteFormatError",
    "RemoteGcReport",
    "RemoteLocked",
    "RemoteNotFound",
    "RemoteRepo",
    "RemoteSpec",
    "RemoteUnreachable",
    "UploadReport",
    "parse_remote_url",
]
