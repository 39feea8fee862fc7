"""Real `ckpt` processes: the console script, streams, exit codes, locks, terminals."""

from __future__ import annotations

import json
import os
import pty
import re
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fault_helpers  # tests/ dirs are on pytest's `pythonpath`

from ckpt.objstore.ids import parse_oid

CkptProc = Callable[..., Any]
CkptIn = Callable[..., Any]
ID = r"ckpt-\d{13}-[0-9a-z]{8}"
TESTS_DIR = os.path.dirname(__file__)
Env = Callable[..., dict[str, str]]


def snapshot_tree(root: Path) -> dict[str, tuple[int, bytes, int]]:
    """Every path under root except the store: (mode, content or link target, mtime_ns)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if ".ckpt" in dirnames:
            dirnames.remove(".ckpt")
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                data = os.readlink(path).encode()
            elif stat.S_ISREG(st.st_mode):
                data = Path(path).read_bytes()
            else:
                data = b""
            out[os.path.relpath(path, root)] = (st.st_mode, data, st.st_mtime_ns)
    return out


def ok_json(run: Any) -> Any:
    assert run.code == 0, run.stderr
    return json.loads(run.stdout)


def test_end_to_end_create_edit_diff_restore_undo(ws: Path, ckpt_proc: CkptProc) -> None:
    init = ckpt_proc("init")
    assert (init.code, init.stdout, init.stderr) == (0, f"{ws}/.ckpt\n", "")
    created = ckpt_proc("create", "-m", "before tool call", "--turn", "1", "--tool-call", "c1")
    assert created.code == 0 and created.stderr == ""
    assert re.fullmatch(ID + "\n", created.stdout)
    first = created.stdout.strip()

    (ws / "a.txt").write_text("edited by the agent\n")
    (ws / "scratch.txt").write_text("junk\n")
    diff = ckpt_proc("diff", first)
    assert (diff.code, diff.stdout, diff.stderr) == (0, "M a.txt\nA scratch.txt\n", "")

    edited = snapshot_tree(ws)
    report = ok_json(ckpt_proc("restore", first, "--json"))
    assert (report["id"], report["written"], report["deleted"]) == (first, 1, 1)
    assert (ws / "a.txt").read_text() == "alpha\n" and not (ws / "scratch.txt").exists()
    assert ckpt_proc("diff", first).stdout == ""

    undo = ckpt_proc("restore", report["pre_restore"], "--no-save")
    assert undo.code == 0 and undo.stderr == ""
    assert undo.stdout.startswith(f"restored {report['pre_restore']}: 2 written, 0 deleted")
    after_undo = snapshot_tree(ws)
    assert {k: v[:2] for k, v in after_undo.items()} == {k: v[:2] for k, v in edited.items()}
    # untouched files kept their mtime: only what differed was written
    assert after_undo["sub/b.txt"][2] == edited["sub/b.txt"][2]

    records = ok_json(ckpt_proc("list", "--json"))
    assert [(r["id"], r["reason"]) for r in records] == [(first, None),
                                                         (report["pre_restore"], "pre-restore")]
    listing = ckpt_proc("list")
    assert listing.stdout.splitlines()[1].startswith(first)
    events = ok_json(ckpt_proc("events", "--json"))
    assert [e["type"] for e in events] == ["checkpoint:create", "checkpoint:create",
                                           "checkpoint:restore", "checkpoint:restore"]
    assert events[2]["pre_restore"] == report["pre_restore"]


def test_root_is_found_from_a_subdirectory_and_paths_are_cwd_relative(
        initialized: Path, ckpt_proc: CkptProc) -> None:
    sub = initialized / "sub"
    tracked = ok_json(ckpt_proc("track", "b.txt", "--json", cwd=sub))
    assert tracked == {"tracked": ["sub/b.txt"]}
    rec = ok_json(ckpt_proc("create", "--json", cwd=sub))
    assert rec["scope"] == "paths"


def test_environment_variables_set_root_store_and_session(
        ws: Path, tmp_path: Path, ckpt_proc: CkptProc) -> None:
    store = tmp_path / "store"
    env = {"CKPT_ROOT": str(ws), "CKPT_STORE": str(store), "CKPT_SESSION": "agent-7"}
    assert ckpt_proc("init", env=env).stdout == f"{store}\n"
    rec = ok_json(ckpt_proc("create", "--json", cwd=tmp_path, env=env))
    assert rec["session"] == "agent-7"
    assert not (ws / ".ckpt" / "format").exists()  # only the link naming the store


def test_uninitialized_root_in_a_process(ws: Path, ckpt_proc: CkptProc) -> None:
    run = ckpt_proc("list")
    assert (run.code, run.stdout) == (1, "")
    assert run.stderr == (f"ckpt: error: not initialized: no ckpt store at {ws}/.ckpt for root "
                          f"{ws} (hint: run 'ckpt init', or pass --root/--store)\n")


def test_usage_error_exits_2(ws: Path, ckpt_proc: CkptProc) -> None:
    run = ckpt_proc("restore")
    assert (run.code, run.stdout) == (2, "")
    assert run.stderr.startswith("Usage: ckpt restore [OPTIONS] ID")
    assert run.stderr.endswith("Error: Missing argument 'ID'.\n")


def test_corrupt_object_during_restore_exits_5_and_leaves_the_workspace_alone(
        initialized: Path, ckpt_in: CkptIn, ckpt_proc: CkptProc) -> None:
    ws = initialized
    first = ckpt_in("create").stdout.strip()
    files = ok_json(ckpt_in("show", first, "--json"))["files"]
    oid = next(f["oid"] for f in files if f["path"] == "a.txt")
    where, offset, length = fault_helpers.object_file(str(ws / ".ckpt"), parse_oid(oid))
    fault_helpers.flip_byte(where, offset + length - 1)  # in its pack, or its loose file

    (ws / "a.txt").write_text("the agent's edit\n")
    (ws / "new.txt").write_text("new\n")
    before = snapshot_tree(ws)
    run = ckpt_proc("restore", first)
    assert (run.code, run.stdout) == (5, "")
    assert re.fullmatch(rf"ckpt: error: object {oid} is corrupt: [^\n]+ \(hint: run 'ckpt fsck "
                        r"--full' to list the damage\)\n", run.stderr)
    assert snapshot_tree(ws) == before

    assert ckpt_in("fsck").code == 0  # structural check: the object is there
    fsck = ckpt_proc("fsck", "--full")
    assert fsck.code == 5
    assert f"corrupt object {oid}: " in fsck.stdout
    assert f"damaged checkpoint {first}\n" in fsck.stdout
    assert fsck.stderr == ("ckpt: error: store damaged: 1 object problem(s), 1 damaged "
                           "checkpoint(s) (hint: restore what you can from undamaged "
                           "checkpoints; 'ckpt prune' can drop the damaged ones)\n")
    check = ckpt_in("fsck", "--full", "--json")
    doc = json.loads(check.stdout)
    assert check.code == 5 and doc["ok"] is False and doc["damaged_checkpoints"] == [first]
    assert [p["oid"] for p in doc["problems"]] == [oid]
    assert ckpt_in("cat", first, "a.txt").code == 5


HOLD_LOCK = """
import sys
from ckpt.checkpoints.lock import RootLock
with RootLock(sys.argv[1], timeout=5, purpose="test-holder"):
    print("locked", flush=True)
    sys.stdin.read()
