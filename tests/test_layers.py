"""The dependency direction `cli -> checkpoints -> objstore` (and `tuning -> checkpoints`,
`cli -> agents -> checkpoints`; only `ckpt.agents` imports the optional `mcp`), the
public-API rule for the upper layers, and the format chokepoints.

Read from the source with `ast`, so a violating import fails here even if nothing executes it.
`cli`, `ckpt.tuning` and `ckpt.agents` reach the library only through the public API of `ckpt.checkpoints`
(the package and the names in its `__all__`), never a submodule of it and never objstore.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ckpt.checkpoints import __all__ as PUBLIC

ROOT = Path(__file__).resolve().parent.parent
# Layer -> its source folder (ckpt/tuning is a real folder of the package, not a link).
FOLDERS = {"objstore": "objstore", "checkpoints": "checkpoints", "cli": "cli",
           "tuning": "ckpt/tuning", "agents": "ckpt/agents"}


def _top(module: str) -> str:
    """The layer a module belongs to: `ckpt.checkpoints.scan` -> `checkpoints`, `click` -> `click`."""
    parts = module.split(".")
    return parts[1] if parts[0] == "ckpt" and len(parts) > 1 else parts[0]


def _tree(path: Path) -> ast.AST:
    return ast.parse(path.read_text(), str(path))


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found.update(_top(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(_top(node.module))
            if node.module == "ckpt":
                found.update(alias.name for alias in node.names)
    return found


def _private_uses(path: Path) -> list[str]:
    """What `path` imports from ckpt.checkpoints beyond the package and its public names."""
    found: list[str] = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("ckpt.checkpoints.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("ckpt.checkpoints."):
                found.append(node.module)
            elif node.module == "ckpt.checkpoints":
                found += [f"ckpt.checkpoints.{a.name}" for a in node.names
                          if a.name not in PUBLIC]
            elif node.module == "ckpt":
                found += [f"ckpt.{a.name}" for a in node.names
                          if a.name not in {*PUBLIC, "checkpoints", "tuning", "agents", "__version__"}]
    return found


def _relative_imports(path: Path) -> bool:
    return any(isinstance(node, ast.ImportFrom) and node.level > 0 for node in ast.walk(_tree(path)))


def _modules(layer: str) -> list[Path]:
    return sorted((ROOT / FOLDERS.get(layer, layer)).rglob("*.py"))


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize(("layer", "forbidden"), [
    ("objstore", {"checkpoints", "cli", "tuning", "agents", "click", "bench", "mcp"}),
    ("checkpoints", {"cli", "tuning", "agents", "click", "bench", "mcp"}),
    ("tuning", {"objstore", "cli", "agents", "click", "bench", "mcp"}),
    # agents sits between checkpoints and cli: the CLI passes in what agents needs of it
    ("agents", {"objstore", "cli", "tuning", "click", "bench"}),
    ("cli", {"objstore", "bench", "mcp"}),
])
def test_lower_layers_never_import_upper_layers(layer: str, forbidden: set[str]) -> None:
    offenders = {_name(p): sorted(_imports(p) & forbidden) for p in _modules(layer)}
    assert {k: v for k, v in offenders.items() if v} == {}


@pytest.mark.parametrize("layer", ["cli", "tuning", "agents"])
def test_upper_layers_use_only_the_public_api_of_checkpoints(layer: str) -> None:
    offenders = {_name(p): _private_uses(p) for p in _modules(layer)}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_the_public_api_rule_sees_each_way_of_reaching_a_submodule(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("import ckpt.checkpoints.scan\n"
                      "from ckpt.checkpoints.service import Checkpoints\n"
                      "from ckpt.checkpoints import Checkpoints, statcache\n"
                      "from ckpt import checkpoints, Checkpoints, objstore\n"
                      "import ckpt.checkpoints\n")
    assert _private_uses(source) == ["ckpt.checkpoints.scan", "ckpt.checkpoints.service",
                                     "ckpt.checkpoints.statcache", "ckpt.objstore"]


@pytest.mark.parametrize("layer", sorted(FOLDERS))
def test_no_relative_imports(layer: str) -> None:
    """Relative imports would slip past the rules above (they read absolute module names)."""
    assert [_name(p) for p in _modules(layer) if _relative_imports(p)] == []


def test_only_the_codec_imports_msgpack_and_zstandard() -> None:
    users = [_name(p) for layer in FOLDERS for p in _modules(layer)
             if _imports(p) & {"msgpack", "zstandard"}]
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
