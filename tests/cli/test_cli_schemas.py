"""The shipped JSON Schemas (ckpt/schemas): valid, closed, complete, and met by real output.

Every `--json` run of the CLI fixtures is validated already (tests/cli/schema_check.py via
conftest); here each output kind is produced at least once on purpose (each command with
`--json`, each event type and variant, reports with their optional parts filled in), and the
checker itself is shown to reject what breaks a schema.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import fault_helpers as h  # tests/faults is on pytest's `pythonpath`
import pytest
import schema_check
from jsonschema import Draft202012Validator

from ckpt import schemas
from ckpt.cli.commands.server import gone
from ckpt.cli.main import cli
from ckpt.objstore import ObjectStore, parse_oid

CkptIn = Callable[..., Any]
SCHEMA_DIR = Path(schemas.__file__).parent


def walk(node: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every subschema (a dict) of `node`, with a JSON-pointer-ish location."""
    if isinstance(node, dict):
        yield where, node
        for key, value in node.items():
            yield from walk(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from walk(value, f"{where}/{index}")


# -- the files ----------------------------------------------------------------------------

def test_the_names_are_the_files_and_load_reads_them() -> None:
    files = sorted(p.stem for p in SCHEMA_DIR.glob("*.json"))
    assert list(schemas.names()) == files
    assert len(files) >= 19
    first = schemas.load("record")
    first["title"] = "changed"
    assert schemas.load("record")["title"] == "record"  # a fresh dict each time
    assert json.loads(schemas.text("diff")) == schemas.load("diff")
    with pytest.raises(LookupError, match="no schema named 'nope'"):
        schemas.load("nope")


@pytest.mark.parametrize("name", schemas.names())
def test_each_schema_is_draft_2020_12_with_its_own_id(name: str) -> None:
    schema = schemas.load(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"https://ckpt.invalid/schemas/{name}.json"
    assert schema["title"] == name and schema["description"]
    text = schemas.text(name)
    assert text == json.dumps(schema, indent=2, ensure_ascii=False) + "\n"  # one layout


@pytest.mark.parametrize("name", schemas.names())
def test_each_object_is_closed_and_requires_every_key(name: str) -> None:
    """An object that lists properties allows no other key and requires each one; the only
    open objects are free-form data (a record's metadata, the maps of stats), which list none."""
    for where, node in walk(schemas.load(name)):
        if "properties" in node and not where.endswith("/properties"):
            assert node.get("type") == "object", where
            assert node.get("additionalProperties") is False, where
            assert node.get("required") == list(node["properties"]), where


@pytest.mark.parametrize("name", schemas.names())
def test_each_ref_is_relative_and_resolves(name: str) -> None:
    resolver = schema_check.registry().resolver(base_uri=schemas.load(name)["$id"])
    refs = [node["$ref"] for _, node in walk(schemas.load(name)) if "$ref" in node]
    for ref in refs:
        assert not ref.startswith(("http:", "https:", "/")), ref
        assert resolver.lookup(ref).contents is not None, ref


def test_every_json_command_has_a_schema_and_every_schema_a_use() -> None:
    """A new command with --json fails here until ckpt/schemas and USED_BY name its output."""
    def commands(group: click.Group, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...],
                                                                           click.Command]]:
        for name, command in group.commands.items():
            if isinstance(command, click.Group):
                yield from commands(command, (*path, name))
            else:
                yield (*path, name), command

    used = {tuple(w for w in use.split() if not w.startswith("-"))
            for uses in schemas.USED_BY.values() for use in uses}
    with_json = {path for path, command in commands(cli, ()) if schema_check.takes_json(command)}
    assert len(with_json) >= 18
    assert with_json - used == set(), "--json commands without a schema"
    assert used - with_json == set(), "USED_BY names commands that print no JSON"
    assert set(schemas.USED_BY) == set(schemas.names())
    referenced = {node["$ref"].split("#")[0].removesuffix(".json")
                  for name in schemas.names() for _, node in walk(schemas.load(name))
                  if "$ref" in node}
    unused = {n for n, uses in schemas.USED_BY.items() if not uses} - referenced
    assert unused == set(), "a schema no command prints and no schema refers to"


