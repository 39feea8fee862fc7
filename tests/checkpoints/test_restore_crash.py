"""Crash safety of restore, with real processes and real damage to the store.

- A restore subprocess killed with SIGKILL in the middle of applying a big plan is completed,
  exactly, by the next command that takes the root lock (`recover`, `create`, `diff`,
  `restore`); the store stays clean and no lock is left blocking.
- A corrupt or missing object found while staging aborts before the workspace is touched.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import restore_helpers as h  # tests/ dirs are on pytest's `pythonpath`

from ckpt import checkpoints
from ckpt.checkpoints import RestoreOptions
from ckpt.checkpoints.config import read_config, write_config
from ckpt.checkpoints.restore.journal import RestoreIntent, write_intent
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import CorruptObject, ObjectNotFound

REPO = str(Path(checkpoints.__file__).resolve().parent.parent)
LOCK_TIMEOUT = 3.0  # a lock left behind by the killed child would fail the next command fast

# Restores argv[2] in root argv[1]; prints one line per progress tick of the apply phase
# ("restore" stage), then "done". argv: repo, root, ref, save (0/1).
RESTORER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from ckpt.checkpoints.service import Checkpoints
from ckpt.checkpoints import RestoreOptions
cp = Checkpoints.open(sys.argv[2])
def progress(stage, done, total):
    if stage == "restore":
        print(f"tick {done} {total} {time.monotonic()}", flush=True)
cp.restore(sys.argv[3], RestoreOptions(save=sys.argv[4] == "1"), progress=progress)
print(f"done {time.monotonic()}", flush=True)
"""


@pytest.fixture
def root(tmp_path: Path) -> str:
    path = os.path.realpath(tmp_path / "ws")
    os.mkdir(path)
    return path


def open_service(root: str) -> Checkpoints:
    return Checkpoints.open(root)


def journals(cp: Checkpoints) -> list[object]:
    """Restores in progress: journaled in the catalog, or an older ckpt's journal files."""
    return [*cp.catalog.restore_journals(),
            *glob.glob(os.path.join(cp.store_dir, "roots", "*", "journal"))]


# -- SIGKILL mid-apply ------------------------------------------------------------------


def build_state(root: str, variant: int, files: int = 1000) -> None:
    """Two very different trees over the same paths: every file, link and some types differ."""
    for index in range(files):
        directory = f"pkg{index % 40:02}/mod{index % 7}"
        h.write_file(root, f"{directory}/f{index:04}.py", b"variant %d of file %d\n" % (variant, index),
                     executable=(index + variant) % 11 == 0)
    for index in range(150):
        link = os.path.join(root, f"pkg{index % 40:02}", f"link{index:03}")
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(f"mod{(index + variant) % 7}/f{index:04}.py", link)
    # a directory in one variant is a file in the other, and each has paths the other lacks
    swap = os.path.join(root, "swap")
    if variant == 0:
        if os.path.isfile(swap):
            os.unlink(swap)
        for index in range(30):
            h.write_file(root, f"swap/s{index}.txt", b"in a directory %d\n" % index)
    else:
        shutil.rmtree(swap, ignore_errors=True)
        h.write_file(root, "swap", b"now a file\n")
    shutil.rmtree(os.path.join(root, f"only{1 - variant}"), ignore_errors=True)
    for index in range(100):
        h.write_file(root, f"only{variant}/n{index:03}.txt", b"only in variant %d\n" % variant)


