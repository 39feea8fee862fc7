"""The pure restore planner (checkpoints.restore.plan) on hand-built trees in an in-memory store.

No filesystem: trees are built from literals into `ObjectStore(MemoryBackend())`, and the
loader handed to `plan_restore` counts which trees it is asked for.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt.checkpoints.paths import RelPath
from ckpt.checkpoints.restore.plan import FileWrite, Removal, RestorePlan, plan_restore
from ckpt.objstore import EntryKind, InvalidTree, ObjectId, ObjectStore, Tree, TreeEntry
from ckpt.objstore.memory import MemoryBackend

# A literal tree: bytes = file, ("x", bytes) = executable, ("link", target) = symlink,
# None = tombstone, a mapping = directory.
Spec = bytes | tuple[str, bytes] | None | Mapping[str, "Spec"]

FILE, EXE, LINK, TREE = EntryKind.FILE, EntryKind.EXECUTABLE, EntryKind.SYMLINK, EntryKind.TREE


class Loader:
    """`store.get_tree`, remembering every id it was asked for."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.calls: list[ObjectId] = []

    def __call__(self, oid: ObjectId) -> Tree:
        self.calls.append(oid)
        return self.store.get_tree(oid)


@pytest.fixture
def store() -> ObjectStore:
    return ObjectStore(MemoryBackend())


def entry(store: ObjectStore, name: str, spec: Spec) -> TreeEntry:
    raw = name.encode()
    if spec is None:
        return TreeEntry(raw, EntryKind.TOMBSTONE)
    if isinstance(spec, bytes):
        return TreeEntry(raw, FILE, store.put_bytes(spec), None, len(spec))
    if isinstance(spec, tuple):
        kind, data = spec
        if kind == "x":
            return TreeEntry(raw, EXE, store.put_bytes(data), None, len(data))
        return TreeEntry(raw, LINK, None, data, 0)
    oid = build(store, spec)
    return TreeEntry(raw, TREE, oid, None, store.get_tree(oid).total_size)


def build(store: ObjectStore, spec: Mapping[str, Spec]) -> ObjectId:
    return store.put_tree(Tree.build(entry(store, name, child) for name, child in spec.items()))


def subtree_id(store: ObjectStore, root: ObjectId, path: str) -> ObjectId:
    tree = store.get_tree(root)
    for part in path.split("/"):
        found = tree.find(part.encode())
        assert found is not None and found.oid is not None
        oid = found.oid
        tree = store.get_tree(oid)
    return oid


def paths(items: tuple[FileWrite, ...] | tuple[Removal, ...]) -> list[bytes]:
    return [item.path for item in items]


def big_dir(n: int, tag: str = "") -> dict[str, Spec]:
    return {f"f{i:03}": f"{tag}{i}".encode() for i in range(n)}


# -- equal subtrees ---------------------------------------------------------------------


def test_identical_trees_give_an_empty_plan_loading_no_subtree(store: ObjectStore) -> None:
    root = build(store, {"a": {"b": big_dir(20)}, "c": big_dir(5), "top": b"t"})
    load = Loader(store)
    plan = plan_restore(load, root, root, count_leaves=lambda oid: 99)
    assert plan.is_empty
    assert load.calls == []
    assert plan.unchanged == 99


def test_equal_subtrees_are_skipped_by_id_and_only_the_changed_path_is_loaded(store: ObjectStore) -> None:
    shared = {f"pkg{i}": {"mod": big_dir(10, str(i)), "data": big_dir(5)} for i in range(8)}
    current = build(store, {**shared, "app": {"main.py": b"old", "util.py": b"u"}})
    target = build(store, {**shared, "app": {"main.py": b"new", "util.py": b"u"}})
    load = Loader(store)
    plan = plan_restore(load, current, target, count_leaves=lambda oid: 1000)
    assert paths(plan.writes) == [b"app/main.py"]
    # root (both sides) and app (both sides); none of the eight equal packages.
    assert sorted(load.calls) == sorted([current, target, subtree_id(store, current, "app"),
                                         subtree_id(store, target, "app")])
    assert plan.unchanged == 8 * 1000 + 1  # eight skipped subtrees, plus util.py


def test_unchanged_count_by_default_counts_the_leaves_of_equal_subtrees(store: ObjectStore) -> None:
    shared = {"lib": {"x": big_dir(7), "link": ("link", b"x/f000"), "gone": None}}
    current = build(store, {**shared, "a": b"1"})
    target = build(store, {**shared, "a": b"2"})
    plan = plan_restore(store.get_tree, current, target)
    assert paths(plan.writes) == [b"a"]
    assert plan.unchanged == 8  # seven files and a symlink; a tombstone is no leaf


