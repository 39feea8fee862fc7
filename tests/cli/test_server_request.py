"""A server request's parts without a server: the command name in argv, global options, the
DECLINE table, the environment a request runs with, the client's stream encoding."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, seed, settings
from hypothesis import strategies as st

from ckpt.cli import wire
from ckpt.cli.server_request import (
    LOCAL_COMMANDS,
    BadRequest,
    Request,
    RequestEnv,
    decline_reason,
    stream_encoding,
)


def request(*argv: str, cwd: str = "/", env: dict[str, str] | None = None) -> Request:
    return Request(cwd, argv, env or {})


@pytest.mark.parametrize(("argv", "command"), [
    ((), None),
    (("list",), "list"),
    (("--root", "/x", "--session", "s", "diff", "a"), "diff"),
    (("--root=/x", "-v", "--debug", "restore", "id"), "restore"),
    (("--store", "gc", "list"), "list"),  # gc is --store's value
    (("--", "show"), "show"),
    (("--version",), None),
])
def test_command_is_the_first_argument_no_global_option_takes(argv: tuple[str, ...],
                                                                command: str | None) -> None:
    assert request(*argv).command() == command


def test_options_come_from_argv_before_the_env() -> None:
    r = request("--root", "a", "list", "--root", "b", env={"CKPT_ROOT": "/e", "CKPT_STORE": "/s"})
    assert r.option("--root") == "a"  # the one before the command
    assert r.option("--store") == "/s"
    assert request("--store=/t", "list").option("--store") == "/t"
    assert request("list").option("--session") is None


def test_decline_table(tmp_path: Path) -> None:
    store = str(tmp_path / ".ckpt")
    for name in sorted(LOCAL_COMMANDS):
        assert decline_reason(request(name), store) == "local"
    assert decline_reason(request("--root", str(tmp_path), "server", "status"), store) == "local"
    assert decline_reason(request("--help"), store) is None
    assert decline_reason(request("--store", str(tmp_path / "other"), "list"), store) == "store"
    assert decline_reason(request("--store", store, "list"), store) is None
    assert decline_reason(request("list", cwd=str(tmp_path)), store) is None
    assert decline_reason(request("list", env={"CKPT_ROOT": "/elsewhere"}), store) == "store"


def test_events_follow_runs_in_the_client(tmp_path: Path) -> None:
    """It runs until a Ctrl-C: in the server it would hold every other request back."""
    store = str(tmp_path / ".ckpt")
    for argv in (("events", "--follow"), ("events", "-f", "--json"),
                 ("--session", "events", "events", "--limit", "3", "-f")):
        assert decline_reason(request(*argv), store) == "local", argv
    assert request("--session", "events", "list", "-f").follows() is False
    assert request("events", "--json").follows() is False


def test_decode_round_trips_what_the_client_sends() -> None:
    env = [b"CKPT_ROOT=/r", b"LANG=C.UTF-8", b"TERM=xterm"]
    fields = wire.request_fields("/w d", ["create", "-m", "caf\xe9 \udcff"], env)
    r = Request.decode(fields)
    assert r == Request("/w d", ("create", "-m", "caf\xe9 \udcff"),
                        {"CKPT_ROOT": "/r", "LANG": "C.UTF-8", "TERM": "xterm"})
    with pytest.raises(BadRequest):
        Request.decode(wire.request_fields("relative", ["list"], []))
    with pytest.raises(BadRequest):
        Request.decode([b"/", b"5", b"list"])
    with pytest.raises(BadRequest):
        Request.decode(wire.request_fields("/", ["list"], [b"PATH=/bin"]))


names = st.sampled_from(["CKPT_ROOT", "CKPT_LOG", "CKPT_X", "TERM", "LANG", "LC_ALL", "COLUMNS",
                         "NO_COLOR", "XDG_DATA_HOME", "HOME", "TZ", "AWS_PROFILE", "HTTPS_PROXY",
                         "no_proxy", "SSL_CERT_FILE"])


@seed(24)
@settings(max_examples=60, deadline=None)
@given(server=st.dictionaries(names, st.text("abc/", max_size=4)),
       client=st.dictionaries(names, st.text("xyz/", max_size=4)))
def test_a_request_sees_exactly_the_client_env_and_the_server_gets_its_own_back(
        server: dict[str, str], client: dict[str, str]) -> None:
    before = dict(os.environ)
    try:
        for name in ("CKPT_ROOT", "CKPT_LOG", "CKPT_X", "TERM", "LANG", "LC_ALL", "COLUMNS",
                     "NO_COLOR", "XDG_DATA_HOME", "HOME", "TZ", "CKPT_SERVER", "AWS_PROFILE",
                     "HTTPS_PROXY", "no_proxy", "SSL_CERT_FILE"):
            os.environ.pop(name, None)
        os.environ.update(server)
        os.environ["PATH_LIKE_OTHER"] = "kept"
        saved = dict(os.environ)
        env = RequestEnv(client)
        forwarded = {k: v for k, v in os.environ.items() if wire.is_forwarded(k)}
        assert forwarded == client
        assert os.environ["PATH_LIKE_OTHER"] == "kept"
        env.restore()
        assert dict(os.environ) == saved
    finally:
        os.environ.clear()
        os.environ.update(before)


@pytest.mark.parametrize("env", [
    {}, {"LANG": "C"}, {"LC_CTYPE": "C.UTF-8"}, {"LANG": "en_US.UTF-8"},
    {"LANG": "de_DE.ISO-8859-1"}, {"LANG": "C", "LC_ALL": "en_US.UTF-8"}, {"LANG": "POSIX"},
    {"LANG": "C.utf8"}, {"PYTHONIOENCODING": "latin-1:replace", "LANG": "en_US.UTF-8"},
    {"PYTHONIOENCODING": "latin-1"}, {"PYTHONIOENCODING": ":replace"},
])
def test_stream_encoding_is_the_one_the_client_interpreter_chooses(env: dict[str, str]) -> None:
    """Against a real interpreter started with that environment (and what it forwards: its
    own os.environ, where locale coercion may have set LC_CTYPE)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import os, sys, json; print(json.dumps([sys.stdout.encoding, "
         "sys.stdout.errors, {k: v for k, v in os.environ.items() if k in "
         "('LANG', 'LC_ALL', 'LC_CTYPE', 'PYTHONIOENCODING')}]))"],
        env={"PATH": os.environ.get("PATH", ""), **env}, capture_output=True, text=True,
        check=True)
    encoding, errors, forwarded = json.loads(probe.stdout)
    assert stream_encoding(forwarded) == (encoding, errors)
