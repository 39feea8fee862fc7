"""Every environment variable the package reads reaches a command the server runs.

The server applies only the names the client forwards (and unsets the rest of them), so a
name read by ckpt's code but not forwarded would make a served command differ from the same
command in-process. Read from the source: a name in a `environ.get("X")`, `environ["X"]`,
`getenv("X")` or `env.get("X")` call of the library, the CLI or the agents.
"""

from __future__ import annotations

import re
from pathlib import Path

from ckpt.cli import wire

ROOT = Path(__file__).resolve().parents[2]
READS = re.compile(r"""(?:environ(?:b)?\.get|getenv|env\.get|environ(?:b)?\[|env\[)\(?\s*b?["']([A-Z][A-Z0-9_]+)["']""")
# Read by the client or the server themselves, never by a served command.
NOT_FOR_COMMANDS = {"CKPT_SERVER_TEST_VERSION"}


def names_read() -> set[str]:
    found: set[str] = set()
    for folder in ("checkpoints", "cli", "objstore", "ckpt/agents", "ckpt/tuning"):
        for path in (ROOT / folder).rglob("*.py"):
            found.update(READS.findall(path.read_text()))
    return found


def test_the_scan_finds_names() -> None:
    assert {"CKPT_DEBUG", "GIT_CONFIG_GLOBAL", "XDG_STATE_HOME"} <= names_read()


def test_every_name_read_is_forwarded() -> None:
    missing = sorted(n for n in names_read() - NOT_FOR_COMMANDS if not wire.is_forwarded(n))
    assert not missing, f"read by ckpt but not forwarded to the server: {missing}"
