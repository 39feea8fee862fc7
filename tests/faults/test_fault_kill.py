"""kill -9 at seeded random moments of `ckpt create`, `restore`, `prune` and `gc`.

Each operation runs as a real `ckpt` process on a tree of a few thousand files and is killed
with SIGKILL after a seeded delay spread over the operation's measured duration (after the
interpreter's start, so the kills land inside the operation). After every kill:
- `ckpt fsck --full` exits 0;
- every checkpoint whose id a child printed is still listed, and its files are exactly the
  tree it was taken of (read back through verified object reads);
- a killed restore is completed by the next command (`recover`, `create` or `diff`) and the
  tree is exactly the target; a restore killed before it journaled left the tree untouched;
- the next command is not blocked by a lock the dead child held.
Points per operation: 5 by default, 50 with CKPT_SOAK=1.
"""

from __future__ import annotations

import os
import random
import re
import statistics

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`
import pytest

from ckpt.checkpoints.service import Checkpoints

POINTS = h.scale(5, 50)
# A kill drawn after the operation ended does not land; the next moment is drawn again (from
# durations measured so far), up to this many runs, so that a loaded machine does not turn
# into too few kills.
ATTEMPTS = 3 * POINTS
FILES = 2500


@pytest.fixture
def workspace(base: str) -> tuple[str, random.Random]:
    root = os.path.join(base, "ws")
    os.mkdir(root)
    rng = random.Random(h.seed_for("kill-workspace"))
    h.build_tree(root, rng, files=FILES)
    assert h.ckpt(root, "init").code == h.OK
    assert h.ckpt(root, "create", "-m", "base").code == h.OK
    h.set_config(root, "lock_timeout", "5")  # a lock left blocking fails fast with exit 4
    h.set_config(root, "gc_grace_seconds", "0")  # gc races everything it can
    return root, rng


class Moments:
    """Seeded kill moments after the interpreter's start, spread over the rest of the
    operation. The duration estimate is the median of the calibration run and of every run
    that finished before its kill (the VM's load varies), so kills keep landing inside."""

    def __init__(self, rng: random.Random, startup: float, duration: float) -> None:
        self.rng = rng
        self.lead = 0.8 * startup
        self.samples = [duration]

    def next(self) -> float:
        duration = statistics.median(self.samples)
        return self.lead + self.rng.random() * max(duration - self.lead, 0.05)

    def missed(self, run: h.Run) -> None:
        if not run.killed:
            self.samples.append(run.elapsed)


def _created_id(run: h.Run) -> str | None:
    text = run.out.strip()
    return text or None


def test_create_killed_at_random_moments_loses_nothing(workspace: tuple[str, random.Random]) -> None:
    root, rng = workspace
    ledger = h.Ledger(root)
    startup = h.startup_seconds(root)
    h.mutate(root, rng, changes=800, max_size=12000)
    model = h.tree_state(root)
    calibration = h.ckpt(root, "create")
    assert calibration.code == h.OK, calibration
    ledger.report(calibration.out.strip(), model)
    moments = Moments(rng, startup, calibration.elapsed)
    landed = 0
    for point in range(ATTEMPTS):
        h.mutate(root, rng, changes=800, max_size=12000)
        if point % 3 == 1:  # a file past the streaming threshold: the chunked put path
            h.write_file(os.path.join(root, "huge.bin"), rng.randbytes(9 << 20))
        model = h.tree_state(root)
        run = h.kill_after(root, ["create"], moments.next())
        moments.missed(run)
        printed = _created_id(run)
        if printed:
            ledger.report(printed, model)
        if run.killed:
            landed += 1
        else:
            assert run.code == h.OK, run
        assert h.tree_state(root) == model, "create changed the workspace"
        ledger.check(f"create point {point} (killed={run.killed})")
        after = h.ckpt_in(root, "create")  # the next command: not blocked, completes
        assert after.code == h.OK, after
        ledger.report(after.out.strip(), model)
        if landed >= POINTS:
            break
    h.tally("kill -9 create", injected=landed, points=point + 1, passed=point + 1)
    assert landed >= POINTS // 2, f"only {landed} of {POINTS} kills landed inside create"


def test_restore_killed_at_random_moments_is_completed_or_untouched(
        workspace: tuple[str, random.Random]) -> None:
    root, rng = workspace
    ledger = h.Ledger(root)
    store = os.path.join(root, ".ckpt")
    models: dict[str, dict[bytes, tuple[object, ...]]] = {}
    first = h.ckpt(root, "create", "-m", "state A")
    models[first.out.strip()] = h.tree_state(root)
    h.mutate(root, rng, changes=1500)
    second = h.ckpt(root, "create", "-m", "state B")
    models[second.out.strip()] = h.tree_state(root)
    a, b = first.out.strip(), second.out.strip()
    for checkpoint_id, model in models.items():
        ledger.report(checkpoint_id, model)
    startup = h.startup_seconds(root)
    calibration = h.ckpt(root, "restore", a)
    assert calibration.code == h.OK, calibration
    moments = Moments(rng, startup, calibration.elapsed)
    assert h.tree_state(root) == models[a]
    current = a
    landed = journaled = 0
    followers = ["recover", "create", "diff"]
    for point in range(ATTEMPTS):
        target = b if current == a else a
        before = h.tree_state(root, with_inodes=True)
        run = h.kill_after(root, ["restore", target], moments.next())
        moments.missed(run)
        undo = re.search(r"undo: ckpt restore (\S+)", run.out)
        if undo:
            ledger.report(undo.group(1), models[current])
        pending = bool(h.journals(store))
        finished = False
        if not run.killed:
            assert run.code == h.OK, run
            assert h.tree_state(root) == models[target]
            finished = True
        elif not pending:
            # No journal: killed before it was written (nothing in the workspace touched) or
            # after it was cleared (the restore was complete).
            finished = h.tree_state(root) == models[target]
            if not finished:
                assert h.tree_state(root, with_inodes=True) == before, f"point {point}: touched"
        landed += run.killed
        journaled += run.killed and pending
        follower = followers[point % len(followers)]
        nxt = h.ckpt_in(root, *([follower] if follower != "diff" else ["diff", target]))
        assert nxt.code == h.OK, nxt
        assert not h.journals(store), f"{follower} left the journal behind"
        expected = models[target] if (pending or finished) else models[current]
        actual = h.tree_state(root)
        assert actual == expected, f"point {point} ({follower}): {h.diff_models(expected, actual)}"
        if follower == "create":
            ledger.report(nxt.out.strip(), expected)
        elif follower == "diff":
            assert (nxt.out.strip() == "") == (expected == models[target]), nxt
        assert not [n for n in os.listdir(root) if n.startswith(".ckpt-")], "staging left behind"
        ledger.check(f"restore point {point} (killed={run.killed}, journaled={pending})")
        current = target if expected == models[target] else current
        if landed >= POINTS and journaled:
            break
    h.tally("kill -9 restore", injected=landed, journaled=journaled, points=point + 1,
            passed=point + 1)
    assert landed >= POINTS // 2, f"only {landed} of {POINTS} kills landed inside restore"
    assert journaled >= 1, "no kill landed after the journal was written"


def _make_garbage(root: str, rng: random.Random, ledger: h.Ledger) -> None:
    """Two new checkpoints over changed files: pruning all but the latest frees objects."""
    for _ in range(2):
        h.mutate(root, rng, changes=400)
        model = h.tree_state(root)
        run = h.ckpt_in(root, "create")
        assert run.code == h.OK, run
        ledger.report(run.out.strip(), model)


def test_prune_killed_at_random_moments_keeps_what_it_keeps(
        workspace: tuple[str, random.Random]) -> None:
    root, rng = workspace
    ledger = h.Ledger(root)
    startup = h.startup_seconds(root)
    _make_garbage(root, rng, ledger)
    calibration = h.ckpt(root, "prune", "--keep-latest", "1", "--json")
    assert calibration.code == h.OK, calibration
    ledger.forget(set(calibration.json()["removed"]))
    moments = Moments(rng, startup, calibration.elapsed)
    landed = 0
    for point in range(ATTEMPTS):
        _make_garbage(root, rng, ledger)
        with Checkpoints.open(root) as cp:
            history = [r.id for r in cp.history()]
        victims, kept = set(history[:-1]), history[-1]
        run = h.kill_after(root, ["prune", "--keep-latest", "1", "--json"], moments.next())
        moments.missed(run)
        if not run.killed:
            assert run.code == h.OK, run
        landed += run.killed
        listed = h.listed_ids(root)
        gone = set(ledger.expected) - listed
        assert gone <= victims and kept in listed, f"point {point}: lost {gone - victims}"
        assert gone in (set(), victims & set(ledger.expected)), "a prune was applied in part"
        ledger.forget(gone)
        ledger.check(f"prune point {point} (killed={run.killed})")
        if landed >= POINTS:
            break
    h.tally("kill -9 prune", injected=landed, points=point + 1, passed=point + 1)
    assert landed >= POINTS // 2, f"only {landed} of {POINTS} kills landed inside prune"


def test_gc_killed_at_random_moments_removes_only_garbage(
        workspace: tuple[str, random.Random]) -> None:
    root, rng = workspace
    ledger = h.Ledger(root)
    startup = h.startup_seconds(root)

    def drop_all_but_latest() -> None:
        with Checkpoints.open(root) as cp:
            report = cp.prune(keep_latest=1, collect=False)
        ledger.forget(set(report.removed))

    _make_garbage(root, rng, ledger)
    drop_all_but_latest()
    calibration = h.ckpt(root, "gc", "--json")
    assert calibration.code == h.OK and calibration.json()["objects_removed"] > 0, calibration
    moments = Moments(rng, startup, calibration.elapsed)
    landed = 0
    for point in range(ATTEMPTS):
        _make_garbage(root, rng, ledger)
        drop_all_but_latest()
        run = h.kill_after(root, ["gc"], moments.next())
        moments.missed(run)
        if not run.killed:
            assert run.code == h.OK, run
        landed += run.killed
        ledger.check(f"gc point {point} (killed={run.killed})")
        if landed >= POINTS:
            break
    h.tally("kill -9 gc", injected=landed, points=point + 1, passed=point + 1)
    assert landed >= POINTS // 2, f"only {landed} of {POINTS} kills landed inside gc"
