"""Concurrency: many processes on one store, and two restores of one root.

- Four writer processes take checkpoints of four roots into one shared store (`--store`),
  through the Python API (one long-lived `Checkpoints` each) and the CLI in turn, and now and
  then restore one of their earlier checkpoints; a fifth process runs `ckpt prune` on the
  writers' roots and `ckpt gc` in a loop, with gc_grace_seconds 0 so gc races everything it
  can. Bounded (10 s; 120 s with CKPT_SOAK=1). Afterwards: `ckpt fsck --full` is clean, every
  checkpoint a writer reported and no prune removed is listed and holds exactly the tree it
  was taken of, and each root restores to its latest checkpoint exactly.
- Two restores of one root (the first one slowed down by its progress callback, as on a slow
  disk): with a short lock timeout the second fails with exit 4 naming the holder's pid; with
  a long one it waits, and its pre-restore checkpoint is exactly the first restore's target
  (it never saw a half-restored tree: no interleaving).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest

from ckpt.checkpoints.service import Checkpoints

SECONDS = h.scale(10, 120)
WRITERS = 4
RESTORE_ROUNDS = h.scale(2, 10)

# A writer: argv = helpers path, root, store, seed, deadline (epoch seconds). One JSON line per
# checkpoint it was told about: {"id", "model"} (model: hex path -> entry), or a restore.
WRITER = r"""
import importlib.util, json, os, random, subprocess, sys, time
sys.path.insert(0, os.path.dirname(os.path.dirname(sys.argv[1])))  # tests/, for `soak`
spec = importlib.util.spec_from_file_location("ckpt_fault_helpers", sys.argv[1])
h = importlib.util.module_from_spec(spec); sys.modules[spec.name] = h; spec.loader.exec_module(h)
from ckpt.checkpoints.errors import UnknownCheckpoint
from ckpt.checkpoints.service import Checkpoints
root, store, seed, deadline = sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
rng = random.Random(seed)

def emit(kind, checkpoint_id, model):
    line = {"kind": kind, "id": checkpoint_id,
            "model": {k.hex(): [v.hex() if isinstance(v, bytes) else v for v in e]
                      for k, e in model.items()}}
    print(json.dumps(line), flush=True)

mine = []
with Checkpoints.open(root, store) as cp:
    turn = 0
    while time.time() < deadline:
        turn += 1
        h.mutate(root, rng, changes=rng.randint(5, 60), max_size=20000)
        model = h.tree_state(root)
        if turn % 5 == 0 and mine:
            target = rng.choice(mine)
            try:
                report = cp.restore(target)
            except UnknownCheckpoint:
                mine.remove(target)  # pruned meanwhile
                continue
            emit("restore", report.pre_restore, model)
            continue
        if turn % 2:
            checkpoint_id = cp.create(label=f"turn {turn}").id
        else:
            run = subprocess.run(h.argv(root, "create", store=store), env=h.env(), cwd=root,
                                 capture_output=True, text=True)
            if run.returncode != 0:
                print(json.dumps({"kind": "error", "code": run.returncode, "err": run.stderr}),
                      flush=True)
                continue
            checkpoint_id = run.stdout.strip()
        mine.append(checkpoint_id)
        emit("create", checkpoint_id, model)
"""

# The collector: argv = store, deadline, seed, roots... Prints the prune reports and gc runs.
COLLECTOR = r"""
import json, random, subprocess, sys, time
store, deadline, seed, roots = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
rng = random.Random(seed)
entry = "from ckpt.cli.main import main; main()"
while time.time() < deadline:
    root = rng.choice(roots)
    prune = subprocess.run([sys.executable, "-c", entry, "--root", root, "--store", store,
                            "prune", "--keep-latest", str(rng.randint(1, 3)), "--json"],
                           capture_output=True, text=True)
    print(json.dumps({"kind": "prune", "code": prune.returncode, "out": prune.stdout,
                      "err": prune.stderr}), flush=True)
    gc = subprocess.run([sys.executable, "-c", entry, "--root", root, "--store", store, "gc",
                         "--json"], capture_output=True, text=True)
    print(json.dumps({"kind": "gc", "code": gc.returncode, "out": gc.stdout, "err": gc.stderr}),
          flush=True)
