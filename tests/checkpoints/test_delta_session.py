"""Deltas through checkpoints: a file edited turn after turn is stored as deltas on its previous
versions, and every checkpoint still restores exactly, through prune, gc and repack; a damaged
base fails every checkpoint that needs it, loudly (exit 5 through the CLI)."""

from __future__ import annotations

import os
import random
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import restore_helpers as h  # tests/ dirs are on pytest's `pythonpath`
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from ckpt.checkpoints.restore.restorer import RestoreOptions
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import EntryKind, ObjectId, ObjectStore, codec
from ckpt.objstore.delta import read_chain

_WORDS = [b"def", b"return", b"self", b"value", b"index", b"tree", b"store", b"path", b"42",
          b"checkpoint", b"restore", b"import", b"class", b"(", b")", b":", b"=", b"    "]
_QUIET = RestoreOptions(save=False, record_event=False)


def _text(rng: random.Random, size: int) -> bytes:
    lines = []
    total = 0
    while total < size:
        line = b" ".join(rng.choice(_WORDS) for _ in range(rng.randrange(2, 14))) + b"\n"
        lines.append(line)
        total += len(line)
    return b"".join(lines)[:size]


def _local_edit(data: bytes, rng: random.Random) -> bytes:
    """Replace, insert or delete a line or two somewhere: an agent's small edit."""
    at = data.find(b"\n", rng.randrange(len(data))) + 1
    end = data.find(b"\n", at) + 1 or len(data)
    action = rng.randrange(3)
    new_line = _text(rng, rng.randrange(20, 80)).replace(b"\n", b" ") + b"\n"
    if action == 0:
        return data[:at] + new_line + data[end:]
    if action == 1:
        return data[:at] + new_line + data[at:]
    return data[:at] + data[end:]


def _write(root: str, name: str, data: bytes) -> None:
    with open(os.path.join(root, name), "wb") as out:
        out.write(data)


def _read(root: str, name: str) -> bytes:
    with open(os.path.join(root, name), "rb") as stream:
        return stream.read()


def _blob(objects: ObjectStore, tree: ObjectId, name: bytes) -> ObjectId:
    entry = objects.get_tree(tree).find(name)
    assert entry is not None and entry.kind is EntryKind.FILE and entry.oid is not None
    return entry.oid


@pytest.fixture
def root(tmp_path: Path) -> str:
    path = os.path.realpath(tmp_path / "ws")
    os.mkdir(path)
    return path


@seed(2929)
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(st.sampled_from(["edit"] * 5 + ["both", "prune", "forget",
                                                                "gc"]),
                                st.integers(0, 2**32 - 1)), min_size=6, max_size=30),
       chain=st.integers(1, 4))
def test_every_checkpoint_restores_exactly_through_prune_gc_and_repack(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]], chain: int
) -> None:
    base = str(tmp_path_factory.mktemp("delta-session"))
    root = os.path.join(base, "ws")
    os.mkdir(root)
    rng = random.Random(chain)
    files = {"a.py": _text(rng, 30_000), "b.md": _text(rng, 12_000)}
    for name, data in files.items():
        _write(root, name, data)
    expected: dict[str, dict[str, bytes]] = {}
    with Checkpoints.init(root, store=os.path.join(base, "store")) as cp:
        cp.config = cp.config.__class__(**{**_fields(cp.config), "delta_chain": chain})
        expected[cp.create().id] = dict(files)
        for action, value in steps:
            step = random.Random(value)
            if action in ("edit", "both"):
                for name in (files if action == "both" else [step.choice(sorted(files))]):
                    files[name] = _local_edit(files[name], step)
                    _write(root, name, files[name])
                expected[cp.create(reason="turn").id] = dict(files)
            elif action == "prune":
                kept = cp.prune(keep_latest=step.randint(1, 4), collect=step.random() < 0.5)
                for gone in kept.removed:
                    expected.pop(gone, None)
            elif action == "forget" and len(expected) > 1:
                victim = step.choice(sorted(expected))
                cp.forget(victim)
                del expected[victim]
            else:
                cp.gc(grace_seconds=0)  # a full repack of the packs too
        cp.gc(grace_seconds=0)
        assert cp.fsck(full=True).ok
        for ident, contents in expected.items():
            cp.restore(ident, _QUIET)
            for name, data in contents.items():
                assert _read(root, name) == data, (ident, name)
        objects = cp._ws.objects
        stored_as_deltas = sum(
            objects.backend.get(_blob(objects, record.tree, name))[4] == codec.CODEC_DELTA
            for record in cp.history() for name in (b"a.py", b"b.md"))
    if len(expected) > 3:
        assert stored_as_deltas, "edits between checkpoints were all stored whole"


