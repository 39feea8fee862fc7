"""Two machines push the same session to one remote at the same moment (two real `ckpt push`
processes started together, several rounds), and a third, fresh machine reads the remote.

Promise: both pushes succeed (a lost conditional write of the session's head is retried, never
surfaced), and both machines' checkpoints are on the remote: each under `records/` once, all of
them listed by `list --remote --session S` in time order, pulled by `pull --session S`, and each
restorable exactly on the fresh machine. `fsck --remote --full` is clean.
Rounds: 3 by default, 10 with CKPT_SOAK=1 (each round: 2 new checkpoints per machine).
The same file: `gc --remote` from one machine while another pushes (see its test).
"""

from __future__ import annotations

import random
import subprocess
import sys

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import fault_remote_helpers as r
from seaweed import Bucket, s3_bucket, s3_env, seaweed

__all__ = ["s3_bucket", "s3_env", "seaweed"]  # the fixtures these tests use

ROUNDS = h.scale(3, 10)
SESSION = "shared-session"


def test_two_pushers_of_one_session_keep_both_histories(base: str, s3_bucket: Bucket) -> None:
    rng = random.Random(h.seed_for("remote-two-pushers"))
    a = r.machine(base, "a", s3_bucket, session=SESSION)
    b = r.machine(base, "b", s3_bucket, session=SESSION)
    for m in (a, b):
        h.build_tree(m.root, rng, files=60)
    for round_ in range(ROUNDS):
        for m in (a, b):
            for turn in range(2):
                r.grow(m, rng, changes=20)
                m.create(f"round {round_} turn {turn}")
        children = [m.popen("push", r.REMOTE, "--json") for m in (a, b)]
        runs = [r.finish(child) for child in children]
        for m, run in zip((a, b), runs):
            assert run.code == h.OK, run
            report = run.json()
            assert set(report["pushed"]) | set(report["present"]) == set(m.models), report
        h.tally("remote: two pushers of one session", injected=1)

    both = {**a.models, **b.models}
    assert len(both) == len(a.models) + len(b.models)  # ids never collide across machines
    records = r.remote_record_ids(s3_bucket)
    assert sorted(records) == sorted(set(records)) and set(records) == set(both), records
    fresh = r.machine(base, "fresh", s3_bucket, session=SESSION)
    rows = fresh.ok("list", "--remote", r.REMOTE, "--json").json()
    listed = [row["id"] for row in rows]
    assert sorted(listed) == sorted(both), f"listed {listed}, pushed {sorted(both)}"
    times = [row["created_at"] for row in rows]
    assert times in (sorted(times), sorted(times, reverse=True)), "listed in time order"
    pulled = fresh.ok("pull", r.REMOTE, "--session", SESSION, "--json").json()
    assert set(pulled["pulled"]) == set(both), pulled
    r.check_remote(both, a, s3_bucket, base, "fresh2")
    h.tally("remote: two pushers of one session", passed=1)



# A push through the public API that stops at its first progress tick (its packs are up and
# indexed, its records not yet, its shared lock held) until the test writes a line to stdin.
# argv: root, store, remote.
_PAUSED_PUSH = """
import sys
from ckpt.checkpoints import Checkpoints
paused = []
def tick(stage, done, total):
    if not paused:
        paused.append(1)
        print("paused", flush=True)
        sys.stdin.readline()
with Checkpoints.open(sys.argv[1], store=sys.argv[2]) as cp:
    report = cp.push(sys.argv[3], progress=tick)
print("pushed", len(report.pushed), flush=True)
"""


def test_gc_while_another_machine_pushes_is_refused_and_removes_nothing(
        base: str, s3_bucket: Bucket) -> None:
    """Machine A collects the remote (grace 0) while machine B's push is held between its
    packs (indexed) and its records, the moment when those packs look unreferenced: the gc is
    refused with exit 4 and one line naming B's lock; B's push then completes, a gc after it
    removes nothing either machine needs, and every checkpoint restores exactly."""
    rng = random.Random(h.seed_for("remote-gc-while-pushing"))
    a = r.machine(base, "a", s3_bucket)
    b = r.machine(base, "b", s3_bucket)
    a.ok("config", "set", "gc_grace_seconds", "0")
    h.build_tree(a.root, rng, files=60)
    a.create("a's")
    a.ok("push", r.REMOTE)
    h.build_tree(b.root, rng, files=100)
    for round_ in range(ROUNDS):
        r.grow(b, rng, changes=40)
        b.create(f"b's round {round_}")
        child = subprocess.Popen([sys.executable, "-c", _PAUSED_PUSH, b.root, b.store, r.REMOTE],
                                 env=h.env(), cwd=b.root, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline() == b"paused\n"
            gc = a.run("gc", "--remote", r.REMOTE)
            assert gc.code == h.BUSY, gc
            assert len(gc.err.strip().splitlines()) == 1 and "locked" in gc.err, gc
            child.stdin.write(b"go\n")
            child.stdin.flush()
        finally:
            done = r.finish(child)
        assert done.code == h.OK and done.out.endswith("pushed 1\n"), done
        h.tally("remote: gc while another machine pushes", injected=1, refused=1)
        a.ok("gc", "--remote", r.REMOTE)  # after the push: nothing it needs goes either
    r.check_remote({**a.models, **b.models}, a, s3_bucket, base, "fresh")
    h.tally("remote: gc while another machine pushes", passed=1)