def test_tracked_scope_skips_an_equal_covered_directory(store: ObjectStore) -> None:
    covered = {"docs": big_dir(30)}
    current = build(store, {"src": {"a.py": b"A"}, **covered})
    target = build(store, {"src": {"a.py": b"old"}, **covered})
    load = Loader(store)
    plan = plan_restore(load, current, target, scope="paths", covered=[RelPath(b"src/a.py"), RelPath(b"docs")],
                        count_leaves=lambda oid: 30)
    assert paths(plan.writes) == [b"src/a.py"]
    assert subtree_id(store, target, "docs") not in load.calls
    assert plan.unchanged == 30


# -- whole-tree scope -------------------------------------------------------------------


def test_whole_tree_plan_orders_type_swaps_before_writes_and_deletes_after(store: ObjectStore) -> None:
    current = build(store, {
        "was_file": b"f", "was_dir": {"inner": b"i", "deep": {"x": b"x"}}, "was_link": ("link", b"t"),
        "extra": {"e1": b"1", "sub": {"e2": b"2"}}, "same": b"s", "mode": b"m", "gone.txt": b"g",
    })
    target = build(store, {
        "was_file": {"now": b"dir"}, "was_dir": b"now a file", "was_link": b"now a file",
        "same": b"s", "mode": ("x", b"m"), "new": {"empty": {}},
    })
    plan = plan_restore(store.get_tree, current, target)
    assert plan.pre_removals == (
        Removal(RelPath(b"was_dir/deep/x"), FILE), Removal(RelPath(b"was_dir/inner"), FILE),
        Removal(RelPath(b"was_file"), FILE),
        Removal(RelPath(b"was_dir/deep"), TREE), Removal(RelPath(b"was_dir"), TREE),
    )
    assert plan.mkdirs == (b"new", b"new/empty", b"was_file")
    assert [(w.path, w.entry.kind, w.replaces) for w in plan.writes] == [
        (b"was_dir", FILE, None), (b"was_file/now", FILE, None), (b"was_link", FILE, LINK),
    ]
    assert [(c.path, c.executable) for c in plan.chmods] == [(b"mode", True)]
    assert plan.removals == (
        Removal(RelPath(b"extra/e1"), FILE), Removal(RelPath(b"extra/sub/e2"), FILE),
        Removal(RelPath(b"gone.txt"), FILE),
        Removal(RelPath(b"extra/sub"), TREE), Removal(RelPath(b"extra"), TREE),
    )
    assert plan.unchanged == 1


def test_exec_bit_change_alone_is_a_chmod_not_a_write(store: ObjectStore) -> None:
    current = build(store, {"run.sh": ("x", b"#!/bin/sh\n"), "lib.py": b"pass\n"})
    target = build(store, {"run.sh": b"#!/bin/sh\n", "lib.py": ("x", b"pass\n")})
    plan = plan_restore(store.get_tree, current, target)
    assert plan.writes == ()
    assert sorted((c.path, c.executable) for c in plan.chmods) == [
        (b"lib.py", True), (b"run.sh", False)]


def test_symlink_target_change_is_a_write_of_the_link(store: ObjectStore) -> None:
    current = build(store, {"l": ("link", b"a")})
    target = build(store, {"l": ("link", b"b")})
    plan = plan_restore(store.get_tree, current, target)
    assert [(w.path, w.entry.target, w.replaces) for w in plan.writes] == [(b"l", b"b", LINK)]


def test_no_current_state_writes_everything(store: ObjectStore) -> None:
    target = build(store, {"a": b"1", "d": {"b": b"2"}})
    plan = plan_restore(store.get_tree, None, target)
    assert plan.mkdirs == (b"d",)
    assert paths(plan.writes) == [b"a", b"d/b"]
    assert plan.bytes_to_write == 2


# -- keep paths (recorded as skipped) ---------------------------------------------------


def test_keep_paths_are_never_removed(store: ObjectStore) -> None:
    current = build(store, {"big.bin": b"now small", "d": {"huge.iso": b"h", "x": b"x"}, "a": b"a"})
    target = build(store, {"d": {}, "a": b"a"})
    keep = [RelPath(b"big.bin"), RelPath(b"d/huge.iso")]
    plan = plan_restore(store.get_tree, current, target, keep=keep)
    assert paths(plan.removals) == [b"d/x"]
    assert not set(paths(plan.pre_removals)) & {b"big.bin", b"d/huge.iso"}


