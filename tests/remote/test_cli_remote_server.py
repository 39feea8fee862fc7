"""The resident server and remotes: what may download (pull, `remote`, the `--remote` forms,
restore/diff/show/cat/undo of a store with remotes) runs in the client, where a long transfer
holds no one else's request, and so does a store's first push to a remote (its whole
history); the pushes after it, a harness's call after every turn, are served, with the
client's credentials (a real server and a real SeaweedFS)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import servers
from remote.sync_helpers import make_tree, run_ckpt
from seaweed import Bucket

from ckpt.checkpoints.remote.config import mark_pushed
from ckpt.cli.server_request import Request, decline_reason

CREDENTIALS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE")


def request(*argv: str, cwd: str) -> Request:
    return Request(cwd, argv, {})


def test_remote_commands_and_options_run_in_the_client(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    store.mkdir()
    cwd = str(tmp_path)
    for argv in (("pull", "origin"), ("remote", "list"), ("list", "--remote"),
                 ("fsck", "--remote", "origin"), ("gc", "--remote"),
                 ("prune", "--keep-latest", "1", "--remote=origin")):
        assert decline_reason(request(*argv, cwd=cwd), str(store)) == "local", argv
    for argv in (("restore", "abc"), ("diff", "abc"), ("show", "abc"), ("list",)):
        assert decline_reason(request(*argv, cwd=cwd), str(store)) is None, argv
    assert decline_reason(request("push", cwd=cwd), str(store)) == "local"  # no remote
    (store / "remotes.toml").write_text('[remote.origin]\nurl = "s3://b"\n')
    for argv in (("restore", "abc"), ("diff", "abc"), ("show", "abc"), ("cat", "abc", "f"),
                 ("undo",)):
        assert decline_reason(request(*argv, cwd=cwd), str(store)) == "local", argv
    assert decline_reason(request("list", cwd=cwd), str(store)) is None


def test_a_push_is_served_once_this_store_has_pushed_to_that_remote(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    store.mkdir()
    cwd = str(tmp_path)

    def reason(*argv: str) -> str | None:
        return decline_reason(request(*argv, cwd=cwd), str(store))

    (store / "remotes.toml").write_text('[remote.origin]\nurl = "s3://b"\n')
    assert reason("push") == reason("push", "origin") == "local"  # the first: whole history
    mark_pushed(str(store), "origin")
    for argv in (("push",), ("push", "origin"), ("push", "--json", "origin", "ckpt-1-a"),
                 ("--session", "s", "push", "--session", "t"), ("push", "ckpt-1-a")):
        assert reason(*argv) is None, argv
    (store / "remotes.toml").write_text('[remote.origin]\nurl = "s3://b"\n'
                                        '[remote.other]\nurl = "s3://c"\n')
    assert reason("push", "origin") is None
    assert reason("push", "other") == "local"  # never pushed to
    assert reason("push") == "local"  # several and none named: the client says so
    (store / "remotes.toml").write_text("[remote\n")
    assert reason("push", "origin") == "local"  # unreadable: the client says so


def test_push_is_served_with_each_requests_own_credentials(tmp_path: Path,
                                                            s3_bucket: Bucket) -> None:
    """The server is started without credentials: a push it serves authenticates with the
    client's. A later request with a wrong secret fails as in-process (exit 1, one line), so
    nothing of the earlier connection was kept; the server lives on and serves the next.
    The store's first push runs in the client."""
    root = tmp_path / "w"
    root.mkdir()
    make_tree(root, random.Random(5))
    off = {"CKPT_SERVER": "off"}
    assert run_ckpt(root, "init", env=off).returncode == 0
    added = run_ckpt(root, "remote", "add", "origin", s3_bucket.url, "--endpoint",
                     s3_bucket.endpoint, env=off)
    assert added.returncode == 0, added.stderr
    store = root / ".ckpt"
    bare = {k: v for k, v in os.environ.items() if k not in CREDENTIALS}
    client = {"CKPT_SERVER": "auto"}  # over the suite's `off` (run_ckpt adds os.environ)
    with servers.running_server(store, bare, cwd=root) as server:
        before = servers.request_count(server.status() or {})
        first = run_ckpt(root, "create", "-m", "one", "--json", env=client)
        assert first.returncode == 0, first.stderr
        pushed = run_ckpt(root, "push", "--json", env=client)
        assert pushed.returncode == 0, pushed.stderr
        assert json.loads(pushed.stdout)["pushed"] == [json.loads(first.stdout)["id"]]
        assert servers.request_count(server.status() or {}) == before + 1, server.log_text()

        (root / "new.txt").write_text("after\n")
        second = run_ckpt(root, "create", "-m", "two", "--json", env=client)
        assert second.returncode == 0, second.stderr
        wrong = run_ckpt(root, "push", env={**client, "AWS_SECRET_ACCESS_KEY": "wrong"})
        assert wrong.returncode == 1, (wrong.stdout, wrong.stderr)
        lines = wrong.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ckpt: error: "), wrong.stderr
        assert servers.request_count(server.status() or {}) == before + 3  # both served

        again = run_ckpt(root, "push", "--json", env=client)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["pushed"] == [json.loads(second.stdout)["id"]]
        assert servers.request_count(server.status() or {}) == before + 4
    listed = run_ckpt(root, "list", "--remote", "--json", env=off)
    assert listed.returncode == 0, listed.stderr
    assert {r["label"] for r in json.loads(listed.stdout)} == {"one", "two"}
