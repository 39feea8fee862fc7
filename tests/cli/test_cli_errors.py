"""The exception -> exit code table (cli/errors.py), and how failures reach the user."""

from __future__ import annotations

import errno
import importlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ckpt.checkpoints import display_text
from ckpt.checkpoints import errors as ce
from ckpt.checkpoints.lock import LockOwner
from ckpt.cli import errors
from ckpt.cli.errors import Failure, classify
from ckpt.objstore import ObjectId
from ckpt.objstore import errors as oe

CkptIn = Callable[..., Any]
OID = ObjectId(bytes(range(32)))


def test_every_rule_names_a_real_exception_class() -> None:
    for dotted in errors.RULES:
        module, _, name = dotted.rpartition(".")
        cls = getattr(importlib.import_module(module), name)
        assert isinstance(cls, type) and issubclass(cls, BaseException), dotted


@pytest.mark.parametrize(("exc", "expected"), [
    (ce.NotInitialized("/r", "/r/.ckpt"),
     Failure(1, "not initialized: no ckpt store at /r/.ckpt for root /r",
             "run 'ckpt init', or pass --root/--store")),
    (ce.UnknownCheckpoint("ckpt-x"),
     Failure(1, "unknown checkpoint ckpt-x", "'ckpt list --all-sessions' shows the ids")),
    (ce.PathNotInCheckpoint("ckpt-1-a", b"src/x.py"),
     Failure(1, "no file src/x.py in checkpoint ckpt-1-a", "'ckpt show ckpt-1-a' lists its files")),
    (ce.AmbiguousCheckpoint("ckpt-1", ["ckpt-1-a", "ckpt-1-b"]),
     Failure(1, "checkpoint prefix ckpt-1 is ambiguous: matches ckpt-1-a, ckpt-1-b",
             "give more characters of the id")),
    (ce.UnsafePath(b"../x", "escapes"), Failure(1, "unsafe path ../x: escapes")),
    (ce.ConfigError("threads", "must be an integer"),
     Failure(1, "bad config value for threads: must be an integer",
             "'ckpt config list' shows the settings")),
    (ce.NothingMatched("no checkpoint"), Failure(3, "nothing matched: no checkpoint")),
    (ce.RestoreIncomplete("ckpt-1-a", "a.txt: busy"),
     Failure(3, "restore of ckpt-1-a incomplete: a.txt: busy",
             "the paths named were left as they are; fix them and restore again")),
    (ce.StoreBusy("/s/lock", LockOwner(4242, "box", "2026-01-01T00:00:00.000Z", "create")),
     Failure(4, "store busy: /s/lock is locked by pid 4242 on box (create) since "
                "2026-01-01T00:00:00.000Z",
             "wait for it to finish, or raise the wait with "
             "'ckpt config set lock_timeout SECONDS'")),
    (ce.CatalogCorrupt("/s/catalog.db", "not a database"),
     Failure(5, "catalog corrupt: /s/catalog.db: not a database",
             "run 'ckpt fsck --full' to list the damage")),
    (oe.CorruptObject(OID, "hash mismatch"),
     Failure(5, f"object {OID.hex()} is corrupt: hash mismatch",
             "run 'ckpt fsck --full' to list the damage")),
    (oe.InvalidTree(OID, "unsorted"),
     Failure(5, f"object {OID.hex()} is corrupt: unsorted",
             "run 'ckpt fsck --full' to list the damage")),
    (oe.ObjectNotFound(OID),
     Failure(5, f"object {OID.hex()} is missing from the store",
             "run 'ckpt fsck --full' to list the damage")),
    (oe.UnsupportedFormat("/s", "9", 1),
     Failure(5, "store /s has format version 9; this ckpt reads version 1 (upgrade ckpt to "
                "open it)", "upgrade ckpt to open this store")),
    (KeyboardInterrupt(), Failure(130, "interrupted")),
    (OSError(errno.ENOSPC, "No space left on device", "/s/objects/ab/cd"),
     Failure(1, "No space left on device: /s/objects/ab/cd",
             "free disk space, e.g. 'ckpt prune ...' then 'ckpt gc'")),
    (PermissionError(errno.EACCES, "Permission denied", "/w/a.txt"),
     Failure(1, "Permission denied: /w/a.txt", "check the permissions of that path")),
    (RuntimeError("boom"),
     Failure(1, "internal error: RuntimeError: boom",
             "rerun with --debug for a traceback, and please report it")),
    (errors.CliError("bad", hint="h", code=2), Failure(2, "bad", "h")),
])
def test_classify(exc: BaseException, expected: Failure) -> None:
    assert classify(exc) == expected


def test_store_busy_without_a_recorded_holder() -> None:
    assert classify(ce.StoreBusy("/s/lock")).message == ("store busy: /s/lock is locked by "
                                                          "another process")


def test_codes_match_the_contract() -> None:
    assert (errors.OK, errors.USER_ERROR, errors.USAGE, errors.NOTHING_MATCHED,
            errors.STORE_BUSY, errors.CORRUPTION, errors.INTERRUPTED) == (0, 1, 2, 3, 4, 5, 130)


def test_messages_are_one_line_even_for_odd_names() -> None:
    line = classify(ce.UnsafePath(b"a\nb\xff", "bad")).line()
    assert "\n" not in line and line == "ckpt: error: unsafe path a\\nb\\xff: bad"