"""


def test_root_locked_by_a_live_process_exits_4_naming_the_holder(
        initialized: Path, ckpt_in: CkptIn, ckpt_proc: CkptProc, env_for: Env) -> None:
    from ckpt.checkpoints.identity import root_key

    ws = initialized
    assert ckpt_in("config", "set", "lock_timeout", "0.5").stdout == "lock_timeout = 0.5\n"
    key = root_key(str(ws))  # the workspace's identity (ARCHITECTURE.md: roots/<key>)
    lock_dir = ws / ".ckpt" / "roots" / key
    lock_dir.mkdir(parents=True, exist_ok=True)
    lock = lock_dir / "lock"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(lock)], env=env_for(),
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        started = time.monotonic()
        run = ckpt_proc("create")
        waited = time.monotonic() - started
        assert (run.code, run.stdout) == (4, "")
        assert re.fullmatch(
            rf"ckpt: error: store busy: {re.escape(str(lock))} is locked by pid {holder.pid} on "
            r"\S+ \(test-holder\) since \d{4}-\d\d-\d\dT[\d:.]+Z \(hint: wait for it to finish, "
            r"or raise the wait with 'ckpt config set lock_timeout SECONDS'\)\n", run.stderr)
        assert waited >= 0.5
        # reading does not need the lock
        assert ckpt_in("list").code == 0
    finally:
        holder.communicate("", timeout=10)
    assert ckpt_in("create").code == 0  # free again once the holder is gone


def _read_all(fd: int, sink: list[bytes]) -> None:
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # EIO once the slave side is closed
            return
        if not chunk:
            return
        sink.append(chunk)


def test_json_stays_clean_when_stderr_is_a_terminal_and_progress_draws(
        initialized: Path, env_for: Env) -> None:
    ws = initialized
    for i in range(300):
        (ws / f"f{i:03d}.txt").write_text(f"file {i}\n")
    master, slave = pty.openpty()
    drawn: list[bytes] = []
    reader = threading.Thread(target=_read_all, args=(master, drawn), daemon=True)
    reader.start()
    try:
        env = env_for({"TERM": "xterm"})
        outputs: list[str] = []
        for args in (["create", "--json"], ["diff", "HEAD", "--json"]):
            if args[1] == "HEAD":
                args[1] = json.loads(outputs[0])["id"]
                for i in range(0, 300, 2):
                    (ws / f"f{i:03d}.txt").write_text("changed\n")
            done = subprocess.run(["ckpt", *args], cwd=ws, env=env, stdout=subprocess.PIPE,
                                  stderr=slave, timeout=60, check=False)
            assert done.returncode == 0
            outputs.append(done.stdout.decode())
        restore = subprocess.run(["ckpt", "restore", json.loads(outputs[0])["id"], "--json"],
                                 cwd=ws, env=env, stdout=subprocess.PIPE, stderr=slave,
                                 timeout=60, check=False)
        assert restore.returncode == 0
        outputs.append(restore.stdout.decode())
    finally:
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
    for text in outputs:
        assert "\r" not in text and "\x1b" not in text
        json.loads(text)  # the whole of stdout is one JSON document
    assert json.loads(outputs[0])["stats"]["files"] == 303
    assert len(json.loads(outputs[1])) == 150
    assert json.loads(outputs[2])["written"] == 150
    terminal = b"".join(drawn)
    assert b"ckpt: hashing " in terminal  # progress was really drawn, on stderr
    assert terminal.endswith(b"\r\x1b[K")  # and erased at the end


def test_progress_is_not_drawn_when_stderr_is_a_pipe(initialized: Path,
                                                    ckpt_proc: CkptProc) -> None:
    for i in range(50):
        (initialized / f"f{i}.txt").write_text("x\n")
    run = ckpt_proc("create")
    assert run.stderr == ""


def test_broken_stdout_pipe_exits_quietly(initialized: Path, ckpt_in: CkptIn, env_for: Env) -> None:
    ws = initialized
    (ws / "big.bin").write_bytes(os.urandom(4 << 20))
    first = ckpt_in("create").stdout.strip()
    proc = subprocess.Popen(["ckpt", "cat", first, "big.bin"], cwd=ws, env=env_for(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.read(10)
    proc.stdout.close()
    stderr = proc.stderr.read()
    assert proc.wait(timeout=30) == 141
    assert stderr == b""


def test_a_process_exits_with_its_output_and_store_complete(ws: Path, ckpt_proc: CkptProc) -> None:
    """`main` ends the process with os._exit, skipping the interpreter's teardown: what a
    command printed (more than a pipe holds) and wrote (a pack) must be there in full."""
    for index in range(3000):
        (ws / f"a-file-with-a-long-name-to-fill-the-pipe-{index:05d}.txt").write_text(f"{index}\n")
    assert ckpt_proc("init").code == 0
    created = ckpt_proc("create", "--json")
    assert created.code == 0, created.stderr
    record = json.loads(created.stdout)
    shown = ckpt_proc("show", record["id"], "--json")
    assert shown.code == 0, shown.stderr
    assert len(shown.stdout_bytes) > 1 << 17  # twice a pipe's buffer
    files = json.loads(shown.stdout)["files"]
    assert sum(f["path"].startswith("a-file-with-a-long-name") for f in files) == 3000
    assert ckpt_proc("fsck").code == 0
    missing = ckpt_proc("latest", "--turn", "no such turn")
    assert (missing.code, missing.stdout) == (3, "")


def test_cat_streams_binary_content_unchanged(initialized: Path, ckpt_in: CkptIn,
                                              ckpt_proc: CkptProc) -> None:
    payload = bytes(range(256)) * 1000
    (initialized / "blob.bin").write_bytes(payload)
    first = ckpt_in("create").stdout.strip()
    run = ckpt_proc("cat", first, "blob.bin")
    assert (run.code, run.stdout_bytes, run.stderr) == (0, payload, "")


def test_version_and_help_do_not_load_the_library(env_for: Env) -> None:
    code = ("import sys\n"
            "from ckpt.cli.main import run\n"
            "code = run(sys.argv[1:])\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('zstandard', 'blake3', 'msgpack', 'pathspec', 'sqlite3', 'logging') "
            "or m.startswith('ckpt.objstore') or m == 'ckpt.checkpoints.service')\n"
            "print(code, heavy, file=sys.stderr)\n")
    for args in (["--version"], ["--help"], ["list", "--help"]):
        done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                              env=env_for(), text=True, timeout=30, check=False)
        assert done.stderr.strip() == "0 []", (args, done.stderr)


_RESTORE_SIDE = ("ckpt.checkpoints.restore.plan", "ckpt.checkpoints.restore.apply", "ckpt.checkpoints.reports")


def test_a_create_does_not_build_the_restore_side_and_preload_does(
        initialized: Path, env_for: Env) -> None:
    watched = (*_RESTORE_SIDE, "ckpt.checkpoints.snapshot.ignore")
    report = f"print(sorted(m for m in sys.modules if m in {watched!r}), file=sys.stderr)\n"
    create = "import sys\nfrom ckpt.cli.main import run\nassert run(['create', '--json']) == 0\n"
    preload = "import sys\nfrom ckpt.checkpoints.service import preload\npreload()\n"
    loaded = []
    for code in (create, create, preload):  # the second create finds the stat cache
        done = subprocess.run([sys.executable, "-c", code + report], capture_output=True,
                              env=env_for(), text=True, timeout=60, check=False, cwd=initialized)
        assert done.returncode == 0, done.stderr
        loaded.append(done.stderr.strip())
    assert loaded[1] == "[]"
    assert loaded[2] == str(sorted(watched))


def test_only_cli_imports_click() -> None:
    import ast

    repo = Path(TESTS_DIR).parents[1]
    for package in ("objstore", "checkpoints"):
        for path in (repo / package).glob("*.py"):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                assert not any(n.split(".")[0] in ("click", "cli") for n in names), path


def test_shell_completion_script(env_for: Env) -> None:
    done = subprocess.run(["ckpt"], env=env_for({"_CKPT_COMPLETE": "bash_source"}),
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0 and "_CKPT_COMPLETE=bash_complete" in done.stdout


def test_checkpoint_ids_complete(initialized: Path, ckpt_in: CkptIn, env_for: Env) -> None:
    ws = initialized
    first = ckpt_in("create").stdout.strip()
    env = env_for({"_CKPT_COMPLETE": "bash_complete", "COMP_WORDS": "ckpt show ckpt-",
                    "COMP_CWORD": "2"})
    done = subprocess.run(["ckpt"], cwd=ws, env=env, capture_output=True, text=True,
                          timeout=30, check=False)
    assert f"plain,{first}" in done.stdout.splitlines()


def test_the_cli_process_runs_without_the_cyclic_collector(env_for: Env) -> None:
    """The `ckpt` process is one command (main ends with os._exit): it switches the collector
    off for itself, as an application may; the library never does (test_snapshot.py)."""
    code = ("import gc, ckpt.cli.main as m\n"
            "m.run = lambda argv: print('enabled' if gc.isenabled() else 'disabled') or 0\n"
            "m.main([])\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=env_for(),
                          text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (0, "disabled\n"), done.stderr
