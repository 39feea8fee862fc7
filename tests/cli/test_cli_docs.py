"""The README and docs/CLI.md say what is: their Python examples run as written (listeners
included), every sample id is an id, the exit-code tables are cli/errors.py's, every command
and every event type is documented, and so is the last line of `prune --dry-run`."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from ckpt.cli import errors
from ckpt.cli.main import cli
from ckpt.cli.params import EVENT_TYPES

CkptIn = Callable[..., Any]
REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
CLI_MD = REPO / "docs" / "CLI.md"
FULL_ID = re.compile(r"ckpt-\d{13}-[0-9a-z]{8}")
ID_LIKE = re.compile(r"ckpt-\d[0-9a-z-]*")


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(encoding="utf-8"),
                      re.DOTALL | re.MULTILINE)


def run_python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CKPT_")}
    env["TMPDIR"] = str(cwd)  # the README's example makes its workspace with tempfile
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


# -- the Python examples ------------------------------------------------------------------

def test_readme_python_examples_run_as_written_and_the_listener_fires(tmp_path: Path) -> None:
    blocks = python_blocks(README)
    harness = [b for b in blocks if "Checkpoints" in b]
    assert harness, "the README has no Python API example"
    outputs = {}
    for block in blocks:
        result = run_python(block, tmp_path)
        assert result.returncode == 0, result.stderr
        outputs[block] = result.stdout
    out = outputs[harness[0]]
    # The listener prints "checkpoint:restore <id>" when the restore happens.
    assert re.search(r"^checkpoint:restore ckpt-\d{13}-[0-9a-z]{8}$", out, re.MULTILINE), out
    assert "undo with: ckpt-" in out


CLI_MD_STAND_INS = """
import tempfile, types
from pathlib import Path
repo = Path(tempfile.mkdtemp())
(repo / "app.py").write_text("print('v1')\\n")
conversation_id, turn = "42", "7"
call = types.SimpleNamespace(id="call_1", name="bash")
logged = []
def log(item):
    logged.append(item)
def run_tool(call):
    (repo / "app.py").write_text("broken\\n")
    return types.SimpleNamespace(failed=True)