# -- failures raised while a command runs ------------------------------------------------------

def _raise(exc: BaseException) -> Callable[..., Any]:
    def fail(*args: Any, **kwargs: Any) -> Any:
        raise exc
    return fail


@pytest.mark.in_process("patches Checkpoints.create in this process; a server runs its own copy")
def test_interrupt_exits_130(initialized: Path, ckpt_in: CkptIn,
                             monkeypatch: pytest.MonkeyPatch) -> None:
    from ckpt.checkpoints.service import Checkpoints

    monkeypatch.setattr(Checkpoints, "create", _raise(KeyboardInterrupt()))
    run = ckpt_in("create")
    assert (run.code, run.stdout, run.stderr) == (130, "", "ckpt: error: interrupted\n")


@pytest.mark.in_process("patches Checkpoints.create in this process; a server runs its own copy")
def test_os_error_names_the_path(initialized: Path, ckpt_in: CkptIn,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from ckpt.checkpoints.service import Checkpoints

    monkeypatch.setattr(Checkpoints, "create", _raise(
        OSError(errno.ENOSPC, "No space left on device", "/w/.ckpt/objects/ab/x")))
    run = ckpt_in("create", "--json")
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr == ("ckpt: error: No space left on device: /w/.ckpt/objects/ab/x "
                          "(hint: free disk space, e.g. 'ckpt prune ...' then 'ckpt gc')\n")


@pytest.mark.in_process("patches Checkpoints.history in this process; a server runs its own copy")
def test_unexpected_error_is_internal_and_debug_shows_the_traceback(
        initialized: Path, ckpt_in: CkptIn, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckpt.checkpoints.service import Checkpoints

    monkeypatch.setattr(Checkpoints, "history", _raise(RuntimeError("boom")))
    run = ckpt_in("list")
    line = ("ckpt: error: internal error: RuntimeError: boom (hint: rerun with --debug for a "
            "traceback, and please report it)\n")
    assert (run.code, run.stdout, run.stderr) == (1, "", line)
    debug = ckpt_in("--debug", "list")
    assert debug.code == 1
    assert debug.stderr.startswith("Traceback (most recent call last):\n")
    assert debug.stderr.endswith("RuntimeError: boom\n" + line)
    env = ckpt_in("list", env={"CKPT_DEBUG": "1"})
    assert env.stderr.startswith("Traceback")


@pytest.mark.in_process("patches Checkpoints.restore in this process; a server runs its own copy")
def test_partial_restore_exits_3_and_still_prints_the_report(
        initialized: Path, ckpt_in: CkptIn, monkeypatch: pytest.MonkeyPatch) -> None:
    from ckpt.checkpoints.service import Checkpoints

    a = json.loads(ckpt_in("create", "--json").stdout)["id"]
    real = Checkpoints.restore

    def partial(self: Checkpoints, *args: Any, **kwargs: Any) -> Any:
        report = real(self, *args, **kwargs)
        error = ce.RestoreIncomplete(report.id, "a.txt: permission denied")
        error.report = report  # type: ignore[attr-defined]
        raise error

    monkeypatch.setattr(Checkpoints, "restore", partial)
    run = ckpt_in("restore", a, "--json")
    assert run.code == 3
    assert json.loads(run.stdout)["id"] == a
    assert run.stderr == (f"ckpt: error: restore of {a} incomplete: a.txt: permission denied "
                          "(hint: the paths named were left as they are; fix them and restore "
                          "again)\n")


# -- names that are not UTF-8 --------------------------------------------------------------------

def test_non_utf8_names_round_trip_through_json_and_are_quoted_in_text(
        initialized: Path, ckpt_in: CkptIn) -> None:
    raw = b"caf\xe9\n.txt"
    with open(os.path.join(os.fsencode(initialized), raw), "wb") as out:
        out.write(b"x")
    a = json.loads(ckpt_in("create", "--json").stdout)["id"]
    os.unlink(os.path.join(os.fsencode(initialized), raw))
    run = ckpt_in("diff", a, "--json")
    assert run.code == 0
    assert b"\\udce9" in run.stdout_bytes and b"\\n" in run.stdout_bytes
    run.stdout_bytes.decode("utf-8")  # valid UTF-8 whatever the names
    (change,) = json.loads(run.stdout_bytes)
    assert os.fsencode(change["path"]) == raw and change["change"] == "D"
    plain = ckpt_in("diff", a)
    assert plain.stdout_bytes == b'D "caf\\351\\n.txt"\n'
    files = json.loads(ckpt_in("show", a, "--json").stdout_bytes)["files"]
    assert raw in [os.fsencode(f["path"]) for f in files]


def test_the_cli_and_the_library_put_values_into_messages_the_same_way() -> None:
    assert errors.show is display_text


@given(st.one_of(st.binary(), st.text(), st.integers(), st.lists(st.text(), max_size=3)))
def test_any_value_shows_as_one_printable_line(value: object) -> None:
    text = display_text(value)
    assert text.isprintable()  # so no line break, no escape sequence reaches the terminal
    if isinstance(value, str) and value.isprintable() and value.isascii():
        assert text == value