def test_a_directory_holding_a_keep_path_is_not_removed_nor_replaced(store: ObjectStore) -> None:
    current = build(store, {"d": {"huge.iso": b"h", "x": b"x", "sub": {"y": b"y"}}, "e": {"big": b"b"}})
    target = build(store, {"e": b"a file where a dir holds a skipped path"})
    keep = [RelPath(b"d/huge.iso"), RelPath(b"e/big")]
    plan = plan_restore(store.get_tree, current, target, keep=keep)
    removed = paths(plan.removals) + paths(plan.pre_removals)
    assert b"d" not in removed and b"d/huge.iso" not in removed and b"e/big" not in removed
    assert {b"d/x", b"d/sub/y", b"d/sub"} <= set(removed)
    assert paths(plan.writes) == []  # `e` stays a directory: its skipped file is not deleted


# -- tracked scope ----------------------------------------------------------------------


def test_tracked_scope_partial_ancestors_leave_siblings_alone(store: ObjectStore) -> None:
    current = build(store, {"src": {"a.py": b"changed", "sibling.py": b"s", "lib": {"x": b"x"}},
                            "README": b"r"})
    target = build(store, {"src": {"a.py": b"original"}})
    plan = plan_restore(store.get_tree, current, target, scope="paths", covered=[RelPath(b"src/a.py")])
    assert paths(plan.writes) == [b"src/a.py"]
    assert plan.removals == () and plan.pre_removals == () and plan.mkdirs == ()


def test_tracked_directory_is_restored_fully_inside(store: ObjectStore) -> None:
    current = build(store, {"docs": {"new.md": b"n", "keep.md": b"k2"}, "other": b"o"})
    target = build(store, {"docs": {"keep.md": b"k", "gone": {"g.md": b"g"}}})
    plan = plan_restore(store.get_tree, current, target, scope="paths", covered=[RelPath(b"docs")])
    assert plan.mkdirs == (b"docs/gone",)
    assert paths(plan.writes) == [b"docs/gone/g.md", b"docs/keep.md"]
    assert paths(plan.removals) == [b"docs/new.md"]


def test_tracked_tombstone_deletes_the_path_and_absent_parents_are_removed(store: ObjectStore) -> None:
    current = build(store, {"new": {"deep": {"file.txt": b"created later"}}})
    target = build(store, {"new": {"deep": {"file.txt": None}}})
    plan = plan_restore(store.get_tree, current, target, scope="paths",
                        covered=[RelPath(b"new/deep/file.txt")],
                        absent_parents=[RelPath(b"new"), RelPath(b"new/deep")])
    assert plan.removals == (
        Removal(RelPath(b"new/deep/file.txt"), FILE),
        Removal(RelPath(b"new/deep"), TREE), Removal(RelPath(b"new"), TREE),
    )


def test_tracked_tombstone_of_a_directory_removes_it_all(store: ObjectStore) -> None:
    current = build(store, {"out": {"a": b"1", "sub": {"b": b"2"}}})
    target = build(store, {"out": None})
    plan = plan_restore(store.get_tree, current, target, scope="paths", covered=[RelPath(b"out")])
    assert plan.removals == (
        Removal(RelPath(b"out/a"), FILE), Removal(RelPath(b"out/sub/b"), FILE),
        Removal(RelPath(b"out/sub"), TREE), Removal(RelPath(b"out"), TREE),
    )


def test_tombstone_of_a_path_still_absent_plans_nothing(store: ObjectStore) -> None:
    current = build(store, {"x": None})
    target = build(store, {"x": None})
    plan = plan_restore(store.get_tree, current, target, scope="paths", covered=[RelPath(b"x")])
    assert plan.is_empty


# -- only= subset -----------------------------------------------------------------------


def test_only_restricts_the_plan_to_the_given_paths(store: ObjectStore) -> None:
    current = build(store, {"a": {"x": b"X2", "y": b"Y2", "new": b"n"}, "b": b"B2", "c": {"z": b"z"}})
    target = build(store, {"a": {"x": b"X", "y": b"Y"}, "b": b"B", "d": b"D"})
    plan = plan_restore(store.get_tree, current, target, only=[RelPath(b"a/x"), RelPath(b"d")])
    assert paths(plan.writes) == [b"a/x", b"d"]
    assert plan.removals == () and plan.pre_removals == ()


def test_only_a_directory_covers_everything_below_it(store: ObjectStore) -> None:
    current = build(store, {"a": {"x": b"X2", "new": b"n", "sub": {"k": b"k"}}, "b": b"B2"})
    target = build(store, {"a": {"x": b"X", "sub": {}}, "b": b"B"})
    plan = plan_restore(store.get_tree, current, target, only=[RelPath(b"a")])
    assert paths(plan.writes) == [b"a/x"]
    assert paths(plan.removals) == [b"a/new", b"a/sub/k"]


