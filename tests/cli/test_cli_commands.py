"""Every command through click's CliRunner: stdout, stderr and exit code pinned."""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ckpt.objstore import ObjectStore
from ckpt.objstore.ids import parse_oid

CkptIn = Callable[..., Any]

ID = r"ckpt-\d{13}-[0-9a-z]{8}"
INIT_HINT = "(hint: run 'ckpt init', or pass --root/--store)"


def create(ckpt_in: CkptIn, *args: str) -> str:
    run = ckpt_in("create", *args)
    assert run.code == 0, run.stderr
    assert run.stderr == ""
    assert re.fullmatch(ID + "\n", run.stdout)
    return str(run.stdout.strip())


# -- init -------------------------------------------------------------------------------

def test_init_prints_the_store_path_and_is_idempotent(ws: Path, ckpt_in: CkptIn) -> None:
    first = ckpt_in("init")
    assert (first.code, first.stdout, first.stderr) == (0, f"{ws}/.ckpt\n", "")
    again = ckpt_in("init", "--json")
    assert again.code == 0 and again.stderr == ""
    doc = json.loads(again.stdout)
    assert doc == {"store": f"{ws}/.ckpt", "root": str(ws), "workspace": doc["workspace"],
                   "reused": True}


def test_init_of_a_missing_root_is_a_user_error(ws: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("--root", str(ws / "nope"), "init")
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr == (f"ckpt: error: workspace root {ws}/nope is not a directory "
                          "(hint: create it first, or pass --root DIR)\n")


@pytest.mark.parametrize("args", [["list"], ["create"], ["latest"], ["show", "x"],
                                  ["stats"], ["events"], ["config", "list"], ["track", "a.txt"],
                                  ["restore", "x"], ["gc"], ["fsck"], ["recover"]])
def test_uninitialized_root_exits_1_with_init_hint(ws: Path, ckpt_in: CkptIn,
                                                   args: list[str]) -> None:
    run = ckpt_in(*args, "--json")
    assert (run.code, run.stdout) == (1, "")
    store_msg = f"ckpt: error: not initialized: no ckpt store at {ws}/.ckpt"
    assert run.stderr.startswith(store_msg)
    assert run.stderr.endswith(f"{INIT_HINT}\n")
    assert run.stderr.count("\n") == 1


def test_uninitialized_message_names_root_and_store(ws: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("list")
    assert run.stderr == (f"ckpt: error: not initialized: no ckpt store at {ws}/.ckpt for root "
                          f"{ws} {INIT_HINT}\n")


# -- create / list / latest -----------------------------------------------------------------

def test_create_prints_the_id_alone(initialized: Path, ckpt_in: CkptIn) -> None:
    create(ckpt_in, "-m", "first")


def test_create_json_carries_every_field(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("create", "-m", "L", "--reason", "pre-tool", "--turn", "7", "--message", "m1",
                  "--tool-call", "c9", "--summary", "S", "--meta", "k=v", "--meta", "eq=a=b",
                  "--json")
    assert run.code == 0 and run.stderr == ""
    rec = json.loads(run.stdout)
    assert (rec["label"], rec["reason"], rec["turn_id"], rec["message_id"], rec["tool_call_id"],
            rec["summary"]) == ("L", "pre-tool", "7", "m1", "c9", "S")
    assert rec["metadata"] == {"k": "v", "eq": "a=b"}
    assert rec["scope"] == "tree" and rec["session"] == "default" and rec["parent"] is None
    assert rec["stats"]["files"] == 3


def test_create_meta_without_equals_is_a_usage_error(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("create", "--meta", "novalue")
    assert run.code == 2 and run.stdout == ""
    assert "Invalid value for '--meta': 'novalue' is not KEY=VALUE" in run.stderr


def test_create_path_covers_only_that_path(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("create", "--path", "sub", "--json")
    assert run.code == 0, run.stderr
    rec = json.loads(run.stdout)
    assert rec["scope"] == "paths"
    files = json.loads(ckpt_in("show", rec["id"], "--json").stdout)["files"]
    assert [f["path"] for f in files] == ["sub/b.txt"]


def test_create_names_skipped_files_on_stderr(initialized: Path, ckpt_in: CkptIn) -> None:
    assert ckpt_in("config", "set", "max_file_size", "10").code == 0
    run = ckpt_in("create")
    assert run.code == 0
    assert re.fullmatch(ID + "\n", run.stdout)
    assert "ckpt: warning: not captured: run.sh (too-large)\n" in run.stderr


def test_list_is_an_aligned_table_oldest_first(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in, "-m", "one", "--reason", "pre-tool", "--turn", "1")
    (initialized / "a.txt").write_text("changed\n")
    b = create(ckpt_in, "-m", "two", "--turn", "2")
    run = ckpt_in("list")
    assert run.code == 0 and run.stderr == ""
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["id", "created", "(UTC)", "age", "reason", "turn", "label",
                                "files", "changed"]
    assert lines[1].startswith(a) and lines[2].startswith(b)
    cells = [re.split(r"\s{2,}", line) for line in lines[1:]]
    assert cells[0][0] == a and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", cells[0][1])
    assert re.fullmatch(r"just now|\d+ s ago", cells[0][2])
    assert cells[0][3:] == ["pre-tool", "1", "one", "3", "3"]
    # "changed" counts files read again: at least the edited one (racy files are re-read too)
    assert cells[1][0] == b and cells[1][3:6] == ["-", "2", "two"] and cells[1][6] == "3"
    assert 1 <= int(cells[1][7]) <= 3
    # numbers are right-aligned under their header
    end = lines[0].index("files") + len("files")
    assert all(line[end - 1].isdigit() and line[end] == " " for line in lines[1:])


def test_list_filters_and_all_sessions(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in, "--reason", "pre-tool")
    create(ckpt_in, "--reason", "post-tool")
    s2 = ckpt_in("--session", "s2", "create").stdout.strip()
    filtered = ckpt_in("list", "--reason", "pre-tool", "--json")
    assert [r["id"] for r in json.loads(filtered.stdout)] == [a]
    assert all(s2 not in line for line in ckpt_in("list").stdout.splitlines())
    every = ckpt_in("list", "--all-sessions")
    header = every.stdout.splitlines()[0].split()
    assert header[4] == "session"
    assert any(line.startswith(s2) and " s2 " in line for line in every.stdout.splitlines())


def test_list_of_an_empty_session_prints_nothing(initialized: Path, ckpt_in: CkptIn) -> None:
    assert (ckpt_in("list").code, ckpt_in("list").stdout) == (0, "")
    assert json.loads(ckpt_in("list", "--json").stdout) == []


def test_latest_prints_the_newest_match(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in, "--turn", "1")
    b = create(ckpt_in, "--turn", "2")
    assert ckpt_in("latest").stdout == f"{b}\n"
    run = ckpt_in("latest", "--turn", "1")
    assert (run.code, run.stdout, run.stderr) == (0, f"{a}\n", "")


def test_latest_with_no_match_exits_3(initialized: Path, ckpt_in: CkptIn) -> None:
    create(ckpt_in, "--turn", "1")
    run = ckpt_in("latest", "--turn", "99", "--reason", "x")
    assert (run.code, run.stdout) == (3, "")
    assert run.stderr == ("ckpt: error: nothing matched: no checkpoint in session default "
                          "with turn 99 and reason x\n")
    empty = ckpt_in("--session", "nobody", "latest", "--json")
    assert (empty.code, empty.stdout) == (3, "")
    assert empty.stderr == "ckpt: error: nothing matched: no checkpoint in session nobody\n"


# -- ids ---------------------------------------------------------------------------------

def test_unknown_id_exits_1_naming_it(initialized: Path, ckpt_in: CkptIn) -> None:
    create(ckpt_in)
    for args in (["show", "ckpt-nope"], ["restore", "ckpt-nope"], ["diff", "ckpt-nope"],
                 ["cat", "ckpt-nope", "a.txt"]):
        run = ckpt_in(*args)
        assert (run.code, run.stdout) == (1, ""), args
        assert run.stderr == ("ckpt: error: unknown checkpoint ckpt-nope "
                              "(hint: 'ckpt list --all-sessions' shows the ids)\n")


def test_ambiguous_prefix_exits_1_listing_candidates(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    b = create(ckpt_in)
    common = os.path.commonprefix([a, b])  # noqa: RUF071 (ids: characters are the point)
    run = ckpt_in("show", common)
    assert (run.code, run.stdout) == (1, "")
    first, second = sorted([a, b])
    assert run.stderr == (f"ckpt: error: checkpoint prefix {common} is ambiguous: matches "
                          f"{first}, {second} (hint: give more characters of the id)\n")


def test_a_unique_prefix_is_accepted(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    run = ckpt_in("show", a[:12], "--json")
    assert run.code == 0 and json.loads(run.stdout)["id"] == a


# -- show / diff / cat ---------------------------------------------------------------------

def test_show_lists_record_and_files(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in, "-m", "first", "--meta", "k=v")
    run = ckpt_in("show", a)
    assert run.code == 0 and run.stderr == ""
    out = run.stdout
    assert out.startswith(f"id         {a}\ncreated    ")
    assert "label      first\n" in out and "metadata   k=v\n" in out
    assert out.endswith("kind        size  path\n"
                        "file           6  a.txt\n"
                        "symlink        0  link -> a.txt\n"
                        "executable    18  run.sh\n"
                        "file           5  sub/b.txt\n")


def test_show_json_files(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    files = json.loads(ckpt_in("show", a, "--json").stdout)["files"]
    by_path = {f["path"]: f for f in files}
    assert by_path["link"] == {"path": "link", "kind": "symlink", "size": 0, "target": "a.txt"}
    assert by_path["run.sh"]["kind"] == "executable"
    assert re.fullmatch("[0-9a-f]{64}", by_path["a.txt"]["oid"])


def test_diff_against_the_working_tree_and_between_ids(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    (initialized / "a.txt").write_text("changed\n")
    (initialized / "sub" / "b.txt").unlink()
    (initialized / "new.txt").write_text("new\n")
    (initialized / "link").unlink()
    (initialized / "link").write_text("now a file\n")
    run = ckpt_in("diff", a)
    assert (run.code, run.stderr) == (0, "")
    assert run.stdout == "M a.txt\nT link\nA new.txt\nD sub/b.txt\n"
    b = create(ckpt_in)
    between = ckpt_in("diff", a, b, "--json")
    assert json.loads(between.stdout) == [
        {"path": "a.txt", "change": "M"}, {"path": "link", "change": "T"},
        {"path": "new.txt", "change": "A"}, {"path": "sub/b.txt", "change": "D"}]
    assert ckpt_in("diff", b).stdout == ""


def test_cat_streams_the_bytes(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    (initialized / "a.txt").write_text("changed\n")
    run = ckpt_in("cat", a, "a.txt")
    assert (run.code, run.stdout_bytes, run.stderr) == (0, b"alpha\n", "")
    assert ckpt_in("cat", a, "link").stdout_bytes == b"a.txt"


def test_cat_json_is_base64(initialized: Path, ckpt_in: CkptIn) -> None:
    payload = bytes(range(256)) * 3 + b"x"
    (initialized / "bin.dat").write_bytes(payload)
    a = create(ckpt_in)
    doc = json.loads(ckpt_in("cat", a, "bin.dat", "--json").stdout)
    assert doc == {"id": a, "path": "bin.dat",
                   "content_base64": base64.b64encode(payload).decode(), "size": len(payload)}
    empty = initialized / "empty"
    empty.write_bytes(b"")
    e = create(ckpt_in)
    assert json.loads(ckpt_in("cat", e, "empty", "--json").stdout)["content_base64"] == ""


def test_cat_of_a_missing_file_names_it(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    for extra in ([], ["--json"]):
        run = ckpt_in("cat", a, "nope.txt", *extra)
        assert (run.code, run.stdout) == (1, "")
        assert run.stderr == (f"ckpt: error: no file nope.txt in checkpoint {a} "
                              f"(hint: 'ckpt show {a}' lists its files)\n")


# -- restore / recover -----------------------------------------------------------------------

RESTORE_LINE = (r"restored (?P<id>{id}): (?P<w>\d+) written, (?P<d>\d+) deleted, \d+ dirs created, "
                r"\d+ dirs removed, \d+ unchanged \([^)]*\); undo: ckpt restore (?P<pre>{id})\n")


def test_restore_prints_one_summary_line_and_undo_works(initialized: Path,
                                                        ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    (initialized / "a.txt").write_text("changed\n")
    (initialized / "new.txt").write_text("new\n")
    run = ckpt_in("restore", a)
    assert (run.code, run.stderr) == (0, "")
    m = re.fullmatch(RESTORE_LINE.format(id=ID), run.stdout)
    assert m and m["id"] == a and (m["w"], m["d"]) == ("1", "1")
    assert (initialized / "a.txt").read_text() == "alpha\n"
    assert not (initialized / "new.txt").exists()
    undo = ckpt_in("restore", m["pre"], "--no-save")
    assert undo.code == 0
    assert undo.stdout.startswith(f"restored {m['pre']}: 2 written, 0 deleted")
    assert "undo:" not in undo.stdout
    assert (initialized / "a.txt").read_text() == "changed\n"
    assert (initialized / "new.txt").read_text() == "new\n"


def test_restore_dry_run_lists_the_plan_and_changes_nothing(initialized: Path,
                                                           ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    (initialized / "a.txt").write_text("changed\n")
    (initialized / "sub" / "b.txt").unlink()
    (initialized / "sub").rmdir()
    (initialized / "new.txt").write_text("new\n")
    (initialized / "run.sh").chmod(0o644)
    run = ckpt_in("restore", a, "--dry-run")
    assert (run.code, run.stderr) == (0, "")
    assert run.stdout == (
        "mkdir  sub\n"
        "write  a.txt\n"
        "write  sub/b.txt\n"
        "chmod  0755 run.sh\n"
        "delete new.txt\n"
        f"would restore {a}: 3 written, 1 deleted, 1 dirs created, 0 dirs removed, "
        "1 unchanged (11 B)\n")
    assert (initialized / "a.txt").read_text() == "changed\n"
    assert (initialized / "new.txt").exists()
    assert [r["reason"] for r in json.loads(ckpt_in("list", "--json").stdout)] == [None]


def test_restore_json_keys_no_save_and_path(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    (initialized / "a.txt").write_text("changed\n")
    (initialized / "sub" / "b.txt").write_text("changed too\n")
    run = ckpt_in("restore", a, "--no-save", "--path", "sub/b.txt", "--json")
    assert (run.code, run.stderr) == (0, "")
    assert json.loads(run.stdout) == {
        "id": a, "written": 1, "deleted": 0, "dirs_created": 0, "dirs_removed": 0,
        "unchanged": json.loads(run.stdout)["unchanged"], "bytes_written": 5,
        "pre_restore": None, "discarded": [], "conflicts": [], "not_captured": [],
        "later_tracked": [], "undid": None, "target": None}
    assert (initialized / "sub" / "b.txt").read_text() == "beta\n"
    assert (initialized / "a.txt").read_text() == "changed\n"


def test_restore_path_is_relative_to_the_current_directory(
        initialized: Path, ckpt_in: CkptIn, monkeypatch: pytest.MonkeyPatch) -> None:
    a = create(ckpt_in)
    (initialized / "sub" / "b.txt").write_text("changed\n")
    monkeypatch.chdir(initialized / "sub")
    run = ckpt_in("restore", a, "--path", "b.txt", "--no-save")
    assert run.code == 0, run.stderr
    assert (initialized / "sub" / "b.txt").read_text() == "beta\n"


def test_restore_discard_later_and_no_event(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    (initialized / "a.txt").write_text("2\n")
    b = create(ckpt_in)
    run = ckpt_in("restore", a, "--discard-later", "--no-event", "--json")
    report = json.loads(run.stdout)
    assert report["discarded"] == [b]
    ids = [r["id"] for r in json.loads(ckpt_in("list", "--json").stdout)]
    assert ids == [a, report["pre_restore"]]
    kinds = [e["type"] for e in json.loads(ckpt_in("events", "--json").stdout)]
    assert "checkpoint:restore" not in kinds


def test_recover_with_nothing_to_do(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("recover")
    assert (run.code, run.stdout, run.stderr) == (0, "nothing to recover\n", "")
    assert json.loads(ckpt_in("recover", "--json").stdout) == {"recovered": False,
                                                              "restore": None}


# -- track / untrack ---------------------------------------------------------------------------

def test_track_and_untrack(initialized: Path, ckpt_in: CkptIn,
                           monkeypatch: pytest.MonkeyPatch) -> None:
    run = ckpt_in("track", "a.txt", "gone.txt")
    assert (run.code, run.stdout, run.stderr) == (0, "", "")
    monkeypatch.chdir(initialized / "sub")
    run = ckpt_in("track", "b.txt", "--json")
    assert json.loads(run.stdout) == {"tracked": ["a.txt", "gone.txt", "sub/b.txt"]}
    rec = json.loads(ckpt_in("create", "--json").stdout)
    assert rec["scope"] == "paths"
    paths = [f["path"] for f in json.loads(ckpt_in("show", rec["id"], "--json").stdout)["files"]]
    assert paths == ["a.txt", "sub/b.txt"]
    run = ckpt_in("untrack", "../gone.txt", "b.txt", "--json")
    assert json.loads(run.stdout) == {"tracked": ["a.txt"]}


def test_track_outside_the_root_is_refused(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("track", "../elsewhere")
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr.startswith("ckpt: error: unsafe path ../elsewhere: not inside the "
                                 "workspace root")


def test_track_needs_a_path(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("track")
    assert run.code == 2 and "Missing argument 'PATHS...'" in run.stderr


# -- prune / gc / fsck / stats / events ------------------------------------------------------

def test_prune_needs_a_filter(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("prune")
    assert (run.code, run.stdout) == (2, "")
    assert ("Error: give at least one of --reason, --turn, --keep-latest, --older-than"
            in run.stderr)


def test_prune_keep_latest_and_dry_run(initialized: Path, ckpt_in: CkptIn) -> None:
    ids = []
    for i in range(3):
        (initialized / "a.txt").write_text(f"{i}\n")
        ids.append(create(ckpt_in, "--reason", "pre-tool"))
    dry = ckpt_in("prune", "--keep-latest", "1", "--dry-run")
    assert (dry.code, dry.stderr) == (0, "")
    assert dry.stdout == (f"would remove {ids[0]}\nwould remove {ids[1]}\n"
                          "would remove 2 checkpoint(s)\n")
    run = ckpt_in("prune", "--reason", "pre-tool", "--keep-latest", "1")
    assert (run.code, run.stderr) == (0, "")
    assert re.fullmatch(r"removed 2 checkpoint\(s\), \d+ object\(s\), [\d.]+ [KMG]?i?B freed\n"
                        r"(held back \d+ unreachable object\(s\) .* UTC\n)?", run.stdout)
    assert [r["id"] for r in json.loads(ckpt_in("list", "--json").stdout)] == [ids[2]]


def test_prune_older_than(initialized: Path, ckpt_in: CkptIn) -> None:
    create(ckpt_in)
    kept = ckpt_in("prune", "--older-than", "1h", "--json")
    assert json.loads(kept.stdout) == {"removed": [], "objects_removed": 0, "bytes_freed": 0,
                                       "dry_run": False, "gc": None, "gc_error": None}
    bad = ckpt_in("prune", "--older-than", "30")
    assert bad.code == 2
    assert "Invalid value for '--older-than': '30' is not a duration" in bad.stderr


def test_gc(initialized: Path, ckpt_in: CkptIn) -> None:
    create(ckpt_in)
    run = ckpt_in("gc")
    assert (run.code, run.stderr) == (0, "")
    assert re.fullmatch(r"removed 0 object\(s\), 0 B; kept \d+ reachable, 0 young\n", run.stdout)
    assert ckpt_in("gc", "--dry-run").stdout.startswith("would remove 0 object(s)")


def test_fsck_ok(initialized: Path, ckpt_in: CkptIn) -> None:
    create(ckpt_in)
    run = ckpt_in("fsck")
    assert (run.code, run.stderr) == (0, "")
    assert re.fullmatch(r"ok: \d+ trees, \d+ blobs\n", run.stdout)
    full = ckpt_in("fsck", "--full")
    assert re.fullmatch(r"ok: \d+ trees, \d+ blobs, \d+ objects verified\n", full.stdout)


def test_stats(initialized: Path, ckpt_in: CkptIn) -> None:
    create(ckpt_in)
    ckpt_in("--session", "s2", "create")
    run = ckpt_in("stats")
    assert (run.code, run.stderr) == (0, "")
    lines = run.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("checkpoints"))
    assert [line.split()[:2] for line in lines][at + 1:] == [
        ["session", "default"], ["session", "s2"], ["root", str(initialized)]]
    assert lines[at] == "checkpoints    2 (every root and session of the store)"
    assert [re.split(r"\s{2,}", line)[0] for line in lines[:at]] == [
        "objects", "on disk", "logical", "dedup ratio", "dedup saved", "dictionaries",
        "deltas saved"]


def test_events(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in, "-m", "one")
    ckpt_in("restore", a, "--no-save")
    run = ckpt_in("events")
    assert (run.code, run.stderr) == (0, "")
    lines = run.stdout.splitlines()
    assert lines[0].split() == ["at", "(UTC)", "type", "session", "details"]
    assert "checkpoint:create" in lines[1] and f"id={a}" in lines[1] and "label=one" in lines[1]
    assert "checkpoint:restore" in lines[2]
    only = json.loads(ckpt_in("events", "--type", "checkpoint:restore", "--json").stdout)
    assert [e["type"] for e in only] == ["checkpoint:restore"]
    last = json.loads(ckpt_in("events", "--limit", "1", "--json").stdout)
    assert [e["type"] for e in last] == ["checkpoint:restore"]


# -- config ------------------------------------------------------------------------------------

def test_config_get_set_list(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("config", "get", "compression_level")
    assert (run.code, run.stdout, run.stderr) == (0, "1\n", "")
    run = ckpt_in("config", "set", "extra_ignore", "*.log, build/")
    assert (run.code, run.stdout) == (0, "extra_ignore = *.log,build/\n")
    assert json.loads(ckpt_in("config", "get", "extra_ignore", "--json").stdout) == {
        "key": "extra_ignore", "value": ["*.log", "build/"]}
    listing = ckpt_in("config", "list").stdout.splitlines()
    assert "lock_timeout = 10.0" in listing and "use_gitignore = true" in listing
    doc = json.loads(ckpt_in("config", "list", "--json").stdout)
    assert doc["use_gitignore"] is True and doc["max_file_size"] == 100 * 1024 * 1024


def test_config_errors_exit_1(initialized: Path, ckpt_in: CkptIn) -> None:
    run = ckpt_in("config", "set", "compression_level", "99")
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr.startswith("ckpt: error: bad config value for compression_level: ")
    assert run.stderr.endswith("(hint: 'ckpt config list' shows the settings)\n")
    unknown = ckpt_in("config", "get", "nope")
    assert unknown.code == 1 and "bad config value for nope: unknown setting" in unknown.stderr


def test_a_broken_config_file_is_named_with_a_hint(initialized: Path, ckpt_in: CkptIn) -> None:
    path = initialized / ".ckpt" / "config.toml"
    path.write_text("lock_timeout = 'soon'\n")
    for args in (["list"], ["config", "set", "lock_timeout", "5"]):
        run = ckpt_in(*args)
        assert (run.code, run.stdout) == (1, ""), args
        assert run.stderr == (
            "ckpt: error: bad config value for lock_timeout: must be a number of seconds, "
            f"not str (in {path}) (hint: fix or delete that file (every setting has a "
            "default))\n")


# -- global options, usage, help -----------------------------------------------------------------

def test_version_is_the_distribution_version(ckpt_in: CkptIn) -> None:
    from importlib.metadata import version

    run = ckpt_in("--version")
    assert (run.code, run.stdout, run.stderr) == (0, f"ckpt {version('ckpt')}\n", "")


def test_unknown_command_is_a_usage_error(ckpt_in: CkptIn) -> None:
    run = ckpt_in("frobnicate")
    assert (run.code, run.stdout) == (2, "")
    assert "Error: No such command 'frobnicate'." in run.stderr


COMMANDS = ["init", "track", "untrack", "create", "list", "latest", "show", "diff", "restore",
            "prune", "gc", "fsck", "stats", "events", "cat", "recover", "config"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example_and_json(ckpt_in: CkptIn, command: str) -> None:
    run = ckpt_in(command, "--help")
    assert run.code == 0
    assert "Examples:" in run.stdout and f"ckpt {command}" in run.stdout
    if command != "config":
        assert "--json" in run.stdout


def test_top_level_help_documents_exit_codes_env_and_completion(ckpt_in: CkptIn) -> None:
    out = ckpt_in("--help").stdout
    assert "4 store busy" in out and "130 interrupted" in out
    assert "CKPT_ROOT" in out and "_CKPT_COMPLETE=bash_source ckpt" in out


def test_session_and_store_options(ws: Path, ckpt_in: CkptIn, tmp_path: Path) -> None:
    store = tmp_path / "elsewhere"
    assert ckpt_in("--store", str(store), "init").stdout == f"{store}\n"
    run = ckpt_in("--store", str(store), "--session", "t1", "create", "--json")
    assert json.loads(run.stdout)["session"] == "t1"
    env_run = ckpt_in("list", "--json", env={"CKPT_STORE": str(store), "CKPT_SESSION": "t1"})
    assert len(json.loads(env_run.stdout)) == 1
    assert not (ws / ".ckpt" / "format").exists()  # only the link naming the store


def test_missing_object_exits_5_for_restore_and_fsck(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    oid = next(f["oid"] for f in json.loads(ckpt_in("show", a, "--json").stdout)["files"]
               if f["path"] == "sub/b.txt")
    store = ObjectStore.open(str(initialized / ".ckpt"))
    assert store.backend.delete(parse_oid(oid)) > 0  # from its pack, or its loose file
    store.close()
    (initialized / "sub" / "b.txt").write_text("edited\n")
    run = ckpt_in("restore", a, "--no-save")
    assert (run.code, run.stdout) == (5, "")
    assert run.stderr == (f"ckpt: error: object {oid} is missing from the store "
                          "(hint: run 'ckpt fsck --full' to list the damage)\n")
    assert (initialized / "sub" / "b.txt").read_text() == "edited\n"
    fsck = ckpt_in("fsck")
    assert fsck.code == 5
    assert re.fullmatch(rf"missing object {oid} \(in tree [0-9a-f]{{64}} as b.txt\)\n"
                        rf"damaged checkpoint {a}\n", fsck.stdout)


def test_docs_describe_every_command() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "CLI.md").read_text()
    for command in COMMANDS:
        assert f"### `ckpt {command}" in docs or f"`ckpt {command} PATH...`" in docs, command


def test_restore_path_that_matches_nothing_exits_3(initialized: Path, ckpt_in: CkptIn) -> None:
    a = create(ckpt_in)
    for extra in ([], ["--dry-run"]):
        run = ckpt_in("restore", a, "--path", "nope.txt", "--json", *extra)
        assert (run.code, run.stdout) == (3, "")
        assert run.stderr == (f"ckpt: error: nothing matched: --path nope.txt matches nothing "
                              f"in {a} or the workspace\n")


def test_text_that_is_not_utf8_is_a_usage_error(initialized: Path, ckpt_in: CkptIn) -> None:
    bad = os.fsdecode(b"caf\xe9")
    for args in (["create", "-m", bad], ["create", "--meta", f"k={bad}"],
                 ["--session", bad, "list"]):
        run = ckpt_in(*args)
        assert (run.code, run.stdout) == (2, ""), args
        assert "'caf\\\\udce9' is not valid UTF-8 text" in run.stderr