"""


def _model(raw: dict[str, list[object]]) -> dict[bytes, tuple[object, ...]]:
    model = {}
    for key, entry in raw.items():
        kind = entry[0]
        if kind == "l":
            model[bytes.fromhex(key)] = ("l", bytes.fromhex(str(entry[1])))
        else:
            model[bytes.fromhex(key)] = tuple(entry)
    return model


def test_four_writers_and_a_collector_share_one_store(base: str) -> None:
    store = os.path.join(base, "store")
    roots = []
    for index in range(WRITERS):
        root = os.path.join(base, f"w{index}")
        os.mkdir(root)
        h.build_tree(root, random.Random(h.seed_for(f"writer-{index}")), files=300, dirs=12,
                     max_size=8000)
        roots.append(root)
    assert h.ckpt_in(roots[0], "init", store=store).code == h.OK
    h.set_config(roots[0], "gc_grace_seconds", "0", store=store)
    h.set_config(roots[0], "lock_timeout", "60", store=store)
    deadline = time.time() + SECONDS
    helpers = str(Path(__file__).with_name("fault_helpers.py"))
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, helpers, root, store,
                                 str(h.seed_for(f"writer-run-{i}")), str(deadline)],
                                env=h.env(), cwd=root, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for i, root in enumerate(roots)]
    collector = subprocess.Popen([sys.executable, "-c", COLLECTOR, store, str(deadline),
                                  str(h.seed_for("collector")), *roots],
                                 env=h.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
    outputs = [p.communicate(timeout=SECONDS + 300) for p in [*writers, collector]]
    for process, (_, err) in zip([*writers, collector], outputs):
        assert process.returncode == 0, f"a worker failed:\n{err[-3000:]}"
    expected: dict[str, dict[bytes, tuple[object, ...]]] = {}
    latest: dict[str, str] = {}
    counts = {"created": 0, "restored": 0, "pruned": 0, "gc runs": 0, "objects collected": 0}
    for root, (out, _) in zip(roots, outputs[:WRITERS]):
        for line in out.splitlines():
            event = json.loads(line)
            assert event["kind"] != "error", f"a writer's ckpt create failed: {event}"
            expected[event["id"]] = _model(event["model"])
            if event["kind"] == "create":
                counts["created"] += 1
                latest[root] = event["id"]
            else:
                counts["restored"] += 1
    pruned: set[str] = set()
    for line in outputs[-1][0].splitlines():
        event = json.loads(line)
        assert event["code"] == h.OK, f"the collector's {event['kind']} failed: {event['err']}"
        report = json.loads(event["out"])
        if event["kind"] == "prune":
            pruned.update(report["removed"])
        else:
            counts["gc runs"] += 1
        counts["objects collected"] += report["objects_removed"]  # prune collects too
    counts["pruned"] = len(pruned)
    assert counts["created"] >= 2 * WRITERS and counts["gc runs"] >= 2, counts
    assert counts["objects collected"] > 0, f"gc never collected: the race was not real {counts}"
    h.fsck_clean(roots[0], store)
    listed = h.listed_ids(roots[0], store) | set().union(
        *(h.listed_ids(r, store) for r in roots[1:]))
    survivors = {i: m for i, m in expected.items() if i not in pruned}
    lost = sorted(set(survivors) - listed)
    assert not lost, f"checkpoints neither listed nor pruned: {lost}"
    for root in roots:
        with Checkpoints.open(root, store) as cp:
            for checkpoint_id, model in survivors.items():
                if cp.get(checkpoint_id).root == root:
                    held = h.checkpoint_state(cp, checkpoint_id)
                    assert held == model, f"{checkpoint_id}: {h.diff_models(model, held)}"
        last = latest.get(root)
        if last is not None and last not in pruned:
            run = h.ckpt(root, "restore", last, store=store)
            assert run.code == h.OK, run
            assert h.tree_state(root) == expected[last]
    h.tally("concurrency: shared store", **counts, seconds=SECONDS, passed=1)


def _lock_holder_pid(store: str, root: str) -> int | None:
    """The pid recorded in the root's lock file (ARCHITECTURE.md: roots/<key>/lock)."""
    try:
        with open(os.path.join(h.root_dir(store, root), "lock"), "rb") as stream:
            return int(json.loads(stream.read() or b"{}").get("pid", 0)) or None
    except (FileNotFoundError, ValueError):
        return None


def _two_states(base: str) -> tuple[str, str, str, dict[str, dict[bytes, tuple[object, ...]]]]:
    root = os.path.join(base, "ws")
    os.mkdir(root)
    rng = random.Random(h.seed_for("two-restores"))
    h.build_tree(root, rng, files=1500)
    assert h.ckpt_in(root, "init").code == h.OK
    a = h.ckpt_in(root, "create").out.strip()
    model_a = h.tree_state(root)
    h.mutate(root, rng, changes=1500, max_size=12000)
    b = h.ckpt_in(root, "create").out.strip()
    return root, a, b, {a: model_a, b: h.tree_state(root)}


