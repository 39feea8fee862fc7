"""`cli/errors.describe`: the CLI's error table with a kind word, shared by the MCP server's
tool errors and the hook's log. Same code and words as the CLI line; every class the kind
table names exists."""

from __future__ import annotations

import errno
import importlib

import pytest

from ckpt.checkpoints import (
    AmbiguousCheckpoint,
    CatalogCorrupt,
    NothingMatched,
    NotInitialized,
    PathNotInCheckpoint,
    StoreBusy,
    UnknownCheckpoint,
    UnsafePath,
)
from ckpt.cli import errors


@pytest.mark.parametrize(("exc", "kind"), [
    (NotInitialized("/r", "/r/.ckpt"), "not_initialized"),
    (UnknownCheckpoint("ckpt-1"), "unknown_checkpoint"),
    (PathNotInCheckpoint("ckpt-1", b"a.txt"), "no_such_path"),
    (AmbiguousCheckpoint("ckpt-1", ["ckpt-10", "ckpt-11"]), "ambiguous"),
    (NothingMatched("x"), "nothing_matched"),
    (StoreBusy("/r/.ckpt/lock"), "store_busy"),
    (CatalogCorrupt("/r/.ckpt/catalog.db", "not a database"), "corrupt"),
    (UnsafePath(b"../x", "escapes the root"), "unsafe_path"),
    (OSError(errno.ENOSPC, "No space left on device", "/r/x"), "os_error"),
    (errors.CliError("bad", code=errors.USAGE), "usage"),
    (errors.CliError("bad"), "user_error"),
    (KeyError("bug"), "internal"),
])
def test_describe_is_the_cli_line_with_a_kind(exc: BaseException, kind: str) -> None:
    code, said_kind, message, hint = errors.describe(exc)
    failure = errors.classify(exc)
    assert (code, message, hint) == (failure.code, failure.message, failure.hint)
    assert said_kind == kind


@pytest.mark.parametrize("dotted", sorted(errors.KINDS))
def test_every_kind_names_a_class_that_exists(dotted: str) -> None:
    module, _, name = dotted.rpartition(".")
    assert isinstance(getattr(importlib.import_module(module), name), type)
