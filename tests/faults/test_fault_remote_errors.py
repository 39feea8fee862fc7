"""A remote that refuses the credentials or cannot be reached: every remote command exits 1 with
one line on stderr and returns; nothing is written to the remote, and the store stays usable.

Cases: a wrong secret (403 SignatureDoesNotMatch), an unknown access key (403
InvalidAccessKeyId), no credentials at all; an endpoint where nothing listens (connection
refused); and a "black hole" that accepts the connection and never answers (the client's own
timeouts must end it). A command's wait is bounded by a generous hang guard only; how long it
took is never asserted.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
from collections.abc import Iterator

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import fault_remote_helpers as r
import pytest
from seaweed import HOST, Bucket, free_ports, s3_bucket, s3_env, seaweed

__all__ = ["s3_bucket", "s3_env", "seaweed"]  # the fixtures these tests use

#: The remote commands each case runs (the pushed checkpoint's id is appended to `restore`).
COMMANDS = (("push", r.REMOTE), ("pull", r.REMOTE), ("list", "--remote", r.REMOTE),
            ("fsck", "--remote", r.REMOTE), ("restore",))

# Against a black hole each command waits out its first request's timeout and retries
# (~15 s): the default run takes the two that reach a remote from either side (a push from
# the store that has it, a restore on a machine that has nothing else); a soak run, every one.
BLACK_HOLE_COMMANDS = COMMANDS if h.SOAK else (COMMANDS[0], COMMANDS[-1])

CREDENTIALS = {
    "wrong secret": {"AWS_SECRET_ACCESS_KEY": "not-the-secret-0123456789"},
    "unknown key": {"AWS_ACCESS_KEY_ID": "nobody-here"},
    "no credentials": {"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""},
}


def _one_line_exit_1(run: h.Run, what: str) -> None:
    assert run.code == h.USER_ERROR, f"{what}: {run}"
    lines = run.err.strip().splitlines()
    assert len(lines) == 1, f"{what}: one line, no traceback: {run}"
    assert lines[0].startswith("ckpt: error:"), f"{what}: {run}"


def _pushed(base: str, bucket: Bucket) -> tuple[r.Machine, str]:
    m = r.machine(base, "a", bucket)
    h.build_tree(m.root, random.Random(h.seed_for("remote-errors")), files=30)
    checkpoint_id = m.create("pushed")
    m.ok("push", r.REMOTE)
    return m, checkpoint_id


@pytest.mark.parametrize("case", sorted(CREDENTIALS))
def test_bad_credentials_are_one_line_exit_1(base: str, s3_bucket: Bucket, case: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    a, checkpoint_id = _pushed(base, s3_bucket)
    fresh = r.machine(base, "fresh", s3_bucket)
    keys_before = sorted(s3_bucket.keys())
    for name, value in CREDENTIALS[case].items():
        if value:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name)
    a.create("not pushed")
    for args in COMMANDS:
        m = fresh if args[0] == "restore" else a
        full = (*args, checkpoint_id) if args[0] == "restore" else args
        run = m.run(*full)
        _one_line_exit_1(run, f"{case}: {' '.join(full)}")
        for secret in CREDENTIALS[case].values():
            assert not secret or secret not in run.err, "the secret is never printed"
        h.tally("remote: bad credentials", injected=1, passed=1)
    assert sorted(s3_bucket.keys()) == keys_before, "nothing written with bad credentials"
    assert h.journals(fresh.store) == []
    monkeypatch.undo()  # the fixture's environment again: both stores work as before
    for key, value in s3_bucket.server.env().items():
        monkeypatch.setenv(key, value)
    a.ok("push", r.REMOTE)
    fresh.ok("restore", checkpoint_id, "--target", os.path.join(base, "out"))
    assert h.tree_state(os.path.join(base, "out")) == a.models[checkpoint_id]


@contextlib.contextmanager
def _black_hole() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        sock.listen(64)
        yield sock.getsockname()[1]


# A black hole is no refusal: only the client's per-request timeout ends each call (small
# requests get a short one, objstore/remote/transport.py), within the machines' hang guard.
@pytest.mark.parametrize("case", ["refused", "black hole"])
def test_unreachable_endpoint_is_one_line_exit_1(base: str, s3_bucket: Bucket, case: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # only the endpoint each remote names
    a, checkpoint_id = _pushed(base, s3_bucket)
    with contextlib.ExitStack() as stack:
        port = (free_ports(1)[0] if case == "refused"
                else stack.enter_context(_black_hole()))
        endpoint = f"http://{HOST}:{port}"
        a.ok("remote", "add", "gone", s3_bucket.url, "--endpoint", endpoint)
        fresh = r.machine(base, "fresh", s3_bucket, endpoint=endpoint)
        a.create("not pushed")
        for args in COMMANDS if case == "refused" else BLACK_HOLE_COMMANDS:
            # Machine A names the bad endpoint "gone"; the fresh machine has only it.
            full = ((*args, checkpoint_id) if args[0] == "restore"
                    else tuple("gone" if x == r.REMOTE else x for x in args))
            run = (fresh if args[0] == "restore" else a).run(*full)
            _one_line_exit_1(run, f"{case}: {' '.join(full)}")
            h.tally(f"remote: unreachable ({case})", injected=1, passed=1)
        assert h.journals(fresh.store) == []
    a.ok("push", r.REMOTE)  # the good remote still works from the same store
    assert set(r.remote_record_ids(s3_bucket)) == set(a.models)
