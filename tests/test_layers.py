"""The dependency direction `cli -> checkpoints -> objstore`, and the format chokepoints.

Read from the source with `ast`, so a violating import fails here even if nothing executes it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(("package", "forbidden"), [
    ("objstore", {"checkpoints", "cli", "click", "bench"}),
    ("checkpoints", {"cli", "click", "bench"}),
])
def test_lower_layers_never_import_upper_layers(package: str, forbidden: set[str]) -> None:
    offenders = {str(p.relative_to(ROOT)): sorted(_imports(p) & forbidden) for p in _modules(package)}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_only_the_codec_imports_msgpack_and_zstandard() -> None:
    users = [str(p.relative_to(ROOT)) for package in ("objstore", "checkpoints", "cli")
             for p in _modules(package) if _imports(p) & {"msgpack", "zstandard"}]
    assert users == ["objstore/codec.py"]


def test_every_package_directory_is_installed() -> None:
    """pyproject lists packages explicitly: a subpackage left out works in an editable install
    and is missing from a wheel (cli.commands once was)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for top in ("objstore", "checkpoints", "cli", "bench")
             for p in (ROOT / top).rglob("__init__.py")}
    assert found == listed
