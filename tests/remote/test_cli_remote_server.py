"""The resident server never runs what may reach a remote: push, pull, `remote`, the `--remote`
forms, and restore/diff/show/cat of a store with remotes run in the client (long transfers
would hold the server's one executor, and the client's AWS credentials are not forwarded)."""

from __future__ import annotations

from pathlib import Path

from ckpt.cli.server_request import Request, decline_reason


def request(*argv: str, cwd: str) -> Request:
    return Request(cwd, argv, {})


def test_remote_commands_and_options_run_in_the_client(tmp_path: Path) -> None:
    store = tmp_path / ".ckpt"
    store.mkdir()
    cwd = str(tmp_path)
    for argv in (("push",), ("pull", "origin"), ("remote", "list"), ("list", "--remote"),
                 ("fsck", "--remote", "origin"), ("gc", "--remote"),
                 ("prune", "--keep-latest", "1", "--remote=origin")):
        assert decline_reason(request(*argv, cwd=cwd), str(store)) == "local", argv
    for argv in (("restore", "abc"), ("diff", "abc"), ("show", "abc"), ("list",)):
        assert decline_reason(request(*argv, cwd=cwd), str(store)) is None, argv
    (store / "remotes.toml").write_text('[remote.origin]\nurl = "s3://b"\n')
    for argv in (("restore", "abc"), ("diff", "abc"), ("show", "abc"), ("cat", "abc", "f")):
        assert decline_reason(request(*argv, cwd=cwd), str(store)) == "local", argv
    assert decline_reason(request("list", cwd=cwd), str(store)) is None
