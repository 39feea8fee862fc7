"""`ckpt remote|push|pull` and the `--remote` options end to end: `python -m ckpt` processes
against a real SeaweedFS (tests/seaweed.py), every `--json` output validated against its schema;
the errors (bad URL, unreachable endpoint, wrong credentials, damaged remote pack) one line with
their exit code, the workspace untouched."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import schema_check
from remote.sync_helpers import damage_pack, make_tree, pack_keys, read_tree, run_ckpt
from seaweed import Bucket, free_ports

OK, USER_ERROR, CORRUPTION = 0, 1, 5


def ckpt_json(root: Path, *args: str, code: int = OK, env: dict[str, str] | None = None) -> Any:
    """Run `ckpt ARGS --json` on `root`, check the exit code and the schema; the document."""
    # `--json` before `--remote`: schema_check's parser takes an option's next word as its
    # value, where click sees that `--remote`'s value is optional
    at = args.index("--remote") if "--remote" in args else len(args)
    full = (*args[:at], "--json", *args[at:])
    run = run_ckpt(root, *full, env=env)
    assert run.returncode == code, (full, run.stdout, run.stderr)
    assert schema_check.check_output(full, run.returncode, run.stdout) is not None, full
    return json.loads(run.stdout)


def ckpt_ok(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    run = run_ckpt(root, *args)
    assert run.returncode == OK, (args, run.stdout, run.stderr)
    return run


def one_error_line(run: subprocess.CompletedProcess[str], code: int) -> str:
    assert run.returncode == code, (run.returncode, run.stdout, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ckpt: error: "), run.stderr
    assert run.stdout == ""
    return lines[0]


def new_machine(tmp_path: Path, name: str, bucket: Bucket, *, tree: int | None = None) -> Path:
    root = tmp_path / name
    root.mkdir()
    if tree is not None:
        make_tree(root, random.Random(tree))
    ckpt_ok(root, "init")
    ckpt_ok(root, "remote", "add", "origin", bucket.url, "--endpoint", bucket.endpoint)
    return root


def test_push_list_remote_pull_and_restore_on_a_fresh_machine(
        tmp_path: Path, s3_bucket: Bucket) -> None:
    a = new_machine(tmp_path, "a", s3_bucket, tree=21)
    assert ckpt_json(a, "remote", "list") == [{"name": "origin", "url": s3_bucket.url,
                                               "endpoint": s3_bucket.endpoint, "region": None}]
    first = ckpt_json(a, "create", "-m", "first")["id"]
    pushed = ckpt_json(a, "push")
    assert pushed["pushed"] == [first] and pushed["packs"] >= 1
    again = ckpt_json(a, "push", "origin")
    assert again["pushed"] == [] and again["present"] == [first] and again["packs"] == 0
    expected = read_tree(a)

    b = new_machine(tmp_path, "b", s3_bucket)
    listed = ckpt_json(b, "list", "--remote", "--all-sessions")
    assert [r["id"] for r in listed] == [first] and listed[0]["label"] == "first"
    assert ckpt_json(b, "pull")["pulled"] == [first]
    fsck = ckpt_json(b, "fsck")
    assert fsck["ok"] and fsck["remote_only"] == [first]
    restored = ckpt_json(b, "restore", first)
    assert restored["id"] == first
    assert read_tree(b) == expected

    check = ckpt_json(b, "fsck", "--remote", "--full")
    assert check["ok"] and check["records"] == 1 and check["packs"] >= 1
    gc = ckpt_json(b, "gc", "--remote", "origin")
    assert gc["packs_deleted"] == 0 and gc["removed"] == []
    dry = ckpt_json(b, "prune", "--remote", "--keep-latest", "0", "--dry-run")
    assert dry["dry_run"] and dry["removed"] == [first]  # the session's, whichever root
    text = ckpt_ok(b, "list", "--remote", "--all-sessions").stdout
    assert first in text


def test_restore_target_of_an_id_only_the_remote_has(tmp_path: Path, s3_bucket: Bucket) -> None:
    a = new_machine(tmp_path, "a", s3_bucket, tree=22)
    first = ckpt_json(a, "create")["id"]
    ckpt_json(a, "push")
    b = new_machine(tmp_path, "b", s3_bucket)
    target = tmp_path / "copy"
    report = ckpt_json(b, "restore", first, "--target", str(target))
    assert report["target"] == str(target)
    assert read_tree(target) == read_tree(a)
    assert read_tree(b) == {}  # the workspace itself untouched


def test_two_stores_pushing_one_session_are_both_listed_after_pull(
        tmp_path: Path, s3_bucket: Bucket) -> None:
    a = new_machine(tmp_path, "a", s3_bucket, tree=23)
    c = new_machine(tmp_path, "c", s3_bucket, tree=24)
    ids = [ckpt_json(root, "--session", "shared", "create")["id"] for root in (a, c, a)]
    for root in (a, c):
        ckpt_json(root, "push", "--session", "shared")
    b = new_machine(tmp_path, "b", s3_bucket)
    assert ckpt_json(b, "pull", "--session", "shared")["pulled"] == ids
    listed = ckpt_json(b, "--session", "shared", "list", "--all-roots")
    assert [r["id"] for r in listed] == ids


def test_a_bad_remote_url_is_one_line_exit_1(tmp_path: Path, s3_bucket: Bucket) -> None:
    root = new_machine(tmp_path, "a", s3_bucket)
    line = one_error_line(run_ckpt(root, "remote", "add", "x", "http://not-s3/b"), USER_ERROR)
    assert "http://not-s3/b" in line
    line = one_error_line(run_ckpt(root, "remote", "add", "origin", s3_bucket.url), USER_ERROR)
    assert "already exists" in line
    line = one_error_line(run_ckpt(root, "push", "nowhere", "--session", "s"), USER_ERROR)
    line = one_error_line(run_ckpt(root, "list", "--remote", "nowhere"), USER_ERROR)
    assert "unknown remote: nowhere" in line


def test_an_unreachable_endpoint_is_one_line_exit_1(tmp_path: Path, s3_bucket: Bucket) -> None:
    root = tmp_path / "a"
    root.mkdir()
    make_tree(root, random.Random(25), files=3)
    ckpt_ok(root, "init")
    (port,) = free_ports(1)  # nothing listens there
    ckpt_ok(root, "remote", "add", "dead", s3_bucket.url, "--endpoint", f"http://127.0.0.1:{port}")
    ckpt_ok(root, "create")
    for args in (("push",), ("pull",), ("list", "--remote"), ("fsck", "--remote")):
        line = one_error_line(run_ckpt(root, *args, timeout=90), USER_ERROR)
        assert "unreachable" in line or "connect" in line.lower(), line


def test_wrong_credentials_are_one_line_exit_1(tmp_path: Path, s3_bucket: Bucket) -> None:
    root = new_machine(tmp_path, "a", s3_bucket, tree=26)
    ckpt_ok(root, "create")
    wrong = {"AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    run = run_ckpt(root, "push", env=wrong)
    line = one_error_line(run, USER_ERROR)
    assert "AWS_SECRET_ACCESS_KEY" in line  # the hint names where credentials come from
    assert s3_bucket.keys("records/") == []


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_a_damaged_remote_pack_is_exit_5_naming_it_and_the_workspace_untouched(
        tmp_path: Path, s3_bucket: Bucket, how: str) -> None:
    a = new_machine(tmp_path, "a", s3_bucket, tree=27)
    first = ckpt_json(a, "create")["id"]
    ckpt_json(a, "push")
    (key,) = pack_keys(s3_bucket)
    damage_pack(s3_bucket, key, how=how)
    b = new_machine(tmp_path, "b", s3_bucket)
    (b / "mine.txt").write_text("my own work\n")
    before = read_tree(b)
    line = one_error_line(run_ckpt(b, "restore", first), CORRUPTION)
    packid = key.rsplit("/", 1)[-1]
    assert packid in line or "object" in line, line
    assert read_tree(b) == before
    check = run_ckpt(b, "fsck", "--remote", "--full", "--json")
    assert check.returncode == CORRUPTION, check.stderr
    assert schema_check.check_output(("fsck", "--remote", "--full", "--json"), check.returncode,
                                     check.stdout) == "fsck-remote"
    assert any(packid in p for p in json.loads(check.stdout)["problems"])


def test_list_without_remote_never_imports_the_remote_code(tmp_path: Path,
                                                           s3_bucket: Bucket) -> None:
    root = new_machine(tmp_path, "a", s3_bucket, tree=28)
    ckpt_ok(root, "create")
    code = ("import sys, runpy; sys.argv = ['ckpt', '--root', sys.argv[1], 'list'];\n"
            "try:\n    runpy.run_module('ckpt', run_name='__main__')\n"
            "except SystemExit as e:\n    assert e.code == 0, e.code\n"
            "bad = [m for m in sys.modules if m.startswith('ckpt.objstore.remote')"
            " or m.split('.')[0] in ('boto3', 'botocore', 'obstore', 'minio')]\n"
            "assert not bad, bad\n")
    run = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True,
                         text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr


def test_a_remote_locked_by_another_machines_gc_is_exit_4(tmp_path: Path,
                                                          s3_bucket: Bucket) -> None:
    """Another machine holds the remote's exclusive lock (as `gc --remote` does): a push is
    refused at once with exit 4, and goes through once the lock is released."""
    from ckpt.checkpoints import Checkpoints
    from ckpt.checkpoints.remote.remote import Remote

    root = new_machine(tmp_path, "a", s3_bucket, tree=29)
    ckpt_ok(root, "create")
    ckpt_json(root, "push")  # the remote exists
    ckpt_ok(root, "create")
    other = new_machine(tmp_path, "other", s3_bucket)
    with Checkpoints.open(other) as cp:
        link = Remote.choose(cp._ws, None)
        try:
            with link.locked("exclusive"):
                line = one_error_line(run_ckpt(root, "push"), 4)
                assert "remote locked" in line
        finally:
            link.close()
    assert len(ckpt_json(root, "push")["pushed"]) == 1


def test_a_damaged_remote_record_is_exit_5_naming_it(tmp_path: Path, s3_bucket: Bucket) -> None:
    a = new_machine(tmp_path, "a", s3_bucket, tree=30)
    first = ckpt_json(a, "create")["id"]
    ckpt_json(a, "push")
    key = f"records/{first}"
    data = bytearray(s3_bucket.raw.get_object(s3_bucket.name, key))
    data[20] ^= 0x01
    s3_bucket.raw.put_object(s3_bucket.name, key, bytes(data))
    b = new_machine(tmp_path, "b", s3_bucket)
    for args in (("pull",), ("list", "--remote"), ("restore", first)):
        line = one_error_line(run_ckpt(b, *args), CORRUPTION)
        assert key in line, line
    assert read_tree(b) == {}
    check = ckpt_json(b, "fsck", "--remote", code=CORRUPTION)
    assert any(key in p for p in check["problems"])