def test_parse_finds_the_command_past_global_options_and_values() -> None:
    inv = schema_check.parse(["--root", "/w", "--session=s", "-v", "config", "get", "threads",
                              "--json"])
    assert inv.path == ("config", "get") and inv.options == {"as_json"}
    assert inv.arguments == ("threads",)
    inv = schema_check.parse(["create", "-m", "--json", "--reason", "r"])
    assert inv.path == ("create",) and "as_json" not in inv.options  # a label, not the flag


# -- the checker rejects what breaks a schema -------------------------------------------------

RECORD = {"id": "ckpt-1-aaaaaaaa", "label": None, "reason": None, "turn_id": None,
          "message_id": None, "tool_call_id": None, "summary": None, "metadata": {"k": [1]},
          "session": "default", "scope": "tree", "parent": None, "tree": "ab" * 32,
          "created_at": "2026-12-03T13:00:00.000Z",
          "stats": {"files": 1, "bytes": 2, "new_objects": 1, "new_bytes": 2, "skipped": 0,
                    "duration_ms": 3},
          "paths": [], "skipped": []}


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r.update(extra=1), "Additional properties"),
    (lambda r: r.pop("summary"), "'summary' is a required property"),
    (lambda r: r.update(scope="all"), "'all' is not one of"),
    (lambda r: r["stats"].update(files=-1), "less than the minimum"),
    (lambda r: r.update(created_at="2026-12-03 13:00:00"), "does not match"),
    (lambda r: r.update(label=3), "is not of type"),
])
def test_the_checker_rejects_output_that_breaks_the_schema(
        change: Callable[[dict[str, Any]], object], message: str) -> None:
    assert schema_check.check_output(["create", "--json"], 0, json.dumps(RECORD)) == "record"
    broken = json.loads(json.dumps(RECORD))
    change(broken)
    with pytest.raises(AssertionError, match=message):
        schema_check.check_output(["create", "--json"], 0, json.dumps(broken))


@pytest.mark.parametrize(("args", "value", "where"), [
    (["create", "--json"], {"label": None, **RECORD}, "(top)"),
    (["create", "--json"], {**RECORD, "stats": {**dict(reversed(RECORD["stats"].items()))}},
     "/stats"),
    (["diff", "x", "--json"], [{"path": "a", "change": "M"},
                               {"path": "b", "reason": "too-large", "change": "S"}], "/1"),
    (["events", "--json"], [{"type": "catalog:rebuild", "session": "s",
                             "at": "2026-12-03T13:00:00.000Z", "adopted": 1}], "/0"),
])
def test_the_checker_rejects_keys_out_of_the_documented_order(
        args: list[str], value: Any, where: str) -> None:
    with pytest.raises(AssertionError, match=f"at {re.escape(where)}: keys"):
        schema_check.check_output(args, 0, json.dumps(value))


