"""Manifest diffs: checkpoint vs checkpoint and checkpoint vs working tree (A/M/D/T on leaves),
and the pure `diff_trees` that skips equal subtrees by id without loading them.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt.checkpoints.diff.trees import diff_trees
from ckpt.checkpoints.service import Checkpoints
from ckpt.objstore import EntryKind, ObjectId, ObjectStore, StoreOptions, Tree, TreeEntry
from ckpt.objstore.memory import MemoryBackend


def _before(work: Any) -> None:
    work.write("keep.txt", b"same")
    work.write("mod.txt", b"old content")
    work.write("del.txt", b"going away")
    work.write("file-to-link", b"a file")
    work.symlink("link-to-file", b"keep.txt")
    work.write("exec.sh", b"#!/bin/sh\n", mode=0o644)
    work.write("unexec.sh", b"#!/bin/sh\n", mode=0o755)
    work.symlink("retarget", b"keep.txt")
    work.write("dir-to-file/x", b"x")
    work.write("dir-to-file/y/z", b"z")
    work.write("file-to-dir", b"was a file")
    work.write("big/unchanged/deep/file", b"deep")
    work.mkdir("empty")


def _after(work: Any) -> None:
    work.write("mod.txt", b"new content")
    work.remove("del.txt")
    work.write("add.txt", b"new file")
    work.remove("file-to-link")
    work.symlink("file-to-link", b"keep.txt")
    work.remove("link-to-file")
    work.write("link-to-file", b"now a file")
    os.chmod(work.path("exec.sh"), 0o755)
    os.chmod(work.path("unexec.sh"), 0o644)
    work.remove("retarget")
    work.symlink("retarget", b"mod.txt")
    work.remove("dir-to-file")
    work.write("dir-to-file", b"now a file")
    work.remove("file-to-dir")
    work.write("file-to-dir/inner/a", b"a")
    work.write("file-to-dir/b", b"b")
    work.mkdir("another-empty")  # directories alone are not leaves: no change reported


EXPECTED = [
    (b"add.txt", "A"),
    (b"del.txt", "D"),
    (b"dir-to-file/x", "D"),
    (b"dir-to-file/y/z", "D"),
    (b"dir-to-file", "A"),
    (b"exec.sh", "M"),
    (b"file-to-dir", "D"),
    (b"file-to-dir/b", "A"),
    (b"file-to-dir/inner/a", "A"),
    (b"file-to-link", "T"),
    (b"link-to-file", "T"),
    (b"mod.txt", "M"),
    (b"retarget", "M"),
    (b"unexec.sh", "M"),
]


def test_diff_between_checkpoints_reports_leaf_changes(cp: Checkpoints, work: Any) -> None:
    _before(work)
    before = cp.create()
    _after(work)
    after = cp.create()
    assert [(c.path, c.change) for c in cp.diff(before.id, after.id)] == EXPECTED


def test_diff_against_the_working_tree_reports_the_same_changes(cp: Checkpoints,
                                                                 work: Any) -> None:
    _before(work)
    before = cp.create()
    _after(work)
    assert [(c.path, c.change) for c in cp.diff(before.id)] == EXPECTED
    assert len(cp.history()) == 1  # a diff takes no checkpoint


def test_diff_in_reverse_swaps_added_and_deleted(cp: Checkpoints, work: Any) -> None:
    _before(work)
    before = cp.create()
    _after(work)
    after = cp.create()
    swap = {"A": "D", "D": "A", "M": "M", "T": "T"}
    assert sorted((c.path, c.change) for c in cp.diff(after.id, before.id)) == sorted(
        (path, swap[change]) for path, change in EXPECTED)


def test_diff_changes_carry_the_old_and_new_entries(cp: Checkpoints, work: Any) -> None:
    _before(work)
    before = cp.create()
    _after(work)
    changes = {c.path: c for c in cp.diff(before.id, cp.create().id)}
    assert changes[b"exec.sh"].old.kind is EntryKind.FILE  # type: ignore[union-attr]
    assert changes[b"exec.sh"].new.kind is EntryKind.EXECUTABLE  # type: ignore[union-attr]
    assert changes[b"exec.sh"].old.oid == changes[b"exec.sh"].new.oid  # type: ignore[union-attr]
    assert changes[b"retarget"].new.target == b"mod.txt"  # type: ignore[union-attr]
    assert changes[b"add.txt"].old is None and changes[b"del.txt"].new is None


def test_unchanged_states_diff_to_nothing(cp: Checkpoints, work: Any) -> None:
    _before(work)
    first = cp.create()
    second = cp.create()
    assert cp.diff(first.id, second.id) == []
    assert cp.diff(first.id, first.id) == []
    assert cp.diff(first.id) == []


def _big_tree(work: Any, fan: int = 4, levels: int = 3, per_dir: int = 5) -> int:
    """fan**levels leaf directories of `per_dir` files; returns the number of directories."""
    prefixes = [b""]
    directories = 1
    for _ in range(levels):
        prefixes = [p + b"d%d/" % i for p in prefixes for i in range(fan)]
        directories += len(prefixes)
    for prefix in prefixes:
        for f in range(per_dir):
            work.write(prefix + b"f%d" % f, prefix + b"%d" % f)
    return directories


def test_diff_loads_only_the_trees_on_the_changed_path(cp: Checkpoints, work: Any,
                                                       count_calls: Any) -> None:
    directories = _big_tree(work)  # 85 directories, depth 4 (root + 3 levels)
    before = cp.create()
    work.write(b"d2/d1/d3/f4", b"changed")
    after = cp.create()
    loads = count_calls(cp.objects, "get_tree")
    changes = cp.diff(before.id, after.id)
    assert [(c.path, c.change) for c in changes] == [(b"d2/d1/d3/f4", "M")]
    assert loads.count == 2 * 4  # both sides of root, d2, d2/d1, d2/d1/d3: no other tree
    assert directories == 85

    loads.reset()
    assert [(c.path, c.change) for c in cp.diff(before.id)] == [(b"d2/d1/d3/f4", "M")]
    assert loads.count <= 2 * 4


def test_equal_roots_are_not_even_loaded() -> None:
    def refuse(oid: ObjectId) -> Tree:
        raise AssertionError("an equal subtree was loaded")

    oid = ObjectId(bytes(32))
    assert diff_trees(refuse, oid, oid) == []


# -- property: diff_trees agrees with a diff of the flattened manifests ----------------------

_names = st.sampled_from([b"a", b"b", b"c", b"d"])
_leaves = st.one_of(
    st.tuples(st.just("file"), st.sampled_from([b"x", b"y"]), st.booleans()),
    st.tuples(st.just("link"), st.sampled_from([b"a", b"../b"])),
    st.just(("tomb",)),
)
_dirs = st.recursive(_leaves, lambda inner: st.dictionaries(_names, inner, max_size=3),
                     max_leaves=12)
_roots = st.dictionaries(_names, _dirs, max_size=4)


def _store(store: ObjectStore, spec: dict[bytes, Any]) -> tuple[ObjectId, dict[bytes, Any]]:
    """Store `spec` as trees; return the root id and its leaves (path -> comparable value)."""
    entries = []
    leaves: dict[bytes, Any] = {}
    for name, node in spec.items():
        if isinstance(node, dict):
            oid, below = _store(store, node)
            entries.append(TreeEntry(name, EntryKind.TREE, oid))
            leaves.update({name + b"/" + path: value for path, value in below.items()})
        elif node[0] == "file":
            _, data, executable = node
            kind = EntryKind.EXECUTABLE if executable else EntryKind.FILE
            entries.append(TreeEntry(name, kind, store.put_bytes(data), None, len(data)))
            leaves[name] = (kind, data)
        elif node[0] == "link":
            entries.append(TreeEntry(name, EntryKind.SYMLINK, None, node[1]))
            leaves[name] = (EntryKind.SYMLINK, node[1])
        else:
            entries.append(TreeEntry(name, EntryKind.TOMBSTONE))
    return store.put_tree(Tree.build(entries)), leaves


def _model_diff(old: dict[bytes, Any], new: dict[bytes, Any]) -> set[tuple[bytes, str]]:
    out = set()
    for path in old.keys() | new.keys():
        if path not in new:
            out.add((path, "D"))
        elif path not in old:
            out.add((path, "A"))
        elif (old[path][0] is EntryKind.SYMLINK) != (new[path][0] is EntryKind.SYMLINK):
            out.add((path, "T"))
        elif old[path] != new[path]:
            out.add((path, "M"))
    return out


@settings(max_examples=150, deadline=None)
@given(old=_roots, new=_roots)
def test_diff_trees_matches_a_diff_of_the_flat_manifests(old: dict[bytes, Any],
                                                         new: dict[bytes, Any]) -> None:
    store = ObjectStore(MemoryBackend(), StoreOptions())
    old_root, old_leaves = _store(store, old)
    new_root, new_leaves = _store(store, new)
    changes = diff_trees(store.get_tree, old_root, new_root)
    pairs = [(c.path, c.change) for c in changes]
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == _model_diff(old_leaves, new_leaves)
    for change in changes:
        assert (change.old is None) == (change.change == "A")
        assert (change.new is None) == (change.change == "D")
