"""The wheel installs one top-level package, `ckpt`, so a harness's own packages cannot shadow it.

Builds the wheel once with pip (the regular, non-editable route `pip install .` takes), installs
it without dependencies into a fresh directory (what lands in site-packages), and imports it
from a directory that holds its own `checkpoints/`, `cli/` and `objstore/` packages. The
dependencies come from the running interpreter, so no second venv or registry round-trip is
needed beyond pip's build environment.

Marked `packaging`: building compiles the C extensions (tens of seconds), so the default run
skips it and `.ci/run` runs it on its own (`python -m pytest -m packaging`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.packaging

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet",
                    "--wheel-dir", str(out), str(REPO)], check=True, cwd=out)
    (built,) = out.glob("ckpt-*.whl")
    return built


@pytest.fixture(scope="module")
def site_packages(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site-packages")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--quiet",
                    "--target", str(target), str(wheel)], check=True)
    return target


def test_wheel_holds_only_the_ckpt_package(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        tops = {name.split("/", 1)[0] for name in archive.namelist()}
        names = archive.namelist()
    assert tops == {"ckpt", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    assert not any(name.startswith("ckpt/bench") or "/tests/" in name for name in names)
    # The package itself is whole: its sub-packages and the typing marker are there.
    for required in ("ckpt/__init__.py", "ckpt/py.typed", "ckpt/objstore/__init__.py",
                     "ckpt/checkpoints/__init__.py", "ckpt/cli/__init__.py",
                     "ckpt/cli/commands/__init__.py"):
        assert required in names


def test_wheel_holds_every_json_schema(wheel: Path) -> None:
    shipped = sorted(p.name for p in (REPO / "ckpt" / "schemas").glob("*.json"))
    assert len(shipped) >= 19
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        assert "ckpt/schemas/__init__.py" in names
        for name in shipped:
            member = f"ckpt/schemas/{name}"
            assert member in names
            assert archive.read(member) == (REPO / "ckpt" / "schemas" / name).read_bytes()


def test_ckpt_schema_works_from_the_installed_wheel(site_packages: Path, tmp_path: Path) -> None:
    """The console script of a regular install finds the schemas as package data (the
    working directory is not the repository, so only the install can provide them)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(site_packages)
    script = str(site_packages / "bin" / "ckpt")

    def ckpt(*args: str) -> str:
        done = subprocess.run([sys.executable, script, *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    listed = ckpt("schema").split()
    assert listed == sorted(p.stem for p in (REPO / "ckpt" / "schemas").glob("*.json"))
    assert json.loads(ckpt("schema", "--json")) == listed
    assert ckpt("schema", "list") == (REPO / "ckpt" / "schemas" / "list.json").read_text()
    where = subprocess.run([sys.executable, "-c", "import ckpt.schemas as s; print(s.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    assert where.stdout.startswith(str(site_packages))


def test_install_puts_only_ckpt_into_site_packages(site_packages: Path) -> None:
    installed = {p.name for p in site_packages.iterdir()}
    # `bin/` holds the `ckpt` console script, which --target puts beside the packages.
    assert installed - {"bin"} == {"ckpt", "ckpt-0.1.0.dist-info"}
    assert os.listdir(site_packages / "bin") == ["ckpt"]


HARNESS = textwrap.dedent("""
    import os, sys
    import checkpoints, cli, objstore
    from ckpt import Checkpoints
    import ckpt

    # The harness keeps its own packages, and ckpt comes from the installed wheel.
    for own in (checkpoints, cli, objstore):
        assert own.OWN == "harness", own
    assert ckpt.__file__.startswith(sys.argv[1]), ckpt.__file__
    work = sys.argv[2]
    with open(os.path.join(work, "notes.txt"), "w") as f:
        f.write("hello")
    with Checkpoints.init(work) as cp:
        first = cp.create()
    with open(os.path.join(work, "notes.txt"), "w") as f:
        f.write("changed")
    with Checkpoints.open(work) as cp:
        cp.restore(first.id)
    with open(os.path.join(work, "notes.txt")) as f:
        assert f.read() == "hello"
    print("ok")
""")


def test_a_harness_with_its_own_checkpoints_package_imports_ckpt(
        site_packages: Path, tmp_path: Path) -> None:
    harness = tmp_path / "harness"
    for name in ("checkpoints", "cli", "objstore"):
        (harness / name).mkdir(parents=True)
        (harness / name / "__init__.py").write_text('OWN = "harness"\n')
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # The harness directory comes first (as a script's own directory does), then the install.
    env["PYTHONPATH"] = os.pathsep.join([str(harness), str(site_packages)])
    done = subprocess.run([sys.executable, "-c", HARNESS, str(site_packages), str(work)],
                          cwd=harness, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