def _fields(config: object) -> dict[str, object]:
    return {name: getattr(config, name) for name in config.__dataclass_fields__}  # type: ignore[attr-defined]


def test_a_2_mb_file_edited_200_times_grows_the_store_by_a_fraction_of_the_copies(
    root: str, tmp_path: Path
) -> None:
    """The issue's long session: one 2 MB text file, 200 checkpoints of small local edits.
    The store grows by at most 5% of what 200 independently compressed copies weigh, and
    checkpoints 1, 100 and 200 restore byte-exact (the sizes are deterministic)."""
    rng = random.Random(200)
    data = _text(rng, 2 << 20)
    _write(root, "big.txt", data)
    versions: list[tuple[str, bytes]] = []
    copies = 0
    with Checkpoints.init(root, store=str(tmp_path / "store")) as cp:
        level = cp.config.compression_level
        cp.create(reason="start")
        before = cp.stats().stored_bytes
        for _ in range(200):
            data = _local_edit(data, rng)
            _write(root, "big.txt", data)
            versions.append((cp.create(reason="turn").id, data))
            copies += len(codec.encode_object(data, level))
        growth = cp.stats().stored_bytes - before
        assert growth <= copies * 0.05, (growth, copies)
        objects = cp._ws.objects
        deepest = max(len(read_chain(objects.backend, _blob(objects, r.tree, b"big.txt")))
                      for r in cp.history())
        assert deepest <= cp.config.delta_chain + 1
        assert cp.stats().saved_by_deltas > copies * 0.9
        for number in (1, 100, 200):
            ident, expected = versions[number - 1]
            cp.restore(ident, _QUIET)
            assert _read(root, "big.txt") == expected, number


@pytest.fixture
def damaged_session(root: str) -> Iterator[tuple[str, list[str], list[str]]]:
    """A store whose chain base (the first version of a file) has a flipped byte: the ids
    of the checkpoints that need it, and those that do not."""
    rng = random.Random(7)
    data = _text(rng, 40_000)
    _write(root, "keep.txt", b"unrelated\n")
    _write(root, "f.txt", b"short\n")
    with Checkpoints.init(root) as cp:
        cp.config = cp.config.__class__(**{**_fields(cp.config), "delta_chain": 3})
        healthy = [cp.create().id]
        _write(root, "f.txt", data)
        first = cp.create()
        dependents = [first.id]
        for _ in range(5):
            data = _local_edit(data, rng)
            _write(root, "f.txt", data)
            dependents.append(cp.create().id)
        objects = cp._ws.objects
        base = _blob(objects, first.tree, b"f.txt")
        chains = [read_chain(objects.backend, _blob(objects, record.tree, b"f.txt"))
                  for record in cp.history() if record.id in dependents[1:]]
        assert all(chain[-1][0] == base and len(chain) > 1 for chain in chains)
        h.flip_packed_byte(objects.backend, base)
    yield root, dependents, healthy


_ckpt = h.ckpt_cli


def test_a_damaged_base_fails_every_dependent_checkpoint_with_exit_5(
    damaged_session: tuple[str, list[str], list[str]]
) -> None:
    root, dependents, healthy = damaged_session
    fsck = _ckpt(root, "fsck", "--full", "--json")
    assert fsck.returncode == 5, fsck.stderr
    assert set(re.findall("|".join(dependents), fsck.stdout)) == set(dependents)
    assert not set(re.findall("|".join(healthy), fsck.stdout))
    assert _ckpt(root, "restore", healthy[0], "--no-save").returncode == 0
    for ident in (dependents[-1], dependents[2], dependents[0]):
        restore = _ckpt(root, "restore", ident, "--no-save")
        assert restore.returncode == 5, (ident, restore.stdout, restore.stderr)
        assert "corrupt" in restore.stderr
        assert _read(root, "f.txt") == b"short\n"  # nothing torn written