def run_restore_killed(root: str, ref: str, *, save: bool, rng: random.Random) -> bool:
    """Run a restore in a child and SIGKILL it inside its apply phase: after a seeded number of
    progress ticks (one per 256 operations), plus a seeded sub-tick delay, so the kill lands
    at an arbitrary instruction. Returns True if the child finished first (a missed kill)."""
    child = subprocess.Popen([sys.executable, "-c", RESTORER, REPO, root, ref, "1" if save else "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.readline()
    assert line.startswith("tick"), (line, child.stderr.read() if child.stderr else "")
    total = int(line.split()[2])
    assert total >= 3 * 256, f"plan too small to kill mid-apply: {total} operations"
    for _ in range(rng.randrange(0, total // 256 - 2)):
        line = child.stdout.readline()
    time.sleep(rng.uniform(0.0, 0.01))
    child.send_signal(signal.SIGKILL)
    out, _ = child.communicate(timeout=60)
    return child.returncode == 0 and "done" in out


def complete_with(command: str, root: str, target: str, *, pending: bool) -> None:
    """The next command after the kill; it must complete the journaled restore first, if the
    kill left one (`pending`: it may land after the restore finished, before the exit)."""
    with open_service(root) as cp:
        def restore_events() -> int:
            return sum(1 for e in cp.events(type="checkpoint:restore") if e.data["id"] == target)

        events_before = restore_events()
        if command == "recover":
            report = cp.recover()
            if pending:
                assert report is not None and report.id == target
            else:
                assert report is None
        elif command == "create":
            record = cp.create(label="next turn")
            assert record.tree == cp.get(target).tree  # it saw the completed tree
        elif command == "diff":
            assert cp.diff(target) == []
        else:
            report = cp.restore(target)
            assert report.written == 0 and report.deleted == 0  # already completed
            assert report.pre_restore is not None
            assert cp.get(report.pre_restore).tree == cp.get(target).tree
        # the completion, then the restore's own
        expected_events = int(pending) + (command == "restore")
        assert restore_events() == events_before + expected_events
        assert journals(cp) == [] and h.staging_left(cp.store_dir, root) == []
        assert cp.recover() is None


def set_lock_timeout(root: str) -> None:
    with Checkpoints.init(root) as cp:
        write_config(cp.store_dir, dataclasses.replace(read_config(cp.store_dir), lock_timeout=LOCK_TIMEOUT))


def kill_repeatedly(root: str, first: str, second: str, models: dict[str, object], *, attempts: int,
                    seed: int) -> int:
    """Restore to `first` and `second` alternately (the tree starts at `second`), each restore
    killed mid-apply and completed by the next command; returns how many kills hit mid-apply."""
    rng = random.Random(seed)
    commands = ["recover", "create", "diff", "restore"]
    mid_apply = 0
    for attempt in range(attempts):
        target = first if attempt % 2 == 0 else second
        before = h.tree_state(root)
        finished = run_restore_killed(root, target, save=attempt % 3 == 1, rng=rng)
        with open_service(root) as cp:
            pending = bool(journals(cp))
        if pending and not finished and h.tree_state(root) not in (before, models[target]):
            mid_apply += 1
        complete_with(commands[attempt % len(commands)], root, target, pending=pending)
        assert h.tree_state(root) == models[target], f"attempt {attempt}: the tree is not the target"
    with open_service(root) as cp:
        check = cp.fsck(full=True)
        assert check.ok, check.objects.problems
    return mid_apply


def test_restore_killed_mid_apply_is_completed_exactly_by_the_next_command(root: str) -> None:
    set_lock_timeout(root)
    with open_service(root) as cp:
        build_state(root, 0)
        first = cp.create(label="variant 0").id
        model_first = h.tree_state(root)
        build_state(root, 1)
        second = cp.create(label="variant 1").id
    models = {first: model_first, second: h.tree_state(root)}
    assert models[first] != models[second]
    mid_apply = kill_repeatedly(root, first, second, models, attempts=10, seed=20240607)
    assert mid_apply >= 8, f"only {mid_apply} of 10 kills landed mid-apply"


def test_tracked_restore_killed_mid_apply_leaves_no_temporary_name_behind(root: str) -> None:
    """Tracked scope leaves untracked names alone, so nothing would clean up a temporary
    symlink a killed restore had left beside a tracked one."""
    set_lock_timeout(root)

    def links(variant: int) -> None:
        for index in range(1100):
            path = os.path.join(root, f"d{index % 30:02}", f"l{index:04}")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if os.path.lexists(path):
                os.unlink(path)
            os.symlink(f"target-{variant}-{index}", path)

    links(0)
    h.write_file(root, "untracked.txt", b"not tracked")
    with open_service(root) as cp:
        cp.track(*(os.path.join(root, f"d{i % 30:02}", f"l{i:04}") for i in range(1100)))
        first = cp.create(label="links 0").id
        model_first = h.tree_state(root)
        links(1)
        second = cp.create(label="links 1").id
    models = {first: model_first, second: h.tree_state(root)}
    mid_apply = kill_repeatedly(root, first, second, models, attempts=3, seed=99)
    assert mid_apply >= 2, f"only {mid_apply} of 3 kills landed mid-apply"


def test_gc_after_a_killed_restore_keeps_what_completing_it_needs(root: str) -> None:
    with Checkpoints.init(root) as cp:
        build_state(root, 0)
        record = cp.create(reason="old")
        target, model = record.id, h.tree_state(root)
        build_state(root, 1)
        cp.create(reason="new")
    assert not run_restore_killed(root, target, save=False, rng=random.Random(5))
    with open_service(root) as cp:
        assert journals(cp)
        # Prune and collect do not take the root lock: the target's record and every object
        # only it referenced become garbage while the restore still needs them.
        assert list(cp.prune(reason="old", collect=False).removed) == [target]
        staged = h.staging_left(cp.store_dir, root)
        cp.gc(grace_seconds=0)
        assert h.staging_left(cp.store_dir, root) == staged  # the journal names it: kept
    with open_service(root) as cp:
        cp.recover()
        assert h.tree_state(root) == model
        assert journals(cp) == [] and h.staging_left(cp.store_dir, root) == []
        assert cp.gc(grace_seconds=0).objects_removed > 0  # completed: now it is garbage
        assert cp.fsck(full=True).ok
        assert cp.create().tree == record.tree


# -- damaged store found while staging --------------------------------------------------


def damaged_setup(root: str, cp: Checkpoints, content: str) -> tuple[str, bytes, str]:
    """Checkpoint A (ten files), then B over it; returns (A's id, the oid of a blob only A has,
    the path of that file)."""
    rng = random.Random(7)
    for index in range(10):
        data = (b"line %d of A\n" % index) * 2000 if content == "compressible" else rng.randbytes(3000)
        h.write_file(root, f"src/f{index}.txt", data)
    record = cp.create(label="A")
    blob = next(e.oid for e in cp.files(record.id) if e.path == b"src/f6.txt")
    for index in range(10):
        h.write_file(root, f"src/f{index}.txt", b"B version %d\n" % index)
    h.write_file(root, "new_in_B.txt", b"B")
    cp.create(label="B")
    assert blob is not None
    return record.id, blob, "src/f6.txt"


@pytest.mark.parametrize("content", ["compressible", "incompressible"])
def test_corrupt_object_found_while_staging_leaves_the_workspace_byte_identical(root: str, content: str) -> None:
    h.init_loose_store(os.path.join(root, ".ckpt"))
    with Checkpoints.init(root) as cp:
        target, blob, _ = damaged_setup(root, cp, content)
        path = h.object_path(cp.store_dir, blob)
        os.chmod(path, 0o644)
        with open(path, "r+b") as stream:
            data = bytearray(stream.read())
            data[len(data) // 2] ^= 0xFF
            data[-1] ^= 0x01
            stream.seek(0)
            stream.write(data)
        before, stats = h.tree_state(root), h.stat_state(root)

        with pytest.raises(CorruptObject) as caught:
            cp.restore(target)

        assert caught.value.oid == blob
        assert blob.hex() in str(caught.value)
        assert h.tree_state(root) == before and h.stat_state(root) == stats
        assert journals(cp) == [] and h.staging_left(cp.store_dir, root) == []
        assert cp.events(type="checkpoint:restore") == []
        after = cp.create(label="still usable")  # no pending journal, no lock left
        assert after.tree == cp.history(reason="pre-restore")[-1].tree


def test_missing_object_found_while_staging_leaves_the_workspace_byte_identical(root: str) -> None:
    h.init_loose_store(os.path.join(root, ".ckpt"))
    with Checkpoints.init(root) as cp:
        target, blob, _ = damaged_setup(root, cp, "compressible")
        os.unlink(h.object_path(cp.store_dir, blob))
        before, stats = h.tree_state(root), h.stat_state(root)

        with pytest.raises(ObjectNotFound) as caught:
            cp.restore(target, RestoreOptions(save=False))

        assert caught.value.oid == blob
        assert h.tree_state(root) == before and h.stat_state(root) == stats
        assert journals(cp) == [] and h.staging_left(cp.store_dir, root) == []
        assert cp.recover() is None


# -- a journal file left by a ckpt before catalog schema 2 -------------------------------


def test_a_restore_an_older_ckpt_left_half_done_is_completed_and_its_file_carried_over(
        root: str) -> None:
    with Checkpoints.init(root) as cp:
        build_state(root, 0, files=40)
        first = cp.create(label="first")
        model = h.tree_state(root)
        build_state(root, 1, files=40)
        cp.create(label="second")
        # What such a ckpt journaled (a file in the root's directory) before it was killed,
        # half way: staging made, some of it applied.
        staging = os.fsencode(os.path.join(cp._ws.root_dir, "staging-00112233aabb"))
        os.mkdir(staging)
        write_intent(cp._ws.journal_path, RestoreIntent(
            checkpoint=first.id, tree=first.tree, scope="tree", covered=(), absent_parents=(),
            keep=(), only=None, pre_restore=None, record_event=True, discard_later=False,
            staging=staging))
        h.write_file(root, "pkg00/mod0/f0000.py", b"variant 0 of file 0\n")
    with Checkpoints.open(root) as cp:
        assert len(journals(cp)) == 1
        report = cp.recover()
        assert report is not None and report.id == first.id
        assert h.tree_state(root) == model
        assert journals(cp) == [] and h.staging_left(cp.store_dir, root) == []
        assert [e.data["id"] for e in cp.events(type="checkpoint:restore")] == [first.id]
        assert cp.recover() is None