def test_the_checker_fails_a_json_command_without_a_schema(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(schemas.USED_BY, "stats")
    with pytest.raises(AssertionError, match="'ckpt stats --json' has no schema"):
        schema_check.check_output(["stats", "--json"], 0, "{}")
    assert schema_check.check_output(["stats"], 0, "plain text") is None
    assert schema_check.check_output(["stats", "--json", "--help"], 0, "Usage: ...") is None


# -- every output kind, from real runs --------------------------------------------------------

class Tour:
    """Runs `ckpt` in-process (validated by the fixture) and notes each schema it met."""

    def __init__(self, ckpt_in: CkptIn) -> None:
        self.ckpt_in = ckpt_in
        self.seen: set[str] = set()

    def __call__(self, *args: str, code: int = 0) -> Any:
        run = self.ckpt_in(*args)
        assert run.code == code, (args, run.stderr)
        name = schema_check.check_output(args, run.code, run.stdout)
        assert name is not None, args
        self.seen.add(name)
        return json.loads(run.stdout)


def event_variants() -> list[str]:
    return sorted(schemas.load("event")["$defs"])


def variant_of(event: dict[str, Any]) -> str:
    """The one `event.json#/$defs/NAME` this event matches."""
    matched = [name for name in event_variants()
               if Draft202012Validator({"$ref": f"{schemas.load('event')['$id']}#/$defs/{name}"},
                                       registry=schema_check.registry()).is_valid(event)]
    assert len(matched) == 1, (event, matched)
    return matched[0]


@pytest.mark.in_process("moves the workspace with its store: the server leaves with its "
                         "socket's path, so the later calls run in-process by design")
def test_a_tour_of_every_command_validates_each_output_kind(
        initialized: Path, ckpt_in: CkptIn, tmp_path: Path) -> None:
    run = Tour(ckpt_in)
    ws = initialized
    run("init", "--json")
    run("bench", "--levels", "1", "--threads", "1", "--max-files", "50", "--json")
    run("track", "a.txt", "--json")
    run("untrack", "a.txt", "--json")
    run("config", "set", "max_file_size", "1000", "--json")
    for key in run("config", "list", "--json"):
        assert run("config", "get", key, "--json")["key"] == key
    first = run("create", "--json", "-m", "first", "--meta", "k=v")["id"]
    (ws / "big.bin").write_bytes(b"x" * 2000)  # not captured: an S entry and skipped paths
    (ws / "a.txt").write_text("changed\n")
    second = run("create", "--json", "--reason", "post-tool")
    assert second["skipped"] == [{"path": "big.bin", "reason": "too-large"}]
    run("latest", "--json")
    assert len(run("list", "--json")) == 2
    shown = run("show", first, "--json")
    assert {f["kind"] for f in shown["files"]} == {"file", "executable", "symlink"}
    (ws / "sub" / "b.txt").write_text("beta 2\n")
    assert {c["change"] for c in run("diff", first, "--json")} == {"M", "S"}
    assert run("diff", first, second["id"], "--json")
    assert run("cat", first, "a.txt", "--json")["size"] == len("alpha\n")
    run("restore", first, "--dry-run", "--json")
    restored = run("restore", first, "--json")
    assert restored["pre_restore"] and restored["not_captured"]
    run("restore", second["id"], "--discard-later", "--json")  # a discard-later prune event
    assert run("undo", "--dry-run", "--json")["undid"]
    assert run("undo", "--json")["target"] is None
    assert run("restore", first, "--target", str(tmp_path / "elsewhere"), "--json")["target"]
    (ws / "a.txt").write_text("patched\n")
    (ws / "blob.bin").write_bytes(b"\0binary")
    patches = run("diff", first, "--patch", "--json")
    assert any(p["binary"] for p in patches)
    assert {p["change"] for p in patches} >= {"M", "S"}
    assert run("diff", first, "-p", "--json") == patches
    assert [row["change"] for row in run("log", "a.txt", "--json")][:1] == ["A"]
    run("create", "--json", "-m", "to forget")
    assert run("forget", "latest", "--dry-run", "--json")["dry_run"] is True
    assert len(run("forget", "latest", "--json")["removed"]) == 1
    run("recover", "--json")
    run("recover", "--abandon", "--json")
    run("config", "set", "retention_cap", "2", "--json")
    run("create", "--json")
    run("create", "--json")  # the cap evicts: a retention-cap prune event
    run("config", "set", "retention_cap", "0", "--json")
    run("config", "set", "gc_grace_seconds", "0", "--json")
    assert run("prune", "--keep-latest", "1", "--dry-run", "--json")["gc"] is None
    pruned = run("prune", "--keep-latest", "1", "--json")
    assert pruned["removed"] and pruned["gc"] is not None
    run("gc", "--dry-run", "--json")
    run("gc", "--json")
    run("fsck", "--full", "--json")
    assert run("stats", "--json")["sessions"]
    run("schema", "--json")
    run("schema", "event", "--json")
    events = run("events", "--json", "--all-sessions")

    # The other two event types, on a second workspace: moved, then a lost catalog rebuilt.
    w1, w2 = tmp_path / "w1", tmp_path / "w2"
    w1.mkdir()
    (w1 / "f.txt").write_text("f\n")
    run("--root", str(w1), "init", "--json")
    run("--root", str(w1), "create", "--json")
    w1.rename(w2)
    run("--root", str(w2), "list", "--json")
    events += run("--root", str(w2), "events", "--json", "--all-sessions")
    for name in os.listdir(w2 / ".ckpt"):
        if name.startswith("catalog.db"):
            os.unlink(w2 / ".ckpt" / name)
    run("--root", str(w2), "list", "--json")
    events += run("--root", str(w2), "events", "--json", "--all-sessions")

    assert {e["type"] for e in events} == {"checkpoint:create", "checkpoint:restore",
                                           "checkpoint:prune", "workspace:moved",
                                           "catalog:rebuild"}
    assert {variant_of(e) for e in events} == set(event_variants())
    # `event` is met through `events` (and the follow test), the server's two in the server
    # test, the remote ones against SeaweedFS (tests/remote/test_cli_remote*.py); the rest
    # each by its own command.
    remote = {"push", "pull", "remote-list", "fsck-remote", "gc-remote", "prune-remote"}
    assert run.seen | {"event", "server-status", "server-stop"} | remote == {
        *schemas.names(), "(meta-schema)"}


def test_fsck_damage_validates(two_files: tuple[Path, str], ckpt_in: CkptIn) -> None:
    """A missing object, a damaged stat cache: both lists of the report hold items."""
    ws, first = two_files
    store = ws / ".ckpt"
    oid = next(f["oid"] for f in json.loads(ckpt_in("show", first, "--json").stdout)["files"]
               if f["path"] == "a.txt")
    objects = ObjectStore.open(str(store))
    try:
        objects.backend.delete(parse_oid(oid))
    finally:
        objects.close()
    caches = [p for p in store.rglob("*") if p.is_file() and "cache" in p.name]
    assert caches, sorted(str(p) for p in store.rglob("*"))
    caches[0].write_bytes(b"garbage")
    run = ckpt_in("fsck", "--json")
    assert run.code == 5, run.stderr
    assert schema_check.check_output(("fsck", "--json"), run.code, run.stdout) == "fsck"
    report = json.loads(run.stdout)
    assert report["problems"] and report["problems"][0]["oid"] == oid
    assert report["damaged_checkpoints"] == [first] and report["damaged_caches"]


@pytest.fixture
def two_files(initialized: Path, ckpt_in: CkptIn) -> tuple[Path, str]:
    first = json.loads(ckpt_in("create", "--json").stdout)["id"]
    return initialized, first


def test_an_abandoned_restore_validates(tmp_path: Path, ckpt_in: CkptIn) -> None:
    """`recover --abandon` after a restore killed mid-apply: the `abandoned` report, filled."""
    rng = random.Random(h.seed_for("schemas-abandon"))
    root = str(tmp_path / "killed")
    os.mkdir(root)
    for index in range(300):
        h.write_file(os.path.join(root, f"d{index % 10}", f"f{index:03}.txt"), rng.randbytes(4096))
    assert h.ckpt(root, "init").code == h.OK
    first = h.ckpt(root, "create").out.strip()
    target = h.tree_state(root)
    shutil.rmtree(os.path.join(root, "d0"))
    # Enough new files that the apply back to `first` has ~1,000 removals after its first
    # progress tick (every 256), where the kill is aimed.
    for index in range(1200):
        h.write_file(os.path.join(root, f"n{index % 10}", f"g{index:04}.txt"), rng.randbytes(4096))
    second = h.ckpt(root, "create").out.strip()
    h.kill_restore_mid_apply(root, os.path.join(root, ".ckpt"), first, second, target,
                             h.tree_state(root), rng)
    args = ("--root", root, "recover", "--abandon", "--json")
    run = ckpt_in(*args)
    assert run.code == 0, run.stderr
    assert schema_check.check_output(args, run.code, run.stdout) == "recover"
    abandoned = json.loads(run.stdout)["abandoned"]
    assert abandoned["checkpoint"] == first and abandoned["applied"] is not None
    assert abandoned["not_applied"] is not None


def test_events_follow_lines_each_validate(initialized: Path, ckpt_in: CkptIn,
                                           env_for: Callable[..., dict[str, str]]) -> None:
    """`events --follow --json` prints JSON Lines: what exists, then each new event."""
    first = json.loads(ckpt_in("create", "--json").stdout)["id"]
    args = ("events", "--follow", "--json")
    child = subprocess.Popen(["ckpt", *args], cwd=initialized, env=env_for(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        lines = [child.stdout.readline()]
        (initialized / "a.txt").write_text("followed\n")
        assert ckpt_in("restore", first).code == 0  # a pre-restore create, then the restore
        lines += [child.stdout.readline() for _ in range(2)]
    finally:
        child.send_signal(signal.SIGINT)
        rest, _ = child.communicate(timeout=30)
    assert child.returncode == 130
    out = "".join(lines) + rest
    assert schema_check.check_output(args, 0, out) == "event"
    assert [json.loads(line)["type"] for line in out.splitlines()] == [
        "checkpoint:create", "checkpoint:create", "checkpoint:restore"]


@pytest.mark.in_process("starts, asks and stops a server of its own, which server mode "
                         "already runs for the store")
def test_server_start_status_stop_validate(initialized: Path, ckpt_proc: Any) -> None:
    """A real resident server: its status (a root with its watch state) and its stop."""
    on = {"CKPT_SERVER": "on"}
    seen: set[str] = set()

    def run(*args: str) -> Any:
        done = ckpt_proc(*args, env=on)
        assert done.code == 0, (args, done.stderr)
        seen.add(str(schema_check.check_output(args, done.code, done.stdout)))
        return json.loads(done.stdout) if "--json" in args else done.stdout

    assert run("server", "status", "--json") == {"running": False}
    started = run("server", "start", "--json")
    pid = started["pid"]
    try:
        run("create")  # served: the server opens the root, watched
        status = run("server", "status", "--json")
        assert status["pid"] == pid and status["requests"] >= 1
        assert [r["root"] for r in status["roots"]] == [str(initialized)]
        watch = status["roots"][0]["watch"]
        assert isinstance(watch, dict)  # the pool opens roots with watch=True
        assert run("server", "stop", "--json") == {"stopped": True, "pid": pid}
        assert run("server", "stop", "--json") == {"stopped": False, "pid": None}
    finally:
        if not gone(pid):
            os.kill(pid, signal.SIGKILL)
    assert seen >= {"server-status", "server-stop"}


def test_ckpt_schema_lists_prints_and_refuses_an_unknown_name(ckpt_in: CkptIn) -> None:
    """No store needed; the names one a line; a schema printed as its file; exit 2 else."""
    listed = ckpt_in("schema")
    assert listed.code == 0 and listed.stdout.split() == list(schemas.names())
    for name in ("record", "event"):
        shown = ckpt_in("schema", name)
        assert shown.code == 0 and shown.stdout == schemas.text(name)
    bad = ckpt_in("schema", "recrod")
    assert bad.code == 2 and bad.stdout == ""
    assert bad.stderr.startswith("ckpt: error: unknown schema 'recrod': the schemas are bench,")