"""

CLI_MD_CHECKS = """
events = [item for item in logged if isinstance(item, dict)]
assert [e["type"] for e in events] == ["checkpoint:restore"], logged
assert (repo / "app.py").read_text() == "print('v1')\\n"
assert changes == [("M", "app.py")], changes
print("ok")
"""


def test_cli_md_python_example_runs_and_its_listener_fires(tmp_path: Path) -> None:
    blocks = [b for b in python_blocks(CLI_MD) if "Checkpoints" in b]
    assert len(blocks) == 1
    result = run_python(CLI_MD_STAND_INS + blocks[0] + CLI_MD_CHECKS, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.endswith("ok\n")


# -- sample ids ---------------------------------------------------------------------------

def help_texts() -> Iterator[tuple[str, str]]:
    runner = CliRunner()

    def walk(group: click.Group, prefix: list[str]) -> Iterator[tuple[str, str]]:
        for name, command in sorted(group.commands.items()):
            args = [*prefix, name]
            yield " ".join(args), runner.invoke(cli, [*args, "--help"]).output
            if isinstance(command, click.Group):
                yield from walk(command, args)

    yield "ckpt --help", runner.invoke(cli, ["--help"]).output
    yield from walk(cli, [])


def doc_texts() -> Iterator[tuple[str, str]]:
    for path in [README, REPO / "RELIABILITY.md", REPO / "ARCHITECTURE.md",
                 *sorted((REPO / "docs").glob("*.md"))]:
        yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8")


def bad_sample_ids(text: str) -> list[str]:
    """Ids that are neither a full id nor a prefix of a full id shown in the same text."""
    tokens = [t.rstrip("-") for t in ID_LIKE.findall(text)]
    full = {t for t in tokens if FULL_ID.fullmatch(t)}
    return sorted({t for t in tokens
                   if t not in full and not any(f.startswith(t) for f in full)})


@pytest.mark.parametrize("source", ["docs", "help"])
def test_every_sample_id_is_an_id_or_a_prefix_of_one_shown_beside_it(source: str) -> None:
    texts = list(doc_texts() if source == "docs" else help_texts())
    assert len(texts) > 3
    bad = {name: ids for name, text in texts if (ids := bad_sample_ids(text))}
    assert not bad, f"sample ids that are not ids (ckpt-{{13 digits}}-{{8 base36}}): {bad}"


def test_the_id_grammar_of_the_docs_is_the_one_ids_have(initialized: Path,
                                                        ckpt_in: CkptIn) -> None:
    made = ckpt_in("create").stdout.strip()
    assert FULL_ID.fullmatch(made), made


# -- exit codes ---------------------------------------------------------------------------

def code_table() -> set[int]:
    return {value for name, value in vars(errors).items()
            if name.isupper() and isinstance(value, int) and not isinstance(value, bool)}


def table_codes(text: str, heading: str) -> set[int]:
    section = text.split(heading, 1)[1].split("\n#", 1)[0]
    return {int(m) for m in re.findall(r"^\| (\d+) \|", section, re.MULTILINE)}


def test_exit_code_tables_are_the_one_of_cli_errors() -> None:
    codes = code_table()
    assert {0, 1, 2, 3, 4, 5, 130, 141} <= codes
    assert table_codes(README.read_text(encoding="utf-8"), "### Exit codes") == codes
    assert table_codes(CLI_MD.read_text(encoding="utf-8"), "## Exit codes and errors") == codes
    epilog = CliRunner().invoke(cli, ["--help"]).output.split("Exit codes:", 1)[1]
    epilog = epilog.split("\n\n", 1)[0]
    assert {int(n) for n in re.findall(r"(?:^|\s)(\d+) [a-z]", epilog)} == codes


# -- commands, events, prune --------------------------------------------------------------

def test_every_command_has_a_section_in_cli_md() -> None:
    text = CLI_MD.read_text(encoding="utf-8")
    names: list[str] = []
    for name, command in cli.commands.items():
        subs = command.commands if isinstance(command, click.Group) else {}
        names.extend([f"{name} {sub}" for sub in subs] if subs else [name])
    missing = [n for n in names
               if not re.search(rf"^### .*`ckpt {re.escape(n)}\b", text, re.MULTILINE)]
    assert not missing
    assert "bench" in names


def test_every_event_type_the_library_records_is_documented_and_accepted() -> None:
    recorded: set[str] = set()
    for path in (REPO / "checkpoints").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Event"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                recorded.add(node.args[0].value)
    assert recorded == set(EVENT_TYPES)
    events_section = CLI_MD.read_text(encoding="utf-8").split("### `ckpt events", 1)[1]
    events_section = events_section.split("\n### ", 1)[0]
    assert all(f"`{t}`" in events_section for t in EVENT_TYPES)


def test_the_last_line_of_prune_dry_run_is_documented(initialized: Path,
                                                      ckpt_in: CkptIn) -> None:
    for _ in range(3):
        assert ckpt_in("create").code == 0
    run = ckpt_in("prune", "--keep-latest", "1", "--dry-run")
    assert run.code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[:-1] and all(line.startswith("would remove ckpt-") for line in lines[:-1])
    shape = re.sub(r"\d+", "N", lines[-1])
    prune = CLI_MD.read_text(encoding="utf-8").split("### `ckpt prune", 1)[1].split("\n### ")[0]
    assert f"`{shape}`" in " ".join(prune.split()), shape


def test_readme_names_the_commands_that_complete_a_killed_restore() -> None:
    text = " ".join(README.read_text(encoding="utf-8").split())
    assert "completed by the next command" not in text
    assert ("completed by the next `create`, `restore`, `diff` against the workspace or "
            "`recover`") in text
    recover = CLI_MD.read_text(encoding="utf-8").split("### `ckpt recover", 1)[1]
    recover = " ".join(recover.split("\n### ", 1)[0].split())
    assert "`create`, `restore` or `diff ID`" in recover and "warn on stderr" in recover


def test_help_texts_fit_the_help_width() -> None:
    # The sample ids made some example lines longer: they must still fit click's width.
    for name, text in help_texts():
        long = [line for line in text.splitlines() if len(line) > 100]
        assert not long, (name, long)
