"""What RELIABILITY.md, the README and docs/CLI.md say of tracked paths that an ignore rule
matches is what ckpt does: a path named explicitly is captured and restored (or deleted, when
it did not exist) even when ignored; ignored files inside a tracked directory stay out and are
never touched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

CkptIn = Callable[..., Any]
REPO = Path(__file__).resolve().parents[2]


def test_an_explicitly_tracked_ignored_path_is_captured_and_restored(
        initialized: Path, ckpt_in: CkptIn) -> None:
    ws = initialized
    (ws / ".gitignore").write_text("secret.env\n*.pyc\nlater.env\n")
    (ws / "secret.env").write_text("v1\n")
    (ws / "sub" / "c.pyc").write_bytes(b"compiled v1")
    assert ckpt_in("track", "secret.env", "sub", "later.env").code == 0
    made = ckpt_in("create").stdout.strip()
    shown = ckpt_in("show", made).stdout
    assert "secret.env" in shown and "sub/b.txt" in shown and "c.pyc" not in shown
    assert "did not exist: later.env" in shown

    (ws / "secret.env").write_text("v2\n")
    (ws / "later.env").write_text("made after\n")
    (ws / "sub" / "c.pyc").write_bytes(b"compiled v2")
    assert ckpt_in("restore", made).code == 0
    assert (ws / "secret.env").read_text() == "v1\n"  # ignored, tracked: restored
    assert not (ws / "later.env").exists()  # ignored, tracked, did not exist: deleted
    assert (ws / "sub" / "c.pyc").read_bytes() == b"compiled v2"  # ignored inside: untouched


def test_the_docs_say_so() -> None:
    reliability = " ".join((REPO / "RELIABILITY.md").read_text(encoding="utf-8").split())
    assert "captured even when an ignore rule matches it" in reliability
    assert "test_cli_docs_tracked.py" in reliability
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    assert "captured, and restored, even when an ignore rule matches it" in readme
    cli_md = " ".join((REPO / "docs" / "CLI.md").read_text(encoding="utf-8").split())
    assert "is captured and restored even when an ignore rule matches it" in cli_md
