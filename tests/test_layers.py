"""The dependency direction `cli -> checkpoints -> objstore` (and `tuning -> checkpoints`,
`cli -> agents -> checkpoints`; only `ckpt.agents` imports the optional `mcp`), the
public-API rule for the upper layers, and the format chokepoints.

Inside `checkpoints`, the rooms (sub-packages, and three groups of top-level modules) import
one way only too (`ROOMS`, `MAY_IMPORT`): every import counts, a lazy one inside a function
and one only for type checkers alike.

Read from the source with `ast`, so a violating import fails here even if nothing executes it.
`cli`, `ckpt.tuning` and `ckpt.agents` reach the library only through the public API of `ckpt.checkpoints`
(the package and the names in its `__all__`), never a submodule of it and never objstore.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from ckpt.checkpoints import __all__ as PUBLIC

ROOT = Path(__file__).resolve().parent.parent
# Layer -> its source folder (ckpt/tuning is a real folder of the package, not a link).
FOLDERS = {"objstore": "objstore", "checkpoints": "checkpoints", "cli": "cli",
           "tuning": "ckpt/tuning", "agents": "ckpt/agents"}


def _top(module: str) -> str:
    """The layer a module belongs to: `ckpt.checkpoints.snapshot.scan` -> `checkpoints`, `click` -> `click`."""
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


# The rooms of ckpt.checkpoints. Its top-level modules sit in three: the base every room uses,
# the workspace that snapshots, restores and remotes compose, and the facade over them all.
# A new module or sub-package must be placed here before this test passes.
TOP_ROOMS = {
    "base": {"errors", "paths", "platform", "lock", "model", "config", "reserve", "reports"},
    "workspace": {"identity", "writing", "workspace"},
    "facade": {"__init__", "service", "maintenance", "store_setup"},
}
SUB_PACKAGES = {"diff", "snapshot", "history", "restore", "remote"}
# room -> the other rooms it may import (objstore and the standard library are always allowed)
MAY_IMPORT: dict[str, set[str]] = {
    "base": set(),
    "diff": {"base"},
    "snapshot": {"base"},
    "history": {"base"},
    "workspace": {"base", "diff", "snapshot", "history"},
    "restore": {"base", "diff", "snapshot", "history", "workspace"},
    "remote": {"base", "diff", "snapshot", "history", "workspace", "restore"},
    "facade": {"base", "diff", "snapshot", "history", "workspace", "restore", "remote"},
}


def _room_of(parts: Sequence[str]) -> str | None:
    """The room of module `ckpt.checkpoints.<parts>` (None: not a module of a room)."""
    if not parts:
        return "facade"  # the package itself: its public API
    if parts[0] in SUB_PACKAGES:
        return parts[0]
    return next((room for room, names in TOP_ROOMS.items() if parts[0] in names), None)


def _imported_rooms(path: Path) -> set[str]:
    """Every room `path` imports, wherever in the module the import stands."""
    found: set[str] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            modules = [a.name.split(".") for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            base = node.module.split(".")
            # `from ckpt.checkpoints import reserve` names a module; a public name is the facade's
            modules = ([[*base, a.name] for a in node.names] if base == ["ckpt", "checkpoints"]
                       else [base])
        else:
            continue
        for parts in modules:
            if parts[:2] == ["ckpt", "checkpoints"]:
                room = _room_of(parts[2:])
                found.add(room if room is not None else "facade")
    return found


def room_violations(package: Path) -> dict[str, list[str]]:
    """module -> the rooms it imports that its own room may not, for the package at `package`
    (a module no room holds is reported as `unplaced`)."""
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).with_suffix("").parts
        room = _room_of(rel[:-1] if rel[-1] == "__init__" and len(rel) > 1 else rel)
        if room is None:
            found[str(path.relative_to(package))] = ["unplaced"]
            continue
        bad = sorted(_imported_rooms(path) - MAY_IMPORT[room] - {room})
        if bad:
            found[str(path.relative_to(package))] = bad
    return found


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
    source.write_text("import ckpt.checkpoints.snapshot.scan\n"
                      "from ckpt.checkpoints.service import Checkpoints\n"
                      "from ckpt.checkpoints import Checkpoints, statcache\n"
                      "from ckpt import checkpoints, Checkpoints, objstore\n"
                      "import ckpt.checkpoints\n")
    assert _private_uses(source) == ["ckpt.checkpoints.snapshot.scan", "ckpt.checkpoints.service",
                                     "ckpt.checkpoints.statcache", "ckpt.objstore"]


def test_the_rooms_of_checkpoints_import_one_way() -> None:
    assert room_violations(ROOT / "checkpoints") == {}


def test_every_room_is_placed_and_every_sub_package_says_what_it_holds() -> None:
    package = ROOT / "checkpoints"
    assert {p.parent.name for p in package.glob("*/__init__.py")} == SUB_PACKAGES
    assert {p.stem for p in package.glob("*.py")} == set().union(*TOP_ROOMS.values())
    for name in SUB_PACKAGES:
        doc = ast.get_docstring(_tree(package / name / "__init__.py"))
        assert doc and "Must not live here" in doc, name
    # the rooms' own order has no cycle: each may import only rooms that may not import it
    for room, allowed in MAY_IMPORT.items():
        assert all(room not in MAY_IMPORT[other] for other in allowed), room


@pytest.mark.parametrize(("module", "line", "room"), [
    ("snapshot/scan.py", "from ckpt.checkpoints.restore.plan import RestorePlan", "restore"),
    ("history/refs.py", "    from ckpt.checkpoints.snapshot import statcache", "snapshot"),
    ("diff/patch.py", "from ckpt.checkpoints import workspace", "workspace"),
    ("restore/staging.py", "import ckpt.checkpoints.remote.remote", "remote"),
    ("errors.py", "from ckpt.checkpoints import Checkpoints", "facade"),
])
def test_a_forbidden_import_between_rooms_is_found(tmp_path: Path, module: str, line: str,
                                                   room: str) -> None:
    """The rule on a copy of the package with one import added: lazy (indented, inside a
    function) and type-checking imports count like the others."""
    package = tmp_path / "checkpoints"
    shutil.copytree(ROOT / "checkpoints", package, ignore=shutil.ignore_patterns("*.so", "blake3"))
    assert room_violations(package) == {}
    source = (package / module).read_text()
    if line.startswith(" "):
        source += f"\n\ndef _added() -> None:\n{line}\n"
    else:
        source += f"\nif TYPE_CHECKING:\n    {line}\n"
    (package / module).write_text(source)
    assert room_violations(package) == {module: [room]}


def test_a_new_module_must_be_placed_in_a_room(tmp_path: Path) -> None:
    package = tmp_path / "checkpoints"
    shutil.copytree(ROOT / "checkpoints", package, ignore=shutil.ignore_patterns("*.so", "blake3"))
    (package / "merge.py").write_text('"""A new top-level module."""\n')
    assert room_violations(package) == {"merge.py": ["unplaced"]}


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
