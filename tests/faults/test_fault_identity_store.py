"""The store against its own workspace, with real `ckpt` processes (issue 28, items 10-11):

- a store reached through a symlink (`.ckpt` itself a symlink to a store inside the root, or
  `--store` naming a path through a symlink into the root) is known by its real path: never
  captured, and a restore (with its pre-restore save) never rewrites or deletes store files;
- `--root /`, a store that is the root and a root inside a store are refused (exit 1) before
  anything is written;
- a checkpoint of another root is refused (exit 1, the workspace untouched) unless
  `--from-other-root`, and `--discard-later` never drops the other root's timeline;
- a moved workspace (`mv`) keeps its history, and copies sharing a store keep theirs apart.
"""

from __future__ import annotations

import os
import random
import shutil

import fault_helpers as h  # tests/faults is on pytest's `pythonpath`
import pytest

FILES = h.scale(60, 600)


def _tree(base: str, name: str, seed: str) -> str:
    root = os.path.join(base, name)
    os.mkdir(root)
    h.build_tree(root, random.Random(h.seed_for(seed)), files=FILES, dirs=6)
    return root


def _store_files(store: str) -> dict[str, bytes]:
    """Every regular file of the store but the ones a command rewrites (lock, cache, WAL)."""
    found = {}
    for top, _, names in os.walk(store):
        for name in names:
            path = os.path.join(top, name)
            if name.startswith(("catalog.db", "statcache", "lock", "gc.lock", ".tmp")):
                continue
            with open(path, "rb") as stream:
                found[os.path.relpath(path, store)] = stream.read()
    return found


@pytest.mark.parametrize("how", ["dot-ckpt-symlink", "store-through-symlink"])
def test_store_reached_through_a_symlink_is_never_captured(tmp_path: object, how: str) -> None:
    base = str(tmp_path)
    root = _tree(base, "ws", how)
    store = os.path.join(root, "var", "st")
    if how == "dot-ckpt-symlink":
        assert h.ckpt(root, "init", store=store).code == h.OK
        shutil.rmtree(os.path.join(root, ".ckpt"))  # the link init wrote: a symlink instead
        os.symlink("var/st", os.path.join(root, ".ckpt"))
        named = None
    else:
        os.symlink(os.path.join(root, "var"), os.path.join(base, "via"))
        named = os.path.join(base, "via", "st")
        assert h.ckpt(root, "init", store=named).code == h.OK
    first = h.ckpt(root, "create", store=named)
    assert first.code == h.OK, first
    files = h.ckpt(root, "show", first.out.strip(), "--json", store=named)
    assert files.code == h.OK, files
    assert "var/st" not in files.out and ".ckpt/" not in files.out
    for sub in ("d00", "d01"):  # the agent's edits (h.mutate on the root would edit the store)
        h.mutate(os.path.join(root, sub), random.Random(h.seed_for(how + sub)), changes=15)
    before = _store_files(store)
    done = h.ckpt(root, "restore", first.out.strip(), store=named)
    assert done.code == h.OK, done
    after = _store_files(store)
    assert {k: v for k, v in after.items() if k in before} == before, "store files rewritten"
    assert os.path.islink(os.path.join(root, ".ckpt")) == (how == "dot-ckpt-symlink")
    h.fsck_clean(root, named)
    h.tally("identity symlinked store", injected=1, passed=1)


def test_layouts_that_capture_the_store_are_refused(tmp_path: object) -> None:
    base = str(tmp_path)
    root = _tree(base, "ws", "refusals")
    for args, store, words in (  # a store in the temp dir: never a write into / (even unfixed)
            (["--root", "/", "init"], os.path.join(base, "st"), "file system root"),
            (["init"], root, "the store is the root"),
    ):
        run = h.ckpt(root, *args, store=store)
        assert run.code == h.USER_ERROR and words in run.err, run
        assert not os.path.exists(os.path.join(root, ".ckpt")), "refused, yet written"
    assert not os.path.lexists("/.ckpt")
    assert h.ckpt(root, "init").code == h.OK
    for inner in (".ckpt", ".ckpt/objects", ".ckpt/roots"):
        run = h.ckpt(os.path.join(root, inner), "create")
        assert run.code == h.USER_ERROR and "refusing root" in run.err, run
    h.fsck_clean(root)
    h.tally("identity refused layout", injected=5, passed=5)


