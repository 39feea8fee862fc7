"""The dependency direction `cli -> checkpoints -> objstore`, and the format chokepoints.

Read from the source with `ast`, so a violating import fails here even if nothing executes it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _top(module: str) -> str:
    """The layer a module belongs to: `ckpt.checkpoints.scan` -> `checkpoints`, `click` -> `click`."""
    parts = module.split(".")
    return parts[1] if parts[0] == "ckpt" and len(parts) > 1 else parts[0]


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(_top(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(_top(node.module))
            if node.module == "ckpt":
                found.update(alias.name for alias in node.names)
    return found


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize(("package", "forbidden"), [
    ("objstore", {"checkpoints", "cli", "tuning", "click", "bench"}),
    ("checkpoints", {"cli", "tuning", "click", "bench"}),
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
    found = {"ckpt", *(".".join(("ckpt", *p.parent.relative_to(ROOT).parts))
                       for top in ("objstore", "checkpoints", "cli")
                       for p in (ROOT / top).rglob("__init__.py")),
             *(".".join(p.parent.relative_to(ROOT).parts)
               for p in (ROOT / "ckpt").glob("*/__init__.py") if not p.parent.is_symlink())}
    assert found == listed
    # ckpt/ links each top-level folder in: the wheel is built from ckpt/.
    assert {p.name: p.readlink() for p in (ROOT / "ckpt").iterdir() if p.is_symlink()} == {
        top: Path("..", top) for top in ("objstore", "checkpoints", "cli")}


def test_the_wheel_holds_only_the_ckpt_namespace() -> None:
    """A harness with its own `checkpoints/` or `cli/` package must still import ours."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert {name.split(".")[0] for name in setuptools["packages"]} == {"ckpt"}
