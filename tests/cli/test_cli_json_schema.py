"""`--json` output of every command: keys and types exactly as docs/CLI.md documents them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

CkptIn = Callable[..., Any]
OPT_STR = (str, type(None))

RECORD = {"id": str, "label": OPT_STR, "reason": OPT_STR, "turn_id": OPT_STR,
          "message_id": OPT_STR, "tool_call_id": OPT_STR, "summary": OPT_STR, "metadata": dict,
          "session": str, "scope": str, "parent": OPT_STR, "tree": str, "created_at": str,
          "stats": dict, "paths": list, "skipped": list}
STATS = {"files": int, "bytes": int, "new_objects": int, "new_bytes": int, "skipped": int,
         "duration_ms": int}
RESTORE_COUNTS = {"id": str, "written": int, "deleted": int, "dirs_created": int,
                  "dirs_removed": int, "unchanged": int, "bytes_written": int,
                  "pre_restore": OPT_STR, "discarded": list}
RESTORE = {**RESTORE_COUNTS, "conflicts": list, "not_captured": list, "later_tracked": list,
           "undid": OPT_STR, "target": OPT_STR}
PATH_REASON = {"path": str, "reason": str}
FILE_ENTRY = {"path": str, "kind": str, "size": int}
EVENT_BASE = {"type": str, "at": str, "session": str}
CREATE_EVENT = {**EVENT_BASE, "id": str, "label": OPT_STR, "reason": OPT_STR,
                "turn_id": OPT_STR, "duration_ms": int, "files": int, "hashed": int,
                "new_objects": int, "new_bytes": int, "skipped": list}
RESTORE_EVENT = {**EVENT_BASE, **RESTORE_COUNTS, "duration_ms": int, "conflicts": int,
                 "target": OPT_STR, "undid": OPT_STR}


def check(value: Any, schema: dict[str, Any]) -> None:
    """Exactly the keys of `schema`, each of its type (bool is not an int here)."""
    assert isinstance(value, dict), value
    assert list(value) == list(schema), (list(value), list(schema))
    for key, kind in schema.items():
        kinds = kind if isinstance(kind, tuple) else (kind,)
        item = value[key]
        assert type(item) in kinds or (float in kinds and type(item) is int), (key, item)


def check_record(rec: Any, schema: dict[str, Any] = RECORD) -> None:
    check(rec, schema)
    check(rec["stats"], STATS)
    assert rec["scope"] in ("tree", "paths")
    assert len(rec["tree"]) == 64 and rec["created_at"].endswith("Z")


def doc(run: Any) -> Any:
    assert run.code == 0, run.stderr
    return json.loads(run.stdout)


@pytest.fixture
def two(initialized: Path, ckpt_in: CkptIn) -> tuple[str, str]:
    a = doc(ckpt_in("create", "--json", "--meta", "k=v"))["id"]
    (initialized / "a.txt").write_text("changed\n")
    b = doc(ckpt_in("create", "--json"))["id"]
    return a, b


def test_init_schema(ws: Path, ckpt_in: CkptIn) -> None:
    check(doc(ckpt_in("init", "--json")), {"store": str, "root": str, "workspace": (str, type(None)),
                                           "reused": bool})


def test_track_and_untrack_schema(initialized: Path, ckpt_in: CkptIn) -> None:
    for command in ("track", "untrack"):
        out = doc(ckpt_in(command, "a.txt", "--json"))
        check(out, {"tracked": list})
        assert all(isinstance(p, str) for p in out["tracked"])


def test_create_latest_list_schema(initialized: Path, ckpt_in: CkptIn) -> None:
    check_record(doc(ckpt_in("create", "--json")))
    check_record(doc(ckpt_in("latest", "--json")))
    records = doc(ckpt_in("list", "--json"))
    assert isinstance(records, list) and len(records) == 1
    listed = {**RECORD, "changed": (int, type(None))}
    check_record(records[0], listed)
    for rec in doc(ckpt_in("list", "--all-sessions", "--json")):
        check_record(rec, listed)


def test_show_schema(two: tuple[str, str], ckpt_in: CkptIn) -> None:
    out = doc(ckpt_in("show", two[0], "--json"))
    check(out, {**RECORD, "files": list, "absent": list})
    for entry in out["files"]:
        extra = {"target": str} if entry["kind"] == "symlink" else {"oid": str}
        check(entry, {**FILE_ENTRY, **extra})
        assert entry["kind"] in ("file", "executable", "symlink")


def test_diff_schema(two: tuple[str, str], ckpt_in: CkptIn) -> None:
    for args in ([two[0]], list(two)):
        changes = doc(ckpt_in("diff", *args, "--json"))
        assert changes
        for change in changes:
            check(change, {"path": str, "change": str})
            assert change["change"] in "AMDT"


def check_restore(report: Any) -> None:
    check(report, RESTORE)
    for item in report["conflicts"] + report["not_captured"]:
        check(item, PATH_REASON)
    assert all(isinstance(p, str) for p in report["later_tracked"])


def test_restore_and_dry_run_schema(two: tuple[str, str], ckpt_in: CkptIn) -> None:
    dry = doc(ckpt_in("restore", two[0], "--dry-run", "--json"))
    check_restore(dry)
    assert dry["pre_restore"] is None
    out = doc(ckpt_in("restore", two[0], "--json"))
    check_restore(out)
    assert isinstance(out["pre_restore"], str)


def test_restore_lists_schema(initialized: Path, ckpt_in: CkptIn) -> None:
    """The lists of a restore report hold typed items: a conflict, a path not captured and a
    path first tracked after a tracked-scope target."""
    assert ckpt_in("config", "set", "max_file_size", "1000").code == 0
    (initialized / "app.log").write_text("captured\n")
    first = doc(ckpt_in("create", "--json"))["id"]
    (initialized / "big.bin").write_bytes(b"x" * 2000)
    (initialized / ".gitignore").write_text("*.log\n")
    (initialized / "app.log").write_text("newer\n")
    run = ckpt_in("restore", first, "--json")
    assert run.code == 3, run.stderr
    out = json.loads(run.stdout)
    check_restore(out)
    assert [c["path"] for c in out["conflicts"]] == ["app.log"]
    assert out["not_captured"] == [{"path": "big.bin", "reason": "too-large"}]

    tracked = ("--session", "tracked")
    assert ckpt_in(*tracked, "track", "a.txt").code == 0
    first = doc(ckpt_in(*tracked, "create", "--json"))["id"]
    assert ckpt_in(*tracked, "track", "later.txt").code == 0
    doc(ckpt_in(*tracked, "create", "--json"))
    (initialized / "later.txt").write_text("the agent's\n")
    out = doc(ckpt_in(*tracked, "restore", first, "--json"))
    check_restore(out)
    assert out["later_tracked"] == ["later.txt"]


def test_recover_schema(initialized: Path, ckpt_in: CkptIn) -> None:
    check(doc(ckpt_in("recover", "--json")), {"recovered": bool, "restore": type(None)})


def test_prune_schema(two: tuple[str, str], ckpt_in: CkptIn) -> None:
    for extra in (["--dry-run"], []):
        out = doc(ckpt_in("prune", "--keep-latest", "1", "--json", *extra))
        check(out, {"removed": list, "objects_removed": int, "bytes_freed": int,
                    "dry_run": bool, "gc": (dict, type(None)), "gc_error": type(None)})
        assert out["removed"] == [two[0]]
        assert (out["gc"] is None) == bool(extra)


def test_gc_schema(two: tuple[str, str], ckpt_in: CkptIn) -> None:
    for extra in (["--dry-run"], []):
        check(doc(ckpt_in("gc", "--json", *extra)),
              {"objects_removed": int, "bytes_freed": int, "objects_kept": int,
               "objects_young": int, "temporaries_removed": int, "dry_run": bool,
               "held_back": (dict, type(None)), "compaction_error": (str, type(None))})


FSCK = {"ok": bool, "full": bool, "repaired": list, "trees_checked": int, "blobs_checked": int,
        "objects_verified": int, "problems": list, "damaged_checkpoints": list,
        "damaged_files": list, "damaged_caches": list, "remote_only": list, "stranded": list}


def test_fsck_schema(two: tuple[str, str], ckpt_in: CkptIn) -> None:
    for extra in (["--full"], []):
        out = doc(ckpt_in("fsck", "--json", *extra))
        check(out, FSCK)
        assert out["ok"] is True and out["problems"] == []


def test_stats_schema(two: tuple[str, str], ckpt_in: CkptIn) -> None:
    out = doc(ckpt_in("stats", "--json"))
    check(out, {"objects": int, "stored_bytes": int, "logical_bytes": int,
                "dedup_ratio": float, "checkpoints": int, "sessions": dict, "roots": dict,
                "saved_by_dedup": int, "saved_by_dictionaries": int, "saved_by_deltas": int})
    assert out["sessions"] == {"default": 2}


def test_events_schema(two: tuple[str, str], ckpt_in: CkptIn) -> None:
    ckpt_in("restore", two[0])
    ckpt_in("prune", "--reason", "pre-restore")
    events = doc(ckpt_in("events", "--json"))
    assert [e["type"] for e in events] == ["checkpoint:create"] * 3 + [
        "checkpoint:restore", "checkpoint:prune"]
    for event in events:
        if event["type"] == "checkpoint:create":
            check(event, CREATE_EVENT)
        elif event["type"] == "checkpoint:restore":
            check(event, RESTORE_EVENT)
        else:
            assert list(event)[:3] == list(EVENT_BASE)
            assert isinstance(event["removed"], list) and "reason" in event


def test_cat_schema(two: tuple[str, str], ckpt_in: CkptIn) -> None:
    check(doc(ckpt_in("cat", two[0], "a.txt", "--json")),
          {"id": str, "path": str, "content_base64": str, "size": int})


def test_config_schema(initialized: Path, ckpt_in: CkptIn) -> None:
    check(doc(ckpt_in("config", "get", "threads", "--json")), {"key": str, "value": int})
    check(doc(ckpt_in("config", "set", "fsync", "none", "--json")), {"key": str, "value": str})
    out = doc(ckpt_in("config", "list", "--json"))
    check(out, {"compression_level": int, "threads": int, "fsync": str, "max_file_size": int,
                "retention_cap": int, "extra_ignore": list, "use_gitignore": bool,
                "gc_grace_seconds": int, "lock_timeout": float, "server": str,
                "server_idle": float, "server_verify": float, "dictionaries": bool,
                "deltas": bool, "delta_chain": int,
                "block_size": int})