# A restore that holds its root lock for a while: its progress callback sleeps on each tick
# of the apply phase (a slow disk). argv: root, checkpoint id.
SLOW_RESTORER = """
import sys, time
from ckpt.checkpoints.service import Checkpoints
with Checkpoints.open(sys.argv[1]) as cp:
    cp.restore(sys.argv[2], progress=lambda stage, done, total:
               time.sleep(0.4 if stage == "restore" and done <= 768 else 0))
"""


def _start_holding(root: str, store: str, checkpoint_id: str) -> subprocess.Popen[bytes]:
    """Start a (slow) restore of `checkpoint_id`; return once it holds the root lock."""
    first = subprocess.Popen([sys.executable, "-c", SLOW_RESTORER, root, checkpoint_id],
                             env=h.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    give_up = time.monotonic() + 30
    while _lock_holder_pid(store, root) != first.pid:
        assert first.poll() is None, "the first restore ended before it was seen holding"
        assert time.monotonic() < give_up
        time.sleep(0.005)
    return first


def test_second_restore_of_a_busy_root_fails_with_exit_4_naming_the_holder(base: str) -> None:
    root, a, b, models = _two_states(base)
    store = os.path.join(root, ".ckpt")
    h.set_config(root, "lock_timeout", "0.5")
    current, busy = b, 0
    for _ in range(RESTORE_ROUNDS):
        target, other = (a, b) if current == b else (b, a)
        first = _start_holding(root, store, target)
        second = h.ckpt(root, "restore", other)
        _, err = first.communicate(timeout=120)
        assert first.returncode == h.OK, err
        assert second.code == h.BUSY, second
        assert f"locked by pid {first.pid}" in second.err and "(restore)" in second.err, second
        assert h.tree_state(root) == models[target], "the refused restore wrote something"
        busy += 1
        current = target
    h.tally("concurrency: same-root restores", refused_busy=busy, passed=busy)


def test_second_restore_of_a_busy_root_waits_and_never_interleaves(base: str) -> None:
    root, a, b, models = _two_states(base)
    store = os.path.join(root, ".ckpt")
    h.set_config(root, "lock_timeout", "120")
    current, waited = b, 0
    for _ in range(RESTORE_ROUNDS):
        target, other = (a, b) if current == b else (b, a)
        first = _start_holding(root, store, target)
        second = h.ckpt(root, "restore", other, "--json")
        first.communicate(timeout=120)
        assert first.returncode == h.OK and second.code == h.OK, second
        assert h.tree_state(root) == models[other]
        with Checkpoints.open(root) as cp:
            saved = cp.get(second.json()["pre_restore"])
            # the second restore saw the first one's result exactly, not a mix
            assert h.checkpoint_state(cp, saved.id) == models[target]
        waited += 1
        current = other
    h.tally("concurrency: same-root restores", waited=waited, passed=waited)
    h.fsck_clean(root)


@pytest.mark.parametrize("command", ["create", "gc"])
def test_a_killed_lock_holder_never_blocks_the_next_command(base: str, command: str) -> None:
    """SIGKILL the holder of the root lock (create) or of the store's exclusive gc lock: the
    next command runs at once, and a waiting one is not told a dead pid holds it."""
    root = os.path.join(base, "ws")
    os.mkdir(root)
    rng = random.Random(h.seed_for("killed-holder"))
    h.build_tree(root, rng, files=2000)
    assert h.ckpt_in(root, "init").code == h.OK
    h.set_config(root, "lock_timeout", "2")
    if command == "gc":  # give gc something to do: a checkpoint's worth of garbage
        h.set_config(root, "gc_grace_seconds", "0")
        assert h.ckpt_in(root, "create").code == h.OK
        h.mutate(root, rng, changes=1500)
        with Checkpoints.open(root) as cp:
            cp.create()
            cp.prune(keep_latest=1, collect=False)
    lock = (os.path.join(h.root_dir(os.path.join(root, ".ckpt"), root), "lock")
            if command == "create" else os.path.join(root, ".ckpt", "gc.lock"))
    child = h.start(root, command)
    give_up = time.monotonic() + 30
    while True:
        try:
            with open(lock, "rb") as stream:
                if f'"pid": {child.pid}'.encode() in stream.read():
                    break
        except FileNotFoundError:
            pass
        if child.poll() is not None or time.monotonic() > give_up:
            pytest.skip(f"{command} finished before it was seen holding its lock")
        time.sleep(0.002)
    child.kill()
    child.communicate()
    started = time.monotonic()
    run = h.ckpt(root, "create")
    assert run.code == h.OK, run
    assert time.monotonic() - started < 10
    h.tally("kill -9 lock holder", injected=1, passed=1)