def test_checkpoint_of_another_root_is_refused_unless_asked(tmp_path: object) -> None:
    base = str(tmp_path)
    store = os.path.join(base, "store")
    a, b = _tree(base, "a", "root-a"), _tree(base, "b", "root-b")
    assert h.ckpt(a, "init", store=store).code == h.OK
    assert h.ckpt(b, "init").code == h.OK  # the link .ckpt names the shared store for b
    assert h.ckpt(b, "--store", store, "init").code == h.OK
    of_a = h.ckpt(a, "create").out.strip()
    later_a = h.ckpt(a, "create", "--label", "later").out.strip()
    state_b = h.tree_state(b)
    refused = h.ckpt(b, "restore", of_a, store=store)
    assert refused.code == h.USER_ERROR and "--from-other-root" in refused.err, refused
    assert h.tree_state(b) == state_b, "a refused restore touched the workspace"
    done = h.ckpt(b, "restore", of_a, "--from-other-root", "--discard-later", "--json",
                  store=store)
    assert done.code == h.OK, done
    assert done.json()["discarded"] == []
    assert h.tree_state(b) == h.tree_state(a)
    listed_a = h.ckpt(a, "list", "--json", store=store).json()
    assert [r["id"] for r in listed_a] == [of_a, later_a], "a's timeline was touched"
    h.fsck_clean(a, store)
    h.tally("identity foreign restore", injected=2, passed=2)


def test_moved_and_copied_workspaces_keep_their_own_history(tmp_path: object) -> None:
    base = str(tmp_path)
    store = os.path.join(base, "store")
    w1 = _tree(base, "w1", "moved")
    assert h.ckpt(w1, "init", store=store).code == h.OK
    first = h.ckpt(w1, "create").out.strip()
    w2 = os.path.join(base, "w2")
    os.rename(w1, w2)
    listed = h.ckpt(w2, "list", "--json")
    assert listed.code == h.OK and [r["id"] for r in listed.json()] == [first], listed
    assert "workspace moved from" in listed.err
    w3 = os.path.join(base, "w3")
    shutil.copytree(w2, w3, symlinks=True)
    copy = h.ckpt(w3, "list", "--json")
    assert copy.code == h.OK and copy.json() == [] and "is a copy of" in copy.err, copy
    assert [r["id"] for r in h.ckpt(w2, "list", "--json").json()] == [first]
    latest = h.ckpt(w2, "latest")
    assert (latest.code, latest.out.strip()) == (h.OK, first)
    h.fsck_clean(w2)
    h.tally("identity moved workspace", injected=2, passed=2)


@pytest.mark.parametrize("plant", ["symlink", "link-directory"])
def test_planted_marker_never_makes_a_store_elsewhere(tmp_path: object, plant: str) -> None:
    """An agent plants `.ckpt` pointing at a directory of the user's (a symlink, or a link
    directory naming it): no command writes there, and none treats it as a store."""
    base = str(tmp_path)
    root = _tree(base, "ws", "plant-" + plant)
    victim = os.path.join(base, "home")
    os.mkdir(victim)
    h.write_file(os.path.join(victim, ".bashrc"), b"echo hi\n")
    if plant == "symlink":
        os.symlink(victim, os.path.join(root, ".ckpt"))
    else:
        os.mkdir(os.path.join(root, ".ckpt"))
        h.write_file(os.path.join(root, ".ckpt", "workspace"),
                     b"ckpt-workspace 1\nid 0123456789abcdef\nstore " + os.fsencode(victim) + b"\n")
    for args in (["init"], ["create"], ["list"], ["gc"]):
        run = h.ckpt(root, *args)
        assert run.code == h.USER_ERROR, run
    assert sorted(os.listdir(victim)) == [".bashrc"], "a command wrote into the victim"
    h.tally("identity planted marker", injected=4, passed=4)
