"""Checkpoints of a workspace: the domain of ckpt, and its public Python API.

A harness imports the names below (`from ckpt.checkpoints import Checkpoints, RestoreIncomplete`)
or the same names from `ckpt`; the CLI uses nothing else. Submodules are internal structure.
Each name is imported on first use, so that naming an exception or a record type does not pay
for the service, SQLite and the object store. On a platform ckpt does not run on (Windows),
every name but the exceptions raises `UnsupportedPlatform` (see `platform.py`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ckpt.checkpoints.platform import check_platform

if TYPE_CHECKING:
    from ckpt.checkpoints.config import (
        CONFIG_KEYS,
        StoreConfig,
        get_config_value,
        read_config,
        set_config_value,
        write_config,
    )
    from ckpt.checkpoints.diff.patch import FilePatch
    from ckpt.checkpoints.diff.trees import Change
    from ckpt.checkpoints.errors import (
        AmbiguousCheckpoint,
        CatalogCorrupt,
        CheckpointError,
        CheckpointInUse,
        ConfigError,
        NothingMatched,
        NothingToUndo,
        NotInitialized,
        PathNotInCheckpoint,
        PruneIncomplete,
        RestoreIncomplete,
        StoreBusy,
        TargetRefused,
        UnknownCheckpoint,
        UnsafePath,
        UnsupportedPlatform,
        display_text,
    )
    from ckpt.checkpoints.history.pathlog import PathChange
    from ckpt.checkpoints.identity import (
        ForeignCheckpoint,
        WorkspaceRefused,
        is_store_dir,
        locate_store,
    )
    from ckpt.checkpoints.lock import LockOwner
    from ckpt.checkpoints.model import CheckpointRecord, CheckpointStats, Event, SkippedPath
    from ckpt.checkpoints.paths import RelPath
    from ckpt.checkpoints.remote.config import (
        BadRemote,
        RemoteDataDamaged,
        RemoteExists,
        RemoteInfo,
        UnknownRemote,
        has_pushed,
        remote_names,
    )
    from ckpt.checkpoints.remote.reports import PullReport, PushReport, RemoteCheck, RemoteGc
    from ckpt.checkpoints.reports import (
        CheckReport,
        FileEntry,
        ForgetReport,
        GcReport,
        HeldBack,
        PruneReport,
        StoreStats,
    )
    from ckpt.checkpoints.reserve import make_room
    from ckpt.checkpoints.restore.plan import RestorePlan
    from ckpt.checkpoints.restore.reports import AbandonedRestore, RestoreConflict, RestoreReport
    from ckpt.checkpoints.restore.restorer import RestoreOptions
    from ckpt.checkpoints.service import STORE_NAME, Checkpoints, preload
    from ckpt.checkpoints.snapshot.ignore import DirRules, IgnoreRules
    from ckpt.checkpoints.snapshot.watch import WatchState
    from ckpt.checkpoints.store_setup import check_store, repair_catalog

# Submodules that import on any platform. The others need POSIX (fcntl, O_NOFOLLOW, ...) as
# they import, so on Windows their names raise UnsupportedPlatform instead of an ImportError.
_ANYWHERE = frozenset({"errors", "platform"})

# name -> the submodule that defines it
_WHERE: dict[str, str] = {
    **dict.fromkeys(("CONFIG_KEYS", "StoreConfig", "get_config_value", "read_config",
                     "set_config_value", "write_config"), "config"),
    "Change": "diff.trees",
    **dict.fromkeys(("AmbiguousCheckpoint", "CatalogCorrupt", "CheckpointError", "ConfigError",
                     "NothingMatched", "NotInitialized", "PathNotInCheckpoint",
                     "RestoreIncomplete", "StoreBusy", "UnknownCheckpoint", "UnsafePath",
                     "UnsupportedPlatform", "display_text", "PruneIncomplete", "CheckpointInUse",
                     "NothingToUndo", "TargetRefused"), "errors"),
    **dict.fromkeys(("ForeignCheckpoint", "WorkspaceRefused", "is_store_dir", "locate_store"),
                    "identity"),
    **dict.fromkeys(("DirRules", "IgnoreRules"), "snapshot.ignore"),
    "LockOwner": "lock",
    "FilePatch": "diff.patch",
    **dict.fromkeys(("CheckpointRecord", "CheckpointStats", "Event", "SkippedPath"), "model"),
    "RelPath": "paths",
    "RestorePlan": "restore.plan",
    **dict.fromkeys(("BadRemote", "RemoteDataDamaged", "RemoteExists", "RemoteInfo",
                     "UnknownRemote", "has_pushed", "remote_names"), "remote.config"),
    "RestoreOptions": "restore.restorer",
    "make_room": "reserve",
    "check_platform": "platform",
    **dict.fromkeys(("CheckReport", "FileEntry", "ForgetReport", "GcReport", "HeldBack",
                     "PruneReport", "StoreStats"), "reports"),
    **dict.fromkeys(("AbandonedRestore", "RestoreConflict", "RestoreReport"), "restore.reports"),
    **dict.fromkeys(("PullReport", "PushReport", "RemoteCheck", "RemoteGc"), "remote.reports"),
    "PathChange": "history.pathlog",
    **dict.fromkeys(("STORE_NAME", "Checkpoints", "preload"), "service"),
    "check_store": "store_setup",
    "repair_catalog": "store_setup",
    "WatchState": "snapshot.watch",
}

__all__ = [
    "CONFIG_KEYS",
    "STORE_NAME",
    "AbandonedRestore",
    "AmbiguousCheckpoint",
    "BadRemote",
    "CatalogCorrupt",
    "Change",
    "CheckReport",
    "CheckpointError",
    "CheckpointInUse",
    "CheckpointRecord",
    "CheckpointStats",
    "Checkpoints",
    "ConfigError",
    "DirRules",
    "Event",
    "FileEntry",
    "FilePatch",
    "ForeignCheckpoint",
    "ForgetReport",
    "GcReport",
    "HeldBack",
    "IgnoreRules",
    "LockOwner",
    "NotInitialized",
    "NothingMatched",
    "NothingToUndo",
    "PathChange",
    "PathNotInCheckpoint",
    "PruneIncomplete",
    "PruneReport",
    "PullReport",
    "PushReport",
    "RelPath",
    "RemoteCheck",
    "RemoteDataDamaged",
    "RemoteExists",
    "RemoteGc",
    "RemoteInfo",
    "RestoreConflict",
    "RestoreIncomplete",
    "RestoreOptions",
    "RestorePlan",
    "RestoreReport",
    "SkippedPath",
    "StoreBusy",
    "StoreConfig",
    "StoreStats",
    "TargetRefused",
    "UnknownCheckpoint",
    "UnknownRemote",
    "UnsafePath",
    "UnsupportedPlatform",
    "WatchState",
    "WorkspaceRefused",
    "check_platform",
    "check_store",
    "display_text",
    "get_config_value",
    "has_pushed",
    "is_store_dir",
    "locate_store",
    "make_room",
    "preload",
    "read_config",
    "remote_names",
    "repair_catalog",
    "set_config_value",
    "write_config",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'ckpt.checkpoints' has no attribute {name!r}")
    if module not in _ANYWHERE:
        check_platform()
    value = getattr(importlib.import_module(f"ckpt.checkpoints.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
