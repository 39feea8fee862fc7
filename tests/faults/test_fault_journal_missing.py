"""A killed restore whose journal names a tree the store no longer has (issue 28.12).

Such a restore can never be completed, and every write call of its root tried to: `recover`,
`create`, `diff` and `restore` all exited 5, while `fsck` said ok. Now fsck names the journal
and the missing tree, every jammed command names the way out, and `ckpt recover --abandon`
clears the journal after saying what the restore had done (and that what it had not done is
unknown), leaving the files as they are; the pre-restore checkpoint then undoes what the
restore had applied. Real `ckpt` processes, a real kill -9 mid-apply.
"""

from __future__ import annotations

import glob
import os
import random

import fault_helpers as h  # tests/ dirs are on pytest's `pythonpath`

from ckpt.objstore import ObjectStore, parse_oid

FILES = 800


def _killed_mid_apply(base: str, name: str, *, reason: str | None = None
                      ) -> tuple[str, str, str, h.Model, h.Model, h.Model]:
    """A root whose restore to its first checkpoint was killed mid-apply: (root, store,
    target id, its state, the state before the restore, the state the kill left)."""
    rng = random.Random(h.seed_for(name))
    root = os.path.join(base, "ws")
    store = os.path.join(root, ".ckpt")
    os.mkdir(root)
    for index in range(FILES):
        h.write_file(os.path.join(root, f"d{index % 20:02}", f"f{index:04}.txt"),
                     rng.randbytes(6 << 10))
    assert h.ckpt(root, "init").code == h.OK
    first = h.ckpt(root, "create", *(["--reason", reason] if reason else [])).out.strip()
    target = h.tree_state(root)
    for index in range(FILES):
        h.write_file(os.path.join(root, f"n{index % 20:02}", f"g{index:04}.txt"),
                     rng.randbytes(6 << 10))
    second = h.ckpt(root, "create").out.strip()
    current = h.tree_state(root)
    h.kill_restore_mid_apply(root, store, first, second, target, current, rng)
    h.tally("kill restore, journal", injected=1)
    return root, store, first, target, current, h.tree_state(root)


def _delete_object(store: str, tree: str) -> None:
    objects = ObjectStore.open(store)
    try:
        objects.backend.delete(parse_oid(tree))
    finally:
        objects.close()
    objects = ObjectStore.open(store)
    try:
        assert not objects.has(parse_oid(tree))
    finally:
        objects.close()


def test_a_journal_naming_a_missing_tree_is_named_by_fsck_and_abandoned(base: str) -> None:
    root, store, first, _target, before, half = _killed_mid_apply(
        base, "journal-missing-tree", reason="target")
    tree = h.ckpt(root, "show", first, "--json").json()["tree"]
    # The target is pruned meanwhile (gc keeps a journaled tree), then its tree is lost: no
    # record names it, so only the journal does.
    assert h.ckpt(root, "prune", "--reason", "target").code == h.OK
    _delete_object(store, tree)
    h.tally("journal names a missing tree", injected=1)

    fsck = h.ckpt(root, "fsck", "--json")
    assert fsck.code == h.CORRUPT, fsck
    found = fsck.json()["damaged_files"]
    assert len(found) == 1 and found[0]["path"].endswith("catalog.db"), found
    assert tree in found[0]["problem"] and "recover --abandon" in found[0]["problem"]
    plain = h.ckpt(root, "fsck")
    assert plain.code == h.CORRUPT and tree in plain.out + plain.err

    other = h.ckpt_in(root, "latest").out.strip()  # the pre-restore checkpoint
    for args in (["recover"], ["create"], ["diff", other], ["restore", "--no-save", other]):
        run = h.ckpt_in(root, *args)
        assert run.code == h.CORRUPT, (args, run)
        assert tree in run.err and "recover --abandon" in run.err, (args, run)
    assert h.tree_state(root) == half

    abandoned = h.ckpt(root, "recover", "--abandon", "--json")
    assert abandoned.code == h.OK, abandoned
    report = abandoned.json()["abandoned"]
    assert (report["checkpoint"], report["tree"]) == (first, tree)
    assert report["problem"] is not None and tree in report["problem"]
    assert report["not_applied"] is None  # the tree is gone: what was left to do is unknown
    applied = {c["path"]: c["change"] for c in report["applied"]}
    assert applied and set(applied.values()) <= {"D"}  # the restore was deleting new files
    assert h.tree_state(root) == half, "abandoning changed the files"
    assert not h.journals(store)
    assert not glob.glob(os.path.join(store, "roots", "*", "staging-*"))

    # The root works again, fsck is clean, and the pre-restore checkpoint undoes the part.
    h.fsck_clean(root)
    assert h.ckpt_in(root, "recover").out.strip() == "nothing to recover"
    assert h.ckpt_in(root, "restore", report["pre_restore"]).code == h.OK
    assert h.tree_state(root) == before
    assert h.ckpt_in(root, "create").code == h.OK
    h.tally("journal names a missing tree", passed=1)


def test_abandoning_a_healthy_journal_says_what_was_and_was_not_done(base: str) -> None:
    root, store, first, target, _before, half = _killed_mid_apply(base, "journal-abandon-healthy")
    run = h.ckpt(root, "recover", "--abandon")
    assert run.code == h.OK, run
    lines = run.out.splitlines()
    assert lines[0].startswith(f"abandoned the restore to {first}; ")
    done = next(i for i, line in enumerate(lines) if line.startswith("done: "))
    not_done = next(i for i, line in enumerate(lines) if line.startswith("not done: "))
    applied, remaining = lines[done + 1:not_done], lines[not_done + 1:]
    assert applied and remaining  # killed mid-apply: some of each
    assert len(applied) + len(remaining) == FILES  # the restore deletes the FILES new files
    assert h.tree_state(root) == half
    assert not h.journals(store)
    assert h.ckpt(root, "recover", "--abandon").out.strip() == "nothing to recover"
    # Nothing jams: restoring the target again completes what was abandoned.
    assert h.ckpt_in(root, "restore", "--no-save", first).code == h.OK
    assert h.tree_state(root) == target
    h.fsck_clean(root)
    h.tally("journal abandoned", injected=1, passed=1)