def test_only_skips_an_equal_subtree_inside_the_subset(store: ObjectStore) -> None:
    current = build(store, {"a": {"same": big_dir(10), "x": b"2"}, "b": big_dir(10, "b")})
    target = build(store, {"a": {"same": big_dir(10), "x": b"1"}, "b": big_dir(10, "c")})
    load = Loader(store)
    plan = plan_restore(load, current, target, only=[RelPath(b"a")], count_leaves=lambda oid: 10)
    assert paths(plan.writes) == [b"a/x"]
    assert subtree_id(store, target, "a/same") not in load.calls
    assert subtree_id(store, target, "b") not in load.calls
    assert plan.unchanged == 10


def test_only_does_not_remove_absent_parents_outside_the_subset(store: ObjectStore) -> None:
    current = build(store, {"keep.txt": b"2", "new": {"deep": {"file.txt": None}}})
    target = build(store, {"keep.txt": b"1", "new": {"deep": {"file.txt": None}}})
    absent = [RelPath(b"new"), RelPath(b"new/deep")]
    plan = plan_restore(store.get_tree, current, target, scope="paths",
                        covered=[RelPath(b"keep.txt"), RelPath(b"new/deep/file.txt")],
                        absent_parents=absent, only=[RelPath(b"keep.txt")])
    assert paths(plan.writes) == [b"keep.txt"]
    assert plan.removals == ()
    inside = plan_restore(store.get_tree, current, target, scope="paths",
                          covered=[RelPath(b"keep.txt"), RelPath(b"new/deep/file.txt")],
                          absent_parents=absent, only=[RelPath(b"new/deep/file.txt")])
    assert paths(inside.removals) == [b"new/deep", b"new"]


# -- untrusted manifests ----------------------------------------------------------------


@pytest.mark.parametrize("scope", ["tree", "paths"])
def test_a_target_naming_a_reserved_path_is_rejected_as_corrupt(store: ObjectStore, scope: str) -> None:
    current = build(store, {"a": b"1"})
    target = build(store, {"a": b"1", ".ckpt": {"objects": {"evil": b"x"}}})
    with pytest.raises(InvalidTree) as caught:
        plan_restore(store.get_tree, current, target, scope=scope, covered=[RelPath(b".ckpt")],
                     reserved=[RelPath(b".ckpt")])
    assert caught.value.oid == target
    assert ".ckpt" in str(caught.value)


def test_plan_is_plain_data(store: ObjectStore) -> None:
    current = build(store, {"a": b"1"})
    target = build(store, {"a": b"2"})
    plan = plan_restore(store.get_tree, current, target)
    assert isinstance(plan, RestorePlan)
    assert plan == plan_restore(store.get_tree, current, target)
    assert isinstance(plan.writes[0], FileWrite) and hash(plan)


_leaf_specs = st.one_of(st.sampled_from([b"x", b"y"]), st.tuples(st.sampled_from(["x", "l"]),
                                                                  st.sampled_from([b"x", b"t"])),
                        st.none())
_specs = st.recursive(_leaf_specs, lambda children: st.dictionaries(
    st.sampled_from(["a", "b", "c"]), children, max_size=3), max_leaves=10)
_roots = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), _specs, min_size=1, max_size=4)


@settings(max_examples=200, deadline=None, database=None)
@given(current=_roots, target=_roots)
def test_identical_entries_skipped_in_bulk_plan_exactly_as_one_by_one(
    current: Mapping[str, Spec], target: Mapping[str, Spec],
) -> None:
    """The bulk count of identical entries (a full restore without `keep` or `only`), and the
    plan of a whole tree from nothing (`_Builder.add_all`), give the plan the entry-by-entry
    walk gives; a `keep` path that matches nothing forces the latter. The small name and
    content alphabets make the two trees share most entries."""
    store = ObjectStore(MemoryBackend())
    new = build(store, target)
    for old, reserved in itertools.product((build(store, current), None),
                                           ((), (b"d",), (b"a/b",))):
        try:
            bulk = plan_restore(store.get_tree, old, new, reserved=reserved)
        except InvalidTree as exc:
            with pytest.raises(InvalidTree) as caught:
                plan_restore(store.get_tree, old, new, reserved=reserved, keep=(b"zz/never",))
            assert str(caught.value) == str(exc)
            continue
        assert bulk == plan_restore(store.get_tree, old, new, reserved=reserved,
                                    keep=(b"zz/never",))


def test_the_bulk_comparison_knows_every_field_of_an_entry() -> None:
    """`_Builder._count_identical` compares entries field by field (name, kind, oid, target,
    size, mode), not with their __eq__: a field added to TreeEntry must be added there too."""
    assert [f.name for f in dataclasses.fields(TreeEntry)] == ["name", "kind", "oid", "target",
                                                                "size", "mode"]
